//! The device's limits, refused before the verb with the limit and the device's value named:
//! work queue sizes and SGEs at creation, RDMA READ / atomic depths at RTR and RTS, the
//! responder resources a context's QPs share, and a QP's rate limit against the device's
//! packet pacing range.

use std::net::Ipv6Addr;

use rdma_verbs::{
    CompletionQueue, Endpoint, Error, Gid, Init, InvalidInputKind, Lid, Mtu, ProtectionDomain, Psn,
    QpAttrMask, QpCapabilities, QpInitAttr, Qpn, QueuePair, QueuePairState, Rc, Rtr, Rts,
    ToInitAttr, ToRtrAttr, ToRtsAttr, Ud,
};
use rdma_verbs_mock::{Call, ContextConfig, DeviceLimits, Optional, QpAttr, Verb};
use rdma_verbs_sys as sys;

use super::{open, Fixture};

/// A context whose device reports `limits`.
fn fixture(limits: DeviceLimits) -> Fixture {
    Fixture::with(Optional::ALL, ContextConfig { limits, ..ContextConfig::default() })
}

fn assert_device_limit(err: &Error, message: &str) {
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::DeviceLimit), "{err:?}");
    assert_eq!(err.to_string(), message);
}

fn init_qp<'a>(pd: &'a ProtectionDomain<'a>, cq: &'a CompletionQueue<'a>) -> QueuePair<'a, Init> {
    let qp = pd.create_rc_qp(&QpInitAttr::new(cq)).unwrap();
    qp.into_init(&ToInitAttr::default()).unwrap()
}

/// RTR attributes towards a RoCE peer (index 3: the mock port's RoCE v2 GID) with
/// `max_dest_rd_atomic` `depth`.
fn rtr(depth: u8) -> ToRtrAttr {
    let gid = Gid::from("::ffff:192.0.2.9".parse::<Ipv6Addr>().unwrap());
    let peer =
        Endpoint { lid: Lid::new(1), qpn: Qpn::new(0x99).unwrap(), psn: Psn::new(7).unwrap(), gid };
    ToRtrAttr {
        max_dest_rd_atomic: depth,
        ..ToRtrAttr::to_endpoint(&peer, 1, Some(3), Mtu::MTU_1024)
    }
}

fn assert_unsupported(err: &Error, naming: &str) {
    assert!(matches!(err, Error::Unsupported { what } if what.contains(naming)), "{err:?}");
}

fn modifies(calls: Vec<Call>) -> usize {
    calls.iter().filter(|c| matches!(c, Call::ModifyQp { .. })).count()
}

#[test]
fn capabilities_above_the_devices_limits_are_refused_before_the_provider() {
    let f = fixture(DeviceLimits { max_qp_wr: 64, max_sge: 2, ..DeviceLimits::default() });
    let (pd, cq) = f.pd_and_cq(256);
    let base = QpCapabilities::default();
    let cases = [
        (QpCapabilities { max_send_wr: 65, ..base }, "max_send_wr 65", "max_qp_wr 64"),
        (QpCapabilities { max_recv_wr: 65, ..base }, "max_recv_wr 65", "max_qp_wr 64"),
        (QpCapabilities { max_send_sge: 3, ..base }, "max_send_sge 3", "max_sge 2"),
        (QpCapabilities { max_recv_sge: 3, ..base }, "max_recv_sge 3", "max_sge 2"),
    ];
    for (cap, asked, limit) in cases {
        let err = pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) }).unwrap_err();
        let max = limit.rsplit(' ').next().unwrap();
        assert_device_limit(
            &err,
            &format!(
                "{asked} is above the device's {limit} (ibv_query_device): ask for at most {max}"
            ),
        );
    }
    let calls = f.mock.take_calls();
    assert!(!calls.iter().any(|c| matches!(c, Call::CreateQp { .. })), "{calls:?}");
    // At the limits, the provider is asked (and accepts).
    let cap = QpCapabilities {
        max_send_wr: 64,
        max_recv_wr: 64,
        max_send_sge: 2,
        max_recv_sge: 2,
        ..base
    };
    drop(pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) }).unwrap());
}

#[test]
fn rd_atomic_depths_above_the_devices_are_refused_before_the_verb() {
    let f = fixture(DeviceLimits {
        max_qp_rd_atom: 4,
        max_qp_init_rd_atom: 2,
        ..DeviceLimits::default()
    });
    let (pd, cq) = f.pd_and_cq(64);
    let qp = init_qp(&pd, &cq);
    f.mock.take_calls();
    let refused = qp.try_into_rtr(&rtr(5)).unwrap_err();
    assert_device_limit(
        &refused.error,
        "max_dest_rd_atomic 5 is above the device's max_qp_rd_atom 4 (ibv_query_device): ask for \
         at most 4",
    );
    assert_eq!(modifies(f.mock.take_calls()), 0, "refused before ibv_modify_qp");
    let qp: QueuePair<'_, Rtr> = refused.qp.into_rtr(&rtr(4)).unwrap();
    let rts = ToRtsAttr { max_rd_atomic: 3, ..ToRtsAttr::new(Psn::new(1).unwrap()) };
    f.mock.take_calls();
    let refused = qp.try_into_rts(&rts).unwrap_err();
    assert_device_limit(
        &refused.error,
        "max_rd_atomic 3 is above the device's max_qp_init_rd_atom 2 (ibv_query_device): ask for \
         at most 2",
    );
    assert_eq!(modifies(f.mock.take_calls()), 0, "refused before ibv_modify_qp");
    drop(refused.qp.into_rts(&ToRtsAttr { max_rd_atomic: 2, ..rts }).unwrap());
}

#[test]
fn two_qps_share_the_devices_responder_resources() {
    // As the ionic provider reports: 16 per QP, 16 over the whole device.
    let f = fixture(DeviceLimits {
        max_qp_rd_atom: 16,
        max_res_rd_atom: 16,
        ..DeviceLimits::default()
    });
    let (pd, cq) = f.pd_and_cq(256);
    let first = init_qp(&pd, &cq).into_rtr(&rtr(16)).unwrap();
    let second = init_qp(&pd, &cq);
    f.mock.take_calls();
    let refused = second.try_into_rtr(&rtr(16)).unwrap_err();
    assert_device_limit(
        &refused.error,
        "max_dest_rd_atomic 16 would bring the RDMA READ / atomic responder resources of this \
         device context's QPs to 32 (they hold 16 in RTR and RTS), above the device's \
         max_res_rd_atom 16: lower max_dest_rd_atomic, or reset or destroy a QP first",
    );
    assert_eq!(modifies(f.mock.take_calls()), 0, "refused before ibv_modify_qp");
    let second = refused.qp;

    // Resetting the first gives its 16 back; a failed RTR takes nothing.
    let first = first.reset().unwrap();
    f.mock.fail(Verb::ModifyQp, libc::EINVAL);
    let second = second.try_into_rtr(&rtr(16)).unwrap_err().qp;
    let second = second.into_rtr(&rtr(16)).unwrap();
    let first = first.into_init(&ToInitAttr::default()).unwrap();
    let first = first.try_into_rtr(&rtr(1)).unwrap_err().qp;

    // Destroying the second gives its 16 back; so does a raw move to RESET.
    drop(second);
    let first = first.into_rtr(&rtr(16)).unwrap();
    let reset = sys::ibv_qp_attr { qp_state: sys::IBV_QPS_RESET, ..Default::default() };
    let first = first.modify_raw(&reset, QpAttrMask::STATE).unwrap();
    let third = init_qp(&pd, &cq).into_rtr(&rtr(16)).unwrap();
    drop((first, third));
}

/// A QP of `f`'s context in RTS, connected to [`rtr`]'s peer.
fn rts_qp<'a>(pd: &'a ProtectionDomain<'a>, cq: &'a CompletionQueue<'a>) -> QueuePair<'a, Rts> {
    let qp = init_qp(pd, cq).into_rtr(&rtr(1)).unwrap();
    qp.into_rts(&ToRtsAttr::new(Psn::new(1).unwrap())).unwrap()
}

#[test]
fn a_rate_limit_is_unsupported_where_the_device_reports_no_packet_pacing() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(64);
    let qp = rts_qp(&pd, &cq);
    assert_eq!(f.ctx.packet_pacing_caps().unwrap(), None);
    f.mock.take_calls();
    assert_unsupported(&qp.set_rate_limit(10_000).unwrap_err(), "packet_pacing_caps");
    assert_eq!(modifies(f.mock.take_calls()), 0, "refused before ibv_modify_qp");

    // A device that paces only UD QPs: an RC QP is refused.
    let limits = DeviceLimits {
        qp_rate_limit_min: 1,
        qp_rate_limit_max: 1000,
        rate_limit_qp_types: 1 << sys::IBV_QPT_UD,
        ..DeviceLimits::default()
    };
    let ud_only =
        open(&f.mock, Optional::ALL, ContextConfig { limits, ..ContextConfig::default() });
    let pd = ud_only.alloc_pd().unwrap();
    let cq = ud_only.create_cq(64).unwrap();
    let qp = rts_qp(&pd, &cq);
    assert_unsupported(&qp.set_rate_limit(500).unwrap_err(), "for this QP type");
}

#[test]
fn a_rate_limit_is_held_to_the_devices_packet_pacing_range() {
    let f = fixture(DeviceLimits {
        qp_rate_limit_min: 1000,
        qp_rate_limit_max: 100_000,
        rate_limit_qp_types: 1 << sys::IBV_QPT_RC,
        ..DeviceLimits::default()
    });
    let (pd, cq) = f.pd_and_cq(64);
    let qp = rts_qp(&pd, &cq);
    let caps = f.ctx.packet_pacing_caps().unwrap().unwrap();
    assert_eq!((caps.qp_rate_limit_min, caps.qp_rate_limit_max), (1000, 100_000));
    assert!(caps.supports::<Rc>() && !caps.supports::<Ud>());
    f.mock.take_calls();
    for kbps in [999, 100_001] {
        assert_device_limit(
            &qp.set_rate_limit(kbps).unwrap_err(),
            &format!(
                "rate_limit {kbps} kbps is outside the device's packet pacing range \
                 1000..=100000 kbps (packet_pacing_caps, ibv_query_device_ex): ask for a rate \
                 within it, or 0 for no limit"
            ),
        );
    }
    assert_eq!(modifies(f.mock.take_calls()), 0, "refused before ibv_modify_qp");
    for kbps in [1000, 100_000, 0] {
        qp.set_rate_limit(kbps).unwrap();
        let calls = f.mock.take_calls_where(|c| matches!(c, Call::ModifyQp { .. }));
        let mask = sys::IBV_QP_RATE_LIMIT as i32;
        assert!(
            matches!(calls[..], [Call::ModifyQp { mask: m, attr: QpAttr { rate_limit, .. } }] if m == mask && rate_limit == kbps),
            "{calls:?}"
        );
    }
    // The provider's refusal of the attribute is Unsupported too.
    f.mock.fail(Verb::ModifyQp, libc::EOPNOTSUPP);
    assert_unsupported(&qp.set_rate_limit(5000).unwrap_err(), "ibv_modify_qp (rate_limit)");
    assert_eq!(qp.query_state().unwrap(), QueuePairState::RTS);
}
