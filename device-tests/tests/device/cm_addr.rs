//! An IPv6 link-local address without a scope id (the interface it is on) is refused
//! before rdma_cm sees it, naming what is missing; the kernel would answer a bare `EINVAL`.

use std::net::{Ipv6Addr, SocketAddr, SocketAddrV6};
use std::time::Duration;

use rdma_verbs::cm::{CmId, EventChannel, PortSpace};
use rdma_verbs::InvalidInputKind;

use rdma_verbs_device_tests::rxe;

#[test]
fn a_link_local_address_without_a_scope_is_refused_naming_the_missing_interface() {
    let Some(_rxe) = rxe() else { return };
    let channel = EventChannel::new().unwrap();
    let id = CmId::new(&channel, PortSpace::TCP).unwrap();
    let bare =
        SocketAddr::V6(SocketAddrV6::new(Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1), 0, 0, 0));
    let errors = [
        ("rdma_resolve_addr", "destination", id.resolve_addr(None, bare, Duration::from_secs(1))),
        ("rdma_bind_addr", "address", id.bind_addr(bare)),
    ];
    for (verb, what, result) in errors {
        let err = result.unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Address), "{verb}: {err}");
        let start = format!("{verb}: the {what} fe80::1 is IPv6 link-local but names no interface");
        assert!(err.to_string().starts_with(&start), "{err}");
        assert!(err.to_string().contains("scope id"), "{err}");
    }
}
