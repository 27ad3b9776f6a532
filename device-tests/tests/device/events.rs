//! Completion channels: sleeping on CQ events, rc_pingpong -e against the C tool, and the
//! perftest tools' -e (ports 19338–19352).

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdma_verbs::*;

use super::bandwidth::{self, tool};
use super::latency;
use super::pair::{connect, wait_for, Loopback};
use super::rc_pingpong::{assert_ran, c_tool, ours, pair};
use rdma_verbs_device_tests::{require_device, RXE};
use rdma_verbs_test_support::finishes_within;
use rdma_verbs_test_support::process::{spawn_server, text, wait_within};
use rdma_verbs_test_support::programs::binary;

/// How long any event may take to arrive: Soft-RoCE is slow, not stuck.
const EVENT_LIMIT: Duration = Duration::from_secs(30);

/// (wr_id, status, opcode, byte_len) of each completion.
type Seen = Vec<(u64, WcStatus, WcOpcode, u32)>;

/// The event loop of the docs: wait, re-arm, poll, until `n` completions arrived.
fn sleep_for(channel: &CompletionChannel<'_>, cq: &CompletionQueue<'_>, n: usize) -> Seen {
    let start = Instant::now();
    let mut seen = Seen::new();
    let mut storage: [WorkCompletion; 4] = Default::default();
    while seen.len() < n {
        let left = EVENT_LIMIT.saturating_sub(start.elapsed());
        let events = channel.wait(Some(left)).unwrap();
        assert!(events >= 1, "no CQ event within {EVENT_LIMIT:?}; completions so far: {seen:?}");
        cq.req_notify(false).unwrap();
        let done = cq.poll(&mut storage).unwrap();
        seen.extend(done.iter().map(|wc| (wc.wr_id(), wc.status(), wc.opcode(), wc.byte_len())));
    }
    seen
}

#[test]
fn an_armed_cq_wakes_its_channel_and_the_completions_are_then_polled() {
    let Some(ctx) = require_device(RXE) else { return };
    let channel = ctx.create_comp_channel().unwrap();
    let lo = Loopback::with_cq(&ctx, ctx.create_cq_with_channel(8, &channel, 0).unwrap());
    let mut mr = lo.region(8192);
    mr.as_mut_slice()[..4096].fill(0x5a);
    let (a, b) = (lo.rc_in_init(4, AccessFlags::empty()), lo.rc_in_init(4, AccessFlags::empty()));
    let recv_sge = [mr.sge(4096..).unwrap()];
    // SAFETY: the receive half of `mr` is not touched until its completion is polled.
    unsafe { b.post_recv_wr(&mut RecvWr::new(1, &recv_sge)).unwrap() };
    let (a, b) = connect(&ctx, a, b);

    lo.cq.req_notify(false).unwrap();
    let send_sge = [mr.sge(..4096).unwrap()];
    // SAFETY: the send half of `mr` is not written until the send completes.
    unsafe { a.post_send_wr(&mut SendWr::send(2, &send_sge).flags(SendFlags::SIGNALED)).unwrap() };

    let mut seen = sleep_for(&channel, &lo.cq, 2);
    seen.sort_by_key(|c| c.0);
    let kinds: Vec<_> = seen.iter().map(|&(id, status, opcode, _)| (id, status, opcode)).collect();
    assert_eq!(
        kinds,
        [(1, WcStatus::SUCCESS, WcOpcode::RECV), (2, WcStatus::SUCCESS, WcOpcode::SEND)]
    );
    assert_eq!(seen[0].3, 4096, "received bytes");
    assert!(mr.as_slice()[4096..].iter().all(|&b| b == 0x5a));
    drop((a, b));
}

#[test]
fn wait_with_nothing_pending_times_out_with_zero() {
    let Some(ctx) = require_device(RXE) else { return };
    let channel = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq_with_channel(4, &channel, 0).unwrap();
    cq.req_notify(false).unwrap();
    for timeout in [Duration::ZERO, Duration::from_millis(300)] {
        let start = Instant::now();
        assert_eq!(channel.wait(Some(timeout)).unwrap(), 0);
        let took = start.elapsed();
        assert!(
            took >= timeout && took < timeout + Duration::from_secs(5),
            "{timeout:?}: {took:?}"
        );
    }
    assert_eq!(channel.try_get_events().unwrap(), 0);
}

/// Runs `body` with a channel and a fixture whose CQ, of `cqe` entries, is on it, on a thread
/// that must finish within 60 s: unacknowledged events would make destroying a CQ block
/// forever, and a wait that blocks where it must not would sleep for good; either shows as a
/// failure, not a hang.
fn on_a_channel(
    cqe: u32,
    body: impl FnOnce(&CompletionChannel<'_>, &Loopback<'_>) + Send + 'static,
) {
    let Some(ctx) = require_device(RXE) else { return };
    let suspect = "a read that blocks, or ibv_destroy_cq waiting for unacknowledged events?";
    finishes_within(Duration::from_secs(60), suspect, move || {
        let channel = ctx.create_comp_channel().unwrap();
        let lo = Loopback::with_cq(&ctx, ctx.create_cq_with_channel(cqe, &channel, 0).unwrap());
        body(&channel, &lo);
    });
}

#[test]
fn each_wait_reads_one_event_and_each_arming_fires_once() {
    on_a_channel(4, |channel, lo| {
        // The fixture's CQ takes the send completions.
        let recv_cq = lo.ctx.create_cq_with_channel(4, channel, 0).unwrap();
        let send_cq = &lo.cq;
        let mr = lo.region(4096);
        let attr = QpInitAttr { recv_cq: &recv_cq, sq_sig_all: true, ..lo.attr(4) };
        let (a, b) = lo.pair::<Rc>(&attr, AccessFlags::empty());
        let exchange = |id: u64| {
            // SAFETY: both completions are polled before the next exchange or the end of the
            // test.
            unsafe { post_message(&a, &b, &mr, id) };
            for cq in [send_cq, &recv_cq] {
                let wcs = wait_for(cq, 1);
                assert!(wcs.len() == 1 && wcs[0].is_success() && wcs[0].wr_id() == id, "{wcs:?}");
            }
            // Both completions are in; give their events (raised right after) time to land.
            std::thread::sleep(Duration::from_millis(200));
        };

        send_cq.req_notify(false).unwrap();
        recv_cq.req_notify(false).unwrap();
        exchange(1);
        // One event per armed CQ, one per wait: the second is already pending.
        assert_eq!(channel.wait(Some(EVENT_LIMIT)).unwrap(), 1);
        let start = Instant::now();
        assert_eq!(channel.wait(Some(EVENT_LIMIT)).unwrap(), 1);
        assert!(start.elapsed() < Duration::from_secs(1), "the pending event was not read at once");
        assert_eq!(channel.wait(Some(Duration::from_millis(200))).unwrap(), 0, "none left");

        // Neither CQ is armed any more: new completions raise no event.
        exchange(2);
        assert_eq!(channel.try_get_events().unwrap(), 0);
        assert_eq!(channel.wait(Some(Duration::from_millis(300))).unwrap(), 0);
    });
}

/// In each round a thread sleeps in an unbounded wait while a timed wait beside it times out,
/// then a completion's event ends the unbounded one: in the first round it sleeps in the read
/// of the still-blocking descriptor, in the second in `ppoll`, the descriptor non-blocking.
#[test]
fn an_unbounded_wait_takes_its_event_and_a_timed_wait_beside_it_ends_on_time() {
    // (A timed wait that read the still-blocking descriptor would sleep until the event, which
    // comes only after it returns.)
    on_a_channel(16, |channel, lo| {
        let mr = lo.region(4096);
        let attr = QpInitAttr { sq_sig_all: true, ..lo.attr(4) };
        let (a, b) = lo.pair::<Rc>(&attr, AccessFlags::empty());
        for round in [1, 2] {
            lo.cq.req_notify(false).unwrap();
            std::thread::scope(|s| {
                let unbounded = s.spawn(|| channel.wait(None).unwrap());
                // Time for it to fall asleep.
                std::thread::sleep(Duration::from_millis(200));
                let (timeout, start) = (Duration::from_millis(300), Instant::now());
                assert_eq!(channel.wait(Some(timeout)).unwrap(), 0);
                let took = start.elapsed();
                assert!(took >= timeout && took < timeout + Duration::from_secs(5), "{took:?}");
                assert!(!unbounded.is_finished(), "round {round}: it ended without an event");

                // SAFETY: both completions are polled below, before the next round.
                unsafe { post_message(&a, &b, &mr, round) };
                assert_eq!(unbounded.join().unwrap(), 1, "round {round}: the event woke it");
            });
            let wcs = wait_for(&lo.cq, 2);
            assert!(wcs.len() == 2 && wcs.iter().all(|wc| wc.is_success()), "{wcs:?}");
        }
    });
}

/// Posts a receive of `mr`'s second half on `b` and a SEND of `mr`'s first 64 bytes on `a`,
/// both with wr_id `id`.
///
/// # Safety
///
/// Nothing reads or writes `mr` until both WRs' completions are polled.
unsafe fn post_message(
    a: &QueuePair<'_, Rts, Rc>,
    b: &QueuePair<'_, Rts, Rc>,
    mr: &MemoryRegion<'_>,
    id: u64,
) {
    let (send_sge, recv_sge) = ([mr.sge(..64).unwrap()], [mr.sge(mr.len() / 2..).unwrap()]);
    // SAFETY: the caller keeps `mr` untouched until both WRs complete.
    unsafe {
        b.post_recv_wr(&mut RecvWr::new(id, &recv_sge)).unwrap();
        a.post_send_wr(&mut SendWr::send(id, &send_sge)).unwrap();
    }
}

/// `server` on TCP `port`, then `client` to it, both sleeping on CQ events (-e).
fn pingpong_with_events(port: u16, server: Command, client: Command) {
    let Some(_) = require_device(RXE) else { return };
    let (server, client) = pair(server, client, port, &["-e", "-n", "200"]);
    assert_ran(&server, "200");
    assert_ran(&client, "200");
}

#[test]
fn rc_pingpong_e_serves_the_c_client_e() {
    pingpong_with_events(18700, ours(), c_tool());
}

#[test]
fn rc_pingpong_e_is_a_client_of_the_c_server_e() {
    pingpong_with_events(18701, c_tool(), ours());
}

#[test]
fn read_bw_and_send_bw_run_on_events_with_e() {
    bandwidth::sweep("read_bw", 19340, &["-e"]);
    bandwidth::sweep("send_bw", 19342, &["-e", "-b", "-X", "0"]);
}

#[test]
fn the_header_names_the_events_device_and_vector_as_ib_read_lat_does() {
    let Some(_) = require_device(RXE) else { return };
    let args = ["-e", "-n", "20"];
    for (i, program) in [binary("read_lat"), PathBuf::from("ib_read_lat")].iter().enumerate() {
        let (server, client) = bandwidth::pair_of(program, 19338 + i as u16, &args, &args);
        bandwidth::assert_ran(&server, &client);
        let stdout = String::from_utf8_lossy(&client.stdout);
        let line = format!(" Test with events. Using {RXE}_comp0");
        assert!(stdout.lines().any(|l| l == line), "{}: {}", program.display(), text(&client));
    }
}

#[test]
fn read_lat_and_send_lat_run_on_events_with_e() {
    latency::sweep("read_lat", 19344, &["-e"]);
    latency::sweep("send_lat", 19346, &["-e"]);
}

/// With -e a wait has no timeout of its own, as perftest's: the watchdog ends a client that
/// waits for a SEND from a server stopped (SIGSTOP) for good. (Stopped, not killed: rxe keeps
/// answering for the stopped process, so no SEND of the client can fail first.)
#[test]
fn with_e_a_client_whose_server_never_answers_fails_in_bounded_time() {
    let Some(_) = require_device(RXE) else { return };
    let (mut server, client) = stop_the_server("send_lat", 19352, &["-e", "-n", "1000000"]);
    let stopped = Instant::now();
    let out = wait_within(client, Duration::from_secs(90));
    let took = stopped.elapsed();
    signal("-CONT", server.id());
    let _ = server.kill();
    wait_within(server, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let watchdog = "send_lat: no completion event for 30 s: the peer is gone";
    assert!(stderr.contains(watchdog), "{}", text(&out));
    assert!(took > Duration::from_secs(29) && took < Duration::from_secs(45), "{took:?}");
}

/// Sends `sig` (`-STOP`, `-CONT`) to process `pid`.
fn signal(sig: &str, pid: u32) {
    let status = Command::new("kill").args([sig, &pid.to_string()]).status().expect("kill");
    assert!(status.success(), "kill {sig} {pid}");
}

/// Linux's USER_HZ: the unit of the times in /proc/PID/stat.
const USER_HZ: f64 = 100.0;

/// The CPU time process `pid` has used, in seconds (its utime and stime).
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    // The fields after the command name, which is in parentheses: state first, then utime
    // and stime at 12 and 13.
    let fields: Vec<&str> = stat[stat.rfind(')').expect("(comm)") + 2..].split(' ').collect();
    let ticks = |i: usize| fields[i].parse::<u64>().expect("a tick count") as f64;
    (ticks(11) + ticks(12)) / USER_HZ
}

/// Starts `name`'s server and client on TCP `port` for a long run with `args`, and stops
/// (SIGSTOP) the server 3 s into it, the client still running: (server, client).
fn stop_the_server(name: &str, port: u16, args: &[&str]) -> (Child, Child) {
    let server = spawn_server(tool(name, port, args), port);
    let mut client = tool(name, port, args)
        .arg("127.0.0.1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the client");
    std::thread::sleep(Duration::from_secs(3));
    if let Some(status) = client.try_wait().expect("try_wait") {
        let out = client.wait_with_output().expect("wait");
        panic!("{name} {args:?} ended ({status}) before its server was stopped: {}", text(&out));
    }
    signal("-STOP", server.id());
    (server, client)
}

/// Stops `name`'s server 3 s into a long run with `args` and returns the CPU seconds its
/// client uses over the next 2 s, while it waits for the stopped peer; then kills both.
fn cpu_while_the_server_is_stopped(name: &str, port: u16, args: &[&str]) -> f64 {
    let (mut server, mut client) = stop_the_server(name, port, args);
    // Time for what is in flight to complete, and the client to find nothing more comes.
    std::thread::sleep(Duration::from_millis(500));
    let before = cpu_seconds(client.id());
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_seconds(client.id()) - before;
    signal("-CONT", server.id());
    for child in [&mut server, &mut client] {
        let _ = child.kill();
    }
    wait_within(server, Duration::from_secs(10));
    wait_within(client, Duration::from_secs(10));
    used
}

/// With -e a side sleeps while it waits: for its peer's SEND (send_lat) or, its receives
/// gone, for its own SENDs' retries (send_bw). Without -e the same client busy-polls those
/// 2 s away, which shows the measurement sees the difference.
#[test]
fn with_e_a_client_sleeps_while_its_server_is_stopped() {
    let Some(_) = require_device(RXE) else { return };
    let runs = [
        ("send_lat", &["-n", "1000000"][..]),
        ("send_bw", &["-n", "1000000", "-s", "64", "-r", "16"][..]),
    ];
    for (i, (name, args)) in runs.into_iter().enumerate() {
        let port = 19348 + 2 * i as u16;
        let polling = cpu_while_the_server_is_stopped(name, port, args);
        let events = cpu_while_the_server_is_stopped(name, port + 1, &[args, &["-e"]].concat());
        assert!(polling > 1.0, "{name} {args:?} used {polling} s of the 2 s polling");
        assert!(events < 0.2, "{name} {args:?} -e used {events} s of the 2 s: it does not sleep");
    }
}
