//! rdma-verbs' device tier: the tests that need an RDMA device (tests/device/, one test
//! binary named `device`) and their helpers (this library). Not published.
//!
//! The tests run in the Soft-RoCE guest of `scripts/rdma-vm` (rxe0, and siw0 with `--siw`),
//! where `RDMA_VERBS_REQUIRE_DEVICE=1` makes a missing device a failure. On a host without
//! one they would only skip, so this crate is kept out of the host tier: the workspace's
//! `default-members` leave it out (a plain `cargo test` does not build it), and
//! `scripts/test` runs the host tier with `--exclude rdma-verbs-device-tests`, then builds the
//! programs these tests run (rdma-verbs' examples, the perftest tools, s3rdma; located by
//! `rdma_verbs_test_support::programs`) and runs this crate's test binary in the guest:
//!
//! ```text
//! cargo build --all-features -p rdma-verbs -p rdma-verbs-perftest -p rdma-verbs-s3rdma --examples --bins
//! cargo test -p rdma-verbs-device-tests --all-features --test device --no-run
//! scripts/rdma-vm target/debug/deps/device-<hash> --test-threads=1 device::bandwidth
//! ```
//!
//! The helpers that the host tier shares (running and locating programs, the doctor's
//! findings) are crate `rdma-verbs-test-support`.

use std::process::Command;
use std::time::Duration;

use rdma_verbs::{Context, Error};
use rdma_verbs_test_support::device_required;
use rdma_verbs_test_support::process::{output_within, text};

/// The device tests' device: Soft-RoCE in the guest.
pub const RXE: &str = "rxe0";

/// The soft-iWARP device of `scripts/rdma-vm --siw`.
pub const SIW: &str = "siw0";

/// The second Soft-RoCE device of `scripts/rdma-vm --two-rxe` (on netdev rdma1).
pub const RXE1: &str = "rxe1";

/// Opens `name`, or — when there is no such device — fails under
/// `RDMA_VERBS_REQUIRE_DEVICE=1` and otherwise prints that the test skipped and returns `None`.
pub fn require_device(name: &str) -> Option<Context> {
    match Context::open(name) {
        Ok(ctx) => Some(ctx),
        Err(
            e @ (Error::NoKernelSupport
            | Error::NoDevices
            | Error::DeviceNotFound { .. }
            | Error::Load(_)),
        ) => {
            let guest = match name {
                SIW => "scripts/rdma-vm --siw",
                RXE1 => "scripts/rdma-vm --two-rxe",
                _ => "scripts/rdma-vm",
            };
            assert!(
                !device_required(),
                "RDMA_VERBS_REQUIRE_DEVICE=1 but device {name} is unusable: {e}; \
                 run it in a guest that has it: {guest}"
            );
            eprintln!("skipped: needs RDMA device {name} ({e}); run it in the guest: {guest}");
            None
        }
        Err(e) => panic!("opening {name}: {e}"),
    }
}

/// Runs `body` in a child process of this test binary when `test` (the test's path, e.g.
/// `device::soundness::x`) runs in the parent: a crash inside a provider (a segfault) then
/// fails this one test, not the whole run. The parent asserts the child ran that one test and
/// passed; the child, started with `RDMA_VERBS_TEST_CHILD` naming the test, runs `body`.
pub fn crash_isolated(test: &str, body: impl FnOnce()) {
    crash_isolated_with(test, &[], body);
}

/// [`crash_isolated`], with the child's environment extended by `envs` (variables a library
/// reads when it loads).
pub fn crash_isolated_with(test: &str, envs: &[(&str, &str)], body: impl FnOnce()) {
    const CHILD: &str = "RDMA_VERBS_TEST_CHILD";
    if std::env::var(CHILD).as_deref() == Ok(test) {
        return body();
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args([test, "--exact", "--test-threads=1", "--nocapture"]).env(CHILD, test);
    cmd.envs(envs.iter().copied());
    let out = output_within(cmd, Duration::from_secs(120));
    let text = text(&out);
    assert!(out.status.success(), "the child process running {test} failed:\n{text}");
    assert!(text.contains("1 passed"), "the child process ran no test:\n{text}");
}

/// A device the tests reach by address (rdma_cm binds and resolves IPs, the doctor reports
/// them): its name, its netdev's IPv4 address, and whether it speaks iWARP (no immediate
/// data; it connects only through rdma_cm).
#[cfg(any(feature = "diag", feature = "rdmacm"))]
pub struct Target {
    /// The device's name (rxe0, siw0).
    pub device: &'static str,
    /// Its netdev's IPv4 address.
    pub ip: std::net::IpAddr,
    /// Whether it speaks iWARP.
    pub iwarp: bool,
}

/// rxe0 at `$RDMA_VM_IPV4`, or `None` after failing (under `RDMA_VERBS_REQUIRE_DEVICE=1`) or
/// skipping, saying so.
#[cfg(any(feature = "diag", feature = "rdmacm"))]
pub fn rxe() -> Option<Target> {
    target(RXE, "RDMA_VM_IPV4")
}

/// siw0 at `$RDMA_VM_SIW_IPV4`, likewise: under `RDMA_VERBS_REQUIRE_DEVICE=1` a guest started
/// without `--siw` fails the test, so a run that means to skip the siw tests says so by name
/// (`--skip siw`, as scripts/test does before running them in a `--siw` guest).
#[cfg(any(feature = "diag", feature = "rdmacm"))]
pub fn siw() -> Option<Target> {
    target(SIW, "RDMA_VM_SIW_IPV4")
}

#[cfg(any(feature = "diag", feature = "rdmacm"))]
fn target(device: &'static str, var: &str) -> Option<Target> {
    drop(require_device(device)?);
    let list = rdma_verbs::DeviceList::new().expect("the device list that just opened the device");
    let iwarp = list.find(device).expect("the device just opened").transport()
        == rdma_verbs::TransportType::IWARP;
    match std::env::var(var).ok().and_then(|v| v.parse().ok()) {
        Some(ip) => Some(Target { device, ip, iwarp }),
        None => {
            assert!(!device_required(), "{device} is present but ${var} does not hold its address");
            eprintln!("skipped: ${var} (the address of {device}'s netdev) is not set");
            None
        }
    }
}

/// The RoCE v2 IPv4 GID index of rxe0 (the runner exports it), else 1.
pub fn gid_index() -> String {
    std::env::var("RDMA_VM_GID_INDEX").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| "1".into())
}

/// The packets `device`'s port 1 has sent (rxe's `hw_counters/sent_pkts`).
pub fn sent_packets(device: &str) -> u64 {
    let path = format!("/sys/class/infiniband/{device}/ports/1/hw_counters/sent_pkts");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")).trim().parse().unwrap()
}
