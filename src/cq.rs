//! Completion queues.
#![allow(unsafe_code)]

use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::channel::CompletionChannel;
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
        self.create_cq_on(cqe, std::ptr::null_mut(), 0)
    }

    /// `ibv_create_cq(3)`—Creates a completion queue for at least `cqe` entries whose
    /// events go to `channel`, interrupting through completion vector `comp_vector` (below
    /// the context's `num_comp_vectors`; 0 always exists).
    ///
    /// Events fire only once armed with [`CompletionQueue::req_notify`]. The CQ borrows the
    /// channel, so the channel outlives it:
    ///
    /// ```compile_fail,E0597
    /// # fn f(ctx: &rdma_verbs::Context) -> rdma_verbs::Result<()> {
    /// let cq = {
    ///     let channel = ctx.create_comp_channel()?;
    ///     ctx.create_cq_with_channel(16, &channel, 0)?
    /// }; // error: `channel` dropped while still borrowed
    /// # drop(cq); Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `cqe` is 0 or above `i32::MAX`, when `channel` belongs
    /// to another context, or when `comp_vector` is not below `num_comp_vectors`;
    /// [`Error::Verb`] from `ibv_create_cq` (`EINVAL` when above the device's `max_cqe`).
    ///
    /// # References
    ///
    /// <https://man7.org/linux/man-pages/man3/ibv_create_cq.3.html>
    #[doc(alias = "ibv_create_cq")]
    pub fn create_cq_with_channel<'a>(
        &'a self,
        cqe: u32,
        channel: &'a CompletionChannel<'_>,
        comp_vector: u32,
    ) -> Result<CompletionQueue<'a>> {
        if !std::ptr::eq(channel.context(), self) {
            return Err(Error::InvalidInput(format!(
                "the completion channel belongs to device {}, not to this context of {}",
                channel.context().name(),
                self.name()
            )));
        }
        // SAFETY: a live context; a plain field read.
        let vectors = unsafe { (*self.as_raw()).num_comp_vectors };
        let vector = i32::try_from(comp_vector).ok().filter(|&v| v < vectors).ok_or_else(|| {
            Error::InvalidInput(format!(
                "completion vector {comp_vector} does not exist: {} has vectors 0..{vectors}",
                self.name()
            ))
        })?;
        self.create_cq_on(cqe, channel.as_raw(), vector)
    }

    fn create_cq_on(
        &self,
        cqe: u32,
        channel: *mut sys::ibv_comp_channel,
        comp_vector: i32,
    ) -> Result<CompletionQueue<'_>> {
        let n = i32::try_from(cqe).ok().filter(|&n| n > 0).ok_or_else(|| {
            Error::InvalidInput(format!("a CQ needs 1..={} entries, not {cqe}", i32::MAX))
        })?;
        // SAFETY: a live context; `channel` is NULL or a live channel of this context that
        // the caller keeps alive as long as the CQ; no user context.
        let raw = unsafe {
            (self.library().fns.ibv_create_cq)(
                self.as_raw(),
                n,
                std::ptr::null_mut(),
                channel,
                comp_vector,
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
            // ibv_poll_cq(3) promises only "a negative value" (mlx5 returns -2, not an errno).
            return Err(match -ret {
                libc::EOPNOTSUPP => Error::verb("ibv_poll_cq", libc::EOPNOTSUPP),
                _ => Error::verb("ibv_poll_cq", libc::EIO).with_hint(format!(
                    "the provider returned {ret}: the CQ is broken (overrun, or the device \
                     failed); check the QPs' state and the kernel log"
                )),
            });
        }
        Ok(&mut storage[..ret as usize])
    }

    /// `ibv_req_notify_cq(3)`—Arms the CQ: its next completion (with `solicited_only`, its
    /// next solicited or error completion) raises one event on its
    /// [`CompletionChannel`], and disarms it again.
    ///
    /// Re-arm before polling, never after (see
    /// [the event loop](CompletionChannel#the-event-loop)). On a CQ without a channel the
    /// event goes nowhere.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from the provider's `req_notify_cq`; [`Error::Unsupported`] when it
    /// has none.
    ///
    /// # References
    ///
    /// <https://man7.org/linux/man-pages/man3/ibv_req_notify_cq.3.html>
    #[doc(alias = "ibv_req_notify_cq")]
    #[inline]
    pub fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: a live CQ.
        let ret = unsafe { sys::inline::ibv_req_notify_cq(self.as_raw(), solicited_only.into()) };
        check_errno(ret, "ibv_req_notify_cq")
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
