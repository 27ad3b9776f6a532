//! Receive work requests.

use std::marker::PhantomData;

use rdma_verbs_sys as sys;

use super::Sge;

/// A receive work request (`struct ibv_recv_wr`) over a borrowed SGE list.
#[repr(transparent)]
pub struct RecvWr<'a> {
    pub(super) raw: sys::ibv_recv_wr,
    _sges: PhantomData<&'a [Sge]>,
}

// SAFETY: the request's pointers are `sg_list`, into the borrowed `&'a [Sge]` (plain data),
// and `next`, which is NULL except inside a `RecvWrList`, which links its own elements and
// never lets one out without clearing it.
unsafe impl Send for RecvWr<'_> {}
// SAFETY: as above.
unsafe impl Sync for RecvWr<'_> {}

impl<'a> RecvWr<'a> {
    /// A receive into `sges`, reported with `wr_id`.
    #[must_use]
    #[inline]
    pub fn new(wr_id: u64, sges: &'a [Sge]) -> Self {
        let mut wr = RecvWr { raw: sys::ibv_recv_wr::default(), _sges: PhantomData };
        wr.refill(wr_id, sges);
        wr
    }

    /// The `wr_id`.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    /// Sets the `wr_id`.
    #[inline]
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.raw.wr_id = wr_id;
    }

    /// The number of SGEs.
    #[inline]
    pub fn num_sge(&self) -> usize {
        self.raw.num_sge as usize
    }

    /// The SGEs' total length in bytes: the most it receives.
    #[inline]
    pub(crate) fn total_len(&self) -> u64 {
        // SAFETY: sg_list/num_sge were built from a `&'a [Sge]` (`refill`, which `new` calls).
        let sges: &[Sge] =
            unsafe { std::slice::from_raw_parts(self.raw.sg_list.cast(), self.num_sge()) };
        sges.iter().map(|s| u64::from(s.length())).sum()
    }

    /// Makes this a receive into `sges` reported with `wr_id`, where it lies (its link, when
    /// it is in a [`RecvWrList`], is kept).
    #[inline(always)]
    pub(crate) fn refill(&mut self, wr_id: u64, sges: &'a [Sge]) {
        self.raw.wr_id = wr_id;
        self.raw.sg_list = sges.as_ptr().cast_mut().cast();
        self.raw.num_sge = i32::try_from(sges.len()).unwrap_or(i32::MAX);
    }

    /// The raw request, whose `next` is NULL (only a [`RecvWrList`] links WRs, and it lets
    /// none out linked).
    pub(crate) fn as_raw_mut(&mut self) -> *mut sys::ibv_recv_wr {
        &mut self.raw
    }
}

impl std::fmt::Debug for RecvWr<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvWr").field("wr_id", &self.wr_id()).finish_non_exhaustive()
    }
}
