//! The RDMA READ / atomic depths a modify asks of the device, checked before
//! `ibv_modify_qp(3)`: `max_dest_rd_atomic` (RTR) against the device's `max_qp_rd_atom` and,
//! summed over the context's QPs, its `max_res_rd_atom`; `max_rd_atomic` (RTS) against its
//! `max_qp_init_rd_atom`. Providers refuse them with a bare `EINVAL` (the ionic provider of
//! rdma-core v61 reports a device-wide `max_res_rd_atom` of 16, so a second QP asking 16
//! failed RTR); here the message names the limit and the device's value.

use rdma_verbs_sys as sys;

use super::{QpState, QpType, QueuePair};
use crate::error::{Error, InvalidInputKind, Result};

/// The responder resources a QP holds before and after a modify (its `max_dest_rd_atomic`
/// from RTR until RESET), from [`QueuePair::claim_rd_atom`].
#[derive(Clone, Copy, Debug)]
#[must_use = "settle the claim with the modify's outcome"]
pub(super) struct RdAtomClaim {
    from: u8,
    to: u8,
}

impl<S: QpState, T: QpType> QueuePair<'_, S, T> {
    /// Checks the depths `attr` asks under `mask` against the device's limits and takes the
    /// responder resources the modify adds; [`QueuePair::settle_rd_atom`] completes it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] ([`InvalidInputKind::DeviceLimit`]) naming the limit and the
    /// device's value; the error of `ibv_query_device`.
    pub(super) fn claim_rd_atom(&self, attr: &sys::ibv_qp_attr, mask: u32) -> Result<RdAtomClaim> {
        let ctx = self.pd.context();
        let from = self.responder_resources;
        let to_reset = mask & sys::IBV_QP_STATE != 0 && attr.qp_state == sys::IBV_QPS_RESET;
        let asked = [
            (sys::IBV_QP_MAX_DEST_RD_ATOMIC, "max_dest_rd_atomic", attr.max_dest_rd_atomic),
            (sys::IBV_QP_MAX_QP_RD_ATOMIC, "max_rd_atomic", attr.max_rd_atomic),
        ];
        if to_reset || !asked.iter().any(|&(bit, _, _)| mask & bit != 0) {
            return Ok(RdAtomClaim { from, to: if to_reset { 0 } else { from } });
        }
        let device = ctx.cached_attr()?;
        let limits = [
            ("max_qp_rd_atom", device.max_qp_rd_atom()),
            ("max_qp_init_rd_atom", device.max_qp_init_rd_atom()),
        ];
        for ((bit, field, value), (name, max)) in asked.into_iter().zip(limits) {
            if mask & bit != 0 && i32::from(value) > max {
                return Err(Error::invalid(
                    InvalidInputKind::DeviceLimit,
                    format!(
                        "{field} {value} is above the device's {name} {max} \
                         (ibv_query_device): ask for at most {max}"
                    ),
                ));
            }
        }
        let to =
            if mask & sys::IBV_QP_MAX_DEST_RD_ATOMIC != 0 { attr.max_dest_rd_atomic } else { from };
        if to > from {
            ctx.take_responder_resources(to - from)?;
        }
        Ok(RdAtomClaim { from, to })
    }

    /// Completes `claim` with the modify's outcome: when it `succeeded`, the QP holds the
    /// claim's new count and what it no longer holds goes back to the context; when it
    /// failed, what the claim took goes back.
    pub(super) fn settle_rd_atom(&mut self, claim: RdAtomClaim, succeeded: bool) {
        let ctx = self.pd.context();
        if succeeded {
            self.responder_resources = claim.to;
            if claim.from > claim.to {
                ctx.give_responder_resources(claim.from - claim.to);
            }
        } else if claim.to > claim.from {
            ctx.give_responder_resources(claim.to - claim.from);
        }
    }
}
