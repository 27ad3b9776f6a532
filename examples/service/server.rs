//! The server. A `Server<'a>` borrows the verbs resources its caller owns (Context, PD, one
//! CQ with its channel, one buffer pool) and holds a `Client<'a>` per connected client: its
//! QP, on that CQ, and its progress. Every completion is routed to its client by the QP
//! number it carries.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use rdma_verbs::*;

use crate::{
    armed_cq, poll_within, read_endpoint, reply, AddressReader, Args, Error, Link, LAST, MORE,
    PEER_TIMEOUT,
};

/// Replies one client may have in flight: its QP's send queue depth.
const SEND_DEPTH: u32 = 2;
/// The buffers (and CQ entries) one client may hold at once: its replies in flight plus the
/// request being answered.
const PER_CLIENT: u32 = SEND_DEPTH + 1;
/// How long the server sleeps on its CQ before it looks at its connections again (new
/// clients, address messages, clients gone).
const TICK: Duration = Duration::from_millis(10);

/// Serves `--clients` clients, then reports.
pub fn run(args: &Args) -> Result<(), Error> {
    let ctx = Context::open_by_name(args.ib_dev.as_deref())?;
    let link = Link::new(&ctx, args)?;
    let listener = TcpListener::bind(("::", args.port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", args.port)))
        .map_err(|e| format!("couldn't listen on port {}: {e}", args.port))?;
    let failed = if args.threads {
        // Spawned threads need 'static parents: leak the context (and, below, the PD) once.
        serve_threads(Box::leak(Box::new(ctx)), &listener, args, link)?
    } else {
        serve_single(&ctx, &listener, args, link)?
    };
    if failed > 0 {
        return Err(format!("{failed} of {} clients failed", args.clients).into());
    }
    println!("served {} clients", args.clients);
    Ok(())
}

/// Serves every client on this thread: one CQ, one pool and one `Server` for all. Returns
/// how many failed.
fn serve_single(
    ctx: &Context,
    listener: &TcpListener,
    args: &Args,
    link: Link,
) -> Result<usize, Error> {
    let n = args.clients;
    let pd = ctx.alloc_pd()?;
    let channel = ctx.create_comp_channel()?;
    let cq = armed_cq(ctx, &channel, n * PER_CLIENT)?;
    let pool = buffer_pool(&pd, n, args.size)?;
    let mut server = Server::new(ctx, &pd, &cq, &channel, &pool, link);
    // Connections whose address message is still arriving, read without blocking so that
    // a slow client holds up no other.
    let mut pending: Vec<Pending> = Vec::new();
    listener.set_nonblocking(true)?;
    let mut accepted = 0;
    loop {
        if accepted < n {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(true)?;
                    pending.push(Pending::new(accepted, stream));
                    accepted += 1;
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                Err(e) => return Err(format!("accepting a client: {e}").into()),
            }
        }
        let mut i = 0;
        while i < pending.len() {
            match pending[i].poll() {
                None => i += 1,
                Some(remote) => {
                    let p = pending.swap_remove(i);
                    server.admit(p.index, p.stream, remote);
                }
            }
        }
        if accepted == n && pending.is_empty() && !server.is_serving() {
            break;
        }
        server.progress(TICK)?;
    }
    Ok(server.failed)
}

/// Serves each client on its own thread, with its own CQ, pool and `Server`, under the
/// leaked context and a leaked PD. Returns how many failed.
fn serve_threads(
    ctx: &'static Context,
    listener: &TcpListener,
    args: &Args,
    link: Link,
) -> Result<usize, Error> {
    let pd: &'static ProtectionDomain<'static> = Box::leak(Box::new(ctx.alloc_pd()?));
    let size = args.size;
    let mut threads = Vec::new();
    for index in 0..args.clients {
        let (stream, _) = listener.accept().map_err(|e| format!("accepting a client: {e}"))?;
        threads.push(thread::spawn(move || serve_one(ctx, pd, link, size, index, stream)));
    }
    let mut failed = 0;
    for (index, thread) in threads.into_iter().enumerate() {
        match thread.join() {
            Ok(Ok(n)) => failed += n,
            Ok(Err(e)) => {
                println!("client {index}: failed: {e}");
                failed += 1;
            }
            Err(_) => {
                println!("client {index}: failed: its thread panicked");
                failed += 1;
            }
        }
    }
    Ok(failed)
}

/// One client's thread: its own CQ, pool and `Server` of one. Returns 1 if it failed.
fn serve_one(
    ctx: &'static Context,
    pd: &'static ProtectionDomain<'static>,
    link: Link,
    size: u32,
    index: u32,
    mut stream: TcpStream,
) -> Result<usize, Error> {
    let channel = ctx.create_comp_channel()?;
    let cq = armed_cq(ctx, &channel, PER_CLIENT)?;
    let pool = buffer_pool(pd, 1, size)?;
    let mut server = Server::new(ctx, pd, &cq, &channel, &pool, link);
    let remote = read_endpoint(&mut stream);
    server.admit(index, stream, remote);
    while server.is_serving() {
        server.progress(TICK)?;
    }
    Ok(server.failed)
}

/// [`PER_CLIENT`] buffers of `size` bytes for each of `clients`.
fn buffer_pool<'p>(
    pd: &'p ProtectionDomain<'p>,
    clients: u32,
    size: u32,
) -> Result<BufferPool<'p>, Error> {
    let mr =
        pd.register((clients * PER_CLIENT) as usize * size as usize, AccessFlags::LOCAL_WRITE)?;
    Ok(BufferPool::new(mr, size as usize)?)
}

/// A connection whose address message is still arriving (a non-blocking socket).
struct Pending {
    index: u32,
    stream: TcpStream,
    reader: AddressReader,
    since: Instant,
}

impl Pending {
    fn new(index: u32, stream: TcpStream) -> Self {
        Pending { index, stream, reader: AddressReader::new(), since: Instant::now() }
    }

    /// The client's endpoint, or why there is none; `None` while its message may still come.
    fn poll(&mut self) -> Option<Result<Endpoint, Error>> {
        self.reader
            .read(&mut self.stream)
            .transpose()
            .or_else(|| (self.since.elapsed() > PEER_TIMEOUT).then(|| Err(self.reader.timed_out())))
    }
}

/// The clients being served, over resources the caller owns.
struct Server<'a> {
    ctx: &'a Context,
    pd: &'a ProtectionDomain<'a>,
    cq: &'a CompletionQueue<'a>,
    channel: &'a CompletionChannel<'a>,
    pool: &'a BufferPool<'a>,
    link: Link,
    clients: Vec<Client<'a>>,
    /// The QPs of clients let go early, in ERROR, until their work in flight has come back
    /// flushed (and with it their buffers).
    flushing: Vec<Flushing<'a>>,
    /// How many clients ended in failure.
    failed: usize,
}

/// A QP moved to ERROR, and how many of its work requests are still to complete.
struct Flushing<'a> {
    qp: QueuePair<'a, Unknown>,
    in_flight: u32,
}

/// One client being served.
struct Client<'a> {
    index: u32,
    qp: QueuePair<'a, Rts>,
    /// Watched for the client going away (it closes it on any error); dropped, closing
    /// it, once the client is done: that tells it every reply was acknowledged, so it may
    /// destroy its QP.
    stream: TcpStream,
    /// Work requests not completed yet, and how many of them are replies.
    in_flight: u32,
    replies: u32,
    /// Whether the receive for its next request is still to be posted.
    receive_due: bool,
    requests: u32,
    bytes: u64,
    /// `Some` once it ended: `Ok` after its last request, `Err` on a failure.
    outcome: Option<Result<(), String>>,
}

impl<'a> Server<'a> {
    fn new(
        ctx: &'a Context,
        pd: &'a ProtectionDomain<'a>,
        cq: &'a CompletionQueue<'a>,
        channel: &'a CompletionChannel<'a>,
        pool: &'a BufferPool<'a>,
        link: Link,
    ) -> Self {
        let (clients, flushing) = (Vec::new(), Vec::new());
        Server { ctx, pd, cq, channel, pool, link, clients, flushing, failed: 0 }
    }

    fn is_serving(&self) -> bool {
        !self.clients.is_empty() || !self.flushing.is_empty()
    }

    /// Starts serving client `index` at `remote` (from its address message), or reports
    /// why it cannot be served.
    fn admit(&mut self, index: u32, mut stream: TcpStream, remote: Result<Endpoint, Error>) {
        match remote.and_then(|remote| self.connect(&mut stream, &remote)) {
            Ok(qp) => {
                let mut client = Client {
                    index,
                    qp,
                    stream,
                    in_flight: 0,
                    replies: 0,
                    receive_due: true,
                    requests: 0,
                    bytes: 0,
                    outcome: None,
                };
                // Posted after our address message went out: a request that comes first
                // waits in RNR retries, never lost.
                if let Err(e) = client.post_receive(self.pool) {
                    client.fail(e);
                }
                self.clients.push(client);
            }
            Err(e) => {
                println!("client {index}: failed: {e}");
                self.failed += 1;
            }
        }
    }

    /// Our QP for the client at `remote`, in RTS before our address message goes out: the
    /// client may send as soon as it has it.
    fn connect(
        &self,
        stream: &mut TcpStream,
        remote: &Endpoint,
    ) -> Result<QueuePair<'a, Rts>, Error> {
        let psn = Psn::random();
        let qp = self.link.new_qp(self.pd, self.cq, SEND_DEPTH)?;
        let me = self.link.endpoint(&qp, psn);
        let qp = self.link.connect(qp, remote, psn)?;
        stream
            .write_all(&me.to_pingpong_message())
            .map_err(|e| format!("sending our address message: {e}"))?;
        // From now on it is only watched, between completions.
        stream.set_nonblocking(true)?;
        Ok(qp)
    }

    /// Handles what completes within `limit`, then lets go of the clients that are done or
    /// gone.
    fn progress(&mut self, limit: Duration) -> Result<(), Error> {
        let mut wcs: [WorkCompletion; 16] = Default::default();
        for wc in poll_within(self.cq, self.channel, &mut wcs, limit)? {
            self.route(wc);
        }
        self.reap();
        Ok(())
    }

    /// Hands `wc` to the client whose QP it names: every QP shares the CQ, and the QP
    /// number in each completion says whose it is.
    fn route(&mut self, wc: &mut WorkCompletion) {
        // Take the buffer back first: it returns to the pool whatever became of its client.
        let buffer = self.pool.complete(wc);
        let qpn = wc.qp_num();
        let Some(client) = self.clients.iter_mut().find(|c| c.qp.qp_num() == qpn) else {
            // Not a client's: the QP of one let go early, flushing.
            if let Some(f) = self.flushing.iter_mut().find(|f| f.qp.qp_num() == qpn) {
                f.in_flight -= 1;
            }
            return;
        };
        let result = match buffer {
            Some(buffer) => client.complete(wc, buffer, self.pool),
            None => Err(format!("a completion (wr_id {:#x}) names no buffer", wc.wr_id())),
        };
        if let Err(e) = result {
            client.fail(e);
        }
    }

    /// Reports and lets go of the clients that ended with nothing in flight, and of those
    /// gone early, whose QPs flush first. Dropping a client destroys its QP and closes its
    /// connection.
    fn reap(&mut self) {
        self.flushing.retain(|f| f.in_flight > 0);
        let mut i = 0;
        while i < self.clients.len() {
            let client = &mut self.clients[i];
            let gone = client.hung_up().map(|reason| client.fail(reason)).is_some();
            let ended = client.outcome.is_some() && client.in_flight == 0;
            if !gone && !ended {
                i += 1;
                continue;
            }
            let client = self.clients.swap_remove(i);
            if let Some(Err(e)) = &client.outcome {
                println!("client {}: failed after {} requests: {e}", client.index, client.requests);
                self.failed += 1;
            } else {
                println!(
                    "client {}: served {} requests ({} bytes) on {} QP {:#x}",
                    client.index,
                    client.requests,
                    client.bytes,
                    self.ctx.name(),
                    client.qp.qp_num().0
                );
            }
            if client.in_flight > 0 {
                self.flush(client);
            }
        }
    }

    /// Moves the QP of a client gone early to ERROR, so that its work in flight completes
    /// flushed and its buffers come back to the pool.
    fn flush(&mut self, client: Client<'a>) {
        let attr = sys::ibv_qp_attr { qp_state: sys::IBV_QPS_ERR, ..Default::default() };
        match client.qp.modify_raw(&attr, QpAttrMask::STATE) {
            Ok(qp) => self.flushing.push(Flushing { qp, in_flight: client.in_flight }),
            Err(e) => {
                println!("client {}: its buffers in flight are lost: {}", client.index, e.error)
            }
        }
    }
}

impl<'a> Client<'a> {
    /// Handles one of its completions, with the buffer that work request had.
    fn complete(
        &mut self,
        wc: &WorkCompletion,
        buffer: Buffer<'a>,
        pool: &'a BufferPool<'a>,
    ) -> Result<(), String> {
        self.in_flight -= 1;
        if !wc.is_success() {
            // The QP is in ERROR now: what else it has in flight completes flushed.
            return Err(format!("a work request failed: {}", wc.status()));
        }
        if wc.opcode() == WcOpcode::RECV {
            self.answer(&buffer, wc.imm_data(), pool)?;
        } else {
            self.replies -= 1; // a reply went out
        }
        drop(buffer); // back to the pool before the next receive takes one
        self.post_receive(pool)
    }

    /// Sends the reply to `request`.
    fn answer(
        &mut self,
        request: &Buffer<'a>,
        imm: Option<u32>,
        pool: &'a BufferPool<'a>,
    ) -> Result<(), String> {
        let last = match imm {
            Some(MORE) => false,
            Some(LAST) => true,
            other => return Err(format!("not a request of this service (immediate {other:?})")),
        };
        let mut out = pool.take().ok_or("the buffer pool ran out")?;
        out.set_len(request.len()).map_err(|e| e.to_string())?;
        for (byte, value) in
            out.as_mut_slice().iter_mut().zip(reply(request.as_slice(), self.index))
        {
            *byte = value;
        }
        self.qp
            .post_send_buffer(out, SendOp::SendWithImm(self.index))
            .map_err(|e| e.to_string())?;
        self.in_flight += 1;
        self.replies += 1;
        self.requests += 1;
        self.bytes += request.len() as u64;
        if last {
            self.outcome = Some(Ok(()));
        } else {
            self.receive_due = true;
        }
        Ok(())
    }

    /// Posts the receive for its next request once one is due and the reply to that
    /// request could be sent at once (fewer than `SEND_DEPTH` replies in flight). Until
    /// then the request waits in RNR retries: the transport's own flow control, which keeps
    /// a client within its `PER_CLIENT` buffers.
    fn post_receive(&mut self, pool: &'a BufferPool<'a>) -> Result<(), String> {
        if !self.receive_due || self.replies >= SEND_DEPTH {
            return Ok(());
        }
        self.receive_due = false;
        let buffer = pool.take().ok_or("the buffer pool ran out")?;
        self.qp.post_recv_buffer(buffer).map_err(|e| e.to_string())?;
        self.in_flight += 1;
        Ok(())
    }

    /// Ends the client in failure (keeping the first reason) and stops posting receives;
    /// it is let go once what it has in flight completes.
    fn fail(&mut self, reason: String) {
        if !matches!(self.outcome, Some(Err(_))) {
            self.outcome = Some(Err(reason));
        }
        self.receive_due = false;
    }

    /// Why its connection is over, if it is: closed, broken, or carrying bytes, which this
    /// protocol never sends after the address message.
    fn hung_up(&mut self) -> Option<String> {
        match self.stream.read(&mut [0u8]) {
            Ok(0) => Some("it closed its connection".into()),
            Ok(_) => Some("it sent bytes after its address message".into()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => None,
            Err(e) => Some(format!("its connection failed: {e}")),
        }
    }
}
