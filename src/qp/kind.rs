//! QP transport types in the type: Reliable Connected, Unreliable Connected, Unreliable
//! Datagram, and the two halves of XRC (eXtended Reliable Connected).

use rdma_verbs_sys as sys;

use super::modify::QpAttrMask as M;

pub(crate) mod sealed {
    pub trait Sealed {}
}

/// A QP transport type (`enum ibv_qp_type`): [`Rc`], [`Uc`], [`Ud`], [`XrcSend`] or
/// [`XrcRecv`].
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
pub trait Datagram: QpType + HasSendQueue + HasReceiveQueue {}

/// Connected transports, which are taken to RTR towards one peer QP, with a send queue and a
/// receive queue of their own: [`Rc`] and [`Uc`].
pub trait Connected: ToPeer + HasSendQueue + HasReceiveQueue {}

/// Transports taken to RTR towards one peer QP
/// ([`QueuePair::into_rtr`](crate::QueuePair::into_rtr)): the [`Connected`] ones and both
/// halves of XRC. Those with a send queue go on to RTS: [`Rc`], [`Uc`] and [`XrcSend`];
/// the XRC target [`XrcRecv`] stops at RTR.
pub trait ToPeer: QpType {}

/// Transports whose QPs have a receive queue of their own (or take receives from an SRQ
/// named at creation): [`Rc`], [`Uc`], [`Ud`] (and SRD). Only they post receives: an XRC
/// initiator receives nothing, and an XRC target's receives are posted to XRC SRQs.
///
/// ```compile_fail,E0599
/// # use rdma_verbs::*;
/// # fn f(qp: QueuePair<'_, Init, XrcSend>, wr: &mut RecvWr<'_>) -> Result<()> {
/// unsafe { qp.post_recv_wr(wr)? }; // error: an XRC initiator has no receive queue
/// # Ok(()) }
/// ```
pub trait HasReceiveQueue: QpType {}

/// Transports whose QPs have a send queue: all but the XRC target [`XrcRecv`], which only
/// receives (into XRC SRQs) and never reaches RTS through this crate's transitions.
///
/// ```compile_fail,E0599
/// # use rdma_verbs::*;
/// # fn f(qp: QueuePair<'_, Rts, XrcRecv>, wr: &mut SendWr<'_>) -> Result<()> {
/// unsafe { qp.post_send_wr(wr)? }; // error: an XRC target has no send queue
/// # Ok(()) }
/// ```
pub trait HasSendQueue: QpType {}

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

/// The initiator half of XRC (`IBV_QPT_XRC_SEND`, `ibv_create_qp_ex(3)`): a send queue
/// only, connected like RC (RESET → INIT → RTR → RTS) to one [`XrcRecv`] target QP of the peer; each SEND names the
/// remote [`XrcSrq`](crate::XrcSrq) its message goes to
/// ([`SendWr::to_xrc_srq`](crate::SendWr::to_xrc_srq)). Created by
/// [`ProtectionDomain::create_xrc_send_qp`](crate::ProtectionDomain::create_xrc_send_qp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XrcSend {}

/// The target half of XRC (`IBV_QPT_XRC_RECV`, `ibv_create_qp_ex(3)`): no send queue and no
/// receive queue; it is created on an [`XrcDomain`](crate::XrcDomain), and the messages
/// arriving on it land in the XRC SRQ of that domain each one names. It goes RESET → INIT →
/// RTR, where it receives. Created by
/// [`XrcDomain::create_recv_qp`](crate::XrcDomain::create_recv_qp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XrcRecv {}

impl sealed::Sealed for Rc {}
impl sealed::Sealed for Uc {}
impl sealed::Sealed for Ud {}
impl sealed::Sealed for XrcSend {}
impl sealed::Sealed for XrcRecv {}
impl Connected for Rc {}
impl Connected for Uc {}
impl Datagram for Ud {}
impl ToPeer for Rc {}
impl ToPeer for Uc {}
impl ToPeer for XrcSend {}
impl ToPeer for XrcRecv {}
impl HasReceiveQueue for Rc {}
impl HasReceiveQueue for Uc {}
impl HasReceiveQueue for Ud {}
impl HasSendQueue for Rc {}
impl HasSendQueue for Uc {}
impl HasSendQueue for Ud {}
impl HasSendQueue for XrcSend {}

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

// The XRC masks are the kernel's (`ib_modify_qp_is_ok`): the initiator's RTR is UC's (it
// receives only acknowledgements), its RTS RC's; the target's RTR is RC's responder side.
impl QpType for XrcSend {
    const RAW: sys::ibv_qp_type = sys::IBV_QPT_XRC_SEND;
    const NAME: &'static str = "XRC initiator";
    const RTR_MASK: M = Uc::RTR_MASK;
    const RTS_MASK: M = Rc::RTS_MASK;
}

impl QpType for XrcRecv {
    const RAW: sys::ibv_qp_type = sys::IBV_QPT_XRC_RECV;
    const NAME: &'static str = "XRC target";
    const RTR_MASK: M = Rc::RTR_MASK;
    const RTS_MASK: M = M::TIMEOUT.union(M::SQ_PSN);
}

/// Sealing a transport type defined in another module (SRD, `efa`).
#[cfg(all(feature = "efa", rdma_verbs_efadv))]
pub(crate) use sealed as kind_sealed;
