//! s3rdma (crate `rdma-verbs-s3rdma`) on rxe0: hipobj-rc-v2 PUT and GET of 4 KiB and 1 MiB
//! through `s3rdma put/get --rdma`, byte for byte and committed as any PutObject; a READY with
//! the wrong cookie, and READY and CANCEL of another access key, answered as for no session
//! while the owner's session goes on; an empty object, which RDMA does not move; sessions
//! limited per key and removed at the prepare deadline; a client's WRITE to another's staging
//! region, which reaches nothing; `s3rdma bench` and a ranged `get --rdma`; the client's buffer
//! on huge pages. Ports 19200–19209.
//!
//! cuObject's `x-amz-rdma-token` (DC): on rxe0, which has no DC, a token GET is served in the
//! body with `x-amz-rdma-reply: 501` and a token PUT declined with nothing stored. The
//! `hardware` test moves objects over DC on a ConnectX and is `#[ignore]`d (it says how to
//! run it). Ports 19210–19219.

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
use s3rdma::cuobj::Descriptor;
use s3rdma::hipobj::client::{Client, Reply};
use s3rdma::hipobj::{Device, Token};
use s3rdma::Credentials;

pub(super) const LIMIT: Duration = Duration::from_secs(180);
pub(super) const BUCKET: &str = "bucket";

pub(super) fn key(n: u8) -> Credentials {
    Credentials { access_key_id: format!("key-{n}"), secret_access_key: format!("secret-{n}") }
}

fn key_json(k: &Credentials) -> String {
    format!(
        r#"{{"access_key_id": "{}", "secret_access_key": "{}"}}"#,
        k.access_key_id, k.secret_access_key
    )
}

/// `s3rdma serve` on rxe0 with keys 1 and 2 and a bucket, killed (and its root removed) on drop.
pub(super) struct Server {
    child: Option<Child>,
    pub(super) dir: PathBuf,
    port: u16,
}

impl Server {
    /// A server on `port` with `args` when rxe0 is there (none: the test is skipped).
    pub(super) fn on_rxe(port: u16, args: &[&str]) -> Option<Server> {
        drop(require_device(RXE)?);
        Some(Server::on(RXE, &gid_index(), port, args))
    }

    /// A server of `device` with GID `gid` on `port` with `args`.
    fn on(device: &str, gid: &str, port: u16, args: &[&str]) -> Server {
        let dir = std::env::temp_dir().join(format!("s3rdma-test-{port}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("root").join(BUCKET)).unwrap();
        std::fs::write(
            dir.join("keys.json"),
            format!("[{}, {}]", key_json(&key(1)), key_json(&key(2))),
        )
        .unwrap();
        std::fs::write(dir.join("key1.json"), key_json(&key(1))).unwrap();
        let mut cmd = Command::new(binary("s3rdma"));
        cmd.args(["serve", "--root", dir.join("root").to_str().unwrap()])
            .args(["--rdma-device", device, "--rdma-gid-index", gid])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--credentials"])
            .arg(dir.join("keys.json"))
            .args(args);
        let child = spawn_server(cmd, port);
        Server { child: Some(child), dir, port }
    }

    pub(super) fn port(&self) -> u16 {
        self.port
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `s3rdma ARGS` as key 1's client, to run.
    pub(super) fn cli_command(&self, args: &[&str]) -> Command {
        let mut cmd = s3rdma(args);
        cmd.args(["--endpoint", &self.endpoint(), "--credentials"]).arg(self.dir.join("key1.json"));
        cmd
    }

    /// `s3rdma ARGS` as key 1's client, run.
    pub(super) fn cli(&self, args: &[&str]) -> Output {
        output_within(self.cli_command(args), LIMIT)
    }

    pub(super) fn client(&self, n: u8) -> Client {
        Client::new(&self.endpoint(), key(n)).unwrap()
    }

    /// The stored file of `key` in the bucket.
    pub(super) fn stored(&self, key: &str) -> PathBuf {
        self.dir.join("root").join(BUCKET).join(key)
    }
}

/// rxe0 with the RoCE v2 GID, as the client's device.
pub(super) fn rxe_device() -> Device {
    Device::open(Some(RXE), Some(gid_index().parse().unwrap())).unwrap()
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

pub(super) fn data(len: usize, seed: u32) -> Vec<u8> {
    (0..len as u32).map(|i| (i ^ seed).wrapping_mul(0x9e37_79b9).rotate_left(11) as u8).collect()
}

pub(super) fn succeeded(out: &Output, says: &str) {
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

/// The client registers its buffer on 2 MiB huge pages when the host has enough reserved (the
/// guest reserves 8; scripts/rdma-vm), and hands them back when it goes.
#[test]
fn the_clients_buffer_is_of_huge_pages_where_some_are_reserved() {
    let Some(server) = Server::on_rxe(19205, &[]) else { return };
    let before = huge_pages_available();
    assert!(before >= 1, "the guest reserves huge pages, {before} available");
    let (client, device) = (server.client(1), rxe_device());
    let bytes = data(1 << 20, 5);
    client.put(&device, BUCKET, "huge", &bytes).unwrap();
    assert_eq!(client.buffer().unwrap().1, 2 << 20, "one whole huge page");
    assert_eq!(huge_pages_available(), before - 1, "the buffer took one huge page");
    let (got, _) = client.get(&device, BUCKET, "huge", 0, 1 << 20).unwrap();
    assert!(got == bytes, "the GET through the huge page differs");
    drop(client);
    assert_eq!(huge_pages_available(), before, "the page came back with the client");
}

/// 2 MiB huge pages neither in use nor promised to a mapping (`/proc/meminfo`).
fn huge_pages_available() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let field = |name: &str| {
        let line = meminfo.lines().find(|l| l.starts_with(name)).unwrap();
        line[name.len()..].trim().parse::<u64>().unwrap()
    };
    field("HugePages_Free:") - field("HugePages_Rsvd:")
}

#[test]
fn bench_and_a_ranged_get_go_over_rdma() {
    let Some(server) = Server::on_rxe(19207, &[]) else { return };
    let bench = server.cli(&["bench", "--count", "2", "--size", "64K", BUCKET]);
    succeeded(&bench, "PUT  rdma");
    succeeded(&bench, "GET  rdma");
    let bytes = data(300_000, 7);
    let input = server.dir.join("ranged");
    std::fs::write(&input, &bytes).unwrap();
    let object = format!("{BUCKET}/ranged");
    succeeded(&server.cli(&["put", input.to_str().unwrap(), &object]), "put 300000 bytes");
    let output = server.dir.join("range-out");
    let get = server.cli(&["get", "--rdma", "--range", "1000-", &object, output.to_str().unwrap()]);
    succeeded(&get, "got 299000 bytes over RDMA");
    assert!(std::fs::read(&output).unwrap() == bytes[1000..], "the range's copy differs");
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

/// A PREPARE of a 4 KiB PUT (a zero token: the client's QP on the server's GID).
fn prepare_reply(client: &Client, cookie: &str) -> Reply {
    prepare_put(client, cookie, 4096)
}

/// A PREPARE of a PUT of `size` bytes to `bucket/k` (a zero token).
pub(super) fn prepare_put(client: &Client, cookie: &str, size: u64) -> Reply {
    prepare_of(client, cookie, ("PUT", &format!("/{BUCKET}/k")), size)
}

/// A PREPARE of `op` on `target` of `size` bytes (a zero token: the client's QP on the
/// server's GID).
pub(super) fn prepare_of(
    client: &Client,
    cookie: &str,
    (op, target): (&str, &str),
    size: u64,
) -> Reply {
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
                ("x-amz-rdma-size", size.to_string()),
            ],
        )
        .unwrap()
}

/// [`prepare_reply`], which must succeed; the session id.
pub(super) fn prepare(client: &Client, cookie: &str) -> String {
    let reply = prepare_reply(client, cookie);
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

pub(super) fn cancel(client: &Client, session: &str) -> u16 {
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
    let refused = prepare_reply(&one, "00000002");
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

// cuObject's x-amz-rdma-token.

/// A presigned URL of `action` with `token` among its signed headers.
fn with_token<'a>(mut action: impl rusty_s3::S3Action<'a>, token: &str) -> url::Url {
    action.headers_mut().insert("x-amz-rdma-token", token.to_owned());
    action.sign(Duration::from_secs(300))
}

impl Server {
    fn bucket(&self) -> rusty_s3::Bucket {
        let url = self.endpoint().parse().unwrap();
        rusty_s3::Bucket::new(url, rusty_s3::UrlStyle::Path, BUCKET, "us-east-1").unwrap()
    }
}

fn signing_key() -> rusty_s3::Credentials {
    let k = key(1);
    rusty_s3::Credentials::new(k.access_key_id, k.secret_access_key)
}

#[test]
fn on_rxe_a_token_get_is_served_in_the_body_and_a_token_put_is_declined() {
    let Some(server) = Server::on_rxe(19210, &[]) else { return };
    let bytes = data(300_000, 7);
    let input = server.dir.join("in");
    std::fs::write(&input, &bytes).unwrap();
    let object = format!("{BUCKET}/object");
    succeeded(&server.cli(&["put", input.to_str().unwrap(), &object]), "put 300000 bytes");
    // A well-formed descriptor of a window the server never reaches: it declines first.
    let token = Descriptor {
        addr: 0x7f00_0000_0000,
        size: 1 << 20,
        rkey: 0x1234,
        lid: 0,
        dctn: 0x42,
        gid: Some(Gid::from("::ffff:192.0.2.1".parse::<std::net::Ipv6Addr>().unwrap()).get()),
    }
    .to_string();
    let (bucket, creds) = (server.bucket(), signing_key());
    let agent: ureq::Agent =
        ureq::Agent::config_builder().http_status_as_error(false).build().into();

    let url = with_token(bucket.get_object(Some(&creds), "object"), &token);
    let mut got = agent.get(url.as_str()).header("x-amz-rdma-token", &token).call().unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.headers().get("x-amz-rdma-reply").unwrap(), "501");
    let body = got.body_mut().with_config().limit(1 << 20).read_to_vec().unwrap();
    assert!(body == bytes, "the GET's body differs");

    let url = with_token(bucket.put_object(Some(&creds), "declined"), &token);
    let mut put = agent
        .put(url.as_str())
        .header("x-amz-rdma-token", &token)
        .header("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
        .send_empty()
        .unwrap();
    assert_eq!(put.status(), 501);
    assert_eq!(put.headers().get("x-amz-rdma-reply").unwrap(), "501");
    let reply = put.body_mut().read_to_string().unwrap();
    assert!(reply.contains("NotImplemented"), "{reply}");
    let root = server.dir.join("root").join(BUCKET);
    assert!(!root.join("declined").exists(), "a declined PUT stored an object");
}

/// On a ConnectX (mlx5 with DC; ConnectX-5 or newer), not in CI. The server's DC initiators
/// and the client's DCT are on the device `RDMA_VERBS_MLX5_DEVICE`, sending from GID index
/// `RDMA_VERBS_MLX5_GID_INDEX` (a RoCE v2 GID on Ethernet); on a host with one:
///
/// ```text
/// cargo build -p rdma-verbs-s3rdma --bins
/// RDMA_VERBS_MLX5_DEVICE=mlx5_0 RDMA_VERBS_MLX5_GID_INDEX=3 cargo test \
///     -p rdma-verbs-device-tests --all-features --test device -- \
///     --ignored --test-threads=1 device::s3rdma::hardware
/// ```
mod hardware {
    use s3rdma::cuobj::client::{Client, Target};
    use s3rdma::cuobj::DEFAULT_DC_KEY;

    use super::*;

    fn env(name: &str) -> String {
        std::env::var(name).unwrap_or_else(|_| panic!("set {name} (see this test's docs)"))
    }

    #[test]
    #[ignore = "needs a ConnectX (mlx5 DC): see the docs"]
    fn objects_move_over_dc_byte_for_byte() {
        let (device, gid) = (env("RDMA_VERBS_MLX5_DEVICE"), env("RDMA_VERBS_MLX5_GID_INDEX"));
        let server = Server::on(&device, &gid, 19211, &[]);
        let index = gid.parse().expect("RDMA_VERBS_MLX5_GID_INDEX is a number");
        let target = Target::open(Some(&device), Some(index), DEFAULT_DC_KEY).unwrap();
        let mut client = Client::new(&server.endpoint(), key(1), target).unwrap();
        for (seed, len) in [4096, 5 << 20].into_iter().enumerate() {
            let bytes = data(len, seed as u32);
            let stored = client.put(BUCKET, "dc", &bytes).unwrap();
            assert!(stored.over_rdma, "the server declined: is it on a DC device?");
            let root = server.dir.join("root").join(BUCKET);
            assert!(std::fs::read(root.join("dc")).unwrap() == bytes, "the stored file differs");
            client.reserve_get(len).unwrap().write(0, &vec![0; len]).unwrap();
            let got = client.get(BUCKET, "dc", None, len).unwrap();
            assert!(got.over_rdma && got.data == bytes, "the GET differs");
            let (start, end) = (len / 3, len / 2);
            let range = Some(start as u64..end as u64);
            let part = client.get(BUCKET, "dc", range, end - start).unwrap();
            assert!(part.over_rdma && part.data == bytes[start..end], "the range differs");
        }
    }
}
