//! [`Rails::transfer`]: the slices, their rails, their completions and what moves when a rail
//! goes down.
#![allow(unsafe_code)]
//! # Safety
//!
//! Each slice's SGE is built from the registration of the rails' own memory in the rail QP's
//! PD ([`RailMemory::region`](super::RailMemory::region)), inside the transfer's checked range; the memory outlives the
//! QPs (see the parent module). Every posted WR is signaled and tracked until its completion
//! (success, error or flush) is polled, or left to its rail as stuck.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::{Duration, Instant};

use super::{RailDown, Rails};
use crate::error::{Error, Result};
use crate::wc::{WcStatus, WorkCompletion};
use crate::wr::{RemoteAddr, SendFlags, SendWr};

/// Which way the bytes go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// RDMA WRITE: from the local memory to the remote.
    Write,
    /// RDMA READ: from the remote memory into the local.
    Read,
}

/// One transfer: a range of the rails' memory, to or from the remote region each rail
/// reaches.
#[derive(Clone, Debug)]
pub struct Transfer<'a> {
    /// RDMA WRITE or READ.
    pub direction: Direction,
    /// The bytes of the rails' memory, by offset.
    pub local: Range<usize>,
    /// Per rail, in the order of [`Rails::add`]: where the remote range starts as that rail
    /// reaches it (the peer's registration on that rail's device: address and rkey). A down
    /// rail's entry is not used.
    pub remote: &'a [RemoteAddr],
    /// Bytes per slice (work request), 1..=2³¹; the last slice may be shorter.
    pub slice_size: u32,
    /// How long a rail may have slices in flight without a completion before it is taken down,
    /// and how long a down rail's flushes are awaited.
    pub timeout: Duration,
}

impl<'a> Transfer<'a> {
    /// 1 MiB: large enough that posting costs little beside the wire, small enough that
    /// several are in flight on each rail.
    pub const DEFAULT_SLICE_SIZE: u32 = 1 << 20;
    /// 10 s: longer than an RC QP's own retries at [`ToRtsAttr::new`](crate::ToRtsAttr::new)'s
    /// budget (7 × 0.54 s) before it reports a lost peer, short enough to move on.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

    /// An RDMA WRITE of `local` to `remote`, with the default slice size and timeout.
    pub fn write(local: Range<usize>, remote: &'a [RemoteAddr]) -> Self {
        Transfer::new(Direction::Write, local, remote)
    }

    /// An RDMA READ of `remote` into `local`, with the default slice size and timeout.
    pub fn read(local: Range<usize>, remote: &'a [RemoteAddr]) -> Self {
        Transfer::new(Direction::Read, local, remote)
    }

    fn new(direction: Direction, local: Range<usize>, remote: &'a [RemoteAddr]) -> Self {
        let (slice_size, timeout) = (Self::DEFAULT_SLICE_SIZE, Self::DEFAULT_TIMEOUT);
        Transfer { direction, local, remote, slice_size, timeout }
    }
}

/// The most slices one transfer is cut into: its bookkeeping grows with them (a few bytes
/// each), and 4 GiB of 4 KiB slices stay within it.
const MAX_SLICES: u64 = 1 << 20;
/// The shortest timeout: with none, every rail would be taken down at its first poll.
const MIN_TIMEOUT: Duration = Duration::from_millis(10);

/// What one rail carried in a transfer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RailReport {
    /// Slices it completed.
    pub slices: usize,
    /// Bytes it completed.
    pub bytes: u64,
    /// Why it went down during the transfer, if it did.
    pub down: Option<RailDown>,
}

/// What a completed transfer did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferReport {
    /// Bytes transferred (the local range's length).
    pub bytes: u64,
    /// Slices it was cut into.
    pub slices: usize,
    /// Slices posted again on another rail after theirs went down.
    pub reissued: usize,
    /// Per rail, in the order of [`Rails::add`].
    pub rails: Vec<RailReport>,
    /// From the first post to the last completion.
    pub elapsed: Duration,
}

/// One rail's part of the running transfer.
#[derive(Default)]
struct Lane {
    queue: VecDeque<usize>,
    in_flight: Vec<usize>,
    last_progress: Option<Instant>,
    report: RailReport,
}

impl Rails<'_> {
    /// Carries `transfer` over the rails that are up and returns when every slice has
    /// completed: slices go round-robin to the rails, at most `depth` in flight on each; a
    /// rail that goes down (see the [module](super)) has its QP moved to ERROR and its
    /// unfinished slices carried by the others. Blocks, polling the rails' CQs.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`]: the local range is empty or outside the memory, the slice size
    /// is 0 or above 2³¹, the range more than 2²⁰ slices, the timeout under 10 ms, a remote
    /// range past the end of the address space, or `remote` has not one entry per rail. [`Error::WrongState`] when
    /// no rail is up, at the start or once every rail has gone down with slices unfinished
    /// (the rails' states say why, [`Rails::rail_state`]); what the range holds is then
    /// partly transferred.
    pub fn transfer(&mut self, transfer: &Transfer<'_>) -> Result<TransferReport> {
        let (start, end) = crate::mr::bounds(self.memory.len(), transfer.local.clone())?;
        let slice = u64::from(transfer.slice_size);
        if !(1..=1 << 31).contains(&slice) || transfer.remote.len() != self.rails.len() {
            return Err(Error::invalid(
                crate::error::InvalidInputKind::Size,
                format!(
                    "a transfer needs a slice size of 1..=2^31 bytes (got {slice}) and one remote \
                     address per rail ({} given for {} rails)",
                    transfer.remote.len(),
                    self.rails.len()
                ),
            ));
        }
        let len = (end - start) as u64;
        if let Some(r) = transfer.remote.iter().find(|r| r.addr.checked_add(len).is_none()) {
            return Err(Error::invalid(
                crate::error::InvalidInputKind::Range,
                format!(
                    "a remote range of {len} bytes at {:#x} passes the end of the address space",
                    r.addr
                ),
            ));
        }
        let count = len.div_ceil(slice);
        if count > MAX_SLICES || transfer.timeout < MIN_TIMEOUT {
            return Err(Error::invalid(
                crate::error::InvalidInputKind::Size,
                format!(
                    "a transfer takes at most {MAX_SLICES} slices (got {count}: raise the slice \
                     size) and a timeout of at least {MIN_TIMEOUT:?} (got {:?})",
                    transfer.timeout
                ),
            ));
        }
        let count = count as usize;
        self.generation = (self.generation + 1) & 0x7fff_ffff;
        let mut lanes: Vec<Lane> = self.rails.iter().map(|_| Lane::default()).collect();
        // Slices no rail holds: all of them at first, then those a rail gave up.
        let mut orphans: VecDeque<usize> = (0..count).collect();
        let mut done = vec![false; count];
        let (mut remaining, mut reissued) = (count, 0);
        let began = Instant::now();
        let mut storage = [WorkCompletion::EMPTY; 32];
        let mut dealt = false;
        loop {
            for (rail, lane) in lanes.iter_mut().enumerate() {
                if self.rails[rail].down.is_none() && self.rails[rail].switch.is_thrown() {
                    self.take_down(rail, lane, RailDown::TakenDown, &mut orphans);
                }
            }
            if remaining == 0 {
                break;
            }
            let up = self.rails.iter().any(|r| r.down.is_none());
            if !up && lanes.iter().all(|l| l.in_flight.is_empty()) {
                return Err(Error::WrongState {
                    message: format!(
                        "every rail is down with {remaining} of {count} slices unfinished: \
                         bring connected QPs back (Rails::replace) and transfer again"
                    ),
                });
            }
            if up {
                if dealt {
                    reissued += orphans.len();
                }
                self.deal(&mut lanes, &mut orphans);
                dealt = true;
            }
            for (rail, lane) in lanes.iter_mut().enumerate() {
                self.post(rail, lane, transfer, (start, end), &mut orphans);
            }
            remaining -= self.reap(&mut lanes, &mut storage, &mut done, &mut orphans, (slice, len));
            self.expire(&mut lanes, transfer.timeout, &mut orphans);
            std::thread::yield_now();
        }
        Ok(TransferReport {
            bytes: len,
            slices: count,
            reissued,
            rails: lanes.into_iter().map(|l| l.report).collect(),
            elapsed: began.elapsed(),
        })
    }

    /// Deals the slices no rail holds to the rails that are up, round-robin.
    fn deal(&self, lanes: &mut [Lane], orphans: &mut VecDeque<usize>) {
        let up: Vec<usize> =
            (0..self.rails.len()).filter(|&r| self.rails[r].down.is_none()).collect();
        for (i, slice) in orphans.drain(..).enumerate() {
            lanes[up[i % up.len()]].queue.push_back(slice);
        }
    }

    /// Posts rail `rail`'s queued slices while it has room.
    fn post(
        &mut self,
        rail: usize,
        lane: &mut Lane,
        transfer: &Transfer<'_>,
        (start, end): (usize, usize),
        orphans: &mut VecDeque<usize>,
    ) {
        while self.rails[rail].down.is_none() && lane.in_flight.len() < self.depth as usize {
            let Some(slice) = lane.queue.pop_front() else { return };
            let from = start + slice * transfer.slice_size as usize;
            let to = end.min(from + transfer.slice_size as usize);
            let qp = &self.rails[rail].qp;
            let posted = self
                .memory
                .region(qp.pd())
                .ok_or_else(|| Error::WrongState { message: "no registration in the PD".into() })
                .and_then(|region| region.sge(from..to))
                .and_then(|sge| {
                    let sges = [sge];
                    let remote = transfer.remote[rail];
                    // (No overflow: `transfer` checked each remote range.)
                    let remote = RemoteAddr { addr: remote.addr + (from - start) as u64, ..remote };
                    let wr_id = u64::from(self.generation) << 32 | slice as u64;
                    let wr = match transfer.direction {
                        super::Direction::Write => SendWr::rdma_write(wr_id, &sges, remote),
                        super::Direction::Read => SendWr::rdma_read(wr_id, &sges, remote),
                    };
                    // SAFETY: the SGE is inside the rails' memory, registered in this QP's PD
                    // for as long as the QP lives (module Safety); the memory is never lent as
                    // a slice; the wr_id has bit 63 clear (a 31-bit generation).
                    unsafe { qp.post_send_wr(&mut wr.flags(SendFlags::SIGNALED)) }
                });
            match posted {
                Ok(()) => {
                    if lane.in_flight.is_empty() {
                        // The wait for a completion starts now.
                        lane.last_progress = Some(Instant::now());
                    }
                    lane.in_flight.push(slice);
                }
                // Full until completions make room; with none to come, it stays full.
                Err(Error::WorkQueueFull { .. } | Error::CompletionsDue { .. })
                    if !lane.in_flight.is_empty() =>
                {
                    lane.queue.push_front(slice);
                    return;
                }
                Err(error) => {
                    lane.queue.push_front(slice);
                    self.take_down(rail, lane, RailDown::Verb(error.to_string()), orphans);
                }
            }
        }
    }

    /// Polls every rail's CQ; returns how many slices completed. A slice whose WR failed or
    /// was flushed goes back to `orphans`, and its rail down.
    fn reap(
        &mut self,
        lanes: &mut [Lane],
        storage: &mut [WorkCompletion],
        done: &mut [bool],
        orphans: &mut VecDeque<usize>,
        (slice_size, len): (u64, u64),
    ) -> usize {
        let mut completed = 0;
        for polled_rail in 0..self.rails.len() {
            let cq = self.rails[polled_rail].cq;
            // A CQ shared by rails is polled with the first of them.
            if self.rails[..polled_rail].iter().any(|r| r.cq.as_raw() == cq.as_raw()) {
                continue;
            }
            let wcs = match cq.poll(storage) {
                Ok(wcs) => wcs,
                Err(error) => {
                    let lane = &mut lanes[polled_rail];
                    self.take_down(polled_rail, lane, RailDown::Verb(error.to_string()), orphans);
                    continue;
                }
            };
            for wc in wcs.iter_mut() {
                // By CQ and QP number: two devices number their QPs alike.
                let Some(rail) = self
                    .rails
                    .iter()
                    .position(|r| r.cq.as_raw() == cq.as_raw() && r.qp.qp_num() == wc.qp_num())
                else {
                    self.others.push(std::mem::replace(wc, WorkCompletion::EMPTY));
                    continue;
                };
                let slice = (wc.wr_id() & 0xffff_ffff) as usize;
                let lane = &mut lanes[rail];
                let mine = wc.wr_id() >> 32 == u64::from(self.generation);
                let Some(at) = lane.in_flight.iter().position(|&s| mine && s == slice) else {
                    // A late flush of a stuck WR of an earlier transfer, or of this one's.
                    self.rails[rail].stuck = self.rails[rail].stuck.saturating_sub(1);
                    continue;
                };
                lane.in_flight.swap_remove(at);
                lane.last_progress = Some(Instant::now());
                if wc.status() == WcStatus::SUCCESS && !done[slice] {
                    done[slice] = true;
                    completed += 1;
                    lane.report.slices += 1;
                    lane.report.bytes += slice_size.min(len - slice as u64 * slice_size);
                } else if !done[slice] {
                    orphans.push_back(slice);
                    // A flush on a rail still up: its QP went to ERROR behind the rails' back
                    // (an earlier error, a fatal event), so it is down too.
                    if wc.status() != WcStatus::WR_FLUSH_ERR || self.rails[rail].down.is_none() {
                        self.take_down(rail, lane, RailDown::Completion(wc.status()), orphans);
                    }
                }
            }
        }
        completed
    }

    /// Takes down the rails whose in-flight slices saw no completion within `timeout`, and
    /// leaves to a down rail, as stuck, the slices whose flushes did not come within it.
    fn expire(&mut self, lanes: &mut [Lane], timeout: Duration, orphans: &mut VecDeque<usize>) {
        let now = Instant::now();
        for (rail, lane) in lanes.iter_mut().enumerate() {
            let quiet = lane.last_progress.is_some_and(|t| now.duration_since(t) > timeout);
            if lane.in_flight.is_empty() || !quiet {
                continue;
            }
            match self.rails[rail].down_since {
                None => self.take_down(rail, lane, RailDown::Stalled, orphans),
                Some(since) if now.duration_since(since) > timeout => {
                    self.rails[rail].stuck += lane.in_flight.len();
                    orphans.extend(lane.in_flight.drain(..));
                }
                Some(_) => {}
            }
        }
    }

    /// Marks rail `rail` down, moves its QP to ERROR (so the NIC flushes what it holds) and
    /// its queued slices to `orphans`.
    fn take_down(
        &mut self,
        rail: usize,
        lane: &mut Lane,
        why: RailDown,
        orphans: &mut VecDeque<usize>,
    ) {
        let r = &mut self.rails[rail];
        if r.down.is_some() {
            return;
        }
        log::warn!("rail {rail} (QP {}) is down: {why:?}", r.qp.qp_num());
        if let Err(error) = r.qp.to_error() {
            log::warn!("rail {rail}: moving its QP to ERROR failed: {error}");
        }
        r.switch.take_down();
        r.down = Some(why.clone());
        r.down_since = Some(Instant::now());
        lane.last_progress = Some(Instant::now());
        lane.report.down = Some(why);
        orphans.extend(lane.queue.drain(..));
    }
}
