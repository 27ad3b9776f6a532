//! write_bw / read_bw / send_bw on rxe0: runs, the passive server's table, agreement, limits,
//! a vanished peer; and the helpers the latency tools' tests share. Ports 18900–18920.

use std::path::Path;
use std::process::{Command, Output};
use std::str::FromStr;
use std::time::{Duration, Instant};

use super::test_cases;
use rdma_verbs_device_tests::{gid_index, require_device, RXE};
use rdma_verbs_test_support::process::{
    assert_fails_saying, output_within, spawn_server, text, wait_within,
};
use rdma_verbs_test_support::programs::binary;

pub(super) const LIMIT: Duration = Duration::from_secs(240);

/// `program` (ours or perftest's) on rxe0, its GID and TCP `port`, with `args`.
pub(super) fn on_rxe(program: &Path, port: u16, args: &[&str]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(["-d", RXE, "-x", &gid_index(), "-p", &port.to_string()]).args(args);
    cmd
}

pub(super) fn tool(name: &str, port: u16, args: &[&str]) -> Command {
    on_rxe(&binary(name), port, args)
}

/// Server then client of `program` with their `args`.
pub(super) fn pair_of(
    program: &Path,
    port: u16,
    server_args: &[&str],
    client_args: &[&str],
) -> (Output, Output) {
    let server = spawn_server(on_rxe(program, port, server_args), port);
    let mut client = on_rxe(program, port, client_args);
    client.arg("127.0.0.1");
    let client = output_within(client, LIMIT);
    (wait_within(server, LIMIT), client)
}

/// Both sides of a pair exited with success; else their outputs.
pub(super) fn assert_ran(server: &Output, client: &Output) {
    assert!(
        server.status.success() && client.status.success(),
        "server:\n{}\nclient:\n{}",
        text(server),
        text(client)
    );
}

/// Server then client of our tool `name`.
pub(super) fn pair(
    name: &str,
    port: u16,
    server_args: &[&str],
    client_args: &[&str],
) -> (Output, Output) {
    pair_of(&binary(name), port, server_args, client_args)
}

/// The lines of the JSON objects a run printed.
pub(super) fn json_lines(out: &Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(str::to_owned)
        .collect()
}

/// The value of `key` in a JSON object line of ours (flat, numbers unquoted).
pub(super) fn json_field<T: FromStr>(line: &str, key: &str) -> T {
    let start = line.find(&format!("\"{key}\":")).unwrap_or_else(|| panic!("no {key} in {line}"))
        + key.len()
        + 3;
    let value = line[start..].split([',', '}']).next().unwrap();
    value.parse().unwrap_or_else(|_| panic!("{key}: {value:?} in {line}"))
}

/// The JSON objects a run printed, as (bytes, posted, completed, received) — enough to check
/// the sweep ran and nothing was lost.
fn json_rows(out: &Output) -> Vec<(u64, u64, u64, u64)> {
    json_lines(out)
        .iter()
        .map(|l| {
            let field = |key| json_field(l, key);
            (field("bytes"), field("posted"), field("completed"), field("received"))
        })
        .collect()
}

/// `name` with -a up to 64 KiB, 200 iterations, 1 and 4 QPs (ports `port` and `port + 1`) and
/// `extra`: every size reported, every WR completed once, every SEND received.
pub(super) fn sweep(name: &str, port: u16, extra: &[&str]) {
    let Some(_) = require_device(RXE) else { return };
    for (i, qps) in ["1", "4"].into_iter().enumerate() {
        let mut args = vec!["-a", "--max-size", "65536", "-n", "200", "-q", qps, "--json"];
        args.extend_from_slice(extra);
        let (server, client) = pair(name, port + i as u16, &args, &args);
        assert_ran(&server, &client);
        let rows = json_rows(&client);
        let sizes: Vec<u64> = rows.iter().map(|r| r.0).collect();
        assert_eq!(sizes, (1..=16).map(|p| 1u64 << p).collect::<Vec<_>>(), "{}", text(&client));
        let per_size = 200 * qps.parse::<u64>().unwrap();
        for (bytes, posted, completed, _) in &rows {
            assert_eq!(
                (posted, completed),
                (&per_size, &per_size),
                "size {bytes}: every posted WR completes once"
            );
        }
        if extra.contains(&"-b") {
            // Both directions, as perftest's duplex report: each side's WRs and the peer's.
            for out in [&server, &client] {
                let iterations: Vec<u64> =
                    json_lines(out).iter().map(|l| json_field(l, "iterations")).collect();
                assert_eq!(iterations, vec![2 * per_size; 16], "{}", text(out));
            }
        }
        if name == "send_bw" {
            let received: Vec<u64> = json_rows(&server).iter().map(|r| r.3).collect();
            assert_eq!(
                received,
                vec![per_size; 16],
                "the server received every SEND\n{}",
                text(&server)
            );
        } else if !extra.contains(&"-b") {
            assert_eq!(
                json_lines(&server),
                json_lines(&client),
                "the passive server prints the client's figures, as perftest's"
            );
        }
    }
}

test_cases! { sweep:
    write_bw_sweeps_sizes_with_1_and_4_qps("write_bw", 18900, &[]);
    read_bw_sweeps_sizes_with_1_and_4_qps("read_bw", 18902, &[]);
    send_bw_sweeps_sizes_with_1_and_4_qps("send_bw", 18904, &[]);
    the_raw_tier_with_post_lists_and_both_directions(
        "write_bw", 18906, &["--raw", "-l", "4", "-b"]
    );
}

#[test]
fn the_passive_server_prints_perftests_table_of_the_clients_figures() {
    let Some(_) = require_device(RXE) else { return };
    for (i, name) in ["write_bw", "read_bw"].into_iter().enumerate() {
        let args = ["-s", "4096", "-n", "300"];
        let (server, client) = pair(name, 18913 + i as u16, &args, &args);
        assert!(server.status.success() && client.status.success(), "{}", text(&server));
        let stdout = String::from_utf8_lossy(&server.stdout);
        let row = stdout.lines().skip_while(|l| !l.starts_with(" #bytes ")).nth(1);
        assert!(row.is_some_and(|r| r.starts_with(" 4096       300 ")), "{stdout}");
        assert_eq!(stdout, String::from_utf8_lossy(&client.stdout), "the same table");
    }
}

#[test]
fn read_bw_keeps_the_devices_outstanding_reads_or_the_smaller_o_of_the_two_sides() {
    let Some(_) = require_device(RXE) else { return };
    let reads = |out: &Output| {
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let line = stdout.lines().find_map(|l| l.strip_prefix(" Outstand reads  : "));
        line.and_then(|n| n.parse::<u32>().ok()).unwrap_or_else(|| panic!("{}", text(out)))
    };
    let args = ["-s", "64", "-n", "300"];
    // Above the device's limit: capped to it with perftest's note; the default is that limit.
    let (server, client) = pair("read_bw", 18916, &[&args[..], &["-o", "100000"]].concat(), &args);
    assert!(server.status.success() && client.status.success(), "{}", text(&server));
    let stderr = String::from_utf8_lossy(&server.stderr);
    let limit: u32 = stderr
        .split(" Number of outstanding reads is above max = ")
        .nth(1)
        .and_then(|rest| rest.lines().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no note of the cap: {}", text(&server)));
    assert!(limit > 1, "rxe takes more than one READ outstanding: {limit}");
    assert_eq!((reads(&server), reads(&client)), (limit, limit));
    // Fewer on one side: both QPs keep that many.
    let (server, client) = pair("read_bw", 18917, &args, &[&args[..], &["-o", "4"]].concat());
    assert!(server.status.success() && client.status.success(), "{}", text(&client));
    assert_eq!((reads(&server), reads(&client)), (4, 4));
}

/// The attributes they set are checked by the unit test `the_path_options_set_the_attributes_of
/// _a_qp_connected_by_hand` (perftest/src/args.rs); here, that rxe's QPs take them and run.
#[test]
fn perftests_path_options_are_taken_by_the_qps_connected_by_hand() {
    let Some(_) = require_device(RXE) else { return };
    let path = ["-S", "1", "--tclass", "0x60", "-u", "16", "--retry_count", "5"];
    let args = [&["-s", "64", "-n", "300"][..], &path].concat();
    let (server, client) = pair("write_bw", 18918, &args, &args);
    assert_ran(&server, &client);
}

#[test]
fn sides_of_different_mtus_use_the_smaller_as_perftest() {
    let Some(_) = require_device(RXE) else { return };
    // 4 KiB messages in packets of 512 B: a side that sent 1024 B packets to a QP whose path
    // MTU is 512 would be refused by its responder.
    let args = ["-s", "4096", "-n", "300"];
    let (server, client) = pair("write_bw", 18919, &[&args[..], &["-m", "512"]].concat(), &args);
    assert_ran(&server, &client);
}

#[test]
fn use_old_post_send_switches_the_sends_to_ibv_post_send_and_the_header_says_so() {
    let Some(_) = require_device(RXE) else { return };
    let args = ["-s", "64", "-n", "300"];
    let old = [&args[..], &["--use_old_post_send"]].concat();
    let (server, client) = pair("write_bw", 18920, &args, &old);
    assert!(server.status.success() && client.status.success(), "{}", text(&client));
    for (out, api) in [(&server, "ON"), (&client, "OFF")] {
        let line = format!(" ibv_wr* API     : {api}\n");
        assert!(String::from_utf8_lossy(&out.stdout).contains(&line), "{}", text(out));
    }
}

#[test]
fn different_sizes_are_refused_on_both_sides() {
    let Some(_) = require_device(RXE) else { return };
    let (server, client) =
        pair("write_bw", 18910, &["-s", "4096", "-q", "2"], &["-s", "65536", "-q", "2"]);
    for (out, here, peer) in [(&server, "4096", "65536"), (&client, "65536", "4096")] {
        let msg = format!("client and server disagree: size is {here} here but {peer} at the peer");
        assert_fails_saying(out, &msg);
    }
}

#[test]
fn sizes_and_depths_beyond_the_device_are_refused_before_any_resource() {
    let Some(_) = require_device(RXE) else { return };
    for (name, option) in [("write_bw", "-t"), ("send_bw", "-r")] {
        let out = output_within(tool(name, 18911, &[option, "2000000", "-n", "3000000"]), LIMIT);
        assert_fails_saying(&out, &format!("{option} 2000000 exceeds rxe0's max_qp_wr 1048576"));
    }
}

/// `name`'s server is killed 4 s into a 60 s run: the client must fail within 60 s with one
/// of the `expected` messages, which name the vanished peer.
pub(super) fn a_server_that_dies_mid_run(name: &str, port: u16, args: &[&str], expected: &[&str]) {
    let Some(_) = require_device(RXE) else { return };
    let mut server = spawn_server(tool(name, port, args), port);
    let mut client = tool(name, port, args);
    client.arg("127.0.0.1");
    let client = client
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(4));
    server.kill().unwrap();
    server.wait().unwrap();
    let killed = Instant::now();
    let out = wait_within(client, Duration::from_secs(90));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(killed.elapsed() < Duration::from_secs(60), "the client took {:?}", killed.elapsed());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(expected.iter().any(|e| stderr.contains(e)), "{expected:?}\n{}", text(&out));
}

/// How a client learns that its peer is gone: its WR's retries end, or the wait for the peer.
pub(super) const PEER_GONE: [&str; 2] =
    ["failed: transport retry counter exceeded", "the peer is gone"];

#[test]
fn a_server_that_dies_mid_run_fails_the_client_in_bounded_time() {
    a_server_that_dies_mid_run("write_bw", 18912, &["-s", "65536", "-D", "60"], &PEER_GONE);
}

#[test]
fn use_dm_on_a_device_without_device_memory_is_refused_before_any_resource() {
    let Some(_) = require_device(RXE) else { return };
    let out = output_within(tool("write_bw", 18929, &["--raw", "--use_dm"]), LIMIT);
    assert_fails_saying(&out, "--use_dm: rxe0 has no device memory (max_dm_size 0)");
}

#[test]
fn rate_limits_hold_in_software_set_a_static_rate_and_refuse_packet_pacing_rxe_lacks() {
    let Some(_) = require_device(RXE) else { return };
    // SW: 0.1 Gb/s of 64 KiB WRITEs in bursts of 4: at most 11.9 MiB/s, about 1.7 s for 320.
    let sw = ["-n", "320", "--rate_limit", "0.1", "--rate_limit_type", "SW", "--burst_size", "4"];
    let (server, client) = pair("write_bw", 18930, &sw, &[&sw[..], &["--json"]].concat());
    assert_ran(&server, &client);
    let [line] = &json_lines(&client)[..] else { panic!("one line: {}", text(&client)) };
    let average: f64 = json_field(line, "bw_average");
    let limit = 0.1e9 / 8.0 / f64::from(1 << 20);
    assert!(average > limit / 4.0 && average <= limit * 1.02, "{average} MB/s against {limit}");
    // HW: rxe takes the route's static rate (and does not pace by it).
    let hw = ["-n", "100", "--rate_limit", "25"];
    let (server, client) = pair("write_bw", 18931, &hw, &hw);
    assert_ran(&server, &client);
    // PP: refused before the peer is waited for.
    let pp = ["--rate_limit", "1", "--rate_limit_type", "PP"];
    let out = output_within(tool("write_bw", 18932, &pp), LIMIT);
    assert_fails_saying(
        &out,
        "--rate_limit_type=PP: rxe0 does not pace QPs (no packet_pacing_caps)",
    );
}

#[test]
fn use_hugepages_puts_the_buffers_on_the_guest_s_reserved_pages_and_says_when_too_few() {
    let Some(_) = require_device(RXE) else { return };
    // Two 2 MiB pages a side (the peer's memory and the pool) of the guest's eight.
    let fits = ["--use_hugepages", "-s", "4096", "-t", "16", "-n", "200"];
    let (server, client) = pair("write_bw", 18933, &fits, &fits);
    assert_ran(&server, &client);
    // The raw tier's 8 regions of 8 MiB, and the peer's: 36 pages, more than are reserved.
    let more = ["--use_hugepages", "--raw", "-s", "8388608", "-q", "4", "-n", "5"];
    let (server, _) = pair("write_bw", 18934, &more, &more);
    assert_fails_saying(&server, "free 2 MiB huge pages");
}
