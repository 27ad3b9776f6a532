//! rdma_cm (`librdmacm`): connection management by IP address — feature `rdmacm`.
//!
//! librdmacm is loaded at run time on first use (`librdmacm.so.1`, or
//! `$RDMA_VERBS_LIBRDMACM`), after libibverbs; it shares the process's libibverbs (see
//! [`rdma_verbs_sys::rdmacm`](mod@rdma_verbs_sys::rdmacm)). The flow, as in `rdma_cm(7)`:
//!
//! ```text
//! client                                   server
//! EventChannel::new, CmId::new             EventChannel::new, CmId::new
//! resolve_addr → resolve_route             bind_addr → listen
//! context() → PD, CQs, QP (RESET/INIT)     get_request → ConnectRequest { id, private data }
//! connect(qp, ConnParam) ──── REQ ───────▶ id.context() → PD, CQs, QP; id.accept(qp, ..)
//!        ◀──────────────── REP / REJ ─────  (or ConnectRequest::reject(private data))
//! QueuePair<Rts>                           QueuePair<Rts>
//! disconnect ─────────────── DREQ ───────▶ wait_disconnected
//! ```
//!
//! # Events
//!
//! Every blocking step waits for its event with a timeout (milliseconds granularity, given as
//! a [`Duration`](std::time::Duration)); events for other ids that arrive meanwhile are kept
//! in the channel's backlog for their own waits. Every event is acknowledged
//! (`rdma_ack_cm_event(3)`) as soon as it is read, after its contents are copied, so
//! `rdma_destroy_id(3)` — which waits for the acknowledgement of every event of its id — never
//! hangs on us.
//!
//! # On tokio
//!
//! With feature `tokio`, an [`AsyncEventChannel`] awaits the same steps on tokio's reactor
//! (resolution, connect requests, connect and accept as futures, the channel's events as a
//! stream), cancel-safe: see its docs for how ids share the channel and what a
//! dropped future leaves.
//!
//! # The QP and its transitions
//!
//! rdma_cm moves a connected QP through INIT, RTR and RTS itself (over InfiniBand/RoCE,
//! librdmacm does it during `rdma_accept` and on the connect response; over iWARP the kernel
//! does). The typestate follows what was *done*: [`CmId::connect`] and [`CmId::accept`] take
//! the QP by value in [`Reset`](crate::Reset) or [`Init`](crate::Init) (INIT lets receives be
//! posted before the peer can send) and give back a [`QueuePair<'res, Rts,
//! Rc>`](crate::QueuePair) when the CM reports `ESTABLISHED` — which it does only once the QP
//! is in RTS (librdmacm turns a failed move into `CONNECT_ERROR`). The event is trusted rather
//! than `ibv_query_qp`, which siw before Linux 6.x answers with RESET for every QP. A failure
//! hands the QP back typed [`Unknown`](crate::Unknown) with the error ([`ConnectError`]): its
//! real state is whatever the CM left.
//!
//! The QP is an ordinary [`QueuePair`](crate::QueuePair) created with
//! [`ProtectionDomain::create_rc_qp`](crate::ProtectionDomain::create_rc_qp), not with
//! `rdma_create_qp`: librdmacm learns of it only for the duration of `connect`/`accept`
//! (`id->qp` is set, then cleared once established), so the CM never holds a pointer to a QP
//! that our `Drop` destroys. One consequence: [`CmId::disconnect`] does not move the QP to
//! ERROR (librdmacm would only do that for a QP it knows); drop or reset the QP after
//! disconnecting.
//!
//! # The device context
//!
//! A CmId is bound to a device by its address (`id->verbs`, set by `rdma_resolve_addr`,
//! `rdma_bind_addr` or a connect request). That `ibv_context` belongs to librdmacm, which
//! opened it and closes it itself: [`CmId::context`] returns a [`Context`](crate::Context)
//! *borrowed from the CmId* — built with [`Context::from_raw`](crate::Context::from_raw) and
//! kept in a `ManuallyDrop`, so our `ibv_close_device` never runs on it. Every PD, CQ and QP
//! created from it borrows the CmId in turn, so none outlives the id that keeps librdmacm's
//! device reference.
//!
//! # Thread safety
//!
//! [`EventChannel`] is `Send + Sync`. [`CmId`] is `Send` but not `Sync`: `connect`/`accept`
//! write `id->qp`, which librdmacm reads in `rdma_disconnect`, so calls on one id stay on one
//! thread at a time.
#![allow(unsafe_code)]

mod channel;
mod connect;
mod event;
mod id;
mod param;
#[cfg(feature = "tokio")]
mod reactor;

pub use channel::EventChannel;
pub use connect::{BeforeConnect, ConnectError, Established, Rejection};
pub use event::{CmEvent, CmEventKind};
pub use id::{CmId, ConnectRequest, PortSpace};
pub use param::ConnParam;
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub use reactor::AsyncEventChannel;

use rdma_verbs_sys as sys;

use crate::error::{Error, Result};

/// The process's librdmacm, loaded on first use.
fn rdmacm() -> Result<&'static sys::Rdmacm> {
    Ok(sys::rdmacm()?)
}

/// The remedy for an errno from an rdma_cm step, where one is known.
fn hint(verb: &str, errno: i32) -> Option<String> {
    Some(match errno {
        libc::ETIMEDOUT if verb.contains("resolve_addr") => "no answer from that address: \
             it is unreachable or no RDMA device has it (check `ip addr` and `rdma link` on \
             both hosts; the address must belong to an RDMA device's netdev)"
            .into(),
        libc::ETIMEDOUT if verb.contains("resolve_route") => {
            "no route to the peer's RDMA device (check `ip route` and the subnet manager)".into()
        }
        libc::EADDRNOTAVAIL | libc::ENODEV => "no RDMA device has this address: give the \
             device's netdev the address (`rdma link` shows which netdev each device uses; \
             `ip addr add`) or use one it has"
            .into(),
        libc::EADDRINUSE => "the port is in use by another rdma_cm listener: pick another \
             port or stop the other listener"
            .into(),
        libc::ENETUNREACH | libc::EHOSTUNREACH => {
            "no route to the address: check `ip route` and that the peer's netdev is up".into()
        }
        libc::ECONNREFUSED => "nobody listens on that address and port, or the server \
             rejected the connection"
            .into(),
        _ => return None,
    })
}

/// An rdma_cm call's failure: `ret` is librdmacm's return (`-1` with `errno`).
fn check(ret: i32, verb: &'static str) -> Result<()> {
    crate::error::check_errno(ret, verb).map_err(|e| explain(e, verb))
}

/// Adds the rdma_cm remedy to `error` from `verb`.
fn explain(error: Error, verb: &'static str) -> Error {
    match error.errno().and_then(|errno| hint(verb, errno)) {
        Some(text) => error.with_hint(text),
        None => error,
    }
}
