//! Device memory (`ibv_alloc_dm(3)`): the `verbs_context` ops `alloc_dm`, `free_dm` and
//! `reg_dm_mr`, and the copy functions each `ibv_dm` carries.

use std::ffi::{c_int, c_uint, c_void};
use std::mem::offset_of;
use std::ptr;

use crate::bindings::*;

use super::{create_or_unsupported, verbs_ctx_op};

/// `ibv_alloc_dm(3)`: `length` bytes of the device's own memory, through the
/// `verbs_context.alloc_dm` op.
///
/// Returns the DM or NULL with `errno` set: `EOPNOTSUPP` when the context has no such op (a
/// provider without it gets libibverbs' stub, which fails with `EOPNOTSUPP` too).
///
/// # Safety
///
/// `ctx` must be a live context; `attr` readable.
pub unsafe fn ibv_alloc_dm(ctx: *mut ibv_context, attr: *mut ibv_alloc_dm_attr) -> *mut ibv_dm {
    // SAFETY: the caller guarantees a live context.
    let op = unsafe { verbs_ctx_op(ctx, offset_of!(verbs_context, alloc_dm), |v| &v.alloc_dm) };
    // SAFETY: the provider's op, if any, called with a live context and a readable attribute.
    unsafe { create_or_unsupported(op, ctx, attr) }
}

/// `ibv_free_dm(3)`: frees device memory through the `verbs_context.free_dm` op.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the context has no such op).
///
/// # Safety
///
/// `dm` must be a live DM, not used afterwards when this returns 0.
pub unsafe fn ibv_free_dm(dm: *mut ibv_dm) -> c_int {
    // SAFETY: the caller guarantees a live DM, whose context is live.
    let op =
        unsafe { verbs_ctx_op((*dm).context, offset_of!(verbs_context, free_dm), |v| &v.free_dm) };
    match op {
        // SAFETY: the provider's op, called with a live DM.
        Some(op) => unsafe { op(dm) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_reg_dm_mr(3)`: registers `length` bytes of `dm` from `dm_offset` on `pd`, through the
/// `verbs_context.reg_dm_mr` op. The region is zero-based: `access` must hold
/// `IBV_ACCESS_ZERO_BASED`, and SGEs and peers address it by offset.
///
/// Returns the MR or NULL with `errno` set: `EOPNOTSUPP` when the context has no such op.
///
/// # Safety
///
/// `pd` and `dm` must be live objects of the same context.
pub unsafe fn ibv_reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
    access: c_uint,
) -> *mut ibv_mr {
    // SAFETY: the caller guarantees a live PD, whose context is live.
    let op = unsafe {
        verbs_ctx_op((*pd).context, offset_of!(verbs_context, reg_dm_mr), |v| &v.reg_dm_mr)
    };
    match op {
        // SAFETY: the provider's op, called with a live PD and DM.
        Some(op) => unsafe { op(pd, dm, dm_offset, length, access) },
        None => {
            // SAFETY: `__errno_location` returns this thread's errno, always writable.
            unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
            ptr::null_mut()
        }
    }
}

/// `ibv_memcpy_to_dm(3)`: copies `length` bytes from `host_addr` into `dm` at `dm_offset`,
/// through the DM's own `memcpy_to_dm` member.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` for a NULL member, where the C inline would
/// crash).
///
/// # Safety
///
/// `dm` must be a live DM whose provider set its copy members (mlx5 does; MANA leaves them
/// uninitialised); `host_addr` readable for `length` bytes.
pub unsafe fn ibv_memcpy_to_dm(
    dm: *mut ibv_dm,
    dm_offset: u64,
    host_addr: *const c_void,
    length: usize,
) -> c_int {
    // SAFETY: the caller guarantees a live DM with its copy members set or NULL.
    match unsafe { (*dm).memcpy_to_dm } {
        // SAFETY: the provider's copy, with the caller's readable host memory.
        Some(op) => unsafe { op(dm, dm_offset, host_addr, length) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_memcpy_from_dm(3)`: copies `length` bytes of `dm` from `dm_offset` to `host_addr`,
/// through the DM's own `memcpy_from_dm` member.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` for a NULL member).
///
/// # Safety
///
/// As [`ibv_memcpy_to_dm`], with `host_addr` writable for `length` bytes.
pub unsafe fn ibv_memcpy_from_dm(
    host_addr: *mut c_void,
    dm: *mut ibv_dm,
    dm_offset: u64,
    length: usize,
) -> c_int {
    // SAFETY: the caller guarantees a live DM with its copy members set or NULL.
    match unsafe { (*dm).memcpy_from_dm } {
        // SAFETY: the provider's copy, into the caller's writable host memory.
        Some(op) => unsafe { op(host_addr, dm, dm_offset, length) },
        None => libc::EOPNOTSUPP,
    }
}
