//! The client side of `hipobj-rc-v2`: one object's GET into memory, or PUT (of an object or
//! a part) from memory, over an RC queue pair of its own, with requests signed by rusty-s3
//! (SigV4, presigned URLs that sign every `x-amz-rdma-*` header).
//!
//! A [`Client`] registers one buffer and moves every transfer through it, as cuObject's
//! clients do: registering memory costs far more than copying a few MiB, so the buffer is
//! kept, and registered again (larger) only when a transfer needs more than it has.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use http::HeaderMap;
use rdma_verbs::*;
use rusty_s3::S3Action;

use super::device::{nonzero_psn, wait_one, Device};
use super::token::{self, Token};
use super::*;
pub use crate::ClientError;
use crate::Credentials;

/// How long a signed request stays valid, in seconds.
const SIGNATURE_VALIDITY: u64 = 300;
const SIGNED_FOR: Duration = Duration::from_secs(SIGNATURE_VALIDITY);
/// S3's smallest part but the last, and most parts of an upload.
const MIN_PART_SIZE: usize = 5 << 20;
const MAX_PARTS: usize = 10_000;
/// How long the client waits for its own completion once READY has been answered (GET) or
/// while READY is outstanding (PUT: the server's exec deadline bounds it too).
const COMPLETION_WAIT: Duration = Duration::from_secs(60);

/// A reply of the server.
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// Its headers.
    pub headers: HeaderMap,
    /// Its body (an S3 error's XML, or empty).
    pub body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// `self` when it is a success of the protocol, else the error it stands for.
    fn success(self, route: &'static str) -> Result<Reply, ClientError> {
        let declined = self.status == 501 && self.header(PROTOCOL_STATUS) == Some("unsupported");
        if declined {
            return Err(ClientError::Declined(self.body));
        }
        if !(200..300).contains(&self.status) {
            return Err(ClientError::Refused { what: route, status: self.status, body: self.body });
        }
        if self.header(H_PROTOCOL) != Some(PROTOCOL) {
            return Err(ClientError::Protocol(format!(
                "{route}'s answer does not name {PROTOCOL}"
            )));
        }
        Ok(self)
    }

    fn required(&self, name: &'static str) -> Result<&str, ClientError> {
        self.header(name).ok_or_else(|| ClientError::Protocol(format!("the answer has no {name}")))
    }
}

/// The final answer of a transfer (READY's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Final {
    /// The bytes moved.
    pub bytes: u64,
    /// The object's ETag.
    pub etag: Option<String>,
    /// `CRC64NVME <base64>` of a stored object, when the server sends it.
    pub checksum: Option<String>,
}

/// A client of one server, signing with one key. Its transfers over RDMA go through one
/// registered buffer, so they run one at a time (one on another thread waits).
pub struct Client {
    base: url::Url,
    key: Credentials,
    region: String,
    agent: ureq::Agent,
    buffer: Mutex<Option<RemoteWritableRegion<'static>>>,
}

impl Client {
    /// A client of `endpoint` (`http://HOST:PORT`) signing with `key` for region `us-east-1`.
    pub fn new(endpoint: &str, key: Credentials) -> Result<Client, ClientError> {
        Client::with_tls(endpoint, key, ureq::tls::TlsConfig::default())
    }

    /// A client as [`Client::new`], checking an `https://` endpoint's certificate as `tls`
    /// says (e.g. against a private CA's roots).
    pub fn with_tls(
        endpoint: &str,
        key: Credentials,
        tls: ureq::tls::TlsConfig,
    ) -> Result<Client, ClientError> {
        let base = url::Url::parse(endpoint)
            .map_err(|e| ClientError::Endpoint(format!("{endpoint}: {e}")))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(ClientError::Endpoint(format!("{endpoint} is not an http(s) URL")));
        }
        let agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .tls_config(tls)
            .build()
            .into();
        let buffer = Mutex::new(None);
        Ok(Client { base, key, region: "us-east-1".into(), agent, buffer })
    }

    /// The client, signing for `region` (the server's; s3rdma's answers any) instead of
    /// `us-east-1`.
    pub fn with_region(self, region: &str) -> Client {
        Client { region: region.to_owned(), ..self }
    }

    /// The buffer kept registered for transfers (none before the first): its address and
    /// rkey (a new registration has a new rkey), and its length in bytes.
    pub fn buffer(&self) -> Option<(RemoteAddr, usize)> {
        let held = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        held.as_ref().and_then(|r| Some((r.remote(..).ok()?, r.len())))
    }

    /// A presigned URL of `method` on `path` (percent-encoded) with `headers` signed.
    fn sign(&self, method: rusty_s3::Method, path: &str, headers: &[(&str, String)]) -> url::Url {
        let mut url = self.base.clone();
        url.set_path(path);
        let mut signed: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        signed.sort();
        rusty_s3::signing::sign(
            &jiff::Timestamp::now(),
            method,
            url,
            &self.key.access_key_id,
            &self.key.secret_access_key,
            None,
            &self.region,
            SIGNATURE_VALIDITY,
            std::iter::empty(),
            signed.into_iter(),
        )
    }

    /// A signed, body-less `POST /.hipobj-rc/ROUTE` with `headers` (lowercase names): the
    /// control requests as they are, for tools and tests that speak the protocol themselves.
    pub fn post(&self, route: &str, headers: &[(&str, String)]) -> Result<Reply, ClientError> {
        let url = self.sign(rusty_s3::Method::Post, &format!("{ROUTE_PREFIX}/{route}"), headers);
        let mut request = self.agent.post(url.as_str());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let mut response = request.send_empty()?;
        let body = response.body_mut().read_to_string().unwrap_or_default();
        Ok(Reply { status: response.status().as_u16(), headers: response.headers().clone(), body })
    }

    /// The agent plain S3 requests go through (it does not turn error statuses into errors).
    pub fn agent(&self) -> &ureq::Agent {
        &self.agent
    }

    /// GETs `size` bytes (1 to [`MAX_TRANSFER`]) of `bucket`/`key` from `offset` over RDMA
    /// through `device`.
    pub fn get(
        &self,
        device: &Device,
        bucket: &str,
        key: &str,
        offset: u64,
        size: usize,
    ) -> Result<(Vec<u8>, Final), ClientError> {
        check_size(size)?;
        let mut held = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        let region = registered(&mut held, device, size)?;
        let cq = device.create_cq()?;
        // The server RDMA WRITEs into `region`.
        let qp = device.create_qp(device.pd, &cq, AccessFlags::REMOTE_WRITE)?;
        let remote = region.remote(..size)?;
        let cookie = nonzero_cookie();
        let target = target(bucket, key);
        let (prepared, qp) =
            self.prepare(device, qp, ("GET", &target), (offset, size), cookie, remote)?;
        // The receive the server's WRITE WITH IMMEDIATE consumes, posted before READY.
        // SAFETY: the receive names no memory; the data lands in `region`.
        unsafe { qp.post_recv_wr(&mut RecvWr::new(0, &[]))? };
        let done = self.ready(&prepared, cookie, qp.qp_num(), Some(remote))?;
        let wc = wait_one(&cq, Instant::now() + COMPLETION_WAIT)?.ok_or_else(|| {
            ClientError::Protocol("READY was answered, but no data arrived".into())
        })?;
        // The data may come in several WRITEs, the last WITH IMMEDIATE: the receive counts
        // that one's bytes, READY's answer all of them.
        let arrived = wc.is_success()
            && wc.opcode() == WcOpcode::RECV_RDMA_WITH_IMM
            && wc.imm_data() == Some(cookie)
            && wc.byte_len() as usize <= size
            && done.bytes == size as u64;
        if !arrived {
            return Err(ClientError::Protocol(format!(
                "the data's completion is not the one expected: {wc} (immediate {:?}, {} bytes; \
                 {} bytes in all, not {size})",
                wc.imm_data(),
                wc.byte_len(),
                done.bytes
            )));
        }
        let mut data = vec![0; size];
        region.read(0, &mut data)?;
        Ok((data, done))
    }

    /// PUTs `data` (1 to [`MAX_TRANSFER`] bytes) as `bucket`/`key` over RDMA through `device`.
    pub fn put(
        &self,
        device: &Device,
        bucket: &str,
        key: &str,
        data: &[u8],
    ) -> Result<Final, ClientError> {
        self.put_to(device, &target(bucket, key), data)
    }

    /// PUTs `data` (1 to [`MAX_TRANSFER`] bytes) as part `number` (1 to 10000) of the
    /// multipart upload `upload_id` of `bucket`/`key` over RDMA through `device` (a server
    /// that says `x-amz-rdma-capabilities: mp` takes it); [`Final::etag`] is the part's.
    pub fn put_part(
        &self,
        device: &Device,
        (bucket, key): (&str, &str),
        upload_id: &str,
        number: u16,
        data: &[u8],
    ) -> Result<Final, ClientError> {
        let id = urlencoding::encode(upload_id);
        let target = format!("{}?uploadId={id}&partNumber={number}", target(bucket, key));
        self.put_to(device, &target, data)
    }

    /// PUTs `data` as `bucket`/`key` over RDMA: in one transfer when it has at most
    /// `part_size` bytes, else as a multipart upload of parts of `part_size` bytes (5 MiB to
    /// [`MAX_TRANSFER`], at most 10000 parts; the last may be smaller), each over RDMA, the
    /// upload created and completed over plain S3 (aborted when a part fails). The final
    /// answer of a multipart upload has the object's ETag and no checksum.
    pub fn upload(
        &self,
        device: &Device,
        (bucket, key): (&str, &str),
        data: &[u8],
        part_size: usize,
    ) -> Result<Final, ClientError> {
        if data.len() <= part_size {
            return self.put(device, bucket, key, data);
        }
        let parts = data.chunks(part_size);
        if part_size < MIN_PART_SIZE || part_size as u64 > MAX_TRANSFER || parts.len() > MAX_PARTS {
            return Err(ClientError::Protocol(format!(
                "{} bytes in parts of {part_size}: a part has 5 MiB to {MAX_TRANSFER} bytes, an \
                 upload at most {MAX_PARTS} parts",
                data.len()
            )));
        }
        let id = self.create_multipart_upload(bucket, key)?;
        let etags: Result<Vec<String>, ClientError> = (1..)
            .zip(parts)
            .map(|(number, part)| {
                let done = self.put_part(device, (bucket, key), &id, number, part)?;
                done.etag.ok_or_else(|| {
                    ClientError::Protocol(format!("READY's answer of part {number} has no ETag"))
                })
            })
            .collect();
        match etags.and_then(|etags| self.complete_multipart_upload(bucket, key, &id, &etags)) {
            Ok(etag) => Ok(Final { bytes: data.len() as u64, etag: Some(etag), checksum: None }),
            Err(e) => {
                // Best effort: the upload's parts are of no use now.
                let _ = self.abort_multipart_upload(bucket, key, &id);
                Err(e)
            }
        }
    }

    /// CreateMultipartUpload of `bucket`/`key` over plain S3: the upload's id.
    pub fn create_multipart_upload(&self, bucket: &str, key: &str) -> Result<String, ClientError> {
        let bucket = self.bucket(bucket)?;
        let credentials = self.credentials();
        let url = bucket.create_multipart_upload(Some(&credentials), key).sign(SIGNED_FOR);
        let body =
            self.plain("CreateMultipartUpload", self.agent.post(url.as_str()).send_empty()?)?;
        let created = rusty_s3::actions::CreateMultipartUpload::parse_response(&body)
            .map_err(|e| ClientError::Protocol(format!("CreateMultipartUpload's answer: {e}")))?;
        Ok(created.upload_id().to_owned())
    }

    /// CompleteMultipartUpload of upload `upload_id` of `bucket`/`key` over plain S3, of
    /// parts 1 to n with the ETags `etags`: the object's ETag.
    pub fn complete_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        etags: &[String],
    ) -> Result<String, ClientError> {
        let bucket = self.bucket(bucket)?;
        let credentials = self.credentials();
        let etags = etags.iter().map(String::as_str);
        let action = bucket.complete_multipart_upload(Some(&credentials), key, upload_id, etags);
        let url = action.sign(SIGNED_FOR);
        let response = self.agent.post(url.as_str()).send(action.body())?;
        let body = self.plain("CompleteMultipartUpload", response)?;
        let completed = rusty_s3::actions::CompleteMultipartUploadResponse::parse(&body)
            .map_err(|e| ClientError::Protocol(format!("CompleteMultipartUpload's answer: {e}")))?;
        Ok(completed.etag().to_owned())
    }

    /// AbortMultipartUpload of upload `upload_id` of `bucket`/`key` over plain S3.
    pub fn abort_multipart_upload(
        &self,
        bucket: &str,
        key: &str,
        upload_id: &str,
    ) -> Result<(), ClientError> {
        let bucket = self.bucket(bucket)?;
        let credentials = self.credentials();
        let url =
            bucket.abort_multipart_upload(Some(&credentials), key, upload_id).sign(SIGNED_FOR);
        self.plain("AbortMultipartUpload", self.agent.delete(url.as_str()).call()?)?;
        Ok(())
    }

    fn bucket(&self, name: &str) -> Result<rusty_s3::Bucket, ClientError> {
        let (style, region) = (rusty_s3::UrlStyle::Path, self.region.clone());
        rusty_s3::Bucket::new(self.base.clone(), style, name.to_owned(), region)
            .map_err(|e| ClientError::Endpoint(format!("{}: {e}", self.base)))
    }

    fn credentials(&self) -> rusty_s3::Credentials {
        rusty_s3::Credentials::new(&self.key.access_key_id, &self.key.secret_access_key)
    }

    /// The body of a plain S3 request's successful `response`, else the error it stands for.
    fn plain(
        &self,
        route: &'static str,
        mut response: http::Response<ureq::Body>,
    ) -> Result<String, ClientError> {
        let status = response.status().as_u16();
        let body = response.body_mut().read_to_string()?;
        if !(200..300).contains(&status) {
            return Err(ClientError::Refused { what: route, status, body });
        }
        Ok(body)
    }

    /// PUT of `data` to `target` (`/bucket/key[?query]`, percent-encoded).
    fn put_to(&self, device: &Device, target: &str, data: &[u8]) -> Result<Final, ClientError> {
        check_size(data.len())?;
        let mut held = self.buffer.lock().unwrap_or_else(PoisonError::into_inner);
        let region = registered(&mut held, device, data.len())?;
        region.write(0, data)?;
        let cq = device.create_cq()?;
        // The server only receives.
        let qp = device.create_qp(device.pd, &cq, AccessFlags::empty())?;
        let cookie = nonzero_cookie();
        let own = region.remote(..data.len())?;
        let (prepared, qp) =
            self.prepare(device, qp, ("PUT", target), (0, data.len()), cookie, own)?;
        let staging = prepared.staging.ok_or_else(|| {
            ClientError::Protocol(format!("PREPARE's answer has no {H_MR_ADDR} and {H_MR_RKEY}"))
        })?;
        let sges = [region.sge(..data.len())?];
        std::thread::scope(|s| {
            let ready = s.spawn(|| self.ready(&prepared, cookie, qp.qp_num(), None));
            // The data goes while READY is outstanding: the server answers once it arrived.
            let mut wr =
                SendWr::rdma_write_with_imm(1, &sges, staging, cookie).flags(SendFlags::SIGNALED);
            // SAFETY: `region` (held by `held`) outlives `qp` (declared before it) and is not
            // touched until the completion is polled, or the QP is gone.
            let written =
                unsafe { qp.post_send_wr(&mut wr) }.map_err(ClientError::from).and_then(|()| {
                    wait_one(&cq, Instant::now() + COMPLETION_WAIT)?.ok_or_else(|| {
                        ClientError::Protocol("the RDMA WRITE did not complete".into())
                    })
                });
            let done = ready
                .join()
                .map_err(|_| ClientError::Protocol("READY's thread panicked".into()))?;
            match written? {
                wc if wc.is_success() => done,
                wc => Err(ClientError::Protocol(format!("the RDMA WRITE failed: {wc}"))),
            }
        })
    }

    /// PREPARE of `op` on `target` (`size` bytes from `offset`) for `qp`, then its move to
    /// RTS towards the server's queue pair.
    fn prepare<'a>(
        &self,
        device: &Device,
        qp: QueuePair<'a, Init>,
        (op, target): (&str, &str),
        (offset, size): (u64, usize),
        cookie: u32,
        region: RemoteAddr,
    ) -> Result<(Prepared, QueuePair<'a, Rts>), ClientError> {
        let psn = nonzero_psn();
        let token = device.token(qp.qp_num(), region, size as u64);
        let mut headers = vec![
            (H_PROTOCOL, PROTOCOL.to_string()),
            (H_TOKEN, token.to_string()),
            (H_PSN, format!("{:06x}", psn.get())),
            (H_COOKIE, format!("{cookie:08x}")),
            (H_OP, op.to_string()),
            (H_TARGET, target.to_owned()),
            (H_SIZE, size.to_string()),
        ];
        if offset != 0 {
            headers.push((H_OFFSET, offset.to_string()));
        }
        let reply = self.post("prepare", &headers)?.success("PREPARE")?;
        let bad = |e: BadHeader| ClientError::Protocol(format!("PREPARE's answer: {e}"));
        let session = reply.required(H_SESSION)?.to_owned();
        token::parse_session(H_SESSION, &session).map_err(bad)?;
        let server_psn = reply.required(H_PSN)?;
        if server_psn.len() != 6 {
            return Err(ClientError::Protocol(format!("PREPARE's {H_PSN} is not 6 hex digits")));
        }
        let server_psn = Psn::new(token::parse_psn(H_PSN, server_psn).map_err(bad)?)?;
        let server = reply
            .required(H_REPLY)?
            .strip_prefix("200:")
            .filter(|t| t.len() == 88)
            .ok_or_else(|| {
                ClientError::Protocol(format!("PREPARE's {H_REPLY} is not 200:<88 hex>"))
            })
            .and_then(|t| Token::parse(H_REPLY, t).map_err(bad))?;
        let addr =
            reply.header(H_MR_ADDR).map(|v| token::parse_hex(H_MR_ADDR, v, 1..=16, u64::MAX));
        let rkey =
            reply.header(H_MR_RKEY).map(|v| token::parse_hex(H_MR_RKEY, v, 1..=8, u32::MAX.into()));
        // A partial or malformed pair counts as absent.
        let staging = match (addr, rkey) {
            (Some(Ok(addr)), Some(Ok(rkey))) => {
                Some(RemoteAddr { addr, rkey: RKey::new(rkey as u32) })
            }
            _ => None,
        };
        let qp =
            device.connect(qp, Qpn::new(server.qpn)?, Gid::new(server.gid), server_psn, psn)?;
        Ok((Prepared { session, staging }, qp))
    }

    /// READY, and the check of its final answer.
    fn ready(
        &self,
        prepared: &Prepared,
        cookie: u32,
        qpn: Qpn,
        region: Option<RemoteAddr>,
    ) -> Result<Final, ClientError> {
        let mut headers = vec![
            (H_PROTOCOL, PROTOCOL.to_string()),
            (H_SESSION, prepared.session.clone()),
            (H_COOKIE, format!("{cookie:08x}")),
            (H_QPN, format!("{:x}", qpn.get())),
        ];
        if let Some(region) = region {
            headers.push((H_MR_ADDR, format!("{:x}", region.addr)));
            headers.push((H_MR_RKEY, format!("{:x}", region.rkey.get())));
        }
        let reply = self.post("ready", &headers)?.success("READY")?;
        let echoed = token::parse_cookie(H_COOKIE, reply.required(H_COOKIE)?);
        if echoed != Ok(cookie) {
            return Err(ClientError::Protocol(format!(
                "READY's answer does not echo the cookie {cookie:08x}"
            )));
        }
        let bytes = reply
            .required(H_BYTES)?
            .parse()
            .map_err(|_| ClientError::Protocol(format!("READY's {H_BYTES} is not a number")))?;
        Ok(Final {
            bytes,
            etag: reply.header(H_ETAG).map(str::to_owned),
            checksum: reply.header(H_CHECKSUM).map(str::to_owned),
        })
    }
}

/// What PREPARE answered that READY and the data need.
struct Prepared {
    session: String,
    staging: Option<RemoteAddr>,
}

/// `/bucket/key`, each segment percent-encoded (RFC 3986's unreserved characters kept).
pub fn target(bucket: &str, key: &str) -> String {
    let segments = std::iter::once(bucket).chain(key.split('/'));
    segments.map(|s| format!("/{}", urlencoding::encode(s))).collect()
}

/// The buffer in `held` when it is of `device` and has `len` bytes, else a new one of `len`
/// bytes in its place (the old one deregistered first): of 2 MiB huge pages where the host has
/// enough reserved (`/proc/sys/vm/nr_hugepages`), whose one translation entry per 2 MiB the
/// NIC caches better than 512 of 4 KiB pages, else of the heap.
fn registered<'h>(
    held: &'h mut Option<RemoteWritableRegion<'static>>,
    device: &Device,
    len: usize,
) -> Result<&'h mut RemoteWritableRegion<'static>, ClientError> {
    let fits =
        |r: &RemoteWritableRegion<'static>| std::ptr::eq(r.pd(), device.pd) && r.len() >= len;
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let region = match held.take().filter(fits) {
        Some(region) => region,
        None => match HugePages::new(len, HugePageSize::Size2MiB) {
            Ok(pages) => device.pd.register_remote_writable(pages, access)?,
            Err(_) => device.pd.register_remote_writable(len, access)?,
        },
    };
    Ok(held.insert(region))
}

/// A transfer moves 1 to [`MAX_TRANSFER`] bytes.
fn check_size(size: usize) -> Result<(), ClientError> {
    if size == 0 || size as u64 > MAX_TRANSFER {
        return Err(ClientError::Protocol(format!(
            "{PROTOCOL} moves 1 to {MAX_TRANSFER} bytes, not {size}: use plain S3"
        )));
    }
    Ok(())
}

fn nonzero_cookie() -> u32 {
    loop {
        let cookie = rand::random::<u32>();
        if cookie != 0 {
            return cookie;
        }
    }
}
