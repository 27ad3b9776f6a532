//! How to reach a peer port: the address vector ([`AddressVector`], `struct ibv_ah_attr`) and
//! its global route header ([`GlobalRoute`]), for a QP's RTR transition or an address handle.

use rdma_verbs_sys as sys;

use super::StaticRate;
use crate::endpoint::{Endpoint, Lid};
use crate::gid::Gid;

/// The global route header (`struct ibv_global_route`): required on RoCE, and on InfiniBand
/// across subnets. [`GlobalRoute::new`] fills in ibv_rc_pingpong's values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobalRoute {
    /// The peer's GID.
    pub dgid: Gid,
    /// Our source GID's index in the port's table (`-g` of ibv_rc_pingpong).
    pub sgid_index: u8,
    /// The hop limit (1 keeps traffic in the subnet, as ibv_rc_pingpong does).
    pub hop_limit: u8,
    /// The flow label (20 bits).
    pub flow_label: u32,
    /// The traffic class.
    pub traffic_class: u8,
}

/// How to reach the peer (`struct ibv_ah_attr`): for a QP's RTR transition, or an
/// [`AddressHandle`](crate::AddressHandle).
///
/// ```
/// # use rdma_verbs::*;
/// # fn f(peer_gid: Gid, sgid_index: u8) {
/// // InfiniBand within the subnet: the peer port's LID.
/// let ib = AddressVector::new(1, Lid::new(0x12));
/// // RoCE (or InfiniBand across subnets): a GRH to the peer's GID, from our GID `sgid_index`.
/// let roce = AddressVector::default().with_grh(GlobalRoute::new(peer_gid, sgid_index));
/// # drop((ib, roce)); }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AddressVector {
    /// The peer's LID (0 on RoCE).
    pub dlid: Lid,
    /// The service level.
    pub sl: u8,
    /// Source path bits (LMC).
    pub src_path_bits: u8,
    /// Our port, from 1.
    pub port: u8,
    /// The GRH, when the route needs one.
    pub grh: Option<GlobalRoute>,
    /// The rate the port sends to this destination at ([`StaticRate::MAX`]: its own).
    pub static_rate: StaticRate,
}

impl GlobalRoute {
    /// To `dgid` from our GID `sgid_index`, with hop limit 1, flow label 0 and traffic class
    /// 0 (ibv_rc_pingpong's).
    #[must_use]
    pub fn new(dgid: Gid, sgid_index: u8) -> Self {
        GlobalRoute { dgid, sgid_index, hop_limit: 1, flow_label: 0, traffic_class: 0 }
    }
}

impl Default for AddressVector {
    /// From port 1, to LID 0 (RoCE ports have none), SL 0, no GRH: add one with
    /// [`with_grh`](Self::with_grh) on RoCE.
    fn default() -> Self {
        AddressVector::new(1, Lid::default())
    }
}

impl AddressVector {
    /// From `port` to the port with LID `dlid`, SL 0, no GRH: the route within an InfiniBand
    /// subnet.
    #[must_use]
    pub fn new(port: u8, dlid: Lid) -> Self {
        AddressVector {
            dlid,
            sl: 0,
            src_path_bits: 0,
            port,
            grh: None,
            static_rate: StaticRate::MAX,
        }
    }

    /// The same route with the global route header `grh` (RoCE needs one).
    #[must_use]
    pub fn with_grh(self, grh: GlobalRoute) -> Self {
        AddressVector { grh: Some(grh), ..self }
    }

    /// The route to `remote` from `port`: by LID, plus a GRH from our GID `sgid_index` when
    /// one is given and the remote GID is not zero (the rule of ibv_rc_pingpong, where
    /// RoCE peers always send a GID).
    #[must_use]
    pub fn to_endpoint(remote: &Endpoint, port: u8, sgid_index: Option<u8>) -> Self {
        let av = AddressVector::new(port, remote.lid);
        match sgid_index.filter(|_| !remote.gid.is_zero()) {
            Some(sgid_index) => av.with_grh(GlobalRoute::new(remote.gid, sgid_index)),
            None => av,
        }
    }

    pub(crate) fn to_raw(self) -> sys::ibv_ah_attr {
        let mut raw = sys::ibv_ah_attr {
            dlid: self.dlid.get(),
            sl: self.sl,
            src_path_bits: self.src_path_bits,
            port_num: self.port,
            static_rate: self.static_rate.0 as u8,
            ..Default::default()
        };
        if let Some(g) = self.grh {
            raw.is_global = 1;
            raw.grh = sys::ibv_global_route {
                dgid: g.dgid.to_raw(),
                flow_label: g.flow_label,
                sgid_index: g.sgid_index,
                hop_limit: g.hop_limit,
                traffic_class: g.traffic_class,
            };
        }
        raw
    }
}
