//! The extended QP (`ibv_create_qp_ex(3)`, `ibv_wr_post(3)`): which send operations to ask
//! for, and posting a batch of work requests with one doorbell.

use std::ffi::c_void;
use std::mem::offset_of;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;
use sys::inline as inl;

use crate::ah::UdDestination;
use crate::context::Context;
use crate::error::{check_errno, errno_error, Error, PostListError, Result};
use crate::quirks::{MELLANOX_VENDOR_ID, RXE_VENDOR_ID};
use crate::wr::SendOp;
use crate::wr::{Build, Builds, SendFlags, SendWr, Sge, INLINE_BUFS};

mod fast;
mod ops;

use fast::{build_as, build_each};
use ops::{fitting, QpOps};

/// The extended side of a [`QueuePair`](super::QueuePair): its `ibv_qp_ex`, the members
/// posting calls and the send operations it was created with.
pub(super) struct ExQp {
    pub(super) raw: NonNull<sys::ibv_qp_ex>,
    /// Its members that posting calls.
    ops: QpOps,
    /// `IBV_QP_EX_WITH_*`: only these builders may be used (a provider may fill members it
    /// was not asked for, and must not be relied on for them).
    send_ops: u32,
    /// Whether `ibv_wr_set_sge_list` and `ibv_wr_set_inline_data_list` count the WR's
    /// length right (not on rxe without rdma-core PRs 1744 and 1751: see
    /// [`Quirks`](crate::quirks::Quirks)); where they do not, WRs with several buffers go
    /// through `ibv_post_send`.
    lists_right: bool,
    /// What a failed `ibv_wr_complete` of this provider leaves posted.
    failed_batch: FailedBatch,
}

/// How much of a batch a failed `ibv_wr_complete` leaves posted: `ibv_wr_post(3)` does not
/// say, so it is read from each provider's source, recognised by the device's `vendor_id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum FailedBatch {
    /// mlx5: `mlx5_send_wr_complete` (rdma-core `providers/mlx5/qp.c`) on any error
    /// (`mqp->err`, set by a builder, e.g. `ENOMEM` from `mlx5_wq_overflow`) rolls
    /// `sq.cur_post` back to where `ibv_wr_start` found it and rings no doorbell (its
    /// `post_send_db` cannot fail): nothing of the batch is posted.
    NothingPosted,
    /// rxe: the builders write WQEs past the producer index and record the first failure in
    /// `qp->err` (`ENOSPC` from `check_qp_queue_full`); `wr_complete` (rdma-core
    /// `providers/rxe/rxe.c`) returns it without storing the producer index, so `ENOSPC`
    /// means nothing of the batch is posted. Any other errno may come from the doorbell
    /// write (`post_send_db`) after the index was stored: all posted.
    NothingPostedOnEnospc,
    /// Any other provider: which WRs went out cannot be known, so all may have (memory they
    /// name is never handed back early).
    AllMayBePosted,
}

impl FailedBatch {
    fn of(vendor_id: u32) -> FailedBatch {
        match vendor_id {
            MELLANOX_VENDOR_ID => FailedBatch::NothingPosted,
            RXE_VENDOR_ID => FailedBatch::NothingPostedOnEnospc,
            _ => FailedBatch::AllMayBePosted,
        }
    }

    /// How many of a failed batch of `len` WRs are posted after `error`.
    fn posted(self, error: &Error, len: usize) -> usize {
        match self {
            FailedBatch::NothingPosted => 0,
            FailedBatch::NothingPostedOnEnospc if error.errno() == Some(libc::ENOSPC) => 0,
            FailedBatch::NothingPostedOnEnospc | FailedBatch::AllMayBePosted => len,
        }
    }
}

/// Whether `ctx` has a `create_qp_ex` op at all (libibverbs gives every provider one, which
/// may still fail with `EOPNOTSUPP`).
pub(super) fn has_create_qp_ex(ctx: &Context) -> bool {
    // SAFETY: a live context.
    let op = unsafe {
        inl::verbs_ctx_op(ctx.as_raw(), offset_of!(sys::verbs_context, create_qp_ex), |v| {
            &v.create_qp_ex
        })
    };
    op.is_some()
}

/// The send operations to ask of a QP of type `qp_type` on `ctx`: what the transport allows,
/// atomics only when the device has them, memory-window operations only when it has type-2
/// windows.
pub(super) fn send_ops(ctx: &Context, qp_type: sys::ibv_qp_type) -> Result<u32> {
    let basic = sys::IBV_QP_EX_WITH_SEND | sys::IBV_QP_EX_WITH_SEND_WITH_IMM;
    let write = sys::IBV_QP_EX_WITH_RDMA_WRITE | sys::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM;
    let ops = match qp_type {
        sys::IBV_QPT_UD => basic,
        sys::IBV_QPT_UC => basic | write,
        _ => {
            let attr = ctx.cached_attr()?.as_raw();
            let mut ops = basic | write | sys::IBV_QP_EX_WITH_RDMA_READ;
            if attr.atomic_cap != sys::IBV_ATOMIC_NONE {
                ops |= sys::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP
                    | sys::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
            }
            let type2 = sys::IBV_DEVICE_MEM_WINDOW_TYPE_2A | sys::IBV_DEVICE_MEM_WINDOW_TYPE_2B;
            if attr.device_cap_flags & type2 != 0 {
                ops |= sys::IBV_QP_EX_WITH_BIND_MW
                    | sys::IBV_QP_EX_WITH_LOCAL_INV
                    | sys::IBV_QP_EX_WITH_SEND_WITH_INV;
            }
            ops
        }
    };
    Ok(ops)
}

/// Each `ibv_wr_opcode` this crate builds: its `IBV_QP_EX_WITH_*` bit and builder name.
fn op_of(opcode: sys::ibv_wr_opcode) -> (u32, &'static str) {
    match opcode {
        sys::IBV_WR_SEND => (sys::IBV_QP_EX_WITH_SEND, "ibv_wr_send"),
        sys::IBV_WR_SEND_WITH_IMM => (sys::IBV_QP_EX_WITH_SEND_WITH_IMM, "ibv_wr_send_imm"),
        sys::IBV_WR_SEND_WITH_INV => (sys::IBV_QP_EX_WITH_SEND_WITH_INV, "ibv_wr_send_inv"),
        sys::IBV_WR_RDMA_WRITE => (sys::IBV_QP_EX_WITH_RDMA_WRITE, "ibv_wr_rdma_write"),
        sys::IBV_WR_RDMA_WRITE_WITH_IMM => {
            (sys::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM, "ibv_wr_rdma_write_imm")
        }
        sys::IBV_WR_RDMA_READ => (sys::IBV_QP_EX_WITH_RDMA_READ, "ibv_wr_rdma_read"),
        sys::IBV_WR_ATOMIC_CMP_AND_SWP => {
            (sys::IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP, "ibv_wr_atomic_cmp_swp")
        }
        sys::IBV_WR_ATOMIC_FETCH_AND_ADD => {
            (sys::IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD, "ibv_wr_atomic_fetch_add")
        }
        sys::IBV_WR_LOCAL_INV => (sys::IBV_QP_EX_WITH_LOCAL_INV, "ibv_wr_local_inv"),
        sys::IBV_WR_BIND_MW => (sys::IBV_QP_EX_WITH_BIND_MW, "ibv_wr_bind_mw"),
        _ => (0, "this work request opcode on the extended QP"),
    }
}

impl ExQp {
    /// The extended view of `qp`, or the name of what is missing for posting through it:
    /// the `ibv_qp_to_qp_ex` symbol, its result, or a member every batch calls.
    pub(super) fn of(
        ctx: &Context,
        qp: *mut sys::ibv_qp,
        qp_type: sys::ibv_qp_type,
        send_ops: u32,
        lists_right: bool,
    ) -> Result<ExQp, &'static str> {
        if ctx.library().fns.ibv_qp_to_qp_ex.is_none() {
            return Err("ibv_qp_to_qp_ex (rdma-core v24+)");
        }
        // SAFETY: a live QP of this library.
        let raw = unsafe { inl::ibv_qp_to_qp_ex(&ctx.library().fns, qp) };
        let raw = NonNull::new(raw).ok_or("ibv_qp_to_qp_ex (it returned NULL)")?;
        // SAFETY: a live extended QP; its members are plain reads.
        let ops = QpOps::of(unsafe { raw.as_ref() }, qp_type)?;
        // The attributes are cached at creation (`send_ops`); a failed query only makes the
        // rule the conservative one.
        let vendor_id = ctx.cached_attr().map_or(0, |attr| attr.vendor_id());
        let failed_batch = FailedBatch::of(vendor_id);
        Ok(ExQp { raw, ops, send_ops, lists_right, failed_batch })
    }

    /// Posts `wrs` with as few doorbells as the provider allows: one batch (`ibv_wr_start`,
    /// each WR's fields and builders, one `ibv_wr_complete`), except that a WR with several
    /// buffers goes on its own through `ibv_post_send`, in order between batches, where the
    /// list setters count wrong ([`ExQp::lists_right`]; the bytes sent would differ from
    /// those described, or an inline copy overrun the WQE) or it has more inline buffers than
    /// [`INLINE_BUFS`]: the legacy post of the same QP counts them right on every provider.
    ///
    /// A WR the QP cannot build aborts its batch (`ibv_wr_abort`: nothing of it posted) with
    /// [`Error::Unsupported`] naming its builder. On failure, how many WRs may have been
    /// posted: those of earlier batches and posts, plus, when `ibv_wr_complete` fails, what
    /// the provider leaves posted of the failed batch ([`FailedBatch`]: none on mlx5, none
    /// for `ENOSPC` on rxe, all elsewhere, so memory they name is never handed back early).
    ///
    /// # Safety
    ///
    /// A live QP in RTS; every WR valid under
    /// [`QueuePair::post_send_wr`](super::QueuePair::post_send_wr)'s contract, UD WRs addressed
    /// when `ud`.
    pub(super) unsafe fn post(&self, wrs: &[SendWr<'_>], ud: bool) -> Result<(), PostListError> {
        let mut done = 0;
        while let Some(rest) = wrs.get(done..).filter(|rest| !rest.is_empty()) {
            let run =
                rest.iter().position(|wr| self.posts_alone(wr.as_raw())).unwrap_or(rest.len());
            if run == 0 {
                // SAFETY: the caller's guarantees, for this WR.
                unsafe { self.post_one_legacy(rest[0].as_raw()) }
                    .map_err(|error| PostListError { posted: done, error })?;
                done += 1;
            } else {
                // SAFETY: the caller's guarantees, for these WRs.
                unsafe { self.post_batch(&rest[..run], ud) }
                    .map_err(|e| PostListError { posted: done + e.posted, ..e })?;
                done += run;
            }
        }
        Ok(())
    }

    /// Whether `wr` goes through `ibv_post_send` instead of a batch (see [`ExQp::post`]).
    #[inline]
    fn posts_alone(&self, wr: &sys::ibv_send_wr) -> bool {
        wr.num_sge > 1
            && (!self.lists_right
                || (wr.send_flags & sys::IBV_SEND_INLINE != 0 && wr.num_sge as usize > INLINE_BUFS))
    }

    /// One batch of WRs none of which [posts alone](ExQp::posts_alone); on failure, how many
    /// may be posted.
    ///
    /// # Safety
    ///
    /// As [`ExQp::post`].
    unsafe fn post_batch(&self, wrs: &[SendWr<'_>], ud: bool) -> Result<(), PostListError> {
        let qp = self.raw.as_ptr();
        // SAFETY: a live extended QP and its members read at creation; the batch is opened
        // and closed within this call, on this thread.
        unsafe {
            (self.ops.start)(qp);
            for wr in wrs {
                if let Err(error) = self.build(qp, wr.as_raw(), ud) {
                    (self.ops.abort)(qp);
                    return Err(PostListError { posted: 0, error });
                }
            }
            match (self.ops.complete)(qp) {
                0 => Ok(()),
                ret => Err(self.failed(ret, wrs.len())),
            }
        }
    }

    /// A failed `ibv_wr_complete` (`ret`) of a batch of `len` WRs: its error, and what the
    /// provider leaves posted ([`FailedBatch`]).
    #[cold]
    #[inline(never)]
    pub(super) fn failed(&self, ret: i32, len: usize) -> PostListError {
        let error = errno_error(ret, "ibv_wr_complete");
        PostListError { posted: self.failed_batch.posted(&error, len), error }
    }

    /// Posts `wrs`, every one of which fits the QP's slack, as one batch: `ibv_wr_start`,
    /// each WR's id, flags, builder, UD address (when `UD`) and data, `ibv_wr_complete`, each
    /// member called as the C inline verbs call them, through the members read at creation
    /// ([`QpOps`]) and without the error tests of [`ExQp::post`]: a WR fits the slack only
    /// when the builders of its class and its data setter were set ([`ExQp::builds`],
    /// [`send_slack`](super::post::send_slack)). No WR of the batch is a bind (those never
    /// fit), so no bookkeeping follows. Returns what
    /// `ibv_wr_complete` returned ([`ExQp::failed`] makes the error of a non-zero one).
    ///
    /// `builds` are those of the WRs (a [`SendWrList`](crate::SendWrList) keeps them): when
    /// they share one, it is dispatched on once, and the loop that builds each WR is the one C
    /// code would write for that kind; else each WR's build is dispatched on.
    ///
    /// Out of line, so that the legacy path's few instructions inline into the caller. The
    /// QP comes by pointer, and the builders below take the members by pointer: through a
    /// reference the compiler may load every member the loop calls before it and keep them
    /// across the calls (more registers saved per list), where C code loads each as it calls
    /// it.
    ///
    /// # Safety
    ///
    /// As [`ExQp::post`]; every WR's demand fits the slack of this QP's
    /// [`QueuePair`](super::QueuePair); `builds` holds the build of each.
    #[inline(never)]
    pub(super) unsafe fn post_fast<const UD: bool>(
        this: *const ExQp,
        wrs: &[SendWr<'_>],
        builds: Builds,
    ) -> i32 {
        // SAFETY: the caller's live extended QP.
        let (qp, ops) = unsafe { ((*this).raw.as_ptr(), &raw const (*this).ops) };
        // SAFETY: a live extended QP and its members read at creation; the batch is opened
        // and closed within this call, on this thread; each WR as the caller
        // guarantees, of the build given (its own, or the one they share).
        unsafe {
            ((*ops).start)(qp);
            // One call per arm, so that each loop, its kind a constant, is specialised by
            // LLVM for that kind.
            match builds.common() {
                b @ Some(Build::Send) => build_each::<UD>(qp, ops, wrs, b),
                b @ Some(Build::SendWithImm) => build_each::<UD>(qp, ops, wrs, b),
                b @ Some(Build::RdmaWrite) => build_each::<UD>(qp, ops, wrs, b),
                b @ Some(Build::RdmaWriteWithImm) => build_each::<UD>(qp, ops, wrs, b),
                b @ Some(Build::RdmaRead) => build_each::<UD>(qp, ops, wrs, b),
                b @ Some(Build::LocalInv) => build_each::<UD>(qp, ops, wrs, b),
                b @ Some(Build::Other) => build_each::<UD>(qp, ops, wrs, b),
                None => build_each::<UD>(qp, ops, wrs, None),
            }
            ((*ops).complete)(qp)
        }
    }

    /// [`ExQp::post_fast`] of one WR (no loop to set up), inlined into the post: out of line
    /// it cost a call and a frame (9 instructions); the legacy path's post stays as short.
    ///
    /// # Safety
    ///
    /// As [`ExQp::post_fast`].
    #[inline(always)]
    pub(super) unsafe fn post_one_fast<const UD: bool>(&self, wr: &SendWr<'_>) -> i32 {
        let (qp, ops) = (self.raw.as_ptr(), &raw const self.ops);
        // SAFETY: as in `post_fast`.
        unsafe {
            ((*ops).start)(qp);
            build_as(qp, ops, wr.as_raw(), wr.build(), UD);
            ((*ops).complete)(qp)
        }
    }

    /// [`ExQp::post_one_fast`] of the request [`SendWr::rewrite`] would write from these
    /// parts, built from them: the buffer tier's single posts, which have the typed parts and
    /// need no request written only to be read back.
    ///
    /// # Safety
    ///
    /// As [`ExQp::post_fast`], for the WR of these parts, whose demand
    /// ([`shape_of_parts`](crate::wr::shape_of_parts)) fits the QP's slack: `sge` is its one
    /// SGE, or none for no data (inline bytes are copied during the call).
    #[inline(always)]
    pub(super) unsafe fn post_parts_fast<const UD: bool>(
        &self,
        wr_id: u64,
        sge: Option<&Sge>,
        op: SendOp,
        flags: SendFlags,
        dest: Option<&UdDestination<'_>>,
    ) -> i32 {
        let (qp, ops) = (self.raw.as_ptr(), &self.ops);
        // SAFETY: as in `post_fast`; the builder of `op` and the data setters are set (the
        // demand fits); no reference to `*qp` is held across the calls, which may write it.
        unsafe {
            (ops.start)(qp);
            (*qp).wr_id = wr_id;
            (*qp).wr_flags = flags.bits();
            match op {
                SendOp::Send => fitting(ops.send)(qp),
                SendOp::SendWithImm(imm) => fitting(ops.send_imm)(qp, imm.to_be()),
                SendOp::RdmaWrite(r) => fitting(ops.rdma_write)(qp, r.rkey.get(), r.addr),
                SendOp::RdmaWriteWithImm(r, imm) => {
                    fitting(ops.rdma_write_imm)(qp, r.rkey.get(), r.addr, imm.to_be());
                }
                SendOp::RdmaRead(r) => fitting(ops.rdma_read)(qp, r.rkey.get(), r.addr),
                SendOp::CompareSwap { remote, compare, swap } => {
                    fitting(ops.atomic_cmp_swp)(qp, remote.rkey.get(), remote.addr, compare, swap)
                }
                SendOp::FetchAdd { remote, add } => {
                    fitting(ops.atomic_fetch_add)(qp, remote.rkey.get(), remote.addr, add);
                }
            }
            if let (true, Some(d)) = (UD, dest) {
                fitting(ops.set_ud_addr)(qp, d.ah.as_raw(), d.qpn.get(), d.qkey);
            }
            // `data_fast`'s cases for one SGE or none, matched here on the `Option`: through
            // its count and pointer instead, rc_pingpong's message cost 5 instructions more.
            match (flags.contains(SendFlags::INLINE), sge) {
                (false, Some(s)) => (ops.set_sge)(qp, s.lkey().get(), s.addr(), s.length()),
                (true, Some(s)) => {
                    (ops.set_inline_data)(qp, s.addr() as *mut c_void, s.length() as usize)
                }
                // No data: an empty list, or no inline bytes, as `data_fast` sets it.
                (false, None) => {
                    (ops.set_sge_list)(qp, 0, NonNull::<sys::ibv_sge>::dangling().as_ptr())
                }
                (true, None) => (ops.set_inline_data)(qp, std::ptr::null_mut(), 0),
            }
            (ops.complete)(qp)
        }
    }

    /// Whether the QP was created for `opcode` and the provider set its builder.
    pub(super) fn builds(&self, opcode: sys::ibv_wr_opcode) -> bool {
        self.ops.builds(opcode) && self.send_ops & op_of(opcode).0 != 0
    }

    /// Whether the provider set `ibv_wr_set_inline_data_list`.
    pub(super) fn has_inline_list(&self) -> bool {
        self.ops.set_inline_data_list.is_some()
    }

    /// Whether the list setters count right (see the field).
    pub(super) fn lists_right(&self) -> bool {
        self.lists_right
    }

    /// One WR through `ibv_post_send` on the same QP.
    ///
    /// # Safety
    ///
    /// As [`ExQp::post`]; no batch is open.
    #[cold]
    unsafe fn post_one_legacy(&self, wr: &sys::ibv_send_wr) -> Result<()> {
        let mut one = *wr;
        one.next = std::ptr::null_mut();
        let mut bad = std::ptr::null_mut();
        // SAFETY: `qp_base` is the QP itself; one WR, valid under the caller's guarantees.
        let ret = unsafe {
            inl::ibv_post_send(&raw mut (*self.raw.as_ptr()).qp_base, &mut one, &mut bad)
        };
        check_errno(ret, "ibv_post_send")
    }

    /// One WR of an open batch: its id and flags, its operation, its UD address, its data.
    ///
    /// # Safety
    ///
    /// Inside a batch of this QP opened on this thread; `wr` valid as for [`ExQp::post`].
    #[inline]
    unsafe fn build(&self, qp: *mut sys::ibv_qp_ex, wr: &sys::ibv_send_wr, ud: bool) -> Result<()> {
        let (bit, name) = op_of(wr.opcode);
        if self.send_ops & bit == 0 {
            return Err(Error::Unsupported { what: name });
        }
        // SAFETY: inside the caller's batch; each arm reads only the union member its opcode
        // set (another's bytes may lie in that member's padding, uninitialised).
        let ret = unsafe {
            (*qp).wr_id = wr.wr_id;
            (*qp).wr_flags = wr.send_flags;
            let (rdma, atomic) = (&wr.wr.rdma, &wr.wr.atomic);
            match wr.opcode {
                sys::IBV_WR_SEND => inl::ibv_wr_send(qp),
                sys::IBV_WR_SEND_WITH_IMM => inl::ibv_wr_send_imm(qp, wr.__bindgen_anon_1.imm_data),
                sys::IBV_WR_SEND_WITH_INV => {
                    inl::ibv_wr_send_inv(qp, wr.__bindgen_anon_1.invalidate_rkey)
                }
                sys::IBV_WR_RDMA_WRITE => inl::ibv_wr_rdma_write(qp, rdma.rkey, rdma.remote_addr),
                sys::IBV_WR_RDMA_WRITE_WITH_IMM => inl::ibv_wr_rdma_write_imm(
                    qp,
                    rdma.rkey,
                    rdma.remote_addr,
                    wr.__bindgen_anon_1.imm_data,
                ),
                sys::IBV_WR_RDMA_READ => inl::ibv_wr_rdma_read(qp, rdma.rkey, rdma.remote_addr),
                sys::IBV_WR_ATOMIC_CMP_AND_SWP => inl::ibv_wr_atomic_cmp_swp(
                    qp,
                    atomic.rkey,
                    atomic.remote_addr,
                    atomic.compare_add,
                    atomic.swap,
                ),
                sys::IBV_WR_ATOMIC_FETCH_AND_ADD => inl::ibv_wr_atomic_fetch_add(
                    qp,
                    atomic.rkey,
                    atomic.remote_addr,
                    atomic.compare_add,
                ),
                sys::IBV_WR_LOCAL_INV => {
                    return check_op(
                        inl::ibv_wr_local_inv(qp, wr.__bindgen_anon_1.invalidate_rkey),
                        name,
                    )
                }
                _ => {
                    let bind = wr.__bindgen_anon_2.bind_mw;
                    return check_op(
                        inl::ibv_wr_bind_mw(qp, bind.mw, bind.rkey, &bind.bind_info),
                        name,
                    );
                }
            }
        };
        check_op(ret, name)?;
        if ud {
            // SAFETY: inside the batch; a UD WR was addressed by `SendWr::to` (checked
            // before posting), whose AH the caller keeps alive.
            let ud = unsafe { wr.wr.ud };
            // SAFETY: as above.
            let ret = unsafe { inl::ibv_wr_set_ud_addr(qp, ud.ah, ud.remote_qpn, ud.remote_qkey) };
            check_op(ret, "ibv_wr_set_ud_addr")?;
        }
        // SAFETY: inside the batch; the SGE list is the WR's own.
        unsafe { set_data(qp, wr) }
    }
}

/// The WR's data: inline (copied now) or by SGE, through the setter for one buffer where it
/// has one, else the list setter ([`ExQp::post`] posts the WRs these cannot build alone).
///
/// # Safety
///
/// Inside a batch of `qp`, after the WR's builder; `wr.sg_list` valid for `num_sge` SGEs.
#[inline]
unsafe fn set_data(qp: *mut sys::ibv_qp_ex, wr: &sys::ibv_send_wr) -> Result<()> {
    let inline = wr.send_flags & sys::IBV_SEND_INLINE != 0;
    let n = wr.num_sge.max(0) as usize;
    // SAFETY: inside the batch; `sg_list`/`num_sge` come from a `&[Sge]` (`SendWr`); inline
    // bytes are copied during the call, and an SGE's memory is the caller's promise.
    let ret = unsafe {
        match (inline, n) {
            (true, 0) => inl::ibv_wr_set_inline_data(qp, std::ptr::null_mut(), 0),
            (true, 1) => {
                let s = *wr.sg_list;
                inl::ibv_wr_set_inline_data(qp, s.addr as *mut c_void, s.length as usize)
            }
            (true, _) => set_inline_list(qp, std::slice::from_raw_parts(wr.sg_list, n)),
            (false, 1) => {
                let s = *wr.sg_list;
                inl::ibv_wr_set_sge(qp, s.lkey, s.addr, s.length)
            }
            // No data is an empty list (an SGE of length 0 can mean 2 GiB to some hardware).
            (false, _) => inl::ibv_wr_set_sge_list(qp, n, wr.sg_list),
        }
    };
    let name = match (inline, n) {
        (true, 0 | 1) => "ibv_wr_set_inline_data",
        (true, _) => "ibv_wr_set_inline_data_list",
        (false, 1) => "ibv_wr_set_sge",
        (false, _) => "ibv_wr_set_sge_list",
    };
    check_op(ret, name)
}

/// `ibv_wr_set_inline_data_list` over the bytes `sges` name, at most [`INLINE_BUFS`] of them.
///
/// # Safety
///
/// Inside a batch of `qp`, after the WR's builder; each SGE's `addr..addr + length` is CPU
/// memory readable for the call (the `post_send_wr` contract for inline WRs).
#[cold]
unsafe fn set_inline_list(qp: *mut sys::ibv_qp_ex, sges: &[sys::ibv_sge]) -> i32 {
    let mut bufs = [sys::ibv_data_buf { addr: std::ptr::null_mut(), length: 0 }; INLINE_BUFS];
    for (buf, s) in bufs.iter_mut().zip(sges) {
        *buf = sys::ibv_data_buf { addr: s.addr as *mut c_void, length: s.length as usize };
    }
    // SAFETY: inside the caller's batch; `bufs` holds `sges.len()` (at most INLINE_BUFS, as
    // `posts_alone` ensures) buffers the caller made readable; copied during the call.
    unsafe { inl::ibv_wr_set_inline_data_list(qp, sges.len(), bufs.as_ptr()) }
}

/// A builder's `EOPNOTSUPP` (a NULL member) as [`Error::Unsupported`] naming it.
#[inline]
fn check_op(ret: i32, name: &'static str) -> Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(Error::Unsupported { what: name })
    }
}
