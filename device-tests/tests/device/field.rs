//! Faults from the field on rxe0: a full send queue on both verbs paths, a refused
//! batch that strands nothing, and draining a QP so a reconnecting service keeps its pool.

use std::time::Duration;

use rdma_verbs::*;

use super::pair::{connect_with, wait_for, Loopback, PORT};
use rdma_verbs_device_tests::{require_device, RXE};

/// How long a drain may take on rxe (flushes are immediate; rxe is slow, not stuck).
const DRAIN: Duration = Duration::from_secs(10);

/// The errno and verb each path reports for a full send queue on rxe.
const FULL: [(VerbsPath, &str, i32); 2] = [
    (VerbsPath::Extended, "ibv_wr_complete", libc::ENOSPC),
    (VerbsPath::Legacy, "ibv_post_send", libc::ENOMEM),
];

#[test]
fn a_full_send_queue_is_work_queue_full_on_both_paths_and_a_refused_list_strands_nothing() {
    let Some(ctx) = require_device(RXE) else { return };
    for (path, verb, errno) in FULL {
        let lo = Loopback::new(&ctx, 256);
        let pool = lo.pool(64, 64);
        let attr = QpInitAttr { verbs_path: Some(path), ..lo.attr(8) };
        // b never posts a receive and a retries RNR forever: every SEND stays queued.
        let rts =
            ToRtsAttr { rnr_retry: RnrRetry::INFINITE, ..ToRtsAttr::new(Psn::new(1).unwrap()) };
        let (a, b) = lo.pair_with::<Rc>(&attr, AccessFlags::empty(), &rts);
        assert_eq!(a.verbs_path(), path);
        let mut in_flight = 0;
        let err = loop {
            let mut buffer = pool.take().unwrap();
            buffer.fill(b"x").unwrap();
            match a.post_send_buffer(buffer, SendOp::Send) {
                Ok(()) => in_flight += 1,
                Err(e) => break e,
            }
            assert!(
                in_flight < 64,
                "{path:?}: 64 SENDs fit a send queue of {}",
                a.caps().max_send_wr
            );
        };
        let Error::WorkQueueFull { verb: got, source } = &err else { panic!("{path:?}: {err:?}") };
        assert_eq!((*got, source.raw_os_error()), (verb, Some(errno)), "{err}");
        assert!(err.to_string().contains("reap completions before posting more"), "{err}");
        let mut list = SendBufferList::with_capacity(12);
        for _ in 0..12 {
            let mut buffer = pool.take().unwrap();
            buffer.fill(b"x").unwrap();
            list.push(buffer, SendOp::Send).unwrap();
        }
        let err = a.post_send_buffers(&mut list, true).unwrap_err();
        assert!(matches!(err, Error::WorkQueueFull { .. }), "{path:?}: {err}");
        assert_eq!(list.len(), 12, "{path:?}: the refused list is handed back whole");
        while list.pop().is_some() {}
        let free: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
        assert_eq!(free.len(), 64 - in_flight, "{path:?}: only the queued SENDs are in flight");
        drop(free);
        let mut returned = 0;
        let a = a
            .drain(&[&lo.cq], DRAIN, |wc| returned += usize::from(pool.complete(wc).is_some()))
            .unwrap();
        assert_eq!(returned, in_flight, "{path:?}");
        assert_eq!(
            std::iter::from_fn(|| pool.take()).collect::<Vec<_>>().len(),
            64,
            "{path:?}: 64 of 64 free"
        );
        drop((a, b));
    }
}

#[test]
fn a_service_reconnecting_100_times_on_one_pool_never_runs_out() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 64);
    let pool = lo.pool(8, 64);
    let attr = lo.attr(8);
    let mut qps = (lo.pd.create_rc_qp(&attr).unwrap(), lo.pd.create_rc_qp(&attr).unwrap());
    for round in 0..100 {
        let init = ToInitAttr { port: PORT, ..Default::default() };
        let (a, b) = (qps.0.into_init(&init).unwrap(), qps.1.into_init(&init).unwrap());
        let rts =
            ToRtsAttr { rnr_retry: RnrRetry::INFINITE, ..ToRtsAttr::new(Psn::new(1).unwrap()) };
        let (a, b) = connect_with(&ctx, a, b, &rts);
        // The service's receives, and sends its peer never takes: all outstanding when the
        // connection is torn down.
        for i in 0..8 {
            let buffer = pool.take().unwrap_or_else(|| panic!("round {round}: the pool ran out"));
            if i % 2 == 0 {
                a.post_recv_buffer(buffer).unwrap();
            } else {
                a.post_send_buffer(buffer, SendOp::Send).unwrap();
            }
        }
        let give_back = |wc: &mut WorkCompletion| drop(pool.complete(wc));
        qps = (
            a.drain(&[&lo.cq], DRAIN, give_back).unwrap(),
            b.drain(&[&lo.cq], DRAIN, give_back).unwrap(),
        );
    }
    assert_eq!(std::iter::from_fn(|| pool.take()).collect::<Vec<_>>().len(), 8);
}

/// How long the default RTS attributes may take to give up on rxe (7 tries of ≈ 0.54 s, or
/// 6 RNR waits of 491.52 ms, plus rxe's scheduling).
const GIVE_UP: Duration = Duration::from_secs(10);

#[test]
fn with_the_default_rts_attributes_a_dead_peer_and_a_receiver_that_never_posts_end_in_bounded_time()
{
    let Some(ctx) = require_device(RXE) else { return };
    // (the peer's fate, the status the SEND ends with)
    for (peer_dies, status) in
        [(true, WcStatus::RETRY_EXC_ERR), (false, WcStatus::RNR_RETRY_EXC_ERR)]
    {
        let lo = Loopback::new(&ctx, 16);
        let (a, b) = lo.pair::<Rc>(&QpInitAttr::new(&lo.cq), AccessFlags::empty());
        // Either b is gone, or it lives to the end of the round and never posts a receive.
        let _b = if peer_dies {
            b.destroy().unwrap();
            None
        } else {
            Some(b)
        };
        let start = std::time::Instant::now();
        // SAFETY: a zero-length SEND names no memory.
        unsafe { a.post_send_wr(&mut SendWr::send(1, &[]).flags(SendFlags::SIGNALED)).unwrap() };
        let mut storage: [WorkCompletion; 1] = Default::default();
        let wc = lo.cq.wait_for(1, GIVE_UP, &mut storage).unwrap();
        assert_eq!((wc[0].wr_id(), wc[0].status()), (1, status), "peer dies: {peer_dies}");
        assert!(start.elapsed() < GIVE_UP);
    }
}

/// A receiver a busy host holds up for a second (far past ibv_rc_pingpong's RNR budget of
/// 6 × 0.64 ms) still gets the SEND with the default attributes: the sender resends until the
/// receive is there.
#[test]
fn with_the_default_attributes_a_receive_posted_a_second_late_still_gets_the_send() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let (a, b) = lo.pair::<Rc>(&QpInitAttr::new(&lo.cq), AccessFlags::empty());
    let mr = lo.region(64);
    let sge = [mr.sge(..32).unwrap()];
    // SAFETY: `mr` is not written while the WR is outstanding; it outlives both QPs.
    unsafe { a.post_send_wr(&mut SendWr::send(1, &sge).flags(SendFlags::SIGNALED)).unwrap() };
    std::thread::sleep(Duration::from_secs(1));
    let recv = [mr.sge(32..64).unwrap()];
    // SAFETY: read only after its completion; `mr` outlives both QPs.
    unsafe { b.post_recv_wr(&mut RecvWr::new(2, &recv)).unwrap() };
    // (An RNR_RETRY_EXC_ERR of the SEND leaves the receive waiting: named by the timeout.)
    let mut got: Vec<_> = wait_for(&lo.cq, 2).iter().map(|wc| (wc.wr_id(), wc.status())).collect();
    got.sort_unstable_by_key(|&(wr_id, _)| wr_id);
    assert_eq!(got, [(1, WcStatus::SUCCESS), (2, WcStatus::SUCCESS)]);
}

#[test]
fn a_read_or_atomic_on_a_qp_without_read_credits_is_refused_instead_of_hanging() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let access = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    // rxe accepts max_rd_atomic 0 and then never issues the READ: no completion, ever.
    let rts = ToRtsAttr { max_rd_atomic: 0, ..ToRtsAttr::new(Psn::new(1).unwrap()) };
    let (a, _b) = lo.pair_with::<Rc>(&QpInitAttr::new(&lo.cq), access, &rts);
    let local = lo.region(64);
    let target = lo.pd.register_remote_writable(64, AccessFlags::LOCAL_WRITE | access).unwrap();
    let (sge, remote) = ([local.sge(..8).unwrap()], target.remote(..).unwrap());
    for wr in [SendWr::rdma_read(1, &sge, remote), SendWr::fetch_add(2, &sge, remote, 1)] {
        // SAFETY: refused before posting; nothing reaches the NIC.
        let err = unsafe { a.post_send_wr(&mut wr.flags(SendFlags::SIGNALED)) }.unwrap_err();
        assert!(err.to_string().contains("max_rd_atomic 0"), "{err}");
    }
    let mut storage: [WorkCompletion; 1] = Default::default();
    assert!(lo.cq.poll(&mut storage).unwrap().is_empty(), "nothing was posted");
}
