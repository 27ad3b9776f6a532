//! Draining a connected QP before reuse: ERROR, every flush completion, then RESET.
//!
//! # Safety
//!
//! The two markers are posted through the raw verbs with no SGE, so they name no memory;
//! everything else is the QP's own outstanding work, which the NIC completes (flushes) and
//! the caller receives, so a buffer-tier chunk is handed back only from the completion that
//! ended it.

use std::time::{Duration, Instant};

use rdma_verbs_sys as sys;

use super::{Connected, QpState, QueuePair, QueuePairState, Reset};
use crate::cq::CompletionQueue;
use crate::error::{check_errno, Error, InvalidInputKind, Result, TransitionError};
use crate::try_twin::try_twin;
use crate::wc::WorkCompletion;

/// The `wr_id` of the zero-length SEND [`QueuePair::drain`] posts after ERROR; its flush
/// completion comes after every earlier send's. Bit 63 is clear, so no buffer-tier `wr_id`
/// has it; a raw-tier WR posted with it ends the drain early (nothing worse: what is left is
/// discarded by the RESET, as by [`QueuePair::reset`]).
pub const DRAIN_SEND_WR_ID: u64 = 0x7fff_ffff_ffff_fffe;
/// The `wr_id` of the receive without SGE [`QueuePair::drain`] posts after ERROR (on a QP
/// without an SRQ), as [`DRAIN_SEND_WR_ID`] for the receive queue.
pub const DRAIN_RECV_WR_ID: u64 = 0x7fff_ffff_ffff_ffff;

/// One queue's marker: not posted yet, posted, or its completion seen.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Marker {
    Due,
    Posted,
    Seen,
}

impl<'res, S: QpState, T: Connected> QueuePair<'res, S, T> {
    try_twin! {
        /// Any state → ERROR → RESET, handing every outstanding work request's completion to
        /// `each` on the way, so that a reused QP strands nothing: the buffer tier's chunks come
        /// back through [`BufferPool::complete`](crate::BufferPool::complete) in `each`, where
        /// [`QueuePair::reset`] would discard them without completions and leave them in flight.
        ///
        /// After `ibv_modify_qp(3)` to ERROR it posts a zero-length signaled SEND
        /// ([`DRAIN_SEND_WR_ID`]) and, without an SRQ, a receive without SGE
        /// ([`DRAIN_RECV_WR_ID`]); a queue flushes in order, so a marker's completion comes after
        /// every earlier WR's. It moves the QP to ERROR again after posting them (rxe flushes
        /// what is posted in ERROR when it enters ERROR), polls `cqs` — which must hold the QP's
        /// send and receive CQs — until both markers completed, and moves it to RESET. Every
        /// other completion polled from `cqs` goes to `each`, other QPs' too when they share
        /// them. The markers themselves are not handed to `each`. An SRQ's receives are not this
        /// QP's and stay posted. Should `each` panic, the completions polled with the one it was
        /// given stay with their CQ, whose next poll returns them (the QP itself is dropped by the
        /// unwinding, and destroyed). A `timeout` past the clock's range (`Duration::MAX`) sets no
        /// deadline.
        ///
        /// # Errors
        ///
        /// [`Error::InvalidInput`] ([`InvalidInputKind::OtherCq`]) when `cqs` lacks one of its
        /// CQs, before anything changes; otherwise, with the QP in ERROR,
        /// [`Error::CompletionTimeout`] (expected and arrived count markers) when `timeout`
        /// passes first, or the [`Error::Verb`] of `ibv_modify_qp`, `ibv_post_send`,
        /// `ibv_post_recv` or a poll. The QP is dropped; [`try_drain`](Self::try_drain) hands it
        /// back.
        #[doc(alias = "ibv_modify_qp")]
        pub fn drain / try_drain(
            self,
            cqs: &[&CompletionQueue<'_>],
            timeout: Duration,
            mut each: impl FnMut(&mut WorkCompletion),
        ) -> Result<QueuePair<'res, Reset, T>, TransitionError<Self>>
        try:
        /// [`drain`](Self::drain), handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] with the QP — unchanged when `cqs` lacks one of its CQs, else in
        /// ERROR (whatever `S` says, as after an error completion) — and the error of
        /// [`drain`](Self::drain).
        #[doc(alias = "ibv_modify_qp")]
        {
            let state = match S::STATE.map_or_else(|| self.query_state(), Ok) {
                Ok(state) => state,
                Err(error) => return Err(TransitionError { qp: self, error }),
            };
            if state == QueuePairState::RESET {
                // Nothing is outstanding in RESET.
                return Ok(self.retype());
            }
            // SAFETY: a live QP; plain reads of the CQ pointers it was created with.
            let (send_cq, recv_cq) =
                unsafe { ((*self.as_raw()).send_cq, (*self.as_raw()).recv_cq) };
            if let Some(missing) = [(send_cq, "send"), (recv_cq, "receive")]
                .into_iter()
                .find(|(cq, _)| !cqs.iter().any(|c| c.as_raw() == *cq))
            {
                let error = Error::invalid(
                    InvalidInputKind::OtherCq,
                    format!("drain polls the QP's CQs: pass its {} CQ too", missing.1),
                );
                return Err(TransitionError { qp: self, error });
            }
            if let Err(error) = self.flush_all(cqs, timeout, &mut each) {
                return Err(TransitionError { qp: self, error });
            }
            self.try_reset()
        }
    }

    /// ERROR, the markers, and every completion until both markers'.
    fn flush_all(
        &self,
        cqs: &[&CompletionQueue<'_>],
        timeout: Duration,
        each: &mut impl FnMut(&mut WorkCompletion),
    ) -> Result<()> {
        // (None: a timeout past any clock's range, such as `Duration::MAX`, never ends.)
        let deadline = Instant::now().checked_add(timeout);
        self.to_error()?;
        let mut send = Marker::Due;
        // SAFETY: a live QP; a plain read of the SRQ pointer it was created with.
        let srq = !unsafe { (*self.as_raw()).srq }.is_null();
        let mut recv = if srq { Marker::Seen } else { Marker::Due };
        let mut storage: [WorkCompletion; 16] = Default::default();
        loop {
            // A full queue refuses its marker until flushes make room: try again each round.
            let mut posted = false;
            if send == Marker::Due && self.post_marker(true)? {
                (send, posted) = (Marker::Posted, true);
            }
            if recv == Marker::Due && self.post_marker(false)? {
                (recv, posted) = (Marker::Posted, true);
            }
            if posted {
                self.to_error()?;
            }
            for cq in cqs {
                // (Should `each` panic, the CQ keeps what it was not given for its next poll.)
                cq.poll_each(&mut storage, |wc| {
                    match (wc.qp_num() == self.qp_num(), wc.wr_id()) {
                        (true, DRAIN_SEND_WR_ID) => {
                            send = Marker::Seen;
                            self.credits.send.put_back(1);
                        }
                        (true, DRAIN_RECV_WR_ID) => {
                            recv = Marker::Seen;
                            self.credits.recv.put_back(1);
                        }
                        _ => each(wc),
                    }
                })?;
            }
            if send == Marker::Seen && recv == Marker::Seen {
                return Ok(());
            }
            if deadline.is_some_and(|deadline| Instant::now() >= deadline) {
                let arrived = usize::from(send == Marker::Seen) + usize::from(recv == Marker::Seen);
                return Err(Error::CompletionTimeout { expected: 2, arrived, timeout });
            }
            std::thread::yield_now();
        }
    }

    /// `ibv_modify_qp` to ERROR, leaving the type as it is (the NIC may do the same).
    pub(crate) fn to_error(&self) -> Result<()> {
        let attr = sys::ibv_qp_attr { qp_state: sys::IBV_QPS_ERR, ..Default::default() };
        self.modify(attr, sys::IBV_QP_STATE, "ibv_modify_qp (→ERROR, drain)")
    }

    /// Posts the send (or receive) marker: `false` when the queue is full (`ENOMEM`), or its
    /// CQ has no room for its completion beside the buffers' (see [`Credits`]), which the
    /// flushes polled meanwhile make. The marker takes one of the CQ's credits until its
    /// completion is seen.
    ///
    /// [`Credits`]: crate::cq::Credits
    fn post_marker(&self, send: bool) -> Result<bool> {
        let credits = if send { self.credits.send } else { self.credits.recv };
        if credits.take(1).is_err() {
            return Ok(false);
        }
        let ret = if send {
            let mut wr = sys::ibv_send_wr {
                wr_id: DRAIN_SEND_WR_ID,
                opcode: sys::IBV_WR_SEND,
                send_flags: sys::IBV_SEND_SIGNALED,
                ..Default::default()
            };
            let mut bad = std::ptr::null_mut();
            // SAFETY: a live connected QP; the WR has no SGE, so it names no memory, and
            // is one WR (`next` is NULL). In ERROR it is flushed, never sent.
            unsafe { sys::inline::ibv_post_send(self.as_raw(), &mut wr, &mut bad) }
        } else {
            let mut wr = sys::ibv_recv_wr { wr_id: DRAIN_RECV_WR_ID, ..Default::default() };
            let mut bad = std::ptr::null_mut();
            // SAFETY: a live QP with its own receive queue; the WR has no SGE, so the NIC
            // writes nothing, and is one WR (`next` is NULL).
            unsafe { sys::inline::ibv_post_recv(self.as_raw(), &mut wr, &mut bad) }
        };
        let posted = check_errno(ret, if send { "ibv_post_send" } else { "ibv_post_recv" });
        if posted.is_err() {
            credits.put_back(1);
        }
        match posted {
            Ok(()) => Ok(true),
            Err(Error::WorkQueueFull { .. }) => Ok(false),
            Err(error) => Err(error),
        }
    }
}
