//! XRC (eXtended Reliable Connected) domains and SRQs: the receive side of XRC, shared by
//! every process that opens the domain.
#![allow(unsafe_code)]
//! # Safety
//!
//! An [`XrcDomain`] owns an `ibv_xrcd` until `ibv_close_xrcd`; an [`XrcSrq`] owns its
//! `ibv_srq` (through the [`SharedReceiveQueue`] it is) and borrows its XRCD, PD and CQ, so
//! they outlive it; an XRC target QP borrows its XRCD likewise
//! ([`XrcDomain::create_recv_qp`]). Receives are posted as on any SRQ, under the same
//! contracts.

use std::ops::Deref;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::context::Context;
use crate::cq::{CompletionQueue, Credits};
use crate::endpoint::SrqNum;
use crate::error::{check_errno, check_ptr, Error, InvalidInputKind, Result};
use crate::leak::drop_by;
use crate::pd::ProtectionDomain;
use crate::srq::SharedReceiveQueue;

/// An XRC domain (`struct ibv_xrcd`, `ibv_open_xrcd(3)`): the scope of XRC SRQs and XRC
/// target QPs. A message arriving on a target QP of the domain lands in whichever XRC SRQ of
/// the domain its sender named, so one SRQ per process serves every peer that sends to it.
///
/// It borrows its [`Context`], so it cannot outlive it, and the SRQs and target QPs created
/// on it borrow it:
///
/// ```compile_fail,E0597
/// # use rdma_verbs::*;
/// # fn f(ctx: &Context) -> Result<()> {
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(16)?;
/// let srq = {
///     let xrcd = ctx.open_xrcd()?;
///     xrcd.create_srq(&pd, &cq, 16, 1)?
/// }; // error: `xrcd` dropped while still borrowed
/// # drop(srq); Ok(()) }
/// ```
#[must_use = "the XRC domain is closed when dropped"]
pub struct XrcDomain<'ctx> {
    raw: NonNull<sys::ibv_xrcd>,
    ctx: &'ctx Context,
    /// The credits of the CQs an XRC target QP does not have: it posts nothing, so none are
    /// ever taken, but every [`QueuePair`](crate::QueuePair) names two.
    no_cq: Credits,
}

// SAFETY: XRCD verbs are thread-safe; the handle is only read after creation, and `no_cq` is
// atomics and a mutex.
unsafe impl Send for XrcDomain<'_> {}
// SAFETY: as above.
unsafe impl Sync for XrcDomain<'_> {}

impl Context {
    /// `ibv_open_xrcd(3)`—Opens a new XRC domain of this process (`fd` -1, `oflags`
    /// `O_CREAT`: no file names it, so other processes do not share it).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] when the provider has no XRC (rxe and siw: libibverbs' stub
    /// answers `EOPNOTSUPP`; mlx5 and hns have it) or the loaded libibverbs' context has no
    /// `open_xrcd` op; [`Error::Verb`] from `ibv_open_xrcd` (`ENOMEM`: out of resources).
    #[doc(alias = "ibv_open_xrcd")]
    pub fn open_xrcd(&self) -> Result<XrcDomain<'_>> {
        let mut attr = sys::ibv_xrcd_init_attr {
            comp_mask: sys::IBV_XRCD_INIT_ATTR_FD | sys::IBV_XRCD_INIT_ATTR_OFLAGS,
            fd: -1,
            oflags: libc::O_CREAT,
        };
        // SAFETY: a live context and a readable attribute struct.
        let raw = unsafe { sys::inline::ibv_open_xrcd(self.as_raw(), &mut attr) };
        let raw = check_ptr(raw, "ibv_open_xrcd")?;
        Ok(XrcDomain { raw, ctx: self, no_cq: Credits::new(0, "completion queue") })
    }
}

impl<'ctx> XrcDomain<'ctx> {
    /// The context this XRCD belongs to.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The raw XRCD pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_xrcd {
        self.raw.as_ptr()
    }

    /// What an XRC target QP counts its (absent) CQs' credits on.
    pub(crate) fn no_cq(&self) -> &Credits {
        &self.no_cq
    }

    /// `ibv_create_srq_ex(3)` with `IBV_SRQT_XRC`—An XRC SRQ of this domain for `max_wr`
    /// receives of `max_sge` SGEs, whose receive buffers are registered in `pd` and whose
    /// completions go to `cq`, whatever target QP the messages arrived on. Its number
    /// ([`XrcSrq::srq_num`]) is what senders name.
    ///
    /// `cq` keeps `max_wr` of its entries for the SRQ's receives while the SRQ lives (see
    /// [Room for completions](crate::CompletionQueue#room-for-completions)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `pd` or `cq` belongs to another device context
    /// ([`InvalidInputKind::OtherContext`]) or `cq` has not `max_wr` entries free
    /// ([`InvalidInputKind::CqTooSmall`]); [`Error::Unsupported`] when the provider has no
    /// `create_srq_ex` or `get_srq_num`; [`Error::Verb`] from `ibv_create_srq_ex` (`EINVAL`:
    /// sizes above the device's `max_srq_wr` / `max_srq_sge`) or `ibv_get_srq_num`.
    #[doc(alias = "ibv_create_srq_ex")]
    #[doc(alias = "ibv_get_srq_num")]
    pub fn create_srq<'a>(
        &'a self,
        pd: &'a ProtectionDomain<'a>,
        cq: &'a CompletionQueue<'a>,
        max_wr: u32,
        max_sge: u32,
    ) -> Result<XrcSrq<'a>> {
        let ctx = self.ctx.as_raw();
        if pd.context().as_raw() != ctx || cq.context().as_raw() != ctx {
            return Err(Error::invalid(
                InvalidInputKind::OtherContext,
                "an XRC SRQ's PD and CQ must belong to the same device context as its XRC \
                 domain"
                    .into(),
            ));
        }
        let mut init = sys::ibv_srq_init_attr_ex {
            attr: sys::ibv_srq_attr { max_wr, max_sge, srq_limit: 0 },
            comp_mask: sys::IBV_SRQ_INIT_ATTR_TYPE
                | sys::IBV_SRQ_INIT_ATTR_PD
                | sys::IBV_SRQ_INIT_ATTR_XRCD
                | sys::IBV_SRQ_INIT_ATTR_CQ,
            srq_type: sys::IBV_SRQT_XRC,
            pd: pd.as_raw(),
            xrcd: self.as_raw(),
            cq: cq.as_raw(),
            ..Default::default()
        };
        let fns = &self.ctx.library().fns;
        // SAFETY: a live context, and an attribute struct naming its live PD, XRCD and CQ,
        // which the provider updates with the sizes it allocated.
        let raw = unsafe { sys::inline::ibv_create_srq_ex(fns, ctx, &mut init) };
        let raw = check_ptr(raw, "ibv_create_srq_ex")?;
        // Dropped on failure below, it destroys the SRQ.
        let srq = SharedReceiveQueue::adopt(raw, pd, &init.attr);
        let mut num = 0;
        // SAFETY: a live SRQ and a writable number.
        let ret = unsafe { sys::inline::ibv_get_srq_num(srq.as_raw(), &mut num) };
        check_errno(ret, "ibv_get_srq_num")?;
        cq.credits().hold_for_srq(srq.as_raw() as usize, srq.max_wr())?;
        Ok(XrcSrq { srq, cq, num: SrqNum::from_low_bits(num) })
    }

    /// `ibv_close_xrcd(3)`—Closes the XRCD, reporting failure (dropping logs instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`]: `EBUSY` while objects created by other means (raw pointers) still
    /// use it; the XRCD is then leaked.
    #[doc(alias = "ibv_close_xrcd")]
    pub fn close(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).close_raw()
    }

    fn close_raw(&mut self) -> Result<()> {
        // SAFETY: every SRQ and QP on it borrows it, so none is alive unless leaked; closed
        // once.
        check_errno(unsafe { sys::inline::ibv_close_xrcd(self.as_raw()) }, "ibv_close_xrcd")
    }
}

drop_by!(XrcDomain<'_>, close_raw, |x| "an XRC domain of {}", x.ctx.name());

impl std::fmt::Debug for XrcDomain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XrcDomain").field("device", &self.ctx.name()).finish()
    }
}

/// An XRC shared receive queue (`ibv_create_srq_ex(3)` with `IBV_SRQT_XRC`): receives for
/// the messages that name its number ([`srq_num`](Self::srq_num)) on any target QP of its
/// [`XrcDomain`]; their completions go to its CQ.
///
/// It is a [`SharedReceiveQueue`] (through `Deref`): receives are posted to it in the same
/// two tiers ([`post_recv_wr`](SharedReceiveQueue::post_recv_wr),
/// [`post_recv_buffer`](SharedReceiveQueue::post_recv_buffer), …), in buffers registered in
/// its PD. It borrows its XRCD, PD and CQ, so they outlive it.
#[must_use = "the SRQ is destroyed when dropped"]
pub struct XrcSrq<'a> {
    srq: SharedReceiveQueue<'a>,
    cq: &'a CompletionQueue<'a>,
    num: SrqNum,
}

impl<'a> XrcSrq<'a> {
    /// `ibv_get_srq_num(3)`—The SRQ's number, which a peer's XRC initiator names in its
    /// sends ([`SendWr::to_xrc_srq`](crate::SendWr::to_xrc_srq)); read at creation.
    #[doc(alias = "ibv_get_srq_num")]
    pub fn srq_num(&self) -> SrqNum {
        self.num
    }

    /// The CQ its receives complete on.
    pub fn cq(&self) -> &'a CompletionQueue<'a> {
        self.cq
    }
}

impl<'a> Deref for XrcSrq<'a> {
    type Target = SharedReceiveQueue<'a>;

    fn deref(&self) -> &SharedReceiveQueue<'a> {
        &self.srq
    }
}

impl Drop for XrcSrq<'_> {
    fn drop(&mut self) {
        // The SRQ itself is destroyed by the field's drop, right after.
        self.cq.credits().unhold_for_srq(self.srq.as_raw() as usize);
    }
}

impl std::fmt::Debug for XrcSrq<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("XrcSrq")
            .field("srq_num", &self.num.get())
            .field("max_wr", &self.srq.max_wr())
            .finish()
    }
}
