//! The user's guide: how the pieces fit, which posting tier to use, how to connect peers, what
//! the safety claims rest on, and how to run on real hardware. Each chapter is a module with
//! no items; read them in order, or jump to the one you need.
//!
//! | chapter | what it covers |
//! |---|---|
//! | [`concepts`] | device → protection domain → completion queue → queue pair → memory region; the safe buffer tier and the raw `unsafe` tier, and when to use which |
//! | [`connecting`] | what two peers exchange, by hand over TCP or through rdma_cm; UD addressing |
//! | [`safety`] | the safety model, and how it is checked: the strict mock, the property suite, Miri, memcheck |
//! | [`verbs_path`] | extended and legacy verbs, and the provider bugs worked around |
//! | [`events`] | completion channels, asynchronous device events, tokio |
//! | [`dc`] | the Dynamically Connected transport of ConnectX devices (feature `mlx5`) |
//! | [`srd`] | the Scalable Reliable Datagram transport of AWS EFA devices (feature `efa`) |
//! | [`xrc`] | the eXtended Reliable Connected transport: one receive queue per process shared by many senders |
//! | [`deployment`] | running on a NIC and in containers: device nodes, memlock, capabilities, fork, sharing objects between processes |
//! | [`doctor`] | troubleshooting with the doctor |
//! | [`platforms`] | rdma-core versions, the glibc 2.28 release build, MSRV |
//!
//! The code in these chapters is compiled as doctests; examples that need an RDMA device are
//! compiled but not run.

#[doc = include_str!("concepts.md")]
pub mod concepts {}

#[doc = include_str!("connecting.md")]
#[cfg_attr(feature = "rdmacm", doc = include_str!("connecting_cm.md"))]
#[cfg_attr(all(feature = "rdmacm", feature = "tokio"), doc = include_str!("connecting_cm_tokio.md"))]
pub mod connecting {}

#[doc = include_str!("safety.md")]
pub mod safety {}

#[doc = include_str!("verbs_path.md")]
pub mod verbs_path {}

#[doc = include_str!("events.md")]
#[cfg_attr(feature = "tokio", doc = include_str!("events_tokio.md"))]
pub mod events {}

#[cfg_attr(feature = "mlx5", doc = include_str!("dc.md"))]
#[cfg_attr(
    not(feature = "mlx5"),
    doc = "The Dynamically Connected transport: this chapter documents the `mlx5` feature. \
           Build the documentation with `--features mlx5` (docs.rs does) to read it."
)]
pub mod dc {}

#[cfg_attr(feature = "efa", doc = include_str!("srd.md"))]
#[cfg_attr(
    not(feature = "efa"),
    doc = "The Scalable Reliable Datagram transport: this chapter documents the `efa` \
           feature. Build the documentation with `--features efa` (docs.rs does) to read it."
)]
pub mod srd {}

#[doc = include_str!("xrc.md")]
pub mod xrc {}

#[doc = include_str!("deployment.md")]
pub mod deployment {}

#[doc = include_str!("doctor.md")]
#[cfg_attr(feature = "diag", doc = include_str!("doctor_api.md"))]
pub mod doctor {}

#[doc = include_str!("platforms.md")]
pub mod platforms {}
