//! Completion queues.
#![allow(unsafe_code)]

use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::device::Context;
use crate::error::{check_errno, check_ptr, Error, Result};
use crate::wc::WorkCompletion;

/// A completion queue (`struct ibv_cq`): where work requests report that they ended. It
/// borrows its [`Context`].
pub struct CompletionQueue<'ctx> {
    raw: NonNull<sys::ibv_cq>,
    ctx: &'ctx Context,
}

// SAFETY: providers serialise CQ access internally (ibv_poll_cq is thread-safe).
unsafe impl Send for CompletionQueue<'_> {}
// SAFETY: as above: polling through `&self` from several threads is allowed.
unsafe impl Sync for CompletionQueue<'_> {}

impl Context {
    /// `ibv_create_cq(3)`—Creates a completion queue for at least `cqe` entries.
    ///
    /// Size it for every WR that can be outstanding on the QPs that share it; an overrun
    /// moves those QPs to the error state.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `cqe` is 0 or above `i32::MAX`; [`Error::Verb`] from
    /// `ibv_create_cq` (`EINVAL` when above the device's `max_cqe`).
    #[doc(alias = "ibv_create_cq")]
    pub fn create_cq(&self, cqe: u32) -> Result<CompletionQueue<'_>> {
        let n = i32::try_from(cqe).ok().filter(|&n| n > 0).ok_or_else(|| {
            Error::InvalidInput(format!("a CQ needs 1..={} entries, not {cqe}", i32::MAX))
        })?;
        // SAFETY: a live context; no completion channel, no user context.
        let raw = unsafe {
            (self.library().fns.ibv_create_cq)(
                self.as_raw(),
                n,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                0,
            )
        };
        Ok(CompletionQueue { raw: check_ptr(raw, "ibv_create_cq")?, ctx: self })
    }
}

impl<'ctx> CompletionQueue<'ctx> {
    /// The number of entries actually allocated (at least what was asked).
    pub fn capacity(&self) -> u32 {
        // SAFETY: a live CQ; a plain field read.
        unsafe { (*self.raw.as_ptr()).cqe }.max(0) as u32
    }

    /// `ibv_poll_cq(3)`—Reaps up to `storage.len()` completions into `storage` and returns
    /// the filled prefix (empty when none is ready). Never blocks, never allocates.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] when the provider reports a polling failure.
    #[doc(alias = "ibv_poll_cq")]
    #[inline]
    pub fn poll<'a>(&self, storage: &'a mut [WorkCompletion]) -> Result<&'a mut [WorkCompletion]> {
        let n = i32::try_from(storage.len()).unwrap_or(i32::MAX);
        // SAFETY: a live CQ; `storage` is writable for `n` entries, and WorkCompletion is a
        // transparent ibv_wc.
        let ret =
            unsafe { sys::inline::ibv_poll_cq(self.as_raw(), n, storage.as_mut_ptr().cast()) };
        if ret < 0 {
            return Err(Error::verb("ibv_poll_cq", -ret));
        }
        Ok(&mut storage[..ret as usize])
    }

    /// The context.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The raw CQ pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_cq {
        self.raw.as_ptr()
    }

    /// `ibv_destroy_cq(3)`—Destroys the CQ, reporting failure (dropping logs instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`]: `EBUSY` while a QP created by other means still uses it; the CQ is
    /// then leaked.
    #[doc(alias = "ibv_destroy_cq")]
    pub fn destroy(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).destroy_raw()
    }

    fn destroy_raw(&self) -> Result<()> {
        // SAFETY: every QP using it borrows it, so none is alive; destroyed once.
        let ret = unsafe { (self.ctx.library().fns.ibv_destroy_cq)(self.as_raw()) };
        check_errno(ret, "ibv_destroy_cq")
    }
}

impl Drop for CompletionQueue<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_raw() {
            log::warn!("leaking a completion queue of {}: {e}", self.ctx.name());
        }
    }
}

impl std::fmt::Debug for CompletionQueue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("device", &self.ctx.name())
            .field("capacity", &self.capacity())
            .finish()
    }
}
