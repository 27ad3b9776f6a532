//! The client: `-n` requests over one QP, one at a time, each reply checked byte for byte.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;

use rdma_verbs::*;

use crate::{
    armed_cq, poll_within, read_endpoint, reply, request, Args, Error, Link, LAST, MORE,
    PEER_TIMEOUT,
};

/// Connects to the server at `host`, sends the requests, checks the replies.
pub fn run(args: &Args, host: &str) -> Result<(), Error> {
    let ctx = Context::open_by_name(args.ib_dev.as_deref())?;
    let link = Link::new(&ctx, args)?;
    let pd = ctx.alloc_pd()?;
    let channel = ctx.create_comp_channel()?;
    // One request and its reply at a time.
    let cq = armed_cq(&ctx, &channel, 2)?;
    let size = args.size as usize;
    let pool = BufferPool::new(pd.register(2 * size, AccessFlags::LOCAL_WRITE)?, size)?;
    let qp = link.new_qp(&pd, &cq, 1)?;

    let psn = Psn::random();
    let mut stream = TcpStream::connect((host, args.port))
        .map_err(|e| format!("couldn't connect to {host}:{}: {e}", args.port))?;
    stream.write_all(&link.endpoint(&qp, psn).to_pingpong_message())?;
    let remote = read_endpoint(&mut stream)?;
    let qp = link.connect(qp, &remote, psn)?;

    // Requests differ between clients, so a reply routed to the wrong one fails its check.
    let seed = qp.qp_num().0 ^ std::process::id().rotate_left(16);
    let session = Session { qp, cq: &cq, channel: &channel, pool: &pool, seed, args };
    let mut bytes = 0;
    let index = session.request(0, &mut bytes)?;
    for i in 1..args.requests {
        let other = session.request(i, &mut bytes)?;
        if other != index {
            return Err(
                format!("reply {i} names client {other}, earlier ones client {index}").into()
            );
        }
    }
    // The server closes the connection once our acknowledgement of its last reply has
    // reached it; until then our QP must live to send it.
    let mut byte = [0u8];
    match stream.read(&mut byte) {
        Ok(0) => {}
        Ok(_) => return Err("the server sent more than its address message".into()),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
            return Err(format!(
                "the server did not close the connection within {} s of its last reply",
                PEER_TIMEOUT.as_secs()
            )
            .into())
        }
        Err(e) => return Err(format!("waiting for the server to close the connection: {e}").into()),
    }
    println!("client {index}: {} requests ({bytes} bytes) answered correctly", args.requests);
    Ok(())
}

/// A connected client's QP and the resources it borrows.
struct Session<'a> {
    qp: QueuePair<'a, Rts>,
    cq: &'a CompletionQueue<'a>,
    channel: &'a CompletionChannel<'a>,
    pool: &'a BufferPool<'a>,
    seed: u32,
    args: &'a Args,
}

impl<'a> Session<'a> {
    /// Sends request `i`, adding its length to `bytes`, and checks the reply; returns the
    /// client index the reply names.
    fn request(&self, i: u32, bytes: &mut u64) -> Result<u32, Error> {
        let request = request(self.seed, i, self.args.size);
        *bytes += request.len() as u64;
        let imm = if i + 1 == self.args.requests { LAST } else { MORE };
        // The receive first: the reply may come as soon as the request is out.
        self.qp.post_recv_buffer(self.take()?).map_err(|e| e.error)?;
        let mut buffer = self.take()?;
        buffer.fill(&request)?;
        self.qp.post_send_buffer(buffer, SendOp::SendWithImm(imm)).map_err(|e| e.error)?;

        let mut wcs: [WorkCompletion; 2] = Default::default();
        let (mut received, mut sent) = (None, false);
        let (got, index) = loop {
            received = match (sent, received) {
                (true, Some(done)) => break done,
                (_, waiting) => waiting,
            };
            let done = poll_within(self.cq, self.channel, &mut wcs, PEER_TIMEOUT)?;
            if done.is_empty() {
                let secs = PEER_TIMEOUT.as_secs();
                return Err(format!("request {i} not answered within {secs} s").into());
            }
            for wc in done {
                let buffer = self.pool.complete(wc).ok_or("a completion names no buffer")?;
                if !wc.is_success() {
                    return Err(format!("request {i} failed: {}", wc.status()).into());
                }
                if wc.opcode() == WcOpcode::RECV {
                    received = Some((buffer, wc.imm_data()));
                } else {
                    sent = true;
                }
            }
        };

        let index = index.ok_or_else(|| format!("reply {i} carries no client index"))?;
        let got = got.as_slice();
        if got.len() != request.len() {
            return Err(format!(
                "reply {i} has {} bytes, its request {}",
                got.len(),
                request.len()
            )
            .into());
        }
        if let Some(at) = got.iter().zip(reply(&request, index)).position(|(a, b)| *a != b) {
            return Err(format!("reply {i} is wrong from byte {at} of {}", got.len()).into());
        }
        Ok(index)
    }

    fn take(&self) -> Result<Buffer<'a>, Error> {
        Ok(self.pool.take().ok_or("the buffer pool ran out")?)
    }
}
