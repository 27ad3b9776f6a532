//! The SRD transport type and its typed transitions.

use rdma_verbs_sys as sys;

use crate::endpoint::Psn;
use crate::error::TransitionError;
use crate::qp::{
    Datagram, HasReceiveQueue, HasSendQueue, Init, QpAttrMask as M, QpType, QueuePair, Reset, Rtr,
    Rts, UdToInitAttr,
};
use crate::try_twin::try_twin;

/// Scalable Reliable Datagram, AWS EFA's transport (`IBV_QPT_DRIVER` with
/// `EFADV_QP_DRIVER_TYPE_SRD`): addressed per send like [`Ud`](crate::Ud), reliable, and
/// **unordered** — messages and their completions may come in any order (see the
/// [module docs](super)). SENDs only, of at most one MTU each, into receive buffers without
/// a GRH area. Created by [`EfaContext::create_srd_qp`](super::EfaContext::create_srd_qp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Srd {}

impl crate::qp::kind_sealed::Sealed for Srd {}
impl Datagram for Srd {}
impl HasReceiveQueue for Srd {}
impl HasSendQueue for Srd {}

impl QpType for Srd {
    const RAW: sys::ibv_qp_type = sys::IBV_QPT_DRIVER;
    const NAME: &'static str = "SRD";
    const RTR_MASK: M = M::empty();
    const RTS_MASK: M = M::SQ_PSN;
    const DATAGRAM: bool = true;
}

impl<'res> QueuePair<'res, Reset, Srd> {
    try_twin! {
        /// RESET → INIT of an SRD QP (`STATE | PKEY_INDEX | PORT | QKEY`, as UD): binds it to
        /// a port; only datagrams carrying `attr.qkey` are accepted. The port's active MTU
        /// becomes the largest message a send may carry.
        ///
        /// # Errors
        ///
        /// The error of `ibv_query_port` or `ibv_modify_qp(3)`; the QP is dropped.
        /// [`try_into_init`](Self::try_into_init) hands it back.
        #[doc(alias = "ibv_modify_qp")]
        pub fn into_init / try_into_init(
            self,
            attr: &UdToInitAttr,
        ) -> Result<QueuePair<'res, Init, Srd>, TransitionError<Self>>
        try:
        /// [`into_init`](Self::into_init) of an SRD QP, handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] holding the QP, still in RESET, and the error of
        /// [`into_init`](Self::into_init).
        {
            self.datagram_init(attr)
        }
    }
}

impl<'res> QueuePair<'res, Init, Srd> {
    try_twin! {
        /// INIT → RTR of an SRD QP (`STATE` only: there is no peer to name).
        ///
        /// # Errors
        ///
        /// The error of `ibv_modify_qp(3)`; the QP is dropped.
        /// [`try_into_rtr`](Self::try_into_rtr) hands it back.
        #[doc(alias = "ibv_modify_qp")]
        pub fn into_rtr / try_into_rtr(
            self,
        ) -> Result<QueuePair<'res, Rtr, Srd>, TransitionError<Self>>
        try:
        /// [`into_rtr`](Self::into_rtr) of an SRD QP, handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] holding the QP, still in INIT, and the error of `ibv_modify_qp`.
        {
            self.datagram_rtr()
        }
    }
}

impl<'res> QueuePair<'res, Rtr, Srd> {
    try_twin! {
        /// RTR → RTS of an SRD QP (`STATE | SQ_PSN`).
        ///
        /// # Errors
        ///
        /// The error of `ibv_modify_qp(3)`; the QP is dropped.
        /// [`try_into_rts`](Self::try_into_rts) hands it back.
        #[doc(alias = "ibv_modify_qp")]
        pub fn into_rts / try_into_rts(
            self,
            sq_psn: Psn,
        ) -> Result<QueuePair<'res, Rts, Srd>, TransitionError<Self>>
        try:
        /// [`into_rts`](Self::into_rts) of an SRD QP, handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] holding the QP, still in RTR, and the error of `ibv_modify_qp`.
        {
            self.datagram_rts(sq_psn)
        }
    }
}
