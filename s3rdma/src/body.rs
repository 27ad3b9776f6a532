//! Receiving a request body into an [`ObjectWriter`]: batched into blocking writes, bounded in
//! size, and checked against the Content-MD5 and `x-amz-checksum-*` the client sent (in headers
//! or in an aws-chunked trailer).

use bytes::BytesMut;
use futures::StreamExt;
use s3s::checksum::ChecksumHasher;
use s3s::dto::{Checksum, StreamingBlob};
use s3s::{s3_error, S3Error, S3Result};

use crate::meta::ObjectMeta;
use crate::meta::BLOCK_SIZE;
use crate::server::BodyTimeout;
use crate::write::{base64, ObjectWriter, TempFile};

/// What the client says the body is: its length and digests, as sent in headers.
pub struct Expected<'a> {
    /// Content-Length (decoded length for aws-chunked bodies).
    pub length: Option<i64>,
    /// Content-MD5, base64.
    pub content_md5: Option<&'a str>,
    /// The `x-amz-checksum-*` headers.
    pub checksums: Checksum,
    /// The request's headers, for `x-amz-trailer`.
    pub headers: &'a http::HeaderMap,
    /// The trailers of an aws-chunked body, once it is read.
    pub trailers: Option<&'a s3s::TrailingHeaders>,
}

const TRAILER_NAMES: [&str; 5] = [
    "x-amz-checksum-crc32",
    "x-amz-checksum-crc32c",
    "x-amz-checksum-crc64nvme",
    "x-amz-checksum-sha1",
    "x-amz-checksum-sha256",
];

/// Writes `body` into a new temporary file in `dir` of at most `limit` bytes and checks it.
pub async fn receive(
    body: Option<StreamingBlob>,
    dir: std::path::PathBuf,
    limit: u64,
    expected: Expected<'_>,
) -> S3Result<(TempFile, ObjectMeta)> {
    if let Some(length) = expected.length {
        if length < 0 || length as u64 > limit {
            return Err(too_large(limit));
        }
    }
    let mut writer = blocking(move || ObjectWriter::create_in(&dir, limit)).await?;
    let mut hasher = hasher_for(&expected);
    let mut batch = BytesMut::new();
    let mut body =
        body.unwrap_or_else(|| StreamingBlob::wrap(futures::stream::empty::<std::io::Result<_>>()));
    while let Some(chunk) = body.next().await {
        let chunk = chunk.map_err(|e| {
            if e.downcast_ref::<BodyTimeout>().is_some() {
                s3_error!(RequestTimeout, "{e}")
            } else if e.downcast_ref::<crate::cuobj::TransferError>().is_some() {
                s3_error!(InternalError, "{e}")
            } else {
                s3_error!(IncompleteBody, "the request body ended early: {e}")
            }
        })?;
        if writer.size() + (batch.len() + chunk.len()) as u64 > limit {
            return Err(too_large(limit));
        }
        hasher.update(&chunk);
        batch.extend_from_slice(&chunk);
        if batch.len() as u64 >= BLOCK_SIZE {
            writer = write_batch(writer, std::mem::take(&mut batch)).await?;
        }
    }
    writer = write_batch(writer, batch).await?;
    let (temp, meta) = writer.finish();
    if let Some(length) = expected.length {
        if length as u64 != meta.size {
            return Err(s3_error!(
                IncompleteBody,
                "the body has {} bytes, Content-Length said {length}",
                meta.size
            ));
        }
    }
    if let Some(md5) = expected.content_md5 {
        if md5 != base64(&meta.md5) {
            return Err(s3_error!(
                BadDigest,
                "the Content-MD5 sent does not match the body received"
            ));
        }
    }
    check_checksums(hasher.finalize(), &expected)?;
    Ok((temp, meta))
}

async fn write_batch(mut writer: ObjectWriter, batch: BytesMut) -> S3Result<ObjectWriter> {
    if batch.is_empty() {
        return Ok(writer);
    }
    blocking(move || writer.write(&batch).map(|()| writer)).await
}

/// Runs file work on tokio's blocking threads.
pub async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> S3Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(S3Error::internal_error)?.map_err(io_error)
}

/// The S3 error of a file system error: conflicts between a key and a directory of keys, the
/// size limit, or an internal error.
pub fn io_error(e: std::io::Error) -> S3Error {
    use std::io::ErrorKind::*;
    match e.kind() {
        FileTooLarge => s3_error!(EntityTooLarge, "{e}"),
        NotADirectory | IsADirectory | AlreadyExists | DirectoryNotEmpty => s3_error!(
            InvalidRequest,
            "this store keeps objects as files, so a key cannot also be a directory of other keys \
             (as `a` and `a/b` would be): {e}"
        ),
        _ => s3_error!(InternalError, "{e}"),
    }
}

pub fn too_large(limit: u64) -> S3Error {
    s3_error!(EntityTooLarge, "this server accepts at most {limit} bytes here")
}

/// Hashes the algorithms the client sent a checksum of, or announced in `x-amz-trailer`.
fn hasher_for(expected: &Expected<'_>) -> ChecksumHasher {
    let trailer = expected.headers.get("x-amz-trailer").and_then(|v| v.to_str().ok()).unwrap_or("");
    let wants =
        |sent: &Option<String>, name: &str| sent.is_some() || trailer.eq_ignore_ascii_case(name);
    let c = &expected.checksums;
    let [crc32, crc32c, crc64nvme, sha1, sha256] = TRAILER_NAMES;
    ChecksumHasher {
        crc32: wants(&c.checksum_crc32, crc32).then(Default::default),
        crc32c: wants(&c.checksum_crc32c, crc32c).then(Default::default),
        crc64nvme: wants(&c.checksum_crc64nvme, crc64nvme).then(Default::default),
        sha1: wants(&c.checksum_sha1, sha1).then(Default::default),
        sha256: wants(&c.checksum_sha256, sha256).then(Default::default),
    }
}

/// Compares what was computed with what the client sent; the error names the algorithm only.
fn check_checksums(computed: Checksum, expected: &Expected<'_>) -> S3Result<()> {
    let trailers = expected.trailers.and_then(|t| t.take());
    let sent = |header: &Option<String>, name: &str| {
        header.clone().or_else(|| trailers.as_ref()?.get(name)?.to_str().ok().map(str::to_owned))
    };
    let c = &expected.checksums;
    let pairs = [
        (sent(&c.checksum_crc32, TRAILER_NAMES[0]), computed.checksum_crc32, TRAILER_NAMES[0]),
        (sent(&c.checksum_crc32c, TRAILER_NAMES[1]), computed.checksum_crc32c, TRAILER_NAMES[1]),
        (
            sent(&c.checksum_crc64nvme, TRAILER_NAMES[2]),
            computed.checksum_crc64nvme,
            TRAILER_NAMES[2],
        ),
        (sent(&c.checksum_sha1, TRAILER_NAMES[3]), computed.checksum_sha1, TRAILER_NAMES[3]),
        (sent(&c.checksum_sha256, TRAILER_NAMES[4]), computed.checksum_sha256, TRAILER_NAMES[4]),
    ];
    for (sent, computed, name) in pairs {
        if let (Some(sent), Some(computed)) = (sent, computed) {
            if sent != computed {
                return Err(s3_error!(
                    BadDigest,
                    "the {name} sent does not match the body received"
                ));
            }
        }
    }
    Ok(())
}
