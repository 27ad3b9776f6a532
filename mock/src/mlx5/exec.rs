//! Execution of a DCI's RDMA WRITE and READ against a DCT of the same mock, as the NIC would
//! carry them out, at `wr_complete`.
//!
//! A WR executes when its DC address names a live DCT of this mock in RTR by its DCT number;
//! WRs to other DCT numbers, and SENDs, are only recorded. Checks, in order, each failure
//! ending the WR with an error completion and moving the DCI to ERROR (its later WRs flush
//! with `IBV_WC_WR_FLUSH_ERR`):
//!
//! - the DC key must be the DCT's `dct_access_key`: a DCT drops packets with another key, so
//!   the initiator retries until its retry count runs out (`IBV_WC_RETRY_EXC_ERR`);
//! - the SGE must lie inside a live MR of the DCI's PD, writable (`LOCAL_WRITE`) for a READ
//!   (`IBV_WC_LOC_PROT_ERR`);
//! - the DCT must allow the operation (`REMOTE_WRITE` / `REMOTE_READ` in its INIT access
//!   flags), and the rkey must reach `len` bytes at the remote address in a live MR (or
//!   bound window) of the DCT's PD granting it (`IBV_WC_REM_ACCESS_ERR`).
//!
//! A successful WR moves its bytes between the MRs' CPU ranges and completes on the DCI's
//! send CQ when signaled (or the DCI signals all).

use std::ptr;

use super::*;
use crate::state::State;
use crate::strict::sge_cpu;

/// What a DC WR does.
#[derive(Clone, Copy, Debug)]
pub(super) enum DcOp {
    /// SEND (recorded, not executed).
    Send,
    /// RDMA WRITE to `remote_addr` under `rkey`.
    Write { rkey: u32, remote_addr: u64 },
    /// RDMA READ from `remote_addr` under `rkey`.
    Read { rkey: u32, remote_addr: u64 },
}

/// A WR of an open batch, as its builders described it.
#[derive(Clone, Copy, Debug)]
pub(super) struct DcWork {
    wr_id: u64,
    signaled: bool,
    op: DcOp,
    /// The DCT number and DC key (`wr_set_dc_addr`).
    pub dest: Option<(u32, u64)>,
    /// Its one SGE (`wr_set_sge`).
    pub sge: Option<ibv_sge>,
}

/// Runs `f` on the open batch of the DCI `qp` (nothing when it is not a live DC QP).
pub(super) fn batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut Vec<DcWork>)) {
    DC.with_borrow_mut(|qps| {
        if let Some(q) = qps.get_mut(&(qp as usize)) {
            f(&mut q.batch);
        }
    });
}

/// Starts the next WR of `qp`'s batch.
pub(super) fn begin_wr(qp: *mut ibv_qp_ex, wr_id: u64, wr_flags: u32, op: DcOp) {
    let signaled = wr_flags & IBV_SEND_SIGNALED != 0;
    batch(qp, |b| b.push(DcWork { wr_id, signaled, op, dest: None, sge: None }));
}

/// Runs `f` on the WR of `qp`'s batch being built.
pub(super) fn last_wr(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut DcWork)) {
    batch(qp, |b| {
        if let Some(w) = b.last_mut() {
            f(w);
        }
    });
}

/// The `ibv_qp_ex` of the DC QP whose `mlx5dv_qp_ex` is `mqp` (`container_of`).
pub(super) fn qp_of(mqp: *mut mlx5dv_qp_ex) -> *mut ibv_qp_ex {
    mqp.wrapping_byte_sub(offset_of!(DcQp, dv) - offset_of!(DcQp, qp_ex)).cast()
}

/// The DCI's side of an execution.
struct Initiator {
    qp: *mut ibv_qp,
    qpn: u32,
    pd: *mut ibv_pd,
    send_cq: *mut ibv_cq,
    sig_all: bool,
}

/// The DCT a WR reaches.
struct Target {
    pd: *mut ibv_pd,
    key: u64,
    access: u32,
}

/// Executes the batch of the DCI `qp` that `wr_complete` closed.
pub(super) fn execute(qp: *mut ibv_qp_ex) {
    let taken = DC.with_borrow_mut(|qps| {
        let q = qps.get_mut(&(qp as usize))?;
        let base = &q.qp_ex.qp_base;
        let dci = Initiator {
            qp: qp.cast(),
            qpn: base.qp_num,
            pd: base.pd,
            send_cq: base.send_cq,
            sig_all: q.sig_all,
        };
        Some((std::mem::take(&mut q.batch), dci))
    });
    let Some((work, dci)) = taken else { return };
    for w in work {
        let (remote_addr, rkey, read) = match w.op {
            DcOp::Send => continue,
            DcOp::Write { rkey, remote_addr } => (remote_addr, rkey, false),
            DcOp::Read { rkey, remote_addr } => (remote_addr, rkey, true),
        };
        let Some(target) = w.dest.and_then(|(dctn, key)| target(dctn).map(|t| (t, key))) else {
            continue;
        };
        let in_error = state(dci.qp) == IBV_QPS_ERR;
        let _ = serve(|s| {
            let (status, len) = match in_error {
                true => (IBV_WC_WR_FLUSH_ERR, 0),
                false => move_bytes(s, &dci, &w, &target.0, target.1, remote_addr, rkey, read),
            };
            if status != IBV_WC_SUCCESS {
                move_to_error(dci.qp);
            }
            if status != IBV_WC_SUCCESS || w.signaled || dci.sig_all {
                let opcode = if read { IBV_WC_RDMA_READ } else { IBV_WC_RDMA_WRITE };
                let wc = ibv_wc {
                    wr_id: w.wr_id,
                    status,
                    opcode,
                    byte_len: len,
                    qp_num: dci.qpn,
                    ..Default::default()
                };
                s.push_entry(dci.send_cq, wc, Vec::new());
            }
            Ok(())
        });
    }
}

/// The live DCT numbered `dctn`, in RTR.
fn target(dctn: u32) -> Option<Target> {
    DC.with_borrow(|qps| {
        qps.values()
            .find(|q| {
                q.dc_type == MLX5DV_DCTYPE_DCT
                    && q.qp_ex.qp_base.qp_num == dctn
                    && q.qp_ex.qp_base.state == IBV_QPS_RTR
            })
            .map(|q| Target { pd: q.qp_ex.qp_base.pd, key: q.key, access: q.access })
    })
}

/// Carries out one WRITE or READ; its status and the bytes moved.
#[allow(clippy::too_many_arguments)]
fn move_bytes(
    s: &State,
    dci: &Initiator,
    w: &DcWork,
    target: &Target,
    key: u64,
    remote_addr: u64,
    rkey: u32,
    read: bool,
) -> (ibv_wc_status, u32) {
    if key != target.key {
        return (IBV_WC_RETRY_EXC_ERR, 0);
    }
    let sge = w.sge.unwrap_or_default();
    let local_mr = s.reg.mrs.get(&sge.lkey);
    let local_ok = local_mr
        .is_some_and(|mr| mr.pd == dci.pd && (!read || mr.access & IBV_ACCESS_LOCAL_WRITE != 0));
    let Some(local) = sge_cpu(&s.reg, &sge).filter(|_| local_ok || sge.length == 0) else {
        return (IBV_WC_LOC_PROT_ERR, 0);
    };
    let needed = if read { IBV_ACCESS_REMOTE_READ } else { IBV_ACCESS_REMOTE_WRITE };
    let len = u64::from(sge.length);
    let remote = (target.access & needed != 0)
        .then(|| s.reg.remote_cpu(target.pd, rkey, remote_addr, len, needed))
        .flatten();
    let Some(remote) = remote else { return (IBV_WC_REM_ACCESS_ERR, 0) };
    let (from, to) = if read { (remote, local) } else { (local, remote) };
    // SAFETY: both ranges are inside live MRs' CPU memory (checked above), which the programs
    // keep valid while registered; `ptr::copy` allows them to overlap.
    unsafe { ptr::copy(from.cast_const(), to, sge.length as usize) };
    (IBV_WC_SUCCESS, sge.length)
}
