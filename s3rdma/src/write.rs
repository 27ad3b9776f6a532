//! Writing an object: a temporary file in the target's directory, hashed while written, made
//! durable and renamed into place with its metadata (atomic publish).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use s3s::crypto::{Checksum, Crc64Nvme, Md5};

use crate::layout::TEMP_PREFIX;
use crate::locks::KeyLocks;
use crate::meta::{ObjectMeta, BLOCK_SIZE};

/// A file being written: removed on drop unless published.
pub struct TempFile {
    path: PathBuf,
    file: Option<File>,
}

impl TempFile {
    /// A new temporary file in `dir`, which is created if missing.
    pub fn create_in(dir: &Path) -> std::io::Result<Self> {
        let path = dir.join(format!("{TEMP_PREFIX}{:016x}", rand::random::<u64>()));
        // A delete of the directory's last object removes the emptied directory: one that
        // did so between our mkdir and our create is made again.
        let mut attempts = 3;
        loop {
            create_dir_durable(dir)?;
            match File::options().write(true).create_new(true).open(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && attempts > 1 => attempts -= 1,
                file => return Ok(Self { path, file: Some(file?) }),
            }
        }
    }

    /// Flushes the bytes to stable storage and renames the file to `to` (in the same
    /// directory), then makes the rename durable.
    pub fn publish(mut self, to: &Path) -> std::io::Result<()> {
        if let Some(file) = self.file.take() {
            file.sync_all()?;
        }
        if to.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::IsADirectory,
                format!("{} is a directory of other keys", to.display()),
            ));
        }
        std::fs::rename(&self.path, to)?;
        self.path = PathBuf::new();
        sync_parent(to)
    }

    /// Appends `data`.
    pub fn write_all(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.file()?.write_all(data)
    }

    fn file(&mut self) -> std::io::Result<&mut File> {
        self.file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("the temporary file was already published"))
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.path.as_os_str().is_empty() {
            // Best effort: what is left is removed at the next start.
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// Creates `dir` and its missing parents, each made durable in its parent (fsync), so that an
/// object published into a new directory is not lost with the directory in a crash.
fn create_dir_durable(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_durable(parent)?;
    }
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    sync_parent(dir)
}

/// fsyncs the directory holding `path`, so that a rename into it survives a crash.
fn sync_parent(path: &Path) -> std::io::Result<()> {
    match path.parent() {
        Some(dir) => File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// Writes an object's bytes to a temporary file and computes its ETag and checksums.
pub struct ObjectWriter {
    temp: TempFile,
    size: u64,
    limit: u64,
    md5: Md5,
    crc: Crc64Nvme,
    block: Crc64Nvme,
    block_fill: u64,
    blocks: Vec<u64>,
}

/// An object or part larger than its limit.
#[derive(Debug, thiserror::Error)]
#[error("more than the limit of {limit} bytes")]
pub struct TooLarge {
    /// The limit in bytes.
    pub limit: u64,
}

impl ObjectWriter {
    /// A writer of at most `limit` bytes into a new temporary file in `dir`.
    pub fn create_in(dir: &Path, limit: u64) -> std::io::Result<Self> {
        Ok(Self {
            temp: TempFile::create_in(dir)?,
            size: 0,
            limit,
            md5: Md5::new(),
            crc: Crc64Nvme::new(),
            block: Crc64Nvme::new(),
            block_fill: 0,
            blocks: Vec::new(),
        })
    }

    /// Appends `data`; an error of kind `FileTooLarge` wraps [`TooLarge`].
    pub fn write(&mut self, mut data: &[u8]) -> std::io::Result<()> {
        let len = data.len() as u64;
        if self.size.saturating_add(len) > self.limit {
            return Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                TooLarge { limit: self.limit },
            ));
        }
        self.temp.write_all(data)?;
        self.size += len;
        self.md5.update(data);
        self.crc.update(data);
        while !data.is_empty() {
            let take = data.len().min((BLOCK_SIZE - self.block_fill) as usize);
            self.block.update(&data[..take]);
            self.block_fill += take as u64;
            data = &data[take..];
            if self.block_fill == BLOCK_SIZE {
                self.end_block();
            }
        }
        Ok(())
    }

    fn end_block(&mut self) {
        let block = std::mem::replace(&mut self.block, Crc64Nvme::new());
        self.blocks.push(u64::from_be_bytes(block.finalize()));
        self.block_fill = 0;
    }

    /// The bytes written so far.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Ends the writing: the temporary file and the metadata computed over its bytes, with
    /// the ETag of a single-part object.
    pub fn finish(mut self) -> (TempFile, ObjectMeta) {
        if self.block_fill > 0 {
            self.end_block();
        }
        let md5 = self.md5.finalize();
        let meta = ObjectMeta {
            size: self.size,
            etag: hex(&md5),
            md5,
            crc64nvme: base64(&self.crc.finalize()),
            block_size: BLOCK_SIZE,
            block_crc64nvme: self.blocks,
            last_modified_ms: now_ms(),
            content_type: None,
            user: Default::default(),
        };
        (self.temp, meta)
    }
}

/// Publishes `data` (bytes) and `meta` (its metadata) at `data_path` and `meta_path`, under
/// the key's lock so that no reader opens one without the other.
pub fn publish(
    locks: &KeyLocks,
    data: TempFile,
    data_path: &Path,
    meta: &ObjectMeta,
    meta_path: &Path,
) -> std::io::Result<()> {
    let meta_dir =
        meta_path.parent().ok_or_else(|| std::io::Error::other("metadata path has no parent"))?;
    let mut meta_file = TempFile::create_in(meta_dir)?;
    meta_file.write_all(&meta.to_bytes()?)?;
    let _guard = locks.write(data_path);
    data.publish(data_path)?;
    meta_file.publish(meta_path)
}

/// Lower-case hex, as ETags are written.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Standard base64 with padding, as S3 writes checksums.
pub fn base64(bytes: &[u8]) -> String {
    base64_simd::STANDARD.encode_to_string(bytes)
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Removes the temporary files a crash left under `dir`, recursively; returns how many.
pub fn remove_stale_temp_files(dir: &Path) -> std::io::Result<usize> {
    let mut removed = 0;
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            removed += remove_stale_temp_files(&entry.path())?;
        } else if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            std::fs::remove_file(entry.path())?;
            removed += 1;
        }
    }
    Ok(removed)
}
