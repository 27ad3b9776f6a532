//! Completion queues, polled through the extended verbs where the provider has them.
#![allow(unsafe_code)]

mod acks;
mod attr;
mod completion;
mod create;
mod credits;
mod errors;
mod extended;
mod kept;
mod moderation;

use std::mem::MaybeUninit;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

pub(crate) use acks::EventAcks;
use acks::HeapAcks;
pub use attr::CqAttr;
pub use completion::Completion;
pub(crate) use credits::{Count, Credits};
pub(crate) use errors::CqErrors;
use kept::{Handing, Kept};

use crate::context::Context;
use crate::error::{check_errno, Error, InvalidInputKind, Result};
use crate::leak::drop_by;
use crate::verbs_path::VerbsPath;
use crate::wc::WorkCompletion;

/// A completion queue (`struct ibv_cq`, or `struct ibv_cq_ex` on the extended path): where
/// work requests report that they ended. It borrows its [`Context`].
///
/// Created through `ibv_create_cq_ex(3)` when the provider has it, else `ibv_create_cq(3)`
/// ([`CompletionQueue::verbs_path`] says which); polling is the same on both paths.
///
/// # Room for completions
///
/// A CQ holds [`capacity`](Self::capacity) completions; one more overruns it, and the
/// provider drops completions (rxe) or stops the CQ (mlx5), with an `IBV_EVENT_CQ_ERR` async
/// event its only sign. Once [`AsyncEvents`](crate::AsyncEvents) has read that event, the
/// CQ's next poll that finds nothing fails with [`Error::CompletionQueueOverrun`]. A full work queue does not protect it: providers free a slot when
/// they are done with a WR, not when its completion is polled (rxe as soon as its kernel
/// completed it, so a QP with `max_send_wr` 1 accepts any number of posts). So:
///
/// - creating a QP refuses CQs smaller than what that QP can have outstanding, and a CQ fed
///   by SRQs keeps each SRQ's [`max_wr`](crate::SharedReceiveQueue::max_wr) entries for
///   their receives (once per SRQ, however many of its QPs or DCTs complete here);
/// - the buffer tier counts every buffer posted to a QP completing here (signaled or not: a
///   flushed WR completes either way) until [`BufferPool::complete`](crate::BufferPool::complete)
///   hands it back, and refuses a post that could take the CQ past its capacity with
///   [`Error::CompletionsDue`], on every provider and verbs path. An SRQ holds its buffers to
///   its `max_wr` the same way. [`due`](Self::due) is the count;
/// - the raw tier, and [`bind_mw`](crate::QueuePair::bind_mw), are not counted: a program
///   posting raw WRs or binds keeps those outstanding on each CQ (posted and not yet polled,
///   flushed unsignaled ones included) within `capacity() - due()`.
///
/// Buffers of a QP destroyed without [`drain`](crate::QueuePair::drain) stay counted, as
/// their chunks stay in flight: completions of theirs may still be in the CQ.
#[must_use = "the completion queue is destroyed when dropped"]
pub struct CompletionQueue<'ctx> {
    raw: NonNull<sys::ibv_cq>,
    /// The extended CQ (the same object as `raw`), on the extended path.
    ex: Option<extended::ExCq>,
    /// The events it owes its channel (its `cq_context`), with a channel (see [`EventAcks`]).
    acks: Option<HeapAcks>,
    /// Completions polled but not handed over to a callback that panicked, which the next
    /// poll returns first; with whether it is polled in sessions (`ex`'s
    /// [`ExCq::in_sessions`](extended::ExCq::in_sessions)), in the one byte a poll tests.
    kept: Kept,
    /// The completions due on it from buffer-tier posts, and kept for SRQs' receives.
    credits: Credits,
    ctx: &'ctx Context,
}

// SAFETY: providers serialise CQ access internally (ibv_poll_cq is thread-safe, and an
// extended CQ's polling session holds the provider's CQ lock).
unsafe impl Send for CompletionQueue<'_> {}
// SAFETY: as above: polling through `&self` from several threads is allowed.
unsafe impl Sync for CompletionQueue<'_> {}

impl<'ctx> CompletionQueue<'ctx> {
    /// The number of entries actually allocated (at least what was asked).
    pub fn capacity(&self) -> u32 {
        // SAFETY: a live CQ; a plain field read.
        unsafe { (*self.raw.as_ptr()).cqe }.max(0) as u32
    }

    /// The completions due on this CQ as the buffer tier counts them: one per buffer posted
    /// to a QP completing here and not yet handed back by
    /// [`BufferPool::complete`](crate::BufferPool::complete) (signaled or not: a flushed WR
    /// completes either way), plus, for each SRQ feeding its QPs' receives, that SRQ's
    /// [`max_wr`](crate::SharedReceiveQueue::max_wr). A buffer-tier post that would take it
    /// past [`capacity`](Self::capacity) is refused with [`Error::CompletionsDue`].
    ///
    /// Work requests posted through the raw tier are not counted: a program mixing tiers on
    /// one CQ keeps its raw WRs outstanding (posted and not yet polled) within
    /// `capacity() - due()`, as the raw posts' contracts say.
    pub fn due(&self) -> u32 {
        self.credits.taken() + self.credits.held()
    }

    /// Its buffer-tier credits, which the QPs completing here take.
    pub(crate) fn credits(&self) -> &Credits {
        &self.credits
    }

    /// `ibv_poll_cq(3)`, or `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` on a CQ with
    /// timestamps—Reaps up to `storage.len()` completions into `storage` and returns the
    /// filled prefix (empty when none is ready). Never blocks, never allocates.
    ///
    /// One provider call and one lock of the provider's CQ per batch: an extended CQ without
    /// timestamps is polled through the provider's `poll_cq` op too (it polls the same CQ,
    /// see [`Context::create_cq_with`]), one with timestamps in one session per batch (one
    /// per completion on rxe without rdma-core PR 1617, whose `ibv_next_poll` ends the
    /// session itself). In a session the completions are read field by field
    /// (`ibv_wc_read_*`); the result is the same, except `pkey_index`, which the extended CQ
    /// does not report (0). When polling fails after some completions were read, those are
    /// returned and the failure is left for the next call. Completions taken from the
    /// provider by [`poll_with`](Self::poll_with) (or [`QueuePair::drain`](crate::QueuePair::drain))
    /// and not handed over, because the callback panicked, come first, alone.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] when the provider reports a polling failure;
    /// [`Error::CompletionQueueOverrun`], once, when nothing was polled and the device had
    /// reported this CQ in error (see
    /// [Room for completions](CompletionQueue#room-for-completions)).
    #[doc(alias = "ibv_poll_cq")]
    #[doc(alias = "ibv_start_poll")]
    #[inline]
    pub fn poll<'a>(&self, storage: &'a mut [WorkCompletion]) -> Result<&'a mut [WorkCompletion]> {
        let polled = if self.kept.poll_cq_alone() {
            self.poll_legacy(storage)?
        } else {
            poll_sessions(self, storage)?
        };
        if polled.is_empty() && self.ctx.cq_errors().any() {
            self.reported_error()?;
        }
        Ok(polled)
    }

    /// `poll` through `ibv_poll_cq`.
    #[inline(always)]
    fn poll_legacy<'a>(
        &self,
        storage: &'a mut [WorkCompletion],
    ) -> Result<&'a mut [WorkCompletion]> {
        let n = i32::try_from(storage.len()).unwrap_or(i32::MAX);
        // SAFETY: a live CQ; `storage` is writable for `n` entries, and WorkCompletion is a
        // transparent ibv_wc.
        let ret =
            unsafe { sys::inline::ibv_poll_cq(self.as_raw(), n, storage.as_mut_ptr().cast()) };
        if ret < 0 {
            return Err(poll_error("ibv_poll_cq", -ret));
        }
        // (A provider returns at most `n`.)
        let got = (ret as usize).min(storage.len());
        Ok(&mut storage[..got])
    }

    /// Reaps up to `max` completions and hands each to `f` as a [`Completion`], which also
    /// carries the completion timestamp on a CQ created with [`CqAttr::timestamps`] (device
    /// clock cycles), mutable so that [`BufferPool::complete`](crate::BufferPool::complete)
    /// takes it. Returns how many were handed over. Never blocks, never allocates: the
    /// completions are polled as [`CompletionQueue::poll`] does, 16 at a time into an array on
    /// the stack, and `f` runs between polls (never inside a provider's polling session, so it
    /// may poll too). Should `f` panic, the completions polled with the one it was given stay
    /// with the CQ, and its next poll returns them: none is lost (allocating, then, to keep
    /// them).
    ///
    /// # Errors
    ///
    /// As [`CompletionQueue::poll`].
    #[doc(alias = "ibv_wc_read_completion_ts")]
    #[inline]
    pub fn poll_with(&self, max: usize, mut f: impl FnMut(&mut Completion)) -> Result<usize> {
        let mut chunk = [const { MaybeUninit::<Completion>::uninit() }; CHUNK];
        let mut done = 0;
        while done < max {
            let want = (max - done).min(CHUNK);
            let got = self.fill(&mut chunk[..want])?;
            // (`fill` initialised the first `got` entries.)
            let mut handing = Handing::new(self, &mut chunk[..got]);
            while let Some(c) = handing.next() {
                f(c);
            }
            done += got;
            if got < want {
                break;
            }
        }
        if done == 0 && self.ctx.cq_errors().any() {
            self.reported_error()?;
        }
        Ok(done)
    }

    /// Polls into `storage` as [`CompletionQueue::poll`] and hands each completion to `f`, as
    /// [`CompletionQueue::poll_with`] does (keeping those not handed over should `f` panic);
    /// returns how many.
    pub(crate) fn poll_each(
        &self,
        storage: &mut [WorkCompletion],
        mut f: impl FnMut(&mut WorkCompletion),
    ) -> Result<usize> {
        let got = self.poll(storage)?.len();
        let mut handing = Handing::new(self, &mut storage[..got]);
        while let Some(wc) = handing.next() {
            f(wc);
        }
        Ok(got)
    }

    /// Polls up to `chunk.len()` (at most [`CHUNK`]) completions into the start of `chunk`
    /// and returns how many: read in place in a session, or polled and copied over; those a
    /// callback was not given come first.
    #[inline]
    fn fill(&self, chunk: &mut [MaybeUninit<Completion>]) -> Result<usize> {
        if !self.kept.is_empty() {
            return Ok(self.kept.take(chunk));
        }
        if let Some(ex) = self.ex.as_ref().filter(|_| self.kept.in_sessions()) {
            return ex.drain(chunk);
        }
        let mut wcs = [WorkCompletion::EMPTY; CHUNK];
        let want = chunk.len().min(CHUNK);
        let got = self.poll_legacy(&mut wcs[..want])?.len();
        for (slot, wc) in chunk.iter_mut().zip(wcs).take(got) {
            slot.write(Completion::new(wc, None));
        }
        Ok(got)
    }

    /// Busy-polls until `n` completions have arrived in `storage` or `timeout` passes;
    /// returns the `n` completions (the prefix of `storage` they fill). For tests, examples
    /// and set-up steps that know how many completions are due; a data path sleeps on a
    /// [`CompletionChannel`](crate::CompletionChannel) instead.
    ///
    /// # Errors
    ///
    /// [`Error::CompletionTimeout`] naming how many arrived (they are `storage[..arrived]`)
    /// when `timeout` passes first; [`Error::InvalidInput`] ([`InvalidInputKind::Size`]) when
    /// `storage` has room for fewer than `n`; otherwise as [`CompletionQueue::poll`].
    pub fn wait_for<'a>(
        &self,
        n: usize,
        timeout: std::time::Duration,
        storage: &'a mut [WorkCompletion],
    ) -> Result<&'a mut [WorkCompletion]> {
        if storage.len() < n {
            return Err(Error::invalid(
                InvalidInputKind::Size,
                format!("waiting for {n} completions needs room for {n}, not {}", storage.len()),
            ));
        }
        let start = std::time::Instant::now();
        let mut arrived = 0;
        while arrived < n {
            arrived += self.poll(&mut storage[arrived..n])?.len();
            if arrived < n && start.elapsed() >= timeout {
                return Err(Error::CompletionTimeout { expected: n, arrived, timeout });
            }
        }
        Ok(&mut storage[..n])
    }

    /// Polls, and while nothing has completed sleeps on `channel` (the channel this CQ was
    /// created with, and armed with [`req_notify`](Self::req_notify) before the first call),
    /// for at most `timeout` in all; returns what one poll brought (the prefix of `storage` it
    /// fills), empty only when nothing completed in that time. Each event re-arms the CQ
    /// before it is polled again (see [the event loop](crate::CompletionChannel#the-event-loop)),
    /// so it stays armed for the next call. Sleeping rather than busy polling leaves the CPU
    /// to other threads and to a provider that works in the kernel (Soft-RoCE).
    ///
    /// # Errors
    ///
    /// As [`CompletionQueue::poll`], [`CompletionChannel::wait`](crate::CompletionChannel::wait)
    /// and [`CompletionQueue::req_notify`].
    pub fn poll_blocking<'a>(
        &self,
        channel: &crate::CompletionChannel<'_>,
        storage: &'a mut [WorkCompletion],
        timeout: std::time::Duration,
    ) -> Result<&'a mut [WorkCompletion]> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let n = self.poll(storage)?.len();
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if n > 0 || left.is_zero() {
                return Ok(&mut storage[..n]);
            }
            // An event means the CQ fired and disarmed itself: re-arm before polling again.
            if channel.wait(Some(left))? > 0 {
                self.req_notify(false)?;
            }
        }
    }

    /// Which verbs this CQ was created and is polled with.
    pub fn verbs_path(&self) -> VerbsPath {
        if self.ex.is_some() {
            VerbsPath::Extended
        } else {
            VerbsPath::Legacy
        }
    }

    /// The device clock that [`Completion::timestamp`] counts in, in kHz
    /// (`ibv_device_attr_ex.hca_core_clock`), when this CQ was created with
    /// [`CqAttr::timestamps`].
    pub fn timestamp_clock_khz(&self) -> Option<u64> {
        self.ex.as_ref().and_then(|ex| ex.clock_khz)
    }

    /// `ibv_req_notify_cq(3)`—Arms the CQ: its next completion (with `solicited_only`, its
    /// next solicited or error completion) raises one event on its
    /// [`CompletionChannel`](crate::CompletionChannel), and disarms it again.
    ///
    /// Re-arm before polling, never after (see
    /// [the event loop](crate::CompletionChannel#the-event-loop)). On a CQ without a channel the
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
    #[inline(always)]
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

    /// The raw extended CQ (the same object as [`as_raw`](Self::as_raw)), on the extended
    /// path.
    pub fn as_raw_ex(&self) -> Option<*mut sys::ibv_cq_ex> {
        self.ex.as_ref().map(|ex| ex.raw.as_ptr())
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

    /// Destroys the CQ once: on failure it and its event counter are leaked.
    fn destroy_raw(&mut self) -> Result<()> {
        let fns = &self.ctx.library().fns;
        if self.ctx.cq_errors().any() {
            // (Another CQ may be given this address.)
            self.ctx.cq_errors().take(self.id());
        }
        if let Some(acks) = &self.acks {
            // SAFETY: the live CQ whose `cq_context` the counter is.
            unsafe { acks.close(fns, self.as_raw()) };
        }
        // SAFETY: every QP using it borrows it, so none is alive; destroyed once (`Drop` does
        // not run after `destroy`).
        let ret = unsafe { (fns.ibv_destroy_cq)(self.as_raw()) };
        let acks = self.acks.take();
        if ret != 0 {
            // The CQ lives on, and may still hand the counter's address back.
            std::mem::forget(acks);
        }
        check_errno(ret, "ibv_destroy_cq")
    }
}

drop_by!(CompletionQueue<'_>, destroy_raw, |cq| "a completion queue of {}", cq.ctx.name());

impl std::fmt::Debug for CompletionQueue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueue")
            .field("device", &self.ctx.name())
            .field("capacity", &self.capacity())
            .field("verbs_path", &self.verbs_path())
            .finish()
    }
}

/// The completions [`CompletionQueue::poll_with`] reads per poll, into an array on the stack.
const CHUNK: usize = 16;

/// [`CompletionQueue::poll`] in sessions, or of the completions a callback was not given,
/// out of line so that the `poll_cq` path's few instructions inline into the caller.
#[inline(never)]
fn poll_sessions<'a>(
    cq: &CompletionQueue<'_>,
    storage: &'a mut [WorkCompletion],
) -> Result<&'a mut [WorkCompletion]> {
    if !cq.kept.is_empty() {
        let n = cq.kept.take(storage);
        return Ok(&mut storage[..n]);
    }
    let Some(ex) = &cq.ex else { return cq.poll_legacy(storage) };
    let n = ex.drain(storage)?;
    Ok(&mut storage[..n])
}

/// The error of a failed poll verb: `errno` is what it reported (positive).
#[cold]
fn poll_error(verb: &'static str, errno: i32) -> Error {
    match errno {
        libc::EOPNOTSUPP => Error::verb(verb, libc::EOPNOTSUPP),
        // ibv_poll_cq(3) promises only "a negative value" (mlx5 returns -2, not an errno).
        _ => Error::verb(verb, libc::EIO).with_hint(format!(
            "the provider returned {errno}: the CQ is broken (overrun, or the device \
             failed); check the QPs' state and the kernel log"
        )),
    }
}
