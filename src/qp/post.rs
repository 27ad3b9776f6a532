//! Raw posting of sends: the `unsafe` tier (receives are in `post_recv`).

use rdma_verbs_sys as sys;

use super::extended::ExQp;
use super::{HasSendQueue, QpCapabilities, QpType, QueuePair, Rts, SendLimits};
use crate::ah::UdDestination;
use crate::error::{
    check_errno, errno_error, list_error, Error, InvalidInputKind, PostListError, Result,
};
use crate::fit::{self, Slack};
use crate::pd::ProtectionDomain;
use crate::wr::SendOp;
use crate::wr::{shape_of_parts, SendFlags, SendWr, SendWrList, Sge};

impl<T: HasSendQueue> QueuePair<'_, Rts, T> {
    /// `ibv_post_send(3)`—Posts one send work request (SEND, SEND with immediate, RDMA WRITE
    /// with or without immediate, RDMA READ, atomics, memory-window bind and invalidate; on UD
    /// QPs a SEND [addressed](SendWr::to) to a peer). A posted bind
    /// ([`SendWr::bind_mw`]) gives its window the new rkey.
    ///
    /// The checks below cost one comparison: what the WR asks (SGEs, bytes, operation) was
    /// summed up when it was built, what the QP allows when it was created or changed state
    /// (see [`SendWrList`] for lists). Only a WR that the comparison doubts, and memory-window
    /// binds, atomics on the legacy path and misshapen atomics, are checked field by field.
    ///
    /// # Safety
    ///
    /// For a [`SendFlags::INLINE`] WR the provider copies the bytes during this call, reading
    /// each SGE's `addr` as a **CPU pointer** (not through the region: the lkey is ignored).
    /// So, for the duration of the call:
    /// - each SGE's `addr..addr + length` must be memory of this process that is allocated,
    ///   initialised and not written by anyone else — a CPU address, which differs from the
    ///   [`MemoryRegion::sge`](crate::MemoryRegion::sge) address of a region registered at
    ///   a chosen IOVA ([`RegisterOptions::at_iova`](crate::RegisterOptions::at_iova)):
    ///   build inline SGEs from [`MemoryRegion::addr`](crate::MemoryRegion::addr) there.
    ///
    /// For every other WR, until its completion has been polled — for an unsignaled WR, until
    /// a later signaled WR of this QP has completed — or the QP has been destroyed or reset:
    /// - the memory each SGE describes (an address in the region's IOVA space) must stay
    ///   allocated and registered, in a region of this QP's PD;
    /// - for SEND and RDMA WRITE the program must not write those bytes (the NIC reads them);
    ///   for RDMA READ and atomics it must not read or write them (the NIC writes them).
    ///
    /// For every WR:
    /// - `wr_id` must not have bit 63 set: those ids belong to the buffer tier
    ///   ([`BufferPool`](crate::BufferPool)), whose buffers they would release;
    /// - on a UD QP, the address handle must stay alive until the WR completes (the WR
    ///   borrows it, but only for the call).
    ///
    /// A wrong remote address or rkey is not undefined behaviour: the WR completes with an
    /// error status. Nor is a CQ overrun, but it loses completions: keeping the send CQ's room
    /// is the program's (see [Room for completions](crate::CompletionQueue#room-for-completions)).
    ///
    /// # Errors
    ///
    /// Before posting: [`Error::InvalidInput`] for more SGEs than `max_send_sge`, inline data
    /// above `max_inline_data`, an INLINE RDMA READ or atomic, an RDMA READ or atomic on a
    /// non-RC QP or one moved to RTS with `max_rd_atomic` 0, an atomic not on one 8-byte,
    /// 8-byte-aligned SGE and remote address, a bind of a window of another PD, a UD send
    /// without a destination or above the path MTU;
    /// [`Error::Unsupported`] for atomics on a device without them. Then [`Error::Verb`] from
    /// the provider (`ENOMEM`: the send queue is full); on the extended path
    /// [`Error::Unsupported`] naming the `ibv_wr_*` builder the QP lacks. A failed
    /// `ibv_wr_complete` on a provider this crate does not know (not mlx5 or rxe) may have
    /// posted the WR anyway (`ibv_wr_post(3)` does not say): keep its memory as if it had
    /// been, until its completion or the QP's reset.
    #[doc(alias = "ibv_post_send")]
    // Always inlined: the caller then tests the `Result`'s tag instead of receiving it through
    // memory, and no frame is built.
    #[inline(always)]
    pub unsafe fn post_send_wr(&self, wr: &mut SendWr<'_>) -> Result<()> {
        // SAFETY: the caller's guarantees.
        unsafe { self.post_one(wr) }.map_err(|e| e.error)
    }

    /// [`QueuePair::post_send_wr`], saying on failure whether the provider may have posted the
    /// WR anyway ([`PostListError::posted`] 1: see [`ExQp::failed`]).
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_send_wr`].
    #[inline(always)]
    pub(crate) unsafe fn post_one(&self, wr: &mut SendWr<'_>) -> Result<(), PostListError> {
        if !wr.demand().fits(self.slack) {
            // SAFETY: the caller's guarantees.
            return unsafe { self.post_send_exactly(wr) };
        }
        match &self.ex {
            None => {
                let mut bad = std::ptr::null_mut();
                // SAFETY: a live QP in RTS; one WR (its `next` is NULL outside a list); the
                // caller upholds the memory contract; the WR fits the QP, so the op is set.
                let ret = unsafe { self.provider_post_send(wr.as_raw_mut(), &mut bad) };
                if ret != 0 {
                    return Err(PostListError {
                        posted: 0,
                        error: errno_error(ret, "ibv_post_send"),
                    });
                }
                Ok(())
            }
            Some(ex) => {
                // SAFETY: a live QP in RTS; the caller upholds the memory contract; the WR
                // fits the QP, so the fast batch can build it.
                let ret = unsafe {
                    if T::DATAGRAM {
                        ex.post_one_fast::<true>(wr)
                    } else {
                        ex.post_one_fast::<false>(wr)
                    }
                };
                if ret != 0 {
                    return Err(ex.failed(ret, 1));
                }
                Ok(())
            }
        }
    }

    /// [`QueuePair::post_one`] of the WR `SendWr::of_len` builds from these parts: on the
    /// extended path, when its demand fits, built from the parts without writing the request
    /// (the buffer tier's single posts); otherwise that WR, posted as any.
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_send_wr`], for that WR; `sge` is its one SGE (`len` bytes), or none
    /// for no data.
    #[inline(always)]
    pub(crate) unsafe fn post_parts(
        &self,
        wr_id: u64,
        sge: Option<&Sge>,
        len: u64,
        op: SendOp,
        flags: SendFlags,
        dest: Option<&UdDestination<'_>>,
    ) -> Result<(), PostListError> {
        let sges = sge.map_or(&[][..], std::slice::from_ref);
        let ex = match &self.ex {
            // The demand the WR would have, tested as `post_one` tests it.
            Some(ex) if shape_of_parts(sges, len, op, flags, dest).0.fits(self.slack) => ex,
            _ => {
                let mut wr = SendWr::of_len(wr_id, sges, len, op, flags, dest);
                // SAFETY: the caller's guarantees.
                return unsafe { self.post_one(&mut wr) };
            }
        };
        // SAFETY: a live QP in RTS; the caller upholds the memory contract; the WR fits the
        // QP, so the fast batch can build it.
        let ret = unsafe {
            if T::DATAGRAM {
                ex.post_parts_fast::<true>(wr_id, sge, op, flags, dest)
            } else {
                ex.post_parts_fast::<false>(wr_id, sge, op, flags, dest)
            }
        };
        if ret != 0 {
            return Err(ex.failed(ret, 1));
        }
        Ok(())
    }

    /// The provider's `post_send` op called as the C inline `ibv_post_send` calls it, without
    /// its NULL test: a legacy-path QP's slack lets no WR through unless the op was set when
    /// the slack was worked out ([`send_slack`]), and a context's op table does not change
    /// once it is open.
    ///
    /// # Safety
    ///
    /// As `ibv_post_send(3)`, for a WR list whose demand fits this (legacy-path) QP's slack.
    #[inline(always)]
    unsafe fn provider_post_send(
        &self,
        wr: *mut sys::ibv_send_wr,
        bad: &mut *mut sys::ibv_send_wr,
    ) -> i32 {
        let qp = self.as_raw();
        // SAFETY: a live QP, whose context is live; the op is set (see above); the caller's
        // valid arguments.
        unsafe { (*(*qp).context).ops.post_send.unwrap_unchecked()(qp, wr, bad) }
    }

    /// [`ExQp::post_fast`] of `list` for this QP's type.
    ///
    /// # Safety
    ///
    /// As [`ExQp::post_fast`].
    #[inline(always)]
    unsafe fn post_fast(&self, ex: &ExQp, list: &SendWrList<'_>) -> i32 {
        // SAFETY: the caller's guarantees; the list's builds are its WRs'.
        unsafe {
            if T::DATAGRAM {
                ExQp::post_fast::<true>(ex, list, list.builds())
            } else {
                ExQp::post_fast::<false>(ex, list, list.builds())
            }
        }
    }

    /// [`QueuePair::post_send_wr`] of a WR whose demand did not fit the slack: every check,
    /// exactly, then the post, then its bookkeeping ([`SendWr::note_posted`]).
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_send_wr`].
    #[cold]
    #[inline(never)]
    unsafe fn post_send_exactly(&self, wr: &mut SendWr<'_>) -> Result<(), PostListError> {
        let refused = |error| PostListError { posted: 0, error };
        self.check_send_fully(wr).map_err(refused)?;
        if let Some(ex) = &self.ex {
            // SAFETY: a live QP in RTS; the caller upholds the memory contract.
            unsafe { ex.post(std::slice::from_ref(wr), T::DATAGRAM) }?;
        } else {
            let mut bad = std::ptr::null_mut();
            // SAFETY: a live QP in RTS; one WR (its `next` is NULL outside a list); the caller
            // upholds the memory contract.
            let ret =
                unsafe { sys::inline::ibv_post_send(self.as_raw(), wr.as_raw_mut(), &mut bad) };
            check_errno(ret, "ibv_post_send").map_err(refused)?;
        }
        wr.note_posted();
        Ok(())
    }

    /// `ibv_post_send(3)` or `ibv_wr_post(3)`—Posts the WRs of `list` with one doorbell:
    /// perftest's post lists. Typically only the last is [`SendFlags::SIGNALED`]: on an RC
    /// send queue its completion means all before it are done.
    ///
    /// The list was linked and summed up as it was built ([`SendWrList`]): the post checks
    /// it with one comparison, whatever its length, and hands it to the provider as it is,
    /// unless the comparison doubts it; then each WR is checked as
    /// [`QueuePair::post_send_wr`] checks a doubtful one.
    ///
    /// On the legacy path the WRs go as the linked list to `ibv_post_send`; on the extended
    /// path ([`QueuePair::verbs_path`]) as one batch: `ibv_wr_start`, each WR's builders,
    /// one `ibv_wr_complete`. On rxe without rdma-core PRs 1744 and 1751 (Debian's 33.2, 44.0
    /// and 56.1 among them), whose `ibv_wr_set_sge_list` and `ibv_wr_set_inline_data_list`
    /// count the length wrong, a WR with several SGEs goes through `ibv_post_send` on its
    /// own, in order between batches.
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_send_wr`], for every WR of the list.
    ///
    /// # Errors
    ///
    /// [`PostListError`]: the number of WRs the provider accepted before the one it refused
    /// (those are posted), and why ([`Error::WorkQueueFull`] when the send queue has no
    /// room); [`Error::InvalidInput`] (with 0 posted) when a WR breaks
    /// the QP's SGE or inline limits. On the extended path which WR failed cannot be known:
    /// a WR the QP cannot build aborts the batch ([`Error::Unsupported`] naming its
    /// `ibv_wr_*` builder, 0 posted), and a failed `ibv_wr_complete` (the same errnos as
    /// `ibv_post_send`, e.g. `ENOMEM` or `ENOSPC` for a full send queue) counts what the
    /// provider's source says it leaves posted: none of the batch on mlx5 (it rolls the
    /// batch back) and none for `ENOSPC` on rxe (it never publishes a batch a builder
    /// failed), recognised by the device's `vendor_id`; all of it on other providers, since
    /// `ibv_wr_post(3)` does not say which went out.
    #[doc(alias = "ibv_post_send")]
    #[inline]
    pub unsafe fn post_send_wrs(&self, list: &mut SendWrList<'_>) -> Result<(), PostListError> {
        if list.demand().fits(self.slack) {
            // SAFETY: the caller's guarantees; the list fits the QP.
            unsafe { self.post_list_fast(list) }
        } else {
            // SAFETY: the caller's guarantees.
            unsafe { self.post_list_exactly(list, false) }
        }
    }

    /// Checks every WR of `list` as [`QueuePair::post_send_wr`] does: one comparison for the
    /// list, or each WR exactly when it doubts them.
    pub(crate) fn check_list(&self, list: &SendWrList<'_>) -> Result<()> {
        if list.demand().fits(self.slack) || list.maximum_fits(self.slack) {
            return Ok(());
        }
        list.iter().try_for_each(|wr| self.check_send_fully(wr))
    }

    /// Posts a list whose WRs passed [`QueuePair::check_list`].
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_send_wrs`].
    pub(crate) unsafe fn post_checked_list(
        &self,
        list: &mut SendWrList<'_>,
    ) -> Result<(), PostListError> {
        if list.demand().fits(self.slack) {
            // SAFETY: the caller's guarantees; the list fits the QP.
            unsafe { self.post_list_fast(list) }
        } else {
            // SAFETY: the caller's guarantees; the WRs passed the exact checks.
            unsafe { self.post_list_exactly(list, true) }
        }
    }

    /// A list that fits the QP (so it holds no bind, and no WR needing the general path),
    /// posted with the least work: the linked list to `ibv_post_send`, or one fast batch.
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_send_wrs`]; the list fits the QP (its demand, or its
    /// [`maximum`](SendWrList::maximum_fits), fits the slack: it is not empty).
    #[inline(always)]
    unsafe fn post_list_fast(&self, list: &mut SendWrList<'_>) -> Result<(), PostListError> {
        match &self.ex {
            None => {
                let mut bad = std::ptr::null_mut();
                // SAFETY: a live QP in RTS; the list, linked within its storage and not
                // empty; the caller upholds the memory contract; the list fits the QP, so the
                // op is set.
                let ret = unsafe { self.provider_post_send(list.head(), &mut bad) };
                if ret != 0 {
                    return Err(list_error(ret, list.taken_before(bad), "ibv_post_send"));
                }
                Ok(())
            }
            Some(ex) => {
                // SAFETY: a live QP in RTS; the caller upholds the memory contract; the list
                // fits the QP, so the fast batch can build every WR.
                let ret = unsafe { self.post_fast(ex, list) };
                if ret != 0 {
                    return Err(ex.failed(ret, list.len()));
                }
                Ok(())
            }
        }
    }

    /// The posts of a list whose demand (the union of its WRs') did not fit the slack: posted
    /// fast after all when only the union overstated a length and the WRs' maximum fits;
    /// else every WR checked exactly unless `checked` ([`QueuePair::check_list`]: none
    /// posted when one fails), then posted the general way.
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_send_wrs`].
    #[cold]
    #[inline(never)]
    unsafe fn post_list_exactly(
        &self,
        list: &mut SendWrList<'_>,
        checked: bool,
    ) -> Result<(), PostListError> {
        if list.maximum_fits(self.slack) {
            // SAFETY: the caller's guarantees; the list fits the QP.
            return unsafe { self.post_list_fast(list) };
        }
        if !checked {
            for wr in list.iter() {
                self.check_send_fully(wr).map_err(|error| PostListError { posted: 0, error })?;
            }
        }
        // SAFETY: the caller's guarantees; every WR passed the checks.
        unsafe { self.post_list_general(list) }
    }

    /// Posts `list` (checked) whatever it holds: through `ibv_post_send`, or in batches and
    /// single posts ([`ExQp::post`](super::extended::ExQp::post)); then each posted WR's
    /// bookkeeping. On failure, how many were accepted before the refused one (all, when the
    /// provider does not say).
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_send_wrs`]; every WR passed [`QueuePair::check_send_fully`].
    unsafe fn post_list_general(&self, list: &mut SendWrList<'_>) -> Result<(), PostListError> {
        if list.is_empty() {
            return Ok(());
        }
        let result = if let Some(ex) = &self.ex {
            // SAFETY: a live QP in RTS; the caller upholds the memory contract.
            unsafe { ex.post(list, T::DATAGRAM) }
        } else {
            let mut bad = std::ptr::null_mut();
            // SAFETY: a live QP in RTS; the list, linked within its storage and not empty; the
            // caller upholds the memory contract.
            let ret = unsafe { sys::inline::ibv_post_send(self.as_raw(), list.head(), &mut bad) };
            if ret == 0 {
                Ok(())
            } else {
                Err(list_error(ret, list.taken_before(bad), "ibv_post_send"))
            }
        };
        let posted = result.as_ref().map_or_else(|e| e.posted, |()| list.len());
        list.iter().take(posted).for_each(SendWr::note_posted);
        result
    }

    /// Every check before posting `wr`, exactly, with the error's text: for a WR whose demand
    /// did not fit the QP's slack.
    #[cold]
    #[inline(never)]
    pub(super) fn check_send_fully(&self, wr: &SendWr<'_>) -> Result<()> {
        if wr.num_sge() > self.caps.max_send_sge as usize {
            return Err(Error::invalid(
                InvalidInputKind::TooManySges,
                format!(
                    "the WR has {} SGEs; this QP allows {} (max_send_sge)",
                    wr.num_sge(),
                    self.caps.max_send_sge
                ),
            ));
        }
        if wr.send_flags().contains(SendFlags::INLINE)
            && wr.total_len() > u64::from(self.caps.max_inline_data)
        {
            return Err(Error::invalid(
                InvalidInputKind::InlineTooLarge,
                format!(
                    "{} bytes cannot be sent inline; this QP allows {} (max_inline_data)",
                    wr.total_len(),
                    self.caps.max_inline_data
                ),
            ));
        }
        if wr.reads_remote() {
            if wr.send_flags().contains(SendFlags::INLINE) {
                return Err(Error::invalid(
                    InvalidInputKind::InlineReadOrAtomic,
                    "an RDMA READ or atomic cannot be INLINE: the NIC writes its response into \
                     the SGEs, which must name registered memory with LOCAL_WRITE"
                        .into(),
                ));
            }
            self.check_reads_remote(wr)?;
        }
        if wr.is_atomic() {
            self.check_atomic(wr)?;
        }
        if wr.bound_window_pd().is_some_and(|pd| pd != self.pd.as_raw()) {
            return Err(Error::invalid(
                InvalidInputKind::OtherPd,
                "the window this bind binds belongs to another protection domain than the QP: \
                 post it on a QP of the window's PD"
                    .into(),
            ));
        }
        if T::DATAGRAM {
            if !wr.has_destination() {
                return Err(Error::invalid(
                    InvalidInputKind::UdNoDestination,
                    format!(
                        "{} QP posts only SENDs addressed with SendWr::to(&UdDestination)",
                        article_and_name::<T>()
                    ),
                ));
            }
            if wr.total_len() > u64::from(self.limits.ud_mtu) {
                return Err(Error::invalid(
                    InvalidInputKind::UdTooLarge,
                    format!(
                        "{} message carries at most the path MTU, {} bytes, not {}",
                        article_and_name::<T>(),
                        self.limits.ud_mtu,
                        wr.total_len()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// RDMA READ and atomics need RC (UC has neither; UD only sends) and a non-zero
    /// `max_rd_atomic` from RTS: with 0 the QP never issues them and they never complete.
    #[cold]
    fn check_reads_remote(&self, wr: &SendWr<'_>) -> Result<()> {
        let what = if wr.is_atomic() { "an atomic" } else { "an RDMA READ" };
        if T::RAW != sys::IBV_QPT_RC {
            let what = if wr.is_atomic() { "atomics need" } else { "an RDMA READ needs" };
            return Err(Error::invalid(
                InvalidInputKind::AtomicNotRc,
                format!("{what} an RC QP, not {}", T::NAME),
            ));
        }
        if self.limits.rd_atomic == Some(0) {
            return Err(Error::invalid(
                InvalidInputKind::Range,
                format!(
                    "{what} cannot complete on this QP: it was moved to RTS with max_rd_atomic 0 \
                     (ToRtsAttr::max_rd_atomic), so it issues no RDMA READ or atomic"
                ),
            ));
        }
        Ok(())
    }

    /// An atomic (on RC: `check_reads_remote` comes first) needs a device with atomics, and
    /// one 8-byte SGE and a remote address both 8-byte aligned (`ibv_post_send(3)`).
    #[cold]
    fn check_atomic(&self, wr: &SendWr<'_>) -> Result<()> {
        // Queried once per context, on the first atomic.
        if self.pd.context().cached_attr()?.as_raw().atomic_cap == sys::IBV_ATOMIC_NONE {
            return Err(Error::Unsupported {
                what: "atomic operations (the device's atomic_cap is IBV_ATOMIC_NONE)",
            });
        }
        let sge = wr.sges();
        let (local, remote) = (sge.first().map(Sge::addr), wr.remote_addr());
        if sge.len() != 1
            || sge[0].length() != 8
            || local.is_some_and(|a| a % 8 != 0)
            || remote % 8 != 0
        {
            return Err(Error::invalid(
                InvalidInputKind::AtomicShape,
                format!(
                "an atomic needs one 8-byte SGE at an 8-byte-aligned address and an 8-byte-aligned \
                 remote address; got {} SGE(s) of {} bytes at {:#x}, remote {remote:#x}",
                sge.len(),
                wr.total_len(),
                local.unwrap_or(0)
            ),
            ));
        }
        Ok(())
    }
}

/// "a UD", "an SRD": the type's name with its article, as messages say it.
fn article_and_name<T: QpType>() -> String {
    let article = if T::NAME.starts_with('S') { "an" } else { "a" };
    format!("{article} {}", T::NAME)
}

/// The slack of a QP of type `T` with `caps` and `limits`, posting through `ex` when it has
/// one: what each field of a WR's [`Demand`](fit::Demand) may be for the WR to pass every
/// check of [`QueuePair::check_send_fully`] and, on the extended path, to be built by the
/// fast batch ([`ExQp::post_fast`]).
pub(super) fn send_slack<T: QpType>(
    pd: &ProtectionDomain<'_>,
    caps: &QpCapabilities,
    limits: SendLimits,
    ex: Option<&ExQp>,
) -> Slack {
    let (rc, ud) = (T::RAW == sys::IBV_QPT_RC, T::DATAGRAM);
    // RDMA READ and atomics need RC and a non-zero `max_rd_atomic` (`check_reads_remote`).
    let reads = rc && limits.rd_atomic != Some(0);
    let slack = Slack::ANY
        .at_most(fit::SGES, caps.max_send_sge.into())
        .at_most(fit::INLINE, caps.max_inline_data.into())
        .allow(fit::WRITE, !ud)
        .allow(fit::READ, reads)
        .allow(fit::INV, !ud)
        .allow(fit::UNADDRESSED, !ud)
        .exact();
    // A UD QP posts only addressed SENDs within the path MTU; others any length.
    let slack = if ud { slack.at_most(fit::LEN, limits.ud_mtu.into()) } else { slack };
    match ex {
        None => {
            // SAFETY: a live context; a plain read of its op table.
            let op = unsafe { (*pd.context().as_raw()).ops.post_send.is_some() };
            // Without the op every post takes the exact path (whose verb then fails).
            let slack = if op { slack } else { slack.forbid_all() };
            // Whether the device has atomics is queried on the first one (`check_atomic`).
            slack.allow(fit::ATOMIC, false)
        }
        Some(ex) => {
            let builds = |ops: &[sys::ibv_wr_opcode]| ops.iter().all(|&op| ex.builds(op));
            let slack = slack
                .allow(fit::SEND, builds(&[sys::IBV_WR_SEND, sys::IBV_WR_SEND_WITH_IMM]))
                .allow(
                    fit::WRITE,
                    builds(&[sys::IBV_WR_RDMA_WRITE, sys::IBV_WR_RDMA_WRITE_WITH_IMM]),
                )
                .allow(fit::READ, builds(&[sys::IBV_WR_RDMA_READ]))
                // The QP was created for atomics only where the device has them.
                .allow(
                    fit::ATOMIC,
                    reads
                        && builds(&[
                            sys::IBV_WR_ATOMIC_CMP_AND_SWP,
                            sys::IBV_WR_ATOMIC_FETCH_AND_ADD,
                        ]),
                )
                .allow(fit::INV, builds(&[sys::IBV_WR_LOCAL_INV, sys::IBV_WR_SEND_WITH_INV]))
                .allow(fit::INLINE_LIST, ex.has_inline_list())
                // More inline buffers than a batch takes go through `ibv_post_send` alone.
                .allow(fit::INLINE_MANY, false);
            // Where the list setters count wrong, WRs of several SGEs go alone too.
            if ex.lists_right() {
                slack
            } else {
                slack.at_most(fit::SGES, 1)
            }
        }
    }
}
