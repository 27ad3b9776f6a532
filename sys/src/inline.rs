//! Rust versions of the `static inline` verbs of `verbs.h`.
//!
//! They read the same function pointers the C inlines read: the legacy `ibv_context.ops`
//! table for the data path, and the `verbs_context` ops in front of the `ibv_context` for
//! extended verbs, behind the same size check as `verbs_get_ctx_op`. A missing (NULL) op gives
//! `EOPNOTSUPP`, never a call through NULL.
//!
//! # Safety
//!
//! Every function here is `unsafe`: the object pointers must be live objects of the loaded
//! libibverbs (or of a mock provider built to the same layout), used as the man page of the
//! C verb allows.

use std::ffi::{c_int, c_uint, c_void};
use std::mem::{offset_of, size_of};
use std::ptr;

use crate::bindings::*;
use crate::loader::IbverbsFns;

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` value of a context embedded in a
/// `verbs_context`.
const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// Reads a `verbs_context` op of `ctx` (the C macro `verbs_get_ctx_op`): `None` when the
/// context is not extended, when the library's `verbs_context` (its `sz`) is too old to hold
/// the op, or when the op is NULL.
///
/// `op_offset` is `offset_of!(verbs_context, op)` and `_field` names the field, for its type.
///
/// # Safety
///
/// `ctx` must point to a live `ibv_context` opened by libibverbs (or a mock provider that
/// embeds it in a `verbs_context` the same way).
pub unsafe fn verbs_ctx_op<F: Copy>(
    ctx: *mut ibv_context,
    op_offset: usize,
    _field: fn(&verbs_context) -> &Option<F>,
) -> Option<F> {
    // SAFETY: the caller guarantees `ctx` is a live context.
    if unsafe { (*ctx).abi_compat } != VERBS_ABI_IS_EXTENDED {
        return None;
    }
    let ctx_offset = offset_of!(verbs_context, context);
    // SAFETY: an extended context is the last field of a `verbs_context`, whose `sz` (the
    // library's own size of it) sits right before the context.
    let sz = unsafe { ctx.cast::<u8>().sub(size_of::<usize>()).cast::<usize>().read() };
    // Ops are prepended as the struct grows, so the distance from an op to the end of the
    // struct is the same in every version; a library whose struct is shorter lacks the op.
    let distance = size_of::<verbs_context>() - op_offset;
    if sz < distance {
        return None;
    }
    // SAFETY: `sz >= distance`, so the op lies inside the library's allocation.
    unsafe { ctx.cast::<u8>().sub(ctx_offset - op_offset).cast::<Option<F>>().read() }
}

/// `ibv_post_send(3)`: posts a linked list of send work requests.
///
/// Returns 0 or an errno value (`*bad_wr` then points at the first rejected WR).
///
/// # Safety
///
/// `qp` must be a live QP; `wr` a valid list whose buffers obey `ibv_post_send(3)`'s rules;
/// `bad_wr` writable.
#[inline]
pub unsafe fn ibv_post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the caller guarantees a live QP, whose context is live.
    match unsafe { (*(*qp).context).ops.post_send } {
        // SAFETY: the provider's op, called with the caller's valid arguments.
        Some(op) => unsafe { op(qp, wr, bad_wr) },
        None => {
            // SAFETY: the caller guarantees `bad_wr` is writable.
            unsafe { bad_wr.write(wr) };
            libc::EOPNOTSUPP
        }
    }
}

/// `ibv_post_recv(3)`: posts a linked list of receive work requests.
///
/// Returns 0 or an errno value (`*bad_wr` then points at the first rejected WR).
///
/// # Safety
///
/// As [`ibv_post_send`], for receive WRs.
#[inline]
pub unsafe fn ibv_post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller guarantees a live QP, whose context is live.
    match unsafe { (*(*qp).context).ops.post_recv } {
        // SAFETY: the provider's op, called with the caller's valid arguments.
        Some(op) => unsafe { op(qp, wr, bad_wr) },
        None => {
            // SAFETY: the caller guarantees `bad_wr` is writable.
            unsafe { bad_wr.write(wr) };
            libc::EOPNOTSUPP
        }
    }
}

/// `ibv_post_srq_recv(3)`: posts a linked list of receive work requests to a shared receive
/// queue.
///
/// Returns 0 or an errno value (`*bad_wr` then points at the first rejected WR).
///
/// # Safety
///
/// `srq` must be a live SRQ; `wr` and `bad_wr` as for [`ibv_post_recv`].
#[inline]
pub unsafe fn ibv_post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller guarantees a live SRQ, whose context is live.
    match unsafe { (*(*srq).context).ops.post_srq_recv } {
        // SAFETY: the provider's op, called with the caller's valid arguments.
        Some(op) => unsafe { op(srq, wr, bad_wr) },
        None => {
            // SAFETY: the caller guarantees `bad_wr` is writable.
            unsafe { bad_wr.write(wr) };
            libc::EOPNOTSUPP
        }
    }
}

/// `ibv_poll_cq(3)`: reaps up to `num_entries` completions into `wc`.
///
/// Returns the number reaped (0 when empty) or a negative value on error.
///
/// # Safety
///
/// `cq` must be a live CQ and `wc` writable for `num_entries` entries.
#[inline]
pub unsafe fn ibv_poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    // SAFETY: the caller guarantees a live CQ, whose context is live.
    match unsafe { (*(*cq).context).ops.poll_cq } {
        // SAFETY: the provider's op, called with the caller's valid arguments.
        Some(op) => unsafe { op(cq, num_entries, wc) },
        None => -libc::EOPNOTSUPP,
    }
}

/// `ibv_req_notify_cq(3)`: arms the CQ's completion channel for the next completion (or the
/// next solicited one when `solicited_only` is non-zero).
///
/// Returns 0 or an errno value.
///
/// # Safety
///
/// `cq` must be a live CQ.
#[inline]
pub unsafe fn ibv_req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    // SAFETY: the caller guarantees a live CQ, whose context is live.
    match unsafe { (*(*cq).context).ops.req_notify_cq } {
        // SAFETY: the provider's op, called with a live CQ.
        Some(op) => unsafe { op(cq, solicited_only) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_query_port(3)`: the extended `query_port` op with this build's struct size, else the
/// `IBVERBS_1.1` compat symbol into a zeroed struct (it fills the 48-byte prefix).
///
/// Returns 0 or an errno value.
///
/// # Safety
///
/// `ctx` must be a live context of the library `fns` came from; `attr` writable.
pub unsafe fn ibv_query_port(
    fns: &IbverbsFns,
    ctx: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
) -> c_int {
    // SAFETY: the caller guarantees a live context.
    let op = unsafe { verbs_ctx_op(ctx, offset_of!(verbs_context, query_port), |v| &v.query_port) };
    if let Some(op) = op {
        // SAFETY: the library copes with any struct size it is told (it copies or zeroes).
        return unsafe { op(ctx, port_num, attr, size_of::<ibv_port_attr>()) };
    }
    // SAFETY: the caller guarantees `attr` is writable.
    unsafe { ptr::write_bytes(attr, 0, 1) };
    // SAFETY: the compat struct is a prefix of `ibv_port_attr`, so the write stays inside it.
    unsafe { (fns.ibv_query_port)(ctx, port_num, attr.cast()) }
}

/// `ibv_reg_mr(3)`: `ibv_reg_mr_iova2` with `iova = addr` when the library has it (v28+),
/// else `ibv_reg_mr` with the optional access bits removed, as the C inline does.
///
/// Returns the MR or NULL with `errno` set.
///
/// # Safety
///
/// `pd` must be a live PD of the library `fns` came from; `addr..addr+length` must be memory
/// that stays mapped until the MR is deregistered.
pub unsafe fn ibv_reg_mr(
    fns: &IbverbsFns,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_uint,
) -> *mut ibv_mr {
    match fns.ibv_reg_mr_iova2 {
        // SAFETY: forwarded under the caller's guarantees.
        Some(reg) => unsafe { reg(pd, addr, length, addr as u64, access) },
        // SAFETY: forwarded under the caller's guarantees; the access bits fit in a c_int.
        None => unsafe {
            (fns.ibv_reg_mr)(
                pd,
                addr,
                length,
                (access & !crate::IBV_ACCESS_OPTIONAL_RANGE) as c_int,
            )
        },
    }
}

/// `ibv_query_gid_ex(3)`: one GID table entry with its type and netdev.
///
/// Returns 0 or an errno value: `ENODATA` for an empty entry, `EOPNOTSUPP` when the library
/// predates `_ibv_query_gid_ex` (rdma-core v32).
///
/// # Safety
///
/// `ctx` must be a live context of the library `fns` came from; `entry` writable.
pub unsafe fn ibv_query_gid_ex(
    fns: &IbverbsFns,
    ctx: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
) -> c_int {
    match fns._ibv_query_gid_ex {
        // SAFETY: forwarded under the caller's guarantees, with this build's entry size.
        Some(query) => unsafe {
            query(ctx, port_num, gid_index, entry, flags, size_of::<ibv_gid_entry>())
        },
        None => libc::EOPNOTSUPP,
    }
}
