//! Sharing verbs objects between processes (`ibv_import_device(3)`, `ibv_import_pd(3)`,
//! `ibv_import_mr(3)`; rdma-core v31, `IBVERBS_1.10`).
//!
//! A context's command descriptor ([`Context::cmd_fd`]) is its kernel uverbs file. Another
//! process given a duplicate of it (by `SCM_RIGHTS`, `pidfd_getfd(2)`, or inheritance)
//! imports the context ([`Context::import`]) and then, by the kernel handles the exporting
//! process hands over ([`ProtectionDomain::handle`], [`MemoryRegion::handle`]), its protection
//! domains ([`Context::import_pd`]) and memory regions ([`ProtectionDomain::import_mr`]). The
//! objects stay the exporting process's: an importer releases its view of them
//! (`ibv_unimport_pd`, `ibv_unimport_mr`) and never destroys them, and the owner keeps them
//! alive while importers use them: once destroyed, an importer may only unimport them
//! (`ibv_import_pd(3)`).
//!
//! Among rdma-core's providers only mlx5 implements the imports (`providers/mlx5/mlx5.c`);
//! others, rxe and siw among them, answer `EOPNOTSUPP`, which is [`Error::Unsupported`].
#![allow(unsafe_code)]
//! # Safety
//!
//! An imported context is a [`Context`] like an opened one: `ibv_close_device` closes it and
//! its command descriptor. An imported PD is a [`ProtectionDomain`] that unimports instead of
//! deallocating; what this process creates in it (regions over its own memory, QPs, SRQs) is
//! its own. An imported memory region is the exporting process's memory: work requests or
//! peers reaching it make the NIC touch memory this program does not own, so
//! [`ProtectionDomain::import_mr`] is `unsafe` and its caller vouches for that memory.

use std::ffi::CStr;
use std::os::fd::{BorrowedFd, IntoRawFd, OwnedFd};
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::context::Context;
use crate::error::{check_ptr, Error, Result};
use crate::leak::drop_by;
use crate::pd::ProtectionDomain;
use crate::wr::{LKey, RKey};
#[cfg(doc)]
use crate::MemoryRegion;

/// What the import verbs need: rdma-core v31 (`IBVERBS_1.10`).
const IMPORT: &str = "ibv_import_device (rdma-core v31+)";

impl Context {
    /// The context's command descriptor (`ibv_context.cmd_fd`), its kernel uverbs file: what
    /// another process imports the context by ([`Context::import`]) once given a duplicate of
    /// it (`SCM_RIGHTS`; [`BorrowedFd::try_clone_to_owned`] within a process). It stays this
    /// context's, closed with it. `None` for a context without one (libibverbs always opens
    /// one; a test provider may not).
    ///
    /// Whoever holds a duplicate acts on this context's objects by handle: hand it only to
    /// processes trusted with them.
    pub fn cmd_fd(&self) -> Option<BorrowedFd<'_>> {
        // SAFETY: the context is live while `self` is; a plain field read.
        let fd = unsafe { (*self.as_raw()).cmd_fd };
        // SAFETY: not -1, and the context keeps its command descriptor open until
        // `ibv_close_device`, which needs `self` gone.
        (fd >= 0).then(|| unsafe { BorrowedFd::borrow_raw(fd) })
    }

    /// `ibv_import_device(3)`—Imports the context whose command descriptor `cmd_fd` is a
    /// duplicate of ([`Context::cmd_fd`] in the exporting process): a context on the same
    /// kernel uverbs file, sharing its objects by handle ([`Context::import_pd`]). Dropping it
    /// closes it (`ibv_close_device`) and the descriptor, not the exporter's context.
    ///
    /// The descriptor is handed to libibverbs, which takes it. On failure libibverbs has
    /// closed it or not depending on where it failed (its own checks leave it open, a
    /// provider's failure closes it: `libibverbs/device.c`), so this crate leaves it alone
    /// rather than risk closing a descriptor another thread has opened since: a failed
    /// import may leak it.
    ///
    /// # Errors
    ///
    /// - [`Error::Unsupported`] when the loaded libibverbs lacks the verb (before rdma-core
    ///   v31) or the device's provider cannot import (`EOPNOTSUPP`: every provider but mlx5).
    /// - [`Error::Verb`] from `ibv_import_device`: `EINVAL` when `cmd_fd` is not a character
    ///   device, `ENODEV` when no RDMA device has it.
    /// - [`Error::Load`] when libibverbs cannot be loaded.
    #[doc(alias = "ibv_import_device")]
    pub fn import(cmd_fd: OwnedFd) -> Result<Context> {
        Context::import_in(sys::ibverbs()?, cmd_fd)
    }

    /// [`Context::import`] through `lib` rather than the process-wide libibverbs (a mock
    /// provider's, in tests).
    ///
    /// # Errors
    ///
    /// As [`Context::import`].
    #[doc(alias = "ibv_import_device")]
    pub fn import_in(lib: &'static sys::Ibverbs, cmd_fd: OwnedFd) -> Result<Context> {
        let import = lib.fns.ibv_import_device.ok_or(Error::Unsupported { what: IMPORT })?;
        // SAFETY: the descriptor is open, and ours to hand over: libibverbs takes it.
        let raw = unsafe { import(cmd_fd.into_raw_fd()) };
        let raw = check_ptr(raw, "ibv_import_device")?;
        // SAFETY: a live context; its device is libibverbs', alive while the context is.
        let name = unsafe { (lib.fns.ibv_get_device_name)((*raw.as_ptr()).device) };
        let name = if name.is_null() {
            String::new()
        } else {
            // SAFETY: a NUL-terminated name owned by the device, read before anything frees it.
            unsafe { CStr::from_ptr(name) }.to_string_lossy().into_owned()
        };
        // SAFETY: `raw` was just imported by this library, and the returned value owns it:
        // nothing else closes it.
        Ok(unsafe { Context::from_raw(lib, raw, name) })
    }

    /// `ibv_import_pd(3)`—Imports the protection domain with kernel handle `handle`
    /// ([`ProtectionDomain::handle`] in the exporting process) into this imported context.
    /// It serves as any PD here (regions over this process's memory, QPs, SRQs); dropping it
    /// unimports it (`ibv_unimport_pd`) and never deallocates it, as the exporting process
    /// owns it.
    ///
    /// The exporting process must keep the domain allocated while this one uses it: after
    /// its deallocation the kernel refuses the handle (or, reused, it names another object
    /// of that process), and the provider's view of it here is stale.
    ///
    /// # Errors
    ///
    /// - [`Error::Unsupported`] when the loaded libibverbs lacks the verb (before rdma-core
    ///   v31) or the provider cannot import (`EOPNOTSUPP`).
    /// - [`Error::Verb`] from `ibv_import_pd` when the kernel knows no PD by that handle on
    ///   this context's uverbs file.
    #[doc(alias = "ibv_import_pd")]
    pub fn import_pd(&self, handle: u32) -> Result<ProtectionDomain<'_>> {
        let fns = &self.library().fns;
        let (Some(import), Some(_)) = (fns.ibv_import_pd, fns.ibv_unimport_pd) else {
            return Err(Error::Unsupported { what: "ibv_import_pd (rdma-core v31+)" });
        };
        // SAFETY: a live context of this library; the handle is only looked up.
        let raw = unsafe { import(self.as_raw(), handle) };
        Ok(ProtectionDomain::imported(check_ptr(raw, "ibv_import_pd")?, self))
    }
}

/// `ibv_unimport_pd`: what dropping an imported PD does.
pub(crate) fn unimport_pd(pd: &ProtectionDomain<'_>) -> Result<()> {
    let unimport = pd
        .context()
        .library()
        .fns
        .ibv_unimport_pd
        .ok_or(Error::Unsupported { what: "ibv_unimport_pd (rdma-core v31+)" })?;
    // SAFETY: an imported PD (`import_pd` checked the symbol), whose children borrow it and
    // are gone; unimported once.
    unsafe { unimport(pd.as_raw()) };
    Ok(())
}

impl<'ctx> ProtectionDomain<'ctx> {
    /// The kernel's handle of the domain (`ibv_pd.handle`): what another process that
    /// imported this context passes to [`Context::import_pd`] (`ibv_import_pd(3)`).
    pub fn handle(&self) -> u32 {
        // SAFETY: the PD is live while `self` is; a plain field read.
        unsafe { (*self.as_raw()).handle }
    }

    /// `ibv_import_mr(3)`—Imports the memory region with kernel handle `handle`
    /// ([`MemoryRegion::handle`](crate::MemoryRegion::handle) in the exporting process), of
    /// the domain this one imports. Dropping it unimports it (`ibv_unimport_mr`), never
    /// deregisters it.
    ///
    /// # Safety
    ///
    /// The region is the exporting process's memory. Until the returned value is dropped
    /// and no work request posted with its keys is outstanding, the exporting process must
    /// keep the region registered and its memory allocated, and must not use the bytes that
    /// this process's work requests (or the peers it gives the rkey) write or read
    /// concurrently with them: the NIC reaches that memory on this process's behalf.
    ///
    /// # Errors
    ///
    /// - [`Error::Unsupported`] when the loaded libibverbs lacks the verb (before rdma-core
    ///   v31) or the provider cannot import (`EOPNOTSUPP`).
    /// - [`Error::Verb`] from `ibv_import_mr` when the kernel knows no MR by that handle on
    ///   this context's uverbs file.
    #[doc(alias = "ibv_import_mr")]
    pub unsafe fn import_mr(&self, handle: u32) -> Result<ImportedMr<'_>> {
        let fns = &self.context().library().fns;
        let (Some(import), Some(_)) = (fns.ibv_import_mr, fns.ibv_unimport_mr) else {
            return Err(Error::Unsupported { what: "ibv_import_mr (rdma-core v31+)" });
        };
        // SAFETY: a live PD of this library; the handle is only looked up. The memory it
        // names is the caller's to vouch for.
        let raw = unsafe { import(self.as_raw(), handle) };
        Ok(ImportedMr { raw: check_ptr(raw, "ibv_import_mr")?, pd: self })
    }
}

/// A memory region imported from another process (`struct ibv_mr`, `ibv_import_mr(3)`): its
/// keys and length, to name the exporting process's memory in work requests
/// ([`Sge::new`](crate::Sge::new) with [`ImportedMr::lkey`] at an address of the
/// exporter's registration, [`MemoryRegion::iova`](crate::MemoryRegion::iova) + offset,
/// posted with [`QueuePair::post_send_wr`](crate::QueuePair::post_send_wr)) or to give a
/// peer ([`ImportedMr::rkey`]). Unimported (`ibv_unimport_mr`) when dropped; the exporting
/// process deregisters it.
///
/// It borrows the (imported) [`ProtectionDomain`], so it cannot outlive it.
#[must_use = "the region is unimported when dropped"]
pub struct ImportedMr<'pd> {
    raw: NonNull<sys::ibv_mr>,
    pd: &'pd ProtectionDomain<'pd>,
}

// SAFETY: only read after creation; MR verbs are thread-safe.
unsafe impl Send for ImportedMr<'_> {}
// SAFETY: as above.
unsafe impl Sync for ImportedMr<'_> {}

impl<'pd> ImportedMr<'pd> {
    fn raw(&self) -> &sys::ibv_mr {
        // SAFETY: the MR is live while `self` is, and only read.
        unsafe { self.raw.as_ref() }
    }

    /// The local key, for SGEs.
    pub fn lkey(&self) -> LKey {
        LKey::new(self.raw().lkey)
    }

    /// The remote key, for peers.
    pub fn rkey(&self) -> RKey {
        RKey::new(self.raw().rkey)
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.raw().length
    }

    /// Whether it holds no byte (a region holds at least one).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The kernel handle it was imported by.
    pub fn handle(&self) -> u32 {
        self.raw().handle
    }

    /// The protection domain it was imported into.
    pub fn pd(&self) -> &'pd ProtectionDomain<'pd> {
        self.pd
    }

    /// The raw MR pointer (its `addr` is NULL: the memory is another process's).
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.raw.as_ptr()
    }

    fn unimport(&self) -> Result<()> {
        let unimport = self.pd.context().library().fns.ibv_unimport_mr;
        let unimport = unimport.ok_or(Error::Unsupported { what: "ibv_unimport_mr" })?;
        // SAFETY: an MR `ibv_import_mr` returned (which checked the symbol); unimported once.
        unsafe { unimport(self.as_raw()) };
        Ok(())
    }
}

drop_by!(ImportedMr<'_>, unimport, |mr| "an imported memory region of {}", mr.pd.context().name());

impl std::fmt::Debug for ImportedMr<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedMr")
            .field("handle", &self.handle())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .field("len", &self.len())
            .finish()
    }
}
