//! The doctor (`rdma_verbs::diag`, `examples/doctor`) on any host: no RDMA device needed.

use rdma_verbs::diag::{self, Layer, ProviderProbe, Status};
use rdma_verbs_test_support::doctor::{assert_finding, doctor};
use rdma_verbs_test_support::process::text;
use rdma_verbs_test_support::skipped_for_kernel_rdma;

#[test]
fn without_kernel_rdma_the_kernel_layer_fails_with_cause_and_remedy() {
    if skipped_for_kernel_rdma() {
        return;
    }
    let out = doctor(&[], &[]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with("  FAIL  kernel RDMA"));
    let fail = lines.next().unwrap_or_else(|| panic!("no kernel FAIL:\n{stdout}"));
    assert!(
        fail.contains("/sys/class/infiniband_verbs is absent") && fail.contains("ENOSYS"),
        "{fail}"
    );
    let fix = lines.next().unwrap_or_default();
    assert!(fix.trim_start().starts_with("fix: ") && fix.contains("modprobe rdma_rxe"), "{fix}");
    assert!(
        stdout.contains("\nKernel and device nodes\n") && stdout.contains(" 1 FAIL, "),
        "{stdout}"
    );

    let out = doctor(&[], &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.starts_with("{\"ok\":false,\"findings\":[\n"), "{json}");
    assert_finding(&json, "kernel RDMA", "FAIL", &["ENOSYS", "rdma link add rxe0 type rxe"]);
    let skipped = "needs RDMA in the kernel, which exposes none (see Kernel: kernel RDMA)";
    for check in ["verbs", "port", "GID table", "routable GID", "IP", "smoke test"] {
        assert_finding(&json, check, "SKIP", &[skipped]);
    }
}

#[test]
fn a_missing_libibverbs_fails_the_library_and_skips_what_needs_it() {
    let out = doctor(&[("RDMA_VERBS_LIBIBVERBS", "/nonexistent")], &["--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let json = String::from_utf8_lossy(&out.stdout);
    assert_finding(
        &json,
        "libibverbs",
        "FAIL",
        &[
            "cannot load libibverbs from /nonexistent",
            "RDMA_VERBS_LIBIBVERBS=/nonexistent names no usable libibverbs",
            "unset it",
        ],
    );
    // Everything that needs libibverbs skips, naming it — whatever the kernel has.
    let needs = "needs libibverbs, which did not load (see Library: libibverbs)";
    let dependent = |line: &&str| {
        ["\"layer\":\"link\"", "\"layer\":\"addressing\""].iter().any(|l| line.contains(l))
            || ["verbs", "smoke test", "stack", "librdmacm", "libmlx5", "providers", "dmabuf"]
                .iter()
                .any(|c| line.contains(&format!("\"check\":\"{c}")))
    };
    let lines: Vec<&str> = json.lines().filter(dependent).collect();
    assert!(lines.len() >= 11, "{json}");
    for line in lines {
        assert!(line.contains("\"status\":\"SKIP\"") && line.contains(needs), "{line}");
    }
}

#[test]
fn json_output_escapes_quotes_and_backslashes() {
    let out = doctor(&[("RDMA_VERBS_LIBIBVERBS", r#"/no "such" \lib"#)], &["--json"]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert!(json.ends_with("\n]}\n"), "{json}");
    assert_finding(&json, "libibverbs", "FAIL", &[r#"from /no \"such\" \\lib: "#]);
}

#[test]
fn each_provider_loads_in_a_child_and_a_bad_one_is_named() {
    if rdma_verbs::sys::ibverbs().is_err() {
        eprintln!("skipped: needs libibverbs.so.1 (rdma-core) installed");
        return;
    }
    let bad = "/nonexistent/libdoctortest";
    let out = doctor(&[("RDMAV_DRIVERS", bad)], &["--json"]);
    let json = String::from_utf8_lossy(&out.stdout);
    assert_finding(&json, "driver config", "PASS", &["and the environment", bad]);
    assert_finding(
        &json,
        &format!("provider {bad}"),
        "WARN",
        &[
            "does not load: /nonexistent/libdoctortest-rdmav",
            "No such file",
            "entry in RDMAV_DRIVERS is stale",
        ],
    );
    // Every provider got an answer from its child: loaded, or the loader's reason.
    let providers: Vec<&str> =
        json.lines().filter(|l| l.contains("\"check\":\"provider ")).collect();
    assert!(providers.len() >= 2, "{json}");
    for line in providers {
        assert!(
            line.contains("\"detail\":\"loads: ") || line.contains("\"detail\":\"does not load: "),
            "{line}"
        );
    }
}

#[test]
fn a_program_without_the_probe_hook_gets_a_skip_that_names_it() {
    // This test binary does not call provider_probe_main: its children (libtest, handed the
    // hidden argument) refuse it and exit, which the doctor reports instead of a verdict.
    let report = diag::run(ProviderProbe::CurrentExe);
    for layer in Layer::ALL {
        assert!(report.findings().iter().any(|f| f.layer == layer), "no {layer} finding");
    }
    let probed: Vec<_> =
        report.findings().iter().filter(|f| f.check.starts_with("provider ")).collect();
    if probed.is_empty() {
        eprintln!("skipped: no provider is configured here ({report:?})");
        return;
    }
    for f in probed {
        assert_eq!(f.status, Status::Skip, "{f}");
        assert!(
            f.detail.contains("must call rdma_verbs::diag::provider_probe_main() first"),
            "{f}"
        );
    }
}

#[test]
fn without_a_probe_the_provider_loads_are_skipped() {
    let report = diag::run(ProviderProbe::Skip);
    assert_eq!(report.has_failures(), report.count(Status::Fail) > 0);
    if report.find("driver config").is_none_or(|f| f.status != Status::Pass) {
        eprintln!("skipped: no driver config to probe here ({report:?})");
        return;
    }
    let providers = report.find("providers").unwrap_or_else(|| panic!("{report:?}"));
    assert_eq!(providers.status, Status::Skip);
    assert!(providers.detail.contains("ProviderProbe::Skip"), "{providers}");
    assert!(report.findings().iter().all(|f| !f.check.starts_with("provider ")), "{report:?}");
}

#[test]
fn the_loaded_library_answers_symbol_lookups() {
    let Ok(lib) = rdma_verbs::sys::ibverbs() else {
        eprintln!("skipped: needs libibverbs.so.1 (rdma-core) installed");
        return;
    };
    assert!(lib.has_symbol("ibv_get_device_list"));
    assert!(!lib.has_symbol("ibv_no_such_verb"));
}

#[test]
fn fork_protection_asked_for_is_a_warning_that_says_what_it_costs() {
    let status = match rdma_verbs::fork::status() {
        Err(rdma_verbs::Error::Load(e)) => return eprintln!("skipped: needs libibverbs: {e}"),
        other => other,
    };
    let json = |envs: &[(&str, &str)]| {
        String::from_utf8_lossy(&doctor(envs, &["--json"]).stdout).into_owned()
    };
    // "0" is off, as libibverbs reads it.
    let off = json(&[("RDMAV_FORK_SAFE", "0")]);
    match status {
        Ok(rdma_verbs::fork::ForkStatus::UNNEEDED) => {
            assert_finding(&off, "fork", "PASS", &["the kernel copies pinned pages at fork()"])
        }
        Ok(_) => assert_finding(
            &off,
            "fork",
            "PASS",
            &["does not report copying pinned pages", "fork::init()"],
        ),
        Err(e) => {
            assert!(matches!(e, rdma_verbs::Error::Unsupported { .. }), "{e}");
            assert_finding(&off, "fork", "PASS", &["fork protection is off", "before v35"]);
        }
    }
    let on = json(&[("RDMAV_FORK_SAFE", "1")]);
    assert_finding(
        &on,
        "fork",
        "WARN",
        &["RDMAV_FORK_SAFE=1", "SIGSEGV", "EINVAL", "RDMAV_HUGEPAGES_SAFE"],
    );
}
