//! Regression tests for the soundness holes once open, on rxe0: safe lists go through the
//! checks of `post_send_wr`, UD lists carry a destination per datagram, a WR once posted in a
//! list posts only itself, and a buffer pool over a region at a chosen IOVA addresses it by
//! that IOVA (inline copies by its CPU address). The cases that crashed run in a child
//! process, so a crash fails one test, not the run.

use std::time::Duration;

use rdma_verbs::*;

use super::pair::{assert_quiet, pattern, ud_in_rts, wait_for, Loopback};
use rdma_verbs_device_tests::{crash_isolated, require_device, RXE};

/// The test's path as libtest names it (`device::soundness::NAME`).
fn test_path(name: &str) -> String {
    let module = module_path!().split_once("::").map_or(module_path!(), |(_, rest)| rest);
    format!("{module}::{name}")
}

/// What the connected pairs are created with: room for 8 WRs each way, 64 inline bytes, and
/// the verbs `path`.
fn attr<'a>(lo: &'a Loopback<'_>, path: VerbsPath) -> QpInitAttr<'a, 'a> {
    let mut attr = QpInitAttr { verbs_path: Some(path), ..lo.attr(8) };
    attr.cap.max_inline_data = 64;
    attr
}

/// A list of one buffer of `pool` per op, each holding `len` bytes.
fn list_of<'p>(pool: &'p BufferPool<'p>, ops: &[SendOp], len: usize) -> SendBufferList<'p> {
    let mut list = SendBufferList::with_capacity(ops.len());
    for op in ops {
        let mut buf = pool.take().unwrap();
        buf.fill(&pattern(len, 1)).unwrap();
        list.push(buf, *op).unwrap();
    }
    list
}

#[test]
fn a_send_list_refuses_what_post_send_refuses_and_posts_nothing() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 32);
    let pool = lo.pool(8, 64);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC;
    let target = lo.pd.register_remote_writable(64, access).unwrap();
    let remote = target.remote(..).unwrap();
    let misaligned = RemoteAddr { addr: remote.addr + 4, rkey: remote.rkey };
    for path in [VerbsPath::Legacy, VerbsPath::Extended] {
        let (uc, uc_peer) = lo.pair::<Uc>(&attr(&lo, path), AccessFlags::empty());
        let mut list = list_of(&pool, &[SendOp::Send, SendOp::FetchAdd { remote, add: 1 }], 8);
        let err = uc.post_send_buffers(&mut list, true).unwrap_err();
        assert_eq!(err.to_string(), "atomics need an RC QP, not UC", "{path}");
        assert_eq!(list.len(), 2, "{path}: the list is as it was");
        drop(list);

        let (rc, rc_peer) = lo.pair::<Rc>(&attr(&lo, path), AccessFlags::REMOTE_ATOMIC);
        let mut list = list_of(&pool, &[SendOp::FetchAdd { remote: misaligned, add: 1 }], 8);
        let err = rc.post_send_buffers(&mut list, true).unwrap_err();
        assert_eq!(
            err.invalid_input_kind(),
            Some(InvalidInputKind::AtomicShape),
            "{path}: {err:?}"
        );
        assert!(err.to_string().contains("8-byte-aligned remote address"), "{path}: {err}");
        assert_eq!(list.len(), 1, "{path}");
        drop(list);
        assert_quiet(&lo.cq, Duration::from_millis(200), &format!("{path}: nothing posted"));
        let back: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
        assert_eq!(back.len(), 8, "{path}: every buffer is back");
        drop((uc_peer, rc_peer));
    }
}

#[test]
fn a_ud_send_list_carries_a_destination_per_datagram() {
    crash_isolated(&test_path("a_ud_send_list_carries_a_destination_per_datagram"), || {
        let Some(ctx) = require_device(RXE) else { return };
        let lo = Loopback::new(&ctx, 32);
        let pool = lo.pool(8, 2048);
        let ah = lo.ah();
        const QKEY: u32 = 0x5151;
        for path in [VerbsPath::Legacy, VerbsPath::Extended] {
            let attr = QpInitAttr { verbs_path: Some(path), ..lo.attr(4) };
            let [a, b, c] = [(); 3].map(|()| ud_in_rts(&lo.pd, &attr, QKEY));
            for qp in [&b, &c] {
                qp.post_recv_buffer(pool.take().unwrap()).unwrap();
            }
            let mut list = SendBufferList::with_capacity(2);
            for (i, to) in [&b, &c].into_iter().enumerate() {
                let mut buf = pool.take().unwrap();
                buf.fill(&pattern(500, i as u8)).unwrap();
                let dest = UdDestination { ah: &ah, qpn: to.qp_num(), qkey: QKEY };
                list.push(buf, UdSend { dest, imm: Some(i as u32) }).unwrap();
            }
            a.post_send_buffers_to(&mut list, true).unwrap();
            let mut received = Vec::new();
            for mut wc in wait_for(&lo.cq, 3) {
                assert!(wc.is_success(), "{path}: {wc:?}");
                let (qpn, imm) = (wc.qp_num(), wc.imm_data());
                let buf = pool.complete(&mut wc).expect("a buffer of the pool");
                if let Some(i) = imm {
                    let payload = &buf.as_slice()[Grh::LEN..];
                    assert_eq!(payload, &pattern(500, i as u8)[..], "{path}: datagram {i}");
                    received.push((qpn, i));
                }
            }
            received.sort_by_key(|&(_, i)| i);
            assert_eq!(received, [(b.qp_num(), 0), (c.qp_num(), 1)], "{path}");
        }
    });
}

#[test]
fn a_wr_once_posted_in_a_list_posts_only_itself() {
    crash_isolated(&test_path("a_wr_once_posted_in_a_list_posts_only_itself"), || {
        let Some(ctx) = require_device(RXE) else { return };
        let lo = Loopback::new(&ctx, 32);
        let mr = lo.region(16 * 64);
        for path in [VerbsPath::Legacy, VerbsPath::Extended] {
            let (a, b) = lo.pair::<Rc>(&attr(&lo, path), AccessFlags::empty());
            // Receives for every send the stale links could post (an RC send without one
            // would wait in RNR retries, unseen).
            let recv: Vec<_> = (8..16).map(|i| [mr.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
            for (i, sge) in recv.iter().enumerate() {
                // SAFETY: the receive areas are not touched until the test ends.
                unsafe { b.post_recv_wr(&mut RecvWr::new(10 + i as u64, sge)).unwrap() };
            }
            let send: Vec<_> = (0..3).map(|i| [mr.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
            let mut wrs: SendWrList<'_> = send
                .iter()
                .enumerate()
                .map(|(i, sge)| SendWr::send(i as u64, sge).flags(SendFlags::SIGNALED))
                .collect();
            // SAFETY: the send areas are never written.
            unsafe { a.post_send_wrs(&mut wrs).unwrap() };
            assert_eq!(wait_for(&lo.cq, 6).len(), 6, "{path}: three sends, three receives");
            // Move the WRs out of the list to a new allocation (the old one is freed) and post
            // the first one alone: its `next` from the list must not be followed.
            let mut moved = Vec::with_capacity(16);
            moved.append(&mut Vec::from(wrs));
            // SAFETY: as above.
            unsafe { a.post_send_wr(&mut moved[0]).unwrap() };
            let wcs = wait_for(&lo.cq, 2);
            assert_quiet(
                &lo.cq,
                Duration::from_millis(300),
                &format!("{path}: more than one WR was posted: {wcs:?}"),
            );
        }
    });
}

#[test]
fn a_buffer_pool_over_an_iova_region_sends_receives_and_reads_by_that_iova() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 32);
    let region = lo
        .pd
        .register_with(8 * 1024, AccessFlags::LOCAL_WRITE, RegisterOptions::at_iova(0x1000_0000))
        .unwrap();
    assert_ne!(region.iova(), region.addr(), "the test needs an IOVA apart from the CPU address");
    let pool = BufferPool::new(region, 1024).unwrap();
    let mut source = lo.pd.register(1024, AccessFlags::REMOTE_READ).unwrap();
    source.as_mut_slice().copy_from_slice(&pattern(1024, 9));
    for path in [VerbsPath::Legacy, VerbsPath::Extended] {
        let (a, b) = lo.pair::<Rc>(&attr(&lo, path), AccessFlags::REMOTE_READ);
        // 16 bytes go inline (copied from the CPU address), 1000 do not (read by IOVA).
        for len in [16, 1000] {
            b.post_recv_buffer(pool.take().unwrap()).unwrap();
            let mut buf = pool.take().unwrap();
            buf.fill(&pattern(len, len as u8)).unwrap();
            a.post_send_buffer(buf, SendOp::Send).unwrap();
            for mut wc in wait_for(&lo.cq, 2) {
                assert!(wc.is_success(), "{path}, {len} bytes: {wc:?}");
                let buf = pool.complete(&mut wc).expect("a buffer of the pool");
                assert_eq!(buf.as_slice(), &pattern(len, len as u8)[..], "{path}, {len} bytes");
            }
        }
        let mut buf = pool.take().unwrap();
        buf.set_len(1024).unwrap();
        a.post_send_buffer(buf, SendOp::RdmaRead(source.remote(..).unwrap())).unwrap();
        let mut wc = wait_for(&lo.cq, 1).remove(0);
        assert!(wc.is_success(), "{path}, RDMA READ: {wc:?}");
        let buf = pool.complete(&mut wc).expect("the read buffer");
        assert_eq!(buf.as_slice(), &pattern(1024, 9)[..], "{path}: read into the IOVA chunk");
        drop(b);
    }
}
