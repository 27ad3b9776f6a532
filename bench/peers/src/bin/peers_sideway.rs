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

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let (workload, n, gid_index) = args()?;
    let devices = DeviceList::new()?;
    let ctx = devices.iter().next().ok_or("no RDMA device")?.open()?;
    let pd = ctx.alloc_pd()?;
    let new_cq = || ctx.create_cq_builder().setup_cqe(2 * DEPTH).build_ex();
    let (cq_a, cq_b) = (new_cq()?, new_cq()?);
    // Each side's buffer: what it sends, then what it receives.
    let (a_buf, b_buf) = (vec![0u8; 2 * SIZE], vec![0u8; 2 * SIZE]);
    let access = AccessFlags::LocalWrite | AccessFlags::RemoteWrite;
    // SAFETY: both buffers outlive their regions and are never moved or resized.
    let a_mr = unsafe { pd.reg_mr(a_buf.as_ptr() as usize, a_buf.len(), access)? };
    let b_mr = unsafe { pd.reg_mr(b_buf.as_ptr() as usize, b_buf.len(), access)? };
    let new_qp = |cq: &Arc<ExtendedCompletionQueue>| {
        pd.create_qp_builder()
            .setup_max_send_wr(DEPTH)
            .setup_max_recv_wr(1)
            .setup_send_cq(GenericCompletionQueue::from(Arc::clone(cq)))
            .setup_recv_cq(GenericCompletionQueue::from(Arc::clone(cq)))
            .build_ex()
    };
    let (mut a, mut b) = (new_qp(&cq_a)?, new_qp(&cq_b)?);
    let gid = ctx.query_gid(1, gid_index.into())?;
    let mtu = ctx.query_port(1)?.active_mtu();
    let (a_qpn, b_qpn) = (a.qp_number(), b.qp_number());
    for (qp, peer) in [(&mut a, b_qpn), (&mut b, a_qpn)] {
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
    let mut empty_polls = 0u64;

    if workload == Workload::Write {
        let (mut posted, mut completed) = (0u64, 0u64);
        while completed < n {
            while posted < n && posted - completed < u64::from(DEPTH) {
                let signaled = (posted + 1).is_multiple_of(SIGNAL_EVERY);
                let flags =
                    if signaled { WorkRequestFlags::Signaled } else { WorkRequestFlags::none() };
                let mut guard = a.start_post_send();
                let wr = guard
                    .construct_wr(posted, flags)
                    .setup_write(b_mr.rkey(), b_mr.get_ptr() as u64);
                // SAFETY: a_buf outlives the QP's use of it and is not written.
                unsafe { wr.setup_sge(a_mr.lkey(), a_buf.as_ptr() as u64, SIZE as u32) };
                guard.post()?;
                posted += 1;
            }
            match cq_a.start_poll() {
                Ok(poller) => {
                    for wc in poller {
                        if wc.status() != WorkCompletionStatus::Success as u32 {
                            return Err(
                                format!("WRITE completed with status {}", wc.status()).into()
                            );
                        }
                        completed += SIGNAL_EVERY;
                    }
                }
                Err(PollCompletionQueueError::CompletionQueueEmpty) => empty_polls += 1,
                Err(e) => return Err(e.into()),
            }
        }
    } else {
        let post_recv = |qp: &mut ExtendedQueuePair, mr: &MemoryRegion, buf: &[u8]| {
            let mut guard = qp.start_post_recv();
            // SAFETY: the buffer outlives the QP; only the NIC writes its second half.
            unsafe {
                guard.construct_wr(0).setup_sge(mr.lkey(), buf[SIZE..].as_ptr() as u64, SIZE as u32)
            };
            guard.post()
        };
        let post_send = |qp: &mut ExtendedQueuePair, mr: &MemoryRegion, buf: &[u8], i| {
            let mut guard = qp.start_post_send();
            let wr = guard.construct_wr(i, WorkRequestFlags::Signaled).setup_send();
            // SAFETY: the buffer outlives the QP and is never written.
            unsafe { wr.setup_sge(mr.lkey(), buf.as_ptr() as u64, SIZE as u32) };
            guard.post()
        };
        // Polls `cq` until a receive completes, dropping the sends' completions.
        let mut wait_for_recv = |cq: &ExtendedCompletionQueue| -> Result<(), Error> {
            loop {
                match cq.start_poll() {
                    Ok(poller) => {
                        for wc in poller {
                            if wc.status() != WorkCompletionStatus::Success as u32 {
                                return Err(format!("status {}", wc.status()).into());
                            }
                            if wc.opcode() == WorkCompletionOperationType::Receive as u32 {
                                return Ok(());
                            }
                        }
                    }
                    Err(PollCompletionQueueError::CompletionQueueEmpty) => empty_polls += 1,
                    Err(e) => return Err(e.into()),
                }
            }
        };
        post_recv(&mut a, &a_mr, &a_buf)?;
        post_recv(&mut b, &b_mr, &b_buf)?;
        for i in 0..n {
            post_send(&mut a, &a_mr, &a_buf, i)?;
            wait_for_recv(&cq_b)?;
            post_recv(&mut b, &b_mr, &b_buf)?;
            post_send(&mut b, &b_mr, &b_buf, i)?;
            wait_for_recv(&cq_a)?;
            post_recv(&mut a, &a_mr, &a_buf)?;
        }
    }
    println!("empty polls: {empty_polls}");
    Ok(())
}
