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
use std::sync::atomic::{AtomicU32, Ordering};

use rdma_verbs_sys as sys;

/// The counter's value once its CQ is being destroyed: each event is then acknowledged at
/// once.
const CLOSED: u32 = u32::MAX;
/// Owed events are acknowledged in one call when this many accumulate, well before the
/// counter could reach `CLOSED`.
const FLUSH_AT: u32 = 1 << 20;

/// The events owed by one CQ, reached through the `cq_context` that `ibv_get_cq_event` hands
/// back with each event (the CQ's creation sets it to this counter's address).
#[derive(Debug, Default)]
pub(crate) struct EventAcks(AtomicU32);

impl EventAcks {
    /// Notes one event of `cq`, read with `ibv_get_cq_event`: owed, or acknowledged now
    /// when `cq` is being destroyed or the batch is full.
    ///
    /// # Safety
    ///
    /// `cq` is the live CQ this counter belongs to, and the event was read and not yet
    /// acknowledged (which keeps both alive until this returns).
    #[inline]
    pub(crate) unsafe fn owe(&self, fns: &sys::IbverbsFns, cq: *mut sys::ibv_cq) {
        let mut owed = self.0.load(Ordering::Acquire);
        loop {
            let (next, ack) = match owed {
                CLOSED => (CLOSED, 1),
                n if n + 1 == FLUSH_AT => (0, FLUSH_AT),
                n => (n + 1, 0),
            };
            match self.0.compare_exchange_weak(owed, next, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => {
                    if ack > 0 {
                        // SAFETY: `ack` events of `cq` were read and none of them acknowledged:
                        // this one, and when the batch is full, those owed. After this call
                        // the CQ may be freed; the counter is not touched again.
                        unsafe { (fns.ibv_ack_cq_events)(cq, ack) };
                    }
                    return;
                }
                Err(now) => owed = now,
            }
        }
    }

    /// Acknowledges every event owed and has later ones acknowledged at once: called right
    /// before `ibv_destroy_cq`, which waits for them.
    ///
    /// # Safety
    ///
    /// `cq` is the live CQ this counter belongs to.
    pub(crate) unsafe fn close(&self, fns: &sys::IbverbsFns, cq: *mut sys::ibv_cq) {
        match self.0.swap(CLOSED, Ordering::AcqRel) {
            0 | CLOSED => {}
            // SAFETY: `owed` events of `cq` were read and left to this counter to acknowledge.
            owed => unsafe { (fns.ibv_ack_cq_events)(cq, owed) },
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
        let owe = |n: u32| {
            for _ in 0..n {
                // SAFETY: the mock's acknowledgement reads neither pointer.
                unsafe { acks.owe(fns, cq) };
            }
        };

        owe(FLUSH_AT - 1);
        assert_eq!(mock.take_calls(), []);
        owe(1);
        assert_eq!(mock.take_calls(), [Call::AckCqEvents { nevents: FLUSH_AT }]);
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
