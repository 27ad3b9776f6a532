//! The gate: an mlx5 device's libmlx5 and DC capabilities.

use std::sync::Mutex;

use rdma_verbs_sys as sys;

use crate::context::Context;
use crate::error::{check_errno, Error, Result};
use crate::odp::OdpTransportCaps;

/// A device context that `mlx5dv_is_supported` accepted, with its libmlx5 and DC
/// capabilities. Every DC object is created through one, so none exists on another device.
#[derive(Clone, Copy)]
pub struct Mlx5Context<'ctx> {
    ctx: &'ctx Context,
    lib: &'static sys::Mlx5,
    caps: DcCaps,
}

/// The DC capabilities `mlx5dv_query_device(3)` and `ibv_query_device(3)` report. There is
/// no "DC supported" bit: an mlx5 device with a DC-capable firmware simply creates DC QPs
/// (one without answers `EOPNOTSUPP`, which [`Mlx5Context::create_dct`] and
/// [`Mlx5Context::create_dci`] report as [`Error::Unsupported`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcCaps {
    /// Operations DC QPs may run on on-demand-paging memory (`dc_odp_caps`,
    /// `MLX5DV_CONTEXT_MASK_DC_ODP_CAPS`); empty when not reported.
    pub dc_odp: OdpTransportCaps,
    /// DCI streams (`dci_streams_caps`, `MLX5DV_CONTEXT_MASK_DCI_STREAMS`, rdma-core v37+);
    /// `None` when the device or library does not report them, or reports at most 2⁰
    /// concurrent streams: libmlx5 sets the bit whenever it is asked, also on a device
    /// without streams (`max_log_num_concurent` 0), where the kernel refuses a DCI with
    /// streams (`EINVAL`).
    pub dci_streams: Option<DciStreamsCaps>,
    /// The most RDMA READs and atomics a DCI may have outstanding: `max_dc_init_rd_atom`
    /// (`MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM`, libmlx5 of rdma-core v47+), else the device's
    /// `max_qp_init_rd_atom` (`ibv_query_device(3)`). [`Mlx5Context::connect_dci`] sets the
    /// smaller of it and [`DciInitAttr::max_rd_atomic`](super::DciInitAttr::max_rd_atomic).
    pub dci_max_rd_atomic: u32,
    /// Whether `dci_max_rd_atomic` is libmlx5's DC limit (`true`) or the fallback to the
    /// device's RC one (`false`: an older libmlx5).
    pub dc_rd_atomic_reported: bool,
    /// The DC protocol version of the device, from its PCI device ID (see [`DcVersion`]).
    pub dc_version: DcVersion,
}

/// The DC protocol a device speaks. Connect-IB, ConnectX-4 and ConnectX-4 Lx speak DC v1,
/// ConnectX-5 and later (and BlueField) v2; the two do not interoperate (UCX treats such a
/// pair as unreachable): a DCI of one never gets an answer from a DCT of the other, only a
/// retry timeout. The version travels in the [`DcEndpoint`](super::DcEndpoint) token, and
/// [`DcPeer::new`](super::DcPeer::new) refuses a peer of the other version.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DcVersion {
    /// DC v1: Connect-IB, ConnectX-4, ConnectX-4 Lx.
    V1,
    /// DC v2: ConnectX-5 and later, BlueField.
    V2,
}

impl DcVersion {
    /// The version of the mlx5 device with PCI device ID `vendor_part_id`
    /// (`ibv_query_device(3)`'s `vendor_part_id`): 4113 and 4114 (Connect-IB and its VF),
    /// 4115 and 4116 (ConnectX-4 and its VF), 4117 and 4118 (ConnectX-4 Lx and its VF) speak
    /// v1; every later mlx5 part (4119 ConnectX-5 on, BlueField) speaks v2.
    pub fn from_vendor_part_id(vendor_part_id: u32) -> DcVersion {
        match vendor_part_id {
            4113..=4118 => DcVersion::V1,
            _ => DcVersion::V2,
        }
    }

    /// 1 or 2.
    pub fn number(self) -> u8 {
        match self {
            DcVersion::V1 => 1,
            DcVersion::V2 => 2,
        }
    }

    /// The version numbered `n` (1 or 2), if any.
    pub fn from_number(n: u8) -> Option<DcVersion> {
        match n {
            1 => Some(DcVersion::V1),
            2 => Some(DcVersion::V2),
            _ => None,
        }
    }

    /// The device families that speak it.
    pub fn devices(self) -> &'static str {
        match self {
            DcVersion::V1 => "Connect-IB, ConnectX-4, ConnectX-4 Lx",
            DcVersion::V2 => "ConnectX-5 or later, BlueField",
        }
    }
}

impl std::fmt::Display for DcVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DC v{} ({})", self.number(), self.devices())
    }
}

/// The largest DCI stream configuration (`struct mlx5dv_dci_streams_caps`), as base-2
/// logarithms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DciStreamsCaps {
    /// log₂ of the most concurrent streams a DCI may have.
    pub max_log_concurrent: u8,
    /// log₂ of the most streams that may be in error at once.
    pub max_log_errored: u8,
}

impl<'ctx> Mlx5Context<'ctx> {
    /// The mlx5 view of `ctx`: its provider's libmlx5, checked with `mlx5dv_is_supported(3)`,
    /// and its DC capabilities (`mlx5dv_query_device(3)`).
    ///
    /// libmlx5 is not loaded by this crate: the provider libibverbs loaded for the device is
    /// reopened (`RTLD_NOLOAD`), so there is never a second copy (see `rdma_verbs_sys::mlx5`).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] naming the device when it is not driven by libmlx5 (Soft-RoCE,
    /// siw, another vendor), when its libmlx5 predates rdma-core v24, or when
    /// `mlx5dv_is_supported` says no; [`Error::Verb`] from `mlx5dv_query_device` or
    /// `ibv_query_device`.
    #[doc(alias = "mlx5dv_is_supported")]
    pub fn open(ctx: &'ctx Context) -> Result<Self> {
        // SAFETY: a live context of the libibverbs this process loaded.
        let lib = unsafe { sys::mlx5_for(ctx.as_raw()) }
            .map_err(|e| unsupported(ctx.name(), &format!("{e} (not libmlx5)")))?;
        // SAFETY: the table is the libmlx5 of this context's provider.
        unsafe { Self::with_library(ctx, lib) }
    }

    /// As [`Mlx5Context::open`] with an explicit libmlx5 (from `rdma_verbs_sys::mlx5::loaded`,
    /// or a mock provider's for tests), whose `mlx5dv_is_supported` decides.
    ///
    /// # Errors
    ///
    /// As [`Mlx5Context::open`], from `mlx5dv_is_supported` on.
    ///
    /// # Safety
    ///
    /// `lib` must be the libmlx5 that the libibverbs which opened `ctx` loaded (the copy whose
    /// `mlx5dv_is_supported` recognises its own devices), or a mock that keeps libmlx5's
    /// contracts over the mock's objects.
    pub unsafe fn with_library(ctx: &'ctx Context, lib: &'static sys::Mlx5) -> Result<Self> {
        // SAFETY: a live context; its `device` field is the device it was opened on.
        let device = unsafe { (*ctx.as_raw()).device };
        // SAFETY: a live device of the libibverbs `lib` belongs to.
        if !unsafe { (lib.fns.mlx5dv_is_supported)(device) } {
            let why = format!("mlx5dv_is_supported says no (libmlx5 {})", lib.path().display());
            return Err(unsupported(ctx.name(), &why));
        }
        let mut attr = sys::mlx5::DvContext::asking(u64::from(
            sys::MLX5DV_CONTEXT_MASK_DC_ODP_CAPS
                | sys::MLX5DV_CONTEXT_MASK_DCI_STREAMS
                | sys::mlx5::MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM,
        ));
        // SAFETY: an mlx5 context and a writable buffer with room for every field up to
        // `max_dc_init_rd_atom` (`DvContext`); a library writes only the fields of the bits
        // it knows, and clears the others.
        let ret = unsafe { (lib.fns.mlx5dv_query_device)(ctx.as_raw(), attr.as_mut_ptr()) };
        check_errno(ret, "mlx5dv_query_device")?;
        let mut device = sys::ibv_device_attr::default();
        // SAFETY: a live context of its library and a writable struct of this build's layout.
        // (The raw struct: `DeviceAttr` has no accessor for `max_qp_init_rd_atom`.)
        let ret = unsafe { (ctx.library().fns.ibv_query_device)(ctx.as_raw(), &mut device) };
        check_errno(ret, "ibv_query_device")?;
        Ok(Mlx5Context { ctx, lib, caps: DcCaps::from_raw(&attr, &device) })
    }

    /// The device context.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The DC capabilities.
    pub fn caps(&self) -> DcCaps {
        self.caps
    }

    /// The libmlx5 functions in use.
    pub fn library(&self) -> &'static sys::Mlx5 {
        self.lib
    }
}

impl DcCaps {
    fn from_raw(dv: &sys::mlx5::DvContext, device: &sys::ibv_device_attr) -> DcCaps {
        let attr = dv.context();
        let has = |bit: u32| attr.comp_mask & u64::from(bit) != 0;
        let streams = attr.dci_streams_caps;
        let dc_rd_atom = dv.max_dc_rd_atom();
        DcCaps {
            dc_odp: if has(sys::MLX5DV_CONTEXT_MASK_DC_ODP_CAPS) {
                OdpTransportCaps::from_bits_retain(attr.dc_odp_caps)
            } else {
                OdpTransportCaps::empty()
            },
            dci_streams: (has(sys::MLX5DV_CONTEXT_MASK_DCI_STREAMS)
                && streams.max_log_num_concurent > 0)
                .then_some(DciStreamsCaps {
                    max_log_concurrent: streams.max_log_num_concurent,
                    max_log_errored: streams.max_log_num_errored,
                }),
            dci_max_rd_atomic: match dc_rd_atom {
                Some(atom) => u32::try_from(atom.init).unwrap_or(u32::MAX),
                None => device.max_qp_init_rd_atom.try_into().unwrap_or(0),
            },
            dc_rd_atomic_reported: dc_rd_atom.is_some(),
            dc_version: DcVersion::from_vendor_part_id(device.vendor_part_id),
        }
    }
}

impl std::fmt::Debug for Mlx5Context<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mlx5Context")
            .field("device", &self.ctx.name())
            .field("libmlx5", &self.lib.path())
            .field("caps", &self.caps)
            .finish()
    }
}

/// [`Error::Unsupported`] for DC on `device`, saying what DC needs.
pub(super) fn unsupported(device: &str, why: &str) -> Error {
    unsupported_text(format!(
        "mlx5 DC (Dynamically Connected transport) on device {device} ({why}; DC needs an \
         NVIDIA Connect-IB, ConnectX-4 or later device with DC enabled in its firmware, driven \
         by mlx5_ib with libmlx5 of rdma-core v24+ or MLNX_OFED/DOCA-OFED)"
    ))
}

/// [`Error::Unsupported`] with `text`, made `&'static`: each distinct message is kept once
/// for the life of the process (at most one per device and reason).
pub(super) fn unsupported_text(text: String) -> Error {
    static INTERNED: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut interned = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
    let what = match interned.iter().find(|s| **s == text) {
        Some(s) => *s,
        None => {
            let s: &'static str = Box::leak(text.into_boxed_str());
            interned.push(s);
            s
        }
    };
    Error::Unsupported { what }
}
