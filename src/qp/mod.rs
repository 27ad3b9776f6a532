//! Reliable Connected queue pairs, with their state machine in the type.
#![allow(unsafe_code)]
//! # Safety
//!
//! A `QueuePair<'res, S>` owns an `ibv_qp` until `ibv_destroy_qp` and borrows the PD and CQs
//! it was created with for `'res`, so they outlive it. `S` is the state *we* moved it to; the
//! NIC may move it to ERROR by itself, which only makes later posts fail or flush, never
//! unsound. Posting is `unsafe`: the caller promises what the NIC may do to the memory.
//!
//! ```text
//!  create_rc_qp      into_init          into_rtr          into_rts
//! ─────────────▶ Reset ───────▶ Init ───────▶ Rtr ───────▶ Rts
//!                          post_recv ✓    post_recv ✓    post_recv ✓, post_send ✓
//! ```

mod attr;
mod modify;
mod state;

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

pub use attr::{
    AddressVector, GlobalRoute, InitAttr, QpCapabilities, QpInitAttr, RtrAttr, RtsAttr,
};
pub use modify::{QpAttrMask, QueuePairState};
pub use state::{Init, QpState, ReceiveReady, Reset, Rtr, Rts, Unknown};

use crate::cq::CompletionQueue;
use crate::endpoint::Qpn;
use crate::error::{check_errno, check_ptr, Error, Result, TransitionError};
use crate::pd::ProtectionDomain;
use crate::wr::{RecvWr, SendFlags, SendWr};

/// A Reliable Connected queue pair (`struct ibv_qp`, `ibv_create_qp(3)`) in state `S`.
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
/// unsafe { qp.post_send(wr)? }; // error: no method `post_send` on `QueuePair<Init>`
/// # Ok(()) }
/// ```
pub struct QueuePair<'res, S: QpState> {
    raw: NonNull<sys::ibv_qp>,
    pd: &'res ProtectionDomain<'res>,
    caps: QpCapabilities,
    /// Invariant in `'res`: memory lent to the QP for `'res` (the buffer tier) must outlive
    /// it, and a covariant `'res` could be shortened at each call.
    _res: PhantomData<fn(&'res CompletionQueue<'res>) -> &'res CompletionQueue<'res>>,
    _state: PhantomData<S>,
}

// SAFETY: verbs on a QP are thread-safe (providers lock their queues); the handle is
// immutable after creation.
unsafe impl<S: QpState> Send for QueuePair<'_, S> {}
// SAFETY: as above: posting through `&self` from several threads is allowed by rdma-core.
unsafe impl<S: QpState> Sync for QueuePair<'_, S> {}

impl<'res> ProtectionDomain<'res> {
    /// `ibv_create_qp(3)`—Creates an RC queue pair in RESET.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when a CQ belongs to another device context;
    /// [`Error::Verb`] from `ibv_create_qp` (`EINVAL`: capabilities above the device's
    /// limits; `ENOMEM`: out of resources).
    #[doc(alias = "ibv_create_qp")]
    pub fn create_rc_qp(&'res self, attr: &QpInitAttr<'res>) -> Result<QueuePair<'res, Reset>> {
        let ctx = self.context().as_raw();
        if attr.send_cq.context().as_raw() != ctx || attr.recv_cq.context().as_raw() != ctx {
            return Err(Error::InvalidInput(
                "the QP's CQs must belong to the same device context as its PD".into(),
            ));
        }
        let mut init = sys::ibv_qp_init_attr {
            send_cq: attr.send_cq.as_raw(),
            recv_cq: attr.recv_cq.as_raw(),
            cap: attr.cap.to_raw(),
            qp_type: sys::IBV_QPT_RC,
            sq_sig_all: attr.sq_sig_all.into(),
            ..Default::default()
        };
        // SAFETY: a live PD and CQs of its context; `init` is a valid attribute struct, which
        // the provider updates with the capabilities it allocated.
        let raw = unsafe { (self.context().library().fns.ibv_create_qp)(self.as_raw(), &mut init) };
        let raw =
            check_ptr(raw, "ibv_create_qp").map_err(|e| self.explain_create_qp(e, &attr.cap))?;
        Ok(QueuePair {
            raw,
            pd: self,
            caps: QpCapabilities::from_raw(&init.cap),
            _res: PhantomData,
            _state: PhantomData,
        })
    }
}

impl ProtectionDomain<'_> {
    /// Adds the requested capabilities, and the device's limits, to an `EINVAL` from
    /// `ibv_create_qp`: the provider refused one of them but does not say which.
    fn explain_create_qp(&self, error: Error, cap: &QpCapabilities) -> Error {
        if error.errno() != Some(libc::EINVAL) {
            return error;
        }
        let limits = match self.context().query_device() {
            Ok(d) => format!(
                "device limits: max_qp_wr {}, max_sge {} (the device reports no inline limit)",
                d.max_qp_wr(),
                d.max_sge()
            ),
            Err(_) => "the device limits could not be queried".into(),
        };
        error.with_hint(format!(
            "the provider refused the requested capabilities max_send_wr {}, max_recv_wr {}, \
             max_send_sge {}, max_recv_sge {}, max_inline_data {}; {limits}; lower them",
            cap.max_send_wr,
            cap.max_recv_wr,
            cap.max_send_sge,
            cap.max_recv_sge,
            cap.max_inline_data
        ))
    }
}

impl<'res, S: QpState> QueuePair<'res, S> {
    /// The QP number, which the peer needs.
    pub fn qp_num(&self) -> Qpn {
        // SAFETY: a live QP; a plain field read.
        Qpn(unsafe { (*self.raw.as_ptr()).qp_num })
    }

    /// The capabilities the provider allocated.
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

    /// `ibv_destroy_qp(3)`—Destroys the QP, reporting failure (dropping logs instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_destroy_qp`; the QP is then leaked.
    #[doc(alias = "ibv_destroy_qp")]
    pub fn destroy(self) -> Result<()> {
        ManuallyDrop::new(self).destroy_raw()
    }

    fn destroy_raw(&self) -> Result<()> {
        // SAFETY: a live QP, destroyed once (by Drop or by `destroy`, which suppresses Drop).
        let ret = unsafe { (self.pd.context().library().fns.ibv_destroy_qp)(self.as_raw()) };
        check_errno(ret, "ibv_destroy_qp")
    }

    /// `ibv_modify_qp(3)` to state `T` with `mask` (`IBV_QP_STATE` added); on failure the
    /// QP comes back unchanged with the error.
    fn transition<T: QpState>(
        self,
        mut attr: sys::ibv_qp_attr,
        mask: u32,
        verb: &'static str,
        state: sys::ibv_qp_state,
    ) -> Result<QueuePair<'res, T>, TransitionError<Self>> {
        attr.qp_state = state;
        let mask = (mask | sys::IBV_QP_STATE) as i32;
        // SAFETY: a live QP and a valid attribute struct whose masked fields are all set.
        let ret = unsafe {
            (self.pd.context().library().fns.ibv_modify_qp)(self.as_raw(), &mut attr, mask)
        };
        if let Err(error) = check_errno(ret, verb) {
            return Err(TransitionError { qp: self, error });
        }
        Ok(self.retype())
    }

    /// The same QP with another state in its type.
    fn retype<T: QpState>(self) -> QueuePair<'res, T> {
        let this = ManuallyDrop::new(self);
        QueuePair {
            raw: this.raw,
            pd: this.pd,
            caps: this.caps,
            _res: PhantomData,
            _state: PhantomData,
        }
    }

    /// `ibv_query_qp(3)`—The state the device reports now. It differs from `S` when the QP
    /// moved to ERROR by itself (an error completion) or after [`QueuePair::modify_raw`].
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_query_qp`.
    #[doc(alias = "ibv_query_qp")]
    pub fn query_state(&self) -> Result<QueuePairState> {
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        let mask = sys::IBV_QP_STATE as i32;
        // SAFETY: a live QP and writable attribute structs.
        let ret = unsafe {
            (self.pd.context().library().fns.ibv_query_qp)(
                self.as_raw(),
                &mut attr,
                mask,
                &mut init,
            )
        };
        check_errno(ret, "ibv_query_qp")?;
        Ok(QueuePairState(attr.qp_state))
    }

    /// Any state → RESET, to reuse the QP (after an error, or to connect it elsewhere).
    /// Outstanding work requests are discarded without completions.
    ///
    /// # Errors
    ///
    /// [`TransitionError`] with the QP and the [`Error::Verb`] of `ibv_modify_qp`.
    pub fn reset(self) -> Result<QueuePair<'res, Reset>, TransitionError<Self>> {
        self.transition(
            sys::ibv_qp_attr::default(),
            0,
            "ibv_modify_qp (→RESET)",
            sys::IBV_QPS_RESET,
        )
    }

    /// `ibv_modify_qp(3)` with a raw attribute struct and mask, for what the typed
    /// transitions do not cover (alternate paths, SQD, ...). `mask` is checked first against
    /// the RC transition table (the target state is `attr.qp_state` when `mask` holds
    /// `STATE`, else the current one); the result's state is [`Unknown`] to the type.
    ///
    /// # Errors
    ///
    /// [`TransitionError`] with the QP and [`Error::InvalidInput`] naming the mask bits that
    /// are missing or not allowed for the transition (or the transition itself), or the
    /// [`Error::Verb`] of `ibv_modify_qp` / `ibv_query_qp`.
    #[doc(alias = "ibv_modify_qp")]
    pub fn modify_raw(
        self,
        attr: &sys::ibv_qp_attr,
        mask: QpAttrMask,
    ) -> Result<QueuePair<'res, Unknown>, TransitionError<Self>> {
        let from = match S::STATE.map_or_else(|| self.query_state(), Ok) {
            Ok(state) => state,
            Err(error) => return Err(TransitionError { qp: self, error }),
        };
        let to =
            if mask.contains(QpAttrMask::STATE) { QueuePairState(attr.qp_state) } else { from };
        if let Err(error) = modify::check_rc_mask(from, to, mask) {
            return Err(TransitionError { qp: self, error });
        }
        let mut attr = *attr;
        // SAFETY: a live QP; the mask names the fields the caller set in `attr`.
        let ret = unsafe {
            (self.pd.context().library().fns.ibv_modify_qp)(
                self.as_raw(),
                &mut attr,
                mask.bits() as i32,
            )
        };
        if let Err(error) = check_errno(ret, "ibv_modify_qp") {
            return Err(TransitionError { qp: self, error });
        }
        Ok(self.retype())
    }
}

impl<'res> QueuePair<'res, Unknown> {
    /// Puts the device's current state back into the type, checking it is `T`.
    ///
    /// # Errors
    ///
    /// [`TransitionError`] with the QP and [`Error::InvalidInput`] naming the actual state
    /// when it is not `T`, or the [`Error::Verb`] of `ibv_query_qp`.
    pub fn into_checked<T: QpState>(self) -> Result<QueuePair<'res, T>, TransitionError<Self>> {
        match self.query_state() {
            Ok(state) if Some(state) == T::STATE => Ok(self.retype()),
            Ok(state) => {
                let error = Error::InvalidInput(format!("the QP is in {state}, not {}", T::NAME));
                Err(TransitionError { qp: self, error })
            }
            Err(error) => Err(TransitionError { qp: self, error }),
        }
    }
}

impl<'res> QueuePair<'res, Reset> {
    /// RESET → INIT: binds the QP to a port and sets what the peer may do.
    ///
    /// # Errors
    ///
    /// [`TransitionError`] holding the QP and the [`Error::Verb`] of `ibv_modify_qp`
    /// (`EINVAL`: a port or P_Key index that does not exist).
    pub fn into_init(
        self,
        attr: &InitAttr,
    ) -> Result<QueuePair<'res, Init>, TransitionError<Self>> {
        let raw = sys::ibv_qp_attr {
            pkey_index: attr.pkey_index,
            port_num: attr.port,
            qp_access_flags: attr.access.bits(),
            ..Default::default()
        };
        let mask = sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_ACCESS_FLAGS;
        self.transition(raw, mask, "ibv_modify_qp (RESET→INIT)", sys::IBV_QPS_INIT)
    }
}

impl<'res> QueuePair<'res, Init> {
    /// INIT → RTR: connects the receive side to the peer.
    ///
    /// # Errors
    ///
    /// [`TransitionError`] holding the QP and the [`Error::Verb`] of `ibv_modify_qp`
    /// (`EINVAL` on RoCE usually means a missing or wrong GRH / source GID index).
    pub fn into_rtr(self, attr: &RtrAttr) -> Result<QueuePair<'res, Rtr>, TransitionError<Self>> {
        let raw = sys::ibv_qp_attr {
            path_mtu: attr.path_mtu.0,
            dest_qp_num: attr.dest_qpn.0,
            rq_psn: attr.rq_psn.get(),
            max_dest_rd_atomic: attr.max_dest_rd_atomic,
            min_rnr_timer: attr.min_rnr_timer,
            ah_attr: attr.av.to_raw(),
            ..Default::default()
        };
        let mask = sys::IBV_QP_AV
            | sys::IBV_QP_PATH_MTU
            | sys::IBV_QP_DEST_QPN
            | sys::IBV_QP_RQ_PSN
            | sys::IBV_QP_MAX_DEST_RD_ATOMIC
            | sys::IBV_QP_MIN_RNR_TIMER;
        self.transition(raw, mask, "ibv_modify_qp (INIT→RTR)", sys::IBV_QPS_RTR)
    }
}

impl<'res> QueuePair<'res, Rtr> {
    /// RTR → RTS: enables the send side.
    ///
    /// # Errors
    ///
    /// [`TransitionError`] holding the QP and the [`Error::Verb`] of `ibv_modify_qp`
    /// (`EINVAL` on iWARP devices, which connect only through rdma_cm).
    pub fn into_rts(self, attr: &RtsAttr) -> Result<QueuePair<'res, Rts>, TransitionError<Self>> {
        let raw = sys::ibv_qp_attr {
            timeout: attr.timeout,
            retry_cnt: attr.retry_cnt,
            rnr_retry: attr.rnr_retry,
            sq_psn: attr.sq_psn.get(),
            max_rd_atomic: attr.max_rd_atomic,
            ..Default::default()
        };
        let mask = sys::IBV_QP_TIMEOUT
            | sys::IBV_QP_RETRY_CNT
            | sys::IBV_QP_RNR_RETRY
            | sys::IBV_QP_SQ_PSN
            | sys::IBV_QP_MAX_QP_RD_ATOMIC;
        self.transition(raw, mask, "ibv_modify_qp (RTR→RTS)", sys::IBV_QPS_RTS)
    }
}

impl<S: ReceiveReady> QueuePair<'_, S> {
    /// `ibv_post_recv(3)`—Posts one receive work request.
    ///
    /// # Safety
    ///
    /// Until this WR's completion has been polled, or the QP has been destroyed:
    /// - the memory each SGE describes must stay allocated and registered (its
    ///   [`MemoryRegion`](crate::MemoryRegion) alive), in a region of this QP's PD;
    /// - the program must not read or write those bytes by any means (no `&`/`&mut` to them
    ///   may be used): the NIC writes them at a time of its choosing;
    /// - `wr_id` must not have bit 63 set: those ids belong to the buffer tier
    ///   ([`BufferPool`](crate::BufferPool)), whose buffers they would release.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from the provider: `ENOMEM` when the receive queue is full, `EINVAL`
    /// for more SGEs than `max_recv_sge`.
    #[doc(alias = "ibv_post_recv")]
    #[inline]
    pub unsafe fn post_recv(&self, wr: &mut RecvWr<'_>) -> Result<()> {
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP in a receive-ready state; the caller upholds the memory contract.
        let ret = unsafe { sys::inline::ibv_post_recv(self.as_raw(), wr.as_raw_mut(), &mut bad) };
        check_errno(ret, "ibv_post_recv")
    }
}

impl QueuePair<'_, Rts> {
    /// `ibv_post_send(3)`—Posts one send work request (SEND, SEND with immediate, RDMA WRITE
    /// with or without immediate, RDMA READ).
    ///
    /// # Safety
    ///
    /// Unless the WR is [`SendFlags::INLINE`] (its bytes are copied during this call), until
    /// its completion has been polled — for an unsignaled WR, until a later signaled WR of
    /// this QP has completed — or the QP has been destroyed:
    /// - the memory each SGE describes must stay allocated and registered, in a region of
    ///   this QP's PD;
    /// - for SEND and RDMA WRITE the program must not write those bytes (the NIC reads them);
    ///   for RDMA READ it must not read or write them (the NIC writes them);
    /// - `wr_id` must not have bit 63 set: those ids belong to the buffer tier
    ///   ([`BufferPool`](crate::BufferPool)), whose buffers they would release.
    ///
    /// A wrong remote address or rkey is not undefined behaviour: the WR completes with an
    /// error status.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for more SGEs than `max_send_sge` or inline data above
    /// `max_inline_data`, before posting; [`Error::Verb`] from the provider (`ENOMEM`: the
    /// send queue is full).
    #[doc(alias = "ibv_post_send")]
    #[inline]
    pub unsafe fn post_send(&self, wr: &mut SendWr<'_>) -> Result<()> {
        self.check_send(wr)?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP in RTS; the caller upholds the memory contract.
        let ret = unsafe { sys::inline::ibv_post_send(self.as_raw(), wr.as_raw_mut(), &mut bad) };
        check_errno(ret, "ibv_post_send")
    }

    /// `ibv_post_send(3)`—Posts `wrs` as one linked list (one doorbell): perftest's post
    /// lists. Typically only the last is [`SendFlags::SIGNALED`]: on an RC send queue its
    /// completion means all before it are done.
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_send`], for every WR of the list.
    ///
    /// # Errors
    ///
    /// `(posted, error)`: the number of WRs the provider accepted before the one it refused
    /// (those are posted), and why; [`Error::InvalidInput`] (with 0 posted) when a WR breaks
    /// the QP's SGE or inline limits.
    #[doc(alias = "ibv_post_send")]
    #[inline]
    pub unsafe fn post_send_list(&self, wrs: &mut [SendWr<'_>]) -> Result<(), (usize, Error)> {
        for wr in wrs.iter() {
            self.check_send(wr).map_err(|e| (0, e))?;
        }
        // SAFETY: SendWr is a transparent ibv_send_wr; the caller upholds the memory contract.
        unsafe {
            self.post_send_chain(std::slice::from_raw_parts_mut(wrs.as_mut_ptr().cast(), wrs.len()))
        }
    }

    /// Links `wrs` through their `next` pointers and posts them with one call; on failure,
    /// how many were accepted before the refused one (all, when the provider does not say).
    ///
    /// # Safety
    ///
    /// Every WR must be valid for `ibv_post_send(3)` under [`QueuePair::post_send`]'s contract.
    pub(crate) unsafe fn post_send_chain(
        &self,
        wrs: &mut [sys::ibv_send_wr],
    ) -> Result<(), (usize, Error)> {
        let Some(first) = wrs.first_mut().map(|wr| wr as *mut sys::ibv_send_wr) else {
            return Ok(());
        };
        let base = first as usize;
        for i in 1..wrs.len() {
            let next: *mut sys::ibv_send_wr = &mut wrs[i];
            wrs[i - 1].next = next;
        }
        if let Some(last) = wrs.last_mut() {
            last.next = std::ptr::null_mut();
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP in RTS; the list is linked within `wrs`; the caller upholds the
        // memory contract.
        let ret = unsafe { sys::inline::ibv_post_send(self.as_raw(), first, &mut bad) };
        check_errno(ret, "ibv_post_send").map_err(|error| {
            let offset =
                (bad as usize).wrapping_sub(base) / std::mem::size_of::<sys::ibv_send_wr>();
            // A provider that names no refused WR may have posted any of them: assume all
            // (the buffer tier then never hands back memory the NIC might use).
            (if bad.is_null() || offset >= wrs.len() { wrs.len() } else { offset }, error)
        })
    }

    fn check_send(&self, wr: &SendWr<'_>) -> Result<()> {
        if wr.num_sge() > self.caps.max_send_sge as usize {
            return Err(Error::InvalidInput(format!(
                "the WR has {} SGEs; this QP allows {} (max_send_sge)",
                wr.num_sge(),
                self.caps.max_send_sge
            )));
        }
        if wr.send_flags().contains(SendFlags::INLINE)
            && wr.total_len() > u64::from(self.caps.max_inline_data)
        {
            return Err(Error::InvalidInput(format!(
                "{} bytes cannot be sent inline; this QP allows {} (max_inline_data)",
                wr.total_len(),
                self.caps.max_inline_data
            )));
        }
        Ok(())
    }
}

impl<S: QpState> Drop for QueuePair<'_, S> {
    fn drop(&mut self) {
        if let Err(e) = self.destroy_raw() {
            log::warn!("leaking QP {:#x}: {e}", self.qp_num().0);
        }
    }
}

impl<S: QpState> std::fmt::Debug for QueuePair<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QueuePair")
            .field("qpn", &format_args!("{:#x}", self.qp_num().0))
            .field("state", &S::NAME)
            .field("caps", &self.caps)
            .finish()
    }
}
