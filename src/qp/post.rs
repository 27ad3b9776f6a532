//! Raw posting: the `unsafe` tier.

use rdma_verbs_sys as sys;

use super::{QpType, QueuePair, ReceiveReady, Rts};
use crate::error::{check_errno, Error, InvalidInputKind, PostListError, Result};
use crate::wr::{note_posted, RecvWr, SendFlags, SendWr, Sge};

impl<S: ReceiveReady, T: QpType> QueuePair<'_, S, T> {
    /// `ibv_post_recv(3)`—Posts one receive work request.
    ///
    /// # Safety
    ///
    /// Until this WR's completion has been polled, or the QP has been destroyed:
    /// - the memory each SGE describes must stay allocated and registered (its
    ///   [`MemoryRegion`](crate::MemoryRegion) alive), in a region of this QP's PD;
    /// - the program must not read or write those bytes by any means (no `&`/`&mut` to them
    ///   may be used): the NIC writes them at a time of its choosing;
    /// - `wr_id` must not have bit 63 set: those ids belong to the buffer tier
    ///   ([`BufferPool`](crate::BufferPool)), whose buffers they would release.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from the provider: `ENOMEM` when the receive queue is full, `EINVAL`
    /// for more SGEs than `max_recv_sge`.
    #[doc(alias = "ibv_post_recv")]
    #[inline]
    pub unsafe fn post_recv(&self, wr: &mut RecvWr<'_>) -> Result<()> {
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP in a receive-ready state; the caller upholds the memory contract.
        let ret = unsafe { sys::inline::ibv_post_recv(self.as_raw(), wr.as_raw_mut(), &mut bad) };
        check_errno(ret, "ibv_post_recv")
    }
}

impl<T: QpType> QueuePair<'_, Rts, T> {
    /// `ibv_post_send(3)`—Posts one send work request (SEND, SEND with immediate, RDMA WRITE
    /// with or without immediate, RDMA READ, atomics, memory-window bind and invalidate; on UD
    /// QPs a SEND [addressed](SendWr::to) to a peer). A posted bind
    /// ([`SendWr::bind_mw`]) gives its window the new rkey.
    ///
    /// # Safety
    ///
    /// For a [`SendFlags::INLINE`] WR the provider copies the bytes during this call, reading
    /// each SGE's `addr` as a **CPU pointer** (not through the region: the lkey is ignored).
    /// So, for the duration of the call:
    /// - each SGE's `addr..addr + length` must be memory of this process that is allocated,
    ///   initialised and not written by anyone else — a CPU address, which differs from the
    ///   [`MemoryRegion::sge`](crate::MemoryRegion::sge) address of a region registered at
    ///   a chosen IOVA ([`register_with_iova`](crate::ProtectionDomain::register_with_iova)):
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
    /// error status.
    ///
    /// # Errors
    ///
    /// Before posting: [`Error::InvalidInput`] for more SGEs than `max_send_sge`, inline data
    /// above `max_inline_data`, an atomic on a non-RC QP or not on one 8-byte, 8-byte-aligned
    /// SGE and remote address, a UD send without a destination or above the path MTU;
    /// [`Error::Unsupported`] for atomics on a device without them. Then [`Error::Verb`] from
    /// the provider (`ENOMEM`: the send queue is full).
    #[doc(alias = "ibv_post_send")]
    // Always inlined: the caller then tests the `Result`'s tag instead of receiving it through
    // memory, and no frame is built (scripts/bench-counts: 85 → 66 instructions per legacy
    // post, the direct call 28).
    #[inline(always)]
    pub unsafe fn post_send(&self, wr: &mut SendWr<'_>) -> Result<()> {
        self.check_send(wr)?;
        if let Some(ex) = &self.ex {
            // SAFETY: a live QP in RTS; the caller upholds the memory contract.
            unsafe { ex.post(std::slice::from_ref(wr.as_raw()), T::RAW == sys::IBV_QPT_UD) }
                .map_err(|e| e.error)?;
        } else {
            let mut bad = std::ptr::null_mut();
            // SAFETY: a live QP in RTS; one WR (`as_single` clears a `next` left by an earlier
            // list post); the caller upholds the memory contract.
            let ret =
                unsafe { sys::inline::ibv_post_send(self.as_raw(), wr.as_single(), &mut bad) };
            check_errno(ret, "ibv_post_send")?;
        }
        wr.note_posted();
        Ok(())
    }

    /// `ibv_post_send(3)` or `ibv_wr_post(3)`—Posts `wrs` with one doorbell: perftest's post
    /// lists. Typically only the last is [`SendFlags::SIGNALED`]: on an RC send queue its
    /// completion means all before it are done.
    ///
    /// On the legacy path the WRs go as one linked list to `ibv_post_send`; on the extended
    /// path ([`QueuePair::send_path`]) as one batch: `ibv_wr_start`, each WR's builders,
    /// one `ibv_wr_complete`. On rxe without rdma-core PRs 1744 and 1751 (Debian's 33.2, 44.0
    /// and 56.1 among them), whose `ibv_wr_set_sge_list` and `ibv_wr_set_inline_data_list`
    /// count the length wrong, a WR with several SGEs goes through `ibv_post_send` on its
    /// own, in order between batches.
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_send`], for every WR of the list.
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
    pub unsafe fn post_send_list(&self, wrs: &mut [SendWr<'_>]) -> Result<(), PostListError> {
        for wr in wrs.iter() {
            self.check_send(wr).map_err(|error| PostListError { posted: 0, error })?;
        }
        // SAFETY: SendWr is a transparent ibv_send_wr; the caller upholds the memory contract.
        unsafe {
            self.post_send_chain(std::slice::from_raw_parts_mut(wrs.as_mut_ptr().cast(), wrs.len()))
        }
    }

    /// Posts `wrs` with one doorbell: linked through their `next` pointers for
    /// `ibv_post_send`, or as one `ibv_wr_*` batch; on failure, how many were accepted before
    /// the refused one (all, when the provider does not say).
    ///
    /// # Safety
    ///
    /// Every WR must be valid for `ibv_post_send(3)` under [`QueuePair::post_send`]'s contract.
    pub(crate) unsafe fn post_send_chain(
        &self,
        wrs: &mut [sys::ibv_send_wr],
    ) -> Result<(), PostListError> {
        if wrs.is_empty() {
            return Ok(());
        }
        if let Some(ex) = &self.ex {
            // SAFETY: a live QP in RTS; the caller upholds the memory contract.
            let result = unsafe { ex.post(wrs, T::RAW == sys::IBV_QPT_UD) };
            let posted = result.as_ref().map_or_else(|e| e.posted, |()| wrs.len());
            wrs[..posted].iter().for_each(note_posted);
            return result;
        }
        // Every link, and the head the provider walks from, derive from one pointer, and the
        // slice is not used again until the provider returns: the links stay valid under
        // Stacked and Tree Borrows. (No Miri toolchain can be installed on the machines this
        // is built on, so this is argued, not checked by Miri.)
        let n = wrs.len();
        let first = wrs.as_mut_ptr();
        let base = first as usize;
        for i in 0..n {
            let next = if i + 1 < n { first.wrapping_add(i + 1) } else { std::ptr::null_mut() };
            // SAFETY: `i < n`, inside the slice `first` came from.
            unsafe { (*first.add(i)).next = next };
        }
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP in RTS; the list is linked within `wrs`; the caller upholds the
        // memory contract.
        let ret = unsafe { sys::inline::ibv_post_send(self.as_raw(), first, &mut bad) };
        let result = check_errno(ret, "ibv_post_send").map_err(|error| {
            let offset =
                (bad as usize).wrapping_sub(base) / std::mem::size_of::<sys::ibv_send_wr>();
            // A provider that names no refused WR may have posted any of them: assume all
            // (the buffer tier then never hands back memory the NIC might use).
            let posted = if bad.is_null() || offset >= wrs.len() { wrs.len() } else { offset };
            PostListError { posted, error }
        });
        let posted = result.as_ref().map_or_else(|e| e.posted, |()| wrs.len());
        wrs[..posted].iter().for_each(note_posted);
        result
    }

    /// The checks before posting `wr`: a few comparisons inline for the common WR, the
    /// whole of them, with the error's text, out of line for the rest (atomics, and any WR
    /// the quick test doubts).
    #[inline]
    pub(crate) fn check_send(&self, wr: &SendWr<'_>) -> Result<()> {
        let inline = wr.send_flags().contains(SendFlags::INLINE);
        let common = wr.num_sge() <= self.caps.max_send_sge as usize
            && !wr.reads_remote()
            && (!inline || wr.total_len() <= u64::from(self.caps.max_inline_data))
            && (T::RAW != sys::IBV_QPT_UD
                || (wr.has_destination() && wr.total_len() <= u64::from(self.limits.ud_mtu)));
        if common {
            Ok(())
        } else {
            self.check_send_fully(wr)
        }
    }

    #[cold]
    #[inline(never)]
    fn check_send_fully(&self, wr: &SendWr<'_>) -> Result<()> {
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
            self.check_reads_remote(wr)?;
        }
        if wr.is_atomic() {
            self.check_atomic(wr)?;
        }
        if T::RAW == sys::IBV_QPT_UD {
            if !wr.has_destination() {
                return Err(Error::invalid(
                    InvalidInputKind::UdNoDestination,
                    "a UD QP posts only SENDs addressed with SendWr::to(&UdDestination)".into(),
                ));
            }
            if wr.total_len() > u64::from(self.limits.ud_mtu) {
                return Err(Error::invalid(
                    InvalidInputKind::UdTooLarge,
                    format!(
                        "a UD message carries at most the path MTU, {} bytes, not {}",
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
