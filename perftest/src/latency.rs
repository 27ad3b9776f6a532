//! The latency tools' method, perftest's (`run_iter_lat_write`, `run_iter_lat_send`,
//! `run_iter_lat`): one WR at a time, every WR signaled and its completion reaped before the
//! next post, the time of each post taken.
//!
//! - write_lat: a ping-pong of RDMA WRITEs. Each side writes `-s` bytes into the peer's
//!   buffer, the last of them a count, and then waits until the last byte of its own buffer
//!   shows the peer's next count; the server writes first.
//! - send_lat: a ping-pong of SENDs; the client sends first.
//! - read_lat: the client READs `-s` bytes of the server's buffer, one READ at a time; the
//!   server only waits, on TCP, and prints no table.
//!
//! With -e (read_lat and send_lat, as perftest's), each wait for a completion sleeps until the
//! CQ's event first, re-arms the CQ and then polls it, as perftest's (`events.rs`).
//!
//! The samples are the `n - 1` times from one post to the next (`report.rs` says what is made
//! of them). A -D run ends when the side that posts first finds its time up between two round
//! trips: it tells the peer over TCP how many it posted, so that nothing is left in flight.

use std::sync::atomic::{compiler_fence, Ordering};
use std::time::{Duration, Instant};

use rdma_verbs::*;

use super::events::{self, Cq};
use super::exchange::Control;
use super::report::{Latency, LatencyTable};
use super::traffic::{self, check_wc, STALL_LIMIT};
use super::{each_size, local_region, post_first_receive, Connect, Error, Mode, PeerMemory, Side};

/// send_lat's receives: at most one message is in flight towards a side, whose receive is
/// posted again before it answers; one more to spare.
const RX_DEPTH: u32 = 2;

/// How often a wait longer than this looks at the TCP channel (-D: has the peer stopped?).
const CONTROL_EVERY: Duration = Duration::from_millis(1);

/// The latency test on `side`.
pub fn run(side: Side<'_, impl Connect>) -> Result<(), Error> {
    let Side { mode, args, ctx, control, connector, .. } = side;
    let sizes = args.sizes();
    let max = args.largest_size();
    let server = args.server.is_none();
    let measures = mode != Mode::Read || !server;
    let rx = if mode == Mode::Send { RX_DEPTH } else { 0 };

    // With -e, each CQ has its own channel, as perftest's.
    let (send_channel, recv_channel) = (events::channel(ctx, args)?, events::channel(ctx, args)?);
    let pd = ctx.alloc_pd()?;
    let send_cq = events::create_cq(ctx, 1, send_channel.as_ref(), args)?;
    let recv_cq = events::create_cq(ctx, rx.max(1), recv_channel.as_ref(), args)?;
    let send = Cq { cq: &send_cq, channel: send_channel.as_ref() };
    let peer_memory = PeerMemory::new(&pd, mode, max, args, None)?;
    // The safe tier's pool: one buffer to send from (or READ into) and send_lat's receives;
    // the raw tier's regions: one to send from, one that every receive names.
    let chunks = if args.raw { 1 } else { 1 + rx as usize };
    let pool = BufferPool::new(local_region(&pd, chunks * max as usize, args)?, max as usize)?;
    let mut raw_send = match args.raw {
        true => Some(local_region(&pd, max as usize, args)?),
        false => None,
    };
    let raw_recv = match args.raw && rx > 0 {
        true => Some(local_region(&pd, max as usize, args)?),
        false => None,
    };
    let recv_sge = raw_recv.as_ref().map(|r| Ok::<_, Error>([r.sge(..)?])).transpose()?;

    let inline = args.inline_size.unwrap_or(mode.latency_inline());
    let cap = QpCapabilities {
        max_send_wr: 1,
        max_recv_wr: rx.max(1),
        max_inline_data: inline,
        ..Default::default()
    };
    let attr = QpInitAttr {
        cap,
        recv_cq: &recv_cq,
        verbs_path: args.verbs_path(),
        ..QpInitAttr::new(&send_cq)
    };
    let qp = pd.create_rc_qp(&attr)?;
    let init = ToInitAttr { port: args.ib_port, access: mode.peer_access(), ..Default::default() };
    let qp = qp.into_init(&init)?;
    for _ in 0..rx {
        post_first_receive(&qp, &pool, recv_sge.as_ref(), args.raw)?;
    }
    let (qp, remote) = connector.connect(0, qp, peer_memory.remote, control)?;
    // The raw tier inlines up to what was asked, as perftest's, not up to what the provider
    // rounded it to.
    let max_inline = qp.caps().max_inline_data.min(inline);

    let table = LatencyTable {
        json: args.json,
        mode,
        tier: if args.raw { "raw" } else { "safe" },
        verbs_path: qp.verbs_path(),
        reads: match mode {
            Mode::Read => Some(qp.query()?.max_rd_atomic),
            _ => None,
        },
        events: events::header_name(ctx, args),
        duration: args.duration.is_some(),
        measures,
        histogram: args.histogram,
        unsorted: args.unsorted,
    };
    let incoming = match mode {
        Mode::Write => Incoming::Byte(peer_memory.write_target.as_ref().expect("a WRITE target")),
        Mode::Send => Incoming::Recv(Cq { cq: &recv_cq, channel: recv_channel.as_ref() }),
        Mode::Read => Incoming::Nothing,
    };
    each_size(&sizes, &table, control, |size, control| {
        if !measures {
            traffic::wait_for_initiator(control)?;
            return Ok(None);
        }
        let plan = Plan {
            size,
            iters: args.duration.is_none().then_some(args.iters),
            duration: args.duration.map(Duration::from_secs),
            // perftest's order: write_lat's server writes first, send_lat's client sends first.
            leads: match mode {
                Mode::Write => server,
                Mode::Send => !server,
                Mode::Read => true,
            },
            gap: Duration::from_micros(args.latency_gap),
        };
        let latency = match raw_send.as_mut() {
            Some(region) => {
                let inline = size <= max_inline && mode != Mode::Read;
                let mut tier = RawPost {
                    qp: &qp,
                    sge: [region.sge(..size as usize)?],
                    region,
                    mode,
                    remote,
                    flags: SendFlags::SIGNALED
                        | if inline { SendFlags::INLINE } else { SendFlags::empty() },
                    recv_sge: recv_sge.as_ref(),
                };
                measure(&mut tier, send, &incoming, &plan, control)?
            }
            None => {
                let mut tier = SafePost { qp: &qp, pool: &pool, op: mode.op(remote) };
                measure(&mut tier, send, &incoming, &plan, control)?
            }
        };
        Ok(Some(latency))
    })
}

/// What one size's run does.
struct Plan {
    size: u32,
    /// Posts; `None` with -D.
    iters: Option<u64>,
    duration: Option<Duration>,
    /// This side posts first (and, with -D, decides when to stop).
    leads: bool,
    /// --latency_gap: the wait before each post.
    gap: Duration,
}

/// How the peer's message shows.
enum Incoming<'r, 'a> {
    /// write_lat: its count in the last byte of our buffer.
    Byte(&'r RemoteWritableRegion<'a>),
    /// send_lat: a receive completion.
    Recv(Cq<'r, 'a>),
    /// read_lat: the peer sends nothing.
    Nothing,
}

/// One size's run; see the module docs.
fn measure(
    tier: &mut impl Post,
    send: Cq<'_, '_>,
    incoming: &Incoming<'_, '_>,
    plan: &Plan,
    control: &mut Control,
) -> Result<Latency, Error> {
    let pingpong = !matches!(incoming, Incoming::Nothing);
    let mut post_times = Vec::with_capacity(plan.iters.unwrap_or(0) as usize);
    let start = Instant::now();
    let (mut first, mut last): (Option<Instant>, Instant) = (None, start);
    let mut posts = 0u64;
    let mut wcs: [WorkCompletion; 1] = Default::default();
    loop {
        if plan.iters == Some(posts) {
            break;
        }
        let mark = (posts + 1) as u8;
        if pingpong && !plan.leads {
            // With -D the leader may have stopped after as many as we posted.
            let stop_after = plan.duration.map(|_| posts);
            if !incoming.wait(mark, plan.size, tier, control, stop_after)? {
                break;
            }
        } else if let (Some(d), Some(f)) = (plan.duration, first) {
            if f.elapsed() >= d {
                break;
            }
        }
        if !plan.gap.is_zero() {
            let until = Instant::now() + plan.gap;
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
        last = Instant::now();
        first.get_or_insert(last);
        if plan.iters.is_some() {
            post_times.push(last.duration_since(start).as_nanos() as u64);
        }
        tier.post(plan.size, mark)?;
        posts += 1;
        spin(
            "for the completion of our WR",
            || send.sleep(),
            || match send.cq.poll(&mut wcs)?.first_mut() {
                Some(wc) => {
                    check_wc(wc, 0)?;
                    tier.complete(wc).map(Some)
                }
                None => Ok(None),
            },
            || Ok(None),
        )?;
        if pingpong && plan.leads {
            incoming.wait(mark, plan.size, tier, control, None)?;
        }
    }
    if !pingpong {
        traffic::tell_passive(control, posts)?;
    } else if plan.leads && plan.duration.is_some() {
        control.send(&format!("stop {posts}"))?;
    }
    Ok(match plan.iters {
        Some(iters) => {
            Latency::Gaps { iters, gaps_ns: post_times.windows(2).map(|w| w[1] - w[0]).collect() }
        }
        None => Latency::Duration { posts, span: last - first.unwrap_or(last) },
    })
}

impl Incoming<'_, '_> {
    /// Waits for the peer's message counted `mark` (modulo 256) of `size` bytes: true when it
    /// came; false when `stop_after` is given and the peer says it stopped after that many.
    fn wait(
        &self,
        mark: u8,
        size: u32,
        tier: &mut impl Post,
        control: &mut Control,
        stop_after: Option<u64>,
    ) -> Result<bool, Error> {
        let mut byte = [0u8; 1];
        let mut wcs: [WorkCompletion; 1] = Default::default();
        let stopped = |control: &mut Control, posted: u64| -> Result<Option<bool>, Error> {
            let Some(line) = control.try_recv()? else { return Ok(None) };
            match line.strip_prefix("stop ").and_then(|n| n.parse::<u64>().ok()) {
                Some(n) if n == posted => Ok(Some(false)),
                _ => Err(format!(
                    "the peer is out of step: it sent {line:?} when {posted} messages went to it"
                )
                .into()),
            }
        };
        let idle = || match stop_after {
            Some(posted) => stopped(control, posted),
            None => Ok(None),
        };
        match self {
            Incoming::Byte(region) => spin(
                "for the peer's RDMA WRITE",
                || Ok(()),
                || {
                    region.read(size as usize - 1, &mut byte)?;
                    // The NIC writes the byte behind the compiler's back: read it every time.
                    compiler_fence(Ordering::Acquire);
                    Ok((byte[0] == mark).then_some(true))
                },
                idle,
            ),
            Incoming::Recv(cq) => spin(
                "for the peer's SEND",
                || cq.sleep(),
                || {
                    let Some(wc) = cq.cq.poll(&mut wcs)?.first_mut() else { return Ok(None) };
                    check_wc(wc, 0)?;
                    if wc.byte_len() != size {
                        return Err(format!(
                            "a SEND of {} bytes arrived, not {size}: the peer is out of step",
                            wc.byte_len()
                        )
                        .into());
                    }
                    tier.complete(wc)?;
                    Ok(Some(true))
                },
                idle,
            ),
            Incoming::Nothing => Ok(true),
        }
    }
}

/// Spins until `ready` gives a value, calling `sleep` before each try (with -e it sleeps
/// until the CQ's event; the watchdog of `events.rs` bounds that). Once the wait is longer
/// than 1024 tries and [`CONTROL_EVERY`], `idle` runs that often (it may end the wait with a
/// value); after [`STALL_LIMIT`] more it fails, saying what it was waiting `what`.
fn spin<T>(
    what: &str,
    mut sleep: impl FnMut() -> Result<(), Error>,
    mut ready: impl FnMut() -> Result<Option<T>, Error>,
    mut idle: impl FnMut() -> Result<Option<T>, Error>,
) -> Result<T, Error> {
    // (The wait's start and when `idle` runs next.) The clock is first read after 1024 empty
    // tries: a wait that ends sooner, nearly every one, reads none, as perftest's read none.
    let mut clock: Option<(Instant, Instant)> = None;
    let mut spins = 0u32;
    let stalled =
        || format!("waited {} s {what} in vain: the peer is gone", STALL_LIMIT.as_secs()).into();
    loop {
        sleep()?;
        if let Some(value) = ready()? {
            return Ok(value);
        }
        spins = spins.wrapping_add(1);
        if spins.is_multiple_of(1024) {
            let now = Instant::now();
            let (since, next_idle) = clock.get_or_insert((now, now + CONTROL_EVERY));
            if now >= *next_idle {
                if let Some(value) = idle()? {
                    return Ok(value);
                }
                *next_idle = now + CONTROL_EVERY;
            }
            if now - *since > STALL_LIMIT {
                return Err(stalled());
            }
        }
    }
}

/// How one tier posts a WR and takes it back.
trait Post {
    /// Posts one signaled WR of `size` bytes, the last of them `mark` (write_lat's count).
    fn post(&mut self, size: u32, mark: u8) -> Result<(), Error>;
    /// Takes back what `wc` releases; a receive is posted again.
    fn complete(&mut self, wc: &mut WorkCompletion) -> Result<(), Error>;
}

/// The safe buffer tier: each WR takes the pool's free buffer, which its completion returns.
struct SafePost<'q, 'a> {
    qp: &'q QueuePair<'a, Rts>,
    pool: &'a BufferPool<'a>,
    op: SendOp,
}

impl Post for SafePost<'_, '_> {
    fn post(&mut self, size: u32, mark: u8) -> Result<(), Error> {
        let mut buf = self.pool.take().ok_or("the buffer pool ran dry: a WR never completed")?;
        buf.set_len(size as usize)?;
        if let Some(last) = buf.as_mut_slice().last_mut() {
            *last = mark;
        }
        self.qp.post_send_buffer(buf, self.op)?;
        Ok(())
    }

    fn complete(&mut self, wc: &mut WorkCompletion) -> Result<(), Error> {
        traffic::complete_safe(self.qp, self.pool, wc)
    }
}

/// The raw tier, as perftest: every WR names the first `size` bytes of one region, whose
/// last byte is written before each post.
struct RawPost<'q, 'a> {
    qp: &'q QueuePair<'a, Rts>,
    region: &'q mut MemoryRegion<'a>,
    sge: [Sge; 1],
    mode: Mode,
    remote: RemoteAddr,
    flags: SendFlags,
    /// send_lat's receive region.
    recv_sge: Option<&'q [Sge; 1]>,
}

impl Post for RawPost<'_, '_> {
    fn post(&mut self, size: u32, mark: u8) -> Result<(), Error> {
        self.region.as_mut_slice()[size as usize - 1] = mark;
        let mut wr = self.mode.work_request(0, &self.sge, self.remote);
        wr.set_flags(self.flags);
        // SAFETY: the region outlives the QP (declared before it); the program writes it only
        // here, when no WR of this QP is outstanding (the previous one's completion was
        // reaped), and never reads it; wr_id 0 is not the buffer tier's.
        unsafe { self.qp.post_send_wr(&mut wr)? };
        Ok(())
    }

    fn complete(&mut self, wc: &mut WorkCompletion) -> Result<(), Error> {
        match self.recv_sge {
            Some(sge) => traffic::complete_raw(self.qp, sge, wc),
            None => Ok(()),
        }
    }
}
