//! The perftest-style tools on rdma-verbs: the bandwidth tools `write_bw`, `read_bw` and
//! `send_bw`, and the latency tools `write_lat`, `read_lat` and `send_lat` (each a binary of
//! this crate, `src/bin/`, that calls [`main`]). perftest's options (`args.rs`), its methods
//! (`traffic.rs` for bandwidth, `latency.rs` for latency) and its tables (`report.rs`), over
//! the safe buffer tier by default or the raw tier with `--raw`. The crate's `bench_report`
//! binary summarizes `scripts/bench-vs-perftest`'s runs against the C tools.
//!
//! ```text
//! cargo install --path perftest --features rdmacm   # (not published)
//! write_bw -d rxe0 -x 1                 # server
//! write_bw -d rxe0 -x 1 192.0.2.1       # client
//! ```
//!
//! In a bandwidth test the client initiates (the server too with -b); for send_bw the server
//! receives. The server of write_bw and read_bw, whose NIC does all the work, prints the
//! client's figures, as perftest's. Both sides first agree on the tool, sizes, iterations,
//! QPs, duration and direction over TCP, and meet at a barrier before and after each size.
//!
//! With `-R` (`--rdma_cm`, built with `--features rdmacm`), as perftest's `-R`, the QPs are
//! connected through rdma_cm (one connection per QP, on port `-p` + 1; the device is the one
//! with the address, so `-d`, `-x` and `-m` do not apply) and each side's buffer address and
//! rkey travel in the connection's private data; the TCP channel on `-p` still carries the
//! parameters and the barriers between sizes. See `cm.rs`.
//!
//! With `-c DC` (built with `--features mlx5`, on a ConnectX device), as perftest's `-c DC`,
//! the initiator's QPs are DCIs and the target's are DCTs on one SRQ; see `dc.rs`.
//!
//! A bandwidth tool given a list of devices (`-d mlx5_0,mlx5_1`, beyond perftest, whose `-d`
//! takes one) runs the test on each device at once, each on its own thread and TCP port (`-p`,
//! `-p` + 1, ...), device `k` meeting the peer's device `k`, and prints one line per size for
//! them together; see `devices.rs`.

mod args;
mod cm;
mod dc;
mod devices;
mod events;
mod exchange;
mod latency;
mod rate;
mod report;
mod traffic;

use std::process::ExitCode;
use std::time::Duration;

use rdma_verbs::*;

use args::{Args, Test};
use devices::Devices;
use exchange::Control;
use rate::Limit;
use report::{Report, Table};
use traffic::{Plan, Raw, Safe, Stats};

/// The error of every step: a message for the user.
pub type Error = Box<dyn std::error::Error>;

/// The safe tier allocates one buffer per outstanding WR: at most this many bytes in all.
const SAFE_TIER_BUDGET: u64 = 256 << 20;

/// Which operation the tool measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// SEND (and its receive).
    Send,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Write => "write",
            Mode::Read => "read",
            Mode::Send => "send",
        }
    }

    fn title(self) -> &'static str {
        match self {
            Mode::Write => "RDMA_Write",
            Mode::Read => "RDMA_Read",
            Mode::Send => "Send",
        }
    }

    /// perftest's default inline sizes of its latency tests (`DEF_INLINE_WRITE`,
    /// `DEF_INLINE_SEND_RC_UC`; on devices it does not know, rxe and siw among them, it
    /// inlines nothing). Its bw tests inline nothing unless -I is given.
    fn latency_inline(self) -> u32 {
        match self {
            Mode::Write => 220,
            Mode::Read => 0,
            Mode::Send => 236,
        }
    }

    /// What the peer may do to our memory.
    fn peer_access(self) -> AccessFlags {
        match self {
            Mode::Write => AccessFlags::REMOTE_WRITE,
            Mode::Read => AccessFlags::REMOTE_READ,
            Mode::Send => AccessFlags::empty(),
        }
    }

    fn op(self, remote: RemoteAddr) -> SendOp {
        match self {
            Mode::Write => SendOp::RdmaWrite(remote),
            Mode::Read => SendOp::RdmaRead(remote),
            Mode::Send => SendOp::Send,
        }
    }

    fn work_request(self, wr_id: u64, sge: &[Sge; 1], remote: RemoteAddr) -> SendWr<'_> {
        match self {
            Mode::Write => SendWr::rdma_write(wr_id, sge, remote),
            Mode::Read => SendWr::rdma_read(wr_id, sge, remote),
            Mode::Send => SendWr::send(wr_id, sge),
        }
    }
}

impl Mode {
    fn from_name(name: &str) -> Option<Mode> {
        [Mode::Write, Mode::Read, Mode::Send].into_iter().find(|m| m.name() == name)
    }
}

/// Runs the tool `tool` (`write_bw`, `read_bw`, `send_bw`, `write_lat`, `read_lat` or
/// `send_lat`); prints errors as `<tool>: <message>` and returns 1 on failure, 2 for a
/// refused option.
pub fn main(tool: &str) -> ExitCode {
    let parts = tool.split_once('_');
    let (Some(mode), Some(test)) = (
        parts.and_then(|(m, _)| Mode::from_name(m)),
        parts.and_then(|(_, t)| Test::from_suffix(t)),
    ) else {
        eprintln!("unknown perftest tool {tool:?}");
        return ExitCode::FAILURE;
    };
    let args = match args::perftest_argv(test, std::env::args()) {
        Ok(argv) => args::parse(test, mode, argv),
        Err(e) => {
            eprintln!("{tool}: {e}");
            return ExitCode::from(2);
        }
    };
    match run(mode, &args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{tool}: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(mode: Mode, args: &Args) -> Result<(), Error> {
    args.check(mode)?;
    match args.devices() {
        Some(names) => devices::run(mode, args, names),
        None => run_device(mode, args, None),
    }
}

/// The test on one device: `-d`'s, or with a list of devices, the one of `share`.
fn run_device(mode: Mode, args: &Args, share: Option<(&Devices, usize)>) -> Result<(), Error> {
    if args.rdma_cm {
        return cm::run(mode, args);
    }
    if args.is_dc() {
        return dc::run(mode, args);
    }
    let ctx = Context::open_or_first(args.ib_dev.as_deref())?;
    let (port, gid, mtu) = local_route(&ctx, args)?;
    // Refuse what the device cannot do before waiting for the peer.
    check_limits(&ctx, mode, args)?;
    let reads = read_depth(&ctx, mode, args)?;
    let mut control = open_control(mode, args, share)?;
    // Each side's responder accepts no more READs than its own figure: the smaller of the two.
    let reads = control.smaller_of("reads", reads)?;
    let mtu = agree_mtu(&mut control, mtu)?;
    let limit = Limit::of(args, mode)?;
    let mut connect = ByHand { port: args.ib_port, lid: port.lid(), gid, mtu, reads, args, limit };
    run_on(Side { mode, args, ctx: &ctx, control: &mut control, connector: &mut connect, share })
}

/// Our port, the GID we send from (`-x`, or the routable one on Ethernet) and the path MTU
/// (`-m`, or the port's active MTU); refuses `--tclass` where no GID, and so no GRH, is sent.
pub fn local_route(ctx: &Context, args: &Args) -> Result<(PortAttr, Option<GidEntry>, Mtu), Error> {
    let port = ctx.query_port(args.ib_port)?;
    let gid = ctx.source_gid(args.ib_port, args.gid_index)?;
    if args.tclass.is_some() && gid.is_none() {
        return Err(
            "--tclass sets the GRH's traffic class: on InfiniBand give -x, a GID index".into()
        );
    }
    let mtu = match args.mtu {
        Some(bytes) => Mtu::from_bytes(bytes)
            .ok_or_else(|| format!("invalid MTU {bytes}: use 256, 512, 1024, 2048 or 4096"))?,
        None => port.active_mtu(),
    };
    Ok((port, gid, mtu))
}

/// The path MTU both sides use: the smaller of theirs, as perftest's (ports of different
/// MTUs, or `-m` on one side only).
pub fn agree_mtu(control: &mut Control, mtu: Mtu) -> Result<Mtu, Error> {
    let ours = mtu.bytes().ok_or("the port reports an MTU this build does not know")?;
    let both = control.smaller_of("mtu", ours)?;
    Ok(Mtu::from_bytes(both).ok_or_else(|| format!("the peer's MTU {both} is not 256-4096"))?)
}

/// The RDMA READs each QP keeps outstanding, perftest's `-o`: for read tests `-o`, by
/// default the device's limit (`max_qp_rd_atom`, and `max_qp_init_rd_atom` for the side that
/// READs), and at most that limit, as perftest caps it, with its note. Other tests post no
/// READ: 1, the verbs' default.
pub fn read_depth(ctx: &Context, mode: Mode, args: &Args) -> Result<u8, Error> {
    if mode != Mode::Read {
        if args.outs.is_some() {
            eprintln!("note: --outs changes nothing here: only RDMA READs are outstanding reads");
        }
        return Ok(1);
    }
    let dev = ctx.query_device()?;
    let limit = dev.max_qp_rd_atom().min(dev.max_qp_init_rd_atom()).clamp(0, 255) as u8;
    if limit == 0 {
        return Err(format!("{} allows no outstanding RDMA READ per QP", ctx.name()).into());
    }
    Ok(match args.outs {
        Some(0) | None => limit,
        Some(n) if n > u32::from(limit) => {
            eprintln!(" Number of outstanding reads is above max = {limit}");
            eprintln!(" Changing to that max value");
            limit
        }
        Some(n) => n as u8,
    })
}

/// Connects each QP to its peer (receives already posted), exchanging the memory the peer
/// may reach.
pub trait Connect {
    /// Connects QP number `i`, sending `mine`; returns it in RTS with the peer's memory.
    fn connect<'q>(
        &mut self,
        i: usize,
        qp: QueuePair<'q, Init>,
        mine: RemoteAddr,
        control: &mut Control,
    ) -> Result<(QueuePair<'q, Rts>, RemoteAddr), Error>;
}

/// The QPs connected by hand: endpoints swapped over the TCP channel, then INIT → RTR → RTS.
struct ByHand<'a> {
    port: u8,
    lid: Lid,
    gid: Option<GidEntry>,
    mtu: Mtu,
    /// RDMA READs outstanding each way ([`read_depth`], agreed with the peer).
    reads: u8,
    /// -S, --tclass, -u and --retry_count ([`Args::set_path`]).
    args: &'a Args,
    /// --rate_limit: the static rate (HW) or packet pacing (PP) each QP is given.
    limit: Option<Limit>,
}

impl Connect for ByHand<'_> {
    fn connect<'q>(
        &mut self,
        _: usize,
        qp: QueuePair<'q, Init>,
        mine: RemoteAddr,
        control: &mut Control,
    ) -> Result<(QueuePair<'q, Rts>, RemoteAddr), Error> {
        let psn = Psn::random();
        let me = Endpoint {
            lid: self.lid,
            qpn: qp.qp_num(),
            psn,
            gid: self.gid.map_or(Gid::ZERO, |g| g.gid),
        };
        let (peer, remote) = control.swap_endpoint(&me, mine)?;
        let mut rtr = ToRtrAttr {
            max_dest_rd_atomic: self.reads,
            // perftest's RNR timer, 0.64 ms: the peer resends forever (below), so each RNR
            // NAK should cost it little, not the crate's default 491.52 ms.
            min_rnr_timer: RnrTimer::new(12)?,
            ..ToRtrAttr::to_endpoint(&peer, self.port, self.gid.map(|g| g.index), self.mtu)
        };
        let mut rts = ToRtsAttr {
            // perftest's RNR retry: forever, so a receiver that lags behind under load is
            // waited for instead of failing the run (the traffic loop's STALL_LIMIT bounds
            // the wait).
            rnr_retry: RnrRetry::INFINITE,
            max_rd_atomic: self.reads,
            ..ToRtsAttr::new(psn)
        };
        self.args.set_path(&mut rtr, &mut rts)?;
        if let Some(Limit::Static(rate)) = self.limit {
            rtr.av.static_rate = rate;
        }
        let qp = qp.into_rtr(&rtr)?.into_rts(&rts)?;
        if let Some(Limit::Paced { kbps }) = self.limit {
            qp.set_rate_limit(kbps)?;
        }
        Ok((qp, remote))
    }
}

/// Sizes, depths and completion vectors the device cannot take, refused before any QP or
/// MR exists.
pub fn check_limits(ctx: &Context, mode: Mode, args: &Args) -> Result<(), Error> {
    let max = args.largest_size();
    let vectors = ctx.num_comp_vectors();
    if let Some(vector) = args.comp_vector.filter(|&v| v >= vectors) {
        return Err(
            format!("-X {vector}: {} has completion vectors 0..{vectors}", ctx.name()).into()
        );
    }
    let dev = ctx.query_device()?;
    if u64::from(max) > dev.max_mr_size() {
        return Err(
            format!("-s {max} exceeds {}'s max_mr_size {}", ctx.name(), dev.max_mr_size()).into()
        );
    }
    // The receive depth only where it is used: send_bw's RC QPs (DC's SRQ holds -q × -t).
    let receives = mode == Mode::Send && args.test == Test::Bandwidth && !args.is_dc();
    let rx = receives.then(|| args.rx_depth());
    let depths = [("-t", Some(args.tx_depth)), ("-r", rx)];
    for (option, depth) in depths.into_iter().filter_map(|(o, d)| Some((o, d?))) {
        if i64::from(depth) > i64::from(dev.max_qp_wr()) {
            return Err(format!(
                "{option} {depth} exceeds {}'s max_qp_wr {}",
                ctx.name(),
                dev.max_qp_wr()
            )
            .into());
        }
    }
    if let Some(Limit::Paced { kbps }) = Limit::of(args, mode)? {
        let caps = ctx.packet_pacing_caps()?.ok_or_else(|| {
            format!(
                "--rate_limit_type=PP: {} does not pace QPs (no packet_pacing_caps)",
                ctx.name()
            )
        })?;
        if !caps.supports::<Rc>() {
            return Err(format!("--rate_limit_type=PP: {} paces no RC QPs", ctx.name()).into());
        }
        let range = caps.qp_rate_limit_min..=caps.qp_rate_limit_max;
        if !range.contains(&kbps) {
            return Err(format!(
                "--rate_limit: {kbps} kbps is outside {}'s packet pacing range, {} to {} kbps",
                ctx.name(),
                range.start(),
                range.end()
            )
            .into());
        }
    }
    if args.use_dm {
        // The peer's memory and each QP's two raw regions, as `bandwidth` lays them out.
        let needed = (2 * u64::from(args.qps) + 1) * u64::from(max);
        let have = ctx.max_dm_size()?;
        if have == 0 {
            return Err(
                format!("--use_dm: {} has no device memory (max_dm_size 0)", ctx.name()).into()
            );
        }
        if needed > have {
            return Err(format!(
                "--use_dm needs {needed} bytes of device memory ((2 × -q + 1) × -s), more than \
                 {}'s max_dm_size {have}",
                ctx.name()
            )
            .into());
        }
    }
    Ok(())
}

/// The TCP channel to the peer, with the parameters both sides must share agreed. With a list
/// of devices (`share`), the first device's channel agrees on them first; the others open
/// theirs only then (the server listens on all of them from the start, see `devices::run`).
pub fn open_control(
    mode: Mode,
    args: &Args,
    share: Option<(&Devices, usize)>,
) -> Result<Control, Error> {
    let max = args.largest_size();
    if let Some((devices, index @ 1..)) = share {
        devices.first_agreed(index)?;
    }
    let mut control = match (&args.server, share) {
        (Some(host), _) => Control::connect(host, args.port)?,
        (None, Some((devices, index))) => devices.accept(index)?,
        (None, None) => Control::accept(args.port)?,
    };
    control.agree(&[
        ("mode", mode.name().into()),
        ("test", args.test.suffix().into()),
        ("size", if args.all { format!("all..{max}") } else { max.to_string() }),
        ("iterations", args.duration.map_or(args.iters.to_string(), |d| format!("{d}s"))),
        ("qps", args.qps.to_string()),
        ("bidirectional", args.bidirectional.to_string()),
        ("tier", args.tier().into()),
        ("rdma_cm", args.rdma_cm.to_string()),
        ("connection", args.connection.clone()),
        ("devices", share.map_or(1, |(devices, _)| devices.names().len()).to_string()),
    ])?;
    if let Some((devices, 0)) = share {
        devices.agreed();
    }
    Ok(control)
}

/// One side of a test, up to its QPs: the test, its arguments, the device, the TCP channel to
/// the peer and the way the QPs connect.
struct Side<'a, C> {
    mode: Mode,
    args: &'a Args,
    ctx: &'a Context,
    control: &'a mut Control,
    connector: &'a mut C,
    /// With a list of devices, what their threads share and this device's place.
    share: Option<(&'a Devices, usize)>,
}

/// The test of `side`: bandwidth or latency.
fn run_on(side: Side<'_, impl Connect>) -> Result<(), Error> {
    match side.args.test {
        Test::Bandwidth => run_bw(side),
        Test::Latency => latency::run(side),
    }
}

/// What one side of a bandwidth test does.
#[derive(Clone, Copy)]
pub struct Roles {
    /// It posts the operation: the client, both sides with -b.
    pub initiate: bool,
    /// It receives SENDs: send_bw's server, both sides with -b.
    pub receive: bool,
}

impl Roles {
    /// The roles of the server (`server`) or the client of `mode`.
    pub fn of(mode: Mode, args: &Args, server: bool) -> Roles {
        Roles {
            initiate: !server || args.bidirectional,
            receive: mode == Mode::Send && (server || args.bidirectional),
        }
    }

    /// Neither: the NIC does all the work (write_bw's and read_bw's server).
    pub fn passive(self) -> bool {
        !self.initiate && !self.receive
    }
}

/// A bandwidth test on `side`.
fn run_bw(side: Side<'_, impl Connect>) -> Result<(), Error> {
    let Side { mode, args, ctx, control, connector, share } = side;
    let sizes = args.sizes();
    let max = args.largest_size();
    let receive = Roles::of(mode, args, args.server.is_none()).receive;

    // Depths, and for the safe tier its buffers: one per outstanding WR, within the budget.
    let qps = args.qps;
    let want_rx = if receive { args.rx_depth() } else { 0 };
    let wanted = u64::from(qps) * u64::from(args.tx_depth + want_rx);
    let fits = (SAFE_TIER_BUDGET / u64::from(max))
        .min(wanted)
        .max(u64::from(qps) * u64::from(args.post_list + 1));
    let (depth, rx_depth) = if args.raw || fits == wanted {
        (args.tx_depth, want_rx)
    } else {
        let scale = |d: u32| ((u64::from(d) * fits / wanted) as u32).max(1);
        let depth = scale(args.tx_depth).max(args.post_list);
        eprintln!(
            "{}_bw: the safe tier holds one {max}-byte buffer per outstanding WR: within {} MiB that \
             allows tx depth {depth} (not {}); --raw or --max-size restore perftest's depth",
            mode.name(),
            SAFE_TIER_BUDGET >> 20,
            args.tx_depth
        );
        (depth, if receive { scale(want_rx) } else { 0 })
    };

    let channel = events::channel(ctx, args)?;
    let pd = ctx.alloc_pd()?;
    // Room for every WR the QPs may have outstanding (their capacities, not the run depth).
    let cq =
        events::create_cq(ctx, qps * (args.tx_depth + rx_depth.max(1)), channel.as_ref(), args)?;
    let waits = events::Cq { cq: &cq, channel: channel.as_ref() };
    // --use_dm: one device memory holds the peer's memory and each raw region, `max` bytes
    // each (check_limits saw that it fits).
    let dm = match args.use_dm {
        true => Some(ctx.alloc_dm((2 * qps as usize + 1) * max as usize, 0)?),
        false => None,
    };
    let peer_memory = PeerMemory::new(&pd, mode, max, args, dm.as_ref())?;
    let mine = peer_memory.remote;
    // Our side's memory: the safe tier's pool, or the raw tier's one region per QP.
    let pool_len = if args.raw {
        max as usize
    } else {
        (u64::from(qps) * u64::from(depth + rx_depth)) as usize * max as usize
    };
    let pool = BufferPool::new(local_region(&pd, pool_len, args)?, max as usize)?;
    let raw_regions: Vec<RawRegion<'_>> = if args.raw {
        let access = AccessFlags::LOCAL_WRITE | args.relaxed();
        (1..=2 * qps as usize)
            .map(|i| match &dm {
                Some(dm) => pd
                    .register_dm(dm, i * max as usize..(i + 1) * max as usize, access)
                    .map(RawRegion::Device),
                None => local_region(&pd, max as usize, args).map(RawRegion::Host),
            })
            .collect::<Result<_>>()?
    } else {
        Vec::new()
    };
    let recv_sges: Vec<[Sge; 1]> =
        raw_regions.iter().skip(qps as usize).map(|r| Ok([r.sge(..)?])).collect::<Result<_>>()?;

    // perftest's bw tests inline nothing by default.
    let inline = args.inline_size.unwrap_or(0);
    let cap = QpCapabilities {
        max_send_wr: args.tx_depth,
        max_recv_wr: rx_depth.max(1),
        max_inline_data: inline,
        ..Default::default()
    };
    let init = ToInitAttr { port: args.ib_port, access: mode.peer_access(), ..Default::default() };
    let verbs_path = args.verbs_path();
    let mut ready = Vec::new();
    for _ in 0..qps {
        let qp = pd.create_rc_qp(&QpInitAttr { cap, verbs_path, ..QpInitAttr::new(&cq) })?;
        let qp = qp.into_init(&init)?;
        for _ in 0..rx_depth {
            post_first_receive(&qp, &pool, recv_sges.get(ready.len()), args.raw)?;
        }
        ready.push(qp);
    }
    let mut qps_rts = Vec::new();
    let mut remotes = Vec::new();
    for (i, qp) in ready.into_iter().enumerate() {
        let (qp, remote) = connector.connect(i, qp, mine, control)?;
        qps_rts.push(qp);
        remotes.push(remote);
    }
    let qpns: Vec<Qpn> = qps_rts.iter().map(|qp| qp.qp_num()).collect();
    // The raw tier inlines up to what was asked, as perftest's, not up to what the provider
    // rounded it to.
    let max_inline = qps_rts[0].caps().max_inline_data.min(inline);

    let tier = if args.raw { "raw" } else { "safe" };
    let verbs_path = qps_rts[0].verbs_path();
    // What the QP was given, as the connection (by hand or rdma_cm) settled it.
    let reads = match mode {
        Mode::Read => Some(qps_rts[0].query()?.max_rd_atomic),
        _ => None,
    };
    let events = events::header_name(ctx, args);
    let report = Report {
        gbits: args.report_gbits,
        json: args.json,
        mode,
        tier,
        qps,
        verbs_path,
        reads,
        events,
        devices: share.map(|(devices, _)| devices.names().join(", ")),
    };
    let table: Box<dyn Table<Line = Stats>> = match share {
        Some((devices, index)) => Box::new(devices::Share { devices, index, report }),
        None => Box::new(report),
    };
    each_size(&sizes, &*table, control, |size, control| {
        if let Some((devices, _)) = share {
            devices.start_together()?;
        }
        let plan = &plan(mode, args, size, depth);
        let stats = if args.raw {
            let send_sges: Vec<[Sge; 1]> = raw_regions
                .iter()
                .take(qps as usize)
                .map(|r| Ok([r.sge(..size as usize)?]))
                .collect::<Result<_>>()?;
            let inline = size <= max_inline && mode != Mode::Read;
            let mut tier =
                Raw::new(&qps_rts, &send_sges, &recv_sges, mode, &remotes, args.post_list, inline);
            traffic::run(&mut tier, waits, &qpns, Some(&qpns), plan, control)?
        } else {
            let lists =
                (0..qps).map(|_| SendBufferList::with_capacity(args.post_list as usize)).collect();
            let mut tier = Safe {
                qps: &qps_rts,
                pool: &pool,
                lists,
                ops: remotes.iter().map(|&r| mode.op(r)).collect(),
            };
            traffic::run(&mut tier, waits, &qpns, Some(&qpns), plan, control)?
        };
        with_peer(nothing_lost(stats)?, args, control).map(Some)
    })
}

/// This side's plan for one size of a bandwidth test, `tx_depth` WRs deep.
pub fn plan(mode: Mode, args: &Args, size: u32, tx_depth: u32) -> Plan {
    let server = args.server.is_none();
    let Roles { initiate, receive } = Roles::of(mode, args, server);
    Plan {
        size,
        iters: args.duration.is_none().then_some(args.iters),
        duration: args.duration.map(Duration::from_secs),
        tx_depth,
        post_list: args.post_list,
        cq_mod: args.cq_mod().min(tx_depth),
        initiate,
        receive,
        report_to_peer: Roles::of(mode, args, !server).passive(),
        // (Args::check saw the limit through.)
        pace: Limit::of(args, mode).ok().flatten().and_then(|limit| limit.pace(size)),
    }
}

/// A bandwidth run's figures, once every posted WR is known to have completed.
pub fn nothing_lost(stats: Stats) -> Result<Stats, Error> {
    if stats.posted != stats.completed {
        return Err(format!(
            "{} WRs posted but {} completed: work was lost",
            stats.posted, stats.completed
        )
        .into());
    }
    Ok(stats)
}

/// With -b, `stats` with the peer's figures, swapped over `control`, for the report's sum of
/// both directions; else `stats`.
pub fn with_peer(mut stats: Stats, args: &Args, control: &mut Control) -> Result<Stats, Error> {
    if args.bidirectional {
        control.send(&stats.to_line())?;
        stats.peer = Some(Box::new(Stats::from_line(&control.recv()?)?));
    }
    Ok(stats)
}

/// The per-size loop of perftest: a barrier, the run of one size (`run`, which gives the
/// figures this side prints, if any), a barrier, and the table's line; its header and footer
/// around it.
pub fn each_size<T: Table + ?Sized>(
    sizes: &[u32],
    table: &T,
    control: &mut Control,
    mut run: impl FnMut(u32, &mut Control) -> Result<Option<T::Line>, Error>,
) -> Result<(), Error> {
    table.header();
    for &size in sizes {
        control.barrier(&format!("size {size}"))?;
        let line = run(size, control)?;
        control.barrier(&format!("done {size}"))?;
        if let Some(line) = line {
            table.line(size, &line);
        }
    }
    table.footer();
    Ok(())
}

/// The raw tier's region of a QP: host memory, or the device's with --use_dm.
enum RawRegion<'a> {
    Host(MemoryRegion<'a>),
    Device(DeviceMemoryRegion<'a>),
}

impl RawRegion<'_> {
    fn sge(&self, range: impl std::ops::RangeBounds<usize>) -> Result<Sge> {
        match self {
            RawRegion::Host(r) => r.sge(range),
            RawRegion::Device(r) => r.sge(range),
        }
    }
}

/// What the peer reaches: a target for its writes, a source for its reads (none for SEND).
pub struct PeerMemory<'a> {
    /// write_bw's and write_lat's target (write_lat polls its last byte).
    pub write_target: Option<RemoteWritableRegion<'a>>,
    _read_source: Option<MemoryRegion<'a>>,
    /// Both of them in device memory, with --use_dm.
    _device: Option<DeviceMemoryRegion<'a>>,
    /// Its address and rkey, for the peer (zero for SEND).
    pub remote: RemoteAddr,
}

impl<'a> PeerMemory<'a> {
    /// `max` bytes on `pd` for `mode`, with relaxed ordering unless `args` turn it off: host
    /// memory (on huge pages with --use_hugepages), or the first `max` bytes of `dm`.
    pub fn new(
        pd: &'a ProtectionDomain<'a>,
        mode: Mode,
        max: u32,
        args: &Args,
        dm: Option<&'a DeviceMemory<'a>>,
    ) -> Result<Self, Error> {
        let extra = args.relaxed();
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | extra;
        if let (Some(dm), Mode::Write | Mode::Read) = (dm, mode) {
            let access = match mode {
                Mode::Read => AccessFlags::REMOTE_READ | extra,
                _ => access,
            };
            let region = pd.register_dm(dm, ..max as usize, access)?;
            let remote = region.remote(..)?;
            return Ok(PeerMemory {
                write_target: None,
                _read_source: None,
                _device: Some(region),
                remote,
            });
        }
        let write_target = match (mode, args.use_hugepages) {
            (Mode::Write, true) => {
                Some(pd.register_remote_writable(huge_pages(max as usize)?, access)?)
            }
            (Mode::Write, false) => Some(pd.register_remote_writable(max as usize, access)?),
            _ => None,
        };
        let read_source = match mode {
            Mode::Read => {
                Some(host_region(pd, max as usize, AccessFlags::REMOTE_READ | extra, args)?)
            }
            _ => None,
        };
        let remote = match (&write_target, &read_source) {
            (Some(t), _) => t.remote(..)?,
            (_, Some(s)) => s.remote(..)?,
            _ => RemoteAddr { addr: 0, rkey: RKey::new(0) },
        };
        Ok(PeerMemory { write_target, _read_source: read_source, _device: None, remote })
    }
}

/// `len` bytes of host memory on `pd` with `access`: pages the crate allocates, or with
/// --use_hugepages, as perftest's, 2 MiB huge pages (whole pages: the region may be longer).
pub fn host_region<'a>(
    pd: &'a ProtectionDomain<'a>,
    len: usize,
    access: AccessFlags,
    args: &Args,
) -> Result<MemoryRegion<'a>> {
    match args.use_hugepages {
        true => pd.register(huge_pages(len)?, access),
        false => pd.register(len, access),
    }
}

/// [`host_region`] for this side's own buffers: local writes, relaxed ordering unless
/// --disable_pcie_relaxed.
pub fn local_region<'a>(
    pd: &'a ProtectionDomain<'a>,
    len: usize,
    args: &Args,
) -> Result<MemoryRegion<'a>> {
    host_region(pd, len, AccessFlags::LOCAL_WRITE | args.relaxed(), args)
}

/// At least `len` bytes of 2 MiB huge pages.
fn huge_pages(len: usize) -> Result<HugePages> {
    HugePages::new(len, HugePageSize::Size2MiB)
}

/// Posts one of the receives a QP starts with: a pool buffer, or the QP's raw region.
pub fn post_first_receive<'a>(
    qp: &QueuePair<'a, Init>,
    pool: &'a BufferPool<'a>,
    raw_sge: Option<&[Sge; 1]>,
    raw: bool,
) -> Result<(), Error> {
    if raw {
        let sge = raw_sge.ok_or("no receive region")?;
        // SAFETY: the receive region outlives the QP and is never touched by the program.
        unsafe { qp.post_recv_wr(&mut RecvWr::new(0, sge))? };
    } else {
        let buf = pool.take().ok_or("the buffer pool ran dry")?;
        qp.post_recv_buffer(buf)?;
    }
    Ok(())
}
