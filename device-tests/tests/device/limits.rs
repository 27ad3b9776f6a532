//! Limits and failures a user meets, with the exact message asserted.

use std::process::Command;
use std::time::Duration;

use rdma_verbs::*;

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
