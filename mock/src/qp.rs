//! The mock's QP verbs: creation (RC, UC, UD, with or without an SRQ), the per-type state
//! machine of `ibv_modify_qp(3)`, queries and destruction.

use std::ffi::c_int;

use rdma_verbs_sys::bindings::*;

use super::call::{Call, QpAttr, Verb};
use super::exec;
use super::ops::check_port;
use super::registry::QpInfo;
use super::state::{serve, Kind, State};
use super::verbs::{destroy, gid_entry, or_null, status};
use super::xrc;

/// `ibv_create_qp`: RC, UC or UD (`EOPNOTSUPP` otherwise); `EINVAL` for CQs that are not live or
/// capabilities above the context's [`DeviceLimits`](super::DeviceLimits); updates `cap` with the work queue sizes rounded up
/// to powers of two, as providers do.
///
/// # Safety
///
/// `init_attr` must be valid for reads and writes.
pub(super) unsafe extern "C" fn ibv_create_qp(
    pd: *mut ibv_pd,
    init_attr: *mut ibv_qp_init_attr,
) -> *mut ibv_qp {
    // SAFETY: the caller passes a valid, exclusive attribute struct.
    let init = unsafe { &mut *init_attr };
    let cap = &init.cap;
    let call = Call::CreateQp {
        qp_type: init.qp_type,
        sq_sig_all: init.sq_sig_all,
        max_send_wr: cap.max_send_wr,
        max_recv_wr: cap.max_recv_wr,
        max_send_sge: cap.max_send_sge,
        max_recv_sge: cap.max_recv_sge,
        max_inline_data: cap.max_inline_data,
    };
    or_null(serve(|s| {
        s.begin(call, Verb::CreateQp)?;
        let qp = new_qp(s, pd, init)?;
        let qp = s.adopt(qp, Kind::Qp);
        track(s, qp, init);
        Ok(qp)
    }))
}

/// What `ibv_create_qp` checks and creates, for both create verbs: see [`ibv_create_qp`].
pub(super) fn new_qp(
    s: &mut State,
    pd: *mut ibv_pd,
    init: &mut ibv_qp_init_attr,
) -> Result<ibv_qp, c_int> {
    s.expect(pd, Kind::Pd)?;
    // SAFETY: `pd` is a live mock PD (checked above).
    let xrc_send = init.qp_type == IBV_QPT_XRC_SEND && xrc::has_xrc(s, unsafe { (*pd).context });
    if !matches!(init.qp_type, IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_UD) && !xrc_send {
        return Err(libc::EOPNOTSUPP);
    }
    new_qp_of_type(s, pd, init)
}

/// Whether QPs of `qp_type` take a destination per work request: UD, and SRD, the only
/// `IBV_QPT_DRIVER` QPs of the base mock (the mock libefa's; DC QPs live in the mlx5 mock).
pub(super) fn is_datagram(qp_type: ibv_qp_type) -> bool {
    matches!(qp_type, IBV_QPT_UD | IBV_QPT_DRIVER)
}

/// [`new_qp`] of any `init.qp_type`, for a creation verb that checked the type itself
/// (the mock libefa's SRD QPs).
pub(super) fn new_qp_of_type(
    s: &mut State,
    pd: *mut ibv_pd,
    init: &mut ibv_qp_init_attr,
) -> Result<ibv_qp, c_int> {
    s.expect(pd, Kind::Pd)?;
    s.expect(init.send_cq, Kind::Cq)?;
    // An XRC initiator has no receive side: its receive CQ is not looked at.
    if init.qp_type != IBV_QPT_XRC_SEND {
        s.expect(init.recv_cq, Kind::Cq)?;
    }
    if !init.srq.is_null() {
        s.expect(init.srq, Kind::Srq)?;
    }
    let cap = &mut init.cap;
    // SAFETY: `pd` is a live mock PD (checked above).
    let limits = s.device_attr(unsafe { (*pd).context });
    let (max_wr, max_sge) = (limits.max_qp_wr as u32, limits.max_sge as u32);
    if cap.max_send_wr.max(cap.max_recv_wr) > max_wr
        || cap.max_send_sge.max(cap.max_recv_sge) > max_sge
    {
        return Err(libc::EINVAL);
    }
    cap.max_send_wr = cap.max_send_wr.next_power_of_two();
    cap.max_recv_wr = cap.max_recv_wr.next_power_of_two();
    // SAFETY: `pd` is a live mock PD (checked above).
    let context = unsafe { (*pd).context };
    let id = s.next_id();
    Ok(ibv_qp {
        context,
        qp_context: init.qp_context,
        pd,
        send_cq: init.send_cq,
        recv_cq: init.recv_cq,
        srq: init.srq,
        handle: id,
        qp_num: 0x100 + id,
        state: IBV_QPS_RESET,
        qp_type: init.qp_type,
        ..Default::default()
    })
}

/// Enters the live QP `qp`, created from `init`, in the strict mock's registry.
pub(super) fn track(s: &mut State, qp: *mut ibv_qp, init: &ibv_qp_init_attr) {
    // SAFETY: `init.srq` is NULL or a live SRQ (checked by `new_qp`).
    let srq = (!init.srq.is_null()).then(|| unsafe { (*init.srq).handle });
    // SAFETY: `qp` was just adopted, live.
    let qpn = unsafe { (*qp).qp_num };
    s.reg.qps.insert(qpn, QpInfo::new(qp, &init.cap, init.sq_sig_all != 0, srq));
}

/// The attributes `ibv_modify_qp(3)` requires for each UC transition.
const UC_INIT: u32 = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
const UC_RTR: u32 = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
const UC_RTS: u32 = IBV_QP_STATE | IBV_QP_SQ_PSN;
/// RC's: UC's, and what its reliability needs (RDMA READ depths, RNR and retry timers).
const RC_INIT: u32 = UC_INIT;
const RC_RTR: u32 = UC_RTR | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
const RC_RTS: u32 =
    UC_RTS | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT;

/// XRC's: the initiator's RTR is UC's, its RTS RC's; the target's RTR is RC's, its RTS
/// takes a timeout.
const XRC_SEND: [u32; 3] = [RC_INIT, UC_RTR, RC_RTS];
const XRC_RECV: [u32; 3] = [RC_INIT, RC_RTR, UC_RTS | IBV_QP_TIMEOUT];

/// The attributes `ibv_modify_qp(3)` requires for each UD transition.
const UD_INIT: u32 = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
const UD_RTR: u32 = IBV_QP_STATE;
const UD_RTS: u32 = IBV_QP_STATE | IBV_QP_SQ_PSN;

/// The state a QP of `qp_type` in `current` moves to, or `EINVAL` when the transition does
/// not exist, lacks a required attribute, or names a port or GID the device does not have
/// (on the Ethernet port, a route without GRH, as RoCE providers refuse).
fn transition(
    qp_type: ibv_qp_type,
    current: ibv_qp_state,
    attr: &ibv_qp_attr,
    mask: u32,
) -> Result<ibv_qp_state, c_int> {
    let [init, rtr, rts] = match qp_type {
        IBV_QPT_UC => [UC_INIT, UC_RTR, UC_RTS],
        IBV_QPT_XRC_SEND => XRC_SEND,
        IBV_QPT_XRC_RECV => XRC_RECV,
        _ if is_datagram(qp_type) => [UD_INIT, UD_RTR, UD_RTS],
        _ => [RC_INIT, RC_RTR, RC_RTS],
    };
    if mask & IBV_QP_STATE == 0 {
        return Ok(current);
    }
    let required = match (current, attr.qp_state) {
        (_, IBV_QPS_RESET | IBV_QPS_ERR) => IBV_QP_STATE,
        (IBV_QPS_RESET, IBV_QPS_INIT) => init,
        (IBV_QPS_INIT, IBV_QPS_RTR) => rtr,
        (IBV_QPS_RTR, IBV_QPS_RTS) => rts,
        _ => return Err(libc::EINVAL),
    };
    if mask & required != required {
        return Err(libc::EINVAL);
    }
    if mask & IBV_QP_PORT != 0 {
        check_port(attr.port_num)?;
    }
    if mask & IBV_QP_AV != 0 {
        let ah = &attr.ah_attr;
        check_port(ah.port_num)?;
        if ah.is_global == 0 {
            return Err(libc::EINVAL);
        }
        gid_entry(1, ah.grh.sgid_index.into()).map_err(|_| libc::EINVAL)?;
    }
    Ok(attr.qp_state)
}

/// `ibv_modify_qp`: transitions as [`transition`] checks them; on failure nothing changes.
/// The attributes the mask names are recorded for `ibv_query_qp`.
/// RTR records an RC or UC QP's `dest_qp_num` (its loopback peer, when that is a QP of this
/// mock); ERROR flushes what is outstanding, RESET discards it; then whatever can execute
/// does.
///
/// # Safety
///
/// `attr` must be valid for reads.
pub(super) unsafe extern "C" fn ibv_modify_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
) -> c_int {
    // SAFETY: the caller passes a valid attribute struct.
    let attr = unsafe { &*attr };
    status(serve(|s| {
        s.begin(Call::ModifyQp { mask: attr_mask, attr: QpAttr::from_raw(attr) }, Verb::ModifyQp)?;
        s.expect(qp, Kind::Qp)?;
        // SAFETY: `qp` is a live mock QP (checked above), only reached through the registry.
        let raw = unsafe { &mut *qp };
        let state = transition(raw.qp_type, raw.state, attr, attr_mask as u32)?;
        raw.state = state;
        let qpn = raw.qp_num;
        if let Some(info) = s.reg.qps.get_mut(&qpn) {
            info.attr.apply(attr, attr_mask as u32);
            if state == IBV_QPS_RTR && !is_datagram(raw.qp_type) {
                info.dest_qpn = Some(attr.dest_qp_num);
            }
        }
        match state {
            IBV_QPS_ERR => exec::flush(s, qpn),
            IBV_QPS_RESET => exec::discard(s, qpn),
            _ => {}
        }
        exec::progress(s);
        Ok(())
    }))
}

/// `ibv_query_qp`: the state, type, CQs and SRQ, the capabilities as creation rounded them,
/// and every attribute as the successful modifies set it (all of them, whatever the mask
/// asks, as providers do).
///
/// # Safety
///
/// `attr` and `init_attr` must be writable.
pub(super) unsafe extern "C" fn ibv_query_qp(
    qp: *mut ibv_qp,
    attr: *mut ibv_qp_attr,
    attr_mask: c_int,
    init_attr: *mut ibv_qp_init_attr,
) -> c_int {
    let result = serve(|s| {
        s.begin(Call::QueryQp { mask: attr_mask }, Verb::QueryQp)?;
        s.expect(qp, Kind::Qp)?;
        // SAFETY: `qp` is a live mock QP (checked above).
        let qp = unsafe { *qp };
        let info = s.reg.qps.get(&qp.qp_num);
        let recorded = info.map_or_else(ibv_qp_attr::default, |info| info.attr.0);
        Ok((qp, recorded, info.is_some_and(|info| info.sq_sig_all)))
    });
    let (qp, recorded, sq_sig_all) = match result {
        Ok(found) => found,
        Err(errno) => return errno,
    };
    let state = ibv_qp_attr { qp_state: qp.state, cur_qp_state: qp.state, ..recorded };
    let init = ibv_qp_init_attr {
        qp_context: qp.qp_context,
        send_cq: qp.send_cq,
        recv_cq: qp.recv_cq,
        srq: qp.srq,
        cap: recorded.cap,
        qp_type: qp.qp_type,
        sq_sig_all: sq_sig_all.into(),
    };
    // SAFETY: the caller made both writable.
    unsafe {
        attr.write(state);
        init_attr.write(init);
    }
    0
}

/// `ibv_destroy_qp`: what is outstanding is discarded, without completions.
pub(super) extern "C" fn ibv_destroy_qp(qp: *mut ibv_qp) -> c_int {
    destroy(qp, Kind::Qp, Call::DestroyQp, Verb::DestroyQp, |s| {
        // SAFETY: a live mock QP (checked before `forget`).
        let qpn = unsafe { (*qp).qp_num };
        exec::discard(s, qpn);
        s.reg.qps.remove(&qpn);
        Ok(())
    })
}

/// `ibv_query_ece`: the options `ibv_set_ece` set (all zero before); 0 or the errno, as its
/// man page says.
///
/// # Safety
///
/// `ece` must be writable.
pub(super) unsafe extern "C" fn ibv_query_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    let result = serve(|s| {
        s.begin(Call::QueryEce, Verb::QueryEce)?;
        s.expect(qp, Kind::Qp)?;
        // SAFETY: `qp` is a live mock QP (checked above).
        let qpn = unsafe { (*qp).qp_num };
        Ok(s.reg.qps.get(&qpn).map(|info| info.ece).unwrap_or_default())
    });
    match result {
        Ok(options) => {
            // SAFETY: the caller made `ece` writable.
            unsafe { ece.write(options) };
            0
        }
        Err(errno) => errno,
    }
}

/// `ibv_set_ece`: accepts every option (`ece` is left as given, all accepted) and keeps them
/// for `ibv_query_ece`; 0 or the errno.
///
/// # Safety
///
/// `ece` must be valid for reads and writes.
pub(super) unsafe extern "C" fn ibv_set_ece(qp: *mut ibv_qp, ece: *mut ibv_ece) -> c_int {
    // SAFETY: the caller passes a valid struct.
    let asked = unsafe { ece.read() };
    let call = Call::SetEce {
        vendor_id: asked.vendor_id,
        options: asked.options,
        comp_mask: asked.comp_mask,
    };
    let result = serve(|s| {
        s.begin(call, Verb::SetEce)?;
        s.expect(qp, Kind::Qp)?;
        // SAFETY: `qp` is a live mock QP (checked above).
        let qpn = unsafe { (*qp).qp_num };
        if let Some(info) = s.reg.qps.get_mut(&qpn) {
            info.ece = asked;
        }
        Ok(())
    });
    status(result)
}
