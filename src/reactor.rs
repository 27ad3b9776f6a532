//! Completions and asynchronous events on tokio's reactor (feature `tokio`).
//!
//! The verbs' event files — a [`CompletionChannel`] and a context's [`AsyncEvents`] — are
//! read here only once non-blocking; they are registered with tokio
//! ([`tokio::io::unix::AsyncFd`]) so a task awaits them instead
//! of a thread sleeping on them:
//!
//! - [`AsyncCompletionChannel`]: await a channel's events (every pending one is read and
//!   acknowledged), for event loops over several CQs;
//! - [`CompletionStream`]: one CQ's completions, awaited with the arm–poll–wait–re-arm loop
//!   done right;
//! - [`AsyncEventStream`]: the context's asynchronous events.
//!
//! Each must be made inside a tokio runtime with I/O enabled (`enable_io` / `enable_all`),
//! and used on that runtime. Nothing here spawns or blocks.
//!
//! ```no_run
//! use rdma_verbs::{reactor::CompletionStream, *};
//!
//! # async fn f() -> Result<()> {
//! let ctx = Context::open("rxe0")?;
//! let channel = ctx.create_comp_channel()?;
//! let cq = ctx.create_cq_with_channel(64, &channel, 0)?;
//! let mut completions = CompletionStream::new(&cq, &channel)?;
//! // ... create QPs on `cq` and post work ...
//! let mut wcs = [WorkCompletion::EMPTY; 16];
//! for wc in completions.poll(&mut wcs).await?.iter() {
//!     println!("{wc}");
//! }
//! # Ok(()) }
//! ```
#![allow(unsafe_code)]
//! # Safety
//!
//! An [`AsyncFd`] here registers a descriptor it does not own (the channel's, the context's
//! `async_fd`); each type borrows the owner, so the descriptor stays open until the `AsyncFd`
//! is dropped, which deregisters it.

use std::os::fd::{AsFd, AsRawFd, RawFd};

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;

use crate::channel::CompletionChannel;
use crate::cq::CompletionQueue;
use crate::error::{Error, InvalidInputKind, Result};
use crate::event::{AsyncEvent, AsyncEvents};
use crate::wc::WorkCompletion;

/// A descriptor owned elsewhere, as [`AsyncFd`] wants it (it never closes it).
pub(crate) struct Watched(RawFd);

impl AsRawFd for Watched {
    fn as_raw_fd(&self) -> RawFd {
        self.0
    }
}

/// Registers `fd` with the current runtime's reactor, for reading. `what` names it in errors.
///
/// # Safety
///
/// `fd` must stay open, the same file description, until the returned `AsyncFd` is dropped.
pub(crate) unsafe fn register(fd: RawFd, what: &'static str) -> Result<AsyncFd<Watched>> {
    // Checked first: tokio's own registration panics outside a runtime.
    if ::tokio::runtime::Handle::try_current().is_err() {
        return Err(Error::NoRuntime { what });
    }
    // SAFETY: the caller keeps `fd` open as the same file until the AsyncFd is dropped.
    let fd = unsafe { AsyncFd::register_with_interest(Watched(fd), Interest::READABLE) };
    fd.map_err(|e| Error::Verb {
        verb: "epoll_ctl(EPOLL_CTL_ADD)",
        source: e.into_parts().1,
        hint: Some(format!(
            "registering {what} with tokio's reactor failed (EEXIST: another AsyncFd already \
             watches this descriptor)"
        )),
    })
}

/// Awaits readiness of `fd`, then runs `read`, which returns what it read, or `None` when it
/// met `EAGAIN` first; repeats until it reads something (another reader may have been first).
pub(crate) async fn read_when_readable<T>(
    fd: &AsyncFd<Watched>,
    mut read: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    loop {
        let mut guard = fd.readable().await.map_err(|source| Error::Verb {
            verb: "tokio AsyncFd::readable",
            source,
            hint: None,
        })?;
        match read()? {
            Some(got) => return Ok(got), // readiness kept: more may be pending
            // Drained: tokio forgets this readiness, but not a newer one (it tracks them by
            // generation), so an event arriving meanwhile still wakes the next wait.
            None => guard.clear_ready(),
        }
    }
}

/// A [`CompletionChannel`] whose events are awaited on tokio's reactor.
#[must_use = "the channel is deregistered from the reactor when dropped"]
pub struct AsyncCompletionChannel<'a> {
    channel: &'a CompletionChannel<'a>,
    fd: AsyncFd<Watched>,
}

impl<'a> AsyncCompletionChannel<'a> {
    /// Registers `channel`'s descriptor with the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::NoRuntime`] outside a tokio runtime; [`Error::Verb`] when the reactor
    /// refuses the descriptor (one channel can be registered once at a time).
    ///
    /// # Panics
    ///
    /// Inside a runtime built without I/O (tokio's own panic).
    pub fn new(channel: &'a CompletionChannel<'a>) -> Result<Self> {
        let fd = channel.as_fd().as_raw_fd();
        // SAFETY: the channel owns `fd` until it is destroyed, and `self` borrows it.
        let fd = unsafe { register(fd, "a completion channel") }?;
        Ok(AsyncCompletionChannel { channel, fd })
    }

    /// Waits until an armed CQ of the channel fires, then reads and acknowledges every
    /// pending event ([`CompletionChannel::try_get_events`]); returns how many (at least 1).
    /// Then re-arm the CQs and poll them (see
    /// [the event loop](CompletionChannel#the-event-loop)).
    ///
    /// # Errors
    ///
    /// As [`CompletionChannel::try_get_events`].
    pub async fn wait(&self) -> Result<usize> {
        read_when_readable(&self.fd, || Ok(Some(self.channel.try_get_events()?).filter(|&n| n > 0)))
            .await
    }

    /// The channel.
    pub fn channel(&self) -> &'a CompletionChannel<'a> {
        self.channel
    }
}

impl std::fmt::Debug for AsyncCompletionChannel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncCompletionChannel").field("channel", self.channel).finish()
    }
}

/// The completions of one [`CompletionQueue`], awaited through its [`CompletionChannel`].
///
/// It keeps the loop that loses no wake-up: poll; when empty, arm the CQ
/// ([`req_notify`](CompletionQueue::req_notify)) and poll again (a completion that came
/// before the arming raises no event); only when that is empty too, await the channel, drain
/// its events, and start over. The channel should serve only this CQ: its events are read
/// here, so another CQ's would be taken too.
#[must_use = "completions are read only through the stream"]
pub struct CompletionStream<'a> {
    cq: &'a CompletionQueue<'a>,
    channel: AsyncCompletionChannel<'a>,
    armed: bool,
}

impl<'a> CompletionStream<'a> {
    /// A stream of `cq`'s completions; `channel` is the one `cq` was created on
    /// ([`Context::create_cq_with_channel`](crate::Context::create_cq_with_channel)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `cq` does not report to `channel`; as
    /// [`AsyncCompletionChannel::new`] otherwise.
    ///
    /// # Panics
    ///
    /// Inside a runtime built without I/O (tokio's own panic).
    pub fn new(cq: &'a CompletionQueue<'a>, channel: &'a CompletionChannel<'a>) -> Result<Self> {
        // SAFETY: a live CQ; a plain field read (the channel it was created on, or NULL).
        let cq_channel = unsafe { (*cq.as_raw()).channel };
        if cq_channel != channel.as_raw() {
            return Err(Error::invalid(
                InvalidInputKind::OtherChannel,
                "this CQ does not report to this completion channel: create it with \
                 Context::create_cq_with_channel on that channel"
                    .into(),
            ));
        }
        Ok(CompletionStream { cq, channel: AsyncCompletionChannel::new(channel)?, armed: false })
    }

    /// Waits until at least one completion is there, then reaps up to `storage.len()` of
    /// them into `storage` and returns the filled prefix (as [`CompletionQueue::poll`]).
    ///
    /// Cancel-safe: a completion is reaped only by the poll that returns it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `storage` is empty; as [`CompletionQueue::poll`],
    /// [`CompletionQueue::req_notify`] and [`AsyncCompletionChannel::wait`].
    pub async fn poll<'s>(
        &mut self,
        storage: &'s mut [WorkCompletion],
    ) -> Result<&'s mut [WorkCompletion]> {
        if storage.is_empty() {
            return Err(Error::invalid(
                InvalidInputKind::EmptyStorage,
                "polling into empty storage could never return a completion: pass at least \
                 one slot"
                    .into(),
            ));
        }
        loop {
            let n = self.cq.poll(storage)?.len();
            if n > 0 {
                return Ok(&mut storage[..n]);
            }
            if !self.armed {
                self.cq.req_notify(false)?;
                self.armed = true;
                continue; // poll once more: what came before the arming raised no event
            }
            self.channel.wait().await?;
            self.armed = false; // an event disarms the CQ
        }
    }

    /// Waits for the next completion (one at a time; [`poll`](Self::poll) takes batches).
    ///
    /// # Errors
    ///
    /// As [`poll`](Self::poll).
    pub async fn next(&mut self) -> Result<WorkCompletion> {
        let mut one = [WorkCompletion::EMPTY];
        self.poll(&mut one).await?;
        Ok(std::mem::take(&mut one[0]))
    }

    /// The CQ.
    pub fn cq(&self) -> &'a CompletionQueue<'a> {
        self.cq
    }
}

impl std::fmt::Debug for CompletionStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionStream")
            .field("cq", self.cq)
            .field("armed", &self.armed)
            .finish_non_exhaustive()
    }
}

/// A context's [`AsyncEvents`], awaited on tokio's reactor.
#[must_use = "events are read only through the stream"]
pub struct AsyncEventStream<'ctx> {
    events: AsyncEvents<'ctx>,
    fd: AsyncFd<Watched>,
}

impl<'ctx> AsyncEventStream<'ctx> {
    /// Registers the context's `async_fd` (`events`' descriptor) with the current runtime.
    ///
    /// # Errors
    ///
    /// As [`AsyncCompletionChannel::new`].
    ///
    /// # Panics
    ///
    /// Inside a runtime built without I/O (tokio's own panic).
    pub fn new(events: AsyncEvents<'ctx>) -> Result<Self> {
        let fd = events.as_fd().as_raw_fd();
        // SAFETY: the context owns its async_fd until it is closed, and `events`, which
        // `self` holds, borrows the context.
        let fd = unsafe { register(fd, "a context's async events") }?;
        Ok(AsyncEventStream { events, fd })
    }

    /// Waits for the next event (decoded and acknowledged, as
    /// [`AsyncEvents::try_next`]).
    ///
    /// # Errors
    ///
    /// As [`AsyncEvents::try_next`].
    pub async fn next(&self) -> Result<AsyncEvent> {
        read_when_readable(&self.fd, || self.events.try_next()).await
    }

    /// The blocking stream inside, for its [`try_next`](AsyncEvents::try_next).
    pub fn events(&self) -> &AsyncEvents<'ctx> {
        &self.events
    }
}

impl std::fmt::Debug for AsyncEventStream<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncEventStream").field("events", &self.events).finish()
    }
}
