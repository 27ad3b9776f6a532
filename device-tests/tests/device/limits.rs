//! Limits and failures a user meets, with the exact message asserted.

use std::process::Command;
use std::time::Duration;

use rdma_verbs::*;

use super::pair::Loopback;
use rdma_verbs_device_tests::{require_device, RXE};
use rdma_verbs_test_support::process::{assert_fails_saying, output_within, text};
use rdma_verbs_test_support::programs::example;

#[test]
fn registration_over_rlimit_memlock_names_the_limit_and_the_fix() {
    let Some(_) = require_device(RXE) else { return };
    // Root ignores RLIMIT_MEMLOCK: run as nobody with a 64 KiB limit, registering 1 MiB+.
    let mut cmd = Command::new("prlimit");
    cmd.args([
        "--memlock=65536:65536",
        "setpriv",
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
    ])
    .arg(example("rc_pingpong"))
    .args(["-d", RXE, "-s", "1048576", "-r", "1"]);
    let out = output_within(cmd, Duration::from_secs(60));
    let stderr = assert_fails_saying(&out, "rc_pingpong: ibv_reg_mr failed: ");
    assert!(
        stderr.contains("RLIMIT_MEMLOCK is 64 KiB; raise it (ulimit -l unlimited"),
        "{}",
        text(&out)
    );
}

#[test]
fn an_inline_size_the_provider_refuses_is_named() {
    let Some(ctx) = require_device(RXE) else { return };
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(32).unwrap();
    let cap = QpCapabilities { max_inline_data: 1 << 20, ..Default::default() };
    let err = pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) }).unwrap_err();
    let msg = err.to_string();
    // rxe has the extended QP, so the verb that refused is ibv_create_qp_ex.
    assert!(msg.starts_with("ibv_create_qp_ex failed: EINVAL; the provider refused"), "{msg}");
    assert!(
        msg.contains("max_inline_data 1048576") && msg.contains("device limits: max_qp_wr "),
        "{msg}"
    );
}

#[test]
fn a_pd_in_use_cannot_be_destroyed_and_says_so() {
    let Some(ctx) = require_device(RXE) else { return };
    let pd = ctx.alloc_pd().unwrap();
    let fns = &ctx.library().fns;
    // A registration the safe types do not know about keeps the PD busy.
    let mut bytes = vec![0u8; 4096];
    // SAFETY: `bytes` outlives the registration, which is removed below.
    let raw_mr = unsafe {
        rdma_verbs::sys::inline::ibv_reg_mr(
            fns,
            pd.as_raw(),
            bytes.as_mut_ptr().cast(),
            bytes.len(),
            1,
        )
    };
    assert!(!raw_mr.is_null());
    let err = pd.destroy().unwrap_err();
    assert_eq!(err.errno(), Some(libc::EBUSY), "{err}");
    assert!(err.to_string().starts_with("ibv_dealloc_pd failed: EBUSY"), "{err}");
    // SAFETY: the registration made above, removed once; the PD itself stays leaked.
    assert_eq!(unsafe { (fns.ibv_dereg_mr)(raw_mr) }, 0);
}

#[test]
fn queue_sizes_and_sges_beyond_the_devices_limits_are_refused_naming_them() {
    let Some(ctx) = require_device(RXE) else { return };
    let dev = ctx.query_device().unwrap();
    let (max_wr, max_sge) = (dev.max_qp_wr() as u32, dev.max_sge() as u32);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(32).unwrap();
    let base = QpCapabilities::default();
    let cases = [
        (QpCapabilities { max_send_wr: max_wr + 1, ..base }, "max_send_wr", "max_qp_wr", max_wr),
        (QpCapabilities { max_recv_sge: max_sge + 1, ..base }, "max_recv_sge", "max_sge", max_sge),
        (QpCapabilities { max_send_sge: max_sge + 1, ..base }, "max_send_sge", "max_sge", max_sge),
    ];
    for (cap, field, limit, max) in cases {
        let err = pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) }).unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::DeviceLimit), "{err:?}");
        assert_eq!(
            err.to_string(),
            format!(
                "{field} {} is above the device's {limit} {max} (ibv_query_device): ask for at \
                 most {max}",
                max + 1
            )
        );
    }
    // At the SGE limit rxe creates the QP: the refusal is the device's own bound.
    let cap = QpCapabilities { max_send_sge: max_sge, max_recv_sge: max_sge, ..base };
    drop(pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) }).unwrap());
}

#[test]
fn an_rdma_read_depth_beyond_the_devices_is_refused_before_rtr() {
    let Some(ctx) = require_device(RXE) else { return };
    let max = ctx.query_device().unwrap().max_qp_rd_atom();
    let Ok(depth) = u8::try_from(max + 1) else {
        eprintln!("rxe's max_qp_rd_atom {max} leaves no u8 above it: nothing to refuse");
        return;
    };
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(32).unwrap();
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    let qp = qp.into_init(&ToInitAttr::default()).unwrap();
    let gid = ctx.source_gid(1, None).unwrap().expect("rxe is RoCE: a routable GID");
    let me =
        Endpoint { lid: Lid::new(0), qpn: qp.qp_num(), psn: Psn::new(1).unwrap(), gid: gid.gid };
    let rtr = ToRtrAttr {
        max_dest_rd_atomic: depth,
        ..ToRtrAttr::to_endpoint(&me, 1, Some(gid.index), Mtu::MTU_1024)
    };
    let refused = qp.try_into_rtr(&rtr).unwrap_err();
    assert_eq!(
        refused.error.to_string(),
        format!(
            "max_dest_rd_atomic {depth} is above the device's max_qp_rd_atom {max} \
             (ibv_query_device): ask for at most {max}"
        )
    );
    // The QP is untouched: at the device's depth, rxe takes it.
    let rtr = ToRtrAttr { max_dest_rd_atomic: max as u8, ..rtr };
    drop(refused.qp.into_rtr(&rtr).unwrap());
}

#[test]
fn a_rate_limit_is_unsupported_where_the_device_reports_no_packet_pacing() {
    let Some(ctx) = require_device(RXE) else { return };
    // rxe reports no packet pacing (qp_rate_limit_max 0 in ibv_query_device_ex).
    assert_eq!(ctx.packet_pacing_caps().unwrap(), None);
    let lo = Loopback::new(&ctx, 16);
    let (a, _b) = lo.rc_pair(4, AccessFlags::empty());
    let err = a.set_rate_limit(10_000).unwrap_err();
    assert!(
        matches!(err, Error::Unsupported { what } if what.contains("packet_pacing_caps")),
        "{err:?}"
    );
    assert_eq!(a.query_state().unwrap(), QueuePairState::RTS, "refused before the verb");
}

#[test]
fn ece_is_unsupported_on_rxe() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let qp = lo.pd.create_rc_qp(&QpInitAttr::new(&lo.cq)).unwrap();
    // rxe has no ECE ops: libibverbs answers EOPNOTSUPP (or lacks the verbs, before v31).
    let unsupported = |err: Error, verb: &str| {
        assert!(matches!(err, Error::Unsupported { what } if what.starts_with(verb)), "{err:?}");
    };
    unsupported(qp.query_ece().unwrap_err(), "ibv_query_ece");
    let offer = Ece { vendor_id: 0x02c9, options: 1, comp_mask: 0 };
    unsupported(qp.set_ece(&offer).unwrap_err(), "ibv_set_ece");
}
