//! The workloads on the `sideway` crate, as its docs and its rc_pingpong example show it:
//! extended queue pairs and CQs (`build_ex`, the `ibv_wr_*` and `ibv_start_poll` verbs),
//! a guard and a work request built for every post.
use std::sync::Arc;

use rdma_verbs_bench_peers::*;
use sideway::ibverbs::address::AddressHandleAttribute;
use sideway::ibverbs::completion::{
    ExtendedCompletionQueue, GenericCompletionQueue, PollCompletionQueueError,
    WorkCompletionOperationType, WorkCompletionStatus,
};
use sideway::ibverbs::device::DeviceList;
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::queue_pair::{
    ExtendedQueuePair, PostSendGuard, QueuePair, QueuePairAttribute, QueuePairState,
    SetScatterGatherEntry, WorkRequestFlags,
};
use sideway::ibverbs::AccessFlags;

struct Sideway {
    qps: [ExtendedQueuePair; 2],
    cqs: [Arc<ExtendedCompletionQueue>; 2],
    /// Each side's buffer (what it sends, then what it receives) and its region.
    bufs: [Vec<u8>; 2],
    mrs: [Arc<MemoryRegion>; 2],
}

impl WriteStream for Sideway {
    fn post_write(&mut self, i: u64, signaled: bool) -> Result<(), Error> {
        let flags = if signaled { WorkRequestFlags::Signaled } else { WorkRequestFlags::none() };
        let (target, mr) = (&self.mrs[1], &self.mrs[0]);
        let mut guard = self.qps[0].start_post_send();
        let wr = guard.construct_wr(i, flags).setup_write(target.rkey(), target.get_ptr() as u64);
        // SAFETY: the buffer outlives the QP and its first half is never written.
        unsafe { wr.setup_sge(mr.lkey(), self.bufs[0].as_ptr() as u64, SIZE as u32) };
        Ok(guard.post()?)
    }

    fn poll_writes(&mut self) -> Result<u64, Error> {
        let poller = match self.cqs[0].start_poll() {
            Ok(poller) => poller,
            Err(PollCompletionQueueError::CompletionQueueEmpty) => return Ok(0),
            Err(e) => return Err(e.into()),
        };
        // At most the completions that are due, so that `ibv_next_poll` never finds nothing
        // before the session ends: rxe before rdma-core PR 1617 then moves its consumer index
        // past the producer's and later polls read old completions again.
        let mut found = 0;
        for wc in poller.take((DEPTH as u64 / SIGNAL_EVERY) as usize) {
            if wc.status() != WorkCompletionStatus::Success as u32 {
                return Err(format!("WRITE completed with status {}", wc.status()).into());
            }
            found += 1;
        }
        Ok(found)
    }
}

impl PingPong for Sideway {
    fn post_send(&mut self, side: usize, i: u64) -> Result<(), Error> {
        let mut guard = self.qps[side].start_post_send();
        let wr = guard.construct_wr(i, WorkRequestFlags::Signaled).setup_send();
        // SAFETY: the buffer outlives the QP and its first half is never written.
        unsafe {
            wr.setup_sge(self.mrs[side].lkey(), self.bufs[side].as_ptr() as u64, SIZE as u32)
        };
        Ok(guard.post()?)
    }

    fn post_recv(&mut self, side: usize) -> Result<(), Error> {
        let mut guard = self.qps[side].start_post_recv();
        let addr = self.bufs[side][SIZE..].as_ptr() as u64;
        // SAFETY: the buffer outlives the QP; only the NIC touches its second half.
        unsafe { guard.construct_wr(0).setup_sge(self.mrs[side].lkey(), addr, SIZE as u32) };
        Ok(guard.post()?)
    }

    fn poll_one(&mut self, side: usize) -> Result<Option<bool>, Error> {
        let mut poller = match self.cqs[side].start_poll() {
            Ok(poller) => poller,
            Err(PollCompletionQueueError::CompletionQueueEmpty) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let wc = poller.next().ok_or("ibv_start_poll found a completion that next() did not")?;
        if wc.status() != WorkCompletionStatus::Success as u32 {
            return Err(format!("completion status {}", wc.status()).into());
        }
        Ok(Some(wc.opcode() == WorkCompletionOperationType::Receive as u32))
    }
}

fn main() -> Result<(), Error> {
    let (workload, n, gid_index) = args()?;
    let devices = DeviceList::new()?;
    let ctx = devices.iter().next().ok_or("no RDMA device")?.open()?;
    let pd = ctx.alloc_pd()?;
    let new_cq = || ctx.create_cq_builder().setup_cqe(2 * DEPTH).build_ex();
    let cqs = [new_cq()?, new_cq()?];
    let bufs = [vec![0u8; 2 * SIZE], vec![0u8; 2 * SIZE]];
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    // SAFETY: both buffers outlive their regions and are never moved or resized.
    let mrs =
        [0, 1].map(|i| unsafe { pd.reg_mr(bufs[i].as_ptr() as usize, bufs[i].len(), access) });
    let [a_mr, b_mr] = mrs;
    let new_qp = |cq: &Arc<ExtendedCompletionQueue>| {
        pd.create_qp_builder()
            .setup_max_send_wr(DEPTH)
            .setup_max_recv_wr(1)
            .setup_send_cq(GenericCompletionQueue::from(Arc::clone(cq)))
            .setup_recv_cq(GenericCompletionQueue::from(Arc::clone(cq)))
            .build_ex()
    };
    let mut qps = [new_qp(&cqs[0])?, new_qp(&cqs[1])?];
    let gid = ctx.query_gid(1, gid_index.into())?;
    let mtu = ctx.query_port(1)?.active_mtu();
    let qpns = [qps[0].qp_number(), qps[1].qp_number()];
    for (qp, peer) in qps.iter_mut().zip(qpns.into_iter().rev()) {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init).setup_pkey_index(0).setup_port(1);
        qp.modify(attr.setup_access_flags(access))?;
        let mut attr = QueuePairAttribute::new();
        let mut ah = AddressHandleAttribute::new();
        ah.setup_dest_lid(1).setup_port(1).setup_grh_src_gid_index(gid_index);
        ah.setup_grh_dest_gid(&gid).setup_grh_hop_limit(1);
        attr.setup_state(QueuePairState::ReadyToReceive).setup_path_mtu(mtu);
        attr.setup_dest_qp_num(peer).setup_rq_psn(0).setup_max_dest_read_atomic(1);
        qp.modify(attr.setup_min_rnr_timer(12).setup_address_vector(&ah))?;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend).setup_sq_psn(0).setup_timeout(14);
        qp.modify(attr.setup_retry_cnt(7).setup_rnr_retry(7).setup_max_read_atomic(1))?;
    }
    let mut sideway = Sideway { qps, cqs, bufs, mrs: [a_mr?, b_mr?] };
    run(workload, n, &mut sideway)
}
