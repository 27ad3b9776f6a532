//! AWS EFA SRD (feature `efa`).
//!
//! On rxe0: the EFA gate, `EfaContext::open` (every SRD QP is made from an `EfaContext`),
//! refuses cleanly with `Unsupported` naming the reason (the provider is not libefa), and so
//! does libefa's own `efadv_query_device` (`EOPNOTSUPP`).
//!
//! The `hardware` test needs an EFA device (an AWS instance type with EFA, the efa kernel
//! driver and rdma-core's libefa) and is `#[ignore]`d, so it visibly does not run in CI. On
//! such an instance:
//!
//! ```text
//! RDMA_VERBS_EFA_DEVICE=rdmap0s6 cargo test -p rdma-verbs-device-tests --features efa \
//!     --test device -- --ignored --test-threads=1 device::srd::hardware
//! ```

use rdma_verbs::efa::{self, EfaContext};
use rdma_verbs::Error;

use rdma_verbs_device_tests::{require_device, RXE};

/// The one way to SRD QPs (they are made from an `EfaContext`) is closed on rxe0.
#[test]
fn the_efa_gate_to_srd_is_unsupported_on_rxe() {
    let Some(ctx) = require_device(RXE) else { return };
    let err = efa::query_device(&ctx).unwrap_err();
    let Error::Unsupported { what } = &err else { panic!("expected Unsupported, got {err:?}") };
    assert!(what.contains("not libefa"), "{err}");
    assert!(what.contains("Elastic Fabric Adapter"), "{err}");
    assert_eq!(EfaContext::open(&ctx).unwrap_err().to_string(), err.to_string());
}

#[test]
fn libefa_itself_says_rxe0_is_not_efa() {
    let Some(ctx) = require_device(RXE) else { return };
    let lib = rdma_verbs::sys::efa::libefa()
        .expect("libefa.so.1 did not load (is ibverbs-providers installed?)");
    // The real gate on the real library: its efadv_query_device answers EOPNOTSUPP for rxe0.
    // SAFETY: `lib` is rdma-core's libefa, loaded alongside the libibverbs that opened `ctx`.
    let err = unsafe { EfaContext::with_library(&ctx, lib) }.unwrap_err();
    let Error::Unsupported { what } = &err else { panic!("expected Unsupported, got {err:?}") };
    assert!(what.contains("efadv_query_device answered EOPNOTSUPP"), "{err}");
}

mod hardware {
    use std::time::{Duration, Instant};

    use rdma_verbs::efa::EfaContext;
    use rdma_verbs::{
        AccessFlags, AddressVector, BufferPool, Context, GlobalRoute, Psn, QpCapabilities,
        QpInitAttr, UdDestination, UdToInitAttr, WcOpcode, WorkCompletion,
    };

    fn device() -> String {
        std::env::var("RDMA_VERBS_EFA_DEVICE")
            .expect("set RDMA_VERBS_EFA_DEVICE to an EFA device (ibv_devices lists it)")
    }

    /// An SRD send/recv between two QPs of one EFA device: 32 numbered SENDs from `a` to `b`
    /// through the AH of the device's own GID, each arriving once and intact. SRD does not
    /// keep order, so the numbers are compared as a set.
    #[test]
    #[ignore = "needs an AWS EFA device: RDMA_VERBS_EFA_DEVICE=rdmap0s6 cargo test -p rdma-verbs-device-tests --features efa --test device -- --ignored device::srd::hardware"]
    fn srd_sends_between_two_qps_all_arrive() {
        const N: usize = 32;
        let ctx = Context::open(&device()).unwrap();
        let efa = EfaContext::open(&ctx).unwrap();
        eprintln!("{efa:?}");
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(4 * N as u32).unwrap();
        let pool = BufferPool::new(pd.register(2 * N * 64, AccessFlags::LOCAL_WRITE).unwrap(), 64)
            .unwrap();
        let gid = ctx.gid(1, 0).unwrap().gid;
        let lid = ctx.query_port(1).unwrap().lid();
        let ah =
            pd.create_ah(&AddressVector::new(1, lid).with_grh(GlobalRoute::new(gid, 0))).unwrap();
        let cap =
            QpCapabilities { max_send_wr: N as u32, max_recv_wr: N as u32, ..Default::default() };
        let attr = QpInitAttr { cap, ..QpInitAttr::new(&cq) };
        let init = UdToInitAttr::default();
        let up = || {
            efa.create_srd_qp(&pd, &attr)
                .unwrap()
                .into_init(&init)
                .unwrap()
                .into_rtr()
                .unwrap()
                .into_rts(Psn::new(0).unwrap())
                .unwrap()
        };
        let (a, b) = (up(), up());
        for _ in 0..N {
            b.post_recv_buffer(pool.take().unwrap()).unwrap();
        }
        let to_b = UdDestination { ah: &ah, qpn: b.qp_num(), qkey: init.qkey };
        for i in 0..N {
            let mut buf = pool.take().unwrap();
            buf.fill(&(i as u32).to_le_bytes()).unwrap();
            a.post_send_buffer_to(buf, &to_b, None).unwrap();
        }
        let (mut sent, mut received) = (0, Vec::new());
        let mut wcs: [WorkCompletion; 16] = Default::default();
        let start = Instant::now();
        while (sent < N || received.len() < N) && start.elapsed() < Duration::from_secs(10) {
            for wc in cq.poll(&mut wcs).unwrap().iter_mut() {
                assert!(wc.is_success(), "{wc:?}");
                let buf = pool.complete(wc).unwrap();
                match wc.opcode() {
                    WcOpcode::RECV => {
                        received.push(u32::from_le_bytes(buf.as_slice().try_into().unwrap()))
                    }
                    _ => sent += 1,
                }
            }
        }
        received.sort_unstable();
        assert_eq!(sent, N);
        assert_eq!(received, (0..N as u32).collect::<Vec<_>>(), "each SEND arrives once");
    }
}
