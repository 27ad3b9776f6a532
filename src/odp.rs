//! On-demand paging (ODP): a device's capabilities ([`OdpCaps`], [`Context::odp_caps`]).

use bitflags::bitflags;
use rdma_verbs_sys as sys;

use crate::context::Context;
use crate::error::Result;

bitflags! {
    /// What on-demand paging a device offers (`ibv_odp_caps.general_caps`,
    /// `enum ibv_odp_general_caps`), `ibv_query_device_ex(3)`.
    #[repr(transparent)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct OdpGeneralCaps: u64 {
        /// `IBV_ODP_SUPPORT`: [`AccessFlags::ON_DEMAND`](crate::AccessFlags::ON_DEMAND)
        /// registrations work.
        const SUPPORT = sys::IBV_ODP_SUPPORT as u64;
        /// `IBV_ODP_SUPPORT_IMPLICIT`: an implicit ODP region may cover the whole address
        /// space.
        const SUPPORT_IMPLICIT = sys::IBV_ODP_SUPPORT_IMPLICIT as u64;
        const _ = !0;
    }
}

bitflags! {
    /// Which operations of one transport may touch ODP memory (`ibv_odp_caps`'
    /// `rc_odp_caps` / `uc_odp_caps` / `ud_odp_caps`, `enum ibv_odp_transport_cap_bits`).
    #[repr(transparent)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct OdpTransportCaps: u32 {
        /// `IBV_ODP_SUPPORT_SEND`
        const SEND = sys::IBV_ODP_SUPPORT_SEND;
        /// `IBV_ODP_SUPPORT_RECV`
        const RECV = sys::IBV_ODP_SUPPORT_RECV;
        /// `IBV_ODP_SUPPORT_WRITE`
        const WRITE = sys::IBV_ODP_SUPPORT_WRITE;
        /// `IBV_ODP_SUPPORT_READ`
        const READ = sys::IBV_ODP_SUPPORT_READ;
        /// `IBV_ODP_SUPPORT_ATOMIC`
        const ATOMIC = sys::IBV_ODP_SUPPORT_ATOMIC;
        /// `IBV_ODP_SUPPORT_SRQ_RECV`
        const SRQ_RECV = sys::IBV_ODP_SUPPORT_SRQ_RECV;
        const _ = !0;
    }
}

/// A device's on-demand paging capabilities (`struct ibv_odp_caps`), from
/// [`Context::odp_caps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OdpCaps {
    /// Whether ODP works at all, and implicit ODP.
    pub general: OdpGeneralCaps,
    /// Operations of RC QPs that may use ODP memory.
    pub rc: OdpTransportCaps,
    /// Operations of UC QPs that may use ODP memory.
    pub uc: OdpTransportCaps,
    /// Operations of UD QPs that may use ODP memory.
    pub ud: OdpTransportCaps,
}

impl Context {
    /// `ibv_query_device_ex(3)`—The device's on-demand paging capabilities: all empty when it
    /// has none (as rxe in Linux 6.1), or when the provider lacks `query_device_ex` (the C
    /// inline's fallback to `ibv_query_device`, which knows no ODP).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb) from `ibv_query_device_ex` (or the `ibv_query_device` fallback).
    #[doc(alias = "ibv_query_device_ex")]
    pub fn odp_caps(&self) -> Result<OdpCaps> {
        let odp = self.query_device_ex()?.odp_caps;
        let transport = OdpTransportCaps::from_bits_retain;
        Ok(OdpCaps {
            general: OdpGeneralCaps::from_bits_retain(odp.general_caps),
            rc: transport(odp.per_transport_caps.rc_odp_caps),
            uc: transport(odp.per_transport_caps.uc_odp_caps),
            ud: transport(odp.per_transport_caps.ud_odp_caps),
        })
    }
}
