//! perftest's `-e` (`--events`, its `use_event`): a side sleeps until its CQ's completion
//! event instead of busy-polling the CQ. As perftest's, each CQ has its own completion channel
//! (`-X` picks the interrupt vector), is armed once created, and a wait reads one event,
//! re-arms the CQ and then polls it (perftest's `ctx_notify_events`); the crate batches the
//! events' acknowledgements.

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
    /// With -e, sleeps until the CQ's event and re-arms it: false when none came within
    /// [`STALL_LIMIT`]. Without -e, true at once.
    pub fn sleep(&self) -> Result<bool, Error> {
        let Some(channel) = self.channel else { return Ok(true) };
        if channel.wait(Some(STALL_LIMIT))? == 0 {
            return Ok(false);
        }
        self.cq.req_notify(false)?;
        Ok(true)
    }
}

/// With -e, a channel for one CQ (create it before the CQ, which borrows it).
pub fn channel<'ctx>(
    ctx: &'ctx Context,
    args: &Args,
) -> Result<Option<CompletionChannel<'ctx>>, Error> {
    Ok(if args.events { Some(ctx.create_comp_channel()?) } else { None })
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
