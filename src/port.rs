//! Port attributes (`ibv_query_port(3)`).

use rdma_verbs_sys as sys;

use crate::c_enum::c_enum;
use crate::endpoint::Lid;
use crate::summary::summary_debug;

c_enum! {
    /// The logical state of a port (`enum ibv_port_state`).
    pub struct PortState(u32) {
        /// No link.
        DOWN = sys::IBV_PORT_DOWN => "DOWN",
        /// Link up, waiting for the subnet manager.
        INIT = sys::IBV_PORT_INIT => "INIT",
        /// Configured, not yet active.
        ARMED = sys::IBV_PORT_ARMED => "ARMED",
        /// Ready for traffic.
        ACTIVE = sys::IBV_PORT_ACTIVE => "ACTIVE",
        /// Active, deferring.
        ACTIVE_DEFER = sys::IBV_PORT_ACTIVE_DEFER => "ACTIVE_DEFER",
        /// No state reported.
        NOP = sys::IBV_PORT_NOP => "NOP",
    }
}

c_enum! {
    /// The link layer of a port.
    pub struct LinkLayer(u8) {
        /// Not reported; by convention InfiniBand.
        UNSPECIFIED = sys::IBV_LINK_LAYER_UNSPECIFIED => "Unspecified",
        /// InfiniBand.
        INFINIBAND = sys::IBV_LINK_LAYER_INFINIBAND => "InfiniBand",
        /// Ethernet: RoCE, or iWARP.
        ETHERNET = sys::IBV_LINK_LAYER_ETHERNET => "Ethernet",
    }
}

c_enum! {
    /// A path MTU (`enum ibv_mtu`).
    pub struct Mtu(u32) {
        /// 256 bytes.
        MTU_256 = sys::IBV_MTU_256 => "256",
        /// 512 bytes.
        MTU_512 = sys::IBV_MTU_512 => "512",
        /// 1024 bytes.
        MTU_1024 = sys::IBV_MTU_1024 => "1024",
        /// 2048 bytes.
        MTU_2048 = sys::IBV_MTU_2048 => "2048",
        /// 4096 bytes.
        MTU_4096 = sys::IBV_MTU_4096 => "4096",
    }
}

impl Mtu {
    /// The MTU of `bytes` (256, 512, 1024, 2048 or 4096), `None` for any other size.
    pub fn from_bytes(bytes: u32) -> Option<Mtu> {
        [Mtu::MTU_256, Mtu::MTU_512, Mtu::MTU_1024, Mtu::MTU_2048, Mtu::MTU_4096]
            .into_iter()
            .find(|m| m.bytes() == Some(bytes))
    }

    /// The size in bytes, `None` for a value this build does not know.
    pub fn bytes(self) -> Option<u32> {
        (1..=5).contains(&self.0).then(|| 128 << self.0)
    }

    /// `limit` when it is smaller, else `self` (also when either is a value this build does
    /// not know).
    pub(crate) fn at_most(self, limit: Mtu) -> Mtu {
        match (self.bytes(), limit.bytes()) {
            (Some(asked), Some(most)) if most < asked => limit,
            _ => self,
        }
    }
}

/// A port's attributes (`struct ibv_port_attr`), from [`Context::query_port`](crate::Context::query_port).
#[derive(Clone, Copy)]
pub struct PortAttr(pub(crate) sys::ibv_port_attr);

impl PortAttr {
    /// The logical state.
    pub fn state(&self) -> PortState {
        PortState(self.0.state)
    }

    /// The physical state (`IB_PORT_PHYS_STATE_*`: 5 is LinkUp, 3 Disabled, ...).
    pub fn phys_state(&self) -> u8 {
        self.0.phys_state
    }

    /// The largest MTU the port supports.
    pub fn max_mtu(&self) -> Mtu {
        Mtu(self.0.max_mtu)
    }

    /// The MTU in use: the largest path MTU a QP on this port may use.
    pub fn active_mtu(&self) -> Mtu {
        Mtu(self.0.active_mtu)
    }

    /// The base LID (0 on Ethernet ports, which address by GID).
    pub fn lid(&self) -> Lid {
        Lid::new(self.0.lid)
    }

    /// [`Context::source_lid`](crate::Context::source_lid)'s LID: the base LID, 0 on
    /// Ethernet; `None` on an InfiniBand port without one.
    pub(crate) fn source_lid(&self) -> Option<Lid> {
        (self.is_ethernet() || self.0.lid != 0).then(|| self.lid())
    }

    /// The subnet manager's LID (InfiniBand).
    pub fn sm_lid(&self) -> Lid {
        Lid::new(self.0.sm_lid)
    }

    /// The link layer.
    pub fn link_layer(&self) -> LinkLayer {
        LinkLayer(self.0.link_layer)
    }

    /// Whether the link layer is Ethernet (RoCE or iWARP), where a GID is required.
    pub fn is_ethernet(&self) -> bool {
        self.link_layer() == LinkLayer::ETHERNET
    }

    /// The number of GID table entries.
    pub fn gid_tbl_len(&self) -> u32 {
        self.0.gid_tbl_len as u32
    }

    /// The raw `active_width` (`IBV_WIDTH_*`).
    pub fn active_width(&self) -> u8 {
        self.0.active_width
    }

    /// The raw `active_speed` (`IBV_SPEED_*`).
    pub fn active_speed(&self) -> u8 {
        self.0.active_speed
    }

    /// The raw attributes.
    pub fn as_raw(&self) -> &sys::ibv_port_attr {
        &self.0
    }
}

summary_debug!(PortAttr: state, active_mtu, lid, link_layer, gid_tbl_len);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_source_lid_is_the_base_lid_which_infiniband_needs() {
        let port = |link_layer, lid| {
            PortAttr(sys::ibv_port_attr { link_layer: link_layer as u8, lid, ..Default::default() })
        };
        let (ib, eth) = (sys::IBV_LINK_LAYER_INFINIBAND, sys::IBV_LINK_LAYER_ETHERNET);
        assert_eq!(port(ib, 7).source_lid(), Some(Lid::new(7)));
        assert_eq!(port(ib, 0).source_lid(), None, "no subnet manager assigned one");
        assert_eq!(port(eth, 0).source_lid(), Some(Lid::new(0)), "RoCE routes by GID");
    }

    #[test]
    fn mtu_bytes_round_trip() {
        for bytes in [256, 512, 1024, 2048, 4096] {
            assert_eq!(Mtu::from_bytes(bytes).and_then(Mtu::bytes), Some(bytes));
        }
        assert_eq!(Mtu::from_bytes(1500), None);
        assert_eq!(Mtu(9).bytes(), None);
        assert_eq!(Mtu(9).to_string(), "unknown (9)");
        assert_eq!(Mtu::MTU_1024.to_string(), "1024");
    }
}
