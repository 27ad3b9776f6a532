//! What an S3 request asks of the RDMA path, and the headers of its answers.

use http::{HeaderMap, HeaderValue, Uri};
use s3s::{s3_error, S3Error, S3Result};

use super::token::{Descriptor, TokenError};
use super::{H_BYTES, H_REPLY, H_TOKEN};

/// The descriptor of a request that carries `x-amz-rdma-token`, `None` for a plain one.
///
/// # Errors
///
/// `403 AccessDenied` when the token is not among the signed headers (anyone could then
/// point the server at other memory); `501 NotImplemented` for a `hipobj-rc-v2` token,
/// without `x-amz-rdma-reply`, so that a client falls back to plain S3 (as versitygw
/// answers); `400 InvalidArgument` for anything else that is not a descriptor.
pub fn requested(headers: &HeaderMap, uri: &Uri) -> S3Result<Option<Descriptor>> {
    let Some(value) = headers.get(H_TOKEN) else { return Ok(None) };
    if !signed(headers, uri) {
        return Err(s3_error!(
            AccessDenied,
            "{H_TOKEN} must be one of the request's SignedHeaders"
        ));
    }
    let value = value.to_str().map_err(|_| s3_error!(InvalidArgument, "{H_TOKEN} is not ASCII"))?;
    match Descriptor::parse(value) {
        Ok(descriptor) => Ok(Some(descriptor)),
        Err(e @ TokenError::RcToken) => Err(s3_error!(NotImplemented, "{e}")),
        Err(e @ TokenError::Malformed(_)) => Err(s3_error!(InvalidArgument, "{e}")),
    }
}

/// Whether the token header is in the SigV4 SignedHeaders (of the Authorization header, or
/// of a presigned URL's `X-Amz-SignedHeaders`); s3s has checked the signature itself.
fn signed(headers: &HeaderMap, uri: &Uri) -> bool {
    let from_header = headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split("SignedHeaders=").nth(1))
        .map(|rest| rest.split(',').next().unwrap_or("").to_owned());
    let from_query = || {
        url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
            .find(|(k, _)| k == "X-Amz-SignedHeaders")
            .map(|(_, v)| v.into_owned())
    };
    from_header
        .or_else(from_query)
        .is_some_and(|list| list.split(';').any(|h| h.trim().eq_ignore_ascii_case(H_TOKEN)))
}

/// The headers of an RDMA success: `x-amz-rdma-reply: status` and the bytes moved.
pub fn success(status: u16, bytes: u64) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(H_REPLY, HeaderValue::from(status));
    headers.insert(H_BYTES, HeaderValue::from(bytes));
    headers
}

/// `x-amz-rdma-reply: 501`: the server declines, the client moves the data over HTTP.
pub fn declined() -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert(H_REPLY, HeaderValue::from_static("501"));
    headers
}

/// A PUT or UploadPart declined: `501 NotImplemented` with `x-amz-rdma-reply: 501`, nothing
/// stored.
pub fn put_declined(why: &str) -> S3Error {
    let mut e = s3_error!(NotImplemented, "not over RDMA: {why}; send the data in the body");
    e.set_headers(declined());
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str =
        "0000000000001000:00001000:00000abc:0000:000042:1:00000000000000000000ffffc0a80a05";

    fn request(
        token: &str,
        authorization: Option<&str>,
        uri: &str,
    ) -> S3Result<Option<Descriptor>> {
        let mut headers = HeaderMap::new();
        headers.insert(H_TOKEN, token.parse().unwrap());
        if let Some(a) = authorization {
            headers.insert(http::header::AUTHORIZATION, a.parse().unwrap());
        }
        requested(&headers, &uri.parse().unwrap())
    }

    #[test]
    fn the_token_must_be_signed_in_the_header_or_the_query() {
        let auth = |list: &str| {
            format!("AWS4-HMAC-SHA256 Credential=k/x, SignedHeaders={list}, Signature=00")
        };
        let ok = request(TOKEN, Some(&auth("host;x-amz-date;x-amz-rdma-token")), "/b/k");
        assert_eq!(ok.unwrap().unwrap().dctn, 0x42);
        let presigned = "/b/k?X-Amz-SignedHeaders=host%3Bx-amz-rdma-token&X-Amz-Signature=0";
        assert!(request(TOKEN, None, presigned).unwrap().is_some());
        for (authorization, uri) in [
            (Some(auth("host;x-amz-date")), "/b/k"),
            (None, "/b/k?X-Amz-SignedHeaders=host"),
            (None, "/b/k"),
        ] {
            let e = request(TOKEN, authorization.as_deref(), uri).unwrap_err();
            assert_eq!(e.code(), &s3s::S3ErrorCode::AccessDenied);
        }
    }

    #[test]
    fn an_rc_token_is_501_and_a_malformed_one_400_neither_with_a_reply() {
        let uri = "/b/k?X-Amz-SignedHeaders=host%3Bx-amz-rdma-token";
        let rc = request(&"0".repeat(88), None, uri).unwrap_err();
        assert_eq!(rc.code(), &s3s::S3ErrorCode::NotImplemented);
        let bad = request("00:11", None, uri).unwrap_err();
        assert_eq!(bad.code(), &s3s::S3ErrorCode::InvalidArgument);
        for e in [rc, bad] {
            assert!(e.headers().is_none_or(|h| !h.contains_key(H_REPLY)));
        }
    }
}
