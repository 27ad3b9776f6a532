//! Context-level verbs: `ibv_query_device`, `ibv_query_port`, `ibv_query_port_speed`,
//! `ibv_query_gid(_ex)`.

use std::mem::size_of;
use std::net::Ipv6Addr;

use rdma_verbs::{Error, Gid, GidType, Lid, LinkLayer, Mtu, PortState};
use rdma_verbs_mock::{self as mock, Call, ContextConfig, Optional, Verb};
use rdma_verbs_sys::{ibv_port_attr, verbs_context};

use super::{assert_unsupported, assert_verb_error, open, Fixture};

#[test]
fn query_device_decodes_what_the_provider_fills_in() {
    let f = Fixture::new();
    let attr = f.ctx.query_device().unwrap();
    let expected = mock::device_attr();
    assert_eq!(attr.fw_ver(), "0.1.0 (mock)");
    assert_eq!(attr.node_guid(), mock::NODE_GUID);
    assert_eq!(
        (attr.max_qp_wr(), attr.max_sge(), attr.max_cqe(), attr.phys_port_cnt()),
        (expected.max_qp_wr, expected.max_sge, expected.max_cqe, 1)
    );
    assert_eq!(f.mock.take_calls(), [Call::QueryDevice]);
}

#[test]
fn query_device_errors_name_the_verb_and_errno() {
    let f = Fixture::new();
    for errno in [libc::EINVAL, libc::ENOMEM, libc::EIO] {
        f.mock.fail(Verb::QueryDevice, errno);
        let err = f.ctx.query_device().unwrap_err();
        assert_verb_error(&err, "ibv_query_device", errno, &[]);
    }
    f.mock.fail(Verb::QueryDevice, libc::EOPNOTSUPP);
    assert_unsupported(&f.ctx.query_device().unwrap_err(), "ibv_query_device");
}

#[test]
fn query_port_uses_the_extended_op_and_falls_back_on_an_older_library() {
    let distance = size_of::<verbs_context>() - std::mem::offset_of!(verbs_context, query_port);
    let old = ContextConfig { sz: distance - 8, ..ContextConfig::default() };
    for (config, call) in [
        (
            ContextConfig::default(),
            Call::QueryPortOp { port: 1, attr_len: size_of::<ibv_port_attr>() },
        ),
        (old, Call::QueryPortCompat { port: 1 }),
    ] {
        let f = Fixture::with(Optional::ALL, config);
        let port = f.ctx.query_port(1).unwrap();
        assert_eq!(f.mock.take_calls(), [Call::QueryDevice, call.clone()]);
        assert_eq!(port.state(), PortState::ACTIVE);
        assert_eq!((port.active_mtu(), port.max_mtu()), (Mtu::MTU_1024, Mtu::MTU_4096));
        assert_eq!(port.link_layer(), LinkLayer::ETHERNET);
        assert_eq!(port.gid_tbl_len(), 6);
        // Past the 48-byte compat struct: filled by the op, zero through the compat symbol.
        let flags2 = if matches!(call, Call::QueryPortOp { .. }) {
            mock::port_attr().port_cap_flags2
        } else {
            0
        };
        assert_eq!(port.as_raw().port_cap_flags2, flags2, "{call:?}");
    }
}

#[test]
fn query_port_errors() {
    let f = Fixture::new();
    for port in [0, 2] {
        let err = f.ctx.query_port(port).unwrap_err();
        assert!(matches!(err, Error::PortNotFound { port: p, count: 1, .. } if p == port));
        assert_eq!(
            err.to_string(),
            format!("device mock0 has no port {port}: its ports are 1..=1")
        );
    }
    assert_eq!(f.mock.take_calls(), [Call::QueryDevice, Call::QueryDevice], "no port query");

    for errno in [libc::EINVAL, libc::ENOMEM] {
        f.mock.fail(Verb::QueryPortOp, errno);
        assert_verb_error(&f.ctx.query_port(1).unwrap_err(), "ibv_query_port", errno, &[]);
    }
    f.mock.fail(Verb::QueryDevice, libc::EIO);
    assert_verb_error(&f.ctx.query_port(1).unwrap_err(), "ibv_query_device", libc::EIO, &[]);

    let old = open(&f.mock, Optional::ALL, ContextConfig { extended: false, ..Default::default() });
    f.mock.fail(Verb::QueryPortCompat, libc::ENOMEM);
    assert_verb_error(&old.query_port(1).unwrap_err(), "ibv_query_port", libc::ENOMEM, &[]);
}

#[test]
fn query_port_speed_is_in_mb_per_s_and_unsupported_before_v62() {
    let f = Fixture::new();
    assert_eq!(f.ctx.query_port_speed(1).unwrap(), mock::PORT_SPEED * 100);
    assert_eq!(f.mock.take_calls(), [Call::QueryDevice, Call::QueryPortSpeed { port: 1 }]);
    let err = f.ctx.query_port_speed(2).unwrap_err();
    assert!(matches!(err, Error::PortNotFound { port: 2, count: 1, .. }), "{err:?}");
    // The verb returns its errno itself (not -1 with errno set).
    f.mock.fail(Verb::QueryPortSpeed, libc::EIO);
    assert_verb_error(
        &f.ctx.query_port_speed(1).unwrap_err(),
        "ibv_query_port_speed",
        libc::EIO,
        &[],
    );
    f.mock.fail(Verb::QueryPortSpeed, libc::EOPNOTSUPP);
    assert_unsupported(&f.ctx.query_port_speed(1).unwrap_err(), "ibv_query_port_speed");
    let old = open(
        &f.mock,
        Optional { query_port_speed: false, ..Optional::ALL },
        ContextConfig::default(),
    );
    let err = old.query_port_speed(1).unwrap_err();
    assert!(
        matches!(err, Error::Unsupported { what } if what.contains("rdma-core v62")),
        "{err:?}"
    );
}

fn gid(ip: &str) -> Gid {
    Gid::from(ip.parse::<Ipv6Addr>().unwrap())
}

#[test]
fn query_gid_reads_entries_through_query_gid_ex() {
    let f = Fixture::new();
    let entry = f.ctx.query_gid(1, 3).unwrap().expect("entry 3 is set");
    assert_eq!(
        (entry.gid, entry.index, entry.port, entry.gid_type, entry.ndev_ifindex),
        (gid("::ffff:192.0.2.1"), 3, 1, GidType::ROCE_V2, 2)
    );
    assert_eq!(f.ctx.query_gid(1, 4).unwrap(), None, "ENODATA: an empty entry");
    let entry_size = size_of::<rdma_verbs_sys::ibv_gid_entry>();
    let query = |index| Call::QueryGidEx { port: 1, index, flags: 0, entry_size };
    assert_eq!(f.mock.take_calls(), [query(3), query(4)]);

    let err = f.ctx.query_gid(1, 6).unwrap_err();
    assert_verb_error(&err, "ibv_query_gid_ex", libc::EINVAL, &[]);
    f.mock.fail(Verb::QueryGidEx, libc::ENOMEM);
    assert_verb_error(&f.ctx.query_gid(1, 3).unwrap_err(), "ibv_query_gid_ex", libc::ENOMEM, &[]);
}

#[test]
fn query_gid_falls_back_to_ibv_query_gid_without_query_gid_ex() {
    // A library without the symbol, and one whose `_ibv_query_gid_ex` says EOPNOTSUPP.
    let f = Fixture::with(Optional::NONE, ContextConfig::default());
    let entry = f.ctx.query_gid(1, 1).unwrap().expect("entry 1 is set");
    assert_eq!((entry.gid, entry.index, entry.ndev_ifindex), (gid("fe80::1"), 1, 0));
    assert_eq!(f.mock.take_calls(), [Call::QueryGid { port: 1, index: 1 }]);
    assert_eq!(f.ctx.query_gid(1, 5).unwrap(), None, "the zero GID: an empty entry");
    // ibv_query_gid returns -1 and sets errno (ibv_query_gid(3)).
    let err = f.ctx.query_gid(1, 6).unwrap_err();
    assert_verb_error(&err, "ibv_query_gid", libc::EINVAL, &[]);

    let current = open(&f.mock, Optional::ALL, ContextConfig::default());
    f.mock.take_calls();
    f.mock.fail(Verb::QueryGidEx, libc::EOPNOTSUPP);
    let entry = current.query_gid(1, 3).unwrap().expect("entry 3 is set");
    assert_eq!(entry.gid, gid("::ffff:192.0.2.1"));
    let calls = f.mock.take_calls();
    assert!(matches!(
        calls[..],
        [Call::QueryGidEx { .. }, Call::QueryGid { port: 1, index: 3 }, ..]
    ));
}

#[test]
fn the_gid_table_helpers_pick_and_name_entries() {
    let f = Fixture::new();
    assert_eq!(f.ctx.routable_gid(1).unwrap().index, 3, "RoCE v2 with an IPv4-mapped address");
    let err = f.ctx.gid(1, 4).unwrap_err();
    assert!(matches!(err, Error::GidIndexInvalid { index: 4, port: 1, .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "GID index 4 is not valid on mock0 port 1; valid indexes: 0 (RoCE v1 fe80::1), \
         1 (RoCE v2 fe80::1), 2 (RoCE v1 ::ffff:192.0.2.1), 3 (RoCE v2 ::ffff:192.0.2.1)"
    );
}

#[test]
fn the_source_lid_on_roce_is_0_and_a_missing_port_is_refused() {
    let f = Fixture::new();
    assert_eq!(f.ctx.source_lid(1).unwrap(), Lid::new(0));
    let err = f.ctx.source_lid(2).unwrap_err();
    assert!(matches!(err, Error::PortNotFound { port: 2, count: 1, .. }), "{err:?}");
}

#[test]
fn the_source_gid_is_the_entry_asked_for_else_on_roce_the_routable_one() {
    let f = Fixture::new();
    assert_eq!(f.ctx.source_gid(1, None).unwrap().map(|e| e.index), Some(3), "routable");
    assert_eq!(f.ctx.source_gid(1, Some(1)).unwrap().map(|e| e.index), Some(1), "as asked");
    let err = f.ctx.source_gid(1, Some(4)).unwrap_err();
    assert!(matches!(err, Error::GidIndexInvalid { index: 4, port: 1, .. }), "{err:?}");
}
