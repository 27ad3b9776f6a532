//! The provider-load probe: loading a provider runs its initialisers, so each provider is
//! loaded in a child process — this program again, started with [`ARG`] — never in the
//! process being diagnosed.
#![allow(unsafe_code)]
//! # Safety
//!
//! The `unsafe` is the child's `dlopen` of a provider, which runs the provider's
//! initialisers — the child exists for that and does nothing else before it exits — and the
//! read of `dlerror`'s message.

use std::ffi::{CStr, CString, OsString};
use std::io::Read;
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rdma_verbs_sys as sys;

/// The hidden first argument that makes [`super::provider_probe_main`] act as the probe.
const ARG: &str = "--rdma-verbs-diag-provider-probe";

/// The child's first line, so the parent knows it ran the probe and not the program's
/// normal course.
const HELLO: &str = "rdma-verbs provider probe";

/// How long all probes together may take: an initialiser that hangs is a finding, not a
/// hung doctor. Generous, because the Soft-RoCE guest runs under emulation.
const TIMEOUT: Duration = Duration::from_secs(30);

/// How loading one provider went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Outcome {
    /// `dlopen` succeeded for this file name.
    Loaded(String),
    /// `dlopen` failed for every candidate; the loader's message for the last one, as
    /// libibverbs would print it.
    Failed(String),
    /// The child died or hung while loading it: its initialiser crashes or blocks.
    Crashed(String),
    /// The child did not run the probe (its `main` lacks the hook) or could not start.
    NoProbe(String),
}

/// Loads, in one child process each (all running at once), the first loadable file of each
/// candidate list, in the order libibverbs tries them.
pub(super) fn load_all(candidates: &[Vec<String>]) -> Vec<Outcome> {
    let exe = match std::env::current_exe() {
        Ok(exe) if is_loader(&exe) => {
            let why = format!(
                "this program was started through the dynamic loader ({} PROGRAM): the probe \
                 re-executes the current executable, which is then the loader, not the program; \
                 start the program directly (LD_LIBRARY_PATH instead of --library-path) to \
                 probe the providers",
                exe.display()
            );
            return candidates.iter().map(|_| Outcome::NoProbe(why.clone())).collect();
        }
        Ok(exe) => exe,
        Err(e) => {
            let why = format!("cannot find this program to start it as the probe: {e}");
            return candidates.iter().map(|_| Outcome::NoProbe(why.clone())).collect();
        }
    };
    let children: Vec<_> = candidates.iter().map(|files| spawn(&exe, files)).collect();
    let deadline = Instant::now() + TIMEOUT;
    children
        .into_iter()
        .map(|child| match child {
            Ok(child) => finish(child, deadline),
            Err(e) => Outcome::NoProbe(format!("cannot start {}: {e}", exe.display())),
        })
        .collect()
}

/// Whether `exe` is the dynamic loader itself (`ld-linux-x86-64.so.2`, `ld-linux-aarch64.so.1`,
/// `ld.so`): what `/proc/self/exe` names when a program is started as `ld.so PROGRAM`.
fn is_loader(exe: &Path) -> bool {
    let name = exe.file_name().map(|n| n.to_string_lossy()).unwrap_or_default();
    name == "ld.so" || (name.starts_with("ld-") && name.contains(".so"))
}

fn spawn(exe: &Path, files: &[String]) -> std::io::Result<Child> {
    Command::new(exe)
        .arg(ARG)
        .args(files)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
}

/// Waits for `child` until `deadline` (then kills it) and reads its answer.
fn finish(mut child: Child, deadline: Instant) -> Outcome {
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                // Ours to end: a provider initialiser that never returns.
                let _ = child.kill();
                let _ = child.wait();
                return Outcome::Crashed(format!("still loading after {}s", TIMEOUT.as_secs()));
            }
            Err(e) => return Outcome::NoProbe(format!("cannot wait for the probe: {e}")),
        }
    };
    let (mut stdout, mut stderr) = (String::new(), String::new());
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut stdout);
    }
    if let Some(mut err) = child.stderr.take() {
        let _ = err.read_to_string(&mut stderr);
    }
    parse(status, &stdout, &stderr)
}

/// The parent's reading of a finished child.
fn parse(status: ExitStatus, stdout: &str, stderr: &str) -> Outcome {
    let mut lines = stdout.lines();
    let answered = lines.next() == Some(HELLO);
    let answer = lines.next().and_then(|l| l.split_once('\t'));
    let stderr = stderr.trim();
    let stderr = if stderr.is_empty() { String::new() } else { format!("; stderr: {stderr}") };
    match (answered, answer) {
        (true, Some(("loaded", file))) if status.success() => Outcome::Loaded(file.to_owned()),
        (true, Some(("failed", why))) if status.success() => Outcome::Failed(why.to_owned()),
        (true, _) => Outcome::Crashed(format!("the probe process ended with {status}{stderr}")),
        (false, _) => Outcome::NoProbe(format!(
            "the probe process did not answer ({status}{stderr}): the program's main must call \
             rdma_verbs::diag::provider_probe_main() first"
        )),
    }
}

/// The child's side: when started with [`ARG`], load the provider and exit.
pub(super) fn main_if_probe() {
    let mut args = std::env::args_os().skip(1);
    if args.next().is_none_or(|a| a != ARG) {
        return;
    }
    println!("{HELLO}");
    println!("{}", load_first(args));
    std::process::exit(0);
}

/// `loaded\t<file>` or `failed\t<why>` for the first of `files` that `dlopen` accepts.
fn load_first(files: impl Iterator<Item = OsString>) -> String {
    // The provider needs libibverbs.so.1: load the one the doctor uses first, so the
    // provider binds to it (the loader reuses an object of that soname) and not to whichever
    // the search path would find.
    if let Err(e) = sys::ibverbs() {
        return format!("failed\tlibibverbs: {e}");
    }
    let mut last = String::from("no file to try");
    for file in files {
        let shown = file.to_string_lossy().into_owned();
        let Ok(path) = CString::new(file.into_vec()) else {
            last = format!("{shown}: a file name with a NUL byte");
            continue;
        };
        // SAFETY: dlopen runs the provider's initialisers; this process exists only to run
        // them (see the module docs). RTLD_NOW, as libibverbs uses, so that unresolvable
        // symbols (an IBVERBS_PRIVATE mismatch) fail here as they would there. The handle is
        // never closed, as libibverbs never unloads a provider.
        if !unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) }.is_null() {
            return format!("loaded\t{shown}");
        }
        // SAFETY: dlerror returns NULL or a NUL-terminated message that stays valid until the
        // next dl* call of this thread; it is copied at once.
        let error = unsafe { libc::dlerror() };
        last = if error.is_null() {
            format!("{shown}: dlopen failed")
        } else {
            // SAFETY: non-NULL, so a NUL-terminated string (see above).
            unsafe { CStr::from_ptr(error) }.to_string_lossy().replace('\n', " ")
        };
    }
    format!("failed\t{last}")
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_dynamic_loader_is_recognised() {
        for loader in
            ["/lib64/ld-linux-x86-64.so.2", "/usr/lib/ld-linux-aarch64.so.1", "/lib/ld.so"]
        {
            assert!(is_loader(Path::new(loader)), "{loader}");
        }
        for program in ["/usr/bin/doctor", "/opt/ld-tools/bin/doctor", "/usr/bin/ldconfig"] {
            assert!(!is_loader(Path::new(program)), "{program}");
        }
    }

    use std::os::unix::process::ExitStatusExt;

    use super::*;

    #[test]
    fn answers_are_read_back() {
        let ok = ExitStatus::from_raw(0);
        let loaded = parse(ok, &format!("{HELLO}\nloaded\t/lib/librxe-rdmav34.so\n"), "");
        assert_eq!(loaded, Outcome::Loaded("/lib/librxe-rdmav34.so".into()));
        let failed = parse(ok, &format!("{HELLO}\nfailed\tno such file\n"), "");
        assert_eq!(failed, Outcome::Failed("no such file".into()));
    }

    #[test]
    fn a_dying_child_is_a_crash_and_a_silent_one_lacks_the_hook() {
        let segv = ExitStatus::from_raw(11); // killed by SIGSEGV
        match parse(segv, &format!("{HELLO}\n"), "boom") {
            Outcome::Crashed(why) => {
                assert!(why.contains("SIGSEGV") && why.contains("boom"), "{why}")
            }
            other => panic!("{other:?}"),
        }
        match parse(ExitStatus::from_raw(2 << 8), "usage: foo\n", "") {
            Outcome::NoProbe(why) => assert!(why.contains("provider_probe_main"), "{why}"),
            other => panic!("{other:?}"),
        }
    }
}
