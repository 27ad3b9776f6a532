//! A request/reply service over RC queue pairs, and its client: how a long-running program
//! holds the safe crate's resources.
//!
//! The server listens on TCP; for each client that connects it creates a QP, exchanges
//! endpoints in the ibv_rc_pingpong format (52-byte `LLLL:QQQQQQ:PPPPPP:<GID>` messages, its
//! QP in RTS before it replies), then answers each request (a SEND) with a reply (a SEND): the
//! request's bytes reversed, each plus the client's index + 1, with the index as immediate
//! data. It exits after `--clients` clients, printing a line for each, non-zero if any
//! failed. The client sends `-n` requests of 1..=`-s` bytes, checks every reply byte for byte
//! and prints a summary. The TCP connection stays open while a client is served: the client
//! closes it on any error, and the server lets go of a client whose connection closed (its
//! QP moved to ERROR so that its buffers come back flushed).
//!
//! Two ways to hold the verbs resources:
//! - by default one thread serves every client: the Context, PD, CQ and buffer pool belong to
//!   the serving function, and a `Server<'a>` borrows them, with one QP per client, all on
//!   the one CQ;
//! - with `--threads` each client has its own thread, CQ, pool and QP. `thread::spawn` needs
//!   `'static` parents, so the Context and PD are leaked once with `Box::leak`: a service's
//!   verbs context lives as long as the process anyway.
//!
//! With `--rdma-cm` (built with `--features rdmacm`) rdma_cm connects each client instead of
//! the TCP exchange, which also serves iWARP devices (siw): the server listens on port `-p` of
//! `--bind`'s address (rdma_cm picks the device that has it; `-d` is then only checked) and
//! serves its clients on one thread as above, accepting new ones between their requests. A
//! connection carries the client's request count in its private data and the accept the
//! client's index, so requests and replies are plain SENDs (iWARP has no immediate data). The
//! client disconnects once it has checked every reply; the server lets go of a client once
//! it disconnected, and of one that disconnects early (or dies) as of a TCP client gone.
//!
//! ```text
//! service -d rxe0 --clients 3              # server: exits after serving 3 clients
//! service -d rxe0 -n 100 192.0.2.1         # client
//! service --rdma-cm --bind 198.51.100.1 --clients 3   # server on siw0's address
//! service --rdma-cm -n 100 198.51.100.1               # client
//! ```

mod client;
mod link;
mod server;

use std::io::{ErrorKind, Read};
use std::net::{IpAddr, TcpStream};
use std::process::ExitCode;

use clap::Parser;
use rdma_verbs::endpoint::PINGPONG_MESSAGE_LEN;
use rdma_verbs::*;

use link::{Link, LinkArgs};

/// How long to wait for a peer over TCP, and for a completion once running.
const PEER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A request's immediate data: `MORE`, or `LAST` for the client's final request.
const MORE: u32 = 0;
const LAST: u32 = 1;

type Error = Box<dyn std::error::Error + Send + Sync>;

/// A request/reply service over RC queue pairs, and its client.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Listen on / connect to TCP port
    #[arg(short = 'p', long = "port", default_value_t = 18800,
          value_parser = c_number::parse::<u16>)]
    port: u16,
    /// RDMA device to use (default: the first one found)
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
    #[command(flatten)]
    link: LinkArgs,
    /// Largest request in bytes: the server's buffer size; the client's requests vary
    /// from 1 byte to this
    #[arg(short = 's', long = "size", default_value_t = 4096,
          value_parser = clap::value_parser!(u32).range(1..=1 << 20))]
    size: u32,
    /// Server: exit after this many clients
    #[arg(short = 'c', long = "clients", default_value_t = 1, conflicts_with = "servername",
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    clients: u32,
    /// Server: serve each client on its own thread, with its own CQ and buffer pool
    #[arg(short = 't', long = "threads", conflicts_with = "servername")]
    threads: bool,
    /// Connect through rdma_cm instead of the TCP exchange, on rdma_cm port -p (needs
    /// --features rdmacm; -g, -i and -m are then the CM's to choose)
    #[arg(long = "rdma-cm", conflicts_with = "threads")]
    rdma_cm: bool,
    /// Server with --rdma-cm: listen on this address, an IP of the RDMA device's netdev
    #[arg(short = 'b', long = "bind", requires = "rdma_cm", conflicts_with = "servername")]
    bind: Option<IpAddr>,
    /// Client: number of requests
    #[arg(short = 'n', long = "requests", default_value_t = 10, requires = "servername",
          value_parser = clap::value_parser!(u32).range(1..))]
    requests: u32,
    /// Server to connect to (none: act as the server)
    servername: Option<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match (&args.servername, args.rdma_cm) {
        (Some(host), false) => client::run(&args, host),
        (None, false) => server::run(&args),
        (host, true) => rdma_cm(&args, host.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("service: {e}");
            ExitCode::FAILURE
        }
    }
}

/// With rdma_cm, `-d` (when given) must name the device rdma_cm picked by address.
#[cfg(feature = "rdmacm")]
fn check_cm_device(args: &Args, ctx: &Context) -> Result<(), Error> {
    match &args.ib_dev {
        Some(dev) if dev != ctx.name() => Err(format!(
            "rdma_cm picked {} by address, not -d {dev}: use an address of {dev}'s netdev",
            ctx.name()
        )
        .into()),
        _ => Ok(()),
    }
}

/// `--rdma-cm`: the client of `host`, or the server.
#[cfg(feature = "rdmacm")]
fn rdma_cm(args: &Args, host: Option<&str>) -> Result<(), Error> {
    match host {
        Some(host) => client::run_cm(args, host),
        None => server::run_cm(args),
    }
}

#[cfg(not(feature = "rdmacm"))]
fn rdma_cm(_: &Args, _: Option<&str>) -> Result<(), Error> {
    Err("--rdma-cm needs rdma_cm: build with --features rdmacm".into())
}

/// An rdma_cm step that may have nothing for us yet: `None` when it timed out.
#[cfg(feature = "rdmacm")]
fn unless_timed_out<T>(result: rdma_verbs::Result<T>) -> Result<Option<T>, Error> {
    match result {
        Ok(value) => Ok(Some(value)),
        Err(e) if e.errno() == Some(libc::ETIMEDOUT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The reply to `request` from client `index`: its bytes reversed, each plus `index + 1`
/// (so that even client 0's reply differs from its request).
fn reply(request: &[u8], index: u32) -> impl Iterator<Item = u8> + '_ {
    let add = (index as u8).wrapping_add(1);
    request.iter().rev().map(move |b| b.wrapping_add(add))
}

/// Request `i` of the client with `seed`: `max` bytes first, then 1, then lengths spread
/// over 1..=max. Its bytes depend on `seed`, so that a reply meant for another client fails
/// this one's check.
fn request(seed: u32, i: u32, max: u32) -> Vec<u8> {
    let hash = |x: u32| {
        let x = (x ^ seed).wrapping_mul(0x9e37_79b9);
        x ^ x >> 15
    };
    let len = match i {
        0 => max,
        1 => 1,
        _ => 1 + hash(i) % max,
    };
    (0..len).map(|j| (hash(i << 20 ^ j) >> 8) as u8).collect()
}

/// Our side of every connection, from `-i`, `-g` and `-m`.
fn link(ctx: &Context, args: &Args) -> Result<Link, Error> {
    Link::new(ctx, &args.link)
}

/// A new RC QP on `cq` and device port `port`, in INIT, with room for one receive and
/// `max_send_wr` sends.
fn new_qp<'r>(
    pd: &'r ProtectionDomain<'r>,
    cq: &'r CompletionQueue<'r>,
    port: u8,
    max_send_wr: u32,
) -> Result<QueuePair<'r, Init>, Error> {
    let cap = QpCapabilities { max_send_wr, max_recv_wr: 1, ..Default::default() };
    let qp = pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(cq) })?;
    Ok(qp.into_init(&ToInitAttr { port, ..Default::default() })?)
}

/// A peer's address message, read as it arrives.
struct AddressReader {
    msg: [u8; PINGPONG_MESSAGE_LEN],
    got: usize,
}

impl AddressReader {
    fn new() -> Self {
        AddressReader { msg: [0; PINGPONG_MESSAGE_LEN], got: 0 }
    }

    /// Reads what has arrived: the endpoint once the message is whole, `None` while a read
    /// would block (or timed out).
    fn read(&mut self, stream: &mut TcpStream) -> Result<Option<Endpoint>, Error> {
        while self.got < self.msg.len() {
            match stream.read(&mut self.msg[self.got..]) {
                Ok(0) => {
                    return Err(format!(
                        "the peer closed the connection after {} of the {} bytes of its address \
                         message",
                        self.got,
                        self.msg.len()
                    )
                    .into())
                }
                Ok(n) => self.got += n,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(None)
                }
                Err(e) => return Err(format!("reading the peer's address message: {e}").into()),
            }
        }
        let remote = Endpoint::from_pingpong_message(&self.msg)
            .map_err(|e| format!("bad address message from the peer: {e}"))?;
        Ok(Some(remote))
    }

    fn timed_out(&self) -> Error {
        format!(
            "no address message from the peer within {} s ({} of {} bytes arrived)",
            PEER_TIMEOUT.as_secs(),
            self.got,
            self.msg.len()
        )
        .into()
    }
}

/// Reads the peer's address message from a blocking `stream`, waiting at most
/// [`PEER_TIMEOUT`] for each part.
fn read_endpoint(stream: &mut TcpStream) -> Result<Endpoint, Error> {
    stream.set_read_timeout(Some(PEER_TIMEOUT))?;
    let mut reader = AddressReader::new();
    reader.read(stream)?.ok_or_else(|| reader.timed_out())
}
