//! What the strict mock knows of each live MR, QP, SRQ and AH, and the work requests posted
//! to them and not yet retired.
//!
//! A work request is *outstanding* from its post until it is retired: when the completion
//! that reports it is polled (an unsignaled send by the next signaled completion of its send
//! queue, polled), when its QP goes to ERROR after it executed unsignaled, or when RESET or a
//! destroy discards it.

use std::collections::{HashMap, VecDeque};

use rdma_verbs_sys::bindings::*;

use crate::rule::Queue;

/// A live MR.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MrInfo {
    pub pd: *mut ibv_pd,
    pub rkey: u32,
    /// The first byte's I/O virtual address (SGEs and peers address the MR by it).
    pub iova: u64,
    /// The first byte's CPU address.
    pub addr: usize,
    pub len: usize,
    pub access: u32,
}

impl MrInfo {
    /// The CPU address of `len` bytes at IOVA `iova`, when they lie inside this MR.
    pub fn cpu(&self, iova: u64, len: u64) -> Option<*mut u8> {
        let offset = iova.checked_sub(self.iova)?;
        let end = offset.checked_add(len)?;
        (end <= self.len as u64).then(|| (self.addr + offset as usize) as *mut u8)
    }

    /// Whether `addr..addr + len`, as CPU addresses, lie inside this MR's memory.
    pub fn holds_cpu(&self, addr: usize, len: usize) -> bool {
        addr >= self.addr && addr.checked_add(len).is_some_and(|end| end <= self.addr + self.len)
    }
}

/// A memory-window bind: the window, its new rkey, and the MR range (with the window's rights)
/// peers reach through it once it executed.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BindRequest {
    /// The `ibv_mw`'s address.
    pub mw: usize,
    pub rkey: u32,
    /// The MR's lkey, when the bind named a live MR.
    pub lkey: Option<u32>,
    /// In the MR's IOVA space.
    pub addr: u64,
    pub len: u64,
    pub access: u32,
}

/// A live memory window.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MwInfo {
    pub pd: *mut ibv_pd,
    /// Its binding, once a bind executed (until invalidated).
    pub bound: Option<BindRequest>,
}

/// A send work request as the mock keeps it: read from an `ibv_send_wr` or built by the
/// extended QP's members.
#[derive(Clone, Debug, Default)]
pub(crate) struct SendWork {
    pub wr_id: u64,
    pub opcode: ibv_wr_opcode,
    pub signaled: bool,
    pub sges: Vec<ibv_sge>,
    /// The bytes of inline data, copied at post time.
    pub inline: Option<Vec<u8>>,
    /// As given (network order).
    pub imm: u32,
    pub remote_addr: u64,
    pub rkey: u32,
    pub compare_add: u64,
    pub swap: u64,
    pub ah: usize,
    pub remote_qpn: u32,
    /// An XRC SEND's destination SRQ number (`qp_type.xrc.remote_srqn`).
    pub remote_srqn: u32,
    /// A memory-window bind's request (`IBV_WR_BIND_MW`).
    pub bind: Option<BindRequest>,
    /// Broke an allowed rule: completes with `IBV_WC_LOC_PROT_ERR`, touching nothing.
    pub poisoned: bool,
    /// Broke a rule that is not allowed while the extended QP built it: fails the batch.
    pub fatal: bool,
}

/// A receive work request.
#[derive(Clone, Debug, Default)]
pub(crate) struct RecvWork {
    pub wr_id: u64,
    pub sges: Vec<ibv_sge>,
    /// Broke an allowed rule: completes with `IBV_WC_LOC_PROT_ERR`, touching nothing.
    pub poisoned: bool,
}

/// A live QP of the base mock.
#[derive(Debug)]
pub(crate) struct QpInfo {
    pub ptr: *mut ibv_qp,
    pub max_send_sge: u32,
    pub max_recv_sge: u32,
    pub sq_sig_all: bool,
    /// The SRQ's handle, when receives come from one.
    pub srq: Option<u32>,
    /// `dest_qp_num`, from RTR on (RC, UC).
    pub dest_qpn: Option<u32>,
    /// What `ibv_query_qp` reports: the caps at creation, then each successful modify's
    /// attributes.
    pub attr: RecordedAttr,
    /// Sends posted, not executed yet, in order.
    pub sq: VecDeque<SendWork>,
    /// Receives posted (without an SRQ), not consumed yet, in order.
    pub rq: VecDeque<RecvWork>,
    /// Sends executed unsignaled, retired by the next signaled completion.
    pub unsignaled: Vec<u64>,
    /// The status the next executed send completes with ([`crate::Mock::fail_next_wr`]).
    pub fail_next: Option<ibv_wc_status>,
    /// The extended QP's batch between `wr_start` and `wr_complete`.
    pub batch: Option<Vec<SendWork>>,
    /// The outstanding wr_ids of each queue.
    pub sq_inflight: Vec<u64>,
    pub rq_inflight: Vec<u64>,
    /// The ECE options `ibv_set_ece` set (all accepted), which `ibv_query_ece` reports.
    pub ece: ibv_ece,
}

impl QpInfo {
    /// A QP with nothing posted.
    pub fn new(ptr: *mut ibv_qp, cap: &ibv_qp_cap, sq_sig_all: bool, srq: Option<u32>) -> Self {
        QpInfo {
            ptr,
            max_send_sge: cap.max_send_sge,
            max_recv_sge: cap.max_recv_sge,
            sq_sig_all,
            srq,
            dest_qpn: None,
            attr: RecordedAttr(ibv_qp_attr { cap: *cap, ..Default::default() }),
            sq: VecDeque::new(),
            rq: VecDeque::new(),
            unsignaled: Vec::new(),
            fail_next: None,
            batch: None,
            sq_inflight: Vec::new(),
            rq_inflight: Vec::new(),
            ece: ibv_ece::default(),
        }
    }

    /// The `ibv_qp` the verbs see.
    pub fn raw(&self) -> &ibv_qp {
        // SAFETY: the registry holds only live QPs, removed before they are freed.
        unsafe { &*self.ptr }
    }
}

/// A QP's attributes as its modifies set them (`ibv_qp_attr` holds unions, so it has no
/// `Debug` of its own).
#[derive(Clone, Copy)]
pub(crate) struct RecordedAttr(pub ibv_qp_attr);

impl RecordedAttr {
    /// Takes the fields `mask` names from `new`, as `ibv_modify_qp(3)` applies them.
    pub fn apply(&mut self, new: &ibv_qp_attr, mask: u32) {
        let a = &mut self.0;
        let has = |bit: u32| mask & bit != 0;
        if has(IBV_QP_STATE) {
            a.qp_state = new.qp_state;
        }
        if has(IBV_QP_EN_SQD_ASYNC_NOTIFY) {
            a.en_sqd_async_notify = new.en_sqd_async_notify;
        }
        if has(IBV_QP_ACCESS_FLAGS) {
            a.qp_access_flags = new.qp_access_flags;
        }
        if has(IBV_QP_PKEY_INDEX) {
            a.pkey_index = new.pkey_index;
        }
        if has(IBV_QP_PORT) {
            a.port_num = new.port_num;
        }
        if has(IBV_QP_QKEY) {
            a.qkey = new.qkey;
        }
        if has(IBV_QP_AV) {
            a.ah_attr = new.ah_attr;
        }
        if has(IBV_QP_PATH_MTU) {
            a.path_mtu = new.path_mtu;
        }
        if has(IBV_QP_TIMEOUT) {
            a.timeout = new.timeout;
        }
        if has(IBV_QP_RETRY_CNT) {
            a.retry_cnt = new.retry_cnt;
        }
        if has(IBV_QP_RNR_RETRY) {
            a.rnr_retry = new.rnr_retry;
        }
        if has(IBV_QP_RQ_PSN) {
            a.rq_psn = new.rq_psn;
        }
        if has(IBV_QP_MAX_QP_RD_ATOMIC) {
            a.max_rd_atomic = new.max_rd_atomic;
        }
        if has(IBV_QP_ALT_PATH) {
            a.alt_ah_attr = new.alt_ah_attr;
            a.alt_pkey_index = new.alt_pkey_index;
            a.alt_port_num = new.alt_port_num;
            a.alt_timeout = new.alt_timeout;
        }
        if has(IBV_QP_MIN_RNR_TIMER) {
            a.min_rnr_timer = new.min_rnr_timer;
        }
        if has(IBV_QP_SQ_PSN) {
            a.sq_psn = new.sq_psn;
        }
        if has(IBV_QP_MAX_DEST_RD_ATOMIC) {
            a.max_dest_rd_atomic = new.max_dest_rd_atomic;
        }
        if has(IBV_QP_PATH_MIG_STATE) {
            a.path_mig_state = new.path_mig_state;
        }
        if has(IBV_QP_DEST_QPN) {
            a.dest_qp_num = new.dest_qp_num;
        }
        if has(IBV_QP_RATE_LIMIT) {
            a.rate_limit = new.rate_limit;
        }
    }
}

impl std::fmt::Debug for RecordedAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordedAttr")
            .field("qp_state", &self.0.qp_state)
            .field("cap", &self.0.cap)
            .finish_non_exhaustive()
    }
}

/// A live SRQ.
#[derive(Debug)]
pub(crate) struct SrqInfo {
    pub pd: *mut ibv_pd,
    pub max_sge: u32,
    pub rq: VecDeque<RecvWork>,
    pub inflight: Vec<u64>,
}

/// Every live object the checks and the execution need, keyed by numbers that are never
/// reused (QP numbers, lkeys, SRQ handles), so a stale completion never retires a newer
/// object's work.
#[derive(Debug, Default)]
pub(crate) struct Registry {
    /// By lkey.
    pub mrs: HashMap<u32, MrInfo>,
    /// By QP number.
    pub qps: HashMap<u32, QpInfo>,
    /// By handle.
    pub srqs: HashMap<u32, SrqInfo>,
    /// Each live AH's PD, by the AH's address.
    pub ahs: HashMap<usize, *mut ibv_pd>,
    /// By the window's address.
    pub mws: HashMap<usize, MwInfo>,
    /// The bytes each outstanding buffer-tier work request names, by its `wr_id`: per SGE
    /// (non-inline), its lkey and IOVA range ([`Rule::BufferInFlight`](crate::Rule)).
    pub buffer_bytes: HashMap<u64, Vec<(u32, std::ops::Range<u64>)>>,
    /// XRC SRQs' and target QPs' domains.
    pub xrc: crate::xrc::XrcRegistry,
}

/// The bit the safe crate's buffer tier sets in its wr_ids.
pub(crate) const BUFFER_TIER_BIT: u64 = 1 << 63;

impl Registry {
    /// The QP whose `ibv_qp` is `qp`.
    pub fn qpn_of(&self, qp: *mut ibv_qp) -> Option<u32> {
        self.qps.iter().find(|(_, info)| info.ptr == qp).map(|(&qpn, _)| qpn)
    }

    /// The live MR whose rkey is `rkey`.
    pub fn mr_by_rkey(&self, rkey: u32) -> Option<&MrInfo> {
        self.mrs.values().find(|mr| mr.rkey == rkey)
    }

    /// The CPU address of `len` bytes at `addr` that a peer reaches with `rkey` on a QP of
    /// `pd` for `access`: inside a live MR of `pd` with that rkey granting it, or inside the
    /// binding of a live window of `pd` with that rkey granting it (and its MR still live).
    pub fn remote_cpu(
        &self,
        pd: *mut ibv_pd,
        rkey: u32,
        addr: u64,
        len: u64,
        access: u32,
    ) -> Option<*mut u8> {
        if let Some(mr) = self.mr_by_rkey(rkey) {
            return (mr.pd == pd && mr.access & access != 0).then(|| mr.cpu(addr, len)).flatten();
        }
        let bind = self
            .mws
            .values()
            .filter(|mw| mw.pd == pd)
            .find_map(|mw| mw.bound.filter(|b| b.rkey == rkey))?;
        let end = addr.checked_add(len)?;
        if bind.access & access == 0 || addr < bind.addr || end > bind.addr + bind.len {
            return None;
        }
        self.mrs.get(&bind.lkey?)?.cpu(addr, len)
    }

    /// Whether a window is bound to the MR with `lkey`.
    pub fn has_windows(&self, lkey: u32) -> bool {
        self.mws.values().any(|mw| mw.bound.is_some_and(|b| b.lkey == Some(lkey)))
    }

    /// The outstanding wr_ids of `queue` (empty once its object is gone).
    fn inflight_mut(&mut self, queue: Queue) -> Option<&mut Vec<u64>> {
        match queue {
            Queue::Send(qpn) => self.qps.get_mut(&qpn).map(|q| &mut q.sq_inflight),
            Queue::Recv(qpn) => self.qps.get_mut(&qpn).map(|q| &mut q.rq_inflight),
            Queue::Srq(handle) => self.srqs.get_mut(&handle).map(|s| &mut s.inflight),
        }
    }

    /// Counts `wr_id` outstanding on `queue`, naming the bytes of `sges` (none for inline
    /// data, which is read at the post).
    pub fn post(&mut self, queue: Queue, wr_id: u64, sges: &[ibv_sge]) {
        if let Some(inflight) = self.inflight_mut(queue) {
            inflight.push(wr_id);
            if wr_id & BUFFER_TIER_BIT != 0 {
                let bytes = sges.iter().filter(|g| g.length != 0);
                let ranges = bytes.map(|g| (g.lkey, g.addr..g.addr + u64::from(g.length)));
                self.buffer_bytes.insert(wr_id, ranges.collect());
            }
        }
    }

    /// Retires the oldest outstanding `wr_id` of `queue`, if any.
    pub fn retire(&mut self, queue: Queue, wr_id: u64) {
        if let Some(inflight) = self.inflight_mut(queue) {
            if let Some(i) = inflight.iter().position(|&id| id == wr_id) {
                inflight.remove(i);
                self.buffer_bytes.remove(&wr_id);
            }
        }
    }

    /// Forgets everything outstanding on `queue` (a QP reset or destroyed, an SRQ gone).
    pub fn discard(&mut self, queue: Queue) {
        let ids = self.inflight_mut(queue).map(std::mem::take).unwrap_or_default();
        for wr_id in ids {
            self.buffer_bytes.remove(&wr_id);
        }
    }

    /// An outstanding buffer-tier work request naming bytes of `sge` (same lkey, overlapping
    /// IOVA range), if any.
    pub fn buffer_in_flight(&self, sge: &ibv_sge) -> Option<u64> {
        let range = sge.addr..sge.addr + u64::from(sge.length);
        self.buffer_bytes.iter().find_map(|(&wr_id, ranges)| {
            ranges
                .iter()
                .any(|(lkey, r)| *lkey == sge.lkey && r.start < range.end && range.start < r.end)
                .then_some(wr_id)
        })
    }

    /// Whether the buffer-tier `wr_id` is outstanding anywhere in this mock.
    pub fn in_flight(&self, wr_id: u64) -> bool {
        wr_id & BUFFER_TIER_BIT != 0
            && (self
                .qps
                .values()
                .any(|q| q.sq_inflight.contains(&wr_id) || q.rq_inflight.contains(&wr_id))
                || self.srqs.values().any(|s| s.inflight.contains(&wr_id)))
    }

    /// The queues that report their completions on `cq`.
    pub fn queues_of(&self, cq: *mut ibv_cq) -> Vec<Queue> {
        let mut queues = Vec::new();
        for (&qpn, qp) in &self.qps {
            let raw = qp.raw();
            if raw.send_cq == cq {
                queues.push(Queue::Send(qpn));
            }
            if raw.recv_cq == cq {
                queues.push(queue_of_receives(qpn, qp));
            }
        }
        queues
    }

    /// Whether `wr_id` is outstanding on `queue`.
    pub fn is_outstanding(&mut self, queue: Queue, wr_id: u64) -> bool {
        self.inflight_mut(queue).is_some_and(|ids| ids.contains(&wr_id))
    }

    /// The work requests queued on live queues, not executed yet, that name memory no
    /// longer registered (an lkey no live MR has; lkeys are never reused): each as "queue
    /// wr_id lkey".
    pub fn dangling_work(&self) -> Vec<String> {
        let gone = |sges: &[ibv_sge]| {
            sges.iter().find(|sge| sge.length != 0 && !self.mrs.contains_key(&sge.lkey)).copied()
        };
        let sends = self.qps.iter().flat_map(|(&qpn, qp)| {
            let queued = qp.sq.iter().filter(|w| w.inline.is_none());
            queued.map(move |w| (Queue::Send(qpn), w.wr_id, gone(&w.sges)))
        });
        let receives = self.qps.iter().flat_map(|(&qpn, qp)| {
            qp.rq.iter().map(move |w| (Queue::Recv(qpn), w.wr_id, gone(&w.sges)))
        });
        let srq_receives = self.srqs.iter().flat_map(|(&handle, srq)| {
            srq.rq.iter().map(move |w| (Queue::Srq(handle), w.wr_id, gone(&w.sges)))
        });
        sends
            .chain(receives)
            .chain(srq_receives)
            .filter_map(|(queue, wr_id, sge)| {
                sge.map(|sge| format!("{queue:?} wr_id {wr_id:#x} lkey {:#x}", sge.lkey))
            })
            .collect()
    }
}

/// Where `qp`'s receives are posted: its SRQ or its own receive queue.
pub(crate) fn queue_of_receives(qpn: u32, qp: &QpInfo) -> Queue {
    qp.srq.map_or(Queue::Recv(qpn), Queue::Srq)
}
