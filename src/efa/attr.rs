//! The EFA device attributes of `efadv_query_device(3)`.

use bitflags::bitflags;
use rdma_verbs_sys as sys;

use crate::error::{Error, InvalidInputKind, Result};
use crate::qp::QpCapabilities;

bitflags! {
    /// What an EFA device can do beyond SENDs (`device_caps` of `efadv_query_device(3)`,
    /// `EFADV_DEVICE_ATTR_CAPS_*`). Bits this build does not name are kept.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct EfaDeviceCaps: u32 {
        /// `RDMA_READ`: RDMA READ over SRD.
        const RDMA_READ = sys::EFADV_DEVICE_ATTR_CAPS_RDMA_READ;
        /// `RNR_RETRY` (rdma-core v32): an SRD QP retries a SEND that found no receive
        /// posted (receiver not ready) instead of failing it.
        const RNR_RETRY = sys::EFADV_DEVICE_ATTR_CAPS_RNR_RETRY;
        /// `CQ_WITH_SGID` (rdma-core v43): a receive completion can report the sender's
        /// GID, for senders without an address handle here.
        const CQ_WITH_SGID = sys::EFADV_DEVICE_ATTR_CAPS_CQ_WITH_SGID;
        /// `RDMA_WRITE` (rdma-core v46): RDMA WRITE over SRD.
        const RDMA_WRITE = sys::EFADV_DEVICE_ATTR_CAPS_RDMA_WRITE;
        /// `UNSOLICITED_WRITE_RECV` (rdma-core v52): QPs can take an RDMA WRITE with
        /// immediate without consuming a posted receive.
        const UNSOLICITED_WRITE_RECV = sys::EFADV_DEVICE_ATTR_CAPS_UNSOLICITED_WRITE_RECV;
        const _ = !0;
    }
}

/// An EFA device's attributes (`struct efadv_device_attr`, `efadv_query_device(3)`): its
/// work-queue limits, which are those of SRD and UD QPs, and its capabilities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EfaDeviceAttr {
    /// The most work requests a send queue holds.
    pub max_sq_wr: u32,
    /// The most work requests a receive queue holds.
    pub max_rq_wr: u32,
    /// The most SGEs a send work request has.
    pub max_sq_sge: u16,
    /// The most SGEs a receive work request has.
    pub max_rq_sge: u16,
    /// The most bytes a send carries inline, in bytes.
    pub inline_buf_size: u16,
    /// The largest RDMA READ or WRITE, in bytes (0 when the library does not report it).
    pub max_rdma_size: u32,
    /// The device's capabilities.
    pub device_caps: EfaDeviceCaps,
}

impl EfaDeviceAttr {
    pub(super) fn from_raw(raw: &sys::efadv_device_attr) -> EfaDeviceAttr {
        EfaDeviceAttr {
            max_sq_wr: raw.max_sq_wr,
            max_rq_wr: raw.max_rq_wr,
            max_sq_sge: raw.max_sq_sge,
            max_rq_sge: raw.max_rq_sge,
            inline_buf_size: raw.inline_buf_size,
            max_rdma_size: raw.max_rdma_size,
            device_caps: EfaDeviceCaps::from_bits_retain(raw.device_caps),
        }
    }

    /// Refuses capabilities above these limits, naming the first one (libefa refuses them
    /// with a bare `EINVAL`).
    pub(super) fn check_caps(&self, cap: &QpCapabilities) -> Result<()> {
        let asked = [
            ("max_send_wr", cap.max_send_wr, "max_sq_wr", self.max_sq_wr),
            ("max_recv_wr", cap.max_recv_wr, "max_rq_wr", self.max_rq_wr),
            ("max_send_sge", cap.max_send_sge, "max_sq_sge", self.max_sq_sge.into()),
            ("max_recv_sge", cap.max_recv_sge, "max_rq_sge", self.max_rq_sge.into()),
            (
                "max_inline_data",
                cap.max_inline_data,
                "inline_buf_size",
                self.inline_buf_size.into(),
            ),
        ];
        match asked.into_iter().find(|&(_, value, _, max)| value > max) {
            Some((field, value, name, max)) => Err(Error::invalid(
                InvalidInputKind::DeviceLimit,
                format!(
                    "{field} {value} is above the EFA device's {name} {max} \
                     (efadv_query_device): ask for at most {max}"
                ),
            )),
            None => Ok(()),
        }
    }
}
