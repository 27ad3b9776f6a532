//! rdma_cm events (`struct rdma_cm_event`, `rdma_get_cm_event(3)`).

use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use super::id::CmId;
use crate::c_enum::c_enum;

c_enum! {
    /// The kind of an rdma_cm event (`enum rdma_cm_event_type`, `rdma_get_cm_event(3)`).
    pub struct CmEventKind(u32) {
        /// `rdma_resolve_addr` finished.
        ADDR_RESOLVED = sys::RDMA_CM_EVENT_ADDR_RESOLVED => "ADDR_RESOLVED",
        /// `rdma_resolve_addr` failed; the status is the negated errno.
        ADDR_ERROR = sys::RDMA_CM_EVENT_ADDR_ERROR => "ADDR_ERROR",
        /// `rdma_resolve_route` finished.
        ROUTE_RESOLVED = sys::RDMA_CM_EVENT_ROUTE_RESOLVED => "ROUTE_RESOLVED",
        /// `rdma_resolve_route` failed; the status is the negated errno.
        ROUTE_ERROR = sys::RDMA_CM_EVENT_ROUTE_ERROR => "ROUTE_ERROR",
        /// A client connects to a listener: the event carries a new id.
        CONNECT_REQUEST = sys::RDMA_CM_EVENT_CONNECT_REQUEST => "CONNECT_REQUEST",
        /// The reply to a connect, for a QP librdmacm does not know (not delivered here:
        /// `connect` lends it the QP).
        CONNECT_RESPONSE = sys::RDMA_CM_EVENT_CONNECT_RESPONSE => "CONNECT_RESPONSE",
        /// Establishing the connection failed.
        CONNECT_ERROR = sys::RDMA_CM_EVENT_CONNECT_ERROR => "CONNECT_ERROR",
        /// The peer did not answer.
        UNREACHABLE = sys::RDMA_CM_EVENT_UNREACHABLE => "UNREACHABLE",
        /// The peer rejected the connection; the status is the reason.
        REJECTED = sys::RDMA_CM_EVENT_REJECTED => "REJECTED",
        /// The connection is up.
        ESTABLISHED = sys::RDMA_CM_EVENT_ESTABLISHED => "ESTABLISHED",
        /// The connection is down.
        DISCONNECTED = sys::RDMA_CM_EVENT_DISCONNECTED => "DISCONNECTED",
        /// The id's device went away: destroy the id.
        DEVICE_REMOVAL = sys::RDMA_CM_EVENT_DEVICE_REMOVAL => "DEVICE_REMOVAL",
        /// A multicast join finished.
        MULTICAST_JOIN = sys::RDMA_CM_EVENT_MULTICAST_JOIN => "MULTICAST_JOIN",
        /// A multicast join failed.
        MULTICAST_ERROR = sys::RDMA_CM_EVENT_MULTICAST_ERROR => "MULTICAST_ERROR",
        /// The local address changed.
        ADDR_CHANGE = sys::RDMA_CM_EVENT_ADDR_CHANGE => "ADDR_CHANGE",
        /// The QP of a finished connection left its time-wait.
        TIMEWAIT_EXIT = sys::RDMA_CM_EVENT_TIMEWAIT_EXIT => "TIMEWAIT_EXIT",
    }
}

/// A pointer to an `rdma_cm_id`, as an event names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct IdPtr(pub(crate) NonNull<sys::rdma_cm_id>);

// SAFETY: only compared, except for a connect request's new id, which the event owns alone
// (it is handed out once, as a `CmId`, or destroyed with the backlog) — and librdmacm's calls
// on an id may come from any thread.
unsafe impl Send for IdPtr {}

/// An event's contents, copied out before it was acknowledged.
#[derive(Debug)]
pub(crate) struct RawEvent {
    pub(crate) kind: CmEventKind,
    pub(crate) status: i32,
    /// The id the event is for (a connect request's: the new id, owned by the event).
    pub(crate) id: IdPtr,
    /// The listener of a connect request.
    pub(crate) listen_id: Option<IdPtr>,
    pub(crate) private_data: Vec<u8>,
    pub(crate) responder_resources: u8,
    pub(crate) initiator_depth: u8,
}

impl RawEvent {
    /// Copies `event` (which the caller then acknowledges).
    ///
    /// # Safety
    ///
    /// `event` must be an unacknowledged event from `rdma_get_cm_event`.
    pub(crate) unsafe fn copy(event: &sys::rdma_cm_event) -> Option<RawEvent> {
        let kind = CmEventKind(event.event);
        // Connection events carry `param.conn`; the others leave it zeroed or unused.
        let conn = match kind {
            CmEventKind::CONNECT_REQUEST
            | CmEventKind::CONNECT_RESPONSE
            | CmEventKind::REJECTED
            | CmEventKind::ESTABLISHED
            | CmEventKind::DISCONNECTED => {
                // SAFETY: for these kinds librdmacm fills the `conn` member.
                Some(unsafe { event.param.conn })
            }
            _ => None,
        };
        let private_data = match conn {
            Some(c) if !c.private_data.is_null() && c.private_data_len > 0 => {
                // SAFETY: librdmacm points at `private_data_len` bytes that live until the
                // event is acknowledged, which happens after this copy.
                unsafe {
                    std::slice::from_raw_parts(
                        c.private_data.cast::<u8>(),
                        c.private_data_len.into(),
                    )
                }
                .to_vec()
            }
            _ => Vec::new(),
        };
        Some(RawEvent {
            kind,
            status: event.status,
            id: IdPtr(NonNull::new(event.id)?),
            listen_id: NonNull::new(event.listen_id).map(IdPtr),
            private_data,
            responder_resources: conn.map_or(0, |c| c.responder_resources),
            initiator_depth: conn.map_or(0, |c| c.initiator_depth),
        })
    }
}

/// An rdma_cm event, already acknowledged: its contents were copied out.
#[derive(Debug)]
pub struct CmEvent<'ch> {
    pub(crate) raw: RawEvent,
    /// A connect request's new id, until taken.
    pub(crate) new_id: Option<CmId<'ch>>,
}

impl<'ch> CmEvent<'ch> {
    /// What happened.
    pub fn kind(&self) -> CmEventKind {
        self.raw.kind
    }

    /// The event's status: 0, a negated errno (`ADDR_ERROR`, `ROUTE_ERROR`,
    /// `CONNECT_ERROR`, `UNREACHABLE`), or for `REJECTED` the reject reason (over IB/RoCE the
    /// CM's reason code, 28 when the server's application rejected; over iWARP a
    /// negated errno, `-ECONNRESET` on siw).
    pub fn status(&self) -> i32 {
        self.raw.status
    }

    /// The peer's private data (see [`ConnParam`](super::ConnParam) for its length).
    pub fn private_data(&self) -> &[u8] {
        &self.raw.private_data
    }

    /// The raw id the event is for, to tell events of several ids apart.
    pub fn id_raw(&self) -> *mut sys::rdma_cm_id {
        self.raw.id.0.as_ptr()
    }

    /// A `CONNECT_REQUEST`'s new id (once; `None` for other kinds). Dropping the event
    /// without taking it destroys the id, which rejects the request.
    pub fn take_new_id(&mut self) -> Option<CmId<'ch>> {
        self.new_id.take()
    }
}
