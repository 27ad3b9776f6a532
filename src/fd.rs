//! The two descriptor operations of the verbs' event files (completion channels, a context's
//! async events): switching one to non-blocking, and sleeping until one is readable.
#![allow(unsafe_code)]
//! # Safety
//!
//! Both functions take a [`BorrowedFd`], so the descriptor is open for the call.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use crate::error::{check_errno, last_errno, Error, Result};

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

/// What is left of a wait: `None` for no limit. [`wait_readable`] counts it down, so a
/// caller that sleeps again after a wake-up that found nothing keeps its original deadline
/// without reading the clock.
pub(crate) struct TimeLeft(Option<libc::timespec>);

impl TimeLeft {
    /// `timeout` from now; one beyond `time_t` is no limit.
    pub(crate) fn new(timeout: Option<Duration>) -> Self {
        TimeLeft(timeout.and_then(|t| {
            Some(libc::timespec {
                tv_sec: t.as_secs().try_into().ok()?,
                tv_nsec: t.subsec_nanos().into(),
            })
        }))
    }
}

/// Sleeps until `fd` is readable (`true`) or `left` runs out (`false`). Signals do not end
/// the wait early. `what` names the file in errors.
///
/// The system call, not glibc's wrapper: the kernel's `ppoll` writes the time left back into
/// its timespec, which the wrapper hides (ppoll(2), "C library/kernel differences"). So a
/// wait reads no clock, and one resumed after a signal or an empty wake-up ends on time.
pub(crate) fn wait_readable(fd: BorrowedFd<'_>, left: &mut TimeLeft, what: &str) -> Result<bool> {
    let ts = left.0.as_mut().map_or(std::ptr::null_mut(), |ts| ts as *mut libc::timespec);
    let mut pollfd = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    loop {
        // SAFETY: one valid pollfd; a writable timespec (of the kernel's layout on the 64-bit
        // targets this crate builds for) or NULL; no signal mask, and so no size for one.
        let ready = unsafe {
            libc::syscall(
                libc::SYS_ppoll,
                &mut pollfd as *mut libc::pollfd,
                1 as libc::c_ulong,
                ts,
                std::ptr::null::<libc::sigset_t>(),
                0usize,
            )
        };
        if ready >= 0 {
            return Ok(ready > 0);
        }
        match last_errno() {
            libc::EINTR => continue,
            errno => {
                return Err(Error::verb("ppoll", errno).with_hint(format!("waiting on {what}")))
            }
        }
    }
}
