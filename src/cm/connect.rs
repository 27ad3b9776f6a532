//! Connecting a QP through rdma_cm: `rdma_connect(3)`, `rdma_accept(3)`,
//! `rdma_disconnect(3)`.

use std::time::Duration;

use rdma_verbs_sys as sys;

use super::check;
use super::event::{CmEventKind, RawEvent};
use super::id::{event_error, CmId};
use super::param::ConnParam;
use crate::error::{Error, InvalidInputKind, Result};
use crate::qp::{Init, QpState, QueuePair, Rc, Reset, Rts, Unknown};
use crate::try_twin::try_twin;

/// The QP states rdma_cm can connect from: [`Reset`] and [`Init`] (post receives in INIT
/// before connecting, so the peer's first sends find them).
pub trait BeforeConnect: QpState {}
impl BeforeConnect for Reset {}
impl BeforeConnect for Init {}

/// How the server refused a connection (a `REJECTED` event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rejection {
    /// The reject reason: over InfiniBand/RoCE the CM's reason code (28, "consumer
    /// defined", when the server's application called `rdma_reject`; 8 when nobody listens
    /// on the port); over iWARP a negated errno (siw: `-ECONNRESET`).
    pub reason: i32,
    /// The server's private data (over IB/RoCE the reject message's whole 148-byte area: the
    /// server's bytes, then zeros).
    pub private_data: Vec<u8>,
}

/// A failed connect or accept that hands the QP back ([`CmId::try_connect`],
/// [`CmId::try_accept`]), typed [`Unknown`]: its real state is whatever the CM left (ask
/// [`QueuePair::query_state`], then [`QueuePair::into_checked`] or [`QueuePair::reset`]).
///
/// It converts into an [`Error`] with `?` in a function returning [`Result`] (the QP is
/// then dropped); its message says only that the QP is handed back, its
/// [`source`](std::error::Error::source) is the [`Error`].
pub struct ConnectError<'res> {
    /// The queue pair that was to be connected.
    pub qp: QueuePair<'res, Unknown, Rc>,
    /// Why it failed.
    pub error: Error,
    /// The server's refusal, when it rejected the connection.
    pub rejection: Option<Rejection>,
}

impl std::fmt::Debug for ConnectError<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectError")
            .field("error", &self.error)
            .field("rejection", &self.rejection)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Display for ConnectError<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the connection was not established; the queue pair is handed back")
    }
}

impl std::error::Error for ConnectError<'_> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<Box<ConnectError<'_>>> for Error {
    fn from(e: Box<ConnectError<'_>>) -> Error {
        e.error
    }
}

/// `id->qp` set for the duration of a connect or accept, cleared on every path.
struct LentQp<'a, 'ch>(&'a CmId<'ch>);

impl<'a, 'ch> LentQp<'a, 'ch> {
    fn new(id: &'a CmId<'ch>, qp: *mut sys::ibv_qp) -> Self {
        // SAFETY: a live id, used from this thread only (`CmId` is not `Sync`); the QP is
        // alive until the guard is dropped (the caller holds it by value meanwhile).
        unsafe { (*id.as_raw()).qp = qp };
        LentQp(id)
    }
}

impl Drop for LentQp<'_, '_> {
    fn drop(&mut self) {
        // SAFETY: as in `new`; librdmacm no longer refers to the QP after this.
        unsafe { (*self.0.as_raw()).qp = std::ptr::null_mut() };
    }
}

/// An established connection's QP, and what the peer sent with it.
#[derive(Debug)]
pub struct Established<'res> {
    /// The connected queue pair, in RTS.
    pub qp: QueuePair<'res, Rts, Rc>,
    /// The private data of the peer's accept, on the client (over IB/RoCE the reply's whole
    /// 196-byte area); empty on the server.
    pub private_data: Vec<u8>,
}

/// A `try_` connect's or accept's result: the error is boxed (it is large, and rare).
pub(crate) type Connected<'res> = std::result::Result<Established<'res>, Box<ConnectError<'res>>>;

/// `rdma_connect` and `rdma_accept` as [`try_twin!`] methods of [`CmId`]: the two differ only
/// in the verb [`CmId::establish`] calls (and their docs).
macro_rules! establish_twin {
    (
        $(#[$attr:meta])*
        $plain:ident / $try_:ident calls $verb:ident
        try: $(#[$try_attr:meta])*
    ) => {
        try_twin! {
            $(#[$attr])*
            pub fn $plain / $try_<'res, S: BeforeConnect>(
                &self,
                qp: QueuePair<'res, S, Rc>,
                param: &ConnParam<'_>,
                timeout: Duration,
            ) -> Result<Established<'res>, Box<ConnectError<'res>>>
            try: $(#[$try_attr])*
            {
                self.establish(qp, param, timeout, stringify!($verb), self.lib().fns.$verb)
            }
        }
    };
}

impl CmId<'_> {
    establish_twin! {
        /// `rdma_connect(3)`—Connects `qp` (created from [`CmId::context`], after
        /// [`CmId::resolve_route`]) to the listener, sending `param`'s private data; waits at most
        /// `timeout` for `ESTABLISHED`. The CM moves the QP to RTS (see the module docs); the
        /// result holds it and the server's private data.
        ///
        /// # Errors
        ///
        /// [`Error::Verb`] with `ECONNREFUSED` when the server rejected (the reason in its
        /// hint), `ETIMEDOUT` when nothing came in time, the errno of `UNREACHABLE` /
        /// `CONNECT_ERROR`, or from `rdma_connect`; [`Error::InvalidInput`] for private data over
        /// 255 bytes, or when the QP is not in RTS afterwards. The QP is dropped;
        /// [`try_connect`](Self::try_connect) hands it back, with the server's
        /// [`Rejection`] and its private data.
        #[doc(alias = "rdma_connect")]
        connect / try_connect calls rdma_connect
        try:
        #[doc(alias = "rdma_connect")]
        /// [`connect`](Self::connect), handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// A boxed [`ConnectError`] with the QP, the error of [`connect`](Self::connect) and,
        /// when the server rejected, its [`Rejection`].
    }

    establish_twin! {
        /// `rdma_accept(3)`—Accepts the connect request this id came with (see
        /// [`CmId::get_request`]) on `qp` (created from this id's [`CmId::context`]), sending
        /// `param`'s private data; waits at most `timeout` for `ESTABLISHED`. The CM moves the
        /// QP to RTS (see the module docs).
        ///
        /// # Errors
        ///
        /// As [`CmId::connect`], with [`Error::Verb`] from `rdma_accept`; the QP is dropped.
        /// [`try_accept`](Self::try_accept) hands it back.
        #[doc(alias = "rdma_accept")]
        accept / try_accept calls rdma_accept
        try:
        #[doc(alias = "rdma_accept")]
        /// [`accept`](Self::accept), handing the QP back on failure.
        ///
        /// # Errors
        ///
        /// As [`CmId::try_connect`], with [`Error::Verb`] from `rdma_accept`.
    }

    fn establish<'res, S: BeforeConnect>(
        &self,
        qp: QueuePair<'res, S, Rc>,
        param: &ConnParam<'_>,
        timeout: Duration,
        verb: &'static str,
        call: EstablishFn,
    ) -> Connected<'res> {
        let lending = self.start_establish(qp, param, verb, call)?;
        let event = self.next_event(timeout, verb);
        conclude(lending, event, verb)
    }
}

/// `rdma_connect` or `rdma_accept`.
pub(crate) type EstablishFn =
    unsafe extern "C" fn(*mut sys::rdma_cm_id, *mut sys::rdma_conn_param) -> i32;

/// A QP lent to its id while a connect or accept waits for its event. The guard is the first
/// field, so it is dropped first: `id->qp` is cleared before the QP can be destroyed, however
/// the wait ends (a cancelled future drops this).
pub(crate) struct Lending<'a, 'ch, 'res, S: QpState> {
    lent: LentQp<'a, 'ch>,
    qp: QueuePair<'res, S, Rc>,
}

impl<'ch> CmId<'ch> {
    /// The first half of a connect or accept: checks `qp` and `param`, lends the QP to the id
    /// and calls `verb`. Its event is still to come; hand it to [`conclude`].
    pub(crate) fn start_establish<'a, 'res, S: BeforeConnect>(
        &'a self,
        qp: QueuePair<'res, S, Rc>,
        param: &ConnParam<'_>,
        verb: &'static str,
        call: EstablishFn,
    ) -> Result<Lending<'a, 'ch, 'res, S>, Box<ConnectError<'res>>> {
        let mut raw = match param.to_raw() {
            Ok(raw) => raw,
            Err(error) => return Err(failed(qp, error, None)),
        };
        let own_context = self.context().map(|c| c.as_raw()).ok();
        if own_context != Some(qp.pd().context().as_raw()) {
            let error = Error::invalid(
                InvalidInputKind::OtherContext,
                "the QP must be created from the rdma_cm id's own context (CmId::context)".into(),
            );
            return Err(failed(qp, error, None));
        }
        let lent = LentQp::new(self, qp.as_raw());
        // SAFETY: a live id with its QP lent; `raw` and its private data are valid for the
        // call (librdmacm copies them).
        if let Err(error) = check(unsafe { call(self.as_raw(), &mut raw) }, verb) {
            drop(lent);
            return Err(failed(qp, error, None));
        }
        Ok(Lending { lent, qp })
    }
}

/// A failed connect or accept, handing `qp` back.
pub(crate) fn failed<'res, S: QpState>(
    qp: QueuePair<'res, S, Rc>,
    error: Error,
    rejection: Option<Rejection>,
) -> Box<ConnectError<'res>> {
    Box::new(ConnectError { qp: qp.retype(), error, rejection })
}

/// The second half of a connect or accept: takes the QP back from the id and reads the
/// outcome from `event`, the id's event after `verb` (or the failure to get it).
pub(crate) fn conclude<'res, S: QpState>(
    lending: Lending<'_, '_, 'res, S>,
    event: Result<RawEvent>,
    verb: &'static str,
) -> Connected<'res> {
    let Lending { lent, qp } = lending;
    drop(lent);
    let event = match event {
        Ok(event) => event,
        Err(error) => return Err(failed(qp, error, None)),
    };
    match event.kind {
        // The CM reports ESTABLISHED only after the QP reached RTS: librdmacm moved it
        // (IB/RoCE; a failed move becomes CONNECT_ERROR), or the kernel did (iWARP).
        CmEventKind::ESTABLISHED => {
            let qp = qp.retype::<Rts>().learn_rd_atomic();
            Ok(Established { qp, private_data: event.private_data })
        }
        CmEventKind::REJECTED => {
            let rejection = Rejection { reason: event.status, private_data: event.private_data };
            let error = Error::Verb {
                verb,
                source: std::io::Error::from_raw_os_error(libc::ECONNREFUSED),
                hint: Some(format!(
                    "the server rejected the connection (reason {}); try_connect hands back \
                     its private data (ConnectError::rejection)",
                    rejection.reason
                )),
            };
            Err(failed(qp, error, Some(rejection)))
        }
        _ => Err(failed(qp, event_error(&event, verb), None)),
    }
}

impl CmId<'_> {
    /// `rdma_disconnect(3)`—Disconnects; the peer gets `DISCONNECTED`. This side's own
    /// `DISCONNECTED` follows (see [`CmId::wait_disconnected`]). The QP is not touched:
    /// drop or reset it afterwards.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `rdma_disconnect` (`EINVAL` when not connected).
    #[doc(alias = "rdma_disconnect")]
    pub fn disconnect(&self) -> Result<()> {
        // SAFETY: a live id; `id->qp` is NULL outside connect/accept.
        check(unsafe { (self.lib().fns.rdma_disconnect)(self.as_raw()) }, "rdma_disconnect")
    }

    /// Waits at most `timeout` for this id's `DISCONNECTED` event.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] with `ETIMEDOUT` when it did not come in time; another event's error.
    pub fn wait_disconnected(&self, timeout: Duration) -> Result<()> {
        self.expect(CmEventKind::DISCONNECTED, timeout, "rdma_get_cm_event (DISCONNECTED)")
            .map(drop)
    }
}
