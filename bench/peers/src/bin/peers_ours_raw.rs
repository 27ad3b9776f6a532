//! The workloads on rdma-verbs' raw tier, as its docs show it: an `Sge` and a `SendWr` built
//! for every post, posted with the `unsafe` `post_send_wr`.
use rdma_verbs::*;
use rdma_verbs_bench_peers::*;

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    let (workload, n, _) = args()?;
    let ctx = Context::open_or_first(None)?;
    let pd = ctx.alloc_pd()?;
    let (cq_a, cq_b) = (ctx.create_cq(2 * DEPTH)?, ctx.create_cq(2 * DEPTH)?);
    // Each side's region: what it sends, then what it receives.
    let a_mr = pd.register(2 * SIZE, AccessFlags::LOCAL_WRITE)?;
    let b_mr = pd.register(2 * SIZE, AccessFlags::LOCAL_WRITE)?;
    // What the WRITEs write.
    let target =
        pd.register_remote_writable(SIZE, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    let [a, b] = connected_pair(&ctx, &pd, [&cq_a, &cq_b])?;
    let mut wcs = [WorkCompletion::EMPTY; (DEPTH as u64 / SIGNAL_EVERY) as usize];
    let mut empty_polls = 0u64;

    if workload == Workload::Write {
        let remote = target.remote(..)?;
        let (mut posted, mut completed) = (0u64, 0u64);
        while completed < n {
            while posted < n && posted - completed < u64::from(DEPTH) {
                let signaled = (posted + 1).is_multiple_of(SIGNAL_EVERY);
                let flags = if signaled { SendFlags::SIGNALED } else { SendFlags::empty() };
                let sge = [a_mr.sge(..SIZE)?];
                // SAFETY: a_mr outlives the QP's use of it and is not written while the
                // WRITEs read it; the wr_id's bit 63 is clear.
                unsafe {
                    a.post_send_wr(&mut SendWr::rdma_write(posted, &sge, remote).flags(flags))?
                };
                posted += 1;
            }
            let done = cq_a.poll(&mut wcs)?;
            empty_polls += u64::from(done.is_empty());
            for wc in done {
                if !wc.is_success() {
                    return Err(format!("{wc}").into());
                }
                completed += SIGNAL_EVERY;
            }
        }
    } else {
        let post_recv = |qp: &QueuePair<'_, Rts>, mr: &MemoryRegion<'_>| -> Result<()> {
            let sge = [mr.sge(SIZE..)?];
            // SAFETY: the region outlives the QP; nothing reads or writes its second half
            // while a receive is posted there.
            unsafe { qp.post_recv_wr(&mut RecvWr::new(0, &sge)) }
        };
        let post_send = |qp: &QueuePair<'_, Rts>, mr: &MemoryRegion<'_>, i| -> Result<()> {
            let sge = [mr.sge(..SIZE)?];
            // SAFETY: the region outlives the QP and its first half is never written.
            unsafe { qp.post_send_wr(&mut SendWr::send(i, &sge).flags(SendFlags::SIGNALED)) }
        };
        // Polls `cq` until a receive completes, dropping the sends' completions.
        let mut wait_for_recv = |cq: &CompletionQueue<'_>| -> std::result::Result<(), String> {
            loop {
                let done = cq.poll(&mut wcs[..1]).map_err(|e| e.to_string())?;
                empty_polls += u64::from(done.is_empty());
                for wc in done {
                    if !wc.is_success() {
                        return Err(format!("{wc}"));
                    }
                    if wc.opcode() == WcOpcode::RECV {
                        return Ok(());
                    }
                }
            }
        };
        post_recv(&a, &a_mr)?;
        post_recv(&b, &b_mr)?;
        for i in 0..n {
            post_send(&a, &a_mr, i)?;
            wait_for_recv(&cq_b)?;
            post_recv(&b, &b_mr)?;
            post_send(&b, &b_mr, i)?;
            wait_for_recv(&cq_a)?;
            post_recv(&a, &a_mr)?;
        }
    }
    println!("empty polls: {empty_polls}");
    Ok(())
}
