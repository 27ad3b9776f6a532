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
//!   that does not start and end on their boundaries fails to register with `EINVAL`, unless
//!   `RDMAV_HUGEPAGES_SAFE=1` is set (libibverbs then rounds to the mapping's page size).
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
    })
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
        assert!(
            e.to_string()
                .starts_with("ibv_fork_init failed: EINVAL (Invalid argument); fork protection"),
            "{e}"
        );
    }
}
