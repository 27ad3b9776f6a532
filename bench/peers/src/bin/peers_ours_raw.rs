//! The workloads on rdma-verbs' raw tier, as its docs show it: an `Sge` and a `SendWr` built
//! for every post, posted with the `unsafe` `post_send_wr`.
use rdma_verbs::*;
use rdma_verbs_bench_peers::{
    args, connected_pair, run, Error, PingPong, WriteStream, DEPTH, SIGNAL_EVERY, SIZE,
};

struct Raw<'a> {
    qps: [QueuePair<'a, Rts>; 2],
    cqs: [&'a CompletionQueue<'a>; 2],
    /// Each side's region: what it sends, then what it receives.
    mrs: [&'a MemoryRegion<'a>; 2],
    /// Where the WRITEs go.
    remote: RemoteAddr,
    wcs: [WorkCompletion; (DEPTH as u64 / SIGNAL_EVERY) as usize],
}

impl WriteStream for Raw<'_> {
    fn post_write(&mut self, i: u64, signaled: bool) -> Result<(), Error> {
        let flags = if signaled { SendFlags::SIGNALED } else { SendFlags::empty() };
        let sge = [self.mrs[0].sge(..SIZE)?];
        let mut wr = SendWr::rdma_write(i, &sge, self.remote).flags(flags);
        // SAFETY: the region outlives the QP and its first half is never written; the
        // wr_id's bit 63 is clear.
        unsafe { self.qps[0].post_send_wr(&mut wr) }.map_err(Into::into)
    }

    fn poll_writes(&mut self) -> Result<u64, Error> {
        let done = self.cqs[0].poll(&mut self.wcs)?;
        if let Some(wc) = done.iter().find(|wc| !wc.is_success()) {
            return Err(format!("{wc}").into());
        }
        Ok(done.len() as u64)
    }
}

impl PingPong for Raw<'_> {
    fn post_send(&mut self, side: usize, i: u64) -> Result<(), Error> {
        let sge = [self.mrs[side].sge(..SIZE)?];
        let mut wr = SendWr::send(i, &sge).flags(SendFlags::SIGNALED);
        // SAFETY: the region outlives the QP and its first half is never written; the
        // wr_id's bit 63 is clear.
        unsafe { self.qps[side].post_send_wr(&mut wr) }.map_err(Into::into)
    }

    fn post_recv(&mut self, side: usize) -> Result<(), Error> {
        let sge = [self.mrs[side].sge(SIZE..)?];
        // SAFETY: the region outlives the QP; only the NIC touches its second half.
        unsafe { self.qps[side].post_recv_wr(&mut RecvWr::new(0, &sge)) }.map_err(Into::into)
    }

    fn poll_one(&mut self, side: usize) -> Result<Option<bool>, Error> {
        match self.cqs[side].poll(&mut self.wcs[..1])? {
            [] => Ok(None),
            [wc, ..] if !wc.is_success() => Err(format!("{wc}").into()),
            [wc, ..] => Ok(Some(wc.opcode() == WcOpcode::RECV)),
        }
    }
}

fn main() -> Result<(), Error> {
    let (workload, n, _) = args()?;
    let ctx = Context::open_or_first(None)?;
    let pd = ctx.alloc_pd()?;
    let (cq_a, cq_b) = (ctx.create_cq(2 * DEPTH)?, ctx.create_cq(2 * DEPTH)?);
    let a_mr = pd.register(2 * SIZE, AccessFlags::LOCAL_WRITE)?;
    let b_mr = pd.register(2 * SIZE, AccessFlags::LOCAL_WRITE)?;
    let target =
        pd.register_remote_writable(SIZE, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    let mut raw = Raw {
        qps: connected_pair(&ctx, &pd, [&cq_a, &cq_b])?,
        cqs: [&cq_a, &cq_b],
        mrs: [&a_mr, &b_mr],
        remote: target.remote(..)?,
        wcs: [WorkCompletion::EMPTY; (DEPTH as u64 / SIGNAL_EVERY) as usize],
    };
    run(workload, n, &mut raw)
}
