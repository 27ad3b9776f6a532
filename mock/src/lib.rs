//! Test scaffolding, not for production (this crate is never published): a fake libibverbs
//! provider for rdma-verbs' host-tier tests, which need no device and no kernel support.
//!
//! It builds in Rust what a provider would:
//!
//! - one device, [`DEVICE_NAME`], with one RoCE-like port ([`port_attr`]: Ethernet link
//!   layer) whose GID table ([`gid_table`]) holds RoCE v1 and v2 entries and empty ones;
//! - contexts whose `ibv_context` is embedded, last, in a heap `verbs_context` with a chosen
//!   `sz`, `abi_compat` and ops ([`ContextConfig`]), so the `verbs_get_ctx_op` guard and the
//!   NULL-op paths of the inline verbs can be exercised;
//! - PDs, MRs, CQs, QPs and completion channels as real allocations with the fields callers
//!   read, freed by the mock destroy verbs;
//! - asynchronous events queued per context by the test ([`Mock::push_async_event`]), served
//!   by `ibv_get_async_event` through the context's `async_fd` (an eventfd, readable while
//!   events are queued), with unacknowledged ones counted ([`Mock::unacked_async_events`]);
//! - completion events queued per CQ by the test ([`Mock::push_cq_event`]), served by
//!   `ibv_get_cq_event` through the CQ's channel (an eventfd), with the CQ's `cq_context`; a
//!   CQ destroyed with events read and not acknowledged, where the real `ibv_destroy_cq`
//!   blocks forever, is fatal at the mock's drop;
//! - [`fns`] / [`library`]: an [`IbverbsFns`] of plain `extern "C"` functions over them, with
//!   the optional symbols present or absent ([`Optional`]).
//!
//! Every call is recorded as a [`Call`] with its interesting arguments ([`Mock::take_calls`]),
//! and the next call of any verb can be made to fail with a chosen errno ([`Mock::fail`]),
//! returned the way that verb reports errors. The mock also refuses, with the errno a
//! provider gives, what tests rely on being refused: unknown objects (`EINVAL`), destroying a
//! PD or CQ still used by a QP or MR, or a channel still used by a CQ (`EBUSY`), sizes above [`device_attr`]'s limits
//! (`EINVAL`), QP transitions from the wrong state or without the attributes `ibv_modify_qp(3)`
//! requires for each QP type (RC, UC, UD; `EINVAL`), and RTR or an AH without a GRH naming a
//! valid GID on the Ethernet port (`EINVAL`, as RoCE providers do). RC, UC and UD QPs exist
//! (`EOPNOTSUPP` for other types), on the legacy and the extended verbs, with or without an
//! SRQ; so do address handles, and, on a context with [`ContextConfig::xrc`], XRC domains,
//! XRC SRQs and XRC initiator and target QPs.
//!
//! Device memory of a simulated GPU ([`Mock::device_memory`]) sits at an address the CPU
//! cannot touch (any access faults); `ibv_reg_mr` registers it once a peer-memory client is
//! loaded ([`Mock::load_peer_memory_client`]) and answers `EFAULT` before, as the kernel does.
//!
//! # Strictness
//!
//! The mock is strict by default: a paranoid NIC, the oracle of the safe crate's soundness
//! tests. It keeps a registry of every live PD, MR (keys, PD, IOVA and CPU ranges, access), AH,
//! QP, SRQ and CQ, and checks every posted work request (legacy lists and extended batches)
//! against the [`Rule`]s: SGEs inside live MRs of the QP's PD with the access the opcode needs,
//! inline data read from CPU memory (and copied at post time), a live AH of the PD for UD,
//! atomics only on RC with one aligned 8-byte SGE, the SGE limit, a declared list length
//! ([`Mock::expect_chain_len`]), and no buffer-tier `wr_id` (bit 63) posted twice while
//! outstanding. A broken rule is a [`Violation`], and the post fails with `EINVAL` (`*bad_wr`
//! at the offending WR; an extended batch posts nothing) unless the test allowed the rule
//! ([`Mock::allow`]). Violations not taken ([`Mock::take_violations`]) fail the test when the
//! `Mock` is dropped.
//!
//! Work requests between QPs of the same mock (loopback: RC/UC by the RTR `dest_qp_num`, UD by
//! the WR's `remote_qpn`) are executed, with the data moved through the MRs' CPU ranges and
//! completions produced on the QPs' CQs (legacy `poll_cq` and the extended CQ alike); see the
//! `exec` module notes. ERROR flushes, RESET and destroy discard, [`Mock::fail_next_wr`] makes
//! an error completion. A work request naming an MR deregistered before it executed is a
//! [`Rule::MrGoneBeforeExecution`] violation and touches nothing. Work requests to a QP that
//! is not one of this mock's are accepted and never executed (tests may queue completions
//! with [`Mock::push_completion`]).
//!
//! DMA handles (`ibv_alloc_dmah`, with mlx5's rules) and `ibv_reg_mr_ex` by address: a
//! handle a registered MR uses cannot be deallocated (`EBUSY`), and a registration naming a
//! handle that is not a live one of the PD's context is refused (`EINVAL`).
//!
//! Imports (`ibv_import_device` by a duplicate of a context's `cmd_fd`, a memfd here;
//! `ibv_import_pd` and `ibv_import_mr` by handle): an imported PD or MR destroyed by the
//! importer (`ibv_dealloc_pd`, `ibv_dereg_mr` rather than `ibv_unimport_*`) is refused and fatal
//! at the mock's drop, as is unimporting what was not imported.
//!
//! Memory windows (`alloc_mw`, `dealloc_mw`, type-1 `bind_mw`, type-2 `IBV_WR_BIND_MW`):
//! a bind is checked like a work request ([`Rule::BindOutsideMr`]) and, once executed, lets
//! peers reach its range through the window's rkey with its rights; `LOCAL_INV` and
//! `SEND_WITH_INV` invalidate it; as rxe, an MR with a window bound cannot be deregistered.
//! The mock device reports no type-2 windows, so extended QPs are not created with bind ops.
//!
//! Not modelled: send queue and receive queue depths (no `ENOMEM` when full, unless
//! [`Mock::fill_receive_queue_at`] says so), RNR and retry
//! timing (an RC SEND waits for a receive as long as it takes), Q_Keys and P_Keys, zero-based
//! windows, SRQ limits, CQ events on completion channels, and DC QPs (the `mlx5` mock records
//! them unchecked).
//!
//! # Threads
//!
//! The state lives with a [`Mock`], at most one per thread: its functions serve the calls
//! made on the thread that created it, so tests running in parallel never see each other's
//! calls or failures. A function called on a thread without one fails with `ENODEV`.
//! Dropping the `Mock` frees every object still alive (those a failed destroy leaked), so
//! objects must not be used after it.

mod ah;
mod call;
mod device;
mod dm;
mod exec;
mod extended;
mod import;
// DC: a mock libmlx5 and the libibverbs pieces DC needs.
mod dmah;
// SRD: a mock libefa.
#[cfg(rdma_verbs_efadv)]
pub mod efa;
#[cfg(rdma_verbs_mlx5dv)]
pub mod mlx5;
mod mw;
mod ops;
mod peer;
mod post;
mod qp;
mod registry;
mod rule;
mod srq;
mod state;
mod strict;
mod td;
mod verbs;
mod xrc;

use std::ffi::c_int;
use std::marker::PhantomData;
use std::mem::size_of;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::OnceLock;

use rdma_verbs_sys::bindings::*;
use rdma_verbs_sys::loader::{Ibverbs, IbverbsFns};

pub use call::{Call, QpAttr, Verb};
pub use device::{
    device_attr, gid_table, port_attr, DeviceLimits, DEVICE_NAME, NODE_GUID, PORT_SPEED,
};
pub use exec::GRH_LEN;
pub use extended::CORE_CLOCK_KHZ;
pub use peer::DeviceMemory;
pub use rule::{Queue, Rule, Violation};

/// What a mock library reports as its path ([`Ibverbs::path`]).
pub const LIBRARY_PATH: &str = "mock/libibverbs.so.1";

/// Which optional symbols a mock library has.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Optional {
    /// `ibv_reg_mr_iova2` (rdma-core v28+).
    pub reg_mr_iova2: bool,
    /// `_ibv_query_gid_ex` (rdma-core v32+).
    pub query_gid_ex: bool,
    /// `ibv_reg_dmabuf_mr` (rdma-core v34+). The mock device, like rxe, supports no dma-buf:
    /// the function fails with `EOPNOTSUPP`.
    pub reg_dmabuf_mr: bool,
    /// `ibv_qp_to_qp_ex` (rdma-core v24+).
    pub qp_to_qp_ex: bool,
    /// `ibv_query_port_speed` (rdma-core v62+).
    pub query_port_speed: bool,
    /// `ibv_dm_export_dmabuf_fd` (rdma-core v62+). The mock has no dma-buf to export: it
    /// hands out a memfd in its place.
    pub dm_export_dmabuf_fd: bool,
    /// `ibv_query_ece` and `ibv_set_ece` (rdma-core v31+).
    pub ece: bool,
    /// `ibv_alloc_dmah`, `ibv_dealloc_dmah` and `ibv_reg_mr_ex` (rdma-core v59+).
    pub dmah: bool,
    /// `ibv_import_device`, `ibv_import_pd`, `ibv_unimport_pd`, `ibv_import_mr` and
    /// `ibv_unimport_mr` (rdma-core v31+).
    pub import: bool,
}

impl Optional {
    /// Every optional symbol: a current rdma-core.
    pub const ALL: Optional = Optional {
        reg_mr_iova2: true,
        query_gid_ex: true,
        reg_dmabuf_mr: true,
        qp_to_qp_ex: true,
        query_port_speed: true,
        dm_export_dmabuf_fd: true,
        ece: true,
        dmah: true,
        import: true,
    };
    /// None: an rdma-core older than v24.
    pub const NONE: Optional = Optional {
        reg_mr_iova2: false,
        query_gid_ex: false,
        reg_dmabuf_mr: false,
        qp_to_qp_ex: false,
        query_port_speed: false,
        dm_export_dmabuf_fd: false,
        ece: false,
        dmah: false,
        import: false,
    };
}

/// The mock libibverbs: required symbols always, optional ones as `optional` says.
pub fn fns(optional: Optional) -> IbverbsFns {
    IbverbsFns {
        ibv_get_device_list: verbs::ibv_get_device_list,
        ibv_free_device_list: verbs::ibv_free_device_list,
        ibv_get_device_name: verbs::ibv_get_device_name,
        ibv_get_device_guid: verbs::ibv_get_device_guid,
        ibv_open_device: verbs::ibv_open_device,
        ibv_close_device: verbs::ibv_close_device,
        ibv_query_device: verbs::ibv_query_device,
        ibv_query_port: verbs::ibv_query_port,
        ibv_query_gid: verbs::ibv_query_gid,
        ibv_alloc_pd: verbs::ibv_alloc_pd,
        ibv_dealloc_pd: verbs::ibv_dealloc_pd,
        ibv_reg_mr: verbs::ibv_reg_mr,
        ibv_dereg_mr: verbs::ibv_dereg_mr,
        ibv_create_cq: verbs::ibv_create_cq,
        ibv_destroy_cq: verbs::ibv_destroy_cq,
        ibv_create_qp: qp::ibv_create_qp,
        ibv_modify_qp: qp::ibv_modify_qp,
        ibv_query_qp: qp::ibv_query_qp,
        ibv_destroy_qp: qp::ibv_destroy_qp,
        ibv_create_comp_channel: verbs::ibv_create_comp_channel,
        ibv_destroy_comp_channel: verbs::ibv_destroy_comp_channel,
        ibv_get_cq_event: verbs::ibv_get_cq_event,
        ibv_ack_cq_events: verbs::ibv_ack_cq_events,
        ibv_get_async_event: verbs::ibv_get_async_event,
        ibv_ack_async_event: verbs::ibv_ack_async_event,
        ibv_create_ah: ah::ibv_create_ah,
        ibv_destroy_ah: ah::ibv_destroy_ah,
        ibv_create_srq: srq::ibv_create_srq,
        ibv_modify_srq: srq::ibv_modify_srq,
        ibv_destroy_srq: srq::ibv_destroy_srq,
        ibv_reg_mr_iova2: optional.reg_mr_iova2.then_some(verbs::ibv_reg_mr_iova2),
        _ibv_query_gid_ex: optional.query_gid_ex.then_some(verbs::_ibv_query_gid_ex),
        ibv_reg_dmabuf_mr: optional.reg_dmabuf_mr.then_some(verbs::ibv_reg_dmabuf_mr),
        ibv_qp_to_qp_ex: optional.qp_to_qp_ex.then_some(extended::ibv_qp_to_qp_ex),
        ibv_query_port_speed: optional.query_port_speed.then_some(verbs::ibv_query_port_speed),
        ibv_dm_export_dmabuf_fd: optional.dm_export_dmabuf_fd.then_some(dm::export_dmabuf_fd),
        ibv_query_ece: optional.ece.then_some(qp::ibv_query_ece),
        ibv_set_ece: optional.ece.then_some(qp::ibv_set_ece),
        ibv_alloc_dmah: optional.dmah.then_some(dmah::ibv_alloc_dmah),
        ibv_dealloc_dmah: optional.dmah.then_some(dmah::ibv_dealloc_dmah),
        ibv_reg_mr_ex: optional.dmah.then_some(dmah::ibv_reg_mr_ex),
        ibv_import_device: optional.import.then_some(import::ibv_import_device),
        ibv_import_pd: optional.import.then_some(import::ibv_import_pd),
        ibv_unimport_pd: optional.import.then_some(import::ibv_unimport_pd),
        ibv_import_mr: optional.import.then_some(import::ibv_import_mr),
        ibv_unimport_mr: optional.import.then_some(import::ibv_unimport_mr),
    }
}

/// The mock libibverbs as a process-wide library, as the safe crate's `Context::from_raw`
/// wants it. The functions keep no state of their own (it lives with each thread's [`Mock`]),
/// so one library per set of optional symbols serves every test.
pub fn library(optional: Optional) -> &'static Ibverbs {
    static LIBRARIES: [OnceLock<Ibverbs>; 512] = [const { OnceLock::new() }; 512];
    let slot = usize::from(optional.reg_mr_iova2)
        | usize::from(optional.query_gid_ex) << 1
        | usize::from(optional.reg_dmabuf_mr) << 2
        | usize::from(optional.qp_to_qp_ex) << 3
        | usize::from(optional.query_port_speed) << 4
        | usize::from(optional.dm_export_dmabuf_fd) << 5
        | usize::from(optional.ece) << 6
        | usize::from(optional.dmah) << 7
        | usize::from(optional.import) << 8;
    LIBRARIES[slot].get_or_init(|| {
        // SAFETY: each mock function keeps the contract of its libibverbs namesake (argument
        // use, return and errno conventions) over the mock's objects.
        unsafe { Ibverbs::from_fns(fns(optional), PathBuf::from(LIBRARY_PATH)) }
    })
}

/// A mock library with `optional` symbols whose file name carries rdma-core `release`
/// (`mock/libibverbs.so.1.14.<release>`, so [`Ibverbs::rdma_core_version`] reports it), for
/// tests of what depends on the release. Each distinct pair is built once and kept for the
/// process (a few bytes each).
pub fn library_with_release(optional: Optional, release: &str) -> &'static Ibverbs {
    type Libraries = std::sync::Mutex<Vec<((Optional, String), &'static Ibverbs)>>;
    static LIBRARIES: OnceLock<Libraries> = OnceLock::new();
    let mut libraries = LIBRARIES.get_or_init(Default::default).lock().expect("not poisoned");
    let key = (optional, release.to_owned());
    if let Some(&(_, lib)) = libraries.iter().find(|(k, _)| *k == key) {
        return lib;
    }
    let path = PathBuf::from(format!("mock/libibverbs.so.1.14.{release}"));
    // SAFETY: as in `library`.
    let lib: &'static Ibverbs =
        Box::leak(Box::new(unsafe { Ibverbs::from_fns(fns(optional), path) }));
    libraries.push((key, lib));
    lib
}

/// How a mock context looks to the inline verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextConfig {
    /// `verbs_context.sz`, the library's own size of `struct verbs_context`: smaller than this
    /// build's simulates an older library, which lacks the ops in front of the struct.
    pub sz: usize,
    /// Whether `abi_compat` is `__VERBS_ABI_IS_EXTENDED`; `false` simulates a context that is
    /// not embedded in a `verbs_context`.
    pub extended: bool,
    /// Whether the `verbs_context.query_port` op is set.
    pub query_port: bool,
    /// Whether the `verbs_context.modify_cq` op (CQ moderation) is set, as mlx5's is; rxe and
    /// siw have none.
    pub cq_moderation: bool,
    /// Whether `ibv_context.ops.post_send` is set.
    pub post_send: bool,
    /// Whether `ibv_context.ops.post_recv` is set.
    pub post_recv: bool,
    /// Whether `ibv_context.ops.poll_cq` is set.
    pub poll_cq: bool,
    /// Whether `ibv_context.ops.req_notify_cq` is set.
    pub req_notify_cq: bool,
    /// Whether the `verbs_context.create_cq_ex` op is set (extended CQs; see the module
    /// `extended` notes on [`CORE_CLOCK_KHZ`]).
    pub create_cq_ex: bool,
    /// Whether the `verbs_context.create_qp_ex` op is set (extended QPs).
    pub create_qp_ex: bool,
    /// Whether the `verbs_context.query_device_ex` op is set, reporting completion
    /// timestamps (a non-zero `completion_timestamp_mask`, a clock of [`CORE_CLOCK_KHZ`]).
    /// A packet pacing range in [`ContextConfig::limits`] sets the op too.
    pub completion_timestamps: bool,
    /// Whether the `verbs_context` device-memory ops (`alloc_dm`, `free_dm`, `reg_dm_mr`) are
    /// set, as mlx5's are, with `query_device_ex` reporting a `max_dm_size` of
    /// [`MAX_DM_SIZE`]. rxe and siw have none (libibverbs' stubs answer `EOPNOTSUPP`).
    pub device_memory: bool,
    /// Whether the `verbs_context` thread-domain ops (`alloc_td`, `dealloc_td`,
    /// `alloc_parent_domain`) are set, as mlx5's are; rxe and siw have none.
    pub thread_domains: bool,
    /// Whether the `ibv_context.ops` memory-window ops (`alloc_mw`, `dealloc_mw`,
    /// `bind_mw`) are set, as rxe's are.
    pub memory_windows: bool,
    /// A member of `ibv_cq_ex` or `ibv_qp_ex` (by its field name, e.g. `"read_byte_len"` or
    /// `"wr_send_imm"`) that this context's extended CQs and QPs leave NULL.
    pub missing_member: Option<&'static str>,
    /// The `vendor_id` `ibv_query_device` reports for this context: 0 by default,
    /// [`RXE_VENDOR_ID`] to look like Soft-RoCE (whose data-path quirks rdma-verbs applies
    /// by this id and the library's release: see [`library_with_release`]).
    pub vendor_id: u32,
    /// The limits `ibv_query_device` reports for this context (and `ibv_create_qp` enforces).
    pub limits: DeviceLimits,
    /// Whether the device has XRC, as mlx5's and hns's do: `ibv_query_device` reports
    /// `IBV_DEVICE_XRC`, the `verbs_context` ops `open_xrcd`, `close_xrcd`, `create_srq_ex`,
    /// `get_srq_num` and `create_qp_ex` are set, and XRC QPs can be created (see the `xrc`
    /// module notes). rxe and siw have none (libibverbs' stubs answer `EOPNOTSUPP`).
    pub xrc: bool,
}

/// The `vendor_id` of Soft-RoCE (rxe).
pub const RXE_VENDOR_ID: u32 = 0xFF_FFFF;

/// The `vendor_id` of Mellanox/NVIDIA devices (mlx5).
pub const MELLANOX_VENDOR_ID: u32 = 0x02c9;

/// The `max_dm_size` of a context with [`ContextConfig::device_memory`], in bytes (a
/// ConnectX-5's MEMIC is 128 KiB).
pub const MAX_DM_SIZE: u64 = 128 * 1024;

impl ContextConfig {
    /// The default with the extended CQ and QP ops set: a provider like rxe.
    pub fn extended_verbs() -> Self {
        ContextConfig { create_cq_ex: true, create_qp_ex: true, ..ContextConfig::default() }
    }
}

impl Default for ContextConfig {
    /// A current library: full size, extended, every legacy op set; no extended CQ or QP
    /// (a provider like siw), so call logs show the legacy verbs unless a test asks for the
    /// extended ones ([`ContextConfig::extended_verbs`]).
    fn default() -> Self {
        ContextConfig {
            sz: size_of::<verbs_context>(),
            extended: true,
            query_port: true,
            cq_moderation: true,
            post_send: true,
            post_recv: true,
            poll_cq: true,
            req_notify_cq: true,
            create_cq_ex: false,
            create_qp_ex: false,
            completion_timestamps: false,
            device_memory: false,
            thread_domains: false,
            memory_windows: true,
            missing_member: None,
            vendor_id: 0,
            limits: DeviceLimits::default(),
            xrc: false,
        }
    }
}

/// This thread's mock provider: its objects, call log and pending failures.
///
/// Only one may exist per thread at a time; it cannot leave its thread.
#[derive(Debug)]
pub struct Mock {
    _thread_bound: PhantomData<*const ()>,
}

impl Mock {
    /// Installs a fresh mock provider for this thread.
    ///
    /// # Panics
    ///
    /// When this thread already has one.
    pub fn new() -> Mock {
        state::install();
        Mock { _thread_bound: PhantomData }
    }

    /// A new context of the mock device, shaped by `config`, as `ibv_open_device` would
    /// return it (the call is not recorded). Close it with `ibv_close_device`, or let the
    /// `Mock` free it.
    pub fn context(&self, config: ContextConfig) -> NonNull<ibv_context> {
        state::with(|s| ops::new_context(s, &config))
    }

    /// Makes the next call of `verb` on this thread fail with `errno`, reported as that verb
    /// reports errors: the errno returned (`int` verbs, `-errno` for `poll_cq`, with `*bad_wr`
    /// set for posts), or NULL with `errno` set (pointer verbs; errno 0 simulates a provider
    /// that forgot to set it). A second call before that replaces the errno.
    pub fn fail(&self, verb: Verb, errno: c_int) {
        state::with(|s| s.fail(verb, errno));
    }

    /// The calls recorded since the last time, oldest first.
    pub fn take_calls(&self) -> Vec<Call> {
        state::with(|s| s.take_calls())
    }

    /// The calls recorded since the last time that `keep` selects, oldest first; the others
    /// are taken too, and dropped.
    pub fn take_calls_where(&self, keep: impl FnMut(&Call) -> bool) -> Vec<Call> {
        self.take_calls().into_iter().filter(keep).collect()
    }

    /// Queues `wc` on `cq`, for the next `poll_cq` to return.
    ///
    /// # Panics
    ///
    /// When `cq` is not a live CQ of this mock.
    pub fn push_completion(&self, cq: *mut ibv_cq, wc: ibv_wc) {
        state::with(|s| s.push_completion(cq, wc));
    }

    /// Queues `event` on the live context `ctx` for `ibv_get_async_event` and makes the
    /// context's `async_fd` (an eventfd) readable, as a provider does when the device reports
    /// something. The event's element is passed through as given (a QP event's `qp` is read
    /// by the caller, so it should be a live QP of this mock).
    ///
    /// # Panics
    ///
    /// When `ctx` is not a live context of this mock.
    pub fn push_async_event(&self, ctx: *mut ibv_context, event: ibv_async_event) {
        state::with(|s| s.push_async_event(ctx, event));
    }

    /// Queues a completion event of the live CQ `cq` on its channel for `ibv_get_cq_event`
    /// and makes the channel's descriptor readable, as the kernel does when an armed CQ gets
    /// a completion (the mock does not check that it was armed).
    ///
    /// # Panics
    ///
    /// When `cq` is not a live CQ of this mock with a channel.
    pub fn push_cq_event(&self, cq: *mut ibv_cq) {
        state::with(|s| s.push_cq_event(cq));
    }

    /// How many async events `ibv_get_async_event` handed out that `ibv_ack_async_event` has
    /// not acknowledged yet (a real `ibv_destroy_qp`/`cq`/`srq` would wait for them).
    pub fn unacked_async_events(&self) -> usize {
        state::with(|s| s.unacked_async_events())
    }

    /// Lets work requests that break `rule` through: each is still recorded as a
    /// [`Violation`] (not fatal at drop), the post succeeds as a lenient provider's would, and
    /// the work request is poisoned: it never touches memory, and completes with
    /// `IBV_WC_LOC_PROT_ERR` (its QP going to ERROR) if it executes. Tests that break a rule on
    /// purpose name it here.
    pub fn allow(&self, rule: Rule) {
        state::with(|s| s.allow(rule));
    }

    /// The violations recorded since the last time, oldest first; taken ones no longer fail
    /// the test when the mock is dropped.
    pub fn take_violations(&self) -> Vec<Violation> {
        state::with(|s| s.take_violations())
    }

    /// Declares the length of the next posted list (legacy `post_send`, `post_recv`,
    /// `post_srq_recv`, or an extended batch): another length is a [`Rule::ChainLength`]
    /// violation and the post fails with `EINVAL`, posting nothing. (Every list's length is
    /// also in the call log: [`Call::PostSend`]'s `wr_ids`.)
    pub fn expect_chain_len(&self, len: usize) {
        state::with(|s| s.chain_len = Some(len));
    }

    /// Makes the next receive post (`post_recv`, `post_srq_recv`) find its queue full after
    /// `position` WRs of its list, as a provider's does (queue depths are otherwise not
    /// modelled): those before are queued, the call fails with `ENOMEM` and `*bad_wr` names
    /// the WR at `position`.
    pub fn fill_receive_queue_at(&self, position: usize) {
        state::with(|s| s.recv_full_at = Some(position));
    }

    /// Makes the next send that QP `qp` executes complete with `status` (signaled or not)
    /// and move the QP to ERROR, flushing the rest, as an error completion on a real NIC
    /// does. On a QP without a loopback peer the next send posted (in RTS) is the one.
    ///
    /// # Panics
    ///
    /// When `qp` is not a live QP of this mock.
    pub fn fail_next_wr(&self, qp: *mut ibv_qp, status: ibv_wc_status) {
        state::with(|s| {
            let qpn = s.reg.qpn_of(qp).expect("fail_next_wr wants a live mock QP");
            s.reg.qps.get_mut(&qpn).expect("live").fail_next = Some(status);
            exec::progress(s);
        });
    }

    /// How many work requests posted on `qp` (its send queue and its own receive queue) are
    /// outstanding: posted and not yet retired (their completion, or for an unsignaled send
    /// a later signaled completion, not polled yet; not flushed-and-polled; not discarded by
    /// RESET). 0 for anything that is not a live QP of this mock.
    pub fn outstanding(&self, qp: *mut ibv_qp) -> usize {
        state::with(|s| {
            let qp = s.reg.qpn_of(qp).and_then(|n| s.reg.qps.get(&n));
            qp.map_or(0, |qp| qp.sq_inflight.len() + qp.rq_inflight.len())
        })
    }

    /// The work requests still queued on live queues (a leaked QP's or SRQ's, say) that name
    /// memory no longer registered: the NIC would access memory the program may have freed
    /// once they execute. Empty when none.
    pub fn dangling_work(&self) -> Vec<String> {
        state::with(|s| s.reg.dangling_work())
    }

    /// How many completions were queued on `cq` while it already held its capacity (`cqe`)
    /// of them: a CQ overrun (the test's problem, not a violation; the completions are kept).
    pub fn cq_overruns(&self, cq: *mut ibv_cq) -> usize {
        state::with(|s| s.cq_overruns(cq))
    }

    /// `len` bytes of a simulated GPU's memory: an address the CPU must never touch (any
    /// access faults), which `ibv_reg_mr` registers only once a peer-memory client is loaded
    /// ([`Mock::load_peer_memory_client`]), failing with `EFAULT` before, as the kernel does
    /// for an address no CPU page backs. Work requests reach it through the NIC's view; the
    /// test copies in and out with [`DeviceMemory::read`] and [`DeviceMemory::write`].
    ///
    /// # Panics
    ///
    /// When `len` is 0, or the mappings fail.
    pub fn device_memory(&self, len: usize) -> DeviceMemory {
        state::with(|s| peer::new(s, len))
    }

    /// Loads a peer-memory client (as `modprobe nvidia_peermem` does): from now on
    /// `ibv_reg_mr` registers [`DeviceMemory`] lying in one allocation.
    pub fn load_peer_memory_client(&self) {
        state::with(|s| s.peer.client = true);
    }

    /// Whether `object` is a live object of this mock: created and not (successfully)
    /// destroyed.
    pub fn is_live<T>(&self, object: *mut T) -> bool {
        state::with(|s| s.is_live(object.cast()))
    }
}

impl Default for Mock {
    fn default() -> Self {
        Mock::new()
    }
}

impl Drop for Mock {
    /// Frees every object still alive; then, unless the thread is already panicking, panics
    /// if violations of rules not allowed were recorded and never taken, or a CQ was
    /// destroyed with completion events not acknowledged.
    ///
    /// This is test scaffolding that exists to fail tests: a test that made the "NIC" touch
    /// memory it should not have fails here even if it never looked. (The rule that `Drop`
    /// never panics binds the published crates, not this one.)
    fn drop(&mut self) {
        let fatal = state::with(|s| s.fatal_violations());
        state::uninstall();
        if !fatal.is_empty() && !std::thread::panicking() {
            panic!("the strict mock recorded violations never taken:\n{}", fatal.join("\n"));
        }
    }
}
