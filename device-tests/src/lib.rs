//! Helpers shared by the integration tests.
// Most serve the device tier, which is compiled only with the `device-tests` feature.
#![cfg_attr(not(feature = "device-tests"), allow(dead_code))]

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use rdma_verbs::{Context, Error};

/// The device tests' device: Soft-RoCE in the guest.
pub const RXE: &str = "rxe0";

/// The soft-iWARP device of `scripts/rdma-vm --siw`.
pub const SIW: &str = "siw0";

/// Whether a missing device must fail the test (set by `scripts/rdma-vm` in the guest).
pub fn device_required() -> bool {
    std::env::var("RDMA_VERBS_REQUIRE_DEVICE").is_ok_and(|v| v == "1")
}

/// Opens `name`, or — when there is no such device — fails under
/// `RDMA_VERBS_REQUIRE_DEVICE=1` and otherwise prints that the test skipped and returns `None`.
pub fn require_device(name: &str) -> Option<Context> {
    match Context::open(name) {
        Ok(ctx) => Some(ctx),
        Err(
            e @ (Error::NoKernelSupport
            | Error::NoDevices
            | Error::DeviceNotFound { .. }
            | Error::Load(_)),
        ) => {
            let guest = if name == SIW { "scripts/rdma-vm --siw" } else { "scripts/rdma-vm" };
            assert!(
                !device_required(),
                "RDMA_VERBS_REQUIRE_DEVICE=1 but device {name} is unusable: {e}; \
                 run it in a guest that has it: {guest}"
            );
            eprintln!("skipped: needs RDMA device {name} ({e}); run it in the guest: {guest}");
            None
        }
        Err(e) => panic!("opening {name}: {e}"),
    }
}

/// Whether this host's kernel has RDMA (`/sys/class/infiniband_verbs`), saying that the
/// calling test, which covers hosts without, skipped when it has: such a test returns then.
pub fn skipped_for_kernel_rdma() -> bool {
    let has = std::path::Path::new("/sys/class/infiniband_verbs").exists();
    if has {
        eprintln!("skipped: this host's kernel has RDMA (the test covers hosts without)");
    }
    has
}

/// Runs `body` in a child process of this test binary when `test` (the test's path, e.g.
/// `device::soundness::x`) runs in the parent: a crash inside a provider (a segfault) then
/// fails this one test, not the whole run. The parent asserts the child ran that one test and
/// passed; the child, started with `RDMA_VERBS_TEST_CHILD` naming the test, runs `body`.
pub fn crash_isolated(test: &str, body: impl FnOnce()) {
    crash_isolated_with(test, &[], body);
}

/// [`crash_isolated`], with the child's environment extended by `envs` (variables a library
/// reads when it loads).
pub fn crash_isolated_with(test: &str, envs: &[(&str, &str)], body: impl FnOnce()) {
    const CHILD: &str = "RDMA_VERBS_TEST_CHILD";
    if std::env::var(CHILD).as_deref() == Ok(test) {
        return body();
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args([test, "--exact", "--test-threads=1", "--nocapture"]).env(CHILD, test);
    cmd.envs(envs.iter().copied());
    let out = output_within(cmd, Duration::from_secs(120));
    let text = text(&out);
    assert!(out.status.success(), "the child process running {test} failed:\n{text}");
    assert!(text.contains("1 passed"), "the child process ran no test:\n{text}");
}

/// A device the tests reach by address (rdma_cm binds and resolves IPs, the doctor reports
/// them): its name, its netdev's IPv4 address, and whether it speaks iWARP (no immediate
/// data; it connects only through rdma_cm).
#[cfg(any(feature = "diag", feature = "rdmacm"))]
#[cfg_attr(
    not(feature = "rdmacm"),
    expect(
        dead_code,
        reason = "without rdma_cm only the doctor's tests take a Target, for its IP"
    )
)]
pub struct Target {
    pub device: &'static str,
    pub ip: std::net::IpAddr,
    pub iwarp: bool,
}

/// rxe0 at `$RDMA_VM_IPV4`, or `None` after failing (under `RDMA_VERBS_REQUIRE_DEVICE=1`) or
/// skipping, saying so.
#[cfg(any(feature = "diag", feature = "rdmacm"))]
pub fn rxe() -> Option<Target> {
    target(RXE, "RDMA_VM_IPV4")
}

/// siw0 at `$RDMA_VM_SIW_IPV4`, likewise: under `RDMA_VERBS_REQUIRE_DEVICE=1` a guest started
/// without `--siw` fails the test, so a run that means to skip the siw tests says so by name
/// (`--skip siw`, as scripts/test does before running them in a `--siw` guest).
#[cfg(any(feature = "diag", feature = "rdmacm"))]
pub fn siw() -> Option<Target> {
    target(SIW, "RDMA_VM_SIW_IPV4")
}

#[cfg(any(feature = "diag", feature = "rdmacm"))]
fn target(device: &'static str, var: &str) -> Option<Target> {
    drop(require_device(device)?);
    let list = rdma_verbs::DeviceList::new().expect("the device list that just opened the device");
    let iwarp = list.find(device).expect("the device just opened").transport()
        == rdma_verbs::TransportType::IWARP;
    match std::env::var(var).ok().and_then(|v| v.parse().ok()) {
        Some(ip) => Some(Target { device, ip, iwarp }),
        None => {
            assert!(!device_required(), "{device} is present but ${var} does not hold its address");
            eprintln!("skipped: ${var} (the address of {device}'s netdev) is not set");
            None
        }
    }
}

/// The RoCE v2 IPv4 GID index of rxe0 (the runner exports it), else 1.
pub fn gid_index() -> String {
    std::env::var("RDMA_VM_GID_INDEX").ok().filter(|v| !v.is_empty()).unwrap_or_else(|| "1".into())
}

/// The path of a built example (`cargo test` builds them next to the test binary's `deps/`).
pub fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    let path = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps")
        .join("examples")
        .join(name);
    assert!(
        path.is_file(),
        "{} is missing: build the examples first (cargo build --examples)",
        path.display()
    );
    path
}

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

/// Runs `body` on a thread of its own and fails, saying `suspect`, if it has not finished
/// within `limit`: what would block for good (a read on a blocking descriptor,
/// `ibv_destroy_cq` waiting for unacknowledged events) shows as a failure, not a hang. A panic
/// of `body` is passed on.
pub fn finishes_within(limit: Duration, suspect: &str, body: impl FnOnce() + Send + 'static) {
    let worker = std::thread::spawn(body);
    let start = Instant::now();
    while !worker.is_finished() {
        assert!(start.elapsed() < limit, "not finished after {limit:?}: {suspect}");
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Err(panic) = worker.join() {
        std::panic::resume_unwind(panic);
    }
}
