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
#![allow(unsafe_code)] // errno in a test

use std::fmt;
use std::io;

use rdma_verbs_sys as sys;

mod errno;
mod hint;
mod partial;

pub(crate) use errno::{check_errno, check_ptr, errno_error, errno_of, last_errno, list_error};
use errno::{errno_label, is_queue_full};
pub(crate) use hint::descriptors_exhausted;
use hint::{descriptors_hint, hint};
pub use partial::{PostListError, TransitionError};

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
    /// An offset or length that is not the multiple the device needs (copies to and from
    /// [`DeviceMemory`](crate::DeviceMemory): of 4).
    Alignment,
    /// A CQ smaller than the work requests a QP may have outstanding on it.
    CqTooSmall,
    /// More than a limit the device reports (`ibv_query_device(3)`: `max_qp_wr`, `max_sge`,
    /// `max_qp_rd_atom`, `max_qp_init_rd_atom`, `max_res_rd_atom`); the message names the
    /// limit and the device's value.
    DeviceLimit,
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

#[cfg(test)]
mod tests {
    use super::hint::nofile_limit;
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
