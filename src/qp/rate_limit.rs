//! Packet pacing: the rate a QP's sends are held to (`ibv_qp_attr.rate_limit` with
//! `IBV_QP_RATE_LIMIT`, `ibv_modify_qp(3)`), within the range the device reports in
//! `packet_pacing_caps` (`ibv_query_device_ex(3)`).
#![allow(unsafe_code)]

use rdma_verbs_sys as sys;

use super::{QpType, QueuePair, Rts};
use crate::context::Context;
use crate::error::{check_errno, Error, InvalidInputKind, Result};

/// The send rates a device can pace a QP to (`struct ibv_packet_pacing_caps`,
/// `ibv_query_device_ex(3)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketPacingCaps {
    /// The lowest rate limit, in kbps.
    pub qp_rate_limit_min: u32,
    /// The highest rate limit, in kbps.
    pub qp_rate_limit_max: u32,
    /// The QP types that take a rate limit, as bits `1 << IBV_QPT_*` (`supported_qpts`).
    pub supported_qpts: u32,
}

impl PacketPacingCaps {
    /// Whether QPs of type `T` take a rate limit.
    #[must_use]
    pub fn supports<T: QpType>(&self) -> bool {
        1u32.checked_shl(T::RAW).is_some_and(|bit| self.supported_qpts & bit != 0)
    }
}

impl Context {
    /// `ibv_query_device_ex(3)`—The rates the device can pace a QP's sends to; `None` when it
    /// reports none (a `qp_rate_limit_max` of 0, as rxe and siw do, or a provider without
    /// `query_device_ex`, whose fallback knows no packet pacing).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_query_device_ex` (or the `ibv_query_device` fallback).
    #[doc(alias = "ibv_query_device_ex")]
    pub fn packet_pacing_caps(&self) -> Result<Option<PacketPacingCaps>> {
        let mut attr = sys::ibv_device_attr_ex::default();
        // SAFETY: a live context of this library and a writable struct of this build's layout.
        let ret = unsafe {
            sys::inline::ibv_query_device_ex(&self.library().fns, self.as_raw(), &mut attr)
        };
        check_errno(ret, "ibv_query_device_ex")?;
        let caps = attr.packet_pacing_caps;
        Ok((caps.qp_rate_limit_max != 0).then_some(PacketPacingCaps {
            qp_rate_limit_min: caps.qp_rate_limit_min,
            qp_rate_limit_max: caps.qp_rate_limit_max,
            supported_qpts: caps.supported_qpts,
        }))
    }
}

impl<T: QpType> QueuePair<'_, Rts, T> {
    /// `ibv_modify_qp(3)` with `IBV_QP_RATE_LIMIT` (RTS → RTS)—Holds the QP's sends to `kbps`
    /// kilobits per second, which must be within the device's
    /// [`packet_pacing_caps`](Context::packet_pacing_caps); 0 removes the limit.
    ///
    /// # Errors
    ///
    /// - [`Error::Unsupported`] when the device reports no packet pacing, or none for this
    ///   QP type, or the provider refuses the attribute (`EOPNOTSUPP`).
    /// - [`Error::InvalidInput`] ([`InvalidInputKind::DeviceLimit`]) for a rate outside the
    ///   device's range, naming it; both before the verb.
    /// - [`Error::Verb`] from `ibv_query_device_ex` or `ibv_modify_qp`.
    #[doc(alias = "ibv_modify_qp")]
    pub fn set_rate_limit(&self, kbps: u32) -> Result<()> {
        let caps = self.pd.context().packet_pacing_caps()?.ok_or(Error::Unsupported {
            what: "QP rate limiting (the device reports no packet_pacing_caps in \
                   ibv_query_device_ex)",
        })?;
        if !caps.supports::<T>() {
            return Err(Error::Unsupported {
                what: "QP rate limiting for this QP type (not in the device's \
                       packet_pacing_caps.supported_qpts)",
            });
        }
        let (min, max) = (caps.qp_rate_limit_min, caps.qp_rate_limit_max);
        if kbps != 0 && !(min..=max).contains(&kbps) {
            return Err(Error::invalid(
                InvalidInputKind::DeviceLimit,
                format!(
                    "rate_limit {kbps} kbps is outside the device's packet pacing range \
                     {min}..={max} kbps (packet_pacing_caps, ibv_query_device_ex): ask for a \
                     rate within it, or 0 for no limit"
                ),
            ));
        }
        let attr = sys::ibv_qp_attr { rate_limit: kbps, ..Default::default() };
        // Without `IBV_QP_STATE` in the mask the QP stays in RTS, as its type says.
        self.modify(attr, sys::IBV_QP_RATE_LIMIT, "ibv_modify_qp (rate_limit)")
    }
}
