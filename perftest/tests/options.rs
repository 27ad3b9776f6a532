//! The tools' option checks, on any host: a bad or refused option fails before any verb.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use rdma_verbs_test_support::process::{output_within, text};

/// The built tool `name` (cargo builds a package's binaries for its integration tests).
fn tool_path(name: &str) -> PathBuf {
    PathBuf::from(match name {
        "write_bw" => env!("CARGO_BIN_EXE_write_bw"),
        "read_bw" => env!("CARGO_BIN_EXE_read_bw"),
        "send_bw" => env!("CARGO_BIN_EXE_send_bw"),
        "write_lat" => env!("CARGO_BIN_EXE_write_lat"),
        "read_lat" => env!("CARGO_BIN_EXE_read_lat"),
        "send_lat" => env!("CARGO_BIN_EXE_send_lat"),
        other => panic!("no perftest tool {other}"),
    })
}

#[test]
fn perftest_options_are_checked_before_any_verb() {
    // (tool, arguments, exit status, stderr): 1 for a bad value, 2 for a refused option.
    for (tool, args, code, expected) in [
        ("write_bw", &["-s", "0"][..], 1, "write_bw: -s (size) must be at least 1"),
        ("write_bw", &["-q", "0"][..], 1, "write_bw: -q (QPs) must be at least 1"),
        ("write_bw", &["-t", "0"][..], 1, "write_bw: -t (tx depth) must be at least 1"),
        ("write_bw", &["-t", "8", "-Q", "16"][..], 1, "write_bw: -Q 16 must be 1..=8 (at most -t, the tx depth)"),
        ("write_bw", &["-t", "8", "-l", "16"][..], 1, "write_bw: -l 16 must not exceed -t 8 (the tx depth)"),
        (
            "write_bw",
            &["-H"][..],
            2,
            "write_bw: --report-histogram is for the latency tools only: a bandwidth run keeps no \
             per-WR samples",
        ),
        (
            "read_lat",
            &["-n", "4"][..],
            1,
            "read_lat: -n 4 must be at least 5: the report drops the two largest of the n - 1 samples",
        ),
        (
            "send_lat",
            &["-D", "2", "-U"][..],
            1,
            "send_lat: -H and -U list the samples of -n iterations: a -D run keeps none",
        ),
        (
            "write_lat",
            &["-d", "rxe0,rxe1"][..],
            1,
            "write_lat: -d lists several devices, but a latency test runs on one device",
        ),
        (
            "write_lat",
            &["-c", "DC"][..],
            1,
            "write_lat: -c DC is implemented for the bw tools only: use -c RC",
        ),
        (
            "send_lat",
            &["-q4"][..],
            2,
            "send_lat: --qp is for the bandwidth tools only: latency is measured on one QP, as \
             perftest's",
        ),
        ("write_lat", &["-b"][..], 2, "write_lat: --bidirectional is for the bandwidth tools only: a ping-pong runs both ways already"),
        (
            "read_lat",
            &["-C"][..],
            2,
            "read_lat: --report-cycles is not supported: times come from the monotonic clock, in \
             usec: there are no cycle counts to report",
        ),
    ] {
        let mut cmd = Command::new(tool_path(tool));
        cmd.args(args);
        let out = output_within(cmd, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(code), "{tool} {args:?}: {}", text(&out));
        assert_eq!(String::from_utf8_lossy(&out.stderr).trim_end(), expected, "{}", text(&out));
    }
}
