//! QP transport types in the type: Reliable Connected, Unreliable Connected, Unreliable
//! Datagram.

use rdma_verbs_sys as sys;

use super::modify::QpAttrMask as M;

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A QP transport type (`enum ibv_qp_type`): [`Rc`], [`Uc`] or [`Ud`].
pub trait QpType: sealed::Sealed {
    /// Its `ibv_qp_type`.
    const RAW: sys::ibv_qp_type;
    /// Its name.
    const NAME: &'static str;
    /// What INIT→RTR requires (besides `STATE`).
    const RTR_MASK: M;
    /// What RTR→RTS requires (besides `STATE`).
    const RTS_MASK: M;
    /// Whether each send names its destination (an address handle, remote QPN and Q_Key:
    /// [`SendWr::to`](crate::SendWr::to)) instead of the QP being connected to one peer.
    const DATAGRAM: bool = false;
}

/// Datagram transports, whose sends each name their destination and which need no peer to
/// reach RTS: [`Ud`], and with feature `efa` AWS EFA's SRD (`efa::Srd`).
pub trait Datagram: QpType {}

/// Connected transports, which are taken to RTR towards one peer QP: [`Rc`] and [`Uc`].
pub trait Connected: QpType {}

/// Reliable Connected: acknowledged, ordered; SEND, RDMA WRITE / READ, atomics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rc {}

/// Unreliable Connected: unacknowledged; SEND and RDMA WRITE, no READ or atomics (both are
/// refused before posting).
///
/// A SEND that arrives before the receiver has posted a receive is **dropped silently**: UC
/// has no RNR NAK, so the sender's completion is a success and the receiver sees nothing.
/// Post receives before the peer may send (a service that cannot guarantee it uses RC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uc {}

/// Unreliable Datagram: one QP reaches any other through an address handle, one MTU per
/// message, and every receive starts with a 40-byte GRH area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ud {}

impl sealed::Sealed for Rc {}
impl sealed::Sealed for Uc {}
impl sealed::Sealed for Ud {}
impl Connected for Rc {}
impl Connected for Uc {}
impl Datagram for Ud {}

impl QpType for Rc {
    const RAW: sys::ibv_qp_type = sys::IBV_QPT_RC;
    const NAME: &'static str = "RC";
    const RTR_MASK: M = M::AV
        .union(M::PATH_MTU)
        .union(M::DEST_QPN)
        .union(M::RQ_PSN)
        .union(M::MAX_DEST_RD_ATOMIC)
        .union(M::MIN_RNR_TIMER);
    const RTS_MASK: M = M::TIMEOUT
        .union(M::RETRY_CNT)
        .union(M::RNR_RETRY)
        .union(M::SQ_PSN)
        .union(M::MAX_QP_RD_ATOMIC);
}

impl QpType for Uc {
    const RAW: sys::ibv_qp_type = sys::IBV_QPT_UC;
    const NAME: &'static str = "UC";
    const RTR_MASK: M = M::AV.union(M::PATH_MTU).union(M::DEST_QPN).union(M::RQ_PSN);
    const RTS_MASK: M = M::SQ_PSN;
}

impl QpType for Ud {
    const RAW: sys::ibv_qp_type = sys::IBV_QPT_UD;
    const NAME: &'static str = "UD";
    const RTR_MASK: M = M::empty();
    const RTS_MASK: M = M::SQ_PSN;
    const DATAGRAM: bool = true;
}

/// Sealing a transport type defined in another module (SRD, `efa`).
#[cfg(all(feature = "efa", rdma_verbs_efadv))]
pub(crate) use sealed as kind_sealed;
