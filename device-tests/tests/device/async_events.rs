//! Asynchronous events on rxe0: an SRQ limit, a CQ overrun, the link going down and up, and
//! completions awaited on tokio.

use std::process::Command;
use std::time::{Duration, Instant};

use rdma_verbs::*;

use super::pair::{connect, init_qp, wait_for, Loopback, PORT};
use rdma_verbs_device_tests::{require_device, RXE};
use rdma_verbs_test_support::process::text;

/// How long an event may take to arrive: Soft-RoCE is slow, not stuck.
const EVENT_LIMIT: Duration = Duration::from_secs(30);

/// How long to wait for an event that must not come.
const QUIET: Duration = Duration::from_millis(500);

/// The events that arrive within `quiet`.
fn events_within(events: &AsyncEvents<'_>, quiet: Duration) -> Vec<AsyncEvent> {
    let deadline = Instant::now() + quiet;
    let mut got = Vec::new();
    while let Some(e) =
        events.next(Some(deadline.saturating_duration_since(Instant::now()))).unwrap()
    {
        got.push(e);
    }
    got
}

/// Waits for the first event `wanted` accepts; every event seen is returned (the last one
/// being the wanted one), so a test can say what else came.
fn wait_event(events: &AsyncEvents<'_>, wanted: impl Fn(&AsyncEvent) -> bool) -> Vec<AsyncEvent> {
    let start = Instant::now();
    let mut seen = Vec::new();
    loop {
        let left = EVENT_LIMIT.saturating_sub(start.elapsed());
        match events.next(Some(left)).unwrap() {
            Some(e) => {
                seen.push(e);
                if wanted(&e) {
                    return seen;
                }
            }
            None => panic!("no wanted event within {EVENT_LIMIT:?}; seen: {seen:?}"),
        }
    }
}

/// `n` signaled 64-byte SENDs from `qp`, one at a time, each waited for on `cq` with the
/// receive that took it.
fn send_n(qp: &QueuePair<'_, Rts>, cq: &CompletionQueue<'_>, mr: &MemoryRegion<'_>, n: u64) {
    let sge = [mr.sge(..64).unwrap()];
    for id in 0..n {
        // SAFETY: the first 64 bytes of `mr` are never written while SENDs are outstanding.
        unsafe { qp.post_send_wr(&mut SendWr::send(id, &sge).flags(SendFlags::SIGNALED)).unwrap() };
        let wcs = wait_for(cq, 2);
        let mut kinds: Vec<_> = wcs.iter().map(|wc| (wc.opcode().0, wc.status())).collect();
        kinds.sort_by_key(|k| k.0);
        let want = [(WcOpcode::SEND.0, WcStatus::SUCCESS), (WcOpcode::RECV.0, WcStatus::SUCCESS)];
        assert_eq!(kinds, want, "{wcs:?}");
    }
}

/// Posts `n` receives of the last 64 bytes of `mr` on `srq` (their contents are not checked).
fn fill_srq(srq: &SharedReceiveQueue<'_>, mr: &MemoryRegion<'_>, n: u64) {
    let sge = [mr.sge(mr.len() - 64..).unwrap()];
    for id in 0..n {
        // SAFETY: nothing reads or writes the receive area of `mr` during the test.
        unsafe { srq.post_recv_wr(&mut RecvWr::new(1000 + id, &sge)).unwrap() };
    }
}

#[test]
fn an_armed_srq_limit_raises_one_event_naming_that_srq() {
    let Some(ctx) = require_device(RXE) else { return };
    let events = ctx.async_events().unwrap();
    let lo = Loopback::new(&ctx, 64);
    let cq = &lo.cq;
    let mr = lo.region(4096);
    let (srq, quiet_srq) = (lo.pd.create_srq(8, 1).unwrap(), lo.pd.create_srq(8, 1).unwrap());
    fill_srq(&srq, &mr, 8);
    fill_srq(&quiet_srq, &mr, 4);
    srq.arm_limit(4).unwrap();
    quiet_srq.arm_limit(2).unwrap();
    let (sender, receiver) = lo.srq_pair(&srq, cq);

    // 3 of 8 consumed: 5 left, not below 4.
    send_n(&sender, cq, &mr, 3);
    assert_eq!(events_within(&events, QUIET), [], "5 receives left: no event yet");

    // 2 more: 3 left, below the limit.
    send_n(&sender, cq, &mr, 2);
    let seen = wait_event(&events, |e| matches!(e, AsyncEvent::SrqLimitReached(_)));
    assert_eq!(seen.last(), Some(&AsyncEvent::SrqLimitReached(srq.id())), "seen: {seen:?}");
    assert_ne!(srq.id(), quiet_srq.id());
    let text = format!("SRQ limit reached on SRQ {:#x}", srq.as_raw() as usize);
    assert_eq!(seen.last().unwrap().to_string(), text);

    // The limit disarmed itself: one more receive raises nothing.
    send_n(&sender, cq, &mr, 1);
    assert_eq!(events_within(&events, QUIET), [], "the limit fires once per arming");
    drop((sender, receiver));
}

#[test]
fn a_cq_overrun_raises_a_typed_cq_error_and_the_stream_then_delivers_more() {
    let Some(ctx) = require_device(RXE) else { return };
    let events = ctx.async_events().unwrap();
    let lo = Loopback::new(&ctx, 64);
    let (big, small) = (&lo.cq, ctx.create_cq(4).unwrap());
    let room = small.capacity();
    let mr = lo.region(4096);

    // Two receivers share `small`; each alone fits it, so both pass the CQ room check, but
    // together they complete more receives than it holds (it is never polled).
    let none = AccessFlags::empty();
    let sender_cap = QpCapabilities { max_send_wr: room, max_recv_wr: 1, ..Default::default() };
    let receiver_cap = QpCapabilities { max_send_wr: 1, max_recv_wr: room, ..Default::default() };
    let pair = || {
        let sender =
            init_qp::<Rc>(&lo.pd, &QpInitAttr { cap: sender_cap, ..QpInitAttr::new(big) }, none);
        let attr = QpInitAttr { cap: receiver_cap, recv_cq: &small, ..QpInitAttr::new(big) };
        let receiver = init_qp::<Rc>(&lo.pd, &attr, none);
        let recv = [mr.sge(2048..2048 + 64).unwrap()];
        for id in 0..room {
            // SAFETY: nothing reads or writes that part of `mr` during the test.
            unsafe { receiver.post_recv_wr(&mut RecvWr::new(u64::from(id), &recv)).unwrap() };
        }
        connect(&ctx, sender, receiver)
    };
    let ((s1, r1), (s2, r2)) = (pair(), pair());
    let sge = [mr.sge(..64).unwrap()];
    for (qp, n) in [(&s1, room), (&s2, 1)] {
        for id in 0..n {
            // SAFETY: the first 64 bytes of `mr` are never written.
            unsafe { qp.post_send_wr(&mut SendWr::send(u64::from(id), &sge)).unwrap() };
        }
    }
    let seen = wait_event(&events, |e| matches!(e, AsyncEvent::CqError(_)));
    assert_eq!(seen.last(), Some(&AsyncEvent::CqError(small.id())), "seen: {seen:?}");
    assert_ne!(small.id(), big.id());

    // The stream goes on: an SRQ limit after the CQ error arrives too.
    let srq = lo.pd.create_srq(4, 1).unwrap();
    fill_srq(&srq, &mr, 4);
    srq.arm_limit(2).unwrap();
    let (sender, receiver) = lo.srq_pair(&srq, big);
    // Sends complete on `big` along with the receives; 3 signaled SENDs leave 1 receive.
    let sge = [mr.sge(..64).unwrap()];
    for id in 0..3 {
        // SAFETY: the first 64 bytes of `mr` are never written.
        unsafe { sender.post_send_wr(&mut SendWr::send(id, &sge)).unwrap() };
    }
    let seen = wait_event(&events, |e| matches!(e, AsyncEvent::SrqLimitReached(_)));
    assert_eq!(seen.last(), Some(&AsyncEvent::SrqLimitReached(srq.id())), "seen: {seen:?}");
    drop((s1, r1, s2, r2, sender, receiver));
}

#[cfg(feature = "tokio")]
#[test]
fn completions_of_real_traffic_are_awaited_on_a_current_thread_runtime() {
    use rdma_verbs::reactor::CompletionStream;

    let Some(ctx) = require_device(RXE) else { return };
    let channel = ctx.create_comp_channel().unwrap();
    let lo = Loopback::with_cq(&ctx, ctx.create_cq_with_channel(16, &channel, 0).unwrap());
    let mut mr = lo.region(4096);
    let (a, b) = lo.rc_pair(4, AccessFlags::empty());
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let mut stream = CompletionStream::new(&lo.cq, &channel).unwrap();
        // Rounds one after another: each needs the CQ re-armed after the previous event.
        for round in 0..10u8 {
            mr.as_mut_slice()[..64].fill(round);
            let (send, recv) = ([mr.sge(..64).unwrap()], [mr.sge(2048..2048 + 64).unwrap()]);
            let id = u64::from(round);
            // SAFETY: neither half of `mr` is touched until both completions are awaited.
            unsafe {
                b.post_recv_wr(&mut RecvWr::new(id, &recv)).unwrap();
                a.post_send_wr(&mut SendWr::send(id, &send).flags(SendFlags::SIGNALED)).unwrap();
            }
            let mut got = Vec::new();
            let mut storage = [WorkCompletion::EMPTY; 4];
            while got.len() < 2 {
                let done = tokio::time::timeout(EVENT_LIMIT, stream.poll(&mut storage))
                    .await
                    .unwrap_or_else(|_| panic!("round {round}: no completion within 30 s: {got:?}"))
                    .unwrap();
                got.extend(done.iter().map(|wc| (wc.wr_id(), wc.opcode(), wc.status())));
            }
            got.sort_by_key(|&(_, opcode, _)| opcode.0);
            assert_eq!(
                got,
                [(id, WcOpcode::SEND, WcStatus::SUCCESS), (id, WcOpcode::RECV, WcStatus::SUCCESS)]
            );
        }
        // Nothing outstanding: the stream sleeps instead of spinning or inventing one.
        let idle = tokio::time::timeout(QUIET, stream.next()).await;
        assert!(idle.is_err(), "{idle:?}");
    });
    assert!(mr.as_slice()[2048..2048 + 64].iter().all(|&b| b == 9), "the last round's bytes");
    drop((a, b));
}

/// The netdev under rxe0's port 1, from sysfs.
fn rxe_netdev() -> String {
    let path = format!("/sys/class/infiniband/{RXE}/ports/{PORT}/gid_attrs/ndevs/0");
    let name = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    name.trim().to_owned()
}

/// `ip link set NETDEV up|down`.
fn set_link(netdev: &str, state: &str) {
    let out = Command::new("ip").args(["link", "set", netdev, state]).output().unwrap();
    assert!(out.status.success(), "ip link set {netdev} {state}: {}", text(&out));
}

/// Brings the link back up however the test ends, so later tests find the port as it was.
struct LinkUp<'a>(&'a str);

impl Drop for LinkUp<'_> {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "set", self.0, "up"]).status();
    }
}

#[test]
fn link_down_and_up_raise_port_error_then_port_active() {
    let Some(ctx) = require_device(RXE) else { return };
    let events = ctx.async_events().unwrap();
    let gids = ctx.gid_table(PORT).unwrap();
    assert_eq!(ctx.query_port(PORT).unwrap().state(), PortState::ACTIVE);
    let netdev = rxe_netdev();
    let _restore = LinkUp(&netdev);

    set_link(&netdev, "down");
    let seen = wait_event(&events, |e| matches!(e, AsyncEvent::PortError(_)));
    assert_eq!(seen.last(), Some(&AsyncEvent::PortError(PORT)), "seen: {seen:?}");
    assert_ne!(ctx.query_port(PORT).unwrap().state(), PortState::ACTIVE);

    set_link(&netdev, "up");
    let seen = wait_event(&events, |e| matches!(e, AsyncEvent::PortActive(_)));
    assert_eq!(seen.last(), Some(&AsyncEvent::PortActive(PORT)), "seen: {seen:?}");
    // The port and its GID table are as before (IPv6 link-local GIDs come back with the link).
    let start = Instant::now();
    while ctx.query_port(PORT).unwrap().state() != PortState::ACTIVE
        || ctx.gid_table(PORT).unwrap() != gids
    {
        assert!(start.elapsed() < EVENT_LIMIT, "{:?} vs {gids:?}", ctx.gid_table(PORT).unwrap());
        std::thread::sleep(Duration::from_millis(100));
    }
}
