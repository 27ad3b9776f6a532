//! Safe, lifetime-checked RDMA verbs.
//!
//! `rdma-verbs` wraps rdma-core's libibverbs — device contexts, protection domains, memory
//! regions, completion queues and queue pairs (Reliable Connected, Unreliable Connected and
//! Unreliable Datagram; Dynamically Connected with feature `mlx5`) — in types the compiler
//! checks: a child cannot outlive its parent, a QP's state is part of its type, and C
//! enums are newtypes that survive values a newer library invents. libibverbs is loaded at
//! run time (`dlopen`), never linked, so one binary runs on NVIDIA MLNX_OFED / DOCA-OFED hosts
//! and on distributions' inbox rdma-core alike.
//!
//! The [`guide`] explains the concepts and the two posting tiers, connecting peers, the
//! safety model, events, DC, and running on real hardware.
//!
//! # Quick start
//!
//! ```no_run
//! use rdma_verbs::*;
//!
//! # fn main() -> Result<()> {
//! let ctx = Context::open("rxe0")?;
//! let pd = ctx.alloc_pd()?;
//! let cq = ctx.create_cq(32)?;
//! let mut mr = pd.register(4096, AccessFlags::LOCAL_WRITE)?;
//! // What a peer may RDMA WRITE: a region registered for it, on a QP that allows it.
//! let target = pd.register_remote_writable(64, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
//! let qp = pd.create_rc_qp(&QpInitAttr::new(&cq))?;
//! let qp = qp.into_init(&ToInitAttr { access: AccessFlags::REMOTE_WRITE, ..ToInitAttr::default() })?;
//!
//! // Exchange endpoints with the peer out of band (e.g. TCP), then:
//! let gid = ctx.routable_gid(1)?;
//! let psn = Psn::random();
//! let me = Endpoint { lid: ctx.query_port(1)?.lid(), qpn: qp.qp_num(), psn, gid: gid.gid };
//! let peer: Endpoint = me; // stand-in for the peer's endpoint
//! let mtu = ctx.query_port(1)?.active_mtu();
//! let qp = qp.into_rtr(&ToRtrAttr::to_endpoint(&peer, 1, Some(gid.index), mtu))?;
//! let qp = qp.into_rts(&ToRtsAttr::new(psn))?;
//!
//! mr.as_mut_slice()[..5].copy_from_slice(b"hello");
//! let (send, recv) = ([mr.sge(..5)?], [mr.sge(2048..)?]);
//! // SAFETY: `mr` and `target` outlive the QP, and their bytes are not touched until the
//! // three completions below have been polled. (Connected to itself, the QP receives its
//! // own SEND and is the target of its own WRITE.)
//! unsafe {
//!     qp.post_recv_wr(&mut RecvWr::new(1, &recv))?;
//!     let write = SendWr::rdma_write(2, &send, target.remote(..5)?);
//!     qp.post_send_wr(&mut write.flags(SendFlags::SIGNALED))?;
//!     qp.post_send_wr(&mut SendWr::send(3, &send).flags(SendFlags::SIGNALED))?;
//! }
//! let mut wcs = [WorkCompletion::EMPTY; 3];
//! for wc in cq.wait_for(3, std::time::Duration::from_secs(5), &mut wcs)?.iter() {
//!     assert!(wc.is_success(), "{wc}");
//! }
//! assert_eq!(&mr.as_slice()[2048..2053], b"hello");
//! let mut written = [0; 5];
//! target.read(0, &mut written)?;
//! assert_eq!(&written, b"hello");
//! # Ok(()) }
//! ```
//!
//! # Design
//!
//! ```text
//! Context ──┬── ProtectionDomain<'ctx> ──┬── MemoryRegion<'pd>
//!           │                            └── QueuePair<'res, State>  (borrows PD and CQs)
//!           └── CompletionQueue<'ctx> ───────┘
//!
//! QueuePair<Reset> ─into_init─▶ <Init> ─into_rtr─▶ <Rtr> ─into_rts─▶ <Rts>
//!                          post_recv_* from Init on;  post_send_* only in Rts
//! ```
//!
//! - Children borrow their parents: dropping a parent first does not compile.
//! - Each transition takes exactly the attributes it needs and computes the attribute mask.
//!   A failed transition returns an [`Error`], which `?` takes anywhere; its `try_` twin
//!   hands the QP back with it ([`TransitionError`]), as the buffer posts' twins hand back
//!   the buffer (see [`Error`]).
//! - Two posting tiers, named after what they post: the safe one
//!   (`post_send_buffer`, `post_recv_buffers`, … with a [`SendBufferList`] or
//!   [`RecvBufferList`]) moves [`Buffer`]s of a [`BufferPool`] into the QP and hands them
//!   back with their completion; the raw one (`post_send_wr`, `post_recv_wrs`, … with a
//!   [`SendWrList`] or [`RecvWrList`]) is `unsafe`: the caller promises the memory stays
//!   registered and untouched while the NIC may use it. Polling is safe and allocation-free.
//! - `Drop` never panics: a failed destroy is logged (`log` crate, warn) and the object
//!   leaked; `destroy(self)` returns the error instead.
//! - Errors name the verb, the errno and what to do ([`Error`]).
//!
//! # Thread safety
//!
//! [`Context`], [`ProtectionDomain`], [`CompletionQueue`], [`MemoryRegion`], [`QueuePair`],
//! [`SharedReceiveQueue`], [`AddressHandle`], [`BufferPool`] and [`Buffer`] are
//! `Send + Sync`: rdma-core's verbs are thread-safe (providers lock their queues), and every
//! shared operation takes `&self`. A `MemoryRegion`'s bytes are reachable
//! mutably only through `&mut`. [`DeviceMemory`] and [`DeviceMemoryRegion`] are
//! `Send + Sync` too: the bytes are the device's, reached only by copies, and so is a
//! [`DmaHandle`], which only carries hints. A [`ThreadDomain`] is `Send` but not `Sync`, and a
//! [`ParentDomain`] neither: what is bound to a thread domain is unlocked in the provider.
//!
//! # What is verified where
//!
//! Everything is tested on the mock provider (the host tier). What needs hardware the soft
//! devices lack is verified there and in their refusal only:
//!
//! | feature | mock | rxe / siw (device tier) | ConnectX |
//! |---|---|---|---|
//! | RC, UC and UD queue pairs, SRQs, atomics; the raw and the buffer tier | every verb's errors, masks and fallbacks; the strict mock's property suite; Miri and memcheck | rxe: traffic of every kind, faults, limits, `ibv_rc_pingpong` both ways; siw: RC through rdma_cm | hardware-unverified |
//! | extended and legacy verbs ([`VerbsPath`]) | both, and the fallback | rxe: both; siw: legacy, the extended ones `Unsupported` | hardware-unverified |
//! | memory windows, IOVA, on-demand paging, dma-buf ([`DmabufRegion`]) | each, and each refusal | rxe: windows of both types, IOVA; ODP refused with `EINVAL` and dma-buf `Unsupported` | hardware-unverified |
//! | CQ moderation, port speed (rdma-core v62) | each, and `Unsupported` | `Unsupported` (port speed: named missing before v62, refused by the guest's kernel on 65.0) | hardware-unverified |
//! | completion channels, async events, `tokio` streams | each | rxe: armed CQs, CQ overrun, SRQ limit, port down and up | hardware-unverified |
//! | `rdmacm` | — | rxe and siw: resolve, connect, accept, reject, timeouts; with `tokio`, each step as a future, a cancelled connect; the examples and tools over it | hardware-unverified |
//! | `mlx5` (DC) | the mock libmlx5: DCTs, DCIs and streams executing WRITE, READ and SEND | rxe: the gate's `Unsupported` | tests written and `#[ignore]`d |
//! | `efa` (SRD) | the mock libefa: its attributes, SRD QPs through every state, SENDs looped back; refusals on a non-EFA device and without libefa | rxe: the gate's `Unsupported` | test written and `#[ignore]`d |
//! | `diag` (the doctor) | each layer's checks as unit tests | rxe and siw in the guest, on rdma-core 33.2 to 65.0 | hardware-unverified |
//! | caller-owned memory ([`PinnedMemory`]), [`HugePages`], [`SharedMemory`] | registration, pools, loopback RDMA WRITE, hand-back after and leak on failed deregistration; huge pages' `ENOMEM` hint where none are reserved | rxe: a peer's RDMA WRITE into each, byte for byte (8 huge pages reserved in the guest), and through a window bound to caller-owned memory | hardware-unverified |
//! | rails (feature `rails`, module `rails`) | round-robin slices over two devices, both ways; a rail failed by an error completion or its switch, its slices finished on the other, down until replaced; refusals | rxe: a 192 MiB RDMA WRITE over rxe0 and rxe1 (`scripts/rdma-vm --two-rxe`) whose rdma1 link goes down mid-way (rxe fails the rail's WR with `LOC_QP_OP_ERR`), finished byte for byte on the other rail | hardware-unverified |
//! | GPU memory: peer memory ([`ProtectionDomain::register_peer_memory`]), the doctor's GPU routes | a simulated GPU whose address faults on any CPU access: `EFAULT` and the hint without a peer-memory client, then registration and a peer's RDMA WRITE into it; the doctor's findings on recorded NVIDIA, AMD and GPU-less hosts | rxe: a device address without a peer-memory client fails with `EFAULT` and the hint; rxe, siw: the doctor's "no GPU" findings and its probe of the provider (both refuse dma-buf) | hardware-unverified: no GPU in CI (the manual check is in the guide's "GPU memory") |
//! | QP limits from the device ([`InvalidInputKind::DeviceLimit`]: `max_qp_wr`, `max_sge`, `max_qp_rd_atom`, `max_qp_init_rd_atom`, the context-wide `max_res_rd_atom`) | each limit refused before the verb on configured device limits, two QPs over a `max_res_rd_atom` of 16, the share given back on reset, raw RESET, destroy and a failed RTR | rxe: `max_qp_wr`, `max_sge` and `max_qp_rd_atom` one past the device's, refused naming them | hardware-unverified (ionic's device-wide 16 from its rdma-core v61 provider, on the mock only) |
//! | QP rate limit ([`QueuePair::set_rate_limit`], [`PacketPacingCaps`]) | in range, at both ends and 0; refused outside the range naming it; `Unsupported` without packet pacing, for a QP type the device does not pace, and on the provider's `EOPNOTSUPP` | rxe: `Unsupported` (it reports no packet pacing) | hardware-unverified |
//! | ECE ([`QueuePair::query_ece`], [`QueuePair::set_ece`], [`Ece`]) | set and queried back; `Unsupported` before rdma-core v31 and on the provider's `EOPNOTSUPP`; a refused set | rxe: `Unsupported` | hardware-unverified |
//! | topology ([`topology`]) | no verbs: recorded sysfs trees of a two-socket host with a GPU, a RoCE LAG host and a VM | the guest's sysfs (virtual devices, no PCI place) | hardware-unverified: PCIe paths, links, NUMA nodes and bonds only in the recorded trees |
//! | device memory ([`DeviceMemory`], [`DeviceMemoryRegion`]) | allocation against `max_dm_size`, copies' bounds and alignment, a zero-based region written and sent from by the raw tier, the dma-buf export, each refusal | `Unsupported` | hardware-unverified |
//! | thread and parent domains ([`ThreadDomain`], [`ParentDomain`]) | allocation, deallocation in order (a leaked parent domain keeps its TD), each refusal; no QPs or CQs on them yet | `Unsupported` | hardware-unverified |
//! | DMA handles ([`DmaHandle`], [`RegisterOptions`], rdma-core v59) | allocation with mlx5's rules, registration through `ibv_reg_mr_ex` with the handle borrowed, deallocation in order; `Unsupported` before v59 and on the provider's `EOPNOTSUPP` | rxe: `Unsupported` on rdma-core 44 and 65.0 | hardware-unverified |
//! | import of a device, PD and MR from another process ([`Context::import`]) | import by command fd and handles, unimport (never dealloc) of what was imported, the exporter's PD busy meanwhile; `Unsupported` before v31 and per provider | rxe, siw: `Unsupported` | hardware-unverified |
//! | XRC ([`XrcDomain`], [`XrcSrq`], [`XrcSend`], [`XrcRecv`]) | an initiator's SEND delivered into the XRC SRQ it names, on both tiers; each verb's arguments; wrong SRQ numbers; devices without XRC; refusals; the missing queues by `compile_fail` doctests | rxe: `Unsupported` | test written and `#[ignore]`d |
//! | a route's static rate ([`StaticRate`]) | the rate reaches `ah_attr.static_rate` at RTR | rxe: taken (it does not pace by it) | hardware-unverified |
//!
//! # Crate features
//!
//! - `rdmacm`: rdma_cm connection management (module `cm`); librdmacm is loaded at run time on
//!   first use. Needs `rdma/rdma_cma.h` at build time (librdmacm-dev / rdma-core-devel).
//!
//! - `tokio`: completion and async-event streams awaited on tokio's reactor (module
//!   `reactor`), and with `rdmacm` rdma_cm's steps as futures (`cm::AsyncEventChannel`). Without it the crate is runtime-agnostic: every event file is [`AsFd`] for any
//!   reactor.
//!
//! - `mlx5`: the Dynamically Connected transport of NVIDIA ConnectX devices (module `mlx5`);
//!   the device's own libmlx5 is used at run time, only by DC. Needs `infiniband/mlx5dv.h` at
//!   build time (libibverbs-dev / rdma-core-devel).
//!
//! - `efa`: the Scalable Reliable Datagram transport of AWS Elastic Fabric Adapters (module
//!   `efa`); libefa is loaded at run time on first use, only by SRD. Needs
//!   `infiniband/efadv.h` at build time (libibverbs-dev / rdma-core-devel).
//!
//! - `diag`: the doctor, a layered diagnosis of the RDMA stack (module `diag`, used by
//!   `examples/doctor`). Off by default, so a program that only does verbs compiles none of
//!   it; the stack's kind and rdma-core version are in the core ([`Stack`]).
//!
//! - `rails`: one RDMA WRITE or READ spread over the RC QPs of several devices, which
//!   carries on over the others when one fails (module `rails`).
//!
//! [`AsFd`]: std::os::fd::AsFd
//!
//! # Requirements
//!
//! At run time, rdma-core's `libibverbs.so.1` with a provider for the device (Debian/Ubuntu:
//! `libibverbs1 ibverbs-providers`; RHEL/Rocky: `libibverbs`), and an RDMA device — real,
//! or Soft-RoCE (`rdma link add rxe0 type rxe netdev eth0`). Set `RDMA_VERBS_LIBIBVERBS` to
//! load libibverbs from an unusual path. Building needs the rdma-core headers and libclang.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_code)]

mod access;
mod ah;
mod buffer;
mod c_enum;
pub mod c_number;
mod channel;
#[cfg(all(feature = "rdmacm", rdma_verbs_rdma_cma))]
#[cfg_attr(docsrs, doc(cfg(feature = "rdmacm")))]
pub mod cm;
mod context;
#[cfg(all(feature = "rdmacm", not(rdma_verbs_rdma_cma)))]
compile_error!(
    "rdma-verbs: feature `rdmacm` needs rdma/rdma_cma.h, which rdma-verbs-sys did not find: \
     install librdmacm-dev (Debian/Ubuntu) or rdma-core-devel (RHEL/Rocky/Fedora), or point \
     RDMA_CORE_INCLUDE_DIR at the directory holding rdma/rdma_cma.h"
);
mod cq;
mod device;
mod dm;
mod dmah;
#[cfg(all(feature = "mlx5", rdma_verbs_mlx5dv))]
#[cfg_attr(docsrs, doc(cfg(feature = "mlx5")))]
pub mod mlx5;
#[cfg(all(feature = "mlx5", not(rdma_verbs_mlx5dv)))]
compile_error!(
    "rdma-verbs: feature `mlx5` needs infiniband/mlx5dv.h, which rdma-verbs-sys did not find: \
     install libibverbs-dev (Debian/Ubuntu: it ships mlx5dv.h) or rdma-core-devel \
     (RHEL/Rocky/Fedora; MLNX_OFED/DOCA-OFED: its rdma-core-devel), or point \
     RDMA_CORE_INCLUDE_DIR at the directory holding infiniband/mlx5dv.h"
);
#[cfg(feature = "diag")]
#[cfg_attr(docsrs, doc(cfg(feature = "diag")))]
pub mod diag;
#[cfg(all(feature = "efa", rdma_verbs_efadv))]
#[cfg_attr(docsrs, doc(cfg(feature = "efa")))]
pub mod efa;
#[cfg(all(feature = "efa", not(rdma_verbs_efadv)))]
compile_error!(
    "rdma-verbs: feature `efa` needs infiniband/efadv.h, which rdma-verbs-sys did not find: \
     install libibverbs-dev (Debian/Ubuntu: it ships efadv.h) or rdma-core-devel \
     (RHEL/Rocky/Fedora, Amazon Linux), or point RDMA_CORE_INCLUDE_DIR at the directory \
     holding infiniband/efadv.h"
);
pub mod endpoint;
mod error;
mod event;
mod fd;
mod fit;
pub mod fork;
mod gid;
mod grh_room;
pub mod guide;
mod import;
mod leak;
mod lenders;
mod mr;
mod mw;
mod number;
mod odp;
mod pd;
mod port;
mod qp;
mod quirks;
#[cfg(feature = "rails")]
#[cfg_attr(docsrs, doc(cfg(feature = "rails")))]
pub mod rails;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod reactor;
mod srq;
mod stack;
mod summary;
mod td;
pub mod topology;
mod try_twin;
mod verbs_path;
mod wc;
mod wr;
mod xrc;

pub use rdma_verbs_sys as sys;

/// The README's code blocks, compiled and checked as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

pub use access::AccessFlags;
pub use ah::AddressHandle;
pub use ah::AddressVector;
pub use ah::GlobalRoute;
pub use ah::Grh;
pub use ah::StaticRate;
pub use ah::UdDestination;
pub use buffer::Buffer;
pub use buffer::BufferPool;
pub use buffer::ListOp;
pub use buffer::PostError;
pub use buffer::RecvBufferList;
pub use buffer::SendBufferList;
pub use buffer::ToXrcSrq;
pub use buffer::UdSend;
pub use channel::CompletionChannel;
pub use context::Context;
pub use context::DeviceAttr;
pub use cq::Completion;
pub use cq::CompletionQueue;
pub use cq::CqAttr;
pub use device::Device;
pub use device::DeviceList;
pub use device::NodeType;
pub use device::TransportType;
pub use dm::DeviceMemory;
pub use dmah::DmaHandle;
pub use dmah::DmaHandleAttr;
pub use dmah::TphMemType;
pub use endpoint::Endpoint;
pub use endpoint::Lid;
pub use endpoint::Psn;
pub use endpoint::Qpn;
pub use endpoint::SrqNum;
pub use error::Result;
pub use error::TransitionError;
pub use error::{Error, InvalidInputKind, PostListError};
pub use event::AsyncEvent;
pub use event::AsyncEventType;
pub use event::AsyncEvents;
pub use event::CqId;
pub use event::SrqId;
pub use gid::Gid;
pub use gid::GidEntry;
pub use gid::GidType;
pub use import::ImportedMr;
pub use mr::DeviceMemoryRegion;
pub use mr::DmabufRegion;
pub use mr::HugePageSize;
pub use mr::HugePages;
pub use mr::MemoryRegion;
pub use mr::PeerMemoryRegion;
pub use mr::PinnedMemory;
pub use mr::RegionMemory;
pub use mr::RegisterOptions;
pub use mr::RemoteWritableRegion;
pub use mr::SharedMemory;
pub use mw::BindableRegion;
pub use mw::MemoryWindow;
pub use mw::MwBind;
pub use mw::MwType;
pub use odp::OdpCaps;
pub use odp::OdpGeneralCaps;
pub use odp::OdpTransportCaps;
pub use pd::ProtectionDomain;
pub use port::LinkLayer;
pub use port::Mtu;
pub use port::PortAttr;
pub use port::PortState;
pub use qp::AckTimeout;
pub use qp::Connected;
pub use qp::Datagram;
pub use qp::Ece;
pub use qp::HasReceiveQueue;
pub use qp::HasSendQueue;
pub use qp::Init;
pub use qp::PacketPacingCaps;
pub use qp::QpAttrMask;
pub use qp::QpAttributes;
pub use qp::QpCapabilities;
pub use qp::QpInitAttr;
pub use qp::QpState;
pub use qp::QpType;
pub use qp::QueuePair;
pub use qp::QueuePairState;
pub use qp::Rc;
pub use qp::ReceiveReady;
pub use qp::Reset;
pub use qp::RetryCount;
pub use qp::RnrRetry;
pub use qp::RnrTimer;
pub use qp::Rtr;
pub use qp::Rts;
pub use qp::ToInitAttr;
pub use qp::ToPeer;
pub use qp::ToRtrAttr;
pub use qp::ToRtsAttr;
pub use qp::Uc;
pub use qp::Ud;
pub use qp::UdToInitAttr;
pub use qp::Unknown;
pub use qp::XrcRecv;
pub use qp::XrcSend;
pub use qp::DRAIN_RECV_WR_ID;
pub use qp::DRAIN_SEND_WR_ID;
pub use srq::SharedReceiveQueue;
pub use stack::Stack;
pub use stack::StackKind;
pub use td::ParentDomain;
pub use td::ThreadDomain;
pub use verbs_path::VerbsPath;
pub use wc::WcOpcode;
pub use wc::WcStatus;
pub use wc::WorkCompletion;
pub use wr::LKey;
pub use wr::RKey;
pub use wr::RecvWr;
pub use wr::RecvWrList;
pub use wr::RemoteAddr;
pub use wr::SendFlags;
pub use wr::SendOp;
pub use wr::SendWr;
pub use wr::SendWrList;
pub use wr::Sge;
pub use xrc::XrcDomain;
pub use xrc::XrcSrq;
