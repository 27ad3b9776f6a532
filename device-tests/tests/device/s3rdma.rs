//! s3rdma (crate `rdma-verbs-s3rdma`) on rxe0: hipobj-rc-v2 PUT and GET of 4 KiB and 1 MiB
//! through `s3rdma put/get --rdma`, byte for byte and committed as any PutObject; a READY with
//! the wrong cookie, and READY and CANCEL of another access key, answered as for no session
//! while the owner's session goes on; an empty object, which RDMA does not move; sessions
//! limited per key and removed at the prepare deadline; a client's WRITE to another's staging
//! region, which reaches nothing. Ports 19200–19209.
//!
//! Large transfers through the library's client (ports 19220–19229): PUT and GET of 64 and
//! 192 MiB (GETs streamed through the server's ring, in ranges too) through one registered
//! buffer; parts of a multipart upload over RDMA; a byte flipped on disk, which fails the
//! GET over RDMA.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};
use std::time::Duration;

use rdma_verbs::{
    AccessFlags, CompletionQueue, Gid, Init, Psn, Qpn, QueuePair, RKey, RecvWr, RemoteAddr, Rts,
    SendFlags, SendWr, WorkCompletion,
};
use rdma_verbs_device_tests::{gid_index, require_device, RXE};
use rdma_verbs_test_support::process::{output_within, spawn_server, text};
use rdma_verbs_test_support::programs::binary;
use s3rdma::hipobj::client::{Client, ClientError, Reply};
use s3rdma::hipobj::{Device, Token};
use s3rdma::Credentials;

const LIMIT: Duration = Duration::from_secs(180);
const BUCKET: &str = "bucket";

fn key(n: u8) -> Credentials {
    Credentials { access_key_id: format!("key-{n}"), secret_access_key: format!("secret-{n}") }
}

fn key_json(k: &Credentials) -> String {
    format!(
        r#"{{"access_key_id": "{}", "secret_access_key": "{}"}}"#,
        k.access_key_id, k.secret_access_key
    )
}

/// `s3rdma serve` on rxe0 with keys 1 and 2 and a bucket, killed (and its root removed) on drop.
struct Server {
    child: Option<Child>,
    dir: PathBuf,
    port: u16,
}

impl Server {
    /// A server on `port` with `args` when rxe0 is there (none: the test is skipped).
    fn on_rxe(port: u16, args: &[&str]) -> Option<Server> {
        drop(require_device(RXE)?);
        let dir = std::env::temp_dir().join(format!("s3rdma-test-{port}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root").join(BUCKET)).unwrap();
        std::fs::write(
            dir.join("keys.json"),
            format!("[{}, {}]", key_json(&key(1)), key_json(&key(2))),
        )
        .unwrap();
        std::fs::write(dir.join("key1.json"), key_json(&key(1))).unwrap();
        let mut cmd = s3rdma(&["serve", "--root", dir.join("root").to_str().unwrap()]);
        cmd.args(["--listen", &format!("127.0.0.1:{port}"), "--credentials"])
            .arg(dir.join("keys.json"))
            .args(args);
        let child = spawn_server(cmd, port);
        Some(Server { child: Some(child), dir, port })
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `s3rdma ARGS` as key 1's client.
    fn cli(&self, args: &[&str]) -> Output {
        let mut cmd = s3rdma(args);
        cmd.args(["--endpoint", &self.endpoint(), "--credentials"]).arg(self.dir.join("key1.json"));
        output_within(cmd, LIMIT)
    }

    fn client(&self, n: u8) -> Client {
        Client::new(&self.endpoint(), key(n)).unwrap()
    }

    /// The stored file of `key` in the bucket.
    fn stored(&self, key: &str) -> PathBuf {
        self.dir.join("root").join(BUCKET).join(key)
    }
}

/// rxe0 with the RoCE v2 GID, as the client's device.
fn rxe_device() -> Device {
    Device::open(Some(RXE), Some(gid_index().parse().unwrap())).unwrap()
}

/// The data phase's deadline of the large transfers: the guest runs on an emulated CPU.
const SLOW_EXEC: [&str; 2] = ["--rdma-exec-timeout-ms", "170000"];

/// `got` is `want`, else the first offset where they differ.
fn same_bytes(got: &[u8], want: &[u8], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: the length");
    if got != want {
        let first = got.iter().zip(want).position(|(g, w)| g != w);
        panic!("{what}: differs from byte {first:?} on");
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `s3rdma ARGS` on rxe0 and its RoCE v2 GID.
fn s3rdma(args: &[&str]) -> Command {
    let mut cmd = Command::new(binary("s3rdma"));
    cmd.args(args).args(["--rdma-device", RXE, "--rdma-gid-index", &gid_index()]);
    cmd
}

fn data(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32).map(|i| (i ^ seed).wrapping_mul(0x9e37_79b9).rotate_left(11) as u8).collect()
}

fn succeeded(out: &Output, says: &str) {
    assert!(out.status.success(), "{}", text(out));
    assert!(String::from_utf8_lossy(&out.stdout).contains(says), "{}", text(out));
}

#[test]
fn puts_and_gets_of_4k_and_1m_over_rdma_are_byte_for_byte() {
    let Some(server) = Server::on_rxe(19200, &[]) else { return };
    for (seed, len) in [4096, 1 << 20].into_iter().enumerate() {
        let input = server.dir.join(format!("in-{len}"));
        let bytes = data(len, seed as u32);
        std::fs::write(&input, &bytes).unwrap();
        let object = format!("{BUCKET}/dir/obj-{len}");
        let put = server.cli(&["put", "--rdma", input.to_str().unwrap(), &object]);
        succeeded(&put, &format!("put {len} bytes over RDMA"));
        assert!(String::from_utf8_lossy(&put.stdout).contains("CRC64NVME "), "{}", text(&put));
        // Committed as any PutObject: the file, and its metadata with the stored checksums.
        let root = server.dir.join("root");
        assert!(
            std::fs::read(root.join(&object)).unwrap() == bytes,
            "{object}: the stored file differs"
        );
        assert!(root.join(".s3rdma/meta").join(&object).is_file());
        for rdma in [true, false] {
            let output = server.dir.join(format!("out-{len}-{rdma}"));
            let mut args = vec!["get", &object, output.to_str().unwrap()];
            if rdma {
                args.insert(1, "--rdma");
            }
            let get = server.cli(&args);
            succeeded(&get, &format!("got {len} bytes"));
            assert!(
                std::fs::read(&output).unwrap() == bytes,
                "{object} (rdma {rdma}): the copy differs"
            );
        }
    }
}

#[test]
fn an_empty_object_is_not_moved_over_rdma() {
    let Some(server) = Server::on_rxe(19202, &[]) else { return };
    let empty = server.dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    let object = format!("{BUCKET}/empty");
    let put = server.cli(&["put", "--rdma", empty.to_str().unwrap(), &object]);
    assert!(!put.status.success(), "{}", text(&put));
    assert!(String::from_utf8_lossy(&put.stderr).contains("use plain S3"), "{}", text(&put));
    succeeded(&server.cli(&["put", empty.to_str().unwrap(), &object]), "put 0 bytes");
    let output = server.dir.join("out");
    succeeded(&server.cli(&["get", "--rdma", &object, output.to_str().unwrap()]), "got 0 bytes");
    assert_eq!(std::fs::read(&output).unwrap(), b"");
}

/// A PREPARE of a 4 KiB `op` on `target` (a zero token: the client's QP on the server's GID).
fn prepare_reply(client: &Client, cookie: &str, (op, target): (&str, &str)) -> Reply {
    client
        .post(
            "prepare",
            &[
                ("x-amz-rdma-protocol", "hipobj-rc-v2".into()),
                ("x-amz-rdma-token", "0".repeat(88)),
                ("x-amz-rdma-psn", "000001".into()),
                ("x-amz-rdma-cookie", cookie.into()),
                ("x-amz-rdma-op", op.into()),
                ("x-amz-rdma-target", target.into()),
                ("x-amz-rdma-size", "4096".into()),
            ],
        )
        .unwrap()
}

/// [`prepare_reply`], which must succeed; the session id.
fn prepare(client: &Client, cookie: &str) -> String {
    let reply = prepare_reply(client, cookie, ("PUT", &format!("/{BUCKET}/k")));
    assert_eq!(reply.status, 200, "{}", reply.body);
    let header = |name: &str| reply.headers[name].to_str().unwrap().to_owned();
    assert_eq!(header("x-amz-rdma-protocol"), "hipobj-rc-v2");
    assert_eq!(header("x-amz-rdma-psn").len(), 6);
    assert!(header("x-amz-rdma-reply").starts_with("200:01"));
    header("x-amz-rdma-session")
}

fn ready(client: &Client, session: &str, cookie: &str) -> Reply {
    let headers = [
        ("x-amz-rdma-protocol", "hipobj-rc-v2".into()),
        ("x-amz-rdma-session", session.into()),
        ("x-amz-rdma-cookie", cookie.into()),
        // A QP that is not there: the data never comes.
        ("x-amz-rdma-qpn", "0000000000000123".into()),
    ];
    client.post("ready", &headers).unwrap()
}

fn cancel(client: &Client, session: &str) -> u16 {
    let headers =
        [("x-amz-rdma-protocol", "hipobj-rc-v2".into()), ("x-amz-rdma-session", session.into())];
    client.post("cancel", &headers).unwrap().status
}

#[test]
fn a_wrong_cookie_and_another_keys_requests_find_no_session() {
    // A 2 s data phase: READY of a session whose client never writes ends in 502.
    let Some(server) = Server::on_rxe(19201, &["--rdma-exec-timeout-ms", "2000"]) else { return };
    let (owner, other) = (server.client(1), server.client(2));
    let session = prepare(&owner, "0000abcd");
    let refused = ready(&owner, &session, "0000abce");
    assert_eq!(refused.status, 404, "wrong cookie: {}", refused.body);
    assert!(refused.body.contains("NoSuchRdmaSession"), "{}", refused.body);
    assert_eq!(ready(&other, &session, "0000abcd").status, 404, "another key's READY");
    assert_eq!(cancel(&other, &session), 204, "another key's CANCEL");
    // The session is still the owner's: its READY runs the data phase, and a second READY
    // meanwhile is a conflict.
    std::thread::scope(|s| {
        let first = s.spawn(|| ready(&owner, &session, "0000abcd"));
        std::thread::sleep(Duration::from_millis(500));
        let second = ready(&owner, &session, "0000abcd");
        assert_eq!(second.status, 409, "a second READY: {}", second.body);
        let first = first.join().unwrap();
        assert_eq!(first.status, 502, "no data within the deadline: {}", first.body);
    });
    // The session is over; a cancel of what is gone is answered the same.
    assert_eq!(ready(&owner, &session, "0000abcd").status, 404);
    assert_eq!(cancel(&owner, &session), 204);
    // A cancelled session is gone.
    let session = prepare(&owner, "00001234");
    assert_eq!(cancel(&owner, &session), 204);
    assert_eq!(ready(&owner, &session, "00001234").status, 404);
    assert!(
        !Path::new(&server.dir.join("root").join(BUCKET).join("k")).exists(),
        "nothing was stored"
    );
}

#[test]
fn sessions_are_limited_per_key_and_expire_at_the_prepare_deadline() {
    let limits = ["--rdma-max-sessions-per-key", "1", "--rdma-prepare-timeout-ms", "3000"];
    let Some(server) = Server::on_rxe(19203, &limits) else { return };
    let (one, two) = (server.client(1), server.client(2));
    let first = prepare(&one, "00000001");
    let refused = prepare_reply(&one, "00000002", ("PUT", &format!("/{BUCKET}/k")));
    assert_eq!(refused.status, 429, "{}", refused.body);
    let other = prepare(&two, "00000003");
    assert_eq!(cancel(&one, &first), 204);
    prepare(&one, "00000004");
    // Past the prepare deadline the session is gone, and its slot free.
    std::thread::sleep(Duration::from_millis(3500));
    assert_eq!(ready(&two, &other, "00000003").status, 404);
    prepare(&two, "00000005");
}

/// One side of a hand-driven hipobj-rc-v2 session: its queue pair connected to the
/// session's, and what PREPARE answered.
struct HandSession<'a> {
    qp: QueuePair<'a, Rts>,
    id: String,
    staging: RemoteAddr,
}

/// PREPARE of `op` on `target` (4 KiB) for `qp`, whose data goes to or from `region`, and
/// `qp` connected to the session's queue pair.
fn hand_prepare<'a>(
    client: &Client,
    device: &Device,
    qp: QueuePair<'a, Init>,
    (op, target, cookie): (&str, &str, u32),
    region: RemoteAddr,
) -> HandSession<'a> {
    let psn = Psn::new(0x00_1234).unwrap();
    let token = device.token(qp.qp_num(), region, 4096);
    let headers = [
        ("x-amz-rdma-protocol", "hipobj-rc-v2".into()),
        ("x-amz-rdma-token", token.to_string()),
        ("x-amz-rdma-psn", format!("{:06x}", psn.get())),
        ("x-amz-rdma-cookie", format!("{cookie:08x}")),
        ("x-amz-rdma-op", op.into()),
        ("x-amz-rdma-target", target.into()),
        ("x-amz-rdma-size", "4096".into()),
    ];
    let reply = client.post("prepare", &headers).unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    let header = |name: &str| reply.headers[name].to_str().unwrap().to_owned();
    let hex = |name: &str| u64::from_str_radix(&header(name), 16).unwrap();
    let server = Token::parse("x-amz-rdma-reply", &header("x-amz-rdma-reply")[4..]).unwrap();
    let server_psn = Psn::new(hex("x-amz-rdma-psn") as u32).unwrap();
    let staging = RemoteAddr {
        addr: hex("x-amz-rdma-mr-addr"),
        rkey: RKey::new(hex("x-amz-rdma-mr-rkey") as u32),
    };
    let qp = device
        .connect(qp, Qpn::new(server.qpn).unwrap(), Gid::new(server.gid), server_psn, psn)
        .unwrap();
    HandSession { qp, id: header("x-amz-rdma-session"), staging }
}

/// READY of `session` for `qp` with `cookie`, the server to write into `region` (GET).
fn hand_ready(
    client: &Client,
    session: &HandSession<'_>,
    cookie: u32,
    region: Option<RemoteAddr>,
) -> Reply {
    let mut headers = vec![
        ("x-amz-rdma-protocol", "hipobj-rc-v2".into()),
        ("x-amz-rdma-session", session.id.clone()),
        ("x-amz-rdma-cookie", format!("{cookie:08x}")),
        ("x-amz-rdma-qpn", format!("{:x}", session.qp.qp_num().get())),
    ];
    if let Some(region) = region {
        headers.push(("x-amz-rdma-mr-addr", format!("{:x}", region.addr)));
        headers.push(("x-amz-rdma-mr-rkey", format!("{:x}", region.rkey.get())));
    }
    client.post("ready", &headers).unwrap()
}

/// A client that RDMA WRITEs, over its own session's queue pair, to the address and rkey of
/// another client's session (a GET staged and waiting for READY) reaches nothing: its WRITE
/// fails, its session ends, nothing is stored, and the other client's GET then brings the
/// object's bytes, untouched.
#[test]
fn a_write_to_another_sessions_staging_region_reaches_nothing() {
    let Some(server) = Server::on_rxe(19204, &["--rdma-exec-timeout-ms", "5000"]) else { return };
    let object = data(4096, 7);
    let file = server.dir.join("object");
    std::fs::write(&file, &object).unwrap();
    succeeded(&server.cli(&["put", file.to_str().unwrap(), &format!("{BUCKET}/x")]), "put");
    let device = rxe_device();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;

    // The victim: a GET of x, prepared, its receive posted, READY not sent yet.
    let landing = device.pd.register_remote_writable(4096, access).unwrap();
    let victim_cq = device.create_cq().unwrap();
    let qp = device.create_qp(device.pd, &victim_cq, AccessFlags::REMOTE_WRITE).unwrap();
    let to_victim = landing.remote(..).unwrap();
    let (victim, victim_cookie) = (server.client(1), 0x1111_1111);
    let get = hand_prepare(
        &victim,
        &device,
        qp,
        ("GET", &format!("/{BUCKET}/x"), victim_cookie),
        to_victim,
    );
    // SAFETY: the receive names no memory; the data lands in `landing`.
    unsafe { get.qp.post_recv_wr(&mut RecvWr::new(0, &[])).unwrap() };

    // The attacker: its own PUT session, whose WRITE goes to the victim's staging region.
    let mut garbage = device.pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    garbage.as_mut_slice().fill(0xee);
    let attacker_cq = device.create_cq().unwrap();
    let qp = device.create_qp(device.pd, &attacker_cq, AccessFlags::empty()).unwrap();
    let own = RemoteAddr { addr: garbage.addr(), rkey: garbage.rkey() };
    let (attacker, attacker_cookie) = (server.client(2), 0x2222_2222);
    let put = hand_prepare(
        &attacker,
        &device,
        qp,
        ("PUT", &format!("/{BUCKET}/evil"), attacker_cookie),
        own,
    );
    let sges = [garbage.sge(..).unwrap()];
    std::thread::scope(|s| {
        let ready = s.spawn(|| hand_ready(&attacker, &put, attacker_cookie, None));
        let mut wr = SendWr::rdma_write_with_imm(1, &sges, get.staging, attacker_cookie)
            .flags(SendFlags::SIGNALED);
        // SAFETY: `garbage` outlives the QP and is not written while the WRITE may read it.
        unsafe { put.qp.post_send_wr(&mut wr).unwrap() };
        let wcs = one_completion(&attacker_cq);
        assert!(!wcs.is_success(), "the forged WRITE completed: {wcs}");
        let answer = ready.join().unwrap();
        assert_ne!(answer.status, 200, "the attacker's READY: {}", answer.body);
    });
    assert!(!server.dir.join("root").join(BUCKET).join("evil").exists(), "nothing stored");

    // The victim's GET goes on, with the object's bytes.
    let answer = hand_ready(&victim, &get, victim_cookie, Some(to_victim));
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.headers["x-amz-rdma-capabilities"], "mp", "parts are served over RDMA");
    let wc = one_completion(&victim_cq);
    assert!(wc.is_success() && wc.imm_data() == Some(victim_cookie), "{wc}");
    let mut got = vec![0; 4096];
    landing.read(0, &mut got).unwrap();
    assert!(got == object, "the victim's bytes were touched");
}

/// The one completion of `cq`, within [`LIMIT`].
fn one_completion(cq: &CompletionQueue<'_>) -> WorkCompletion {
    let start = std::time::Instant::now();
    let mut wcs = [WorkCompletion::EMPTY];
    while cq.poll(&mut wcs).unwrap().is_empty() {
        assert!(start.elapsed() < LIMIT, "no completion within {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
    let [wc] = wcs;
    wc
}

/// 64 and 192 MiB PUT and GET over RDMA through one client, whose buffer is registered once
/// per size it grows to; GETs of the whole object and of a range not aligned to blocks.
#[test]
fn large_puts_and_gets_over_rdma_are_byte_for_byte_through_one_buffer() {
    let Some(server) = Server::on_rxe(19220, &SLOW_EXEC) else { return };
    let (client, device) = (server.client(1), rxe_device());
    for (seed, mib) in [(1, 64), (2, 192)] {
        let len = mib << 20;
        let key = format!("large-{mib}");
        let bytes = data(len, seed);
        let put = client.put(&device, BUCKET, &key, &bytes).unwrap();
        assert_eq!(put.bytes, len as u64);
        let buffer = client.buffer().unwrap();
        assert_eq!(buffer.1, len, "the buffer grew to the transfer");
        let (got, done) = client.get(&device, BUCKET, &key, 0, len).unwrap();
        assert_eq!(done.etag, put.etag);
        same_bytes(&got, &bytes, &key);
        drop(got);
        let (offset, size) = ((5 << 20) + 12_345, (8 << 20) + 7);
        let (got, _) = client.get(&device, BUCKET, &key, offset as u64, size).unwrap();
        same_bytes(&got, &bytes[offset..offset + size], &format!("{key} from {offset}"));
        assert_eq!(client.buffer(), Some(buffer), "{key}: the buffer was registered again");
    }
}

/// Parts of 5 MiB + 1, 6 MiB and 1 MiB PUT over RDMA, then completed over plain S3: the
/// object is their bytes, with a multipart ETag; a part's target is PUT only.
#[test]
fn parts_put_over_rdma_complete_a_multipart_upload() {
    let Some(server) = Server::on_rxe(19221, &SLOW_EXEC) else { return };
    let (client, device) = (server.client(1), rxe_device());
    let key = "dir/multi";
    let id = client.create_multipart_upload(BUCKET, key).unwrap();
    let sizes = [(5 << 20) + 1, 6 << 20, 1 << 20];
    let whole = data(sizes.iter().sum(), 3);
    let (mut etags, mut at) = (Vec::new(), 0);
    for (number, size) in (1..).zip(sizes) {
        let part = &whole[at..at + size];
        at += size;
        let done = client.put_part(&device, (BUCKET, key), &id, number, part).unwrap();
        assert_eq!(done.bytes, size as u64);
        etags.push(done.etag.expect("a part's ETag"));
    }
    let etag = client.complete_multipart_upload(BUCKET, key, &id, &etags).unwrap();
    assert!(etag.trim_matches('"').ends_with("-3"), "a multipart ETag: {etag}");
    same_bytes(&std::fs::read(server.stored(key)).unwrap(), &whole, "the stored object");
    let (got, _) = client.get(&device, BUCKET, key, 0, whole.len()).unwrap();
    same_bytes(&got, &whole, "the object over RDMA");
    // The client's upload in parts of 5 MiB: 5, 5 and 2 MiB + 1.
    let done = client.upload(&device, (BUCKET, "uploaded"), &whole, 5 << 20).unwrap();
    assert!(done.etag.unwrap().trim_matches('"').ends_with("-3"));
    same_bytes(&std::fs::read(server.stored("uploaded")).unwrap(), &whole, "uploaded");

    let part_target = format!("/{BUCKET}/k?uploadId={id}&partNumber=1");
    for (op, target) in [("GET", part_target.as_str()), ("PUT", "/bucket/k?uploadId=x")] {
        let reply = prepare_reply(&client, "00000001", (op, target));
        assert_eq!(reply.status, 400, "{op} {target}: {}", reply.body);
    }
    let unknown = prepare_reply(&client, "00000001", ("PUT", "/bucket/k?uploadId=x&partNumber=1"));
    assert_eq!(unknown.status, 404, "no such upload: {}", unknown.body);
    assert!(unknown.body.contains("NoSuchUpload"), "{}", unknown.body);
}

/// A byte flipped on disk in the middle of a 64 MiB object fails its GET over RDMA (502,
/// the client reports it), while a range before the flipped block is still served.
#[test]
fn a_byte_flipped_on_disk_fails_the_get_over_rdma() {
    let Some(server) = Server::on_rxe(19222, &SLOW_EXEC) else { return };
    let (client, device) = (server.client(1), rxe_device());
    let len = 64 << 20;
    let bytes = data(len, 4);
    client.put(&device, BUCKET, "flipped", &bytes).unwrap();
    let mut stored = bytes.clone();
    let flipped = (32 << 20) + 4321;
    stored[flipped] ^= 0x01;
    std::fs::write(server.stored("flipped"), &stored).unwrap();
    drop(stored);
    let error = client.get(&device, BUCKET, "flipped", 0, len).unwrap_err();
    match &error {
        ClientError::Refused { route: "READY", status: 502, body } => {
            assert!(body.contains("fail their checksum"), "{body}")
        }
        other => panic!("the GET of a corrupt object: {other}"),
    }
    // 8 MiB ending a byte before the flipped block.
    let (from, size) = ((24 << 20) - 1, 8 << 20);
    let (got, _) = client.get(&device, BUCKET, "flipped", from as u64, size).unwrap();
    same_bytes(&got, &bytes[from..from + size], "the blocks before the flipped one");
}
