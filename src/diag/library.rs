//! Library layer: libibverbs, the stack it belongs to, and librdmacm and libmlx5 beside it.
//! The providers have their own module.

use std::path::{Path, PathBuf};

use rdma_verbs_sys as sys;

use super::sysfs::SysDevice;
use super::{providers, Gate, Out, ProviderProbe};
use crate::stack::{Stack, StackKind};

/// What later layers need from this one.
pub(super) struct Library {
    /// The loaded libibverbs, or why checks needing it SKIP.
    pub verbs: Gate<&'static sys::Ibverbs>,
    /// Where libmlx5 is, when found.
    pub libmlx5: Option<PathBuf>,
}

const LIBRDMACM: &str = "librdmacm.so.1";
const LIBMLX5: &str = "libmlx5.so.1";

/// Runs the layer's checks.
pub(super) fn check(out: &mut Out<'_>, devices: &[SysDevice], probe: ProviderProbe) -> Library {
    let verbs = match sys::ibverbs() {
        Ok(verbs) => verbs,
        Err(e) => {
            out.fail("libibverbs", e.to_string(), load_remedy());
            let reason = "needs libibverbs, which did not load (see Library: libibverbs)";
            for check in ["stack", "librdmacm", "libmlx5", "providers"] {
                out.skip(check, reason);
            }
            return Library { verbs: Err(reason.into()), libmlx5: None };
        }
    };
    out.pass("libibverbs", describe(verbs));
    stack(out, verbs);

    let dirs = search_dirs(verbs.path());
    let version = verbs.rdma_core_version();
    let where_ = format!(
        "not beside libibverbs ({}) nor on LD_LIBRARY_PATH",
        dirs.first().map_or("?".into(), |d| d.display().to_string())
    );
    let rdmacm = find(&dirs, LIBRDMACM);
    match &rdmacm {
        Some(path) => sibling(out, "librdmacm", path, version.as_deref(), RDMACM_USE),
        None => out.warn(
            "librdmacm",
            format!(
                "{LIBRDMACM} is {where_}: programs that connect through rdma_cm (iWARP \
                 devices, rping, perftest -R) cannot run"
            ),
            "Debian/Ubuntu: apt-get install librdmacm1; RHEL/Rocky/Fedora: dnf install librdmacm",
        ),
    }
    let libmlx5 = find(&dirs, LIBMLX5);
    let mlx5: Vec<&str> = devices.iter().filter(|d| d.is_mlx5()).map(|d| d.name.as_str()).collect();
    match (&libmlx5, mlx5.is_empty()) {
        (Some(path), _) => sibling(out, "libmlx5", path, version.as_deref(), MLX5_USE),
        (None, true) => {
            out.pass("libmlx5", format!("{LIBMLX5} is {where_}; no mlx5 device needs it"))
        }
        (None, false) => out.warn(
            "libmlx5",
            format!(
                "{LIBMLX5} is {where_}, but {} need it: it is also their provider",
                mlx5.join(", ")
            ),
            "Debian/Ubuntu: apt-get install ibverbs-providers; RHEL/Rocky/Fedora: dnf install \
             libibverbs; MLNX_OFED / DOCA-OFED: reinstall its libmlx5",
        ),
    }
    providers::check(out, verbs, probe);
    Library { verbs: Ok(verbs), libmlx5 }
}

fn describe(verbs: &sys::Ibverbs) -> String {
    let version = verbs.rdma_core_version().unwrap_or_else(|| "unknown".into());
    let abi = verbs.abi_minor().map(|m| format!(", ABI IBVERBS_1.{m}")).unwrap_or_default();
    let chosen = match overridden() {
        Some(v) => format!("; chosen by {}={v}", sys::loader::LIBIBVERBS_ENV),
        None => String::new(),
    };
    format!("{} (rdma-core {version}{abi}){chosen}", verbs.path().display())
}

/// The value of `RDMA_VERBS_LIBIBVERBS`, when it overrides the library's name.
fn overridden() -> Option<String> {
    std::env::var_os(sys::loader::LIBIBVERBS_ENV)
        .filter(|v| !v.is_empty())
        .map(|v| v.to_string_lossy().into_owned())
}

fn load_remedy() -> String {
    match overridden() {
        Some(v) => format!(
            "{}={v} names no usable libibverbs: point it at a libibverbs.so.1, or unset it to \
             load the system's",
            sys::loader::LIBIBVERBS_ENV
        ),
        None => format!(
            "install rdma-core's user-space libraries as the message says, or point {} at a \
             libibverbs.so.1 installed elsewhere",
            sys::loader::LIBIBVERBS_ENV
        ),
    }
}

/// MLNX_OFED / DOCA-OFED or inbox, from the version's numbering and `ofed_info`.
fn stack(out: &mut Out<'_>, verbs: &sys::Ibverbs) {
    let ofed_info = on_path("ofed_info");
    let tool = match &ofed_info {
        Some(path) => match ofed_release(path) {
            Some(release) => format!("{} reports {release}", path.display()),
            None => format!("{} is installed", path.display()),
        },
        None => "no ofed_info on PATH".into(),
    };
    match Stack::of(verbs) {
        None => {
            out.pass("stack", format!("unknown: the library's file name has no version; {tool}"))
        }
        Some(stack) if stack.kind() == StackKind::MlnxOfed => out.pass(
            "stack",
            format!(
                "MLNX_OFED / DOCA-OFED: rdma-core {} has NVIDIA's numbering (a 'mlnx' tag or a \
                 YYMM-based release of 4+ digits; upstream releases have 2-3); {tool}",
                stack.release()
            ),
        ),
        Some(stack) if ofed_info.is_some() => out.warn(
            "stack",
            format!(
                "mixed: libibverbs is upstream (inbox) rdma-core {}, but MLNX_OFED / DOCA-OFED \
                 is installed ({tool})",
                stack.release()
            ),
            format!(
                "use one stack: load MLNX_OFED's libibverbs ({}=<its libibverbs.so.1>) or \
                 remove the MLNX_OFED / DOCA-OFED packages; mixed libraries and providers fail \
                 with \"version IBVERBS_PRIVATE_xx not found\"",
                sys::loader::LIBIBVERBS_ENV
            ),
        ),
        Some(stack) => out.pass(
            "stack",
            format!(
                "inbox (distribution) rdma-core {}: upstream numbering, and {tool}",
                stack.release()
            ),
        ),
    }
}

/// The release `ofed_info` (a shell script) prints, read from its text without running it.
fn ofed_release(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string(path).ok()?;
    ["MLNX_OFED_LINUX-", "OFED-internal-"].iter().find_map(|prefix| {
        let at = text.find(prefix)?;
        let end = text[at..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
            .map_or(text.len(), |n| at + n);
        Some(text[at..end].to_owned())
    })
}

/// `name` in one of `$PATH`'s directories.
fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path).map(|dir| dir.join(name)).find(|p| p.is_file())
}

/// Where a library of libibverbs' stack would be: beside it, then `LD_LIBRARY_PATH`.
fn search_dirs(libibverbs: &Path) -> Vec<PathBuf> {
    let ld = std::env::var_os("LD_LIBRARY_PATH").unwrap_or_default();
    libibverbs
        .parent()
        .map(Path::to_path_buf)
        .into_iter()
        .chain(std::env::split_paths(&ld))
        .collect()
}

/// `name` in the first of `dirs` that has it, symlinks resolved (the real file name carries
/// the release).
fn find(dirs: &[PathBuf], name: &str) -> Option<PathBuf> {
    let path = dirs.iter().map(|d| d.join(name)).find(|p| p.exists())?;
    Some(path.canonicalize().unwrap_or(path))
}

/// When this crate loads librdmacm.
const RDMACM_USE: &str = "loaded only by the rdmacm feature, on first use";
/// When this crate loads libmlx5 (as a library: as the mlx5 devices' provider, libibverbs
/// loads it).
const MLX5_USE: &str = "loaded as a library only by the mlx5 feature's DC transport, on first use";

/// A library found beside libibverbs: PASS when from the same rdma-core release. `not_loaded`
/// says when this crate loads it.
fn sibling(out: &mut Out<'_>, check: &str, path: &Path, version: Option<&str>, not_loaded: &str) {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    match version {
        Some(v) if !name.ends_with(&format!(".{v}")) => out.warn(
            check,
            format!("{} is not from libibverbs' rdma-core release {v}", path.display()),
            "install the rdma-core libraries and providers from one release (mixed releases \
             fail with \"version IBVERBS_PRIVATE_xx not found\" or missing symbols)",
        ),
        Some(_) => out.pass(
            check,
            format!("{} (same rdma-core release as libibverbs; {not_loaded})", path.display()),
        ),
        None => out.pass(check, format!("{} ({not_loaded})", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ofed_info_release_is_read_from_the_script() {
        let dir = crate::diag::scratch_dir("ofed");
        let script = dir.join("ofed_info");
        std::fs::write(&script, "#!/bin/bash\necho MLNX_OFED_LINUX-23.10-1.1.9.0:\n").unwrap();
        assert_eq!(ofed_release(&script).as_deref(), Some("MLNX_OFED_LINUX-23.10-1.1.9.0"));
        std::fs::write(&script, "#!/bin/bash\necho hello\n").unwrap();
        assert_eq!(ofed_release(&script), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn siblings_come_from_beside_libibverbs_first() {
        let dirs = search_dirs(Path::new("/opt/rdma/lib/libibverbs.so.1.14.50.0"));
        assert_eq!(dirs.first().map(PathBuf::as_path), Some(Path::new("/opt/rdma/lib")));
    }
}
