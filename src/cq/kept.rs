//! Completions taken from the provider but not handed over. [`CompletionQueue::poll_with`]
//! polls up to 16 completions at once and hands them to its callback one by one (so does
//! [`QueuePair::drain`](crate::QueuePair::drain)); when the callback panics, the ones it has
//! not been given yet would be lost with the stack frame that holds them — and with them the
//! buffers a [`BufferPool`](crate::BufferPool) would have had back. [`Handing`] keeps them
//! in the CQ's [`Kept`] instead, and the CQ's next poll returns them first, in order.

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

use super::completion::Completion;
use super::extended::Slot;
use super::CompletionQueue;
use crate::wc::WorkCompletion;

/// A CQ's completions kept from a callback that panicked (empty but for that: nothing is
/// allocated until a completion is kept), and the byte a poll tests to learn whether it can
/// go straight to `ibv_poll_cq`: none kept, and no polling sessions.
#[derive(Debug)]
pub(super) struct Kept {
    /// [`SESSIONS`] (fixed at creation) and [`ANY`].
    route: AtomicU8,
    held: Mutex<VecDeque<Completion>>,
}

/// The CQ is polled in sessions ([`ExCq::in_sessions`](super::extended::ExCq::in_sessions)).
const SESSIONS: u8 = 1;
/// `held` has completions.
const ANY: u8 = 2;

impl Kept {
    /// None kept, on a CQ polled in sessions or not.
    pub(super) fn new(in_sessions: bool) -> Self {
        let route = if in_sessions { SESSIONS } else { 0 };
        Kept { route: AtomicU8::new(route), held: Mutex::default() }
    }

    /// Whether a poll is `ibv_poll_cq` alone: none kept, no sessions. The one byte a poll
    /// tests (a thread that kept completions sees its own store; another may poll the provider
    /// once more before it sees them, which no order between threads forbids).
    #[inline(always)]
    pub(super) fn poll_cq_alone(&self) -> bool {
        self.route.load(Ordering::Relaxed) == 0
    }

    /// Whether the CQ is polled in sessions.
    #[inline(always)]
    pub(super) fn in_sessions(&self) -> bool {
        self.route.load(Ordering::Relaxed) & SESSIONS != 0
    }

    /// Whether a poll must look here first.
    #[inline(always)]
    pub(super) fn is_empty(&self) -> bool {
        self.route.load(Ordering::Relaxed) & ANY == 0
    }

    /// Keeps `rest` behind those kept already.
    #[cold]
    fn keep(&self, rest: impl Iterator<Item = Completion>) {
        let mut held = self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        held.extend(rest);
        if !held.is_empty() {
            self.route.fetch_or(ANY, Ordering::Relaxed);
        }
    }

    /// Moves the oldest kept completions into `out`; returns how many.
    #[cold]
    #[inline(never)]
    pub(super) fn take<S: Slot>(&self, out: &mut [S]) -> usize {
        let mut held = self.held.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let n = out.len().min(held.len());
        for (slot, kept) in out.iter_mut().zip(held.drain(..n)) {
            slot.put(kept.wc, kept.timestamp);
        }
        if held.is_empty() {
            self.route.fetch_and(!ANY, Ordering::Relaxed);
        }
        n
    }
}

/// A polled completion waiting in its slot to be handed over.
pub(super) trait Unhanded {
    /// What the callback is given.
    type Handed;
    /// The completion, moved out (the slot is not read again).
    fn take_out(&mut self) -> Completion;
    /// The completion, for the callback.
    fn as_handed(&mut self) -> &mut Self::Handed;
}

impl Unhanded for MaybeUninit<Completion> {
    type Handed = Completion;

    fn take_out(&mut self) -> Completion {
        // SAFETY: a `Handing` is built over slots a poll initialised, and reads each at most
        // once; `Completion` is plain data (no drop), so the copy left behind is inert.
        unsafe { self.assume_init_read() }
    }

    fn as_handed(&mut self) -> &mut Completion {
        // SAFETY: as above: an initialised slot.
        unsafe { self.assume_init_mut() }
    }
}

impl Unhanded for WorkCompletion {
    type Handed = WorkCompletion;

    fn take_out(&mut self) -> Completion {
        Completion::new(std::mem::take(self), None)
    }

    fn as_handed(&mut self) -> &mut WorkCompletion {
        self
    }
}

/// Polled completions being handed over one by one: the ones not handed over yet when it
/// drops — a callback panicked — go to the CQ's [`Kept`].
pub(super) struct Handing<'a, S: Unhanded> {
    kept: &'a Kept,
    polled: &'a mut [S],
    next: usize,
}

impl<'a, S: Unhanded> Handing<'a, S> {
    /// `polled`, just taken from `cq`, to hand over.
    pub(super) fn new(cq: &'a CompletionQueue<'_>, polled: &'a mut [S]) -> Self {
        Handing { kept: &cq.kept, polled, next: 0 }
    }

    /// The next completion to hand over (counted as handed over from now on).
    #[inline(always)]
    pub(super) fn next(&mut self) -> Option<&mut S::Handed> {
        let slot = self.polled.get_mut(self.next)?;
        self.next += 1;
        Some(slot.as_handed())
    }
}

impl<S: Unhanded> Drop for Handing<'_, S> {
    fn drop(&mut self) {
        if self.next < self.polled.len() {
            self.kept.keep(self.polled[self.next..].iter_mut().map(Unhanded::take_out));
        }
    }
}
