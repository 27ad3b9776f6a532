//! XRC: the `open_xrcd`, `close_xrcd`, `create_srq_ex` and `get_srq_num` ops of a context
//! with [`ContextConfig::xrc`](super::ContextConfig::xrc), whose device reports
//! `IBV_DEVICE_XRC`; XRC initiator QPs (`IBV_QPT_XRC_SEND`, from either create verb) and XRC
//! target QPs (`IBV_QPT_XRC_RECV`, from `create_qp_ex` with an XRCD).
//!
//! Loopback: an initiator's peer is the target QP its RTR named; a SEND goes to the XRC SRQ
//! its `wr.qp_type.xrc.remote_srqn` numbers, which must be a live XRC SRQ of the target's
//! XRCD, else the sender completes with `IBV_WC_REM_INV_REQ_ERR` and both QPs go to ERROR.
//! The receive completes on the SRQ's CQ with the target's QP number, and its buffers are
//! checked against the SRQ's PD. Like RC, a SEND waits for a receive.

use std::collections::HashMap;
use std::ffi::c_int;

use rdma_verbs_sys::bindings::*;

use super::call::{Call, Verb};
use super::qp::track;
use super::rule::Queue;
use super::srq::new_srq;
use super::state::{serve, Kind, State};
use super::verbs::{destroy, or_null};

/// What the registry keeps of XRC: each XRC SRQ's domain and CQ, by SRQ handle (its number),
/// and each target QP's domain, by QP number. Entries of destroyed objects stay (handles and
/// numbers are never reused) and are skipped by the look-ups, which check liveness.
#[derive(Debug, Default)]
pub(crate) struct XrcRegistry {
    srqs: HashMap<u32, (*mut ibv_xrcd, *mut ibv_cq)>,
    targets: HashMap<u32, *mut ibv_xrcd>,
}

/// Whether `ctx`'s device reports XRC.
pub(super) fn has_xrc(s: &State, ctx: *mut ibv_context) -> bool {
    s.device_attr(ctx).device_cap_flags & IBV_DEVICE_XRC != 0
}

/// `verbs_context.open_xrcd`: `EINVAL` without `fd` and `oflags` in `comp_mask`, as
/// `ibv_cmd_open_xrcd` answers; the mock's XRCDs are all new (an `fd` names nothing).
///
/// # Safety
///
/// `attr` must be readable.
pub(super) unsafe extern "C" fn open_xrcd(
    context: *mut ibv_context,
    attr: *mut ibv_xrcd_init_attr,
) -> *mut ibv_xrcd {
    // SAFETY: the caller made `attr` readable.
    let comp_mask = unsafe { (*attr).comp_mask };
    or_null(serve(|s| {
        s.begin(Call::OpenXrcd { comp_mask }, Verb::OpenXrcd)?;
        s.expect(context, Kind::Context)?;
        let both = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
        if comp_mask & both != both {
            return Err(libc::EINVAL);
        }
        Ok(s.adopt(ibv_xrcd { context }, Kind::Xrcd))
    }))
}

/// `verbs_context.close_xrcd`: `EBUSY` while an XRC SRQ or target QP of it is live.
pub(super) extern "C" fn close_xrcd(xrcd: *mut ibv_xrcd) -> c_int {
    destroy(xrcd, Kind::Xrcd, Call::CloseXrcd, Verb::CloseXrcd, |s| {
        let x = &s.reg.xrc;
        let srq = x.srqs.iter().any(|(h, &(d, _))| d == xrcd && s.reg.srqs.contains_key(h));
        let qp = x.targets.iter().any(|(n, &d)| d == xrcd && s.reg.qps.contains_key(n));
        if srq || qp {
            return Err(libc::EBUSY);
        }
        Ok(())
    })
}

/// `verbs_context.create_srq_ex`: XRC SRQs only (`EOPNOTSUPP` for other types: basic ones
/// come through `ibv_create_srq`), with a live PD, XRCD and CQ of the context named in
/// `comp_mask` (`EINVAL` otherwise); sizes as `ibv_create_srq` checks and rounds them.
///
/// # Safety
///
/// `attr` must be valid for reads and writes.
pub(super) unsafe extern "C" fn create_srq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_srq_init_attr_ex,
) -> *mut ibv_srq {
    // SAFETY: the caller passes a valid, exclusive struct.
    let init = unsafe { &mut *attr };
    let call = Call::CreateSrqEx {
        srq_type: init.srq_type,
        comp_mask: init.comp_mask,
        max_wr: init.attr.max_wr,
        max_sge: init.attr.max_sge,
    };
    or_null(serve(|s| {
        s.begin(call, Verb::CreateSrqEx)?;
        s.expect(context, Kind::Context)?;
        if init.comp_mask & IBV_SRQ_INIT_ATTR_TYPE == 0 || init.srq_type != IBV_SRQT_XRC {
            return Err(libc::EOPNOTSUPP);
        }
        let needed = IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
        if init.comp_mask & needed != needed {
            return Err(libc::EINVAL);
        }
        s.expect(init.pd, Kind::Pd)?;
        s.expect(init.xrcd, Kind::Xrcd)?;
        s.expect(init.cq, Kind::Cq)?;
        let (pd, xrcd, cq) = (init.pd, init.xrcd, init.cq);
        // SAFETY: live mock objects (checked above).
        let same = unsafe {
            (*pd).context == context && (*xrcd).context == context && (*cq).context == context
        };
        if !same {
            return Err(libc::EINVAL);
        }
        let srq = new_srq(s, pd, init.srq_context, &mut init.attr)?;
        // SAFETY: just created, live.
        s.reg.xrc.srqs.insert(unsafe { (*srq).handle }, (xrcd, cq));
        Ok(srq)
    }))
}

/// `verbs_context.get_srq_num`: an XRC SRQ's number (its handle); `EINVAL` for another SRQ.
///
/// # Safety
///
/// `srq_num` must be writable.
pub(super) unsafe extern "C" fn get_srq_num(srq: *mut ibv_srq, srq_num: *mut u32) -> c_int {
    let num = serve(|s| {
        s.begin(Call::GetSrqNum, Verb::GetSrqNum)?;
        s.expect(srq, Kind::Srq)?;
        // SAFETY: a live mock SRQ (checked above).
        let handle = unsafe { (*srq).handle };
        s.reg.xrc.srqs.contains_key(&handle).then_some(handle).ok_or(libc::EINVAL)
    });
    match num {
        Ok(num) => {
            // SAFETY: the caller made `srq_num` writable.
            unsafe { srq_num.write(num) };
            0
        }
        Err(errno) => errno,
    }
}

/// `create_qp_ex` of an XRC target QP: `EOPNOTSUPP` when the device lacks XRC, `EINVAL`
/// without a live XRCD of the context in `IBV_QP_INIT_ATTR_XRCD`. It has no PD, CQs or
/// queues.
pub(super) fn create_recv_qp(
    s: &mut State,
    context: *mut ibv_context,
    init: &ibv_qp_init_attr_ex,
) -> Result<*mut ibv_qp, c_int> {
    if !has_xrc(s, context) {
        return Err(libc::EOPNOTSUPP);
    }
    if init.comp_mask & IBV_QP_INIT_ATTR_XRCD == 0 {
        return Err(libc::EINVAL);
    }
    s.expect(init.xrcd, Kind::Xrcd)?;
    // SAFETY: a live mock XRCD (checked above).
    if unsafe { (*init.xrcd).context } != context {
        return Err(libc::EINVAL);
    }
    let id = s.next_id();
    let qp = ibv_qp {
        context,
        qp_context: init.qp_context,
        handle: id,
        qp_num: 0x100 + id,
        state: IBV_QPS_RESET,
        qp_type: IBV_QPT_XRC_RECV,
        ..Default::default()
    };
    let qpn = qp.qp_num;
    let qp = s.adopt(qp, Kind::Qp);
    track(s, qp, &ibv_qp_init_attr::default());
    s.reg.xrc.targets.insert(qpn, init.xrcd);
    Ok(qp)
}

/// Where a SEND from an initiator to the target QP `peer` naming `srqn` goes: the XRC SRQ
/// of that number in the target's XRCD, with the CQ its receives complete on and the PD they
/// are checked against; `None` when there is none.
pub(crate) fn destination(
    s: &State,
    peer: u32,
    srqn: u32,
) -> Option<(Queue, *mut ibv_cq, *mut ibv_pd)> {
    let xrcd = s.reg.xrc.targets.get(&peer)?;
    let &(srq_xrcd, cq) = s.reg.xrc.srqs.get(&srqn)?;
    let srq = s.reg.srqs.get(&srqn)?;
    (srq_xrcd == *xrcd).then_some((Queue::Srq(srqn), cq, srq.pd))
}
