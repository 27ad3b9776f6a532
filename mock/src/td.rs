//! Thread domains and parent domains: the `alloc_td`, `dealloc_td` and `alloc_parent_domain`
//! ops of a context with
//! [`ContextConfig::thread_domains`](super::ContextConfig::thread_domains). As mlx5: `EINVAL`
//! for a `comp_mask` it does not know, `EBUSY` for a TD or PD a parent domain is bound to. A
//! parent domain is a PD, freed by `ibv_dealloc_pd`.

use std::ffi::c_int;

use rdma_verbs_sys::bindings::*;

use super::call::{Call, Verb};
use super::state::{serve, Kind};
use super::verbs::{destroy, or_null};

/// A mock parent domain: the `ibv_pd` callers see, first, and what it is bound to.
#[repr(C)]
pub(super) struct MockParentDomain {
    pd: ibv_pd,
    /// The protection domain it was allocated on.
    pub(super) protection: *mut ibv_pd,
    /// Its thread domain, or NULL.
    pub(super) td: *mut ibv_td,
}

/// `verbs_context.alloc_td`.
///
/// # Safety
///
/// `attr` must be readable.
pub(super) unsafe extern "C" fn alloc_td(
    context: *mut ibv_context,
    attr: *mut ibv_td_init_attr,
) -> *mut ibv_td {
    // SAFETY: the caller made `attr` readable.
    let comp_mask = unsafe { (*attr).comp_mask };
    or_null(serve(|s| {
        s.begin(Call::AllocTd, Verb::AllocTd)?;
        s.expect(context, Kind::Context)?;
        if comp_mask != 0 {
            return Err(libc::EINVAL);
        }
        Ok(s.adopt(ibv_td { context }, Kind::Td))
    }))
}

/// `verbs_context.dealloc_td`: `EBUSY` while a parent domain is bound to it.
pub(super) extern "C" fn dealloc_td(td: *mut ibv_td) -> c_int {
    destroy(td, Kind::Td, Call::DeallocTd, Verb::DeallocTd, |s| {
        if s.td_in_use(td) {
            return Err(libc::EBUSY);
        }
        Ok(())
    })
}

/// `verbs_context.alloc_parent_domain`: `EINVAL` for a PD or TD that is not a live one of the
/// context (a parent domain is no PD for another), or a `comp_mask`.
///
/// # Safety
///
/// `attr` must be readable.
pub(super) unsafe extern "C" fn alloc_parent_domain(
    context: *mut ibv_context,
    attr: *mut ibv_parent_domain_init_attr,
) -> *mut ibv_pd {
    // SAFETY: the caller made `attr` readable.
    let (protection, td, comp_mask) = unsafe { ((*attr).pd, (*attr).td, (*attr).comp_mask) };
    let call = Call::AllocParentDomain { td: !td.is_null(), comp_mask };
    or_null(serve(|s| {
        s.begin(call, Verb::AllocParentDomain)?;
        s.expect(context, Kind::Context)?;
        s.expect(protection, Kind::Pd)?;
        if s.expect(protection, Kind::ParentDomain).is_ok() || comp_mask != 0 {
            return Err(libc::EINVAL);
        }
        if !td.is_null() {
            s.expect(td, Kind::Td)?;
        }
        // SAFETY: live mock PD and TD (checked above).
        let same = unsafe {
            (*protection).context == context && (td.is_null() || (*td).context == context)
        };
        if !same {
            return Err(libc::EINVAL);
        }
        let handle = s.next_id();
        let pd = ibv_pd { context, handle };
        let parent = s.adopt(MockParentDomain { pd, protection, td }, Kind::ParentDomain);
        Ok(parent.cast::<ibv_pd>())
    }))
}
