//! The extended CQ (`ibv_create_cq_ex(3)`): creation, and polling sessions under the rules
//! of its man page.

use std::ffi::{c_int, c_uint};
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
    /// `hca_core_clock` (kHz), when timestamps were asked for.
    pub(super) clock_khz: Option<u64>,
    /// How it is polled.
    reader: Reader,
    /// The members polling calls, read at creation (the timestamp's only when it was created
    /// with `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`: the fields read are those it was created
    /// with). On the heap, so that a poll loads each member as it calls it, as C code does,
    /// rather than all of them at its start.
    ops: Box<PollOps>,
}

/// A member of `ibv_cq_ex` that reads a field of the current completion.
type ReadFn<T> = unsafe extern "C" fn(*mut sys::ibv_cq_ex) -> T;

/// The members of an `ibv_cq_ex` that a polling session calls, read once when the CQ is
/// created: providers set them then and never change them, so a CQ whose provider left one
/// NULL is never polled in sessions (it is refused, or created on the legacy path).
struct PollOps {
    start_poll: unsafe extern "C" fn(*mut sys::ibv_cq_ex, *mut sys::ibv_poll_cq_attr) -> c_int,
    /// `ibv_next_poll`, where sessions batch completions ([`Reader::Session`]).
    next_poll: Option<ReadFn<c_int>>,
    end_poll: unsafe extern "C" fn(*mut sys::ibv_cq_ex),
    read_opcode: ReadFn<sys::ibv_wc_opcode>,
    read_vendor_err: ReadFn<u32>,
    read_byte_len: ReadFn<u32>,
    read_imm_data: ReadFn<u32>,
    read_qp_num: ReadFn<u32>,
    read_src_qp: ReadFn<u32>,
    read_wc_flags: ReadFn<c_uint>,
    read_slid: ReadFn<u32>,
    read_sl: ReadFn<u8>,
    read_dlid_path_bits: ReadFn<u8>,
    /// When timestamps were asked for.
    read_completion_ts: Option<ReadFn<u64>>,
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
    let ops = PollOps::of(unsafe { raw.as_ref() }, timestamps);
    let ops = match ops {
        Ok(ops) => ops,
        Err(member) => {
            let cq = inl::ibv_cq_ex_to_cq(raw.as_ptr());
            // SAFETY: the CQ was just created and nothing else knows it.
            let ret = unsafe { (ctx.library().fns.ibv_destroy_cq)(cq) };
            if let Err(e) = check_errno(ret, "ibv_destroy_cq") {
                log::warn!("leaking an extended CQ of {}: {e}", ctx.name());
            }
            return Err(Error::Unsupported { what: member });
        }
    };
    // A provider without `ibv_next_poll` gets a session per completion.
    let reader = if reader == Reader::Session && ops.next_poll.is_none() {
        Reader::SessionPerCompletion
    } else {
        reader
    };
    let cq = NonNull::new(inl::ibv_cq_ex_to_cq(raw.as_ptr())).expect("a cast of a non-NULL CQ");
    Ok((cq, ExCq { raw, clock_khz, reader, ops: Box::new(ops) }))
}

/// The device's completion clock in kHz, or `Unsupported` when it has no timestamps.
fn timestamp_clock(ctx: &Context) -> Result<u64> {
    let attr = ctx.query_device_ex()?;
    if attr.completion_timestamp_mask == 0 {
        return Err(Error::Unsupported {
            what: "completion timestamps (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP; the device's \
                   completion_timestamp_mask is 0)",
        });
    }
    Ok(attr.hca_core_clock)
}

impl PollOps {
    /// The members of `cq` that polling calls (the timestamp's too, when `timestamps`), or
    /// the name of the first one the provider left NULL.
    fn of(cq: &sys::ibv_cq_ex, timestamps: bool) -> Result<PollOps, &'static str> {
        // A member every poll needs, or the error naming it: "verb (struct.member)".
        macro_rules! member {
            ($field:ident, $verb:literal) => {
                cq.$field.ok_or(concat!($verb, " (ibv_cq_ex.", stringify!($field), ")"))?
            };
        }
        Ok(PollOps {
            start_poll: member!(start_poll, "ibv_start_poll"),
            next_poll: cq.next_poll,
            end_poll: member!(end_poll, "ibv_end_poll"),
            read_opcode: member!(read_opcode, "ibv_wc_read_opcode"),
            read_vendor_err: member!(read_vendor_err, "ibv_wc_read_vendor_err"),
            read_byte_len: member!(read_byte_len, "ibv_wc_read_byte_len"),
            read_imm_data: member!(read_imm_data, "ibv_wc_read_imm_data"),
            read_qp_num: member!(read_qp_num, "ibv_wc_read_qp_num"),
            read_src_qp: member!(read_src_qp, "ibv_wc_read_src_qp"),
            read_wc_flags: member!(read_wc_flags, "ibv_wc_read_wc_flags"),
            read_slid: member!(read_slid, "ibv_wc_read_slid"),
            read_sl: member!(read_sl, "ibv_wc_read_sl"),
            read_dlid_path_bits: member!(read_dlid_path_bits, "ibv_wc_read_dlid_path_bits"),
            read_completion_ts: match (timestamps, cq.read_completion_ts) {
                (false, _) => None,
                (true, Some(member)) => Some(member),
                (true, None) => {
                    return Err("ibv_wc_read_completion_ts (ibv_cq_ex.read_completion_ts)")
                }
            },
        })
    }
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
        let ts = S::TIMESTAMPS && self.ops.read_completion_ts.is_some();
        // Batches only where the reader is `Session`, which `create` chose only with
        // `ibv_next_poll` (a `PollCq` CQ reaches here only when completions kept by another
        // thread's poll ran out meanwhile: a session each is right for any extended CQ).
        match (ts, self.reader) {
            (true, Reader::Session) => self.drain_as::<S, true, true>(out),
            (true, _) => self.drain_as::<S, true, false>(out),
            (false, Reader::Session) => self.drain_as::<S, false, true>(out),
            (false, _) => self.drain_as::<S, false, false>(out),
        }
    }

    /// [`ExCq::drain`], reading timestamps when `TS` (the CQ has them), batching with
    /// `ibv_next_poll` when `BATCH` (its reader is [`Reader::Session`], so it has that
    /// member), else a session per completion.
    #[inline(always)]
    fn drain_as<S: Slot, const TS: bool, const BATCH: bool>(&self, out: &mut [S]) -> Result<usize> {
        let (cq, ops) = (self.raw.as_ptr(), &self.ops);
        let mut attr = sys::ibv_poll_cq_attr::default();
        let mut slots = out.iter_mut();
        let mut n = 0;
        // SAFETY: a live extended CQ and its members read at creation, called as the C
        // inline verbs call them (`next_poll` only with `BATCH`). Each session is opened and
        // closed within the loop, on this thread; the reads are inside it, on its current
        // completion.
        unsafe {
            while let Some(first) = slots.next() {
                match (ops.start_poll)(cq, &mut attr) {
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
                    if set(ops.next_poll)(cq) != 0 {
                        more = false;
                        break;
                    }
                    slot = next;
                }
                // Closes the session, consuming its completions.
                (ops.end_poll)(cq);
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
    /// Inside a polling session of this CQ, on a current completion; `TS` only when the CQ
    /// has timestamps.
    #[inline(always)]
    unsafe fn read<S: Slot, const TS: bool>(&self, cq: *mut sys::ibv_cq_ex, slot: &mut S) {
        let ops = &self.ops;
        // SAFETY: the caller's session; the members were read at creation, and the fields
        // they read are those the CQ was created with; no reference to `*cq` is held across
        // the calls.
        unsafe {
            let wc_flags = (ops.read_wc_flags)(cq);
            let mut raw = sys::ibv_wc {
                wr_id: (*cq).wr_id,
                status: (*cq).status,
                opcode: (ops.read_opcode)(cq),
                vendor_err: (ops.read_vendor_err)(cq),
                byte_len: (ops.read_byte_len)(cq),
                qp_num: (ops.read_qp_num)(cq),
                src_qp: (ops.read_src_qp)(cq),
                wc_flags,
                slid: (ops.read_slid)(cq) as u16,
                sl: (ops.read_sl)(cq),
                dlid_path_bits: (ops.read_dlid_path_bits)(cq),
                ..Default::default()
            };
            // The field holds imm_data or the invalidated rkey, as the flags say.
            if wc_flags & (sys::IBV_WC_WITH_IMM | sys::IBV_WC_WITH_INV) != 0 {
                raw.__bindgen_anon_1.imm_data = (ops.read_imm_data)(cq);
            }
            let timestamp = TS.then(|| set(ops.read_completion_ts)(cq));
            slot.put(WorkCompletion::from_raw(raw), timestamp);
        }
    }
}

/// An optional member the caller's loop was chosen for: `ibv_next_poll` where sessions
/// batch ([`Reader::Session`] only with it, see [`create`]), the timestamp's reader where the
/// CQ has timestamps ([`PollOps::of`] reads it then). Members never change.
///
/// # Safety
///
/// `member` is set.
#[inline(always)]
unsafe fn set<F>(member: Option<F>) -> F {
    // SAFETY: the caller's.
    unsafe { member.unwrap_unchecked() }
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
