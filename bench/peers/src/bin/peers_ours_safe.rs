//! The workloads on rdma-verbs' safe buffer tier, as its docs show it: every post moves a
//! buffer of a registered pool into the queue pair (the crate builds its work request) and
//! its completion hands it back. The write stream chains its unsignaled buffers on a
//! `SendBufferList` (`post_send_buffer_chained`), which the signaled one releases.
use rdma_verbs::*;
use rdma_verbs_bench_peers::{
    args, connected_pair, run, Error, PingPong, WriteStream, DEPTH, SIGNAL_EVERY, SIZE,
};

struct Safe<'a> {
    qps: [QueuePair<'a, Rts>; 2],
    cqs: [&'a CompletionQueue<'a>; 2],
    pool: &'a BufferPool<'a>,
    /// The write stream's chain of unsignaled buffers.
    chain: SendBufferList<'a>,
    /// The WRITEs' operation: where they go.
    write: SendOp,
    wcs: [WorkCompletion; (DEPTH as u64 / SIGNAL_EVERY) as usize],
}

impl<'a> Safe<'a> {
    /// A buffer of the pool, to send [`SIZE`] bytes.
    fn take(&self) -> Result<Buffer<'a>, Error> {
        let mut buffer = self.pool.take().ok_or("the pool ran dry")?;
        buffer.set_len(SIZE)?;
        Ok(buffer)
    }
}

impl WriteStream for Safe<'_> {
    fn post_write(&mut self, _: u64, signaled: bool) -> Result<(), Error> {
        let buffer = self.take()?;
        self.qps[0]
            .post_send_buffer_chained(&mut self.chain, buffer, self.write, signaled)
            .map_err(Into::into)
    }

    fn poll_writes(&mut self) -> Result<u64, Error> {
        let done = self.cqs[0].poll(&mut self.wcs)?;
        let found = done.len() as u64;
        for wc in done {
            if !wc.is_success() {
                return Err(format!("{wc}").into());
            }
            // The signaled buffer; the unsignaled ones before it are back in the pool.
            drop(self.pool.complete(wc));
        }
        Ok(found)
    }
}

impl PingPong for Safe<'_> {
    fn post_send(&mut self, side: usize, _: u64) -> Result<(), Error> {
        self.qps[side].post_send_buffer(self.take()?, SendOp::Send).map_err(Into::into)
    }

    fn post_recv(&mut self, side: usize) -> Result<(), Error> {
        let buffer = self.pool.take().ok_or("the pool ran dry")?;
        self.qps[side].post_recv_buffer(buffer).map_err(Into::into)
    }

    fn poll_one(&mut self, side: usize) -> Result<Option<bool>, Error> {
        let Some(wc) = self.cqs[side].poll(&mut self.wcs[..1])?.first_mut() else {
            return Ok(None);
        };
        if !wc.is_success() {
            return Err(format!("{wc}").into());
        }
        let recv = wc.opcode() == WcOpcode::RECV;
        drop(self.pool.complete(wc));
        Ok(Some(recv))
    }
}

fn main() -> Result<(), Error> {
    let (workload, n, _) = args()?;
    let ctx = Context::open_or_first(None)?;
    let pd = ctx.alloc_pd()?;
    let (cq_a, cq_b) = (ctx.create_cq(2 * DEPTH)?, ctx.create_cq(2 * DEPTH)?);
    // Buffers of SIZE bytes, as many as may be in flight and one receive per side.
    let chunks = DEPTH as usize + 2;
    let pool = BufferPool::new(pd.register(chunks * SIZE, AccessFlags::LOCAL_WRITE)?, SIZE)?;
    let target =
        pd.register_remote_writable(SIZE, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
    let mut safe = Safe {
        qps: connected_pair(&ctx, &pd, [&cq_a, &cq_b])?,
        cqs: [&cq_a, &cq_b],
        pool: &pool,
        chain: SendBufferList::with_capacity(0),
        write: SendOp::RdmaWrite(target.remote(..)?),
        wcs: [WorkCompletion::EMPTY; (DEPTH as u64 / SIGNAL_EVERY) as usize],
    };
    run(workload, n, &mut safe)
}
