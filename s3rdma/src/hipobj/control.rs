//! The control plane: `POST /.hipobj-rc/{prepare,ready,cancel}` as an s3s custom route, so
//! that s3s checks their SigV4 signatures as it does every request's.

use std::sync::{Arc, Weak};
use std::time::Duration;

use http::{HeaderMap, HeaderValue, Method, StatusCode, Uri};
use rdma_verbs::{Gid, Psn, Qpn, RKey, RemoteAddr};
use s3s::dto::{PutObjectInput, StreamingBlob, UploadPartInput};
use s3s::route::S3Route;
use s3s::{s3_error, Body, S3Request, S3Response, S3Result, S3};

use super::data_path::{self, Failure, Op, Outcome, Ready, Source, Spec};
use super::device::Device;
use super::error::RcError;
use super::session::{Part, SessionLimits, Sessions, Target};
use super::token::{self, Token, TRANSPORT_RC};
use super::*;
use crate::Store;

/// How often sessions past their deadline are removed, besides on every request.
const REAP_EVERY: Duration = Duration::from_secs(5);
/// The longest target (`/bucket/key`) and ETag accepted or sent.
const MAX_TARGET: usize = 2047;

/// The `hipobj-rc-v2` routes: give it to [`s3s::service::S3ServiceBuilder::set_route`].
#[derive(Clone)]
pub struct RcRoute {
    shared: Arc<Shared>,
}

struct Shared {
    store: Store,
    device: Option<&'static Device>,
    sessions: Sessions,
}

impl RcRoute {
    /// The routes over `store`, moving data through `device` (none: they answer `501` with
    /// the unsupported marker), which then lives as long as the process (sessions' threads
    /// borrow it). Starts the thread that reaps expired sessions, which ends with the last
    /// clone of the route.
    pub fn new(store: Store, device: Option<Device>, limits: SessionLimits) -> RcRoute {
        let device = device.map(|d| &*Box::leak(Box::new(d)));
        let shared = Arc::new(Shared { store, device, sessions: Sessions::new(limits) });
        let weak: Weak<Shared> = Arc::downgrade(&shared);
        std::thread::spawn(move || loop {
            std::thread::sleep(REAP_EVERY);
            match weak.upgrade() {
                Some(shared) => shared.sessions.reap(),
                None => return,
            }
        });
        RcRoute { shared }
    }
}

/// Whether `path` (percent-encoded, as it arrived) is under [`ROUTE_PREFIX`].
fn is_route(path: &str) -> bool {
    let path = urlencoding::decode(path).unwrap_or_default();
    path == ROUTE_PREFIX
        || path.strip_prefix(ROUTE_PREFIX).is_some_and(|rest| rest.starts_with('/'))
}

/// Bucket names as AWS has them, and the routes' prefix, which s3s parses as a bucket
/// name (the routes answer every request under it, so no bucket has that name).
pub struct RouteNames;

impl s3s::validation::NameValidation for RouteNames {
    fn validate_bucket_name(&self, name: &str) -> bool {
        name == &ROUTE_PREFIX[1..]
            || s3s::validation::AwsNameValidation::new().validate_bucket_name(name)
    }
}

#[async_trait::async_trait]
impl S3Route for RcRoute {
    fn is_match(
        &self,
        _method: &Method,
        uri: &Uri,
        _headers: &HeaderMap,
        _extensions: &mut http::Extensions,
    ) -> bool {
        is_route(uri.path())
    }

    async fn call(&self, req: S3Request<Body>) -> S3Result<S3Response<Body>> {
        let Some(principal) = req.credentials.as_ref().map(|c| c.access_key.clone()) else {
            return Err(s3_error!(AccessDenied, "the request must be signed"));
        };
        if let Some(name) = unsigned_rdma_header(&req) {
            return Err(s3_error!(
                AccessDenied,
                "{name} is not among the signed headers: sign every x-amz-rdma-* header"
            ));
        }
        if req.method != Method::POST {
            return Err(s3_error!(MethodNotAllowed, "the {ROUTE_PREFIX} routes take POST"));
        }
        let Some(device) = self.shared.device else {
            return Err(RcError::unsupported("this server has no RDMA device").into());
        };
        if header(&req, H_PROTOCOL)? != Some(PROTOCOL) {
            return Err(RcError::unsupported(format!(
                "this server speaks {H_PROTOCOL}: {PROTOCOL}"
            ))
            .into());
        }
        let path = urlencoding::decode(req.uri.path()).unwrap_or_default().into_owned();
        let rest = path.strip_prefix(ROUTE_PREFIX).unwrap_or_default();
        let shared = &self.shared;
        let headers = match rest {
            "/prepare" => shared.prepare(device, &req, &principal).await?,
            "/ready" => shared.ready(&req, &principal).await?,
            "/cancel" => shared.cancel(&req, &principal)?,
            _ => {
                return Err(s3_error!(
                    NoSuchKey,
                    "the routes are {ROUTE_PREFIX}/prepare, /ready and /cancel"
                ))
            }
        };
        let status = if rest == "/cancel" { StatusCode::NO_CONTENT } else { StatusCode::OK };
        let mut response = S3Response::with_status(Body::empty(), status);
        response.headers = headers;
        response.headers.insert(H_PROTOCOL, HeaderValue::from_static(PROTOCOL));
        Ok(response)
    }
}

/// The first `x-amz-rdma-*` header the signature does not cover (s3s checks the signed
/// ones): such a header could have been added on the way, so it is refused, as hipObject's
/// reference server and Ceph do.
fn unsigned_rdma_header(req: &S3Request<Body>) -> Option<String> {
    let from_header = req
        .headers
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(',').find_map(|part| part.trim().strip_prefix("SignedHeaders=")))
        .map(str::to_owned);
    let from_query = || {
        req.uri.query()?.split('&').find_map(|pair| {
            let value = pair.strip_prefix("X-Amz-SignedHeaders=")?;
            urlencoding::decode(value).ok().map(|v| v.into_owned())
        })
    };
    let signed = from_header.or_else(from_query).unwrap_or_default();
    req.headers
        .keys()
        .map(http::HeaderName::as_str)
        .find(|name| {
            name.starts_with("x-amz-rdma-") && !signed.split(';').any(|s| s.trim() == *name)
        })
        .map(str::to_owned)
}

/// The value of `name`, if sent.
fn header<'a>(req: &'a S3Request<Body>, name: &'static str) -> Result<Option<&'a str>, RcError> {
    req.headers
        .get(name)
        .map(|v| {
            v.to_str()
                .map(str::trim)
                .map_err(|_| RcError::bad_request(format!("{name} is not text")))
        })
        .transpose()
}

fn required<'a>(req: &'a S3Request<Body>, name: &'static str) -> Result<&'a str, RcError> {
    header(req, name)?.ok_or_else(|| RcError::bad_request(format!("{name} is missing")))
}

/// A request to the store on behalf of `req`'s signer.
fn internal<T>(req: &S3Request<Body>, input: T) -> S3Request<T> {
    S3Request {
        input,
        method: req.method.clone(),
        uri: req.uri.clone(),
        headers: HeaderMap::new(),
        extensions: http::Extensions::new(),
        credentials: req.credentials.clone(),
        region: req.region.clone(),
        service: req.service.clone(),
        trailing_headers: None,
    }
}

/// `/bucket/key[?uploadId=ID&partNumber=N]`, each percent-decoded: the only query is that
/// of a part (as versitygw's `rdma/rcroutes/target.go` has it).
fn parse_target(value: &str) -> Result<(String, String, Option<Part>), RcError> {
    if value.len() > MAX_TARGET {
        return Err(RcError::bad_request(format!("{H_TARGET} is longer than {MAX_TARGET} bytes")));
    }
    let decode = |s: &str| {
        urlencoding::decode(s)
            .map(|s| s.into_owned())
            .map_err(|_| RcError::bad_request(format!("{H_TARGET} is not UTF-8 once decoded")))
    };
    let (path, query) = match value.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (value, None),
    };
    let part = query
        .map(|query| {
            let part = query
                .strip_prefix("uploadId=")
                .and_then(|q| q.split_once("&partNumber="))
                .filter(|(id, _)| !id.is_empty())
                .and_then(|(id, n)| Some((id, n.parse::<i32>().ok()?)))
                .filter(|(_, n)| (1..=10_000).contains(n));
            match part {
                Some((id, number)) => Ok(Part { upload_id: decode(id)?, number }),
                None => Err(RcError::bad_request(format!(
                    "{H_TARGET}'s only query is uploadId=ID&partNumber=1..10000, not {query:?}"
                ))),
            }
        })
        .transpose()?;
    match path.strip_prefix('/').and_then(|v| v.split_once('/')) {
        Some((bucket, key)) if !bucket.is_empty() && !key.is_empty() => {
            Ok((decode(bucket)?, decode(key)?, part))
        }
        _ => Err(RcError::bad_request(format!("{H_TARGET} must be /BUCKET/KEY, not {value:?}"))),
    }
}

fn hex_value(n: impl std::fmt::LowerHex) -> HeaderValue {
    HeaderValue::from_str(&format!("{n:x}")).expect("hex digits")
}

impl Shared {
    async fn prepare(
        &self,
        device: &'static Device,
        req: &S3Request<Body>,
        principal: &str,
    ) -> Result<HeaderMap, s3s::S3Error> {
        let token = match header(req, H_TOKEN)? {
            Some(value) => Token::parse(H_TOKEN, value)?,
            None => Token::default(),
        };
        if !token.is_zero() && token.transport != TRANSPORT_RC {
            return Err(
                RcError::bad_request(format!("{H_TOKEN}: the transport is not RC (1)")).into()
            );
        }
        // A zero token is the loopback case: the client is on this host's GID.
        let client_gid = if token.is_zero() { device.gid() } else { Gid::new(token.gid) };
        let client_psn = token::parse_psn(H_PSN, required(req, H_PSN)?)?;
        let cookie = token::parse_cookie(H_COOKIE, required(req, H_COOKIE)?)?;
        let op = match required(req, H_OP)?.to_ascii_uppercase().as_str() {
            "GET" => Op::Get,
            "PUT" => Op::Put,
            other => {
                return Err(
                    RcError::bad_request(format!("{H_OP} is GET or PUT, not {other:?}")).into()
                )
            }
        };
        let (bucket, key, part) = parse_target(required(req, H_TARGET)?)?;
        let size = token::parse_decimal(H_SIZE, required(req, H_SIZE)?)?;
        let offset = header(req, H_OFFSET)?
            .map(|v| token::parse_decimal(H_OFFSET, v))
            .transpose()?
            .unwrap_or(0);
        if size == 0 || size > MAX_TRANSFER || offset.saturating_add(size) > MAX_TRANSFER {
            return Err(RcError::bad_request(format!(
                "{H_SIZE} must be 1 to {MAX_TRANSFER}, and {H_OFFSET} + {H_SIZE} at most that"
            ))
            .into());
        }
        if op == Op::Put && offset != 0 {
            return Err(RcError::bad_request(format!("a PUT has no {H_OFFSET}")).into());
        }
        if op == Op::Get && part.is_some() {
            return Err(RcError::bad_request(format!(
                "{H_TARGET}: a part is PUT over RDMA, not GET"
            ))
            .into());
        }
        let client_psn = Psn::new(client_psn).map_err(|e| RcError::bad_request(e.to_string()))?;
        // Authorized as the S3 operation before the session exists; a GET's object is opened
        // (its range read at READY).
        let (source, etag) = match (op, &part) {
            (Op::Get, _) => {
                let (source, etag) = self.open(&bucket, &key, offset, size).await?;
                (Some(source), Some(etag))
            }
            (Op::Put, None) => {
                self.store.check_put(&bucket, &key, size).await?;
                (None, None)
            }
            (Op::Put, Some(part)) => {
                self.store.check_part(&bucket, &key, &part.upload_id, size).await?;
                (None, None)
            }
        };
        let spec = Spec { op, size: size as usize, cookie, client_gid, client_psn, source };
        let target = Target { op, bucket, key, size, held: spec.held() as u64, part, etag };
        let id = self.sessions.reserve(principal, cookie, target)?;
        let timeout = self.sessions.limits().prepare_timeout;
        let started = tokio::task::spawn_blocking(move || data_path::start(device, spec, timeout))
            .await
            .unwrap_or_else(|e| Err(format!("it panicked: {e}")));
        let (prepared, handle) = match started {
            Ok(started) => started,
            Err(e) => {
                self.sessions.remove(id);
                return Err(RcError::failed(format!("cannot set up the session: {e}")).into());
            }
        };
        if !self.sessions.publish(id, handle) {
            return Err(RcError::failed(
                "the session passed its prepare deadline while being set up",
            )
            .into());
        }
        let reply = Token {
            transport: TRANSPORT_RC,
            qpn: prepared.qpn.get(),
            gid: device.gid().get(),
            port: device.port(),
            ..Token::default()
        };
        let mut headers = HeaderMap::new();
        let text = |s: String| HeaderValue::from_str(&s).expect("hex digits");
        headers.insert(H_SESSION, text(format!("{id:032x}")));
        headers.insert(H_PSN, text(format!("{:06x}", prepared.psn.get())));
        headers.insert(H_QPN, hex_value(prepared.qpn.get()));
        headers.insert(H_REPLY, text(format!("200:{reply}")));
        headers.insert(H_MR_ADDR, hex_value(prepared.staging.addr));
        headers.insert(H_MR_RKEY, hex_value(prepared.staging.rkey.get()));
        Ok(headers)
    }

    /// Opens `bucket`/`key` for a GET of `size` bytes from `offset` (GetObject's errors);
    /// the range's source and the object's ETag.
    async fn open(
        &self,
        bucket: &str,
        key: &str,
        offset: u64,
        size: u64,
    ) -> Result<(Source, String), s3s::S3Error> {
        let object = self.store.open_object(bucket, key).await?;
        if offset + size > object.meta.size {
            return Err(RcError::bad_request(format!(
                "{bucket}/{key} has {} bytes, not {size} from offset {offset}",
                object.meta.size
            ))
            .into());
        }
        let etag = object.meta.etag.clone();
        let name = format!("{bucket}/{key}");
        Ok((Source { object, range: offset..offset + size, name }, etag))
    }

    async fn ready(
        &self,
        req: &S3Request<Body>,
        principal: &str,
    ) -> Result<HeaderMap, s3s::S3Error> {
        let id = token::parse_session(H_SESSION, required(req, H_SESSION)?)?;
        let cookie = token::parse_cookie(H_COOKIE, required(req, H_COOKIE)?)?;
        // Up to 16 digits (versitygw's client pads to 16), a 24-bit value, not 0.
        let qpn = token::parse_hex(H_QPN, required(req, H_QPN)?, 1..=16, u32::MAX.into())? as u32;
        let client_qpn = Qpn::new(qpn)
            .ok()
            .filter(|q| q.get() != 0)
            .ok_or_else(|| RcError::bad_request(format!("{H_QPN}: {qpn:#x} is not a QP number")))?;
        let addr = header(req, H_MR_ADDR)?
            .map(|v| token::parse_hex(H_MR_ADDR, v, 1..=16, u64::MAX))
            .transpose()?;
        let rkey = header(req, H_MR_RKEY)?
            .map(|v| token::parse_hex(H_MR_RKEY, v, 1..=8, u32::MAX.into()))
            .transpose()?;
        let client_region =
            addr.zip(rkey).map(|(addr, rkey)| RemoteAddr { addr, rkey: RKey::new(rkey as u32) });
        let claimed = self.sessions.claim(id, principal, cookie)?;
        if claimed.target.op == Op::Get && client_region.is_none() {
            self.sessions.unclaim(id);
            return Err(RcError::bad_request(format!(
                "a GET's READY needs {H_MR_ADDR} and {H_MR_RKEY}"
            ))
            .into());
        }
        let (done, outcome) = tokio::sync::oneshot::channel();
        let ready = Ready { client_qpn, client_region, deadline: claimed.deadline, done };
        if claimed.handle.try_send(ready).is_err() {
            self.sessions.remove(id);
            return Err(RcError::no_session().into());
        }
        let target = claimed.target;
        let outcome = outcome
            .await
            .unwrap_or_else(|_| Err(Failure::Failed("the session's thread ended".into())));
        let etag = match outcome {
            Ok(Outcome::Sent) => {
                self.sessions.remove(id);
                target.etag.clone().map(|etag| (etag, None))
            }
            Ok(Outcome::Received(blocks)) => {
                // Counted against the limits until committed: the session's thread holds its
                // staging region while the commit takes the bytes.
                let committed = self.commit(req, &target, blocks).await;
                self.sessions.remove(id);
                committed?
            }
            Err(Failure::Busy(e)) => {
                self.sessions.unclaim(id);
                return Err(RcError::conflict(format!("{e}; send READY again")).into());
            }
            Err(Failure::Failed(e)) => {
                self.sessions.remove(id);
                return Err(RcError::failed(e).into());
            }
        };
        let mut headers = HeaderMap::new();
        headers.insert(H_CAPABILITIES, HeaderValue::from_static(CAPABILITIES));
        headers.insert(H_COOKIE, HeaderValue::from_str(&format!("{cookie:08x}")).expect("hex"));
        headers.insert(H_BYTES, HeaderValue::from(target.size));
        if let Some((etag, checksum)) = etag {
            if let Ok(v) = HeaderValue::from_str(&format!("\"{etag}\"")) {
                headers.insert(H_ETAG, v);
            }
            if let Some(v) =
                checksum.and_then(|c| HeaderValue::from_str(&format!("CRC64NVME {c}")).ok())
            {
                headers.insert(H_CHECKSUM, v);
            }
        }
        Ok(headers)
    }

    /// Commits a PUT's `blocks` as PutObject, or UploadPart for a part (its checks and
    /// checksums); the ETag and, of an object, its CRC64NVME.
    async fn commit(
        &self,
        req: &S3Request<Body>,
        target: &Target,
        blocks: tokio::sync::mpsc::Receiver<std::io::Result<bytes::Bytes>>,
    ) -> Result<Option<(String, Option<String>)>, s3s::S3Error> {
        let body = futures::stream::unfold(blocks, |mut blocks| async move {
            blocks.recv().await.map(|block| (block, blocks))
        });
        let body = Some(StreamingBlob::wrap(body));
        let (bucket, key, length) = (target.bucket.clone(), target.key.clone(), target.size as i64);
        let bad = |e: s3s::dto::builders::BuildError| RcError::bad_request(e.to_string());
        Ok(match &target.part {
            None => {
                let input = PutObjectInput::builder()
                    .bucket(bucket)
                    .key(key)
                    .content_length(Some(length))
                    .body(body)
                    .build()
                    .map_err(bad)?;
                let output = self.store.put_object(internal(req, input)).await?.output;
                output.e_tag.map(|e| (e.value().to_owned(), output.checksum_crc64nvme))
            }
            Some(part) => {
                let input = UploadPartInput::builder()
                    .bucket(bucket)
                    .key(key)
                    .upload_id(part.upload_id.clone())
                    .part_number(part.number)
                    .content_length(Some(length))
                    .body(body)
                    .build()
                    .map_err(bad)?;
                let output = self.store.upload_part(internal(req, input)).await?.output;
                output.e_tag.map(|e| (e.value().to_owned(), None))
            }
        })
    }

    fn cancel(&self, req: &S3Request<Body>, principal: &str) -> Result<HeaderMap, s3s::S3Error> {
        let id = token::parse_session(H_SESSION, required(req, H_SESSION)?)?;
        self.sessions.cancel(id, principal);
        Ok(HeaderMap::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_takes_exactly_a_parts_query() {
        let (bucket, key, part) = parse_target("/b/dir/a%20b").unwrap();
        assert_eq!((bucket.as_str(), key.as_str(), part), ("b", "dir/a b", None));
        let (_, key, part) = parse_target("/b/k?uploadId=a%2Bb&partNumber=10000").unwrap();
        assert_eq!(key, "k");
        assert_eq!(part, Some(Part { upload_id: "a+b".into(), number: 10_000 }));
        for refused in [
            "/b/k?uploadId=&partNumber=1",
            "/b/k?uploadId=x&partNumber=0",
            "/b/k?uploadId=x&partNumber=10001",
            "/b/k?partNumber=1&uploadId=x",
            "/b/k?uploadId=x&partNumber=1&versionId=v",
            "/b/k?uploadId=x",
            "/b/k?acl",
            "/b/k?",
        ] {
            let e = parse_target(refused).unwrap_err();
            assert!(
                format!("{e:?}").contains("uploadId=ID&partNumber=1..10000"),
                "{refused}: {e:?}"
            );
        }
    }
}
