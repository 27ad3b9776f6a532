//! What the programs of this crate share: the workloads, their parameters and, for
//! rdma-verbs' two tiers, the set-up of two connected queue pairs. Each program runs one
//! workload N times between two RC queue pairs of the first device, connected to each
//! other, and prints how many polls found nothing. The workloads' loops are here, once; each
//! program says how its library posts and polls (the [`WriteStream`] and [`PingPong`]
//! verbs), as that library's documentation shows it.
//!
//! - `write`: N RDMA WRITEs of [`SIZE`] bytes, one in [`SIGNAL_EVERY`] signaled, at most
//!   [`DEPTH`] in flight (N a multiple of [`SIGNAL_EVERY`]).
//! - `pingpong`: N round trips: a SEND of [`SIZE`] bytes and its reply, each signaled.
//!
//! Usage: `PROGRAM write|pingpong N GID_INDEX` (the GID index of the port's RoCE v2 address).
use rdma_verbs::*;

/// Bytes of every message.
pub const SIZE: usize = 64;
/// The send queue's depth: WRs in flight at most.
pub const DEPTH: u32 = 128;
/// One WR in this many is signaled in the write stream.
pub const SIGNAL_EVERY: u64 = 16;

/// One of the two workloads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// The RDMA WRITE stream.
    Write,
    /// The SEND ping-pong.
    PingPong,
}

/// The command line: the workload, N and the GID index.
pub fn args() -> Result<(Workload, u64, u8), String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = || "usage: PROGRAM write|pingpong N GID_INDEX".to_string();
    let [workload, n, gid] = args.as_slice() else { return Err(usage()) };
    let workload = match workload.as_str() {
        "write" => Workload::Write,
        "pingpong" => Workload::PingPong,
        _ => return Err(usage()),
    };
    let n: u64 = n.parse().map_err(|_| usage())?;
    if workload == Workload::Write && !n.is_multiple_of(SIGNAL_EVERY) {
        return Err(format!("write: N must be a multiple of {SIGNAL_EVERY}"));
    }
    Ok((workload, n, gid.parse().map_err(|_| usage())?))
}

/// The errors of every program.
pub type Error = Box<dyn std::error::Error>;

/// The write stream's verbs, as one library spells them.
pub trait WriteStream {
    /// Posts RDMA WRITE number `i` of [`SIZE`] bytes, signaled or not, building its work
    /// request.
    fn post_write(&mut self, i: u64, signaled: bool) -> Result<(), Error>;
    /// Polls the send CQ once for up to `DEPTH / SIGNAL_EVERY` completions; returns how many
    /// it found (each a signaled WRITE, which ends the [`SIGNAL_EVERY`] before it).
    fn poll_writes(&mut self) -> Result<u64, Error>;
}

/// The ping-pong's verbs for side 0 or 1, as one library spells them.
pub trait PingPong {
    /// Posts a signaled SEND of [`SIZE`] bytes from `side`, building its work request.
    fn post_send(&mut self, side: usize, i: u64) -> Result<(), Error>;
    /// Posts a receive of [`SIZE`] bytes on `side`.
    fn post_recv(&mut self, side: usize) -> Result<(), Error>;
    /// Polls `side`'s CQ once for one completion: `None` when empty, else whether it was a
    /// receive.
    fn poll_one(&mut self, side: usize) -> Result<Option<bool>, Error>;
}

/// Runs the write stream of `n` WRITEs; returns the empty polls.
pub fn write_stream(n: u64, verbs: &mut impl WriteStream) -> Result<u64, Error> {
    let (mut posted, mut completed, mut empty) = (0u64, 0u64, 0u64);
    while completed < n {
        while posted < n && posted - completed < u64::from(DEPTH) {
            verbs.post_write(posted, (posted + 1).is_multiple_of(SIGNAL_EVERY))?;
            posted += 1;
        }
        let found = verbs.poll_writes()?;
        empty += u64::from(found == 0);
        completed += found * SIGNAL_EVERY;
    }
    Ok(empty)
}

/// Runs `n` round trips: side 0 sends, side 1 receives, posts its next receive and
/// replies, side 0 receives and posts its next receive. Returns the empty polls.
pub fn ping_pong(n: u64, verbs: &mut impl PingPong) -> Result<u64, Error> {
    let mut empty = 0u64;
    // Polls `side` until a receive completes, passing over the sends' completions.
    let mut wait_for_recv = |verbs: &mut _, side| -> Result<(), Error> {
        loop {
            match PingPong::poll_one(verbs, side)? {
                None => empty += 1,
                Some(true) => return Ok(()),
                Some(false) => {}
            }
        }
    };
    verbs.post_recv(0)?;
    verbs.post_recv(1)?;
    for i in 0..n {
        verbs.post_send(0, i)?;
        wait_for_recv(verbs, 1)?;
        verbs.post_recv(1)?;
        verbs.post_send(1, i)?;
        wait_for_recv(verbs, 0)?;
        verbs.post_recv(0)?;
    }
    Ok(empty)
}

/// Runs `workload` `n` times on `verbs` and prints its empty polls: each program's last step.
pub fn run(
    workload: Workload,
    n: u64,
    verbs: &mut (impl WriteStream + PingPong),
) -> Result<(), Error> {
    let empty_polls = match workload {
        Workload::Write => write_stream(n, verbs)?,
        Workload::PingPong => ping_pong(n, verbs)?,
    };
    println!("empty polls: {empty_polls}");
    Ok(())
}

/// rdma-verbs: two RC queue pairs of `pd`, each completing on its own CQ, connected to each
/// other; the second accepts RDMA WRITEs.
pub fn connected_pair<'a>(
    ctx: &'a Context,
    pd: &'a ProtectionDomain<'a>,
    cqs: [&'a CompletionQueue<'a>; 2],
) -> Result<[QueuePair<'a, Rts>; 2]> {
    let cap = QpCapabilities { max_send_wr: DEPTH, max_recv_wr: 1, ..Default::default() };
    let new_qp = |cq, access| -> Result<_> {
        pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(cq) })?
            .into_init(&ToInitAttr { access, ..ToInitAttr::default() })
    };
    let a = new_qp(cqs[0], AccessFlags::empty())?;
    let b = new_qp(cqs[1], AccessFlags::REMOTE_WRITE)?;
    let (port, gid) = (ctx.query_port(1)?, ctx.routable_gid(1)?);
    let psn = Psn::random();
    let rtr = |qpn| {
        let peer = Endpoint { lid: port.lid(), qpn, psn, gid: gid.gid };
        ToRtrAttr::to_endpoint(&peer, 1, Some(gid.index), port.active_mtu())
    };
    let (a_qpn, b_qpn) = (a.qp_num(), b.qp_num());
    let a = a.into_rtr(&rtr(b_qpn))?.into_rts(&ToRtsAttr::new(psn))?;
    let b = b.into_rtr(&rtr(a_qpn))?.into_rts(&ToRtsAttr::new(psn))?;
    Ok([a, b])
}
