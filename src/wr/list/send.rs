//! The send list: send WRs linked once, with what they ask of a QP summed up as they are
//! pushed.

use rdma_verbs_sys as sys;

use super::{full, past, Chain};
use crate::error::Result;
use crate::fit::{Demand, Slack};
use crate::wr::{Builds, SendFlags, SendOp, SendWr};

/// Send work requests linked once into the list `ibv_post_send(3)` walks, for
/// [`QueuePair::post_send_wrs`](crate::QueuePair::post_send_wrs) to post with one doorbell,
/// again and again: perftest's post lists.
///
/// The list is linked as WRs are pushed, and what its WRs ask of a QP (SGE counts, inline
/// sizes, operations) is summed up then, so that a post checks the whole list against the
/// QP with one comparison and hands it to the provider as it is. Its storage is allocated
/// once, by [`with_capacity`](Self::with_capacity) (or taken over from a `Vec`): a full list
/// hands WRs back instead of growing, so the links never move. Its WRs can be read, and their
/// flags and `wr_id`s set, in place.
///
/// ```
/// # use rdma_verbs::{SendWr, SendWrList, SendFlags, Sge, LKey};
/// let sges = [Sge::new(0x1000, 64, LKey::new(7))];
/// let mut list = SendWrList::with_capacity(4);
/// for wr_id in 0..4 {
///     list.push(SendWr::send(wr_id, &sges)).unwrap();
/// }
/// list.set_flags(3, SendFlags::SIGNALED).unwrap();
/// assert!(list.push(SendWr::send(4, &sges)).is_err(), "full");
/// assert_eq!(list.get(3).map(SendWr::send_flags), Some(SendFlags::SIGNALED));
/// ```
pub struct SendWrList<'a> {
    pub(super) wrs: Chain<SendWr<'a>>,
    /// What the WRs need together, worked out as they change.
    pub(super) shape: Shape,
}

/// What a list's WRs need, together: what they ask of the QP, and how the extended path's
/// fast batch builds them.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Shape {
    /// The union of the WRs' demands (a bound of their maximum in one instruction per WR, see
    /// [`Demand::union`]); [`Demand::EMPTY`] when there are none.
    demand: Demand,
    /// Their builds: when they share one, the batch dispatches on it once for the list
    /// instead of once per WR.
    builds: Builds,
}

impl Shape {
    const EMPTY: Shape = Shape { demand: Demand::EMPTY, builds: Builds::NONE };

    #[inline(always)]
    fn of(wr: &SendWr<'_>) -> Shape {
        Shape { demand: wr.demand(), builds: Builds::NONE.with(wr.build()) }
    }

    /// This shape with `wr`'s.
    #[must_use]
    #[inline(always)]
    fn with(self, wr: &SendWr<'_>) -> Shape {
        Shape { demand: self.demand.union(wr.demand()), builds: self.builds.with(wr.build()) }
    }

    pub(super) fn of_all(wrs: &[SendWr<'_>]) -> Shape {
        match wrs.split_first() {
            Some((first, rest)) => rest.iter().fold(Shape::of(first), Shape::with),
            None => Shape::EMPTY,
        }
    }
}

// (Send and Sync follow from `SendWr`'s: the links point into the list's own storage.)

impl<'a> SendWrList<'a> {
    /// An empty list for up to `capacity` WRs.
    ///
    /// # Panics
    ///
    /// As `Vec::with_capacity`: when the storage would pass `isize::MAX` bytes (and, as any
    /// allocation, the process aborts when memory runs out). A list need hold no more than a
    /// queue's depth.
    #[must_use]
    pub fn with_capacity(capacity: usize) -> Self {
        SendWrList { wrs: Chain::with_capacity(capacity), shape: Shape::EMPTY }
    }

    /// Appends `wr`, linking it after the last one.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) ([`InvalidInputKind::Size`](crate::InvalidInputKind::Size)) when the list holds
    /// [`capacity`](Self::capacity) WRs already (it never grows, so that its links stay put).
    #[inline]
    pub fn push(&mut self, wr: SendWr<'a>) -> Result<()> {
        let shape = if self.is_empty() { Shape::of(&wr) } else { self.shape.with(&wr) };
        self.wrs.push(wr).map_err(|_| full("SendWrList", self.capacity()))?;
        self.shape = shape;
        Ok(())
    }

    /// Makes the list `n` WRs long (at most its capacity: the rest is left out), WR `i`
    /// written by `write(i, wr)` (with [`SendWr::rewrite`]), and works out its shape anew:
    /// for a list reused post after post, whose WRs are written where they lie, linked once.
    #[inline]
    pub(crate) fn rewrite(&mut self, n: usize, mut write: impl FnMut(usize, &mut SendWr<'a>)) {
        let mut shape = Shape::EMPTY;
        let blank = || SendWr::of(0, &[], SendOp::Send, SendFlags::empty(), None);
        self.wrs.rewrite(0..n, blank, |i, wr| {
            write(i, wr);
            shape = if i == 0 { Shape::of(wr) } else { shape.with(wr) };
        });
        self.shape = shape;
    }

    /// Takes the last WR back out (unlinked).
    pub fn pop(&mut self) -> Option<SendWr<'a>> {
        let wr = self.wrs.pop()?;
        self.shape = Shape::of_all(self.wrs.as_slice());
        Some(wr)
    }

    /// Removes every WR.
    pub fn clear(&mut self) {
        self.wrs.clear();
        self.shape = Shape::EMPTY;
    }

    /// Sets the flags of WR `index` (replacing earlier ones), e.g. to signal the last.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) ([`InvalidInputKind::Range`](crate::InvalidInputKind::Range)) when `index` is not below
    /// the list's length.
    pub fn set_flags(&mut self, index: usize, flags: SendFlags) -> Result<()> {
        let wr = self.element(index, "set_flags")?;
        let before = Shape::of(wr);
        wr.set_flags(flags);
        if Shape::of(wr) != before {
            // Only INLINE changes a WR's shape; the list's may shrink, so it is worked out anew.
            self.shape = Shape::of_all(self.wrs.as_slice());
        }
        Ok(())
    }

    /// Sets the `wr_id` of WR `index`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) ([`InvalidInputKind::Range`](crate::InvalidInputKind::Range)) when `index` is not below
    /// the list's length.
    pub fn set_wr_id(&mut self, index: usize, wr_id: u64) -> Result<()> {
        self.element(index, "set_wr_id")?.set_wr_id(wr_id);
        Ok(())
    }

    /// WR `index`, or the error naming `method`.
    fn element(&mut self, index: usize, method: &str) -> Result<&mut SendWr<'a>> {
        let len = self.len();
        self.wrs.get_mut(index).ok_or_else(|| past("SendWrList", method, index, len))
    }

    /// The most WRs it holds.
    #[must_use]
    #[inline]
    pub fn capacity(&self) -> usize {
        self.wrs.capacity()
    }

    /// What the WRs ask of the QP that posts them, together: the union of their demands, a
    /// bound one instruction per WR keeps (see [`Demand::union`]). Where it does not fit,
    /// [`maximum_fits`](Self::maximum_fits) may still.
    #[inline(always)]
    pub(crate) fn demand(&self) -> Demand {
        self.shape.demand
    }

    /// How the extended path's fast batch builds the WRs: see [`Builds::common`].
    #[inline(always)]
    pub(crate) fn builds(&self) -> Builds {
        self.shape.builds
    }

    /// Whether the field-wise maximum of the WRs' demands fits `slack`, for a list whose
    /// union overstates a length (never for an empty list).
    #[cold]
    #[inline(never)]
    pub(crate) fn maximum_fits(&self, slack: Slack) -> bool {
        self.iter().map(SendWr::demand).reduce(Demand::max).is_some_and(|max| max.fits(slack))
    }

    /// The first WR's raw request, heading the linked list; dangling when the list is empty,
    /// to be passed to no one then (the posts never hand an empty list over).
    #[inline(always)]
    pub(crate) fn head(&mut self) -> *mut sys::ibv_send_wr {
        self.wrs.head()
    }

    /// How many WRs the provider took when it refused the one at `bad` (see
    /// [`Chain::taken_before`]).
    pub(crate) fn taken_before(&self, bad: *const sys::ibv_send_wr) -> usize {
        self.wrs.taken_before(bad)
    }
}

impl<'a> From<Vec<SendWr<'a>>> for SendWrList<'a> {
    /// The WRs of `wrs`, linked in order; the list's capacity is the vector's.
    fn from(wrs: Vec<SendWr<'a>>) -> Self {
        SendWrList { shape: Shape::of_all(&wrs), wrs: Chain::from_vec(wrs) }
    }
}

list_views!(SendWrList, SendWr);
