//! examples/service: its server with three clients at once, on one thread and with
//! `--threads`; a client that never sends its address does not hold up the others; one that
//! hangs up mid-session is let go; one that fails ends alone.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use super::test_cases;
use rdma_verbs_device_tests::{gid_index, require_device, RXE};
use rdma_verbs_test_support::process::{
    assert_fails_saying, output_within, spawn_server, text, wait_within,
};
use rdma_verbs_test_support::programs::example;

const LIMIT: Duration = Duration::from_secs(180);

/// The service on rxe0 and TCP `port`, with `args`.
fn service(port: u16, args: &[&str]) -> Command {
    let mut cmd = Command::new(example("service"));
    cmd.args(["-d", RXE, "-g", &gid_index(), "-p", &port.to_string()]).args(args);
    cmd
}

/// The service's server on TCP `port` for `clients` clients, with `args`, once it listens;
/// `None` when there is no rxe0 (the test skips, or fails under `RDMA_VERBS_REQUIRE_DEVICE=1`).
fn server(port: u16, clients: u32, args: &[&str]) -> Option<Child> {
    drop(require_device(RXE)?);
    let clients = clients.to_string();
    Some(spawn_server(service(port, &[&["--clients", &clients], args].concat()), port))
}

/// Starts `n` clients of the server on `port` at once, each with `args`; their outputs.
fn clients(port: u16, n: usize, args: &[&str]) -> Vec<Output> {
    let children: Vec<_> = (0..n)
        .map(|_| {
            let mut client = service(port, args);
            client.arg("127.0.0.1").stdout(Stdio::piped()).stderr(Stdio::piped());
            client.spawn().expect("spawn a client")
        })
        .collect();
    children.into_iter().map(|child| wait_within(child, LIMIT)).collect()
}

/// Checks that every client succeeded with `requests` requests, and that the server's
/// stdout says it served each of them on `device` (same index, same byte count); returns
/// their indexes.
pub(super) fn check_served(
    clients: &[Output],
    server: &Output,
    requests: u32,
    device: &str,
) -> Vec<u32> {
    let served = String::from_utf8_lossy(&server.stdout);
    let mut indexes: Vec<u32> = clients
        .iter()
        .map(|out| {
            assert!(out.status.success(), "{}", text(out));
            // "client 1: 100 requests (204800 bytes) answered correctly"
            let stdout = String::from_utf8_lossy(&out.stdout);
            let (index, bytes) = stdout
                .strip_prefix("client ")
                .and_then(|s| s.strip_suffix(" bytes) answered correctly\n"))
                .and_then(|s| s.split_once(&format!(": {requests} requests (")))
                .unwrap_or_else(|| panic!("unexpected client output\n{}", text(out)));
            let line =
                format!("client {index}: served {requests} requests ({bytes} bytes) on {device}");
            assert!(served.contains(&line), "no {line:?} from the server\n{}", text(server));
            index.parse().unwrap()
        })
        .collect();
    indexes.sort();
    indexes
}

/// Checks that the server exited with status 1, its stdout saying how client 0 failed (one of
/// `failures`), its stderr that 1 of its `clients` clients failed.
pub(super) fn check_client_0_failed(server: &Output, clients: u32, failures: &[&str]) {
    assert_eq!(server.status.code(), Some(1), "{}", text(server));
    let stdout = String::from_utf8_lossy(&server.stdout);
    assert!(failures.iter().any(|line| stdout.contains(line)), "{failures:?}\n{}", text(server));
    let failed = format!("service: 1 of {clients} clients failed");
    assert!(String::from_utf8_lossy(&server.stderr).contains(&failed), "{}", text(server));
}

fn serves_three_clients_at_once(port: u16, mode: &[&str]) {
    let Some(server) = server(port, 3, mode) else { return };
    let clients = clients(port, 3, &["-n", "100"]);
    let server = wait_within(server, LIMIT);
    assert!(server.status.success(), "{}", text(&server));
    assert_eq!(check_served(&clients, &server, 100, RXE), [0, 1, 2], "{}", text(&server));
    assert!(String::from_utf8_lossy(&server.stdout).ends_with("served 3 clients\n"));
}

test_cases! { serves_three_clients_at_once:
    one_thread_serves_three_clients_at_once(18800, &[]);
    threads_serve_three_clients_at_once(18801, &["--threads"]);
}

/// A connection that sends nothing takes client index 0 while two real clients are served;
/// it closes only after they are done, so the server must not have waited for it.
fn a_silent_client_holds_up_no_other(port: u16, mode: &[&str]) {
    let Some(server) = server(port, 3, mode) else { return };
    let silent = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let clients = clients(port, 2, &["-n", "20"]);
    drop(silent);
    // Nothing is left to wait for: the server ends at once (well within the limit).
    let server = wait_within(server, Duration::from_secs(30));
    assert_eq!(check_served(&clients, &server, 20, RXE), [1, 2], "{}", text(&server));
    let failure = "client 0: failed: the peer closed the connection after 0 of the 52 bytes of \
                   its address message";
    check_client_0_failed(&server, 3, &[failure]);
}

test_cases! { a_silent_client_holds_up_no_other:
    one_thread_is_not_held_up_by_a_silent_client(18802, &[]);
    threads_are_not_held_up_by_a_silent_client(18803, &["--threads"]);
}

/// A peer that connects (its address names rxe0's IPv4 GID), gets the server's QP into
/// RTS with a receive posted, then hangs up without a request: the server moves that QP to
/// ERROR and lets it go once the receive has come back flushed, and goes on.
fn a_client_gone_mid_session_is_let_go(port: u16, mode: &[&str]) {
    let Some(server) = server(port, 2, mode) else { return };
    let mut gone = TcpStream::connect(("127.0.0.1", port)).unwrap();
    gone.write_all(b"0000:000099:000001:00000000000000000000ffffc0000201\0").unwrap();
    let mut reply = [0u8; 52];
    gone.read_exact(&mut reply).unwrap();
    drop(gone);
    let clients = clients(port, 1, &["-n", "20"]);
    let server = wait_within(server, Duration::from_secs(30));
    assert_eq!(check_served(&clients, &server, 20, RXE), [1], "{}", text(&server));
    check_client_0_failed(
        &server,
        2,
        &["client 0: failed after 0 requests: it closed its connection"],
    );
}

test_cases! { a_client_gone_mid_session_is_let_go:
    one_thread_lets_go_of_a_client_gone_mid_session(18805, &[]);
    threads_let_go_of_a_client_gone_mid_session(18806, &["--threads"]);
}

#[test]
fn a_client_whose_requests_do_not_fit_fails_alone() {
    let port = 18804;
    let Some(server) = server(port, 2, &["-s", "1024"]) else { return };
    // Its first request has 4096 bytes: the server's 1024-byte receive refuses it.
    let big = output_within(service(port, &["-s", "4096", "127.0.0.1"]), LIMIT);
    assert_fails_saying(&big, "service: request 0 failed: ");
    let fits = clients(port, 1, &["-s", "1024", "-n", "20"]);
    let server = wait_within(server, LIMIT);
    assert_eq!(check_served(&fits, &server, 20, RXE), [1], "{}", text(&server));
    check_client_0_failed(
        &server,
        2,
        &["client 0: failed after 0 requests: a work request failed: "],
    );
}
