//! Where buckets, objects, their metadata and multipart uploads live under the root directory.
//!
//! ```text
//! ROOT/BUCKET/KEY                      the object's bytes (a key's `/` are directories)
//! ROOT/.s3rdma/meta/BUCKET/KEY         its metadata (JSON, see `meta`), same relative path
//! ROOT/.s3rdma/uploads/ID/             a multipart upload: `upload` and `part-NNNNN` files
//! DIR/.s3rdma-tmp-RANDOM               a file being written, renamed into place when complete
//! ```
//!
//! Bucket names cannot start with `.` (s3s checks the AWS naming rules), so `.s3rdma` is never
//! a bucket. Keys map to paths one segment per directory: a key is refused when a segment is
//! empty, `.` or `..`, longer than 255 bytes, or starts with the temporary files' prefix.

use std::path::{Path, PathBuf};

use s3s::{s3_error, S3Result};

/// The prefix of files being written (removed at start, never listed).
pub const TEMP_PREFIX: &str = ".s3rdma-tmp-";
/// The directory of the server's own state under the root.
const STATE_DIR: &str = ".s3rdma";
/// The longest file name most file systems accept (`NAME_MAX`).
const NAME_MAX: usize = 255;
/// S3's limit on a key's length in bytes.
const KEY_MAX: usize = 1024;

/// The paths of one root directory.
#[derive(Debug, Clone)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// The layout under `root`, which must exist.
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A bucket's directory of objects.
    pub fn bucket(&self, bucket: &str) -> PathBuf {
        self.root.join(bucket)
    }

    /// A bucket's directory of metadata files.
    pub fn bucket_meta(&self, bucket: &str) -> PathBuf {
        self.root.join(STATE_DIR).join("meta").join(bucket)
    }

    /// The directory holding every multipart upload in progress.
    pub fn uploads(&self) -> PathBuf {
        self.root.join(STATE_DIR).join("uploads")
    }

    /// The directory of upload `id`, after checking that `id` is one this server made.
    pub fn upload(&self, id: &str) -> S3Result<PathBuf> {
        if id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(self.uploads().join(id))
        } else {
            Err(s3_error!(NoSuchUpload, "no multipart upload has the id {id:?}"))
        }
    }

    /// The object file and the metadata file of `key` in `bucket`, after checking the key.
    pub fn object(&self, bucket: &str, key: &str) -> S3Result<(PathBuf, PathBuf)> {
        check_key(key)?;
        Ok((self.bucket(bucket).join(key), self.bucket_meta(bucket).join(key)))
    }
}

/// Refuses a key that does not map to a path under its bucket (see the module's docs).
fn check_key(key: &str) -> S3Result<()> {
    if key.len() > KEY_MAX {
        return Err(s3_error!(KeyTooLongError, "a key is at most {KEY_MAX} bytes"));
    }
    if key.contains('\0') {
        return Err(s3_error!(InvalidArgument, "a key cannot contain a NUL character"));
    }
    for segment in key.split('/') {
        if segment.is_empty() || segment == "." || segment == ".." {
            return Err(s3_error!(
                InvalidArgument,
                "key {key:?}: this store maps keys to file paths, so a key cannot start or end with `/`, \
                 contain `//`, or have a `.` or `..` segment"
            ));
        }
        if segment.len() > NAME_MAX {
            return Err(s3_error!(
                KeyTooLongError,
                "key {key:?}: each `/`-separated segment is a file name, at most {NAME_MAX} bytes"
            ));
        }
        if segment.starts_with(TEMP_PREFIX) {
            return Err(s3_error!(
                InvalidArgument,
                "key {key:?}: segments starting with {TEMP_PREFIX:?} are reserved"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_to_paths_under_their_bucket_or_are_refused() {
        let layout = Layout::new("/r".into());
        let (data, meta) = layout.object("b", "a/b c/d.txt").unwrap();
        assert_eq!(data, Path::new("/r/b/a/b c/d.txt"));
        assert_eq!(meta, Path::new("/r/.s3rdma/meta/b/a/b c/d.txt"));
        let long = "x".repeat(256);
        for bad in [
            "",
            "/a",
            "a/",
            "a//b",
            "../a",
            "a/./b",
            "a\0b",
            &long,
            ".s3rdma-tmp-x",
            "a/.s3rdma-tmp-1",
        ] {
            assert!(layout.object("b", bad).is_err(), "{bad:?} accepted");
        }
        assert!(layout.upload("../../etc").is_err());
        assert!(layout.upload(&"0f".repeat(16)).is_ok());
    }
}
