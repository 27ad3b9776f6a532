//! The server over HTTP: S3 requests signed as presigned URLs (rusty-s3) and sent with ureq,
//! and raw connections for what a well-behaved client never sends.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusty_s3::actions::{CreateMultipartUpload, ListObjectsV2};
use rusty_s3::{Bucket, Credentials, S3Action, UrlStyle};
use s3rdma::hipobj::client::Client;
use s3rdma::hipobj::{RcRoute, SessionLimits};
use s3rdma::{Limits, SizeLimits, Store};
use s3s::crypto::{Checksum, Md5};

const KEY: &str = "test-key";
const SECRET: &str = "test-secret";
const KEY2: &str = "second-key";
const SECRET2: &str = "second-secret";
const EXPIRES: Duration = Duration::from_secs(300);
/// The names of the files being written (the crate's layout).
const TEMP_PREFIX: &str = ".s3rdma-tmp-";

/// A server on a free port over a fresh root, running until dropped.
struct Server {
    addr: SocketAddr,
    root: tempfile::TempDir,
    credentials: Credentials,
    agent: ureq::Agent,
    _runtime: tokio::runtime::Runtime,
}

fn limits() -> Limits {
    Limits {
        max_connections: 16,
        max_body: 64 << 20,
        max_header_bytes: 16 << 10,
        header_timeout: Duration::from_secs(10),
        body_idle_timeout: Duration::from_secs(10),
    }
}

const SIZES: SizeLimits = SizeLimits { max_object: 32 << 20, max_part: 16 << 20 };

impl Server {
    fn start(limits: Limits) -> Self {
        Self::start_in(tempfile::tempdir().unwrap(), limits)
    }

    fn start_in(root: tempfile::TempDir, limits: Limits) -> Self {
        let (store, _) = Store::open(root.path().to_path_buf(), SIZES).unwrap();
        let keys = [
            s3rdma::Credentials { access_key_id: KEY.into(), secret_access_key: SECRET.into() },
            s3rdma::Credentials { access_key_id: KEY2.into(), secret_access_key: SECRET2.into() },
        ];
        // No RDMA device: the hipobj-rc-v2 routes decline.
        let rc = RcRoute::new(store.clone(), None, SessionLimits::default());
        let service = s3rdma::service(store, &keys, rc);
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
        let addr = listener.local_addr().unwrap();
        runtime.spawn(s3rdma::serve(listener, service, limits));
        let agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
        Self { addr, root, credentials: Credentials::new(KEY, SECRET), agent, _runtime: runtime }
    }

    fn bucket(&self, name: &str) -> Bucket {
        Bucket::new(
            format!("http://{}", self.addr).parse().unwrap(),
            UrlStyle::Path,
            name.to_owned(),
            "us-east-1",
        )
        .unwrap()
    }

    /// A bucket named `name`, created.
    fn created(&self, name: &str) -> Bucket {
        let bucket = self.bucket(name);
        let (status, _) = self.send(
            "PUT",
            bucket.create_bucket(&self.credentials).sign(EXPIRES).as_str(),
            b"",
            &[],
        );
        assert_eq!(status, 200);
        bucket
    }

    /// Sends a request; the status and the body.
    fn send(
        &self,
        method: &str,
        url: &str,
        body: &[u8],
        headers: &[(&str, &str)],
    ) -> (u16, Vec<u8>) {
        let mut request = ureq::http::Request::builder().method(method).uri(url);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let mut response = self.agent.run(request.body(body.to_vec()).unwrap()).unwrap();
        (
            response.status().as_u16(),
            response.body_mut().with_config().limit(u64::MAX).read_to_vec().unwrap(),
        )
    }

    fn put(&self, bucket: &Bucket, key: &str, body: &[u8]) {
        let (status, reply) = self.send(
            "PUT",
            bucket.put_object(Some(&self.credentials), key).sign(EXPIRES).as_str(),
            body,
            &[],
        );
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    }

    fn get(&self, bucket: &Bucket, key: &str, headers: &[(&str, &str)]) -> (u16, Vec<u8>) {
        self.send(
            "GET",
            bucket.get_object(Some(&self.credentials), key).sign(EXPIRES).as_str(),
            b"",
            headers,
        )
    }

    fn list(
        &self,
        bucket: &Bucket,
        configure: impl FnOnce(&mut ListObjectsV2<'_>),
    ) -> rusty_s3::actions::ListObjectsV2Response {
        let mut action = bucket.list_objects_v2(Some(&self.credentials));
        configure(&mut action);
        let (status, body) = self.send("GET", action.sign(EXPIRES).as_str(), b"", &[]);
        assert_eq!(status, 200);
        ListObjectsV2::parse_response(std::str::from_utf8(&body).unwrap()).unwrap()
    }

    /// A raw connection to the server.
    fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(self.addr).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        stream
    }

    /// The files under the root whose names start with `prefix`.
    fn files_named(&self, prefix: &str) -> Vec<PathBuf> {
        fn walk(dir: &Path, prefix: &str, found: &mut Vec<PathBuf>) {
            for entry in std::fs::read_dir(dir).unwrap().flatten() {
                if entry.file_type().unwrap().is_dir() {
                    walk(&entry.path(), prefix, found);
                } else if entry.file_name().to_string_lossy().starts_with(prefix) {
                    found.push(entry.path());
                }
            }
        }
        let mut found = Vec::new();
        walk(self.root.path(), prefix, &mut found);
        found
    }
}

/// `len` bytes that differ from block to block.
fn data(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 1000) as u8).collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads what the server answers on `stream` until it closes the connection.
fn read_all(stream: &mut TcpStream) -> String {
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    String::from_utf8_lossy(&reply).into_owned()
}

#[test]
fn objects_are_stored_listed_read_in_ranges_and_deleted() {
    let server = Server::start(limits());
    let bucket = server.created("objects");
    let body = data(2_500_000);
    for key in ["dir/a.bin", "dir/sub/b.bin", "top"] {
        server.put(&bucket, key, &body);
    }
    assert!(server.root.path().join("objects/dir/sub/b.bin").is_file());

    let (status, got) = server.get(&bucket, "dir/a.bin", &[]);
    assert_eq!((status, got.len()), (200, body.len()));
    assert!(got == body);
    // Across the first block boundary (1 MiB), and a suffix.
    let (status, got) = server.get(&bucket, "dir/a.bin", &[("Range", "bytes=1048570-1048589")]);
    assert_eq!((status, got.as_slice()), (206, &body[1048570..1048590]));
    let (status, got) = server.get(&bucket, "dir/a.bin", &[("Range", "bytes=-10")]);
    assert_eq!((status, got.as_slice()), (206, &body[body.len() - 10..]));
    let (status, _) = server.get(&bucket, "dir/a.bin", &[("Range", "bytes=9999999-")]);
    assert_eq!(status, 416);

    let head = server
        .agent
        .head(bucket.head_object(Some(&server.credentials), "top").sign(EXPIRES).as_str())
        .call()
        .unwrap();
    let etag = head.headers().get("etag").unwrap().to_str().unwrap();
    assert_eq!(etag, format!("\"{}\"", hex(&Md5::checksum(&body))));

    let all = server.list(&bucket, |_| {});
    let keys: Vec<_> = all.contents.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["dir/a.bin", "dir/sub/b.bin", "top"]);
    let rolled = server.list(&bucket, |a| a.with_delimiter("/"));
    assert_eq!(rolled.contents.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), ["top"]);
    assert_eq!(
        rolled.common_prefixes.iter().map(|p| p.prefix.as_str()).collect::<Vec<_>>(),
        ["dir/"]
    );
    let first = server.list(&bucket, |a| a.with_max_keys(2));
    let token = first.next_continuation_token.clone().expect("a truncated listing gives a token");
    let rest = server.list(&bucket, |a| a.with_continuation_token(token));
    assert_eq!(rest.contents.iter().map(|o| o.key.as_str()).collect::<Vec<_>>(), ["top"]);
    assert!(rest.next_continuation_token.is_none());

    for key in ["dir/a.bin", "dir/sub/b.bin"] {
        let (status, _) = server.send(
            "DELETE",
            bucket.delete_object(Some(&server.credentials), key).sign(EXPIRES).as_str(),
            b"",
            &[],
        );
        assert_eq!(status, 204);
    }
    let (status, reply) = server.get(&bucket, "dir/a.bin", &[]);
    assert_eq!(status, 404);
    assert!(String::from_utf8_lossy(&reply).contains("NoSuchKey"));
    // The emptied directories went with their objects.
    assert!(!server.root.path().join("objects/dir").exists());
    assert!(!server.root.path().join(".s3rdma/meta/objects/dir").exists());
    let (status, reply) = server.send(
        "DELETE",
        bucket.delete_bucket(&server.credentials).sign(EXPIRES).as_str(),
        b"",
        &[],
    );
    assert_eq!(status, 409, "{}", String::from_utf8_lossy(&reply));
    assert!(String::from_utf8_lossy(&reply).contains("BucketNotEmpty"));
}

#[test]
fn a_key_cannot_also_be_a_directory_of_keys() {
    let server = Server::start(limits());
    let bucket = server.created("conflicts");
    server.put(&bucket, "a", b"file");
    let url = bucket.put_object(Some(&server.credentials), "a/b").sign(EXPIRES);
    let (status, reply) = server.send("PUT", url.as_str(), b"under a file", &[]);
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&reply).contains("InvalidRequest"));
    server.put(&bucket, "d/e", b"x");
    let (status, _) = server.send(
        "PUT",
        bucket.put_object(Some(&server.credentials), "d").sign(EXPIRES).as_str(),
        b"over a directory",
        &[],
    );
    assert_eq!(status, 400);
    assert_eq!(server.get(&bucket, "d/e", &[]).1, b"x");
    // A directory of keys is no object.
    assert_eq!(server.get(&bucket, "d", &[]).0, 404);
    assert!(server.files_named(TEMP_PREFIX).is_empty(), "a refused write left a temporary file");
}

#[test]
fn a_multipart_upload_is_assembled_with_s3s_etag() {
    let server = Server::start(limits());
    let bucket = server.created("multipart");
    let create = bucket.create_multipart_upload(Some(&server.credentials), "big/object");
    let (status, reply) = server.send("POST", create.sign(EXPIRES).as_str(), b"", &[]);
    assert_eq!(status, 200);
    let upload =
        CreateMultipartUpload::parse_response(std::str::from_utf8(&reply).unwrap()).unwrap();
    let id = upload.upload_id();
    let parts = [data(5 << 20), data(1234)];
    let mut etags = Vec::new();
    for (number, part) in (1..).zip(&parts) {
        let url =
            bucket.upload_part(Some(&server.credentials), "big/object", number, id).sign(EXPIRES);
        let response = server.agent.put(url.as_str()).send(part.as_slice()).unwrap();
        assert_eq!(response.status(), 200);
        etags.push(response.headers().get("etag").unwrap().to_str().unwrap().to_owned());
    }
    let complete = bucket.complete_multipart_upload(
        Some(&server.credentials),
        "big/object",
        id,
        etags.iter().map(String::as_str),
    );
    let url = complete.sign(EXPIRES);
    let (status, reply) = server.send("POST", url.as_str(), complete.body().as_bytes(), &[]);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&reply));
    // S3's multipart ETag: the MD5 of the parts' MD5s, `-`, the number of parts.
    let md5s: Vec<u8> = parts.iter().flat_map(|p| Md5::checksum(p)).collect();
    let expected = format!("{}-2", hex(&Md5::checksum(&md5s)));
    assert!(
        String::from_utf8_lossy(&reply).contains(&expected),
        "{}",
        String::from_utf8_lossy(&reply)
    );
    let (status, got) = server.get(&bucket, "big/object", &[]);
    assert_eq!(status, 200);
    assert!(got == parts.concat());
    assert!(std::fs::read_dir(server.root.path().join(".s3rdma/uploads"))
        .unwrap()
        .next()
        .is_none());

    // A part but the last under 5 MiB is refused, as S3 does.
    let (_, reply) = server.send("POST", create.sign(EXPIRES).as_str(), b"", &[]);
    let upload =
        CreateMultipartUpload::parse_response(std::str::from_utf8(&reply).unwrap()).unwrap();
    let mut etags = Vec::new();
    for number in 1..=2 {
        let url = bucket
            .upload_part(Some(&server.credentials), "big/object", number, upload.upload_id())
            .sign(EXPIRES);
        let response = server.agent.put(url.as_str()).send(&b"small"[..]).unwrap();
        etags.push(response.headers().get("etag").unwrap().to_str().unwrap().to_owned());
    }
    let complete = bucket.complete_multipart_upload(
        Some(&server.credentials),
        "big/object",
        upload.upload_id(),
        etags.iter().map(String::as_str),
    );
    let (status, reply) =
        server.send("POST", complete.sign(EXPIRES).as_str(), complete.body().as_bytes(), &[]);
    assert_eq!(status, 400);
    assert!(String::from_utf8_lossy(&reply).contains("EntityTooSmall"));
    assert!(
        server.get(&bucket, "big/object", &[]).1 == parts.concat(),
        "a refused completion replaced the object"
    );
}

#[test]
fn a_byte_flipped_on_disk_is_never_served() {
    let server = Server::start(limits());
    let bucket = server.created("corrupt");
    let body = data(3 << 20);
    server.put(&bucket, "object", &body);
    let file = server.root.path().join("corrupt/object");
    let flip = |offset: usize| {
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[offset] ^= 0x01;
        std::fs::write(&file, bytes).unwrap();
    };
    let meta =
        std::fs::read_to_string(server.root.path().join(".s3rdma/meta/corrupt/object")).unwrap();

    // In the last block: the first two blocks are sent, then the response is cut short.
    flip((5 << 19) + 3);
    let response = server
        .agent
        .get(bucket.get_object(Some(&server.credentials), "object").sign(EXPIRES).as_str())
        .call()
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(
        response.into_body().with_config().limit(u64::MAX).read_to_vec().is_err(),
        "a corrupt object was read whole"
    );
    // Ranges of intact blocks are served; one over the flipped byte is not.
    let (status, got) = server.get(&bucket, "object", &[("Range", "bytes=0-99")]);
    assert_eq!((status, got.as_slice()), (206, &body[..100]));
    let (status, reply) = server.get(&bucket, "object", &[("Range", "bytes=2621440-2621449")]);
    assert_eq!(status, 500);
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.contains("InternalError"), "{reply}");
    // No checksum, stored or computed, is in the answer.
    let stored: serde_json::Value = serde_json::from_str(&meta).unwrap();
    assert!(!reply.contains(stored["crc64nvme"].as_str().unwrap()));
    for crc in stored["block_crc64nvme"].as_array().unwrap() {
        assert!(!reply.contains(&crc.to_string()));
    }
    // In the first block: an error status before any byte.
    flip(10);
    let (status, _) = server.get(&bucket, "object", &[]);
    assert_eq!(status, 500);
}

#[test]
fn requests_not_signed_with_the_configured_secret_are_refused() {
    let server = Server::start(limits());
    let bucket = server.created("private");
    server.put(&bucket, "k", b"secret data");
    let wrong = Credentials::new(KEY, "not-the-secret");
    let unknown = Credentials::new("someone-else", SECRET);
    for credentials in [Some(&wrong), Some(&unknown), None] {
        let url = bucket.get_object(credentials, "k").sign(EXPIRES);
        let (status, reply) = server.send("GET", url.as_str(), b"", &[]);
        assert_eq!(status, 403, "{}", String::from_utf8_lossy(&reply));
        assert!(!String::from_utf8_lossy(&reply).contains("secret data"));
        let url = bucket.put_object(credentials, "k").sign(EXPIRES);
        assert_eq!(server.send("PUT", url.as_str(), b"overwritten", &[]).0, 403);
    }
    assert_eq!(server.get(&bucket, "k", &[]).1, b"secret data");
}

#[test]
fn bad_content_lengths_and_huge_headers_get_a_clear_4xx() {
    let server = Server::start(limits());
    let bucket = server.created("limits");
    let path = |key: &str| {
        let url = bucket.put_object(Some(&server.credentials), key).sign(EXPIRES);
        format!("{}?{}", url.path(), url.query().unwrap())
    };
    // Refused by hyper (not a number), or by the server before the body is read.
    let too_large = "<Code>EntityTooLarge</Code><Message>this server accepts request bodies";
    for (length, status, code) in [
        ("99999999999999999999999", "400", ""),
        ("12abc", "400", ""),
        ("1000000000000000", "400", too_large),
        ("67108865", "400", too_large), // limits().max_body + 1
    ] {
        let mut stream = server.connect();
        write!(
            stream,
            "PUT {} HTTP/1.1\r\nHost: {}\r\nContent-Length: {length}\r\n\r\n",
            path("big"),
            server.addr
        )
        .unwrap();
        let reply = read_all(&mut stream);
        assert!(
            reply.starts_with(&format!("HTTP/1.1 {status}")),
            "Content-Length {length}: {reply}"
        );
        assert!(reply.contains(code), "Content-Length {length}: {reply}");
    }
    // Within the HTTP limit but over the object size: refused on the declared length.
    let mut stream = server.connect();
    write!(
        stream,
        "PUT {} HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
        path("big"),
        server.addr,
        SIZES.max_object + 1
    )
    .unwrap();
    assert!(read_all(&mut stream).contains("EntityTooLarge"));

    let mut stream = server.connect();
    let huge = "x".repeat(64 << 10);
    // The server may answer and close before all of it is written: the write may fail.
    let _ = write!(
        stream,
        "GET {} HTTP/1.1\r\nHost: {}\r\nX-Big: {huge}\r\n\r\n",
        path("k"),
        server.addr
    );
    let reply = read_all(&mut stream);
    assert!(reply.starts_with("HTTP/1.1 431"), "{reply}");
    assert!(server.files_named(TEMP_PREFIX).is_empty());
}

#[test]
fn a_stalled_upload_is_cut_off_without_blocking_others() {
    let idle = Duration::from_secs(1);
    let server = Server::start(Limits { body_idle_timeout: idle, ..limits() });
    let bucket = server.created("stall");
    let url = bucket.put_object(Some(&server.credentials), "stalled").sign(EXPIRES);
    let mut stalled = server.connect();
    write!(
        stalled,
        "PUT {}?{} HTTP/1.1\r\nHost: {}\r\nContent-Length: 100\r\n\r\n0123456789",
        url.path(),
        url.query().unwrap(),
        server.addr
    )
    .unwrap();
    let start = Instant::now();
    // Others are served meanwhile.
    server.put(&bucket, "other", b"fine");
    assert_eq!(server.get(&bucket, "other", &[]).1, b"fine");
    let reply = read_all(&mut stalled);
    let waited = start.elapsed();
    assert!(reply.contains("RequestTimeout"), "{reply}");
    assert!(waited >= idle && waited < idle * 10, "cut off after {waited:?}");
    assert_eq!(server.get(&bucket, "stalled", &[]).0, 404);
    assert!(
        server.files_named(TEMP_PREFIX).is_empty(),
        "the stalled upload left its temporary file"
    );
}

#[test]
fn connections_beyond_the_limit_wait_for_a_free_one() {
    let server = Server::start(Limits { max_connections: 1, ..limits() });
    // No other client: any answer (here 404, no such bucket) shows the request was served.
    let url = server.bucket("none").get_object(Some(&server.credentials), "k").sign(EXPIRES);
    let request = format!(
        "GET {}?{} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
        url.path(),
        url.query().unwrap(),
        server.addr
    );
    let holder = server.connect(); // the one connection served, idle
    std::thread::sleep(Duration::from_millis(200));
    let mut waiting = server.connect();
    waiting.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    waiting.write_all(request.as_bytes()).unwrap();
    let mut byte = [0];
    let err = waiting.read(&mut byte).expect_err("a connection beyond the limit was served");
    assert!(
        matches!(err.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        "{err}"
    );
    drop(holder);
    let start = Instant::now();
    waiting.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let reply = read_all(&mut waiting);
    assert!(reply.starts_with("HTTP/1.1 404"), "{reply}");
    // Served when the holder left, not when the server timed it out (header timeout: 10 s).
    assert!(start.elapsed() < Duration::from_secs(5), "served after {:?}", start.elapsed());
}

#[test]
fn stale_temporary_files_are_removed_at_start() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("bucket/some/dir");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(".s3rdma-tmp-0123456789abcdef"), b"half written").unwrap();
    std::fs::write(dir.join("kept"), b"a file").unwrap();
    // A directory that is not a bucket name (a file system's lost+found) is no bucket.
    std::fs::create_dir(root.path().join("lost+found")).unwrap();
    let (store, removed) = Store::open(root.path().to_path_buf(), SIZES).unwrap();
    assert_eq!(removed, 1);
    assert_eq!(store.bucket_names().unwrap(), ["bucket"]);
    assert!(dir.join("kept").exists());
    assert!(!dir.join(".s3rdma-tmp-0123456789abcdef").exists());
    let server = Server::start_in(root, limits());
    assert_eq!(
        server.list(&server.bucket("bucket"), |_| {}).contents.len(),
        0,
        "a file without metadata was listed"
    );
}

#[test]
fn credentials_are_required_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.json");
    assert!(s3rdma::Credentials::load(Some(&missing)).unwrap_err().contains("cannot read"));
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, b"{\"access_key_id\": \"k\"}").unwrap();
    assert!(s3rdma::Credentials::load(Some(&bad)).unwrap_err().contains("secret_access_key"));
    std::fs::write(&bad, b"{\"access_key_id\": \"k\", \"secret_access_key\": \" \"}").unwrap();
    assert!(s3rdma::Credentials::load(Some(&bad)).unwrap_err().contains("must not be empty"));
    let good = dir.path().join("good.json");
    std::fs::write(&good, b"{\"access_key_id\": \"k\", \"secret_access_key\": \"s\"}").unwrap();
    let loaded = s3rdma::Credentials::load(Some(&good)).unwrap();
    assert_eq!(loaded.len(), 1);
    assert_eq!(
        (loaded[0].access_key_id.as_str(), loaded[0].secret_access_key.as_str()),
        ("k", "s")
    );
    assert!(!format!("{loaded:?}").contains("\"s\""), "Debug shows the secret");
    let two = br#"[{"access_key_id": "k", "secret_access_key": "s"},
                   {"access_key_id": "l", "secret_access_key": "t"}]"#;
    std::fs::write(&good, two).unwrap();
    let loaded = s3rdma::Credentials::load(Some(&good)).unwrap();
    assert_eq!(loaded.iter().map(|k| k.access_key_id.as_str()).collect::<Vec<_>>(), ["k", "l"]);
    std::fs::write(
        &bad,
        br#"[{"access_key_id": "k", "secret_access_key": "s"},
                             {"access_key_id": "k", "secret_access_key": "t"}]"#,
    )
    .unwrap();
    assert!(s3rdma::Credentials::load(Some(&bad)).unwrap_err().contains("listed twice"));
    std::fs::write(&bad, b"[]").unwrap();
    assert!(s3rdma::Credentials::load(Some(&bad)).unwrap_err().contains("empty"));
}

#[test]
fn a_second_key_signs_too() {
    let server = Server::start(limits());
    let bucket = server.created("shared");
    let second = Credentials::new(KEY2, SECRET2);
    let url = bucket.put_object(Some(&second), "k").sign(EXPIRES);
    assert_eq!(server.send("PUT", url.as_str(), b"from the second key", &[]).0, 200);
    assert_eq!(server.get(&bucket, "k", &[]).1, b"from the second key");
}

#[test]
fn without_a_device_the_rc_routes_decline_with_the_unsupported_marker() {
    let server = Server::start(limits());
    let key = s3rdma::Credentials { access_key_id: KEY.into(), secret_access_key: SECRET.into() };
    let client = Client::new(&format!("http://{}", server.addr), key).unwrap();
    for route in ["prepare", "ready", "cancel"] {
        let reply = client.post(route, &[("x-amz-rdma-protocol", "hipobj-rc-v2".into())]).unwrap();
        assert_eq!(reply.status, 501, "{route}: {}", reply.body);
        assert_eq!(reply.headers["x-amz-rdma-protocol-status"], "unsupported");
    }
    // A protocol header outside the signature: refused.
    let mut url = url::Url::parse(&format!("http://{}/.hipobj-rc/prepare", server.addr)).unwrap();
    url = rusty_s3::signing::sign(
        &jiff::Timestamp::now(),
        rusty_s3::Method::Post,
        url,
        KEY,
        SECRET,
        None,
        "us-east-1",
        EXPIRES.as_secs(),
        std::iter::empty(),
        std::iter::empty(),
    );
    let (status, reply) =
        server.send("POST", url.as_str(), b"", &[("x-amz-rdma-protocol", "hipobj-rc-v2")]);
    assert_eq!(status, 403, "{}", String::from_utf8_lossy(&reply));
    assert!(String::from_utf8_lossy(&reply).contains("not among the signed headers"));
    // Unsigned: refused before the route is reached.
    let url = format!("http://{}/.hipobj-rc/prepare", server.addr);
    let (status, _) = server.send("POST", &url, b"", &[]);
    assert_eq!(status, 403);
    // Wrongly signed: s3s's check refuses it.
    let wrong =
        s3rdma::Credentials { access_key_id: KEY.into(), secret_access_key: "wrong".into() };
    let client = Client::new(&format!("http://{}", server.addr), wrong).unwrap();
    assert_eq!(client.post("prepare", &[]).unwrap().status, 403);
    // No S3 operation reaches the routes' prefix as a bucket.
    let rc = server.bucket(".hipobj-rc");
    let url = rc.create_bucket(&server.credentials).sign(EXPIRES);
    assert_eq!(server.send("PUT", url.as_str(), b"", &[]).0, 405);
}
