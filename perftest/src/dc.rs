//! `-c DC`: the test over mlx5 Dynamically Connected QPs, as perftest's `-c DC`.
//!
//! The side that initiates (the client, both with -b) makes `-q` DCIs; the side the peer
//! initiates to (the server, both with -b) makes `-q` DCTs on one SRQ, which also holds the
//! receives of send_bw. Over the TCP channel each side sends, per QP, its DCT's token (or `-`)
//! and the memory the peer may reach; DCI `i` then addresses every WR to the peer's DCT `i`.
//! DC posts only through the extended WR API, so this is the raw tier: one region per DCI
//! that every WR names, one shared region for the receives.
//!
//! On a device that is not driven by libmlx5 the tool stops at `Mlx5Context::open`, before
//! the TCP channel opens, with its one-line `Unsupported` message.

use super::args::Args;
use super::{Error, Mode};

#[cfg(feature = "mlx5")]
pub use with_mlx5::run;

/// Without the `mlx5` feature there is no DC.
#[cfg(not(feature = "mlx5"))]
pub fn run(mode: Mode, _: &Args) -> Result<(), Error> {
    Err(format!(
        "-c DC needs the mlx5 feature: cargo build -p rdma-verbs-perftest --bin {}_bw --features mlx5",
        mode.name()
    )
    .into())
}

#[cfg(feature = "mlx5")]
mod with_mlx5 {

    use rdma_verbs::mlx5::*;
    use rdma_verbs::*;

    use super::super::events;
    use super::super::report::Report;
    use super::super::traffic::{self, Tier};
    use super::super::{
        agree_mtu, check_limits, each_size, local_region, local_route, nothing_lost, open_control,
        plan, with_peer, PeerMemory, Roles,
    };
    use super::{Args, Error, Mode};

    /// The DC test; see the module docs.
    pub fn run(mode: Mode, args: &Args) -> Result<(), Error> {
        let ctx = Context::open_or_first(args.ib_dev.as_deref())?;
        // The gate first: on a non-mlx5 device nothing else is created and no peer awaited.
        let mlx5 = Mlx5Context::open(&ctx)?;
        let (port, gid, mtu) = local_route(&ctx, args)?;
        check_limits(&ctx, mode, args)?;
        if args.outs.is_some() {
            eprintln!("note: --outs changes nothing with -c DC: a DCI READs as deep as the device's DC limit");
        }
        let mut control = open_control(mode, args, None)?;
        let mtu = agree_mtu(&mut control, mtu)?;

        let sizes = args.sizes();
        let max = args.largest_size();
        let server = args.server.is_none();
        let Roles { initiate, receive } = Roles::of(mode, args, server);
        let target = server || args.bidirectional;
        let qps = args.qps as usize;
        // Hop limit 255, as perftest's DC; RDMA READ depth: the device's DC limit.
        let route = DcRoute {
            sl: args.sl.unwrap_or(0),
            traffic_class: args.tclass.unwrap_or(0),
            ..DcRoute::new(args.ib_port, gid.map(|g| g.index), mtu)
        };

        let channel = events::channel(&ctx, args)?;
        let pd = ctx.alloc_pd()?;
        let rx_depth = if receive { args.qps * args.tx_depth } else { 0 };
        let cqe = args.qps * args.tx_depth + rx_depth.max(1);
        let cq = events::create_cq(&ctx, cqe, channel.as_ref(), args)?;
        let srq = pd.create_srq(rx_depth.max(1), 1)?;
        let peer_memory = PeerMemory::new(&pd, mode, max, args, None)?;
        let send_regions: Vec<MemoryRegion<'_>> =
            (0..qps).map(|_| local_region(&pd, max as usize, args)).collect::<Result<_>>()?;
        let recv_region = local_region(&pd, max as usize, args)?;
        let recv_sge = [recv_region.sge(..)?];

        let mut dcts = Vec::new();
        if target {
            let init = ToInitAttr { port: args.ib_port, pkey_index: 0, access: mode.peer_access() };
            let rtr = DctToRtrAttr::from_route(&route);
            for q in 0..qps {
                let key = DcKey::new(0xdc00 + q as u64);
                let dct = mlx5.create_dct(&pd, &DctInitAttr { srq: &srq, recv_cq: &cq, key })?;
                let dct = dct.into_init(&init)?;
                dcts.push(dct.into_rtr(&rtr)?);
            }
        }
        for _ in 0..rx_depth {
            // SAFETY: the receive region outlives the SRQ and is never touched by the program.
            unsafe { srq.post_recv_wr(&mut RecvWr::new(0, &recv_sge))? };
        }

        // Per QP: our DCT's token (or "-") and our memory; the peer's, in return.
        let me_gid = gid.map_or(Gid::ZERO, |g| g.gid);
        let mut peers = Vec::new();
        for q in 0..qps {
            let token = match dcts.get(q) {
                Some(d) => d.endpoint(me_gid, port.lid()).to_string(),
                None => "-".into(),
            };
            let mine = peer_memory.remote;
            control.send(&format!("dc {token} {:x} {:x}", mine.addr, mine.rkey.get()))?;
            let line = control.recv()?;
            peers.push(parse_peer(&line)?);
        }
        let mut dcis = Vec::new();
        let mut targets = Vec::new();
        let mut remotes = Vec::new();
        if initiate {
            let attr = DciInitAttr {
                cap: QpCapabilities {
                    max_send_wr: args.tx_depth,
                    max_recv_wr: 0,
                    ..QpCapabilities::default()
                },
                ..DciInitAttr::new(&cq)
            };
            for (token, remote) in &peers {
                let token = token.ok_or("the peer made no DCT to send to: is it the server?")?;
                let (dci, target) = mlx5.connect_dci(&pd, &attr, &route, &token)?;
                dcis.push(dci);
                targets.push(target);
                remotes.push(*remote);
            }
        }
        let qpns: Vec<Qpn> = dcis.iter().map(|d| d.qp_num()).collect();

        let report = Report {
            gbits: args.report_gbits,
            json: args.json,
            mode,
            tier: "raw, DC",
            qps: args.qps,
            // DC sends exist only as mlx5dv's extended builders.
            verbs_path: VerbsPath::Extended,
            reads: None,
            events: events::header_name(&ctx, args),
            devices: None,
        };
        let waits = events::Cq { cq: &cq, channel: channel.as_ref() };
        each_size(&sizes, &report, &mut control, |size, control| {
            let plan = &plan(mode, args, size, args.tx_depth);
            let sges: Vec<[Sge; 1]> = send_regions
                .iter()
                .map(|r| Ok([r.sge(..size as usize)?]))
                .collect::<Result<_>>()?;
            let lists = DcTier::lists(&targets, &sges, &remotes, mode, args.post_list);
            let mut tier = DcTier { dcis: &dcis, lists, srq: &srq, recv_sge: &recv_sge };
            let stats = nothing_lost(traffic::run(&mut tier, waits, &qpns, None, plan, control)?)?;
            with_peer(stats, args, control).map(Some)
        })
    }

    /// A peer's line: `dc <token or -> <addr hex> <rkey hex>`.
    fn parse_peer(line: &str) -> Result<(Option<DcEndpoint>, RemoteAddr), Error> {
        let bad = || {
            format!("the peer is out of step: expected \"dc <token> <addr> <rkey>\", got {line:?}")
        };
        let fields: Vec<&str> = line.split_whitespace().collect();
        let ["dc", token, addr, rkey] = fields[..] else { return Err(bad().into()) };
        let token = match token {
            "-" => None,
            t => Some(t.parse::<DcEndpoint>().map_err(|e| format!("the peer's DC token: {e}"))?),
        };
        let addr = u64::from_str_radix(addr, 16).map_err(|_| bad())?;
        let rkey = u32::from_str_radix(rkey, 16).map_err(|_| bad())?;
        Ok((token, RemoteAddr { addr, rkey: RKey::new(rkey) }))
    }

    /// The DC raw tier, as `Raw` for RC: DCI `q` posts lists of WRs, built once per size,
    /// over its region to the peer's DCT `q`; receives come back to the one SRQ.
    struct DcTier<'t, 'a> {
        dcis: &'t [Dci<'a, Rts>],
        lists: Vec<Vec<DcWr<'t>>>,
        srq: &'t SharedReceiveQueue<'a>,
        recv_sge: &'t [Sge; 1],
    }

    impl<'t> DcTier<'t, '_> {
        /// Per DCI, `post_list` WRs of `mode` to its peer's DCT.
        fn lists(
            targets: &'t [DcPeer<'_>],
            sges: &'t [[Sge; 1]],
            remotes: &[RemoteAddr],
            mode: Mode,
            post_list: u32,
        ) -> Vec<Vec<DcWr<'t>>> {
            (0..targets.len())
                .map(|q| {
                    let (dest, sges, remote) = (targets[q].destination(), &sges[q], remotes[q]);
                    (0..post_list)
                        .map(|i| match mode {
                            Mode::Write => DcWr::rdma_write(u64::from(i), sges, remote, dest),
                            Mode::Read => DcWr::rdma_read(u64::from(i), sges, remote, dest),
                            Mode::Send => DcWr::send(u64::from(i), sges, dest),
                        })
                        .collect()
                })
                .collect()
        }
    }

    impl Tier for DcTier<'_, '_> {
        fn post(&mut self, q: usize, n: u32, _size: u32, signal: bool) -> Result<(), Error> {
            let list = &mut self.lists[q][..n as usize];
            for (i, wr) in list.iter_mut().enumerate() {
                let last = i + 1 == n as usize;
                wr.flags = if signal && last { SendFlags::SIGNALED } else { SendFlags::empty() };
            }
            // SAFETY: the DCI's region and the peer's AH outlive the DCI (declared before
            // it); the program never touches the region while WRs are outstanding (the bytes
            // are meaningless here), and every wr_id is small.
            Ok(unsafe { self.dcis[q].post_send_wrs(list) }?)
        }

        fn complete(&mut self, _q: usize, wc: &mut WorkCompletion) -> Result<(), Error> {
            if wc.opcode() == WcOpcode::RECV {
                // SAFETY: as in `post`: the receive region is never touched by the program.
                unsafe { self.srq.post_recv_wr(&mut RecvWr::new(0, self.recv_sge))? };
            }
            Ok(())
        }
    }
}
