//! Raw posting of receives: the `unsafe` tier.

use rdma_verbs_sys as sys;

use super::{HasReceiveQueue, QueuePair, ReceiveReady};
use crate::error::{errno_error, PostListError, Result};
use crate::grh_room::GrhRoom;
use crate::wr::{RecvWr, RecvWrList};

impl<S: ReceiveReady, T: HasReceiveQueue> QueuePair<'_, S, T> {
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
    /// Not a safety matter, but the program's to keep: the receive CQ's room (see
    /// [Room for completions](crate::CompletionQueue#room-for-completions)); raw WRs are not
    /// counted in [`CompletionQueue::due`](crate::CompletionQueue::due).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) ([`InvalidInputKind::BufferTooSmall`](crate::InvalidInputKind::BufferTooSmall)) on a UD QP for a receive
    /// shorter than the [`Grh::LEN`](crate::Grh::LEN) bytes of the GRH area every UD receive
    /// starts with (the provider would fail it and move the QP to ERROR). [`Error::Verb`](crate::Error::Verb) from
    /// the provider: `ENOMEM` when the receive queue is full, `EINVAL` for more SGEs than
    /// `max_recv_sge`.
    #[doc(alias = "ibv_post_recv")]
    #[inline(always)]
    pub unsafe fn post_recv_wr(&self, wr: &mut RecvWr<'_>) -> Result<()> {
        GrhRoom::of::<T>().check(|| wr.total_len())?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live QP in a receive-ready state; the caller upholds the memory contract.
        let ret = unsafe { sys::inline::ibv_post_recv(self.as_raw(), wr.as_raw_mut(), &mut bad) };
        if ret != 0 {
            return Err(errno_error(ret, "ibv_post_recv"));
        }
        Ok(())
    }

    /// `ibv_post_recv(3)`—Posts the WRs of `list` with one call (one provider lock and, on
    /// a NIC, one doorbell record update for all). The list was linked as it was built
    /// ([`RecvWrList`]) and goes to the provider as it is; an empty list posts nothing.
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_recv_wr`], for every WR of the list.
    ///
    /// # Errors
    ///
    /// [`PostListError`](crate::PostListError) with 0 posted and [`Error::InvalidInput`](crate::Error::InvalidInput) when a WR is refused as
    /// [`QueuePair::post_recv_wr`] refuses it (on a UD QP, one shorter than the GRH area).
    /// Otherwise the number of WRs the provider accepted before the one it refused
    /// (those are posted, the rest are not), and why: [`Error::WorkQueueFull`](crate::Error::WorkQueueFull) when the
    /// receive queue has no room, `EINVAL` for more SGEs than `max_recv_sge`. A provider that
    /// names none of the list's WRs as refused may have posted any: all are counted.
    #[doc(alias = "ibv_post_recv")]
    #[inline]
    pub unsafe fn post_recv_wrs(&self, list: &mut RecvWrList<'_>) -> Result<(), PostListError> {
        if let Err(error) = GrhRoom::of::<T>().check(|| list.shortest_len()) {
            return Err(PostListError { posted: 0, error });
        }
        list.post_with("ibv_post_recv", |head, bad| {
            // SAFETY: a live QP in a receive-ready state; `head` heads the list, linked and
            // alive for the call; the caller upholds the memory contract for each WR.
            unsafe { sys::inline::ibv_post_recv(self.as_raw(), head, bad) }
        })
    }
}
