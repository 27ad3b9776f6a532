//! The client: `-n` requests over one QP, one at a time, each reply checked byte for byte.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;

use rdma_verbs::*;

use crate::{new_qp, read_endpoint, reply, request, Args, Error, Link, LAST, MORE, PEER_TIMEOUT};

/// Connects to the server at `host` by the TCP exchange, sends the requests, checks the
/// replies.
pub fn run(args: &Args, host: &str) -> Result<(), Error> {
    let ctx = Context::open_or_first(args.ib_dev.as_deref())?;
    let link = crate::link(&ctx, args)?;
    let stream = TcpStream::connect((host, args.port))
        .map_err(|e| format!("couldn't connect to {host}:{}: {e}", args.port))?;
    converse(&ctx, link.port, args, &mut ByTcp { stream, link })
}

/// `--rdma-cm`: connects to the server at `host` through rdma_cm, sends the requests, checks
/// the replies.
#[cfg(feature = "rdmacm")]
pub fn run_cm(args: &Args, host: &str) -> Result<(), Error> {
    use std::net::{SocketAddr, ToSocketAddrs};
    use std::time::Duration;

    use rdma_verbs::cm::{CmId, EventChannel, PortSpace};

    let dst = (host, args.port)
        .to_socket_addrs()
        .map_err(|e| format!("couldn't resolve {host}: {e}"))?
        .find(SocketAddr::is_ipv4)
        .ok_or_else(|| format!("{host} has no IPv4 address"))?;
    let channel = EventChannel::new()?;
    let id = CmId::new(&channel, PortSpace::TCP)?;
    id.resolve_addr(None, dst, Duration::from_secs(5))
        .map_err(|e| format!("couldn't reach {dst}: {e}"))?;
    id.resolve_route(Duration::from_secs(5))?;
    let ctx = id.context()?;
    crate::check_cm_device(args, ctx)?;
    converse(ctx, id.port_num(), args, &mut by_cm::ByCm { id: &id, dst, requests: args.requests })
}

/// How the client's QP gets connected, and how the connection ends.
trait Connect {
    /// Takes our QP (INIT) to RTS, connected to the server's; the client index, when the
    /// connection told it (else each reply carries it as immediate data).
    fn connect<'q>(
        &mut self,
        qp: QueuePair<'q, Init>,
    ) -> Result<(QueuePair<'q, Rts>, Option<u32>), Error>;

    /// Ends the connection once every reply was checked, while our QP still exists.
    fn finish(&mut self) -> Result<(), Error>;
}

/// Sends the requests over a QP on `ctx`'s `port`, connected by `by`, checks the replies and
/// prints a summary.
fn converse(ctx: &Context, port: u8, args: &Args, by: &mut dyn Connect) -> Result<(), Error> {
    let pd = ctx.alloc_pd()?;
    let channel = ctx.create_comp_channel()?;
    // One request and its reply at a time.
    let cq = ctx.create_cq_with_channel(2, &channel, 0)?;
    cq.req_notify(false)?;
    let size = args.size as usize;
    let pool = BufferPool::new(pd.register(2 * size, AccessFlags::LOCAL_WRITE)?, size)?;
    let (qp, told) = by.connect(new_qp(&pd, &cq, port, 1)?)?;

    // Requests differ between clients, so a reply routed to the wrong one fails its check.
    let seed = qp.qp_num().get() ^ std::process::id().rotate_left(16);
    let session = Session { qp, cq: &cq, channel: &channel, pool: &pool, seed, told, args };
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
    by.finish()?;
    println!("client {index}: {} requests ({bytes} bytes) answered correctly", args.requests);
    Ok(())
}

/// The TCP exchange of endpoints, its connection kept open while served.
struct ByTcp {
    stream: TcpStream,
    link: Link,
}

impl Connect for ByTcp {
    fn connect<'q>(
        &mut self,
        qp: QueuePair<'q, Init>,
    ) -> Result<(QueuePair<'q, Rts>, Option<u32>), Error> {
        let psn = Psn::random();
        self.stream.write_all(&self.link.endpoint(&qp, psn).to_pingpong_message())?;
        let remote = read_endpoint(&mut self.stream)?;
        Ok((self.link.connect(qp, &remote, psn)?, None))
    }

    /// The server closes the connection once our acknowledgement of its last reply has
    /// reached it; until then our QP must live to send it.
    fn finish(&mut self) -> Result<(), Error> {
        let mut byte = [0u8];
        match self.stream.read(&mut byte) {
            Ok(0) => Ok(()),
            Ok(_) => Err("the server sent more than its address message".into()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                Err(format!(
                    "the server did not close the connection within {} s of its last reply",
                    PEER_TIMEOUT.as_secs()
                )
                .into())
            }
            Err(e) => Err(format!("waiting for the server to close the connection: {e}").into()),
        }
    }
}

#[cfg(feature = "rdmacm")]
mod by_cm {
    use std::net::SocketAddr;

    use rdma_verbs::cm::{CmId, ConnParam};
    use rdma_verbs::{Init, QueuePair, Rts};

    use super::Connect;
    use crate::{Error, PEER_TIMEOUT};

    /// rdma_cm: the request count goes in the connect's private data, the client index comes
    /// in the accept's (4 bytes each, little-endian).
    pub struct ByCm<'a, 'ch> {
        pub id: &'a CmId<'ch>,
        pub dst: SocketAddr,
        pub requests: u32,
    }

    impl Connect for ByCm<'_, '_> {
        fn connect<'q>(
            &mut self,
            qp: QueuePair<'q, Init>,
        ) -> Result<(QueuePair<'q, Rts>, Option<u32>), Error> {
            let data = self.requests.to_le_bytes();
            let up = self
                .id
                .connect(qp, &ConnParam::with_private_data(&data), PEER_TIMEOUT)
                .map_err(|e| format!("couldn't connect to {}: {e}", self.dst))?;
            // Over IB/RoCE the private data arrives padded with zeros: the index is its start.
            let index = up.private_data.get(..4).ok_or_else(|| {
                format!(
                    "the server's accept carries {} bytes of private data, not a 4-byte client \
                     index: is it this service's server?",
                    up.private_data.len()
                )
            })?;
            Ok((up.qp, Some(u32::from_le_bytes(index.try_into().expect("4 bytes")))))
        }

        /// Every reply is here, so the server's last send was acknowledged (the ACK leaves
        /// before the receive completes): disconnecting tells the server it may let go.
        fn finish(&mut self) -> Result<(), Error> {
            Ok(self.id.disconnect()?)
        }
    }
}

/// A connected client's QP and the resources it borrows.
struct Session<'a> {
    qp: QueuePair<'a, Rts>,
    cq: &'a CompletionQueue<'a>,
    channel: &'a CompletionChannel<'a>,
    pool: &'a BufferPool<'a>,
    seed: u32,
    /// The client index the connection told (rdma_cm): requests and replies are then plain
    /// SENDs. `None`: requests carry `MORE`/`LAST` and replies the index as immediate data.
    told: Option<u32>,
    args: &'a Args,
}

impl<'a> Session<'a> {
    /// Sends request `i`, adding its length to `bytes`, and checks the reply; returns the
    /// client index the reply names.
    fn request(&self, i: u32, bytes: &mut u64) -> Result<u32, Error> {
        let request = request(self.seed, i, self.args.size);
        *bytes += request.len() as u64;
        let op = match self.told {
            Some(_) => SendOp::Send,
            None if i + 1 == self.args.requests => SendOp::SendWithImm(LAST),
            None => SendOp::SendWithImm(MORE),
        };
        // The receive first: the reply may come as soon as the request is out.
        self.qp.post_recv_buffer(self.take()?)?;
        let mut buffer = self.take()?;
        buffer.fill(&request)?;
        self.qp.post_send_buffer(buffer, op)?;

        let mut wcs: [WorkCompletion; 2] = Default::default();
        let (mut received, mut sent) = (None, false);
        let (got, imm) = loop {
            received = match (sent, received) {
                (true, Some(done)) => break done,
                (_, waiting) => waiting,
            };
            let done = self.cq.poll_blocking(self.channel, &mut wcs, PEER_TIMEOUT)?;
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

        let index = match (self.told, imm) {
            (Some(index), None) | (None, Some(index)) => index,
            (Some(_), Some(imm)) => {
                return Err(format!("reply {i} carries immediate data ({imm:#x})").into())
            }
            (None, None) => return Err(format!("reply {i} carries no client index").into()),
        };
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
