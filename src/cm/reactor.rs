//! rdma_cm on tokio's reactor (features `rdmacm` and `tokio`): [`AsyncEventChannel`].
//!
//! # Safety
//!
//! The [`AsyncFd`](::tokio::io::unix::AsyncFd) watches the channel's descriptor without
//! owning it; the async channel borrows the [`EventChannel`], so the descriptor stays open
//! until the registration is dropped.

use std::net::SocketAddr;
use std::time::Duration;

use ::tokio::io::unix::AsyncFd;

use super::channel::EventChannel;
use super::connect::{conclude, failed, BeforeConnect, Connected, EstablishFn};
use super::event::{CmEvent, CmEventKind, RawEvent};
use super::id::{expected, CmId, ConnectRequest, RESOLVE_ADDR, RESOLVE_ROUTE};
use super::param::ConnParam;
use crate::error::{Error, InvalidInputKind, Result};
use crate::qp::{QueuePair, Rc};
use crate::reactor::{read_when_readable, register, Watched};

/// An [`EventChannel`] on tokio's reactor (features `rdmacm` and `tokio`): address and route
/// resolution, connect requests, connect and accept as futures, and the channel's events as a
/// stream.
///
/// It registers an [`EventChannel`]'s descriptor (non-blocking, so
/// `rdma_get_cm_event(3)` answers `EAGAIN` when nothing is pending) with tokio's
/// [`AsyncFd`](::tokio::io::unix::AsyncFd). Its methods start a step as the blocking API does
/// (`rdma_resolve_addr(3)`, `rdma_resolve_route(3)`, `rdma_connect(3)`, `rdma_accept(3)`)
/// and await the id's event instead of polling for it.
///
/// # One waiter per channel
///
/// Events of every id on a channel arrive on its one descriptor, so each method takes the
/// async channel by `&mut self`: one future at a time reads the descriptor, and nobody else
/// can drain it between that future's last read and its wait for readiness (which would
/// leave it asleep with its event in the backlog). Events of other ids that it reads
/// meanwhile join the channel's backlog, in order, for their own steps or for
/// [`AsyncEventChannel::next`]. For connections that progress concurrently, give each its
/// own [`EventChannel`] and async channel; while an async channel exists, wait for its
/// channel's events through it only (a blocking wait on another thread may take an event this
/// side then waits for until the next one arrives).
///
/// # Cancel-safety
///
/// Every event is acknowledged (`rdma_ack_cm_event(3)`) by the call that reads it, and an
/// event is taken only by the poll that returns it: no await point holds one. Dropping a
/// future therefore loses no event and leaves none unacknowledged, so dropping the id
/// (`rdma_destroy_id(3)`, which waits for its events' acknowledgements) never hangs.
///
/// A cancelled [`get_request`](AsyncEventChannel::get_request) or
/// [`next`](AsyncEventChannel::next) has taken nothing: the next call gets the event. A
/// cancelled resolve, connect or accept has started its step: the id's event still comes,
/// and joins the backlog (or is what [`next`](AsyncEventChannel::next) returns). A cancelled
/// connect or accept clears `id->qp` first and then destroys the QP it owned, so librdmacm
/// never sees a destroyed QP. Drop such an id — its late events are forgotten with it, and
/// the CM tears down its half-open connection — and start again with a new one; the channel
/// itself keeps working.
///
/// # Timeouts
///
/// The resolutions take the CM's timeout (milliseconds), after which the CM ends them with
/// `ADDR_ERROR`/`ROUTE_ERROR`. A connect or accept ends when the CM reports the outcome,
/// which it does after its own retries at the latest (`UNREACHABLE`, `REJECTED`,
/// `CONNECT_ERROR`). [`get_request`](AsyncEventChannel::get_request) and
/// [`next`](AsyncEventChannel::next) wait, like a listener's accept, until an event comes.
/// For a tighter bound, wrap any of them in `tokio::time::timeout`: they are cancel-safe.
///
/// ```no_run
/// use std::net::SocketAddr;
/// use rdma_verbs::cm::{AsyncEventChannel, CmId, ConnParam, EventChannel, PortSpace};
/// use rdma_verbs::QpInitAttr;
///
/// # async fn f() -> rdma_verbs::Result<()> {
/// let server: SocketAddr = "192.0.2.1:7471".parse().unwrap();
/// let channel = EventChannel::new()?;
/// let mut cm = AsyncEventChannel::new(&channel)?;
/// let id = CmId::new(&channel, PortSpace::TCP)?;
/// let timeout = std::time::Duration::from_secs(2);
/// cm.resolve_addr(&id, None, server, timeout).await?;
/// cm.resolve_route(&id, timeout).await?;
/// let ctx = id.context()?;
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(64)?;
/// let qp = pd.create_rc_qp(&QpInitAttr::new(&cq))?;
/// let up = cm.connect(&id, qp, &ConnParam::with_private_data(b"hello")).await?;
/// // ... post work on `up.qp` ...
/// # Ok(()) }
/// ```
#[must_use = "the channel is deregistered from the reactor when dropped"]
pub struct AsyncEventChannel<'ch> {
    channel: &'ch EventChannel,
    fd: AsyncFd<Watched>,
}

impl<'ch> AsyncEventChannel<'ch> {
    /// Registers `channel`'s descriptor with the current tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::NoRuntime`] outside a tokio runtime; [`Error::Verb`] when the descriptor
    /// cannot be made non-blocking, or the reactor refuses it (one channel can be registered
    /// once at a time).
    ///
    /// # Panics
    ///
    /// Inside a runtime built without I/O (tokio's own panic).
    pub fn new(channel: &'ch EventChannel) -> Result<Self> {
        channel.non_blocking()?;
        // SAFETY: the channel owns its descriptor until it is destroyed, and `self` borrows
        // it for as long as the registration lives.
        let fd = unsafe { register(channel.fd(), "an rdma_cm event channel") }?;
        Ok(AsyncEventChannel { channel, fd })
    }

    /// The channel.
    pub fn channel(&self) -> &'ch EventChannel {
        self.channel
    }

    /// `rdma_get_cm_event(3)`—The next event of any id on the channel (the backlog's oldest
    /// first), already acknowledged. Cancel-safe.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `rdma_get_cm_event` or the reactor.
    #[doc(alias = "rdma_get_cm_event")]
    pub async fn next(&mut self) -> Result<CmEvent<'ch>> {
        let raw = self.take(|_| true).await?;
        Ok(self.channel.wrap(raw))
    }

    /// `rdma_resolve_addr(3)`, awaited: as [`CmId::resolve_addr`], which `timeout` is the
    /// CM's for; the future ends with the CM's event.
    ///
    /// # Errors
    ///
    /// As [`CmId::resolve_addr`]; [`Error::InvalidInput`] ([`InvalidInputKind::OtherChannel`])
    /// when `id` is on another channel.
    #[doc(alias = "rdma_resolve_addr")]
    pub async fn resolve_addr(
        &mut self,
        id: &CmId<'ch>,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        self.check_channel(id)?;
        id.start_resolve_addr(src, dst, timeout)?;
        let event = self.take(id.own_event()).await?;
        expected(event, CmEventKind::ADDR_RESOLVED, RESOLVE_ADDR).map(drop)
    }

    /// `rdma_resolve_route(3)`, awaited: as [`CmId::resolve_route`], which `timeout` is the
    /// CM's for; the future ends with the CM's event.
    ///
    /// # Errors
    ///
    /// As [`CmId::resolve_route`]; [`Error::InvalidInput`] when `id` is on another channel.
    #[doc(alias = "rdma_resolve_route")]
    pub async fn resolve_route(&mut self, id: &CmId<'ch>, timeout: Duration) -> Result<()> {
        self.check_channel(id)?;
        id.start_resolve_route(timeout)?;
        let event = self.take(id.own_event()).await?;
        expected(event, CmEventKind::ROUTE_RESOLVED, RESOLVE_ROUTE).map(drop)
    }

    /// The next connect request to `listener` (see [`CmId::get_request`]), awaited until one
    /// comes. Cancel-safe: a request is taken only by the call that returns it.
    ///
    /// # Errors
    ///
    /// As [`CmId::get_request`]; [`Error::InvalidInput`] when `listener` is on another
    /// channel.
    pub async fn get_request(&mut self, listener: &CmId<'ch>) -> Result<ConnectRequest<'ch>> {
        self.check_channel(listener)?;
        let raw = self.take(listener.listener_event()).await?;
        listener.request(raw)
    }

    /// `rdma_connect(3)`, awaited until the CM reports the outcome: as
    /// [`CmId::try_connect`] without its timeout. Dropping the future destroys `qp` (see
    /// [cancel-safety](Self#cancel-safety)); `?` turns the error into an [`Error`].
    ///
    /// # Errors
    ///
    /// As [`CmId::try_connect`]; [`Error::InvalidInput`] when `id` is on another channel.
    #[doc(alias = "rdma_connect")]
    pub async fn connect<'res, S: BeforeConnect>(
        &mut self,
        id: &CmId<'ch>,
        qp: QueuePair<'res, S, Rc>,
        param: &ConnParam<'_>,
    ) -> Connected<'res> {
        self.establish(id, qp, param, "rdma_connect", id.lib().fns.rdma_connect).await
    }

    /// `rdma_accept(3)`, awaited until the CM reports the outcome: as [`CmId::try_accept`]
    /// without its timeout, on a [`ConnectRequest`]'s id. Dropping the future destroys `qp`
    /// (see [cancel-safety](Self#cancel-safety)); `?` turns the error into an [`Error`].
    ///
    /// # Errors
    ///
    /// As [`CmId::try_accept`]; [`Error::InvalidInput`] when `id` is on another channel.
    #[doc(alias = "rdma_accept")]
    pub async fn accept<'res, S: BeforeConnect>(
        &mut self,
        id: &CmId<'ch>,
        qp: QueuePair<'res, S, Rc>,
        param: &ConnParam<'_>,
    ) -> Connected<'res> {
        self.establish(id, qp, param, "rdma_accept", id.lib().fns.rdma_accept).await
    }

    async fn establish<'res, S: BeforeConnect>(
        &mut self,
        id: &CmId<'ch>,
        qp: QueuePair<'res, S, Rc>,
        param: &ConnParam<'_>,
        verb: &'static str,
        call: EstablishFn,
    ) -> Connected<'res> {
        if let Err(error) = self.check_channel(id) {
            return Err(failed(qp, error, None));
        }
        // Held across the await: dropped, it clears `id->qp` before destroying the QP.
        let lending = id.start_establish(qp, param, verb, call)?;
        let event = self.take(id.own_event()).await;
        conclude(lending, event, verb)
    }

    /// The first event `wanted` accepts, from the backlog or the descriptor, awaiting the
    /// reactor while there is none.
    async fn take(&mut self, wanted: impl Fn(&RawEvent) -> bool) -> Result<RawEvent> {
        // Again at each wait, as the blocking waits do: a duplicate may have cleared it.
        self.channel.non_blocking()?;
        if let Some(event) = self.channel.take(&wanted)? {
            return Ok(event);
        }
        read_when_readable(&self.fd, || self.channel.take(&wanted)).await
    }

    /// Refuses an id of another channel, whose events would never arrive here.
    fn check_channel(&self, id: &CmId<'ch>) -> Result<()> {
        if std::ptr::eq(id.channel(), self.channel) {
            return Ok(());
        }
        Err(Error::invalid(
            InvalidInputKind::OtherChannel,
            "this rdma_cm id's events arrive on another event channel: await its steps on \
             an AsyncEventChannel of the channel it was created on (CmId::channel)"
                .into(),
        ))
    }
}

impl std::fmt::Debug for AsyncEventChannel<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncEventChannel").field("channel", self.channel).finish()
    }
}
