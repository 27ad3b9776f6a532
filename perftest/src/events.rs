//! perftest's `-e` (`--events`, its `use_event`): a side sleeps until its CQ's completion
//! event instead of busy-polling the CQ. As perftest's, each CQ has its own completion channel
//! (`-X` picks the interrupt vector), is armed once created, and a wait reads one event,
//! re-arms the CQ and then polls it (perftest's `ctx_notify_events`); the crate batches the
//! events' acknowledgements.
//!
//! A wait is perftest's one blocking `read(2)` (an unbounded `CompletionChannel::wait`): a
//! timed one costs a `ppoll(2)` and a failed `read(2)` more whenever the event is not pending
//! yet, 0.7–0.8 of send_lat's waits, about 6 % of its round trip in the instruction-timed
//! guest. perftest's wait has no limit; ours has a watchdog thread, which ends the process
//! when one wait lasts [`STALL_LIMIT`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Once;
use std::time::{Duration, Instant};

use rdma_verbs::{CompletionChannel, CompletionQueue, Context};

use super::args::Args;
use super::traffic::STALL_LIMIT;
use super::Error;

/// A CQ and, with -e, the channel its events come through.
#[derive(Clone, Copy)]
pub struct Cq<'c, 'a> {
    pub cq: &'c CompletionQueue<'a>,
    pub channel: Option<&'c CompletionChannel<'a>>,
}

impl Cq<'_, '_> {
    /// With -e, sleeps until the CQ's event (the watchdog bounds the wait) and re-arms the CQ.
    /// Without -e, returns at once.
    pub fn sleep(&self) -> Result<(), Error> {
        let Some(channel) = self.channel else { return Ok(()) };
        WAITS.fetch_add(1, Ordering::Relaxed);
        let woke = channel.wait(None);
        WAITS.fetch_add(1, Ordering::Relaxed);
        woke?;
        self.cq.req_notify(false)?;
        Ok(())
    }
}

/// Waits begun and ended in [`Cq::sleep`]: odd while one is under way.
static WAITS: AtomicU64 = AtomicU64::new(0);

/// How often the watchdog looks at [`WAITS`].
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Ends the process, saying why, when one wait has lasted [`STALL_LIMIT`].
fn watchdog() {
    // Its own copy of the descriptor table (it needs only stderr): while the table is shared,
    // each system call on a descriptor takes a reference on it, for the main thread too; in
    // the instruction-timed guest read_lat at 2 B read 1.021 with the table shared, 1.016
    // without, 1.012 with no thread at all.
    // (Should it fail, the tool is only slower.)
    // SAFETY: unshare(CLONE_FILES) gives this thread a copy of the table; no descriptor is
    // closed or changed, and the main thread's table is untouched.
    let _ = unsafe { libc::unshare(libc::CLONE_FILES) };
    let mut watch = Watch::new((WAITS.load(Ordering::Relaxed), Instant::now()));
    loop {
        std::thread::sleep(WATCH_EVERY);
        if watch.stalled((WAITS.load(Ordering::Relaxed), Instant::now())) {
            let program = std::env::args().next().unwrap_or_default();
            let tool = program.rsplit('/').next().unwrap_or("perftest tool");
            eprintln!(
                "{tool}: no completion event for {} s: the peer is gone",
                STALL_LIMIT.as_secs()
            );
            std::process::exit(1);
        }
    }
}

/// What the watchdog saw of [`WAITS`]: the count, and since when.
struct Watch {
    seen: (u64, Instant),
    /// When it looked last.
    last: Instant,
}

impl Watch {
    fn new(now: (u64, Instant)) -> Self {
        Watch { seen: now, last: now.1 }
    }

    /// Looks at the count `now`: whether one wait has lasted [`STALL_LIMIT`]. A look far later
    /// than [`WATCH_EVERY`] after the last starts again: the process was stopped, and the wait
    /// it was in may have its event by now.
    fn stalled(&mut self, now: (u64, Instant)) -> bool {
        let paused = now.1.duration_since(self.last) > 5 * WATCH_EVERY;
        self.last = now.1;
        if now.0 != self.seen.0 || paused {
            self.seen = now;
            return false;
        }
        now.0 % 2 == 1 && now.1.duration_since(self.seen.1) >= STALL_LIMIT
    }
}

/// With -e, a channel for one CQ (create it before the CQ, which borrows it); starts the
/// watchdog once.
pub fn channel<'ctx>(
    ctx: &'ctx Context,
    args: &Args,
) -> Result<Option<CompletionChannel<'ctx>>, Error> {
    if !args.events {
        return Ok(None);
    }
    static WATCHDOG: Once = Once::new();
    WATCHDOG.call_once(|| drop(std::thread::spawn(watchdog)));
    Ok(Some(ctx.create_comp_channel()?))
}

/// A CQ of at least `cqe` entries; with `channel` (-e) its events go there, through -X's
/// completion vector, and it is armed.
pub fn create_cq<'a>(
    ctx: &'a Context,
    cqe: u32,
    channel: Option<&'a CompletionChannel<'_>>,
    args: &Args,
) -> Result<CompletionQueue<'a>, Error> {
    let Some(channel) = channel else { return Ok(ctx.create_cq(cqe)?) };
    // (A vector the device lacks is refused with the vectors it has.)
    let cq = ctx.create_cq_with_channel(cqe, channel, args.comp_vector.unwrap_or(0))?;
    cq.req_notify(false)?;
    Ok(cq)
}

/// With -e, how perftest's header names the events' device and vector (`rxe0_comp0`).
pub fn header_name(ctx: &Context, args: &Args) -> Option<String> {
    args.events.then(|| format!("{}_comp{}", ctx.name(), args.comp_vector.unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_fires_only_on_one_wait_that_lasted_the_limit() {
        let t = Instant::now();
        // Looks every second from `t` at `counts`: the look at which it fires.
        let fires_at = |counts: &[u64]| {
            let mut watch = Watch::new((counts[0], t));
            (1..counts.len()).find(|&i| watch.stalled((counts[i], t + WATCH_EVERY * i as u32)))
        };
        let looks = STALL_LIMIT.as_secs() as usize;
        assert_eq!(fires_at(&vec![3; looks + 2]), Some(looks), "one wait under way all along");
        assert_eq!(fires_at(&vec![4; looks + 2]), None, "no wait under way: the tool is elsewhere");
        let mut moving = vec![3; looks + 2];
        moving[looks / 2] = 5;
        assert_eq!(fires_at(&moving), None, "other waits began and ended meanwhile");

        let (mut watch, resumed) = (Watch::new((3, t)), t + STALL_LIMIT);
        assert!(!watch.stalled((3, resumed)), "a look after a pause starts again");
        let fired = (1..=looks).find(|&i| watch.stalled((3, resumed + WATCH_EVERY * i as u32)));
        assert_eq!(fired, Some(looks), "then it fires a whole limit later");
    }
}
