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

/// The DC capabilities `mlx5dv_query_device(3)` reports. There is no "DC supported" bit:
/// an mlx5 device with a DC-capable firmware simply creates DC QPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcCaps {
    /// Operations DC QPs may run on on-demand-paging memory (`dc_odp_caps`,
    /// `MLX5DV_CONTEXT_MASK_DC_ODP_CAPS`); empty when not reported.
    pub dc_odp: OdpTransportCaps,
    /// DCI streams (`dci_streams_caps`, `MLX5DV_CONTEXT_MASK_DCI_STREAMS`, rdma-core v37+);
    /// `None` when the device or library does not report them.
    pub dci_streams: Option<DciStreamsCaps>,
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
    /// `mlx5dv_is_supported` says no; [`Error::Verb`] from `mlx5dv_query_device`.
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
        let mut attr = sys::mlx5dv_context {
            comp_mask: u64::from(
                sys::MLX5DV_CONTEXT_MASK_DC_ODP_CAPS | sys::MLX5DV_CONTEXT_MASK_DCI_STREAMS,
            ),
            ..Default::default()
        };
        // SAFETY: an mlx5 context and a writable struct of this build's size; only bits this
        // build knows are asked for, so an older library writes no further than it.
        let ret = unsafe { (lib.fns.mlx5dv_query_device)(ctx.as_raw(), &mut attr) };
        check_errno(ret, "mlx5dv_query_device")?;
        Ok(Mlx5Context { ctx, lib, caps: DcCaps::from_raw(&attr) })
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
    fn from_raw(attr: &sys::mlx5dv_context) -> DcCaps {
        let has = |bit: u32| attr.comp_mask & u64::from(bit) != 0;
        DcCaps {
            dc_odp: if has(sys::MLX5DV_CONTEXT_MASK_DC_ODP_CAPS) {
                OdpTransportCaps::from_bits_retain(attr.dc_odp_caps)
            } else {
                OdpTransportCaps::empty()
            },
            dci_streams: has(sys::MLX5DV_CONTEXT_MASK_DCI_STREAMS).then_some(DciStreamsCaps {
                max_log_concurrent: attr.dci_streams_caps.max_log_num_concurent,
                max_log_errored: attr.dci_streams_caps.max_log_num_errored,
            }),
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

/// [`Error::Unsupported`] for DC on `device`. Its text is `&'static`: each distinct message
/// is kept once for the life of the process (at most one per device and reason).
pub(super) fn unsupported(device: &str, why: &str) -> Error {
    let text = format!(
        "mlx5 DC (Dynamically Connected transport) on device {device} ({why}; DC needs an \
         NVIDIA ConnectX device: mlx5_ib with libmlx5 of rdma-core v24+ or MLNX_OFED/DOCA-OFED)"
    );
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
