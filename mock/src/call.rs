//! What the mock records, and the names failures are injected by.

use std::ffi::{c_int, c_uint};

use rdma_verbs_sys::bindings::*;

/// A mock function whose next call can be made to fail ([`Mock::fail`](super::Mock::fail)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Verb {
    /// `ibv_get_device_list`
    GetDeviceList,
    /// `ibv_open_device`
    OpenDevice,
    /// `ibv_close_device`
    CloseDevice,
    /// `ibv_query_device`
    QueryDevice,
    /// The `ibv_query_port@@IBVERBS_1.1` compat symbol.
    QueryPortCompat,
    /// The `verbs_context.query_port` op.
    QueryPortOp,
    /// `ibv_query_gid`
    QueryGid,
    /// `_ibv_query_gid_ex`
    QueryGidEx,
    /// `ibv_query_port_speed`
    QueryPortSpeed,
    /// `ibv_query_ece`
    QueryEce,
    /// `ibv_set_ece`
    SetEce,
    /// `ibv_alloc_pd`
    AllocPd,
    /// `ibv_dealloc_pd`
    DeallocPd,
    /// `ibv_reg_mr@@IBVERBS_1.1`
    RegMr,
    /// `ibv_reg_mr_iova2`
    RegMrIova2,
    /// `ibv_dereg_mr`
    DeregMr,
    /// `ibv_create_cq`
    CreateCq,
    /// `ibv_destroy_cq`
    DestroyCq,
    /// `ibv_create_qp`
    CreateQp,
    /// `ibv_modify_qp`
    ModifyQp,
    /// `ibv_query_qp`
    QueryQp,
    /// `ibv_destroy_qp`
    DestroyQp,
    /// `ibv_create_comp_channel`
    CreateCompChannel,
    /// `ibv_destroy_comp_channel`
    DestroyCompChannel,
    /// `ibv_get_cq_event`
    GetCqEvent,
    /// `ibv_get_async_event`
    GetAsyncEvent,
    /// The `ibv_context.ops.post_send` op.
    PostSend,
    /// The `ibv_context.ops.post_recv` op.
    PostRecv,
    /// The `ibv_context.ops.poll_cq` op.
    PollCq,
    /// The `ibv_context.ops.req_notify_cq` op.
    ReqNotifyCq,
    /// The `verbs_context.modify_cq` op.
    ModifyCq,
    /// The `verbs_context.alloc_dm` op.
    AllocDm,
    /// The `verbs_context.free_dm` op.
    FreeDm,
    /// The `verbs_context.reg_dm_mr` op.
    RegDmMr,
    /// A DM's `memcpy_to_dm` member.
    MemcpyToDm,
    /// A DM's `memcpy_from_dm` member.
    MemcpyFromDm,
    /// `ibv_dm_export_dmabuf_fd`
    DmExportDmabufFd,
    /// `ibv_alloc_dmah`
    AllocDmah,
    /// `ibv_dealloc_dmah`
    DeallocDmah,
    /// `ibv_reg_mr_ex`
    RegMrEx,
    /// `ibv_import_device`
    ImportDevice,
    /// `ibv_import_pd`
    ImportPd,
    /// `ibv_import_mr`
    ImportMr,
    /// The `verbs_context.alloc_td` op.
    AllocTd,
    /// The `verbs_context.dealloc_td` op.
    DeallocTd,
    /// The `verbs_context.alloc_parent_domain` op.
    AllocParentDomain,
    /// The `verbs_context.open_xrcd` op.
    OpenXrcd,
    /// The `verbs_context.close_xrcd` op.
    CloseXrcd,
    /// The `verbs_context.create_srq_ex` op.
    CreateSrqEx,
    /// The `verbs_context.get_srq_num` op.
    GetSrqNum,
    /// A function of the DC mock ([`super::mlx5`]).
    #[cfg(rdma_verbs_mlx5dv)]
    Mlx5(super::mlx5::Mlx5Verb),
    /// The `verbs_context.create_cq_ex` op.
    CreateCqEx,
    /// The `verbs_context.create_qp_ex` op.
    CreateQpEx,
    /// The `verbs_context.query_device_ex` op.
    QueryDeviceEx,
    /// The extended CQ's `start_poll` (`ENOENT` simulates an empty CQ).
    StartPoll,
    /// The extended CQ's `next_poll`.
    NextPoll,
    /// The extended QP's `wr_complete`.
    WrComplete,
    /// `ibv_create_srq`
    CreateSrq,
    /// `ibv_modify_srq`
    ModifySrq,
    /// `ibv_destroy_srq`
    DestroySrq,
    /// The `ibv_context.ops.post_srq_recv` op.
    PostSrqRecv,
    /// `ibv_create_ah`
    CreateAh,
    /// `ibv_destroy_ah`
    DestroyAh,
    /// The `ibv_context.ops.alloc_mw` op.
    AllocMw,
    /// The `ibv_context.ops.dealloc_mw` op.
    DeallocMw,
    /// The `ibv_context.ops.bind_mw` op (type-1 binds).
    BindMw,
}

/// One recorded call of a mock function, with the arguments tests check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `ibv_get_device_list`
    GetDeviceList,
    /// `ibv_free_device_list`
    FreeDeviceList,
    /// `ibv_get_device_name`
    GetDeviceName,
    /// `ibv_get_device_guid`
    GetDeviceGuid,
    /// `ibv_open_device`
    OpenDevice,
    /// `ibv_close_device`
    CloseDevice,
    /// `ibv_query_device`
    QueryDevice,
    /// The `ibv_query_port@@IBVERBS_1.1` compat symbol (it fills a 48-byte
    /// `struct _compat_ibv_port_attr`).
    QueryPortCompat {
        /// The port.
        port: u8,
    },
    /// The `verbs_context.query_port` op.
    QueryPortOp {
        /// The port.
        port: u8,
        /// The struct size the caller passed.
        attr_len: usize,
    },
    /// `ibv_query_gid`
    QueryGid {
        /// The port.
        port: u8,
        /// The GID index.
        index: c_int,
    },
    /// `_ibv_query_gid_ex`
    QueryGidEx {
        /// The port.
        port: u32,
        /// The GID index.
        index: u32,
        /// The flags (must be 0).
        flags: u32,
        /// The entry size the caller passed.
        entry_size: usize,
    },
    /// `ibv_query_port_speed`
    QueryPortSpeed {
        /// The port.
        port: u32,
    },
    /// `ibv_query_ece`
    QueryEce,
    /// `ibv_set_ece`
    SetEce {
        /// `ece.vendor_id`
        vendor_id: u32,
        /// `ece.options`
        options: u32,
        /// `ece.comp_mask`
        comp_mask: u32,
    },
    /// `ibv_alloc_pd`
    AllocPd,
    /// `ibv_dealloc_pd`
    DeallocPd,
    /// `ibv_reg_mr@@IBVERBS_1.1`
    RegMr {
        /// The buffer's address.
        addr: usize,
        /// Its length.
        length: usize,
        /// The access bits.
        access: c_int,
    },
    /// `ibv_reg_mr_iova2`
    RegMrIova2 {
        /// The buffer's address.
        addr: usize,
        /// Its length.
        length: usize,
        /// The I/O virtual address asked for.
        iova: u64,
        /// The access bits.
        access: c_uint,
    },
    /// `ibv_dereg_mr`
    DeregMr,
    /// `ibv_create_cq`
    CreateCq {
        /// The entries asked for.
        cqe: c_int,
        /// Whether a completion channel was given.
        channel: bool,
        /// The completion vector.
        comp_vector: c_int,
    },
    /// `ibv_destroy_cq`
    DestroyCq,
    /// `ibv_create_qp`, with the attributes asked for.
    CreateQp {
        /// `qp_type`.
        qp_type: ibv_qp_type,
        /// `sq_sig_all`.
        sq_sig_all: c_int,
        /// `cap.max_send_wr`.
        max_send_wr: u32,
        /// `cap.max_recv_wr`.
        max_recv_wr: u32,
        /// `cap.max_send_sge`.
        max_send_sge: u32,
        /// `cap.max_recv_sge`.
        max_recv_sge: u32,
        /// `cap.max_inline_data`.
        max_inline_data: u32,
    },
    /// `ibv_modify_qp`
    ModifyQp {
        /// The attribute mask (`IBV_QP_*` bits).
        mask: c_int,
        /// The attributes.
        attr: QpAttr,
    },
    /// `ibv_query_qp`
    QueryQp {
        /// The attribute mask.
        mask: c_int,
    },
    /// `ibv_destroy_qp`
    DestroyQp,
    /// `ibv_create_comp_channel`
    CreateCompChannel,
    /// `ibv_destroy_comp_channel`
    DestroyCompChannel,
    /// `ibv_get_cq_event`
    GetCqEvent,
    /// `ibv_ack_cq_events`
    AckCqEvents {
        /// The events acknowledged.
        nevents: c_uint,
    },
    /// `ibv_get_async_event`
    GetAsyncEvent,
    /// `ibv_ack_async_event`
    AckAsyncEvent {
        /// The type of the event acknowledged.
        event_type: ibv_event_type,
    },
    /// The `post_send` op.
    PostSend {
        /// The `wr_id` of each WR of the list, in order.
        wr_ids: Vec<u64>,
    },
    /// The `post_recv` op.
    PostRecv {
        /// The `wr_id` of each WR of the list, in order.
        wr_ids: Vec<u64>,
    },
    /// The `poll_cq` op.
    PollCq {
        /// The most completions asked for.
        num_entries: c_int,
    },
    /// The `req_notify_cq` op.
    ReqNotifyCq {
        /// Whether only solicited completions were asked for.
        solicited_only: c_int,
    },
    /// The `modify_cq` op.
    ModifyCq {
        /// `attr_mask`.
        attr_mask: u32,
        /// `moderate.cq_count`.
        cq_count: u16,
        /// `moderate.cq_period` (µs).
        cq_period: u16,
    },
    /// The `alloc_dm` op.
    AllocDm {
        /// `attr.length`.
        length: usize,
        /// `attr.log_align_req`.
        log_align_req: u32,
    },
    /// The `free_dm` op.
    FreeDm,
    /// The `reg_dm_mr` op.
    RegDmMr {
        /// `dm_offset`.
        offset: u64,
        /// `length`.
        length: usize,
        /// `access`.
        access: c_uint,
    },
    /// A DM's `memcpy_to_dm` member.
    MemcpyToDm {
        /// `dm_offset`.
        offset: u64,
        /// `length`.
        length: usize,
    },
    /// A DM's `memcpy_from_dm` member.
    MemcpyFromDm {
        /// `dm_offset`.
        offset: u64,
        /// `length`.
        length: usize,
    },
    /// `ibv_dm_export_dmabuf_fd`
    DmExportDmabufFd,
    /// `ibv_alloc_dmah`
    AllocDmah {
        /// `attr.comp_mask`.
        comp_mask: u32,
        /// `attr.cpu_id`.
        cpu_id: u32,
        /// `attr.ph`.
        ph: u8,
        /// `attr.tph_mem_type`.
        tph_mem_type: u8,
    },
    /// `ibv_dealloc_dmah`
    DeallocDmah,
    /// `ibv_reg_mr_ex`
    RegMrEx {
        /// `attr.comp_mask`.
        comp_mask: u64,
        /// `attr.addr`.
        addr: usize,
        /// `attr.length`.
        length: usize,
        /// `attr.iova`.
        iova: u64,
        /// `attr.access`.
        access: c_int,
        /// Whether `attr.dmah` names a DMA handle.
        dmah: bool,
    },
    /// `ibv_import_device`
    ImportDevice,
    /// `ibv_import_pd`
    ImportPd {
        /// The PD handle.
        handle: u32,
    },
    /// `ibv_unimport_pd`
    UnimportPd,
    /// `ibv_import_mr`
    ImportMr {
        /// The MR handle.
        handle: u32,
    },
    /// `ibv_unimport_mr`
    UnimportMr,
    /// The `open_xrcd` op.
    OpenXrcd {
        /// `attr.comp_mask`.
        comp_mask: u32,
    },
    /// The `close_xrcd` op.
    CloseXrcd,
    /// The `create_srq_ex` op.
    CreateSrqEx {
        /// `attr.srq_type`.
        srq_type: ibv_srq_type,
        /// `attr.comp_mask`.
        comp_mask: u32,
        /// `attr.attr.max_wr` asked for.
        max_wr: u32,
        /// `attr.attr.max_sge` asked for.
        max_sge: u32,
    },
    /// The `get_srq_num` op.
    GetSrqNum,
    /// The `alloc_td` op.
    AllocTd,
    /// The `dealloc_td` op.
    DeallocTd,
    /// The `alloc_parent_domain` op.
    AllocParentDomain {
        /// Whether `attr.td` names a thread domain.
        td: bool,
        /// `attr.comp_mask`.
        comp_mask: u32,
    },
    /// A call of the DC mock ([`super::mlx5`]).
    #[cfg(rdma_verbs_mlx5dv)]
    Mlx5(super::mlx5::Mlx5Call),
    /// The `create_cq_ex` op.
    CreateCqEx {
        /// The entries asked for.
        cqe: u32,
        /// Whether a completion channel was given.
        channel: bool,
        /// The completion vector.
        comp_vector: u32,
        /// The `IBV_WC_EX_WITH_*` fields asked for.
        wc_flags: u64,
    },
    /// The `create_qp_ex` op.
    CreateQpEx {
        /// `qp_type`.
        qp_type: ibv_qp_type,
        /// `comp_mask` (`IBV_QP_INIT_ATTR_*`).
        comp_mask: u32,
        /// `send_ops_flags` (`IBV_QP_EX_WITH_*`).
        send_ops_flags: u64,
    },
    /// The `query_device_ex` op.
    QueryDeviceEx {
        /// The struct size the caller passed.
        attr_size: usize,
    },
    /// The extended CQ's `start_poll`.
    StartPoll,
    /// The extended CQ's `next_poll`.
    NextPoll,
    /// The extended CQ's `end_poll`.
    EndPoll,
    /// The extended QP's `wr_start`.
    WrStart,
    /// An extended QP's operation builder (`wr_send`, `wr_rdma_write`, ...), with the WR's
    /// `wr_id` and `wr_flags` as set before it.
    WrBuild {
        /// The member's name.
        builder: &'static str,
        /// `qp_ex->wr_id`.
        wr_id: u64,
        /// `qp_ex->wr_flags`.
        wr_flags: u32,
    },
    /// An extended QP's data setter (`wr_set_sge`, `wr_set_sge_list`, `wr_set_inline_data`,
    /// `wr_set_inline_data_list`), with the bytes it names.
    WrData {
        /// The member's name.
        setter: &'static str,
        /// The total length.
        bytes: u64,
    },
    /// The extended QP's `wr_set_ud_addr`.
    WrUdAddr {
        /// The destination QP.
        remote_qpn: u32,
        /// The Q_Key.
        remote_qkey: u32,
    },
    /// The extended QP's `wr_complete`.
    WrComplete,
    /// The extended QP's `wr_abort`.
    WrAbort,
    /// `ibv_create_srq`
    CreateSrq {
        /// `attr.max_wr` asked for.
        max_wr: u32,
        /// `attr.max_sge` asked for.
        max_sge: u32,
    },
    /// `ibv_modify_srq`
    ModifySrq {
        /// The attribute mask (`IBV_SRQ_*` bits).
        mask: c_int,
    },
    /// `ibv_destroy_srq`
    DestroySrq,
    /// The `post_srq_recv` op.
    PostSrqRecv {
        /// The `wr_id` of each WR of the list, in order.
        wr_ids: Vec<u64>,
    },
    /// `ibv_create_ah`
    CreateAh {
        /// The attributes, as [`QpAttr`] shows an `ah_attr` (only its AV fields are set).
        attr: QpAttr,
    },
    /// `ibv_destroy_ah`
    DestroyAh,
    /// The `alloc_mw` op.
    AllocMw {
        /// `IBV_MW_TYPE_1` or `IBV_MW_TYPE_2`.
        mw_type: ibv_mw_type,
    },
    /// The `dealloc_mw` op.
    DeallocMw,
    /// The `bind_mw` op (a type-1 bind).
    BindMw {
        /// The bind's `wr_id`.
        wr_id: u64,
    },
}

/// The fields of `struct ibv_qp_attr` an RC connection sets, as passed to `ibv_modify_qp`
/// (all of them, whatever the mask says). The raw struct holds unions, so it cannot be
/// compared; this can.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QpAttr {
    /// `qp_state`
    pub qp_state: ibv_qp_state,
    /// `pkey_index`
    pub pkey_index: u16,
    /// `port_num`
    pub port_num: u8,
    /// `qp_access_flags`
    pub qp_access_flags: c_uint,
    /// `path_mtu`
    pub path_mtu: ibv_mtu,
    /// `dest_qp_num`
    pub dest_qp_num: u32,
    /// `rq_psn`
    pub rq_psn: u32,
    /// `max_dest_rd_atomic`
    pub max_dest_rd_atomic: u8,
    /// `min_rnr_timer`
    pub min_rnr_timer: u8,
    /// `ah_attr.dlid`
    pub dlid: u16,
    /// `ah_attr.sl`
    pub sl: u8,
    /// `ah_attr.src_path_bits`
    pub src_path_bits: u8,
    /// `ah_attr.static_rate` (`enum ibv_rate`)
    pub static_rate: u8,
    /// `ah_attr.port_num`
    pub ah_port_num: u8,
    /// `ah_attr.is_global`
    pub is_global: u8,
    /// `ah_attr.grh.dgid`
    pub dgid: [u8; 16],
    /// `ah_attr.grh.sgid_index`
    pub sgid_index: u8,
    /// `ah_attr.grh.hop_limit`
    pub hop_limit: u8,
    /// `ah_attr.grh.flow_label`
    pub flow_label: u32,
    /// `ah_attr.grh.traffic_class`
    pub traffic_class: u8,
    /// `timeout`
    pub timeout: u8,
    /// `retry_cnt`
    pub retry_cnt: u8,
    /// `rnr_retry`
    pub rnr_retry: u8,
    /// `sq_psn`
    pub sq_psn: u32,
    /// `max_rd_atomic`
    pub max_rd_atomic: u8,
    /// `rate_limit` (kbps)
    pub rate_limit: u32,
}

impl QpAttr {
    pub(crate) fn from_raw(a: &ibv_qp_attr) -> QpAttr {
        let ah = &a.ah_attr;
        QpAttr {
            qp_state: a.qp_state,
            pkey_index: a.pkey_index,
            port_num: a.port_num,
            qp_access_flags: a.qp_access_flags,
            path_mtu: a.path_mtu,
            dest_qp_num: a.dest_qp_num,
            rq_psn: a.rq_psn,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            min_rnr_timer: a.min_rnr_timer,
            dlid: ah.dlid,
            sl: ah.sl,
            src_path_bits: ah.src_path_bits,
            static_rate: ah.static_rate,
            ah_port_num: ah.port_num,
            is_global: ah.is_global,
            // SAFETY: every member of `union ibv_gid` is plain bytes; `raw` views all 16.
            dgid: unsafe { ah.grh.dgid.raw },
            sgid_index: ah.grh.sgid_index,
            hop_limit: ah.grh.hop_limit,
            flow_label: ah.grh.flow_label,
            traffic_class: ah.grh.traffic_class,
            timeout: a.timeout,
            retry_cnt: a.retry_cnt,
            rnr_retry: a.rnr_retry,
            sq_psn: a.sq_psn,
            max_rd_atomic: a.max_rd_atomic,
            rate_limit: a.rate_limit,
        }
    }
}
