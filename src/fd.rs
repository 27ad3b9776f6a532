//! The two descriptor operations of the verbs' event files (completion channels, a context's
//! async events): switching one to non-blocking, and sleeping until one is readable.
#![allow(unsafe_code)]
//! # Safety
//!
//! Both functions take a [`BorrowedFd`], so the descriptor is open for the call.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Instant;

use crate::error::{check_errno, Result};

/// Sets `O_NONBLOCK` on `fd`. `what` names the file in errors ("a completion channel").
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>, what: &str) -> Result<()> {
    let on = |e: crate::Error| e.with_hint(format!("on the descriptor of {what}"));
    // SAFETY: F_GETFL on a live descriptor reads its flags.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags == -1 {
        return check_errno(-1, "fcntl(F_GETFL)").map_err(on);
    }
    if flags & libc::O_NONBLOCK != 0 {
        return Ok(());
    }
    // SAFETY: F_SETFL on a live descriptor changes only its status flags.
    let ret = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, flags | libc::O_NONBLOCK) };
    check_errno(ret, "fcntl(F_SETFL, O_NONBLOCK)").map_err(on)
}

/// Sleeps until `fd` is readable (`true`) or `deadline` passes (`false`; `None`: never).
/// Signals do not end the wait early. `what` names the file in errors.
pub(crate) fn wait_readable(
    fd: BorrowedFd<'_>,
    deadline: Option<Instant>,
    what: &str,
) -> Result<bool> {
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let ts = left.map(|d| libc::timespec {
            tv_sec: d.as_secs().try_into().unwrap_or(libc::time_t::MAX),
            tv_nsec: d.subsec_nanos().into(),
        });
        let ts = ts.as_ref().map_or(std::ptr::null(), |ts| ts as *const libc::timespec);
        let mut pollfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, a valid timespec or NULL, and no signal mask.
        let ready = unsafe { libc::ppoll(&mut pollfd, 1, ts, std::ptr::null()) };
        match check_errno(ready.min(0), "ppoll") {
            Err(e) if e.errno() == Some(libc::EINTR) => continue,
            Err(e) => return Err(e.with_hint(format!("waiting on {what}"))),
            Ok(()) => return Ok(ready > 0),
        }
    }
}
