//! An object's metadata file: its size, ETag, checksums and the headers it was stored with.
//!
//! JSON, at the object's path under `.s3rdma/meta/BUCKET/` (see `layout`). The data is cut into
//! blocks of `block_size` bytes (the last may be shorter) and each block's CRC64NVME is stored,
//! so that a GET of any range verifies exactly the blocks it reads before sending them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The size of the blocks whose checksums are stored: 1 MiB.
pub const BLOCK_SIZE: u64 = 1 << 20;

/// What is stored beside an object's bytes.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ObjectMeta {
    /// The object's size in bytes.
    pub size: u64,
    /// The ETag without quotes: the MD5 in hex, or for a multipart upload the MD5 of the parts'
    /// MD5s followed by `-` and the number of parts, as S3 computes it.
    pub etag: String,
    /// The MD5 of the bytes (of a multipart upload's part: the part's).
    pub md5: [u8; 16],
    /// The CRC64NVME of the whole object, base64 of its 8 big-endian bytes (S3's encoding).
    pub crc64nvme: String,
    /// The block size the block checksums cover.
    pub block_size: u64,
    /// The CRC64NVME of each block, in order.
    pub block_crc64nvme: Vec<u64>,
    /// The time of publication, in milliseconds since the Unix epoch.
    pub last_modified_ms: u64,
    /// The Content-Type it was stored with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    /// The user metadata (`x-amz-meta-*` headers, names without the prefix).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub user: BTreeMap<String, String>,
}

impl ObjectMeta {
    /// Reads the metadata file at `path`.
    pub fn read(path: &Path) -> std::io::Result<Self> {
        let bytes = std::fs::read(path)?;
        serde_json::from_slice(&bytes).map_err(|e| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("{}: {e}", path.display()))
        })
    }

    /// The metadata as the bytes of its file.
    pub fn to_bytes(&self) -> std::io::Result<Vec<u8>> {
        Ok(serde_json::to_vec(self)?)
    }
}
