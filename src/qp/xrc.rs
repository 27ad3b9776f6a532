//! Creating XRC QPs: initiators on a PD, targets on an XRC domain.

use std::marker::PhantomData;

use rdma_verbs_sys as sys;

use super::{post, QpCapabilities, QpCredits, QpInitAttr, QueuePair, Reset, SendLimits};
use super::{QpType, XrcRecv, XrcSend};
use crate::context::Context;
use crate::error::{check_ptr, Error, InvalidInputKind, Result};
use crate::lenders::Lenders;
use crate::pd::ProtectionDomain;
use crate::xrc::XrcDomain;

/// [`Error::Unsupported`] unless the device reports `IBV_DEVICE_XRC` (`ibv_query_device(3)`):
/// rxe and siw do not, and their kernel drivers refuse XRC QPs.
fn check_xrc(ctx: &Context) -> Result<()> {
    if ctx.cached_attr()?.as_raw().device_cap_flags & sys::IBV_DEVICE_XRC == 0 {
        return Err(Error::Unsupported { what: "XRC (the device lacks IBV_DEVICE_XRC)" });
    }
    Ok(())
}

impl<'res> ProtectionDomain<'res> {
    /// `ibv_create_qp_ex(3)` with `IBV_QPT_XRC_SEND`—Creates an XRC initiator QP in RESET:
    /// a send queue of `attr.cap`'s send sizes on `attr.send_cq`, and no receive side (the
    /// receive capabilities, `recv_cq` and `verbs_path` of `attr` are not used). It is
    /// connected like an RC QP ([`into_init`](QueuePair::into_init),
    /// [`into_rtr`](QueuePair::into_rtr), [`into_rts`](QueuePair::into_rts)) to an
    /// [`XrcRecv`] target QP of the peer, and each send names the peer's XRC SRQ
    /// ([`SendWr::to_xrc_srq`](crate::SendWr::to_xrc_srq)). Its sends go through
    /// `ibv_post_send(3)` (`wr.qp_type.xrc.remote_srqn`). RDMA READ and atomics are refused
    /// before posting, as on UC.
    ///
    /// The send capabilities must be within the device's limits, and the send CQ must have
    /// room for `max_send_wr` completions, as [`create_qp`](Self::create_qp) checks them.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] when the device lacks XRC (`IBV_DEVICE_XRC` unset: rxe, siw);
    /// [`Error::InvalidInput`] with an SRQ in `attr` (an initiator receives nothing), or as
    /// [`create_qp`](Self::create_qp) refuses capabilities and CQs; [`Error::Verb`] from
    /// `ibv_query_device` or `ibv_create_qp_ex`.
    #[doc(alias = "ibv_create_qp_ex")]
    pub fn create_xrc_send_qp(
        &'res self,
        attr: &QpInitAttr<'res, '_>,
    ) -> Result<QueuePair<'res, Reset, XrcSend>> {
        check_xrc(self.context())?;
        if attr.srq.is_some() {
            return Err(Error::invalid(
                InvalidInputKind::Range,
                "an XRC initiator QP has no receive side: leave QpInitAttr::srq None (its \
                 peer's receives are posted to XRC SRQs)"
                    .into(),
            ));
        }
        let cap = QpCapabilities { max_recv_wr: 0, max_recv_sge: 0, ..attr.cap };
        let attr = QpInitAttr { cap, ..*attr };
        self.check_init(&attr, XrcSend::RAW)?;
        let mut init = sys::ibv_qp_init_attr_ex {
            recv_cq: std::ptr::null_mut(),
            ..self.init_attr::<XrcSend>(&attr)
        };
        let ctx = self.context();
        // SAFETY: a live context, PD and send CQ of it; `init` is a valid attribute struct,
        // which the provider updates with the capabilities it allocated.
        let raw =
            unsafe { sys::inline::ibv_create_qp_ex(&ctx.library().fns, ctx.as_raw(), &mut init) };
        let raw =
            check_ptr(raw, "ibv_create_qp_ex").map_err(|e| self.explain_create_qp(e, &attr.cap))?;
        self.adopt_qp(raw, None, &init.cap, &attr)
    }
}

impl XrcDomain<'_> {
    /// `ibv_create_qp_ex(3)` with `IBV_QPT_XRC_RECV` and `IBV_QP_INIT_ATTR_XRCD`—Creates an
    /// XRC target QP of this domain in RESET: no send queue and no receive queue. Connected
    /// to one peer's [`XrcSend`] initiator ([`into_init`](QueuePair::into_init), then
    /// [`into_rtr`](QueuePair::into_rtr), where it receives), it delivers each message to
    /// the XRC SRQ of this domain the sender names; the receive completions go to that SRQ's
    /// CQ.
    ///
    /// The verb takes no PD: `pd` is the QP handle's way to its context
    /// ([`QueuePair::pd`]), and must be of the same context. It borrows the domain, so the
    /// domain outlives it.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] when the device lacks XRC (`IBV_DEVICE_XRC` unset) or the
    /// provider has no `create_qp_ex`; [`Error::InvalidInput`]
    /// ([`InvalidInputKind::OtherContext`]) for a PD of another context; [`Error::Verb`]
    /// from `ibv_query_device` or `ibv_create_qp_ex`.
    #[doc(alias = "ibv_create_qp_ex")]
    pub fn create_recv_qp<'res>(
        &'res self,
        pd: &'res ProtectionDomain<'res>,
    ) -> Result<QueuePair<'res, Reset, XrcRecv>> {
        let ctx = self.context();
        if pd.context().as_raw() != ctx.as_raw() {
            return Err(Error::invalid(
                InvalidInputKind::OtherContext,
                "an XRC target QP's PD must belong to the device context of its XRC domain".into(),
            ));
        }
        check_xrc(ctx)?;
        let mut init = sys::ibv_qp_init_attr_ex {
            qp_type: XrcRecv::RAW,
            comp_mask: sys::IBV_QP_INIT_ATTR_XRCD,
            xrcd: self.as_raw(),
            ..Default::default()
        };
        // SAFETY: a live context and XRCD of it; `init` is a valid attribute struct.
        let raw =
            unsafe { sys::inline::ibv_create_qp_ex(&ctx.library().fns, ctx.as_raw(), &mut init) };
        let raw = check_ptr(raw, "ibv_create_qp_ex")?;
        let caps = QpCapabilities::from_raw(&init.cap);
        let limits = SendLimits::default();
        Ok(QueuePair {
            raw,
            ex: None,
            pd,
            caps,
            limits,
            slack: post::send_slack::<XrcRecv>(pd, &caps, limits, None),
            lenders: Lenders::default(),
            credits: QpCredits { send: self.no_cq(), recv: self.no_cq() },
            responder_resources: 0,
            _res: PhantomData,
            _state: PhantomData,
        })
    }
}
