//! Execution: the strict mock carries out loopback work requests between its own QPs and
//! produces their completions, as a NIC would.
//!
//! A send on a QP in RTS executes when its peer is a live QP of this mock of the same type in
//! RTR or RTS: for RC and UC the `dest_qp_num` given at RTR, for UD the work request's
//! `remote_qpn`. Sends execute in order; an RC SEND (or RDMA WRITE with immediate) waits at
//! the head of its send queue until the peer has a receive posted, while UC and UD drop it
//! (completing it successfully on the sender). Data moves through the MRs' CPU ranges; every
//! SGE is checked again at execution ([`Rule::MrGoneBeforeExecution`]).
//!
//! Errors: an RDMA or atomic access the remote MR does not grant is `IBV_WC_REM_ACCESS_ERR`
//! and a message longer than the receive (on UD, with the 40-byte GRH area) is
//! `IBV_WC_LOC_LEN_ERR` at the receiver (and `IBV_WC_REM_INV_REQ_ERR` at an RC sender); a
//! receive, taken from an SRQ, in MRs of another PD than the receiving QP's is
//! `IBV_WC_LOC_QP_OP_ERR` (and `IBV_WC_REM_OP_ERR` at an RC sender), as on rxe, which checks
//! receives against the QP's PD. Each moves both QPs to ERROR. A QP in ERROR flushes
//! everything outstanding with `IBV_WC_WR_FLUSH_ERR`.

use std::ptr;

use rdma_verbs_sys::bindings::*;

use crate::mw;
use crate::registry::{queue_of_receives, RecvWork, SendWork};
use crate::rule::{Queue, Rule, Violation};
use crate::state::State;
use crate::strict::{is_atomic, sge_cpu};
use crate::xrc;

/// The bytes in front of every UD receive, where a real one gets the GRH (zeros here).
pub const GRH_LEN: usize = 40;

/// Executes every send that can execute, until none can.
pub(crate) fn progress(s: &mut State) {
    loop {
        let mut qpns: Vec<u32> = s.reg.qps.keys().copied().collect();
        qpns.sort_unstable();
        let mut moved = false;
        for qpn in qpns {
            while step(s, qpn) {
                moved = true;
            }
        }
        if !moved {
            return;
        }
    }
}

/// Executes the oldest send of QP `qpn`, if it can; whether it did.
fn step(s: &mut State, qpn: u32) -> bool {
    let Some(qp) = s.reg.qps.get_mut(&qpn) else { return false };
    if qp.raw().state != IBV_QPS_RTS || qp.sq.is_empty() {
        return false;
    }
    let failure = match qp.fail_next.take() {
        Some(status) => Some(status),
        None => qp.sq.front().is_some_and(|w| w.poisoned).then_some(IBV_WC_LOC_PROT_ERR),
    };
    if let Some(status) = failure {
        let w = qp.sq.pop_front().expect("not empty");
        finish_send(s, qpn, &w, status, 0);
        to_error(s, qpn);
        return true;
    }
    let w = qp.sq.front().expect("not empty").clone();
    if matches!(w.opcode, IBV_WR_BIND_MW | IBV_WR_LOCAL_INV) {
        // Local operations: no peer involved.
        s.reg.qps.get_mut(&qpn).expect("live").sq.pop_front();
        let status = execute_local(s, qpn, &w);
        finish_send(s, qpn, &w, status, 0);
        if status != IBV_WC_SUCCESS {
            to_error(s, qpn);
        }
        return true;
    }
    let Some(peer) = peer_of(s, qpn, &w) else { return false };
    match execute(s, qpn, peer, &w) {
        Outcome::Wait => false,
        Outcome::Done { status, byte_len, errors } => {
            s.reg.qps.get_mut(&qpn).expect("live").sq.pop_front();
            finish_send(s, qpn, &w, status, byte_len);
            for qpn in errors {
                to_error(s, qpn);
            }
            true
        }
    }
}

/// A memory-window bind or a local invalidation on QP `qpn`: its status.
fn execute_local(s: &mut State, qpn: u32, w: &SendWork) -> ibv_wc_status {
    let pd = s.reg.qps[&qpn].raw().pd;
    match w.bind {
        Some(bind) => mw::execute_bind(s, &bind),
        None if mw::invalidate(&mut s.reg, pd, w.rkey) => IBV_WC_SUCCESS,
        None => IBV_WC_MW_BIND_ERR,
    }
}

/// What executing a send came to.
enum Outcome {
    /// It needs a receive the peer has not posted yet.
    Wait,
    /// It completed with `status`, moving the `errors` QPs to ERROR.
    Done { status: ibv_wc_status, byte_len: u32, errors: Vec<u32> },
}

impl Outcome {
    fn ok(byte_len: usize) -> Outcome {
        Outcome::Done { status: IBV_WC_SUCCESS, byte_len: byte_len as u32, errors: Vec::new() }
    }
}

/// The live QP of this mock that `w`, posted on QP `qpn`, goes to.
fn peer_of(s: &State, qpn: u32, w: &SendWork) -> Option<u32> {
    let qp = &s.reg.qps[&qpn];
    let qp_type = qp.raw().qp_type;
    let dest = if super::qp::is_datagram(qp_type) { w.remote_qpn } else { qp.dest_qpn? };
    let peer = s.reg.qps.get(&dest)?.raw();
    // An XRC initiator's peer is a target.
    let peer_type = if qp_type == IBV_QPT_XRC_SEND { IBV_QPT_XRC_RECV } else { qp_type };
    (peer.qp_type == peer_type && matches!(peer.state, IBV_QPS_RTR | IBV_QPS_RTS)).then_some(dest)
}

/// Carries out `w` from QP `qpn` to QP `peer`.
fn execute(s: &mut State, qpn: u32, peer: u32, w: &SendWork) -> Outcome {
    let qp_type = s.reg.qps[&qpn].raw().qp_type;
    let needs_recv = matches!(
        w.opcode,
        IBV_WR_SEND | IBV_WR_SEND_WITH_IMM | IBV_WR_SEND_WITH_INV | IBV_WR_RDMA_WRITE_WITH_IMM
    );
    // The reliable transports wait for a receive (RC's and XRC's RNR retries; SRD's, when the
    // EFA device has RNR_RETRY); the unreliable ones drop the message.
    let reliable = matches!(qp_type, IBV_QPT_RC | IBV_QPT_XRC_SEND | IBV_QPT_DRIVER);
    let both = vec![qpn, peer];
    let receiver = if qp_type == IBV_QPT_XRC_SEND {
        match xrc::destination(s, peer, w.remote_srqn) {
            Some(destination) => destination,
            None => {
                return Outcome::Done { status: IBV_WC_REM_INV_REQ_ERR, byte_len: 0, errors: both }
            }
        }
    } else {
        let raw = s.reg.qps[&peer].raw();
        (queue_of_receives(peer, &s.reg.qps[&peer]), raw.recv_cq, raw.pd)
    };
    let recv_queue = receiver.0;
    if needs_recv && !has_receive(s, recv_queue) {
        return if reliable { Outcome::Wait } else { Outcome::ok(0) };
    }
    let local = Queue::Send(qpn);
    let remote_error =
        || Outcome::Done { status: IBV_WC_REM_ACCESS_ERR, byte_len: 0, errors: both.clone() };
    let local_error =
        || Outcome::Done { status: IBV_WC_LOC_PROT_ERR, byte_len: 0, errors: vec![qpn] };
    let peer_pd = receiver.2;
    let payload = if needs_recv || w.opcode == IBV_WR_RDMA_WRITE {
        match gather(s, local, w) {
            Some(bytes) => bytes,
            None => return local_error(),
        }
    } else {
        Vec::new()
    };
    match w.opcode {
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => {
            let Some(dst) = remote(s, peer_pd, w, payload.len(), IBV_ACCESS_REMOTE_WRITE) else {
                return remote_error();
            };
            // SAFETY: `dst` is inside a live MR of the peer granting remote write, which holds
            // `payload.len()` bytes there (checked by `remote`).
            unsafe { ptr::copy(payload.as_ptr(), dst, payload.len()) };
        }
        IBV_WR_RDMA_READ => {
            let len = w.sges.iter().map(|sge| sge.length as usize).sum();
            let Some(src) = remote(s, peer_pd, w, len, IBV_ACCESS_REMOTE_READ) else {
                return remote_error();
            };
            // SAFETY: `src` is inside a live MR of the peer granting remote read (`remote`).
            let bytes = unsafe { std::slice::from_raw_parts(src, len) }.to_vec();
            if scatter(s, local, w.wr_id, &w.sges, &bytes).is_none() {
                return local_error();
            }
            return Outcome::ok(len);
        }
        opcode if is_atomic(opcode) => {
            let Some(target) = remote(s, peer_pd, w, 8, IBV_ACCESS_REMOTE_ATOMIC) else {
                return remote_error();
            };
            // SAFETY: 8 bytes inside a live MR granting remote atomics, 8-byte aligned (the
            // post-time check), the atomic's target.
            let old = unsafe { target.cast::<u64>().read() };
            let new = match opcode {
                IBV_WR_ATOMIC_CMP_AND_SWP if old == w.compare_add => w.swap,
                IBV_WR_ATOMIC_CMP_AND_SWP => old,
                _ => old.wrapping_add(w.compare_add),
            };
            // SAFETY: as above.
            unsafe { target.cast::<u64>().write(new) };
            if scatter(s, local, w.wr_id, &w.sges, &old.to_ne_bytes()).is_none() {
                return local_error();
            }
            return Outcome::ok(8);
        }
        _ => {}
    }
    if !needs_recv {
        return Outcome::ok(payload.len());
    }
    if w.opcode == IBV_WR_SEND_WITH_INV {
        mw::invalidate(&mut s.reg, peer_pd, w.rkey);
    }
    deliver(s, qpn, peer, receiver, w, &payload)
}

/// Consumes the oldest receive of the peer's `receiver` (its queue, the CQ its completions
/// go to and the PD its receives are checked against) for `w`, copying `payload` for a SEND.
fn deliver(
    s: &mut State,
    qpn: u32,
    peer: u32,
    receiver: (Queue, *mut ibv_cq, *mut ibv_pd),
    w: &SendWork,
    payload: &[u8],
) -> Outcome {
    let (queue, recv_cq, pd) = receiver;
    let r = take_receive(s, queue).expect("checked by the caller");
    let raw = *s.reg.qps[&peer].raw();
    let ud = raw.qp_type == IBV_QPT_UD;
    let rc = matches!(raw.qp_type, IBV_QPT_RC | IBV_QPT_XRC_RECV);
    let mut flags = if ud { IBV_WC_GRH } else { 0 };
    let with_imm = matches!(w.opcode, IBV_WR_SEND_WITH_IMM | IBV_WR_RDMA_WRITE_WITH_IMM);
    if with_imm {
        flags |= IBV_WC_WITH_IMM;
    }
    let (opcode, bytes) = if w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM {
        (IBV_WC_RECV_RDMA_WITH_IMM, Vec::new())
    } else {
        let grh = if ud { GRH_LEN } else { 0 };
        let mut bytes = vec![0; grh];
        bytes.extend_from_slice(payload);
        (IBV_WC_RECV, bytes)
    };
    let capacity: usize = r.sges.iter().map(|sge| sge.length as usize).sum();
    let byte_len = if opcode == IBV_WC_RECV { bytes.len() } else { payload.len() };
    let mut wc = wc(r.wr_id, IBV_WC_SUCCESS, opcode, byte_len, peer);
    wc.src_qp = qpn;
    wc.wc_flags = flags;
    if with_imm {
        wc.__bindgen_anon_1.imm_data = w.imm;
    }
    let sender_error = |status| Outcome::Done {
        status: if rc { status } else { IBV_WC_SUCCESS },
        byte_len: 0,
        errors: if rc { vec![qpn, peer] } else { vec![peer] },
    };
    // The receiving QP's PD is the one its receives are checked against, also those of an SRQ
    // of another PD (rxe's responder copies into them with `copy_data(qp->pd, ...)`); an XRC
    // target has none, and its SRQ's PD serves.
    let other_pd = r
        .sges
        .iter()
        .any(|sge| sge.length != 0 && s.reg.mrs.get(&sge.lkey).is_some_and(|mr| mr.pd != pd));
    if r.poisoned
        || bytes.len() > capacity
        || other_pd
        || scatter(s, queue, r.wr_id, &r.sges, &bytes).is_none()
    {
        wc.status = if bytes.len() > capacity {
            IBV_WC_LOC_LEN_ERR
        } else if other_pd {
            IBV_WC_LOC_QP_OP_ERR
        } else {
            IBV_WC_LOC_PROT_ERR
        };
        push(s, recv_cq, wc, vec![(queue, r.wr_id)]);
        return sender_error(if wc.status == IBV_WC_LOC_LEN_ERR {
            IBV_WC_REM_INV_REQ_ERR
        } else {
            IBV_WC_REM_OP_ERR
        });
    }
    push(s, recv_cq, wc, vec![(queue, r.wr_id)]);
    Outcome::ok(payload.len())
}

fn has_receive(s: &State, queue: Queue) -> bool {
    match queue {
        Queue::Srq(handle) => s.reg.srqs.get(&handle).is_some_and(|srq| !srq.rq.is_empty()),
        Queue::Recv(qpn) | Queue::Send(qpn) => !s.reg.qps[&qpn].rq.is_empty(),
    }
}

fn take_receive(s: &mut State, queue: Queue) -> Option<RecvWork> {
    match queue {
        Queue::Srq(handle) => s.reg.srqs.get_mut(&handle)?.rq.pop_front(),
        Queue::Recv(qpn) | Queue::Send(qpn) => s.reg.qps.get_mut(&qpn)?.rq.pop_front(),
    }
}

/// The CPU address of `len` bytes at `w`'s remote address that `w`'s rkey reaches on a QP of
/// `pd` with `access` (an MR's or a bound window's, [`Registry::remote_cpu`]).
///
/// [`Registry::remote_cpu`]: crate::registry::Registry::remote_cpu
fn remote(s: &State, pd: *mut ibv_pd, w: &SendWork, len: usize, access: u32) -> Option<*mut u8> {
    s.reg.remote_cpu(pd, w.rkey, w.remote_addr, len as u64, access)
}

/// Records that `sges` of a queued work request name memory no longer registered.
fn gone(s: &mut State, queue: Queue, wr_id: u64, sge: &ibv_sge) {
    let detail = format!("SGE {:#x}+{} lkey {:#x} at execution", sge.addr, sge.length, sge.lkey);
    s.violate(Violation { rule: Rule::MrGoneBeforeExecution, queue, wr_id, position: 0, detail });
}

/// The bytes `w` sends: its inline copy, or its SGEs read through their live MRs (`None`,
/// with the violation recorded, when one is gone).
fn gather(s: &mut State, queue: Queue, w: &SendWork) -> Option<Vec<u8>> {
    if let Some(inline) = &w.inline {
        return Some(inline.clone());
    }
    let mut bytes = Vec::new();
    for sge in w.sges.iter().filter(|sge| sge.length != 0) {
        let Some(src) = sge_cpu(&s.reg, sge) else {
            gone(s, queue, w.wr_id, sge);
            return None;
        };
        // SAFETY: inside a live MR's memory (`sge_cpu`), which the program keeps valid while
        // it is registered.
        bytes.extend_from_slice(unsafe { std::slice::from_raw_parts(src, sge.length as usize) });
    }
    Some(bytes)
}

/// Writes `bytes` (no more than the SGEs hold) into `sges` through their live MRs; `None`,
/// with the violation recorded and nothing written, when one is gone.
fn scatter(s: &mut State, queue: Queue, wr_id: u64, sges: &[ibv_sge], bytes: &[u8]) -> Option<()> {
    let mut targets = Vec::new();
    for sge in sges.iter().filter(|sge| sge.length != 0) {
        match sge_cpu(&s.reg, sge) {
            Some(dst) => targets.push((dst, sge.length as usize)),
            None => {
                gone(s, queue, wr_id, sge);
                return None;
            }
        }
    }
    let mut rest = bytes;
    for (dst, len) in targets {
        let n = len.min(rest.len());
        // SAFETY: `n` bytes inside a live MR with LOCAL_WRITE (checked at post), kept valid
        // by the program while it is registered.
        unsafe { ptr::copy(rest.as_ptr(), dst, n) };
        rest = &rest[n..];
    }
    Some(())
}

/// A completion with the fields every one has.
fn wc(wr_id: u64, status: ibv_wc_status, opcode: ibv_wc_opcode, len: usize, qpn: u32) -> ibv_wc {
    ibv_wc { wr_id, status, opcode, byte_len: len as u32, qp_num: qpn, ..Default::default() }
}

/// The completion opcode of a send work request.
fn send_opcode(opcode: ibv_wr_opcode) -> ibv_wc_opcode {
    match opcode {
        IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM => IBV_WC_RDMA_WRITE,
        IBV_WR_RDMA_READ => IBV_WC_RDMA_READ,
        IBV_WR_ATOMIC_CMP_AND_SWP => IBV_WC_COMP_SWAP,
        IBV_WR_ATOMIC_FETCH_AND_ADD => IBV_WC_FETCH_ADD,
        IBV_WR_LOCAL_INV => IBV_WC_LOCAL_INV,
        IBV_WR_BIND_MW => IBV_WC_BIND_MW,
        _ => IBV_WC_SEND,
    }
}

fn push(s: &mut State, cq: *mut ibv_cq, wc: ibv_wc, retires: Vec<(Queue, u64)>) {
    s.push_entry(cq, wc, retires);
}

/// Completes the send `w` of QP `qpn` with `status`: a completion when it failed or is
/// signaled, else retired by the next one.
fn finish_send(s: &mut State, qpn: u32, w: &SendWork, status: ibv_wc_status, byte_len: u32) {
    let qp = s.reg.qps.get_mut(&qpn).expect("live");
    if status == IBV_WC_SUCCESS && !(w.signaled || qp.sq_sig_all) {
        qp.unsignaled.push(w.wr_id);
        return;
    }
    let mut retires: Vec<_> = qp.unsignaled.drain(..).map(|id| (Queue::Send(qpn), id)).collect();
    retires.push((Queue::Send(qpn), w.wr_id));
    let cq = qp.raw().send_cq;
    push(s, cq, wc(w.wr_id, status, send_opcode(w.opcode), byte_len as usize, qpn), retires);
}

/// Moves QP `qpn` to ERROR and flushes it.
pub(crate) fn to_error(s: &mut State, qpn: u32) {
    let Some(qp) = s.reg.qps.get(&qpn) else { return };
    // SAFETY: a live QP of the registry; the mock is its only writer.
    unsafe { (*qp.ptr).state = IBV_QPS_ERR };
    flush(s, qpn);
}

/// Completes everything outstanding on QP `qpn` (in ERROR) with `IBV_WC_WR_FLUSH_ERR`: every
/// send not executed, signaled or not, and every receive of its own queue.
pub(crate) fn flush(s: &mut State, qpn: u32) {
    let Some(qp) = s.reg.qps.get_mut(&qpn) else { return };
    let unsignaled: Vec<u64> = qp.unsignaled.drain(..).collect();
    let sends: Vec<SendWork> = qp.sq.drain(..).collect();
    let recvs: Vec<RecvWork> = qp.rq.drain(..).collect();
    qp.batch = None;
    let (send_cq, recv_cq) = (qp.raw().send_cq, qp.raw().recv_cq);
    for id in unsignaled {
        s.reg.retire(Queue::Send(qpn), id);
    }
    for w in sends {
        let flushed = wc(w.wr_id, IBV_WC_WR_FLUSH_ERR, send_opcode(w.opcode), 0, qpn);
        push(s, send_cq, flushed, vec![(Queue::Send(qpn), w.wr_id)]);
    }
    for r in recvs {
        let flushed = wc(r.wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, qpn);
        push(s, recv_cq, flushed, vec![(Queue::Recv(qpn), r.wr_id)]);
    }
}

/// Drops everything outstanding on QP `qpn` without a completion (RESET, destroy).
pub(crate) fn discard(s: &mut State, qpn: u32) {
    if let Some(qp) = s.reg.qps.get_mut(&qpn) {
        qp.sq.clear();
        qp.rq.clear();
        qp.unsignaled.clear();
        qp.batch = None;
        s.reg.discard(Queue::Send(qpn));
        s.reg.discard(Queue::Recv(qpn));
    }
}
