//! The bandwidth tools on two devices at once (`-d rxe0,rxe1`; `scripts/rdma-vm --two-rxe`):
//! each device meets its namesake on the peer, and the table adds them up. Ports 18960–18961
//! and 18970–18971.

use std::process::Command;
use std::time::{Duration, Instant};

use rdma_verbs_device_tests::{require_device, sent_packets, RXE, RXE1};
use rdma_verbs_test_support::process::{
    assert_fails_saying, output_within, spawn_server, text, wait_within,
};
use rdma_verbs_test_support::programs::binary;

use super::bandwidth::{assert_ran, json_field, json_lines, LIMIT};

const PORT: u16 = 18960;

#[test]
fn write_bw_on_two_devices_moves_every_message_over_both() {
    if require_device(RXE).is_none() || require_device(RXE1).is_none() {
        return;
    }
    const ITERS: u64 = 3000;
    const SIZE: u64 = 65536;
    let side = |client: bool| {
        let mut cmd = Command::new(binary("write_bw"));
        let iters = ITERS.to_string();
        cmd.args(["-d", "rxe0,rxe1", "-p", &PORT.to_string(), "-n", &iters, "--json"]);
        if client {
            cmd.arg("127.0.0.1");
        }
        cmd
    };
    let before = [sent_packets(RXE), sent_packets(RXE1)];
    let server = spawn_server(side(false), PORT + 1);
    let client = output_within(side(true), LIMIT);
    let server = wait_within(server, LIMIT);
    assert_ran(&server, &client);
    let lines = json_lines(&client);
    assert_eq!(lines.len(), 1, "one line for both devices:\n{}", text(&client));
    let completed: u64 = json_field(&lines[0], "completed");
    assert_eq!(completed, 2 * ITERS, "each device's QP posted -n WRITEs:\n{}", lines[0]);
    // Each device carried its share: at least one packet per 4 KiB (the largest MTU) of it.
    for (device, before) in [RXE, RXE1].into_iter().zip(before) {
        let sent = sent_packets(device) - before;
        assert!(sent >= ITERS * SIZE / 4096, "{device} sent {sent} packets");
    }
}

#[test]
fn a_client_missing_one_of_its_devices_ends_both_sides() {
    if require_device(RXE).is_none() || require_device(RXE1).is_none() {
        return;
    }
    let side = |devices: &str, client: bool| {
        let mut cmd = Command::new(binary("write_bw"));
        cmd.args(["-d", devices, "-p", &(PORT + 10).to_string(), "-n", "100"]);
        if client {
            cmd.arg("127.0.0.1");
        }
        cmd
    };
    let started = Instant::now();
    let server = spawn_server(side("rxe0,rxe1", false), PORT + 11);
    let client = output_within(side("rxe0,rxe9", true), LIMIT);
    assert_fails_saying(&client, "rxe9: RDMA device \"rxe9\" not found");
    // The server's rxe1 waits for a channel the client never opens: not for long.
    let server = wait_within(server, LIMIT);
    assert_fails_saying(&server, "rxe1: the peer's rxe1 never connected within 10 s");
    assert!(started.elapsed() < Duration::from_secs(60), "{:?}", started.elapsed());
}
