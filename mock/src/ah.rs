//! Address handles: `ibv_create_ah` and `ibv_destroy_ah`. A UD work request must name a live
//! one of its QP's PD; its destination is the work request's `remote_qpn` (the mock has one
//! port, so every AH leads back to it).

use std::ffi::c_int;

use rdma_verbs_sys::bindings::*;

use super::call::{Call, QpAttr, Verb};
use super::ops::check_port;
use super::state::{serve, Kind, State};
use super::verbs::{destroy, gid_entry, or_null};

/// `ibv_create_ah`: `EINVAL` for another port than 1, or (the port is Ethernet) no GRH naming
/// a valid source GID, as RoCE providers refuse.
///
/// # Safety
///
/// `attr` must be valid for reads.
pub(super) unsafe extern "C" fn ibv_create_ah(
    pd: *mut ibv_pd,
    attr: *mut ibv_ah_attr,
) -> *mut ibv_ah {
    // SAFETY: the caller passes a valid struct.
    let attr = unsafe { &*attr };
    let qp_attr = ibv_qp_attr { ah_attr: *attr, ..Default::default() };
    or_null(serve(|s| {
        s.begin(Call::CreateAh { attr: QpAttr::from_raw(&qp_attr) }, Verb::CreateAh)?;
        s.expect(pd, Kind::Pd)?;
        check_port(attr.port_num)?;
        if attr.is_global == 0 {
            return Err(libc::EINVAL);
        }
        gid_entry(1, attr.grh.sgid_index.into()).map_err(|_| libc::EINVAL)?;
        Ok(adopt(s, pd))
    }))
}

/// A new live AH of `pd`, which must be a live mock PD, for `ibv_create_ah` to return.
pub(super) fn adopt(s: &mut State, pd: *mut ibv_pd) -> *mut ibv_ah {
    // SAFETY: `pd` is a live mock PD (the caller checked).
    let context = unsafe { (*pd).context };
    let handle = s.next_id();
    let ah = s.adopt(ibv_ah { context, pd, handle }, Kind::Ah);
    s.reg.ahs.insert(ah as usize, pd);
    ah
}

/// `ibv_destroy_ah`.
pub(super) extern "C" fn ibv_destroy_ah(ah: *mut ibv_ah) -> c_int {
    destroy(ah, Kind::Ah, Call::DestroyAh, Verb::DestroyAh, |s| {
        s.reg.ahs.remove(&(ah as usize));
        Ok(())
    })
}
