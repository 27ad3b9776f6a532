//! The crate's errors: [`Error`], and the errors of the `try_` calls that hand a value back
//! with it ([`TransitionError`], [`PostError`](crate::PostError)) or count what a list post
//! posted ([`PostListError`]).
//!
//! Why two calls for each that consumes a QP or a buffer: `?` converts with `From`, and a
//! `Box<dyn Error + Send + Sync>`, `anyhow::Error` or `eyre::Report` takes only `'static`
//! errors. An error holding a QP or a buffer borrows what they borrow (a PD, CQs, a pool
//! owned by the caller's locals), so `?` on it fails to compile (E0515, "cannot return value
//! referencing local variable"), and no `From` can change that. So the plain call fails with
//! [`Error`] — `'static`, `Send` and `Sync` — dropping the value, whose `Drop` leaves nothing
//! behind (a QP is destroyed, a buffer goes back to its pool or stays in flight), and its
//! `try_` twin hands the value back, as `Arc::try_unwrap` hands back the `Arc`.
//!
//! Messages follow the convention of the Rust error handling project group: an error's
//! `Display` says its own part and `source()` returns its cause, never both, so a reporter
//! walking the chain (anyhow's `{:#}`, eyre) prints each cause once.
#![allow(unsafe_code)] // getrlimit, and errno in a test

use std::fmt;
use std::io;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure of this crate. Messages say what failed and, where known, what to do.
///
/// # `?` and the values a failure hands back
///
/// `Error` is `'static + Send + Sync`, so `?` takes it into [`Result`], a
/// `Box<dyn std::error::Error + Send + Sync>`, `anyhow::Error` or `eyre::Report` alike. Calls
/// that consume a queue pair or a buffer (the transitions, [`QueuePair::post_send_buffer`]
/// and the other buffer posts, rdma_cm's connect and accept) fail with an `Error` and drop
/// what they consumed: the QP is destroyed, the buffer goes back to its pool (or stays in
/// flight where the provider may have taken its work request).
///
/// ```no_run
/// use rdma_verbs::*;
///
/// fn main() -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
///     let ctx = Context::open_first()?;
///     let pd = ctx.alloc_pd()?;
///     let cq = ctx.create_cq(32)?;
///     let pool = BufferPool::new(pd.register(4096, AccessFlags::LOCAL_WRITE)?, 1024)?;
///     let qp = pd.create_rc_qp(&QpInitAttr::new(&cq))?.into_init(&ToInitAttr::default())?;
///     qp.post_recv_buffer(pool.take().ok_or("no free buffer")?)?;
///     let gid = ctx.routable_gid(1)?;
///     let lid = ctx.query_port(1)?.lid();
///     let me = Endpoint { lid, qpn: qp.qp_num(), psn: Psn::random(), gid: gid.gid };
///     // Connected to itself.
///     let qp = qp.into_rtr(&ToRtrAttr::to_endpoint(&me, 1, Some(gid.index), Mtu::MTU_1024))?;
///     let qp = qp.into_rts(&ToRtsAttr::new(me.psn))?;
///     let mut buffer = pool.take().ok_or("no free buffer")?;
///     buffer.fill(b"ping")?;
///     qp.post_send_buffer(buffer, SendOp::Send)?;
///     Ok(())
/// }
/// ```
///
/// Their `try_` twins ([`QueuePair::try_into_rtr`], [`QueuePair::try_post_send_buffer`], …)
/// hand the QP or buffer back in the error ([`TransitionError`],
/// [`PostError`](crate::PostError)), to retry or reuse; `?` converts those into an `Error`
/// too, in a function returning [`Result`]:
///
/// ```no_run
/// use rdma_verbs::*;
///
/// /// Connects `qp` by the first route, or else the same QP by the second.
/// fn connect<'a>(
///     qp: QueuePair<'a, Init>,
///     routes: [&ToRtrAttr; 2],
///     psn: Psn,
/// ) -> Result<QueuePair<'a, Rts>> {
///     let qp = match qp.try_into_rtr(routes[0]) {
///         Ok(qp) => qp,
///         Err(failed) => failed.qp.try_into_rtr(routes[1])?,
///     };
///     qp.into_rts(&ToRtsAttr::new(psn))
/// }
///
/// /// Sends `buffer`, or keeps it, with its bytes, while the send queue is full.
/// fn send<'p>(qp: &QueuePair<'p, Rts>, buffer: Buffer<'p>) -> Result<Option<Buffer<'p>>> {
///     match qp.try_post_send_buffer(buffer, SendOp::Send) {
///         Ok(()) => Ok(None),
///         Err(PostError { buffer: Some(kept), error: Error::WorkQueueFull { .. } }) => {
///             Ok(Some(kept))
///         }
///         Err(e) => Err(e.into()),
///     }
/// }
/// ```
///
/// # Messages
///
/// Each error's `Display` says what failed at its own layer, and
/// [`source`](std::error::Error::source) returns the cause (the convention of the Rust error
/// handling project group): no message repeats its source's, and a reporter walking the chain
/// (anyhow's `{:#}` and `{:?}`, eyre) prints each cause once. [`Error::Verb`] names the verb,
/// the errno and the remedy; its source is the [`io::Error`] of the errno, with the system's
/// text for it. The wrappers ([`TransitionError`], [`PostError`](crate::PostError),
/// [`PostListError`]) say what became of the value they hand back, their source is the
/// `Error`. `Debug` prints the message and then each cause on a `Caused by:` line, so that
/// `fn main() -> Result<(), rdma_verbs::Error>` ends with a useful report. Without a
/// reporter, walk the chain:
///
/// ```
/// use std::error::Error as _;
///
/// let e = rdma_verbs::Error::Verb {
///     verb: "ibv_reg_mr",
///     source: std::io::Error::from_raw_os_error(12),
///     hint: None,
/// };
/// let chain: Vec<String> =
///     std::iter::successors(Some(&e as &dyn std::error::Error), |&e| e.source())
///         .map(|e| e.to_string())
///         .collect();
/// assert_eq!(chain, ["ibv_reg_mr failed: ENOMEM", "Cannot allocate memory (os error 12)"]);
/// ```
///
/// [`QueuePair::post_send_buffer`]: crate::QueuePair::post_send_buffer
/// [`QueuePair::try_into_rtr`]: crate::QueuePair::try_into_rtr
/// [`QueuePair::try_post_send_buffer`]: crate::QueuePair::try_post_send_buffer
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// libibverbs, or for rdma_cm librdmacm, could not be loaded.
    #[error(transparent)]
    Load(#[from] sys::LoadError),

    /// The kernel exposes no RDMA at all: `ibv_get_device_list` failed with `ENOSYS` and
    /// `/sys/class/infiniband_verbs` is absent. (libibverbs says `ENOSYS` whenever it cannot
    /// read that directory; when it exists and the process is out of file descriptors, the
    /// error is [`Error::Verb`] with `EMFILE` instead.)
    #[error(
        "no RDMA devices: the kernel exposes no uverbs (/sys/class/infiniband_verbs is absent). \
         Load the driver of your NIC (mlx5_ib, irdma, ...) or create a soft device \
         (modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <netdev>); in a container, \
         pass /dev/infiniband and mount /sys; without RDMA hardware or kernel support, run \
         inside scripts/rdma-vm (Soft-RoCE in a QEMU guest)"
    )]
    NoKernelSupport,

    /// The kernel has RDMA, but libibverbs found no device.
    #[error(
        "no RDMA devices: /sys/class/infiniband lists none that libibverbs can open. Create one \
         (rdma link add rxe0 type rxe netdev <netdev>) or install the user-space provider \
         (Debian/Ubuntu: ibverbs-providers; RHEL/Rocky: libibverbs)"
    )]
    NoDevices,

    /// No device has the requested name.
    #[error("RDMA device {name:?} not found; devices present: {available}")]
    DeviceNotFound {
        /// The requested name.
        name: String,
        /// The names present, comma-separated.
        available: String,
    },

    /// The device has no such port.
    #[error("device {device} has no port {port}: its ports are 1..={count}")]
    PortNotFound {
        /// The device name.
        device: String,
        /// The requested port.
        port: u8,
        /// The device's port count.
        count: u8,
    },

    /// The GID index is outside the table or names an empty entry.
    #[error("GID index {index} is not valid on {device} port {port}; valid indexes: {valid}")]
    GidIndexInvalid {
        /// The device name.
        device: String,
        /// The port.
        port: u8,
        /// The requested index.
        index: u8,
        /// The non-empty entries, as `index (type address)`, comma-separated.
        valid: String,
    },

    /// An Ethernet (RoCE) port has no GID usable for routing.
    #[error(
        "{device} port {port} has no usable RoCE GID: give its netdev an IP address \
         (ip addr add ... dev <netdev>) or pick a GID index yourself (Context::gid_table)"
    )]
    NoRoutableGid {
        /// The device name.
        device: String,
        /// The port.
        port: u8,
    },

    /// An InfiniBand port has no LID: no subnet manager has configured it.
    #[error(
        "{device} port {port} has no LID: no subnet manager has configured it; run one \
         (opensm) on the fabric"
    )]
    NoLid {
        /// The device name.
        device: String,
        /// The port.
        port: u8,
    },

    /// A verb failed. The message names the verb, the errno and the remedy; the source is
    /// the errno as an [`io::Error`], with the system's text for it.
    #[error("{verb} failed: {}{}", errno_label(source), hint.as_deref().map(|h| format!("; {h}")).unwrap_or_default())]
    Verb {
        /// The verb and, where useful, its step (e.g. `ibv_modify_qp (INIT→RTR)`).
        verb: &'static str,
        /// The errno it returned.
        #[source]
        source: io::Error,
        /// What to do about it, when known.
        hint: Option<String>,
    },

    /// The provider or the loaded rdma-core lacks this operation.
    #[error("{what} is not supported by this provider or rdma-core version")]
    Unsupported {
        /// The missing operation or symbol.
        what: &'static str,
    },

    /// An argument was refused before any verb was called.
    #[error("{message}")]
    InvalidInput {
        /// What was wrong with it, to match on.
        kind: InvalidInputKind,
        /// What was wrong with it and what to do, for people.
        message: String,
    },

    /// Fewer completions than awaited arrived before the timeout
    /// ([`CompletionQueue::wait_for`](crate::CompletionQueue::wait_for)).
    #[error(
        "{arrived} of {expected} completions arrived within {timeout:?}: check that every \
         awaited work request was posted signaled and reaches its peer: on RC and UC a peer QP \
         connected to this one; on UD the receiver's QPN and Q_Key, through an address handle \
         that routes to its port (a datagram that misses either is dropped silently)"
    )]
    CompletionTimeout {
        /// How many were awaited.
        expected: usize,
        /// How many arrived (the prefix of the storage they were polled into).
        arrived: usize,
        /// How long was waited.
        timeout: std::time::Duration,
    },

    /// An object is not in the state the call needs, as the device or library reports it:
    /// a QP in another state than [`QueuePair::into_checked`](crate::QueuePair::into_checked)
    /// checks for, an rdma_cm id not bound to a device yet.
    #[error("{message}")]
    WrongState {
        /// The state it is in and what to do, for people.
        message: String,
    },

    /// rdma_cm delivered another event than the one the call waits for (module `cm`), one
    /// without an errno (an error event's errno makes an [`Error::Verb`]).
    #[error("{verb}: unexpected rdma_cm event {event} (status {status})")]
    UnexpectedEvent {
        /// The call that waited, and for what.
        verb: &'static str,
        /// The event that came instead.
        event: String,
        /// Its status.
        status: i32,
    },

    /// A stream of module `reactor` (feature `tokio`) was created outside a tokio runtime,
    /// whose reactor it registers with.
    #[error(
        "{what} can be awaited only inside a tokio runtime: create it within one (with I/O \
         enabled: Builder::enable_io or enable_all)"
    )]
    NoRuntime {
        /// What was to be awaited.
        what: &'static str,
    },

    /// The work queue is full (`ENOMEM` from `ibv_post_send(3)` / `ibv_post_recv(3)`,
    /// `ENOMEM` or `ENOSPC` from `ibv_wr_complete(3)`): reap completions before posting more.
    #[error(
        "{verb} failed: {}; the work queue is full: reap completions before posting more \
         (max_send_wr / max_recv_wr)",
        errno_label(source)
    )]
    WorkQueueFull {
        /// The verb that refused the post.
        verb: &'static str,
        /// The errno it returned.
        #[source]
        source: io::Error,
    },

    /// A buffer-tier post refused because the queue's completions could overrun: `due`
    /// completions are already due on a `queue` of `capacity` — buffers posted and not yet
    /// handed back by [`BufferPool::complete`](crate::BufferPool::complete), plus, on a CQ,
    /// the entries kept for the receives of the SRQs that feed it. Providers free a
    /// work-queue slot when they are done with a WR, not when its completion is polled (rxe:
    /// as soon as the kernel completed it), so a post they accept could still overrun the CQ
    /// and lose completions; the buffer tier counts them itself. Poll the CQ and complete the
    /// buffers, then post again.
    #[error(
        "{due} completions are due on this {queue} of {capacity} entries: poll it and hand \
         the completions to BufferPool::complete before posting more (a post now could \
         overrun it and lose completions)"
    )]
    CompletionsDue {
        /// "completion queue" or "shared receive queue".
        queue: &'static str,
        /// The completions it holds (a CQ's entries, an SRQ's `max_wr`).
        capacity: u32,
        /// The completions due on it.
        due: u32,
    },

    /// The device reported this CQ in error (`IBV_EVENT_CQ_ERR`, read through
    /// [`AsyncEvents`](crate::AsyncEvents)): it overran, and the completions that did not
    /// fit are lost (rxe drops them; mlx5 stops the CQ). Returned once, by the CQ's first poll
    /// that finds nothing after the event was read. The buffer tier never overruns a CQ;
    /// raw-tier WRs and window binds can (see
    /// [Room for completions](crate::CompletionQueue#room-for-completions)).
    #[error(
        "the device reported this completion queue in error (IBV_EVENT_CQ_ERR): it overran \
         and completions were lost; move its QPs to ERROR and drain or recreate them, and \
         size the CQ for every work request outstanding on the QPs that share it"
    )]
    CompletionQueueOverrun,
}

/// Why an argument was refused ([`Error::InvalidInput`]'s `kind`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum InvalidInputKind {
    /// A work request has more SGEs than the QP's `max_send_sge`, or a buffer-tier receive
    /// goes to a queue that takes none (`max_recv_sge` or an SRQ's `max_sge` 0).
    TooManySges,
    /// Inline data larger than the QP's `max_inline_data` (none on a DCI).
    InlineTooLarge,
    /// `INLINE` on an RDMA READ or atomic, whose response the NIC writes into the SGEs.
    InlineReadOrAtomic,
    /// An atomic on a QP that is not RC.
    AtomicNotRc,
    /// An atomic whose SGE is not one 8-byte aligned word, or whose remote address is not
    /// 8-byte aligned.
    AtomicShape,
    /// A UD work request that is not a SEND with a destination.
    UdNoDestination,
    /// A UD message longer than the path MTU.
    UdTooLarge,
    /// Objects of different protection domains (a pool and a queue, a window and a region).
    OtherPd,
    /// Objects of different device contexts (a QP's CQs and PD, a CQ and its channel).
    OtherContext,
    /// A CQ that is not the completion channel's.
    OtherChannel,
    /// A list of CQs that lacks one of the queue pair's ([`QueuePair::drain`](crate::QueuePair::drain)).
    OtherCq,
    /// More bytes than a buffer holds.
    BufferTooSmall,
    /// An offset, range, index or limit outside what exists.
    Range,
    /// A size or count outside what is allowed (0 bytes, CQ entries, chunk sizes, private
    /// data, …).
    Size,
    /// A CQ smaller than the work requests a QP may have outstanding on it.
    CqTooSmall,
    /// Access flags that do not go together, or that a region or window lacks.
    Access,
    /// Access flags with bits the crate does not name, refused at registration: it cannot
    /// tell what they would let the NIC or peers do with the memory.
    UnknownAccess,
    /// A region over borrowed memory where only owned memory is sound: a
    /// [`BufferPool`](crate::BufferPool)'s, whose chunks the NIC writes.
    BorrowedMemory,
    /// A memory window of the other type than the call binds.
    MwType,
    /// A state transition or attribute mask the QP type's state table does not allow.
    Transition,
    /// A list posted with unsignaled buffers still in flight on another QP.
    UnsignaledInFlight,
    /// Buffers of different pools in one [`SendBufferList`](crate::SendBufferList) chain.
    OtherPool,
    /// An option that needs the extended verbs, with the legacy ones forced.
    NeedsExtendedVerbs,
    /// DCI streams the device does not offer, or that the DCI was created without.
    DciStreams,
    /// Polling into storage with no room.
    EmptyStorage,
    /// A socket address that cannot work as given: an IPv6 link-local one without the scope
    /// id naming its interface.
    Address,
}

impl fmt::Debug for Error {
    /// The message, then each [`source`](std::error::Error::source) on its own line: what
    /// `main` prints for an `Err` it returns.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")?;
        let mut cause = std::error::Error::source(self);
        while let Some(e) = cause {
            write!(f, "\nCaused by: {e}")?;
            cause = e.source();
        }
        Ok(())
    }
}

impl Error {
    /// The errno of a failed verb, if this is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Verb { source, .. } | Error::WorkQueueFull { source, .. } => {
                source.raw_os_error()
            }
            _ => None,
        }
    }

    /// The kind of an [`Error::InvalidInput`], `None` for other errors.
    pub fn invalid_input_kind(&self) -> Option<InvalidInputKind> {
        match self {
            Error::InvalidInput { kind, .. } => Some(*kind),
            _ => None,
        }
    }

    #[cold]
    pub(crate) fn invalid(kind: InvalidInputKind, message: String) -> Self {
        Error::InvalidInput { kind, message }
    }

    /// Replaces the remedy of a [`Error::Verb`] with one that knows more; other errors stay.
    pub(crate) fn with_hint(self, text: String) -> Self {
        match self {
            Error::Verb { verb, source, .. } => Error::Verb { verb, source, hint: Some(text) },
            other => other,
        }
    }

    /// `EMFILE` from `verb`, which said something else (a directory or device node it could
    /// not open reported as absent): `why` says what it could not open.
    #[cold]
    pub(crate) fn out_of_descriptors(verb: &'static str, why: &str) -> Self {
        Error::Verb {
            verb,
            source: io::Error::from_raw_os_error(libc::EMFILE),
            hint: Some(format!("{why}: {}", descriptors_hint())),
        }
    }

    #[cold]
    pub(crate) fn verb(verb: &'static str, errno: i32) -> Self {
        if errno == libc::EOPNOTSUPP {
            return Error::Unsupported { what: verb };
        }
        if is_queue_full(verb, errno) {
            return Error::WorkQueueFull { verb, source: io::Error::from_raw_os_error(errno) };
        }
        Error::Verb { verb, source: io::Error::from_raw_os_error(errno), hint: hint(verb, errno) }
    }
}

/// Whether `errno` from `verb` means the work queue is full.
fn is_queue_full(verb: &str, errno: i32) -> bool {
    match verb {
        "ibv_post_send" | "ibv_post_recv" | "ibv_post_srq_recv" => errno == libc::ENOMEM,
        "ibv_wr_complete" => errno == libc::ENOMEM || errno == libc::ENOSPC,
        _ => false,
    }
}

/// Maps a verb's `int` return: 0 is success; a positive value is the errno (the rdma-core
/// convention); -1 means "see errno" (older providers); other negatives are a negated errno.
#[inline]
pub(crate) fn check_errno(ret: i32, verb: &'static str) -> Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(errno_error(ret, verb))
    }
}

/// The error of a verb's non-zero `int` return (see [`check_errno`]); out of line, so that a
/// post's success path stays short.
#[cold]
#[inline(never)]
pub(crate) fn errno_error(ret: i32, verb: &'static str) -> Error {
    Error::verb(verb, errno_of(ret))
}

/// A failed list post's error: `ret` from `verb`, which took `posted` WRs of the list (the
/// list's `taken_before` its `bad_wr`).
#[cold]
#[inline(never)]
pub(crate) fn list_error(ret: i32, posted: usize, verb: &'static str) -> PostListError {
    PostListError { posted, error: errno_error(ret, verb) }
}

/// The errno of a verb's non-zero `int` return (see [`check_errno`]), for a caller that
/// expects some errno values and builds no [`Error`] for them.
#[inline]
pub(crate) fn errno_of(ret: i32) -> i32 {
    match ret {
        -1 => last_errno(),
        r => r.abs(),
    }
}

/// Maps a verb's pointer return: NULL means failure with `errno` set.
pub(crate) fn check_ptr<T>(ptr: *mut T, verb: &'static str) -> Result<NonNull<T>> {
    NonNull::new(ptr).ok_or_else(|| Error::verb(verb, last_errno()))
}

pub(crate) fn last_errno() -> i32 {
    // A provider that forgot errno leaves 0: report EIO rather than "success".
    io::Error::last_os_error().raw_os_error().filter(|&e| e != 0).unwrap_or(libc::EIO)
}

/// The errno's name (`ENOMEM`), or `errno N` for one without; the system's text for it is
/// the error's source.
fn errno_label(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => errno_name(code).map_or_else(|| format!("errno {code}"), str::to_owned),
        None => format!("{:?}", e.kind()),
    }
}

/// The symbolic name of the errnos verbs return.
pub(crate) fn errno_name(errno: i32) -> Option<&'static str> {
    Some(match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::EIO => "EIO",
        libc::ENXIO => "ENXIO",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EEXIST => "EEXIST",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ERANGE => "ERANGE",
        libc::ENOSYS => "ENOSYS",
        libc::ENODATA => "ENODATA",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::EPROTONOSUPPORT => "EPROTONOSUPPORT",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EADDRNOTAVAIL => "EADDRNOTAVAIL",
        libc::ENETUNREACH => "ENETUNREACH",
        libc::ECONNREFUSED => "ECONNREFUSED",
        libc::ETIMEDOUT => "ETIMEDOUT",
        _ => return None,
    })
}

/// What to do about `errno` from `verb`, where that is known.
fn hint(verb: &str, errno: i32) -> Option<String> {
    let memlock = || match memlock_limit() {
        Some(limit) => format!(
            "memory registration pins pages and RLIMIT_MEMLOCK is {limit}; raise it \
             (ulimit -l unlimited; LimitMEMLOCK=infinity for a systemd service; \
             --ulimit memlock=-1 for a container)"
        ),
        None => "memory registration pins pages: check RLIMIT_MEMLOCK (ulimit -l)".into(),
    };
    Some(match (verb, errno) {
        (v, libc::ENOMEM | libc::EPERM | libc::EAGAIN) if v.starts_with("ibv_reg_mr") => memlock(),
        ("ibv_open_device", libc::EACCES | libc::EPERM) => {
            "no permission on /dev/infiniband/uverbs*: add the user to the group owning it \
             or fix the udev rule"
                .into()
        }
        (v, libc::EINVAL) if v.ends_with("→RTR)") => {
            "on RoCE the RTR transition needs a global route: check the source GID index \
             (GlobalRoute::sgid_index) exists on this port and the remote GID, MTU and QPN \
             are right"
                .into()
        }
        (v, libc::EINVAL) if v.ends_with("→RTS)") => {
            "iWARP devices (siw, irdma in iWARP mode) connect only through rdma_cm".into()
        }
        ("ibv_post_send" | "ibv_wr_complete" | "ibv_post_recv", libc::EINVAL) => {
            "the QP is not in a state that allows this post, or a WR exceeds the QP's \
             max_sge / max_inline_data"
                .into()
        }
        ("ibv_get_device_list", libc::ENOSYS) => {
            "/sys/class/infiniband_verbs exists but libibverbs could not read it: its \
             abi_version may be one this rdma-core does not support (see the kernel log)"
                .into()
        }
        (_, libc::EMFILE) => descriptors_hint(),
        (_, libc::ENFILE) => {
            "the system's table of open files is full (sysctl fs.file-max): close files or \
             raise it"
                .into()
        }
        _ => return None,
    })
}

/// What to do when the process has every file descriptor it may.
fn descriptors_hint() -> String {
    let limit = nofile_limit().map_or_else(|| "its limit".to_owned(), |n| n.to_string());
    format!(
        "the process has as many file descriptors open as RLIMIT_NOFILE allows ({limit}): \
         close some, or raise the limit (ulimit -n; LimitNOFILE= for a systemd service; \
         --ulimit nofile= for a container; setrlimit(RLIMIT_NOFILE))"
    )
}

/// RLIMIT_NOFILE's soft limit, `None` when unlimited or unknown.
fn nofile_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes only the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    (lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// Descriptors a library may need at once to look at sysfs or open a device node (a netlink
/// socket, a directory, a file in it).
const DESCRIPTOR_HEADROOM: u64 = 4;

/// Whether this process has (nearly) every descriptor RLIMIT_NOFILE allows open, so that a
/// library could not open a directory or node it then reported as absent: the descriptors
/// in `/proc/self/fd` against the limit (listing them fails with `EMFILE` itself when none
/// is left).
pub(crate) fn descriptors_exhausted() -> bool {
    let Some(limit) = nofile_limit() else { return false };
    match std::fs::read_dir("/proc/self/fd") {
        Err(e) => e.raw_os_error() == Some(libc::EMFILE),
        // The listing's own descriptor is among them.
        Ok(dir) => (dir.count() as u64).saturating_sub(1) + DESCRIPTOR_HEADROOM > limit,
    }
}

/// RLIMIT_MEMLOCK's soft limit, for error messages.
fn memlock_limit() -> Option<String> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes only the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return None;
    }
    Some(match lim.rlim_cur {
        libc::RLIM_INFINITY => "unlimited".into(),
        n => format!("{} KiB", n / 1024),
    })
}

/// A list post the provider refused part-way
/// ([`QueuePair::post_send_wrs`](crate::QueuePair::post_send_wrs),
/// [`QueuePair::post_recv_wrs`](crate::QueuePair::post_recv_wrs),
/// [`SharedReceiveQueue::post_recv_wrs`](crate::SharedReceiveQueue::post_recv_wrs)): how
/// many of its work requests were posted, and, as its source, why the rest were not.
#[derive(Debug, thiserror::Error)]
#[error("a list post stopped after {posted} work requests")]
pub struct PostListError {
    /// How many work requests, from the list's start, were posted (and will complete).
    pub posted: usize,
    /// Why the rest were not.
    #[source]
    pub error: Error,
}

impl From<PostListError> for Error {
    /// The error alone: how many were posted is lost.
    fn from(e: PostListError) -> Self {
        e.error
    }
}

/// A failed QP state change that hands the queue pair back, to retry or reuse: the error of
/// the `try_` calls ([`QueuePair::try_into_rtr`](crate::QueuePair::try_into_rtr), …; see
/// [`Error`] for why their plain twins return an [`Error`] instead).
///
/// It converts into an [`Error`] with `?` in a function returning [`Result`] (the QP is then
/// dropped, and so destroyed); its message says only that the QP is handed back, its
/// [`source`](std::error::Error::source) is the [`Error`].
pub struct TransitionError<Q> {
    /// The queue pair, in the state it was in (after [`QueuePair::try_drain`]'s failures
    /// past its checks, in ERROR).
    ///
    /// [`QueuePair::try_drain`]: crate::QueuePair::try_drain
    pub qp: Q,
    /// Why the state change failed.
    pub error: Error,
}

impl<Q> fmt::Debug for TransitionError<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransitionError").field("error", &self.error).finish_non_exhaustive()
    }
}

impl<Q> fmt::Display for TransitionError<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the queue pair's state change failed; the queue pair is handed back")
    }
}

impl<Q> std::error::Error for TransitionError<Q> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<Q> From<TransitionError<Q>> for Error {
    /// The error alone: the queue pair is dropped (destroyed).
    fn from(e: TransitionError<Q>) -> Self {
        e.error
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_is_the_message_then_each_cause_what_main_prints() {
        let e = Error::Verb {
            verb: "ibv_reg_mr",
            source: io::Error::from_raw_os_error(12),
            hint: None,
        };
        let cause = io::Error::from_raw_os_error(12).to_string();
        assert_eq!(format!("{e:?}"), format!("ibv_reg_mr failed: ENOMEM\nCaused by: {cause}"));
        assert_eq!(format!("{:?}", Error::NoDevices), Error::NoDevices.to_string(), "no cause");
    }

    #[test]
    fn check_errno_conventions() {
        assert!(check_errno(0, "ibv_dealloc_pd").is_ok());
        assert_eq!(
            check_errno(libc::EBUSY, "ibv_dealloc_pd").unwrap_err().errno(),
            Some(libc::EBUSY)
        );
        assert_eq!(
            check_errno(-libc::EINVAL, "ibv_modify_qp").unwrap_err().errno(),
            Some(libc::EINVAL)
        );
    }

    #[test]
    fn eopnotsupp_becomes_unsupported() {
        let e = check_errno(libc::EOPNOTSUPP, "ibv_query_gid_ex").unwrap_err();
        assert!(matches!(e, Error::Unsupported { what: "ibv_query_gid_ex" }), "{e:?}");
    }

    #[test]
    fn verb_message_names_errno_and_hint() {
        let e = Error::verb("ibv_reg_mr", libc::ENOMEM);
        let msg = e.to_string();
        assert!(msg.starts_with("ibv_reg_mr failed: ENOMEM; "), "{msg}");
        assert!(msg.contains("RLIMIT_MEMLOCK"), "{msg}");
        let msg = Error::verb("ibv_modify_qp (INIT→RTR)", libc::EINVAL).to_string();
        assert!(msg.contains("EINVAL") && msg.contains("source GID index"), "{msg}");
        let msg = Error::verb("ibv_alloc_pd", 4095).to_string();
        assert_eq!(msg, "ibv_alloc_pd failed: errno 4095");
    }

    #[test]
    fn emfile_names_rlimit_nofile_and_the_remedy() {
        let limit = nofile_limit().map_or_else(|| "its limit".to_owned(), |n| n.to_string());
        let remedy = format!(
            "the process has as many file descriptors open as RLIMIT_NOFILE allows ({limit}): \
             close some, or raise the limit (ulimit -n; LimitNOFILE= for a systemd service; \
             --ulimit nofile= for a container; setrlimit(RLIMIT_NOFILE))"
        );
        let msg = Error::verb("ibv_open_device", libc::EMFILE).to_string();
        assert_eq!(msg, format!("ibv_open_device failed: EMFILE; {remedy}"));
        let e = Error::out_of_descriptors("ibv_get_device_list", "libibverbs could not open x");
        assert_eq!(e.errno(), Some(libc::EMFILE));
        assert_eq!(
            e.to_string(),
            format!("ibv_get_device_list failed: EMFILE; libibverbs could not open x: {remedy}")
        );
        assert!(!descriptors_exhausted(), "the test process has descriptors to spare");
    }

    #[test]
    fn null_pointer_with_errno_zero_is_eio() {
        // SAFETY: writing errno is how a C callee reports; here it simulates one.
        unsafe { *libc::__errno_location() = 0 };
        let e = check_ptr(std::ptr::null_mut::<u8>(), "ibv_alloc_pd").unwrap_err();
        assert_eq!(e.errno(), Some(libc::EIO));
    }
}
