//! Thread domains and parent domains (`ibv_alloc_td(3)`, `ibv_alloc_parent_domain(3)`): the
//! `verbs_context` ops `alloc_td`, `dealloc_td` and `alloc_parent_domain`. A parent domain is
//! freed as a PD, by `ibv_dealloc_pd`.

use std::ffi::c_int;
use std::mem::offset_of;

use crate::bindings::*;

use super::{create_or_unsupported, verbs_ctx_op};

/// `ibv_alloc_td(3)`: a thread domain, through the `verbs_context.alloc_td` op.
///
/// Returns the TD or NULL with `errno` set: `EOPNOTSUPP` when the context has no such op (a
/// provider without it gets libibverbs' stub, which fails with `EOPNOTSUPP` too).
///
/// # Safety
///
/// `ctx` must be a live context; `attr` readable.
pub unsafe fn ibv_alloc_td(ctx: *mut ibv_context, attr: *mut ibv_td_init_attr) -> *mut ibv_td {
    // SAFETY: the caller guarantees a live context.
    let op = unsafe { verbs_ctx_op(ctx, offset_of!(verbs_context, alloc_td), |v| &v.alloc_td) };
    // SAFETY: the provider's op, if any, called with a live context and a readable attribute.
    unsafe { create_or_unsupported(op, ctx, attr) }
}

/// `ibv_dealloc_td(3)`: frees a thread domain through the `verbs_context.dealloc_td` op.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the context has no such op).
///
/// # Safety
///
/// `td` must be a live TD, not used afterwards when this returns 0.
pub unsafe fn ibv_dealloc_td(td: *mut ibv_td) -> c_int {
    // SAFETY: the caller guarantees a live TD, whose context is live.
    let op = unsafe {
        verbs_ctx_op((*td).context, offset_of!(verbs_context, dealloc_td), |v| &v.dealloc_td)
    };
    match op {
        // SAFETY: the provider's op, called with a live TD.
        Some(op) => unsafe { op(td) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_alloc_parent_domain(3)`: a parent domain of `attr.pd` (and `attr.td`, if not NULL),
/// through the `verbs_context.alloc_parent_domain` op.
///
/// Returns the parent domain, a PD, or NULL with `errno` set: `EOPNOTSUPP` when the context
/// has no such op.
///
/// # Safety
///
/// `ctx` must be a live context; `attr` readable, naming a live PD (and TD) of `ctx`.
pub unsafe fn ibv_alloc_parent_domain(
    ctx: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    // SAFETY: the caller guarantees a live context.
    let op = unsafe {
        verbs_ctx_op(ctx, offset_of!(verbs_context, alloc_parent_domain), |v| {
            &v.alloc_parent_domain
        })
    };
    // SAFETY: the provider's op, if any, called under the caller's guarantees.
    unsafe { create_or_unsupported(op, ctx, attr) }
}
