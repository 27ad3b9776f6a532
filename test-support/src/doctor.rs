//! Running the doctor (rdma-verbs' example `doctor`, feature `diag`) and reading its `--json`
//! findings: one JSON object a line, with `"check"` and `"status"`.

use std::process::{Command, Output};
use std::time::Duration;

use crate::process::{output_within, text};
use crate::programs::example;

/// Runs the doctor example with extra environment and arguments.
pub fn doctor(envs: &[(&str, &str)], args: &[&str]) -> Output {
    let mut cmd = Command::new(example("doctor"));
    cmd.envs(envs.iter().copied()).args(args);
    doctor_output(cmd)
}

/// Runs `cmd` (the doctor, perhaps behind a wrapper) and checks that nothing panicked.
pub fn doctor_output(cmd: Command) -> Output {
    let out = output_within(cmd, Duration::from_secs(120));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"), "{}", text(&out));
    out
}

/// The `--json` line of the finding named `check`, failing with the whole output if absent.
pub fn finding<'a>(json: &'a str, check: &str) -> &'a str {
    let key = format!("\"check\":\"{check}\"");
    json.lines()
        .find(|l| l.contains(&key))
        .unwrap_or_else(|| panic!("no finding {check:?} in:\n{json}"))
}

/// Asserts that `check`'s finding has `status` and contains each of `needles`.
pub fn assert_finding(json: &str, check: &str, status: &str, needles: &[&str]) {
    let line = finding(json, check);
    assert!(line.contains(&format!("\"status\":\"{status}\"")), "{check} is not {status}: {line}");
    for needle in needles {
        assert!(line.contains(needle), "{needle:?} missing from {check}: {line}");
    }
}
