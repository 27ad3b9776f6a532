//! Work requests: what is posted to a queue pair.
//!
//! The builders here are safe: they only describe memory (address, length, key). Handing a
//! description to the NIC is the `unsafe` step, [`QueuePair::post_send_wr`] and
//! [`QueuePair::post_recv_wr`], whose contracts say how long the memory must stay untouched.
//!
//! [`QueuePair::post_send_wr`]: crate::QueuePair::post_send_wr
//! [`QueuePair::post_recv_wr`]: crate::QueuePair::post_recv_wr
#![allow(unsafe_code)] // writing the unions of ibv_send_wr

use std::marker::PhantomData;

use bitflags::bitflags;
use rdma_verbs_sys as sys;

use crate::ah::UdDestination;
use crate::endpoint::SrqNum;
use crate::fit::Demand;

pub(crate) mod id;
mod list;
mod op;
mod recv;
mod sge;
mod shape;

pub use list::{RecvWrList, SendWrList};
pub use op::SendOp;
pub use recv::RecvWr;
pub use sge::{LKey, RKey, RemoteAddr, Sge};
use shape::{kind_of_opcode, shape};
pub(crate) use shape::{shape_of_parts, Build, Builds};

/// The most buffers an inline WR built in an extended batch may have
/// (`ibv_wr_set_inline_data_list` takes them from an array on the stack); one with more goes
/// through `ibv_post_send`.
pub(crate) const INLINE_BUFS: usize = 32;

bitflags! {
    /// Flags of a send work request (`enum ibv_send_flags`), `ibv_post_send(3)`.
    #[repr(transparent)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct SendFlags: u32 {
        /// `IBV_SEND_FENCE`: wait for earlier RDMA READs and atomics first.
        const FENCE = sys::IBV_SEND_FENCE;
        /// `IBV_SEND_SIGNALED`: generate a completion even when the QP signals selectively.
        const SIGNALED = sys::IBV_SEND_SIGNALED;
        /// `IBV_SEND_SOLICITED`: wake a receiver waiting for solicited events.
        const SOLICITED = sys::IBV_SEND_SOLICITED;
        /// `IBV_SEND_INLINE`: copy the data into the WQE at post time (no lkey needed).
        const INLINE = sys::IBV_SEND_INLINE;
        /// `IBV_SEND_IP_CSUM`: offload the IP checksum (raw packet QPs).
        const IP_CSUM = sys::IBV_SEND_IP_CSUM;
        const _ = !0;
    }
}

/// A send work request (`struct ibv_send_wr`) over a borrowed SGE list: SEND, SEND with
/// immediate or invalidate, RDMA WRITE (with immediate), RDMA READ, atomics, and the memory
/// window operations (bind, local invalidate).
///
/// ```
/// # use rdma_verbs::{SendWr, SendFlags, Sge, LKey};
/// let sges = [Sge::new(0x1000, 64, LKey::new(7))];
/// let wr = SendWr::send_with_imm(42, &sges, 0xcafe).flags(SendFlags::SIGNALED);
/// assert_eq!(wr.wr_id(), 42);
/// ```
pub struct SendWr<'a> {
    raw: sys::ibv_send_wr,
    /// What it asks of the QP, worked out from `raw` whenever `raw` changes.
    demand: Demand,
    /// How the extended path's fast batch builds it, worked out with `demand`.
    build: Build,
    _sges: PhantomData<&'a [Sge]>,
}

// SAFETY: the request's pointers are `sg_list`, into the borrowed `&'a [Sge]` (plain data);
// `wr.ud.ah`, set only by `to` from a `&'a UdDestination` whose `AddressHandle` is Sync;
// `bind_mw.mw`, set only by `bind_mw` from a `&'a mut MemoryWindow` (Send and Sync), whose
// rkey `note_posted` writes through `&mut self` or after a post that had `&mut self`; and
// `next`, which is NULL except inside a `SendWrList`, which links its own elements and never
// lets one out without clearing it. Sharing one across threads gives only reads of these.
unsafe impl Send for SendWr<'_> {}
// SAFETY: as above: `&SendWr` reads the request, never writes through its pointers.
unsafe impl Sync for SendWr<'_> {}

impl<'a> SendWr<'a> {
    /// The WR of `opcode` over `sges`, its union fields set by `fill`, its demand worked out.
    #[inline]
    fn with(
        wr_id: u64,
        sges: &'a [Sge],
        opcode: sys::ibv_wr_opcode,
        fill: impl FnOnce(&mut sys::ibv_send_wr),
    ) -> Self {
        let mut raw = sys::ibv_send_wr {
            wr_id,
            sg_list: sges.as_ptr().cast_mut().cast(),
            num_sge: i32::try_from(sges.len()).unwrap_or(i32::MAX),
            opcode,
            ..Default::default()
        };
        fill(&mut raw);
        let mut wr =
            SendWr { raw, demand: Demand::default(), build: Build::Other, _sges: PhantomData };
        wr.refresh();
        wr
    }

    /// The WR of `op` over `sges` with `flags`, addressed to `dest` (a UD SEND), for the
    /// constructors below.
    #[inline]
    pub(crate) fn of(
        wr_id: u64,
        sges: &'a [Sge],
        op: SendOp,
        flags: SendFlags,
        dest: Option<&UdDestination<'a>>,
    ) -> Self {
        let len = sges.iter().map(|s| u64::from(s.length())).sum();
        Self::of_len(wr_id, sges, len, op, flags, dest)
    }

    /// [`SendWr::of`] over SGEs of `len` bytes in all, for the buffer tier's single posts,
    /// which know it.
    #[inline(always)]
    pub(crate) fn of_len(
        wr_id: u64,
        sges: &'a [Sge],
        len: u64,
        op: SendOp,
        flags: SendFlags,
        dest: Option<&UdDestination<'a>>,
    ) -> Self {
        let raw = sys::ibv_send_wr::default();
        let mut wr =
            SendWr { raw, demand: Demand::default(), build: Build::Other, _sges: PhantomData };
        // SAFETY: `sges` and `dest` are borrowed for `'a`, as long as the WR; `len` is theirs.
        unsafe { wr.rewrite(wr_id, sges, len, op, flags, dest) };
        wr
    }

    /// Writes the request of `op` over `sges` (`len` bytes in all), with `flags`, addressed
    /// to `dest` (a UD SEND), and works its demand out: the one place that writes each
    /// [`SendOp`]'s request. In place, for the buffer tier's lists, which reuse their WRs
    /// post after post; the link to the next WR of a list (`next`) is left as it is.
    ///
    /// # Safety
    ///
    /// The WR was built by [`SendWr::of`] (its other union members are zero), `len` is the
    /// SGEs' total length, and the SGEs and `dest`'s address handle stay alive and unchanged
    /// as long as the WR is used (they are read now, for the demand, and by the provider at
    /// the post), whatever the lifetimes here.
    #[inline(always)]
    pub(crate) unsafe fn rewrite(
        &mut self,
        wr_id: u64,
        sges: &[Sge],
        len: u64,
        op: SendOp,
        flags: SendFlags,
        dest: Option<&UdDestination<'_>>,
    ) {
        let raw = &mut self.raw;
        raw.wr_id = wr_id;
        raw.sg_list = sges.as_ptr().cast_mut().cast();
        raw.num_sge = i32::try_from(sges.len()).unwrap_or(i32::MAX);
        raw.send_flags = flags.bits();
        raw.__bindgen_anon_1.imm_data = 0;
        raw.wr = sys::ibv_send_wr__bindgen_ty_2::default();
        raw.opcode = op.opcode();
        match op {
            SendOp::Send => {}
            SendOp::SendWithImm(imm) => raw.__bindgen_anon_1.imm_data = imm.to_be(),
            SendOp::RdmaWrite(remote) | SendOp::RdmaRead(remote) => set_remote(raw, remote),
            SendOp::RdmaWriteWithImm(remote, imm) => {
                set_remote(raw, remote);
                raw.__bindgen_anon_1.imm_data = imm.to_be();
            }
            SendOp::CompareSwap { remote, compare, swap } => {
                set_atomic(raw, remote, compare, swap);
            }
            SendOp::FetchAdd { remote, add } => set_atomic(raw, remote, add, 0),
        }
        if let Some(dest) = dest {
            set_destination(raw, dest);
        }
        // The demand from the parts at hand (as `refresh` works it out from the request).
        (self.demand, self.build) = shape_of_parts(sges, len, op, flags, dest);
        debug_assert!(
            (self.demand, self.build) == self.worked_out(),
            "the parts give the demand the request gives"
        );
    }

    /// Works the demand out again from the request (after any change to it).
    #[inline]
    fn refresh(&mut self) {
        (self.demand, self.build) = self.worked_out();
    }

    /// The demand and build of the request as it is now.
    #[inline]
    fn worked_out(&self) -> (Demand, Build) {
        let sges = self.sges();
        let inline = self.send_flags().contains(SendFlags::INLINE);
        let aligned = |a: u64| a.is_multiple_of(8);
        let kind = kind_of_opcode(self.raw.opcode, inline, || {
            matches!(sges, [s] if s.length() == 8 && aligned(s.addr()))
                && aligned(self.remote_addr())
        });
        shape(kind, sges.len() as u64, self.total_len(), inline, self.has_destination())
    }

    /// Whether the demand and build kept are those of the request as it is now.
    #[cfg(test)]
    pub(crate) fn is_current(&self) -> bool {
        (self.demand, self.build) == self.worked_out()
    }

    /// How the extended path's fast batch builds it.
    #[inline(always)]
    pub(crate) fn build(&self) -> Build {
        self.build
    }

    /// What the WR asks of the QP that posts it.
    #[inline(always)]
    pub(crate) fn demand(&self) -> Demand {
        self.demand
    }

    /// `IBV_WR_SEND`: the peer consumes a receive.
    #[must_use]
    #[inline]
    pub fn send(wr_id: u64, sges: &'a [Sge]) -> Self {
        Self::of(wr_id, sges, SendOp::Send, SendFlags::empty(), None)
    }

    /// `IBV_WR_SEND_WITH_IMM`: a SEND carrying 32 bits of immediate data (host order here;
    /// sent big-endian).
    #[must_use]
    #[inline]
    pub fn send_with_imm(wr_id: u64, sges: &'a [Sge], imm: u32) -> Self {
        Self::of(wr_id, sges, SendOp::SendWithImm(imm), SendFlags::empty(), None)
    }

    /// `IBV_WR_RDMA_WRITE`: write the SGEs' bytes to `remote`; the peer sees no completion.
    #[must_use]
    #[inline]
    pub fn rdma_write(wr_id: u64, sges: &'a [Sge], remote: RemoteAddr) -> Self {
        Self::of(wr_id, sges, SendOp::RdmaWrite(remote), SendFlags::empty(), None)
    }

    /// `IBV_WR_RDMA_WRITE_WITH_IMM`: an RDMA WRITE that also consumes a receive at the peer,
    /// which completes with `imm`.
    #[must_use]
    #[inline]
    pub fn rdma_write_with_imm(wr_id: u64, sges: &'a [Sge], remote: RemoteAddr, imm: u32) -> Self {
        Self::of(wr_id, sges, SendOp::RdmaWriteWithImm(remote, imm), SendFlags::empty(), None)
    }

    /// `IBV_WR_RDMA_READ`: read from `remote` into the SGEs (which need `LOCAL_WRITE`).
    #[must_use]
    #[inline]
    pub fn rdma_read(wr_id: u64, sges: &'a [Sge], remote: RemoteAddr) -> Self {
        Self::of(wr_id, sges, SendOp::RdmaRead(remote), SendFlags::empty(), None)
    }

    /// `IBV_WR_ATOMIC_CMP_AND_SWP`: if the 8 bytes at `remote` equal `compare`, write
    /// `swap`; the old value lands in the (one, 8-byte, 8-byte-aligned) SGE. RC only.
    #[inline]
    pub fn compare_swap(
        wr_id: u64,
        sges: &'a [Sge],
        remote: RemoteAddr,
        compare: u64,
        swap: u64,
    ) -> Self {
        let op = SendOp::CompareSwap { remote, compare, swap };
        Self::of(wr_id, sges, op, SendFlags::empty(), None)
    }

    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`: add `add` to the 8 bytes at `remote`; the old value
    /// lands in the (one, 8-byte, 8-byte-aligned) SGE. RC only.
    #[must_use]
    #[inline]
    pub fn fetch_add(wr_id: u64, sges: &'a [Sge], remote: RemoteAddr, add: u64) -> Self {
        Self::of(wr_id, sges, SendOp::FetchAdd { remote, add }, SendFlags::empty(), None)
    }

    /// `IBV_WR_LOCAL_INV`: invalidates `rkey` (a type-2 memory window's,
    /// [`MemoryWindow::rkey`](crate::MemoryWindow::rkey)) when it executes; from then on
    /// peers using it fail with a remote access error, and the window may be bound again.
    #[doc(alias = "IBV_WR_LOCAL_INV")]
    #[must_use]
    #[inline]
    pub fn local_inv(wr_id: u64, rkey: RKey) -> Self {
        Self::with(wr_id, &[], sys::IBV_WR_LOCAL_INV, |raw| {
            raw.__bindgen_anon_1.invalidate_rkey = rkey.get();
        })
    }

    /// `IBV_WR_SEND_WITH_INV`: a SEND that also invalidates the *peer's* `rkey` (a type-2
    /// window it bound, e.g. for this exchange) before the peer sees the receive complete
    /// (its completion has `IBV_WC_WITH_INV` in `wc_flags`). RC only.
    #[doc(alias = "IBV_WR_SEND_WITH_INV")]
    #[must_use]
    #[inline]
    pub fn send_with_inv(wr_id: u64, sges: &'a [Sge], rkey: RKey) -> Self {
        Self::with(wr_id, sges, sys::IBV_WR_SEND_WITH_INV, |raw| {
            raw.__bindgen_anon_1.invalidate_rkey = rkey.get();
        })
    }

    /// An `IBV_WR_BIND_MW` request, already checked by
    /// [`SendWr::bind_mw`](crate::SendWr::bind_mw). `mw` must be a live window the WR
    /// borrows exclusively for `'a` ([`note_posted`] writes its rkey).
    pub(crate) fn bind_mw_raw(
        wr_id: u64,
        mw: *mut sys::ibv_mw,
        rkey: RKey,
        bind_info: sys::ibv_mw_bind_info,
    ) -> Self {
        Self::with(wr_id, &[], sys::IBV_WR_BIND_MW, |raw| {
            raw.__bindgen_anon_2.bind_mw =
                sys::ibv_send_wr__bindgen_ty_4__bindgen_ty_1 { mw, rkey: rkey.get(), bind_info };
        })
    }

    /// Addresses a SEND on a UD QP to `dest`.
    #[must_use]
    #[inline]
    pub fn to(mut self, dest: &UdDestination<'a>) -> Self {
        set_destination(&mut self.raw, dest);
        self.refresh();
        self
    }

    /// Addresses a work request of an XRC initiator ([`XrcSend`](crate::XrcSend)) to the
    /// peer's XRC SRQ numbered `srqn` (`wr.qp_type.xrc.remote_srqn`, `ibv_post_send(3)`): a
    /// SEND lands in that SRQ's receives. Other QP types ignore it.
    #[must_use]
    #[inline]
    pub fn to_xrc_srq(mut self, srqn: SrqNum) -> Self {
        self.raw.qp_type.xrc.remote_srqn = srqn.get();
        self
    }

    pub(crate) fn is_atomic(&self) -> bool {
        matches!(self.raw.opcode, sys::IBV_WR_ATOMIC_CMP_AND_SWP | sys::IBV_WR_ATOMIC_FETCH_AND_ADD)
    }

    /// Whether the WR needs the responder's read/atomic resources: RDMA READ and atomics.
    #[inline]
    pub(crate) fn reads_remote(&self) -> bool {
        self.is_atomic() || self.raw.opcode == sys::IBV_WR_RDMA_READ
    }

    /// Whether this is a SEND that [`SendWr::to`] addressed (the SEND constructors zero the
    /// union, so a non-NULL AH pointer was set by `to`).
    #[inline]
    pub(crate) fn has_destination(&self) -> bool {
        let send = matches!(self.raw.opcode, sys::IBV_WR_SEND | sys::IBV_WR_SEND_WITH_IMM);
        // SAFETY: the union is initialised (zeroed, then set by a constructor or `to`).
        send && !unsafe { self.raw.wr.ud.ah }.is_null()
    }

    /// The remote address of an RDMA or atomic WR.
    pub(crate) fn remote_addr(&self) -> u64 {
        // SAFETY: both union members start with the 64-bit remote address; the constructors
        // zero the union, so it is initialised whatever the opcode.
        unsafe {
            if self.is_atomic() {
                self.raw.wr.atomic.remote_addr
            } else {
                self.raw.wr.rdma.remote_addr
            }
        }
    }

    /// Sets the send flags (replacing earlier ones).
    #[must_use]
    #[inline]
    pub fn flags(mut self, flags: SendFlags) -> Self {
        self.set_flags(flags);
        self
    }

    /// Sets the send flags of a prebuilt WR (replacing earlier ones), e.g. to signal one in
    /// `cq_mod` of a reused list.
    #[inline]
    pub fn set_flags(&mut self, flags: SendFlags) {
        let inline_changed = (self.send_flags() ^ flags).contains(SendFlags::INLINE);
        self.raw.send_flags = flags.bits();
        // Of the flags, only INLINE enters the demand and the build (see `shape`): signaling
        // one WR in `cq_mod` leaves them as they are.
        if inline_changed {
            self.refresh();
        }
    }

    /// Sets the `wr_id` of a prebuilt WR.
    #[inline]
    pub fn set_wr_id(&mut self, wr_id: u64) {
        self.raw.wr_id = wr_id;
    }

    /// The `wr_id`, returned in the completion.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    /// The send flags.
    #[must_use]
    #[inline]
    pub fn send_flags(&self) -> SendFlags {
        SendFlags::from_bits_retain(self.raw.send_flags)
    }

    /// The SGEs' total length in bytes.
    #[inline]
    pub fn total_len(&self) -> u64 {
        self.sges().iter().map(|s| u64::from(s.length())).sum()
    }

    /// The number of SGEs.
    #[inline]
    pub fn num_sge(&self) -> usize {
        self.raw.num_sge as usize
    }

    pub(crate) fn sges(&self) -> &'a [Sge] {
        // SAFETY: sg_list/num_sge were built from a `&'a [Sge]`.
        unsafe { std::slice::from_raw_parts(self.raw.sg_list.cast(), self.raw.num_sge as usize) }
    }

    /// The raw request, whose `next` is NULL (only a [`SendWrList`] links WRs, and it lets
    /// none out linked).
    #[inline(always)]
    pub(crate) fn as_raw_mut(&mut self) -> *mut sys::ibv_send_wr {
        &mut self.raw
    }

    #[inline(always)]
    pub(crate) fn as_raw(&self) -> &sys::ibv_send_wr {
        &self.raw
    }

    /// The PD of the window a bind (`IBV_WR_BIND_MW`) binds; `None` for other WRs.
    pub(crate) fn bound_window_pd(&self) -> Option<*mut sys::ibv_pd> {
        if self.raw.opcode != sys::IBV_WR_BIND_MW {
            return None;
        }
        // SAFETY: a bind's union member was set by `bind_mw_raw` from a window the WR borrows
        // for `'a` (`SendWr::bind_mw`), so it is alive; a plain field read.
        Some(unsafe { (*self.raw.__bindgen_anon_2.bind_mw.mw).pd })
    }

    /// Bookkeeping once the provider accepted this WR (see [`note_posted`]).
    #[inline]
    pub(crate) fn note_posted(&self) {
        note_posted(&self.raw);
    }
}

/// Sets the remote address and rkey of an RDMA WR, field by field: assigned whole, the
/// member's 4 bytes of padding would be left uninitialised, inside the other members' fields.
fn set_remote(raw: &mut sys::ibv_send_wr, remote: RemoteAddr) {
    raw.wr.rdma.remote_addr = remote.addr;
    raw.wr.rdma.rkey = remote.rkey.get();
}

/// Sets the remote word and operands of an atomic.
fn set_atomic(raw: &mut sys::ibv_send_wr, remote: RemoteAddr, compare_add: u64, swap: u64) {
    raw.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
        remote_addr: remote.addr,
        compare_add,
        swap,
        rkey: remote.rkey.get(),
    };
}

/// Addresses a UD SEND to `dest`.
fn set_destination(raw: &mut sys::ibv_send_wr, dest: &UdDestination<'_>) {
    raw.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
        ah: dest.ah.as_raw(),
        remote_qpn: dest.qpn.get(),
        remote_qkey: dest.qkey,
    };
}

/// Bookkeeping once the provider accepted `wr`: a memory-window bind gives the window the
/// WR's rkey (`ibv_mw.rkey`), as `ibv_bind_mw` does for type 1. The next bind must name the
/// window by its current rkey (rxe reads `ibv_mw.rkey` for that), and
/// [`MemoryWindow::rkey`](crate::MemoryWindow::rkey) reads it.
#[inline]
pub(crate) fn note_posted(wr: &sys::ibv_send_wr) {
    if wr.opcode == sys::IBV_WR_BIND_MW {
        // SAFETY: only `SendWr::bind_mw` builds BIND_MW requests, from a live window the WR
        // borrows exclusively (`&'a mut MemoryWindow`), so nothing else reads the field now.
        unsafe {
            let bind = wr.__bindgen_anon_2.bind_mw;
            (*bind.mw).rkey = bind.rkey;
        }
    }
}

impl std::fmt::Debug for SendWr<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendWr")
            .field("wr_id", &self.wr_id())
            .field("opcode", &self.raw.opcode)
            .field("flags", &self.send_flags())
            .field("sges", &self.sges())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit;

    #[test]
    fn builders_fill_the_raw_request() {
        let sges = [Sge::new(0x1000, 64, LKey::new(7)), Sge::new(0x2000, 36, LKey::new(7))];
        let remote = RemoteAddr { addr: 0xdead_0000, rkey: RKey::new(9) };
        let wr = SendWr::rdma_write_with_imm(5, &sges, remote, 0x0102_0304)
            .flags(SendFlags::SIGNALED | SendFlags::INLINE);
        assert_eq!(wr.raw.opcode, sys::IBV_WR_RDMA_WRITE_WITH_IMM);
        assert_eq!(wr.raw.num_sge, 2);
        assert_eq!(wr.total_len(), 100);
        // SAFETY: written by rdma_write_with_imm.
        let (rdma, imm) = unsafe { (wr.raw.wr.rdma, wr.raw.__bindgen_anon_1.imm_data) };
        assert_eq!((rdma.remote_addr, rdma.rkey), (0xdead_0000, 9));
        assert_eq!(imm, 0x0102_0304u32.to_be());
        assert_eq!(wr.send_flags(), SendFlags::SIGNALED | SendFlags::INLINE);
    }

    #[test]
    fn a_wrs_demand_follows_its_sges_flags_and_shape() {
        let sges = [Sge::new(0x1000, 10, LKey::new(7)), Sge::new(0x2000, 10, LKey::new(7))];
        let demand = |n, len| {
            Demand::default().with(fit::SGES, n).with(fit::LEN, len).with(fit::UNADDRESSED, 1)
        };
        let mut wr = SendWr::send(1, &sges);
        assert_eq!(wr.demand(), demand(2, 20).with(fit::SEND, 1));
        wr.set_flags(SendFlags::INLINE | SendFlags::SIGNALED);
        let inline = demand(2, 20).with(fit::SEND, 1).with(fit::INLINE, 20);
        assert_eq!(wr.demand(), inline.with(fit::INLINE_LIST, 1));
        wr.set_flags(SendFlags::SIGNALED);
        assert_eq!(wr.demand(), demand(2, 20).with(fit::SEND, 1), "INLINE cleared");
        // An atomic of the shape it needs is of its class; misshapen, only the exact checks
        // may pass it, as a bind always.
        let word = [Sge::new(0x1000, 8, LKey::new(7))];
        let remote = RemoteAddr { addr: 0x8000, rkey: RKey::new(1) };
        let atomic = demand(1, 8).with(fit::ATOMIC, 1);
        assert_eq!(SendWr::fetch_add(1, &word, remote, 1).demand(), atomic);
        let odd = RemoteAddr { addr: 0x8004, ..remote };
        assert_eq!(SendWr::fetch_add(1, &word, odd, 1).demand(), atomic.with(fit::SLOW, 1));
        assert_eq!(
            SendWr::compare_swap(1, &sges[..1], remote, 1, 2).demand(),
            demand(1, 10).with(fit::ATOMIC, 1).with(fit::SLOW, 1),
        );
        let info = sys::ibv_mw_bind_info {
            mr: std::ptr::null_mut(),
            addr: 0,
            length: 0,
            mw_access_flags: 0,
        };
        let bind = SendWr::bind_mw_raw(1, std::ptr::null_mut(), RKey::new(1), info);
        assert_eq!(bind.demand(), demand(0, 0).with(fit::SLOW, 1));
    }

    #[test]
    fn invalidation_and_bind_requests_carry_their_keys() {
        let wr = SendWr::local_inv(1, RKey::new(0x1234_5678));
        assert_eq!((wr.raw.opcode, wr.num_sge()), (sys::IBV_WR_LOCAL_INV, 0));
        // SAFETY: written by local_inv.
        assert_eq!(unsafe { wr.raw.__bindgen_anon_1.invalidate_rkey }, 0x1234_5678);
        let sges = [Sge::new(0x1000, 8, LKey::new(3))];
        let wr = SendWr::send_with_inv(2, &sges, RKey::new(0x99));
        assert_eq!((wr.raw.opcode, wr.num_sge()), (sys::IBV_WR_SEND_WITH_INV, 1));
        // SAFETY: written by send_with_inv.
        assert_eq!(unsafe { wr.raw.__bindgen_anon_1.invalidate_rkey }, 0x99);
        let info = sys::ibv_mw_bind_info {
            mr: std::ptr::null_mut(),
            addr: 0x2000,
            length: 64,
            mw_access_flags: sys::IBV_ACCESS_REMOTE_READ,
        };
        let wr = SendWr::bind_mw_raw(3, std::ptr::null_mut(), RKey::new(0x101), info);
        assert_eq!((wr.raw.opcode, wr.num_sge()), (sys::IBV_WR_BIND_MW, 0));
        // SAFETY: written by bind_mw_raw.
        let bind = unsafe { wr.raw.__bindgen_anon_2.bind_mw };
        assert_eq!((bind.rkey, bind.bind_info.addr, bind.bind_info.length), (0x101, 0x2000, 64));
    }
}
