//! Thread domains and parent domains (`ibv_alloc_td(3)`, `ibv_alloc_parent_domain(3)`): a
//! [`ThreadDomain`] is the program's promise that what is bound to it is used by one thread
//! at a time, so the provider may leave out its locks (mlx5 also gives each TD a doorbell of
//! its own); a [`ParentDomain`] is a PD bound to a PD and a TD, on which such objects are
//! created. NVIDIA ConnectX (mlx5), EFA and hns offer them; rxe and siw do not.
//!
//! Only their allocation is offered so far: queue pairs and completion queues created on a
//! parent domain come later. Such an object is unlocked in the provider, so it must be
//! `!Sync` and stay on the thread that holds its domain, which the types here already
//! arrange for: a [`ThreadDomain`] is `Send` but not `Sync`, so the parent domains that
//! borrow it (neither `Send` nor `Sync`) all live on the thread that holds it.
#![allow(unsafe_code)]
//! # Safety
//!
//! A [`ThreadDomain`] owns an `ibv_td` until `ibv_dealloc_td`, a [`ParentDomain`] an `ibv_pd`
//! until `ibv_dealloc_pd`; each borrows what it was made from, so it is freed first.

use std::cell::Cell;
use std::marker::PhantomData;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::context::Context;
use crate::error::{check_errno, check_ptr, Error, InvalidInputKind, Result};
use crate::leak::drop_by;
use crate::pd::ProtectionDomain;

/// A thread domain (`struct ibv_td`, `ibv_alloc_td(3)`): what is bound to it (through a
/// [`ParentDomain`]) is used by one thread at a time, and the provider may skip its locks.
///
/// It borrows its [`Context`], so it cannot outlive it:
///
/// ```compile_fail,E0597
/// # fn f() -> rdma_verbs::Result<()> {
/// let td = {
///     let ctx = rdma_verbs::Context::open_first()?;
///     ctx.alloc_td()?
/// }; // error: `ctx` dropped while still borrowed
/// # drop(td); Ok(()) }
/// ```
///
/// `Send`, not `Sync`: it moves between threads, but is never shared by two, so every
/// parent domain of it is on one thread.
///
/// ```compile_fail,E0277
/// fn shared<T: Sync>(_: &T) {}
/// # fn f(ctx: &rdma_verbs::Context) -> rdma_verbs::Result<()> {
/// shared(&ctx.alloc_td()?); // error: `Cell<()>` cannot be shared between threads safely
/// # Ok(()) }
/// ```
#[must_use = "the thread domain is deallocated when dropped"]
pub struct ThreadDomain<'ctx> {
    raw: NonNull<sys::ibv_td>,
    ctx: &'ctx Context,
    /// `!Sync`: what is bound to the domain is single-threaded.
    _one_thread: PhantomData<Cell<()>>,
}

// SAFETY: allocation and deallocation of a TD are thread-safe verbs; nothing bound to it can
// be moved along while it is borrowed.
unsafe impl Send for ThreadDomain<'_> {}

impl Context {
    /// `ibv_alloc_td(3)`—Allocates a thread domain.
    ///
    /// # Errors
    ///
    /// - [`Error::Unsupported`] when the provider has no thread domains (rxe, siw: libibverbs'
    ///   stub answers `EOPNOTSUPP`) or the loaded libibverbs' context has no `alloc_td` op
    ///   (before rdma-core v17).
    /// - [`Error::Verb`] from `ibv_alloc_td`: `ENOMEM` when the device's doorbells are used
    ///   up.
    #[doc(alias = "ibv_alloc_td")]
    pub fn alloc_td(&self) -> Result<ThreadDomain<'_>> {
        let mut attr = sys::ibv_td_init_attr { comp_mask: 0 };
        // SAFETY: a live context and a readable attribute struct.
        let raw = unsafe { sys::inline::ibv_alloc_td(self.as_raw(), &mut attr) };
        let raw = check_ptr(raw, "ibv_alloc_td")?;
        Ok(ThreadDomain { raw, ctx: self, _one_thread: PhantomData })
    }
}

impl<'ctx> ThreadDomain<'ctx> {
    /// The context it belongs to.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The raw TD pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_td {
        self.raw.as_ptr()
    }

    /// `ibv_dealloc_td(3)`—Deallocates the thread domain, reporting failure (dropping logs
    /// instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_dealloc_td` (the domain is then leaked): `EBUSY` while a
    /// parent domain made by other means (raw pointers) is bound to it.
    #[doc(alias = "ibv_dealloc_td")]
    pub fn destroy(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).dealloc()
    }

    fn dealloc(&self) -> Result<()> {
        // SAFETY: every parent domain of it borrows it, so none is alive; deallocated once.
        let ret = unsafe { sys::inline::ibv_dealloc_td(self.as_raw()) };
        check_errno(ret, "ibv_dealloc_td")
    }
}

drop_by!(ThreadDomain<'_>, dealloc, |td| "a thread domain of {}", td.ctx.name());

impl std::fmt::Debug for ThreadDomain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadDomain").field("device", &self.ctx.name()).finish()
    }
}

/// A parent domain (`ibv_alloc_parent_domain(3)`): a PD bound to a [`ProtectionDomain`] and a
/// [`ThreadDomain`], on which single-threaded objects are made. It borrows both, so it
/// cannot outlive either:
///
/// ```compile_fail,E0597
/// # fn f(pd: &rdma_verbs::ProtectionDomain<'_>) -> rdma_verbs::Result<()> {
/// let parent = {
///     let td = pd.context().alloc_td()?;
///     pd.alloc_parent_domain(&td)?
/// }; // error: `td` dropped while still borrowed
/// # drop(parent); Ok(()) }
/// ```
///
/// Neither `Send` nor `Sync`: it stays on the thread that holds its thread domain.
///
/// ```compile_fail,E0277
/// fn moved<T: Send>(_: T) {}
/// # fn f(pd: &rdma_verbs::ProtectionDomain<'_>, td: &rdma_verbs::ThreadDomain<'_>) -> rdma_verbs::Result<()> {
/// moved(pd.alloc_parent_domain(td)?); // error: it cannot be sent between threads safely
/// # Ok(()) }
/// ```
#[must_use = "the parent domain is deallocated when dropped"]
pub struct ParentDomain<'a> {
    raw: NonNull<sys::ibv_pd>,
    pd: &'a ProtectionDomain<'a>,
    td: &'a ThreadDomain<'a>,
}

impl<'a> ProtectionDomain<'a> {
    /// `ibv_alloc_parent_domain(3)`—Allocates a parent domain of this PD bound to `td`.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] when `td` belongs to another context than the PD.
    /// - [`Error::Unsupported`] when the provider or the loaded libibverbs has no
    ///   `alloc_parent_domain` op (rdma-core v17 added it).
    /// - [`Error::Verb`] from `ibv_alloc_parent_domain`.
    #[doc(alias = "ibv_alloc_parent_domain")]
    pub fn alloc_parent_domain(&'a self, td: &'a ThreadDomain<'a>) -> Result<ParentDomain<'a>> {
        if td.context().as_raw() != self.context().as_raw() {
            return Err(Error::invalid(
                InvalidInputKind::OtherContext,
                format!(
                    "a thread domain of {} cannot be bound to a protection domain of {}: \
                     allocate both from one context",
                    td.context().name(),
                    self.context().name()
                ),
            ));
        }
        let mut attr = sys::ibv_parent_domain_init_attr {
            pd: self.as_raw(),
            td: td.as_raw(),
            ..Default::default()
        };
        // SAFETY: a live context, and a readable attribute naming its live PD and TD, which
        // the parent domain borrows.
        let raw =
            unsafe { sys::inline::ibv_alloc_parent_domain(self.context().as_raw(), &mut attr) };
        Ok(ParentDomain { raw: check_ptr(raw, "ibv_alloc_parent_domain")?, pd: self, td })
    }
}

impl<'a> ParentDomain<'a> {
    /// The protection domain it is bound to.
    pub fn pd(&self) -> &'a ProtectionDomain<'a> {
        self.pd
    }

    /// The thread domain it is bound to.
    pub fn td(&self) -> &'a ThreadDomain<'a> {
        self.td
    }

    /// The raw pointer: an `ibv_pd`.
    pub fn as_raw(&self) -> *mut sys::ibv_pd {
        self.raw.as_ptr()
    }

    /// `ibv_dealloc_pd(3)`—Deallocates the parent domain, reporting failure (dropping logs
    /// instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_dealloc_pd` (the domain is then leaked): `EBUSY` while
    /// objects made by other means (raw pointers) still use it.
    #[doc(alias = "ibv_dealloc_pd")]
    pub fn destroy(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).dealloc()
    }

    fn dealloc(&self) -> Result<()> {
        let fns = &self.pd.context().library().fns;
        // SAFETY: a live parent domain, freed as a PD (as `ibv_alloc_parent_domain(3)` says);
        // nothing made here uses it; deallocated once.
        let ret = unsafe { (fns.ibv_dealloc_pd)(self.as_raw()) };
        check_errno(ret, "ibv_dealloc_pd")
    }
}

drop_by!(ParentDomain<'_>, dealloc, |parent| "a parent domain of {}", parent.pd.context().name());

impl std::fmt::Debug for ParentDomain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParentDomain").field("device", &self.pd.context().name()).finish()
    }
}
