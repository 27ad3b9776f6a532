//! What the RDMA clients ([`hipobj::client`](crate::hipobj::client),
//! [`cuobj::client`](crate::cuobj::client)) report.

/// What went wrong, and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The server declines to move the bytes over RDMA (`hipobj-rc-v2`: `501` with
    /// `X-Amz-Rdma-Protocol-Status: unsupported`): use plain S3.
    #[error("the server does not serve this over RDMA ({0}); use plain S3 (without --rdma)")]
    Declined(String),
    /// The server refused a request (an S3 error, not a decline).
    #[error("{what} answered {status}: {body}")]
    Refused {
        /// The request or route.
        what: &'static str,
        /// The HTTP status.
        status: u16,
        /// The S3 error (XML) it sent.
        body: String,
    },
    /// An answer that does not follow the protocol, or a transfer that did not complete.
    #[error("{0}")]
    Protocol(String),
    /// A verb failed.
    #[error(transparent)]
    Rdma(#[from] rdma_verbs::Error),
    /// The HTTP request failed.
    #[error("HTTP: {0}")]
    Http(#[from] ureq::Error),
    /// The endpoint (an http:// or https:// URL) or the bucket is not usable.
    #[error("{0}")]
    Endpoint(String),
}
