//! The mock device: what it reports for itself, its port and its GID table.

use std::ffi::c_char;
use std::net::Ipv6Addr;

use rdma_verbs_sys::bindings::*;

/// The mock device's name.
pub const DEVICE_NAME: &str = "mock0";

/// The mock device's node GUID, in host order.
pub const NODE_GUID: u64 = 0x0200_00ff_fe00_0001;

/// `ibv_port_attr.port_cap_flags2` of the mock port: non-zero, and past the 48-byte compat
/// struct, so a test can tell a full query from a compat one.
const PORT_CAP_FLAGS2: u16 = 0x0a5a;

/// The limits a mock context's device reports ([`ContextConfig::limits`](crate::ContextConfig::limits));
/// the mock enforces `max_qp_wr` and `max_sge` at QP creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceLimits {
    /// `max_qp_wr`: work requests per queue.
    pub max_qp_wr: i32,
    /// `max_sge`: SGEs per work request.
    pub max_sge: i32,
    /// `max_qp_rd_atom`: a QP's `max_dest_rd_atomic`.
    pub max_qp_rd_atom: i32,
    /// `max_qp_init_rd_atom`: a QP's `max_rd_atomic`.
    pub max_qp_init_rd_atom: i32,
    /// `max_res_rd_atom`: the device's responder resources over all its QPs.
    pub max_res_rd_atom: i32,
    /// `packet_pacing_caps.qp_rate_limit_min` of `ibv_query_device_ex`, in kbps.
    pub qp_rate_limit_min: u32,
    /// `packet_pacing_caps.qp_rate_limit_max`, in kbps: 0, the default, reports no packet
    /// pacing. A context with a maximum has the `query_device_ex` op.
    pub qp_rate_limit_max: u32,
    /// `packet_pacing_caps.supported_qpts`: the QP types that take a rate limit, as bits
    /// `1 << IBV_QPT_*`.
    pub rate_limit_qp_types: u32,
}

impl Default for DeviceLimits {
    /// [`device_attr`]'s.
    fn default() -> Self {
        let a = device_attr();
        DeviceLimits {
            max_qp_wr: a.max_qp_wr,
            max_sge: a.max_sge,
            max_qp_rd_atom: a.max_qp_rd_atom,
            max_qp_init_rd_atom: a.max_qp_init_rd_atom,
            max_res_rd_atom: a.max_res_rd_atom,
            qp_rate_limit_min: 0,
            qp_rate_limit_max: 0,
            rate_limit_qp_types: 0,
        }
    }
}

impl DeviceLimits {
    /// What `ibv_query_device_ex` reports with these limits: [`DeviceLimits::device_attr`]
    /// and the packet pacing range.
    pub(crate) fn device_attr_ex(self, vendor_id: u32) -> ibv_device_attr_ex {
        ibv_device_attr_ex {
            orig_attr: self.device_attr(vendor_id),
            packet_pacing_caps: ibv_packet_pacing_caps {
                qp_rate_limit_min: self.qp_rate_limit_min,
                qp_rate_limit_max: self.qp_rate_limit_max,
                supported_qpts: self.rate_limit_qp_types,
            },
            ..Default::default()
        }
    }

    /// [`device_attr`] with these limits and `vendor_id`.
    pub(crate) fn device_attr(self, vendor_id: u32) -> ibv_device_attr {
        ibv_device_attr {
            vendor_id,
            max_qp_wr: self.max_qp_wr,
            max_sge: self.max_sge,
            max_qp_rd_atom: self.max_qp_rd_atom,
            max_qp_init_rd_atom: self.max_qp_init_rd_atom,
            max_res_rd_atom: self.max_res_rd_atom,
            ..device_attr()
        }
    }
}

/// What `ibv_query_device` reports for a context of [`DeviceLimits::default`]: one port, and
/// the limits the mock enforces (`max_qp_wr`, `max_sge`, `max_cqe`).
pub fn device_attr() -> ibv_device_attr {
    let mut attr = ibv_device_attr {
        node_guid: NODE_GUID.to_be(),
        sys_image_guid: NODE_GUID.to_be(),
        max_mr_size: 1 << 40,
        page_size_cap: 0x1000,
        max_qp: 64,
        max_qp_wr: 1024,
        max_sge: 4,
        max_cq: 64,
        max_cqe: 4096,
        max_mr: 64,
        max_pd: 64,
        max_qp_rd_atom: 16,
        max_qp_init_rd_atom: 16,
        max_res_rd_atom: 1024,
        max_pkeys: 1,
        phys_port_cnt: 1,
        ..Default::default()
    };
    copy_c_string(&mut attr.fw_ver, "0.1.0 (mock)");
    attr
}

/// What `ibv_query_port` reports for port 1: an active Ethernet (RoCE) port, MTU 1024, with
/// [`gid_table`]'s entries.
pub fn port_attr() -> ibv_port_attr {
    ibv_port_attr {
        state: IBV_PORT_ACTIVE,
        max_mtu: IBV_MTU_4096,
        active_mtu: IBV_MTU_1024,
        gid_tbl_len: GIDS.len() as i32,
        max_msg_sz: 1 << 31,
        pkey_tbl_len: 1,
        active_width: 1,
        active_speed: 1,
        phys_state: 5, // LinkUp
        link_layer: IBV_LINK_LAYER_ETHERNET as u8,
        port_cap_flags2: PORT_CAP_FLAGS2,
        ..Default::default()
    }
}

/// What `ibv_query_port_speed` answers for port 1, in units of 100 Mb/s: 2.5 Gb/s, the
/// 1X SDR link [`port_attr`] reports (rxe reports the same).
pub const PORT_SPEED: u64 = 25;

/// Port 1's GID table: the link-local and an IPv4-mapped address as RoCE v1 and v2, then
/// two empty entries (all-zero GID).
const GIDS: [(&str, ibv_gid_type); 6] = [
    ("fe80::1", IBV_GID_TYPE_ROCE_V1),
    ("fe80::1", IBV_GID_TYPE_ROCE_V2),
    ("::ffff:192.0.2.1", IBV_GID_TYPE_ROCE_V1),
    ("::ffff:192.0.2.1", IBV_GID_TYPE_ROCE_V2),
    ("::", IBV_GID_TYPE_IB),
    ("::", IBV_GID_TYPE_IB),
];

/// The netdev every non-empty GID belongs to.
const NDEV_IFINDEX: u32 = 2;

/// Port 1's GID table, `port_attr().gid_tbl_len` entries; empty ones are all zero.
pub fn gid_table() -> Vec<ibv_gid_entry> {
    (0..)
        .zip(GIDS)
        .map(|(index, (ip, gid_type))| {
            let ip: Ipv6Addr = ip.parse().expect("a valid address");
            if ip.is_unspecified() {
                return ibv_gid_entry::default();
            }
            ibv_gid_entry {
                gid: ibv_gid { raw: ip.octets() },
                gid_index: index,
                port_num: 1,
                gid_type,
                ndev_ifindex: NDEV_IFINDEX,
            }
        })
        .collect()
}

/// The device that `ibv_get_device_list` lists.
pub(super) fn device() -> ibv_device {
    let mut device = ibv_device {
        node_type: IBV_NODE_CA,
        transport_type: IBV_TRANSPORT_IB,
        ..Default::default()
    };
    copy_c_string(&mut device.name, DEVICE_NAME);
    copy_c_string(&mut device.dev_name, "uverbs0");
    copy_c_string(&mut device.dev_path, "/sys/class/infiniband_verbs/uverbs0");
    copy_c_string(&mut device.ibdev_path, "/sys/class/infiniband/mock0");
    device
}

/// Copies `s` into a zeroed C char array, leaving the NUL terminator.
fn copy_c_string(dst: &mut [c_char], s: &str) {
    assert!(s.len() < dst.len(), "{s:?} does not fit");
    for (d, &b) in dst.iter_mut().zip(s.as_bytes()) {
        *d = b as c_char;
    }
}
