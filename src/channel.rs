//! Completion channels: sleeping until a completion queue has something to poll.
#![allow(unsafe_code)]
//! # Safety
//!
//! A [`CompletionChannel`] owns an `ibv_comp_channel` until `ibv_destroy_comp_channel`; every
//! CQ created on it borrows it, so none outlives it. Its file descriptor starts blocking, as
//! C's, so that an unbounded wait is the one blocking `read(2)` of `ibv_get_cq_event`; every
//! call that must not block (a timed wait, draining) first makes sure it is `O_NONBLOCK`,
//! setting the flag when it is not (it is not remembered: a program may clear it on a
//! duplicate of the descriptor, which shares it), so no such call can block in a read,
//! whichever thread takes the event. Every event
//! read with `ibv_get_cq_event` is acknowledged with `ibv_ack_cq_events` before its CQ is
//! destroyed (`ibv_destroy_cq` would otherwise block forever): the CQ owes it (`EventAcks`,
//! its `cq_context`) and acknowledges all it owes in one call right before the destroy; one
//! read during the destroy is acknowledged at once.

// Design notes. Acknowledgements are batched per CQ, as ibv_get_cq_event(3) advises: each
// takes the CQ's mutex and signals a condition variable, which cost more instructions than
// reading the event. `wait` returns only a count, not which CQ the events named: a CQ may be
// destroyed the moment its event is acknowledged, so the pointer would be useless, and with
// several CQs on one channel the loop re-arms and polls each of them anyway.

use std::os::fd::{AsFd, BorrowedFd};
use std::ptr::NonNull;
use std::time::Duration;

use rdma_verbs_sys as sys;

use crate::context::Context;
use crate::cq::EventAcks;
use crate::error::{check_errno, check_ptr, errno_of, Error, Result};
use crate::fd;
use crate::leak::drop_by;

/// A completion channel (`struct ibv_comp_channel`): a file descriptor that becomes readable
/// when an armed [`CompletionQueue`](crate::CompletionQueue) created on it gets a completion.
/// It borrows its [`Context`]; CQs created on it with [`Context::create_cq_with_channel`]
/// borrow it in turn.
///
/// # The event loop
///
/// An event fires once per [`req_notify`](crate::CompletionQueue::req_notify): arm the CQ,
/// poll it until empty, sleep in [`wait`](Self::wait), then **re-arm before polling again**.
/// Re-arming after polling instead would lose a completion that lands in between: it is not
/// polled, and it raises no event, since the CQ was not armed when it arrived.
///
/// ```no_run
/// use std::time::Duration;
/// use rdma_verbs::*;
///
/// # fn main() -> Result<()> {
/// let ctx = Context::open("rxe0")?;
/// let channel = ctx.create_comp_channel()?;
/// let cq = ctx.create_cq_with_channel(64, &channel, 0)?;
/// // ... create QPs on `cq` and post work ...
/// let mut wcs = [WorkCompletion::EMPTY; 16];
/// cq.req_notify(false)?;
/// loop {
///     // Reap what is there: completions that came before the CQ was armed raise no event.
///     loop {
///         let done = cq.poll(&mut wcs)?;
///         if done.is_empty() {
///             break;
///         }
///         // ... handle `done` ...
///     }
///     if channel.wait(Some(Duration::from_secs(5)))? == 0 {
///         continue; // timed out: nothing completed
///     }
///     cq.req_notify(false)?; // re-arm, then poll
/// }
/// # }
/// ```
///
/// The descriptor ([`AsFd`]) can also go into an `epoll` set or an async runtime's reactor:
/// when it is readable, call [`try_get_events`](Self::try_get_events).
#[must_use = "the channel is destroyed when dropped"]
pub struct CompletionChannel<'ctx> {
    raw: NonNull<sys::ibv_comp_channel>,
    ctx: &'ctx Context,
}

// SAFETY: the channel is a file descriptor; libibverbs' channel calls are thread-safe.
unsafe impl Send for CompletionChannel<'_> {}
// SAFETY: waiting from several threads is safe: each event is read by exactly one thread,
// which has it acknowledged; a thread whose wait must not block reads only after it made
// sure the descriptor is non-blocking.
unsafe impl Sync for CompletionChannel<'_> {}

impl Context {
    /// `ibv_create_comp_channel(3)`—Creates a completion channel. Its file descriptor is
    /// blocking, as C's, until the first call that must not block (a timed
    /// [`wait`](CompletionChannel::wait), [`try_get_events`](CompletionChannel::try_get_events))
    /// sets `O_NONBLOCK` on it; each such call sets it again if the program cleared it.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb) from `ibv_create_comp_channel` (`EMFILE`/`ENFILE`:
    /// out of file descriptors; `ENOMEM`).
    ///
    /// # References
    ///
    /// <https://man7.org/linux/man-pages/man3/ibv_create_comp_channel.3.html>
    #[doc(alias = "ibv_create_comp_channel")]
    pub fn create_comp_channel(&self) -> Result<CompletionChannel<'_>> {
        // SAFETY: a live context.
        let raw = unsafe { (self.library().fns.ibv_create_comp_channel)(self.as_raw()) };
        let raw = check_ptr(raw, "ibv_create_comp_channel")?;
        Ok(CompletionChannel { raw, ctx: self })
    }
}

impl<'ctx> CompletionChannel<'ctx> {
    /// Sleeps until an armed CQ of this channel gets a completion or `timeout` passes (`None`:
    /// no limit), then reads one event. Its acknowledgement (`ibv_ack_cq_events(3)`) is
    /// batched: the CQ acknowledges the events it owes in one call when it is destroyed (or
    /// every 2^20 events).
    ///
    /// Returns 1, or 0 only when `timeout` passed. The event means an armed CQ fired, and
    /// disarmed it: re-arm with [`req_notify`](crate::CompletionQueue::req_notify), then poll
    /// (see [the event loop](CompletionChannel#the-event-loop)). With several CQs on the
    /// channel, events still pending make the next call return at once. Signals do not end
    /// the wait early. Allocates nothing and reads no clock.
    ///
    /// - `None`, while the descriptor is blocking (no timed wait or
    ///   [`try_get_events`](Self::try_get_events) yet): the blocking `ibv_get_cq_event(3)`, one
    ///   `read(2)`, exactly as C.
    /// - A timeout: `fcntl(2)` makes sure the descriptor is non-blocking (setting `O_NONBLOCK`
    ///   if it is not, and leaving it set); then an event already pending costs one
    ///   `read(2)`; otherwise a `read(2)` that finds nothing, `ppoll(2)` to sleep until the
    ///   deadline, `fcntl` again and the `read(2)` of the event. `None` on a non-blocking
    ///   descriptor reads, sleeps and reads the same way, without the `fcntl`.
    ///
    /// With several threads waiting, each event ends one wait; a timed wait ends on time even
    /// while another thread sleeps in an unbounded one, and even when the program cleared
    /// `O_NONBLOCK` on the descriptor (or a duplicate of it) meanwhile.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb) from `ppoll`, from `ibv_get_cq_event` (`EIO` once
    /// the device is gone), or from the `fcntl` that sets `O_NONBLOCK`.
    #[doc(alias = "ibv_get_cq_event")]
    #[doc(alias = "ibv_ack_cq_events")]
    #[inline(always)]
    pub fn wait(&self, timeout: Option<Duration>) -> Result<usize> {
        let timed = timeout.is_some();
        if timed {
            self.make_nonblocking()?;
        }
        // One event per call, as the C idiom: draining would cost one more read(2), the one
        // that finds nothing, on every call. Read first: in a request-response loop the event
        // is most often pending already (rc_pingpong -e on rxe: over 99 % of waits), and when
        // it is not, the failed read is paid before sleeping, not after the wake-up. That read
        // is inlined into the caller; the sleep is not. (Without a timeout on a descriptor
        // still blocking, that read is the sleep. Another thread may switch the descriptor
        // meanwhile: the read then finds nothing and the wait sleeps in ppoll instead.)
        if self.get_event()? {
            return Ok(1);
        }
        self.sleep_for_event(timeout)
    }

    /// [`wait`](Self::wait) after its first read found nothing.
    #[inline(never)]
    fn sleep_for_event(&self, timeout: Option<Duration>) -> Result<usize> {
        let mut left = fd::TimeLeft::new(timeout);
        // (Another thread may take the event between the wake-up and the read: sleep again.)
        loop {
            if !fd::wait_readable(self.as_fd(), &mut left, "a completion channel")? {
                return Ok(0);
            }
            // A timed read must not block, should another thread take the event first. An
            // unbounded one may: it then sleeps in the read until the next event, as C does.
            if timeout.is_some() {
                self.make_nonblocking()?;
            }
            if self.get_event()? {
                return Ok(1);
            }
        }
    }

    /// Sets `O_NONBLOCK` on the descriptor unless it is set. Asked of the kernel each time,
    /// never remembered: a program may clear the flag on a duplicate of the descriptor (the
    /// two share it) at any time, and a read that relied on a remembered flag would block.
    #[inline(always)]
    fn make_nonblocking(&self) -> Result<()> {
        fd::set_nonblocking(self.as_fd(), "a completion channel")
    }

    /// Reads every pending event without blocking (acknowledged as [`wait`](Self::wait)
    /// says); returns how many there were (0 when none). For event loops that watch the
    /// descriptor themselves ([`AsFd`]). Makes sure the descriptor is non-blocking first, as
    /// a timed wait does. Allocates nothing.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb) from the `fcntl` that sets `O_NONBLOCK`, or from
    /// `ibv_get_cq_event` when it fails before any event was read (`EIO` once the device is
    /// gone); after some were read, they are returned and the failure comes again at the
    /// next call.
    #[doc(alias = "ibv_get_cq_event")]
    #[doc(alias = "ibv_ack_cq_events")]
    pub fn try_get_events(&self) -> Result<usize> {
        self.make_nonblocking()?;
        let mut n = 0;
        loop {
            match self.get_event() {
                Ok(true) => n += 1,
                Ok(false) => return Ok(n),
                Err(_) if n > 0 => return Ok(n),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads one event (`true`), or finds none pending (`false`), and has it acknowledged;
    /// blocks until one comes while the descriptor is blocking.
    #[inline(always)]
    fn get_event(&self) -> Result<bool> {
        let fns = &self.ctx.library().fns;
        loop {
            let mut cq = std::ptr::null_mut();
            let mut cq_context = std::ptr::null_mut();
            // SAFETY: a live channel and two writable out-pointers.
            let ret = unsafe { (fns.ibv_get_cq_event)(self.as_raw(), &mut cq, &mut cq_context) };
            if ret != 0 {
                // Nothing pending (EAGAIN) is routine: told apart without building an `Error`.
                return match errno_of(ret) {
                    libc::EAGAIN => Ok(false),
                    libc::EINTR => continue,
                    errno => Err(Error::verb("ibv_get_cq_event", errno)),
                };
            }
            match NonNull::new(cq_context.cast::<EventAcks>()) {
                // SAFETY: a CQ created by this crate on a channel has its `EventAcks` as
                // `cq_context` (others have none: see `as_raw`). The CQ and the counter are
                // alive even if another thread is destroying the CQ right now: ibv_destroy_cq
                // waits until every event the kernel reported for it is acknowledged, and
                // this one was reported and is not yet; `owe` acknowledges it (now, or at the
                // destroy) and is the last use of both pointers.
                Some(acks) => unsafe { acks.as_ref().owe(fns, cq) },
                // SAFETY: as above, the CQ is alive until this acknowledgement.
                None => unsafe { (fns.ibv_ack_cq_events)(cq, 1) },
            }
            return Ok(true);
        }
    }

    /// The context.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The raw channel pointer.
    ///
    /// A CQ created on it by other means than this crate must have a NULL `cq_context`:
    /// this channel takes a non-NULL one for the counter of events owed by a CQ of its own.
    pub fn as_raw(&self) -> *mut sys::ibv_comp_channel {
        self.raw.as_ptr()
    }

    /// `ibv_destroy_comp_channel(3)`—Destroys the channel, reporting failure (dropping logs
    /// instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb): `EBUSY` while a CQ created by other means still
    /// uses it; the channel is then leaked.
    #[doc(alias = "ibv_destroy_comp_channel")]
    pub fn destroy(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).destroy_raw()
    }

    fn destroy_raw(&self) -> Result<()> {
        // SAFETY: every CQ created on it through this crate borrows it, so none is alive;
        // destroyed once.
        let ret = unsafe { (self.ctx.library().fns.ibv_destroy_comp_channel)(self.as_raw()) };
        check_errno(ret, "ibv_destroy_comp_channel")
    }
}

impl AsFd for CompletionChannel<'_> {
    /// The channel's descriptor, for readiness only: `poll`/`epoll` it, then call
    /// [`try_get_events`](CompletionChannel::try_get_events), which makes it non-blocking
    /// (it is blocking until a call that must not block; each such call sets `O_NONBLOCK`
    /// again if it was cleared). Never read it directly: an event read that way is never
    /// acknowledged, and destroying its CQ then blocks forever.
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the channel owns `fd` until ibv_destroy_comp_channel, which needs `self`.
        unsafe { BorrowedFd::borrow_raw((*self.raw.as_ptr()).fd) }
    }
}

drop_by!(
    CompletionChannel<'_>,
    destroy_raw,
    |channel| "a completion channel of {}",
    channel.ctx.name()
);

impl std::fmt::Debug for CompletionChannel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionChannel")
            .field("device", &self.ctx.name())
            .field("fd", &self.as_fd())
            .finish()
    }
}
