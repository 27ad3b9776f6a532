//! The legacy post ops (`ibv_context.ops.post_send`, `post_recv`, `post_srq_recv`): every
//! work request of the list is read, checked ([`strict`](crate::strict)) and queued, then
//! whatever can execute does ([`exec`](crate::exec)).
//!
//! A work request that breaks a rule is recorded as a [`Violation`]; unless its rule is
//! allowed, the post stops there with `EINVAL` and `*bad_wr` pointing at it (the ones before
//! it are posted, as a provider's are). An allowed one is posted poisoned: it never touches
//! memory and completes with `IBV_WC_LOC_PROT_ERR` if it executes.

use std::ffi::c_int;

use rdma_verbs_sys::bindings::*;

use super::call::{Call, Verb};
use super::exec;
use super::mw::request;
use super::registry::{RecvWork, SendWork};
use super::rule::{Broken, Queue, Rule, Violation};
use super::state::{serve, Kind, State};
use super::strict::{check_recv, check_send, read_inline};

/// The `wr_id` of each WR of a list.
///
/// # Safety
///
/// `wr` must be NULL or the head of a valid NULL-terminated list.
unsafe fn wr_ids<W>(mut wr: *const W, id_and_next: impl Fn(&W) -> (u64, *const W)) -> Vec<u64> {
    let mut ids = Vec::new();
    while !wr.is_null() {
        // SAFETY: a non-NULL element of the caller's valid list.
        let (id, next) = id_and_next(unsafe { &*wr });
        ids.push(id);
        wr = next;
    }
    ids
}

/// The SGEs of a work request (none when `num_sge` is not positive).
///
/// # Safety
///
/// A positive `num_sge` needs `sg_list` valid for that many reads.
unsafe fn sges(sg_list: *const ibv_sge, num_sge: c_int) -> Vec<ibv_sge> {
    match usize::try_from(num_sge) {
        // SAFETY: the caller's valid list of `n` SGEs.
        Ok(n) if n > 0 => unsafe { std::slice::from_raw_parts(sg_list, n) }.to_vec(),
        _ => Vec::new(),
    }
}

/// Checks the list's length against [`Mock::expect_chain_len`](crate::Mock::expect_chain_len);
/// whether the post goes on.
pub(crate) fn check_chain(s: &mut State, queue: Queue, ids: &[u64]) -> bool {
    let Some(expected) = s.chain_len.take() else { return true };
    if expected == ids.len() {
        return true;
    }
    let detail = format!("{} WRs posted, {expected} declared", ids.len());
    let wr_id = ids.first().copied().unwrap_or(0);
    s.violate(Violation { rule: Rule::ChainLength, queue, wr_id, position: 0, detail })
}

/// Records `broken` for the work request at `position`; whether the post goes on.
fn broke(s: &mut State, queue: Queue, wr_id: u64, position: usize, broken: Broken) -> bool {
    let (rule, detail) = broken;
    s.violate(Violation { rule, queue, wr_id, position, detail })
}

/// Reads a legacy send work request, copying its inline data.
///
/// # Safety
///
/// `wr` must be a valid work request.
unsafe fn read_send(s: &State, wr: &ibv_send_wr) -> (SendWork, Option<Broken>) {
    // SAFETY: the caller's valid work request.
    let sges = unsafe { sges(wr.sg_list, wr.num_sge) };
    let atomics = matches!(wr.opcode, IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD);
    // SAFETY: plain integers (and a pointer read as an address), read field by field: the
    // atomic member only for an atomic, which sets it, since a member assigned whole leaves
    // its padding uninitialised, and `rdma`'s ends 4 bytes into `compare_add`. The rest are
    // read for every WR: `imm_data` is the whole union, `rdma`'s fields and `ud`'s first two
    // lie where `rdma` and `atomic` have fields, set or zeroed, never padding.
    let mut work = unsafe {
        SendWork {
            wr_id: wr.wr_id,
            opcode: wr.opcode,
            signaled: wr.send_flags & IBV_SEND_SIGNALED != 0,
            imm: wr.__bindgen_anon_1.imm_data,
            remote_addr: if atomics { wr.wr.atomic.remote_addr } else { wr.wr.rdma.remote_addr },
            rkey: if atomics { wr.wr.atomic.rkey } else { wr.wr.rdma.rkey },
            compare_add: if atomics { wr.wr.atomic.compare_add } else { 0 },
            swap: if atomics { wr.wr.atomic.swap } else { 0 },
            ah: wr.wr.ud.ah as usize,
            remote_qpn: wr.wr.ud.remote_qpn,
            remote_srqn: wr.qp_type.xrc.remote_srqn,
            ..SendWork::default()
        }
    };
    if wr.opcode == IBV_WR_BIND_MW {
        // SAFETY: the union member a BIND_MW request sets; plain fields and pointers.
        let bind = unsafe { wr.__bindgen_anon_2.bind_mw };
        work.bind = Some(request(s, bind.mw, bind.rkey, &bind.bind_info));
    }
    let mut broken = None;
    if wr.send_flags & IBV_SEND_INLINE != 0 {
        let chunks: Vec<_> = sges.iter().map(|g| (g.addr as usize, g.length as usize)).collect();
        match read_inline(&s.reg, &chunks) {
            Ok(bytes) => work.inline = Some(bytes),
            Err(b) => broken = Some(b),
        }
    }
    work.sges = sges;
    (work, broken)
}

/// Queues the checked (or poisoned) send `w` on QP `qpn`.
pub(crate) fn enqueue_send(s: &mut State, qpn: u32, w: SendWork) {
    let named: &[ibv_sge] = if w.inline.is_some() { &[] } else { &w.sges };
    s.reg.post(Queue::Send(qpn), w.wr_id, named);
    s.reg.qps.get_mut(&qpn).expect("live").sq.push_back(w);
}

/// After a post to QP `qpn`: a QP in ERROR flushes at once; then what can execute does.
pub(crate) fn after_post(s: &mut State, qpn: u32) {
    if s.reg.qps.get(&qpn).is_some_and(|qp| qp.raw().state == IBV_QPS_ERR) {
        exec::flush(s, qpn);
    }
    exec::progress(s);
}

/// `ibv_context.ops.post_send`: see the module notes.
///
/// # Safety
///
/// As `ibv_post_send(3)`: `wr` a valid list, `bad_wr` writable.
pub(super) unsafe extern "C" fn post_send(
    qp: *mut ibv_qp,
    wr: *mut ibv_send_wr,
    bad_wr: *mut *mut ibv_send_wr,
) -> c_int {
    // SAFETY: the caller passes a valid list.
    let wr_ids = unsafe { wr_ids(wr, |w: &ibv_send_wr| (w.wr_id, w.next)) };
    let result = serve(|s| {
        s.begin(Call::PostSend { wr_ids: wr_ids.clone() }, Verb::PostSend)?;
        s.expect(qp, Kind::Qp)?;
        let Some(qpn) = s.reg.qpn_of(qp) else { return Ok(None) };
        if !check_chain(s, Queue::Send(qpn), &wr_ids) {
            return Ok(Some((wr, libc::EINVAL)));
        }
        let mut current = wr;
        for position in 0.. {
            if current.is_null() {
                break;
            }
            // SAFETY: a non-NULL element of the caller's valid list.
            let raw = unsafe { &*current };
            // SAFETY: as above.
            let (mut work, broken) = unsafe { read_send(s, raw) };
            let broken = broken.or_else(|| check_send(&s.reg, &s.reg.qps[&qpn], &work, &[]).err());
            if let Some(b) = broken {
                if !broke(s, Queue::Send(qpn), raw.wr_id, position, b) {
                    after_post(s, qpn);
                    return Ok(Some((current, libc::EINVAL)));
                }
                work.poisoned = true;
            }
            enqueue_send(s, qpn, work);
            current = raw.next;
        }
        after_post(s, qpn);
        Ok(None)
    });
    // SAFETY: the caller made `bad_wr` writable.
    unsafe { finish(result, wr, bad_wr) }
}

/// The post op's return: 0, or the errno with `*bad_wr` set (to the list's head for a failure
/// before any WR was read, else to the offending WR, with its errno).
///
/// # Safety
///
/// `bad_wr` must be writable.
unsafe fn finish<W>(
    result: Result<Option<(*mut W, c_int)>, c_int>,
    head: *mut W,
    bad_wr: *mut *mut W,
) -> c_int {
    let (bad, errno) = match result {
        Ok(None) => return 0,
        Ok(Some(bad)) => bad,
        Err(errno) => (head, errno),
    };
    // SAFETY: the caller guarantees `bad_wr` is writable.
    unsafe { bad_wr.write(bad) };
    errno
}

/// Where receives go: a QP's own receive queue, or an SRQ.
#[derive(Clone, Copy)]
enum Target {
    Qp(*mut ibv_qp),
    Srq(*mut ibv_srq),
}

/// Checks and queues a list of receives on `target`: the body of both receive ops.
///
/// # Safety
///
/// `wr` must be NULL or the head of a valid list.
unsafe fn post_receives(
    s: &mut State,
    target: Target,
    wr: *mut ibv_recv_wr,
    ids: &[u64],
) -> Result<Option<(*mut ibv_recv_wr, c_int)>, c_int> {
    let (queue, pd, max_sge, qpn) = match target {
        Target::Qp(qp) => {
            s.expect(qp, Kind::Qp)?;
            let Some(qpn) = s.reg.qpn_of(qp) else { return Ok(None) };
            let info = &s.reg.qps[&qpn];
            if info.srq.is_some() {
                // A QP of an SRQ has no receive queue of its own.
                return Err(libc::EINVAL);
            }
            (Queue::Recv(qpn), info.raw().pd, info.max_recv_sge, Some(qpn))
        }
        Target::Srq(srq) => {
            s.expect(srq, Kind::Srq)?;
            // SAFETY: a live mock SRQ (checked above).
            let handle = unsafe { (*srq).handle };
            let info = &s.reg.srqs[&handle];
            (Queue::Srq(handle), info.pd, info.max_sge, None)
        }
    };
    if !check_chain(s, queue, ids) {
        return Ok(Some((wr, libc::EINVAL)));
    }
    let mut current = wr;
    let mut bad = None;
    let full_at = s.recv_full_at.take();
    for position in 0.. {
        if current.is_null() {
            break;
        }
        if full_at == Some(position) {
            bad = Some((current, libc::ENOMEM));
            break;
        }
        // SAFETY: a non-NULL element of the caller's valid list.
        let raw = unsafe { &*current };
        // SAFETY: as above.
        let sges = unsafe { sges(raw.sg_list, raw.num_sge) };
        let mut work = RecvWork { wr_id: raw.wr_id, sges, poisoned: false };
        if let Err(b) = check_recv(&s.reg, pd, max_sge, &work, &[]) {
            if !broke(s, queue, raw.wr_id, position, b) {
                bad = Some((current, libc::EINVAL));
                break;
            }
            work.poisoned = true;
        }
        s.reg.post(queue, work.wr_id, &work.sges);
        match queue {
            Queue::Srq(handle) => s.reg.srqs.get_mut(&handle).expect("live").rq.push_back(work),
            _ => s.reg.qps.get_mut(&qpn.expect("a QP's queue")).expect("live").rq.push_back(work),
        }
        current = raw.next;
    }
    match qpn {
        Some(qpn) => after_post(s, qpn),
        None => exec::progress(s),
    }
    Ok(bad)
}

/// `ibv_context.ops.post_recv`: as [`post_send`], for receive WRs (`EINVAL` on a QP that
/// takes its receives from an SRQ).
///
/// # Safety
///
/// As `ibv_post_recv(3)`: `wr` a valid list, `bad_wr` writable.
pub(super) unsafe extern "C" fn post_recv(
    qp: *mut ibv_qp,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let call = |wr_ids| Call::PostRecv { wr_ids };
    // SAFETY: forwarded under the caller's guarantees.
    unsafe { receive_op(Target::Qp(qp), wr, bad_wr, call, Verb::PostRecv) }
}

/// `ibv_context.ops.post_srq_recv`: as [`post_recv`], on an SRQ.
///
/// # Safety
///
/// As `ibv_post_srq_recv(3)`: `wr` a valid list, `bad_wr` writable.
pub(super) unsafe extern "C" fn post_srq_recv(
    srq: *mut ibv_srq,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
) -> c_int {
    let call = |wr_ids| Call::PostSrqRecv { wr_ids };
    // SAFETY: forwarded under the caller's guarantees.
    unsafe { receive_op(Target::Srq(srq), wr, bad_wr, call, Verb::PostSrqRecv) }
}

/// The receive ops: records `call` of the list's `wr_id`s, consumes a failure injected for
/// `verb`, then checks and queues the list on `target`.
///
/// # Safety
///
/// As `ibv_post_recv(3)`: `wr` a valid list, `bad_wr` writable.
unsafe fn receive_op(
    target: Target,
    wr: *mut ibv_recv_wr,
    bad_wr: *mut *mut ibv_recv_wr,
    call: impl FnOnce(Vec<u64>) -> Call,
    verb: Verb,
) -> c_int {
    // SAFETY: the caller passes a valid list.
    let ids = unsafe { wr_ids(wr, |w: &ibv_recv_wr| (w.wr_id, w.next)) };
    let result = serve(|s| {
        s.begin(call(ids.clone()), verb)?;
        // SAFETY: the caller's valid list.
        unsafe { post_receives(s, target, wr, &ids) }
    });
    // SAFETY: the caller made `bad_wr` writable.
    unsafe { finish(result, wr, bad_wr) }
}
