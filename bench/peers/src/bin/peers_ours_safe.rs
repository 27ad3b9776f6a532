//! The workloads on rdma-verbs' safe buffer tier, as its docs show it: every post moves a
//! buffer of a registered pool into the queue pair (the crate builds its work request) and
//! its completion hands it back. The write stream chains its unsignaled buffers on a
//! `SendBufferList` (`post_send_buffer_chained`), which the signaled one releases.
use rdma_verbs::*;
use rdma_verbs_bench_peers::*;

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let (workload, n, _) = args()?;
    let ctx = Context::open_or_first(None)?;
    let pd = ctx.alloc_pd()?;
    let (cq_a, cq_b) = (ctx.create_cq(2 * DEPTH)?, ctx.create_cq(2 * DEPTH)?);
    // Buffers of SIZE bytes, as many as may be in flight and one receive per side.
    let chunks = DEPTH as usize + 2;
    let pool = BufferPool::new(pd.register(chunks * SIZE, AccessFlags::LOCAL_WRITE)?, SIZE)?;
    let target =
        pd.register_remote_writable(SIZE, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    let [a, b] = connected_pair(&ctx, &pd, [&cq_a, &cq_b])?;
    let take = || -> std::result::Result<Buffer<'_>, Box<dyn std::error::Error>> {
        let mut buffer = pool.take().ok_or("the pool ran dry")?;
        buffer.set_len(SIZE)?;
        Ok(buffer)
    };
    let mut wcs = [WorkCompletion::EMPTY; (DEPTH as u64 / SIGNAL_EVERY) as usize];
    let mut empty_polls = 0u64;

    if workload == Workload::Write {
        let op = SendOp::RdmaWrite(target.remote(..)?);
        let mut chain = SendBufferList::with_capacity(0);
        let (mut posted, mut completed) = (0u64, 0u64);
        while completed < n {
            while posted < n && posted - completed < u64::from(DEPTH) {
                let signaled = (posted + 1).is_multiple_of(SIGNAL_EVERY);
                a.post_send_buffer_chained(&mut chain, take()?, op, signaled)?;
                posted += 1;
            }
            let done = cq_a.poll(&mut wcs)?;
            empty_polls += u64::from(done.is_empty());
            for wc in done {
                if !wc.is_success() {
                    return Err(format!("{wc}").into());
                }
                // The signaled buffer; the unsignaled ones before it are back in the pool.
                drop(pool.complete(wc));
                completed += SIGNAL_EVERY;
            }
        }
    } else {
        // Polls `cq` until a receive completes; every completion's buffer goes back.
        let mut wait_for_recv = |cq: &CompletionQueue<'_>| -> std::result::Result<(), String> {
            loop {
                let done = cq.poll(&mut wcs[..1]).map_err(|e| e.to_string())?;
                empty_polls += u64::from(done.is_empty());
                for wc in done {
                    if !wc.is_success() {
                        return Err(format!("{wc}"));
                    }
                    let recv = wc.opcode() == WcOpcode::RECV;
                    drop(pool.complete(wc));
                    if recv {
                        return Ok(());
                    }
                }
            }
        };
        a.post_recv_buffer(pool.take().ok_or("the pool ran dry")?)?;
        b.post_recv_buffer(pool.take().ok_or("the pool ran dry")?)?;
        for _ in 0..n {
            a.post_send_buffer(take()?, SendOp::Send)?;
            wait_for_recv(&cq_b)?;
            b.post_recv_buffer(pool.take().ok_or("the pool ran dry")?)?;
            b.post_send_buffer(take()?, SendOp::Send)?;
            wait_for_recv(&cq_a)?;
            a.post_recv_buffer(pool.take().ok_or("the pool ran dry")?)?;
        }
    }
    println!("empty polls: {empty_polls}");
    Ok(())
}
