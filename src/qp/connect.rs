//! The typed transitions: RESET → INIT → RTR → RTS, per transport type.

use rdma_verbs_sys as sys;

use super::{
    Datagram, HasSendQueue, Init, QueuePair, Reset, Rtr, Rts, ToInitAttr, ToPeer, ToRtrAttr,
    ToRtsAttr, Ud, UdToInitAttr,
};
use crate::endpoint::Psn;
use crate::error::TransitionError;
use crate::try_twin::try_twin;

impl<'res, T: ToPeer> QueuePair<'res, Reset, T> {
    try_twin! {
        /// RESET → INIT (`STATE | PKEY_INDEX | PORT | ACCESS_FLAGS`): binds the QP to a port and
        /// sets what the peer may do.
        ///
        /// # Errors
        ///
        /// The [`Error::Verb`](crate::Error::Verb) of `ibv_modify_qp` (`EINVAL`: a port or P_Key
        /// index that does not exist); the QP is dropped. [`try_into_init`](Self::try_into_init)
        /// hands it back.
        pub fn into_init / try_into_init(
            self,
            attr: &ToInitAttr,
        ) -> Result<QueuePair<'res, Init, T>, TransitionError<Self>>
        try:
        /// [`into_init`](Self::into_init), handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] holding the QP, still in RESET, and the error of
        /// [`into_init`](Self::into_init).
        {
            let mask = sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_ACCESS_FLAGS;
            self.transition(attr.raw(), mask, "ibv_modify_qp (RESET→INIT)", sys::IBV_QPS_INIT)
        }
    }
}

impl<'res> QueuePair<'res, Reset, Ud> {
    try_twin! {
        /// RESET → INIT of a UD QP (`STATE | PKEY_INDEX | PORT | QKEY`). The port's active MTU
        /// becomes the largest message a send may carry.
        ///
        /// # Errors
        ///
        /// The error of `ibv_query_port` or `ibv_modify_qp`; the QP is dropped.
        /// [`try_into_init`](Self::try_into_init) hands it back.
        pub fn into_init / try_into_init(
            self,
            attr: &UdToInitAttr,
        ) -> Result<QueuePair<'res, Init, Ud>, TransitionError<Self>>
        try:
        /// [`into_init`](Self::into_init) of a UD QP, handing the QP back on failure.
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

/// The transitions of every [`Datagram`] type, which its own typed methods (UD's here, SRD's
/// in `efa`) are.
impl<'res, T: Datagram> QueuePair<'res, Reset, T> {
    /// RESET → INIT (`STATE | PKEY_INDEX | PORT | QKEY`); the port's active MTU becomes the
    /// largest message a send may carry.
    pub(crate) fn datagram_init(
        mut self,
        attr: &UdToInitAttr,
    ) -> Result<QueuePair<'res, Init, T>, TransitionError<Self>> {
        match self.pd.context().query_port(attr.port) {
            Ok(port) => self.limits.ud_mtu = super::ud_mtu(&port),
            Err(error) => return Err(TransitionError { qp: self, error }),
        }
        let raw = sys::ibv_qp_attr {
            pkey_index: attr.pkey_index,
            port_num: attr.port,
            qkey: attr.qkey,
            ..Default::default()
        };
        let mask = sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_QKEY;
        self.transition(raw, mask, "ibv_modify_qp (RESET→INIT)", sys::IBV_QPS_INIT)
    }
}

impl<'res, T: Datagram> QueuePair<'res, Init, T> {
    /// INIT → RTR (`STATE` only: a datagram QP has no peer).
    pub(crate) fn datagram_rtr(self) -> Result<QueuePair<'res, Rtr, T>, TransitionError<Self>> {
        self.transition(
            sys::ibv_qp_attr::default(),
            0,
            "ibv_modify_qp (INIT→RTR)",
            sys::IBV_QPS_RTR,
        )
    }
}

impl<'res, T: Datagram> QueuePair<'res, Rtr, T> {
    /// RTR → RTS (`STATE | SQ_PSN`).
    pub(crate) fn datagram_rts(
        self,
        sq_psn: Psn,
    ) -> Result<QueuePair<'res, Rts, T>, TransitionError<Self>> {
        let raw = sys::ibv_qp_attr { sq_psn: sq_psn.get(), ..Default::default() };
        self.transition(raw, sys::IBV_QP_SQ_PSN, "ibv_modify_qp (RTR→RTS)", sys::IBV_QPS_RTS)
    }
}

impl<'res, T: ToPeer> QueuePair<'res, Init, T> {
    try_twin! {
        /// INIT → RTR: connects the receive side to the peer. RC and the XRC target set `STATE |
        /// AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER`; UC and the
        /// XRC initiator the first five.
        ///
        /// A `path_mtu` above the active MTU of the port (`attr.av.port`, `ibv_query_port(3)`) is
        /// lowered to it, as perftest does: what [`QueuePair::query`] reports is the MTU in
        /// effect.
        ///
        /// An RC QP's `max_dest_rd_atomic` is held to the device's `max_qp_rd_atom` and, with
        /// those of the context's other QPs in RTR and RTS, to its `max_res_rd_atom`
        /// (`ibv_query_device(3)`); the QP holds its share until it is reset or destroyed.
        ///
        /// # Errors
        ///
        /// [`Error::InvalidInput`](crate::Error::InvalidInput)
        /// ([`InvalidInputKind::DeviceLimit`](crate::InvalidInputKind::DeviceLimit)) naming the
        /// limit and the device's value, before the verb is called; the
        /// [`Error::Verb`](crate::Error::Verb) of `ibv_modify_qp` (`EINVAL` on RoCE usually
        /// means a missing or wrong GRH / source GID index), or the error of `ibv_query_port`
        /// ([`Error::PortNotFound`](crate::Error::PortNotFound) for a port the device lacks); the
        /// QP is dropped. [`try_into_rtr`](Self::try_into_rtr) hands it back.
        pub fn into_rtr / try_into_rtr(
            self,
            attr: &ToRtrAttr,
        ) -> Result<QueuePair<'res, Rtr, T>, TransitionError<Self>>
        try:
        /// [`into_rtr`](Self::into_rtr), handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] holding the QP, still in INIT, and the error of
        /// [`into_rtr`](Self::into_rtr).
        {
            let active = match self.pd.context().query_port(attr.av.port) {
                Ok(port) => port.active_mtu(),
                Err(error) => return Err(TransitionError { qp: self, error }),
            };
            let raw = sys::ibv_qp_attr {
                path_mtu: attr.path_mtu.at_most(active).0,
                dest_qp_num: attr.dest_qpn.get(),
                rq_psn: attr.rq_psn.get(),
                max_dest_rd_atomic: attr.max_dest_rd_atomic,
                min_rnr_timer: attr.min_rnr_timer.get(),
                ah_attr: attr.av.to_raw(),
                ..Default::default()
            };
            self.transition(raw, T::RTR_MASK.bits(), "ibv_modify_qp (INIT→RTR)", sys::IBV_QPS_RTR)
        }
    }
}

impl<'res> QueuePair<'res, Init, Ud> {
    try_twin! {
        /// INIT → RTR of a UD QP (`STATE` only: a datagram QP has no peer).
        ///
        /// # Errors
        ///
        /// The error of `ibv_modify_qp`; the QP is dropped. [`try_into_rtr`](Self::try_into_rtr)
        /// hands it back.
        pub fn into_rtr / try_into_rtr(
            self,
        ) -> Result<QueuePair<'res, Rtr, Ud>, TransitionError<Self>>
        try:
        /// [`into_rtr`](Self::into_rtr) of a UD QP, handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] holding the QP, still in INIT, and the error of `ibv_modify_qp`.
        {
            self.datagram_rtr()
        }
    }
}

impl<'res, T: ToPeer + HasSendQueue> QueuePair<'res, Rtr, T> {
    try_twin! {
        /// RTR → RTS: enables the send side. RC and the XRC initiator set `STATE | TIMEOUT |
        /// RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC`; UC only `STATE | SQ_PSN`.
        ///
        /// An RC QP's `max_rd_atomic` is held to the device's `max_qp_init_rd_atom`
        /// (`ibv_query_device(3)`).
        ///
        /// # Errors
        ///
        /// [`Error::InvalidInput`](crate::Error::InvalidInput)
        /// ([`InvalidInputKind::DeviceLimit`](crate::InvalidInputKind::DeviceLimit)) naming the
        /// limit and the device's value, before the verb is called; the
        /// [`Error::Verb`](crate::Error::Verb) of `ibv_modify_qp` (`EINVAL` on iWARP devices,
        /// which connect only through rdma_cm); the QP is dropped.
        /// [`try_into_rts`](Self::try_into_rts) hands it back.
        pub fn into_rts / try_into_rts(
            self,
            attr: &ToRtsAttr,
        ) -> Result<QueuePair<'res, Rts, T>, TransitionError<Self>>
        try:
        /// [`into_rts`](Self::into_rts), handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] holding the QP, still in RTR, and the error of
        /// [`into_rts`](Self::into_rts).
        {
            // (`transition` records max_rd_atomic where the mask carries it: RC.)
            let mask = T::RTS_MASK.bits();
            self.transition(attr.raw(), mask, "ibv_modify_qp (RTR→RTS)", sys::IBV_QPS_RTS)
        }
    }
}

impl<'res> QueuePair<'res, Rtr, Ud> {
    try_twin! {
        /// RTR → RTS of a UD QP (`STATE | SQ_PSN`).
        ///
        /// # Errors
        ///
        /// The error of `ibv_modify_qp`; the QP is dropped. [`try_into_rts`](Self::try_into_rts)
        /// hands it back.
        pub fn into_rts / try_into_rts(
            self,
            sq_psn: Psn,
        ) -> Result<QueuePair<'res, Rts, Ud>, TransitionError<Self>>
        try:
        /// [`into_rts`](Self::into_rts) of a UD QP, handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] holding the QP, still in RTR, and the error of `ibv_modify_qp`.
        {
            self.datagram_rts(sq_psn)
        }
    }
}
