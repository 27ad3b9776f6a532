//! rc_pingpong against the C ibv_rc_pingpong, and its answers to bad input.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Output};
use std::time::Duration;

use rdma_verbs_device_tests::{gid_index, require_device, RXE};
use rdma_verbs_test_support::process::{
    assert_fails_saying, output_within, spawn_server, text, wait_within,
};
use rdma_verbs_test_support::programs::example;

const LIMIT: Duration = Duration::from_secs(180);

pub(super) fn ours() -> Command {
    Command::new(example("rc_pingpong"))
}

pub(super) fn c_tool() -> Command {
    Command::new("ibv_rc_pingpong")
}

/// Runs `server` then `client` (to 127.0.0.1) with the same arguments, on TCP `port`.
pub(super) fn pair(
    mut server: Command,
    mut client: Command,
    port: u16,
    args: &[&str],
) -> (Output, Output) {
    let common = ["-d", RXE, "-g", &gid_index(), "-p", &port.to_string()].map(String::from);
    server.args(&common).args(args);
    client.args(&common).args(args).arg("127.0.0.1");
    let server = spawn_server(server, port);
    let client = output_within(client, LIMIT);
    (wait_within(server, LIMIT), client)
}

pub(super) fn assert_ran(out: &Output, iters: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", text(out));
    assert!(
        stdout.contains("  local address:  LID 0x") && stdout.contains("  remote address: LID 0x"),
        "{}",
        text(out)
    );
    assert!(
        stdout.contains(&format!("{iters} iters in ")) && stdout.contains(" usec/iter"),
        "{}",
        text(out)
    );
    assert!(stdout.contains(" bytes in ") && stdout.contains(" Mbit/sec"), "{}", text(out));
}

fn interop(port: u16, server: fn() -> Command, client: fn() -> Command) {
    let Some(_) = require_device(RXE) else { return };
    for (i, size) in ["1", "4096", "65536"].into_iter().enumerate() {
        let (srv, cli) = pair(server(), client(), port + i as u16, &["-s", size, "-n", "500"]);
        assert_ran(&srv, "500");
        assert_ran(&cli, "500");
    }
}

#[test]
fn our_server_with_the_c_client() {
    interop(18600, ours, c_tool);
}

#[test]
fn the_c_server_with_our_client() {
    interop(18610, c_tool, ours);
}

#[test]
fn ours_with_ours_picks_the_routable_gid_without_g() {
    let Some(_) = require_device(RXE) else { return };
    let port = "18620";
    let mut server = ours();
    server.args(["-d", RXE, "-p", port, "-n", "50"]);
    let server = spawn_server(server, 18620);
    let mut client = ours();
    client.args(["-d", RXE, "-p", port, "-n", "50", "127.0.0.1"]);
    let cli = output_within(client, LIMIT);
    let srv = wait_within(server, LIMIT);
    assert_ran(&srv, "50");
    assert_ran(&cli, "50");
    let note = format!("using GID index {} (RoCE v2 ::ffff:", gid_index());
    assert!(String::from_utf8_lossy(&cli.stderr).contains(&note), "{}", text(&cli));
}

/// Runs our rc_pingpong with `args` on rxe0 and expects exit 1 with `expected` on stderr.
fn refused(args: &[&str], expected: &str) {
    let Some(_) = require_device(RXE) else { return };
    let mut cmd = ours();
    cmd.args(args);
    let out = output_within(cmd, LIMIT);
    let stderr = assert_fails_saying(&out, expected);
    assert!(!stderr.contains("panicked"), "{}", text(&out));
}

#[test]
fn an_unknown_device_lists_those_present() {
    refused(&["-d", "nosuch"], "RDMA device \"nosuch\" not found; devices present: rxe0");
}

#[test]
fn a_missing_port_is_named() {
    refused(&["-d", RXE, "-i", "9"], "device rxe0 has no port 9: its ports are 1..=1");
}

#[test]
fn a_bad_gid_index_names_the_valid_ones() {
    refused(
        &["-d", RXE, "-g", "99"],
        "GID index 99 is not valid on rxe0 port 1; valid indexes: 0 (RoCE v2 fe80::",
    );
}

/// Our client against a fake server that answers `reply` (then closes).
fn client_against(port: u16, reply: &'static [u8], expected: &str) {
    let Some(_) = require_device(RXE) else { return };
    let listener = TcpListener::bind(("127.0.0.1", port)).unwrap();
    let fake = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut msg = [0u8; 52];
        s.read_exact(&mut msg).unwrap();
        s.write_all(reply).unwrap();
    });
    refused(&["-d", RXE, "-g", &gid_index(), "-p", &port.to_string(), "127.0.0.1"], expected);
    fake.join().unwrap();
}

#[test]
fn a_short_reply_is_an_error() {
    client_against(
        18630,
        b"0000:00001",
        "the peer closed the connection after 10 of the 52 bytes of its address message",
    );
}

#[test]
fn an_early_close_is_an_error() {
    client_against(
        18631,
        b"",
        "the peer closed the connection after 0 of the 52 bytes of its address message",
    );
}

#[test]
fn non_hex_text_is_an_error() {
    client_against(
        18632,
        b"zzzz:000011:3c8a4d:00000000000000000000ffffc0000201\0",
        "the lid field of the address message is not hexadecimal",
    );
}

#[test]
fn a_wrong_length_gid_is_an_error() {
    client_against(
        18633,
        b"0000:000011:3c8a4d:0000000000000000ffffc0000201\0\0\0\0\0",
        "bad address message from the peer: the address message is not",
    );
}

#[test]
fn our_server_refuses_a_short_message() {
    let Some(_) = require_device(RXE) else { return };
    let mut server = ours();
    server.args(["-d", RXE, "-g", &gid_index(), "-p", "18634"]);
    let server = spawn_server(server, 18634);
    let mut s = TcpStream::connect(("127.0.0.1", 18634)).unwrap();
    s.write_all(b"0000:00001").unwrap();
    drop(s);
    let out = wait_within(server, LIMIT);
    assert_fails_saying(&out, "closed the connection after 10 of the 52 bytes");
}
