//! Shared receive queues: one pool of receives that several QPs consume.
#![allow(unsafe_code)]

use std::marker::PhantomData;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::buffer::{post_receive, Buffer, PostError, ReceiveQueue, RecvBufferList};
use crate::cq::Credits;
use crate::error::{check_errno, check_ptr, Error, InvalidInputKind, PostListError, Result};
use crate::grh_room::{GrhRoom, SrqGrhRoom};
use crate::leak::drop_by;
use crate::lenders::Lenders;
use crate::pd::ProtectionDomain;
use crate::try_twin::try_twin;
use crate::wr::{RecvWr, RecvWrList};

/// A shared receive queue (`struct ibv_srq`, `ibv_create_srq(3)`): QPs created with it in
/// [`QpInitAttr::srq`](crate::QpInitAttr::srq) take their receives from here. A QP's error
/// does not flush the SRQ: its receives stay for the other QPs.
///
/// Like a QP it is invariant in `'a`, so buffers lent to it outlive it.
#[must_use = "the SRQ is destroyed when dropped"]
pub struct SharedReceiveQueue<'a> {
    raw: NonNull<sys::ibv_srq>,
    pd: &'a ProtectionDomain<'a>,
    max_wr: u32,
    /// The SGEs a receive may have (at least what was asked).
    max_sge: u32,
    /// The buffer pools whose chunks it was given, told when it is destroyed.
    lenders: Lenders,
    /// Its receives posted as buffers and not handed back yet, at most `max_wr`: a provider
    /// frees an SRQ slot when a receive is consumed, before its completion is polled, and the
    /// CQs it feeds keep `max_wr` entries for its receives, no more.
    credits: Credits,
    /// Whether it feeds UD QPs, whose receives need the GRH area, or had shorter ones.
    grh: SrqGrhRoom,
    _invariant: PhantomData<fn(&'a ()) -> &'a ()>,
}

// SAFETY: SRQ verbs are thread-safe (the provider locks the queue); the handle is immutable.
unsafe impl Send for SharedReceiveQueue<'_> {}
// SAFETY: as above.
unsafe impl Sync for SharedReceiveQueue<'_> {}

impl<'a> ProtectionDomain<'a> {
    /// `ibv_create_srq(3)`—A shared receive queue for `max_wr` receives of `max_sge` SGEs.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_create_srq` (`EINVAL`: sizes above the device's `max_srq_wr`
    /// / `max_srq_sge`); [`Error::Unsupported`] where the provider has no SRQs.
    #[doc(alias = "ibv_create_srq")]
    pub fn create_srq(&'a self, max_wr: u32, max_sge: u32) -> Result<SharedReceiveQueue<'a>> {
        let mut init = sys::ibv_srq_init_attr {
            attr: sys::ibv_srq_attr { max_wr, max_sge, srq_limit: 0 },
            ..Default::default()
        };
        // SAFETY: a live PD and a valid attribute struct, updated with the actual sizes.
        let raw =
            unsafe { (self.context().library().fns.ibv_create_srq)(self.as_raw(), &mut init) };
        let raw = check_ptr(raw, "ibv_create_srq")?;
        Ok(SharedReceiveQueue::adopt(raw, self, &init.attr))
    }
}

impl<'a> SharedReceiveQueue<'a> {
    /// The SRQ `raw`, created in `pd` with the sizes `attr` (as the provider updated them);
    /// it destroys `raw` when dropped.
    pub(crate) fn adopt(
        raw: NonNull<sys::ibv_srq>,
        pd: &'a ProtectionDomain<'a>,
        attr: &sys::ibv_srq_attr,
    ) -> Self {
        SharedReceiveQueue {
            raw,
            pd,
            max_wr: attr.max_wr,
            max_sge: attr.max_sge,
            lenders: Lenders::default(),
            credits: Credits::new(attr.max_wr, "shared receive queue"),
            grh: SrqGrhRoom::default(),
            _invariant: PhantomData,
        }
    }

    /// The number of receives it holds (at least what was asked).
    pub fn max_wr(&self) -> u32 {
        self.max_wr
    }

    /// The protection domain.
    pub fn pd(&self) -> &'a ProtectionDomain<'a> {
        self.pd
    }

    /// The raw SRQ pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_srq {
        self.raw.as_ptr()
    }

    /// What the buffer tier posts receives to.
    fn receive_queue(&self) -> ReceiveQueue<'_> {
        let room = GrhRoom::Srq(&self.grh);
        ReceiveQueue { pd: self.pd, max_sge: self.max_sge, room, credits: &self.credits }
    }

    /// What it remembers of the GRH area: fed UD QPs, or had receives too short for them.
    pub(crate) fn grh_room(&self) -> &SrqGrhRoom {
        &self.grh
    }

    /// `ibv_modify_srq(3)` with `IBV_SRQ_LIMIT`—Arms the limit: when fewer than `limit`
    /// receives remain, the device raises `IBV_EVENT_SRQ_LIMIT_REACHED` once (an async
    /// event), and the limit must be armed again.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `limit` is not below [`max_wr`](Self::max_wr);
    /// [`Error::Verb`] from `ibv_modify_srq`.
    #[doc(alias = "ibv_modify_srq")]
    pub fn arm_limit(&self, limit: u32) -> Result<()> {
        if limit >= self.max_wr {
            return Err(Error::invalid(
                InvalidInputKind::Range,
                format!(
                    "an SRQ limit must be below the SRQ's {} receives, not {limit}",
                    self.max_wr
                ),
            ));
        }
        let mut attr = sys::ibv_srq_attr { max_wr: 0, max_sge: 0, srq_limit: limit };
        let mask = sys::IBV_SRQ_LIMIT as i32;
        // SAFETY: a live SRQ and a valid attribute struct for the mask.
        let ret = unsafe {
            (self.pd.context().library().fns.ibv_modify_srq)(self.as_raw(), &mut attr, mask)
        };
        check_errno(ret, "ibv_modify_srq")
    }

    /// `ibv_post_srq_recv(3)`—Posts one receive work request.
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_recv_wr`](crate::QueuePair::post_recv_wr): until the WR's completion
    /// has been polled (on whichever QP consumed it) or the SRQ is destroyed, its memory stays
    /// registered and untouched, and its `wr_id` does not have bit 63 set.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] ([`InvalidInputKind::BufferTooSmall`]) for a receive shorter
    /// than the [`Grh::LEN`](crate::Grh::LEN) bytes of the GRH area once a UD QP takes its
    /// receives from this SRQ (every UD receive starts with it; the provider would fail the
    /// receive and move the QP to ERROR). A UD QP is refused an SRQ that had such receives
    /// posted ([`ProtectionDomain::create_qp`]). [`Error::Verb`] from the provider (`ENOMEM`:
    /// the SRQ is full).
    #[doc(alias = "ibv_post_srq_recv")]
    #[inline]
    pub unsafe fn post_recv_wr(&self, wr: &mut RecvWr<'_>) -> Result<()> {
        GrhRoom::Srq(&self.grh).check(|| wr.total_len())?;
        let mut bad = std::ptr::null_mut();
        // SAFETY: a live SRQ; the caller upholds the memory contract.
        let ret =
            unsafe { sys::inline::ibv_post_srq_recv(self.as_raw(), wr.as_raw_mut(), &mut bad) };
        check_errno(ret, "ibv_post_srq_recv")
    }

    /// `ibv_post_srq_recv(3)`—Posts the WRs of `list` with one call, as
    /// [`QueuePair::post_recv_wrs`](crate::QueuePair::post_recv_wrs) does on a QP; an empty
    /// list posts nothing.
    ///
    /// # Safety
    ///
    /// As [`SharedReceiveQueue::post_recv_wr`], for every WR of the list.
    ///
    /// # Errors
    ///
    /// [`PostListError`] with 0 posted and [`Error::InvalidInput`] when a WR is refused as
    /// [`SharedReceiveQueue::post_recv_wr`] refuses it; otherwise the number of WRs the provider
    /// accepted before the one it refused, and why ([`Error::WorkQueueFull`]: the SRQ is full).
    #[doc(alias = "ibv_post_srq_recv")]
    #[inline]
    pub unsafe fn post_recv_wrs(&self, list: &mut RecvWrList<'_>) -> Result<(), PostListError> {
        if let Err(error) = GrhRoom::Srq(&self.grh).check(|| list.shortest_len()) {
            return Err(PostListError { posted: 0, error });
        }
        list.post_with("ibv_post_srq_recv", |head, bad| {
            // SAFETY: a live SRQ; `head` heads the list, linked and alive for the call; the
            // caller upholds the memory contract for each WR.
            unsafe { sys::inline::ibv_post_srq_recv(self.as_raw(), head, bad) }
        })
    }

    try_twin! {
        /// `ibv_post_srq_recv(3)`—Posts `buffer`'s whole capacity as a receive; it comes back
        /// from [`BufferPool::complete`](crate::BufferPool::complete) with the completion of the
        /// QP that consumed it.
        ///
        /// # Errors
        ///
        /// [`Error::InvalidInput`] when the buffer's pool is registered in another PD than the
        /// SRQ's or without `LOCAL_WRITE`, or when the SRQ takes no SGE per receive (`max_sge`
        /// 0) or the buffer is shorter than the GRH area of a UD QP the SRQ feeds, else the
        /// provider's. The buffer goes back to its pool;
        /// [`try_post_recv_buffer`](Self::try_post_recv_buffer) hands it back.
        #[doc(alias = "ibv_post_srq_recv")]
        pub fn post_recv_buffer / try_post_recv_buffer<'p>(
            &self,
            buffer: Buffer<'p>,
        ) -> Result<(), PostError<'p>>
        where 'p: 'a
        try:
        /// [`post_recv_buffer`](Self::post_recv_buffer), handing the buffer back on failure.
        ///
        /// # Errors
        ///
        /// [`PostError`] with the buffer, unchanged, and the error of
        /// [`post_recv_buffer`](Self::post_recv_buffer).
        #[doc(alias = "ibv_post_srq_recv")]
        {
            self.lenders.note(buffer.pool_queues());
            post_receive(buffer, &self.receive_queue(), |wr| {
                // SAFETY: the chunk is the NIC's alone until `complete` sees its completion; the
                // pool outlives this SRQ ('p: 'a, invariant), so the memory stays registered, in
                // the SRQ's PD (checked), named by its IOVA.
                unsafe { self.post_recv_wr(wr) }
            })
        }
    }

    /// `ibv_post_srq_recv(3)`—Posts every buffer of `list` as a receive of its whole
    /// capacity, with one call, and empties the list, as
    /// [`QueuePair::post_recv_buffers`](crate::QueuePair::post_recv_buffers) does on a QP;
    /// each comes back with the completion of the QP that consumed it.
    ///
    /// # Errors
    ///
    /// As [`QueuePair::post_recv_buffers`](crate::QueuePair::post_recv_buffers), with the
    /// SRQ's PD (`ENOMEM`: the SRQ is full).
    #[doc(alias = "ibv_post_srq_recv")]
    pub fn post_recv_buffers<'p>(&self, list: &mut RecvBufferList<'p>) -> Result<()>
    where
        'p: 'a,
    {
        let note = |buffer: &Buffer<'p>| self.lenders.note(buffer.pool_queues());
        list.post(&self.receive_queue(), note, "ibv_post_srq_recv", |head, bad| {
            // SAFETY: a live SRQ; `head` is a valid list of WRs, each naming one whole chunk,
            // the NIC's alone until `complete` sees its completion, by its IOVA in a region of
            // the SRQ's PD with LOCAL_WRITE (checked) whose pool outlives the SRQ ('p: 'a,
            // invariant); the wr_ids are the tier's own.
            unsafe { sys::inline::ibv_post_srq_recv(self.as_raw(), head, bad) }
        })
    }

    /// `ibv_destroy_srq(3)`—Destroys the SRQ, reporting failure (dropping logs instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`]: `EBUSY` while a QP still uses it; the SRQ is then leaked.
    #[doc(alias = "ibv_destroy_srq")]
    pub fn destroy(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).destroy_raw()
    }

    fn destroy_raw(&mut self) -> Result<()> {
        // SAFETY: a live SRQ, destroyed once. Every QP using it borrows it, so none is alive
        // unless leaked (`std::mem::forget`), and then the kernel refuses with `EBUSY`.
        let ret = unsafe { (self.pd.context().library().fns.ibv_destroy_srq)(self.as_raw()) };
        check_errno(ret, "ibv_destroy_srq")?;
        // SAFETY: destroyed; the pools it was given chunks of outlive it ('p: 'a).
        unsafe { self.lenders.release() };
        Ok(())
    }
}

drop_by!(SharedReceiveQueue<'_>, destroy_raw, |_| "a shared receive queue");

impl std::fmt::Debug for SharedReceiveQueue<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedReceiveQueue").field("max_wr", &self.max_wr).finish()
    }
}
