//! The small examples, run on rxe0.

use std::process::Command;
use std::time::Duration;

use rdma_verbs_device_tests::{require_device, RXE};
use rdma_verbs_test_support::process::{output_within, text};
use rdma_verbs_test_support::programs::example;

fn run_example(name: &str, args: &[&str]) -> String {
    let mut cmd = Command::new(example(name));
    cmd.args(args);
    let out = output_within(cmd, Duration::from_secs(60));
    assert!(out.status.success(), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn loopback_sends_hello() {
    let Some(_) = require_device(RXE) else { return };
    assert_eq!(
        run_example("loopback", &[RXE]),
        "rxe0 wrote \"hello\" and received \"hello\" with immediate 7\n"
    );
}

#[test]
fn devinfo_shows_the_port_and_gids() {
    let Some(_) = require_device(RXE) else { return };
    let out = run_example("devinfo", &["-d", RXE]);
    for needle in [
        "hca_id: rxe0",
        "state:\t\tACTIVE",
        "link_layer:\tEthernet",
        ", RoCE v2",
        "routable GID:\tindex ",
    ] {
        assert!(out.contains(needle), "{needle:?} missing from:\n{out}");
    }
}
