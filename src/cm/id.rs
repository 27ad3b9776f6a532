//! The rdma_cm identifier (`struct rdma_cm_id`, `rdma_create_id(3)`).

use std::cell::{Cell, OnceCell};
use std::ffi::CStr;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::net::SocketAddr;
use std::ptr::NonNull;
use std::time::Duration;

use rdma_verbs_sys as sys;

use super::channel::EventChannel;
use super::event::{CmEventKind, IdPtr, RawEvent};
use super::{check, explain};
use crate::c_enum::c_enum;
use crate::context::Context;
use crate::error::{Error, InvalidInputKind, Result};

/// Extra time a wait allows beyond the CM's own timeout, which should end it with an event.
const WAIT_SLACK: Duration = Duration::from_secs(5);

c_enum! {
    /// An rdma_cm port space (`enum rdma_port_space`, `rdma_create_id(3)`).
    pub struct PortSpace(u32) {
        /// Reliable connected QPs (RC), like TCP.
        TCP = sys::RDMA_PS_TCP => "TCP",
        /// Unreliable datagram QPs (UD), like UDP.
        UDP = sys::RDMA_PS_UDP => "UDP",
        /// IPoIB's port space.
        IPOIB = sys::RDMA_PS_IPOIB => "IPOIB",
        /// Any QP type (InfiniBand service IDs).
        IB = sys::RDMA_PS_IB => "IB",
    }
}

/// An rdma_cm identifier (`struct rdma_cm_id`): like a socket, it resolves, listens,
/// connects and accepts. Its events arrive on the [`EventChannel`] it borrows.
///
/// Dropping it runs `rdma_destroy_id(3)`, which cannot hang: every event is acknowledged
/// as it is read.
#[must_use = "the rdma_cm id is destroyed when dropped"]
pub struct CmId<'ch> {
    raw: NonNull<sys::rdma_cm_id>,
    channel: &'ch EventChannel,
    /// `id->verbs` as a context that is never closed by us (see the module docs).
    ctx: OnceCell<ManuallyDrop<Context>>,
    /// Not `Sync`: `connect`/`accept` write `id->qp` (see the module docs).
    _not_sync: PhantomData<Cell<()>>,
}

// SAFETY: librdmacm's calls on an id may come from any thread, one at a time (guaranteed by
// `!Sync`); the borrowed channel is `Sync` and the context `Send`.
unsafe impl Send for CmId<'_> {}

impl<'ch> CmId<'ch> {
    /// `rdma_create_id(3)`—A new id on `channel`, in `ps` ([`PortSpace::TCP`] for RC).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `rdma_create_id`.
    #[doc(alias = "rdma_create_id")]
    pub fn new(channel: &'ch EventChannel, ps: PortSpace) -> Result<CmId<'ch>> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: a live channel; `raw` receives the new id.
        let ret = unsafe {
            (channel.lib.fns.rdma_create_id)(channel.as_raw(), &mut raw, std::ptr::null_mut(), ps.0)
        };
        check(ret, "rdma_create_id")?;
        let raw = NonNull::new(raw).ok_or_else(|| Error::verb("rdma_create_id", libc::EIO))?;
        // SAFETY: a new id, owned by the value from now on.
        Ok(unsafe { CmId::from_event(channel, raw) })
    }

    /// Takes ownership of `raw`.
    ///
    /// # Safety
    ///
    /// `raw` must be a live id of `channel` that nothing else owns or destroys.
    pub(crate) unsafe fn from_event(
        channel: &'ch EventChannel,
        raw: NonNull<sys::rdma_cm_id>,
    ) -> Self {
        CmId { raw, channel, ctx: OnceCell::new(), _not_sync: PhantomData }
    }

    /// The raw id pointer.
    pub fn as_raw(&self) -> *mut sys::rdma_cm_id {
        self.raw.as_ptr()
    }

    /// The channel the id's events arrive on.
    pub fn channel(&self) -> &'ch EventChannel {
        self.channel
    }

    pub(crate) fn lib(&self) -> &'static sys::Rdmacm {
        self.channel.lib
    }

    /// The device port the id is bound to (`id->port_num`; 0 until bound).
    pub fn port_num(&self) -> u8 {
        // SAFETY: a live id; a plain field read.
        unsafe { (*self.as_raw()).port_num }
    }

    /// The device context the id is bound to (`id->verbs`), borrowed from the id: create the
    /// connection's PD, CQs and QP from it. See the module docs for why it is never closed by
    /// us.
    ///
    /// # Errors
    ///
    /// [`Error::WrongState`] before the id is bound to a device (by
    /// [`CmId::resolve_addr`], [`CmId::bind_addr`] with a device's address, or as a
    /// connect request's id); [`Error::Load`] if libibverbs cannot be loaded.
    pub fn context(&self) -> Result<&Context> {
        if let Some(ctx) = self.ctx.get() {
            return Ok(ctx);
        }
        // SAFETY: a live id; a plain field read.
        let verbs =
            NonNull::new(unsafe { (*self.as_raw()).verbs }).ok_or_else(|| Error::WrongState {
                message: "the rdma_cm id is not bound to a device yet: resolve an address, bind \
                          to a device's address, or take the id of a connect request first"
                    .into(),
            })?;
        let lib = sys::ibverbs()?;
        // SAFETY: librdmacm opened `verbs` with the process's libibverbs (which it NEEDs
        // and which `sys::rdmacm()` loaded first); the device outlives the context.
        let name =
            unsafe { CStr::from_ptr((lib.fns.ibv_get_device_name)((*verbs.as_ptr()).device)) }
                .to_string_lossy()
                .into_owned();
        // SAFETY: a live context of `lib`, kept alive by librdmacm at least as long as this
        // id is bound to it; the `ManuallyDrop` makes sure our `Drop` (ibv_close_device)
        // never runs on it, and the `OnceCell` frees the wrapper without dropping it.
        let ctx = ManuallyDrop::new(unsafe { Context::from_raw(lib, verbs, name) });
        Ok(self.ctx.get_or_init(|| ctx))
    }

    /// `rdma_bind_addr(3)`—Binds the id to a local address (port 0: any), which also binds
    /// it to the device that has that address (unless it is a wildcard).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `rdma_bind_addr` (`EADDRINUSE`, `EADDRNOTAVAIL`/`ENODEV`: no
    /// RDMA device has the address); [`Error::InvalidInput`]
    /// ([`InvalidInputKind::Address`]) for an IPv6 link-local address without its scope id,
    /// before the verb.
    #[doc(alias = "rdma_bind_addr")]
    pub fn bind_addr(&self, addr: SocketAddr) -> Result<()> {
        check_scope("rdma_bind_addr", "address", &addr)?;
        let mut addr = SockAddr::from(addr);
        // SAFETY: a live id and a valid socket address.
        let ret = unsafe { (self.lib().fns.rdma_bind_addr)(self.as_raw(), addr.as_mut_ptr()) };
        check(ret, "rdma_bind_addr")
    }

    /// `rdma_listen(3)`—Listens for connect requests (after [`CmId::bind_addr`]); take them
    /// with [`CmId::get_request`].
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `rdma_listen`.
    #[doc(alias = "rdma_listen")]
    pub fn listen(&self, backlog: i32) -> Result<()> {
        // SAFETY: a live, bound id.
        check(unsafe { (self.lib().fns.rdma_listen)(self.as_raw(), backlog) }, "rdma_listen")
    }

    /// The next connect request to this listener, waiting at most `timeout`.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] with `ETIMEDOUT` when none came in time, or from `rdma_get_cm_event`;
    /// [`Error::UnexpectedEvent`] when the listener got another event (e.g.
    /// `DEVICE_REMOVAL`).
    pub fn get_request(&self, timeout: Duration) -> Result<ConnectRequest<'ch>> {
        let raw = self.channel.wait(timeout, REQUEST_VERB, self.listener_event())?;
        self.request(raw)
    }

    /// Which events [`CmId::get_request`] takes: the listener's own and its requests'.
    pub(crate) fn listener_event(&self) -> impl Fn(&RawEvent) -> bool {
        let me = IdPtr(self.raw);
        move |e| e.listen_id == Some(me) || e.id == me
    }

    /// The listener's event `raw` as a connect request; another event is an error.
    pub(crate) fn request(&self, raw: RawEvent) -> Result<ConnectRequest<'ch>> {
        const VERB: &str = REQUEST_VERB;
        let (kind, status) = (raw.kind, raw.status);
        let private_data = raw.private_data.clone();
        let (responder_resources, initiator_depth) = (raw.responder_resources, raw.initiator_depth);
        let mut event = self.channel.wrap(raw);
        match event.take_new_id() {
            Some(id) => {
                Ok(ConnectRequest { id, private_data, responder_resources, initiator_depth })
            }
            None => Err(Error::UnexpectedEvent { verb: VERB, event: kind.to_string(), status }),
        }
    }

    /// `rdma_resolve_addr(3)`—Resolves `dst` (and binds to `src`, or to the address the
    /// route to `dst` leaves from), binding the id to the device that has it; waits for
    /// `ADDR_RESOLVED`. `timeout` is the CM's (in milliseconds); the wait allows 5 s more.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `rdma_resolve_addr`, or with the errno of `ADDR_ERROR`:
    /// `ETIMEDOUT` when nobody answered (the address is unreachable or no RDMA device has
    /// it: check `ip addr`, `rdma link`), `EADDRNOTAVAIL`/`ENODEV`, `ENETUNREACH`;
    /// [`Error::InvalidInput`] ([`InvalidInputKind::Address`]) for an IPv6 link-local `src`
    /// or `dst` without its scope id (the interface it is on), before the verb.
    #[doc(alias = "rdma_resolve_addr")]
    pub fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        self.start_resolve_addr(src, dst, timeout)?;
        self.expect(CmEventKind::ADDR_RESOLVED, timeout.saturating_add(WAIT_SLACK), RESOLVE_ADDR)
            .map(drop)
    }

    /// `rdma_resolve_addr` alone: its `ADDR_RESOLVED` (or `ADDR_ERROR`) is still to come.
    pub(crate) fn start_resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout: Duration,
    ) -> Result<()> {
        const VERB: &str = RESOLVE_ADDR;
        if let Some(src) = &src {
            check_scope(VERB, "source", src)?;
        }
        check_scope(VERB, "destination", &dst)?;
        let mut src = src.map(SockAddr::from);
        let mut dst = SockAddr::from(dst);
        let src_ptr = src.as_mut().map_or(std::ptr::null_mut(), SockAddr::as_mut_ptr);
        // SAFETY: a live id and valid socket addresses (or NULL for the source).
        let ret = unsafe {
            (self.lib().fns.rdma_resolve_addr)(
                self.as_raw(),
                src_ptr,
                dst.as_mut_ptr(),
                millis(timeout),
            )
        };
        check(ret, VERB)
    }

    /// `rdma_resolve_route(3)`—Resolves the route to the resolved address; waits for
    /// `ROUTE_RESOLVED`. `timeout` is the CM's (in milliseconds); the wait allows 5 s more.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `rdma_resolve_route`, or with the errno of `ROUTE_ERROR`.
    #[doc(alias = "rdma_resolve_route")]
    pub fn resolve_route(&self, timeout: Duration) -> Result<()> {
        self.start_resolve_route(timeout)?;
        let slack = timeout.saturating_add(WAIT_SLACK);
        self.expect(CmEventKind::ROUTE_RESOLVED, slack, RESOLVE_ROUTE).map(drop)
    }

    /// `rdma_resolve_route` alone: its `ROUTE_RESOLVED` (or `ROUTE_ERROR`) is still to come.
    pub(crate) fn start_resolve_route(&self, timeout: Duration) -> Result<()> {
        // SAFETY: a live id.
        let ret = unsafe { (self.lib().fns.rdma_resolve_route)(self.as_raw(), millis(timeout)) };
        check(ret, RESOLVE_ROUTE)
    }

    /// Which events are this id's own.
    pub(crate) fn own_event(&self) -> impl Fn(&RawEvent) -> bool {
        let me = IdPtr(self.raw);
        move |e| e.id == me
    }

    /// The next event of this id, waiting at most `timeout`.
    pub(crate) fn next_event(&self, timeout: Duration, verb: &'static str) -> Result<RawEvent> {
        self.channel.wait(timeout, verb, self.own_event())
    }

    /// The next event of this id, which must be `kind`; an error event becomes its errno.
    pub(crate) fn expect(
        &self,
        kind: CmEventKind,
        timeout: Duration,
        verb: &'static str,
    ) -> Result<RawEvent> {
        expected(self.next_event(timeout, verb)?, kind, verb)
    }
}

/// The verbs whose events the waits name in their errors.
pub(crate) const RESOLVE_ADDR: &str = "rdma_resolve_addr";
pub(crate) const RESOLVE_ROUTE: &str = "rdma_resolve_route";
pub(crate) const REQUEST_VERB: &str = "rdma_get_cm_event (CONNECT_REQUEST)";

/// `event`, which must be `kind`; an error event becomes its errno.
pub(crate) fn expected(event: RawEvent, kind: CmEventKind, verb: &'static str) -> Result<RawEvent> {
    if event.kind == kind {
        return Ok(event);
    }
    Err(event_error(&event, verb))
}

/// The error an unexpected event stands for: its errno when it carries one.
pub(crate) fn event_error(event: &RawEvent, verb: &'static str) -> Error {
    if event.status < 0 {
        return explain(Error::verb(verb, -event.status), verb);
    }
    Error::UnexpectedEvent { verb, event: event.kind.to_string(), status: event.status }
}

impl Drop for CmId<'_> {
    fn drop(&mut self) {
        self.channel.forget(IdPtr(self.raw));
        // SAFETY: a live id we own; every event of it was acknowledged when read, so this does
        // not block; the context we may hold is never closed by us.
        let ret = unsafe { (self.lib().fns.rdma_destroy_id)(self.as_raw()) };
        if ret != 0 {
            log::warn!(
                "leaking an rdma_cm id: rdma_destroy_id failed ({})",
                std::io::Error::last_os_error()
            );
        }
    }
}

impl std::fmt::Debug for CmId<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CmId")
            .field("raw", &self.raw)
            .field("port_num", &self.port_num())
            .finish_non_exhaustive()
    }
}

/// A client's connect request, taken by [`CmId::get_request`]: accept it with
/// [`CmId::accept`] on its `id`, or [`ConnectRequest::reject`] it.
#[derive(Debug)]
pub struct ConnectRequest<'ch> {
    /// The new id of this connection, bound to the device the request came in on.
    pub id: CmId<'ch>,
    /// The client's private data (see [`ConnParam`](super::ConnParam) for its length).
    pub private_data: Vec<u8>,
    /// RDMA reads and atomics the client accepts outstanding.
    pub responder_resources: u8,
    /// RDMA reads and atomics the client may have outstanding.
    pub initiator_depth: u8,
}

impl ConnectRequest<'_> {
    /// `rdma_reject(3)`—Refuses the connection, sending `private_data` to the client, which
    /// sees it with the reject reason ([`Rejection`](super::Rejection)); then destroys the id.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for more than 255 bytes; [`Error::Verb`] from `rdma_reject`.
    #[doc(alias = "rdma_reject")]
    pub fn reject(self, private_data: &[u8]) -> Result<()> {
        let len = super::param::private_data_len(private_data)?;
        // SAFETY: a live connect request's id; `len` bytes are readable.
        let ret = unsafe {
            (self.id.lib().fns.rdma_reject)(self.id.as_raw(), private_data.as_ptr().cast(), len)
        };
        check(ret, "rdma_reject")
    }
}

/// A socket address as `struct sockaddr_storage`.
pub(crate) struct SockAddr(libc::sockaddr_storage);

impl SockAddr {
    pub(crate) fn as_mut_ptr(&mut self) -> *mut sys::sockaddr {
        (&raw mut self.0).cast()
    }
}

impl From<SocketAddr> for SockAddr {
    fn from(addr: SocketAddr) -> Self {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut storage: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from(*a.ip()).to_be() },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in.
                unsafe { (&raw mut storage).cast::<libc::sockaddr_in>().write(sin) };
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo().to_be(),
                    sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than and aligned for sockaddr_in6.
                unsafe { (&raw mut storage).cast::<libc::sockaddr_in6>().write(sin6) };
            }
        }
        SockAddr(storage)
    }
}

/// Refuses an IPv6 link-local `addr` (fe80::/10) without a scope id: every interface has
/// such addresses, so the kernel cannot tell which is meant (`EINVAL` from the verb).
/// `what` names the argument of `verb`.
fn check_scope(verb: &str, what: &str, addr: &SocketAddr) -> Result<()> {
    match addr {
        SocketAddr::V6(a) if a.ip().is_unicast_link_local() && a.scope_id() == 0 => {
            Err(Error::invalid(
                InvalidInputKind::Address,
                format!(
                    "{verb}: the {what} {} is IPv6 link-local but names no interface (its \
                     scope id is 0): give the interface's index (if_nametoindex(3)) as the \
                     scope id, SocketAddrV6::new(ip, port, 0, scope_id)",
                    a.ip()
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// A timeout in rdma_cm's milliseconds (saturating).
pub(crate) fn millis(timeout: Duration) -> i32 {
    i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX)
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv6Addr, SocketAddrV6};

    use super::*;

    #[test]
    fn a_link_local_address_without_a_scope_is_refused_naming_the_interface() {
        let link_local: Ipv6Addr = "fe80::1".parse().unwrap();
        let bare = SocketAddr::V6(SocketAddrV6::new(link_local, 7471, 0, 0));
        let e = check_scope("rdma_resolve_addr", "destination", &bare).unwrap_err();
        assert_eq!(e.invalid_input_kind(), Some(InvalidInputKind::Address));
        assert_eq!(
            e.to_string(),
            "rdma_resolve_addr: the destination fe80::1 is IPv6 link-local but names no \
             interface (its scope id is 0): give the interface's index (if_nametoindex(3)) as \
             the scope id, SocketAddrV6::new(ip, port, 0, scope_id)"
        );
        let scoped = SocketAddr::V6(SocketAddrV6::new(link_local, 7471, 0, 2));
        let global = SocketAddr::V6(SocketAddrV6::new("2001:db8::1".parse().unwrap(), 1, 0, 0));
        let v4: SocketAddr = "192.0.2.1:7471".parse().unwrap();
        for ok in [scoped, global, v4] {
            assert!(check_scope("rdma_bind_addr", "address", &ok).is_ok(), "{ok}");
        }
    }
}
