//! The client side of cuObject's `x-amz-rdma-token`: a DC target (DCT) and a registered
//! window of its own, whose [`Descriptor`] goes in signed S3 requests (rusty-s3 presigned
//! URLs, the token among the signed headers, `x-amz-content-sha256: UNSIGNED-PAYLOAD`).
//! An explicit decline (`x-amz-rdma-reply: 501`) falls back to plain S3.

use std::time::Duration;

use rdma_verbs::mlx5::{DcKey, DcRoute, Dct, DctInitAttr, DctToRtrAttr, Mlx5Context};
use rdma_verbs::{
    AccessFlags, CompletionQueue, Context, GidEntry, Lid, MemoryRegion, ProtectionDomain, RKey,
    RemoteWritableRegion, Rtr, SharedReceiveQueue, ToInitAttr,
};
use rusty_s3::actions::{GetObject, PutObject, UploadPart};
use rusty_s3::{Bucket, S3Action, UrlStyle};
use s3s::crypto::{Checksum as _, Crc64Nvme};

use super::port::Port;
use super::token::Descriptor;
use super::{H_BYTES, H_REPLY, H_TOKEN};
pub use crate::ClientError;
use crate::Credentials;

/// How long a signed request stays valid.
const SIGNATURE_VALIDITY: Duration = Duration::from_secs(300);
/// The payload hash of RDMA requests: their body is empty, their bytes move over RDMA.
const UNSIGNED_PAYLOAD: &str = "UNSIGNED-PAYLOAD";
/// The smallest window registered.
const MIN_WINDOW: usize = 64 << 10;

/// The client's DC side: its device, PD, CQ, SRQ and DCT, which live as long as the process
/// (every window the client registers is reached through this DCT).
pub struct Target {
    pd: &'static ProtectionDomain<'static>,
    dct: Dct<'static, Rtr>,
    gid: GidEntry,
    lid: Lid,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DCT {} at GID {}", self.dct.dctn(), self.gid.gid)
    }
}

impl Target {
    /// Opens `name` (default: the first device) port 1, with GID `gid_index` (default: the
    /// port's routable RoCE v2 GID), and makes a DCT taking DC key `key`.
    ///
    /// # Errors
    ///
    /// [`rdma_verbs::Error::Unsupported`] on a device without DC (not mlx5); the errors of
    /// opening the device and making the objects.
    pub fn open(name: Option<&str>, gid_index: Option<u8>, key: u64) -> rdma_verbs::Result<Target> {
        let ctx = match name {
            Some(name) => Context::open(name)?,
            None => Context::open_first()?,
        };
        let ctx: &'static Context = Box::leak(Box::new(ctx));
        Self::new(Mlx5Context::open(ctx)?, gid_index, key)
    }

    /// The DCT on the device of `mlx5` (which may be a mock's): created with an SRQ and a CQ
    /// and key `key`; INIT with REMOTE_READ | REMOTE_WRITE; RTR with the port's active MTU,
    /// RNR timer 12, a GRH (hop limit 4, traffic class 0) from the GID when the port has
    /// one that routes (RoCE), as libcuobjclient's host DCT (in versitygw's `cuwrapper`).
    ///
    /// # Errors
    ///
    /// As [`Target::open`].
    pub fn new(
        mlx5: Mlx5Context<'static>,
        gid_index: Option<u8>,
        key: u64,
    ) -> rdma_verbs::Result<Target> {
        let mlx5: &'static Mlx5Context<'static> = Box::leak(Box::new(mlx5));
        let ctx = mlx5.context();
        let Port { number: port, gid, lid, mtu } = Port::query(ctx, gid_index)?;
        let pd: &'static ProtectionDomain<'static> = Box::leak(Box::new(ctx.alloc_pd()?));
        let srq: &'static SharedReceiveQueue<'static> = Box::leak(Box::new(pd.create_srq(1, 1)?));
        let cq: &'static CompletionQueue<'static> = Box::leak(Box::new(ctx.create_cq(16)?));
        let dct = mlx5.create_dct(pd, &DctInitAttr { srq, recv_cq: cq, key: DcKey::new(key) })?;
        let access = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let dct = dct.into_init(&ToInitAttr { port, pkey_index: 0, access })?;
        let route = DcRoute { hop_limit: 4, ..DcRoute::new(port, Some(gid.index), mtu) };
        let rtr = DctToRtrAttr {
            min_rnr_timer: rdma_verbs::RnrTimer::new(12)?,
            ..DctToRtrAttr::from_route(&route)
        };
        let dct = dct.into_rtr(&rtr)?;
        Ok(Target { pd, dct, gid, lid })
    }

    /// The descriptor of `size` bytes at `addr` of the window of key `rkey`.
    fn descriptor(&self, (addr, rkey): (u64, RKey), size: usize) -> Descriptor {
        let gid = self.gid.gid;
        Descriptor {
            addr,
            size: size as u64,
            rkey: rkey.get(),
            lid: self.lid.get(),
            dctn: self.dct.dctn().get(),
            gid: (!gid.is_zero()).then(|| gid.get()),
        }
    }
}

/// What a GET brought.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Got {
    /// The bytes.
    pub data: Vec<u8>,
    /// Whether they came over RDMA (else in the body, the server having declined).
    pub over_rdma: bool,
    /// The object's ETag.
    pub etag: Option<String>,
}

/// What a PUT or UploadPart stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// Its ETag.
    pub etag: Option<String>,
    /// Whether the bytes went over RDMA (else in the body, the server having declined).
    pub over_rdma: bool,
}

/// Which way a window's bytes go, and so the access it is registered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// A GET's: the server RDMA WRITEs into it.
    Get,
    /// A PUT's or an UploadPart's: the server RDMA READs it.
    Put,
}

/// A descriptor's size is 32 bits.
fn fits_descriptor(len: usize) -> Result<(), ClientError> {
    if u32::try_from(len).is_err() {
        return Err(ClientError::Protocol(format!(
            "{len} bytes do not fit one descriptor (at most {} bytes): use plain S3 or a Range",
            u32::MAX
        )));
    }
    Ok(())
}

/// A client of one server, signing with one key, moving payloads through one [`Target`].
///
/// It keeps two windows across requests, each replaced only by a larger one, registered with
/// only the access the server needs: a GET's REMOTE_WRITE (the server writes into it), a
/// PUT's REMOTE_READ (the server reads it). cuObject's own clients register one window with
/// both; with two, a token for a PUT cannot be used to write into the client's memory.
pub struct Client {
    base: url::Url,
    key: rusty_s3::Credentials,
    agent: ureq::Agent,
    target: Target,
    get_window: Option<RemoteWritableRegion<'static>>,
    put_window: Option<MemoryRegion<'static>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "cuObject client of {} through {:?}", self.base, self.target)
    }
}

impl Client {
    /// A client of `endpoint` (`http://HOST:PORT`) signing with `key` for region
    /// `us-east-1`, moving payloads through `target`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Endpoint`] when `endpoint` is not an http(s) URL.
    pub fn new(endpoint: &str, key: Credentials, target: Target) -> Result<Client, ClientError> {
        let base = url::Url::parse(endpoint)
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https"))
            .ok_or_else(|| ClientError::Endpoint(format!("{endpoint} is not an http(s) URL")))?;
        let agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        let key = rusty_s3::Credentials::new(key.access_key_id, key.secret_access_key);
        Ok(Client { base, key, agent, target, get_window: None, put_window: None })
    }

    /// Registers a GET's window (REMOTE_WRITE) of at least `len` bytes now, for later GETs up
    /// to that size, unless the one held is that large.
    ///
    /// # Errors
    ///
    /// [`ClientError::Protocol`] above 4 GiB − 1 (the descriptor's size is 32 bits); the
    /// errors of `ibv_reg_mr`.
    pub fn reserve_get(
        &mut self,
        len: usize,
    ) -> Result<&mut RemoteWritableRegion<'static>, ClientError> {
        fits_descriptor(len)?;
        if self.get_window.as_ref().is_none_or(|w| w.len() < len) {
            self.get_window = None; // deregistered before the larger one is made
            let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
            let window = self.target.pd.register_remote_writable(len.max(MIN_WINDOW), access)?;
            self.get_window = Some(window);
        }
        Ok(self.get_window.as_mut().expect("registered above"))
    }

    /// Registers a PUT's window (REMOTE_READ) of at least `len` bytes now, as
    /// [`Client::reserve_get`].
    ///
    /// # Errors
    ///
    /// As [`Client::reserve_get`].
    pub fn reserve_put(&mut self, len: usize) -> Result<&mut MemoryRegion<'static>, ClientError> {
        fits_descriptor(len)?;
        if self.put_window.as_ref().is_none_or(|w| w.len() < len) {
            self.put_window = None;
            let window = self.target.pd.register(len.max(MIN_WINDOW), AccessFlags::REMOTE_READ)?;
            self.put_window = Some(window);
        }
        Ok(self.put_window.as_mut().expect("registered above"))
    }

    /// The descriptor of the first `len` bytes of the window of `direction` (reserved
    /// first), for requests made by hand.
    ///
    /// # Errors
    ///
    /// As [`Client::reserve_get`].
    pub fn token(&mut self, direction: Direction, len: usize) -> Result<Descriptor, ClientError> {
        let window = match direction {
            Direction::Get => {
                let w = self.reserve_get(len)?;
                (w.iova(), w.rkey())
            }
            Direction::Put => {
                let w = self.reserve_put(len)?;
                (w.iova(), w.rkey())
            }
        };
        Ok(self.target.descriptor(window, len))
    }

    /// The first `len` bytes of the GET's window (at most its length).
    pub fn window(&self, len: usize) -> Option<Vec<u8>> {
        let mut bytes = vec![0; len];
        self.get_window.as_ref()?.read(0, &mut bytes).ok()?;
        Some(bytes)
    }

    fn bucket(&self, name: &str) -> Result<Bucket, ClientError> {
        Bucket::new(self.base.clone(), UrlStyle::Path, name.to_owned(), "us-east-1")
            .map_err(|e| ClientError::Endpoint(format!("bucket {name}: {e}")))
    }

    /// GETs `bucket`/`key` (`range`: bytes `start..end` of it), which must be at most `len`
    /// bytes: over RDMA into the window, or in the body when the server declines.
    ///
    /// # Errors
    ///
    /// [`ClientError::Refused`] for an S3 error, [`ClientError::Protocol`] for an answer
    /// without the success headers; the errors of [`Client::reserve_get`] and of HTTP.
    pub fn get(
        &mut self,
        bucket: &str,
        key: &str,
        range: Option<std::ops::Range<u64>>,
        len: usize,
    ) -> Result<Got, ClientError> {
        let token = self.token(Direction::Get, len)?.to_string();
        let bucket = self.bucket(bucket)?;
        let url =
            signed(GetObject::new(&bucket, Some(&self.key), key), &[(H_TOKEN, token.clone())]);
        let mut request = self
            .agent
            .get(url.as_str())
            .header(H_TOKEN, &token)
            .header("x-amz-content-sha256", UNSIGNED_PAYLOAD);
        if let Some(range) = &range {
            if range.is_empty() {
                return Err(ClientError::Protocol(format!("the range {range:?} is empty")));
            }
            request = request.header("range", format!("bytes={}-{}", range.start, range.end - 1));
        }
        let mut response = request.call()?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
        };
        let (reply, etag) = (header(H_REPLY), header("etag"));
        if reply.as_deref() == Some("501") && matches!(status, 200 | 206) {
            let data = response.body_mut().with_config().limit(len as u64).read_to_vec()?;
            return Ok(Got { data, over_rdma: false, etag });
        }
        if !matches!(status, 200 | 206) {
            let body = response.body_mut().read_to_string().unwrap_or_default();
            return Err(ClientError::Refused { what: "GetObject", status, body });
        }
        let bytes = rdma_success(reply.as_deref(), header(H_BYTES).as_deref(), len)?;
        let data = self.window(bytes).expect("a window of at least `len` bytes");
        Ok(Got { data, over_rdma: true, etag })
    }

    /// PUTs `data` (1 byte or more) as `bucket`/`key`: the server RDMA READs it out of the
    /// window; in the body when the server declines.
    ///
    /// # Errors
    ///
    /// As [`Client::get`].
    pub fn put(&mut self, bucket: &str, key: &str, data: &[u8]) -> Result<Stored, ClientError> {
        let (b, creds) = (self.bucket(bucket)?, self.key.clone());
        let sign =
            |headers: &[(&str, String)]| signed(PutObject::new(&b, Some(&creds), key), headers);
        self.upload("PutObject", data, sign)
    }

    /// UploadPart `part` of the multipart upload `upload_id` of `bucket`/`key` with `data`
    /// (1 byte or more), as [`Client::put`].
    ///
    /// # Errors
    ///
    /// As [`Client::get`].
    pub fn upload_part(
        &mut self,
        bucket: &str,
        key: &str,
        upload_id: &str,
        part: u16,
        data: &[u8],
    ) -> Result<Stored, ClientError> {
        let (b, creds) = (self.bucket(bucket)?, self.key.clone());
        let sign = |headers: &[(&str, String)]| {
            signed(UploadPart::new(&b, Some(&creds), key, part, upload_id), headers)
        };
        self.upload("UploadPart", data, sign)
    }

    /// An upload of `data` through the window, its CRC64NVME sent for the server to check
    /// the bytes it read; again in the body on a decline. `sign` signs with the headers.
    fn upload(
        &mut self,
        what: &'static str,
        data: &[u8],
        sign: impl Fn(&[(&str, String)]) -> url::Url,
    ) -> Result<Stored, ClientError> {
        if data.is_empty() {
            return Err(ClientError::Protocol("an empty object is PUT over plain S3".into()));
        }
        self.reserve_put(data.len())?.as_mut_slice()[..data.len()].copy_from_slice(data);
        let checksum = base64_simd::STANDARD.encode_to_string(Crc64Nvme::checksum(data));
        let headers = [
            (H_TOKEN, self.token(Direction::Put, data.len())?.to_string()),
            ("x-amz-checksum-crc64nvme", checksum),
        ];
        let url = sign(&headers);
        let mut request =
            self.agent.put(url.as_str()).header("x-amz-content-sha256", UNSIGNED_PAYLOAD);
        for (name, value) in &headers {
            request = request.header(*name, value);
        }
        let mut response = request.send_empty()?;
        let status = response.status().as_u16();
        let header = |name: &str| {
            response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
        };
        let (reply, bytes, etag) = (header(H_REPLY), header(H_BYTES), header("etag"));
        if reply.as_deref() == Some("501") {
            return self.upload_in_body(what, data, &sign);
        }
        if status != 200 {
            let body = response.body_mut().read_to_string().unwrap_or_default();
            return Err(ClientError::Refused { what, status, body });
        }
        let moved = rdma_success(reply.as_deref(), bytes.as_deref(), data.len())?;
        if moved != data.len() {
            return Err(ClientError::Protocol(format!(
                "{what} moved {moved} of {} bytes",
                data.len()
            )));
        }
        Ok(Stored { etag, over_rdma: true })
    }

    fn upload_in_body(
        &self,
        what: &'static str,
        data: &[u8],
        sign: &impl Fn(&[(&str, String)]) -> url::Url,
    ) -> Result<Stored, ClientError> {
        let mut response = self.agent.put(sign(&[]).as_str()).send(data)?;
        let status = response.status().as_u16();
        if status != 200 {
            let body = response.body_mut().read_to_string().unwrap_or_default();
            return Err(ClientError::Refused { what, status, body });
        }
        let etag = response.headers().get("etag").and_then(|v| v.to_str().ok()).map(str::to_owned);
        Ok(Stored { etag, over_rdma: false })
    }
}

/// The presigned URL of `action` with `headers` among its signed headers.
fn signed<'a>(mut action: impl S3Action<'a>, headers: &[(&'a str, String)]) -> url::Url {
    for (name, value) in headers {
        action.headers_mut().insert(*name, value.clone());
    }
    action.sign(SIGNATURE_VALIDITY)
}

/// The bytes an RDMA success moved: its reply must be 200, 204 or 206, its byte count at
/// most `window`.
fn rdma_success(
    reply: Option<&str>,
    bytes: Option<&str>,
    window: usize,
) -> Result<usize, ClientError> {
    if !matches!(reply, Some("200" | "204" | "206")) {
        return Err(ClientError::Protocol(format!(
            "the answer's {H_REPLY} is {reply:?}, not a success"
        )));
    }
    bytes.and_then(|b| b.parse::<usize>().ok()).filter(|&b| b <= window).ok_or_else(|| {
        ClientError::Protocol(format!("the answer's {H_BYTES} is {bytes:?}, not 0 to {window}"))
    })
}
