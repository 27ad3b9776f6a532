//! The safe crate against the mock provider (crate `rdma-verbs-mock`): each verb's errors as
//! the caller sees them, the attributes the typed transitions compute, the fallbacks for older
//! libraries, and failed destroys. No device, no libibverbs.

mod capture;
mod channel;
mod context;
#[cfg(feature = "mlx5")]
mod dc;
mod destroy;
mod device_memory;
mod dma_handle;
mod ece;
#[cfg(feature = "efa")]
mod efa;
mod events;
mod import;
mod limits;
mod memory;
mod messages;
mod peer_memory;
mod pinned;
mod qp;
#[cfg(feature = "rails")]
mod rails;
#[cfg(feature = "tokio")]
mod reactor;
mod refusals;
mod resources;
mod soundness;
mod thread_domain;
mod verbs_path;
mod xrc;

use rdma_verbs::{
    AccessFlags, BufferPool, CompletionQueue, Context, Endpoint, Error, Mtu, ProtectionDomain, Psn,
    QpCapabilities, QpInitAttr, Qpn, QueuePair, RemoteAddr, Reset, Rts, SendOp, ToInitAttr,
    ToRtrAttr, ToRtsAttr, WcStatus, WorkCompletion,
};
use rdma_verbs_mock::{self as mock, ContextConfig, Mock, Optional};

/// A context of this thread's mock provider. Fields drop in order: the context closes before
/// the mock goes, and every object borrowing the context is dropped before both.
pub struct Fixture {
    pub ctx: Context,
    pub mock: Mock,
}

impl Fixture {
    /// A current library (every optional symbol) and context (every op).
    pub fn new() -> Fixture {
        Fixture::with(Optional::ALL, ContextConfig::default())
    }

    /// A library with `optional` symbols and a context shaped by `config`.
    pub fn with(optional: Optional, config: ContextConfig) -> Fixture {
        let mock = Mock::new();
        let ctx = open(&mock, optional, config);
        Fixture { ctx, mock }
    }

    /// A PD and a CQ of `cqe` entries of the context: what most tests start from.
    pub fn pd_and_cq(&self, cqe: u32) -> (ProtectionDomain<'_>, CompletionQueue<'_>) {
        (self.ctx.alloc_pd().unwrap(), self.ctx.create_cq(cqe).unwrap())
    }
}

/// Another context of `mock`, which must outlive it.
pub fn open(mock: &Mock, optional: Optional, config: ContextConfig) -> Context {
    let raw = mock.context(config);
    // SAFETY: a fresh context of the mock library, owned by the returned value from now on;
    // callers drop it before the mock (a `Fixture` by its field order).
    unsafe { Context::from_raw(mock::library(optional), raw, mock::DEVICE_NAME.into()) }
}

/// The name of `errno`, as the message of a verb's error says it (spelled out here, not
/// computed, since the formatting is what is tested).
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::EIO => "EIO",
        libc::EAGAIN => "EAGAIN",
        libc::ENOMEM => "ENOMEM",
        libc::ENOSPC => "ENOSPC",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ETIMEDOUT => "ETIMEDOUT",
        other => panic!("errno {other} has no expected name here"),
    }
}

/// Asserts `source`, the source of a verb's error, is the `io::Error` of `errno`, whose text
/// (the system's, or Miri's under Miri) the verb's own message leaves to it.
#[track_caller]
fn assert_errno_source(source: &std::io::Error, errno: i32) {
    assert_eq!(source.raw_os_error(), Some(errno));
    assert_eq!(source.to_string(), std::io::Error::from_raw_os_error(errno).to_string());
}

/// Asserts `err` is the [`Error::Verb`] of `verb` with `errno`, whose message is exactly
/// "`verb` failed: NAME", followed by "; hint" when `hint` is not empty, the hint then holding
/// each of those phrases; its source says the errno in the system's words.
#[track_caller]
pub fn assert_verb_error(err: &Error, verb: &str, errno: i32, hint: &[&str]) {
    let Error::Verb { verb: got, source, hint: got_hint } = err else {
        panic!("expected Error::Verb from {verb}, got {err:?}");
    };
    assert_eq!(*got, verb, "{err}");
    assert_errno_source(source, errno);
    let head = format!("{verb} failed: {}", errno_name(errno));
    match got_hint {
        None => {
            assert!(hint.is_empty(), "no hint in {err:?}; expected one with {hint:?}");
            assert_eq!(err.to_string(), head);
        }
        Some(got_hint) => {
            assert!(!hint.is_empty(), "unexpected hint in {err}");
            assert_eq!(err.to_string(), format!("{head}; {got_hint}"));
            for phrase in hint {
                assert!(got_hint.contains(phrase), "{phrase:?} missing from the hint of {err}");
            }
        }
    }
}

/// Asserts `err` is [`Error::WorkQueueFull`] from `verb` with `errno`, saying what to do.
#[track_caller]
pub fn assert_queue_full(err: &Error, verb: &str, errno: i32) {
    let Error::WorkQueueFull { verb: got, source } = err else {
        panic!("expected Error::WorkQueueFull from {verb}, got {err:?}");
    };
    assert_eq!(*got, verb, "{err}");
    assert_errno_source(source, errno);
    assert_eq!(
        err.to_string(),
        format!(
            "{verb} failed: {}; the work queue is full: reap completions before posting more \
             (max_send_wr / max_recv_wr)",
            errno_name(errno)
        )
    );
}

/// Whether `fd` is non-blocking (`O_NONBLOCK`).
pub fn is_non_blocking(fd: impl std::os::fd::AsFd) -> bool {
    use std::os::fd::AsRawFd;
    // SAFETY: F_GETFL on a live descriptor (borrowed for the call) only reads its flags.
    let flags = unsafe { libc::fcntl(fd.as_fd().as_raw_fd(), libc::F_GETFL) };
    assert_ne!(flags, -1, "F_GETFL");
    flags & libc::O_NONBLOCK != 0
}

/// Clears `O_NONBLOCK` on a duplicate of `fd`, which shares the flag with it: what a program
/// may do to a descriptor the crate made non-blocking.
pub fn clear_non_blocking_of_a_duplicate(fd: impl std::os::fd::AsFd) {
    use std::os::fd::AsRawFd;
    let dup = fd.as_fd().try_clone_to_owned().unwrap();
    // SAFETY: F_GETFL and F_SETFL on a live descriptor (owned for the calls) change only its
    // status flags.
    unsafe {
        let flags = libc::fcntl(dup.as_raw_fd(), libc::F_GETFL);
        assert_ne!(flags, -1, "F_GETFL");
        assert_ne!(libc::fcntl(dup.as_raw_fd(), libc::F_SETFL, flags & !libc::O_NONBLOCK), -1);
    }
    assert!(!is_non_blocking(fd), "cleared through the duplicate");
}

/// Asserts that `fd` is non-blocking (`O_NONBLOCK`), as the crate sets the descriptors it
/// polls.
#[track_caller]
pub fn assert_non_blocking(fd: impl std::os::fd::AsFd) {
    assert!(is_non_blocking(fd));
}

/// Asserts `err` says the provider or library lacks `what`.
#[track_caller]
pub fn assert_unsupported(err: &Error, what: &str) {
    assert!(matches!(err, Error::Unsupported { what: w } if *w == what), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("{what} is not supported by this provider or rdma-core version")
    );
}

/// RC QPs `a` and `b` of `pd`, in RTS and connected to each other (the mock executes what
/// one sends to the other), with `a`'s capacities `cap` and `a_cq`, `b` on `b_cq`.
pub fn loopback_pair<'a>(
    f: &'a Fixture,
    pd: &'a ProtectionDomain<'a>,
    (a_cq, b_cq): (&'a CompletionQueue<'a>, &'a CompletionQueue<'a>),
    cap: QpCapabilities,
) -> (QueuePair<'a, Rts>, QueuePair<'a, Rts>) {
    let a = pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(a_cq) }).unwrap();
    let b = pd.create_rc_qp(&QpInitAttr::new(b_cq)).unwrap();
    let gid = f.ctx.routable_gid(1).unwrap();
    let lid = f.ctx.query_port(1).unwrap().lid();
    let up = |qp: QueuePair<'a, Reset>, peer: Qpn| {
        let endpoint = Endpoint { lid, qpn: peer, psn: Psn::new(0).unwrap(), gid: gid.gid };
        let rtr = ToRtrAttr::to_endpoint(&endpoint, 1, Some(gid.index), Mtu::MTU_1024);
        let access = AccessFlags::REMOTE_WRITE;
        let init = qp.into_init(&ToInitAttr { access, ..Default::default() }).unwrap();
        init.into_rtr(&rtr).unwrap().into_rts(&ToRtsAttr::new(Psn::new(0).unwrap())).unwrap()
    };
    let (a_qpn, b_qpn) = (a.qp_num(), b.qp_num());
    (up(a, b_qpn), up(b, a_qpn))
}

/// RDMA WRITEs `pattern` from a buffer of `pool` through `qp` to `to`, and hands the buffer
/// back to `pool` once its completion, the only one on `cq`, says the WRITE succeeded.
pub fn write_through_pool<'a>(
    qp: &QueuePair<'a, Rts>,
    cq: &CompletionQueue<'_>,
    pool: &'a BufferPool<'a>,
    pattern: &[u8],
    to: RemoteAddr,
) {
    let mut buffer = pool.take().unwrap();
    buffer.fill(pattern).unwrap();
    qp.post_send_buffer(buffer, SendOp::RdmaWrite(to)).unwrap();
    let mut wcs = [WorkCompletion::EMPTY; 2];
    let polled = cq.poll(&mut wcs).unwrap();
    assert_eq!(polled.len(), 1);
    assert_eq!(polled[0].status(), WcStatus::SUCCESS);
    drop(pool.complete(&mut polled[0]).unwrap());
}
