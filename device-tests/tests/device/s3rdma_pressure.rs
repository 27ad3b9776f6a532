//! s3rdma on rxe0 under pressure: clients moving objects over RDMA at once, a client killed in
//! the middle of its transfer, request lengths that are huge or not numbers, a stalled upload,
//! and sessions flooded — each answered with a clear error while the server goes on serving
//! the others. Ports 19230–19239.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Output;
use std::time::{Duration, Instant};

use rdma_verbs_test_support::process::text;

use super::s3rdma::{cancel, data, prepare, prepare_put, succeeded, Server, BUCKET};

/// A file of `len` bytes under the server's directory, and its bytes.
fn input(server: &Server, name: &str, len: usize, seed: u32) -> (String, Vec<u8>) {
    let path = server.dir.join(name);
    let bytes = data(len, seed);
    std::fs::write(&path, &bytes).unwrap();
    (path.to_str().unwrap().to_owned(), bytes)
}

/// A 1 MiB object PUT and brought back over RDMA by key 1, byte for byte: the server still
/// serves.
fn still_serves(server: &Server, name: &str) {
    let (file, bytes) = input(server, name, 1 << 20, 99);
    let object = format!("{BUCKET}/{name}");
    succeeded(&server.cli(&["put", "--rdma", &file, &object]), "over RDMA");
    let out = format!("{file}.out");
    succeeded(&server.cli(&["get", "--rdma", &object, &out]), "over RDMA");
    assert!(std::fs::read(&out).unwrap() == bytes, "{object}: the copy differs");
}

#[test]
fn clients_at_once_each_move_their_own_bytes() {
    let Some(server) = Server::on_rxe(19230, &[]) else { return };
    let files: Vec<_> = (0..4)
        .map(|n| input(&server, &format!("in-{n}"), (1 << 20) + n * 4096, n as u32))
        .collect();
    let run_all = |op: &str| -> Vec<Output> {
        let children: Vec<_> = files
            .iter()
            .enumerate()
            .map(|(n, (file, _))| {
                let object = format!("{BUCKET}/at-once/{n}");
                let out = format!("{file}.out");
                let args = match op {
                    "put" => ["put", "--rdma", file.as_str(), &object],
                    _ => ["get", "--rdma", &object, &out],
                };
                server.cli_command(&args).stdout(std::process::Stdio::piped()).spawn().unwrap()
            })
            .collect();
        children.into_iter().map(|c| c.wait_with_output().unwrap()).collect()
    };
    for out in run_all("put") {
        succeeded(&out, "over RDMA");
    }
    for out in run_all("get") {
        succeeded(&out, "over RDMA");
    }
    for (file, bytes) in &files {
        assert!(
            std::fs::read(format!("{file}.out")).unwrap() == *bytes,
            "{file}: the copy differs"
        );
    }
}

/// A client killed while its 64 MiB transfer runs leaves no session behind: with one session
/// per key, the same key's next transfer goes through once the dead one's deadline passed,
/// and the killed PUT stored the whole object or nothing.
#[test]
fn a_client_killed_mid_transfer_leaves_no_session_behind() {
    let limits = [
        "--rdma-max-sessions-per-key",
        "1",
        "--rdma-prepare-timeout-ms",
        "3000",
        "--rdma-exec-timeout-ms",
        "3000",
    ];
    let Some(server) = Server::on_rxe(19231, &limits) else { return };
    let (file, bytes) = input(&server, "big", 64 << 20, 5);
    let object = format!("{BUCKET}/big");
    succeeded(&server.cli(&["put", &file, &format!("{object}-plain")]), "put");
    let out = format!("{file}.out");
    for args in [
        ["put", "--rdma", file.as_str(), object.as_str()],
        ["get", "--rdma", &format!("{object}-plain"), &out],
    ] {
        let mut child = server.cli_command(&args).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(300));
        child.kill().unwrap();
        child.wait().unwrap();
        // The key's one session is taken until the dead client's deadlines pass.
        let start = Instant::now();
        loop {
            let (small, _) = input(&server, "small", 4096, 1);
            let put = server.cli(&["put", "--rdma", &small, &format!("{BUCKET}/small")]);
            if put.status.success() {
                break;
            }
            assert!(text(&put).contains("429"), "{}", text(&put));
            assert!(
                start.elapsed() < Duration::from_secs(15),
                "the session stayed: {}",
                text(&put)
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
    let stored = server.dir.join("root").join(&object);
    if stored.exists() {
        assert!(std::fs::read(&stored).unwrap() == bytes, "the killed PUT stored a part");
    }
    still_serves(&server, "after-kill");
}

/// Sends `request` on a fresh connection and returns what the server answered (until it
/// closed the connection or 10 s passed).
fn raw_exchange(port: u16, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

#[test]
fn huge_and_unparsable_lengths_are_refused_on_every_route() {
    let Some(server) = Server::on_rxe(19232, &[]) else { return };
    for path in ["/.hipobj-rc/prepare", "/.hipobj-rc/ready", &format!("/{BUCKET}/k")] {
        let method = if path.starts_with("/.") { "POST" } else { "PUT" };
        for length in ["70368744177664", "18446744073709551615", "12abc", "-1"] {
            let request = format!(
                "{method} {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\nsome bytes"
            );
            let answer = raw_exchange(server.port(), request.as_bytes());
            // A client error, each from where it is found: hyper's parser (400; 431 for
            // u64::MAX, which it cannot take as a length), the body limit (413), the
            // signature check (403).
            assert!(
                answer.starts_with("HTTP/1.1 4"),
                "{method} {path} with Content-Length {length}: {answer}"
            );
        }
    }
    assert!(!server.dir.join("root").join(BUCKET).join("k").exists(), "nothing is stored");
    still_serves(&server, "after-lengths");
}

#[test]
fn a_stalled_upload_times_out_while_rdma_transfers_go_on() {
    let Some(server) = Server::on_rxe(19233, &["--body-timeout", "3"]) else { return };
    let mut stalled = TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    let head =
        format!("PUT /{BUCKET}/stalled HTTP/1.1\r\nHost: x\r\nContent-Length: 1048576\r\n\r\n");
    stalled.write_all(head.as_bytes()).unwrap();
    stalled.write_all(&[0; 100]).unwrap();
    let start = Instant::now();
    still_serves(&server, "beside-stalled");
    stalled.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut answer = Vec::new();
    let _ = stalled.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(start.elapsed() < Duration::from_secs(20), "the stalled upload was never ended");
    // Ended by the server: an S3 error (RequestTimeout, or 403 for an unsigned request
    // whose body finished), or the connection closed without an answer.
    assert!(
        answer.is_empty() || answer.contains("RequestTimeout") || answer.starts_with("HTTP/1.1 4"),
        "{answer}"
    );
    assert!(!server.dir.join("root").join(BUCKET).join("stalled").exists(), "nothing is stored");
}

#[test]
fn flooded_sessions_are_refused_with_429_while_others_are_served() {
    let limits = ["--rdma-max-sessions", "4", "--rdma-max-staged-bytes", "8388608"];
    let Some(server) = Server::on_rxe(19234, &limits) else { return };
    let (one, two) = (server.client(1), server.client(2));
    // More bytes than the server stages at once, in one session.
    let refused = prepare_put(&one, "00000010", 16 << 20);
    assert_eq!(refused.status, 429, "{}", refused.body);
    assert!(refused.body.contains("8388608"), "the limit is named: {}", refused.body);
    // Sessions: four at once in all, whoever holds them.
    let held: Vec<String> = (1..=4).map(|n| prepare(&one, &format!("0000002{n}"))).collect();
    for client in [&one, &two] {
        let refused = prepare_put(client, "00000030", 4096);
        assert_eq!(refused.status, 429, "{}", refused.body);
        assert!(refused.body.contains("sessions are open"), "{}", refused.body);
    }
    // Plain S3 is not held up by the flood.
    let (file, _) = input(&server, "plain", 4096, 3);
    succeeded(&server.cli(&["put", &file, &format!("{BUCKET}/plain")]), "put 4096 bytes");
    // A freed slot is taken again.
    assert_eq!(cancel(&one, &held[0]), 204);
    prepare(&two, "00000040");
}
