//! Ping-pong over mlx5 Dynamically Connected (DC) queue pairs (build with `--features mlx5`).
//!
//! Each side makes a DCT (fed by an SRQ) and a DCI, and the two exchange their DC endpoint
//! tokens (`dc1:<GID>:<LID>:<DCTN>:<KEY>`, see `rdma_verbs::mlx5::DcEndpoint`) and the
//! address and rkey of a region the peer may write, over TCP. No rdma_cm, no connected QP:
//! each side's DCI addresses every work request to the other's DCT. Per iteration the client
//! RDMA WRITEs a pattern into the server's region and SENDs another; the server checks both,
//! then answers the same way, and the client checks the answer.
//!
//! ```text
//! dc_pingpong -d mlx5_0 -g 3                 # server
//! dc_pingpong -d mlx5_0 -g 3 192.0.2.1       # client
//! ```
//!
//! On a device that is not driven by libmlx5 (Soft-RoCE, siw, other vendors) it exits with
//! status 1 and one line saying why.

use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use rdma_verbs::mlx5::*;
use rdma_verbs::*;

type Error = Box<dyn std::error::Error>;

/// How long to wait for the peer over TCP, and for a completion once running.
const PEER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);
/// The wr_ids: our receives', and our sends' (WRITE and SEND).
const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;

/// The options that make the route of both DC objects.
#[derive(clap::Args, Debug)]
struct RouteArgs {
    /// Port of the RDMA device
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = c_number::parse::<u8>)]
    ib_port: u8,
    /// Local port GID index (default on Ethernet ports: the routable GID)
    #[arg(short = 'g', long = "gid-idx", value_parser = c_number::parse::<u8>)]
    gid_index: Option<u8>,
    /// Path MTU in bytes (256, 512, 1024, 2048 or 4096)
    #[arg(short = 'm', long = "mtu", default_value = "1024", value_parser = parse_mtu)]
    mtu: Mtu,
    /// GRH traffic class of DCT and DCI packets (on RoCE v2: DSCP << 2 | ECN); set the
    /// DSCP of the fabric's lossless class there
    #[arg(long = "tclass", default_value_t = 0, value_parser = c_number::parse::<u8>)]
    tclass: u8,
    /// Service level of DCT and DCI packets
    #[arg(long = "sl", default_value_t = 0, value_parser = c_number::parse::<u8>)]
    sl: u8,
}

/// Ping-pong over mlx5 DC (DCT + DCI on each side; tokens exchanged over TCP).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Listen on / connect to TCP port
    #[arg(short = 'p', long = "port", default_value_t = 18516,
          value_parser = c_number::parse::<u16>)]
    port: u16,
    /// RDMA device to use (default: the first one found)
    #[arg(short = 'd', long = "ib-dev")]
    ib_dev: Option<String>,
    #[command(flatten)]
    route: RouteArgs,
    /// Size of each message and of each RDMA WRITE, in bytes
    #[arg(short = 's', long = "size", default_value_t = 4096,
          value_parser = c_number::parse::<u32>)]
    size: u32,
    /// Number of exchanges
    #[arg(short = 'n', long = "iters", default_value_t = 100,
          value_parser = c_number::parse::<u64>)]
    iters: u64,
    /// Server to connect to (none: act as the server)
    servername: Option<String>,
}

/// `-m`: a path MTU in bytes.
fn parse_mtu(s: &str) -> Result<Mtu, String> {
    let bytes = c_number::parse::<u32>(s)?;
    Mtu::from_bytes(bytes)
        .ok_or_else(|| format!("invalid MTU {bytes}: use 256, 512, 1024, 2048 or 4096"))
}

fn main() -> ExitCode {
    match run(&Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("dc_pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What each side tells the other: its DCT token and the region it may write.
struct Peer {
    token: DcEndpoint,
    write_to: RemoteAddr,
}

fn run(args: &Args) -> Result<(), Error> {
    if args.size == 0 || args.iters == 0 {
        return Err("-s and -n must be at least 1".into());
    }
    let ctx = Context::open_or_first(args.ib_dev.as_deref())?;
    // The gate first: on a non-mlx5 device nothing else is created.
    let mlx5 = Mlx5Context::open(&ctx)?;
    let RouteArgs { ib_port, gid_index, mtu, tclass, sl } = args.route;
    let port = ctx.query_port(ib_port)?;
    // `-g`, else on RoCE the routable GID; on InfiniBand none (LID routing).
    let gid = ctx.source_gid(ib_port, gid_index)?;
    let sgid_index = gid.map(|g| g.index);
    // Hop limit 255 (DcRoute::new): routed RoCE crosses routers.
    let route = DcRoute { traffic_class: tclass, sl, ..DcRoute::new(ib_port, sgid_index, mtu) };

    let size = args.size as usize;
    let pd = ctx.alloc_pd()?;
    // One CQ for the DCT's receives and one for the DCI's sends: each wait below takes the
    // next completion of its CQ. (On one CQ the two kinds would come unordered against each
    // other, and a wait for one would have to keep the other it polled.)
    let recv_cq = ctx.create_cq(8)?;
    // Room for the DCI's 64 sends (`DciInitAttr::new`).
    let send_cq = ctx.create_cq(64)?;
    let srq = pd.create_srq(4, 1)?;
    // Four areas of `size` bytes: receives, what the peer writes, and our outgoing WRITE
    // and SEND bytes.
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let mut region = pd.register_remote_writable(4 * size, access)?;
    let (recv_at, written_at, write_at, send_at) = (0, size, 2 * size, 3 * size);

    // A key only the peer learns (24 random bits from each of two draws; not a secret).
    let key = DcKey::new(u64::from(Psn::random().get()) << 24 | u64::from(Psn::random().get()));
    let dct = mlx5.create_dct(&pd, &DctInitAttr { srq: &srq, recv_cq: &recv_cq, key })?;
    let init = ToInitAttr { port: ib_port, pkey_index: 0, access: AccessFlags::REMOTE_WRITE };
    let dct = dct.into_init(&init)?;
    let dct = dct.into_rtr(&DctToRtrAttr::from_route(&route))?;
    let me = Peer {
        token: dct.endpoint(gid.map_or(Gid::ZERO, |g| g.gid), port.lid()),
        write_to: region.remote(written_at..written_at + size)?,
    };
    post_recv(&srq, &region, recv_at, size)?;

    let (mut stream, server) = match &args.servername {
        None => (accept(args.port)?, true),
        Some(host) => (TcpStream::connect((host.as_str(), args.port))?, false),
    };
    stream.set_read_timeout(Some(PEER_TIMEOUT))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    writeln!(stream, "{} {:x} {:x}", me.token, me.write_to.addr, me.write_to.rkey.get())?;
    let peer = read_peer(&mut reader)?;
    println!("  local DCT:  {}", me.token);
    println!("  remote DCT: {}", peer.token);

    let (dci, target) = mlx5.connect_dci(&pd, &DciInitAttr::new(&send_cq), &route, &peer.token)?;
    let outgoing = (write_at, send_at, size);
    let (mine, theirs) = if server { (1u8, 0u8) } else { (0, 1) };
    let start = Instant::now();
    for i in 0..args.iters {
        let incoming = (recv_at, written_at, size);
        if server {
            receive(&recv_cq, &srq, &region, incoming, (i, theirs))?;
            send(&dci, &send_cq, &target, &mut region, outgoing, peer.write_to, (i, mine))?;
        } else {
            send(&dci, &send_cq, &target, &mut region, outgoing, peer.write_to, (i, mine))?;
            receive(&recv_cq, &srq, &region, incoming, (i, theirs))?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    // Both sides are done once each has read the other's last answer.
    writeln!(stream, "done")?;
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let bytes = 2 * u64::from(args.size) * args.iters;
    println!(
        "{bytes} bytes in {secs:.2} seconds = {:.2} Mbit/sec",
        bytes as f64 * 8.0 / secs / 1e6
    );
    println!(
        "{} iters in {secs:.2} seconds = {:.2} usec/iter",
        args.iters,
        secs * 1e6 / args.iters as f64
    );
    Ok(())
}

/// The byte `j` of what side `side` sends (`b'S'`) or writes (`b'W'`) in iteration `i`.
fn pattern(i: u64, side: u8, kind: u8, j: usize) -> u8 {
    (i as usize).wrapping_mul(31).wrapping_add(j.wrapping_mul(7)) as u8 ^ side ^ kind
}

fn fill(buf: &mut [u8], (i, side): (u64, u8), kind: u8) {
    for (j, b) in buf.iter_mut().enumerate() {
        *b = pattern(i, side, kind, j);
    }
}

fn check(buf: &[u8], (i, side): (u64, u8), kind: u8, what: &str) -> Result<(), Error> {
    match buf.iter().enumerate().find(|&(j, &b)| b != pattern(i, side, kind, j)) {
        None => Ok(()),
        Some((j, &b)) => Err(format!(
            "iteration {i}: byte {j} of the peer's {what} is {b:#04x}, expected {:#04x}",
            pattern(i, side, kind, j)
        )
        .into()),
    }
}

fn post_recv(
    srq: &SharedReceiveQueue<'_>,
    region: &RemoteWritableRegion<'_>,
    at: usize,
    size: usize,
) -> Result<(), Error> {
    let sge = [region.sge(at..at + size)?];
    // SAFETY: the bytes are read only after this receive's completion, and the region
    // outlives the SRQ's use of them (it is dropped after the DCT).
    unsafe { srq.post_recv_wr(&mut RecvWr::new(RECV_WRID, &sge))? };
    Ok(())
}

/// Waits for the peer's SEND, checks it and the bytes it wrote, and posts the next receive.
fn receive(
    cq: &CompletionQueue<'_>,
    srq: &SharedReceiveQueue<'_>,
    region: &RemoteWritableRegion<'_>,
    (recv_at, written_at, size): (usize, usize, usize),
    from: (u64, u8),
) -> Result<(), Error> {
    wait_one(cq, RECV_WRID)?;
    let mut buf = vec![0; size];
    region.read(recv_at, &mut buf)?;
    check(&buf, from, b'S', "SEND")?;
    region.read(written_at, &mut buf)?;
    check(&buf, from, b'W', "RDMA WRITE")?;
    post_recv(srq, region, recv_at, size)
}

/// RDMA WRITEs a pattern into the peer's region and SENDs another, in one batch, and waits
/// for the SEND on `cq` (the DCI completes in order, so the WRITE is done too).
fn send(
    dci: &Dci<'_, Rts>,
    cq: &CompletionQueue<'_>,
    target: &DcPeer<'_>,
    region: &mut RemoteWritableRegion<'_>,
    (write_at, send_at, size): (usize, usize, usize),
    write_to: RemoteAddr,
    me: (u64, u8),
) -> Result<(), Error> {
    let mut buf = vec![0; size];
    fill(&mut buf, me, b'W');
    region.write(write_at, &buf)?;
    fill(&mut buf, me, b'S');
    region.write(send_at, &buf)?;
    let write_sge = [region.sge(write_at..write_at + size)?];
    let send_sge = [region.sge(send_at..send_at + size)?];
    let wrs = [
        DcWr::rdma_write(SEND_WRID, &write_sge, write_to, target.destination()),
        DcWr::send(SEND_WRID, &send_sge, target.destination()).flags(SendFlags::SIGNALED),
    ];
    // SAFETY: the region outlives the DCI; its outgoing bytes are written again only in the
    // next call, after this batch's signaled last WR has completed (below).
    unsafe { dci.post_send_wrs(&wrs)? };
    wait_one(cq, SEND_WRID)
}

/// Waits for the next completion of `cq`, which must be the successful one of `wr_id`.
fn wait_one(cq: &CompletionQueue<'_>, wr_id: u64) -> Result<(), Error> {
    let mut wcs = [WorkCompletion::EMPTY];
    let wc = &cq.wait_for(1, PEER_TIMEOUT, &mut wcs)?[0];
    if !wc.is_success() {
        return Err(format!("work request {} failed: {}", wc.wr_id(), wc.status()).into());
    }
    if wc.wr_id() != wr_id {
        return Err(format!("a completion of work request {}, not {wr_id}", wc.wr_id()).into());
    }
    Ok(())
}

/// Waits for one client, on IPv6 and IPv4 where the system allows both.
fn accept(port: u16) -> Result<TcpStream, Error> {
    let listener = TcpListener::bind(("::", port))
        .or_else(|_| TcpListener::bind(("0.0.0.0", port)))
        .map_err(|e| format!("couldn't listen on port {port}: {e}"))?;
    Ok(listener.accept()?.0)
}

/// The peer's line: `<token> <write addr hex> <rkey hex>`.
fn read_peer(reader: &mut impl BufRead) -> Result<Peer, Error> {
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let bad = || {
        format!("bad peer line {:?}: expected \"<dc1 token> <addr hex> <rkey hex>\"", line.trim())
    };
    let fields: Vec<&str> = line.split_whitespace().collect();
    let [token, addr, rkey] = fields[..] else { return Err(bad().into()) };
    let token = token.parse::<DcEndpoint>().map_err(|e| format!("the peer's token: {e}"))?;
    let addr = u64::from_str_radix(addr, 16).map_err(|_| bad())?;
    let rkey = u32::from_str_radix(rkey, 16).map_err(|_| bad())?;
    Ok(Peer { token, write_to: RemoteAddr { addr, rkey: RKey::new(rkey) } })
}
