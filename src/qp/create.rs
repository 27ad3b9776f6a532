//! Creating queue pairs.

use std::marker::PhantomData;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use super::extended::{self, ExQp};
use super::{
    destroy_qp, HasReceiveQueue, QpCapabilities, QpCredits, QpInitAttr, QpType, QueuePair, Rc,
    Reset, SendLimits,
};
use crate::context::DeviceAttr;
use crate::error::{check_ptr, Error, InvalidInputKind, Result};
use crate::lenders::Lenders;
use crate::pd::ProtectionDomain;
use crate::quirks::Quirks;
use crate::verbs_path::VerbsPath;

impl<'res> ProtectionDomain<'res> {
    /// `ibv_create_qp_ex(3)`, falling back to `ibv_create_qp(3)`—Creates a queue pair of
    /// transport type `T` ([`Rc`], [`Uc`](super::Uc) or [`Ud`](super::Ud)) in RESET. (XRC
    /// QPs have their own constructors: [`ProtectionDomain::create_xrc_send_qp`] and
    /// [`XrcDomain::create_recv_qp`](crate::XrcDomain::create_recv_qp).)
    ///
    /// Unless [`QpInitAttr::verbs_path`] forces the legacy verbs, the QP is created with
    /// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` naming the send operations its type allows (RC:
    /// SEND, SEND with immediate, RDMA WRITE with and without immediate, RDMA READ, atomics
    /// when the device's `atomic_cap` is not NONE, and bind / local invalidate / SEND with
    /// invalidate when it has type-2 memory windows; UC: SEND and RDMA WRITE, with and without
    /// immediate; UD: SEND with and without immediate), and its sends then go through
    /// `ibv_wr_post(3)` ([`QueuePair::verbs_path`]). When the provider has no `create_qp_ex`
    /// (`EOPNOTSUPP`), the QP is created by `ibv_create_qp`; when it has no `ibv_qp_ex` for it
    /// (`ibv_qp_to_qp_ex` absent or NULL, a NULL batch member), it posts by `ibv_post_send`.
    ///
    /// The capabilities must be within the device's limits (`ibv_query_device(3)`, queried
    /// once per context): `max_send_wr` and `max_recv_wr` at most `max_qp_wr`,
    /// `max_send_sge` and `max_recv_sge` at most `max_sge` (the receive side is not checked
    /// with an SRQ, which makes it unused). The device reports no inline limit:
    /// `max_inline_data` is the provider's to refuse.
    ///
    /// The CQs must have room for every completion the QP can have outstanding, checked
    /// before the verb with the sizes *asked* for in `attr.cap`: `max_send_wr` on the send CQ,
    /// and on the receive CQ `max_recv_wr` — or, with an SRQ, the SRQ's
    /// [`max_wr`](crate::SharedReceiveQueue::max_wr), since any of its receives may complete
    /// through this QP. When both are one CQ, it needs their sum. A CQ that overruns loses
    /// completions, so it is refused here rather than discovered there. A CQ shared by several
    /// QPs is then held to its capacity as posts go: the buffer tier counts what is due on it,
    /// and the receive CQ keeps an SRQ's `max_wr` entries once for all the QPs it feeds there
    /// (see [Room for completions](crate::CompletionQueue#room-for-completions)); raw-tier
    /// posts are the program's to keep within it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when a capability is above the device's limit
    /// ([`InvalidInputKind::DeviceLimit`], naming the field, the limit and the device's
    /// value), a CQ or the SRQ belongs to another device context, the SRQ
    /// to another PD ([`InvalidInputKind::OtherPd`]: providers check its receives against the
    /// QP's PD, and rxe fails them), a CQ is smaller than the WRs that can complete on it (the
    /// message names both numbers), or, for a UD QP, the SRQ had receives posted that are
    /// shorter than the GRH area ([`InvalidInputKind::BufferTooSmall`]; from then on the SRQ
    /// refuses those, see [`SharedReceiveQueue::post_recv_wr`](crate::SharedReceiveQueue::post_recv_wr));
    /// [`Error::Verb`] from `ibv_query_device`, or from `ibv_create_qp` (`EINVAL`: a
    /// capability the provider refuses, such as `max_inline_data`, with the capabilities
    /// asked and the device's limits in the message; `ENOMEM`: out of resources); [`Error::Unsupported`] when
    /// the provider lacks the transport (e.g. UC on iWARP), for an SRD QP (feature `efa`: its
    /// own verb, `EfaContext::create_srd_qp`, makes them), or, with
    /// [`VerbsPath::Extended`] forced, naming what it lacks of the extended QP
    /// (`ibv_create_qp_ex`, `ibv_qp_to_qp_ex`, or an `ibv_qp_ex` member).
    #[doc(alias = "ibv_create_qp")]
    #[doc(alias = "ibv_create_qp_ex")]
    pub fn create_qp<T: HasReceiveQueue>(
        &'res self,
        attr: &QpInitAttr<'res, '_>,
    ) -> Result<QueuePair<'res, Reset, T>> {
        if T::RAW == sys::IBV_QPT_DRIVER {
            // A driver QP needs its provider's attributes, which only its own verb passes.
            return Err(Error::Unsupported {
                what: "SRD queue pairs through ProtectionDomain::create_qp: create them with \
                       efa::EfaContext::create_srd_qp",
            });
        }
        self.check_init(attr, T::RAW)?;
        if attr.verbs_path != Some(VerbsPath::Legacy) {
            let forced = attr.verbs_path == Some(VerbsPath::Extended);
            match self.create_qp_ex::<T>(attr, forced) {
                Ok(qp) => return Ok(qp),
                Err(e) if forced || !matches!(e, Error::Unsupported { .. }) => return Err(e),
                // The provider lacks it: the legacy verbs serve.
                Err(_) => {}
            }
        }
        let mut init = self.init_attr::<T>(attr);
        // SAFETY: a live PD and CQs (and SRQ) of its context; `init` is a valid attribute
        // struct, which the provider updates with the capabilities it allocated; the legacy
        // struct is its prefix (checked in the sys crate).
        let raw = unsafe {
            (self.context().library().fns.ibv_create_qp)(self.as_raw(), (&raw mut init).cast())
        };
        let raw =
            check_ptr(raw, "ibv_create_qp").map_err(|e| self.explain_create_qp(e, &attr.cap))?;
        self.adopt_qp(raw, None, &init.cap, attr)
    }

    /// What every creation verb of a QP of `qp_type` on this PD (`ibv_create_qp`,
    /// `ibv_create_qp_ex`, `mlx5dv_create_qp`) is refused before it is called: capabilities
    /// above the device's limits, CQs or an SRQ
    /// of another device context, an SRQ of another PD, CQs too small for the QP, and for UD
    /// an SRQ that had receives too short for the GRH area (see
    /// [`ProtectionDomain::create_qp`]).
    pub(crate) fn check_init(
        &self,
        attr: &QpInitAttr<'_, '_>,
        qp_type: sys::ibv_qp_type,
    ) -> Result<()> {
        let ctx = self.context().as_raw();
        let srq_ctx = attr.srq.map(|srq| srq.pd().context().as_raw());
        if attr.send_cq.context().as_raw() != ctx
            || attr.recv_cq.context().as_raw() != ctx
            || srq_ctx.is_some_and(|c| c != ctx)
        {
            return Err(Error::invalid(
                InvalidInputKind::OtherContext,
                "the QP's CQs and SRQ must belong to the same device context as its PD".into(),
            ));
        }
        if attr.srq.is_some_and(|srq| srq.pd().as_raw() != self.as_raw()) {
            return Err(Error::invalid(
                InvalidInputKind::OtherPd,
                "the SRQ belongs to another protection domain than the QP: providers check \
                 the SRQ's receives against the QP's PD when a message arrives (rxe fails it \
                 with IBV_WC_LOC_QP_OP_ERR and moves both QPs to ERROR): create the SRQ, and \
                 register its receive buffers, in the QP's PD"
                    .into(),
            ));
        }
        check_device_limits(&attr.cap, attr.srq.is_some(), self.context().cached_attr()?)?;
        check_cq_room(attr)?;
        match attr.srq {
            Some(srq) if qp_type == sys::IBV_QPT_UD => srq.grh_room().claim_for_ud(),
            _ => Ok(()),
        }
    }

    /// `ibv_create_qp_ex` with the send operations the QP type and device allow, then its
    /// `ibv_qp_ex`. A QP whose extended view is missing stays a legacy one unless `forced`.
    fn create_qp_ex<T: QpType>(
        &'res self,
        attr: &QpInitAttr<'res, '_>,
        forced: bool,
    ) -> Result<QueuePair<'res, Reset, T>> {
        let ctx = self.context();
        if !extended::has_create_qp_ex(ctx) {
            // Before `send_ops`, which may query the device for nothing.
            return Err(Error::Unsupported { what: "ibv_create_qp_ex" });
        }
        let send_ops = extended::send_ops(ctx, T::RAW)?;
        let lists_right = !Quirks::of(ctx)?.wr_list_lengths_wrong;
        let mut init = sys::ibv_qp_init_attr_ex {
            comp_mask: sys::IBV_QP_INIT_ATTR_PD | sys::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
            send_ops_flags: send_ops.into(),
            ..self.init_attr::<T>(attr)
        };
        // SAFETY: a live context, PD and CQs (and SRQ) of it; `init` is a valid attribute
        // struct, which the provider updates with the capabilities it allocated.
        let raw =
            unsafe { sys::inline::ibv_create_qp_ex(&ctx.library().fns, ctx.as_raw(), &mut init) };
        let raw =
            check_ptr(raw, "ibv_create_qp_ex").map_err(|e| self.explain_create_qp(e, &attr.cap))?;
        let ex = match ExQp::of(ctx, raw.as_ptr(), T::RAW, send_ops, lists_right) {
            Ok(ex) => Some(ex),
            Err(what) if forced => {
                // Dropping the legacy-path QP destroys it.
                drop(self.adopt_qp::<T>(raw, None, &init.cap, attr));
                return Err(Error::Unsupported { what });
            }
            // The QP itself is fine: it posts through ibv_post_send.
            Err(_) => None,
        };
        self.adopt_qp(raw, ex, &init.cap, attr)
    }

    /// The attributes both creation verbs read: CQs, SRQ, capabilities, type and signalling,
    /// with this PD (`ibv_create_qp` reads only the prefix, up to `sq_sig_all`).
    pub(super) fn init_attr<T: QpType>(
        &self,
        attr: &QpInitAttr<'res, '_>,
    ) -> sys::ibv_qp_init_attr_ex {
        sys::ibv_qp_init_attr_ex {
            send_cq: attr.send_cq.as_raw(),
            recv_cq: attr.recv_cq.as_raw(),
            srq: attr.srq.map_or(std::ptr::null_mut(), |srq| srq.as_raw()),
            cap: attr.cap.to_raw(),
            qp_type: T::RAW,
            sq_sig_all: attr.sq_sig_all.into(),
            comp_mask: sys::IBV_QP_INIT_ATTR_PD,
            pd: self.as_raw(),
            ..Default::default()
        }
    }

    /// A created QP in RESET, owning `raw`, created with `attr`; with an SRQ, its receive CQ
    /// keeps entries for the SRQ's receives (see
    /// [`Credits::hold_for_srq`](crate::cq::Credits::hold_for_srq)), which
    /// [`QueuePair::destroy`] gives back.
    ///
    /// # Errors
    ///
    /// That of `hold_for_srq`: the QP is destroyed.
    pub(super) fn adopt_qp<T: QpType>(
        &'res self,
        raw: NonNull<sys::ibv_qp>,
        ex: Option<ExQp>,
        cap: &sys::ibv_qp_cap,
        attr: &QpInitAttr<'res, '_>,
    ) -> Result<QueuePair<'res, Reset, T>> {
        let caps = QpCapabilities::from_raw(cap);
        let credits = QpCredits { send: attr.send_cq.credits(), recv: attr.recv_cq.credits() };
        if let Some(srq) = attr.srq {
            if let Err(error) = credits.recv.hold_for_srq(srq.as_raw() as usize, srq.max_wr()) {
                // SAFETY: created by the caller and not handed out: destroyed once, here.
                if let Err(e) = unsafe { destroy_qp(&self.context().library().fns, raw.as_ptr()) } {
                    log::warn!("leaking a QP refused for its CQ's room: {e}");
                }
                return Err(error);
            }
        }
        let slack = super::post::send_slack::<T>(self, &caps, SendLimits::default(), ex.as_ref());
        Ok(QueuePair {
            raw,
            ex,
            pd: self,
            caps,
            limits: SendLimits::default(),
            slack,
            lenders: Lenders::default(),
            credits,
            responder_resources: 0,
            _res: PhantomData,
            _state: PhantomData,
        })
    }

    /// [`Self::adopt_qp`] of a QP another creation verb made (`efadv_create_qp_ex`), posting
    /// through `ibv_post_send`.
    #[cfg(all(feature = "efa", rdma_verbs_efadv))]
    pub(crate) fn adopt_legacy_qp<T: QpType>(
        &'res self,
        raw: NonNull<sys::ibv_qp>,
        cap: &sys::ibv_qp_cap,
        attr: &QpInitAttr<'res, '_>,
    ) -> Result<QueuePair<'res, Reset, T>> {
        self.adopt_qp(raw, None, cap, attr)
    }

    /// `ibv_create_qp(3)`—Creates a Reliable Connected queue pair in RESET: `create_qp::<Rc>`.
    ///
    /// # Errors
    ///
    /// As [`ProtectionDomain::create_qp`].
    #[doc(alias = "ibv_create_qp")]
    pub fn create_rc_qp(
        &'res self,
        attr: &QpInitAttr<'res, '_>,
    ) -> Result<QueuePair<'res, Reset, Rc>> {
        self.create_qp::<Rc>(attr)
    }

    /// Adds the requested capabilities, and the device's limits, to an `EINVAL` from
    /// `ibv_create_qp`: the provider refused one of them but does not say which.
    pub(crate) fn explain_create_qp(&self, error: Error, cap: &QpCapabilities) -> Error {
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

/// Refuses capabilities above the device's limits (`ibv_query_device(3)`): `max_send_wr`
/// and `max_recv_wr` (unless an SRQ feeds the receives: then unused) above `max_qp_wr`,
/// `max_send_sge` and `max_recv_sge` above `max_sge`. Providers refuse them with a bare
/// `EINVAL`; here the message names the field, the limit and the device's value. The device
/// reports no inline limit, so `max_inline_data` is the provider's to judge.
fn check_device_limits(cap: &QpCapabilities, srq: bool, device: &DeviceAttr) -> Result<()> {
    let limit = |v: i32| u32::try_from(v).unwrap_or(0);
    let (max_wr, max_sge) = (limit(device.max_qp_wr()), limit(device.max_sge()));
    let mut asked = vec![
        ("max_send_wr", cap.max_send_wr, "max_qp_wr", max_wr),
        ("max_send_sge", cap.max_send_sge, "max_sge", max_sge),
    ];
    if !srq {
        asked.push(("max_recv_wr", cap.max_recv_wr, "max_qp_wr", max_wr));
        asked.push(("max_recv_sge", cap.max_recv_sge, "max_sge", max_sge));
    }
    match asked.into_iter().find(|&(_, value, _, max)| value > max) {
        Some((field, value, name, max)) => Err(Error::invalid(
            InvalidInputKind::DeviceLimit,
            format!(
                "{field} {value} is above the device's {name} {max} (ibv_query_device): \
                 ask for at most {max}"
            ),
        )),
        None => Ok(()),
    }
}

/// Refuses CQs too small for the completions `attr` allows outstanding (see
/// [`ProtectionDomain::create_qp`]).
fn check_cq_room(attr: &QpInitAttr<'_, '_>) -> Result<()> {
    let send = u64::from(attr.cap.max_send_wr);
    let (recv, recv_what) = match attr.srq {
        Some(srq) => (u64::from(srq.max_wr()), format!("the SRQ's {} receives", srq.max_wr())),
        None => (u64::from(attr.cap.max_recv_wr), format!("max_recv_wr {}", attr.cap.max_recv_wr)),
    };
    let refuse = |cq: &str, room: u32, need: u64, what: String| {
        Err(Error::invalid(
            InvalidInputKind::CqTooSmall,
            format!(
                "the {cq} holds {room} completions but this QP can have {need} work requests \
             outstanding on it ({what}): create the CQ with at least {need} entries or lower \
             the QP's capacities"
            ),
        ))
    };
    if attr.send_cq.as_raw() == attr.recv_cq.as_raw() {
        let room = attr.send_cq.capacity();
        if send + recv > u64::from(room) {
            let what = format!("max_send_wr {send} + {recv_what}");
            return refuse("CQ", room, send + recv, what);
        }
        return Ok(());
    }
    let send_room = attr.send_cq.capacity();
    if send > u64::from(send_room) {
        return refuse("send CQ", send_room, send, format!("max_send_wr {send}"));
    }
    let recv_room = attr.recv_cq.capacity();
    if recv > u64::from(recv_room) {
        return refuse("receive CQ", recv_room, recv, recv_what);
    }
    Ok(())
}
