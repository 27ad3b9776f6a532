//! Running a program under test: its output within a time limit, a server once it listens,
//! and the assertions on how it ended.

use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A command's output, killing it after `limit`.
pub fn output_within(mut cmd: Command, limit: Duration) -> Output {
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn");
    wait_within(child, limit)
}

/// Waits for `child`, killing it after `limit` (then its output ends with a note).
pub fn wait_within(mut child: Child, limit: Duration) -> Output {
    let start = Instant::now();
    while child.try_wait().expect("try_wait").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let mut out = child.wait_with_output().expect("wait");
            out.stderr.extend_from_slice(format!("\n[killed after {limit:?}]").as_bytes());
            return out;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("wait")
}

/// Starts a server command and waits until something listens on TCP `port`.
pub fn spawn_server(mut cmd: Command, port: u16) -> Child {
    let mut child =
        cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("spawn server");
    let start = Instant::now();
    while !listening(port) {
        if let Some(status) = child.try_wait().expect("try_wait") {
            let out = child.wait_with_output().expect("wait");
            panic!("server exited ({status}) before listening: {}", text(&out));
        }
        assert!(start.elapsed() < Duration::from_secs(60), "server never listened on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
    child
}

/// Whether a socket listens on `port`, from /proc/net/tcp{,6} (state 0A is LISTEN); probing
/// by connecting would use up the server's single accept.
fn listening(port: u16) -> bool {
    let needle = format!(":{port:04X}");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f).unwrap_or_default().lines().skip(1).any(|l| {
            let cols: Vec<_> = l.split_whitespace().collect();
            cols.len() > 3 && cols[1].ends_with(&needle) && cols[3] == "0A"
        })
    })
}

/// Asserts that a command exited with status 1 saying `what` on stderr; its stderr, for more
/// checks.
pub fn assert_fails_saying(out: &Output, what: &str) -> String {
    assert_eq!(out.status.code(), Some(1), "{}", text(out));
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(stderr.contains(what), "expected {what:?} on stderr\n{}", text(out));
    stderr
}

/// Stdout and stderr, for assertion messages.
pub fn text(out: &Output) -> String {
    format!(
        "status {}\n--- stdout\n{}--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}
