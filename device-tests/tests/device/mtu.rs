//! A path MTU above the port's active MTU. rxe accepts RTR with 4096 on a port whose
//! active MTU is 1024 and `ibv_query_qp` reports 4096 back; `into_rtr` lowers it to the
//! active MTU, as perftest does, and `query` shows the MTU in effect.

use rdma_verbs::*;

use super::pair::{endpoint, sgid_index, Loopback, PORT};
use rdma_verbs_device_tests::{require_device, RXE};

#[test]
fn a_path_mtu_above_the_ports_active_mtu_is_lowered_to_it_at_rtr() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let active = ctx.query_port(PORT).unwrap().active_mtu();
    assert_eq!(active, Mtu::MTU_1024, "rxe0 on a netdev of MTU 1500 (scripts/rdma-vm's default)");
    for (asked, in_effect) in [(Mtu::MTU_4096, active), (Mtu::MTU_512, Mtu::MTU_512)] {
        let (a, b) =
            (lo.rc_in_init(1, AccessFlags::empty()), lo.rc_in_init(1, AccessFlags::empty()));
        let eb = endpoint(&ctx, &b, Psn::random());
        let rtr = ToRtrAttr::to_endpoint(&eb, PORT, Some(sgid_index(&ctx)), asked);
        let a = a.into_rtr(&rtr).unwrap();
        assert_eq!(a.query().unwrap().path_mtu, in_effect, "{asked} asked");
    }
}
