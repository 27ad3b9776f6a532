//! Protection domains.
#![allow(unsafe_code)]

use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::context::Context;
use crate::error::{check_errno, check_ptr, Result};
use crate::leak::drop_by;

/// A protection domain (`struct ibv_pd`): groups the memory regions and queue pairs that may
/// be used together. It borrows its [`Context`], so it cannot outlive it.
///
/// Allocated here ([`Context::alloc_pd`]) it is deallocated when dropped; imported from
/// another process ([`Context::import_pd`]) it is the other process's, and dropping it
/// only unimports it (`ibv_unimport_pd`), leaving the domain to its owner.
///
/// ```compile_fail,E0597
/// # fn f() -> rdma_verbs::Result<()> {
/// let pd = {
///     let ctx = rdma_verbs::Context::open_first()?;
///     ctx.alloc_pd()?
/// }; // error: `ctx` dropped while still borrowed
/// # drop(pd); Ok(()) }
/// ```
#[must_use = "the protection domain is deallocated when dropped"]
pub struct ProtectionDomain<'ctx> {
    raw: NonNull<sys::ibv_pd>,
    ctx: &'ctx Context,
    /// Made by `ibv_import_pd`: released with `ibv_unimport_pd`, never deallocated.
    imported: bool,
}

// SAFETY: verbs on a PD are thread-safe; the handle is only read after creation.
unsafe impl Send for ProtectionDomain<'_> {}
// SAFETY: as above.
unsafe impl Sync for ProtectionDomain<'_> {}

impl Context {
    /// `ibv_alloc_pd(3)`—Allocates a protection domain.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb) from `ibv_alloc_pd` (`ENOMEM`: out of resources).
    #[doc(alias = "ibv_alloc_pd")]
    pub fn alloc_pd(&self) -> Result<ProtectionDomain<'_>> {
        // SAFETY: a live context.
        let raw = unsafe { (self.library().fns.ibv_alloc_pd)(self.as_raw()) };
        Ok(ProtectionDomain { raw: check_ptr(raw, "ibv_alloc_pd")?, ctx: self, imported: false })
    }
}

impl<'ctx> ProtectionDomain<'ctx> {
    /// Wraps a PD `ibv_import_pd` returned on `ctx`.
    pub(crate) fn imported(raw: NonNull<sys::ibv_pd>, ctx: &'ctx Context) -> Self {
        ProtectionDomain { raw, ctx, imported: true }
    }

    /// Whether it was imported ([`Context::import_pd`]): dropping it then unimports it
    /// instead of deallocating it.
    pub fn is_imported(&self) -> bool {
        self.imported
    }

    /// The context this PD belongs to.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The raw PD pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_pd {
        self.raw.as_ptr()
    }

    /// `ibv_dealloc_pd(3)`—Deallocates the PD, reporting failure (dropping leaks it instead).
    /// An imported PD is unimported instead (`ibv_unimport_pd`, `ibv_import_pd(3)`), which
    /// does not fail: its owner deallocates it.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb): `EBUSY` while objects created by other means
    /// (raw pointers), or by a process that imported it, still use it; the PD is then
    /// leaked.
    #[doc(alias = "ibv_dealloc_pd")]
    pub fn destroy(self) -> Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        this.dealloc()
    }

    fn dealloc(&self) -> Result<()> {
        if self.imported {
            return crate::import::unimport_pd(self);
        }
        // SAFETY: every child borrows the PD, so none is alive; deallocated once.
        let ret = unsafe { (self.ctx.library().fns.ibv_dealloc_pd)(self.as_raw()) };
        check_errno(ret, "ibv_dealloc_pd")
    }
}

drop_by!(ProtectionDomain<'_>, dealloc, |pd| "a protection domain of {}", pd.ctx.name());

impl std::fmt::Debug for ProtectionDomain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectionDomain").field("device", &self.ctx.name()).finish()
    }
}
