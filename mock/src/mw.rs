//! Memory windows: `ibv_context.ops.alloc_mw`, `dealloc_mw` and `bind_mw` (type 1), and the
//! bindings type-2 windows get from `IBV_WR_BIND_MW` work requests (legacy and extended).
//!
//! A bind is checked at post time like any work request ([`Rule::BindOutsideMr`]: a live
//! window of the QP's PD, over a range inside a live MR of that PD) and takes effect when it
//! executes: from then on peers reach the range through the window's rkey (with the window's
//! rights), until `IBV_WR_LOCAL_INV` or `IBV_WR_SEND_WITH_INV` invalidates it or the window is
//! freed. As rxe does, an MR with a window bound to it cannot be deregistered (`EINVAL`).

use std::ffi::c_int;

use rdma_verbs_sys::bindings::*;

use super::call::{Call, Verb};
use super::post::{after_post, enqueue_send};
use super::registry::{BindRequest, MwInfo, Registry, SendWork};
use super::rule::{Broken, Queue, Rule, Violation};
use super::state::{serve, Kind, State};
use super::strict::check_send;
use super::verbs::{destroy, or_null, status};

/// `ibv_context.ops.alloc_mw`: a window of `type_` (1 or 2) on the live PD `pd`.
pub(super) extern "C" fn alloc_mw(pd: *mut ibv_pd, type_: ibv_mw_type) -> *mut ibv_mw {
    or_null(serve(|s| {
        s.begin(Call::AllocMw { mw_type: type_ }, Verb::AllocMw)?;
        s.expect(pd, Kind::Pd)?;
        if !matches!(type_, IBV_MW_TYPE_1 | IBV_MW_TYPE_2) {
            return Err(libc::EINVAL);
        }
        // SAFETY: `pd` is a live mock PD (checked above).
        let context = unsafe { (*pd).context };
        let handle = s.next_id();
        // rxe starts a window's rkey at its index, key byte 0.
        let rkey = (0x3000 + handle) << 8;
        let mw = s.adopt(ibv_mw { context, pd, rkey, handle, type_ }, Kind::Mw);
        s.reg.mws.insert(mw as usize, MwInfo { pd, bound: None });
        Ok(mw)
    }))
}

/// `ibv_context.ops.dealloc_mw`: the window and its binding go.
pub(super) extern "C" fn dealloc_mw(mw: *mut ibv_mw) -> c_int {
    destroy(mw, Kind::Mw, Call::DeallocMw, Verb::DeallocMw, |s| {
        s.reg.mws.remove(&(mw as usize));
        Ok(())
    })
}

/// `ibv_context.ops.bind_mw`: posts the type-1 bind `mw_bind` on `qp` (checked, then executed
/// when its turn comes) and gives the window its next rkey now, as rxe does.
///
/// # Safety
///
/// `mw_bind` must be valid for reads.
pub(super) unsafe extern "C" fn bind_mw(
    qp: *mut ibv_qp,
    mw: *mut ibv_mw,
    mw_bind: *mut ibv_mw_bind,
) -> c_int {
    // SAFETY: the caller passes a valid struct.
    let bind = unsafe { &*mw_bind };
    status(serve(|s| {
        s.begin(Call::BindMw { wr_id: bind.wr_id }, Verb::BindMw)?;
        s.expect(qp, Kind::Qp)?;
        s.expect(mw, Kind::Mw)?;
        let qpn = s.reg.qpn_of(qp).ok_or(libc::EINVAL)?;
        // SAFETY: a live mock window (checked above).
        let rkey = unsafe { inc_rkey((*mw).rkey) };
        let work = SendWork {
            wr_id: bind.wr_id,
            opcode: IBV_WR_BIND_MW,
            signaled: bind.send_flags & IBV_SEND_SIGNALED != 0,
            bind: Some(request(s, mw, rkey, &bind.bind_info)),
            ..SendWork::default()
        };
        if let Err((rule, detail)) = check_send(&s.reg, &s.reg.qps[&qpn], &work, &[]) {
            let violation =
                Violation { rule, queue: Queue::Send(qpn), wr_id: work.wr_id, position: 0, detail };
            if !s.violate(violation) {
                return Err(libc::EINVAL);
            }
        }
        // SAFETY: as above.
        unsafe { (*mw).rkey = rkey };
        enqueue_send(s, qpn, work);
        after_post(s, qpn);
        Ok(())
    }))
}

/// `ibv_inc_rkey`: the next key byte.
fn inc_rkey(rkey: u32) -> u32 {
    (rkey & 0xffff_ff00) | (rkey.wrapping_add(1) & 0xff)
}

/// What a bind names: the window, the new rkey, and the MR range (its lkey when `mr` is a
/// live mock MR).
pub(crate) fn request(
    s: &State,
    mw: *mut ibv_mw,
    rkey: u32,
    info: &ibv_mw_bind_info,
) -> BindRequest {
    let lkey = s.expect(info.mr, Kind::Mr).ok().map(|()| {
        // SAFETY: a live mock MR (checked just now).
        unsafe { (*info.mr).lkey }
    });
    BindRequest {
        mw: mw as usize,
        rkey,
        lkey,
        addr: info.addr,
        len: info.length,
        access: info.mw_access_flags,
    }
}

/// [`Rule::BindOutsideMr`] for a bind posted on a QP of `pd`.
pub(crate) fn check_bind(
    reg: &Registry,
    pd: *mut ibv_pd,
    bind: &BindRequest,
) -> Result<(), Broken> {
    let what = format!("window {:#x} over {:#x}+{}", bind.mw, bind.addr, bind.len);
    let broken = |why: &str| Err((Rule::BindOutsideMr, format!("{what}: {why}")));
    match reg.mws.get(&bind.mw) {
        None => return broken("the window is not live"),
        Some(mw) if mw.pd != pd => return broken("the window is of another PD than the QP"),
        Some(_) => {}
    }
    let Some(mr) = bind.lkey.and_then(|lkey| reg.mrs.get(&lkey)) else {
        return broken("its MR is not live");
    };
    if mr.pd != pd {
        return broken("its MR is of another PD than the QP");
    }
    if bind.len != 0 && mr.cpu(bind.addr, bind.len).is_none() {
        return broken("the range is outside the MR's IOVA range");
    }
    Ok(())
}

/// Executes a bind: the window's binding from now on (`IBV_WC_MW_BIND_ERR` for a type-2
/// window bound already, or an MR without `IBV_ACCESS_MW_BIND`).
pub(crate) fn execute_bind(s: &mut State, bind: &BindRequest) -> ibv_wc_status {
    let mr_binds = bind
        .lkey
        .and_then(|lkey| s.reg.mrs.get(&lkey))
        .is_some_and(|mr| mr.access & IBV_ACCESS_MW_BIND != 0);
    // SAFETY: a window in the registry is a live mock window.
    let type2 = s.reg.mws.contains_key(&bind.mw)
        && unsafe { (*(bind.mw as *mut ibv_mw)).type_ } == IBV_MW_TYPE_2;
    let Some(mw) = s.reg.mws.get_mut(&bind.mw) else { return IBV_WC_MW_BIND_ERR };
    if !mr_binds || (type2 && mw.bound.is_some()) {
        return IBV_WC_MW_BIND_ERR;
    }
    mw.bound = Some(*bind);
    IBV_WC_SUCCESS
}

/// Invalidates the window of `pd` bound under `rkey`; whether there was one.
pub(crate) fn invalidate(reg: &mut Registry, pd: *mut ibv_pd, rkey: u32) -> bool {
    reg.mws
        .values_mut()
        .filter(|mw| mw.pd == pd)
        .find(|mw| mw.bound.is_some_and(|b| b.rkey == rkey))
        .map(|mw| mw.bound = None)
        .is_some()
}
