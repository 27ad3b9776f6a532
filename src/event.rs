//! Asynchronous events of a device: ports going up or down, QPs, CQs and SRQs in error, SRQ
//! limits reached (`ibv_get_async_event(3)`), as typed values.
#![allow(unsafe_code)]
//! # Safety
//!
//! An event read with `ibv_get_async_event` is decoded, then acknowledged with
//! `ibv_ack_async_event` before the call that read it returns, so none is ever left
//! unacknowledged: `ibv_destroy_qp`, `ibv_destroy_cq` and `ibv_destroy_srq` wait until every
//! event of their object has been acknowledged, and would otherwise block forever. The one
//! pointer dereferenced is a QP event's `qp` (for its number), before the acknowledgement,
//! while that wait keeps the QP alive. The context's `async_fd` is switched to `O_NONBLOCK`
//! when the first stream is made, so reading never blocks.

// Design notes. Events are copied out and acknowledged at once instead of handing the raw
// event to the caller: an event held across calls would block a destroy of its object, in
// this thread or another, for as long as the caller keeps it. So CQ and SRQ events carry an
// identity (the object's address) to compare with the caller's objects, not a reference.

use std::os::fd::{AsFd, BorrowedFd};
use std::time::Duration;

use rdma_verbs_sys as sys;

use crate::c_enum::c_enum;
use crate::context::Context;
use crate::cq::CompletionQueue;
use crate::endpoint::Qpn;
use crate::error::{check_errno, Result};
use crate::fd;
use crate::srq::SharedReceiveQueue;

c_enum! {
    /// The type of an asynchronous event (`enum ibv_event_type`).
    pub struct AsyncEventType(u32) {
        /// `IBV_EVENT_CQ_ERR`
        CQ_ERR = sys::IBV_EVENT_CQ_ERR => "CQ error",
        /// `IBV_EVENT_QP_FATAL`
        QP_FATAL = sys::IBV_EVENT_QP_FATAL => "QP fatal error",
        /// `IBV_EVENT_QP_REQ_ERR`
        QP_REQ_ERR = sys::IBV_EVENT_QP_REQ_ERR => "QP invalid request",
        /// `IBV_EVENT_QP_ACCESS_ERR`
        QP_ACCESS_ERR = sys::IBV_EVENT_QP_ACCESS_ERR => "QP access error",
        /// `IBV_EVENT_COMM_EST`
        COMM_EST = sys::IBV_EVENT_COMM_EST => "communication established",
        /// `IBV_EVENT_SQ_DRAINED`
        SQ_DRAINED = sys::IBV_EVENT_SQ_DRAINED => "send queue drained",
        /// `IBV_EVENT_PATH_MIG`
        PATH_MIG = sys::IBV_EVENT_PATH_MIG => "path migrated",
        /// `IBV_EVENT_PATH_MIG_ERR`
        PATH_MIG_ERR = sys::IBV_EVENT_PATH_MIG_ERR => "path migration error",
        /// `IBV_EVENT_DEVICE_FATAL`
        DEVICE_FATAL = sys::IBV_EVENT_DEVICE_FATAL => "device fatal error",
        /// `IBV_EVENT_PORT_ACTIVE`
        PORT_ACTIVE = sys::IBV_EVENT_PORT_ACTIVE => "port active",
        /// `IBV_EVENT_PORT_ERR`
        PORT_ERR = sys::IBV_EVENT_PORT_ERR => "port error",
        /// `IBV_EVENT_LID_CHANGE`
        LID_CHANGE = sys::IBV_EVENT_LID_CHANGE => "LID change",
        /// `IBV_EVENT_PKEY_CHANGE`
        PKEY_CHANGE = sys::IBV_EVENT_PKEY_CHANGE => "P_Key change",
        /// `IBV_EVENT_SM_CHANGE`
        SM_CHANGE = sys::IBV_EVENT_SM_CHANGE => "SM change",
        /// `IBV_EVENT_SRQ_ERR`
        SRQ_ERR = sys::IBV_EVENT_SRQ_ERR => "SRQ error",
        /// `IBV_EVENT_SRQ_LIMIT_REACHED`
        SRQ_LIMIT_REACHED = sys::IBV_EVENT_SRQ_LIMIT_REACHED => "SRQ limit reached",
        /// `IBV_EVENT_QP_LAST_WQE_REACHED`
        QP_LAST_WQE_REACHED = sys::IBV_EVENT_QP_LAST_WQE_REACHED => "last WQE reached",
        /// `IBV_EVENT_CLIENT_REREGISTER`
        CLIENT_REREGISTER = sys::IBV_EVENT_CLIENT_REREGISTER => "client reregister",
        /// `IBV_EVENT_GID_CHANGE`
        GID_CHANGE = sys::IBV_EVENT_GID_CHANGE => "GID change",
        /// `IBV_EVENT_WQ_FATAL`
        WQ_FATAL = sys::IBV_EVENT_WQ_FATAL => "WQ fatal error",
        /// `IBV_EVENT_DEVICE_SPEED_CHANGE` (rdma-core v62)
        DEVICE_SPEED_CHANGE = sys::IBV_EVENT_DEVICE_SPEED_CHANGE => "device speed change",
    }
}

/// Which completion queue an [`AsyncEvent`] names: equal to [`CompletionQueue::id`] of that
/// CQ. It is the CQ's address, so it is unique among live CQs only: a CQ created after
/// another was destroyed may get the same id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CqId(usize);

/// Which shared receive queue an [`AsyncEvent`] names: equal to [`SharedReceiveQueue::id`]
/// of that SRQ (unique among live SRQs, as [`CqId`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SrqId(usize);

impl CompletionQueue<'_> {
    /// This CQ's identity, to compare with the one an [`AsyncEvent::CqError`] names.
    pub fn id(&self) -> CqId {
        CqId(self.as_raw() as usize)
    }
}

impl SharedReceiveQueue<'_> {
    /// This SRQ's identity, to compare with the one an [`AsyncEvent::SrqLimitReached`] or
    /// [`AsyncEvent::SrqError`] names.
    pub fn id(&self) -> SrqId {
        SrqId(self.as_raw() as usize)
    }
}

/// An asynchronous event of a device (`struct ibv_async_event`), with the object it names:
/// a QP by number, a CQ or SRQ by identity, a port by number (from 1). See
/// `ibv_get_async_event(3)` for what each means and what to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AsyncEvent {
    /// `IBV_EVENT_CQ_ERR`: the CQ overran (more completions than entries) or broke; its QPs
    /// are in error. Destroy and recreate them. Reading it also makes the CQ's next poll that
    /// finds nothing fail with [`Error::CompletionQueueOverrun`](crate::Error::CompletionQueueOverrun).
    CqError(CqId),
    /// `IBV_EVENT_QP_FATAL`: an error the QP's completions could not report; it is in error.
    QpFatal(Qpn),
    /// `IBV_EVENT_QP_REQ_ERR`: the peer saw a transport protocol violation from this QP.
    QpRequestError(Qpn),
    /// `IBV_EVENT_QP_ACCESS_ERR`: a request arriving at this QP broke its access rules.
    QpAccessError(Qpn),
    /// `IBV_EVENT_COMM_EST`: a QP in RTR received its first packet.
    CommunicationEstablished(Qpn),
    /// `IBV_EVENT_SQ_DRAINED`: a QP moved to SQD has no outstanding send WR left.
    SqDrained(Qpn),
    /// `IBV_EVENT_PATH_MIG`: the QP switched to its alternate path.
    PathMigrated(Qpn),
    /// `IBV_EVENT_PATH_MIG_ERR`: the QP could not switch to its alternate path.
    PathMigrationError(Qpn),
    /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP on an SRQ in error consumed its last receive.
    LastWqeReached(Qpn),
    /// `IBV_EVENT_SRQ_ERR`: the SRQ broke; its QPs are in error.
    SrqError(SrqId),
    /// `IBV_EVENT_SRQ_LIMIT_REACHED`: fewer receives than the armed limit remain
    /// ([`SharedReceiveQueue::arm_limit`]); the limit is disarmed.
    SrqLimitReached(SrqId),
    /// `IBV_EVENT_PORT_ACTIVE`: the port became active.
    PortActive(u8),
    /// `IBV_EVENT_PORT_ERR`: the port left the active state (link down).
    PortError(u8),
    /// `IBV_EVENT_LID_CHANGE`: the port's LID changed.
    LidChange(u8),
    /// `IBV_EVENT_PKEY_CHANGE`: the port's P_Key table changed.
    PKeyChange(u8),
    /// `IBV_EVENT_SM_CHANGE`: the port's subnet manager changed.
    SmChange(u8),
    /// `IBV_EVENT_GID_CHANGE`: the port's GID table changed (on RoCE: an IP address came or
    /// went).
    GidChange(u8),
    /// `IBV_EVENT_CLIENT_REREGISTER`: the subnet manager asks for multicast and service
    /// registrations to be made again on the port.
    ClientReregister(u8),
    /// `IBV_EVENT_DEVICE_FATAL`: the device is unusable; close every object and the context.
    DeviceFatal,
    /// `IBV_EVENT_DEVICE_SPEED_CHANGE` (rdma-core v62): the speed of one or more ports
    /// changed (configuration, link state, a bond's member); read it again with
    /// [`Context::query_port_speed`].
    DeviceSpeedChange,
    /// A type this build does not decode: newer than its headers, or `IBV_EVENT_WQ_FATAL`
    /// (work queues are not wrapped).
    Unknown(AsyncEventType),
}

impl AsyncEvent {
    /// Decodes `raw`.
    ///
    /// # Safety
    ///
    /// `raw` must be an event read by `ibv_get_async_event` and not yet acknowledged (so a
    /// QP event's `qp` is a live QP).
    unsafe fn from_raw(raw: &sys::ibv_async_event) -> AsyncEvent {
        let kind = AsyncEventType(raw.event_type);
        // Each closure reads the union member libibverbs sets for `kind`
        // (ibv_get_async_event(3)), and is called only for such a kind.
        let element = &raw.element;
        let qpn = || {
            // SAFETY: a QP event names a QP that ibv_destroy_qp keeps alive until the event
            // is acknowledged, which the caller has not done yet; a plain field read.
            Qpn::from_low_bits(unsafe { (*element.qp).qp_num })
        };
        // SAFETY: a CQ event's member is `cq`; only its address is kept.
        let cq = || CqId(unsafe { element.cq } as usize);
        // SAFETY: an SRQ event's member is `srq`; only its address is kept.
        let srq = || SrqId(unsafe { element.srq } as usize);
        // SAFETY: a port event's member is `port_num`, an int; ports are numbered from 1.
        let port = || unsafe { element.port_num } as u8;
        match kind {
            AsyncEventType::CQ_ERR => AsyncEvent::CqError(cq()),
            AsyncEventType::QP_FATAL => AsyncEvent::QpFatal(qpn()),
            AsyncEventType::QP_REQ_ERR => AsyncEvent::QpRequestError(qpn()),
            AsyncEventType::QP_ACCESS_ERR => AsyncEvent::QpAccessError(qpn()),
            AsyncEventType::COMM_EST => AsyncEvent::CommunicationEstablished(qpn()),
            AsyncEventType::SQ_DRAINED => AsyncEvent::SqDrained(qpn()),
            AsyncEventType::PATH_MIG => AsyncEvent::PathMigrated(qpn()),
            AsyncEventType::PATH_MIG_ERR => AsyncEvent::PathMigrationError(qpn()),
            AsyncEventType::QP_LAST_WQE_REACHED => AsyncEvent::LastWqeReached(qpn()),
            AsyncEventType::SRQ_ERR => AsyncEvent::SrqError(srq()),
            AsyncEventType::SRQ_LIMIT_REACHED => AsyncEvent::SrqLimitReached(srq()),
            AsyncEventType::PORT_ACTIVE => AsyncEvent::PortActive(port()),
            AsyncEventType::PORT_ERR => AsyncEvent::PortError(port()),
            AsyncEventType::LID_CHANGE => AsyncEvent::LidChange(port()),
            AsyncEventType::PKEY_CHANGE => AsyncEvent::PKeyChange(port()),
            AsyncEventType::SM_CHANGE => AsyncEvent::SmChange(port()),
            AsyncEventType::GID_CHANGE => AsyncEvent::GidChange(port()),
            AsyncEventType::CLIENT_REREGISTER => AsyncEvent::ClientReregister(port()),
            AsyncEventType::DEVICE_FATAL => AsyncEvent::DeviceFatal,
            AsyncEventType::DEVICE_SPEED_CHANGE => AsyncEvent::DeviceSpeedChange,
            other => AsyncEvent::Unknown(other),
        }
    }

    /// The event's type.
    pub fn event_type(&self) -> AsyncEventType {
        match self {
            AsyncEvent::CqError(_) => AsyncEventType::CQ_ERR,
            AsyncEvent::QpFatal(_) => AsyncEventType::QP_FATAL,
            AsyncEvent::QpRequestError(_) => AsyncEventType::QP_REQ_ERR,
            AsyncEvent::QpAccessError(_) => AsyncEventType::QP_ACCESS_ERR,
            AsyncEvent::CommunicationEstablished(_) => AsyncEventType::COMM_EST,
            AsyncEvent::SqDrained(_) => AsyncEventType::SQ_DRAINED,
            AsyncEvent::PathMigrated(_) => AsyncEventType::PATH_MIG,
            AsyncEvent::PathMigrationError(_) => AsyncEventType::PATH_MIG_ERR,
            AsyncEvent::LastWqeReached(_) => AsyncEventType::QP_LAST_WQE_REACHED,
            AsyncEvent::SrqError(_) => AsyncEventType::SRQ_ERR,
            AsyncEvent::SrqLimitReached(_) => AsyncEventType::SRQ_LIMIT_REACHED,
            AsyncEvent::PortActive(_) => AsyncEventType::PORT_ACTIVE,
            AsyncEvent::PortError(_) => AsyncEventType::PORT_ERR,
            AsyncEvent::LidChange(_) => AsyncEventType::LID_CHANGE,
            AsyncEvent::PKeyChange(_) => AsyncEventType::PKEY_CHANGE,
            AsyncEvent::SmChange(_) => AsyncEventType::SM_CHANGE,
            AsyncEvent::GidChange(_) => AsyncEventType::GID_CHANGE,
            AsyncEvent::ClientReregister(_) => AsyncEventType::CLIENT_REREGISTER,
            AsyncEvent::DeviceFatal => AsyncEventType::DEVICE_FATAL,
            AsyncEvent::DeviceSpeedChange => AsyncEventType::DEVICE_SPEED_CHANGE,
            AsyncEvent::Unknown(kind) => *kind,
        }
    }
}

impl std::fmt::Display for AsyncEvent {
    /// The type, then the object: `QP fatal error on QP 0x000011`, `port active on port 1`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = self.event_type();
        match self {
            AsyncEvent::CqError(CqId(id)) => write!(f, "{kind} on CQ {id:#x}"),
            AsyncEvent::SrqError(SrqId(id)) | AsyncEvent::SrqLimitReached(SrqId(id)) => {
                write!(f, "{kind} on SRQ {id:#x}")
            }
            AsyncEvent::QpFatal(qpn)
            | AsyncEvent::QpRequestError(qpn)
            | AsyncEvent::QpAccessError(qpn)
            | AsyncEvent::CommunicationEstablished(qpn)
            | AsyncEvent::SqDrained(qpn)
            | AsyncEvent::PathMigrated(qpn)
            | AsyncEvent::PathMigrationError(qpn)
            | AsyncEvent::LastWqeReached(qpn) => write!(f, "{kind} on QP {:#08x}", qpn.get()),
            AsyncEvent::PortActive(port)
            | AsyncEvent::PortError(port)
            | AsyncEvent::LidChange(port)
            | AsyncEvent::PKeyChange(port)
            | AsyncEvent::SmChange(port)
            | AsyncEvent::GidChange(port)
            | AsyncEvent::ClientReregister(port) => write!(f, "{kind} on port {port}"),
            AsyncEvent::DeviceFatal | AsyncEvent::DeviceSpeedChange | AsyncEvent::Unknown(_) => {
                write!(f, "{kind}")
            }
        }
    }
}

/// The asynchronous events of a [`Context`], in the order the device raised them
/// (`ibv_get_async_event(3)`): each is decoded and acknowledged (`ibv_ack_async_event(3)`)
/// before it is returned, so none can hold up the destruction of its object.
///
/// Events are per context, not per stream: two streams of one context share them, each
/// event going to one of them. Made by [`Context::async_events`].
///
/// ```no_run
/// use std::time::Duration;
/// use rdma_verbs::*;
///
/// # fn main() -> Result<()> {
/// let ctx = Context::open("rxe0")?;
/// let events = ctx.async_events()?;
/// while let Some(event) = events.next(Some(Duration::from_secs(1)))? {
///     match event {
///         AsyncEvent::PortError(port) => eprintln!("port {port} went down"),
///         AsyncEvent::QpFatal(qpn) => eprintln!("QP {qpn:?} is in error: recreate it"),
///         other => eprintln!("{other}"),
///     }
/// }
/// # Ok(()) }
/// ```
#[must_use = "the events are read only through this stream"]
pub struct AsyncEvents<'ctx> {
    ctx: &'ctx Context,
}

impl Context {
    /// The stream of this context's asynchronous events. Sets `O_NONBLOCK` on the context's
    /// `async_fd` (nothing in libibverbs but `ibv_get_async_event` reads it; C code sharing
    /// this context and calling that function would now see `EAGAIN` instead of sleeping), and
    /// every read of the stream sets it again if the program cleared it meanwhile.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb) from `fcntl` when the flag cannot be set.
    #[doc(alias = "ibv_get_async_event")]
    pub fn async_events(&self) -> Result<AsyncEvents<'_>> {
        let events = AsyncEvents { ctx: self };
        fd::set_nonblocking(events.as_fd(), "the context's async events")?;
        Ok(events)
    }
}

impl<'ctx> AsyncEvents<'ctx> {
    /// The next event, sleeping until one comes or `timeout` passes (`None`: no limit).
    /// Returns `None` only when `timeout` passed, which it never outlasts: its reads are
    /// those of [`try_next`](Self::try_next), which never block. Signals do not end the wait
    /// early.
    ///
    /// # Errors
    ///
    /// As [`try_next`](Self::try_next), and [`Error::Verb`](crate::Error::Verb) from `ppoll`.
    #[doc(alias = "ibv_get_async_event")]
    pub fn next(&self, timeout: Option<Duration>) -> Result<Option<AsyncEvent>> {
        let mut left = fd::TimeLeft::new(timeout);
        loop {
            if let Some(event) = self.try_next()? {
                return Ok(Some(event));
            }
            if !fd::wait_readable(self.as_fd(), &mut left, "the context's async events")? {
                return Ok(None);
            }
        }
    }

    /// The next event if one is pending, without blocking. For event loops that watch the
    /// descriptor themselves ([`AsFd`]). Makes sure the descriptor is non-blocking before it
    /// reads (`fcntl(2)`), asking the kernel each time: the program may have cleared
    /// `O_NONBLOCK` on a duplicate of it, which shares the flag.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb) from `ibv_get_async_event` (`EIO` once the device
    /// is gone), or from the `fcntl` that sets `O_NONBLOCK`.
    #[doc(alias = "ibv_get_async_event")]
    #[doc(alias = "ibv_ack_async_event")]
    pub fn try_next(&self) -> Result<Option<AsyncEvent>> {
        fd::set_nonblocking(self.as_fd(), "the context's async events")?;
        let fns = &self.ctx.library().fns;
        loop {
            let mut raw = std::mem::MaybeUninit::<sys::ibv_async_event>::uninit();
            // SAFETY: a live context and a writable event; the descriptor is non-blocking (just
            // made sure of).
            let ret = unsafe { (fns.ibv_get_async_event)(self.ctx.as_raw(), raw.as_mut_ptr()) };
            match check_errno(ret, "ibv_get_async_event") {
                Err(e) if e.errno() == Some(libc::EAGAIN) => return Ok(None),
                Err(e) if e.errno() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e),
                Ok(()) => {}
            }
            // SAFETY: ibv_get_async_event returned 0, so it filled the event.
            let raw = unsafe { raw.assume_init_mut() };
            // SAFETY: read and not yet acknowledged: a QP it names is still alive.
            let event = unsafe { AsyncEvent::from_raw(raw) };
            // SAFETY: acknowledges the event just read, once; nothing of it is used after.
            unsafe { (fns.ibv_ack_async_event)(raw) };
            if let AsyncEvent::CqError(cq) = event {
                self.ctx.cq_errors().note(cq);
            }
            return Ok(Some(event));
        }
    }

    /// The context.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }
}

impl AsFd for AsyncEvents<'_> {
    /// The context's `async_fd` (non-blocking), for readiness only: `poll`/`epoll` it, then
    /// call [`try_next`](AsyncEvents::try_next).
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: the context owns `async_fd` until ibv_close_device, which needs the
        // context this stream borrows.
        unsafe { BorrowedFd::borrow_raw((*self.ctx.as_raw()).async_fd) }
    }
}

impl std::fmt::Debug for AsyncEvents<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncEvents")
            .field("device", &self.ctx.name())
            .field("fd", &self.as_fd())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_type_decodes_to_its_own_variant_and_back() {
        let mut qp = sys::ibv_qp { qp_num: 0x42, ..Default::default() };
        for raw in 0..=40u32 {
            let kind = AsyncEventType(raw);
            let event = sys::ibv_async_event {
                element: sys::ibv_async_event__bindgen_ty_1 { qp: &mut qp },
                event_type: raw,
            };
            // SAFETY: whichever member a type reads, the element is valid for it: a live QP,
            // and an address (only kept) for CQs and SRQs. The port number shares the
            // pointer's bytes, so it is not checked here.
            let event = unsafe { AsyncEvent::from_raw(&event) };
            assert_eq!(event.event_type(), kind, "{event}");
            let unknown = matches!(event, AsyncEvent::Unknown(_));
            let undecoded = kind.name().is_none() || kind == AsyncEventType::WQ_FATAL;
            assert_eq!(unknown, undecoded, "{kind}");
            if event.to_string().contains(" on QP ") {
                assert!(event.to_string().ends_with("on QP 0x000042"), "{event}");
            }
        }
    }
}
