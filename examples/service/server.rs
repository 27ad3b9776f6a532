//! The server. A `Server<'a>` borrows the verbs resources its caller owns (Context, PD, one
//! CQ with its channel, one buffer pool) and holds a `Client<'a>` per connected client: its
//! QP, on that CQ, its connection (TCP or rdma_cm) and its progress. Every completion is
//! routed to its client by the QP number it carries.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use rdma_verbs::*;

use crate::{
    new_qp, read_endpoint, reply, AddressReader, Args, Error, Link, LAST, MORE, PEER_TIMEOUT,
};

/// Replies one client may have in flight: its QP's send queue depth. A reply beyond waits,
/// queued, until one of them completes.
const SEND_DEPTH: u32 = 2;
/// The buffers (and CQ entries) one client may hold at once: its replies in flight, one
/// queued (the client sends its next request only once it has the reply), and the receive
/// for its next request.
const PER_CLIENT: u32 = SEND_DEPTH + 2;
/// How long the work of a client let go early may take to come back flushed. A QP in ERROR
/// flushes at once, but a provider may never complete what was posted after the QP went to
/// ERROR behind our back (siw when its connection ends): its buffers are then given up.
const FLUSH_LIMIT: Duration = Duration::from_secs(5);
/// How long the server sleeps on its CQ before it looks at its connections again (new
/// clients, address messages, clients gone).
const TICK: Duration = Duration::from_millis(10);

/// Serves `--clients` clients, then reports.
pub fn run(args: &Args) -> Result<(), Error> {
    let ctx = Context::open_or_first(args.ib_dev.as_deref())?;
    let link = crate::link(&ctx, args)?;
    let listener = TcpListener::bind(("::", args.port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", args.port)))
        .map_err(|e| format!("couldn't listen on port {}: {e}", args.port))?;
    let failed = if args.threads {
        // Spawned threads need 'static parents: leak the context (and, below, the PD) once.
        serve_threads(Box::leak(Box::new(ctx)), &listener, args, link)?
    } else {
        serve_single(&ctx, &listener, args, link)?
    };
    report(failed, args)
}

/// The last line: how many clients were served, or failed.
fn report(failed: usize, args: &Args) -> Result<(), Error> {
    if failed > 0 {
        return Err(format!("{failed} of {} clients failed", args.clients).into());
    }
    println!("served {} clients", args.clients);
    Ok(())
}

/// `--rdma-cm`: listens on `--bind`'s address and port `-p`, serves `--clients` clients on
/// this thread (accepting new ones between rounds of completions), then reports.
#[cfg(feature = "rdmacm")]
pub fn run_cm(args: &Args) -> Result<(), Error> {
    use std::net::SocketAddr;

    use rdma_verbs::cm::{CmId, EventChannel, PortSpace};

    let addr = args.bind.ok_or(
        "the --rdma-cm server needs --bind ADDR: an IP address of the RDMA device's netdev, by \
         which rdma_cm picks the device",
    )?;
    let at = SocketAddr::new(addr, args.port);
    let events = EventChannel::new()?;
    let listener = CmId::new(&events, PortSpace::TCP)?;
    listener.bind_addr(at).map_err(|e| format!("couldn't listen on {at}: {e}"))?;
    // Bound to a device's address, the listener is bound to that device.
    let ctx = listener.context()?;
    crate::check_cm_device(args, ctx)?;
    listener.listen(args.clients as i32)?;
    println!("listening on {at} ({})", ctx.name());

    let n = args.clients;
    let pd = ctx.alloc_pd()?;
    // Not `with_server`, whose closure takes a `Server` of any lifetime: this one is given
    // connect requests, which borrow `events` and so fit only servers that `events` outlives.
    let channel = ctx.create_comp_channel()?;
    let cq = ctx.create_cq_with_channel(n * PER_CLIENT, &channel, 0)?;
    cq.req_notify(false)?;
    let pool = buffer_pool(&pd, n, args.size)?;
    let mut server = Server::new(ctx, &pd, &cq, &channel, &pool);
    let mut accepted = 0;
    loop {
        while accepted < n {
            match crate::unless_timed_out(listener.get_request(Duration::ZERO))? {
                Some(request) => {
                    server.accept(accepted, request);
                    accepted += 1;
                }
                None => break,
            }
        }
        if accepted == n && !server.is_serving() {
            break;
        }
        server.progress(TICK)?;
    }
    println!("at most {} clients at once", server.most);
    report(server.failed, args)
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
    with_server(ctx, &pd, n, args.size, |server| {
        // Connections whose address message is still arriving, read without blocking so
        // that a slow client holds up no other.
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
                        server.admit_tcp(p.index, p.stream, remote, &link);
                    }
                }
            }
            if accepted == n && pending.is_empty() && !server.is_serving() {
                break;
            }
            server.progress(TICK)?;
        }
        println!("at most {} clients at once", server.most);
        Ok(server.failed)
    })
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
    with_server(ctx, pd, 1, size, |server| {
        let remote = read_endpoint(&mut stream);
        server.admit_tcp(index, stream, remote, &link);
        while server.is_serving() {
            server.progress(TICK)?;
        }
        Ok(server.failed)
    })
}

/// Runs `serve` with a `Server` for `clients` clients on `pd`, with a completion channel,
/// armed CQ and buffer pool (requests of at most `size` bytes) of its own.
fn with_server<R>(
    ctx: &Context,
    pd: &ProtectionDomain<'_>,
    clients: u32,
    size: u32,
    serve: impl FnOnce(&mut Server<'_>) -> Result<R, Error>,
) -> Result<R, Error> {
    let channel = ctx.create_comp_channel()?;
    let cq = ctx.create_cq_with_channel(clients * PER_CLIENT, &channel, 0)?;
    cq.req_notify(false)?;
    let pool = buffer_pool(pd, clients, size)?;
    let mut server = Server::new(ctx, pd, &cq, &channel, &pool);
    serve(&mut server)
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
    clients: Vec<Client<'a>>,
    /// The QPs of clients let go early, in ERROR, until their work in flight has come back
    /// flushed (and with it their buffers).
    flushing: Vec<Flushing<'a>>,
    /// How many clients ended in failure.
    failed: usize,
    /// The most clients served at once.
    most: usize,
}

/// The QP of client `index`, moved to ERROR at `since`, and how many of its work requests
/// are still to complete.
struct Flushing<'a> {
    index: u32,
    qp: QueuePair<'a, Unknown>,
    in_flight: u32,
    since: Instant,
}

/// What connects a client besides its QP: watched for the client going away, and dropped
/// when the server lets go of it.
trait Connection {
    /// Why the connection is over, if it is early: before the client's last request was
    /// answered (`done`), or broken.
    fn hung_up(&mut self, done: bool) -> Option<String>;

    /// Whether a client that is done may be let go (its work all completed).
    fn may_let_go(&self) -> bool;
}

/// The TCP connection of the address exchange. The client closes it on any error; the
/// server closes it (drops it) once the client is done: that tells the client every reply
/// was acknowledged, so it may destroy its QP.
impl Connection for TcpStream {
    /// Closed, broken, or carrying bytes, which this protocol never sends after the address
    /// message.
    fn hung_up(&mut self, _: bool) -> Option<String> {
        match self.read(&mut [0u8]) {
            Ok(0) => Some("it closed its connection".into()),
            Ok(_) => Some("it sent bytes after its address message".into()),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => None,
            Err(e) => Some(format!("its connection failed: {e}")),
        }
    }

    fn may_let_go(&self) -> bool {
        true
    }
}

/// One client being served.
struct Client<'a> {
    index: u32,
    qp: QueuePair<'a, Rts>,
    connection: Box<dyn Connection + 'a>,
    /// How many requests the client announced when it connected (rdma_cm): its requests and
    /// replies are then plain SENDs. `None`: each request says `MORE` or `LAST` in its
    /// immediate data, and each reply carries the client's index there.
    announced: Option<u32>,
    /// Work requests not completed yet, and how many of them are replies.
    in_flight: u32,
    replies: u32,
    /// A reply waiting for room in the send queue, with its operation.
    queued: Option<(Buffer<'a>, SendOp)>,
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
    ) -> Self {
        let (clients, flushing) = (Vec::new(), Vec::new());
        Server { ctx, pd, cq, channel, pool, clients, flushing, failed: 0, most: 0 }
    }

    fn is_serving(&self) -> bool {
        !self.clients.is_empty() || !self.flushing.is_empty()
    }

    /// Starts serving `client`, or reports why client `index` could not be connected.
    fn admit(&mut self, index: u32, client: Result<Client<'a>, Error>) {
        match client {
            Ok(mut client) => {
                if let Err(e) = client.post_receive(self.pool) {
                    client.fail(e);
                }
                self.clients.push(client);
                self.most = self.most.max(self.clients.len());
            }
            Err(e) => {
                println!("client {index}: failed: {e}");
                self.failed += 1;
            }
        }
    }

    /// Starts serving client `index` at `remote` (from its address message on `stream`),
    /// through `link`, or reports why it cannot be served. Its first receive is posted after
    /// our address message went out: a request that comes first waits in RNR retries, never
    /// lost.
    fn admit_tcp(
        &mut self,
        index: u32,
        mut stream: TcpStream,
        remote: Result<Endpoint, Error>,
        link: &Link,
    ) {
        let qp = remote.and_then(|remote| self.connect(&mut stream, &remote, link));
        let client = qp.map(|qp| Client::new(index, qp, Box::new(stream)));
        self.admit(index, client);
    }

    /// Our QP for the client at `remote`, in RTS before our address message goes out: the
    /// client may send as soon as it has it.
    fn connect(
        &self,
        stream: &mut TcpStream,
        remote: &Endpoint,
        link: &Link,
    ) -> Result<QueuePair<'a, Rts>, Error> {
        let psn = Psn::random();
        let qp = new_qp(self.pd, self.cq, link.port, SEND_DEPTH)?;
        let me = link.endpoint(&qp, psn);
        let qp = link.connect(qp, remote, psn)?;
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
        for wc in self.cq.poll_blocking(self.channel, &mut wcs, limit)? {
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
            None => Err(format!("a completion names no buffer: {wc}")),
        };
        if let Err(e) = result {
            client.fail(e);
        }
    }

    /// Reports and lets go of the clients that ended with nothing in flight, and of those
    /// gone early, whose QPs flush first. Dropping a client destroys its QP and closes its
    /// connection.
    fn reap(&mut self) {
        self.flushing.retain(|f| {
            let waiting = f.since.elapsed() < FLUSH_LIMIT;
            if f.in_flight > 0 && !waiting {
                let (index, n) = (f.index, f.in_flight);
                println!("client {index}: {n} work requests never came back flushed: lost");
            }
            f.in_flight > 0 && waiting
        });
        let mut i = 0;
        while i < self.clients.len() {
            let client = &mut self.clients[i];
            let done = matches!(client.outcome, Some(Ok(())));
            let gone = client.connection.hung_up(done).map(|reason| client.fail(reason)).is_some();
            let ended = client.in_flight == 0
                && match client.outcome {
                    Some(Ok(())) => client.connection.may_let_go(),
                    Some(Err(_)) => true,
                    None => false,
                };
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
                    client.qp.qp_num().get()
                );
            }
            if client.in_flight > 0 {
                self.flush(client.index, client.qp, client.in_flight);
            }
        }
    }

    /// Moves the QP of client `index`, gone early, to ERROR, so that its `in_flight` work
    /// requests complete flushed and their buffers come back to the pool.
    fn flush<S: QpState>(&mut self, index: u32, qp: QueuePair<'a, S>, in_flight: u32) {
        let attr = sys::ibv_qp_attr { qp_state: sys::IBV_QPS_ERR, ..Default::default() };
        match qp.modify_raw(&attr, QpAttrMask::STATE) {
            Ok(qp) => self.flushing.push(Flushing { index, qp, in_flight, since: Instant::now() }),
            Err(e) => println!("client {index}: its buffers in flight are lost: {e}"),
        }
    }
}

#[cfg(feature = "rdmacm")]
mod by_cm {
    use std::time::Duration;

    use rdma_verbs::cm::{CmId, ConnParam, ConnectRequest};
    use rdma_verbs::{QueuePair, Rts};

    use super::{Client, Connection, Server, SEND_DEPTH};
    use crate::{new_qp, unless_timed_out, Error};

    /// How long an accept may wait for the client's half of the handshake: the serving
    /// thread waits with it, so a client that vanishes mid-handshake holds the others up at
    /// most this long (Soft-RoCE in an emulated guest answers within a second).
    const ACCEPT_TIMEOUT: Duration = Duration::from_secs(5);

    /// A client's rdma_cm id, which the client disconnects once it has every reply (or on
    /// an error, or the kernel when it dies). Dropping it destroys the id, which disconnects
    /// a client still connected.
    struct Peer<'ch> {
        id: CmId<'ch>,
        disconnected: bool,
    }

    impl Connection for Peer<'_> {
        fn hung_up(&mut self, done: bool) -> Option<String> {
            if !self.disconnected {
                match unless_timed_out(self.id.wait_disconnected(Duration::ZERO)) {
                    Ok(None) => {}
                    Ok(Some(())) => self.disconnected = true,
                    Err(e) => return Some(format!("its connection failed: {e}")),
                }
            }
            (self.disconnected && !done).then(|| "it disconnected".into())
        }

        /// Not before it disconnected: over iWARP our last reply's completion means only
        /// that TCP has it, and destroying the QP could reset the connection under it.
        fn may_let_go(&self) -> bool {
            self.disconnected
        }
    }

    impl<'a> Server<'a> {
        /// Serves the client of `request` as client `index` (the number of requests it
        /// announces in the request's private data), or reports why it cannot be served.
        pub(super) fn accept(&mut self, index: u32, request: ConnectRequest<'a>) {
            let client = self.accept_qp(index, &request).map(|(qp, announced)| Client {
                announced: Some(announced),
                // Its first receive is posted (and in flight) already.
                receive_due: false,
                in_flight: 1,
                ..Client::new(index, qp, Box::new(Peer { id: request.id, disconnected: false }))
            });
            self.admit(index, client);
        }

        /// Our QP for the client of `request`, connected by accepting with the client's
        /// index as private data, and the number of requests it announced.
        fn accept_qp(
            &mut self,
            index: u32,
            request: &ConnectRequest<'a>,
        ) -> Result<(QueuePair<'a, Rts>, u32), Error> {
            // Over IB/RoCE the private data arrives padded with zeros: the count is its start.
            let announced = match request.private_data.get(..4) {
                Some(count) => u32::from_le_bytes(count.try_into().expect("4 bytes")),
                None => 0,
            };
            if announced == 0 {
                return Err(format!(
                    "its connect request announces no requests ({} bytes of private data, not \
                     a 4-byte count of at least 1)",
                    request.private_data.len()
                )
                .into());
            }
            let qp = new_qp(self.pd, self.cq, request.id.port_num(), SEND_DEPTH)?;
            // The first receive before the client can send: iWARP has no RNR retries, a
            // SEND that finds no receive breaks the connection.
            let buffer = self.pool.take().ok_or("the buffer pool ran out")?;
            qp.post_recv_buffer(buffer)?;
            let index_data = index.to_le_bytes();
            let param = ConnParam::with_private_data(&index_data);
            match request.id.try_accept(qp, &param, ACCEPT_TIMEOUT) {
                Ok(up) => Ok((up.qp, announced)),
                Err(e) => {
                    self.flush(index, e.qp, 1);
                    Err(e.error.into())
                }
            }
        }
    }
}

impl<'a> Client<'a> {
    /// Client `index`, connected over `qp` and `connection`, with nothing posted yet.
    fn new(index: u32, qp: QueuePair<'a, Rts>, connection: Box<dyn Connection + 'a>) -> Self {
        Client {
            index,
            qp,
            connection,
            announced: None,
            in_flight: 0,
            replies: 0,
            queued: None,
            receive_due: true,
            requests: 0,
            bytes: 0,
            outcome: None,
        }
    }

    /// Handles one of its completions, with the buffer that work request had.
    fn complete(
        &mut self,
        wc: &WorkCompletion,
        buffer: Buffer<'a>,
        pool: &'a BufferPool<'a>,
    ) -> Result<(), String> {
        self.in_flight -= 1;
        if wc.status() == WcStatus::WR_FLUSH_ERR {
            // A flush before any failure of ours: something else moved the QP to ERROR, as
            // the iWARP CM does when the connection ends.
            return Err("it disconnected or its connection broke (its QP was flushed)".into());
        }
        if !wc.is_success() {
            // The QP is in ERROR now: what else it has in flight completes flushed.
            return Err(format!("a work request failed: {}", wc.status()));
        }
        if wc.opcode() != WcOpcode::RECV {
            self.replies -= 1; // a reply went out: room for the queued one
            return match self.queued.take() {
                Some((out, op)) => self.send(out, op),
                None => Ok(()),
            };
        }
        let (out, op) = self.answer(&buffer, wc.imm_data(), pool)?;
        // The request's buffer goes back to the pool, and the next request's receive is
        // posted before this reply goes out: the client sends that request as soon as it has
        // the reply, and iWARP has no RNR retries to wait for a receive posted late.
        drop(buffer);
        self.post_receive(pool)?;
        if self.replies < SEND_DEPTH {
            self.send(out, op)
        } else {
            self.queued = Some((out, op));
            Ok(())
        }
    }

    /// Posts a reply.
    fn send(&mut self, out: Buffer<'a>, op: SendOp) -> Result<(), String> {
        self.qp.post_send_buffer(out, op).map_err(|e| e.to_string())?;
        self.in_flight += 1;
        self.replies += 1;
        Ok(())
    }

    /// The reply to `request`, to be sent with the returned operation; counts it.
    fn answer(
        &mut self,
        request: &Buffer<'a>,
        imm: Option<u32>,
        pool: &'a BufferPool<'a>,
    ) -> Result<(Buffer<'a>, SendOp), String> {
        let last = match (self.announced, imm) {
            (Some(announced), None) => self.requests + 1 >= announced,
            (None, Some(MORE)) => false,
            (None, Some(LAST)) => true,
            (_, other) => {
                return Err(format!("not a request of this service (immediate {other:?})"))
            }
        };
        let mut out = pool.take().ok_or("the buffer pool ran out")?;
        out.set_len(request.len()).map_err(|e| e.to_string())?;
        for (byte, value) in
            out.as_mut_slice().iter_mut().zip(reply(request.as_slice(), self.index))
        {
            *byte = value;
        }
        let op = match self.announced {
            Some(_) => SendOp::Send,
            None => SendOp::SendWithImm(self.index),
        };
        self.requests += 1;
        self.bytes += request.len() as u64;
        if last {
            self.outcome = Some(Ok(()));
        } else {
            self.receive_due = true;
        }
        Ok((out, op))
    }

    /// Posts the receive for its next request, if one is due.
    fn post_receive(&mut self, pool: &'a BufferPool<'a>) -> Result<(), String> {
        if !self.receive_due {
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
}
