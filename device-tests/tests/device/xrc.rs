//! XRC (eXtended Reliable Connected).
//!
//! On rxe0, which has no XRC (libibverbs' stub answers `open_xrcd` with `EOPNOTSUPP`, and
//! the device does not report `IBV_DEVICE_XRC`), the domain and the QPs are a clean
//! `Unsupported`.
//!
//! The `hardware` test needs a device with XRC (mlx5, hns) on a RoCE port and is `#[ignore]`d,
//! so it visibly does not run in CI. On a host with one:
//!
//! ```text
//! RDMA_VERBS_XRC_DEVICE=mlx5_0 cargo test -p rdma-verbs-device-tests --test device -- \
//!     --ignored --test-threads=1 device::xrc::hardware
//! ```

use rdma_verbs::*;

use super::pair::Loopback;
use rdma_verbs_device_tests::{require_device, RXE};

#[test]
fn xrc_is_unsupported_on_rxe() {
    let Some(ctx) = require_device(RXE) else { return };
    let err = ctx.open_xrcd().unwrap_err();
    assert!(matches!(err, Error::Unsupported { what: "ibv_open_xrcd" }), "{err:?}");
    let lo = Loopback::new(&ctx, 16);
    let err = lo.pd.create_xrc_send_qp(&QpInitAttr::new(&lo.cq)).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("IBV_DEVICE_XRC"), "{err}");
}

mod hardware {
    use std::time::{Duration, Instant};

    use rdma_verbs::*;

    use super::super::pair::{endpoint, sgid_index, Loopback, PORT};

    /// The device under test: `RDMA_VERBS_XRC_DEVICE`.
    fn device() -> String {
        std::env::var("RDMA_VERBS_XRC_DEVICE").expect("RDMA_VERBS_XRC_DEVICE=<device with XRC>")
    }

    /// An initiator connected to a target QP of the same port sends into the second of two
    /// XRC SRQs, named by number: its receive completes on the SRQ's CQ, with the target's QP
    /// number, holding the bytes sent; the first SRQ's receive stays posted.
    #[test]
    #[ignore = "needs a device with XRC (mlx5, hns): RDMA_VERBS_XRC_DEVICE=mlx5_0 cargo test -p rdma-verbs-device-tests --test device -- --ignored device::xrc::hardware"]
    fn an_xrc_send_lands_in_the_srq_it_names() {
        let ctx = Context::open(&device()).unwrap();
        let lo = Loopback::new(&ctx, 16);
        let recv_cq = ctx.create_cq(64).unwrap();
        let mut region = lo.region(3 * 64);
        region.as_mut_slice()[128..].copy_from_slice(&[0x5a; 64]);
        let xrcd = ctx.open_xrcd().unwrap();
        let first = xrcd.create_srq(&lo.pd, &recv_cq, 16, 1).unwrap();
        let second = xrcd.create_srq(&lo.pd, &recv_cq, 16, 1).unwrap();
        let slots = [[region.sge(0..64).unwrap()], [region.sge(64..128).unwrap()]];
        // SAFETY: the region is read only after the receive's completion, and outlives both
        // SRQs (declared before them).
        unsafe {
            first.post_recv_wr(&mut RecvWr::new(1, &slots[0])).unwrap();
            second.post_recv_wr(&mut RecvWr::new(2, &slots[1])).unwrap();
        }

        let psn = Psn::new(0).unwrap();
        let init = ToInitAttr { port: PORT, ..Default::default() };
        let send = lo.pd.create_xrc_send_qp(&QpInitAttr::new(&lo.cq)).unwrap();
        let recv = xrcd.create_recv_qp(&lo.pd).unwrap();
        let mtu = ctx.query_port(PORT).unwrap().active_mtu();
        let rtr = |peer: &Endpoint| ToRtrAttr::to_endpoint(peer, PORT, Some(sgid_index(&ctx)), mtu);
        let (to_send, to_recv) = (endpoint(&ctx, &send, psn), endpoint(&ctx, &recv, psn));
        let recv = recv.into_init(&init).unwrap().into_rtr(&rtr(&to_send)).unwrap();
        let send = send.into_init(&init).unwrap().into_rtr(&rtr(&to_recv)).unwrap();
        let send = send.into_rts(&ToRtsAttr::new(psn)).unwrap();

        let src = [region.sge(128..192).unwrap()];
        let mut wr = SendWr::send(3, &src).flags(SendFlags::SIGNALED).to_xrc_srq(second.srq_num());
        // SAFETY: the region is not written until the send's completion.
        unsafe { send.post_send_wr(&mut wr).unwrap() };

        let mut seen = Vec::new();
        let mut wcs: [WorkCompletion; 4] = Default::default();
        let start = Instant::now();
        while seen.len() < 2 && start.elapsed() < Duration::from_secs(10) {
            for cq in [&lo.cq, &recv_cq] {
                for wc in cq.poll(&mut wcs).unwrap().iter() {
                    assert!(wc.is_success(), "{wc:?}");
                    seen.push((wc.wr_id(), wc.opcode(), wc.qp_num()));
                }
            }
        }
        seen.sort_by_key(|s| s.0);
        let expected = [(2, WcOpcode::RECV, recv.qp_num()), (3, WcOpcode::SEND, send.qp_num())];
        assert_eq!(seen, expected);
        assert_eq!(region.as_slice()[64..128], [0x5a; 64], "the SEND's bytes, in the second SRQ's");
        assert_eq!(region.as_slice()[..64], [0; 64], "the first SRQ's receive untouched");
    }
}
