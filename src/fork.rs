//! Fork protection: [`init`] (`ibv_fork_init(3)`) and [`status`]
//! (`ibv_is_fork_initialized(3)`).
//!
//! A registered page is pinned for the NIC. Unless the kernel copies pinned pages into a
//! child at `fork()` — kernels that tell rdma-core so over rdma netlink
//! (`RDMA_NLDEV_SYS_ATTR_COPY_ON_FORK`) do, and [`status`] then says
//! [`ForkStatus::UNNEEDED`] — the parent's first write after a fork copies the page on write
//! and the NIC keeps using the old copy: data is lost silently. Fork protection avoids that by
//! `madvise(MADV_DONTFORK)` on every registered range, so a child does not get those pages at
//! all. It is process-wide and must be set up before the first registration: call [`init`]
//! first thing, or start the program with `RDMAV_FORK_SAFE=1` (libibverbs then sets it up
//! when it first lists the devices). Before rdma-core v51 both set it up even where the
//! kernel copies pinned pages; from v51 on they do nothing there.
//!
//! With protection on, `madvise` acts on **whole pages**:
//!
//! - Regions this crate allocates (`pd.register(len, ..)`) are whole pages, so nothing else
//!   shares their pages.
//! - A borrowed region (`pd.register(&mut buf[..], ..)`) protects every page it touches: a
//!   child that reads or writes *anything else* on those pages — a neighbouring field, heap
//!   data beside a small buffer — dies with `SIGSEGV`. Register page-aligned, page-sized
//!   memory, or leave protection off where the kernel makes it unneeded.
//! - In a huge-page mapping (hugetlbfs, `MAP_HUGETLB`) the pages are the huge pages: a range
//!   that does not start and end on their boundaries fails to register with `EINVAL` (the
//!   error says so), unless `RDMAV_HUGEPAGES_SAFE=1` was set when protection was set up
//!   (libibverbs then rounds to the mapping's page size). After such a refusal rdma-core 44.0
//!   refuses even the whole huge page: its range tree stays split at the refused range.
#![allow(unsafe_code)]
//! # Safety
//!
//! Both functions take no arguments and act on libibverbs' own process-wide state.

use std::sync::atomic::{AtomicBool, Ordering};

use rdma_verbs_sys as sys;

use crate::c_enum::c_enum;
use crate::error::{check_errno, Error, Result};

c_enum! {
    /// Whether fork protection is on (`enum ibv_fork_status`, `ibv_is_fork_initialized(3)`).
    /// The values are the ABI's (rdma-core 33.2's headers lack the type).
    pub struct ForkStatus(u32) {
        /// Off: a `fork()` while memory is registered can lose data (see the module docs).
        DISABLED = 0 => "disabled",
        /// On: registered ranges are not inherited by children.
        ENABLED = 1 => "enabled",
        /// The kernel copies pinned pages into children at `fork()`: protection is not needed.
        /// libibverbs reports this whether or not [`init`] was called.
        UNNEEDED = 2 => "unneeded",
    }
}

/// Whether this process registered memory through this crate: libibverbs refuses fork
/// protection after that, and the error can then say so.
static REGISTERED: AtomicBool = AtomicBool::new(false);

/// Whether [`init`] succeeded in this process.
static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// The variables that turn fork protection on when libibverbs first lists the devices.
const FORK_ENV: [&str; 2] = ["RDMAV_FORK_SAFE", "IBV_FORK_SAFE"];

/// The variable of [`FORK_ENV`] that asks for protection (set, and not "0", as libibverbs
/// reads it), with how it is set: `("RDMAV_FORK_SAFE", "RDMAV_FORK_SAFE=1")`.
pub(crate) fn requested_by_env() -> Option<(&'static str, String)> {
    FORK_ENV.into_iter().find_map(|name| {
        let value = std::env::var_os(name).filter(|value| value != "0")?;
        Some((name, format!("{name}={}", value.to_string_lossy())))
    })
}

/// Records a registration (`ibv_reg_mr` and its siblings), for [`init`]'s error.
pub(crate) fn note_registration() {
    REGISTERED.store(true, Ordering::Relaxed);
}

/// The loaded libibverbs' fork functions.
fn fns() -> Result<sys::ForkFns> {
    sys::ibverbs()?.fork.ok_or(Error::Unsupported { what: "ibv_fork_init" })
}

/// `ibv_fork_init(3)`—Turns fork protection on for this process (see the module docs).
/// Calling it again, or after `RDMAV_FORK_SAFE=1` turned it on, does nothing.
///
/// # Errors
///
/// [`Error::Load`] when libibverbs cannot be loaded; [`Error::Verb`] from `ibv_fork_init`:
/// `EINVAL` when memory was registered already (the message says whether this process
/// registered through this crate), `ENOSYS` when the kernel lacks `MADV_DONTFORK`.
#[doc(alias = "ibv_fork_init")]
pub fn init() -> Result<()> {
    // SAFETY: no arguments; it sets up libibverbs' own state under its own lock.
    let ret = unsafe { (fns()?.ibv_fork_init)() };
    check_errno(ret, "ibv_fork_init").map_err(|e| match e.errno() {
        Some(libc::EINVAL) => e.with_hint(too_late(REGISTERED.load(Ordering::Relaxed))),
        _ => e,
    })?;
    INITIALIZED.store(true, Ordering::Relaxed);
    Ok(())
}

/// A registration's `EINVAL`, explained when fork protection is what refused it: with
/// protection on, libibverbs madvises the whole pages of `len` bytes at `addr`, and in a
/// huge-page mapping (hugetlbfs) `madvise` refuses a range that does not start and end on
/// the huge pages' boundaries — unless `RDMAV_HUGEPAGES_SAFE` made libibverbs round to them.
pub(crate) fn huge_page_hint(error: Error, addr: usize, len: usize) -> Error {
    let on = INITIALIZED.load(Ordering::Relaxed) || requested_by_env().is_some();
    if error.errno() != Some(libc::EINVAL)
        || !on
        || std::env::var_os("RDMAV_HUGEPAGES_SAFE").is_some()
    {
        return error;
    }
    let Some(huge) = mapping_page_size(addr).filter(|&size| size > page_size()) else {
        return error;
    };
    if addr.is_multiple_of(huge) && (addr + len).is_multiple_of(huge) {
        return error;
    }
    error.with_hint(format!(
        "fork protection (fork::init, RDMAV_FORK_SAFE) madvises whole pages, and these {len} \
         bytes at {addr:#x} lie in {} KiB huge pages without starting and ending on their \
         boundaries: register whole huge pages, or set RDMAV_HUGEPAGES_SAFE=1 before fork \
         protection is set up (libibverbs then rounds to the mapping's page size)",
        huge / 1024
    ))
}

/// The base page size.
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096)
}

/// The page size of the mapping holding `addr` (`KernelPageSize` in `/proc/self/smaps`).
fn mapping_page_size(addr: usize) -> Option<usize> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    kernel_page_size(&smaps, addr)
}

/// `KernelPageSize` of the mapping of `smaps` (the text of `/proc/<pid>/smaps`) that holds
/// `addr`, in bytes.
fn kernel_page_size(smaps: &str, addr: usize) -> Option<usize> {
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_whitespace().next().and_then(|r| r.split_once('-'));
        let bounds = range.and_then(|(start, end)| {
            Some((usize::from_str_radix(start, 16).ok()?, usize::from_str_radix(end, 16).ok()?))
        });
        match bounds {
            // A mapping's first line: "start-end perms offset dev inode path".
            Some((start, end)) => inside = (start..end).contains(&addr),
            None if inside => {
                if let Some(kib) = line.strip_prefix("KernelPageSize:") {
                    return kib
                        .trim()
                        .strip_suffix("kB")?
                        .trim()
                        .parse::<usize>()
                        .ok()?
                        .checked_mul(1024);
                }
            }
            None => {}
        }
    }
    None
}

/// Why `ibv_fork_init` refused (`EINVAL`), knowing whether this crate registered memory.
fn too_late(registered: bool) -> String {
    let what = if registered {
        "this process registered memory already"
    } else {
        "memory was registered, or a provider protected a queue's buffers (mlx5 does when a CQ \
         or QP is created)"
    };
    format!(
        "fork protection must be set up before the first memory registration, and {what}: \
         call fork::init() before registering, or start the program with RDMAV_FORK_SAFE=1"
    )
}

/// `ibv_is_fork_initialized(3)`—Whether fork protection is on, or unneeded because the
/// kernel copies pinned pages at `fork()`.
///
/// # Errors
///
/// [`Error::Load`] when libibverbs cannot be loaded; [`Error::Unsupported`] before rdma-core
/// v35, which lacks `ibv_is_fork_initialized`.
#[doc(alias = "ibv_is_fork_initialized")]
pub fn status() -> Result<ForkStatus> {
    let status = fns()?
        .ibv_is_fork_initialized
        .ok_or(Error::Unsupported { what: "ibv_is_fork_initialized (rdma-core v35+)" })?;
    // SAFETY: no arguments; it reads libibverbs' state (and asks the kernel over netlink).
    Ok(ForkStatus(unsafe { status() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_size_of_the_mapping_holding_an_address_is_read_from_smaps() {
        let smaps = "\
7f0000000000-7f0000200000 rw-s 00000000 00:10 123 /anon_hugepage (deleted)
Size:               2048 kB
KernelPageSize:     2048 kB
VmFlags: rd wr sh mr mw me ms de ht sd
7f0000200000-7f0000201000 rw-p 00000000 00:00 0
Size:                  4 kB
KernelPageSize:        4 kB
";
        assert_eq!(kernel_page_size(smaps, 0x7f00_0000_1000), Some(2 << 20));
        assert_eq!(kernel_page_size(smaps, 0x7f00_0020_0fff), Some(4096));
        assert_eq!(kernel_page_size(smaps, 0x7f00_0020_1000), None);
        let here = 0u8;
        assert_eq!(mapping_page_size(&raw const here as usize), Some(page_size()), "the stack");
    }

    #[test]
    fn a_late_init_says_what_came_first_and_what_to_do() {
        let mine = too_late(true);
        assert!(mine.contains("this process registered memory already"), "{mine}");
        let theirs = too_late(false);
        assert!(theirs.contains("a provider protected a queue's buffers"), "{theirs}");
        for hint in [mine, theirs] {
            assert!(hint.starts_with("fork protection must be set up before the first"), "{hint}");
            assert!(hint.ends_with("call fork::init() before registering, or start the program with RDMAV_FORK_SAFE=1"), "{hint}");
        }
        let e = Error::verb("ibv_fork_init", libc::EINVAL).with_hint(too_late(true));
        assert!(e.to_string().starts_with("ibv_fork_init failed: EINVAL; fork protection"), "{e}");
    }
}
