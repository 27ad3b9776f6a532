//! Faults and bad input on rxe0, each with its exact outcome: error completions and the QP
//! state they leave, flushes, CQ sizing, WRs refused before posting, zero-length data,
//! immediate data, and posting from several threads.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdma_verbs::*;

use super::pair::{
    assert_holds, assert_quiet, pattern, ud_in_rts, wait_for, wait_for_success, Loopback, PORT,
};
use rdma_verbs_device_tests::{require_device, RXE};

/// How many completions each `wr_id` got, and with which statuses.
fn tally(wcs: &[WorkCompletion]) -> BTreeMap<u64, Vec<WcStatus>> {
    let mut t = BTreeMap::<u64, Vec<WcStatus>>::new();
    for wc in wcs {
        t.entry(wc.wr_id()).or_default().push(wc.status());
    }
    t
}

/// How rxe (Linux 6.1) completes a SEND whose SGE names no region: a local QP operation
/// error (mlx5 reports a local protection error).
const RXE_BAD_LKEY: WcStatus = WcStatus::LOC_QP_OP_ERR;

/// A send whose only SGE names an lkey no region has: the requester fails it locally, which
/// moves its QP to ERROR.
fn bad_lkey(mr: &MemoryRegion<'_>) -> [Sge; 1] {
    let good = mr.sge(..64).unwrap();
    [Sge::new(good.addr(), 64, LKey::new(mr.lkey().get() ^ 0xff00))]
}

#[test]
fn a_send_without_a_receive_and_rnr_retry_0_fails_and_the_program_goes_on() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let mr = lo.region(4096);
    let rts = ToRtsAttr {
        rnr_retry: RnrRetry::new(0).unwrap(),
        ..ToRtsAttr::new(Psn::new(100).unwrap())
    };
    let (a, b) = lo.pair_with::<Rc>(&lo.attr(4), AccessFlags::empty(), &rts);

    let send = [mr.sge(..64).unwrap()];
    // SAFETY: `mr` is not written while the WR is outstanding. b has posted no receive.
    unsafe { a.post_send_wr(&mut SendWr::send(1, &send).flags(SendFlags::SIGNALED)).unwrap() };
    let wc = &wait_for(&lo.cq, 1)[0];
    assert_eq!(
        (wc.wr_id(), wc.status(), wc.qp_num()),
        (1, WcStatus::RNR_RETRY_EXC_ERR, a.qp_num()),
        "{wc:?}"
    );
    assert_eq!(a.query_state().unwrap(), QueuePairState::ERR, "the error moved the QP to ERROR");
    assert_eq!(b.query_state().unwrap(), QueuePairState::RTS, "the responder is untouched");
    assert_quiet(&lo.cq, Duration::from_millis(200), "one completion, once");

    // The program goes on: the failed QP is destroyed cleanly, and the same PD, CQ and memory
    // serve a new pair.
    a.destroy().unwrap();
    let (c, d) = lo.rc_pair(4, AccessFlags::empty());
    let recv = [mr.sge(2048..).unwrap()];
    // SAFETY: the receive area is not touched, the send area not written, until both complete.
    unsafe {
        d.post_recv_wr(&mut RecvWr::new(2, &recv)).unwrap();
        c.post_send_wr(&mut SendWr::send(3, &send).flags(SendFlags::SIGNALED)).unwrap();
    }
    wait_for_success(&lo.cq, 2);
    drop(b);
}

#[test]
fn an_rdma_write_with_a_wrong_rkey_is_a_remote_access_error_on_the_requester() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let src = lo.region(4096);
    let mut target = lo.write_target(4096);
    target.write(0, &[0xaa; 4096]).unwrap();
    let (a, b) = lo.rc_pair(4, AccessFlags::REMOTE_WRITE);

    let remote = target.remote(..).unwrap();
    let wrong = RemoteAddr { addr: remote.addr, rkey: RKey::new(remote.rkey.get() ^ 0x0001_0000) };
    let sge = [src.sge(..).unwrap()];
    // SAFETY: `src` is not written while the WR is outstanding.
    unsafe { a.post_send_wr(&mut SendWr::rdma_write(1, &sge, wrong).flags(SendFlags::SIGNALED)) }
        .unwrap();
    let wc = &wait_for(&lo.cq, 1)[0];
    assert_eq!(
        (wc.wr_id(), wc.status(), wc.qp_num()),
        (1, WcStatus::REM_ACCESS_ERR, a.qp_num()),
        "{wc:?}"
    );
    assert_eq!(a.query_state().unwrap(), QueuePairState::ERR);
    assert_quiet(&lo.cq, Duration::from_millis(200), "one completion, once");
    assert_holds(&target, 0, &[0xaa; 4096], "nothing was written");
    drop(b);
}

#[test]
fn after_error_every_outstanding_wr_completes_exactly_once_flushed() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 64);
    let mr = lo.region(16 * 64);
    let (a, b) = lo.rc_pair(16, AccessFlags::empty());

    // Eight receives on a's own queue (b never sends), then one list of eight sends whose
    // first fails locally; every other send is unsignaled.
    let slots: Vec<_> = (8..16).map(|i| [mr.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
    for (i, sge) in slots.iter().enumerate() {
        // SAFETY: `mr` is not touched until every WR has completed.
        unsafe { a.post_recv_wr(&mut RecvWr::new(100 + i as u64, sge)).unwrap() };
    }
    let bad = bad_lkey(&mr);
    let good: Vec<_> = (1..8).map(|i| [mr.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
    let mut wrs = vec![SendWr::send(1, &bad).flags(SendFlags::SIGNALED)];
    for (i, sge) in good.iter().enumerate() {
        let flags = if i % 2 == 0 { SendFlags::empty() } else { SendFlags::SIGNALED };
        wrs.push(SendWr::send(2 + i as u64, sge).flags(flags));
    }
    let mut wrs = SendWrList::from(wrs);
    // SAFETY: as above.
    unsafe { a.post_send_wrs(&mut wrs).unwrap() };

    let wcs = wait_for(&lo.cq, 16);
    assert_quiet(&lo.cq, Duration::from_millis(300), "nothing completes twice");
    let mut expected = BTreeMap::new();
    expected.insert(1, vec![RXE_BAD_LKEY]);
    for id in (2..=8).chain(100..108) {
        expected.insert(id, vec![WcStatus::WR_FLUSH_ERR]);
    }
    assert_eq!(tally(&wcs), expected, "signaled or not, each WR exactly once: {wcs:?}");
    assert!(wcs.iter().all(|wc| wc.qp_num() == a.qp_num()));
    assert_eq!(a.query_state().unwrap(), QueuePairState::ERR);
    drop(b);
}

#[test]
fn a_qp_error_leaves_the_srq_receives_to_its_other_qps() {
    let Some(ctx) = require_device(RXE) else { return };
    // The fixture's CQ takes the send completions.
    let lo = Loopback::new(&ctx, 32);
    let (send_cq, recv_cq) = (&lo.cq, ctx.create_cq(32).unwrap());
    let mr = lo.region(8 * 64);
    let srq = lo.pd.create_srq(8, 1).unwrap();
    let (sx, x) = lo.srq_pair(&srq, &recv_cq);
    let (sy, y) = lo.srq_pair(&srq, &recv_cq);

    let slots: Vec<_> = (4..8).map(|i| [mr.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
    for (i, sge) in slots.iter().enumerate() {
        // SAFETY: `mr` is not touched until the receives complete.
        unsafe { srq.post_recv_wr(&mut RecvWr::new(100 + i as u64, sge)).unwrap() };
    }
    // x fails a send of its own and enters ERROR.
    let bad = bad_lkey(&mr);
    // SAFETY: as above.
    unsafe { x.post_send_wr(&mut SendWr::send(1, &bad).flags(SendFlags::SIGNALED)).unwrap() };
    let wc = &wait_for(send_cq, 1)[0];
    assert_eq!((wc.wr_id(), wc.status(), wc.qp_num()), (1, RXE_BAD_LKEY, x.qp_num()), "{wc:?}");
    assert_eq!(x.query_state().unwrap(), QueuePairState::ERR);
    assert_quiet(&recv_cq, Duration::from_millis(300), "the SRQ's receives are not x's to flush");

    // y consumes all four afterwards.
    let sends: Vec<_> = (0..4).map(|i| [mr.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
    for (i, sge) in sends.iter().enumerate() {
        // SAFETY: as above.
        unsafe {
            sy.post_send_wr(&mut SendWr::send(10 + i as u64, sge).flags(SendFlags::SIGNALED))
        }
        .unwrap();
    }
    wait_for_success(send_cq, 4);
    let recvs = wait_for(&recv_cq, 4);
    let mut expected = BTreeMap::new();
    for id in 100..104 {
        expected.insert(id, vec![WcStatus::SUCCESS]);
    }
    assert_eq!(tally(&recvs), expected, "{recvs:?}");
    assert!(recvs.iter().all(|wc| wc.qp_num() == y.qp_num()), "{recvs:?}");
    drop(sx);
}

#[test]
fn a_cq_smaller_than_the_wrs_it_may_hold_is_refused_at_qp_creation() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 4);
    let (pd, cq) = (&lo.pd, &lo.cq);
    let room = cq.capacity();
    // One CQ for both queues: room + 1 WRs do not fit.
    let cap = QpCapabilities { max_send_wr: room, max_recv_wr: 1, ..Default::default() };
    let err = pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(cq) }).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::CqTooSmall), "{err:?}");
    let need = room + 1;
    assert_eq!(
        err.to_string(),
        format!(
            "the CQ holds {room} completions but this QP can have {need} work requests \
             outstanding on it (max_send_wr {room} + max_recv_wr 1): create the CQ with at \
             least {need} entries or lower the QP's capacities"
        )
    );
    // Exactly full is enough.
    let cap = QpCapabilities { max_send_wr: room - 1, ..cap };
    drop(pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(cq) }).unwrap());

    // An SRQ's receives may all complete through one of its QPs: its size counts.
    let srq = pd.create_srq(4 * room, 1).unwrap();
    let big = ctx.create_cq(4 * room).unwrap();
    let cap = QpCapabilities { max_send_wr: 1, max_recv_wr: 1, ..Default::default() };
    let attr = QpInitAttr { cap, recv_cq: cq, srq: Some(&srq), ..QpInitAttr::new(&big) };
    let err = pd.create_rc_qp(&attr).unwrap_err();
    let n = srq.max_wr();
    assert_eq!(
        err.to_string(),
        format!(
            "the receive CQ holds {room} completions but this QP can have {n} work requests \
             outstanding on it (the SRQ's {n} receives): create the CQ with at least {n} \
             entries or lower the QP's capacities"
        )
    );
}

#[test]
fn too_many_sges_inline_data_or_a_datagram_above_the_mtu_are_refused_before_posting() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let mr = lo.region(8192);
    let mut attr = lo.attr(4);
    attr.cap.max_inline_data = 32;
    let (a, b) = lo.pair::<Rc>(&attr, AccessFlags::empty());
    let caps = a.caps();

    let n = caps.max_send_sge as usize + 1;
    let sges: Vec<_> = (0..n).map(|i| mr.sge(i * 16..(i + 1) * 16).unwrap()).collect();
    // SAFETY: refused before posting.
    let err = unsafe { a.post_send_wr(&mut SendWr::send(1, &sges)) }.unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::TooManySges), "{err:?}");
    let max = caps.max_send_sge;
    assert_eq!(
        err.to_string(),
        format!("the WR has {n} SGEs; this QP allows {max} (max_send_sge)")
    );

    let len = caps.max_inline_data as usize + 1;
    let inline = [mr.sge(..len).unwrap()];
    let mut wr = SendWr::send(2, &inline).flags(SendFlags::INLINE | SendFlags::SIGNALED);
    // SAFETY: refused before posting.
    let err = unsafe { a.post_send_wr(&mut wr) }.unwrap_err();
    let max = caps.max_inline_data;
    assert_eq!(
        err.to_string(),
        format!("{len} bytes cannot be sent inline; this QP allows {max} (max_inline_data)")
    );

    // UD: the path MTU bounds a datagram, in both tiers; an unaddressed send is refused too.
    let mtu = ctx.query_port(PORT).unwrap().active_mtu().bytes().unwrap() as usize;
    let pool = lo.pool(2, 8192);
    let ah = lo.ah();
    let u = ud_in_rts(&lo.pd, &lo.attr(2), 7);
    let dest = UdDestination { ah: &ah, qpn: u.qp_num(), qkey: 7 };
    let too_long =
        format!("a UD message carries at most the path MTU, {mtu} bytes, not {}", mtu + 1);
    let big = [mr.sge(..mtu + 1).unwrap()];
    // SAFETY: refused before posting.
    let err = unsafe { u.post_send_wr(&mut SendWr::send(3, &big).to(&dest)) }.unwrap_err();
    assert_eq!(err.to_string(), too_long);
    let mut buf = pool.take().unwrap();
    buf.set_len(mtu + 1).unwrap();
    let err = u.try_post_send_buffer_to(buf, &dest, None).unwrap_err();
    assert_eq!(err.error.to_string(), too_long);
    assert_eq!(err.buffer.unwrap().len(), mtu + 1, "the buffer comes back");
    let one = [mr.sge(..16).unwrap()];
    // SAFETY: refused before posting.
    let err = unsafe { u.post_send_wr(&mut SendWr::send(4, &one)) }.unwrap_err();
    assert_eq!(
        err.to_string(),
        "a UD QP posts only SENDs addressed with SendWr::to(&UdDestination)"
    );

    assert_quiet(&lo.cq, Duration::from_millis(200), "nothing reached the NIC");
    drop(b);
}

#[test]
fn zero_length_regions_are_refused_and_zero_length_messages_arrive_empty() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 32);
    let pd = &lo.pd;
    let one_byte = "a memory region needs at least 1 byte";
    let err = pd.register(0, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Size), "{err:?}");
    assert_eq!(err.to_string(), one_byte);
    let err = pd.register(&mut [][..], AccessFlags::LOCAL_WRITE).unwrap_err();
    assert_eq!(err.to_string(), one_byte);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    assert_eq!(pd.register_remote_writable(0, access).unwrap_err().to_string(), one_byte);

    let mut mr = lo.region(4096);
    let err = mr.sge(64..64).unwrap_err();
    assert_eq!(err.to_string(), "range 64..64 is empty or outside the 4096-byte memory region");
    let pool = lo.pool(4, 1024);
    let mut attr = lo.attr(8);
    attr.cap.max_send_sge = 2;
    let (a, b) = lo.pair::<Rc>(&attr, AccessFlags::empty());

    mr.as_mut_slice()[..16].copy_from_slice(&pattern(16, 9));
    let recv: Vec<_> = (0..3).map(|i| [mr.sge(1024 * (i + 1)..1024 * (i + 2)).unwrap()]).collect();
    // A SEND with no SGE, one with immediate data and no SGE, and one whose first SGE is empty
    // (a 0-byte SGE carries nothing) followed by 16 bytes.
    let empty = Sge::new(mr.addr() + 512, 0, mr.lkey());
    let mixed = [empty, mr.sge(..16).unwrap()];
    // SAFETY: `mr` is not touched until every WR has completed.
    unsafe {
        for (i, sge) in recv.iter().enumerate() {
            b.post_recv_wr(&mut RecvWr::new(10 + i as u64, sge)).unwrap();
        }
        a.post_send_wr(&mut SendWr::send(1, &[]).flags(SendFlags::SIGNALED)).unwrap();
        a.post_send_wr(&mut SendWr::send_with_imm(2, &[], 0x1234).flags(SendFlags::SIGNALED))
            .unwrap();
        a.post_send_wr(&mut SendWr::send(3, &mixed).flags(SendFlags::SIGNALED)).unwrap();
    }
    let wcs = wait_for_success(&lo.cq, 6);
    let mut recvs: Vec<_> = wcs
        .iter()
        .filter(|wc| wc.opcode() == WcOpcode::RECV)
        .map(|wc| (wc.wr_id(), wc.byte_len(), wc.imm_data()))
        .collect();
    recvs.sort();
    assert_eq!(recvs, [(10, 0, None), (11, 0, Some(0x1234)), (12, 16, None)]);
    assert_eq!(&mr.as_slice()[3072..3088], &pattern(16, 9)[..]);

    // The safe tier: an empty buffer is posted with no SGE; the receiver's comes back empty.
    b.post_recv_buffer(pool.take().unwrap()).unwrap();
    a.post_send_buffer(pool.take().unwrap(), SendOp::Send).unwrap();
    for mut wc in wait_for(&lo.cq, 2) {
        assert!(wc.is_success(), "{wc:?}");
        let buf = pool.complete(&mut wc).unwrap();
        assert!(buf.is_empty(), "{wc:?}");
    }
}

#[test]
fn immediate_data_is_read_only_when_the_completion_flags_it() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 32);
    let mr = lo.region(4096);
    let target = lo.write_target(64);
    let (a, b) = lo.rc_pair(8, AccessFlags::REMOTE_WRITE);
    let recv: Vec<_> = (0..3).map(|i| [mr.sge(1024 * (i + 1)..1024 * (i + 2)).unwrap()]).collect();
    let sge = [mr.sge(..8).unwrap()];
    let remote = target.remote(..).unwrap();
    // In order: SEND with immediate, plain SEND, RDMA WRITE with immediate.
    let mut wrs = [
        SendWr::send_with_imm(1, &sge, 0xdead_beef),
        SendWr::send(2, &sge),
        SendWr::rdma_write_with_imm(3, &sge, remote, 0x0102_0304),
    ];
    // SAFETY: `mr` is not touched until every WR has completed.
    unsafe {
        for (i, sge) in recv.iter().enumerate() {
            b.post_recv_wr(&mut RecvWr::new(10 + i as u64, sge)).unwrap();
        }
        for wr in &mut wrs {
            wr.set_flags(SendFlags::SIGNALED);
            a.post_send_wr(wr).unwrap();
        }
    }
    // One slot of storage, reused for every completion: one without immediate data lands where
    // an earlier one's immediate was, and must not show it.
    let mut slot = [WorkCompletion::EMPTY];
    let mut seen = Vec::new();
    let start = Instant::now();
    while seen.len() < 6 {
        assert!(start.elapsed() < Duration::from_secs(30), "{seen:?}");
        if let [wc] = lo.cq.poll(&mut slot).unwrap() {
            let flagged = wc.as_raw().wc_flags & sys::IBV_WC_WITH_IMM != 0;
            let receive = wc.opcode().0 & sys::IBV_WC_RECV != 0;
            assert_eq!(wc.imm_data().is_some(), flagged && receive, "{wc:?}");
            seen.push((wc.wr_id(), wc.opcode(), wc.imm_data()));
        }
    }
    seen.sort_by_key(|s| s.0);
    assert_eq!(
        seen,
        [
            (1, WcOpcode::SEND, None),
            (2, WcOpcode::SEND, None),
            (3, WcOpcode::RDMA_WRITE, None),
            (10, WcOpcode::RECV, Some(0xdead_beef)),
            (11, WcOpcode::RECV, None),
            (12, WcOpcode::RECV_RDMA_WITH_IMM, Some(0x0102_0304)),
        ]
    );
}

const THREADS: usize = 4;
const PER_THREAD: usize = 64;
const MESSAGES: usize = THREADS * PER_THREAD;

/// The `wr_id` of thread `t`'s `k`th send.
fn send_id(t: usize, k: usize) -> u64 {
    ((t as u64) << 32) | k as u64
}

/// Polls `cq` on the calling thread until `n` completions arrived (60 s at most), handing
/// each to `each` as it arrives.
fn poll_each<R>(
    cq: &CompletionQueue<'_>,
    n: usize,
    mut each: impl FnMut(WorkCompletion) -> R,
) -> Vec<R> {
    let start = Instant::now();
    let mut got = Vec::with_capacity(n);
    let mut storage: [WorkCompletion; 16] = Default::default();
    while got.len() < n && start.elapsed() < Duration::from_secs(60) {
        for wc in cq.poll(&mut storage).unwrap() {
            got.push(each(std::mem::take(wc)));
        }
    }
    got
}

/// Asserts that every send id was sent once and received once.
fn assert_nothing_lost(mut sent: Vec<u64>, mut received: Vec<u64>) {
    sent.sort();
    received.sort();
    let all: Vec<_> =
        (0..THREADS).flat_map(|t| (0..PER_THREAD).map(move |k| send_id(t, k))).collect();
    assert_eq!(sent, all, "every send completed exactly once");
    assert_eq!(received, all, "every message arrived exactly once");
}

#[test]
fn threads_posting_on_one_qp_with_a_polling_thread_lose_nothing_raw() {
    let Some(ctx) = require_device(RXE) else { return };
    // The fixture's CQ takes the send completions.
    let lo = Loopback::new(&ctx, MESSAGES as u32);
    let (send_cq, recv_cq) = (&lo.cq, ctx.create_cq(MESSAGES as u32).unwrap());
    let mut src = lo.region(MESSAGES * 8);
    let dst = lo.region(MESSAGES * 64);
    let attr = QpInitAttr { recv_cq: &recv_cq, ..lo.attr(MESSAGES as u32) };
    let (a, b) = lo.pair::<Rc>(&attr, AccessFlags::empty());
    for t in 0..THREADS {
        for k in 0..PER_THREAD {
            let i = t * PER_THREAD + k;
            src.as_mut_slice()[i * 8..(i + 1) * 8].copy_from_slice(&send_id(t, k).to_le_bytes());
        }
    }
    let slots: Vec<_> = (0..MESSAGES).map(|i| [dst.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
    for (i, sge) in slots.iter().enumerate() {
        // SAFETY: `dst` is not read until every receive has completed.
        unsafe { b.post_recv_wr(&mut RecvWr::new(i as u64, sge)).unwrap() };
    }

    let (a, src) = (&a, &src);
    let (sends, recvs) = std::thread::scope(|s| {
        let sends = s.spawn(|| poll_each(send_cq, MESSAGES, |wc| wc));
        let recvs = s.spawn(|| poll_each(&recv_cq, MESSAGES, |wc| wc));
        for t in 0..THREADS {
            s.spawn(move || {
                for k in 0..PER_THREAD {
                    let i = t * PER_THREAD + k;
                    let sge = [src.sge(i * 8..(i + 1) * 8).unwrap()];
                    let mut wr = SendWr::send(send_id(t, k), &sge).flags(SendFlags::SIGNALED);
                    // SAFETY: `src` is not written while any send is outstanding.
                    unsafe { a.post_send_wr(&mut wr).unwrap() };
                }
            });
        }
        (sends.join().unwrap(), recvs.join().unwrap())
    });
    assert_eq!((sends.len(), recvs.len()), (MESSAGES, MESSAGES), "completions after 60 s");
    let received = recvs
        .iter()
        .map(|wc| {
            assert!(wc.is_success() && wc.byte_len() == 8, "{wc:?}");
            let i = wc.wr_id() as usize;
            u64::from_le_bytes(dst.as_slice()[i * 64..i * 64 + 8].try_into().unwrap())
        })
        .collect();
    let sent = sends
        .iter()
        .map(|wc| {
            assert!(wc.is_success(), "{wc:?}");
            wc.wr_id()
        })
        .collect();
    assert_nothing_lost(sent, received);
}

#[test]
fn threads_posting_pool_buffers_on_one_qp_with_a_polling_thread_lose_nothing_safe() {
    let Some(ctx) = require_device(RXE) else { return };
    // The fixture's CQ takes the send completions.
    let lo = Loopback::new(&ctx, MESSAGES as u32);
    let (send_cq, recv_cq) = (&lo.cq, ctx.create_cq(MESSAGES as u32).unwrap());
    // Fewer send buffers than messages: the posters wait for the poller to return them.
    let (sending, receiving) = (lo.pool(32, 64), lo.pool(MESSAGES, 64));
    let mut attr = QpInitAttr { recv_cq: &recv_cq, ..lo.attr(MESSAGES as u32) };
    attr.cap.max_send_wr = 32;
    let (a, b) = lo.pair::<Rc>(&attr, AccessFlags::empty());
    while let Some(buf) = receiving.take() {
        b.post_recv_buffer(buf).unwrap();
    }

    // Each completion hands its buffer back; what the buffer carries is its id.
    let id_of = |pool: &BufferPool<'_>, mut wc: WorkCompletion| {
        assert!(wc.is_success(), "{wc:?}");
        let buf = pool.complete(&mut wc).expect("a buffer of the pool");
        u64::from_le_bytes(buf.as_slice().try_into().unwrap())
    };
    let (a, sending, receiving) = (&a, &sending, &receiving);
    let (sent, received) = std::thread::scope(|s| {
        let sent = s.spawn(|| poll_each(send_cq, MESSAGES, |wc| id_of(sending, wc)));
        let received = s.spawn(|| poll_each(&recv_cq, MESSAGES, |wc| id_of(receiving, wc)));
        for t in 0..THREADS {
            s.spawn(move || {
                let start = Instant::now();
                for k in 0..PER_THREAD {
                    let mut buf = loop {
                        match sending.take() {
                            Some(buf) => break buf,
                            None if start.elapsed() < Duration::from_secs(60) => {
                                std::thread::yield_now()
                            }
                            None => panic!("no send buffer came back in 60 s"),
                        }
                    };
                    buf.fill(&send_id(t, k).to_le_bytes()).unwrap();
                    a.post_send_buffer(buf, SendOp::Send).unwrap();
                }
            });
        }
        (sent.join().unwrap(), received.join().unwrap())
    });
    assert_nothing_lost(sent, received);
    assert_eq!(
        std::iter::from_fn(|| sending.take()).collect::<Vec<_>>().len(),
        32,
        "every send buffer came back"
    );
}
