//! Which owners of memory a queue's work requests name (the buffer tier's pools), so that an
//! owner outlived by a leaked queue leaks its memory too. A queue (QP, SRQ) keeps its
//! [`Lenders`] and releases them when it is destroyed; the tier lending the memory notes its
//! owners' counts there before it posts.
//!
//! The lifetimes make a pool outlive every queue it lends chunks to, but
//! `std::mem::forget` ends a queue's borrows without destroying it: the provider keeps its
//! work requests, and the NIC would still write a receive into the chunk of a pool dropped
//! since (a freed region whose lkey the next registration may be given again). So each pool
//! counts the queues that took its chunks and are not destroyed yet, and a pool whose count
//! is not zero when it drops leaks its region instead of freeing it.
#![allow(unsafe_code)]

use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The pools whose chunks a queue was given: each one's count of such queues, incremented
/// once per queue, decremented once the queue is destroyed. One pointer, allocated by the
/// first note, so that a queue the buffer tier never uses (and a `TransitionError` holding
/// one) stays small.
#[derive(Debug, Default)]
pub(crate) struct Lenders(AtomicPtr<Noted>);

#[derive(Debug, Default)]
struct Noted {
    /// The pool the last post found here, so that a post of the same pool's chunks costs
    /// two loads and a compare.
    last: AtomicPtr<AtomicUsize>,
    /// Every pool's count, each once.
    all: Mutex<Vec<Counter>>,
}

/// A pool's count of queues holding its chunks.
#[derive(Debug, PartialEq, Eq)]
struct Counter(*const AtomicUsize);

// SAFETY: a pointer to an atomic, only used for atomic operations, from any thread.
unsafe impl Send for Counter {}

impl Lenders {
    /// Notes that the queue is given chunks of the pool whose count is `queues`.
    #[inline]
    pub(crate) fn note(&self, queues: &AtomicUsize) {
        let noted = self.0.load(Ordering::Acquire);
        // SAFETY: non-NULL, it is the `Noted` this queue allocated, freed only through
        // `&mut self`.
        if noted.is_null() || !ptr::eq(unsafe { (*noted).last.load(Ordering::Relaxed) }, queues) {
            self.note_new(queues);
        }
    }

    #[cold]
    #[inline(never)]
    fn note_new(&self, queues: &AtomicUsize) {
        let mut noted = self.0.load(Ordering::Acquire);
        if noted.is_null() {
            let new = Box::into_raw(Box::<Noted>::default());
            noted = match self.0.compare_exchange(
                ptr::null_mut(),
                new,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => new,
                Err(first) => {
                    // SAFETY: allocated just above, never shared (another thread's won).
                    drop(unsafe { Box::from_raw(new) });
                    first
                }
            };
        }
        // SAFETY: the `Noted` this queue allocated, freed only through `&mut self`.
        let noted = unsafe { &*noted };
        let counter = Counter(queues);
        // (A poisoned lock held only a push: the list is whole.)
        let mut all = noted.all.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if !all.contains(&counter) {
            queues.fetch_add(1, Ordering::Relaxed);
            all.push(counter);
        }
        noted.last.store(ptr::from_ref(queues).cast_mut(), Ordering::Relaxed);
    }

    /// Tells every pool noted that this queue is destroyed: its work requests, and the chunks
    /// they name, are gone.
    ///
    /// # Safety
    ///
    /// The queue was destroyed, and every pool noted is alive (a pool outlives the queues it
    /// lends to, `'p: 'res`, unless one was leaked, whose destroy never comes here).
    pub(crate) unsafe fn release(&mut self) {
        let Some(noted) = self.take() else { return };
        let all = noted.all.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
        for Counter(queues) in all {
            // SAFETY: the caller's: the pool, and so its count, is alive.
            unsafe { (*queues).fetch_sub(1, Ordering::Release) };
        }
    }

    /// The notes, if any, leaving none.
    fn take(&mut self) -> Option<Box<Noted>> {
        let noted = std::mem::replace(self.0.get_mut(), ptr::null_mut());
        // SAFETY: non-NULL, it was allocated by `note_new` with `Box::into_raw`, and is no
        // longer reachable through `self`.
        (!noted.is_null()).then(|| unsafe { Box::from_raw(noted) })
    }
}

impl Drop for Lenders {
    /// Frees the notes of a queue that was not destroyed (its destroy failed): its pools'
    /// counts stay up, and they leak their regions.
    fn drop(&mut self) {
        drop(self.take());
    }
}
