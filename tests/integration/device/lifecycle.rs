//! QP state at run time: errors, reset and reuse, modify_raw.

use rdma_verbs::*;

use super::pair::{connect, endpoint, up_with, wait_for, Loopback, PORT};
use crate::common::{require_device, RXE};

#[test]
fn a_qp_in_error_is_reset_and_reused() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let mr = lo.region(4096);
    let (a, b) = lo.rc_pair(4, AccessFlags::empty());

    // A send naming an lkey that does not exist ends in a local protection error, which
    // moves the QP to ERROR.
    let good = mr.sge(..64).unwrap();
    let bad = [Sge::new(good.addr(), 64, LKey(mr.lkey().0 ^ 0xff00))];
    // SAFETY: `mr` is not written while the WR is outstanding.
    unsafe { a.post_send(&mut SendWr::send(1, &bad).flags(SendFlags::SIGNALED)).unwrap() };
    let wc = &wait_for(&lo.cq, 1)[0];
    assert_eq!(wc.wr_id(), 1);
    assert_ne!(wc.status(), WcStatus::SUCCESS, "{wc:?}");
    assert_eq!(a.query_state().unwrap(), QueuePairState::ERR);
    assert_eq!(b.query_state().unwrap(), QueuePairState::RTS);

    // Both back to RESET (the peer's PSNs moved on), reconnected, and used again.
    let a = a.reset().unwrap();
    let b = b.reset().unwrap();
    assert_eq!(a.query_state().unwrap(), QueuePairState::RESET);
    let init = ToInitAttr { port: PORT, ..Default::default() };
    let (a, b) = connect(&ctx, a.into_init(&init).unwrap(), b.into_init(&init).unwrap());
    let (recv, send) = ([mr.sge(2048..).unwrap()], [good]);
    // SAFETY: the receive area is not touched, the send area not written, until both complete.
    unsafe {
        b.post_recv(&mut RecvWr::new(2, &recv)).unwrap();
        a.post_send(&mut SendWr::send(3, &send).flags(SendFlags::SIGNALED)).unwrap();
    }
    let wcs = wait_for(&lo.cq, 2);
    assert!(wcs.iter().all(WorkCompletion::is_success), "{wcs:?}");
}

#[test]
fn modify_raw_checks_the_mask_and_the_state_returns_to_the_type() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let a = lo.rc_in_init(4, AccessFlags::empty());
    let b = lo.rc_in_init(4, AccessFlags::empty());
    let (ea, eb) =
        (endpoint(&ctx, &a, Psn::new(1).unwrap()), endpoint(&ctx, &b, Psn::new(2).unwrap()));
    let a = up_with(&ctx, a, &eb, &ToRtsAttr::new(ea.psn));

    // RTS → SQD with a bit that transition does not take: refused before the verb, QP intact.
    let attr =
        rdma_verbs::sys::ibv_qp_attr { qp_state: QueuePairState::SQD.0, ..Default::default() };
    let err = a.modify_raw(&attr, QpAttrMask::STATE | QpAttrMask::PATH_MTU).unwrap_err();
    assert_eq!(
        err.error.to_string(),
        "modify_raw RTS→SQD (RC QP): bits not allowed in this transition: PATH_MTU"
    );
    let a = err.qp;
    assert_eq!(a.query_state().unwrap(), QueuePairState::RTS);

    // RTS → ERROR through the escape hatch; the type learns the state back by asking.
    let attr =
        rdma_verbs::sys::ibv_qp_attr { qp_state: QueuePairState::ERR.0, ..Default::default() };
    let a = a.modify_raw(&attr, QpAttrMask::STATE).unwrap();
    let err = a.into_checked::<Rts>().unwrap_err();
    assert_eq!(err.error.to_string(), "the QP is in ERROR, not RTS");
    let a = err.qp.reset().unwrap();
    assert_eq!(a.query_state().unwrap(), QueuePairState::RESET);
    drop(b);
}

#[test]
fn query_reports_the_provider_caps_and_what_the_transitions_set() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let a = lo.rc_in_init(4, AccessFlags::REMOTE_WRITE);
    let b = lo.rc_in_init(4, AccessFlags::empty());
    let q = a.query().unwrap();
    assert_eq!(
        (q.state, q.port, q.access),
        (QueuePairState::INIT, PORT, AccessFlags::REMOTE_WRITE)
    );
    let caps = q.caps;
    assert!(caps.max_send_wr >= 4 && caps.max_recv_wr >= 4, "at least what was asked: {q:?}");
    assert!(caps.max_send_sge >= 1 && caps.max_recv_sge >= 1, "{q:?}");

    let (ea, eb) =
        (endpoint(&ctx, &a, Psn::new(0x11).unwrap()), endpoint(&ctx, &b, Psn::new(0x22).unwrap()));
    let rts = ToRtsAttr {
        timeout: AckTimeout::new(17).unwrap(),
        retry_cnt: RetryCount::new(5).unwrap(),
        rnr_retry: RnrRetry::new(3).unwrap(),
        ..ToRtsAttr::new(ea.psn)
    };
    let a = up_with(&ctx, a, &eb, &rts);
    let q = a.query().unwrap();
    let mtu = ctx.query_port(PORT).unwrap().active_mtu();
    assert_eq!(q.state, QueuePairState::RTS);
    assert_eq!((q.path_mtu, q.dest_qpn, q.rq_psn, q.sq_psn), (mtu, b.qp_num(), eb.psn, ea.psn));
    assert_eq!((q.timeout, q.retry_cnt, q.rnr_retry), (rts.timeout, rts.retry_cnt, rts.rnr_retry));
    assert_eq!((q.min_rnr_timer.get(), q.max_dest_rd_atomic, q.max_rd_atomic), (12, 1, 1), "{q:?}");
    assert_eq!(q.caps, caps, "the caps stay");
    drop(b);
}
