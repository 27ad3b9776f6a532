//! Ping-pong over a Reliable Connected queue pair, wire-compatible with rdma-core's
//! `ibv_rc_pingpong`: same options (`-p -d -i -s -m -r -n -l -e -g`), same TCP exchange (port
//! 18515, 52-byte `LLLL:QQQQQQ:PPPPPP:<GID>` messages, then `done`) and same output.
//!
//! One difference: without `-g` on an Ethernet (RoCE) port, where the C tool fails, this one
//! picks the routable GID (RoCE v2 with an IPv4-mapped address first) and says which.
//!
//! ```text
//! rc_pingpong -d rxe0 -g 1               # server
//! rc_pingpong -d rxe0 -g 1 192.0.2.1     # client
//! ```
//!
//! With `--rdma-cm` (built with `--features rdmacm`; like perftest's `-R`), the connection is
//! made through rdma_cm instead of the TCP exchange: the server listens on the rdma_cm port
//! `-p` of every address, the client connects to SERVERNAME's, and rdma_cm picks the device
//! by that address (`-d` is then only checked, and `-m`, `-g`, `-l` are the CM's to choose).
//! This also connects iWARP devices (siw), which cannot be connected by hand. The C
//! `ibv_rc_pingpong` has no such mode: both sides must be this example.
//!
//! ```text
//! rc_pingpong --rdma-cm                  # server
//! rc_pingpong --rdma-cm 198.51.100.1     # client (siw0's address in the guest)
//! ```

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use rdma_verbs::endpoint::PINGPONG_MESSAGE_LEN;
use rdma_verbs::*;

type Error = Box<dyn std::error::Error>;

/// How long to wait for the peer over TCP, and for a completion once running.
const PEER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// The wr_ids (`ibv_rc_pingpong`'s), kept as the kinds of completion the ping-pong waits for:
/// its receives', and its send's.
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// Ping-pong over an RC QP (wire-compatible with ibv_rc_pingpong).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Listen on / connect to TCP port
    #[arg(short = 'p', long = "port", default_value_t = 18515,
          value_parser = c_number::parse::<u16>)]
    port: u16,
    /// RDMA device to use (default: the first one found)
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
    /// Port of the RDMA device
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = c_number::parse::<u8>)]
    ib_port: u8,
    /// Local port GID index (default on Ethernet ports: the routable GID)
    #[arg(short = 'g', long = "gid-idx", value_parser = c_number::parse::<u8>)]
    gid_idx: Option<u8>,
    /// Size of message to exchange, in bytes
    #[arg(short = 's', long = "size", default_value_t = 4096,
          value_parser = c_number::parse::<u32>)]
    size: u32,
    /// Path MTU in bytes (256, 512, 1024, 2048 or 4096)
    #[arg(short = 'm', long = "mtu", default_value_t = 1024, value_parser = c_number::parse::<u32>)]
    mtu: u32,
    /// Number of receives to post at a time
    #[arg(short = 'r', long = "rx-depth", default_value_t = 500,
          value_parser = c_number::parse::<u32>)]
    rx_depth: u32,
    /// Number of exchanges
    #[arg(short = 'n', long = "iters", default_value_t = 1000,
          value_parser = c_number::parse::<u64>)]
    iters: u64,
    /// Service level
    #[arg(short = 'l', long = "sl", default_value_t = 0, value_parser = c_number::parse::<u8>)]
    sl: u8,
    /// Sleep on CQ events (default poll)
    #[arg(short = 'e', long = "events")]
    events: bool,
    /// Connect through rdma_cm instead of the TCP exchange (needs --features rdmacm)
    #[arg(long = "rdma-cm")]
    rdma_cm: bool,
    /// Server to connect to (none: act as the server)
    servername: Option<String>,
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rc_pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Error> {
    let mtu = Mtu::from_bytes(args.mtu)
        .ok_or_else(|| format!("invalid MTU {}: use 256, 512, 1024, 2048 or 4096", args.mtu))?;
    if args.size == 0 || args.rx_depth == 0 || args.iters == 0 {
        return Err("-s, -r and -n must be at least 1".into());
    }
    if args.rdma_cm {
        return run_cm(args);
    }
    let ctx = Context::open_or_first(args.ib_dev.as_deref())?;
    let lid = ctx.source_lid(args.ib_port)?;
    let gid = local_gid(&ctx, args)?;
    pingpong(
        &ctx,
        args,
        |qp| {
            let psn = Psn::random();
            let me = Endpoint { lid, qpn: qp.qp_num(), psn, gid: gid.map_or(Gid::ZERO, |g| g.gid) };
            println!("  local address:  {me}");
            let sgid = gid.map(|g| g.index);
            let link = Link { port: args.ib_port, sgid, mtu, sl: args.sl, psn };
            let (qp, remote) = exchange(qp, args, &me, &link)?;
            println!("  remote address: {remote}");
            Ok(qp)
        },
        || Ok(()),
    )
}

/// The TCP exchange of `ibv_rc_pingpong`, and the QP connected to the peer it describes.
fn exchange<'a>(
    qp: QueuePair<'a, Init>,
    args: &Args,
    me: &Endpoint,
    link: &Link,
) -> Result<(QueuePair<'a, Rts>, Endpoint), Error> {
    Ok(match &args.servername {
        Some(host) => {
            let mut stream = TcpStream::connect((host.as_str(), args.port))
                .map_err(|e| format!("couldn't connect to {host}:{}: {e}", args.port))?;
            stream.set_read_timeout(Some(PEER_TIMEOUT))?;
            stream.write_all(&me.to_pingpong_message())?;
            let remote = read_endpoint(&mut stream)?;
            stream.write_all(b"done\0")?;
            (connect(qp, &remote, link)?, remote)
        }
        None => {
            let mut stream = accept(args.port)?;
            stream.set_read_timeout(Some(PEER_TIMEOUT))?;
            let remote = read_endpoint(&mut stream)?;
            // The peer may send as soon as it reads our reply: be in RTS before replying.
            let qp = connect(qp, &remote, link)?;
            stream.write_all(&me.to_pingpong_message())?;
            let mut done = [0u8; 5];
            read_exact(&mut stream, &mut done, "\"done\"")?;
            if &done != b"done\0" {
                return Err(format!(
                    "expected \"done\" from the peer, got {:?}",
                    String::from_utf8_lossy(&done)
                )
                .into());
            }
            (qp, remote)
        }
    })
}

/// `--rdma-cm`: the connection through rdma_cm; the device is the one with the address.
#[cfg(feature = "rdmacm")]
fn run_cm(args: &Args) -> Result<(), Error> {
    use rdma_verbs::cm::{CmId, EventChannel, PortSpace};
    use std::net::{SocketAddr, ToSocketAddrs};
    use std::time::Duration;

    let channel = EventChannel::new()?;
    match &args.servername {
        Some(host) => {
            let dst = (host.as_str(), args.port)
                .to_socket_addrs()
                .map_err(|e| format!("couldn't resolve {host}: {e}"))?
                .find(SocketAddr::is_ipv4)
                .ok_or_else(|| format!("{host} has no IPv4 address"))?;
            let id = CmId::new(&channel, PortSpace::TCP)?;
            id.resolve_addr(None, dst, Duration::from_secs(5))?;
            id.resolve_route(Duration::from_secs(5))?;
            pingpong_cm(args, &id, false)
        }
        None => {
            let listener = CmId::new(&channel, PortSpace::TCP)?;
            let any = SocketAddr::from(([0, 0, 0, 0], args.port));
            listener.bind_addr(any).map_err(|e| format!("couldn't listen on {any}: {e}"))?;
            listener.listen(1)?;
            let request = listener.get_request(Duration::from_secs(3600))?;
            pingpong_cm(args, &request.id, true)
        }
    }
}

/// The ping-pong over `id`'s connection: the client's (`rdma_connect`, `server` false, `id`
/// with its route resolved) or the server's (`rdma_accept`, `id` a connect request's).
#[cfg(feature = "rdmacm")]
fn pingpong_cm(args: &Args, id: &rdma_verbs::cm::CmId<'_>, server: bool) -> Result<(), Error> {
    use rdma_verbs::cm::ConnParam;

    let ctx = id.context()?;
    // rdma_cm picked the device by address: `-d`, when given, must name that one.
    if let Some(dev) = args.ib_dev.as_deref().filter(|&dev| dev != ctx.name()) {
        let picked = ctx.name();
        return Err(format!(
            "rdma_cm picked {picked} by address, not -d {dev}: use an address of {dev}'s netdev"
        )
        .into());
    }
    pingpong(
        ctx,
        args,
        |qp| {
            let param = ConnParam::default();
            let up = if server {
                id.accept(qp, &param, PEER_TIMEOUT)
            } else {
                id.connect(qp, &param, PEER_TIMEOUT)
            };
            let up = up?;
            println!(
                "  local address:  QPN {:#08x}, connected by rdma_cm on {}",
                up.qp.qp_num().get(),
                ctx.name()
            );
            Ok(up.qp)
        },
        || {
            if server {
                // Over iWARP a send completes once handed to TCP: destroying our QP before
                // the client has everything could reset the connection. It disconnects when
                // done.
                Ok(id.wait_disconnected(PEER_TIMEOUT)?)
            } else {
                // Done: every message arrived. Disconnect before our QP goes.
                Ok(id.disconnect()?)
            }
        },
    )
}

#[cfg(not(feature = "rdmacm"))]
fn run_cm(_: &Args) -> Result<(), Error> {
    Err("--rdma-cm needs rdma_cm: build with --features rdmacm".into())
}

/// The ping-pong on `ctx`, with `connect` taking the QP from INIT (receives posted) to RTS,
/// and `finish` ending the connection while the QP still exists.
fn pingpong(
    ctx: &Context,
    args: &Args,
    connect: impl for<'q> FnOnce(QueuePair<'q, Init>) -> Result<QueuePair<'q, Rts>, Error>,
    finish: impl FnOnce() -> Result<(), Error>,
) -> Result<(), Error> {
    let pd = ctx.alloc_pd()?;
    // With -e, completions wake us through a channel instead of being busy-polled.
    let channel = if args.events { Some(ctx.create_comp_channel()?) } else { None };
    let cq = match &channel {
        Some(channel) => ctx.create_cq_with_channel(args.rx_depth + 1, channel, 0)?,
        None => ctx.create_cq(args.rx_depth + 1)?,
    };
    // The safe buffer tier: one buffer per outstanding receive plus the message we send.
    // (The C tool lets every receive share one buffer: the NIC writing memory that many
    // receives name is exactly what this tier rules out, at (rx_depth + 1) × size bytes.)
    let size = args.size as usize;
    let mr = pd.register((args.rx_depth as usize + 1) * size, AccessFlags::LOCAL_WRITE)?;
    let pool = BufferPool::new(mr, size)?;
    let mut message = pool.take().ok_or("the buffer pool is empty")?;
    message.capacity_mut().fill(0x7b);
    message.set_len(size)?;
    let message_index = message.index();
    let cap = QpCapabilities { max_send_wr: 1, max_recv_wr: args.rx_depth, ..Default::default() };
    let qp = pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) })?;
    let qp = qp.into_init(&ToInitAttr { port: args.ib_port, ..Default::default() })?;

    // Receives are posted again as the C tool does, when at most one is left (all but one
    // then), but with one call for them all.
    let mut refill = RecvBufferList::with_capacity(args.rx_depth as usize);
    while let Some(buf) = pool.take() {
        refill.push(buf).map_err(|_| "more receive buffers than -r")?;
    }
    let mut routs = refill.len();
    qp.post_recv_buffers(&mut refill)?;
    // Armed before connecting, as the C tool: the peer may send as soon as the exchange is
    // done, and a completion that lands before the CQ is armed raises no event.
    if channel.is_some() {
        cq.req_notify(false)?;
    }
    let qp = connect(qp)?;

    // The message is in flight or back in `message`; it goes inline when it fits.
    let mut message = Some(message);

    let mut pending = RECV_WRID;
    if args.servername.is_some() {
        send_message(&qp, &mut message)?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let (mut rcnt, mut scnt) = (0u64, 0u64);
    let mut wcs: [WorkCompletion; 2] = Default::default();
    let stalled = |rcnt, scnt| -> Error {
        format!(
            "no completion for {} s after {rcnt} receives and {scnt} sends: the peer stopped",
            PEER_TIMEOUT.as_secs()
        )
        .into()
    };
    // Without -e, busy polling, as the C tool does; the clock is read only every 4096 empty
    // polls.
    let (mut empty_polls, mut idle_since) = (0u32, None::<Instant>);
    while rcnt < args.iters || scnt < args.iters {
        if let Some(channel) = &channel {
            // As the C tool: sleep until the CQ's event, re-arm, then poll once.
            if channel.wait(Some(PEER_TIMEOUT))? == 0 {
                return Err(stalled(rcnt, scnt));
            }
            cq.req_notify(false)?;
        }
        let done = cq.poll(&mut wcs)?;
        if done.is_empty() {
            empty_polls = empty_polls.wrapping_add(1);
            if channel.is_none()
                && empty_polls % 4096 == 0
                && idle_since.get_or_insert_with(Instant::now).elapsed() > PEER_TIMEOUT
            {
                return Err(stalled(rcnt, scnt));
            }
            continue;
        }
        idle_since = None;
        for wc in done.iter_mut() {
            let status = wc.status();
            let buf = pool.complete(wc).ok_or("a completion for none of our buffers")?;
            let sent = buf.index() == message_index;
            if status != WcStatus::SUCCESS {
                let kind = if sent { SEND_WRID } else { RECV_WRID };
                return Err(
                    format!("Failed status {status} ({}) for wr_id {kind}", status.0).into()
                );
            }
            // (Each branch clears its own constant: the kind is never held in a register.)
            if sent {
                scnt += 1;
                message = Some(buf);
                pending &= !SEND_WRID;
            } else {
                rcnt += 1;
                routs -= 1;
                refill.push(buf).map_err(|_| "more receive buffers than -r")?;
                if routs <= 1 {
                    routs += refill.len();
                    qp.post_recv_buffers(&mut refill)?;
                }
                pending &= !RECV_WRID;
            }
            if scnt < args.iters && pending == 0 {
                send_message(&qp, &mut message)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    let elapsed = start.elapsed();
    finish()?;

    let usec = elapsed.as_secs_f64() * 1e6;
    let bytes = u64::from(args.size) * args.iters * 2;
    let secs = elapsed.as_secs_f64();
    println!("{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec", bytes as f64 * 8.0 / usec);
    println!(
        "{} iters in {secs:.2} seconds = {:.2} usec/iter",
        args.iters,
        usec / args.iters as f64
    );
    Ok(())
}

/// What connecting our QP needs besides the peer's endpoint.
struct Link {
    port: u8,
    sgid: Option<u8>,
    mtu: Mtu,
    sl: u8,
    psn: Psn,
}

/// INIT → RTR → RTS towards `remote`.
fn connect<'a>(
    qp: QueuePair<'a, Init>,
    remote: &Endpoint,
    link: &Link,
) -> Result<QueuePair<'a, Rts>, Error> {
    let mut rtr = ToRtrAttr::to_endpoint(remote, link.port, link.sgid, link.mtu);
    rtr.av.sl = link.sl;
    let qp = qp.into_rtr(&rtr)?;
    Ok(qp.into_rts(&ToRtsAttr::new(link.psn))?)
}

/// Posts the message, which must be back from its previous trip (the C tool's `pending`
/// logic guarantees it). (Inlined into the loop, as the C tool's post is: a call of its own
/// cost about 15 instructions per message.)
#[inline(always)]
fn send_message<'a>(
    qp: &QueuePair<'a, Rts>,
    message: &mut Option<Buffer<'a>>,
) -> Result<(), Error> {
    let buf = message.take().ok_or("the message is still in flight")?;
    qp.post_send_buffer(buf, SendOp::Send)?;
    Ok(())
}

/// The GID to send, with its index: `-g` if given; else on Ethernet the routable one.
fn local_gid(ctx: &Context, args: &Args) -> Result<Option<GidEntry>, Error> {
    let gid = ctx.source_gid(args.ib_port, args.gid_idx)?;
    if let (None, Some(gid)) = (args.gid_idx, gid) {
        eprintln!("rc_pingpong: no -g on an Ethernet (RoCE) port: using GID index {gid}, the routable one");
    }
    Ok(gid)
}

/// Waits for one client, on IPv6 and IPv4 where the system allows both.
fn accept(port: u16) -> Result<TcpStream, Error> {
    let listener = TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| format!("couldn't listen on port {port}: {e}"))?;
    Ok(listener.accept()?.0)
}

fn read_endpoint(stream: &mut TcpStream) -> Result<Endpoint, Error> {
    let mut msg = [0u8; PINGPONG_MESSAGE_LEN];
    read_exact(stream, &mut msg, "address message")?;
    Endpoint::from_pingpong_message(&msg)
        .map_err(|e| format!("bad address message from the peer: {e}").into())
}

/// `read_exact` with messages that say how much arrived.
fn read_exact(stream: &mut TcpStream, buf: &mut [u8], what: &str) -> Result<(), Error> {
    let mut got = 0;
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(format!(
                    "the peer closed the connection after {got} of the {} bytes of its {what}",
                    buf.len()
                )
                .into())
            }
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return Err(format!(
                    "no {what} from the peer within {} s ({got} of {} bytes arrived)",
                    PEER_TIMEOUT.as_secs(),
                    buf.len()
                )
                .into())
            }
            Err(e) => return Err(format!("reading the peer's {what}: {e}").into()),
        }
    }
    Ok(())
}
