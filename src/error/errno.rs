//! Verbs' return conventions (0 or an errno, NULL and `errno`) as [`Error`]s, and errno
//! names.

use std::io;
use std::ptr::NonNull;

use super::{Error, PostListError, Result};

/// Whether `errno` from `verb` means the work queue is full.
pub(super) fn is_queue_full(verb: &str, errno: i32) -> bool {
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
pub(super) fn errno_label(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(code) => errno_name(code).map_or_else(|| format!("errno {code}"), str::to_owned),
        None => format!("{:?}", e.kind()),
    }
}

/// The symbolic name of the errnos verbs return.
fn errno_name(errno: i32) -> Option<&'static str> {
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
