//! Reading an object: its bytes and metadata opened together, and a stream of a byte range
//! whose blocks are verified against their stored CRC64NVME before any byte is sent.

use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;
use s3s::crypto::{Checksum, Crc64Nvme};

use crate::locks::KeyLocks;
use crate::meta::ObjectMeta;
use crate::write::ObjectWriter;

/// An object opened for reading.
#[derive(Clone)]
pub struct OpenObject {
    file: Arc<File>,
    /// Its metadata.
    pub meta: Arc<ObjectMeta>,
}

/// Why a stored object cannot be served.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// No such object.
    #[error("no such object")]
    NotFound,
    /// The bytes on disk do not match what was stored (the checksums are not in the message).
    #[error("{0}")]
    Corrupt(String),
    /// The file system failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

impl From<ReadError> for std::io::Error {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Io(e) => e,
            ReadError::NotFound => std::io::Error::new(std::io::ErrorKind::NotFound, e),
            ReadError::Corrupt(_) => std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        }
    }
}

impl OpenObject {
    /// Opens the object at `data_path` with its metadata at `meta_path` (blocking).
    pub fn open(locks: &KeyLocks, data_path: &Path, meta_path: &Path) -> Result<Self, ReadError> {
        let not_found = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::NotFound
            | std::io::ErrorKind::NotADirectory
            | std::io::ErrorKind::IsADirectory => ReadError::NotFound,
            _ => ReadError::Io(e),
        };
        let (file, meta) = {
            let _guard = locks.read(data_path);
            let file = File::open(data_path).map_err(not_found)?;
            (file, ObjectMeta::read(meta_path).map_err(not_found)?)
        };
        let stat = file.metadata()?;
        if !stat.is_file() {
            return Err(ReadError::NotFound);
        }
        let len = stat.len();
        if len != meta.size {
            return Err(ReadError::Corrupt(format!(
                "{}: {len} bytes on disk, {} stored in its metadata",
                data_path.display(),
                meta.size
            )));
        }
        let blocks = meta.size.div_ceil(meta.block_size.max(1));
        if meta.block_size == 0 || meta.block_crc64nvme.len() as u64 != blocks {
            return Err(ReadError::Corrupt(format!(
                "{}: its block checksums do not cover it",
                meta_path.display()
            )));
        }
        Ok(Self { file: Arc::new(file), meta: Arc::new(meta) })
    }

    /// The bytes of `range` (within the size), read one block at a time; each block is
    /// verified before any of its bytes is yielded, and a mismatch ends the stream with an
    /// `InvalidData` error. `name` names the object in errors.
    pub fn stream(
        self,
        range: Range<u64>,
        name: String,
    ) -> impl Stream<Item = std::io::Result<Bytes>> + Send + Sync {
        let state = (self.first_block(&range), self, range, Arc::new(name));
        futures::stream::try_unfold(state, |(block, object, range, name)| async move {
            let chunk = {
                let (object, range, name) = (object.clone(), range.clone(), name.clone());
                tokio::task::spawn_blocking(move || object.chunk(block, &range, &name))
                    .await
                    .map_err(std::io::Error::other)?
                    .map_err(std::io::Error::from)?
            };
            Ok(chunk.map(|chunk| (chunk, (block + 1, object, range, name))))
        })
    }

    /// The blocking twin of [`OpenObject::stream`]: the verified chunks of `range`, one block
    /// each (the first and last cut to the range), read as the iterator is advanced.
    pub fn chunks<'a>(
        &'a self,
        range: Range<u64>,
        name: &'a str,
    ) -> impl Iterator<Item = Result<Bytes, ReadError>> + 'a {
        let mut block = self.first_block(&range);
        std::iter::from_fn(move || {
            let chunk = self.chunk(block, &range, name).transpose();
            block += 1;
            chunk
        })
    }

    fn first_block(&self, range: &Range<u64>) -> u64 {
        range.start / self.meta.block_size
    }

    /// The bytes of block `block` within `range`, verified (blocking); `None` past its end.
    fn chunk(
        &self,
        block: u64,
        range: &Range<u64>,
        name: &str,
    ) -> Result<Option<Bytes>, ReadError> {
        let start = block * self.meta.block_size;
        if start >= range.end {
            return Ok(None);
        }
        let chunk = read_block(&self.file, &self.meta, block, name)?;
        let from = range.start.max(start) - start;
        let to = range.end.min(start + chunk.len() as u64) - start;
        Ok(Some(chunk.slice(from as usize..to as usize)))
    }

    /// Appends every byte to `writer`, each block verified first (blocking).
    pub fn copy_to(&self, writer: &mut ObjectWriter, name: &str) -> Result<(), ReadError> {
        for block in 0..self.meta.block_crc64nvme.len() as u64 {
            writer.write(&read_block(&self.file, &self.meta, block, name)?)?;
        }
        Ok(())
    }
}

/// Reads block `index` of `file` and checks it against its stored CRC64NVME.
fn read_block(file: &File, meta: &ObjectMeta, index: u64, name: &str) -> Result<Bytes, ReadError> {
    let start = index * meta.block_size;
    let len = meta.block_size.min(meta.size - start) as usize;
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, start)?;
    let crc = u64::from_be_bytes(Crc64Nvme::checksum(&buf));
    if Some(&crc) != meta.block_crc64nvme.get(index as usize) {
        return Err(ReadError::Corrupt(format!(
            "{name}: bytes {start}..{} on disk fail their stored CRC64NVME",
            start + len as u64
        )));
    }
    Ok(Bytes::from(buf))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `data` stored as an object in `dir`: its paths and the locks.
    pub(crate) fn stored(
        dir: &Path,
        data: &[u8],
    ) -> (std::path::PathBuf, std::path::PathBuf, KeyLocks) {
        let (data_path, meta_path) = (dir.join("object"), dir.join("meta"));
        let mut writer = ObjectWriter::create_in(dir, u64::MAX).unwrap();
        writer.write(data).unwrap();
        let (temp, meta) = writer.finish();
        let locks = KeyLocks::default();
        crate::write::publish(&locks, temp, &data_path, &meta, &meta_path).unwrap();
        (data_path, meta_path, locks)
    }

    #[test]
    fn the_chunks_of_a_range_are_its_bytes_a_block_at_most_each() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..(7u32 << 19) + 5).map(|i| (i * 13 + i / 777) as u8).collect();
        let (data_path, meta_path, locks) = stored(dir.path(), &data);
        let object = OpenObject::open(&locks, &data_path, &meta_path).unwrap();
        let len = data.len() as u64;
        for range in [0..len, 1..len - 1, (1 << 20) - 1..(1 << 20) + 1, 5..6, 3 << 20..len] {
            let chunks: Vec<Bytes> =
                object.chunks(range.clone(), "o").map(Result::unwrap).collect();
            assert!(chunks.iter().all(|c| !c.is_empty() && c.len() <= 1 << 20), "{range:?}");
            let (start, end) = (range.start as usize, range.end as usize);
            assert!(chunks.concat() == data[start..end], "{range:?}");
        }
    }

    #[test]
    fn a_bit_flipped_anywhere_in_a_block_fails_that_block_only() {
        let dir = tempfile::tempdir().unwrap();
        let data: Vec<u8> = (0..3u32 << 20).map(|i| (i * 7 + i / 1000) as u8).collect();
        let (data_path, meta_path, locks) = stored(dir.path(), &data);
        for offset in [0, 1, 1000, (1 << 20) - 1] {
            let mut bytes = data.clone();
            bytes[(2 << 20) + offset] ^= 0x10;
            std::fs::write(&data_path, &bytes).unwrap();
            let object = OpenObject::open(&locks, &data_path, &meta_path).unwrap();
            for block in 0..2 {
                assert!(read_block(&object.file, &object.meta, block, "o").is_ok());
            }
            let err = read_block(&object.file, &object.meta, 2, "o").unwrap_err();
            assert!(matches!(err, ReadError::Corrupt(_)), "offset {offset}: {err}");
        }
    }
}
