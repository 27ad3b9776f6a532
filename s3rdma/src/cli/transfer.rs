//! `s3rdma get` and `s3rdma put`: one object between a file and the server, over plain S3 or
//! `hipobj-rc-v2` (`--rdma`; plain S3 when the server declines it).

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use s3rdma::hipobj::client::ClientError;
use s3rdma::hipobj::{Device, MAX_TRANSFER};

use super::{content_length, object, progress, ByteRange, Connection, Error, S3};
use crate::Rdma;

/// The most one RDMA GET moves: a larger object or range comes in pieces of this size (each
/// held whole in the client's registered buffer; the server streams it through a small ring).
const RDMA_PIECE: u64 = 256 << 20;

/// What `get` and `put` share: the server, the transport, the progress bar.
#[derive(clap::Args)]
struct Options {
    #[command(flatten)]
    connection: Connection,
    /// Moves the object's bytes over RDMA (hipobj-rc-v2) instead of in the HTTP body.
    #[arg(long)]
    rdma: bool,
    #[command(flatten)]
    device: Rdma,
    /// Draws no progress bar.
    #[arg(long, short)]
    quiet: bool,
}

/// `s3rdma get BUCKET/KEY FILE`.
#[derive(clap::Args)]
pub struct Get {
    #[command(flatten)]
    options: Options,
    /// Bytes FIRST to LAST of the object only (both included; FIRST- to its end).
    #[arg(long)]
    range: Option<ByteRange>,
    /// The object.
    object: String,
    /// The file to write.
    file: PathBuf,
}

/// `s3rdma put FILE BUCKET/KEY`.
#[derive(clap::Args)]
pub struct Put {
    #[command(flatten)]
    options: Options,
    /// The file to upload.
    file: PathBuf,
    /// The object.
    object: String,
}

/// Whether `e` is the server declining `hipobj-rc-v2`, so plain S3 should be used.
pub fn declined(e: &Error) -> bool {
    matches!(e.downcast_ref::<ClientError>(), Some(ClientError::Declined(_)))
}

/// The RDMA device `device` names.
pub fn open(device: &Rdma) -> Result<Device, Error> {
    Ok(Device::open(device.rdma_device.as_deref(), device.rdma_gid_index)?)
}

/// Downloads an object (or a range of it) into a file.
pub fn get(args: Get) -> Result<(), Error> {
    let (bucket, key) = object(&args.object)?;
    let s3 = S3::connect(&args.options.connection)?;
    if args.options.rdma {
        match get_rdma(&s3, &args, bucket, key) {
            Err(e) if declined(&e) => eprintln!("s3rdma: {e}: plain S3 instead"),
            done => return done,
        }
    }
    let mut response = s3.get_object(bucket, key, args.range)?;
    let len = content_length(&response).unwrap_or(0);
    let bar = progress::bar(len, args.options.quiet);
    let copied = write_new(&args.file, |file| {
        let mut body = response.body_mut().as_reader();
        Ok(std::io::copy(&mut body, &mut bar.wrap_write(file))
            .map_err(|e| format!("GetObject: {e}"))?)
    })?;
    bar.finish_and_clear();
    println!("s3rdma: got {copied} bytes");
    Ok(())
}

fn get_rdma(s3: &S3, args: &Get, bucket: &str, key: &str) -> Result<(), Error> {
    let size = s3.object_size(bucket, key)?;
    let (offset, len) = match args.range {
        Some(range) => range.within(size)?,
        None => (0, size),
    };
    if len == 0 {
        // Nothing to move: RDMA transfers are of 1 byte or more.
        write_new(&args.file, |_| Ok(()))?;
        println!("s3rdma: got 0 bytes (an empty object)");
        return Ok(());
    }
    let device = open(&args.options.device)?;
    let bar = progress::bar(len, args.options.quiet);
    let etag = write_new(&args.file, |file| {
        let mut etag = None;
        let mut at = offset;
        while at < offset + len {
            let piece = (offset + len - at).min(RDMA_PIECE).min(MAX_TRANSFER);
            let (data, done) = s3.client().get(&device, bucket, key, at, piece as usize)?;
            // The pieces must come from one version of the object.
            if etag.is_some() && etag != done.etag {
                return Err(
                    format!("{bucket}/{key} changed during the download: run it again").into()
                );
            }
            etag = done.etag;
            file.write_all(&data)
                .map_err(|e| format!("cannot write {}: {e}", args.file.display()))?;
            bar.inc(piece);
            at += piece;
        }
        Ok(etag)
    })?;
    bar.finish_and_clear();
    println!("s3rdma: got {len} bytes over RDMA, ETag {}", etag.unwrap_or_default());
    Ok(())
}

/// Uploads a file as an object.
pub fn put(args: Put) -> Result<(), Error> {
    let (bucket, key) = object(&args.object)?;
    let s3 = S3::connect(&args.options.connection)?;
    let file =
        File::open(&args.file).map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
    let len = file.metadata()?.len();
    if args.options.rdma {
        match put_rdma(&s3, &args, bucket, key, len) {
            Err(e) if declined(&e) => eprintln!("s3rdma: {e}: plain S3 instead"),
            done => return done,
        }
    }
    let bar = progress::bar(len, args.options.quiet);
    let etag =
        s3.put_object(bucket, key, len, ureq::SendBody::from_owned_reader(bar.wrap_read(file)))?;
    bar.finish_and_clear();
    println!("s3rdma: put {len} bytes, ETag {etag}");
    Ok(())
}

fn put_rdma(s3: &S3, args: &Put, bucket: &str, key: &str, len: u64) -> Result<(), Error> {
    if len > MAX_TRANSFER {
        return Err(format!(
            "{} is {len} bytes; one RDMA PUT moves at most {MAX_TRANSFER}: put it without --rdma",
            args.file.display()
        )
        .into());
    }
    let data = std::fs::read(&args.file)
        .map_err(|e| format!("cannot read {}: {e}", args.file.display()))?;
    let done = s3.client().put(&open(&args.options.device)?, bucket, key, &data)?;
    println!(
        "s3rdma: put {} bytes over RDMA, ETag {}, {}",
        done.bytes,
        done.etag.unwrap_or_default(),
        done.checksum.unwrap_or_default()
    );
    Ok(())
}

/// Creates (or truncates) `path` and fills it with `write`; when that fails, removes it, so
/// that a failed download leaves no partial file.
fn write_new<T>(
    path: &Path,
    write: impl FnOnce(&mut File) -> Result<T, Error>,
) -> Result<T, Error> {
    let mut file =
        File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let written = write(&mut file);
    if written.is_err() {
        drop(file);
        let _ = std::fs::remove_file(path);
    }
    written
}
