//! Data movement on rxe0 through the raw posting tier.

use rdma_verbs::*;

use super::pair::{connect, pattern, qp_in_init, wait_for, wait_for_success, Loopback};
use rdma_verbs_device_tests::{require_device, RXE};

const MIB: usize = 1 << 20;

#[test]
fn rdma_write_and_read_of_1_mib_arrive_byte_for_byte() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let mut local = lo.region(2 * MIB);
    let target_access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let mut target = lo.pd.register_remote_writable(MIB, target_access).unwrap();
    let (written, stored) = (pattern(MIB, 0x5a), pattern(MIB, 0xa5));
    local.as_mut_slice()[..MIB].copy_from_slice(&written);
    let remote_access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let (a, b) = lo.rc_pair(4, remote_access);

    let sge = [local.sge(..MIB).unwrap()];
    let mut write =
        SendWr::rdma_write(1, &sge, target.remote(..).unwrap()).flags(SendFlags::SIGNALED);
    // SAFETY: `local` is not written until the completion below.
    unsafe { a.post_send_wr(&mut write).unwrap() };
    let wc = &wait_for(&lo.cq, 1)[0];
    assert_eq!(
        (wc.wr_id(), wc.status(), wc.opcode()),
        (1, WcStatus::SUCCESS, WcOpcode::RDMA_WRITE)
    );
    let mut arrived = vec![0u8; MIB];
    target.read(0, &mut arrived).unwrap();
    assert!(arrived == written, "RDMA WRITE: the target differs from what was written");

    target.write(0, &stored).unwrap();
    let sge = [local.sge(MIB..).unwrap()];
    let mut read =
        SendWr::rdma_read(2, &sge, target.remote(..).unwrap()).flags(SendFlags::SIGNALED);
    // SAFETY: the second half of `local` is not touched until the completion below.
    unsafe { a.post_send_wr(&mut read).unwrap() };
    let wc = &wait_for(&lo.cq, 1)[0];
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (2, WcStatus::SUCCESS, WcOpcode::RDMA_READ));
    assert!(local.as_slice()[MIB..] == stored[..], "RDMA READ: the local copy differs");
    drop(b);
}

#[test]
fn an_inline_send_needs_no_registered_source_after_posting() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let mut src = lo.region(64);
    let dst = lo.region(64);
    let cap = QpCapabilities {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_inline_data: 32,
        ..Default::default()
    };
    let (a, b) =
        lo.pair::<Rc>(&QpInitAttr { cap, ..QpInitAttr::new(&lo.cq) }, AccessFlags::empty());
    assert!(a.caps().max_inline_data >= 32, "asked for 32 inline bytes: {:?}", a.caps());
    let recv = [dst.sge(..).unwrap()];
    // SAFETY: `dst` is not touched until the receive completes.
    unsafe { b.post_recv_wr(&mut RecvWr::new(1, &recv)).unwrap() };
    src.as_mut_slice()[..32].copy_from_slice(&pattern(32, 7));
    let sge = [src.sge(..32).unwrap()];
    // SAFETY: inline: the bytes are copied during the call.
    unsafe {
        a.post_send_wr(&mut SendWr::send(2, &sge).flags(SendFlags::SIGNALED | SendFlags::INLINE))
            .unwrap()
    };
    // The source may change at once: the data already left.
    src.as_mut_slice().fill(0);
    let wcs = wait_for_success(&lo.cq, 2);
    let recv = wcs.iter().find(|wc| wc.wr_id() == 1).unwrap();
    assert_eq!(recv.byte_len(), 32);
    assert_eq!(&dst.as_slice()[..32], &pattern(32, 7)[..]);
}

#[test]
fn two_qps_share_one_cq_and_each_completion_names_its_qp() {
    let Some(ctx) = require_device(RXE) else { return };
    // The fixture's CQ is the shared one: both senders post their send completions to it.
    let lo = Loopback::new(&ctx, 16);
    let (shared, other) = (&lo.cq, ctx.create_cq(16).unwrap());
    let mr = lo.region(4096);
    let none = AccessFlags::empty();
    let pairs = [(); 2]
        .map(|()| connect(&ctx, lo.rc_in_init(4, none), qp_in_init(&lo.pd, &other, 4, none)));
    let [(s1, r1), (s2, r2)] = pairs;
    let (recv1, recv2, send) =
        ([mr.sge(1024..2048).unwrap()], [mr.sge(2048..3072).unwrap()], [mr.sge(..16).unwrap()]);
    // SAFETY: the receive areas are not touched, the send area not written, until the
    // completions below.
    unsafe {
        r1.post_recv_wr(&mut RecvWr::new(11, &recv1)).unwrap();
        r2.post_recv_wr(&mut RecvWr::new(12, &recv2)).unwrap();
        s1.post_send_wr(&mut SendWr::send(21, &send).flags(SendFlags::SIGNALED)).unwrap();
        s2.post_send_wr(&mut SendWr::send(22, &send).flags(SendFlags::SIGNALED)).unwrap();
    }
    let mut sends: Vec<_> =
        wait_for(shared, 2).iter().map(|wc| (wc.wr_id(), wc.qp_num(), wc.status())).collect();
    sends.sort_by_key(|s| s.0);
    assert_eq!(sends, [(21, s1.qp_num(), WcStatus::SUCCESS), (22, s2.qp_num(), WcStatus::SUCCESS)]);
    let mut recvs: Vec<_> =
        wait_for(&other, 2).iter().map(|wc| (wc.wr_id(), wc.qp_num())).collect();
    recvs.sort_by_key(|r| r.0);
    assert_eq!(recvs, [(11, r1.qp_num()), (12, r2.qp_num())]);
}
