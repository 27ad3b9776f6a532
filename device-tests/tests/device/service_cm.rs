//! examples/service with `--rdma-cm` (feature `rdmacm`): its server serves three clients at
//! once on rxe0 and on siw0 (soft-iWARP, which connects only through rdma_cm); a client that
//! disconnects before its requests is let go while the others are served; a client of a port
//! nobody listens on fails at once, saying so. Ports 19000–19019.

use std::io::Read;
use std::net::SocketAddr;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rdma_verbs::cm::{ConnParam, EventChannel};
use rdma_verbs::QpInitAttr;

use super::cm::resolved;
use super::pair::Loopback;
use super::service::{check_client_0_failed, check_served};
use super::test_cases;
use rdma_verbs_device_tests::{rxe, siw, Target};
use rdma_verbs_test_support::process::{output_within, text, wait_within};
use rdma_verbs_test_support::programs::example;

const LIMIT: Duration = Duration::from_secs(180);

/// The service with `--rdma-cm` on `t`'s device and rdma_cm `port`, with `args`.
fn service(t: &Target, port: u16, args: &[&str]) -> Command {
    let mut cmd = Command::new(example("service"));
    cmd.args(["--rdma-cm", "-d", t.device, "-p", &port.to_string()]).args(args);
    cmd
}

/// Starts the server on `t`'s address and `port` for `clients` clients, and waits for its
/// "listening" line (an rdma_cm listener is not in /proc/net/tcp).
fn spawn_server(t: &Target, port: u16, clients: u32) -> Child {
    let ip = t.ip.to_string();
    let mut server = service(t, port, &["--bind", &ip, "--clients", &clients.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the server");
    let mut stdout = server.stdout.take().expect("piped stdout");
    let (done, line) = mpsc::channel();
    // Byte by byte, so that nothing after the line is read here; on a thread, so that a
    // server that never listens fails the test instead of holding it.
    std::thread::spawn(move || {
        let mut text = Vec::new();
        let mut byte = [0u8];
        while stdout.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
            text.push(byte[0]);
        }
        let _ = done.send((String::from_utf8_lossy(&text).into_owned(), stdout));
    });
    let Ok((line, stdout)) = line.recv_timeout(Duration::from_secs(60)) else {
        let _ = server.kill();
        panic!(
            "the server did not listen within 60 s: {}",
            text(&server.wait_with_output().unwrap())
        );
    };
    let expected = format!("listening on {} ({})", SocketAddr::new(t.ip, port), t.device);
    if line != expected {
        panic!("server: {line:?}, not {expected:?}: {}", text(&wait_within(server, LIMIT)));
    }
    server.stdout = Some(stdout);
    server
}

/// Starts `n` clients of the server at `t` at once, each with `args`; their outputs.
fn clients(t: &Target, port: u16, n: usize, args: &[&str]) -> Vec<Output> {
    let children: Vec<_> = (0..n)
        .map(|_| {
            let mut client = service(t, port, args);
            client.arg(t.ip.to_string()).stdout(Stdio::piped()).stderr(Stdio::piped());
            client.spawn().expect("spawn a client")
        })
        .collect();
    children.into_iter().map(|child| wait_within(child, LIMIT)).collect()
}

/// Three clients of 1000 requests each, started together on `target` (when it is there): all
/// served, every reply checked by its client, and the server had all three at once.
fn serves_three_clients_at_once(target: Option<Target>, port: u16) {
    let Some(t) = &target else { return };
    let server = spawn_server(t, port, 3);
    let clients = clients(t, port, 3, &["-n", "1000", "-s", "512"]);
    let server = wait_within(server, LIMIT);
    assert!(server.status.success(), "{}", text(&server));
    assert_eq!(check_served(&clients, &server, 1000, t.device), [0, 1, 2], "{}", text(&server));
    let stdout = String::from_utf8_lossy(&server.stdout);
    assert!(stdout.contains("at most 3 clients at once\n"), "{}", text(&server));
    assert!(stdout.ends_with("served 3 clients\n"), "{}", text(&server));
}

test_cases! { serves_three_clients_at_once:
    serves_three_clients_at_once_on_rxe(rxe(), 19000);
    siw_serves_three_clients_at_once(siw(), 19010);
}

/// A client (this test) connects, announcing 5 requests, then disconnects without sending
/// one: the server lets it go, serves two more and says it failed. (Over iWARP the CM may
/// flush the server's QP before the disconnect event is read: the reason says either.) On
/// `target`, when it is there.
fn a_client_disconnecting_early_is_let_go(target: Option<Target>, port: u16) {
    let Some(t) = &target else { return };
    let server = spawn_server(t, port, 3);
    {
        let channel = EventChannel::new().expect("event channel");
        let id = resolved(&channel, SocketAddr::new(t.ip, port));
        let lo = Loopback::new(id.context().expect("the id's context"), 64);
        let qp = lo.pd.create_rc_qp(&QpInitAttr::new(&lo.cq)).expect("qp");
        let announce = 5u32.to_le_bytes();
        let up = id
            .connect(qp, &ConnParam::with_private_data(&announce), Duration::from_secs(30))
            .unwrap_or_else(|e| panic!("connect: {e}"));
        assert_eq!(up.private_data.get(..4), Some(&0u32.to_le_bytes()[..]), "client index 0");
        id.disconnect().expect("disconnect");
    }
    let clients = clients(t, port, 2, &["-n", "20"]);
    let server = wait_within(server, LIMIT);
    assert_eq!(check_served(&clients, &server, 20, t.device), [1, 2], "{}", text(&server));
    let flushed = "client 0: failed after 0 requests: it disconnected or its connection broke \
                   (its QP was flushed)\n";
    check_client_0_failed(
        &server,
        3,
        &["client 0: failed after 0 requests: it disconnected\n", flushed],
    );
}

test_cases! { a_client_disconnecting_early_is_let_go:
    a_client_disconnecting_early_is_let_go_on_rxe(rxe(), 19001);
    siw_lets_go_of_a_client_disconnecting_early(siw(), 19011);
}

/// A client of a port nobody listens on: refused within seconds, saying so.
#[test]
fn a_client_of_a_port_nobody_listens_on_is_refused_on_rxe() {
    let Some(t) = rxe() else { return };
    let start = Instant::now();
    let mut cmd = service(&t, 19002, &["-n", "1"]);
    cmd.arg(t.ip.to_string());
    let out = output_within(cmd, Duration::from_secs(60));
    let took = start.elapsed();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let at = SocketAddr::new(t.ip, 19002);
    assert!(stderr.starts_with(&format!("service: couldn't connect to {at}: ")), "{}", text(&out));
    assert!(stderr.contains("ECONNREFUSED") && stderr.contains("rejected"), "{}", text(&out));
    assert!(took < Duration::from_secs(30), "refused after {took:?}");
}
