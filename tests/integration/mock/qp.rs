//! Queue pairs: the attributes each typed transition sends, failed transitions, posting and
//! polling.

use std::net::Ipv6Addr;
use std::time::Duration;

use rdma_verbs::{
    AccessFlags, AckTimeout, BufferPool, CompletionQueue, Endpoint, Error, Gid, Init,
    InvalidInputKind, Lid, Mtu, ProtectionDomain, Psn, QpAttrMask, QpCapabilities, QpInitAttr, Qpn,
    QueuePair, QueuePairState, RKey, RecvBufferList, RecvWr, RecvWrList, RemoteAddr, Reset,
    RetryCount, RnrRetry, RnrTimer, Rtr, Rts, SendOp, SendWr, Sge, ToInitAttr, ToRtrAttr,
    ToRtsAttr, WcStatus, WorkCompletion,
};
use rdma_verbs_mock::{Call, ContextConfig, Optional, QpAttr, Verb};
use rdma_verbs_sys as sys;

use super::{
    assert_queue_full, assert_unsupported, assert_verb_error, loopback_pair, open, Fixture,
};

/// The peer: a RoCE endpoint with an IPv4-mapped GID.
fn remote() -> Endpoint {
    let gid = Gid::from("::ffff:192.0.2.9".parse::<Ipv6Addr>().unwrap());
    Endpoint {
        lid: Lid::new(0x12),
        qpn: Qpn::new(0xab_cdef).unwrap(),
        psn: Psn::new(0x12_3456).unwrap(),
        gid,
    }
}

/// Index 3 of the mock port's GID table: its RoCE v2 IPv4-mapped entry.
const SGID_INDEX: u8 = 3;

fn rtr_attr() -> ToRtrAttr {
    ToRtrAttr::to_endpoint(&remote(), 1, Some(SGID_INDEX), Mtu::MTU_1024)
}

fn rc_qp<'a>(pd: &'a ProtectionDomain<'a>, cq: &'a CompletionQueue<'a>) -> QueuePair<'a, Reset> {
    pd.create_rc_qp(&QpInitAttr::new(cq)).unwrap()
}

/// [`rc_qp`] connected to [`remote`], in RTS.
fn rts_qp<'a>(pd: &'a ProtectionDomain<'a>, cq: &'a CompletionQueue<'a>) -> QueuePair<'a, Rts> {
    let qp = rc_qp(pd, cq).into_init(&ToInitAttr::default()).unwrap();
    qp.into_rtr(&rtr_attr()).unwrap().into_rts(&ToRtsAttr::new(Psn::new(1).unwrap())).unwrap()
}

/// The `ibv_modify_qp` calls among `calls` (RTR also queries the port, for its active MTU).
fn modifies(calls: Vec<Call>) -> Vec<Call> {
    calls.into_iter().filter(|c| matches!(c, Call::ModifyQp { .. })).collect()
}

#[test]
fn a_path_mtu_above_the_ports_active_mtu_is_lowered_to_it_and_query_shows_it() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(32);
    let active = f.ctx.query_port(1).unwrap().active_mtu();
    assert_eq!(active, Mtu::MTU_1024, "the mock port's");
    for (asked, in_effect) in [
        (Mtu::MTU_4096, Mtu::MTU_1024),
        (Mtu::MTU_2048, Mtu::MTU_1024),
        (Mtu::MTU_512, Mtu::MTU_512),
    ] {
        let qp = rc_qp(&pd, &cq).into_init(&ToInitAttr::default()).unwrap();
        f.mock.take_calls();
        let qp = qp.into_rtr(&ToRtrAttr { path_mtu: asked, ..rtr_attr() }).unwrap();
        let calls = f.mock.take_calls();
        assert!(calls.iter().any(|c| matches!(c, Call::QueryPortOp { port: 1, .. })), "{calls:?}");
        let [Call::ModifyQp { attr, .. }] = &modifies(calls)[..] else { panic!("one modify") };
        assert_eq!(attr.path_mtu, in_effect.0, "{asked} asked");
        assert_eq!(qp.query().unwrap().path_mtu, in_effect, "{asked} asked");
    }
    let qp = rc_qp(&pd, &cq).into_init(&ToInitAttr::default()).unwrap();
    let mut attr = rtr_attr();
    attr.av.port = 2;
    let err = qp.into_rtr(&attr).unwrap_err();
    assert!(matches!(err, Error::PortNotFound { port: 2, .. }), "{err}");
}

#[test]
fn transitions_send_exactly_the_required_masks_and_the_endpoints_route() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(32);
    let qp = rc_qp(&pd, &cq);
    f.mock.take_calls();

    let init = ToInitAttr { port: 1, pkey_index: 0, access: AccessFlags::REMOTE_READ };
    let qp = qp.into_init(&init).unwrap();
    let qp = qp.into_rtr(&rtr_attr()).unwrap();
    let qp = qp.into_rts(&ToRtsAttr::new(Psn::new(0x65_4321).unwrap())).unwrap();
    let calls = modifies(f.mock.take_calls());
    assert_eq!(qp.query_state().unwrap(), QueuePairState::RTS);

    let init_mask =
        sys::IBV_QP_STATE | sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_ACCESS_FLAGS;
    let init_attr = QpAttr {
        qp_state: sys::IBV_QPS_INIT,
        port_num: 1,
        pkey_index: 0,
        qp_access_flags: sys::IBV_ACCESS_REMOTE_READ,
        ..QpAttr::default()
    };
    let rtr_mask = sys::IBV_QP_STATE
        | sys::IBV_QP_AV
        | sys::IBV_QP_PATH_MTU
        | sys::IBV_QP_DEST_QPN
        | sys::IBV_QP_RQ_PSN
        | sys::IBV_QP_MAX_DEST_RD_ATOMIC
        | sys::IBV_QP_MIN_RNR_TIMER;
    let rtr_attr = QpAttr {
        qp_state: sys::IBV_QPS_RTR,
        path_mtu: sys::IBV_MTU_1024,
        dest_qp_num: 0xab_cdef,
        rq_psn: 0x12_3456,
        max_dest_rd_atomic: 1,
        // The default RNR budget: the peer's 6 resends 491.52 ms apart, ≈ 2.9 s.
        min_rnr_timer: 31,
        dlid: 0x12,
        ah_port_num: 1,
        is_global: 1,
        dgid: remote().gid.get(),
        sgid_index: SGID_INDEX,
        hop_limit: 1,
        ..QpAttr::default()
    };
    let rts_mask = sys::IBV_QP_STATE
        | sys::IBV_QP_TIMEOUT
        | sys::IBV_QP_RETRY_CNT
        | sys::IBV_QP_RNR_RETRY
        | sys::IBV_QP_SQ_PSN
        | sys::IBV_QP_MAX_QP_RD_ATOMIC;
    let rts_attr = QpAttr {
        qp_state: sys::IBV_QPS_RTS,
        // ≈ 0.54 s a try: 7 tries, ≈ 3.8 s, before a silent peer is given up.
        timeout: 17,
        // 6, not 7: neither retries forever (rxe never counts a retry_cnt of 7 down).
        retry_cnt: 6,
        rnr_retry: 6,
        sq_psn: 0x65_4321,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    let modify = |mask: u32, attr| Call::ModifyQp { mask: mask as i32, attr };
    assert_eq!(
        calls,
        [modify(init_mask, init_attr), modify(rtr_mask, rtr_attr), modify(rts_mask, rts_attr)]
    );
}

#[test]
fn the_route_s_static_rate_reaches_the_provider_at_rtr() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let cq = f.ctx.create_cq(32).unwrap();
    let qp = rc_qp(&pd, &cq).into_init(&ToInitAttr::default()).unwrap();
    let mut rtr = rtr_attr();
    rtr.av.static_rate = rdma_verbs::StaticRate::from_gbps(25.0).unwrap();
    f.mock.take_calls();
    let _qp = qp.into_rtr(&rtr).unwrap();
    let [Call::ModifyQp { attr, .. }] = &modifies(f.mock.take_calls())[..] else {
        panic!("one modify")
    };
    assert_eq!(u32::from(attr.static_rate), sys::IBV_RATE_25_GBPS);
}

#[test]
fn query_reports_the_caps_at_creation_and_what_each_transition_set() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(32);
    let cap = QpCapabilities { max_send_wr: 3, max_recv_wr: 5, ..Default::default() };
    let qp = pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) }).unwrap();
    let q = qp.query().unwrap();
    assert_eq!(q.state, QueuePairState::RESET);
    let rounded = QpCapabilities { max_send_wr: 4, max_recv_wr: 8, ..cap };
    assert_eq!(q.caps, rounded, "the work queues as the mock rounded them up");

    let init = ToInitAttr { port: 1, pkey_index: 0, access: AccessFlags::REMOTE_READ };
    let qp = qp.into_init(&init).unwrap();
    let q = qp.query().unwrap();
    assert_eq!((q.state, q.port, q.pkey_index), (QueuePairState::INIT, 1, 0));
    assert_eq!(q.access, AccessFlags::REMOTE_READ);

    let rtr =
        ToRtrAttr { max_dest_rd_atomic: 4, min_rnr_timer: RnrTimer::new(9).unwrap(), ..rtr_attr() };
    let qp = qp.into_rtr(&rtr).unwrap();
    let q = qp.query().unwrap();
    assert_eq!(q.state, QueuePairState::RTR);
    assert_eq!((q.path_mtu, q.dest_qpn, q.rq_psn), (Mtu::MTU_1024, remote().qpn, remote().psn));
    assert_eq!((q.max_dest_rd_atomic, q.min_rnr_timer), (4, rtr.min_rnr_timer));
    assert_eq!(q.access, AccessFlags::REMOTE_READ, "what INIT set stays");

    let rts = ToRtsAttr {
        timeout: AckTimeout::new(17).unwrap(),
        retry_cnt: RetryCount::new(5).unwrap(),
        rnr_retry: RnrRetry::new(3).unwrap(),
        ..ToRtsAttr::new(Psn::new(0x65_4321).unwrap())
    };
    let qp = qp.into_rts(&ToRtsAttr { max_rd_atomic: 2, ..rts }).unwrap();
    let q = qp.query().unwrap();
    assert_eq!(q.state, QueuePairState::RTS);
    let timers = (q.timeout.get(), q.retry_cnt.get(), q.rnr_retry.get());
    assert_eq!(timers, (17, 5, 3));
    assert_eq!((q.sq_psn, q.max_rd_atomic), (Psn::new(0x65_4321).unwrap(), 2));
    assert_eq!((q.path_mtu, q.caps), (Mtu::MTU_1024, rounded), "what RTR and creation set stays");

    let qp = qp.reset().unwrap();
    assert_eq!(qp.query().unwrap().state, QueuePairState::RESET);
}

#[test]
fn rtr_without_a_global_route_fails_on_the_roce_port_with_the_gid_hint() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(32);
    let qp = rc_qp(&pd, &cq).into_init(&ToInitAttr::default()).unwrap();
    let gid_hint = ["global route", "source GID index"];
    // No source GID index, then a peer that sent no GID: either way, no GRH.
    let no_gid = Endpoint { gid: Gid::ZERO, ..remote() };
    let mut qp = qp;
    for attr in [
        ToRtrAttr::to_endpoint(&remote(), 1, None, Mtu::MTU_1024),
        ToRtrAttr::to_endpoint(&no_gid, 1, Some(SGID_INDEX), Mtu::MTU_1024),
    ] {
        f.mock.take_calls();
        let err = qp.try_into_rtr(&attr).unwrap_err();
        assert_verb_error(&err.error, "ibv_modify_qp (INIT→RTR)", libc::EINVAL, &gid_hint);
        let calls = modifies(f.mock.take_calls());
        assert!(matches!(calls[..], [Call::ModifyQp { attr: QpAttr { is_global: 0, .. }, .. }]));
        qp = err.qp;
    }
    drop(qp.into_rtr(&rtr_attr()).expect("the same QP connects once the route has a GRH"));
}

#[test]
fn a_failed_transition_returns_the_qp_in_its_old_state_usable_again() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(32);
    let qp = rc_qp(&pd, &cq);
    let qpn = qp.qp_num();
    let raw = qp.as_raw();
    f.mock.take_calls();
    let gid = ["global route"];

    let mut qp = qp;
    for (errno, hint) in [(libc::EINVAL, &[][..]), (libc::ENOMEM, &[][..])] {
        f.mock.fail(Verb::ModifyQp, errno);
        let err = qp.try_into_init(&ToInitAttr::default()).unwrap_err();
        assert_verb_error(&err.error, "ibv_modify_qp (RESET→INIT)", errno, hint);
        qp = err.qp;
    }
    assert_eq!(qp.query_state().unwrap(), QueuePairState::RESET);
    let mut qp = qp.into_init(&ToInitAttr::default()).unwrap();

    for (errno, hint) in
        [(libc::EINVAL, &gid[..]), (libc::ENOMEM, &[][..]), (libc::ETIMEDOUT, &[][..])]
    {
        f.mock.fail(Verb::ModifyQp, errno);
        let err = qp.try_into_rtr(&rtr_attr()).unwrap_err();
        assert_verb_error(&err.error, "ibv_modify_qp (INIT→RTR)", errno, hint);
        qp = err.qp;
    }
    f.mock.fail(Verb::ModifyQp, libc::EOPNOTSUPP);
    let err = qp.try_into_rtr(&rtr_attr()).unwrap_err();
    assert_unsupported(&err.error, "ibv_modify_qp (INIT→RTR)");
    let qp = err.qp;
    assert_eq!(qp.query_state().unwrap(), QueuePairState::INIT);
    let mut qp = qp.into_rtr(&rtr_attr()).unwrap();

    // EINVAL at RTS: see `einval_at_rts_gets_the_iwarp_hint`.
    for errno in [libc::ENOMEM, libc::ETIMEDOUT] {
        f.mock.fail(Verb::ModifyQp, errno);
        let err = qp.try_into_rts(&ToRtsAttr::new(Psn::new(1).unwrap())).unwrap_err();
        assert_verb_error(&err.error, "ibv_modify_qp (RTR→RTS)", errno, &[]);
        qp = err.qp;
    }
    assert_eq!(qp.query_state().unwrap(), QueuePairState::RTR);

    // The same QP all along: never destroyed, never recreated.
    assert_eq!(qp.qp_num(), qpn);
    let calls = f.mock.take_calls();
    assert!(!calls.iter().any(|c| matches!(c, Call::DestroyQp | Call::CreateQp { .. })));
    assert!(f.mock.is_live(raw));

    // The plain transition fails with the `Error` alone: the QP is destroyed, not leaked.
    f.mock.fail(Verb::ModifyQp, libc::ENOMEM);
    let err = qp.into_rts(&ToRtsAttr::new(Psn::new(1).unwrap())).unwrap_err();
    assert_verb_error(&err, "ibv_modify_qp (RTR→RTS)", libc::ENOMEM, &[]);
    assert!(f.mock.take_calls().contains(&Call::DestroyQp));
    assert!(!f.mock.is_live(raw));
}

#[test]
fn einval_at_rts_gets_the_iwarp_hint() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(32);
    let qp = rc_qp(&pd, &cq).into_init(&ToInitAttr::default()).unwrap();
    let qp = qp.into_rtr(&rtr_attr()).unwrap();
    f.mock.fail(Verb::ModifyQp, libc::EINVAL);
    let err = qp.into_rts(&ToRtsAttr::new(Psn::new(1).unwrap())).unwrap_err();
    assert_verb_error(&err, "ibv_modify_qp (RTR→RTS)", libc::EINVAL, &["rdma_cm"]);
}

/// An RC QP in RTS (with its PD, CQ and an MR for SGEs), the calls so far taken.
macro_rules! connected {
    ($f:ident, $pd:ident, $cq:ident, $mr:ident, $qp:ident) => {
        let $pd = $f.ctx.alloc_pd().unwrap();
        let $cq = $f.ctx.create_cq(32).unwrap();
        let $mr = $pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let $qp = rts_qp(&$pd, &$cq);
        $f.mock.take_calls();
    };
}

#[test]
fn post_recv_and_post_send_errors() {
    let f = Fixture::new();
    connected!(f, pd, cq, mr, qp);
    let sges = [mr.sge(..64).unwrap()];
    let state = ["not in a state that allows this post"];
    for (errno, hint) in
        [(libc::ENOMEM, None), (libc::EINVAL, Some(&state[..])), (libc::EFAULT, Some(&[][..]))]
    {
        let check = |err: &Error, verb| match hint {
            None => assert_queue_full(err, verb, errno),
            Some(hint) => assert_verb_error(err, verb, errno, hint),
        };
        f.mock.fail(Verb::PostRecv, errno);
        // SAFETY: the mock provider never touches the memory.
        check(
            &unsafe { qp.post_recv_wr(&mut RecvWr::new(1, &sges)) }.unwrap_err(),
            "ibv_post_recv",
        );
        f.mock.fail(Verb::PostSend, errno);
        // SAFETY: as above.
        check(
            &unsafe { qp.post_send_wr(&mut SendWr::send(2, &sges)) }.unwrap_err(),
            "ibv_post_send",
        );
    }
    // SAFETY: as above.
    unsafe { qp.post_send_wr(&mut SendWr::send(42, &sges)) }.unwrap();
    let calls = f.mock.take_calls();
    assert_eq!(calls.last(), Some(&Call::PostSend { wr_ids: vec![42] }));
    assert_eq!(calls.len(), 7, "every post reached the provider once");
}

#[test]
fn post_send_checks_the_capabilities_before_the_provider() {
    let f = Fixture::new();
    connected!(f, pd, cq, mr, qp);
    let sges = [mr.sge(..64).unwrap(), mr.sge(64..128).unwrap()];
    // SAFETY: the mock provider never touches the memory.
    let err = unsafe { qp.post_send_wr(&mut SendWr::send(1, &sges)) }.unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::TooManySges), "{err:?}");
    assert_eq!(err.to_string(), "the WR has 2 SGEs; this QP allows 1 (max_send_sge)");
    assert_eq!(f.mock.take_calls(), []);
}

#[test]
fn reads_and_atomics_that_could_never_complete_are_refused_before_the_provider() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(32);
    let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = rc_qp(&pd, &cq).into_init(&ToInitAttr::default()).unwrap();
    let no_reads = ToRtsAttr { max_rd_atomic: 0, ..ToRtsAttr::new(Psn::new(1).unwrap()) };
    let qp = qp.into_rtr(&rtr_attr()).unwrap().into_rts(&no_reads).unwrap();
    f.mock.take_calls();
    let (sge, remote) = ([mr.sge(..8).unwrap()], RemoteAddr { addr: 0x1000, rkey: RKey::new(1) });
    for (wr, what) in [
        (SendWr::rdma_read(1, &sge, remote), "an RDMA READ"),
        (SendWr::fetch_add(2, &sge, remote, 1), "an atomic"),
    ] {
        let mut wr = wr;
        // SAFETY: refused before the provider sees it.
        let err = unsafe { qp.post_send_wr(&mut wr) }.unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Range), "{err:?}");
        let text = err.to_string();
        assert!(text.starts_with(what) && text.contains("max_rd_atomic 0"), "{text}");
    }
    assert_eq!(f.mock.take_calls(), []);
}

#[test]
fn null_post_ops_are_unsupported_not_called() {
    let config = ContextConfig { post_send: false, post_recv: false, ..ContextConfig::default() };
    let f = Fixture::with(Optional::ALL, config);
    connected!(f, pd, cq, mr, qp);
    let sges = [mr.sge(..64).unwrap()];
    // SAFETY: nothing reaches a provider.
    let err = unsafe { qp.post_recv_wr(&mut RecvWr::new(1, &sges)) }.unwrap_err();
    assert_unsupported(&err, "ibv_post_recv");
    // SAFETY: as above.
    let err = unsafe { qp.post_send_wr(&mut SendWr::send(2, &sges)) }.unwrap_err();
    assert_unsupported(&err, "ibv_post_send");
    assert_eq!(f.mock.take_calls(), []);
}

#[test]
fn poll_returns_the_filled_prefix_and_reports_errors() {
    let f = Fixture::new();
    let cq = f.ctx.create_cq(16).unwrap();
    let flushed = sys::ibv_wc { wr_id: 3, status: sys::IBV_WC_WR_FLUSH_ERR, ..Default::default() };
    for wc in
        [1, 2].map(|wr_id| sys::ibv_wc { wr_id, ..Default::default() }).into_iter().chain([flushed])
    {
        f.mock.push_completion(cq.as_raw(), wc);
    }
    f.mock.take_calls();
    let mut storage: [WorkCompletion; 2] = Default::default();
    let done: Vec<_> =
        cq.poll(&mut storage).unwrap().iter().map(|wc| (wc.wr_id(), wc.status())).collect();
    assert_eq!(done, [(1, WcStatus::SUCCESS), (2, WcStatus::SUCCESS)]);
    let done: Vec<_> =
        cq.poll(&mut storage).unwrap().iter().map(|wc| (wc.wr_id(), wc.status())).collect();
    assert_eq!(done, [(3, WcStatus::WR_FLUSH_ERR)]);
    assert!(cq.poll(&mut storage).unwrap().is_empty());
    assert_eq!(f.mock.take_calls(), vec![Call::PollCq { num_entries: 2 }; 3]);

    f.mock.fail(Verb::PollCq, libc::EIO);
    assert_verb_error(
        &cq.poll(&mut storage).unwrap_err(),
        "ibv_poll_cq",
        libc::EIO,
        &["the CQ is broken"],
    );

    let null = open(&f.mock, Optional::ALL, ContextConfig { poll_cq: false, ..Default::default() });
    let cq = null.create_cq(16).unwrap();
    assert_unsupported(&cq.poll(&mut storage).unwrap_err(), "ibv_poll_cq");
}

#[test]
fn wait_for_returns_n_completions_or_says_how_many_came() {
    let f = Fixture::new();
    let cq = f.ctx.create_cq(16).unwrap();
    for wr_id in 1..=3 {
        f.mock.push_completion(cq.as_raw(), sys::ibv_wc { wr_id, ..Default::default() });
    }
    let mut storage: [WorkCompletion; 4] = Default::default();
    let timeout = Duration::from_millis(20);
    let ids: Vec<_> =
        cq.wait_for(2, timeout, &mut storage).unwrap().iter().map(|wc| wc.wr_id()).collect();
    assert_eq!(ids, [1, 2]);
    let err = cq.wait_for(2, timeout, &mut storage).unwrap_err();
    assert!(
        matches!(err, Error::CompletionTimeout { expected: 2, arrived: 1, timeout: t } if t == timeout),
        "{err:?}"
    );
    assert_eq!(storage[0].wr_id(), 3, "what arrived is the storage's prefix");
    assert_eq!(
        err.to_string(),
        "1 of 2 completions arrived within 20ms: check that every awaited work request was \
         posted signaled and reaches its peer: on RC and UC a peer QP connected to this one; on \
         UD the receiver's QPN and Q_Key, through an address handle that routes to its port (a \
         datagram that misses either is dropped silently)"
    );
    let err = cq.wait_for(5, timeout, &mut storage).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Size), "{err:?}");
}

#[test]
fn req_notify_arms_through_the_op_and_reports_errors() {
    let f = Fixture::new();
    let cq = f.ctx.create_cq(16).unwrap();
    f.mock.take_calls();
    cq.req_notify(true).unwrap();
    assert_eq!(f.mock.take_calls(), [Call::ReqNotifyCq { solicited_only: 1 }]);
    f.mock.fail(Verb::ReqNotifyCq, libc::EINVAL);
    assert_verb_error(&cq.req_notify(false).unwrap_err(), "ibv_req_notify_cq", libc::EINVAL, &[]);

    let config = ContextConfig { req_notify_cq: false, ..ContextConfig::default() };
    let null = open(&f.mock, Optional::ALL, config);
    let cq = null.create_cq(16).unwrap();
    assert_unsupported(&cq.req_notify(false).unwrap_err(), "ibv_req_notify_cq");
}

#[test]
fn reset_and_modify_raw_reach_the_provider_only_with_a_valid_mask() {
    let f = Fixture::new();
    connected!(f, pd, cq, _mr, qp);
    let qp = qp.reset().unwrap();
    let reset = QpAttr { qp_state: sys::IBV_QPS_RESET, ..QpAttr::default() };
    let state = sys::IBV_QP_STATE as i32;
    assert_eq!(f.mock.take_calls(), [Call::ModifyQp { mask: state, attr: reset }]);

    // RESET→RTR is no RC transition: refused before the provider.
    let rtr = sys::ibv_qp_attr { qp_state: sys::IBV_QPS_RTR, ..Default::default() };
    let err = qp.try_modify_raw(&rtr, QpAttrMask::STATE).unwrap_err();
    assert_eq!(
        err.error.invalid_input_kind(),
        Some(InvalidInputKind::Transition),
        "{:?}",
        err.error
    );
    assert_eq!(f.mock.take_calls(), []);

    let init = sys::ibv_qp_attr { qp_state: sys::IBV_QPS_INIT, port_num: 1, ..Default::default() };
    let mask =
        QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::ACCESS_FLAGS;
    let qp = err.qp.modify_raw(&init, mask).unwrap();
    let err = qp.try_into_checked::<Rtr>().unwrap_err();
    assert!(matches!(err.error, Error::WrongState { .. }), "{:?}", err.error);
    assert_eq!(err.error.to_string(), "the QP is in INIT, not RTR");
    let qp = err.qp.into_checked::<Init>().unwrap();
    let modified = QpAttr { qp_state: sys::IBV_QPS_INIT, port_num: 1, ..QpAttr::default() };
    // `into_checked` reads the state and what sends are checked against.
    let limits = sys::IBV_QP_STATE | sys::IBV_QP_PORT | sys::IBV_QP_MAX_QP_RD_ATOMIC;
    let query = Call::QueryQp { mask: limits as i32 };
    assert_eq!(
        f.mock.take_calls(),
        [Call::ModifyQp { mask: mask.bits() as i32, attr: modified }, query.clone(), query]
    );
    assert_eq!(qp.query_state().unwrap(), QueuePairState::INIT);
}

#[test]
fn drain_hands_every_outstanding_buffer_back_so_a_reconnecting_loop_never_runs_dry() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(64);
    let pool = BufferPool::new(pd.register(8 * 64, AccessFlags::LOCAL_WRITE).unwrap(), 64).unwrap();
    let mut qp = rc_qp(&pd, &cq);
    for round in 0..100 {
        let init = qp.into_init(&ToInitAttr::default()).unwrap();
        let rts = init
            .into_rtr(&rtr_attr())
            .unwrap()
            .into_rts(&ToRtsAttr::new(Psn::new(1).unwrap()))
            .unwrap();
        // Four receives and four sends to a peer that never answers: all stay outstanding.
        for i in 0..8 {
            let buffer = pool.take().unwrap_or_else(|| panic!("round {round}: pool ran dry"));
            if i % 2 == 0 {
                rts.post_recv_buffer(buffer).unwrap();
            } else {
                rts.post_send_buffer(buffer, SendOp::Send).unwrap();
            }
        }
        let mut flushed = Vec::new();
        // (Every other round with no deadline at all: a timeout past the clock's range.)
        let limit = if round % 2 == 0 { Duration::from_secs(1) } else { Duration::MAX };
        qp = rts
            .drain(&[&cq], limit, |wc| {
                flushed.push(wc.status());
                drop(pool.complete(wc).expect("a buffer-tier completion"));
            })
            .unwrap();
        assert_eq!(flushed, [WcStatus::WR_FLUSH_ERR; 8], "round {round}");
        assert_eq!(qp.query_state().unwrap(), QueuePairState::RESET);
    }
    assert_eq!(std::iter::from_fn(|| pool.take()).collect::<Vec<_>>().len(), 8, "nothing stranded");
    assert!(f.mock.take_violations().is_empty());
}

/// When `drain`'s callback panics, the QP goes with the unwinding, but the completions polled
/// with the one it was handling stay with the CQ: the program's next poll hands back every
/// buffer of the pool.
#[test]
fn a_drain_whose_callback_panicked_leaves_the_rest_for_the_next_poll() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(64);
    let pool = BufferPool::new(pd.register(8 * 64, AccessFlags::LOCAL_WRITE).unwrap(), 64).unwrap();
    let rts = rts_qp(&pd, &cq);
    for _ in 0..4 {
        rts.post_recv_buffer(pool.take().unwrap()).unwrap();
    }
    let mut handed = 0;
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rts.drain(&[&cq], Duration::from_secs(1), |wc| {
            handed += 1;
            drop(pool.complete(wc).expect("a buffer-tier completion"));
            panic!("the program's callback fails");
        })
    }));
    assert!(panicked.is_err());
    assert_eq!(handed, 1);
    let back = cq.poll_with(16, |c| drop(pool.complete(&mut c.wc))).unwrap();
    assert!(back >= 3, "{back} polled");
    let free: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(free.len(), 8, "every buffer came back");
    assert!(f.mock.take_violations().is_empty());
}

/// The `wr_id`s of the one receive post (QP or SRQ) that `calls` must hold.
fn one_receive_post(calls: &[Call]) -> Vec<u64> {
    match calls {
        [Call::PostRecv { wr_ids } | Call::PostSrqRecv { wr_ids }] => wr_ids.clone(),
        other => panic!("one receive post expected: {other:?}"),
    }
}

/// A raw `RecvWrList` goes to the provider as one list, in order, post after post; a queue
/// that fills part-way counts the WRs taken before it, and only those complete. An empty list
/// posts nothing. The same on an SRQ.
#[test]
fn a_raw_receive_list_posts_with_one_call_and_counts_what_the_provider_took() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(64);
    let region = pd.register(4 * 64, AccessFlags::LOCAL_WRITE).unwrap();
    let sges: Vec<[Sge; 1]> = (0..4).map(|i| [region.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
    let mut list: RecvWrList<'_> =
        sges.iter().zip(10..).map(|(s, id)| RecvWr::new(id, s)).collect();
    let srq = pd.create_srq(16, 1).unwrap();
    let qp = rts_qp(&pd, &cq);

    f.mock.take_calls();
    f.mock.fill_receive_queue_at(2);
    // SAFETY: `region` outlives the QP and the SRQ (declared before them) and is not touched.
    let err = unsafe { qp.post_recv_wrs(&mut list) }.unwrap_err();
    assert_eq!(err.posted, 2);
    assert_queue_full(&err.error, "ibv_post_recv", libc::ENOMEM);
    assert_eq!(one_receive_post(&f.mock.take_calls()), [10, 11, 12, 13]);
    // SAFETY: as above.
    unsafe { qp.post_recv_wrs(&mut RecvWrList::with_capacity(1)) }.unwrap();
    assert_eq!(f.mock.take_calls(), [], "an empty list posts nothing");
    let mut flushed = Vec::new();
    let qp = qp.drain(&[&cq], Duration::from_secs(1), |wc| flushed.push(wc.wr_id())).unwrap();
    assert_eq!(flushed, [10, 11], "only what the provider took");

    f.mock.take_calls();
    // SAFETY: as above.
    unsafe { srq.post_recv_wrs(&mut list) }.unwrap();
    assert_eq!(one_receive_post(&f.mock.take_calls()), [10, 11, 12, 13], "the same list again");
    f.mock.fill_receive_queue_at(0);
    // SAFETY: as above.
    let err = unsafe { srq.post_recv_wrs(&mut list) }.unwrap_err();
    assert_eq!(err.posted, 0);
    assert_queue_full(&err.error, "ibv_post_srq_recv", libc::ENOMEM);
    assert!(f.mock.take_violations().is_empty());
    drop(qp);
}

/// A `RecvBufferList` posts its receives with one call, each a flight of its own: a post the
/// provider refuses keeps them all in the list, a receive queue that fills mid-list keeps the
/// rest, and every posted buffer comes back with its own completion. The same on an SRQ.
#[test]
fn a_receive_list_posts_with_one_call_and_keeps_what_the_provider_refused() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(64);
    let pool = BufferPool::new(pd.register(8 * 64, AccessFlags::LOCAL_WRITE).unwrap(), 64).unwrap();
    let srq = pd.create_srq(16, 1).unwrap();
    let qp = rts_qp(&pd, &cq);
    let mut list = RecvBufferList::with_capacity(4);
    for _ in 0..4 {
        list.push(pool.take().unwrap()).unwrap();
    }
    assert!(list.push(pool.take().unwrap()).is_err(), "full at its capacity");
    let posted = |calls: Vec<Call>| one_receive_post(&calls).len();

    f.mock.take_calls();
    f.mock.fail(Verb::PostRecv, libc::ENOMEM);
    assert_queue_full(&qp.post_recv_buffers(&mut list).unwrap_err(), "ibv_post_recv", libc::ENOMEM);
    assert_eq!((posted(f.mock.take_calls()), list.len()), (4, 4), "refused: all kept");
    f.mock.fill_receive_queue_at(2);
    assert_queue_full(&qp.post_recv_buffers(&mut list).unwrap_err(), "ibv_post_recv", libc::ENOMEM);
    assert_eq!((posted(f.mock.take_calls()), list.len()), (4, 2), "the last two kept");
    qp.post_recv_buffers(&mut list).unwrap();
    assert_eq!((posted(f.mock.take_calls()), list.len()), (2, 0));

    let mut flushed = 0;
    let qp = qp
        .drain(&[&cq], Duration::from_secs(1), |wc| {
            assert_eq!(wc.status(), WcStatus::WR_FLUSH_ERR);
            drop(pool.complete(wc).expect("each receive its own completion"));
            flushed += 1;
        })
        .unwrap();
    assert_eq!(flushed, 4);

    f.mock.take_calls();
    for _ in 0..4 {
        list.push(pool.take().unwrap()).unwrap();
    }
    srq.post_recv_buffers(&mut list).unwrap();
    assert_eq!((posted(f.mock.take_calls()), list.len()), (4, 0));
    assert_eq!(std::iter::from_fn(|| pool.take()).collect::<Vec<_>>().len(), 4, "four on the SRQ");
    assert!(f.mock.take_violations().is_empty());
    drop(qp);
}

#[test]
fn drain_of_a_qp_in_reset_returns_at_once_and_a_refused_marker_returns_the_qp_in_error() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(64);
    let qp =
        rc_qp(&pd, &cq).drain(&[&cq], Duration::ZERO, |_| panic!("nothing outstanding")).unwrap();
    f.mock.take_calls();
    let qp = qp.into_init(&ToInitAttr::default()).unwrap();
    // Another CQ than the QP's: refused before anything changes.
    let other = f.ctx.create_cq(8).unwrap();
    let err = qp.try_drain(&[&other], Duration::ZERO, |_| {}).unwrap_err();
    assert_eq!(err.error.invalid_input_kind(), Some(InvalidInputKind::OtherCq));
    assert_eq!(err.error.to_string(), "drain polls the QP's CQs: pass its send CQ too");
    assert_eq!(err.qp.query_state().unwrap(), QueuePairState::INIT);
    let qp = err.qp;
    // The marker's post fails (as a provider refusing posts in ERROR would): the error comes
    // back with the QP.
    f.mock.fail(Verb::PostSend, libc::EINVAL);
    let err = qp.try_drain(&[&cq], Duration::from_secs(1), |_| {}).unwrap_err();
    assert_verb_error(
        &err.error,
        "ibv_post_send",
        libc::EINVAL,
        &["not in a state that allows this post"],
    );
    assert_eq!(err.qp.query_state().unwrap(), QueuePairState::ERR);
}

#[test]
fn waiting_forever_reaches_the_verb_only_when_named() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(32);
    for (what, err) in [
        ("timeout 0", AckTimeout::new(0).unwrap_err()),
        ("rnr_retry 7", RnrRetry::new(7).unwrap_err()),
    ] {
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Range), "{what}");
        let constant = if what.starts_with("timeout") { "AckTimeout" } else { "RnrRetry" };
        assert!(err.to_string().starts_with(what), "{err}");
        assert!(err.to_string().contains(&format!("use {constant}::INFINITE")), "{err}");
    }
    let qp = rc_qp(&pd, &cq).into_init(&ToInitAttr::default()).unwrap();
    let qp = qp.into_rtr(&rtr_attr()).unwrap();
    f.mock.take_calls();
    let forever = ToRtsAttr {
        timeout: AckTimeout::INFINITE,
        rnr_retry: RnrRetry::INFINITE,
        ..ToRtsAttr::new(Psn::new(1).unwrap())
    };
    let qp = qp.into_rts(&forever).unwrap();
    let [Call::ModifyQp { attr, .. }] = &f.mock.take_calls()[..] else { panic!("one modify") };
    assert_eq!((attr.timeout, attr.rnr_retry), (0, 7), "the codes that mean forever");
    let q = qp.query().unwrap();
    assert_eq!((q.timeout, q.rnr_retry), (AckTimeout::INFINITE, RnrRetry::INFINITE));
    assert_eq!((q.timeout.duration(), q.rnr_retry.count()), (None, None));
}

/// A provider may free a send-queue slot as soon as it has executed the WR (rxe, and the
/// mock, do), so `max_send_wr` 1 never makes it refuse a post while completions pile up in a
/// CQ of 1: the buffer tier counts them and refuses the post that would overrun the CQ, until
/// the completion is polled and its buffer handed back.
#[test]
fn a_cq_full_of_unpolled_completions_refuses_buffer_posts_instead_of_overrunning() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let (cq, peer_cq) = (f.ctx.create_cq(1).unwrap(), f.ctx.create_cq(64).unwrap());
    let pool =
        BufferPool::new(pd.register(16 * 64, AccessFlags::LOCAL_WRITE).unwrap(), 64).unwrap();
    let cap = QpCapabilities { max_send_wr: 1, max_recv_wr: 0, ..Default::default() };
    let (a, _b) = loopback_pair(&f, &pd, (&cq, &peer_cq), cap);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let target = pd.register_remote_writable(4096, access).unwrap();
    let write = SendOp::RdmaWrite(target.remote(..64).unwrap());
    let mut wcs = [WorkCompletion::EMPTY; 4];
    for round in 0..64 {
        a.post_send_buffer(pool.take().unwrap(), write).unwrap();
        assert_eq!(cq.due(), 1);
        let refused = a.try_post_send_buffer(pool.take().unwrap(), write).unwrap_err();
        assert!(
            matches!(refused.error, Error::CompletionsDue { capacity: 1, due: 1, .. }),
            "round {round}: {:?}",
            refused.error
        );
        assert!(refused.error.to_string().contains("BufferPool::complete"), "{}", refused.error);
        drop(refused);
        assert_eq!(f.mock.cq_overruns(cq.as_raw()), 0, "round {round}");
        // Polled but not handed back: still due.
        let polled = cq.poll(&mut wcs).unwrap();
        assert_eq!(polled.len(), 1);
        assert_eq!(cq.due(), 1);
        drop(pool.complete(&mut polled[0]).unwrap());
        assert_eq!(cq.due(), 0);
    }
    assert!(f.mock.take_violations().is_empty());
}

/// An SRQ's receives may complete on the receive CQ of any QP it feeds: such a CQ keeps the
/// SRQ's `max_wr` entries (once, however many of its QPs it feeds there), its QPs' own posts
/// cannot take them, and the SRQ holds its receives to `max_wr` though the provider frees a
/// slot when a receive is consumed.
#[test]
fn a_cq_fed_by_an_srq_keeps_its_receives_entries() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(8);
    let pool =
        BufferPool::new(pd.register(16 * 64, AccessFlags::LOCAL_WRITE).unwrap(), 64).unwrap();
    let srq = pd.create_srq(4, 1).unwrap();
    let cap = QpCapabilities { max_send_wr: 1, ..Default::default() };
    let attr = QpInitAttr { cap, srq: Some(&srq), ..QpInitAttr::new(&cq) };
    let qps = [pd.create_rc_qp(&attr).unwrap(), pd.create_rc_qp(&attr).unwrap()];
    assert_eq!(cq.due(), 4, "one SRQ's entries, for both QPs");
    for _ in 0..4 {
        srq.post_recv_buffer(pool.take().unwrap()).unwrap();
    }
    let refused = srq.try_post_recv_buffer(pool.take().unwrap()).unwrap_err();
    assert!(
        matches!(refused.error, Error::CompletionsDue { capacity: 4, due: 4, .. }),
        "{:?}",
        refused.error
    );
    // A QP fed by another SRQ would want 5 more entries: 9 of the CQ's 8.
    let other = pd.create_srq(5, 1).unwrap();
    assert_eq!(cq.capacity(), 8);
    let err = pd.create_rc_qp(&QpInitAttr { srq: Some(&other), ..attr }).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::CqTooSmall), "{err}");
    drop(qps);
    assert_eq!(cq.due(), 0, "the last QP on the SRQ gone, its entries are free");
    assert!(f.mock.take_violations().is_empty());
}
