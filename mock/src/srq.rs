//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`, `ibv_destroy_srq`. Receives
//! are posted with the context's `post_srq_recv` op (see `post.rs`) and consumed by the QPs
//! created with the SRQ.

use std::collections::VecDeque;
use std::ffi::c_int;

use rdma_verbs_sys::bindings::*;

use super::call::{Call, Verb};
use super::device::device_attr;
use super::registry::SrqInfo;
use super::rule::Queue;
use super::state::{serve, Kind, State};
use super::verbs::{destroy, or_null, status};

/// `ibv_create_srq`: `EINVAL` for sizes above [`device_attr`]'s limits or 0 entries; updates
/// `attr` with `max_wr` rounded up to a power of two.
///
/// # Safety
///
/// `init_attr` must be valid for reads and writes.
pub(super) unsafe extern "C" fn ibv_create_srq(
    pd: *mut ibv_pd,
    init_attr: *mut ibv_srq_init_attr,
) -> *mut ibv_srq {
    // SAFETY: the caller passes a valid, exclusive struct.
    let init = unsafe { &mut *init_attr };
    let attr = &mut init.attr;
    let call = Call::CreateSrq { max_wr: attr.max_wr, max_sge: attr.max_sge };
    or_null(serve(|s| {
        s.begin(call, Verb::CreateSrq)?;
        s.expect(pd, Kind::Pd)?;
        new_srq(s, pd, init.srq_context, attr)
    }))
}

/// An SRQ of the live PD `pd` with `srq_context`, for both create verbs: `EINVAL` for sizes
/// above [`device_attr`]'s limits or 0 entries; `attr.max_wr` rounded up to a power of two.
pub(super) fn new_srq(
    s: &mut State,
    pd: *mut ibv_pd,
    srq_context: *mut std::ffi::c_void,
    attr: &mut ibv_srq_attr,
) -> Result<*mut ibv_srq, c_int> {
    let limits = device_attr();
    if attr.max_wr == 0
        || attr.max_wr > limits.max_srq_wr.max(limits.max_qp_wr) as u32
        || attr.max_sge > limits.max_sge as u32
    {
        return Err(libc::EINVAL);
    }
    attr.max_wr = attr.max_wr.next_power_of_two();
    // SAFETY: `pd` is a live mock PD (checked by the caller).
    let context = unsafe { (*pd).context };
    let handle = s.next_id();
    // SAFETY: all-zero is a valid ibv_srq (NULL pointers, zeroed mutex and condvar).
    let mut srq: ibv_srq = unsafe { std::mem::zeroed() };
    srq.context = context;
    srq.srq_context = srq_context;
    srq.pd = pd;
    srq.handle = handle;
    let info = SrqInfo { pd, max_sge: attr.max_sge, rq: VecDeque::new(), inflight: Vec::new() };
    s.reg.srqs.insert(handle, info);
    Ok(s.adopt(srq, Kind::Srq))
}

/// `ibv_modify_srq`: accepts `IBV_SRQ_LIMIT` (the limit is not modelled: no event is ever
/// raised); `EINVAL` for `IBV_SRQ_MAX_WR` (the mock cannot resize) or unknown bits.
pub(super) extern "C" fn ibv_modify_srq(
    srq: *mut ibv_srq,
    _attr: *mut ibv_srq_attr,
    mask: c_int,
) -> c_int {
    status(serve(|s| {
        s.begin(Call::ModifySrq { mask }, Verb::ModifySrq)?;
        s.expect(srq, Kind::Srq)?;
        if mask as u32 & !IBV_SRQ_LIMIT != 0 {
            return Err(libc::EINVAL);
        }
        Ok(())
    }))
}

/// `ibv_destroy_srq`: `EBUSY` while a QP uses it; its receives are discarded.
pub(super) extern "C" fn ibv_destroy_srq(srq: *mut ibv_srq) -> c_int {
    destroy(srq, Kind::Srq, Call::DestroySrq, Verb::DestroySrq, |s| {
        // SAFETY: a live mock SRQ (checked before `forget`).
        let handle = unsafe { (*srq).handle };
        if s.reg.qps.values().any(|qp| qp.srq == Some(handle)) {
            return Err(libc::EBUSY);
        }
        s.reg.discard(Queue::Srq(handle));
        s.reg.srqs.remove(&handle);
        Ok(())
    })
}
