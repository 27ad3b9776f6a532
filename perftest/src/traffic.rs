//! The data path, perftest's method: up to tx-depth WRs outstanding per QP, round-robin over
//! QPs, post lists of -l WRs, one signaled WR in -Q, batched polling; over the safe buffer
//! tier or the raw tier.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rdma_verbs::*;

use super::events::Cq;
use super::exchange::Control;
use super::rate::Pace;
use super::{Error, Mode};

/// No completion for this long means the peer is gone.
pub const STALL_LIMIT: Duration = Duration::from_secs(30);

/// How one tier posts and takes back.
pub trait Tier {
    /// Posts `n` WRs of `size` bytes on QP `q`, the last one signaled when `signal`.
    fn post(&mut self, q: usize, n: u32, size: u32, signal: bool) -> Result<(), Error>;
    /// Takes back what a completion of QP `q` releases; a receive is posted again.
    fn complete(&mut self, q: usize, wc: &mut WorkCompletion) -> Result<(), Error>;
}

/// What one size's run does.
pub struct Plan {
    pub size: u32,
    /// Iterations per QP; `None` with -D.
    pub iters: Option<u64>,
    pub duration: Option<Duration>,
    pub tx_depth: u32,
    pub post_list: u32,
    pub cq_mod: u32,
    /// This side posts the operation.
    pub initiate: bool,
    /// This side receives the peer's SENDs.
    pub receive: bool,
    /// The peer is passive (the server of write_bw or read_bw): it prints this side's figures,
    /// which this side sends it at the end.
    pub report_to_peer: bool,
    /// --rate_limit_type=SW: the bursts this side posts in.
    pub pace: Option<Pace>,
}

/// What happened, for the report and the "nothing lost" check.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Stats {
    pub posted: u64,
    pub completed: u64,
    pub received: u64,
    pub elapsed: Duration,
    /// The best rate of any prefix of the run, in bytes per second (perftest's peak).
    pub peak: f64,
    /// With -b, the peer's figures, whose own completions the report adds (perftest's duplex
    /// report: each side's rate over its own time, summed).
    pub peer: Option<Box<Stats>>,
}

impl Stats {
    /// The line that carries these figures to the peer (not its `peer`).
    pub fn to_line(&self) -> String {
        format!(
            "report {} {} {} {} {}",
            self.posted,
            self.completed,
            self.received,
            self.elapsed.as_nanos(),
            self.peak
        )
    }

    /// The figures of a [`Stats::to_line`] line.
    pub fn from_line(line: &str) -> Result<Stats, Error> {
        let bad = || format!("the peer is out of step: expected its report, got {line:?}");
        let fields: Vec<&str> = line.split(' ').collect();
        let ["report", posted, completed, received, nanos, peak] = fields[..] else {
            return Err(bad().into());
        };
        let int = |s: &str| s.parse::<u64>().map_err(|_| bad());
        Ok(Stats {
            posted: int(posted)?,
            completed: int(completed)?,
            received: int(received)?,
            elapsed: Duration::from_nanos(int(nanos)?),
            peak: peak.parse().map_err(|_| bad())?,
            peer: None,
        })
    }
}

/// The passive side's wait (the NIC does all the work): sleeps on TCP until the initiator
/// says it is done, as perftest's server does; polling would take the CPU from the provider
/// (Soft-RoCE works in the kernel).
pub fn wait_for_initiator(control: &mut Control) -> Result<(), Error> {
    let line = control.recv_unbounded()?;
    line.strip_prefix("sent ")
        .ok_or_else(|| format!("the peer is out of step: it sent {line:?}"))?;
    control.send("sent 0")
}

/// The initiator's side of [`wait_for_initiator`]: says it posted `posted` WRs and waits for
/// the answer.
pub fn tell_passive(control: &mut Control, posted: u64) -> Result<(), Error> {
    control.send(&format!("sent {posted}"))?;
    let line = control.recv()?;
    if line != "sent 0" {
        return Err(format!("the peer is out of step: it sent {line:?}").into());
    }
    Ok(())
}

/// Refuses a failed completion, naming QP `q` and the status.
pub fn check_wc(wc: &WorkCompletion, q: usize) -> Result<(), Error> {
    if wc.is_success() {
        return Ok(());
    }
    Err(format!(
        "a work request on QP {q} failed: {} (vendor error {:#x}){}",
        wc.status(),
        wc.vendor_err(),
        if wc.status() == WcStatus::RETRY_EXC_ERR { ": the peer stopped answering" } else { "" }
    )
    .into())
}

/// One size's run. `qpns` maps send completions to QPs, `recv_qpns` receive completions
/// (`None` when receives come from one SRQ that no QP owns: those are given QP 0).
pub fn run(
    tier: &mut impl Tier,
    cq: Cq<'_, '_>,
    qpns: &[Qpn],
    recv_qpns: Option<&[Qpn]>,
    plan: &Plan,
    control: &mut Control,
) -> Result<Stats, Error> {
    let n_qps = qpns.len();
    if !plan.initiate && !plan.receive {
        // The passive side of WRITE / READ: it prints the initiator's figures, as perftest's.
        wait_for_initiator(control)?;
        return Stats::from_line(&control.recv()?);
    }
    let mut posted = vec![0u64; n_qps];
    let mut completed = vec![0u64; n_qps];
    // Per QP, the running WR count at each signaled WR: completions arrive in that order.
    let mut marks: Vec<VecDeque<u64>> =
        (0..n_qps).map(|_| VecDeque::with_capacity(plan.tx_depth as usize + 1)).collect();
    let mut expected = if plan.receive { plan.iters.map(|n| n * n_qps as u64) } else { Some(0) };
    let mut heard_peer = false;
    let mut sent_report = false;
    let mut stats = Stats::default();
    let mut wcs: [WorkCompletion; 16] = Default::default();
    // As perftest's: from the first post, or for a side that only receives from its first
    // receive, to the last completion (not to the exchange with the peer that ends the loop).
    let began = Instant::now();
    let mut start = began;
    let mut last_progress = start;
    let mut idle = 0u32;
    loop {
        // (The clock only for -D: perftest's loop reads none.)
        let stop_posting = plan.duration.is_some_and(|d| start.elapsed() >= d);
        if plan.initiate {
            // With SW pacing, what the bursts begun so far allow.
            let mut allowed = plan.pace.map_or(u64::MAX, |pace| {
                pace.allowed(start.elapsed()).saturating_sub(posted.iter().sum())
            });
            for q in 0..n_qps {
                allowed = allowed.saturating_sub(post_some(
                    tier,
                    q,
                    plan,
                    &mut posted[q],
                    completed[q],
                    &mut marks[q],
                    stop_posting,
                    allowed,
                )?);
            }
        }
        let initiator_done = !plan.initiate
            || (0..n_qps).all(|q| {
                completed[q] == posted[q]
                    && (stop_posting || plan.iters.is_some_and(|n| posted[q] == n))
            });
        if initiator_done && !sent_report {
            control.send(&format!("sent {}", posted.iter().sum::<u64>()))?;
            sent_report = true;
        }
        // With -e, a side that expects no more completions waits for the peer's word on TCP.
        let awaiting =
            !initiator_done || (plan.receive && expected.is_none_or(|e| stats.received < e));
        let asleep = cq.channel.is_some() && !awaiting;
        if !heard_peer && (plan.receive || initiator_done) && (asleep || idle.is_multiple_of(1024))
        {
            let line = if asleep { Some(control.recv()?) } else { control.try_recv()? };
            if let Some(line) = line {
                let count = line.strip_prefix("sent ").and_then(|n| n.parse().ok());
                let count: u64 =
                    count.ok_or_else(|| format!("the peer is out of step: it sent {line:?}"))?;
                if plan.receive {
                    expected = Some(count);
                }
                heard_peer = true;
            }
        }
        if initiator_done && heard_peer && expected.is_some_and(|e| stats.received >= e) {
            break;
        }

        let done = cq.cq.poll(&mut wcs)?;
        if done.is_empty() {
            idle = idle.wrapping_add(1);
            if cq.channel.is_some() {
                // (Unbounded: the watchdog ends a wait that lasts STALL_LIMIT.)
                if awaiting {
                    cq.sleep()?;
                }
            } else if idle.is_multiple_of(4096) && last_progress.elapsed() > STALL_LIMIT {
                return Err(format!(
                    "no completion for {} s ({} of {} WRs completed, {} received): the peer is gone",
                    STALL_LIMIT.as_secs(),
                    completed.iter().sum::<u64>(),
                    posted.iter().sum::<u64>(),
                    stats.received
                )
                .into());
            }
            continue;
        }
        last_progress = Instant::now();
        if !plan.initiate && stats.received == 0 {
            start = last_progress;
        }
        for wc in done.iter_mut() {
            let is_recv = matches!(wc.opcode(), WcOpcode::RECV | WcOpcode::RECV_RDMA_WITH_IMM);
            let owners = if is_recv { recv_qpns } else { Some(qpns) };
            let q = match owners {
                Some(owners) => owners
                    .iter()
                    .position(|&n| n == wc.qp_num())
                    .ok_or("a completion for an unknown QP")?,
                None => 0,
            };
            check_wc(wc, q)?;
            if is_recv {
                stats.received += 1;
            } else {
                completed[q] = marks[q].pop_front().ok_or("a completion nothing signaled")?;
                let done_bytes = completed.iter().sum::<u64>() as f64 * f64::from(plan.size);
                stats.peak =
                    stats.peak.max(done_bytes / last_progress.duration_since(start).as_secs_f64());
            }
            tier.complete(q, wc)?;
        }
    }
    stats.elapsed = last_progress.duration_since(start);
    if stats.elapsed.is_zero() {
        // Everything arrived in the first poll: from the loop's start instead.
        stats.elapsed = last_progress.duration_since(began);
    }
    stats.posted = posted.iter().sum();
    stats.completed = completed.iter().sum();
    if plan.report_to_peer {
        control.send(&stats.to_line())?;
    }
    Ok(stats)
}

/// Posts on QP `q` while the tx depth allows, at most `allowed` WRs: lists of -l WRs, the last
/// of a list signaled when the count crosses a multiple of -Q, or when it is the run's last
/// WR. Returns how many it posted.
#[allow(clippy::too_many_arguments)] // one QP's counters, each its own slice element
fn post_some(
    tier: &mut impl Tier,
    q: usize,
    plan: &Plan,
    posted: &mut u64,
    completed: u64,
    marks: &mut VecDeque<u64>,
    stop: bool,
    allowed: u64,
) -> Result<u64, Error> {
    let depth = u64::from(plan.tx_depth);
    let last_mark = marks.back().copied().unwrap_or(completed);
    let first = *posted;
    // At the end of a -D run, one signaled WR closes the chain of unsignaled ones.
    if stop {
        if *posted > last_mark && *posted - completed < depth {
            tier.post(q, 1, plan.size, true)?;
            *posted += 1;
            marks.push_back(*posted);
        }
        return Ok(*posted - first);
    }
    loop {
        let left = plan.iters.map_or(u64::MAX, |n| n - *posted);
        let n = u64::from(plan.post_list).min(left).min(allowed - (*posted - first));
        if n == 0 || *posted - completed + n > depth {
            return Ok(*posted - first);
        }
        let after = *posted + n;
        let signal = crosses_multiple(*posted, n, u64::from(plan.cq_mod)) || left == n;
        tier.post(q, n as u32, plan.size, signal)?;
        *posted = after;
        if signal {
            marks.push_back(after);
        }
    }
}

/// Whether a multiple of `cq_mod` (at least 1) lies in `(posted, posted + n]`, `n` at least 1:
/// with one division, as perftest's test per post.
fn crosses_multiple(posted: u64, n: u64, cq_mod: u64) -> bool {
    posted % cq_mod + n >= cq_mod
}

/// The safe buffer tier: each WR takes its own buffer from the pool; a completion returns
/// the buffers of every WR it covers.
pub struct Safe<'q, 'a> {
    pub qps: &'q [QueuePair<'a, Rts>],
    pub pool: &'a BufferPool<'a>,
    pub lists: Vec<SendBufferList<'a>>,
    /// Each QP's operation, built once (as the raw tier's WRs).
    pub ops: Vec<SendOp>,
}

impl Tier for Safe<'_, '_> {
    fn post(&mut self, q: usize, n: u32, size: u32, signal: bool) -> Result<(), Error> {
        let (list, op) = (&mut self.lists[q], self.ops[q]);
        let take = || {
            let mut buf =
                self.pool.take().ok_or("the buffer pool ran dry: every buffer is in flight")?;
            buf.set_len(size as usize)?;
            Ok::<_, Error>(buf)
        };
        if n == 1 {
            // (-l 1: straight to the QP, without storing the buffer in the list.)
            return Ok(self.qps[q].post_send_buffer_chained(list, take()?, op, signal)?);
        }
        for _ in 0..n {
            list.push(take()?, op).map_err(|_| "the post list is full")?;
        }
        Ok(self.qps[q].post_send_buffers(list, signal)?)
    }

    fn complete(&mut self, q: usize, wc: &mut WorkCompletion) -> Result<(), Error> {
        complete_safe(&self.qps[q], self.pool, wc)
    }
}

/// Takes back the buffer of a safe-tier completion of `qp`: to the pool, or for a receive
/// posted again.
pub fn complete_safe<'a>(
    qp: &QueuePair<'a, Rts>,
    pool: &'a BufferPool<'a>,
    wc: &mut WorkCompletion,
) -> Result<(), Error> {
    let buf = pool.complete(wc).ok_or("a completion for none of our buffers")?;
    if matches!(wc.opcode(), WcOpcode::RECV) {
        qp.post_recv_buffer(buf)?;
    }
    Ok(())
}

/// Posts again, on `qp`, the raw-tier receive that `wc` completed (nothing for a send).
pub fn complete_raw(
    qp: &QueuePair<'_, Rts>,
    recv_sge: &[Sge; 1],
    wc: &WorkCompletion,
) -> Result<(), Error> {
    if matches!(wc.opcode(), WcOpcode::RECV) {
        // SAFETY: the raw tier's receive region outlives the QP (declared before it) and is
        // never touched by the program.
        unsafe { qp.post_recv_wr(&mut RecvWr::new(0, recv_sge))? };
    }
    Ok(())
}

/// The raw tier, as perftest: one region per QP that every WR of that QP names, WR lists
/// built once, of which only the flags change (a shorter last list sets the rest aside).
pub struct Raw<'q, 'a> {
    pub qps: &'q [QueuePair<'a, Rts>],
    pub recv_sges: &'q [[Sge; 1]],
    pub lists: Vec<SendWrList<'q>>,
    /// The WRs a shorter list set aside, last first.
    pub aside: Vec<SendWr<'q>>,
    pub inline: bool,
}

impl<'q, 'a> Raw<'q, 'a> {
    /// `post_list` WRs per QP for `mode`, over `send_sges` (one per QP, of this size).
    pub fn new(
        qps: &'q [QueuePair<'a, Rts>],
        send_sges: &'q [[Sge; 1]],
        recv_sges: &'q [[Sge; 1]],
        mode: Mode,
        remotes: &[RemoteAddr],
        post_list: u32,
        inline: bool,
    ) -> Self {
        let lists = (0..qps.len())
            .map(|q| {
                (0..post_list)
                    .map(|i| mode.work_request(u64::from(i), &send_sges[q], remotes[q]))
                    .collect()
            })
            .collect();
        Raw { qps, recv_sges, lists, aside: Vec::with_capacity(post_list as usize), inline }
    }
}

impl Tier for Raw<'_, '_> {
    fn post(&mut self, q: usize, n: u32, _size: u32, signal: bool) -> Result<(), Error> {
        let (list, n) = (&mut self.lists[q], n as usize);
        while list.len() > n {
            self.aside.extend(list.pop());
        }
        let base = if self.inline { SendFlags::INLINE } else { SendFlags::empty() };
        for i in 0..n {
            let last = i + 1 == n;
            list.set_flags(i, if signal && last { base | SendFlags::SIGNALED } else { base })?;
        }
        // SAFETY: the QP's region outlives it (declared before it); the program never reads or
        // writes it while WRs are outstanding (the bytes are meaningless here), and every WR's
        // wr_id is small (never the buffer tier's).
        let posted = unsafe { self.qps[q].post_send_wrs(list) };
        while let Some(wr) = self.aside.pop() {
            // Back where they were: within the list's capacity.
            let _ = list.push(wr);
        }
        posted.map_err(|e| e.into())
    }

    fn complete(&mut self, q: usize, wc: &mut WorkCompletion) -> Result<(), Error> {
        complete_raw(&self.qps[q], &self.recv_sges[q], wc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_is_signaled_when_it_crosses_a_multiple_of_cq_mod() {
        for cq_mod in 1..=7 {
            for posted in 0..40 {
                for n in 1..=9 {
                    let crosses = (posted + 1..=posted + n).any(|c| c % cq_mod == 0);
                    assert_eq!(
                        crosses_multiple(posted, n, cq_mod),
                        crosses,
                        "{posted} {n} {cq_mod}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_report_line_carries_the_figures_exactly() {
        let stats = Stats {
            posted: 5000,
            completed: 4999,
            received: 7,
            elapsed: Duration::new(3, 141_592_653),
            peak: 1.0 / 3.0 * 1e9,
            peer: None,
        };
        assert_eq!(Stats::from_line(&stats.to_line()).unwrap(), stats);
        for bad in ["report 1 2 3", "sent 5", "report 1 2 3 x 0.5"] {
            let e = Stats::from_line(bad).unwrap_err().to_string();
            assert!(e.contains("the peer is out of step"), "{bad}: {e}");
        }
    }
}
