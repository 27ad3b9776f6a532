//! The server: tiny_http's requests served by `--workers` threads, every session's RC QP on
//! one CQ, whose poller thread routes each completion (with its staging buffer) to the
//! request waiting for it, by QP number.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use rdma_verbs::*;
use tiny_http::{Header, Method, Request, Response};

use crate::link::Link;
use crate::{
    parse_crc, Crc32c, Error, RdmaArgs, Token, CHUNK, CRC, DEPTH, RDMA_TIMEOUT, SESSION, SIZE,
    TIMING, TOKEN,
};

/// How long the poller sleeps on the CQ, and a worker on tiny_http's queue, before looking
/// whether the server is stopping.
const TICK: Duration = Duration::from_millis(200);
/// How long the operations of a failed request may take to come back flushed.
const FLUSH_LIMIT: Duration = Duration::from_secs(5);
/// Socket read and write timeout of every HTTP connection: a client that stalls mid-body
/// holds a worker at most this long.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(60);

pub struct Config {
    pub root: PathBuf,
    pub workers: usize,
    pub max_sessions: usize,
    pub idle: Duration,
}

/// Serves until killed, or until the CQ fails.
pub fn run(args: &RdmaArgs, config: Config) -> Result<(), Error> {
    if !config.root.is_dir() {
        return Err(
            format!("--root {}: not a directory (create it first)", config.root.display()).into()
        );
    }
    let ctx = Context::open_or_first(args.ib_dev.as_deref())?;
    let link = Link::new(&ctx, args.ib_port, args.gid_idx)?;
    let pd = ctx.alloc_pd()?;
    let channel = ctx.create_comp_channel()?;
    // Each session's QP: DEPTH sends and the one receive every QP must have room for.
    let cq = ctx.create_cq_with_channel((config.max_sessions * (DEPTH + 1)) as u32, &channel, 0)?;
    cq.req_notify(false)?;
    let chunks = config.workers * DEPTH;
    let pool = BufferPool::new(pd.register(chunks * CHUNK, AccessFlags::LOCAL_WRITE)?, CHUNK)?;
    let listener = TcpListener::bind(("0.0.0.0", args.port)).map_err(|e| {
        format!("couldn't listen on port {}: {e} (choose another with -p)", args.port)
    })?;
    let sock = socket2::SockRef::from(&listener);
    sock.set_read_timeout(Some(SOCKET_TIMEOUT))?;
    sock.set_write_timeout(Some(SOCKET_TIMEOUT))?;
    let http = tiny_http::Server::from_listener(listener, None)
        .map_err(|e| format!("couldn't serve HTTP on port {}: {e}", args.port))?;
    println!(
        "objstore: serving {} on port {} over {} ({chunks} staging chunks of {} KiB)",
        config.root.display(),
        args.port,
        ctx.name(),
        CHUNK >> 10
    );
    let server = Server {
        pd: &pd,
        cq: &cq,
        link,
        pool: &pool,
        config,
        sessions: Mutex::new(Sessions { next: 1, open: HashMap::new() }),
        routes: Mutex::new(HashMap::new()),
        stop: AtomicBool::new(false),
        temp: AtomicU64::new(0),
    };
    thread::scope(|s| {
        let poller = s.spawn(|| {
            let result = server.poll(&channel);
            server.stop.store(true, Ordering::Relaxed);
            result
        });
        for _ in 0..server.config.workers {
            s.spawn(|| server.work(&http));
        }
        poller.join().unwrap_or_else(|_| Err("the CQ poller panicked".into()))
    })
}

/// What a request's RDMA operation came back with.
struct Done<'a> {
    status: WcStatus,
    buffer: Option<Buffer<'a>>,
}

struct Sessions<'a> {
    next: u64,
    open: HashMap<u64, Arc<Session<'a>>>,
}

/// One client's RDMA session: its QP (taken when it fails), the receiving end of its
/// completions, and its current request's progress.
struct Session<'a> {
    id: u64,
    qpn: u32,
    io: Mutex<Io<'a>>,
    moved: AtomicU64,
    used: Mutex<Instant>,
}

struct Io<'a> {
    qp: Option<QueuePair<'a, Rts>>,
    done: Receiver<Done<'a>>,
}

struct Server<'a> {
    pd: &'a ProtectionDomain<'a>,
    cq: &'a CompletionQueue<'a>,
    link: Link,
    pool: &'a BufferPool<'a>,
    config: Config,
    sessions: Mutex<Sessions<'a>>,
    routes: Mutex<HashMap<u32, Sender<Done<'a>>>>,
    stop: AtomicBool,
    /// Numbers temporary files.
    temp: AtomicU64,
}

/// An error answer: status and a line saying what to do.
#[derive(Debug)]
struct Fail {
    status: u16,
    message: String,
    /// The object's size, for a 416.
    size: Option<u64>,
}

fn fail(status: u16, message: impl Into<String>) -> Fail {
    Fail { status, message: message.into(), size: None }
}

/// A disk error: 507 when the disk is full, else 500.
fn disk(what: &str, e: &io::Error) -> Fail {
    match e.raw_os_error() {
        Some(libc::ENOSPC | libc::EDQUOT) => {
            fail(507, format!("{what}: the object store's disk is full; nothing was stored"))
        }
        _ => fail(500, format!("{what}: {e}")),
    }
}

/// A successful answer.
enum Reply {
    Empty(u16, Vec<(&'static str, String)>),
    Text(u16, Vec<(&'static str, String)>, Vec<u8>),
    File(File, u64),
}

/// Where an RDMA request's time went besides the network: the file and the CRC32C, answered
/// in [`TIMING`] so that `objstore bench` reports them apart from the transfer.
#[derive(Default)]
struct Cost {
    file: Duration,
    crc: Duration,
}

impl Cost {
    /// `f`, its time added to `slot`.
    fn time<T>(slot: &mut Duration, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let result = f();
        *slot += start.elapsed();
        result
    }

    fn header(&self) -> (&'static str, String) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        (TIMING, format!("file;dur={:.3}, crc;dur={:.3}", ms(self.file), ms(self.crc)))
    }
}

/// Locks `m`, whatever a panicking holder left (every guarded value stays consistent).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl<'a> Server<'a> {
    /// Routes every completion to its session until stopped.
    fn poll(&self, channel: &CompletionChannel<'_>) -> Result<(), Error> {
        let mut wcs: [WorkCompletion; 32] = Default::default();
        while !self.stop.load(Ordering::Relaxed) {
            for wc in self.cq.poll_blocking(channel, &mut wcs, TICK)? {
                let buffer = self.pool.complete(wc);
                let done = Done { status: wc.status(), buffer };
                // No route: the session is gone, and dropping the buffer returns it.
                if let Some(tx) = lock(&self.routes).get(&wc.qp_num().get()) {
                    let _ = tx.send(done);
                }
            }
        }
        Ok(())
    }

    fn work(&self, http: &tiny_http::Server) {
        while !self.stop.load(Ordering::Relaxed) {
            match http.recv_timeout(TICK) {
                Ok(Some(request)) => self.answer(request),
                Ok(None) => {}
                Err(e) => {
                    eprintln!("objstore: receiving HTTP requests failed: {e}");
                    return;
                }
            }
        }
    }

    fn answer(&self, mut request: Request) {
        let (method, url) = (request.method().clone(), request.url().to_string());
        let start = Instant::now();
        let (status, note, response) = match self.handle(&mut request) {
            Ok(Reply::Empty(status, headers)) => {
                (status, String::new(), with_headers(Response::empty(status).boxed(), headers))
            }
            Ok(Reply::Text(status, headers, body)) => {
                let r = Response::from_data(body).with_status_code(status).boxed();
                (status, String::new(), with_headers(r, headers))
            }
            Ok(Reply::File(file, size)) => {
                let r = Response::new(200.into(), vec![], file, Some(size as usize), None).boxed();
                (200, String::new(), with_headers(r, vec![(SIZE, size.to_string())]))
            }
            Err(Fail { status, message, size }) => {
                let mut r =
                    Response::from_string(format!("{message}\n")).with_status_code(status).boxed();
                if let Some(size) = size {
                    r = with_headers(r, vec![(SIZE, size.to_string())]);
                }
                (status, format!(": {message}"), r)
            }
        };
        let sent = request.respond(response);
        let ms = start.elapsed().as_millis();
        let lost = sent.err().map(|e| format!(" (the answer was lost: {e})")).unwrap_or_default();
        println!("{method} {url} {status} in {ms} ms{note}{lost}");
    }

    fn handle(&self, request: &mut Request) -> Result<Reply, Fail> {
        let url = request.url().split('?').next().unwrap_or_default().to_string();
        let method = request.method().clone();
        if let Some(rest) = url.strip_prefix("/session") {
            return self.session_request(request, &method, rest);
        }
        let token = match header(request, TOKEN) {
            Some(t) => Some(t.parse::<Token>().map_err(|e| {
                fail(
                    400,
                    format!(
                        "malformed {TOKEN} ({e}): send session=<id>;addr=<hex>;len=<n>;rkey=<hex>"
                    ),
                )
            })?),
            None => None,
        };
        let object = Object::parse(&self.config.root, &url)?;
        match (method, token) {
            (Method::Put, Some(token)) => self.rdma_put(request, &object, token),
            (Method::Get, Some(token)) => self.rdma_get(&object, token),
            (Method::Put, None) => {
                let expected = crc_header(request)?;
                let length = request.body_length().map(|n| n as u64);
                let crc = object.store(self, request.as_reader(), length, expected)?;
                Ok(Reply::Empty(201, vec![(CRC, format!("{crc:08x}"))]))
            }
            (Method::Get, None) => {
                let (file, size) = object.open()?;
                Ok(Reply::File(file, size))
            }
            (Method::Head, None) => {
                let (_, size) = object.open()?;
                Ok(Reply::Empty(200, vec![(SIZE, size.to_string())]))
            }
            (Method::Delete, None) => object.delete(),
            (m, _) => {
                Err(fail(405, format!("{m} is not served here: use PUT, GET, HEAD or DELETE")))
            }
        }
    }

    /// `POST /session`, `GET /session/<id>`, `DELETE /session/<id>`.
    fn session_request(
        &self,
        request: &mut Request,
        method: &Method,
        rest: &str,
    ) -> Result<Reply, Fail> {
        if rest.is_empty() {
            return match method {
                Method::Post => self.open_session(request),
                _ => Err(fail(405, "open a session with POST /session")),
            };
        }
        let id = rest.strip_prefix('/').and_then(|id| id.parse().ok()).ok_or_else(|| {
            fail(400, format!("bad session id {rest:?}: use /session/<decimal id>"))
        })?;
        match method {
            Method::Get => {
                let session = self.session(id)?;
                let body =
                    format!("moved={}\n", session.moved.load(Ordering::Relaxed)).into_bytes();
                Ok(Reply::Text(200, vec![], body))
            }
            Method::Delete => {
                let session = self.session(id)?;
                self.close(&session, &mut lock(&session.io));
                Ok(Reply::Empty(204, vec![]))
            }
            _ => Err(fail(405, "use GET or DELETE on /session/<id>")),
        }
    }

    /// A new session for the client QP in the request's body.
    fn open_session(&self, request: &mut Request) -> Result<Reply, Fail> {
        let mut body = Vec::new();
        let read = request.as_reader().take(256).read_to_end(&mut body);
        read.map_err(|e| fail(400, format!("reading the session request: {e}")))?;
        if body.len() == rdma_verbs::endpoint::PINGPONG_MESSAGE_LEN - 1 {
            body.push(0); // the NUL is optional
        }
        let remote = Endpoint::from_pingpong_message(&body).map_err(|e| {
            fail(400, format!("the session request's body is not a 52-byte LLLL:QQQQQQ:PPPPPP:GID message: {e}"))
        })?;
        let mut sessions = lock(&self.sessions);
        let idle: Vec<_> = sessions
            .open
            .values()
            .filter(|s| lock(&s.used).elapsed() > self.config.idle)
            .cloned()
            .collect();
        for session in idle {
            // A session whose request is running is in use, not idle.
            if let Ok(mut io) = session.io.try_lock() {
                println!(
                    "session {}: closed after {} s unused",
                    session.id,
                    self.config.idle.as_secs()
                );
                sessions.open.remove(&session.id);
                self.drop_qp(&session, &mut io);
            }
        }
        if sessions.open.len() >= self.config.max_sessions {
            return Err(fail(503, format!(
                "{} sessions are open, the most this server allows (--max-sessions): close one or retry later",
                sessions.open.len()
            )));
        }
        let psn = Psn::random();
        let connect = || -> Result<QueuePair<'a, Rts>, Error> {
            let cap =
                QpCapabilities { max_send_wr: DEPTH as u32, max_recv_wr: 1, ..Default::default() };
            let qp = self.pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(self.cq) })?;
            let init = ToInitAttr { port: self.link.port, ..Default::default() };
            let qp = qp.into_init(&init)?;
            let me = self.link.endpoint(&qp, psn);
            let qp = self.link.connect(qp, &remote, psn, DEPTH as u8)?;
            debug_assert_eq!(me.qpn, qp.qp_num());
            Ok(qp)
        };
        let qp = connect().map_err(|e| fail(500, format!("creating the session's QP: {e}")))?;
        let me = self.link.endpoint(&qp, psn);
        let (tx, rx) = mpsc::channel();
        let qpn = qp.qp_num().get();
        lock(&self.routes).insert(qpn, tx);
        let id = sessions.next;
        sessions.next += 1;
        let session = Session {
            id,
            qpn,
            io: Mutex::new(Io { qp: Some(qp), done: rx }),
            moved: AtomicU64::new(0),
            used: Mutex::new(Instant::now()),
        };
        sessions.open.insert(id, Arc::new(session));
        println!("session {id}: QP {qpn:#x} connected to QP {:#x}", remote.qpn.get());
        Ok(Reply::Text(201, vec![(SESSION, id.to_string())], me.to_pingpong_message().to_vec()))
    }

    fn session(&self, id: u64) -> Result<Arc<Session<'a>>, Fail> {
        let session = lock(&self.sessions).open.get(&id).cloned();
        let session = session.ok_or_else(|| {
            fail(410, format!("no session {id} (closed, failed or idle too long): open a new one with POST /session"))
        })?;
        *lock(&session.used) = Instant::now();
        Ok(session)
    }

    /// Ends `session`: no more requests, its QP destroyed.
    fn close(&self, session: &Session<'a>, io: &mut Io<'a>) {
        lock(&self.sessions).open.remove(&session.id);
        self.drop_qp(session, io);
    }

    fn drop_qp(&self, session: &Session<'a>, io: &mut Io<'a>) {
        lock(&self.routes).remove(&session.qpn);
        io.qp = None;
    }

    /// The session of `token`, locked for one request, with its QP.
    fn begin(&self, token: &Token) -> Result<(Arc<Session<'a>>, RemoteAddr), Fail> {
        let session = self.session(token.session)?;
        session.moved.store(0, Ordering::Relaxed);
        Ok((session, RemoteAddr { addr: token.addr, rkey: RKey::new(token.rkey) }))
    }

    /// PUT over RDMA: READ the client's `token.len` bytes chunk by chunk into a temporary
    /// file, then store it as `object`.
    fn rdma_put(&self, request: &Request, object: &Object, token: Token) -> Result<Reply, Fail> {
        let expected = crc_header(request)?.ok_or_else(|| {
            fail(400, format!("a PUT over RDMA needs {CRC}: the object's CRC32C in hex"))
        })?;
        let (session, remote) = self.begin(&token)?;
        let mut io = lock(&session.io);
        let mut cost = Cost::default();
        let mut temp = Cost::time(&mut cost.file, || object.temp(self))?;
        let mut crc = Crc32c::default();
        let mut sink = |bytes: &[u8]| -> Result<(), Fail> {
            Cost::time(&mut cost.crc, || crc.update(bytes));
            Cost::time(&mut cost.file, || temp.file.write_all(bytes))
                .map_err(|e| disk("writing the object", &e))
        };
        self.transfer(&session, &mut io, remote, token.len, Direction::Read(&mut sink))?;
        if crc.value() != expected {
            return Err(fail(400, format!(
                "the object's CRC32C is {:08x}, the request's {CRC} {expected:08x}: nothing was stored; send it again",
                crc.value()
            )));
        }
        Cost::time(&mut cost.file, || temp.commit())?;
        Ok(Reply::Empty(201, vec![(CRC, format!("{expected:08x}")), cost.header()]))
    }

    /// GET over RDMA: WRITE the object into the client's buffer chunk by chunk.
    fn rdma_get(&self, object: &Object, token: Token) -> Result<Reply, Fail> {
        let (session, remote) = self.begin(&token)?;
        let mut io = lock(&session.io);
        let (mut file, size) = object.open()?;
        if size > token.len {
            return Err(Fail {
                status: 416,
                message: format!(
                    "{} has {size} bytes, the token's buffer {}: register at least {size} bytes",
                    object.name, token.len
                ),
                size: Some(size),
            });
        }
        let mut cost = Cost::default();
        let mut crc = Crc32c::default();
        let mut source = |bytes: &mut [u8]| -> Result<(), Fail> {
            Cost::time(&mut cost.file, || file.read_exact(bytes))
                .map_err(|e| fail(500, format!("reading {}: {e}", object.name)))?;
            Cost::time(&mut cost.crc, || crc.update(bytes));
            Ok(())
        };
        self.transfer(&session, &mut io, remote, size, Direction::Write(&mut source))?;
        let headers =
            vec![(SIZE, size.to_string()), (CRC, format!("{:08x}", crc.value())), cost.header()];
        Ok(Reply::Empty(200, headers))
    }

    /// Moves `len` bytes between the client's buffer at `remote` and the disk, at most
    /// [`DEPTH`] staging chunks in flight. Every operation posted has come back when it
    /// returns. An RDMA failure closes the session (its QP is in ERROR).
    fn transfer(
        &self,
        session: &Session<'a>,
        io: &mut Io<'a>,
        remote: RemoteAddr,
        len: u64,
        mut direction: Direction<'_>,
    ) -> Result<(), Fail> {
        // Taken for the transfer; put back unless it failed.
        let Some(qp) = io.qp.take() else {
            return Err(fail(
                410,
                format!("session {} failed: open a new one with POST /session", session.id),
            ));
        };
        let chunks = len.div_ceil(CHUNK as u64);
        let chunk_len = |i: u64| (len - i * CHUNK as u64).min(CHUNK as u64) as usize;
        let (mut posted, mut completed) = (0u64, 0u64);
        let mut failure: Option<Fail> = None;
        let mut rdma_failed = false;
        while completed < posted || (failure.is_none() && completed < chunks) {
            // Post while there is room and nothing failed.
            while failure.is_none() && posted < chunks && posted - completed < DEPTH as u64 {
                let Some(mut buffer) = self.pool.take() else {
                    failure = Some(fail(503, "the staging pool ran out: retry"));
                    break;
                };
                let n = chunk_len(posted);
                let at = RemoteAddr {
                    addr: remote.addr.wrapping_add(posted * CHUNK as u64),
                    rkey: remote.rkey,
                };
                let step = buffer.set_len(n).map_err(|e| fail(500, e.to_string())).and_then(|()| {
                    match &mut direction {
                        Direction::Write(source) => {
                            source(buffer.as_mut_slice()).map(|()| SendOp::RdmaWrite(at))
                        }
                        Direction::Read(_) => Ok(SendOp::RdmaRead(at)),
                    }
                });
                match step {
                    Ok(op) => match qp.post_send_buffer(buffer, op) {
                        Ok(()) => posted += 1,
                        Err(e) => {
                            failure = Some(fail(500, format!("posting an RDMA operation: {e}")))
                        }
                    },
                    Err(f) => failure = Some(f),
                }
            }
            if completed == posted {
                break;
            }
            let limit = if rdma_failed { FLUSH_LIMIT } else { RDMA_TIMEOUT };
            let done = match io.done.recv_timeout(limit) {
                Ok(done) => done,
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    // The peer neither answers nor fails: force the QP to ERROR, which
                    // flushes what is in flight, then give up on the session.
                    let n = posted - completed;
                    let flushed = flush(qp, &io.done, n);
                    if flushed < n {
                        println!(
                            "session {}: {} staging chunks never came back",
                            session.id,
                            n - flushed
                        );
                    }
                    let f = failure.unwrap_or_else(|| fail(504, format!(
                        "an RDMA operation on the client's buffer did not complete within {} s: the session is closed",
                        limit.as_secs()
                    )));
                    self.close(session, io);
                    return Err(f);
                }
            };
            completed += 1;
            if done.status != WcStatus::SUCCESS {
                if !rdma_failed && failure.is_none() {
                    failure = Some(fail(400, format!(
                        "the RDMA {} on the client's buffer failed ({}): check the token's addr, len and rkey \
                         against the registered buffer; session {} is closed, open a new one",
                        direction.verb(), done.status, session.id
                    )));
                }
                rdma_failed = true;
                continue;
            }
            let Some(buffer) = done.buffer else {
                failure.get_or_insert_with(|| fail(500, "a completion named no staging buffer"));
                continue;
            };
            if let (Direction::Read(sink), None) = (&mut direction, &failure) {
                if let Err(f) = sink(buffer.as_slice()) {
                    failure = Some(f);
                }
            }
            session.moved.fetch_add(buffer.len() as u64, Ordering::Relaxed);
        }
        if rdma_failed {
            println!("session {}: closed: its RDMA {} failed", session.id, direction.verb());
            self.close(session, io);
        } else {
            io.qp = Some(qp);
        }
        failure.map_or(Ok(()), Err)
    }
}

/// Moves `qp` to ERROR and waits (at most [`FLUSH_LIMIT`]) for its `n` operations in flight
/// to come back flushed; how many did.
fn flush<'a>(qp: QueuePair<'a, Rts>, done: &Receiver<Done<'a>>, n: u64) -> u64 {
    let attr = sys::ibv_qp_attr { qp_state: sys::IBV_QPS_ERR, ..Default::default() };
    // Kept until its work is back (or given up on): destroying it first would strand that.
    let _qp = match qp.modify_raw(&attr, QpAttrMask::STATE) {
        Ok(qp) => qp,
        Err(e) => {
            println!("moving a QP to ERROR failed: {e}");
            return 0;
        }
    };
    let deadline = Instant::now() + FLUSH_LIMIT;
    (0..n)
        .take_while(|_| {
            done.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_ok()
        })
        .count() as u64
}

/// Which way a transfer goes: WRITE to the client (each chunk filled by the source first),
/// or READ from it (each chunk handed to the sink as it arrives, in order).
enum Direction<'f> {
    Write(&'f mut dyn FnMut(&mut [u8]) -> Result<(), Fail>),
    Read(&'f mut dyn FnMut(&[u8]) -> Result<(), Fail>),
}

impl Direction<'_> {
    fn verb(&self) -> &'static str {
        match self {
            Direction::Write(_) => "WRITE",
            Direction::Read(_) => "READ",
        }
    }
}

fn with_headers(
    mut r: tiny_http::ResponseBox,
    headers: Vec<(&'static str, String)>,
) -> tiny_http::ResponseBox {
    for (name, value) in headers {
        if let Ok(h) = Header::from_bytes(name.as_bytes(), value.as_bytes()) {
            r.add_header(h);
        }
    }
    r
}

fn header<'r>(request: &'r Request, name: &'static str) -> Option<&'r str> {
    request.headers().iter().find(|h| h.field.equiv(name)).map(|h| h.value.as_str())
}

fn crc_header(request: &Request) -> Result<Option<u32>, Fail> {
    header(request, CRC)
        .map(|v| {
            parse_crc(v).ok_or_else(|| fail(400, format!("bad {CRC} {v:?}: send 8 hex digits")))
        })
        .transpose()
}

/// An object: `/<bucket>/<key>` under the root, both one path component.
struct Object {
    bucket: PathBuf,
    path: PathBuf,
    name: String,
}

impl Object {
    /// Refuses names that are not one plain path component: empty, `.`/`..`, with `/`, `\`
    /// or NUL, or starting with `.` (temporary files are `.tmp-…`).
    fn parse(root: &Path, url: &str) -> Result<Object, Fail> {
        let path = percent_decode(url.strip_prefix('/').unwrap_or(url))
            .ok_or_else(|| fail(400, format!("{url:?} is not valid percent-encoded UTF-8")))?;
        let (bucket, key) = path
            .split_once('/')
            .ok_or_else(|| fail(400, format!("{url:?} names no object: use /<bucket>/<key>")))?;
        for (what, name) in [("bucket", bucket), ("key", key)] {
            let bad = name.is_empty()
                || name.starts_with('.')
                || name.len() > 200
                || name.contains(['/', '\\', '\0']);
            if bad {
                return Err(fail(400, format!(
                    "bad {what} {name:?}: names are one path component of 1 to 200 bytes, without '/', '\\' \
                     or NUL, not starting with '.'"
                )));
            }
        }
        let bucket_dir = root.join(bucket);
        Ok(Object { path: bucket_dir.join(key), bucket: bucket_dir, name: path.to_string() })
    }

    fn open(&self) -> Result<(File, u64), Fail> {
        let file = File::open(&self.path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => fail(404, format!("no object {}", self.name)),
            _ => fail(500, format!("opening {}: {e}", self.name)),
        })?;
        let meta = file.metadata().map_err(|e| fail(500, format!("{}: {e}", self.name)))?;
        if !meta.is_file() {
            return Err(fail(404, format!("no object {}", self.name)));
        }
        Ok((file, meta.len()))
    }

    fn delete(&self) -> Result<Reply, Fail> {
        self.open()?;
        fs::remove_file(&self.path)
            .map_err(|e| fail(500, format!("deleting {}: {e}", self.name)))?;
        sync_dir(&self.bucket).map_err(|e| disk("syncing the bucket", &e))?;
        Ok(Reply::Empty(204, vec![]))
    }

    /// A new temporary file in the bucket (created when missing).
    fn temp(&self, server: &Server<'_>) -> Result<Temp, Fail> {
        fs::create_dir_all(&self.bucket).map_err(|e| disk("creating the bucket", &e))?;
        let n = server.temp.fetch_add(1, Ordering::Relaxed);
        let path = self.bucket.join(format!(".tmp-{}-{n}", std::process::id()));
        let file = File::create_new(&path).map_err(|e| disk("creating a temporary file", &e))?;
        Ok(Temp { file, path: Some(path), target: self.path.clone(), bucket: self.bucket.clone() })
    }

    /// PUT over TCP: the body (`length` bytes when the request said) into a temporary
    /// file, checked against `expected`, stored.
    fn store(
        &self,
        server: &Server<'_>,
        body: &mut dyn Read,
        length: Option<u64>,
        expected: Option<u32>,
    ) -> Result<u32, Fail> {
        let mut temp = self.temp(server)?;
        let mut crc = Crc32c::default();
        let mut chunk = vec![0u8; CHUNK];
        let mut received = 0u64;
        loop {
            let n = match body.read(&mut chunk) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    return Err(fail(
                        400,
                        format!("reading the request body: {e}; nothing was stored"),
                    ))
                }
            };
            received += n as u64;
            crc.update(&chunk[..n]);
            temp.file.write_all(&chunk[..n]).map_err(|e| disk("writing the object", &e))?;
        }
        // tiny_http ends a Content-Length body early, without an error, when the client
        // goes away: a short body is a failed upload, not a smaller object.
        if let Some(length) = length.filter(|&l| l != received) {
            return Err(fail(
                400,
                format!("the body ended after {received} of its {length} bytes: nothing was stored; send it again"),
            ));
        }
        if let Some(expected) = expected.filter(|&e| e != crc.value()) {
            return Err(fail(400, format!(
                "the body's CRC32C is {:08x}, the request's {CRC} {expected:08x}: nothing was stored",
                crc.value()
            )));
        }
        temp.commit()?;
        Ok(crc.value())
    }
}

/// A temporary file that becomes the object on `commit` and is removed otherwise.
struct Temp {
    file: File,
    path: Option<PathBuf>,
    target: PathBuf,
    bucket: PathBuf,
}

impl Temp {
    /// fsync, rename into place, fsync the directory: the object is durable and whole.
    fn commit(mut self) -> Result<(), Fail> {
        self.file.sync_all().map_err(|e| disk("syncing the object", &e))?;
        let path = self.path.as_ref().expect("not committed yet");
        fs::rename(path, &self.target).map_err(|e| disk("renaming the object into place", &e))?;
        self.path = None;
        sync_dir(&self.bucket).map_err(|e| disk("syncing the bucket", &e))
    }
}

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(path) = &self.path {
            let _ = fs::remove_file(path);
        }
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// `%XX` decoded, when the result is UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
