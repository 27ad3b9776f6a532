//! rdma_cm (feature `rdmacm`) in the Soft-RoCE guest: a client and a server in one process,
//! on two threads, connecting to the device's own address — rxe0 at `$RDMA_VM_IPV4`, and
//! siw0 (soft-iWARP, which connects only through rdma_cm) at `$RDMA_VM_SIW_IPV4` (the siw
//! tests need `scripts/rdma-vm --siw`). Ports 18950–18999.

use std::net::{IpAddr, SocketAddr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdma_verbs::cm::{CmId, ConnParam, EventChannel, PortSpace};
use rdma_verbs::{
    Init, MemoryRegion, QpInitAttr, QueuePair, RecvWr, SendFlags, SendWr, ToInitAttr,
    WorkCompletion,
};

use super::pair::Loopback;
use super::test_cases;
use rdma_verbs_device_tests::{rxe, siw, Target};
use rdma_verbs_test_support::process::{output_within, spawn_server, text, wait_within};
use rdma_verbs_test_support::programs::{binary, example};

const STEP: Duration = Duration::from_secs(20);
const CLIENT_HELLO: &[u8] = b"client: hello over rdma_cm";
const SERVER_HELLO: &[u8] = b"server: welcome";
const MESSAGE: &[u8] = b"first SEND on a CM-connected QP";

/// Polls `cq` until one completion arrives, within [`STEP`]; it must succeed. Its `wr_id`.
fn one_completion(cq: &rdma_verbs::CompletionQueue<'_>, what: &str) -> u64 {
    let mut wcs = [WorkCompletion::EMPTY; 1];
    let start = Instant::now();
    loop {
        if let [wc] = cq.poll(&mut wcs).expect("poll") {
            assert!(wc.is_success(), "{what}: {}", wc.status());
            return wc.wr_id();
        }
        assert!(start.elapsed() < STEP, "no completion within {STEP:?}");
        std::thread::yield_now();
    }
}

/// An id on `channel` bound to `at` and listening there.
pub(super) fn listen_on(channel: &EventChannel, at: SocketAddr) -> CmId<'_> {
    let listener = CmId::new(channel, PortSpace::TCP).expect("listener id");
    listener.bind_addr(at).expect("bind");
    listener.listen(4).expect("listen");
    listener
}

/// An id on `channel` with the address and a route to `at` resolved (bound to the device
/// that reaches it).
pub(super) fn resolved(channel: &EventChannel, at: SocketAddr) -> CmId<'_> {
    let id = CmId::new(channel, PortSpace::TCP).expect("id");
    id.resolve_addr(None, at, Duration::from_secs(5)).expect("resolve_addr");
    id.resolve_route(Duration::from_secs(5)).expect("resolve_route");
    id
}

/// Server: accept one client, check its private data, answer with ours, receive one SEND,
/// then wait for the client's disconnect.
fn serve(t: &Target, port: u16, ready: mpsc::Sender<()>) {
    let channel = EventChannel::new().expect("event channel");
    let listener = listen_on(&channel, SocketAddr::new(t.ip, port));
    ready.send(()).unwrap();
    let request = listener.get_request(STEP).expect("connect request");
    assert!(
        request.private_data.starts_with(CLIENT_HELLO),
        "client private data: {:?}",
        request.private_data
    );
    let id = &request.id;
    let ctx = id.context().expect("the request's context");
    assert_eq!(ctx.name(), t.device, "rdma_cm picked the device by address");
    let lo = Loopback::new(ctx, 64);
    // SAFETY: `mr` stays alive and untouched until the completion is polled below.
    let (qp, mut mr) = unsafe { receiving(&lo, id, MESSAGE.len()) };
    let up = id
        .accept(qp, &ConnParam::with_private_data(SERVER_HELLO), STEP)
        .unwrap_or_else(|e| panic!("accept: {e}"));
    assert!(up.private_data.is_empty());
    assert_eq!(one_completion(&lo.cq, "receive"), 7);
    assert_eq!(&mr.as_mut_slice()[..MESSAGE.len()], MESSAGE);
    id.wait_disconnected(STEP).expect("the client's disconnect");
    drop(up);
}

/// A QP on `lo` for `id`'s connection, in INIT, with a receive (`wr_id` 7) of `len` bytes
/// posted into the region returned with it.
///
/// # Safety
///
/// The caller keeps the region alive and leaves it untouched until the receive completes.
pub(super) unsafe fn receiving<'l>(
    lo: &'l Loopback<'_>,
    id: &CmId<'_>,
    len: usize,
) -> (QueuePair<'l, Init>, MemoryRegion<'l>) {
    let qp = lo.pd.create_rc_qp(&QpInitAttr::new(&lo.cq)).expect("qp");
    let qp: QueuePair<'_, Init> =
        qp.into_init(&ToInitAttr { port: id.port_num(), ..ToInitAttr::default() }).expect("INIT");
    let mr = lo.region(4096);
    let sge = [mr.sge(..len).unwrap()];
    // SAFETY: the caller keeps `mr` registered and untouched until the receive completes.
    unsafe { qp.post_recv_wr(&mut RecvWr::new(7, &sge)).expect("post_recv") };
    (qp, mr)
}

/// Client: resolve, connect with private data, check the server's, send one message,
/// disconnect.
fn client(t: &Target, port: u16) {
    let channel = EventChannel::new().expect("event channel");
    let id = resolved(&channel, SocketAddr::new(t.ip, port));
    let ctx = id.context().expect("the id's context");
    assert_eq!(ctx.name(), t.device);
    let lo = Loopback::new(ctx, 64);
    let qp = lo.pd.create_rc_qp(&QpInitAttr::new(&lo.cq)).expect("qp");
    let up = id
        .connect(qp, &ConnParam::with_private_data(CLIENT_HELLO), STEP)
        .unwrap_or_else(|e| panic!("connect: {e}"));
    assert!(
        up.private_data.starts_with(SERVER_HELLO),
        "server private data: {:?}",
        up.private_data
    );
    let mut mr = lo.region(4096);
    mr.as_mut_slice()[..MESSAGE.len()].copy_from_slice(MESSAGE);
    let sge = [mr.sge(..MESSAGE.len()).unwrap()];
    let mut wr = SendWr::send(9, &sge).flags(SendFlags::SIGNALED);
    // SAFETY: `mr` stays registered and unwritten until the completion is polled below.
    unsafe { up.qp.post_send_wr(&mut wr).expect("post_send") };
    assert_eq!(one_completion(&lo.cq, "send"), 9);
    id.disconnect().expect("disconnect");
    id.wait_disconnected(STEP).expect("our own DISCONNECTED");
    drop(up);
}

/// Server and client on two threads, connected through rdma_cm on `target` (when it is
/// there).
fn connect_send_disconnect(target: Option<Target>, port: u16) {
    let Some(t) = &target else { return };
    let (ready, listening) = mpsc::channel();
    std::thread::scope(|s| {
        let server = s.spawn(|| serve(t, port, ready));
        listening.recv_timeout(STEP).expect("the server listens");
        client(t, port);
        server.join().expect("server thread");
    });
}

test_cases! { connect_send_disconnect:
    rc_connect_with_private_data_send_and_disconnect_on_rxe(rxe(), 18950);
    rc_connect_with_private_data_send_and_disconnect_on_siw(siw(), 18951);
}

/// A rejected connect on `target` (when it is there): the server's private data and the
/// reason reach the client.
fn rejected(target: Option<Target>, port: u16) {
    const NO: &[u8] = b"server: go away";
    let Some(t) = &target else { return };
    let (ready, listening) = mpsc::channel();
    std::thread::scope(|s| {
        let server = s.spawn(|| {
            let channel = EventChannel::new().expect("event channel");
            let listener = listen_on(&channel, SocketAddr::new(t.ip, port));
            ready.send(()).unwrap();
            let request = listener.get_request(STEP).expect("connect request");
            request.reject(NO).expect("reject");
            // Keep the listener until the client saw the reject.
            std::thread::sleep(Duration::from_millis(500));
        });
        listening.recv_timeout(STEP).expect("the server listens");
        let channel = EventChannel::new().expect("event channel");
        let id = resolved(&channel, SocketAddr::new(t.ip, port));
        let lo = Loopback::new(id.context().unwrap(), 64);
        let qp = lo.pd.create_rc_qp(&QpInitAttr::new(&lo.cq)).unwrap();
        let err = id
            .try_connect(qp, &ConnParam::with_private_data(CLIENT_HELLO), STEP)
            .expect_err("the server rejects");
        assert_eq!(err.error.errno(), Some(libc::ECONNREFUSED), "{}", err.error);
        let rejection =
            err.rejection.as_ref().unwrap_or_else(|| panic!("no rejection: {}", err.error));
        assert!(
            rejection.private_data.starts_with(NO),
            "reject data: {:?}",
            rejection.private_data
        );
        // IB/RoCE: 28, the CM's "consumer defined" reason; siw (iWARP): -ECONNRESET.
        let expected = if t.iwarp { -libc::ECONNRESET } else { 28 };
        assert_eq!(rejection.reason, expected, "{}", err.error);
        assert!(err.error.to_string().contains("rejected"), "{}", err.error);
        let _qp_comes_back: &QueuePair<'_, rdma_verbs::Unknown> = &err.qp;
        server.join().expect("server thread");
    });
}

test_cases! { rejected:
    a_rejected_connect_brings_the_private_data_and_reason_to_the_client_on_rxe(rxe(), 18952);
    a_rejected_connect_brings_the_private_data_and_reason_to_the_client_on_siw(siw(), 18953);
}

/// Turns ARP on for the guest's dummy netdev (created `NOARP`, so every neighbour on its
/// subnet "resolves" at once) while alive, so an unused address on the subnet goes unanswered;
/// restores `NOARP` on drop.
struct ArpOn(String);

impl ArpOn {
    /// `None` when `netdev` already does ARP.
    fn on(netdev: &str) -> Option<ArpOn> {
        let flags = std::fs::read_to_string(format!("/sys/class/net/{netdev}/flags"))
            .unwrap_or_else(|e| panic!("flags of {netdev}: {e}"));
        let flags = u32::from_str_radix(flags.trim().trim_start_matches("0x"), 16).unwrap();
        const IFF_NOARP: u32 = 0x80;
        (flags & IFF_NOARP != 0).then(|| {
            ip(&["link", "set", "dev", netdev, "arp", "on"]);
            ArpOn(netdev.to_owned())
        })
    }
}

impl Drop for ArpOn {
    fn drop(&mut self) {
        ip(&["link", "set", "dev", &self.0, "arp", "off"]);
    }
}

fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip").args(args).output().expect("run ip");
    assert!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// Resolving an address on the device's subnet that nobody answers: a timeout error within
/// the CM's timeout (plus slack), and the id is destroyed promptly afterwards.
#[test]
fn resolving_an_address_nobody_answers_times_out_and_the_id_is_torn_down() {
    let Some(t) = rxe() else { return };
    // rxe0's netdev, from its first GID's attributes.
    let ndev = format!("/sys/class/infiniband/{}/ports/1/gid_attrs/ndevs/0", t.device);
    let netdev = std::fs::read_to_string(&ndev).unwrap_or_else(|e| panic!("{ndev}: {e}"));
    let netdev = netdev.trim();
    let _arp = ArpOn::on(netdev);
    let IpAddr::V4(ip) = t.ip else { panic!("$RDMA_VM_IPV4 is IPv4") };
    let nobody = SocketAddr::new(IpAddr::V4(std::net::Ipv4Addr::from(u32::from(ip) + 77)), 18954);
    let cm_timeout = Duration::from_millis(1000);
    let (done, finished) = mpsc::channel();
    // On a thread, so that a hang fails the test instead of holding the guest.
    std::thread::spawn(move || {
        let channel = EventChannel::new().expect("event channel");
        let id = CmId::new(&channel, PortSpace::TCP).expect("id");
        let start = Instant::now();
        let result = id.resolve_addr(None, nobody, cm_timeout);
        let took = start.elapsed();
        let teardown = Instant::now();
        drop(id);
        drop(channel);
        let result = result.map_err(|e| (e.to_string(), e.errno()));
        done.send((result, took, teardown.elapsed())).unwrap();
    });
    let (result, took, teardown) =
        finished.recv_timeout(Duration::from_secs(60)).expect("resolve and teardown finish");
    let (text, errno) = result.expect_err("nobody answers");
    assert_eq!(errno, Some(libc::ETIMEDOUT), "resolving {nobody}: {text}");
    assert!(text.contains("rdma_resolve_addr"), "{text}");
    assert!(text.contains("ip addr") && text.contains("rdma link"), "the remedy: {text}");
    assert!(took >= cm_timeout / 2, "resolve gave up after {took:?}");
    assert!(took < cm_timeout + Duration::from_secs(5), "resolve took {took:?}");
    assert!(teardown < Duration::from_secs(5), "rdma_destroy_id took {teardown:?}");
}

/// examples/rc_pingpong `--rdma-cm`, ours against ours (the C tool has no rdma_cm mode): the
/// server listens on every address, the client connects to `target`'s (when it is there),
/// and both report the device rdma_cm picked.
fn rc_pingpong_over_rdma_cm(target: Option<Target>, port: u16) {
    const LIMIT: Duration = Duration::from_secs(120);
    let Some(t) = &target else { return };
    let port = port.to_string();
    let run = |peer: Option<String>| {
        let mut cmd = std::process::Command::new(example("rc_pingpong"));
        cmd.args(["--rdma-cm", "-p", &port, "-d", t.device, "-n", "50", "-s", "1024"]);
        cmd.args(peer);
        cmd
    };
    let server = run(None)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the server");
    // An rdma_cm listener is not in /proc/net/tcp: retry while nobody listens yet.
    let start = Instant::now();
    let client = loop {
        let out = output_within(run(Some(t.ip.to_string())), LIMIT);
        let refused = String::from_utf8_lossy(&out.stderr).contains("rejected");
        if out.status.success() || !refused || start.elapsed() > Duration::from_secs(30) {
            break out;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let server = wait_within(server, LIMIT);
    for (side, out) in [("client", &client), ("server", &server)] {
        assert!(out.status.success(), "{side}: {}", text(out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let on = format!("connected by rdma_cm on {}", t.device);
        assert!(stdout.contains(&on) && stdout.contains("50 iters in"), "{side}: {}", text(out));
    }
}

test_cases! { rc_pingpong_over_rdma_cm:
    rc_pingpong_example_over_rdma_cm_on_rxe(rxe(), 18955);
    rc_pingpong_example_over_rdma_cm_on_siw(siw(), 18956);
}

/// The perftest tools with `-R`, each against itself: QPs (two for bandwidth, one for
/// latency) connected by rdma_cm on `target` (when it is there), their buffers exchanged in
/// the private data; every side that measures must report its table.
fn perftest_tools_over_rdma_cm(target: Option<Target>, port: u16) {
    const LIMIT: Duration = Duration::from_secs(120);
    let Some(t) = &target else { return };
    let tools = ["write_bw", "read_bw", "send_bw", "write_lat", "read_lat", "send_lat"];
    for (i, tool) in tools.into_iter().enumerate() {
        // TCP on -p, rdma_cm on -p + 1.
        let port = (port + 2 * i as u16).to_string();
        let run = |peer: Option<String>| {
            let mut cmd = std::process::Command::new(binary(tool));
            cmd.args(["-R", "-d", t.device, "-p", &port, "-n", "100", "-s", "4096"]);
            if tool.ends_with("_bw") {
                cmd.args(["-q", "2"]);
            }
            // The client asks for 4 outstanding READs, fewer than the device's limit; rdma_cm
            // gives the server's QPs no more, and the client's what the server accepted.
            if tool == "read_bw" && peer.is_some() {
                cmd.args(["-o", "4", "--retry_count", "5"]);
            }
            // siw offers no inline data of perftest's default size.
            cmd.args(["-I", "0"]);
            cmd.args(peer);
            cmd
        };
        let server = spawn_server(run(None), port.parse().unwrap());
        let client = output_within(run(Some(t.ip.to_string())), LIMIT);
        let server = wait_within(server, LIMIT);
        for (side, out) in [("client", &client), ("server", &server)] {
            assert!(out.status.success(), "{tool} {side}: {}", text(out));
        }
        if tool == "read_bw" {
            for (side, out) in [("client", &client), ("server", &server)] {
                let header =
                    String::from_utf8_lossy(&out.stdout).contains(" Outstand reads  : 4\n");
                assert!(header, "{tool} {side}: 4 READs outstanding\n{}", text(out));
            }
        }
        // Both print the table with the size's line, but read_lat's server (it measures
        // nothing).
        for (side, out) in [("client", &client), ("server", &server)] {
            let stdout = String::from_utf8_lossy(&out.stdout);
            let line = stdout.lines().any(|l| l.trim_start().starts_with("4096 "));
            assert_eq!(
                line,
                side == "client" || tool != "read_lat",
                "{tool} {side}: {}",
                text(out)
            );
        }
    }
}

test_cases! { perftest_tools_over_rdma_cm:
    perftest_tools_with_rdma_cm_on_rxe(rxe(), 18960);
    perftest_tools_with_rdma_cm_on_siw(siw(), 18980);
}

/// A program may clear `O_NONBLOCK` through a duplicate of the channel's descriptor (the flag
/// is the open file's): a timed wait for an event still ends on time, with `ETIMEDOUT`,
/// instead of blocking in a read for good.
#[test]
fn a_timed_wait_ends_on_time_after_a_duplicate_cleared_o_nonblock() {
    use std::os::fd::{AsRawFd, BorrowedFd};
    if rxe().is_none() {
        return;
    }
    let channel = EventChannel::new().expect("event channel");
    // SAFETY: the channel's descriptor, open as long as the channel, borrowed for the clone.
    let fd = unsafe { BorrowedFd::borrow_raw(channel.fd()) };
    let dup = fd.try_clone_to_owned().unwrap();
    // SAFETY: F_GETFL and F_SETFL on the duplicate, owned for the calls, change only the
    // (shared) status flags.
    unsafe {
        let flags = libc::fcntl(dup.as_raw_fd(), libc::F_GETFL);
        assert_ne!(libc::fcntl(dup.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK), -1);
    }
    let (done, finished) = mpsc::channel();
    // On a thread, so that a wait that blocks fails the test instead of holding the guest.
    std::thread::spawn(move || {
        let start = Instant::now();
        let result = channel.get_event(Duration::from_millis(300)).map(drop);
        done.send((result.map_err(|e| e.errno()), start.elapsed())).unwrap();
    });
    let (result, took) = finished.recv_timeout(STEP).expect("the wait ends");
    assert_eq!(result, Err(Some(libc::ETIMEDOUT)));
    assert!(took < Duration::from_secs(5), "took {took:?}");
}
