//! Host-tier tests: no RDMA device needed.

use std::process::Command;
use std::time::Duration;

use rdma_verbs::{DeviceList, Error};

use rdma_verbs_test_support::process::{output_within, text};
use rdma_verbs_test_support::programs::example;
use rdma_verbs_test_support::{device_required, skipped_for_kernel_rdma};

/// Runs the example `cmd`, asserting that it failed with exit status 1: its stderr, and all
/// it printed (for the messages of the caller's assertions).
#[track_caller]
fn failure(cmd: Command) -> (String, String) {
    let out = output_within(cmd, Duration::from_secs(30));
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    (String::from_utf8_lossy(&out.stderr).into_owned(), all)
}

#[test]
fn without_kernel_rdma_the_device_list_says_why() {
    if skipped_for_kernel_rdma() {
        return;
    }
    let err = DeviceList::new().expect_err("no uverbs, no device list");
    assert!(matches!(err, Error::NoKernelSupport), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with("no RDMA devices: the kernel exposes no uverbs"), "{msg}");
    assert!(
        msg.contains("/sys/class/infiniband_verbs") && msg.contains("scripts/rdma-vm"),
        "{msg}"
    );
}

#[test]
fn rc_pingpong_without_kernel_rdma_names_the_cause() {
    if skipped_for_kernel_rdma() {
        return;
    }
    let (stderr, all) = failure(Command::new(example("rc_pingpong")));
    assert!(
        stderr.starts_with("rc_pingpong: no RDMA devices: the kernel exposes no uverbs"),
        "{all}"
    );
    assert!(stderr.contains("modprobe rdma_rxe"), "{all}");
    assert!(!stderr.contains("panicked"), "{all}");
}

#[test]
fn a_missing_library_is_named_with_the_package() {
    // (The variable naming the library, rc_pingpong's options that load it, its name, the
    // packages named.)
    let mut cases = vec![(
        "RDMA_VERBS_LIBIBVERBS",
        &[][..],
        "libibverbs",
        ["apt-get install libibverbs1", "dnf install libibverbs"],
    )];
    // librdmacm loads after libibverbs, which must then be here.
    if cfg!(feature = "rdmacm") && rdma_verbs::sys::ibverbs().is_ok() {
        let packages = ["apt-get install librdmacm1", "dnf install librdmacm"];
        cases.push(("RDMA_VERBS_LIBRDMACM", &["--rdma-cm"][..], "librdmacm", packages));
    }
    for (variable, args, library, packages) in cases {
        let mut cmd = Command::new(example("rc_pingpong"));
        cmd.args(args).env(variable, "/nonexistent");
        let (stderr, all) = failure(cmd);
        let expected = format!("rc_pingpong: cannot load {library} from /nonexistent: ");
        assert!(stderr.starts_with(&expected), "{all}");
        assert!(packages.iter().all(|p| stderr.contains(p)), "{all}");
    }
}

#[test]
fn the_loader_reports_path_and_version() {
    let lib = match rdma_verbs::sys::ibverbs() {
        Ok(lib) => lib,
        Err(e) if !device_required() => {
            eprintln!("skipped: libibverbs is not installed here ({e})");
            return;
        }
        Err(e) => panic!("{e}"),
    };
    let name = lib.path().file_name().unwrap().to_str().unwrap().to_owned();
    assert!(name.starts_with("libibverbs.so.1"), "{}", lib.path().display());
    // Distribution and MOFED builds name the file libibverbs.so.1.<abi>.<rdma-core version>.
    if name.len() > "libibverbs.so.1".len() {
        assert!(lib.rdma_core_version().is_some() && lib.abi_minor().is_some(), "{name}");
    }
}

#[test]
fn rc_pingpong_reads_numbers_as_ibv_rc_pingpong_and_checks_them_before_any_device() {
    // Decimal, hex or octal, as strtol with base 0.
    for mtu in ["1500", "0x5dc", "02734"] {
        let mut cmd = Command::new(example("rc_pingpong"));
        cmd.args(["-m", mtu]);
        let (stderr, all) = failure(cmd);
        assert!(stderr.contains("invalid MTU 1500"), "{all}");
    }
}

/// The README's example is `examples/loopback.rs`, which the device tier runs, and the README
/// block is compiled as a doctest: both stay the same program.
#[test]
fn the_readme_example_is_examples_loopback_verbatim() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let example = std::fs::read_to_string(root.join("examples/loopback.rs")).expect("loopback.rs");
    assert!(
        readme.contains(&format!("```rust,no_run\n{example}```")),
        "README.md must show examples/loopback.rs verbatim"
    );
}

#[test]
fn service_rdma_cm_options_are_checked_before_any_verb() {
    let service = |args: &[&str]| {
        let mut cmd = Command::new(example("service"));
        cmd.args(args);
        cmd
    };
    let (stderr, all) = failure(service(&["--rdma-cm"]));
    let expected = if cfg!(feature = "rdmacm") {
        "service: the --rdma-cm server needs --bind ADDR: an IP address of the RDMA device's \
         netdev, by which rdma_cm picks the device"
    } else {
        "service: --rdma-cm needs rdma_cm: build with --features rdmacm"
    };
    assert_eq!(stderr.trim_end(), expected, "{all}");
    // Options that mean nothing together are refused by the parser (exit status 2).
    for args in [&["--bind", "192.0.2.1"][..], &["--rdma-cm", "--threads"][..]] {
        let out = output_within(service(args), Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
    }
}
