//! write_bw / read_bw / send_bw on rxe0: runs, agreement, limits, a vanished peer.

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{
    assert_fails_saying, example, gid_index, output_within, require_device, spawn_server, text,
    wait_within, RXE,
};

const LIMIT: Duration = Duration::from_secs(240);

fn tool(name: &str, port: u16, args: &[&str]) -> Command {
    let mut cmd = Command::new(example(name));
    cmd.args(["-d", RXE, "-x", &gid_index(), "-p", &port.to_string()]).args(args);
    cmd
}

/// Server then client with the same `args`.
fn pair(name: &str, port: u16, server_args: &[&str], client_args: &[&str]) -> (Output, Output) {
    let server = spawn_server(tool(name, port, server_args), port);
    let mut client = tool(name, port, client_args);
    client.arg("127.0.0.1");
    let client = output_within(client, LIMIT);
    (wait_within(server, LIMIT), client)
}

/// The JSON objects a run printed, as (bytes, posted, completed, received) — enough to check
/// the sweep ran and nothing was lost.
fn json_rows(out: &Output) -> Vec<(u64, u64, u64, u64)> {
    let field = |line: &str, key: &str| -> u64 {
        let start =
            line.find(&format!("\"{key}\":")).unwrap_or_else(|| panic!("no {key} in {line}"))
                + key.len()
                + 3;
        line[start..].split([',', '}']).next().unwrap().parse().unwrap()
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| {
            (field(l, "bytes"), field(l, "posted"), field(l, "completed"), field(l, "received"))
        })
        .collect()
}

fn sweep(name: &str, port: u16, extra: &[&str]) {
    if require_device(RXE).is_none() {
        return;
    }
    for (i, qps) in ["1", "4"].into_iter().enumerate() {
        let mut args = vec!["-a", "--max-size", "65536", "-n", "200", "-q", qps, "--json"];
        args.extend_from_slice(extra);
        let (server, client) = pair(name, port + i as u16, &args, &args);
        assert!(
            server.status.success() && client.status.success(),
            "server:\n{}\nclient:\n{}",
            text(&server),
            text(&client)
        );
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
        if name == "send_bw" {
            let received: Vec<u64> = json_rows(&server).iter().map(|r| r.3).collect();
            assert_eq!(
                received,
                vec![per_size; 16],
                "the server received every SEND\n{}",
                text(&server)
            );
        }
    }
}

#[test]
fn write_bw_sweeps_sizes_with_1_and_4_qps() {
    sweep("write_bw", 18900, &[]);
}

#[test]
fn read_bw_sweeps_sizes_with_1_and_4_qps() {
    sweep("read_bw", 18902, &[]);
}

#[test]
fn send_bw_sweeps_sizes_with_1_and_4_qps() {
    sweep("send_bw", 18904, &[]);
}

#[test]
fn the_raw_tier_with_post_lists_and_both_directions() {
    sweep("write_bw", 18906, &["--raw", "-l", "4", "-b"]);
}

#[test]
fn different_sizes_are_refused_on_both_sides() {
    if require_device(RXE).is_none() {
        return;
    }
    let (server, client) =
        pair("write_bw", 18910, &["-s", "4096", "-q", "2"], &["-s", "65536", "-q", "2"]);
    for (out, here, peer) in [(&server, "4096", "65536"), (&client, "65536", "4096")] {
        let msg = format!("client and server disagree: size is {here} here but {peer} at the peer");
        assert_fails_saying(out, &msg);
    }
}

#[test]
fn sizes_and_depths_beyond_the_device_are_refused_before_any_resource() {
    if require_device(RXE).is_none() {
        return;
    }
    let out = output_within(tool("write_bw", 18911, &["-t", "2000000"]), LIMIT);
    assert_fails_saying(&out, "-t 2000000 exceeds rxe0's max_qp_wr 1048576");
}

#[test]
fn a_server_that_dies_mid_run_fails_the_client_in_bounded_time() {
    if require_device(RXE).is_none() {
        return;
    }
    let args = ["-s", "65536", "-D", "60"];
    let mut server = spawn_server(tool("write_bw", 18912, &args), 18912);
    let mut client = tool("write_bw", 18912, &args);
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
    assert!(
        stderr.contains("failed: transport retry counter exceeded")
            || stderr.contains("the peer is gone"),
        "{}",
        text(&out)
    );
}
