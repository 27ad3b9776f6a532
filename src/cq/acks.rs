//! Completion events read and not yet acknowledged, per CQ: `ibv_ack_cq_events(3)` takes the
//! CQ's mutex and signals a condition variable (about 95 instructions on rdma-core 44, more
//! than the read of the event), so, as the man page advises, acknowledgements are batched: a
//! CQ of a channel owes them until it is destroyed.
//!
//! # Safety
//!
//! `ibv_destroy_cq` blocks until every event the kernel reported for the CQ has been
//! acknowledged, so nothing may stay owed past it, even with another thread reading an event
//! of the CQ at that moment. [`EventAcks::close`], called right before the destroy,
//! acknowledges what is owed and switches the counter to `CLOSED`; an event read after that
//! (already reported, so the destroy waits for it) finds `CLOSED` in [`EventAcks::owe`] and is
//! acknowledged at once, after the reader's last use of the counter. The counter is freed
//! only once the destroy returned, and so after every reader let go of it.

#![allow(unsafe_code)]

use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use rdma_verbs_sys as sys;

/// The counter's top bit, set once its CQ is being destroyed: each event is then
/// acknowledged at once. The count below it never reaches it (2^63 events).
const CLOSED: u64 = 1 << 63;
/// Owed events are acknowledged in one call each time the count reaches a multiple of this.
const FLUSH_AT: u64 = 1 << 20;

/// The events owed by one CQ, reached through the `cq_context` that `ibv_get_cq_event` hands
/// back with each event (the CQ's creation sets it to this counter's address). It counts
/// every event read; those up to the last multiple of [`FLUSH_AT`] are acknowledged, the
/// rest owed.
#[derive(Debug, Default)]
pub(crate) struct EventAcks(AtomicU64);

impl EventAcks {
    /// Notes one event of `cq`, read with `ibv_get_cq_event`: owed, or acknowledged now
    /// when `cq` is being destroyed or the batch is full.
    ///
    /// # Safety
    ///
    /// `cq` is the live CQ this counter belongs to, and the event was read and not yet
    /// acknowledged (which keeps both alive until this returns).
    // One atomic addition, no compare-and-swap loop: this runs on every event.
    #[inline]
    pub(crate) unsafe fn owe(&self, fns: &sys::IbverbsFns, cq: *mut sys::ibv_cq) {
        let count = self.0.fetch_add(1, Ordering::AcqRel) + 1;
        let ack = if count & CLOSED != 0 {
            1
        } else if count.is_multiple_of(FLUSH_AT) {
            // This event completes a batch: exactly one reader's count lands on each multiple.
            FLUSH_AT as u32
        } else {
            return;
        };
        // SAFETY: `ack` events of `cq` were read and none of them acknowledged: this one, and
        // when the batch is full, those owed. After this call the CQ may be freed; the
        // counter is not touched again.
        unsafe { (fns.ibv_ack_cq_events)(cq, ack) };
    }

    /// Acknowledges every event owed and has later ones acknowledged at once: called right
    /// before `ibv_destroy_cq`, which waits for them.
    ///
    /// # Safety
    ///
    /// `cq` is the live CQ this counter belongs to.
    pub(crate) unsafe fn close(&self, fns: &sys::IbverbsFns, cq: *mut sys::ibv_cq) {
        let count = self.0.swap(CLOSED, Ordering::AcqRel);
        // Those past the last multiple of FLUSH_AT: the reader that reached it acknowledges
        // the batch (even if it has not yet).
        let owed = if count & CLOSED != 0 { 0 } else { count % FLUSH_AT };
        if owed > 0 {
            // SAFETY: `owed` events of `cq` were read and left to this counter to acknowledge.
            unsafe { (fns.ibv_ack_cq_events)(cq, owed as u32) };
        }
    }
}

/// An [`EventAcks`] on the heap, at an address that never moves: the `cq_context` of a CQ
/// created on a channel, owned by it. Freed when dropped, which its owner allows only when no
/// CQ can hand the address back any more; a CQ whose destroy failed forgets it.
#[derive(Debug)]
pub(crate) struct HeapAcks(NonNull<EventAcks>);

impl HeapAcks {
    pub(crate) fn new() -> HeapAcks {
        HeapAcks(NonNull::from(Box::leak(Box::default())))
    }

    /// The address to pass as the CQ's `cq_context`.
    pub(crate) fn as_context(&self) -> *mut c_void {
        self.0.as_ptr().cast()
    }
}

impl std::ops::Deref for HeapAcks {
    type Target = EventAcks;

    fn deref(&self) -> &EventAcks {
        // SAFETY: allocated in `new`, freed only by `drop`.
        unsafe { self.0.as_ref() }
    }
}

impl Drop for HeapAcks {
    fn drop(&mut self) {
        // SAFETY: from `Box::leak` in `new`, freed once. Its owner drops it only when no CQ
        // can hand the address back: none was created with it, or the one that was is
        // destroyed (ibv_destroy_cq returned after every event read was acknowledged), or was
        // never armed (an extended CQ refused for a missing member), so it raises no event.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

#[cfg(test)]
mod tests {
    use rdma_verbs_mock::{self as mock, Call, Mock, Optional};

    use super::*;

    #[test]
    fn owed_events_are_acknowledged_when_the_batch_fills_and_at_close_then_each_at_once() {
        let mock = Mock::new();
        let fns = &mock::library(Optional::ALL).fns;
        // Never dereferenced: the mock's ibv_ack_cq_events only records the call.
        let cq = std::ptr::dangling_mut::<sys::ibv_cq>();
        let acks = EventAcks::default();
        let owe = |n: u64| {
            for _ in 0..n {
                // SAFETY: the mock's acknowledgement reads neither pointer.
                unsafe { acks.owe(fns, cq) };
            }
        };

        owe(FLUSH_AT - 1);
        assert_eq!(mock.take_calls(), []);
        owe(1);
        assert_eq!(mock.take_calls(), [Call::AckCqEvents { nevents: FLUSH_AT as u32 }]);
        owe(3);
        // SAFETY: the mock's acknowledgement reads neither pointer.
        unsafe { acks.close(fns, cq) };
        assert_eq!(mock.take_calls(), [Call::AckCqEvents { nevents: 3 }]);
        // Read while the CQ is being destroyed: acknowledged by the reader.
        owe(2);
        assert_eq!(mock.take_calls(), vec![Call::AckCqEvents { nevents: 1 }; 2]);
        // SAFETY: the mock's acknowledgement reads neither pointer.
        unsafe { acks.close(fns, cq) };
        assert_eq!(mock.take_calls(), [], "nothing owed after the close");
    }
}
