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

mod cq_ex;
mod dm;
mod qp_ex;
mod td;
mod xrc;
pub use cq_ex::*;
pub use dm::*;
pub use qp_ex::*;
pub use td::*;
pub use xrc::*;
#[cfg(rdma_verbs_mlx5dv)]
mod mlx5dv;
#[cfg(rdma_verbs_mlx5dv)]
pub use mlx5dv::*;

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
    let op = unsafe { (*(*qp).context).ops.post_send };
    // SAFETY: the provider's op (if any) with the caller's valid arguments.
    unsafe { post_or_unsupported(op, qp, wr, bad_wr) }
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
    let op = unsafe { (*(*qp).context).ops.post_recv };
    // SAFETY: the provider's op (if any) with the caller's valid arguments.
    unsafe { post_or_unsupported(op, qp, wr, bad_wr) }
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
    let op = unsafe { (*(*srq).context).ops.post_srq_recv };
    // SAFETY: the provider's op (if any) with the caller's valid arguments.
    unsafe { post_or_unsupported(op, srq, wr, bad_wr) }
}

/// A provider's create op `op` called with `object` and `arg`; without one (the provider
/// lacks it), NULL with `errno` `EOPNOTSUPP`, as the C inline verbs answer.
///
/// # Safety
///
/// As the verb `op` implements: `object` live, `arg` valid for it.
#[inline]
unsafe fn create_or_unsupported<O, A, R>(
    op: Option<unsafe extern "C" fn(*mut O, A) -> *mut R>,
    object: *mut O,
    arg: A,
) -> *mut R {
    match op {
        // SAFETY: the provider's op, called under the caller's guarantees.
        Some(op) => unsafe { op(object, arg) },
        None => {
            // SAFETY: `__errno_location` returns this thread's errno, always writable.
            unsafe { *libc::__errno_location() = libc::EOPNOTSUPP };
            ptr::null_mut()
        }
    }
}

/// A provider's post op `op` called with the caller's arguments; without one (the provider
/// lacks it), `*bad_wr = wr` and `EOPNOTSUPP`, as the C inline verbs answer.
///
/// # Safety
///
/// As the post verb `op` implements: `queue` live, `wr` a valid list whose buffers obey its
/// rules, `bad_wr` writable.
#[inline]
unsafe fn post_or_unsupported<Q, W>(
    op: Option<unsafe extern "C" fn(*mut Q, *mut W, *mut *mut W) -> c_int>,
    queue: *mut Q,
    wr: *mut W,
    bad_wr: *mut *mut W,
) -> c_int {
    match op {
        // SAFETY: the provider's op, called with the caller's valid arguments.
        Some(op) => unsafe { op(queue, wr, bad_wr) },
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

/// `ibv_modify_cq(3)`: the `verbs_context.modify_cq` op (CQ moderation); `EOPNOTSUPP` where
/// the context or the provider has none.
///
/// Returns 0 or an errno value.
///
/// # Safety
///
/// `cq` must be a live CQ; `attr` readable.
pub unsafe fn ibv_modify_cq(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int {
    // SAFETY: the caller guarantees a live CQ, whose context is live.
    let op = unsafe {
        verbs_ctx_op((*cq).context, offset_of!(verbs_context, modify_cq), |v| &v.modify_cq)
    };
    match op {
        // SAFETY: the provider's op, called with a live CQ and a readable attribute struct.
        Some(op) => unsafe { op(cq, attr) },
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

/// `ibv_alloc_mw(3)`: a memory window of `type_` (`IBV_MW_TYPE_1` or `IBV_MW_TYPE_2`) on `pd`,
/// through `ibv_context.ops.alloc_mw`.
///
/// Returns the window or NULL with `errno` set: `EOPNOTSUPP` when the provider has no
/// `alloc_mw` op.
///
/// # Safety
///
/// `pd` must be a live PD.
pub unsafe fn ibv_alloc_mw(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw {
    // SAFETY: the caller guarantees a live PD, whose context is live.
    let op = unsafe { (*(*pd).context).ops.alloc_mw };
    // SAFETY: the provider's op (if any) with a live PD.
    unsafe { create_or_unsupported(op, pd, type_) }
}

/// `ibv_dealloc_mw(3)`: frees a memory window through `ibv_context.ops.dealloc_mw`.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` for a NULL op, where the C inline would crash).
///
/// # Safety
///
/// `mw` must be a live window, not used afterwards when this returns 0.
pub unsafe fn ibv_dealloc_mw(mw: *mut ibv_mw) -> c_int {
    // SAFETY: the caller guarantees a live window, whose context is live.
    match unsafe { (*(*mw).context).ops.dealloc_mw } {
        // SAFETY: the provider's op, called with a live window.
        Some(op) => unsafe { op(mw) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_bind_mw(3)`: binds a type-1 window by posting a bind work request on `qp`, after the C
/// inline's checks: `EINVAL` unless `mw` is type 1, `EINVAL` for an address or length without
/// an MR, `EPERM` when the MR's PD is not the window's. Then `ibv_context.ops.bind_mw`
/// (`EOPNOTSUPP` when NULL), which on success stores the window's new rkey in `mw.rkey`.
///
/// Returns 0 or an errno value.
///
/// # Safety
///
/// `qp` and `mw` must be live objects of one context; `mw_bind` readable, and its MR, when
/// not NULL, live.
pub unsafe fn ibv_bind_mw(qp: *mut ibv_qp, mw: *mut ibv_mw, mw_bind: *mut ibv_mw_bind) -> c_int {
    // SAFETY: the caller guarantees `mw` is live and `mw_bind` readable.
    let (mw_ref, info) = unsafe { (&*mw, (*mw_bind).bind_info) };
    if mw_ref.type_ != IBV_MW_TYPE_1 {
        return libc::EINVAL;
    }
    if info.mr.is_null() && (info.addr != 0 || info.length != 0) {
        return libc::EINVAL;
    }
    // SAFETY: a non-NULL MR is live (the caller's guarantee).
    if !info.mr.is_null() && unsafe { (*info.mr).pd } != mw_ref.pd {
        return libc::EPERM;
    }
    // SAFETY: the window's context is live.
    match unsafe { (*mw_ref.context).ops.bind_mw } {
        // SAFETY: the provider's op, called with the caller's valid arguments.
        Some(op) => unsafe { op(qp, mw, mw_bind) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_inc_rkey(3)`: `rkey` with its low 8 bits (the key, which the consumer owns) advanced
/// by one, wrapping; the upper 24 bits (the index) unchanged.
pub const fn ibv_inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

/// `ibv_query_device_ex(3)` without input (`input` NULL): the extended `query_device_ex` op
/// with this build's struct size; when the library or provider lacks it (`EOPNOTSUPP` /
/// `ENOSYS`), `ibv_query_device` into `attr.orig_attr` with the rest zeroed, as the C inline
/// does.
///
/// Returns 0 or an errno value.
///
/// # Safety
///
/// `ctx` must be a live context of the library `fns` came from; `attr` writable.
pub unsafe fn ibv_query_device_ex(
    fns: &IbverbsFns,
    ctx: *mut ibv_context,
    attr: *mut ibv_device_attr_ex,
) -> c_int {
    // SAFETY: the caller guarantees a live context.
    let op = unsafe {
        verbs_ctx_op(ctx, offset_of!(verbs_context, query_device_ex), |v| &v.query_device_ex)
    };
    if let Some(op) = op {
        // SAFETY: the library fills at most the size it is told.
        let ret = unsafe { op(ctx, ptr::null(), attr, size_of::<ibv_device_attr_ex>()) };
        if ret != libc::EOPNOTSUPP && ret != libc::ENOSYS {
            return ret;
        }
    }
    // SAFETY: the caller guarantees `attr` is writable.
    unsafe { ptr::write_bytes(attr, 0, 1) };
    // SAFETY: `orig_attr` is a field of the writable `attr`.
    unsafe { (fns.ibv_query_device)(ctx, &raw mut (*attr).orig_attr) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inc_rkey_advances_only_the_key_byte() {
        assert_eq!(ibv_inc_rkey(0x1234_5600), 0x1234_5601);
        assert_eq!(ibv_inc_rkey(0x1234_56ff), 0x1234_5600);
        assert_eq!(ibv_inc_rkey(u32::MAX), 0xffff_ff00);
    }

    /// The checks run before the window's context is read: these windows have none, so
    /// reaching the op would crash.
    #[test]
    fn bind_mw_checks_type_mr_and_pd_before_the_op() {
        let (mut pd_a, mut pd_b) = (ibv_pd::default(), ibv_pd::default());
        let window = |type_, pd: &mut ibv_pd| ibv_mw {
            context: ptr::null_mut(),
            pd,
            rkey: 0,
            handle: 0,
            type_,
        };
        let mut mr = ibv_mr { pd: &mut pd_b, ..Default::default() };
        let bind = |mr: *mut ibv_mr, addr, length| ibv_mw_bind {
            wr_id: 0,
            send_flags: 0,
            bind_info: ibv_mw_bind_info { mr, addr, length, mw_access_flags: 0 },
        };
        let qp = ptr::null_mut();
        let mut type2 = window(IBV_MW_TYPE_2, &mut pd_a);
        let mut type1 = window(IBV_MW_TYPE_1, &mut pd_a);
        // SAFETY: every call returns before touching the context, QP or (for the first two)
        // the MR.
        unsafe {
            let mut b = bind(&mut mr, 0x1000, 64);
            assert_eq!(ibv_bind_mw(qp, &mut type2, &mut b), libc::EINVAL);
            let mut b = bind(ptr::null_mut(), 0x1000, 64);
            assert_eq!(ibv_bind_mw(qp, &mut type1, &mut b), libc::EINVAL);
            let mut b = bind(&mut mr, 0x1000, 64);
            assert_eq!(ibv_bind_mw(qp, &mut type1, &mut b), libc::EPERM);
        }
    }
}
