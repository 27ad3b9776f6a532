//! XRC (eXtended Reliable Connected) domains and SRQs (`ibv_open_xrcd(3)`,
//! `ibv_create_srq_ex(3)`, `ibv_get_srq_num(3)`): the `verbs_context` ops `open_xrcd`,
//! `close_xrcd`, `create_srq_ex` and `get_srq_num`. mlx5 and hns have them; rxe and siw get
//! libibverbs' stubs, which answer `EOPNOTSUPP`, as these do when the op is missing.

use std::ffi::c_int;
use std::mem::offset_of;

use crate::bindings::*;

use super::{create_or_unsupported, verbs_ctx_op};

/// `ibv_open_xrcd(3)`: opens an XRC domain through the `verbs_context.open_xrcd` op.
///
/// Returns the XRCD or NULL with `errno` set: `EOPNOTSUPP` when the context has no such op.
///
/// # Safety
///
/// `ctx` must be a live context; `attr` readable.
pub unsafe fn ibv_open_xrcd(ctx: *mut ibv_context, attr: *mut ibv_xrcd_init_attr) -> *mut ibv_xrcd {
    // SAFETY: the caller guarantees a live context.
    let op = unsafe { verbs_ctx_op(ctx, offset_of!(verbs_context, open_xrcd), |v| &v.open_xrcd) };
    // SAFETY: the provider's op, if any, called with a live context and a readable attribute.
    unsafe { create_or_unsupported(op, ctx, attr) }
}

/// `ibv_close_xrcd(3)`: closes an XRC domain through the `verbs_context.close_xrcd` op.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the context has no such op: the C inline
/// calls it unchecked, but a context that opened the XRCD has it).
///
/// # Safety
///
/// `xrcd` must be a live XRCD, not used afterwards when this returns 0.
pub unsafe fn ibv_close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    // SAFETY: the caller guarantees a live XRCD, whose context is live.
    let op = unsafe {
        verbs_ctx_op((*xrcd).context, offset_of!(verbs_context, close_xrcd), |v| &v.close_xrcd)
    };
    match op {
        // SAFETY: the provider's op, called with a live XRCD.
        Some(op) => unsafe { op(xrcd) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_create_srq_ex(3)`: an SRQ of any type through the `verbs_context.create_srq_ex` op;
/// a basic SRQ asking for nothing but a PD (and a type) goes to `ibv_create_srq`, as the C
/// inline does.
///
/// Returns the SRQ or NULL with `errno` set: `EOPNOTSUPP` when the context has no such op.
///
/// # Safety
///
/// `ctx` must be a live context; `attr` valid for reads and writes, naming live objects of
/// `ctx` in the fields its `comp_mask` selects.
pub unsafe fn ibv_create_srq_ex(
    fns: &crate::loader::IbverbsFns,
    ctx: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    // SAFETY: the caller made `attr` readable.
    let (mask, srq_type, pd) = unsafe { ((*attr).comp_mask, (*attr).srq_type, (*attr).pd) };
    let basic = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_TYPE;
    if mask & !basic == 0
        && mask & IBV_SRQ_INIT_ATTR_PD != 0
        && (mask & IBV_SRQ_INIT_ATTR_TYPE == 0 || srq_type == IBV_SRQT_BASIC)
    {
        // SAFETY: `ibv_srq_init_attr` is the prefix of `ibv_srq_init_attr_ex`; a live PD.
        return unsafe { (fns.ibv_create_srq)(pd, attr.cast()) };
    }
    // SAFETY: the caller guarantees a live context.
    let op = unsafe {
        verbs_ctx_op(ctx, offset_of!(verbs_context, create_srq_ex), |v| &v.create_srq_ex)
    };
    // SAFETY: the provider's op, if any, called under the caller's guarantees.
    unsafe { create_or_unsupported(op, ctx, attr) }
}

/// `ibv_get_srq_num(3)`: the number of an XRC SRQ, which senders name in their work
/// requests, through the `verbs_context.get_srq_num` op.
///
/// Returns 0 (with `*srq_num` set) or an errno value (`EOPNOTSUPP` when the context has no
/// such op).
///
/// # Safety
///
/// `srq` must be a live SRQ; `srq_num` writable.
pub unsafe fn ibv_get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    // SAFETY: the caller guarantees a live SRQ, whose context is live.
    let op = unsafe {
        verbs_ctx_op((*srq).context, offset_of!(verbs_context, get_srq_num), |v| &v.get_srq_num)
    };
    match op {
        // SAFETY: the provider's op, called with a live SRQ and a writable number.
        Some(op) => unsafe { op(srq, srq_num) },
        None => libc::EOPNOTSUPP,
    }
}
