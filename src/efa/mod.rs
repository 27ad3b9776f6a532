//! AWS Elastic Fabric Adapter direct verbs (feature `efa`): the Scalable Reliable Datagram
//! (SRD) transport.
//!
//! SRD is EFA's own transport: like UD, one QP reaches any number of peers without a
//! connection, each send naming its destination (the address handle of the peer's port, its
//! QP number and Q_Key: [`UdDestination`](crate::UdDestination)); unlike UD, delivery is
//! **reliable but unordered**. The device retransmits what is lost and spreads a QP's
//! packets over many network paths, so messages arrive, and complete, in any order: two
//! SENDs to one peer may be received in the opposite order, and a program must never rely
//! on the order of messages or of their completions (number them when order matters).
//! A message carries at most one MTU (`efadv_create_qp_ex(3)`); no GRH precedes it in the
//! receive buffer.
//!
//! ```text
//!  create_srd_qp    into_init                into_rtr       into_rts(sq_psn)
//! ─────────────▶ Reset ─────────▶ Init ───────────▶ Rtr ──────────────▶ Rts   post ✓
//!                  (port, P_Key index, Q_Key)    (no peer)
//! ```
//!
//! Everything starts at [`EfaContext::open`], the gate: it loads libefa (`libefa.so.1`, once
//! per process), checks that libefa is the provider of the device, and asks
//! `efadv_query_device(3)`. On any other device (Soft-RoCE, siw, mlx5) it returns
//! [`Error::Unsupported`] saying why, and no SRD QP can be made;
//! without libefa installed, [`Error::Load`] naming it.
//!
//! ```no_run
//! # use rdma_verbs::*;
//! # use rdma_verbs::efa::*;
//! # fn f(ctx: &Context, peer: &UdDestination<'_>) -> Result<()> {
//! let efa = EfaContext::open(ctx)?; // Error::Unsupported on a non-EFA device
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(64)?;
//! let qp = efa
//!     .create_srd_qp(&pd, &QpInitAttr::new(&cq))?
//!     .into_init(&UdToInitAttr { qkey: 0x1111_1111, ..UdToInitAttr::default() })?
//!     .into_rtr()?
//!     .into_rts(Psn::new(0)?)?;
//! // Sends go as on UD: `post_send_buffer_to(buffer, peer, None)`, each to its destination.
//! # drop(qp); Ok(()) }
//! ```
//!
//! SRD QPs post through `ibv_post_send(3)` (the legacy verbs: EFA's SENDs), SENDs only, each
//! addressed; RDMA READ and WRITE over SRD (the device's [`EfaDeviceCaps`]) are not offered
//! yet. Not verified on EFA hardware by this crate's CI (which has none): the
//! [guide's SRD chapter](crate::guide::srd) says what is verified and how to run the hardware
//! test.
#![allow(unsafe_code)]
//! # Safety
//!
//! efadv functions cast the context (and the QP they create) to libefa's own structures once
//! `is_efa_dev()` says yes, so they are only called on contexts whose provider is the loaded
//! libefa ([`rdma_verbs_sys::efa::Efa::drives`]) or through a table the caller vouches for
//! ([`EfaContext::with_library`]). SRD QPs are [`QueuePair`]s: they own their `ibv_qp` until
//! `ibv_destroy_qp` and borrow their PD and CQs for `'res`.

mod attr;
mod srd;

pub use attr::{EfaDeviceAttr, EfaDeviceCaps};
pub use srd::Srd;

use rdma_verbs_sys as sys;

use crate::context::Context;
use crate::error::{check_errno, check_ptr, Error, InvalidInputKind, Result};
use crate::pd::ProtectionDomain;
use crate::qp::{QpInitAttr, QueuePair, Reset};

/// `efadv_query_device(3)`—The EFA attributes of `ctx`'s device: [`EfaContext::open`]'s
/// answer.
///
/// # Errors
///
/// As [`EfaContext::open`]: [`Error::Unsupported`] on a device that is not EFA,
/// [`Error::Load`] when libefa cannot be loaded.
#[doc(alias = "efadv_query_device")]
pub fn query_device(ctx: &Context) -> Result<EfaDeviceAttr> {
    EfaContext::open(ctx).map(|efa| efa.attr())
}

/// A device context whose provider is libefa, with its libefa and EFA attributes. SRD QPs
/// are created through one, so none exists on another device.
#[derive(Clone, Copy)]
pub struct EfaContext<'ctx> {
    ctx: &'ctx Context,
    lib: &'static sys::Efa,
    attr: EfaDeviceAttr,
}

impl<'ctx> EfaContext<'ctx> {
    /// The EFA view of `ctx`: libefa (loaded on first use, `sys::efa::libefa`), checked to be
    /// the provider of the device, and its attributes (`efadv_query_device(3)`).
    ///
    /// # Errors
    ///
    /// [`Error::Load`] when libefa cannot be loaded (not installed: the error says how to
    /// install it, or set `RDMA_VERBS_LIBEFA`); [`Error::Unsupported`] when the device's
    /// provider is not libefa (Soft-RoCE, siw, mlx5 and every other non-EFA device), or when
    /// `efadv_query_device` answers `EOPNOTSUPP`; [`Error::Verb`] for its other errors.
    #[doc(alias = "efadv_query_device")]
    pub fn open(ctx: &'ctx Context) -> Result<Self> {
        let lib = sys::efa::libefa()?;
        // SAFETY: a live context.
        if !unsafe { lib.drives(ctx.as_raw()) } {
            return Err(Error::Unsupported {
                what: "EFA SRD on this device (its provider is not libefa: SRD needs an AWS \
                       Elastic Fabric Adapter, driven by the efa kernel driver and rdma-core's \
                       libefa)",
            });
        }
        // SAFETY: libefa, loaded after the libibverbs that opened `ctx`, is its provider.
        unsafe { Self::with_library(ctx, lib) }
    }

    /// As [`EfaContext::open`] with an explicit libefa (a mock provider's, for tests), whose
    /// `efadv_query_device` decides whether the device is EFA.
    ///
    /// # Errors
    ///
    /// As [`EfaContext::open`], from `efadv_query_device` on.
    ///
    /// # Safety
    ///
    /// `lib` must be rdma-core's libefa loaded in this process alongside the libibverbs that
    /// opened `ctx` (whose efadv functions test the device's provider before anything else,
    /// and answer `EOPNOTSUPP` for a device of another one), or a mock that keeps libefa's
    /// contracts over the mock's objects.
    pub unsafe fn with_library(ctx: &'ctx Context, lib: &'static sys::Efa) -> Result<Self> {
        let mut raw = sys::efadv_device_attr::default();
        let inlen = std::mem::size_of::<sys::efadv_device_attr>() as u32;
        // SAFETY: a live context and a libefa of its libibverbs (the caller's), which refuses
        // another provider's device before touching anything; a writable struct of `inlen`
        // bytes, which libefa fills up to `inlen` and no further.
        let ret = unsafe { (lib.fns.efadv_query_device)(ctx.as_raw(), &mut raw, inlen) };
        if ret == libc::EOPNOTSUPP {
            return Err(Error::Unsupported {
                what: "EFA SRD on this device (efadv_query_device answered EOPNOTSUPP: not an \
                       EFA device)",
            });
        }
        check_errno(ret, "efadv_query_device")?;
        Ok(EfaContext { ctx, lib, attr: EfaDeviceAttr::from_raw(&raw) })
    }

    /// The device context.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The EFA attributes, as `efadv_query_device(3)` reported them when the gate opened.
    pub fn attr(&self) -> EfaDeviceAttr {
        self.attr
    }

    /// The libefa functions in use.
    pub fn library(&self) -> &'static sys::Efa {
        self.lib
    }

    /// `efadv_create_qp_ex(3)`—Creates an SRD queue pair (`IBV_QPT_DRIVER` with
    /// `EFADV_QP_DRIVER_TYPE_SRD`) in RESET, with `attr`'s CQs, capabilities and signalling.
    ///
    /// The capabilities are checked first as [`ProtectionDomain::create_qp`] checks them
    /// (the device's limits, room on the CQs) and against the EFA limits: `max_send_wr` and
    /// `max_recv_wr` at most [`EfaDeviceAttr::max_sq_wr`] and
    /// [`max_rq_wr`](EfaDeviceAttr::max_rq_wr), the SGEs at most [`max_sq_sge`](EfaDeviceAttr::max_sq_sge) and
    /// [`max_rq_sge`](EfaDeviceAttr::max_rq_sge), `max_inline_data` at most
    /// [`inline_buf_size`](EfaDeviceAttr::inline_buf_size). The QP posts through
    /// `ibv_post_send(3)`; see the [module docs](self) for what SRD delivers.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a PD of another context, an SRQ (EFA has none), or a
    /// capability above a limit (naming it); those of [`ProtectionDomain::create_qp`]'s
    /// checks; [`Error::Verb`] from `efadv_create_qp_ex` (`EINVAL`: a capability the provider
    /// refuses, the message names those asked; `ENOMEM`: out of resources), or
    /// [`Error::Unsupported`] when it answers `EOPNOTSUPP`.
    #[doc(alias = "efadv_create_qp_ex")]
    pub fn create_srd_qp<'res>(
        &self,
        pd: &'res ProtectionDomain<'res>,
        attr: &QpInitAttr<'res, '_>,
    ) -> Result<QueuePair<'res, Reset, Srd>> {
        if !std::ptr::eq(pd.context(), self.ctx) {
            return Err(Error::invalid(
                InvalidInputKind::OtherContext,
                format!(
                    "the protection domain belongs to {}, not to {}: create SRD QPs with a PD \
                     of the EfaContext's own device context",
                    pd.context().name(),
                    self.ctx.name()
                ),
            ));
        }
        if attr.srq.is_some() {
            return Err(Error::invalid(
                InvalidInputKind::Range,
                "EFA has no shared receive queues: create the SRD QP without an SRQ".into(),
            ));
        }
        self.attr.check_caps(&attr.cap)?;
        pd.check_init(attr, sys::IBV_QPT_DRIVER)?;
        let mut init = sys::ibv_qp_init_attr_ex {
            send_cq: attr.send_cq.as_raw(),
            recv_cq: attr.recv_cq.as_raw(),
            cap: attr.cap.to_raw(),
            qp_type: sys::IBV_QPT_DRIVER,
            sq_sig_all: attr.sq_sig_all.into(),
            comp_mask: sys::IBV_QP_INIT_ATTR_PD,
            pd: pd.as_raw(),
            ..Default::default()
        };
        let mut efa = sys::efadv_qp_init_attr {
            driver_qp_type: sys::EFADV_QP_DRIVER_TYPE_SRD,
            ..Default::default()
        };
        let inlen = std::mem::size_of::<sys::efadv_qp_init_attr>() as u32;
        // SAFETY: a context the gate accepted for `self.lib`; valid attribute structs (the EFA
        // one zero past `driver_qp_type`, as libefa requires of what it does not know) whose
        // PD and CQs are live objects of it, borrowed by the caller for `'res`. libefa updates
        // `init.cap` with what it allocated.
        let raw = unsafe {
            (self.lib.fns.efadv_create_qp_ex)(self.ctx.as_raw(), &mut init, &mut efa, inlen)
        };
        let raw = match check_ptr(raw, "efadv_create_qp_ex") {
            Ok(raw) => raw,
            Err(Error::Unsupported { .. }) => {
                return Err(Error::Unsupported {
                    what: "EFA SRD queue pairs (efadv_create_qp_ex answered EOPNOTSUPP)",
                })
            }
            Err(e) => return Err(pd.explain_create_qp(e, &attr.cap)),
        };
        pd.adopt_legacy_qp(raw, &init.cap, attr)
    }
}

impl std::fmt::Debug for EfaContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EfaContext")
            .field("device", &self.ctx.name())
            .field("libefa", &self.lib.path())
            .field("attr", &self.attr)
            .finish()
    }
}
