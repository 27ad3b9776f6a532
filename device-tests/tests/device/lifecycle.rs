//! QP state at run time: errors, reset and reuse, modify_raw.

use rdma_verbs::*;

use super::pair::{connect, endpoint, up_with, wait_for, wait_for_success, Loopback, PORT};
use rdma_verbs_device_tests::{require_device, RXE};

#[test]
fn a_qp_in_error_is_reset_and_reused() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let mr = lo.region(4096);
    let (a, b) = lo.rc_pair(4, AccessFlags::empty());

    // A send naming an lkey that does not exist ends in a local protection error, which
    // moves the QP to ERROR.
    let good = mr.sge(..64).unwrap();
    let bad = [Sge::new(good.addr(), 64, LKey::new(mr.lkey().get() ^ 0xff00))];
    // SAFETY: `mr` is not written while the WR is outstanding.
    unsafe { a.post_send_wr(&mut SendWr::send(1, &bad).flags(SendFlags::SIGNALED)).unwrap() };
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
        b.post_recv_wr(&mut RecvWr::new(2, &recv)).unwrap();
        a.post_send_wr(&mut SendWr::send(3, &send).flags(SendFlags::SIGNALED)).unwrap();
    }
    wait_for_success(&lo.cq, 2);
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
    let err = a.try_modify_raw(&attr, QpAttrMask::STATE | QpAttrMask::PATH_MTU).unwrap_err();
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
    let err = a.try_into_checked::<Rts>().unwrap_err();
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
    assert_eq!((q.min_rnr_timer.get(), q.max_dest_rd_atomic, q.max_rd_atomic), (31, 1, 1), "{q:?}");
    assert_eq!(q.caps, caps, "the caps stay");
    drop(b);
}

/// QPs raised with `modify_raw` and retyped by `into_checked` are checked as typed ones: the
/// device's `max_rd_atomic` 0 refuses a READ (rxe would leave it queued for good), and a UD
/// QP carries a datagram of its port's active MTU (its limit was 0: every payload refused).
#[test]
fn into_checked_learns_the_send_limits_from_the_device() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let ah = super::pair::loopback_ah(&ctx, &lo.pd);
    let mtu = ctx.query_port(PORT).unwrap().active_mtu().bytes().unwrap() as usize;
    let mr = lo.region(mtu);
    let a = lo.rc_in_init(4, AccessFlags::empty());
    let b = lo.rc_in_init(4, AccessFlags::REMOTE_READ);
    let (ea, eb) =
        (endpoint(&ctx, &a, Psn::new(1).unwrap()), endpoint(&ctx, &b, Psn::new(2).unwrap()));
    let a = up_with(&ctx, a, &eb, &ToRtsAttr::new(ea.psn)).reset().unwrap();
    let a = a.into_init(&ToInitAttr { port: PORT, ..Default::default() }).unwrap();
    let rtr = ToRtrAttr::to_endpoint(&eb, PORT, Some(super::pair::sgid_index(&ctx)), Mtu::MTU_1024);
    let a = a.into_rtr(&rtr).unwrap();
    let rts = rdma_verbs::sys::ibv_qp_attr {
        qp_state: QueuePairState::RTS.0,
        timeout: 14,
        retry_cnt: 6,
        rnr_retry: 6,
        sq_psn: ea.psn.get(),
        max_rd_atomic: 0,
        ..Default::default()
    };
    let mask = QpAttrMask::STATE | <Rc as QpType>::RTS_MASK;
    let a = a.modify_raw(&rts, mask).unwrap().into_checked::<Rts>().unwrap();
    let sge = [mr.sge(..8).unwrap()];
    let mut read = SendWr::rdma_read(1, &sge, RemoteAddr { addr: 0, rkey: RKey::new(0) });
    // SAFETY: refused before the provider; `mr` outlives the call in any case.
    let err = unsafe { a.post_send_wr(&mut read) }.expect_err("a READ it cannot issue");
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Range), "{err}");

    let ud = lo.pd.create_qp::<Ud>(&lo.attr(4)).unwrap();
    let init = rdma_verbs::sys::ibv_qp_attr {
        qp_state: QueuePairState::INIT.0,
        port_num: PORT,
        qkey: 0x11,
        ..Default::default()
    };
    let mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
    let ud = ud.modify_raw(&init, mask).unwrap().into_checked::<Init>().unwrap();
    let ud = ud.into_rtr().unwrap().into_rts(Psn::new(0).unwrap()).unwrap();
    let dest = UdDestination { ah: &ah, qpn: ud.qp_num(), qkey: 0x11 };
    let sge = [mr.sge(..).unwrap()];
    let mut send = SendWr::send(2, &sge).to(&dest).flags(SendFlags::SIGNALED);
    // SAFETY: `mr` stays registered and unwritten until the completion below.
    unsafe { ud.post_send_wr(&mut send) }.expect("a datagram of the active MTU");
    let wc = &wait_for(&lo.cq, 1)[0];
    assert!(wc.is_success() && wc.wr_id() == 2, "{wc:?}");
    drop(b);
}

/// `ibv_query_port_speed` arrived in rdma-core v62: a library before it is named in the
/// refusal; from it on, rxe answers with its link's rate, or the kernel refuses the method.
#[test]
fn port_speed_is_the_links_rate_or_unsupported_naming_the_release() {
    let Some(ctx) = require_device(RXE) else { return };
    let release = Stack::loaded().unwrap().and_then(|s| s.rdma_core());
    match ctx.query_port_speed(PORT) {
        Ok(mbps) => {
            assert!(release.is_none_or(|r| r >= (62, 0)), "{release:?} has no such verb");
            assert!(mbps >= 1000, "{mbps} Mb/s");
        }
        Err(e @ Error::Unsupported { .. }) if release.is_some_and(|r| r < (62, 0)) => {
            assert!(e.to_string().contains("v62"), "{e}")
        }
        Err(e) => assert!(matches!(e, Error::Unsupported { .. }), "{release:?}: {e:?}"),
    }
}
