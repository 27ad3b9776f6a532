//! The ping-pong on the `ibverbs` crate, as its docs and loopback example show it:
//! `QueuePair::post_send` and `post_receive` build a work request for every post. It cannot
//! express the write stream: its only send verb posts a signaled SEND (no RDMA WRITE, no
//! unsignaled WR).
use ibverbs::{ibv_qp_type, ibv_wc, ibv_wc_opcode, CompletionQueue};
use rdma_verbs_bench_peers::*;

type Error = Box<dyn std::error::Error>;

fn main() -> Result<(), Error> {
    let (workload, n, gid_index) = args()?;
    if workload == Workload::Write {
        eprintln!("peers_ibverbs: ibverbs 0.9 cannot express it (post_send is a signaled SEND)");
        std::process::exit(2);
    }
    let ctx = ibverbs::devices()?.iter().next().ok_or("no RDMA device")?.open()?;
    let pd = ctx.alloc_pd()?;
    let (cq_a, cq_b) = (ctx.create_cq(2 * DEPTH as i32, 0)?, ctx.create_cq(2 * DEPTH as i32, 0)?);
    // Each side's region: what it sends, then what it receives.
    let (mut a_mr, mut b_mr) = (pd.allocate::<u8>(2 * SIZE)?, pd.allocate::<u8>(2 * SIZE)?);
    let prepare = |cq| {
        pd.create_qp(cq, cq, ibv_qp_type::IBV_QPT_RC)
            .set_gid_index(gid_index.into())
            .set_max_send_wr(DEPTH)
            .set_max_recv_wr(1)
            .build()
    };
    let (a, b) = (prepare(&cq_a)?, prepare(&cq_b)?);
    let (a_end, b_end) = (a.endpoint(), b.endpoint());
    let (mut a, mut b) = (a.handshake(b_end)?, b.handshake(a_end)?);
    let mut wcs = [ibv_wc::default(); 1];
    let mut empty_polls = 0u64;
    // Polls `cq` until a receive completes, dropping the sends' completions.
    let mut wait_for_recv = |cq: &CompletionQueue| -> Result<(), Error> {
        loop {
            let done = cq.poll(&mut wcs)?;
            empty_polls += u64::from(done.is_empty());
            for wc in done {
                if let Some((status, _)) = wc.error() {
                    return Err(format!("status {status}").into());
                }
                if wc.opcode() == ibv_wc_opcode::IBV_WC_RECV {
                    return Ok(());
                }
            }
        }
    };
    // SAFETY (every post below): the regions outlive the QPs; only the NIC writes their
    // second halves, and nothing writes their first halves.
    unsafe { a.post_receive(&mut a_mr, SIZE.., 0)? };
    unsafe { b.post_receive(&mut b_mr, SIZE.., 0)? };
    for i in 0..n {
        unsafe { a.post_send(&mut a_mr, ..SIZE, i)? };
        wait_for_recv(&cq_b)?;
        unsafe { b.post_receive(&mut b_mr, SIZE.., 0)? };
        unsafe { b.post_send(&mut b_mr, ..SIZE, i)? };
        wait_for_recv(&cq_a)?;
        unsafe { a.post_receive(&mut a_mr, SIZE.., 0)? };
    }
    println!("empty polls: {empty_polls}");
    Ok(())
}
