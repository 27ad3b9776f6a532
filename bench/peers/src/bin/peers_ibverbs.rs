//! The ping-pong on the `ibverbs` crate, as its docs and loopback example show it:
//! `QueuePair::post_send` and `post_receive` build a work request for every post. It cannot
//! express the write stream: its only send verb posts a signaled SEND (no RDMA WRITE, no
//! unsignaled WR).
use ibverbs::{ibv_qp_type, ibv_wc, ibv_wc_opcode, CompletionQueue, MemoryRegion, QueuePair};
use rdma_verbs_bench_peers::*;

struct Ibverbs<'a> {
    qps: [QueuePair<'a>; 2],
    cqs: [&'a CompletionQueue<'a>; 2],
    /// Each side's region: what it sends, then what it receives.
    mrs: [MemoryRegion<u8>; 2],
    wcs: [ibv_wc; 1],
}

impl PingPong for Ibverbs<'_> {
    fn post_send(&mut self, side: usize, i: u64) -> Result<(), Error> {
        // SAFETY: the region outlives the QP and its first half is never written.
        unsafe { self.qps[side].post_send(&mut self.mrs[side], ..SIZE, i) }.map_err(Into::into)
    }

    fn post_recv(&mut self, side: usize) -> Result<(), Error> {
        // SAFETY: the region outlives the QP; only the NIC touches its second half.
        unsafe { self.qps[side].post_receive(&mut self.mrs[side], SIZE.., 0) }.map_err(Into::into)
    }

    fn poll_one(&mut self, side: usize) -> Result<Option<bool>, Error> {
        match self.cqs[side].poll(&mut self.wcs)? {
            [] => Ok(None),
            [wc, ..] => match wc.error() {
                Some((status, _)) => Err(format!("completion status {status}").into()),
                None => Ok(Some(wc.opcode() == ibv_wc_opcode::IBV_WC_RECV)),
            },
        }
    }
}

fn main() -> Result<(), Error> {
    let (workload, n, gid_index) = args()?;
    if workload == Workload::Write {
        eprintln!("peers_ibverbs: ibverbs 0.9 cannot express it (post_send is a signaled SEND)");
        std::process::exit(2);
    }
    let ctx = ibverbs::devices()?.iter().next().ok_or("no RDMA device")?.open()?;
    let pd = ctx.alloc_pd()?;
    let (cq_a, cq_b) = (ctx.create_cq(2 * DEPTH as i32, 0)?, ctx.create_cq(2 * DEPTH as i32, 0)?);
    let prepare = |cq| {
        pd.create_qp(cq, cq, ibv_qp_type::IBV_QPT_RC)
            .set_gid_index(gid_index.into())
            .set_max_send_wr(DEPTH)
            .set_max_recv_wr(1)
            .build()
    };
    let (a, b) = (prepare(&cq_a)?, prepare(&cq_b)?);
    let (a_end, b_end) = (a.endpoint(), b.endpoint());
    let mut ibverbs = Ibverbs {
        qps: [a.handshake(b_end)?, b.handshake(a_end)?],
        cqs: [&cq_a, &cq_b],
        mrs: [pd.allocate::<u8>(2 * SIZE)?, pd.allocate::<u8>(2 * SIZE)?],
        wcs: [ibv_wc::default(); 1],
    };
    println!("empty polls: {}", ping_pong(n, &mut ibverbs)?);
    Ok(())
}
