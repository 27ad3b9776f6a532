//! Work-request lists linked once: the lists `ibv_post_send(3)` and `ibv_post_recv(3)` walk,
//! built so that posting one again and again costs no linking.

/// What a WR list shares with a `Vec` of its WRs, for `$list` of `$wr`s: back into a vector,
/// built from an iterator, read as a slice, and shown as one.
macro_rules! list_views {
    ($list:ident, $wr:ident) => {
        impl<'a> From<$list<'a>> for Vec<$wr<'a>> {
            /// The WRs, unlinked, each to be posted alone or listed again.
            fn from(list: $list<'a>) -> Self {
                list.wrs.into_vec()
            }
        }

        impl<'a> FromIterator<$wr<'a>> for $list<'a> {
            /// The WRs, linked in order; the list's capacity is their number.
            fn from_iter<I: IntoIterator<Item = $wr<'a>>>(wrs: I) -> Self {
                Self::from(wrs.into_iter().collect::<Vec<_>>())
            }
        }

        impl<'a> std::ops::Deref for $list<'a> {
            type Target = [$wr<'a>];

            /// The WRs, in posting order, to read (`len`, `get`, `iter`, …): changed only
            /// through the list's own methods, which keep the links.
            fn deref(&self) -> &[$wr<'a>] {
                self.wrs.as_slice()
            }
        }

        impl std::fmt::Debug for $list<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_list().entries(self.iter()).finish()
            }
        }
    };
}

mod recv;
mod send;

use rdma_verbs_sys as sys;

pub use recv::RecvWrList;
pub use send::SendWrList;

use super::{RecvWr, SendWr};
use crate::error::{Error, InvalidInputKind};

/// A WR whose C request carries the `next` link the post verbs follow.
pub(super) trait Linked {
    /// The C request (`ibv_send_wr`, `ibv_recv_wr`).
    type Raw;

    /// The C request inside `*wr`: address arithmetic only, no reference is made.
    fn raw(wr: *mut Self) -> *mut Self::Raw;

    /// Sets `(*raw).next`.
    ///
    /// # Safety
    ///
    /// `raw` is the request of a live WR that no reference in use points to.
    unsafe fn set_next(raw: *mut Self::Raw, next: *mut Self::Raw);
}

impl Linked for SendWr<'_> {
    type Raw = sys::ibv_send_wr;

    #[inline(always)]
    fn raw(wr: *mut Self) -> *mut sys::ibv_send_wr {
        wr.cast::<u8>().wrapping_add(std::mem::offset_of!(SendWr<'_>, raw)).cast()
    }

    #[inline(always)]
    unsafe fn set_next(raw: *mut sys::ibv_send_wr, next: *mut sys::ibv_send_wr) {
        // SAFETY: the caller's live, unaliased request.
        unsafe { (*raw).next = next };
    }
}

impl Linked for RecvWr<'_> {
    type Raw = sys::ibv_recv_wr;

    #[inline(always)]
    fn raw(wr: *mut Self) -> *mut sys::ibv_recv_wr {
        // (`repr(transparent)`: the WR is its request.)
        wr.cast()
    }

    #[inline(always)]
    unsafe fn set_next(raw: *mut sys::ibv_recv_wr, next: *mut sys::ibv_recv_wr) {
        // SAFETY: the caller's live, unaliased request.
        unsafe { (*raw).next = next };
    }
}

/// WRs linked in order through their requests' `next`, in storage allocated once: a full
/// chain hands WRs back instead of growing, so the links never move. Every WR's `next` points
/// to the following one's request, the last's is NULL, and a WR leaves the chain unlinked.
///
/// The links are taken from `as_mut_ptr`, the storage's own pointer (never from a reference
/// to an element, which a later access would invalidate): they stay valid under Stacked and
/// Tree Borrows whatever references to the elements are made and dropped meanwhile, until the
/// provider follows them. `scripts/miri` checks this under both models.
pub(super) struct Chain<W> {
    wrs: Vec<W>,
}

impl<W: Linked> Chain<W> {
    pub(super) fn with_capacity(capacity: usize) -> Self {
        Chain { wrs: Vec::with_capacity(capacity) }
    }

    /// The WRs of `wrs`, linked in order; the chain's capacity is the vector's.
    pub(super) fn from_vec(mut wrs: Vec<W>) -> Self {
        let base = wrs.as_mut_ptr();
        for i in 1..wrs.len() {
            // SAFETY: `i - 1` and `i` are elements, reached from `base` (see the type).
            unsafe { W::set_next(W::raw(base.add(i - 1)), W::raw(base.add(i))) };
        }
        Chain { wrs }
    }

    /// The WRs, unlinked.
    pub(super) fn into_vec(mut self) -> Vec<W> {
        let (n, base) = (self.wrs.len(), self.wrs.as_mut_ptr());
        for i in 0..n {
            // SAFETY: `i` is an element, reached from `base`.
            unsafe { W::set_next(W::raw(base.add(i)), std::ptr::null_mut()) };
        }
        self.wrs
    }

    /// Appends `wr`, linked after the last WR; hands it back when the chain is full.
    #[inline]
    pub(super) fn push(&mut self, wr: W) -> std::result::Result<(), W> {
        let n = self.wrs.len();
        if n == self.wrs.capacity() {
            return Err(wr);
        }
        // Within the capacity: the storage does not move.
        self.wrs.push(wr);
        if n > 0 {
            let base = self.wrs.as_mut_ptr();
            // SAFETY: `n - 1` and `n` are elements, reached from `base`.
            unsafe { W::set_next(W::raw(base.add(n - 1)), W::raw(base.add(n))) };
        }
        Ok(())
    }

    /// Keeps the first `n` WRs (all when there are fewer), the last of them unlinked.
    #[inline]
    pub(super) fn truncate(&mut self, n: usize) {
        self.wrs.truncate(n);
        self.end();
    }

    /// Takes the last WR back out (unlinked: it was the last).
    pub(super) fn pop(&mut self) -> Option<W> {
        let wr = self.wrs.pop()?;
        self.end();
        Some(wr)
    }

    /// Ends the chain at its last WR (a NULL `next`), after WRs left it.
    #[inline]
    fn end(&mut self) {
        if let Some(last) = self.wrs.len().checked_sub(1) {
            // SAFETY: `last` is an element, reached from the storage's pointer.
            unsafe { W::set_next(W::raw(self.wrs.as_mut_ptr().add(last)), std::ptr::null_mut()) };
        }
    }

    /// Makes the chain as long as `items` (at most its capacity), adding `blank()`s or
    /// leaving WRs out, then has `write(item, wr)` write each WR from its item where it lies
    /// (without touching its link): for a list reused post after post.
    #[inline]
    pub(super) fn rewrite<X>(
        &mut self,
        items: impl ExactSizeIterator<Item = X>,
        blank: impl Fn() -> W,
        mut write: impl FnMut(X, &mut W),
    ) {
        let n = items.len().min(self.capacity());
        self.truncate(n);
        while self.wrs.len() < n {
            // (Within the capacity.)
            let _ = self.push(blank());
        }
        for (item, wr) in items.zip(self.wrs.iter_mut()) {
            write(item, wr);
        }
    }

    pub(super) fn clear(&mut self) {
        self.wrs.clear();
    }

    /// WR `index`, to change in place (never its link: no method of `W` writes `next`).
    pub(super) fn get_mut(&mut self, index: usize) -> Option<&mut W> {
        self.wrs.get_mut(index)
    }

    #[inline(always)]
    pub(super) fn as_slice(&self) -> &[W] {
        &self.wrs
    }

    #[inline(always)]
    pub(super) fn capacity(&self) -> usize {
        self.wrs.capacity()
    }

    /// The first WR's request, heading the chain, from the storage's pointer like the links.
    /// Without a test for an empty chain: then it is dangling, to be passed to no one.
    #[inline(always)]
    pub(super) fn head(&mut self) -> *mut W::Raw {
        W::raw(self.wrs.as_mut_ptr())
    }

    /// How many WRs a provider took that refused the one whose request is at `bad` (its
    /// `bad_wr`): those before it, or all when `bad` names none of the chain's (the provider
    /// may then have taken any: counting all, the buffer tier never hands back memory the NIC
    /// might use).
    pub(super) fn taken_before(&self, bad: *const W::Raw) -> usize {
        let base = W::raw(self.wrs.as_ptr().cast_mut()) as usize;
        let size = std::mem::size_of::<W>();
        let index = (bad as usize).checked_sub(base).filter(|offset| offset % size == 0);
        index.map(|offset| offset / size).filter(|&i| i < self.wrs.len()).unwrap_or(self.wrs.len())
    }
}

/// The error of a push to the full list `list` of `capacity` WRs.
fn full(list: &str, capacity: usize) -> Error {
    Error::invalid(
        InvalidInputKind::Size,
        format!(
            "the {list} is full ({capacity} WRs, its capacity): make it with a larger \
             {list}::with_capacity"
        ),
    )
}

/// The error of `list::method` given an `index` past its `len` WRs.
fn past(list: &str, method: &str, index: usize, len: usize) -> Error {
    Error::invalid(
        InvalidInputKind::Range,
        format!("{list}::{method}: index {index} is past the list's {len} WRs"),
    )
}

#[cfg(test)]
mod tests {
    use super::send::Shape;
    use super::*;
    use crate::fit::{self, Demand, Slack};
    use crate::wr::{Build, LKey, RKey, RemoteAddr, SendFlags, SendOp, Sge};

    #[test]
    fn a_list_links_its_wrs_in_place_and_unites_what_they_ask() {
        let sges = [Sge::new(0x1000, 8, LKey::new(7)), Sge::new(0x2000, 8, LKey::new(7))];
        let mut list = SendWrList::with_capacity(3);
        assert_eq!(list.demand(), Demand::EMPTY);
        list.push(SendWr::send(0, &sges[..1])).unwrap();
        list.push(SendWr::send(1, &sges)).unwrap();
        list.push(SendWr::rdma_read(2, &sges[..1], RemoteAddr { addr: 0, rkey: RKey::new(1) }))
            .unwrap();
        let links: Vec<_> = list.iter().map(|wr| wr.raw.next.cast_const()).collect();
        let raws: Vec<_> = list.iter().map(|wr| &raw const wr.raw).collect();
        assert_eq!(links, [raws[1], raws[2], std::ptr::null()]);
        assert_eq!(list.head().cast_const(), raws[0]);
        // A refused WR counts those before it; a `bad_wr` naming none counts all.
        assert_eq!(list.taken_before(raws[2]), 2);
        assert_eq!(list.taken_before(std::ptr::null()), 3);
        assert_eq!(list.taken_before(raws[0].wrapping_byte_add(1)), 3);
        let union = |wrs: &[&SendWr<'_>]| wrs.iter().map(|wr| wr.demand()).reduce(Demand::union);
        let all: Vec<_> = list.iter().collect();
        assert_eq!(Some(list.demand()), union(&all));
        // Full: refused, never grown (the links would move).
        let err = list.push(SendWr::send(3, &sges)).unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Size));
        // INLINE changes what a WR asks, and so the list's.
        list.set_flags(1, SendFlags::INLINE).unwrap();
        assert_eq!(list.get(1).map(SendWr::send_flags), Some(SendFlags::INLINE));
        let all: Vec<_> = list.iter().collect();
        assert_eq!(Some(list.demand()), union(&all));
        list.set_wr_id(2, 9).unwrap();
        assert_eq!(list.get(2).map(SendWr::wr_id), Some(9));
        let err = list.set_flags(3, SendFlags::SIGNALED).unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Range));
        // Out of the list, a WR is alone again.
        let read = list.pop().unwrap();
        assert!(read.raw.next.is_null() && list.get(1).unwrap().raw.next.is_null());
        let all: Vec<_> = list.iter().collect();
        assert_eq!(Some(list.demand()), union(&all));
        let wrs = Vec::from(list);
        assert!(wrs.iter().all(|wr| wr.raw.next.is_null()));
        let list = SendWrList::from(wrs);
        assert_eq!(list.iter().map(SendWr::wr_id).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(list[0].raw.next.cast_const(), &raw const list[1].raw);
    }

    #[test]
    fn a_wr_of_one_plain_sge_is_built_by_its_kind_and_a_list_by_the_kind_its_wrs_share() {
        let sges = [Sge::new(0x1000, 8, LKey::new(7)), Sge::new(0x2000, 8, LKey::new(7))];
        let remote = RemoteAddr { addr: 0x8000, rkey: RKey::new(1) };
        let write = |i| SendWr::rdma_write(i, &sges[..1], remote);
        assert_eq!(write(0).build(), Build::RdmaWrite);
        assert_eq!(SendWr::send(0, &sges[..1]).build(), Build::Send);
        assert_eq!(SendWr::local_inv(0, RKey::new(3)).build(), Build::LocalInv);
        // By its data instead: inline, two SGEs, none.
        assert_eq!(write(0).flags(SendFlags::INLINE).build(), Build::Other);
        assert_eq!(SendWr::send(0, &sges).build(), Build::Other);
        assert_eq!(SendWr::send(0, &[]).build(), Build::Other);
        // A list's, however it changes: the property test below.
        let list: SendWrList<'_> = (0..3).map(write).collect();
        assert_eq!(list.builds().common(), Some(Build::RdmaWrite));
        let mixed: SendWrList<'_> = [write(0), SendWr::send(1, &sges[..1])].into_iter().collect();
        assert_eq!(mixed.builds().common(), None);
        assert_eq!(SendWrList::with_capacity(1).builds().common(), None, "none for none");
    }

    /// A change to a list, as a program may make it.
    #[derive(Clone, Debug)]
    enum Change {
        /// A WR of kind `.0` (see `wr_of`) with `.1` SGEs, inline when `.2`.
        Push(u8, usize, bool),
        Pop,
        Clear,
        /// INLINE on (or off) WR `.0` (modulo the length).
        SetInline(usize, bool),
        /// The list rewritten to `.0` WRs of op `.1`, inline when `.2`, with 0, 1, 2 SGEs.
        Rewrite(usize, u8, bool),
    }

    fn changes() -> impl proptest::strategy::Strategy<Value = Vec<Change>> {
        use proptest::prelude::*;
        let change = prop_oneof![
            (0u8..5, 0usize..3, any::<bool>()).prop_map(|(k, n, i)| Change::Push(k, n, i)),
            Just(Change::Pop),
            Just(Change::Clear),
            (0usize..4, any::<bool>()).prop_map(|(at, on)| Change::SetInline(at, on)),
            (0usize..5, 0u8..5, any::<bool>()).prop_map(|(n, k, i)| Change::Rewrite(n, k, i)),
        ];
        proptest::collection::vec(change, 1..24)
    }

    proptest::proptest! {
        // Under Miri (scripts/miri runs these tests for the links' pointer work): a few cases,
        // and no file of failures to read, which its isolation refuses.
        #![proptest_config({
            use proptest::test_runner::Config;
            let few = Config { cases: 8, failure_persistence: None, ..Config::default() };
            if cfg!(miri) { few } else { Config::default() }
        })]

        /// Whatever changes a list, and in whatever order, what it keeps of its WRs (each one's
        /// demand and build, their demands' union, their common build) is what they would give
        /// worked out anew.
        #[test]
        fn a_list_keeps_the_shape_of_the_wrs_it_holds(changes in changes()) {
            let sges = [Sge::new(0x1000, 8, LKey::new(7)), Sge::new(0x2000, 300, LKey::new(7))];
            let remote = RemoteAddr { addr: 0x8000, rkey: RKey::new(1) };
            let wr_of = |kind: u8, n: usize, inline: bool| {
                let sges = &sges[..n];
                let wr = match kind {
                    0 => SendWr::send(1, sges),
                    1 => SendWr::send_with_imm(1, sges, 9),
                    2 => SendWr::rdma_write(1, sges, remote),
                    3 => SendWr::rdma_read(1, sges, remote),
                    _ => SendWr::local_inv(1, RKey::new(3)),
                };
                wr.flags(if inline { SendFlags::INLINE } else { SendFlags::empty() })
            };
            let mut list = SendWrList::with_capacity(4);
            for change in changes {
                match change {
                    Change::Push(kind, n, inline) => drop(list.push(wr_of(kind, n, inline))),
                    Change::Pop => drop(list.pop()),
                    Change::Clear => list.clear(),
                    Change::SetInline(at, on) if !list.is_empty() => {
                        let flags = if on { SendFlags::INLINE } else { SendFlags::SIGNALED };
                        list.set_flags(at % list.len(), flags).unwrap();
                    }
                    Change::SetInline(..) => {}
                    Change::Rewrite(n, kind, inline) => list.rewrite(n, |i, wr| {
                        let ops = [SendOp::Send, SendOp::SendWithImm(9), SendOp::RdmaWrite(remote),
                            SendOp::RdmaRead(remote)];
                        let sges = &sges[..i % 3];
                        let len = sges.iter().map(|s| u64::from(s.length())).sum();
                        let flags = if inline { SendFlags::INLINE } else { SendFlags::empty() };
                        // SAFETY: the list's WRs come from `SendWr::of`; `sges` outlives it.
                        unsafe { wr.rewrite(2, sges, len, ops[usize::from(kind) % 4], flags, None) };
                    }),
                }
                proptest::prop_assert!(list.iter().all(SendWr::is_current), "{list:?}");
                proptest::prop_assert!(list.shape == Shape::of_all(&list), "{list:?}");
                let builds: Vec<_> = list.iter().map(SendWr::build).collect();
                let common = builds.first().filter(|&&b| builds.iter().all(|&c| c == b));
                proptest::prop_assert_eq!(list.builds().common(), common.copied());
            }
        }
    }

    #[test]
    fn a_list_whose_union_overstates_a_length_fits_by_its_maximum() {
        // 200 | 60 = 252 inline bytes in the union, against a limit of 220 both keep.
        let sges = [Sge::new(0x1000, 200, LKey::new(7)), Sge::new(0x2000, 60, LKey::new(7))];
        let inline = |i: usize| {
            let mut wr = SendWr::send(i as u64, &sges[i..=i]);
            wr.set_flags(SendFlags::INLINE);
            wr
        };
        let list: SendWrList<'_> = (0..2).map(inline).collect();
        let slack = Slack::ANY.at_most(fit::SGES, 1).at_most(fit::INLINE, 220).exact();
        assert!(!list.demand().fits(slack), "the union overstates");
        assert!(list.maximum_fits(slack), "the maximum fits");
        assert!(!list.maximum_fits(Slack::ANY.at_most(fit::INLINE, 199).exact()), "200 does not");
        let empty = SendWrList::with_capacity(1);
        let any = Slack::ANY.exact();
        assert!(!empty.demand().fits(any) && !empty.maximum_fits(any), "nor none");
    }

    /// Posts `list` to a provider that walks it and, when `refused` names a WR (its index,
    /// past the list for one the provider does not name), fails it: what the provider saw
    /// (`wr_id`, SGE list), and the count of a failed post.
    fn post_walked(
        list: &mut RecvWrList<'_>,
        refused: Option<usize>,
    ) -> (Vec<(u64, *mut sys::ibv_sge)>, std::result::Result<(), usize>) {
        let mut seen = Vec::new();
        let result = list.post_with("ibv_post_recv", |head, bad| {
            let mut wr = head;
            while !wr.is_null() {
                // SAFETY: the list's own chain, alive and unchanged during the call.
                unsafe { (seen.push(((*wr).wr_id, (*wr).sg_list)), wr = (*wr).next) };
            }
            let Some(index) = refused else { return 0 };
            *bad = head.wrapping_add(index);
            libc::ENOMEM
        });
        (seen, result.map_err(|e| e.posted))
    }

    #[test]
    fn a_receive_list_links_in_place_and_is_rewritten_without_relinking() {
        let sges = [Sge::new(0x1000, 64, LKey::new(7)), Sge::new(0x2000, 64, LKey::new(7))];
        let addr = |i: usize| (&raw const sges[i]).cast_mut().cast::<sys::ibv_sge>();
        let mut list: RecvWrList<'_> = (10..13).map(|id| RecvWr::new(id, &sges[..1])).collect();
        let all = vec![(10, addr(0)), (11, addr(0)), (12, addr(0))];
        assert_eq!(post_walked(&mut list, None), (all.clone(), Ok(())));
        // A refused WR counts those before it; a `bad_wr` naming none counts all.
        assert_eq!(post_walked(&mut list, Some(1)), (all.clone(), Err(1)));
        assert_eq!(post_walked(&mut list, Some(3)), (all, Err(3)));
        let err = list.push(RecvWr::new(13, &sges)).unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Size));
        list.set_wr_id(2, 20).unwrap();
        let err = list.set_wr_id(3, 0).unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Range));
        let head = list.wrs.head();
        // Shorter, then longer again: the last WR ends the walk each time.
        list.rewrite(0..2, |i, wr| wr.refill(30 + i as u64, &sges[1..]));
        assert_eq!(post_walked(&mut list, None).0, [(30, addr(1)), (31, addr(1))]);
        list.rewrite(0..3, |i, wr| wr.refill(40 + i as u64, &sges[i % 2..=i % 2]));
        assert_eq!(post_walked(&mut list, None).0, [(40, addr(0)), (41, addr(1)), (42, addr(0))]);
        assert_eq!(list.wrs.head(), head, "the storage never moved");
        let last = list.pop().unwrap();
        assert!(last.raw.next.is_null() && list[1].raw.next.is_null());
        let wrs = Vec::from(list);
        assert!(wrs.iter().all(|wr| wr.raw.next.is_null()), "out of the list, each is alone");
        let mut empty = RecvWrList::with_capacity(1);
        let result = empty.post_with("ibv_post_recv", |_, _| panic!("an empty list is posted"));
        assert!(result.is_ok());
    }
}
