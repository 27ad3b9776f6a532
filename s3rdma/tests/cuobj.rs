//! cuObject's `x-amz-rdma-token` end to end on the mock provider: the server's DC initiator
//! and the client's DCT in one process on the mock libmlx5, which carries out the DCI's RDMA
//! WRITEs and READs against the client's window; the HTTP side is the real server.
//!
//! The mock's objects belong to the thread that made them, so the initiator runs on the
//! test's thread ([`Initiators::on_this_thread`]) while the requests go from another.

use std::time::Duration;

use rdma_verbs::mlx5::Mlx5Context;
use rdma_verbs::Context;
use rdma_verbs_mock::mlx5 as mock_mlx5;
use rdma_verbs_mock::{ContextConfig, Mock};
use rusty_s3::actions::CreateMultipartUpload;
use rusty_s3::{Bucket, S3Action, UrlStyle};
use s3rdma::cuobj::client::{Client, ClientError, Direction, Target};
use s3rdma::cuobj::{DcConfig, Initiators, DEFAULT_DC_KEY};
use s3rdma::hipobj::{RcRoute, SessionLimits};
use s3rdma::{Credentials, Limits, SizeLimits, Store};
use s3s::crypto::{Checksum, Md5};

const KEY: &str = "dc-key";
const SECRET: &str = "dc-secret";
const EXPIRES: Duration = Duration::from_secs(300);
/// Index 3 of the mock port's GID table: its RoCE v2 IPv4-mapped entry.
const SGID_INDEX: u8 = 3;
const BUCKET: &str = "dc-objects";

/// What a test's requests see: the server, the client, plain S3 for the rest.
struct Harness {
    endpoint: String,
    client: Client,
    agent: ureq::Agent,
    credentials: rusty_s3::Credentials,
    root: std::path::PathBuf,
}

impl Harness {
    fn bucket(&self) -> Bucket {
        Bucket::new(self.endpoint.parse().unwrap(), UrlStyle::Path, BUCKET, "us-east-1").unwrap()
    }

    /// Sends `method` to `url` with `headers` and `body`: the status, headers and body.
    fn send(
        &self,
        method: &str,
        url: &url::Url,
        headers: &[(&str, String)],
        body: &[u8],
    ) -> (u16, http::HeaderMap, Vec<u8>) {
        let mut request = ureq::http::Request::builder().method(method).uri(url.as_str());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let mut response = self.agent.run(request.body(body.to_vec()).unwrap()).unwrap();
        let body = response.body_mut().with_config().limit(u64::MAX).read_to_vec().unwrap();
        (response.status().as_u16(), response.headers().clone(), body)
    }

    /// The presigned URL of `action` with `headers` signed.
    fn signed<'a>(&self, mut action: impl S3Action<'a>, headers: &[(&'a str, String)]) -> url::Url {
        for (name, value) in headers {
            action.headers_mut().insert(*name, value.clone());
        }
        action.sign(EXPIRES)
    }

    /// The object `key` over plain S3.
    fn plain_get(&self, key: &str) -> (u16, Vec<u8>) {
        let bucket = self.bucket();
        let url = self.signed(bucket.get_object(Some(&self.credentials), key), &[]);
        let (status, _, body) = self.send("GET", &url, &[], b"");
        (status, body)
    }

    fn stored(&self, key: &str) -> bool {
        self.root.join(BUCKET).join(key).exists()
    }

    /// Zeroes the client's window of `len` bytes, so that only a transfer can fill it.
    fn clear_window(&mut self, len: usize) {
        self.client.reserve_get(len).unwrap().write(0, &vec![0; len]).unwrap();
    }
}

/// Runs `test` against a server whose DC initiator, when `server_dc`, runs on the mock
/// device (else the gate refuses it, as on a device without DC), with a client whose DCT is
/// on the same mock device.
fn with_dc(server_dc: bool, config: DcConfig, test: impl FnOnce(&mut Harness) + Send + 'static) {
    let mock = Mock::new();
    mock_mlx5::configure(mock_mlx5::DeviceConfig::default());
    let raw = mock.context(ContextConfig::default());
    // SAFETY: a fresh context of the DC mock library; it is leaked, as the server and the
    // client keep their devices for the process's life, and never used after the mock.
    let ctx: &'static Context = Box::leak(Box::new(unsafe {
        Context::from_raw(mock_mlx5::ibverbs_library(), raw, rdma_verbs_mock::DEVICE_NAME.into())
    }));
    // SAFETY: the mock libmlx5 keeps libmlx5's contracts over this mock's objects.
    let gate = |supported| unsafe { Mlx5Context::with_library(ctx, mock_mlx5::library(supported)) };

    let root = tempfile::tempdir().unwrap();
    std::fs::create_dir(root.path().join(BUCKET)).unwrap();
    let sizes = SizeLimits { max_object: 64 << 20, max_part: 32 << 20 };
    let (store, _) = Store::open(root.path().to_path_buf(), sizes).unwrap();
    let worker = match gate(server_dc) {
        Ok(mlx5) => {
            let (pool, worker) =
                Initiators::on_this_thread(mlx5, Some(SGID_INDEX), config).unwrap();
            store.serve_cuobj(pool);
            Some(worker)
        }
        Err(e) => {
            assert!(matches!(e, rdma_verbs::Error::Unsupported { .. }), "{e}");
            None
        }
    };
    let keys = [Credentials { access_key_id: KEY.into(), secret_access_key: SECRET.into() }];
    let rc = RcRoute::new(store.clone(), None, SessionLimits::default());
    let service = s3rdma::service(store, &keys, rc);
    let runtime =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let limits = Limits {
        max_connections: 16,
        max_body: 80 << 20,
        max_header_bytes: 16 << 10,
        header_timeout: Duration::from_secs(10),
        body_idle_timeout: Duration::from_secs(10),
    };
    runtime.spawn(s3rdma::serve(listener, service, limits));

    let target = Target::new(gate(true).unwrap(), Some(SGID_INDEX), DEFAULT_DC_KEY).unwrap();
    let mut client = Client::new(&endpoint, keys[0].clone(), target).unwrap();
    // Registered here: the mock's verbs work on this thread only.
    client.reserve_get(8 << 20).unwrap();
    client.reserve_put(8 << 20).unwrap();
    let mut harness = Harness {
        endpoint,
        client,
        agent: ureq::Agent::config_builder().http_status_as_error(false).build().into(),
        credentials: rusty_s3::Credentials::new(KEY, SECRET),
        root: root.path().to_path_buf(),
    };
    let requests = std::thread::spawn(move || {
        test(&mut harness);
        // The server (and with it the pool) goes, so the initiator's loop below ends; on a
        // panic, unwinding drops it too.
        drop(runtime);
        harness
    });
    if let Some(worker) = worker {
        worker.run().unwrap();
    }
    match requests.join() {
        Ok(harness) => drop(harness), // the window is deregistered on the mock's thread
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

/// `len` bytes that differ from block to block.
fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 1000) as u8).collect()
}

fn md5_hex(bytes: &[u8]) -> String {
    Md5::checksum(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// Small chunks, so that each transfer takes several RDMA operations.
fn chunked() -> DcConfig {
    DcConfig { chunk: 64 << 10, ..DcConfig::default() }
}

#[test]
fn a_put_then_a_get_and_a_ranged_get_move_the_bytes_over_rdma() {
    with_dc(true, chunked(), |h| {
        let object = data((3 << 20) + 12345);
        let stored = h.client.put(BUCKET, "a/object", &object).unwrap();
        assert!(stored.over_rdma);
        assert_eq!(stored.etag.as_deref(), Some(format!("\"{}\"", md5_hex(&object)).as_str()));
        assert!(std::fs::read(h.root.join(BUCKET).join("a/object")).unwrap() == object);
        assert!(h.plain_get("a/object").1 == object);

        h.clear_window(object.len());
        let got = h.client.get(BUCKET, "a/object", None, object.len()).unwrap();
        assert!(got.over_rdma);
        assert!(got.data == object, "the GET's bytes differ");

        // A range lands at the window's base, as 206 with Content-Range and an empty body.
        h.clear_window(object.len());
        let token = h.client.token(Direction::Get, 1 << 20).unwrap().to_string();
        let bucket = h.bucket();
        let url = h.signed(
            bucket.get_object(Some(&h.credentials), "a/object"),
            &[("x-amz-rdma-token", token.clone())],
        );
        let range = 1_000_000..1_900_000;
        let headers = [
            ("x-amz-rdma-token", token),
            ("range", format!("bytes={}-{}", range.start, range.end - 1)),
        ];
        let (status, headers, body) = h.send("GET", &url, &headers, b"");
        assert_eq!(status, 206);
        assert!(body.is_empty());
        let header = |name: &str| headers.get(name).unwrap().to_str().unwrap().to_owned();
        assert_eq!(header("content-length"), "0");
        assert_eq!(header("x-amz-rdma-reply"), "206");
        assert_eq!(header("x-amz-rdma-bytes-transferred"), "900000");
        assert_eq!(header("content-range"), format!("bytes 1000000-1899999/{}", object.len()));
        assert!(h.client.window(range.len()).unwrap() == object[range]);
    });
}

#[test]
fn upload_parts_go_over_rdma_and_complete_as_any_other() {
    with_dc(true, chunked(), |h| {
        let bucket = h.bucket();
        let create = bucket.create_multipart_upload(Some(&h.credentials), "parts");
        let (status, _, reply) = h.send("POST", &create.sign(EXPIRES), &[], b"");
        assert_eq!(status, 200);
        let upload =
            CreateMultipartUpload::parse_response(std::str::from_utf8(&reply).unwrap()).unwrap();
        let parts = [data(5 << 20), data(777)];
        let mut etags = Vec::new();
        for (number, part) in (1..).zip(&parts) {
            let stored =
                h.client.upload_part(BUCKET, "parts", upload.upload_id(), number, part).unwrap();
            assert!(stored.over_rdma);
            etags.push(stored.etag.unwrap());
        }
        let complete = bucket.complete_multipart_upload(
            Some(&h.credentials),
            "parts",
            upload.upload_id(),
            etags.iter().map(String::as_str),
        );
        let (status, _, reply) =
            h.send("POST", &complete.sign(EXPIRES), &[], complete.body().as_bytes());
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
        assert!(h.plain_get("parts").1 == parts.concat());
    });
}

#[test]
fn a_response_larger_than_the_window_and_a_malformed_token_are_refused_without_a_reply() {
    with_dc(true, chunked(), |h| {
        let object = data(100_000);
        h.client.put(BUCKET, "o", &object).unwrap();
        let err = h.client.get(BUCKET, "o", None, 99_999).unwrap_err();
        let ClientError::Refused { status: 400, body, .. } = &err else { panic!("{err}") };
        assert!(body.contains("InvalidArgument"), "{body}");

        let bucket = h.bucket();
        for token in ["zz", "0000000000001000:00001000"] {
            let headers = [("x-amz-rdma-token", token.to_string())];
            let url = h.signed(bucket.put_object(Some(&h.credentials), "bad"), &headers);
            let (status, reply, body) = h.send("PUT", &url, &headers, b"");
            assert_eq!(status, 400, "{}", String::from_utf8_lossy(&body));
            assert!(String::from_utf8_lossy(&body).contains("InvalidArgument"));
            assert!(!reply.contains_key("x-amz-rdma-reply"));
        }
        assert!(!h.stored("bad"));
    });
}

#[test]
fn a_put_is_checked_against_its_checksum_sizes_and_either_payload_hash() {
    with_dc(true, chunked(), |h| {
        let object = data(200_000);
        h.client.reserve_put(object.len()).unwrap().as_mut_slice()[..object.len()]
            .copy_from_slice(&object);
        let token = h.client.token(Direction::Put, object.len()).unwrap();
        let bucket = h.bucket();
        let put = |h: &Harness, key: &'static str, headers: &[(&'static str, String)]| {
            let url = h.signed(bucket.put_object(Some(&h.credentials), key), headers);
            h.send("PUT", &url, headers, b"")
        };
        // A checksum that is not the window's bytes: refused, nothing stored.
        let wrong = [
            ("x-amz-rdma-token", token.to_string()),
            ("x-amz-checksum-crc64nvme", "AAAAAAAAAAA=".to_string()),
        ];
        let (status, _, body) = put(h, "wrong", &wrong);
        assert_eq!(status, 400);
        assert!(String::from_utf8_lossy(&body).contains("BadDigest"));
        assert!(!h.stored("wrong"));

        // A 0-byte window: refused, never a 0-byte object.
        let empty = s3rdma::cuobj::Descriptor { size: 0, ..token };
        let (status, _, _) = put(h, "empty", &[("x-amz-rdma-token", empty.to_string())]);
        assert_eq!(status, 400);
        assert!(!h.stored("empty"));

        // The hash of the empty body, signed, as some clients send it.
        let empty_hash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";
        let hashed = [
            ("x-amz-rdma-token", token.to_string()),
            ("x-amz-content-sha256", empty_hash.to_string()),
        ];
        let (status, headers, body) = put(h, "hashed", &hashed);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
        assert_eq!(headers.get("x-amz-rdma-reply").unwrap(), "200");
        assert_eq!(headers.get("x-amz-rdma-bytes-transferred").unwrap(), "200000");
        assert!(h.plain_get("hashed").1 == object);
    });
}

#[test]
fn a_transfer_above_the_servers_largest_is_declined() {
    let config = DcConfig { max_transfer: 100_000, ..chunked() };
    with_dc(true, config, |h| {
        let object = data(150_000);
        let stored = h.client.put(BUCKET, "big", &object).unwrap();
        assert!(!stored.over_rdma, "declined, then sent in the body");
        let got = h.client.get(BUCKET, "big", None, object.len()).unwrap();
        assert!(!got.over_rdma && got.data == object);
        h.clear_window(object.len());
        let small = h.client.get(BUCKET, "big", Some(0..1000), 1000).unwrap();
        assert!(small.over_rdma && small.data == object[..1000]);
    });
}

#[test]
fn without_a_dc_device_a_get_is_served_in_the_body_and_a_put_declined_with_nothing_stored() {
    with_dc(false, DcConfig::default(), |h| {
        let object = data(70_000);
        let bucket = h.bucket();
        let url = h.signed(bucket.put_object(Some(&h.credentials), "plain"), &[]);
        assert_eq!(h.send("PUT", &url, &[], &object).0, 200);

        let token = h.client.token(Direction::Get, object.len()).unwrap().to_string();
        let headers = [("x-amz-rdma-token", token)];
        let url = h.signed(bucket.get_object(Some(&h.credentials), "plain"), &headers);
        let (status, reply, body) = h.send("GET", &url, &headers, b"");
        assert_eq!(status, 200);
        assert_eq!(reply.get("x-amz-rdma-reply").unwrap(), "501");
        assert!(body == object);

        let url = h.signed(bucket.put_object(Some(&h.credentials), "declined"), &headers);
        let (status, reply, body) = h.send("PUT", &url, &headers, b"");
        assert_eq!(status, 501);
        assert_eq!(reply.get("x-amz-rdma-reply").unwrap(), "501");
        assert!(String::from_utf8_lossy(&body).contains("NotImplemented"));
        assert!(!h.stored("declined"));

        // The client falls back to the body on the decline.
        let stored = h.client.put(BUCKET, "fallback", &object).unwrap();
        assert!(!stored.over_rdma);
        assert!(h.plain_get("fallback").1 == object);
        let got = h.client.get(BUCKET, "fallback", None, object.len()).unwrap();
        assert!(!got.over_rdma && got.data == object);
    });
}

#[test]
fn a_transfer_the_window_refuses_is_a_500_and_the_next_one_goes_through() {
    with_dc(true, chunked(), |h| {
        let object = data(150_000);
        h.client.put(BUCKET, "o", &object).unwrap();
        let token = h.client.token(Direction::Get, object.len()).unwrap();
        // An rkey the client's window does not have: the DCI's operation fails.
        let wrong = s3rdma::cuobj::Descriptor { rkey: token.rkey ^ 0x100, ..token };
        let headers = [("x-amz-rdma-token", wrong.to_string())];
        let bucket = h.bucket();
        let url = h.signed(bucket.get_object(Some(&h.credentials), "o"), &headers);
        let (status, reply, body) = h.send("GET", &url, &headers, b"");
        assert_eq!(status, 500, "{}", String::from_utf8_lossy(&body));
        assert!(!reply.contains_key("x-amz-rdma-reply"));
        let url = h.signed(bucket.put_object(Some(&h.credentials), "p"), &headers);
        let (status, reply, body) = h.send("PUT", &url, &headers, b"");
        assert_eq!(status, 500, "{}", String::from_utf8_lossy(&body));
        assert!(!reply.contains_key("x-amz-rdma-reply"));
        assert!(!h.stored("p"));
        // A PUT's window is registered for remote reads only: a GET through its token, the
        // server writing into it, fails as well.
        let put_token = h.client.token(Direction::Put, object.len()).unwrap().to_string();
        let headers = [("x-amz-rdma-token", put_token)];
        let url = h.signed(bucket.get_object(Some(&h.credentials), "o"), &headers);
        let (status, _, body) = h.send("GET", &url, &headers, b"");
        assert_eq!(status, 500, "{}", String::from_utf8_lossy(&body));
        // The initiator was reset, and serves the next transfer.
        h.clear_window(object.len());
        let got = h.client.get(BUCKET, "o", None, object.len()).unwrap();
        assert!(got.over_rdma && got.data == object);
    });
}
