//! mlx5 direct verbs (feature `mlx5`): the Dynamically Connected (DC) transport of NVIDIA
//! ConnectX devices.
//!
//! DC lets one initiator QP, a [`Dci`], reach any number of targets, [`Dct`]s, without a
//! connected QP per peer: each send work request carries its destination — the address
//! handle of the target's port, the target's DCT number and its DC access key. A target
//! hands that out as a [`DcEndpoint`] token, and a client goes straight to RTS from it
//! ([`Mlx5Context::connect_dci`]), without rdma_cm.
//!
//! ```text
//!  DCT (target)   create_dct   into_init      into_rtr
//!                 ─────────▶ Reset ─────▶ Init ─────▶ Rtr   dctn() ✓ (assigned at RTR)
//!  DCI (initiator) create_dci  into_init      into_rtr      into_rts
//!                 ─────────▶ Reset ─────▶ Init ─────▶ Rtr ─────▶ Rts   post ✓
//! ```
//!
//! Everything starts at [`Mlx5Context::open`], the one gate: it finds the libmlx5 that
//! libibverbs loaded for the device (see `rdma_verbs_sys::mlx5`), and asks
//! `mlx5dv_is_supported`. On any other device (Soft-RoCE, siw, another vendor) it returns
//! [`Error::Unsupported`](crate::Error::Unsupported) naming the device and what DC needs, and no DC object can be made.
//!
//! ```no_run
//! # use rdma_verbs::*;
//! # use rdma_verbs::mlx5::*;
//! # fn f(ctx: &Context, token: &str) -> std::result::Result<(), Box<dyn std::error::Error>> {
//! let mlx5 = Mlx5Context::open(ctx)?; // Error::Unsupported on a non-mlx5 device
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(64)?;
//! let peer: DcEndpoint = token.parse()?;
//! let route = DcRoute::new(1, Some(3), Mtu::MTU_1024); // hop limit 255, traffic class 0
//! let (dci, target) = mlx5.connect_dci(&pd, &DciInitAttr::new(&cq), &route, &peer)?;
//! # drop((dci, target)); Ok(()) }
//! ```
//!
//! Not verified on ConnectX hardware by this crate's CI (which has none): the
//! [guide's DC chapter](crate::guide::dc) says what is verified, and how to run the hardware
//! tests.
#![allow(unsafe_code)]
//! # Safety
//!
//! `mlx5dv_qp_ex_from_ibv_qp_ex` is a bare `container_of`: it is called only on QPs that
//! `mlx5dv_create_qp` of a context that passed `mlx5dv_is_supported` created. DC QPs own
//! their `ibv_qp` until `ibv_destroy_qp` and borrow PD, CQs and SRQ for `'res`.

mod context;
mod dci;
mod dct;
mod endpoint;
mod qp;
mod wr;

pub use context::{DcCaps, DcVersion, DciStreamsCaps, Mlx5Context};
pub use dci::{DcRoute, Dci, DciInitAttr, DciStreams, DciToRtrAttr};
pub use dct::{Dct, DctInitAttr, DctToRtrAttr};
pub use endpoint::{DcEndpoint, DcKey, DcTokenError};
pub use wr::{DcDestination, DcOpcode, DcPeer, DcWr};
