//! The extended CQ (`ibv_create_cq_ex(3)`): creation, and polling sessions under the rules
//! of its man page.

use std::mem::MaybeUninit;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;
use sys::inline as inl;

use super::Completion;

use crate::context::Context;
use crate::error::{check_errno, Error, Result};
use crate::quirks::Quirks;
use crate::wc::WorkCompletion;

/// What the extended CQ asks every completion for: the fields of `struct ibv_wc`.
const STANDARD: u64 = sys::IBV_WC_STANDARD_FLAGS as u64;
const TIMESTAMP: u64 = sys::IBV_WC_EX_WITH_COMPLETION_TIMESTAMP as u64;

/// The extended side of a [`CompletionQueue`](super::CompletionQueue).
pub(super) struct ExCq {
    pub(super) raw: NonNull<sys::ibv_cq_ex>,
    /// The `IBV_WC_EX_WITH_*` flags it was created with: the fields that may be read.
    wc_flags: u64,
    /// `hca_core_clock` (kHz), when timestamps were asked for.
    pub(super) clock_khz: Option<u64>,
    /// How it is polled.
    reader: Reader,
}

/// How an extended CQ is polled, chosen once at creation ([`reader`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Reader {
    /// The provider's legacy `poll_cq` op on the same CQ: one call, one lock and one
    /// consumer-index update per batch.
    PollCq,
    /// One session per batch: `ibv_start_poll`, `ibv_next_poll` for each further
    /// completion, `ibv_end_poll`.
    Session,
    /// One session per completion (`ibv_start_poll`, `ibv_end_poll`), never `ibv_next_poll`
    /// (also where the provider left `next_poll` NULL).
    SessionPerCompletion,
}

/// How to poll an extended CQ of `ctx`, with or without `timestamps`.
///
/// Without timestamps, through the provider's `poll_cq` op, which fills the `ibv_wc` that
/// [`WorkCompletion`] is in one call per batch: `ibv_cq_ex_to_cq` is a cast (the `ibv_cq` is
/// the start of the `ibv_cq_ex`), and `ibv_poll_cq` calls the op of the CQ's context, the
/// provider's own, which polls every CQ of that context however it was created: rxe's
/// `verbs_cq` unions the `ibv_cq` with the `ibv_cq_ex` and `rxe_poll_cq` reads the queue both
/// polling paths share; `mlx5_create_cq_ex` and `mlx5_create_cq` build the same `mlx5_cq`,
/// which `mlx5_poll_cq` reads. A provider without the op (NULL) is polled in sessions.
///
/// Timestamps are read only inside a session, batched with `ibv_next_poll` as
/// `ibv_create_cq_ex(3)` describes, except where the provider ends the session itself when
/// `ibv_next_poll` finds nothing ([`Quirks::next_poll_ends_session`]: rxe without rdma-core
/// PR 1617), where the `ibv_end_poll` the man page asks for would consume a completion that
/// is not there and unlock twice: there each completion gets a session of its own.
fn reader(ctx: &Context, timestamps: bool) -> Result<Reader> {
    // SAFETY: a live context; a plain read of its op table.
    let poll_cq = unsafe { (*ctx.as_raw()).ops.poll_cq.is_some() };
    Ok(if !timestamps && poll_cq {
        Reader::PollCq
    } else if Quirks::of(ctx)?.next_poll_ends_session {
        Reader::SessionPerCompletion
    } else {
        Reader::Session
    })
}

/// `ibv_create_cq_ex` with the standard fields (and timestamps) and `cq_context`, checking
/// that the provider filled every member polling calls.
pub(super) fn create(
    ctx: &Context,
    cqe: i32,
    channel: *mut sys::ibv_comp_channel,
    cq_context: *mut std::ffi::c_void,
    comp_vector: i32,
    timestamps: bool,
) -> Result<(NonNull<sys::ibv_cq>, ExCq)> {
    let clock_khz = if timestamps { Some(timestamp_clock(ctx)?) } else { None };
    let reader = reader(ctx, timestamps)?;
    let wc_flags = STANDARD | if timestamps { TIMESTAMP } else { 0 };
    let mut init = sys::ibv_cq_init_attr_ex {
        cqe: cqe as u32,
        cq_context,
        channel,
        comp_vector: comp_vector as u32,
        wc_flags,
        comp_mask: 0,
        flags: 0,
        parent_domain: std::ptr::null_mut(),
    };
    // SAFETY: a live context; `channel` is NULL or a live channel of it (the caller's
    // check); `init` is a valid attribute struct (`cq_context` is only handed back).
    let raw = unsafe { inl::ibv_create_cq_ex(ctx.as_raw(), &mut init) };
    let Some(raw) = NonNull::new(raw) else {
        let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
        return Err(Error::verb("ibv_create_cq_ex", errno));
    };
    // SAFETY: a live extended CQ; its members are plain reads.
    if let Some(member) = missing_member(unsafe { raw.as_ref() }, timestamps) {
        let cq = inl::ibv_cq_ex_to_cq(raw.as_ptr());
        // SAFETY: the CQ was just created and nothing else knows it.
        let ret = unsafe { (ctx.library().fns.ibv_destroy_cq)(cq) };
        if let Err(e) = check_errno(ret, "ibv_destroy_cq") {
            log::warn!("leaking an extended CQ of {}: {e}", ctx.name());
        }
        return Err(Error::Unsupported { what: member });
    }
    // A provider without `ibv_next_poll` gets a session per completion.
    // SAFETY: a live extended CQ; a plain read of a member.
    let reader = if reader == Reader::Session && unsafe { raw.as_ref() }.next_poll.is_none() {
        Reader::SessionPerCompletion
    } else {
        reader
    };
    let cq = NonNull::new(inl::ibv_cq_ex_to_cq(raw.as_ptr())).expect("a cast of a non-NULL CQ");
    Ok((cq, ExCq { raw, wc_flags, clock_khz, reader }))
}

/// The device's completion clock in kHz, or `Unsupported` when it has no timestamps.
fn timestamp_clock(ctx: &Context) -> Result<u64> {
    let mut attr = sys::ibv_device_attr_ex::default();
    // SAFETY: a live context of this library and a writable attribute struct.
    let ret = unsafe { inl::ibv_query_device_ex(&ctx.library().fns, ctx.as_raw(), &mut attr) };
    check_errno(ret, "ibv_query_device_ex")?;
    if attr.completion_timestamp_mask == 0 {
        return Err(Error::Unsupported {
            what: "completion timestamps (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP; the device's \
                   completion_timestamp_mask is 0)",
        });
    }
    Ok(attr.hca_core_clock)
}

/// The first member that polling calls and the provider left NULL, named for the error.
fn missing_member(cq: &sys::ibv_cq_ex, timestamps: bool) -> Option<&'static str> {
    [
        ("ibv_start_poll (ibv_cq_ex.start_poll)", cq.start_poll.is_none()),
        ("ibv_end_poll (ibv_cq_ex.end_poll)", cq.end_poll.is_none()),
        ("ibv_wc_read_opcode (ibv_cq_ex.read_opcode)", cq.read_opcode.is_none()),
        ("ibv_wc_read_vendor_err (ibv_cq_ex.read_vendor_err)", cq.read_vendor_err.is_none()),
        ("ibv_wc_read_byte_len (ibv_cq_ex.read_byte_len)", cq.read_byte_len.is_none()),
        ("ibv_wc_read_imm_data (ibv_cq_ex.read_imm_data)", cq.read_imm_data.is_none()),
        ("ibv_wc_read_qp_num (ibv_cq_ex.read_qp_num)", cq.read_qp_num.is_none()),
        ("ibv_wc_read_src_qp (ibv_cq_ex.read_src_qp)", cq.read_src_qp.is_none()),
        ("ibv_wc_read_wc_flags (ibv_cq_ex.read_wc_flags)", cq.read_wc_flags.is_none()),
        ("ibv_wc_read_slid (ibv_cq_ex.read_slid)", cq.read_slid.is_none()),
        ("ibv_wc_read_sl (ibv_cq_ex.read_sl)", cq.read_sl.is_none()),
        (
            "ibv_wc_read_dlid_path_bits (ibv_cq_ex.read_dlid_path_bits)",
            cq.read_dlid_path_bits.is_none(),
        ),
        (
            "ibv_wc_read_completion_ts (ibv_cq_ex.read_completion_ts)",
            timestamps && cq.read_completion_ts.is_none(),
        ),
    ]
    .into_iter()
    .find_map(|(name, missing)| missing.then_some(name))
}

impl ExCq {
    /// Whether polling goes through sessions (`ibv_start_poll`...) rather than the
    /// provider's `poll_cq` op.
    #[inline]
    pub(super) fn in_sessions(&self) -> bool {
        self.reader != Reader::PollCq
    }

    /// Up to `out.len()` completions read in sessions into the start of `out`; returns how
    /// many. A failure after the first completion ends polling early and is left for the
    /// next poll (the provider reports it again).
    ///
    /// One session for the batch, or one per completion on a provider whose
    /// `ibv_next_poll` ends the session, or that has none ([`Reader::SessionPerCompletion`]).
    #[inline]
    pub(super) fn drain<S: Slot>(&self, out: &mut [S]) -> Result<usize> {
        // The loop for each: whether the timestamp is read, and how sessions go, are settled
        // here once rather than at each completion.
        match (S::TIMESTAMPS && self.wc_flags & TIMESTAMP != 0, self.reader) {
            (true, Reader::SessionPerCompletion) => self.drain_as::<S, true, false>(out),
            (true, _) => self.drain_as::<S, true, true>(out),
            (false, Reader::SessionPerCompletion) => self.drain_as::<S, false, false>(out),
            (false, _) => self.drain_as::<S, false, true>(out),
        }
    }

    /// [`ExCq::drain`], reading timestamps when `TS`, batching with `ibv_next_poll` when
    /// `BATCH` (else a session per completion).
    #[inline(always)]
    fn drain_as<S: Slot, const TS: bool, const BATCH: bool>(&self, out: &mut [S]) -> Result<usize> {
        let cq = self.raw.as_ptr();
        let mut attr = sys::ibv_poll_cq_attr::default();
        let mut slots = out.iter_mut();
        let mut n = 0;
        // SAFETY: a live extended CQ whose members called here were found set at creation
        // (`missing_member`; `next_poll` with `Reader::Session` only, see `create`), as the C
        // inline verbs call them: providers set them when they create the CQ and never
        // change them. Each session is opened and closed within the loop, on this thread; the
        // reads are inside it, on its current completion.
        unsafe {
            while let Some(first) = slots.next() {
                match (*cq).start_poll.unwrap_unchecked()(cq, &mut attr) {
                    0 => {}
                    // Empty: there is no session, so no `ibv_end_poll`.
                    libc::ENOENT => break,
                    // Failed: no session either.
                    errno if n == 0 => return Err(super::poll_error("ibv_start_poll", errno)),
                    _ => break,
                }
                let (mut slot, mut more) = (first, true);
                loop {
                    self.read::<S, TS>(cq, slot);
                    n += 1;
                    if !BATCH {
                        break;
                    }
                    let Some(next) = slots.next() else { break };
                    // ENOENT (none left) or a failure, which the next poll reports again,
                    // ends the batch; the session stays open either way.
                    if (*cq).next_poll.unwrap_unchecked()(cq) != 0 {
                        more = false;
                        break;
                    }
                    slot = next;
                }
                // Closes the session, consuming its completions.
                (*cq).end_poll.unwrap_unchecked()(cq);
                if !more {
                    break;
                }
            }
        }
        Ok(n)
    }

    /// The current completion's fields into `slot`, reading only those the CQ was created
    /// with (the timestamp when `TS`, which the caller derived from them).
    ///
    /// # Safety
    ///
    /// Inside a polling session of this CQ, on a current completion.
    #[inline(always)]
    unsafe fn read<S: Slot, const TS: bool>(&self, cq: *mut sys::ibv_cq_ex, slot: &mut S) {
        // SAFETY: the caller's session; every member called was found set at creation and is
        // covered by `wc_flags`; no reference to `*cq` is held across the calls.
        unsafe {
            let wc_flags = (*cq).read_wc_flags.unwrap_unchecked()(cq);
            let mut raw = sys::ibv_wc {
                wr_id: (*cq).wr_id,
                status: (*cq).status,
                opcode: (*cq).read_opcode.unwrap_unchecked()(cq),
                vendor_err: (*cq).read_vendor_err.unwrap_unchecked()(cq),
                byte_len: (*cq).read_byte_len.unwrap_unchecked()(cq),
                qp_num: (*cq).read_qp_num.unwrap_unchecked()(cq),
                src_qp: (*cq).read_src_qp.unwrap_unchecked()(cq),
                wc_flags,
                slid: (*cq).read_slid.unwrap_unchecked()(cq) as u16,
                sl: (*cq).read_sl.unwrap_unchecked()(cq),
                dlid_path_bits: (*cq).read_dlid_path_bits.unwrap_unchecked()(cq),
                ..Default::default()
            };
            // The field holds imm_data or the invalidated rkey, as the flags say.
            if wc_flags & (sys::IBV_WC_WITH_IMM | sys::IBV_WC_WITH_INV) != 0 {
                raw.__bindgen_anon_1.imm_data = (*cq).read_imm_data.unwrap_unchecked()(cq);
            }
            let timestamp = TS.then(|| (*cq).read_completion_ts.unwrap_unchecked()(cq));
            slot.put(WorkCompletion::from_raw(raw), timestamp);
        }
    }
}

/// Where [`ExCq::drain`] puts a completion: poll storage ([`WorkCompletion`], which has no
/// timestamp, so none is read), or a [`Completion`] of
/// [`CompletionQueue::poll_with`](super::CompletionQueue::poll_with) (written whole, so it
/// may start uninitialised).
pub(super) trait Slot {
    /// Whether the slot keeps the completion's timestamp.
    const TIMESTAMPS: bool;
    /// Fills the slot.
    fn put(&mut self, wc: WorkCompletion, timestamp: Option<u64>);
}

impl Slot for WorkCompletion {
    const TIMESTAMPS: bool = false;

    #[inline(always)]
    fn put(&mut self, wc: WorkCompletion, _: Option<u64>) {
        *self = wc;
    }
}

impl Slot for MaybeUninit<Completion> {
    const TIMESTAMPS: bool = true;

    #[inline(always)]
    fn put(&mut self, wc: WorkCompletion, timestamp: Option<u64>) {
        self.write(Completion::new(wc, timestamp));
    }
}
