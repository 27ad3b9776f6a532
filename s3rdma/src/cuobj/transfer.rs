//! The RDMA path of GetObject, PutObject and UploadPart: what the store's operations call
//! when a request carries `x-amz-rdma-token`.

use bytes::Bytes;
use futures::{Stream, StreamExt};
use http::{HeaderMap, Uri};
use s3s::dto::StreamingBlob;
use s3s::{s3_error, S3Error, S3Result};

use super::initiator::Initiators;
use super::request::{put_declined, requested};
use super::token::Descriptor;

/// How a GET's bytes leave.
pub enum GetPath {
    /// In the body (no token, or declined: then `headers` carry `x-amz-rdma-reply: 501`).
    Body(HeaderMap),
    /// RDMA WRITE into this window.
    Rdma(Descriptor),
}

/// The path of a GET whose response is `len` bytes.
///
/// # Errors
///
/// As [`requested`]; `400 InvalidArgument` when the response is larger than the client's
/// window.
pub fn get_path(
    initiators: Option<&Initiators>,
    headers: &HeaderMap,
    uri: &Uri,
    len: u64,
) -> S3Result<GetPath> {
    let Some(peer) = requested(headers, uri)? else { return Ok(GetPath::Body(HeaderMap::new())) };
    if len > peer.size {
        return Err(s3_error!(
            InvalidArgument,
            "the response is {len} bytes, the window of x-amz-rdma-token {}: register a larger \
             one, or ask for a Range",
            peer.size
        ));
    }
    match initiators {
        Some(pool) if len <= pool.config().max_transfer => Ok(GetPath::Rdma(peer)),
        _ => Ok(GetPath::Body(super::request::declined())),
    }
}

/// Writes `body` into `peer`'s window from its base; the bytes written once all completed.
///
/// # Errors
///
/// The error of `body` (`error` makes the S3 error of an I/O one: a block that fails its
/// checksum), or `502`-like `InternalError` when a write fails or passes its deadline.
pub async fn send(
    pool: &Initiators,
    peer: Descriptor,
    body: impl Stream<Item = std::io::Result<Bytes>>,
    error: impl Fn(std::io::Error) -> S3Error,
) -> S3Result<u64> {
    let (tx, rx) = tokio::sync::mpsc::channel(2);
    let feed = async move {
        let mut body = std::pin::pin!(body);
        while let Some(bytes) = body.next().await {
            if tx.send(bytes?).await.is_err() {
                break; // the writes failed: their error is the answer
            }
        }
        Ok(())
    };
    let (fed, written) = tokio::join!(feed, pool.write(peer, rx));
    fed.map_err(error)?;
    written.map_err(|e| s3_error!(InternalError, "{e}"))
}

/// An upload's body: the request's, or the client's window read over RDMA.
pub struct UploadBody {
    /// The bytes.
    pub body: Option<StreamingBlob>,
    /// Their number, when known (Content-Length, or the window's size).
    pub length: Option<i64>,
    /// The window's size when the bytes come over RDMA.
    pub rdma: Option<u64>,
}

/// The body of a PutObject or UploadPart: over RDMA when the request carries a token.
///
/// # Errors
///
/// As [`requested`]; `400 InvalidArgument` for a window of 0 bytes (an empty object is PUT
/// over HTTP) or a request that sends a body too; `501 NotImplemented` with
/// `x-amz-rdma-reply: 501` (nothing stored) without DC initiators or above their largest
/// transfer.
pub async fn upload_body(
    initiators: Option<&Initiators>,
    headers: &HeaderMap,
    uri: &Uri,
    body: Option<StreamingBlob>,
    content_length: Option<i64>,
) -> S3Result<UploadBody> {
    let Some(peer) = requested(headers, uri)? else {
        return Ok(UploadBody { body, length: content_length, rdma: None });
    };
    if peer.size == 0 {
        return Err(s3_error!(
            InvalidArgument,
            "x-amz-rdma-token describes 0 bytes: PUT an empty object over HTTP"
        ));
    }
    if content_length.is_some_and(|n| n > 0) {
        return Err(s3_error!(
            InvalidArgument,
            "a request with x-amz-rdma-token has an empty body (Content-Length: 0)"
        ));
    }
    let pool = match initiators {
        None => return Err(put_declined("this server has no DC-capable RDMA device")),
        Some(pool) if peer.size > pool.config().max_transfer => {
            return Err(put_declined(&format!(
                "{} bytes is more than this server moves over RDMA at once ({})",
                peer.size,
                pool.config().max_transfer
            )))
        }
        Some(pool) => pool,
    };
    let chunks = pool.read(peer, peer.size).await.map_err(|e| s3_error!(InternalError, "{e}"))?;
    let stream =
        futures::stream::unfold(
            chunks,
            |mut rx| async move { rx.recv().await.map(|item| (item, rx)) },
        );
    Ok(UploadBody {
        body: Some(StreamingBlob::wrap(stream)),
        // At most the largest transfer (checked above), which fits.
        length: i64::try_from(peer.size).ok(),
        rdma: Some(peer.size),
    })
}
