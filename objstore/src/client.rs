//! The client: one session (RC QP) per run, a registered buffer the server READs from (PUT)
//! or WRITEs into (GET), the control channel through ureq.

use std::cell::Cell;
use std::fs::File;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rdma_verbs::*;
use ureq::http::Response;
use ureq::Body;

use crate::link::Link;
use crate::{
    crc32c, human, parse_crc, Crc32c, Error, RdmaArgs, Sizes, Token, CHUNK, CRC, DEPTH,
    HTTP_TIMEOUT, SESSION, SIZE, TIMING, TOKEN,
};

/// Objects above this size get a progress bar on stderr.
const PROGRESS_MIN: u64 = 4 << 20;

/// The HTTP side: an agent and the server's base URL.
struct Http {
    agent: ureq::Agent,
    base: String,
}

impl Http {
    fn new(server: &str, port: u16) -> Http {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_connect(Some(Duration::from_secs(10)))
            .timeout_global(Some(HTTP_TIMEOUT))
            .build();
        Http { agent: config.into(), base: format!("http://{server}:{port}") }
    }

    fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base, path.trim_start_matches('/'))
    }
}

/// `response` when it succeeded, else its status and the server's line.
fn ok(response: Result<Response<Body>, ureq::Error>, what: &str) -> Result<Response<Body>, Error> {
    let mut response =
        response.map_err(|e| format!("{what}: {e} (is `objstore serve` running there?)"))?;
    if response.status().is_success() {
        return Ok(response);
    }
    let text = response.body_mut().with_config().limit(4096).read_to_string().unwrap_or_default();
    Err(format!("{what}: the server answered {}: {}", response.status(), text.trim()).into())
}

fn header<'r>(response: &'r Response<Body>, name: &str) -> Option<&'r str> {
    response.headers().get(name).and_then(|v| v.to_str().ok())
}

/// A header that must be there, parsed.
fn need<T>(
    response: &Response<Body>,
    name: &str,
    parse: impl Fn(&str) -> Option<T>,
) -> Result<T, Error> {
    header(response, name).and_then(parse).ok_or_else(|| {
        format!("the server's answer lacks a valid {name}: is it an objstore server?").into()
    })
}

/// What a client command works with: the HTTP agent, the PD of its buffers, its session.
#[derive(Clone, Copy)]
pub struct Client<'s, 'a> {
    http: &'a Http,
    pd: &'a ProtectionDomain<'a>,
    session: &'s Session<'a>,
}

/// Runs `f` with a session on `server`.
pub fn with_session(
    args: &RdmaArgs,
    server: &str,
    f: impl FnOnce(Client<'_, '_>) -> Result<(), Error>,
) -> Result<(), Error> {
    let ctx = Context::open_or_first(args.ib_dev.as_deref())?;
    let link = Link::new(&ctx, args.ib_port, args.gid_idx)?;
    let pd = ctx.alloc_pd()?;
    // Room for the QP's one send and one receive, neither ever posted.
    let cq = ctx.create_cq(2)?;
    let http = Http::new(server, args.port);
    let session = Session::open(&http, &link, &pd, &cq)?;
    f(Client { http: &http, pd: &pd, session: &session })
}

/// An open session: our QP, connected to the server's, closed on drop.
struct Session<'a> {
    http: &'a Http,
    id: u64,
    _qp: QueuePair<'a, Rts>,
}

impl<'a> Session<'a> {
    /// `POST /session`: our QP for the server's, both in RTS. Ours only answers the server's
    /// READs and WRITEs: it posts nothing, so its CQ stays empty.
    fn open(
        http: &'a Http,
        link: &Link,
        pd: &'a ProtectionDomain<'a>,
        cq: &'a CompletionQueue<'a>,
    ) -> Result<Session<'a>, Error> {
        let cap = QpCapabilities { max_send_wr: 1, max_recv_wr: 1, ..Default::default() };
        let qp = pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(cq) })?;
        let access = AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        let qp = qp.into_init(&ToInitAttr { port: link.port, access, ..Default::default() })?;
        let psn = Psn::random();
        let me = link.endpoint(&qp, psn).to_pingpong_message();
        let mut response =
            ok(http.agent.post(http.url("/session")).send(&me[..]), "opening a session")?;
        let id = need(&response, SESSION, |v| v.parse().ok())?;
        let body = response.body_mut().with_config().limit(256).read_to_vec()?;
        let remote = Endpoint::from_pingpong_message(&body)
            .map_err(|e| format!("the server's session answer is no QP address: {e}"))?;
        let qp = link.connect(qp, &remote, psn, DEPTH as u8)?;
        Ok(Session { http, id, _qp: qp })
    }

    /// A request whose bytes move by RDMA through `region[..len]`, with a progress bar for
    /// large objects.
    fn request(
        &self,
        send: impl FnOnce(Token) -> Result<Response<Body>, ureq::Error>,
        region: &RemoteWritableRegion<'_>,
        len: u64,
        label: &str,
    ) -> Result<Result<Response<Body>, ureq::Error>, Error> {
        let remote = region.remote(..)?;
        let token = Token { session: self.id, addr: remote.addr, len, rkey: remote.rkey.get() };
        if len < PROGRESS_MIN {
            return Ok(send(token));
        }
        let stop = AtomicBool::new(false);
        Ok(thread::scope(|s| {
            s.spawn(|| self.progress(&stop, len, label));
            let response = send(token);
            stop.store(true, Ordering::Relaxed);
            response
        }))
    }

    /// Draws `label [####    ] 42% 80.0 MiB/192.0 MiB` on stderr from the server's count
    /// (`GET /session/<id>`) until `stop`.
    fn progress(&self, stop: &AtomicBool, len: u64, label: &str) {
        let url = self.http.url(&format!("/session/{}", self.id));
        let mut drawn = false;
        while !stop.load(Ordering::Relaxed) {
            thread::sleep(Duration::from_millis(200));
            let moved = self
                .http
                .agent
                .get(&url)
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .and_then(|t| t.trim().strip_prefix("moved=")?.parse::<u64>().ok());
            let Some(moved) = moved else { continue };
            let width = 30;
            let done = (moved.min(len) * width / len.max(1)) as usize;
            eprint!(
                "\r{label} [{}{}] {:3}% {}/{}",
                "#".repeat(done),
                " ".repeat(width as usize - done),
                moved.min(len) * 100 / len.max(1),
                human(moved),
                human(len)
            );
            drawn = true;
        }
        if drawn {
            eprintln!();
        }
    }
}

impl Drop for Session<'_> {
    fn drop(&mut self) {
        // The server also closes idle sessions: a failure here costs nothing lasting.
        let _ = self.http.agent.delete(self.http.url(&format!("/session/{}", self.id))).call();
    }
}

/// A buffer the server may READ and WRITE: at least `len` bytes (and one page).
fn region<'p>(pd: &'p ProtectionDomain<'p>, len: u64) -> Result<RemoteWritableRegion<'p>, Error> {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let len = usize::try_from(len.max(4096)).map_err(|_| "the object does not fit in memory")?;
    Ok(pd.register_remote_writable(len, access)?)
}

/// Calls `step(offset, chunk)` for each piece of at most [`CHUNK`] of `size` bytes, in
/// order, through one buffer.
fn by_chunk(
    size: u64,
    mut step: impl FnMut(usize, &mut [u8]) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut chunk = vec![0u8; CHUNK];
    let mut at = 0;
    while at < size {
        let n = (size - at).min(CHUNK as u64) as usize;
        step(at as usize, &mut chunk[..n])?;
        at += n as u64;
    }
    Ok(())
}

impl Client<'_, '_> {
    /// `objstore put`: FILE into the buffer, the server READs it.
    pub fn put(self, object: &str, file: &Path) -> Result<(), Error> {
        let Client { http, pd, session } = self;
        let mut input = File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let size = input.metadata()?.len();
        let mut region = region(pd, size)?;
        let mut crc = Crc32c::default();
        by_chunk(size, |at, chunk| {
            input.read_exact(chunk).map_err(|e| format!("reading {}: {e}", file.display()))?;
            crc.update(chunk);
            Ok(region.write(at, chunk)?)
        })?;
        let crc = crc.value();
        let start = Instant::now();
        let send = |token: Token| {
            let put = http.agent.put(http.url(object)).header(TOKEN, token.to_string());
            put.header(CRC, format!("{crc:08x}")).send_empty()
        };
        let response = ok(
            session.request(send, &region, size, &format!("put {object}"))?,
            &format!("PUT {object}"),
        )?;
        let secs = start.elapsed().as_secs_f64();
        let stored = need(&response, CRC, parse_crc)?;
        if stored != crc {
            return Err(format!("the server stored CRC32C {stored:08x}, ours is {crc:08x}").into());
        }
        println!(
            "put {object}: {size} bytes over RDMA in {secs:.3} s ({:.1} MB/s), crc32c {crc:08x}",
            mb_s(size, secs)
        );
        Ok(())
    }

    /// `objstore get`: the server WRITEs the object into the buffer, then into FILE.
    pub fn get(self, object: &str, file: &Path) -> Result<(), Error> {
        let Client { http, pd, session } = self;
        let head = ok(http.agent.head(http.url(object)).call(), &format!("HEAD {object}"))?;
        let mut size: u64 = need(&head, SIZE, |v| v.parse().ok())?;
        let start = Instant::now();
        // Once more if the object grew between HEAD and GET (the server answers 416 then).
        let (region, response) = loop {
            let region = region(pd, size)?;
            let send = |token: Token| {
                http.agent.get(http.url(object)).header(TOKEN, token.to_string()).call()
            };
            let response =
                session.request(send, &region, region.len() as u64, &format!("get {object}"))?;
            match response {
                Ok(r)
                    if r.status() == 416
                        && header(&r, SIZE)
                            .and_then(|v| v.parse().ok())
                            .is_some_and(|n: u64| n > size) =>
                {
                    size = need(&r, SIZE, |v| v.parse().ok())?;
                }
                other => break (region, ok(other, &format!("GET {object}"))?),
            }
        };
        let secs = start.elapsed().as_secs_f64();
        let size: u64 = need(&response, SIZE, |v| v.parse().ok())?;
        let expected = need(&response, CRC, parse_crc)?;
        let mut out = File::create(file).map_err(|e| format!("{}: {e}", file.display()))?;
        let mut crc = Crc32c::default();
        by_chunk(size, |at, chunk| {
            region.read(at, chunk)?;
            crc.update(chunk);
            Ok(out.write_all(chunk).map_err(|e| format!("writing {}: {e}", file.display()))?)
        })?;
        out.sync_all()?;
        if crc.value() != expected {
            return Err(format!(
            "{object} arrived with CRC32C {:08x}, the server sent {expected:08x}: {} is corrupt",
            crc.value(),
            file.display()
        )
            .into());
        }
        println!(
        "get {object}: {size} bytes over RDMA in {secs:.3} s ({:.1} MB/s), crc32c {expected:08x}",
        mb_s(size, secs)
    );
        Ok(())
    }

    /// `objstore bench`: for each size, `iters` PUTs and GETs over RDMA, then over TCP, of one
    /// object `bench/<size>`; MB/s of each (10^6 bytes per second, each request from its send
    /// to its answer). Every transfer's CRC32C is checked.
    pub fn bench(self, sizes: &Sizes, iters: u32) -> Result<(), Error> {
        let Client { http, pd, session } = self;
        let max = sizes.0.iter().copied().max().unwrap_or(0);
        let mut region = region(pd, max as u64)?;
        // Bytes that differ in every position of a chunk, the same in the region and for TCP.
        let data: Vec<u8> =
            (0..max).map(|i| (i as u32).wrapping_mul(0x9e37_79b9).rotate_left(7) as u8).collect();
        for (i, piece) in data.chunks(CHUNK).enumerate() {
            region.write(i * CHUNK, piece)?;
        }
        println!(
            "{:>10} {:>14} {:>14} {:>14} {:>14} {:>12} {:>12} {:>12} {:>12}",
            "bytes",
            "rdma PUT MB/s",
            "rdma GET MB/s",
            "tcp PUT MB/s",
            "tcp GET MB/s",
            "PUT file ms",
            "PUT crc ms",
            "GET file ms",
            "GET crc ms"
        );
        for &size in &sizes.0 {
            let object = format!("bench/{size}");
            let crc = crc32c(&data[..size]);
            let len = size as u64;
            let timed = |f: &dyn Fn() -> Result<(), Error>| -> Result<f64, Error> {
                let start = Instant::now();
                for _ in 0..iters {
                    f()?;
                }
                Ok(mb_s(len * u64::from(iters), start.elapsed().as_secs_f64()))
            };
            let answer_crc = |r: &Response<Body>| -> Result<(), Error> {
                match need(r, CRC, parse_crc)? {
                    got if got == crc => Ok(()),
                    got => Err(format!("{object}: CRC32C {got:08x}, expected {crc:08x}").into()),
                }
            };
            // The server's file and CRC32C milliseconds, summed over the RDMA requests.
            let (put_cost, get_cost) = (Cell::new((0.0, 0.0)), Cell::new((0.0, 0.0)));
            let answered = |r: &Response<Body>, cost: &Cell<(f64, f64)>| -> Result<(), Error> {
                answer_crc(r)?;
                let (file, crc) = need(r, TIMING, parse_timing)?;
                cost.set((cost.get().0 + file, cost.get().1 + crc));
                Ok(())
            };
            let rdma_put = timed(&|| {
                let send = |token: Token| {
                    let put = http.agent.put(http.url(&object)).header(TOKEN, token.to_string());
                    put.header(CRC, format!("{crc:08x}")).send_empty()
                };
                answered(&ok(session.request(send, &region, len, "put")?, "PUT")?, &put_cost)
            })?;
            let rdma_get = timed(&|| {
                let send = |token: Token| {
                    http.agent.get(http.url(&object)).header(TOKEN, token.to_string()).call()
                };
                answered(&ok(session.request(send, &region, len, "get")?, "GET")?, &get_cost)
            })?;
            // What the GETs wrote must be the object, byte for byte.
            let mut back = vec![0u8; size];
            region.read(0, &mut back)?;
            if crc32c(&back) != crc {
                return Err(
                    format!("{object}: the bytes RDMA GET wrote have the wrong CRC32C").into()
                );
            }
            let tcp_put = timed(&|| {
                let put = http.agent.put(http.url(&object)).header(CRC, format!("{crc:08x}"));
                answer_crc(&ok(put.send(&data[..size]), "PUT over TCP")?)
            })?;
            let tcp_body = || -> Result<Vec<u8>, Error> {
                let mut r = ok(http.agent.get(http.url(&object)).call(), "GET over TCP")?;
                Ok(r.body_mut().with_config().limit(len + 1).read_to_vec()?)
            };
            let tcp_get = timed(&|| match tcp_body()?.len() == size {
                true => Ok(()),
                false => Err(format!("{object}: GET over TCP returned another size").into()),
            })?;
            // One more, untimed, checked byte for byte (TCP GETs carry no CRC32C).
            if crc32c(&tcp_body()?) != crc {
                return Err(format!("{object}: GET over TCP returned other bytes").into());
            }
            let per = |cost: &Cell<(f64, f64)>| {
                (cost.get().0 / iters as f64, cost.get().1 / iters as f64)
            };
            let ((put_file, put_crc), (get_file, get_crc)) = (per(&put_cost), per(&get_cost));
            println!(
                "{size:>10} {rdma_put:>14.1} {rdma_get:>14.1} {tcp_put:>14.1} {tcp_get:>14.1} \
             {put_file:>12.3} {put_crc:>12.3} {get_file:>12.3} {get_crc:>12.3}"
            );
        }
        Ok(())
    }
}

/// `file;dur=<ms>, crc;dur=<ms>` (the server's [`TIMING`]): the two durations.
fn parse_timing(value: &str) -> Option<(f64, f64)> {
    let dur = |name: &str| {
        value
            .split(',')
            .find_map(|m| m.trim().strip_prefix(name)?.strip_prefix(";dur=")?.parse().ok())
    };
    Some((dur("file")?, dur("crc")?))
}

fn mb_s(bytes: u64, secs: f64) -> f64 {
    bytes as f64 / 1e6 / secs.max(1e-9)
}
