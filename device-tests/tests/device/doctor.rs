//! The doctor in the Soft-RoCE guest: rxe0, and siw0 (its test needs `scripts/rdma-vm
//! --siw`); then with the device nodes hidden, and as a user with 64 KiB of locked memory.

use std::process::{Command, Output};

use rdma_verbs_device_tests::{gid_index, require_device, rxe, siw, RXE};
use rdma_verbs_test_support::device_required;
use rdma_verbs_test_support::doctor::{assert_finding, doctor, doctor_output};
use rdma_verbs_test_support::process::text;
use rdma_verbs_test_support::programs::example;

/// `(uverbsN, "major:minor")` of `device`'s verbs interface, from sysfs.
fn uverbs_of(device: &str) -> (String, String) {
    let dir = std::path::Path::new("/sys/class/infiniband_verbs");
    let read =
        |p: std::path::PathBuf| std::fs::read_to_string(p).unwrap_or_default().trim().to_owned();
    std::fs::read_dir(dir)
        .expect("the guest has uverbs")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .find(|name| read(dir.join(name).join("ibdev")) == device)
        .map(|name| {
            let dev = read(dir.join(&name).join("dev"));
            (name, dev)
        })
        .unwrap_or_else(|| panic!("no uverbs interface belongs to {device}"))
}

/// The JSON of a doctor run behind a wrapper that needs root, or `None` (after failing under
/// `RDMA_VERBS_REQUIRE_DEVICE=1`, skipping otherwise) when the wrapper could not run it.
fn wrapped(out: &Output, what: &str) -> Option<String> {
    let json = String::from_utf8_lossy(&out.stdout).into_owned();
    if json.starts_with("{\"ok\":") {
        return Some(json);
    }
    assert!(!device_required(), "could not {what} (the guest runs tests as root): {}", text(out));
    eprintln!("skipped: {what} needs root: {}", text(out));
    None
}

/// The output of a doctor run with `args` that exits 0 (no check failed).
fn passing(args: &[&str]) -> String {
    let out = doctor(&[], args);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn in_the_guest_nothing_fails_and_the_smoke_test_passes_on_rxe() {
    let Some(t) = rxe() else { return };
    let json = passing(&["--json"]);
    assert!(json.starts_with("{\"ok\":true,") && !json.contains("\"status\":\"FAIL\""), "{json}");
    let (uverbs, _) = uverbs_of(RXE);
    assert_finding(&json, "kernel RDMA", "PASS", &["ib_uverbs ABI"]);
    assert_finding(
        &json,
        "device rxe0",
        "PASS",
        &["virtual device", &format!("verbs interface {uverbs}")],
    );
    assert_finding(&json, &format!("node {uverbs}"), "PASS", &["opens read-write"]);
    assert_finding(&json, "verbs rxe0", "PASS", &["listed and opened: transport InfiniBand"]);
    assert_finding(
        &json,
        "topology rxe0",
        "PASS",
        &["virtual device, no PCI place; netdev ", "; port 1: Ethernet, ", " RoCE v2"],
    );
    assert_finding(&json, "provider rxe", "PASS", &["loads: ", "librxe-rdmav"]);
    assert_finding(&json, "port rxe0/1", "PASS", &["ACTIVE, LinkUp, Ethernet", "active MTU"]);
    let index = format!("index {} (", gid_index());
    assert_finding(&json, "routable GID rxe0/1", "PASS", &[&index, "RoCE v2"]);
    assert_finding(&json, "IP rxe0/1", "PASS", &[&format!("{}/", t.ip)]);
    assert_finding(&json, "memlock", "PASS", &[]);
    assert_finding(
        &json,
        "smoke test rxe0",
        "PASS",
        &["1 MiB MR, CQ, two RC QPs to RTS on port 1", "one SEND received intact"],
    );
    // The guest has no GPU; rxe refuses dma-bufs and, moving data with the CPU, takes no
    // peer memory either: the provider's answer is probed, not assumed.
    assert_finding(&json, "GPU", "PASS", &["none: no NVIDIA or AMD function"]);
    assert_finding(
        &json,
        "gpu routes rxe0",
        "PASS",
        &[
            "no GPU on this host; dma-buf no: the provider or kernel driver refuses",
            "peer memory no: a software device",
        ],
    );

    let stdout = passing(&[]);
    assert!(stdout.contains("\nResources\n") && stdout.contains(" WARN, 0 FAIL, "), "{stdout}");
}

#[test]
fn siw_is_diagnosed_and_its_smoke_test_skips_for_want_of_rdma_cm() {
    let Some(t) = siw() else { return };
    let json = passing(&["--json"]);
    assert_finding(&json, "verbs siw0", "PASS", &["transport iWARP"]);
    assert_finding(&json, "topology siw0", "PASS", &["virtual device, no PCI place", "port 1: "]);
    assert_finding(&json, "provider siw", "PASS", &["loads: ", "libsiw-rdmav"]);
    assert_finding(&json, "gpu routes siw0", "PASS", &["dma-buf no: ", "a software device"]);
    assert_finding(&json, "port siw0/1", "PASS", &["ACTIVE, LinkUp, Ethernet"]);
    assert_finding(&json, "routable GID siw0/1", "SKIP", &["iWARP addresses peers by IP"]);
    assert_finding(&json, "IP siw0/1", "PASS", &[&format!("{}/", t.ip)]);
    assert_finding(
        &json,
        "smoke test siw0",
        "SKIP",
        &["connect only through rdma_cm, and the doctor's smoke test connects by hand"],
    );
}

#[test]
fn hidden_device_nodes_fail_naming_the_missing_nodes() {
    let Some(_) = require_device(RXE) else { return };
    // A container without device nodes: a mount namespace with an empty /dev/infiniband.
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "sh", "-c", "mount -t tmpfs tmpfs /dev/infiniband && exec \"$0\" --json"]);
    cmd.arg(example("doctor"));
    let out = doctor_output(cmd);
    let Some(json) = wrapped(&out, "hide /dev/infiniband in a mount namespace") else { return };
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let (uverbs, dev) = uverbs_of(RXE);
    let node = format!("/dev/infiniband/{uverbs}");
    assert_finding(
        &json,
        &format!("node {uverbs}"),
        "FAIL",
        &[&format!("{node} (char {dev}, for rxe0) is missing"), &format!("--device={node}")],
    );
    let needs = format!("needs {node}, which is missing (see Kernel: node {uverbs})");
    for check in ["verbs rxe0", "port rxe0", "GID table rxe0", "smoke test rxe0"] {
        assert_finding(&json, check, "SKIP", &[&needs]);
    }
    assert_finding(
        &json,
        "rdma_cm node",
        "WARN",
        &["/dev/infiniband/rdma_cm (char ", "is missing"],
    );
}

#[test]
fn a_user_with_64_kib_of_locked_memory_learns_why_the_smoke_test_fails() {
    let Some(_) = require_device(RXE) else { return };
    // softroce-vm.md's recipe: nobody, with RLIMIT_MEMLOCK 64 KiB (root would ignore it).
    let mut cmd = Command::new("prlimit");
    cmd.args(["--memlock=65536:65536", "setpriv", "--reuid=65534", "--regid=65534"]);
    cmd.arg("--clear-groups").arg(example("doctor")).arg("--json");
    let out = doctor_output(cmd);
    let Some(json) = wrapped(&out, "run the doctor as nobody with prlimit and setpriv") else {
        return;
    };
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert_finding(
        &json,
        "memlock",
        "FAIL",
        &[
            "RLIMIT_MEMLOCK is 64 KiB (hard limit 64 KiB), below even the smoke test's 1 MiB",
            "ulimit -l unlimited",
            "going past it needs root",
            "LimitMEMLOCK=infinity",
        ],
    );
    assert_finding(
        &json,
        "smoke test rxe0",
        "FAIL",
        &[
            "register the memory region: ibv_reg_mr",
            "RLIMIT_MEMLOCK is 64 KiB",
            "ulimit -l unlimited",
        ],
    );
}
