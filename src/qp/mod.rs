//! Queue pairs (RC, UC, UD), with their state machine and transport type in the type.
#![allow(unsafe_code)]
//! # Safety
//!
//! A `QueuePair<'res, S, T>` owns an `ibv_qp` until `ibv_destroy_qp` and borrows the PD, CQs
//! (and SRQ) it was created with for `'res`, so they outlive it. `S` is the state *we* moved it
//! to; the NIC may move it to ERROR by itself, which only makes later posts fail or flush,
//! never unsound. Raw posting is `unsafe`: the caller promises what the NIC may do to the
//! memory.
//!
//! ```text
//!  create_qp::<T>    into_init          into_rtr          into_rts
//! ─────────────▶ Reset ───────▶ Init ───────▶ Rtr ───────▶ Rts
//!                       post_recv_* ✓  post_recv_* ✓  post_recv_* ✓, post_send_* ✓
//! ```
//!
//! # Posting: two tiers, told apart by what they post
//!
//! - `post_{send,recv}_wr` (one [`SendWr`](crate::SendWr) / [`RecvWr`](crate::RecvWr)) and
//!   `post_{send,recv}_wrs` (a [`SendWrList`](crate::SendWrList) /
//!   [`RecvWrList`](crate::RecvWrList)): the raw tier. Work requests name memory by address
//!   and key, so these are `unsafe`: the caller keeps the memory registered and untouched
//!   until the completion. No cost beyond the provider's.
//! - `post_{send,recv}_buffer` (one [`Buffer`](crate::Buffer)) and `post_{send,recv}_buffers`
//!   (a [`SendBufferList`](crate::SendBufferList) / [`RecvBufferList`](crate::RecvBufferList)):
//!   the safe tier. A buffer moves into the QP and comes back with its completion
//!   ([`BufferPool::complete`](crate::BufferPool::complete)), so nothing can touch its bytes
//!   meanwhile.
//!
//! The suffix says the tier (`_wr`, `_wrs` raw; `_buffer`, `_buffers` safe), as the list
//! types' names say what they hold, so a reader tells them apart without looking for
//! `unsafe`.

mod attr;
mod connect;
mod create;
mod drain;
mod ece;
mod extended;
#[cfg(test)]
mod fit_tests;
pub(crate) mod kind;
mod modify;
mod post;
mod post_recv;
mod query;
mod rate_limit;
mod rd_atom;
mod retry;
mod state;
mod xrc;

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

pub use attr::{QpCapabilities, QpInitAttr, ToInitAttr, ToRtrAttr, ToRtsAttr, UdToInitAttr};
pub use drain::{DRAIN_RECV_WR_ID, DRAIN_SEND_WR_ID};
pub use ece::Ece;
#[cfg(all(feature = "efa", rdma_verbs_efadv))]
pub(crate) use kind::kind_sealed;
pub use kind::{
    Connected, Datagram, HasReceiveQueue, HasSendQueue, QpType, Rc, ToPeer, Uc, Ud, XrcRecv,
    XrcSend,
};
pub use modify::{QpAttrMask, QueuePairState};
pub use query::QpAttributes;
pub use rate_limit::PacketPacingCaps;
pub use retry::{AckTimeout, RetryCount, RnrRetry, RnrTimer};
pub use state::{Init, QpState, ReceiveReady, Reset, Rtr, Rts, Unknown};

use crate::cq::{CompletionQueue, Credits};
use crate::endpoint::Qpn;
use crate::error::{check_errno, Error, Result, TransitionError};
use crate::fit::Slack;
use crate::lenders::Lenders;
use crate::pd::ProtectionDomain;
use crate::try_twin::try_twin;
use crate::verbs_path::VerbsPath;

/// A queue pair (`struct ibv_qp`, `ibv_create_qp(3)`) in state `S`, of transport type `T`
/// ([`Rc`] unless said otherwise, [`Uc`] or [`Ud`]).
///
/// It posts in two tiers, named after what they post: buffers of a
/// [`BufferPool`](crate::BufferPool), safely ([`post_send_buffer`](Self::post_send_buffer),
/// [`post_recv_buffers`](Self::post_recv_buffers), …), and work requests naming memory by
/// address, `unsafe` ([`post_send_wr`](Self::post_send_wr),
/// [`post_recv_wrs`](Self::post_recv_wrs), …).
///
/// It borrows the PD and CQs it was created with, so they outlive it:
///
/// ```compile_fail,E0597
/// # use rdma_verbs::*;
/// # fn f(ctx: &Context) -> Result<()> {
/// let pd = ctx.alloc_pd()?;
/// let qp = {
///     let cq = ctx.create_cq(16)?;
///     pd.create_rc_qp(&QpInitAttr::new(&cq))?
/// }; // error: `cq` dropped while still borrowed
/// # drop(qp); Ok(()) }
/// ```
///
/// nor its PD:
///
/// ```compile_fail,E0597
/// # use rdma_verbs::*;
/// # fn f(ctx: &Context) -> Result<()> {
/// let cq = ctx.create_cq(16)?;
/// let qp = {
///     let pd = ctx.alloc_pd()?;
///     pd.create_rc_qp(&QpInitAttr::new(&cq))?
/// }; // error: `pd` dropped while still borrowed
/// # drop(qp); Ok(()) }
/// ```
///
/// Sends exist only in RTS:
///
/// ```compile_fail,E0599
/// # use rdma_verbs::*;
/// # fn f(qp: QueuePair<'_, Init>, wr: &mut SendWr<'_>) -> Result<()> {
/// unsafe { qp.post_send_wr(wr)? }; // error: no method `post_send` on `QueuePair<Init>`
/// # Ok(()) }
/// ```
#[must_use = "the queue pair is destroyed when dropped"]
pub struct QueuePair<'res, S: QpState, T: QpType = Rc> {
    raw: NonNull<sys::ibv_qp>,
    /// The extended QP (`ibv_qp_to_qp_ex`), when sends go through the `ibv_wr_*` builders.
    ex: Option<extended::ExQp>,
    pd: &'res ProtectionDomain<'res>,
    caps: QpCapabilities,
    /// What sends may carry, learned at INIT (the UD path MTU) and RTS (`max_rd_atomic`).
    limits: SendLimits,
    /// What a send may ask of this QP, from `caps`, `limits`, its type and `ex`, worked out
    /// again whenever one of them changes ([`post::send_slack`]): a post compares a WR's
    /// [`Demand`](crate::fit::Demand) with it.
    slack: Slack,
    /// The owners of memory its work requests name (the buffer tier's pools), told when it is
    /// destroyed.
    lenders: Lenders,
    /// The credits its buffer-tier posts and its drains take: its CQs'.
    credits: QpCredits<'res>,
    /// The RDMA READ / atomic responder resources it holds of its context's
    /// (`max_dest_rd_atomic` from RTR until RESET or destruction; see `rd_atom`).
    responder_resources: u8,
    /// Invariant in `'res`: memory lent to the QP for `'res` (the buffer tier) must outlive
    /// it, and a covariant `'res` could be shortened at each call.
    _res: PhantomData<fn(&'res CompletionQueue<'res>) -> &'res CompletionQueue<'res>>,
    _state: PhantomData<(S, T)>,
}

/// The credits (see [`Credits`]) of a QP's send and receive CQs.
#[derive(Clone, Copy)]
pub(crate) struct QpCredits<'res> {
    pub(crate) send: &'res Credits,
    pub(crate) recv: &'res Credits,
}

/// What the device allows a send, checked before posting.
#[derive(Clone, Copy, Debug, Default)]
struct SendLimits {
    /// A UD message's largest size: the port's active MTU (0 until INIT; at most 4096, so 16
    /// bits keep `QueuePair` small).
    ud_mtu: u16,
    /// `max_rd_atomic` in RTS (RC): set by [`QueuePair::into_rts`] (from the attributes, in
    /// `transition`), read from the device by [`QueuePair::into_checked`] and after rdma_cm
    /// connects. The RDMA READs and atomics it may have outstanding: with `Some(0)` the QP
    /// never issues one (rxe leaves it queued for good), so they are refused. `None` outside
    /// RTS, or when the query failed: then nothing is refused for it.
    rd_atomic: Option<u8>,
}

// SAFETY: verbs on a QP are thread-safe (providers lock their queues), and the fields of
// this handle are not changed after creation. Through `&self` the provider's objects are
// written in two places only: the legacy posts, which the provider serialises with its queue
// lock, and the extended builders, which write `ibv_qp_ex.wr_id`/`wr_flags` and call the
// `wr_*` members strictly between `ibv_wr_start` and `ibv_wr_complete`/`ibv_wr_abort` — the
// provider holds the send queue's lock for that whole span (`ibv_wr_post(3)`), unless the QP
// was created with a thread domain, which this crate never does.
unsafe impl<S: QpState, T: QpType> Send for QueuePair<'_, S, T> {}
// SAFETY: as above: posting through `&self` from several threads is allowed by rdma-core.
unsafe impl<S: QpState, T: QpType> Sync for QueuePair<'_, S, T> {}

impl<'res, S: QpState, T: QpType> QueuePair<'res, S, T> {
    /// The QP number, which the peer needs.
    pub fn qp_num(&self) -> Qpn {
        // SAFETY: a live QP; a plain field read.
        Qpn::from_low_bits(unsafe { (*self.raw.as_ptr()).qp_num })
    }

    /// The capabilities as creation returned them (at least what was asked);
    /// [`QueuePair::query`] reports those the provider set, which can be more (rxe rounds
    /// its queues up: 7 send WRs fit where 4 were asked).
    pub fn caps(&self) -> QpCapabilities {
        self.caps
    }

    /// The protection domain.
    pub fn pd(&self) -> &'res ProtectionDomain<'res> {
        self.pd
    }

    /// The raw QP pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_qp {
        self.raw.as_ptr()
    }

    /// The raw extended QP (`ibv_qp_to_qp_ex(3)`), when sends go through the extended verbs.
    pub fn as_raw_ex(&self) -> Option<*mut sys::ibv_qp_ex> {
        self.ex.as_ref().map(|ex| ex.raw.as_ptr())
    }

    /// Which verbs sends are posted with: [`VerbsPath::Extended`] (`ibv_wr_start`, the
    /// `ibv_wr_*` builders, `ibv_wr_complete`: one doorbell per list) when the QP was created
    /// through `ibv_create_qp_ex(3)` with send operations, [`VerbsPath::Legacy`]
    /// (`ibv_post_send(3)`) otherwise.
    #[must_use]
    pub fn verbs_path(&self) -> VerbsPath {
        if self.ex.is_some() {
            VerbsPath::Extended
        } else {
            VerbsPath::Legacy
        }
    }

    /// `ibv_destroy_qp(3)`—Destroys the QP, reporting failure (dropping logs instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_destroy_qp`; the QP is then moved to RESET (else ERROR), so
    /// that it holds no work request naming memory its owners may free, and leaked.
    #[doc(alias = "ibv_destroy_qp")]
    pub fn destroy(self) -> Result<()> {
        ManuallyDrop::new(self).destroy_raw()
    }

    fn destroy_raw(&mut self) -> Result<()> {
        // SAFETY: a live QP; a plain field read (libibverbs set it at creation).
        let srq = unsafe { (*self.as_raw()).srq };
        // SAFETY: a live QP, destroyed once (by Drop or by `destroy`, which suppresses Drop).
        let destroyed = unsafe { destroy_qp(&self.pd.context().library().fns, self.as_raw()) };
        // Destroyed, or leaked in RESET or ERROR: either way the handle is gone, and with it
        // what the QP held of the context's responder resources.
        self.pd.context().give_responder_resources(std::mem::take(&mut self.responder_resources));
        destroyed?;
        // SAFETY: destroyed; the pools it was given chunks of outlive it ('p: 'res).
        unsafe { self.lenders.release() };
        if !srq.is_null() {
            // (Its creation held the SRQ's entries: a QP is made only once that succeeded.)
            self.credits.recv.unhold_for_srq(srq as usize);
        }
        Ok(())
    }

    /// The credits of its send CQ, which its buffer-tier sends take.
    #[inline(always)]
    pub(crate) fn send_credits(&self) -> &'res Credits {
        self.credits.send
    }

    /// The credits of its receive CQ, which its receives through the buffer tier take.
    #[inline(always)]
    pub(crate) fn recv_credits(&self) -> &'res Credits {
        self.credits.recv
    }

    /// The owners of memory its work requests name (see [`Lenders`]), for the safe tiers to
    /// note before they post: told when the QP is destroyed.
    #[inline(always)]
    pub(crate) fn lenders(&self) -> &Lenders {
        &self.lenders
    }

    /// `ibv_modify_qp(3)` of the fields of `attr` that `mask` names, its error named `verb`.
    fn modify(&self, mut attr: sys::ibv_qp_attr, mask: u32, verb: &'static str) -> Result<()> {
        // SAFETY: a live QP and a fully initialized attribute struct, this call's own copy.
        let ret = unsafe {
            (self.pd.context().library().fns.ibv_modify_qp)(self.as_raw(), &mut attr, mask as i32)
        };
        check_errno(ret, verb)
    }

    /// `ibv_modify_qp(3)` to state `T` with `mask` (`IBV_QP_STATE` added); on failure the
    /// QP comes back unchanged with the error.
    fn transition<N: QpState>(
        self,
        mut attr: sys::ibv_qp_attr,
        mask: u32,
        verb: &'static str,
        state: sys::ibv_qp_state,
    ) -> Result<QueuePair<'res, N, T>, TransitionError<Self>> {
        attr.qp_state = state;
        let mask = mask | sys::IBV_QP_STATE;
        let mut qp = self;
        let claim = match qp.claim_rd_atom(&attr, mask) {
            Ok(claim) => claim,
            Err(error) => return Err(TransitionError { qp, error }),
        };
        let result = qp.modify(attr, mask, verb);
        qp.settle_rd_atom(claim, result.is_ok());
        if let Err(error) = result {
            return Err(TransitionError { qp, error });
        }
        let mut qp = qp.retype::<N>();
        if state == sys::IBV_QPS_RTS && mask & sys::IBV_QP_MAX_QP_RD_ATOMIC != 0 {
            qp.limits.rd_atomic = Some(attr.max_rd_atomic);
            qp.slack = post::send_slack::<T>(qp.pd, &qp.caps, qp.limits, qp.ex.as_ref());
        }
        Ok(qp)
    }

    /// The same QP with another state in its type (also for `cm`, where rdma_cm performs the
    /// transitions).
    pub(crate) fn retype<N: QpState>(self) -> QueuePair<'res, N, T> {
        let mut this = ManuallyDrop::new(self);
        // What `into_rts` learnt holds only until the next transition (it sets it again).
        let limits = SendLimits { rd_atomic: None, ..this.limits };
        let ex = this.ex.take();
        QueuePair {
            lenders: std::mem::take(&mut this.lenders),
            credits: this.credits,
            responder_resources: this.responder_resources,
            raw: this.raw,
            slack: post::send_slack::<T>(this.pd, &this.caps, limits, ex.as_ref()),
            ex,
            pd: this.pd,
            caps: this.caps,
            limits,
            _res: PhantomData,
            _state: PhantomData,
        }
    }

    /// `ibv_query_qp(3)`—The state the device reports now (all attributes:
    /// [`QueuePair::query`]). It differs from `S` when the QP
    /// moved to ERROR by itself (an error completion) or after [`QueuePair::modify_raw`].
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_query_qp`.
    #[doc(alias = "ibv_query_qp")]
    pub fn query_state(&self) -> Result<QueuePairState> {
        Ok(QueuePairState(self.query_raw(sys::IBV_QP_STATE)?.qp_state))
    }

    try_twin! {
        /// Any state → RESET, to reuse the QP (after an error, or to connect it elsewhere).
        /// Outstanding work requests are discarded without completions.
        ///
        /// # Errors
        ///
        /// The [`Error::Verb`] of `ibv_modify_qp`; the QP is dropped.
        /// [`try_reset`](Self::try_reset) hands it back.
        pub fn reset / try_reset(self) -> Result<QueuePair<'res, Reset, T>, TransitionError<Self>>
        try:
        /// [`reset`](Self::reset), handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] with the QP and the [`Error::Verb`] of `ibv_modify_qp`.
        {
            self.transition(
                sys::ibv_qp_attr::default(),
                0,
                "ibv_modify_qp (→RESET)",
                sys::IBV_QPS_RESET,
            )
        }
    }

    try_twin! {
        /// `ibv_modify_qp(3)` with a raw attribute struct and mask, for what the typed
        /// transitions do not cover (alternate paths, SQD, ...). `mask` is checked first against
        /// the transition table of the QP's type (the target state is `attr.qp_state` when `mask`
        /// holds `STATE`, else the current one); the result's state is [`Unknown`] to the type.
        ///
        /// # Errors
        ///
        /// [`Error::InvalidInput`] naming the mask bits that are missing or not allowed for the
        /// transition (or the transition itself), or a `max_dest_rd_atomic` / `max_rd_atomic`
        /// above the device's limits (as [`QueuePair::into_rtr`] and [`QueuePair::into_rts`]
        /// hold them), or the [`Error::Verb`] of `ibv_modify_qp` /
        /// `ibv_query_qp`; the QP is dropped. [`try_modify_raw`](Self::try_modify_raw) hands it
        /// back.
        #[doc(alias = "ibv_modify_qp")]
        pub fn modify_raw / try_modify_raw(
            self,
            attr: &sys::ibv_qp_attr,
            mask: QpAttrMask,
        ) -> Result<QueuePair<'res, Unknown, T>, TransitionError<Self>>
        try:
        /// [`modify_raw`](Self::modify_raw), handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] with the QP and the error of [`modify_raw`](Self::modify_raw).
        #[doc(alias = "ibv_modify_qp")]
        {
            let from = match S::STATE.map_or_else(|| self.query_state(), Ok) {
                Ok(state) => state,
                Err(error) => return Err(TransitionError { qp: self, error }),
            };
            let to =
                if mask.contains(QpAttrMask::STATE) { QueuePairState(attr.qp_state) } else { from };
            if let Err(error) = modify::check_mask(T::RAW, T::NAME, from, to, mask) {
                return Err(TransitionError { qp: self, error });
            }
            let mut qp = self;
            let claim = match qp.claim_rd_atom(attr, mask.bits()) {
                Ok(claim) => claim,
                Err(error) => return Err(TransitionError { qp, error }),
            };
            let result = qp.modify(*attr, mask.bits(), "ibv_modify_qp");
            qp.settle_rd_atom(claim, result.is_ok());
            if let Err(error) = result {
                return Err(TransitionError { qp, error });
            }
            Ok(qp.retype())
        }
    }
}

impl<'res, T: QpType> QueuePair<'res, Unknown, T> {
    try_twin! {
        /// Puts the device's current state back into the type, checking it is `N`. What sends
        /// are checked against is read from the device too, as the typed transitions record it:
        /// a UD QP's message limit (its port's active MTU) and, in RTS, an RC QP's
        /// `max_rd_atomic` (with 0, RDMA READs and atomics are refused, not left to hang).
        ///
        /// # Errors
        ///
        /// [`Error::WrongState`] naming the actual state when it is not `N`, or the
        /// [`Error::Verb`] of `ibv_query_qp` (or, for UD, `ibv_query_port`); the QP is dropped.
        /// [`try_into_checked`](Self::try_into_checked) hands it back.
        pub fn into_checked / try_into_checked<N: QpState>(
            self,
        ) -> Result<QueuePair<'res, N, T>, TransitionError<Self>>
        try:
        /// [`into_checked`](Self::into_checked), handing the QP back on failure (still of
        /// [`Unknown`] state, to check for another).
        ///
        /// # Errors
        ///
        /// [`TransitionError`] with the QP and the error of [`into_checked`](Self::into_checked).
        {
            let attr = match self.query_raw(LIMITS_MASK) {
                Ok(attr) => attr,
                Err(error) => return Err(TransitionError { qp: self, error }),
            };
            let state = QueuePairState(attr.qp_state);
            if Some(state) != N::STATE {
                let error =
                    Error::WrongState { message: format!("the QP is in {state}, not {}", N::NAME) };
                return Err(TransitionError { qp: self, error });
            }
            let ud_mtu = match self.ud_mtu_of(&attr) {
                Ok(mtu) => mtu,
                Err(error) => return Err(TransitionError { qp: self, error }),
            };
            let mut qp = self.retype::<N>();
            qp.learn_limits(&attr, ud_mtu);
            Ok(qp)
        }
    }
}

/// `ibv_destroy_qp(3)` of `qp`; when the provider refuses, moves it to RESET (else ERROR)
/// before it is leaked. The borrows that kept lent memory alive (a buffer pool's region,
/// receive buffers) end with the QP's handle, so the leaked QP must not keep work requests
/// naming that memory: RESET discards them, ERROR flushes them, and neither lets the NIC
/// touch it.
///
/// # Safety
///
/// `qp` is a live QP of the library of `fns`, destroyed once (it is gone, or leaked, after).
pub(crate) unsafe fn destroy_qp(fns: &sys::IbverbsFns, qp: *mut sys::ibv_qp) -> Result<()> {
    // SAFETY: the caller's.
    let result = check_errno(unsafe { (fns.ibv_destroy_qp)(qp) }, "ibv_destroy_qp");
    if result.is_err() {
        let quiesced = [sys::IBV_QPS_RESET, sys::IBV_QPS_ERR].into_iter().any(|state| {
            let mut attr = sys::ibv_qp_attr { qp_state: state, ..Default::default() };
            // SAFETY: the QP is still live (its destroy failed); the mask names the one field
            // set.
            unsafe { (fns.ibv_modify_qp)(qp, &mut attr, sys::IBV_QP_STATE as i32) == 0 }
        });
        if !quiesced {
            log::error!(
                "QP {:#x} could be neither destroyed nor moved to RESET or ERROR: work requests \
                 it still holds may name memory that is freed when its owners drop",
                // SAFETY: a live QP; a plain field read.
                unsafe { (*qp).qp_num }
            );
        }
    }
    result
}

/// What [`QueuePair::learn_limits`] reads of a QP whose transitions were not ours.
const LIMITS_MASK: u32 = sys::IBV_QP_STATE | sys::IBV_QP_PORT | sys::IBV_QP_MAX_QP_RD_ATOMIC;

impl<S: QpState, T: QpType> QueuePair<'_, S, T> {
    /// A datagram QP's message limit for the port `attr` names, once it is bound to one (past
    /// RESET); the limit it has for other types and in RESET.
    fn ud_mtu_of(&self, attr: &sys::ibv_qp_attr) -> Result<u16> {
        if !T::DATAGRAM || attr.qp_state == sys::IBV_QPS_RESET {
            return Ok(self.limits.ud_mtu);
        }
        Ok(ud_mtu(&self.pd.context().query_port(attr.port_num)?))
    }

    /// Records what sends may carry from the device's attributes (`LIMITS_MASK`), for a QP
    /// that reached its state by another path than the typed transitions (`modify_raw`,
    /// rdma_cm): `ud_mtu` (from [`Self::ud_mtu_of`]), and an RC QP's `max_rd_atomic` in RTS.
    fn learn_limits(&mut self, attr: &sys::ibv_qp_attr, ud_mtu: u16) {
        self.limits.ud_mtu = ud_mtu;
        if T::RAW == sys::IBV_QPT_RC && attr.qp_state == sys::IBV_QPS_RTS {
            self.limits.rd_atomic = Some(attr.max_rd_atomic);
        }
        self.slack = post::send_slack::<T>(self.pd, &self.caps, self.limits, self.ex.as_ref());
    }
}

#[cfg(feature = "rdmacm")]
impl<'res> QueuePair<'res, Rts, Rc> {
    /// Reads `max_rd_atomic` from the device after rdma_cm moved the QP to RTS (the
    /// initiator depth it negotiated), so that a READ on a QP that may issue none is refused
    /// instead of hanging. When the query fails nothing is refused for it, as before.
    pub(crate) fn learn_rd_atomic(mut self) -> Self {
        if let Ok(attr) = self.query_raw(LIMITS_MASK) {
            let ud_mtu = self.limits.ud_mtu;
            self.learn_limits(&attr, ud_mtu);
        }
        self
    }
}

/// The largest UD message on a port: its active MTU (0 when unknown, refusing every payload).
pub(super) fn ud_mtu(port: &crate::port::PortAttr) -> u16 {
    port.active_mtu().bytes().and_then(|b| u16::try_from(b).ok()).unwrap_or(0)
}

impl<S: QpState, T: QpType> Drop for QueuePair<'_, S, T> {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_raw() {
            log::warn!("leaking QP {:#x}: {e}", self.qp_num().get());
        }
    }
}

impl<S: QpState, T: QpType> std::fmt::Debug for QueuePair<'_, S, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qpn", &format_args!("{:#x}", self.qp_num().get()))
            .field("type", &T::NAME)
            .field("state", &S::NAME)
            .field("caps", &self.caps)
            .field("verbs_path", &self.verbs_path())
            .finish()
    }
}
