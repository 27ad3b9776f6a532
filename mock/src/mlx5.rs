//! A mock libmlx5 for the DC transport, and the libibverbs pieces DC needs that the base mock
//! does not model (DC QP transitions, address handles by the port's link layer).
//!
//! - [`library`]: an [`Mlx5`] whose `mlx5dv_is_supported` says yes or no, whose
//!   `mlx5dv_query_device` reports DC ODP, DCI stream and DC read/atomic capabilities, and
//!   whose `mlx5dv_create_qp` makes DCTs and DCIs with the rules of libmlx5 and the kernel
//!   (`IBV_QPT_DRIVER`, the DC mask, a DCT only with an SRQ and a receive CQ and without send
//!   ops, DCI streams within the capabilities, `EOPNOTSUPP` on a device without DC).
//!   [`library_without_stream_reset`] lacks the optional `mlx5dv_dci_stream_id_reset`.
//! - [`ibverbs_library`]: the base mock libibverbs (its SRQs too) with `ibv_create_ah`,
//!   `ibv_modify_qp` / `ibv_destroy_qp` / `ibv_qp_to_qp_ex` / `ibv_query_device` that know DC
//!   QPs and the [`DeviceConfig`]: a DCT goes RESET→INIT→RTR and nowhere else (the DCT number
//!   appears at RTR; `mlx5_ib_modify_dct` refuses every other transition), a DCI
//!   RESET→INIT→RTR→RTS, and back to RESET from any state (mainline kernels; refused when
//!   [`DeviceConfig::dci_reset`] is `false`, as older ones do), each refusing (`EINVAL`) a
//!   missing or extra mask bit as mlx5_ib does (its `mlx5_ib_modify_dct` and
//!   `modify_dci_qp_is_ok`). An AV (DCT RTR) or AH needs a GRH only on an Ethernet (RoCE)
//!   port ([`DeviceConfig::link_layer`]), as the kernel; libmlx5 makes InfiniBand AHs
//!   without one. Other QPs go to the base mock.
//! - [`configure`]: what this thread's mock device is ([`DeviceConfig`]).
//! - A DCI's `ibv_qp_ex` and `mlx5dv_qp_ex` members record each builder call
//!   ([`Mlx5Call`]), so tests see the order and arguments of a posted work request.
//! - RDMA WRITE and READ of a DCI are carried out at `wr_complete` when their DCT is a live
//!   DCT of this mock in RTR (see the `exec` notes): the data moves between the MRs' CPU
//!   ranges, and the completion goes to the DCI's send CQ. SENDs, and WRs to a DCT that is
//!   not this mock's, are recorded only, never executed.
//!
//! Calls are recorded in the thread's [`Mock`](super::Mock) log as [`Call::Mlx5`] (those of
//! the libibverbs verbs as the base mock records them); failures are injected with
//! [`Verb::Mlx5`]. DC QPs, laid out as libmlx5's, live in a registry of their own, per thread,
//! freed when the thread ends; SRQs and AHs are the base mock's objects.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::ffi::c_int;
use std::mem::offset_of;
use std::path::PathBuf;
use std::sync::OnceLock;

use rdma_verbs_sys::bindings::*;
use rdma_verbs_sys::loader::Ibverbs;
use rdma_verbs_sys::mlx5::{self, Mlx5, Mlx5Fns};

use super::call::{Call, QpAttr, Verb};
use super::state::{serve, Kind};
use super::verbs::{or_null, status};
use super::{ah, qp, Optional};

mod exec;

/// What a mock libmlx5 reports as its path.
pub const LIBRARY_PATH: &str = "mock/libmlx5.so.1";

/// The DCI stream capabilities the mock device reports: 2⁴ concurrent, 2³ errored.
pub const DCI_STREAMS_CAPS: mlx5dv_dci_streams_caps =
    mlx5dv_dci_streams_caps { max_log_num_concurent: 4, max_log_num_errored: 3 };

/// The DC on-demand-paging capabilities the mock device reports (`IBV_ODP_SUPPORT_SEND |
/// IBV_ODP_SUPPORT_RECV`).
pub const DC_ODP_CAPS: u32 = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV;

/// The DC read/atomic limits the default mock device reports with
/// `MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM` (`max_dc_rd_atom`, `max_dc_init_rd_atom`): fewer than
/// its RC limits (16), so tests see which one is used.
pub const DC_RD_ATOM: (u64, u64) = (8, 4);

/// The `vendor_part_id` the default mock device reports: 4125, a ConnectX-6 Dx (DC v2).
pub const VENDOR_PART_ID: u32 = 4125;

/// What this thread's mock mlx5 device is ([`configure`]): [`DeviceConfig::default`] until
/// configured, then kept for the thread (across mocks) until configured again.
#[derive(Clone, Copy, Debug)]
pub struct DeviceConfig {
    /// The `dci_streams_caps` `mlx5dv_query_device` reports (its bit is set whenever asked, as
    /// libmlx5 v37+ does, also with `max_log_num_concurent` 0: a device without streams).
    pub dci_streams: mlx5dv_dci_streams_caps,
    /// `max_dc_rd_atom` and `max_dc_init_rd_atom`, reported when asked; `None`: a libmlx5
    /// before v47, which clears `MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM`.
    pub dc_rd_atom: Option<(u64, u64)>,
    /// The `vendor_part_id` of `ibv_query_device` (the PCI device ID).
    pub vendor_part_id: u32,
    /// Whether the device offers DC; without it `mlx5dv_create_qp` of a DC QP is
    /// `EOPNOTSUPP`, as mlx5_ib answers.
    pub dc: bool,
    /// The link layer of the port (`IBV_LINK_LAYER_*`) for the GRH rule of AVs and AHs.
    pub link_layer: u32,
    /// Whether a DCI may go back to RESET from any state (mainline kernels); `false`
    /// refuses it (`EINVAL`) from every state but RESET, as older kernels do.
    pub dci_reset: bool,
    /// Whether a DCI made with `IBV_QP_EX_WITH_RDMA_READ` gets its `wr_rdma_read` member;
    /// `false` leaves it NULL, as a provider without the builder would.
    pub dci_rdma_read: bool,
}

impl Default for DeviceConfig {
    /// A ConnectX-6 Dx on RoCE with DCI streams, DC read limits and a mainline kernel.
    fn default() -> Self {
        DeviceConfig {
            dci_streams: DCI_STREAMS_CAPS,
            dc_rd_atom: Some(DC_RD_ATOM),
            vendor_part_id: VENDOR_PART_ID,
            dc: true,
            link_layer: IBV_LINK_LAYER_ETHERNET,
            dci_reset: true,
            dci_rdma_read: true,
        }
    }
}

/// Makes this thread's mock mlx5 device `config`.
pub fn configure(config: DeviceConfig) {
    CONFIG.set(config);
}

fn config() -> DeviceConfig {
    CONFIG.get()
}

/// A mock libmlx5 function whose next call can fail ([`Verb::Mlx5`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mlx5Verb {
    /// `mlx5dv_query_device`
    QueryDevice,
    /// `mlx5dv_create_qp`
    CreateQp,
    /// The DCI's `wr_complete` member.
    WrComplete,
    /// `mlx5dv_dci_stream_id_reset`
    DciStreamIdReset,
}

/// One recorded call of the mock libmlx5 or of a DCI member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mlx5Call {
    /// `mlx5dv_is_supported`
    IsSupported,
    /// `mlx5dv_query_device`
    QueryDevice {
        /// The capability bits asked for.
        comp_mask: u64,
    },
    /// `mlx5dv_create_qp`, with what was asked.
    CreateQp {
        /// `attr->qp_type`.
        qp_type: ibv_qp_type,
        /// `attr->comp_mask` (`IBV_QP_INIT_ATTR_*`).
        comp_mask: u32,
        /// `attr->send_ops_flags` (`IBV_QP_EX_WITH_*`).
        send_ops_flags: u64,
        /// Whether an SRQ was given.
        srq: bool,
        /// Whether a receive CQ was given.
        recv_cq: bool,
        /// `mlx5_attr->comp_mask` (`MLX5DV_QP_INIT_ATTR_MASK_*`).
        dv_comp_mask: u64,
        /// `mlx5_attr->create_flags`.
        create_flags: u32,
        /// `dc_init_attr.dc_type`.
        dc_type: mlx5dv_dc_type,
        /// `dc_init_attr.dct_access_key`, for a DCT.
        dct_access_key: Option<u64>,
        /// `dc_init_attr.dci_streams` (log concurrent, log errored), when its mask bit is set.
        dci_streams: Option<(u8, u8)>,
    },
    /// `mlx5dv_qp_ex_from_ibv_qp_ex`
    QpExFromIbvQpEx,
    /// `wr_start`
    WrStart,
    /// `wr_send`, with the `wr_id` and `wr_flags` fields as they were then.
    WrSend {
        /// `qp_ex->wr_id`.
        wr_id: u64,
        /// `qp_ex->wr_flags`.
        wr_flags: u32,
    },
    /// `wr_rdma_write`, with the `wr_id` and `wr_flags` fields as they were then.
    WrRdmaWrite {
        /// `qp_ex->wr_id`.
        wr_id: u64,
        /// `qp_ex->wr_flags`.
        wr_flags: u32,
        /// The remote key.
        rkey: u32,
        /// The remote address.
        remote_addr: u64,
    },
    /// `mlx5dv_qp_ex.wr_set_dc_addr`
    WrSetDcAddr {
        /// The AH's address.
        ah: usize,
        /// The remote DCT number.
        remote_dctn: u32,
        /// The remote DC access key.
        remote_dc_key: u64,
    },
    /// `mlx5dv_qp_ex.wr_set_dc_addr_stream`
    WrSetDcAddrStream {
        /// The AH's address.
        ah: usize,
        /// The remote DCT number.
        remote_dctn: u32,
        /// The remote DC access key.
        remote_dc_key: u64,
        /// The DCI stream.
        stream_id: u16,
    },
    /// `wr_rdma_read`, with the `wr_id` and `wr_flags` fields as they were then.
    WrRdmaRead {
        /// `qp_ex->wr_id`.
        wr_id: u64,
        /// `qp_ex->wr_flags`.
        wr_flags: u32,
        /// The remote key.
        rkey: u32,
        /// The remote address.
        remote_addr: u64,
    },
    /// `wr_set_sge`
    WrSetSge {
        /// The local key.
        lkey: u32,
        /// The address.
        addr: u64,
        /// The length.
        length: u32,
    },
    /// `wr_complete`
    WrComplete,
    /// `wr_abort`
    WrAbort,
    /// `mlx5dv_dci_stream_id_reset`
    DciStreamIdReset {
        /// The stream.
        stream_id: u16,
    },
}

/// A DC QP as libmlx5 lays one out: the `ibv_qp_ex` (whose first member is the `ibv_qp`) and,
/// further on, the `mlx5dv_qp_ex` that `mlx5dv_qp_ex_from_ibv_qp_ex` finds by `container_of`.
#[repr(C)]
struct DcQp {
    qp_ex: ibv_qp_ex,
    dv: mlx5dv_qp_ex,
    dc_type: mlx5dv_dc_type,
    send_ops: bool,
    /// log₂ of its concurrent DCI streams, when created with streams.
    log_streams: Option<u8>,
    /// A DCT's access key.
    key: u64,
    /// A DCT's `qp_access_flags`, from its INIT transition.
    access: u32,
    /// A DCI's `sq_sig_all`.
    sig_all: bool,
    /// A DCI's work requests of the open batch (`wr_start` to `wr_complete`).
    batch: Vec<exec::DcWork>,
}

thread_local! {
    /// This thread's live DC QPs, by address.
    static DC: RefCell<HashMap<usize, Box<DcQp>>> = RefCell::new(HashMap::new());
    static CONFIG: Cell<DeviceConfig> = Cell::new(DeviceConfig::default());
}

/// Whether `qp` is a live DC QP of this thread's mock.
pub fn is_live<T>(qp: *mut T) -> bool {
    DC.with_borrow(|qps| qps.contains_key(&(qp as usize)))
}

fn record(call: Mlx5Call) {
    let _ = serve(|s| {
        s.record(Call::Mlx5(call));
        Ok(())
    });
}

/// The mock libmlx5 (every optional symbol); `supported` is what `mlx5dv_is_supported`
/// answers.
pub fn fns(supported: bool) -> Mlx5Fns {
    Mlx5Fns {
        mlx5dv_query_device,
        mlx5dv_is_supported: if supported { is_supported_yes } else { is_supported_no },
        mlx5dv_create_qp,
        mlx5dv_qp_ex_from_ibv_qp_ex,
        mlx5dv_dci_stream_id_reset: Some(mlx5dv_dci_stream_id_reset),
    }
}

/// The mock libmlx5 as a process-wide library; `supported` is what `mlx5dv_is_supported`
/// answers for every device.
pub fn library(supported: bool) -> &'static Mlx5 {
    static LIBRARIES: [OnceLock<Mlx5>; 2] = [const { OnceLock::new() }; 2];
    LIBRARIES[usize::from(supported)].get_or_init(|| {
        // SAFETY: each function keeps the contract of its libmlx5 namesake over the mock's
        // objects.
        unsafe { Mlx5::from_fns(fns(supported), PathBuf::from(LIBRARY_PATH)) }
    })
}

/// As [`library`]`(true)` without `mlx5dv_dci_stream_id_reset`: a libmlx5 before v37.
pub fn library_without_stream_reset() -> &'static Mlx5 {
    static LIBRARY: OnceLock<Mlx5> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let fns = Mlx5Fns { mlx5dv_dci_stream_id_reset: None, ..fns(true) };
        // SAFETY: as in `library`.
        unsafe { Mlx5::from_fns(fns, PathBuf::from(LIBRARY_PATH)) }
    })
}

/// The mock libibverbs (every optional symbol) with SRQs, AHs and DC QPs modelled.
pub fn ibverbs_library() -> &'static Ibverbs {
    static LIBRARY: OnceLock<Ibverbs> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let base = super::fns(Optional::ALL);
        let fns = rdma_verbs_sys::IbverbsFns {
            ibv_create_ah,
            ibv_modify_qp,
            ibv_destroy_qp,
            ibv_qp_to_qp_ex: Some(ibv_qp_to_qp_ex),
            ibv_query_device,
            ..base
        };
        // SAFETY: each function keeps the contract of its libibverbs namesake.
        unsafe { Ibverbs::from_fns(fns, PathBuf::from(super::LIBRARY_PATH)) }
    })
}

extern "C" fn is_supported_yes(_device: *mut ibv_device) -> bool {
    record(Mlx5Call::IsSupported);
    true
}

extern "C" fn is_supported_no(_device: *mut ibv_device) -> bool {
    record(Mlx5Call::IsSupported);
    false
}

/// `mlx5dv_query_device`: the DC ODP, DCI stream and DC read/atomic capabilities of the
/// [`DeviceConfig`], when asked for; other bits are cleared, as the library clears what it
/// does not know. The read/atomic limits are written at their rdma-core v47 offsets, past the
/// struct of older headers: the caller's buffer must reach them when it asks for them.
///
/// # Safety
///
/// `attr` must be valid for reads and writes.
unsafe extern "C" fn mlx5dv_query_device(
    ctx: *mut ibv_context,
    attr: *mut mlx5dv_context,
) -> c_int {
    // SAFETY: the caller passes a valid struct.
    let attr = unsafe { &mut *attr };
    let asked = attr.comp_mask;
    let result = serve(|s| {
        s.begin(
            Call::Mlx5(Mlx5Call::QueryDevice { comp_mask: asked }),
            Verb::Mlx5(Mlx5Verb::QueryDevice),
        )?;
        s.expect(ctx, Kind::Context)
    });
    if let Err(errno) = result {
        return errno;
    }
    let config = config();
    let rd_atom_bit = u64::from(mlx5::MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM);
    let mut known = u64::from(MLX5DV_CONTEXT_MASK_DC_ODP_CAPS | MLX5DV_CONTEXT_MASK_DCI_STREAMS);
    if let Some((responder, init)) = config.dc_rd_atom.filter(|_| asked & rd_atom_bit != 0) {
        known |= rd_atom_bit;
        let base = (attr as *mut mlx5dv_context).cast::<u8>();
        // SAFETY: the caller asked for the v47 fields, so its buffer reaches them (see above);
        // unaligned writes need no alignment.
        unsafe {
            base.add(mlx5::MAX_DC_RD_ATOM_OFFSET).cast::<u64>().write_unaligned(responder);
            base.add(mlx5::MAX_DC_INIT_RD_ATOM_OFFSET).cast::<u64>().write_unaligned(init);
        }
    }
    attr.version = 1;
    attr.comp_mask = asked & known;
    attr.dc_odp_caps = DC_ODP_CAPS;
    attr.dci_streams_caps = config.dci_streams;
    0
}

/// `ibv_query_device`: the base mock's answer, with the [`DeviceConfig`]'s `vendor_part_id`.
///
/// # Safety
///
/// `attr` must be writable.
unsafe extern "C" fn ibv_query_device(ctx: *mut ibv_context, attr: *mut ibv_device_attr) -> c_int {
    // SAFETY: forwarded under the caller's guarantees.
    let ret = unsafe { (super::fns(Optional::ALL).ibv_query_device)(ctx, attr) };
    if ret == 0 {
        // SAFETY: the caller made `attr` writable; the base mock filled it.
        unsafe { (*attr).vendor_part_id = config().vendor_part_id };
    }
    ret
}

/// `mlx5dv_dci_stream_id_reset`: `EINVAL` unless `qp` is a DCI with streams in RTS and
/// `stream_id` one of them.
extern "C" fn mlx5dv_dci_stream_id_reset(qp: *mut ibv_qp, stream_id: u16) -> c_int {
    let result = serve(|s| {
        s.begin(
            Call::Mlx5(Mlx5Call::DciStreamIdReset { stream_id }),
            Verb::Mlx5(Mlx5Verb::DciStreamIdReset),
        )?;
        DC.with_borrow(|qps| match qps.get(&(qp as usize)) {
            Some(q)
                if q.dc_type == MLX5DV_DCTYPE_DCI
                    && q.qp_ex.qp_base.state == IBV_QPS_RTS
                    && q.log_streams.is_some_and(|log| u32::from(stream_id) < 1 << log) =>
            {
                Ok(())
            }
            _ => Err(libc::EINVAL),
        })
    });
    status(result)
}

/// `mlx5dv_create_qp`: DC QPs only (`EOPNOTSUPP` otherwise, as for a driver QP without DC).
///
/// # Safety
///
/// `attr` and `mlx5_attr` must be valid for reads and writes.
unsafe extern "C" fn mlx5dv_create_qp(
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
    mlx5_attr: *mut mlx5dv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: the caller passes valid structs.
    let (attr, dv) = unsafe { (&mut *attr, &*mlx5_attr) };
    let dc = dv.comp_mask & u64::from(MLX5DV_QP_INIT_ATTR_MASK_DC) != 0;
    let dct = dc && dv.dc_init_attr.dc_type == MLX5DV_DCTYPE_DCT;
    let streams = dv.comp_mask & u64::from(MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS) != 0;
    // SAFETY: both union members are plain integers, valid whichever one the caller set;
    // only the one the DC type and mask select is used.
    let (key, streams_attr) = unsafe {
        let u = dv.dc_init_attr.__bindgen_anon_1;
        (u.dct_access_key, u.dci_streams)
    };
    let s = streams_attr;
    let call = Mlx5Call::CreateQp {
        qp_type: attr.qp_type,
        comp_mask: attr.comp_mask,
        send_ops_flags: attr.send_ops_flags,
        srq: !attr.srq.is_null(),
        recv_cq: !attr.recv_cq.is_null(),
        dv_comp_mask: dv.comp_mask,
        create_flags: dv.create_flags,
        dc_type: dv.dc_init_attr.dc_type,
        dct_access_key: dct.then_some(key),
        dci_streams: streams.then_some((s.log_num_concurent, s.log_num_errored)),
    };
    let checked = serve(|st| {
        st.begin(Call::Mlx5(call), Verb::Mlx5(Mlx5Verb::CreateQp))?;
        st.expect(ctx, Kind::Context)?;
        st.expect(attr.pd, Kind::Pd)?;
        if attr.qp_type != IBV_QPT_DRIVER {
            return Err(libc::EINVAL);
        }
        if !dc || !config().dc {
            return Err(libc::EOPNOTSUPP);
        }
        match dv.dc_init_attr.dc_type {
            MLX5DV_DCTYPE_DCT => {
                let only_pd = attr.comp_mask == IBV_QP_INIT_ATTR_PD;
                if !only_pd || streams || attr.recv_cq.is_null() {
                    return Err(libc::EINVAL);
                }
                st.expect(attr.srq, Kind::Srq)?;
                st.expect(attr.recv_cq, Kind::Cq)?;
            }
            MLX5DV_DCTYPE_DCI => {
                st.expect(attr.send_cq, Kind::Cq)?;
                let caps = config().dci_streams;
                if streams
                    && (s.log_num_concurent > caps.max_log_num_concurent
                        || s.log_num_errored > caps.max_log_num_errored)
                {
                    return Err(libc::EINVAL);
                }
            }
            _ => return Err(libc::EINVAL),
        }
        Ok(st.next_id())
    });
    let id = match checked {
        Ok(id) => id,
        Err(errno) => return or_null(Err(errno)),
    };
    let qp_base = ibv_qp {
        context: ctx,
        pd: attr.pd,
        send_cq: attr.send_cq,
        recv_cq: attr.recv_cq,
        srq: attr.srq,
        handle: id,
        // A DCT gets its number at RTR; until then libmlx5 leaves the creation's value.
        qp_num: if dct { 0 } else { 0x200 + id },
        state: IBV_QPS_RESET,
        qp_type: IBV_QPT_DRIVER,
        ..Default::default()
    };
    let send_ops = attr.comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS != 0;
    // SAFETY: an all-zero ibv_qp_ex is valid: NULL pointers and members.
    let zeroed_ex: ibv_qp_ex = unsafe { std::mem::zeroed() };
    let mut qp = Box::new(DcQp {
        qp_ex: ibv_qp_ex { qp_base, ..zeroed_ex },
        // SAFETY: as above, for mlx5dv_qp_ex.
        dv: unsafe { std::mem::zeroed() },
        dc_type: dv.dc_init_attr.dc_type,
        send_ops,
        log_streams: (!dct && streams).then_some(s.log_num_concurent),
        key,
        access: 0,
        sig_all: attr.sq_sig_all != 0,
        batch: Vec::new(),
    });
    if !dct && send_ops {
        let ops = attr.send_ops_flags;
        let q = &mut qp.qp_ex;
        q.wr_start = Some(wr_start);
        q.wr_complete = Some(wr_complete);
        q.wr_abort = Some(wr_abort);
        q.wr_set_sge = Some(wr_set_sge);
        q.wr_send = (ops & u64::from(IBV_QP_EX_WITH_SEND) != 0).then_some(wr_send);
        q.wr_rdma_write =
            (ops & u64::from(IBV_QP_EX_WITH_RDMA_WRITE) != 0).then_some(wr_rdma_write);
        let read = ops & u64::from(IBV_QP_EX_WITH_RDMA_READ) != 0 && config().dci_rdma_read;
        q.wr_rdma_read = read.then_some(wr_rdma_read);
        qp.dv.wr_set_dc_addr = Some(wr_set_dc_addr);
        qp.dv.wr_set_dc_addr_stream = streams.then_some(wr_set_dc_addr_stream);
    }
    let raw: *mut ibv_qp = &mut qp.qp_ex.qp_base;
    DC.with_borrow_mut(|qps| qps.insert(raw as usize, qp));
    raw
}

/// `mlx5dv_qp_ex_from_ibv_qp_ex`: `container_of`, as libmlx5 does (no check, like the real
/// one; the record lets tests prove it is never reached for a non-mlx5 QP).
extern "C" fn mlx5dv_qp_ex_from_ibv_qp_ex(qp: *mut ibv_qp_ex) -> *mut mlx5dv_qp_ex {
    record(Mlx5Call::QpExFromIbvQpEx);
    qp.wrapping_byte_add(offset_of!(DcQp, dv) - offset_of!(DcQp, qp_ex)).cast()
}

/// `ibv_qp_to_qp_ex`: a DC QP's `ibv_qp_ex` when it was created with send ops, else what
/// the base mock answers.
unsafe extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    let found = DC.with_borrow(|qps| {
        qps.get(&(qp as usize)).map(|q| q.send_ops.then_some(qp.cast::<ibv_qp_ex>()))
    });
    match found {
        Some(Some(qp_ex)) => qp_ex,
        Some(None) => std::ptr::null_mut(),
        None => match super::fns(Optional::ALL).ibv_qp_to_qp_ex {
            // SAFETY: not a DC QP: forwarded to the base mock under the caller's guarantees.
            Some(base) => unsafe { base(qp) },
            None => std::ptr::null_mut(),
        },
    }
}

/// The attributes each DC transition requires, and those it also accepts: mlx5_ib's
/// `mlx5_ib_modify_dct` (RESET→INIT→RTR with exact masks, nothing else) and
/// `modify_dci_qp_is_ok` (DCI RTR also takes `PKEY_INDEX`, and `AV` in newer kernels; RTS
/// also takes `MIN_RNR_TIMER`; RESET and ERROR from any state, RESET only when
/// [`DeviceConfig::dci_reset`]).
fn dc_transition(
    dc_type: mlx5dv_dc_type,
    current: ibv_qp_state,
    target: ibv_qp_state,
) -> Option<(u32, u32)> {
    let required = match (dc_type, current, target) {
        (MLX5DV_DCTYPE_DCI, IBV_QPS_RESET, IBV_QPS_RESET) | (MLX5DV_DCTYPE_DCI, _, IBV_QPS_ERR) => {
            IBV_QP_STATE
        }
        (MLX5DV_DCTYPE_DCI, _, IBV_QPS_RESET) if config().dci_reset => IBV_QP_STATE,
        (MLX5DV_DCTYPE_DCT, IBV_QPS_RESET, IBV_QPS_INIT) => {
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS
        }
        (MLX5DV_DCTYPE_DCT, IBV_QPS_INIT, IBV_QPS_RTR) => {
            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_MIN_RNR_TIMER
        }
        (MLX5DV_DCTYPE_DCI, IBV_QPS_RESET, IBV_QPS_INIT) => {
            IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT
        }
        (MLX5DV_DCTYPE_DCI, IBV_QPS_INIT, IBV_QPS_RTR) => {
            return Some((IBV_QP_STATE | IBV_QP_PATH_MTU, IBV_QP_PKEY_INDEX | IBV_QP_AV));
        }
        (MLX5DV_DCTYPE_DCI, IBV_QPS_RTR, IBV_QPS_RTS) => {
            let required = IBV_QP_STATE
                | IBV_QP_TIMEOUT
                | IBV_QP_RETRY_CNT
                | IBV_QP_RNR_RETRY
                | IBV_QP_SQ_PSN
                | IBV_QP_MAX_QP_RD_ATOMIC;
            return Some((required, IBV_QP_MIN_RNR_TIMER));
        }
        _ => return None,
    };
    Some((required, 0))
}

/// `ibv_modify_qp`: DC QPs as [`dc_transition`] allows (the DCT number is assigned at RTR);
/// others go to the base mock.
///
/// # Safety
///
/// `attr` must be valid for reads.
unsafe extern "C" fn ibv_modify_qp(qp: *mut ibv_qp, attr: *mut ibv_qp_attr, mask: c_int) -> c_int {
    if !is_live(qp) {
        // SAFETY: forwarded under the caller's guarantees.
        return unsafe { qp::ibv_modify_qp(qp, attr, mask) };
    }
    // SAFETY: the caller passes a valid attribute struct.
    let attr = unsafe { &*attr };
    let result = serve(|s| {
        s.begin(Call::ModifyQp { mask, attr: QpAttr::from_raw(attr) }, Verb::ModifyQp)?;
        let id = s.next_id();
        DC.with_borrow_mut(|qps| {
            let dc = qps.get_mut(&(qp as usize)).expect("checked above");
            let base = &mut dc.qp_ex.qp_base;
            let mask = mask as u32;
            let target = if mask & IBV_QP_STATE != 0 { attr.qp_state } else { base.state };
            let (required, optional) =
                dc_transition(dc.dc_type, base.state, target).ok_or(libc::EINVAL)?;
            if mask & required != required || mask & !(required | optional) != 0 {
                return Err(libc::EINVAL);
            }
            if mask & IBV_QP_AV != 0 && needs_grh(&attr.ah_attr) {
                return Err(libc::EINVAL);
            }
            if dc.dc_type == MLX5DV_DCTYPE_DCI
                && mask & IBV_QP_MAX_QP_RD_ATOMIC != 0
                && u64::from(attr.max_rd_atomic) > dci_rd_atom_limit()
            {
                return Err(libc::EINVAL);
            }
            if dc.dc_type == MLX5DV_DCTYPE_DCT && target == IBV_QPS_RTR {
                base.qp_num = 0x300 + id;
            }
            if dc.dc_type == MLX5DV_DCTYPE_DCT && target == IBV_QPS_INIT {
                dc.access = attr.qp_access_flags;
            }
            if target == IBV_QPS_RESET {
                dc.batch.clear();
            }
            base.state = target;
            Ok(())
        })
    });
    status(result)
}

/// Whether `ah_attr` lacks the GRH the port needs: on Ethernet (RoCE) every AV has one; on
/// InfiniBand none is needed.
fn needs_grh(ah_attr: &ibv_ah_attr) -> bool {
    config().link_layer == IBV_LINK_LAYER_ETHERNET && ah_attr.is_global == 0
}

/// The most outstanding RDMA READs and atomics a DCI may have: the configured DC limit, else
/// the device's `max_qp_init_rd_atom`.
fn dci_rd_atom_limit() -> u64 {
    match config().dc_rd_atom {
        Some((_, init)) => init,
        None => super::device_attr().max_qp_init_rd_atom as u64,
    }
}

/// What the device does to a DCI when one of its work requests fails: it moves the QP to
/// ERROR (its later WRs flush), whatever state its owner believes it in.
///
/// # Panics
///
/// When `qp` is not a live DC QP of this thread's mock.
pub fn move_to_error(qp: *mut ibv_qp) {
    DC.with_borrow_mut(|qps| {
        let dc = qps.get_mut(&(qp as usize)).expect("a live DC QP of this mock");
        dc.qp_ex.qp_base.state = IBV_QPS_ERR;
    });
}

/// The state of the live DC QP `qp`, as the device holds it.
///
/// # Panics
///
/// When `qp` is not a live DC QP of this thread's mock.
pub fn state(qp: *mut ibv_qp) -> ibv_qp_state {
    DC.with_borrow(|qps| {
        qps.get(&(qp as usize)).expect("a live DC QP of this mock").qp_ex.qp_base.state
    })
}

/// `ibv_destroy_qp`: DC QPs here, others in the base mock.
extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    if !is_live(qp) {
        return qp::ibv_destroy_qp(qp);
    }
    let result = serve(|s| s.begin(Call::DestroyQp, Verb::DestroyQp));
    if let Err(errno) = result {
        return errno;
    }
    DC.with_borrow_mut(|qps| qps.remove(&(qp as usize)));
    0
}

/// `ibv_create_ah`: the base mock's AH, but the GRH rule is the [`DeviceConfig`]'s link
/// layer's ([`needs_grh`]): on InfiniBand an AH needs none (libmlx5 makes IB AHs without one).
///
/// # Safety
///
/// `attr` must be valid for reads.
unsafe extern "C" fn ibv_create_ah(pd: *mut ibv_pd, attr: *mut ibv_ah_attr) -> *mut ibv_ah {
    // SAFETY: the caller passes a valid struct.
    let ah_attr = unsafe { *attr };
    let as_qp = ibv_qp_attr { ah_attr, ..Default::default() };
    or_null(serve(|s| {
        s.begin(Call::CreateAh { attr: QpAttr::from_raw(&as_qp) }, Verb::CreateAh)?;
        s.expect(pd, Kind::Pd)?;
        if needs_grh(&ah_attr) {
            return Err(libc::EINVAL);
        }
        Ok(ah::adopt(s, pd))
    }))
}

// The DCI's builder members. Each reads the fields the caller set on the `ibv_qp_ex`.

/// The `wr_id` and `wr_flags` the caller set before the operation builder.
///
/// # Safety
///
/// `qp` must be a live mock DCI.
unsafe fn wr_fields(qp: *mut ibv_qp_ex) -> (u64, u32) {
    // SAFETY: the caller guarantees a live DCI; plain field reads.
    unsafe { ((*qp).wr_id, (*qp).wr_flags) }
}

unsafe extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    record(Mlx5Call::WrStart);
    exec::batch(qp, |batch| batch.clear());
}

unsafe extern "C" fn wr_send(qp: *mut ibv_qp_ex) {
    // SAFETY: called by the builders on a live mock DCI.
    let (wr_id, wr_flags) = unsafe { wr_fields(qp) };
    record(Mlx5Call::WrSend { wr_id, wr_flags });
    exec::begin_wr(qp, wr_id, wr_flags, exec::DcOp::Send);
}

unsafe extern "C" fn wr_rdma_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: called by the builders on a live mock DCI.
    let (wr_id, wr_flags) = unsafe { wr_fields(qp) };
    record(Mlx5Call::WrRdmaWrite { wr_id, wr_flags, rkey, remote_addr });
    exec::begin_wr(qp, wr_id, wr_flags, exec::DcOp::Write { rkey, remote_addr });
}

unsafe extern "C" fn wr_rdma_read(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: called by the builders on a live mock DCI.
    let (wr_id, wr_flags) = unsafe { wr_fields(qp) };
    record(Mlx5Call::WrRdmaRead { wr_id, wr_flags, rkey, remote_addr });
    exec::begin_wr(qp, wr_id, wr_flags, exec::DcOp::Read { rkey, remote_addr });
}

unsafe extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    record(Mlx5Call::WrSetSge { lkey, addr, length });
    exec::last_wr(qp, |w| w.sge = Some(ibv_sge { addr, length, lkey }));
}

unsafe extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    let result =
        serve(|s| s.begin(Call::Mlx5(Mlx5Call::WrComplete), Verb::Mlx5(Mlx5Verb::WrComplete)));
    match result {
        Ok(()) => exec::execute(qp),
        Err(_) => exec::batch(qp, |batch| batch.clear()),
    }
    status(result)
}

unsafe extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    record(Mlx5Call::WrAbort);
    exec::batch(qp, |batch| batch.clear());
}

unsafe extern "C" fn wr_set_dc_addr(
    mqp: *mut mlx5dv_qp_ex,
    ah: *mut ibv_ah,
    remote_dctn: u32,
    remote_dc_key: u64,
) {
    record(Mlx5Call::WrSetDcAddr { ah: ah as usize, remote_dctn, remote_dc_key });
    exec::last_wr(exec::qp_of(mqp), |w| w.dest = Some((remote_dctn, remote_dc_key)));
}

unsafe extern "C" fn wr_set_dc_addr_stream(
    mqp: *mut mlx5dv_qp_ex,
    ah: *mut ibv_ah,
    remote_dctn: u32,
    remote_dc_key: u64,
    stream_id: u16,
) {
    record(Mlx5Call::WrSetDcAddrStream { ah: ah as usize, remote_dctn, remote_dc_key, stream_id });
    exec::last_wr(exec::qp_of(mqp), |w| w.dest = Some((remote_dctn, remote_dc_key)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContextConfig, Mock};

    /// A context, a PD and a CQ of `mock`, through the DC library.
    fn objects(mock: &Mock) -> (*mut ibv_context, *mut ibv_pd, *mut ibv_cq) {
        let fns = &ibverbs_library().fns;
        let ctx = mock.context(ContextConfig::default()).as_ptr();
        // SAFETY: a live mock context.
        let pd = unsafe { (fns.ibv_alloc_pd)(ctx) };
        // SAFETY: as above.
        let cq =
            unsafe { (fns.ibv_create_cq)(ctx, 8, std::ptr::null_mut(), std::ptr::null_mut(), 0) };
        (ctx, pd, cq)
    }

    fn create(
        ctx: *mut ibv_context,
        mut attr: ibv_qp_init_attr_ex,
        dc_type: mlx5dv_dc_type,
    ) -> (*mut ibv_qp, c_int) {
        let mut dv = mlx5dv_qp_init_attr {
            comp_mask: u64::from(MLX5DV_QP_INIT_ATTR_MASK_DC),
            ..Default::default()
        };
        dv.dc_init_attr.dc_type = dc_type;
        // SAFETY: valid attribute structs.
        let qp = unsafe { (fns(true).mlx5dv_create_qp)(ctx, &mut attr, &mut dv) };
        // SAFETY: this thread's errno.
        (qp, unsafe { *libc::__errno_location() })
    }

    #[test]
    fn a_dct_needs_an_srq_and_a_recv_cq_and_refuses_send_ops() {
        let mock = Mock::new();
        let (ctx, pd, cq) = objects(&mock);
        let base = ibv_qp_init_attr_ex {
            qp_type: IBV_QPT_DRIVER,
            comp_mask: IBV_QP_INIT_ATTR_PD,
            pd,
            recv_cq: cq,
            ..Default::default()
        };
        assert_eq!(create(ctx, base, MLX5DV_DCTYPE_DCT), (std::ptr::null_mut(), libc::EINVAL));
        let mut init = ibv_srq_init_attr::default();
        init.attr.max_wr = 4;
        init.attr.max_sge = 1;
        // SAFETY: a live PD and a valid struct.
        let srq = unsafe { (ibverbs_library().fns.ibv_create_srq)(pd, &mut init) };
        let with_srq = ibv_qp_init_attr_ex { srq, ..base };
        let send_ops = ibv_qp_init_attr_ex {
            comp_mask: IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
            ..with_srq
        };
        assert_eq!(create(ctx, send_ops, MLX5DV_DCTYPE_DCT).0, std::ptr::null_mut());
        let rc = ibv_qp_init_attr_ex { qp_type: IBV_QPT_RC, ..with_srq };
        assert_eq!(create(ctx, rc, MLX5DV_DCTYPE_DCT).0, std::ptr::null_mut());
        let (dct, _) = create(ctx, with_srq, MLX5DV_DCTYPE_DCT);
        assert!(is_live(dct));
        // A DCT has no RTS, and no INIT without its access flags.
        let fns = &ibverbs_library().fns;
        let mut attr = ibv_qp_attr { qp_state: IBV_QPS_INIT, ..Default::default() };
        let rc_init = (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT) as c_int;
        // SAFETY: a live DC QP and a valid struct.
        assert_eq!(unsafe { (fns.ibv_modify_qp)(dct, &mut attr, rc_init) }, libc::EINVAL);
        attr.qp_state = IBV_QPS_RTS;
        let state_only = IBV_QP_STATE as c_int;
        // SAFETY: as above.
        let ret = unsafe { (fns.ibv_modify_qp)(dct, &mut attr, state_only) };
        assert_eq!(ret, libc::EINVAL);
        // SAFETY: a live DC QP, destroyed once.
        assert_eq!(unsafe { (fns.ibv_destroy_qp)(dct) }, 0);
        assert!(!is_live(dct));
    }
}
