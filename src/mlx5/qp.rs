//! What DCTs and DCIs share: the owned `ibv_qp` and its transitions.

use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::cq::Credits;
use crate::endpoint::Qpn;
use crate::error::{check_errno, check_ptr, InvalidInputKind, Result, TransitionError};
use crate::leak::drop_by;
use crate::pd::ProtectionDomain;
use crate::qp::{QpInitAttr, QpState};

use super::context::{unsupported, Mlx5Context};

/// A DC QP's typestate wrapper ([`Dci`](super::Dci) or [`Dct`](super::Dct)): its QP, and
/// the same wrapper typed in another state.
pub(super) trait DcTypestate: Sized {
    /// The wrapper in state `N`.
    type In<N: QpState>;

    /// The QP.
    fn dc_qp(&self) -> &DcQp<'_>;

    /// The same QP, typed as in state `N` (the device holds it there now).
    fn into_state<N: QpState>(self) -> Self::In<N>;

    /// [`DcQp::modify`] to `state`: the wrapper in state `N`, or back with the error.
    fn transition<N: QpState>(
        self,
        attr: sys::ibv_qp_attr,
        mask: u32,
        state: sys::ibv_qp_state,
        verb: &'static str,
    ) -> std::result::Result<Self::In<N>, TransitionError<Self>> {
        match self.dc_qp().modify(attr, mask, state, verb) {
            Ok(()) => Ok(self.into_state()),
            Err(error) => Err(TransitionError { qp: self, error }),
        }
    }
}

/// A QP created by `mlx5dv_create_qp(3)`, destroyed on drop.
pub(super) struct DcQp<'res> {
    raw: NonNull<sys::ibv_qp>,
    pd: &'res ProtectionDomain<'res>,
    /// A DCT's receive CQ, which keeps entries for its SRQ's receives (see
    /// [`Credits::hold_for_srq`]), and the SRQ's address.
    srq_held: Option<(&'res Credits, usize)>,
}

impl<'res> DcQp<'res> {
    /// `mlx5dv_create_qp(3)` with `attr` and the DV attributes; `attr`'s PD, CQs, SRQ,
    /// capabilities and signalling are set here from `pd` and `objects`, after the checks
    /// every QP's creation makes ([`ProtectionDomain::create_qp`]'s).
    pub(super) fn create(
        mlx5: &Mlx5Context<'_>,
        pd: &'res ProtectionDomain<'res>,
        objects: &QpInitAttr<'res, '_>,
        mut attr: sys::ibv_qp_init_attr_ex,
        mut dv: sys::mlx5dv_qp_init_attr,
    ) -> Result<Self> {
        if !std::ptr::eq(pd.context(), mlx5.context()) {
            return Err(crate::Error::invalid(
                InvalidInputKind::OtherContext,
                format!(
                "the protection domain belongs to {}, not to {}: create DC QPs with a PD of the \
                 Mlx5Context's own device context",
                pd.context().name(),
                mlx5.context().name()
            ),
            ));
        }
        pd.check_init(objects, attr.qp_type)?;
        attr.pd = pd.as_raw();
        attr.comp_mask |= sys::IBV_QP_INIT_ATTR_PD;
        attr.send_cq = objects.send_cq.as_raw();
        attr.recv_cq = objects.recv_cq.as_raw();
        attr.srq = objects.srq.map_or(std::ptr::null_mut(), |srq| srq.as_raw());
        attr.cap = objects.cap.to_raw();
        attr.sq_sig_all = objects.sq_sig_all.into();
        // SAFETY: an mlx5 context (the gate passed), valid attribute structs whose PD, CQs
        // and SRQ are live objects of it, borrowed by the caller for `'res`.
        let raw = unsafe {
            (mlx5.library().fns.mlx5dv_create_qp)(mlx5.context().as_raw(), &mut attr, &mut dv)
        };
        match check_ptr(raw, "mlx5dv_create_qp") {
            Ok(raw) => {
                let mut qp = DcQp { raw, pd, srq_held: None };
                if let Some(srq) = objects.srq {
                    let (credits, key) = (objects.recv_cq.credits(), srq.as_raw() as usize);
                    // (Refused: dropping the QP destroys it.)
                    credits.hold_for_srq(key, srq.max_wr())?;
                    qp.srq_held = Some((credits, key));
                }
                Ok(qp)
            }
            // mlx5_ib answers EOPNOTSUPP for a DC QP on a device or firmware without DC.
            Err(crate::Error::Unsupported { .. }) => Err(unsupported(
                mlx5.context().name(),
                "mlx5dv_create_qp answered EOPNOTSUPP: the device or its firmware offers no DC",
            )),
            Err(e) => Err(e),
        }
    }

    pub(super) fn as_raw(&self) -> *mut sys::ibv_qp {
        self.raw.as_ptr()
    }

    pub(super) fn pd(&self) -> &'res ProtectionDomain<'res> {
        self.pd
    }

    pub(super) fn fns(&self) -> &'static sys::IbverbsFns {
        &self.pd.context().library().fns
    }

    pub(super) fn qp_num(&self) -> Qpn {
        // SAFETY: a live QP; a plain field read.
        Qpn::from_low_bits(unsafe { (*self.raw.as_ptr()).qp_num })
    }

    /// `ibv_modify_qp(3)` to `state` with `mask | IBV_QP_STATE`.
    pub(super) fn modify(
        &self,
        mut attr: sys::ibv_qp_attr,
        mask: u32,
        state: sys::ibv_qp_state,
        verb: &'static str,
    ) -> Result<()> {
        attr.qp_state = state;
        // SAFETY: a live QP and an attribute struct whose masked fields are set.
        let ret = unsafe {
            (self.fns().ibv_modify_qp)(self.as_raw(), &mut attr, (mask | sys::IBV_QP_STATE) as i32)
        };
        check_errno(ret, verb)
    }

    pub(super) fn destroy(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).destroy_raw()
    }

    fn destroy_raw(&self) -> Result<()> {
        // SAFETY: a live QP, destroyed once (by Drop, or by `destroy`, which suppresses it);
        // a failed destroy moves it to RESET or ERROR first, as for the other QPs.
        unsafe { crate::qp::destroy_qp(self.fns(), self.as_raw()) }?;
        if let Some((credits, srq)) = self.srq_held {
            credits.unhold_for_srq(srq);
        }
        Ok(())
    }
}

drop_by!(DcQp<'_>, destroy_raw, |qp| "DC QP {:#x}", qp.qp_num().get());

/// The DV attributes of a DC QP of `dc_type`: the DC mask bit and the type.
pub(super) fn dv_attr(dc_type: sys::mlx5dv_dc_type) -> sys::mlx5dv_qp_init_attr {
    let mut dv = sys::mlx5dv_qp_init_attr {
        comp_mask: u64::from(sys::MLX5DV_QP_INIT_ATTR_MASK_DC),
        ..Default::default()
    };
    dv.dc_init_attr.dc_type = dc_type;
    dv
}
