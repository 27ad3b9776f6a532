//! XRC against the mock: domains, XRC SRQs, and initiator and target QPs connected to each
//! other, whose SENDs land in the XRC SRQ they name; and the refusals.

use rdma_verbs::{
    AccessFlags, BufferPool, CompletionQueue, Endpoint, InvalidInputKind, MemoryRegion, Mtu,
    ProtectionDomain, Psn, QpInitAttr, Qpn, QueuePair, QueuePairState, Rtr, Rts, SendFlags, SendOp,
    SendWr, SrqNum, ToInitAttr, ToRtrAttr, ToRtsAttr, ToXrcSrq, WcOpcode, WcStatus, WorkCompletion,
    XrcDomain, XrcRecv, XrcSend,
};
use rdma_verbs_mock::{Call, ContextConfig, Optional, Verb};
use rdma_verbs_sys as sys;

use super::{assert_unsupported, assert_verb_error, open, Fixture};

fn with_xrc() -> ContextConfig {
    ContextConfig { xrc: true, ..ContextConfig::default() }
}

/// The attributes that take a QP of `f`'s context to RTR towards QP `peer` of the same port.
fn rtr_to(f: &Fixture, peer: Qpn) -> ToRtrAttr {
    let gid = f.ctx.routable_gid(1).unwrap();
    let lid = f.ctx.query_port(1).unwrap().lid();
    let endpoint = Endpoint { lid, qpn: peer, psn: Psn::new(0).unwrap(), gid: gid.gid };
    ToRtrAttr::to_endpoint(&endpoint, 1, Some(gid.index), Mtu::MTU_1024)
}

/// An XRC initiator of `pd` on `cq`, in RTS, and a target of `xrcd`, in RTR, connected to
/// each other.
fn connected<'a>(
    f: &Fixture,
    pd: &'a ProtectionDomain<'a>,
    xrcd: &'a XrcDomain<'_>,
    cq: &'a CompletionQueue<'a>,
) -> (QueuePair<'a, Rts, XrcSend>, QueuePair<'a, Rtr, XrcRecv>) {
    let send = pd.create_xrc_send_qp(&QpInitAttr::new(cq)).unwrap();
    let recv = xrcd.create_recv_qp(pd).unwrap();
    let (send_qpn, recv_qpn) = (send.qp_num(), recv.qp_num());
    let init = ToInitAttr { access: AccessFlags::empty(), ..Default::default() };
    let send = send.into_init(&init).unwrap().into_rtr(&rtr_to(f, recv_qpn)).unwrap();
    let send = send.into_rts(&ToRtsAttr::new(Psn::new(0).unwrap())).unwrap();
    let recv = recv.into_init(&init).unwrap().into_rtr(&rtr_to(f, send_qpn)).unwrap();
    (send, recv)
}

/// Posts one signaled SEND of `mr`'s first `len` bytes on `qp` to the XRC SRQ `srqn`.
fn send_to(qp: &QueuePair<'_, Rts, XrcSend>, mr: &MemoryRegion<'_>, len: usize, srqn: SrqNum) {
    let sges = [mr.sge(..len).unwrap()];
    let mut wr = SendWr::send(7, &sges).flags(SendFlags::SIGNALED).to_xrc_srq(srqn);
    // SAFETY: `mr` outlives the send's completion, polled by the caller, and is not touched
    // meanwhile.
    unsafe { qp.post_send_wr(&mut wr) }.unwrap();
}

#[test]
fn a_send_lands_in_the_xrc_srq_it_names_and_completes_on_that_srqs_cq() {
    let f = Fixture::with(Optional::ALL, with_xrc());
    let (pd, send_cq) = f.pd_and_cq(16);
    let recv_cq = f.ctx.create_cq(64).unwrap();
    let mut mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    mr.as_mut_slice()[..17].copy_from_slice(b"to the second SRQ");
    let pool = BufferPool::new(pd.register(4 * 64, AccessFlags::LOCAL_WRITE).unwrap(), 64).unwrap();
    let xrcd = f.ctx.open_xrcd().unwrap();
    let first = xrcd.create_srq(&pd, &recv_cq, 16, 1).unwrap();
    let second = xrcd.create_srq(&pd, &recv_cq, 16, 1).unwrap();
    assert_ne!(first.srq_num(), second.srq_num());
    first.post_recv_buffer(pool.take().unwrap()).unwrap();
    second.post_recv_buffer(pool.take().unwrap()).unwrap();
    let (send, recv) = connected(&f, &pd, &xrcd, &send_cq);
    let mut wcs = [WorkCompletion::EMPTY; 4];

    send_to(&send, &mr, 17, second.srq_num());
    let sent = send_cq.poll(&mut wcs).unwrap();
    assert_eq!(sent.len(), 1);
    assert_eq!((sent[0].wr_id(), sent[0].status()), (7, WcStatus::SUCCESS));
    let received = recv_cq.poll(&mut wcs).unwrap();
    assert_eq!(received.len(), 1, "one receive consumed, of the second SRQ");
    let wc = &mut received[0];
    assert_eq!((wc.status(), wc.opcode(), wc.byte_len()), (WcStatus::SUCCESS, WcOpcode::RECV, 17));
    assert_eq!(wc.qp_num(), recv.qp_num(), "completed with the target QP's number");
    let buffer = pool.complete(wc).unwrap();
    assert_eq!(&buffer.as_slice()[..17], b"to the second SRQ");
    drop(buffer);

    // The first SRQ's receive is still there: the next SEND to it takes it.
    send_to(&send, &mr, 2, first.srq_num());
    assert_eq!(send_cq.poll(&mut wcs).unwrap()[0].status(), WcStatus::SUCCESS);
    let received = recv_cq.poll(&mut wcs).unwrap();
    assert_eq!((received.len(), received[0].byte_len()), (1, 2));
    drop(pool.complete(&mut received[0]).unwrap());
    assert!(f.mock.take_violations().is_empty());
}

#[test]
fn a_buffer_sent_to_an_xrc_srq_comes_back_with_its_completion() {
    let f = Fixture::with(Optional::ALL, with_xrc());
    let (pd, cq) = f.pd_and_cq(64);
    let pool = BufferPool::new(pd.register(4 * 64, AccessFlags::LOCAL_WRITE).unwrap(), 64).unwrap();
    let xrcd = f.ctx.open_xrcd().unwrap();
    let srq = xrcd.create_srq(&pd, &cq, 16, 1).unwrap();
    srq.post_recv_buffer(pool.take().unwrap()).unwrap();
    let (send, recv) = connected(&f, &pd, &xrcd, &cq);
    let mut buffer = pool.take().unwrap();
    buffer.fill(b"by the buffer tier").unwrap();
    let to = ToXrcSrq { op: SendOp::Send, srqn: srq.srq_num() };
    send.post_send_buffer_to_srq(buffer, to).unwrap();

    let mut wcs = [WorkCompletion::EMPTY; 4];
    let polled = cq.poll(&mut wcs).unwrap();
    assert_eq!(polled.len(), 2, "the SEND's and the receive's");
    let mut payload = Vec::new();
    for wc in polled.iter_mut() {
        assert_eq!(wc.status(), WcStatus::SUCCESS);
        let buffer = pool.complete(wc).expect("each buffer with its own completion");
        if wc.opcode() == WcOpcode::RECV {
            assert_eq!(wc.qp_num(), recv.qp_num());
            payload = buffer.as_slice()[..wc.byte_len() as usize].to_vec();
        }
    }
    assert_eq!(payload, b"by the buffer tier");
    let back: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(back.len(), 4, "every buffer back");
    assert!(f.mock.take_violations().is_empty());
}

#[test]
fn each_object_is_created_with_what_its_verb_needs_and_destroyed_before_the_domain() {
    let f = Fixture::with(Optional::ALL, with_xrc());
    let (pd, cq) = f.pd_and_cq(64);
    f.mock.take_calls();
    let xrcd = f.ctx.open_xrcd().unwrap();
    let srq = xrcd.create_srq(&pd, &cq, 16, 1).unwrap();
    let recv = xrcd.create_recv_qp(&pd).unwrap();
    let send = pd.create_xrc_send_qp(&QpInitAttr::new(&cq)).unwrap();
    // (The device's attributes are queried once, for IBV_DEVICE_XRC and the limits.)
    let calls = f.mock.take_calls_where(|call| *call != Call::QueryDevice);
    let fd_and_oflags = sys::IBV_XRCD_INIT_ATTR_FD | sys::IBV_XRCD_INIT_ATTR_OFLAGS;
    let srq_mask = sys::IBV_SRQ_INIT_ATTR_TYPE
        | sys::IBV_SRQ_INIT_ATTR_PD
        | sys::IBV_SRQ_INIT_ATTR_XRCD
        | sys::IBV_SRQ_INIT_ATTR_CQ;
    assert_eq!(
        calls[..4],
        [
            Call::OpenXrcd { comp_mask: fd_and_oflags },
            Call::CreateSrqEx {
                srq_type: sys::IBV_SRQT_XRC,
                comp_mask: srq_mask,
                max_wr: 16,
                max_sge: 1
            },
            Call::GetSrqNum,
            Call::CreateQpEx {
                qp_type: sys::IBV_QPT_XRC_RECV,
                comp_mask: sys::IBV_QP_INIT_ATTR_XRCD,
                send_ops_flags: 0
            },
        ]
    );
    let initiator = calls.iter().find_map(|call| match call {
        Call::CreateQp { qp_type, max_recv_wr, max_recv_sge, .. } => {
            Some((*qp_type, *max_recv_wr, *max_recv_sge))
        }
        _ => None,
    });
    assert_eq!(initiator, Some((sys::IBV_QPT_XRC_SEND, 0, 0)), "no receive side: {calls:?}");
    assert_eq!(recv.query_state().unwrap(), QueuePairState::RESET);

    drop((send, recv, srq));
    f.mock.take_calls();
    xrcd.close().unwrap();
    assert_eq!(f.mock.take_calls(), [Call::CloseXrcd]);
}

#[test]
fn a_send_naming_no_srq_of_the_targets_domain_fails_at_the_sender() {
    let f = Fixture::with(Optional::ALL, with_xrc());
    let (pd, send_cq) = f.pd_and_cq(16);
    let recv_cq = f.ctx.create_cq(64).unwrap();
    let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let pool = BufferPool::new(pd.register(2 * 64, AccessFlags::LOCAL_WRITE).unwrap(), 64).unwrap();
    let xrcd = f.ctx.open_xrcd().unwrap();
    let other_xrcd = f.ctx.open_xrcd().unwrap();
    let elsewhere = other_xrcd.create_srq(&pd, &recv_cq, 16, 1).unwrap();
    elsewhere.post_recv_buffer(pool.take().unwrap()).unwrap();
    let (send, recv) = connected(&f, &pd, &xrcd, &send_cq);
    let mut wcs = [WorkCompletion::EMPTY; 4];

    // An SRQ of another domain: the target does not deliver to it.
    send_to(&send, &mr, 8, elsewhere.srq_num());
    let sent = send_cq.poll(&mut wcs).unwrap();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].status(), WcStatus::REM_INV_REQ_ERR);
    assert!(recv_cq.poll(&mut wcs).unwrap().is_empty(), "nothing received");
    assert_eq!(send.query_state().unwrap(), QueuePairState::ERR);
    assert_eq!(recv.query_state().unwrap(), QueuePairState::ERR);

    // A number no SRQ has: the same.
    let (send, _recv) = connected(&f, &pd, &xrcd, &send_cq);
    send_to(&send, &mr, 8, SrqNum::new(SrqNum::MAX).unwrap());
    assert_eq!(send_cq.poll(&mut wcs).unwrap()[0].status(), WcStatus::REM_INV_REQ_ERR);
    assert!(f.mock.take_violations().is_empty());
}

#[test]
fn without_xrc_the_domain_and_the_qps_are_unsupported() {
    // No open_xrcd op (rxe, siw), or a context that is not extended.
    for config in [ContextConfig::default(), ContextConfig { extended: false, ..with_xrc() }] {
        let f = Fixture::with(Optional::ALL, config);
        assert_unsupported(&f.ctx.open_xrcd().unwrap_err(), "ibv_open_xrcd");
    }
    // libibverbs' stubs answer EOPNOTSUPP.
    {
        let f = Fixture::with(Optional::ALL, with_xrc());
        f.mock.fail(Verb::OpenXrcd, libc::EOPNOTSUPP);
        assert_unsupported(&f.ctx.open_xrcd().unwrap_err(), "ibv_open_xrcd");
        let (pd, cq) = f.pd_and_cq(16);
        let xrcd = f.ctx.open_xrcd().unwrap();
        f.mock.fail(Verb::CreateSrqEx, libc::EOPNOTSUPP);
        assert_unsupported(&xrcd.create_srq(&pd, &cq, 4, 1).unwrap_err(), "ibv_create_srq_ex");
    }

    // A device without IBV_DEVICE_XRC: its QPs are refused before any create verb.
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(16);
    f.mock.take_calls();
    let err = pd.create_xrc_send_qp(&QpInitAttr::new(&cq)).unwrap_err();
    assert_unsupported(&err, "XRC (the device lacks IBV_DEVICE_XRC)");
    let calls = f.mock.take_calls();
    assert!(!calls.iter().any(|c| matches!(c, Call::CreateQp { .. })), "{calls:?}");
}

#[test]
fn refusals_before_the_provider_and_a_domain_in_use() {
    let f = Fixture::with(Optional::ALL, with_xrc());
    let (pd, cq) = f.pd_and_cq(16);
    let xrcd = f.ctx.open_xrcd().unwrap();
    let other = open(&f.mock, Optional::ALL, with_xrc());
    let other_pd = other.alloc_pd().unwrap();
    f.mock.take_calls();
    let err = xrcd.create_srq(&other_pd, &cq, 4, 1).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::OtherContext), "{err:?}");
    let err = xrcd.create_recv_qp(&other_pd).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::OtherContext), "{err:?}");
    assert!(f.mock.take_calls().is_empty());

    // An initiator takes no SRQ.
    let srq = pd.create_srq(4, 1).unwrap();
    let attr = QpInitAttr { srq: Some(&srq), ..QpInitAttr::new(&cq) };
    let err = pd.create_xrc_send_qp(&attr).unwrap_err();
    assert!(err.to_string().contains("no receive side"), "{err}");

    // An XRC SRQ keeps its receives' room on its CQ.
    let err = xrcd.create_srq(&pd, &cq, 32, 1).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::CqTooSmall), "{err:?}");

    // A domain the provider refuses to close is leaked, with the error reported.
    let xrc_srq = xrcd.create_srq(&pd, &cq, 8, 1).unwrap();
    drop(xrc_srq);
    f.mock.fail(Verb::CloseXrcd, libc::EBUSY);
    assert_verb_error(&xrcd.close().unwrap_err(), "ibv_close_xrcd", libc::EBUSY, &[]);
    drop(other_pd);
}
