//! The refusals of the `hipobj-rc-v2` routes, as S3 errors (XML bodies) with the status codes
//! versitygw gives them; a protocol this server does not serve gets `501` with
//! `X-Amz-Rdma-Protocol-Status: unsupported`, the marker clients read as "use plain HTTP".

use http::{HeaderMap, HeaderValue, StatusCode};
use s3s::{S3Error, S3ErrorCode};

use super::token::BadHeader;
use super::PROTOCOL_STATUS;

/// A refused request.
#[derive(Debug)]
pub struct RcError {
    status: StatusCode,
    code: &'static str,
    message: String,
}

impl RcError {
    fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> RcError {
        RcError { status, code, message: message.into() }
    }

    /// 501 with the unsupported marker.
    pub fn unsupported(message: impl Into<String>) -> RcError {
        RcError::new(StatusCode::NOT_IMPLEMENTED, "NotImplemented", message)
    }

    /// 400: a malformed or out-of-range header.
    pub fn bad_request(message: impl Into<String>) -> RcError {
        RcError::new(StatusCode::BAD_REQUEST, "InvalidRdmaRequest", message)
    }

    /// 404: no such session of this principal, or a wrong cookie.
    pub fn no_session() -> RcError {
        RcError::new(
            StatusCode::NOT_FOUND,
            "NoSuchRdmaSession",
            "no such session of this access key with this cookie (it may have expired)",
        )
    }

    /// 409: the session is not in the state the request needs, or the transfer may be retried.
    pub fn conflict(message: impl Into<String>) -> RcError {
        RcError::new(StatusCode::CONFLICT, "RdmaSessionConflict", message)
    }

    /// 429: too many sessions.
    pub fn limit(message: impl Into<String>) -> RcError {
        RcError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "RdmaResourceLimit",
            format!("{}: retry when a session has ended", message.into()),
        )
    }

    /// 502: a verb failed, the deadline passed, or the data did not verify.
    pub fn failed(message: impl Into<String>) -> RcError {
        RcError::new(StatusCode::BAD_GATEWAY, "RdmaTransferFailed", message)
    }
}

impl From<BadHeader> for RcError {
    fn from(e: BadHeader) -> RcError {
        RcError::bad_request(e.to_string())
    }
}

impl From<BadHeader> for S3Error {
    fn from(e: BadHeader) -> S3Error {
        RcError::from(e).into()
    }
}

impl From<RcError> for S3Error {
    fn from(e: RcError) -> S3Error {
        let mut error = S3Error::with_message(S3ErrorCode::Custom(e.code.into()), e.message);
        error.set_status_code(e.status);
        if e.status == StatusCode::NOT_IMPLEMENTED {
            let mut headers = HeaderMap::new();
            headers.insert(PROTOCOL_STATUS, HeaderValue::from_static("unsupported"));
            error.set_headers(headers);
        }
        error
    }
}
