//! UD (address handles, Q_Keys, the GRH), UC, shared receive queues and atomics on rxe0, in
//! the raw and the safe tier.

use std::time::Duration;

use rdma_verbs::*;

use super::pair::{
    assert_holds, assert_quiet, pattern, wait_for, wait_for_success, Loopback, PORT,
};
use rdma_verbs_device_tests::{require_device, RXE};

const QKEY: u32 = 0x1111_2222;

/// The port's active MTU in bytes: the largest UD message.
fn mtu(ctx: &Context) -> usize {
    ctx.query_port(PORT).unwrap().active_mtu().bytes().unwrap() as usize
}

/// This port's own GID: the source GID of everything its QPs send.
fn own_gid(ctx: &Context) -> Gid {
    ctx.routable_gid(PORT).unwrap().gid
}

/// `(wr_id, status, opcode)` of each completion, sorted by `wr_id`.
fn outcomes(wcs: &[WorkCompletion]) -> Vec<(u64, WcStatus, WcOpcode)> {
    let mut v: Vec<_> = wcs.iter().map(|wc| (wc.wr_id(), wc.status(), wc.opcode())).collect();
    v.sort_by_key(|o| o.0);
    v
}

/// Checks a UD receive: the GRH names `sender` as source and `payload` follows it at offset 40.
fn assert_datagram(received: &[u8], sender: Gid, payload: &[u8]) {
    assert_eq!(received.len(), Grh::LEN + payload.len(), "GRH area + payload");
    let grh = Grh::from_receive(received).unwrap();
    assert_eq!(grh.source_gid(), sender, "GRH: {:02x?}", grh.as_bytes());
    assert!(&received[Grh::LEN..] == payload, "the payload differs from what was sent");
}

#[test]
fn a_ud_send_arrives_behind_the_grh_and_a_wrong_qkey_is_dropped_raw() {
    let Some(ctx) = require_device(RXE) else { return };
    let mtu = mtu(&ctx);
    let lo = Loopback::new(&ctx, 16);
    let mut send = lo.region(2 * mtu);
    let recv = lo.region(2 * (Grh::LEN + mtu));
    let (a, b) = lo.ud_pair(4, QKEY);
    let ah = lo.ah();

    let slots =
        [0, 1].map(|i| [recv.sge(i * (Grh::LEN + mtu)..(i + 1) * (Grh::LEN + mtu)).unwrap()]);
    // SAFETY: `recv` is not read until the completions below.
    unsafe {
        b.post_recv_wr(&mut RecvWr::new(10, &slots[0])).unwrap();
        b.post_recv_wr(&mut RecvWr::new(11, &slots[1])).unwrap();
    }
    // Two full-MTU datagrams: the first with a Q_Key b does not have, the second with its own.
    send.as_mut_slice()[..mtu].copy_from_slice(&pattern(mtu, 1));
    send.as_mut_slice()[mtu..].copy_from_slice(&pattern(mtu, 2));
    let (wrong, right) = ([send.sge(..mtu).unwrap()], [send.sge(mtu..).unwrap()]);
    let to = |qkey| UdDestination { ah: &ah, qpn: b.qp_num(), qkey };
    let (wrong_key, right_key) = (to(QKEY ^ 1), to(QKEY));
    // SAFETY: `send` is not written until both sends complete.
    unsafe {
        a.post_send_wr(&mut SendWr::send(1, &wrong).to(&wrong_key).flags(SendFlags::SIGNALED))
            .unwrap();
        a.post_send_wr(&mut SendWr::send(2, &right).to(&right_key).flags(SendFlags::SIGNALED))
            .unwrap();
    }
    let wcs = wait_for(&lo.cq, 3);
    let ok = WcStatus::SUCCESS;
    assert_eq!(
        outcomes(&wcs),
        [(1, ok, WcOpcode::SEND), (2, ok, WcOpcode::SEND), (10, ok, WcOpcode::RECV)],
        "both sends leave; only the datagram with b's Q_Key takes a receive: {wcs:?}"
    );
    let wc = wcs.iter().find(|wc| wc.wr_id() == 10).unwrap();
    assert_eq!(wc.byte_len() as usize, Grh::LEN + mtu, "the GRH area counts in byte_len");
    assert_eq!(wc.qp_num(), b.qp_num());
    assert_eq!(wc.as_raw().src_qp, a.qp_num().get(), "the completion names the sending QP");
    assert_ne!(wc.as_raw().wc_flags & sys::IBV_WC_GRH, 0, "the completion flags a GRH");
    assert_datagram(&recv.as_slice()[..Grh::LEN + mtu], own_gid(&ctx), &pattern(mtu, 2));
    assert_quiet(
        &lo.cq,
        Duration::from_millis(300),
        "the wrong-Q_Key datagram was dropped, not delivered",
    );
}

#[test]
fn a_ud_buffer_send_arrives_behind_the_grh_with_its_immediate_safe() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let pool = lo.pool(4, 2048);
    let ah = lo.ah();
    let (a, b) = lo.ud_pair(4, QKEY);
    let dest = UdDestination { ah: &ah, qpn: b.qp_num(), qkey: QKEY };

    b.post_recv_buffer(pool.take().unwrap()).unwrap();
    let payload = pattern(1000, 3);
    let mut buf = pool.take().unwrap();
    buf.fill(&payload).unwrap();
    a.post_send_buffer_to(buf, &dest, Some(0xfeed_f00d)).unwrap();
    let mut seen = Vec::new();
    for mut wc in wait_for(&lo.cq, 2) {
        assert!(wc.is_success(), "{wc:?}");
        let (opcode, imm, qp) = (wc.opcode(), wc.imm_data(), wc.qp_num());
        let buf = pool.complete(&mut wc).expect("a buffer of the pool");
        if opcode == WcOpcode::RECV {
            assert_eq!((qp, imm), (b.qp_num(), Some(0xfeed_f00d)));
            assert_datagram(buf.as_slice(), own_gid(&ctx), &payload);
        } else {
            assert_eq!((qp, imm), (a.qp_num(), None), "the sender's completion has no immediate");
            assert_eq!(buf.as_slice(), &payload[..], "the sent buffer comes back unchanged");
        }
        seen.push(opcode);
    }
    seen.sort_by_key(|o| o.0);
    assert_eq!(seen, [WcOpcode::SEND, WcOpcode::RECV]);
}

#[test]
fn uc_send_and_rdma_write_arrive_byte_for_byte_raw() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let mut local = lo.region(8192);
    let recv = lo.region(4096);
    let target = lo.write_target(4096);
    let (a, b) = lo.pair::<Uc>(&lo.attr(4), AccessFlags::REMOTE_WRITE);

    let (written, sent) = (pattern(3000, 4), pattern(2000, 5));
    local.as_mut_slice()[..3000].copy_from_slice(&written);
    local.as_mut_slice()[4096..6096].copy_from_slice(&sent);
    let (write_sge, send_sge) = ([local.sge(..3000).unwrap()], [local.sge(4096..6096).unwrap()]);
    let recv_sge = [recv.sge(..).unwrap()];
    // SAFETY: `recv` is not read, `local` not written, until the completions below.
    unsafe {
        b.post_recv_wr(&mut RecvWr::new(10, &recv_sge)).unwrap();
        // Multi-packet messages (MTU 1024). UC sends are not acknowledged: the WRITE goes
        // first, so the SEND's receive completing means the WRITE has landed.
        let remote = target.remote(..).unwrap();
        a.post_send_wr(&mut SendWr::rdma_write(1, &write_sge, remote).flags(SendFlags::SIGNALED))
            .unwrap();
        a.post_send_wr(&mut SendWr::send(2, &send_sge).flags(SendFlags::SIGNALED)).unwrap();
    }
    let wcs = wait_for(&lo.cq, 3);
    let ok = WcStatus::SUCCESS;
    assert_eq!(
        outcomes(&wcs),
        [(1, ok, WcOpcode::RDMA_WRITE), (2, ok, WcOpcode::SEND), (10, ok, WcOpcode::RECV)],
        "{wcs:?}"
    );
    assert_eq!(wcs.iter().find(|wc| wc.wr_id() == 10).unwrap().byte_len(), 2000);
    assert!(recv.as_slice()[..2000] == sent[..], "SEND: the receive differs");
    assert_holds(&target, 0, &written, "RDMA WRITE: the target differs");
}

#[test]
fn uc_buffers_write_with_immediate_and_send_safe() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let pool = lo.pool(4, 4096);
    let target = lo.write_target(4096);
    let (a, b) = lo.pair::<Uc>(&lo.attr(4), AccessFlags::REMOTE_WRITE);

    b.post_recv_buffer(pool.take().unwrap()).unwrap();
    b.post_recv_buffer(pool.take().unwrap()).unwrap();
    let (written, sent) = (pattern(2500, 6), pattern(1500, 7));
    let mut buf = pool.take().unwrap();
    buf.fill(&written).unwrap();
    a.post_send_buffer(buf, SendOp::RdmaWriteWithImm(target.remote(..).unwrap(), 77)).unwrap();
    let mut buf = pool.take().unwrap();
    buf.fill(&sent).unwrap();
    a.post_send_buffer(buf, SendOp::Send).unwrap();

    let mut got = Vec::new();
    for mut wc in wait_for(&lo.cq, 4) {
        assert!(wc.is_success(), "{wc:?}");
        let (opcode, imm) = (wc.opcode(), wc.imm_data());
        let buf = pool.complete(&mut wc).expect("a buffer of the pool");
        if opcode == WcOpcode::RECV {
            assert!(buf.as_slice() == sent, "SEND: the receive differs");
        }
        got.push((opcode, imm));
    }
    got.sort_by_key(|g| g.0 .0);
    assert_eq!(
        got,
        [
            (WcOpcode::SEND, None),
            (WcOpcode::RDMA_WRITE, None),
            (WcOpcode::RECV, None),
            (WcOpcode::RECV_RDMA_WITH_IMM, Some(77)),
        ]
    );
    assert_holds(&target, 0, &written, "RDMA WRITE with immediate: the target differs");
}

#[test]
fn an_srq_feeds_two_qps_and_each_receive_is_consumed_once_raw() {
    let Some(ctx) = require_device(RXE) else { return };
    // The fixture's CQ takes the send completions.
    let lo = Loopback::new(&ctx, 32);
    let (send_cq, recv_cq) = (&lo.cq, ctx.create_cq(32).unwrap());
    let mut src = lo.region(4 * 64);
    let dst = lo.region(4 * 64);
    let srq = lo.pd.create_srq(8, 1).unwrap();
    assert!(srq.max_wr() >= 8, "{srq:?}");
    srq.arm_limit(2).unwrap();
    let err = srq.arm_limit(srq.max_wr()).unwrap_err();
    let max = srq.max_wr();
    assert_eq!(
        err.to_string(),
        format!("an SRQ limit must be below the SRQ's {max} receives, not {max}")
    );
    let ((s1, r1), (s2, r2)) = (lo.srq_pair(&srq, &recv_cq), lo.srq_pair(&srq, &recv_cq));

    let slots: Vec<_> = (0..4).map(|i| [dst.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
    for (i, sge) in slots.iter().enumerate() {
        // SAFETY: `dst` is not read until the receives complete.
        unsafe { srq.post_recv_wr(&mut RecvWr::new(100 + i as u64, sge)).unwrap() };
    }
    // Messages 0 and 1 go through pair 1, 2 and 3 through pair 2.
    for i in 0..4 {
        src.as_mut_slice()[i * 64..(i + 1) * 64].copy_from_slice(&pattern(64, i as u8));
    }
    let msgs: Vec<_> = (0..4).map(|i| [src.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
    for (i, sge) in msgs.iter().enumerate() {
        let qp = if i < 2 { &s1 } else { &s2 };
        // SAFETY: `src` is not written until the sends complete.
        unsafe { qp.post_send_wr(&mut SendWr::send(i as u64, sge).flags(SendFlags::SIGNALED)) }
            .unwrap();
    }
    wait_for_success(send_cq, 4);
    let mut recvs: Vec<_> = wait_for(&recv_cq, 4)
        .iter()
        .map(|wc| {
            assert!(wc.is_success() && wc.byte_len() == 64, "{wc:?}");
            let slot = (wc.wr_id() - 100) as usize;
            let bytes = &dst.as_slice()[slot * 64..(slot + 1) * 64];
            let msg = (0..4).find(|&m| bytes == pattern(64, m as u8)).expect("one of the messages");
            (wc.wr_id(), wc.qp_num(), msg)
        })
        .collect();
    let mut ids: Vec<_> = recvs.iter().map(|r| r.0).collect();
    ids.sort();
    assert_eq!(ids, [100, 101, 102, 103], "every SRQ receive consumed exactly once");
    recvs.sort_by_key(|r| r.2);
    let by_msg: Vec<_> = recvs.iter().map(|r| (r.2, r.1)).collect();
    let (q1, q2) = (r1.qp_num(), r2.qp_num());
    assert_eq!(by_msg, [(0, q1), (1, q1), (2, q2), (3, q2)], "each QP took its own messages");
    drop((s1, s2));
}

#[test]
fn an_srq_feeds_two_qps_with_pool_buffers_safe() {
    let Some(ctx) = require_device(RXE) else { return };
    // The fixture's CQ takes the send completions.
    let lo = Loopback::new(&ctx, 32);
    let (send_cq, recv_cq) = (&lo.cq, ctx.create_cq(32).unwrap());
    let pool = lo.pool(8, 1024);
    let srq = lo.pd.create_srq(8, 1).unwrap();
    let ((s1, r1), (s2, r2)) = (lo.srq_pair(&srq, &recv_cq), lo.srq_pair(&srq, &recv_cq));

    for _ in 0..4 {
        srq.post_recv_buffer(pool.take().unwrap()).unwrap();
    }
    for (i, qp) in [&s1, &s1, &s2, &s2].into_iter().enumerate() {
        let mut buf = pool.take().unwrap();
        buf.fill(&pattern(100 + i * 100, i as u8)).unwrap();
        qp.post_send_buffer(buf, SendOp::Send).unwrap();
    }
    for mut wc in wait_for(send_cq, 4) {
        assert!(wc.is_success(), "{wc:?}");
        drop(pool.complete(&mut wc).expect("a sent buffer"));
    }
    let mut got: Vec<_> = wait_for(&recv_cq, 4)
        .into_iter()
        .map(|mut wc| {
            assert!(wc.is_success(), "{wc:?}");
            let qp = wc.qp_num();
            let buf = pool.complete(&mut wc).expect("an SRQ buffer");
            let i = buf.len() / 100 - 1;
            assert!(buf.as_slice() == pattern(100 + i * 100, i as u8), "message {i}");
            (i, qp)
        })
        .collect();
    got.sort_by_key(|g| g.0);
    let (q1, q2) = (r1.qp_num(), r2.qp_num());
    assert_eq!(got, [(0, q1), (1, q1), (2, q2), (3, q2)], "each QP took its own messages");
    assert_eq!(
        std::iter::from_fn(|| pool.take()).collect::<Vec<_>>().len(),
        8,
        "every buffer came back"
    );
}

/// An RC pair whose second QP lets the first run atomics on `target`'s memory.
fn atomic_pair<'a>(lo: &'a Loopback<'_>) -> (QueuePair<'a, Rts>, QueuePair<'a, Rts>) {
    let attr = lo.ctx.query_device().unwrap();
    assert_ne!(attr.as_raw().atomic_cap, sys::IBV_ATOMIC_NONE, "rxe0 has atomics");
    lo.rc_pair(4, AccessFlags::REMOTE_ATOMIC)
}

/// The 8-byte word at `offset` of `region`.
fn word(region: &RemoteWritableRegion<'_>, offset: usize) -> u64 {
    let mut w = [0; 8];
    region.read(offset, &mut w).unwrap();
    u64::from_ne_bytes(w)
}

/// A 64-byte region for peers' atomics, `value` in its word at `offset`, the rest zero.
fn atomic_target<'a>(lo: &'a Loopback<'_>, offset: usize, value: u64) -> RemoteWritableRegion<'a> {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC;
    let mut target = lo.pd.register_remote_writable(64, access).unwrap();
    target.write(offset, &value.to_ne_bytes()).unwrap();
    target
}

#[test]
fn compare_swap_and_fetch_add_return_the_old_value_and_update_the_word_raw() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let local = lo.region(64);
    let target = atomic_target(&lo, 8, 5);
    let (a, b) = atomic_pair(&lo);
    let remote = target.remote(8..).unwrap();

    let olds: Vec<_> = (0..3).map(|i| [local.sge(i * 8..(i + 1) * 8).unwrap()]).collect();
    let mut wrs = [
        SendWr::compare_swap(1, &olds[0], remote, 5, 9),
        SendWr::compare_swap(2, &olds[1], remote, 5, 100),
        SendWr::fetch_add(3, &olds[2], remote, 3),
    ];
    for wr in &mut wrs {
        wr.set_flags(SendFlags::SIGNALED);
        // SAFETY: `local` is not read until the completions below.
        unsafe { a.post_send_wr(wr).unwrap() };
    }
    let wcs = wait_for(&lo.cq, 3);
    let ok = WcStatus::SUCCESS;
    assert_eq!(
        outcomes(&wcs),
        [(1, ok, WcOpcode::COMP_SWAP), (2, ok, WcOpcode::COMP_SWAP), (3, ok, WcOpcode::FETCH_ADD)]
    );
    let old =
        |i: usize| u64::from_ne_bytes(local.as_slice()[i * 8..(i + 1) * 8].try_into().unwrap());
    assert_eq!(
        [old(0), old(1), old(2)],
        [5, 9, 9],
        "5 matched and was swapped for 9; 9 did not match 5; 9 + 3"
    );
    assert_eq!(word(&target, 8), 12);
    assert_eq!((word(&target, 0), word(&target, 16)), (0, 0), "the neighbours are untouched");
    drop(b);
}

#[test]
fn compare_swap_and_fetch_add_through_buffers_safe() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let mr = lo.region(64);
    let base = mr.addr();
    let pool = BufferPool::new(mr, 8).unwrap();
    let target = atomic_target(&lo, 0, 40);
    let (a, b) = atomic_pair(&lo);
    let remote = target.remote(..).unwrap();

    let atomic = |op| {
        let mut buf = pool.take().unwrap();
        buf.set_len(8).unwrap();
        a.post_send_buffer(buf, op).unwrap();
        let mut wc = wait_for(&lo.cq, 1).pop().unwrap();
        assert!(wc.is_success(), "{wc:?}");
        let buf = pool.complete(&mut wc).unwrap();
        u64::from_ne_bytes(buf.as_slice().try_into().unwrap())
    };
    assert_eq!(atomic(SendOp::CompareSwap { remote, compare: 40, swap: 41 }), 40);
    assert_eq!(atomic(SendOp::CompareSwap { remote, compare: 40, swap: 99 }), 41, "no match");
    assert_eq!(atomic(SendOp::FetchAdd { remote, add: 2 }), 41);
    assert_eq!(word(&target, 0), 43);

    // A buffer of 4 bytes is not an atomic's 8: refused before posting, the buffer back.
    let mut buf = pool.take().unwrap();
    buf.set_len(4).unwrap();
    let at = base + 8 * buf.index() as u64;
    let err = a.try_post_send_buffer(buf, SendOp::FetchAdd { remote, add: 1 }).unwrap_err();
    assert_eq!(
        err.error.to_string(),
        format!(
            "an atomic needs one 8-byte SGE at an 8-byte-aligned address and an 8-byte-aligned \
             remote address; got 1 SGE(s) of 4 bytes at {at:#x}, remote {:#x}",
            remote.addr
        )
    );
    assert_eq!(err.buffer.unwrap().len(), 4);
    assert_eq!(word(&target, 0), 43, "nothing was posted");
    drop(b);
}

#[test]
fn a_misaligned_or_non_rc_atomic_is_refused_before_posting() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let local = lo.region(64);
    let target = atomic_target(&lo, 0, 7);
    let (a, b) = atomic_pair(&lo);
    let remote = target.remote(..).unwrap();
    let expected = |local: u64, remote: u64| {
        format!(
            "an atomic needs one 8-byte SGE at an 8-byte-aligned address and an 8-byte-aligned \
             remote address; got 1 SGE(s) of 8 bytes at {local:#x}, remote {remote:#x}"
        )
    };

    let misaligned = [local.sge(4..12).unwrap()];
    // SAFETY: refused before posting; nothing reaches the NIC.
    let err =
        unsafe { a.post_send_wr(&mut SendWr::fetch_add(1, &misaligned, remote, 1)) }.unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::AtomicShape), "{err:?}");
    assert_eq!(err.to_string(), expected(local.addr() + 4, remote.addr));

    let aligned = [local.sge(8..16).unwrap()];
    let off = RemoteAddr { addr: remote.addr + 4, rkey: remote.rkey };
    // SAFETY: as above.
    let err =
        unsafe { a.post_send_wr(&mut SendWr::compare_swap(2, &aligned, off, 7, 8)) }.unwrap_err();
    assert_eq!(err.to_string(), expected(local.addr() + 8, remote.addr + 4));

    // UC has no atomics.
    let (u, v) = lo.pair::<Uc>(&lo.attr(2), AccessFlags::empty());
    // SAFETY: as above.
    let err =
        unsafe { u.post_send_wr(&mut SendWr::fetch_add(3, &aligned, remote, 1)) }.unwrap_err();
    assert_eq!(err.to_string(), "atomics need an RC QP, not UC");

    assert_quiet(&lo.cq, Duration::from_millis(200), "nothing was posted");
    assert_eq!(word(&target, 0), 7);
    drop((b, v));
}
