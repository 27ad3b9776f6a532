//! A CQ's (or an SRQ's) count of completions its queues may still produce, so that no CQ
//! overruns. The buffer tier takes them for its posts; a drain takes one for its marker.
//!
//! A provider frees a work-queue slot when it is done with the WR, which need not be when
//! its completion is polled: rxe frees a send slot as soon as the kernel has completed the
//! WR, so `ibv_post_send` never reports a full queue while completions pile up in a CQ too
//! small for them, which then drops them (and, with them, the buffers they hand back).
//! So the buffer tier counts for itself. Each CQ, and each SRQ, keeps [`Credits`]: a post
//! takes one per WR — signaled or not, since a flushed WR completes either way — and
//! refuses when none is left; [`BufferPool::complete`](crate::BufferPool::complete) gives
//! them back when it hands back the chunks, the signaled one's and those batched before it.
//! The chunk's slot names the credits it took, so that the completion finds them.
//!
//! A CQ fed by SRQs keeps entries for every receive those can have outstanding
//! ([`Credits::hold_for_srq`]), which its QPs' own posts cannot take.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use crate::error::{Error, InvalidInputKind, Result};

/// A queue's credits (see the module docs). The count lives on the heap, where the slots of
/// chunks in flight name it: dropped while some are still taken, it is leaked, not freed.
pub(crate) struct Credits(NonNull<Count>);

/// The count [`Credits`] owns, which slots name.
pub(crate) struct Count {
    /// Credits taken by WRs whose chunks are not handed back yet.
    taken: AtomicU32,
    /// Entries kept for the receives of the SRQs feeding this CQ.
    held: AtomicU32,
    /// Completions the queue holds: a CQ's entries, an SRQ's `max_wr`.
    capacity: u32,
    /// What the credits count, for messages: "completion queue" or "shared receive queue".
    queue: &'static str,
    /// The SRQs feeding this CQ: each one's address, receives and QPs it feeds through here.
    srqs: Mutex<Vec<Fed>>,
}

/// An SRQ feeding a CQ through some of its QPs.
struct Fed {
    srq: usize,
    max_wr: u32,
    qps: u32,
}

// SAFETY: the count is atomics and a mutex, shared by reference only.
unsafe impl Send for Credits {}
// SAFETY: as above.
unsafe impl Sync for Credits {}

impl Credits {
    /// Credits for a queue of `capacity` completions, named `queue` in messages.
    pub(crate) fn new(capacity: u32, queue: &'static str) -> Self {
        let count = Count {
            taken: AtomicU32::new(0),
            held: AtomicU32::new(0),
            capacity,
            queue,
            srqs: Mutex::new(Vec::new()),
        };
        Credits(NonNull::from(Box::leak(Box::new(count))))
    }

    #[inline(always)]
    fn count(&self) -> &Count {
        // SAFETY: allocated by `new` and freed only by `Drop`.
        unsafe { self.0.as_ref() }
    }

    /// What a slot names to give the credits back ([`Count::give_back`]).
    #[inline(always)]
    pub(crate) fn as_ptr(&self) -> *const Count {
        self.0.as_ptr()
    }

    /// Takes `n` credits for `n` WRs about to be posted.
    ///
    /// # Errors
    ///
    /// [`Error::CompletionsDue`] when fewer than `n` are left; none is taken then.
    #[inline(always)]
    pub(crate) fn take(&self, n: u32) -> Result<()> {
        let count = self.count();
        let before = count.taken.fetch_add(n, Ordering::Relaxed);
        let held = count.held.load(Ordering::Relaxed);
        if u64::from(before) + u64::from(n) + u64::from(held) <= u64::from(count.capacity) {
            return Ok(());
        }
        count.taken.fetch_sub(n, Ordering::Relaxed);
        Err(self.refused(before, held))
    }

    #[cold]
    #[inline(never)]
    fn refused(&self, taken: u32, held: u32) -> Error {
        let count = self.count();
        Error::CompletionsDue { queue: count.queue, capacity: count.capacity, due: taken + held }
    }

    /// Gives back `n` credits taken for WRs the provider did not take, or whose completions
    /// the crate polled itself.
    #[inline(always)]
    pub(crate) fn put_back(&self, n: u32) {
        self.count().taken.fetch_sub(n, Ordering::Relaxed);
    }

    /// Credits taken and not given back.
    pub(crate) fn taken(&self) -> u32 {
        self.count().taken.load(Ordering::Relaxed)
    }

    /// Entries kept for SRQ receives.
    pub(crate) fn held(&self) -> u32 {
        self.count().held.load(Ordering::Relaxed)
    }

    /// Keeps `max_wr` entries of this CQ for the receives of the SRQ at `srq`, which a QP
    /// about to be created feeds through it (once per SRQ, however many of its QPs do).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] ([`InvalidInputKind::CqTooSmall`]) when the CQ has not that
    /// room left beside what its posts took and other SRQs hold.
    pub(crate) fn hold_for_srq(&self, srq: usize, max_wr: u32) -> Result<()> {
        let count = self.count();
        let mut srqs = count.srqs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(fed) = srqs.iter_mut().find(|fed| fed.srq == srq) {
            fed.qps += 1;
            return Ok(());
        }
        let held = count.held.load(Ordering::Relaxed);
        let taken = count.taken.load(Ordering::Relaxed);
        if u64::from(held) + u64::from(taken) + u64::from(max_wr) > u64::from(count.capacity) {
            return Err(Error::invalid(
                InvalidInputKind::CqTooSmall,
                format!(
                    "the receive CQ holds {} completions, {held} of them kept for the \
                     receives of other SRQs and {taken} due to posted buffers, and this QP's \
                     SRQ can have {max_wr} receives outstanding on it: create a larger CQ, or \
                     give this SRQ's QPs their own",
                    count.capacity
                ),
            ));
        }
        count.held.fetch_add(max_wr, Ordering::Relaxed);
        srqs.push(Fed { srq, max_wr, qps: 1 });
        Ok(())
    }

    /// Undoes one [`hold_for_srq`](Self::hold_for_srq) for the SRQ at `srq`: the QP was
    /// destroyed; its last QP gone, the SRQ's entries are free again.
    pub(crate) fn unhold_for_srq(&self, srq: usize) {
        let count = self.count();
        let mut srqs = count.srqs.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let Some(at) = srqs.iter().position(|fed| fed.srq == srq) else { return };
        srqs[at].qps -= 1;
        if srqs[at].qps == 0 {
            count.held.fetch_sub(srqs.swap_remove(at).max_wr, Ordering::Relaxed);
        }
    }
}

impl Count {
    /// Gives back `n` credits taken for WRs whose chunks were handed back.
    ///
    /// # Safety
    ///
    /// `count` is the [`Credits::as_ptr`] of credits of which these `n` were taken and not
    /// given back: such credits are never freed (see [`Credits`]'s `Drop`).
    #[inline(always)]
    pub(crate) unsafe fn give_back(count: *const Count, n: u32) {
        // SAFETY: the caller's; `Release` pairs with the `Acquire` of `Drop`, for which this
        // is the last access.
        unsafe { (*count).taken.fetch_sub(n, Ordering::Release) };
    }
}

impl Drop for Credits {
    /// Frees the count, unless chunks in flight still name it: their completions may still
    /// be handed to [`BufferPool::complete`](super::BufferPool::complete), which gives their
    /// credits back to it, so it is leaked (a few dozen bytes; the chunks are stranded too).
    fn drop(&mut self) {
        if self.count().taken.load(Ordering::Acquire) != 0 {
            return;
        }
        // SAFETY: allocated by `new` with `Box`; no slot names it any more (none has credits
        // taken), and no post can take any (the queue is being dropped).
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

impl std::fmt::Debug for Credits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credits")
            .field("taken", &self.taken())
            .field("held", &self.held())
            .field("capacity", &self.count().capacity)
            .finish()
    }
}
