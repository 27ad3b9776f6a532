//! The receive list: receive WRs linked once.

use rdma_verbs_sys as sys;

use super::{full, past, Chain};
use crate::error::{list_error, PostListError, Result};
use crate::wr::RecvWr;

/// Receive work requests linked once into the list `ibv_post_recv(3)` walks, for
/// [`QueuePair::post_recv_wrs`](crate::QueuePair::post_recv_wrs) and
/// [`SharedReceiveQueue::post_recv_wrs`](crate::SharedReceiveQueue::post_recv_wrs) to post
/// with one call (one provider lock, one doorbell record), again and again.
///
/// Its storage is allocated once, by [`with_capacity`](Self::with_capacity) (or taken over
/// from a `Vec`): a full list hands WRs back instead of growing, so the links never move.
///
/// ```
/// # use rdma_verbs::{RecvWr, RecvWrList, Sge, LKey};
/// let slots = [[Sge::new(0x1000, 4096, LKey::new(7))], [Sge::new(0x2000, 4096, LKey::new(7))]];
/// let mut list: RecvWrList<'_> = slots.iter().zip(0..).map(|(s, id)| RecvWr::new(id, s)).collect();
/// assert!(list.push(RecvWr::new(2, &slots[0])).is_err(), "full");
/// list.set_wr_id(1, 9).unwrap();
/// assert_eq!(list.iter().map(RecvWr::wr_id).collect::<Vec<_>>(), [0, 9]);
/// ```
pub struct RecvWrList<'a> {
    pub(super) wrs: Chain<RecvWr<'a>>,
}

// (Send and Sync follow from `RecvWr`'s: the links point into the list's own storage.)

impl<'a> RecvWrList<'a> {
    /// An empty list for up to `capacity` WRs.
    ///
    /// # Panics
    ///
    /// As `Vec::with_capacity`: when the storage would pass `isize::MAX` bytes (and, as any
    /// allocation, the process aborts when memory runs out). A list need hold no more than a
    /// queue's depth.
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        RecvWrList { wrs: Chain::with_capacity(capacity) }
    }

    /// Appends `wr`, linking it after the last one.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) ([`InvalidInputKind::Size`](crate::InvalidInputKind::Size)) when the list holds
    /// [`capacity`](Self::capacity) WRs already (it never grows, so that its links stay put).
    #[inline]
    pub fn push(&mut self, wr: RecvWr<'a>) -> Result<()> {
        self.wrs.push(wr).map_err(|_| full("RecvWrList", self.capacity()))
    }

    /// Makes the list as long as `items` (at most its capacity), each WR written from its
    /// item by `write(item, wr)` (with [`RecvWr::refill`]): for a list reused post after post.
    #[inline]
    pub(crate) fn rewrite<X>(
        &mut self,
        items: impl ExactSizeIterator<Item = X>,
        write: impl FnMut(X, &mut RecvWr<'a>),
    ) {
        self.wrs.rewrite(items, || RecvWr::new(0, &[]), write);
    }

    /// Takes the last WR back out (unlinked).
    pub fn pop(&mut self) -> Option<RecvWr<'a>> {
        self.wrs.pop()
    }

    /// Removes every WR.
    pub fn clear(&mut self) {
        self.wrs.clear();
    }

    /// Sets the `wr_id` of WR `index`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) ([`InvalidInputKind::Range`](crate::InvalidInputKind::Range)) when `index` is not below
    /// the list's length.
    pub fn set_wr_id(&mut self, index: usize, wr_id: u64) -> Result<()> {
        let len = self.len();
        let wr =
            self.wrs.get_mut(index).ok_or_else(|| past("RecvWrList", "set_wr_id", index, len))?;
        wr.set_wr_id(wr_id);
        Ok(())
    }

    /// The most WRs it holds.
    #[must_use]
    #[inline]
    pub fn capacity(&self) -> usize {
        self.wrs.capacity()
    }

    /// The total length of its shortest WR (`u64::MAX` when it is empty).
    pub(crate) fn shortest_len(&self) -> u64 {
        self.wrs.as_slice().iter().map(RecvWr::total_len).min().unwrap_or(u64::MAX)
    }

    /// Hands the linked list to `post` (`ibv_post_recv` or `ibv_post_srq_recv`, named `verb`
    /// in errors) with a `bad_wr` to fill; an empty list is handed to no one.
    ///
    /// # Errors
    ///
    /// What `post` returned, with the WRs it took before the one it refused (see
    /// [`Chain::taken_before`]).
    #[inline]
    pub(crate) fn post_with(
        &mut self,
        verb: &'static str,
        post: impl FnOnce(*mut sys::ibv_recv_wr, &mut *mut sys::ibv_recv_wr) -> i32,
    ) -> std::result::Result<(), PostListError> {
        if self.is_empty() {
            return Ok(());
        }
        let mut bad = std::ptr::null_mut();
        let ret = post(self.wrs.head(), &mut bad);
        if ret != 0 {
            return Err(list_error(ret, self.wrs.taken_before(bad), verb));
        }
        Ok(())
    }
}

impl<'a> From<Vec<RecvWr<'a>>> for RecvWrList<'a> {
    /// The WRs of `wrs`, linked in order; the list's capacity is the vector's.
    fn from(wrs: Vec<RecvWr<'a>>) -> Self {
        RecvWrList { wrs: Chain::from_vec(wrs) }
    }
}

list_views!(RecvWrList, RecvWr);
