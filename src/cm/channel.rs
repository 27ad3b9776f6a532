//! The event channel (`rdma_create_event_channel(3)`).

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdma_verbs_sys as sys;

use super::event::{CmEvent, CmEventKind, IdPtr, RawEvent};
use super::id::CmId;
use crate::error::{check_ptr, descriptors_exhausted, Error, Result};

/// The longest single `poll` while waiting, so a waiter notices events another thread read
/// into the backlog for it.
const POLL_SLICE: Duration = Duration::from_millis(50);

/// An rdma_cm event channel (`struct rdma_event_channel`): the file descriptor on which the
/// events of its [`CmId`]s arrive.
///
/// Its descriptor is non-blocking; waits poll it with a timeout. Events read while waiting
/// for another id's are kept in a backlog, in order, for their own waits or
/// [`EventChannel::get_event`].
#[must_use = "the event channel is destroyed when dropped"]
pub struct EventChannel {
    raw: NonNull<sys::rdma_event_channel>,
    pub(crate) lib: &'static sys::Rdmacm,
    backlog: Mutex<VecDeque<RawEvent>>,
}

// SAFETY: librdmacm's calls on a channel are thread-safe (reads of its descriptor are
// serialised by the kernel); the backlog is behind a mutex.
unsafe impl Send for EventChannel {}
// SAFETY: as above; every method takes `&self`.
unsafe impl Sync for EventChannel {}

impl EventChannel {
    /// `rdma_create_event_channel(3)`—Opens a channel (loading librdmacm on first use).
    ///
    /// # Errors
    ///
    /// [`Error::Load`] when libibverbs or librdmacm cannot be loaded; [`Error::Verb`] from
    /// `rdma_create_event_channel` (`ENODEV`: no `/dev/infiniband/rdma_cm` — load
    /// `rdma_ucm`; `EMFILE`, naming RLIMIT_NOFILE, when the process has no file descriptor
    /// left).
    #[doc(alias = "rdma_create_event_channel")]
    pub fn new() -> Result<EventChannel> {
        let lib = super::rdmacm()?;
        // SAFETY: no arguments; returns a new channel or NULL with errno.
        let raw = unsafe { (lib.fns.rdma_create_event_channel)() };
        let raw = check_ptr(raw, "rdma_create_event_channel").map_err(|e| match e.errno() {
            // librdmacm reports a device list it could not read as ENODEV.
            Some(libc::ENODEV) if descriptors_exhausted() => Error::out_of_descriptors(
                "rdma_create_event_channel",
                "librdmacm could not list the RDMA devices (it reports ENODEV then)",
            ),
            Some(libc::ENODEV | libc::ENOENT | libc::EACCES | libc::EPERM) => e.with_hint(
                "/dev/infiniband/rdma_cm is missing or not accessible: load the rdma_ucm \
                 module (modprobe rdma_ucm) and check its permissions"
                    .into(),
            ),
            // EMFILE and the rest keep their own hint.
            _ => e,
        })?;
        let channel = EventChannel { raw, lib, backlog: Mutex::new(VecDeque::new()) };
        channel.non_blocking()?;
        Ok(channel)
    }

    /// Sets `O_NONBLOCK` on the descriptor, which its reads need to return when no event is
    /// pending: at creation, and again at each wait, since a program may have cleared it
    /// through a duplicate of [`fd`](Self::fd) (the flag is the open file's).
    pub(crate) fn non_blocking(&self) -> Result<()> {
        // SAFETY: the channel's own descriptor, open as long as the channel.
        let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(self.fd()) };
        crate::fd::set_nonblocking(fd, "the rdma_cm event channel")
    }

    /// The channel's file descriptor (non-blocking), for an event loop's `poll`.
    pub fn fd(&self) -> RawFd {
        // SAFETY: a live channel; a plain field read.
        unsafe { (*self.raw.as_ptr()).fd }
    }

    /// The raw channel pointer.
    pub fn as_raw(&self) -> *mut sys::rdma_event_channel {
        self.raw.as_ptr()
    }

    /// `rdma_get_cm_event(3)`—The next event of any id on this channel (the backlog's
    /// oldest first), waiting at most `timeout`. It is already acknowledged.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] with `ETIMEDOUT` when no event came within `timeout`, or from
    /// `rdma_get_cm_event` / `poll`.
    #[doc(alias = "rdma_get_cm_event")]
    pub fn get_event(&self, timeout: Duration) -> Result<CmEvent<'_>> {
        let raw = self.wait(timeout, "rdma_get_cm_event", |_| true)?;
        Ok(self.wrap(raw))
    }

    /// Wraps a copied event, taking ownership of a connect request's new id.
    pub(crate) fn wrap(&self, raw: RawEvent) -> CmEvent<'_> {
        let new_id = (raw.kind == CmEventKind::CONNECT_REQUEST)
            // SAFETY: a connect request's id is new and owned by the event alone.
            .then(|| unsafe { CmId::from_event(self, raw.id.0) });
        CmEvent { raw, new_id }
    }

    /// The first event that `wanted` accepts, from the backlog or the channel, within
    /// `timeout`; others read meanwhile join the backlog.
    pub(crate) fn wait(
        &self,
        timeout: Duration,
        verb: &'static str,
        wanted: impl Fn(&RawEvent) -> bool,
    ) -> Result<RawEvent> {
        // (None: a timeout past any clock's range, such as `Duration::MAX`, never ends.)
        let deadline = Instant::now().checked_add(timeout);
        self.non_blocking()?;
        loop {
            if let Some(event) = self.take(&wanted)? {
                return Ok(event);
            }
            let left = deadline
                .map_or(POLL_SLICE, |deadline| deadline.saturating_duration_since(Instant::now()));
            if left.is_zero() {
                return Err(Error::Verb {
                    verb,
                    source: std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
                    hint: Some(format!("no rdma_cm event within {} ms", timeout.as_millis())),
                });
            }
            self.poll(left.min(POLL_SLICE))?;
        }
    }

    /// The first event that `wanted` accepts from the backlog, or else from the events
    /// pending on the descriptor, without waiting; others read meanwhile join the backlog.
    /// `None` when the backlog has none and the descriptor is drained. An event is taken from
    /// the backlog or read only by the call that returns it, so no await point ever holds
    /// one.
    pub(crate) fn take(&self, wanted: impl Fn(&RawEvent) -> bool) -> Result<Option<RawEvent>> {
        {
            let mut backlog = self.lock();
            if let Some(i) = backlog.iter().position(&wanted) {
                return Ok(backlog.remove(i));
            }
        }
        while let Some(event) = self.read()? {
            if wanted(&event) {
                return Ok(Some(event));
            }
            self.lock().push_back(event);
        }
        Ok(None)
    }

    /// Reads and acknowledges one event, `None` when none is pending.
    fn read(&self) -> Result<Option<RawEvent>> {
        loop {
            let mut event = std::ptr::null_mut();
            // SAFETY: a live channel; on success `event` is a new event we must acknowledge.
            let ret = unsafe { (self.lib.fns.rdma_get_cm_event)(self.as_raw(), &mut event) };
            if ret != 0 {
                let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
                if errno == libc::EAGAIN || errno == libc::EWOULDBLOCK {
                    return Ok(None);
                }
                if errno == libc::EINTR {
                    continue;
                }
                return Err(Error::verb("rdma_get_cm_event", errno));
            }
            // SAFETY: rdma_get_cm_event succeeded, so `event` is a valid, unacknowledged
            // event; it is copied first, then acknowledged exactly once.
            let copied = unsafe { RawEvent::copy(&*event) };
            // SAFETY: as above; nothing refers to the event after this.
            let ack = unsafe { (self.lib.fns.rdma_ack_cm_event)(event) };
            if ack != 0 {
                log::warn!("rdma_ack_cm_event failed ({})", std::io::Error::last_os_error());
            }
            if let Some(copied) = copied {
                return Ok(Some(copied));
            }
        }
    }

    /// Waits up to `timeout` for the descriptor to become readable.
    fn poll(&self, timeout: Duration) -> Result<()> {
        let mut pfd = libc::pollfd { fd: self.fd(), events: libc::POLLIN, revents: 0 };
        let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX).max(1);
        // SAFETY: one valid pollfd.
        let ret = unsafe { libc::poll(&mut pfd, 1, ms) };
        if ret < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINTR) {
                return Err(Error::Verb {
                    verb: "poll on the rdma_cm channel",
                    source: e,
                    hint: None,
                });
            }
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<RawEvent>> {
        // A panic while holding the lock leaves a consistent queue: ignore the poison.
        self.backlog.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Forgets the backlog's events of `id`, which is being destroyed; connect requests to
    /// it (a listener) are destroyed too.
    pub(crate) fn forget(&self, id: IdPtr) {
        let mut orphans = Vec::new();
        self.lock().retain(|e| {
            if e.listen_id == Some(id) && e.kind == CmEventKind::CONNECT_REQUEST {
                orphans.push(e.id);
                return false;
            }
            e.id != id
        });
        for orphan in orphans {
            self.destroy_orphan(orphan);
        }
    }

    /// Destroys a connect request's id that nobody took.
    fn destroy_orphan(&self, id: IdPtr) {
        // SAFETY: the id came with a connect request and was never handed out; its event
        // was acknowledged.
        if unsafe { (self.lib.fns.rdma_destroy_id)(id.0.as_ptr()) } != 0 {
            log::warn!(
                "leaking an unanswered rdma_cm connect request's id: rdma_destroy_id failed ({})",
                std::io::Error::last_os_error()
            );
        }
    }
}

impl Drop for EventChannel {
    fn drop(&mut self) {
        // Every handed-out id borrows the channel, so only the backlog's requests remain.
        let orphans: Vec<IdPtr> = self
            .lock()
            .drain(..)
            .filter(|e| e.kind == CmEventKind::CONNECT_REQUEST)
            .map(|e| e.id)
            .collect();
        for orphan in orphans {
            self.destroy_orphan(orphan);
        }
        // SAFETY: no id of this channel is alive (they borrow it, and the orphans are gone).
        unsafe { (self.lib.fns.rdma_destroy_event_channel)(self.as_raw()) };
    }
}

impl std::fmt::Debug for EventChannel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventChannel").field("fd", &self.fd()).finish_non_exhaustive()
    }
}
