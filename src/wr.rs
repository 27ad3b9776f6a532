//! Work requests: what is posted to a queue pair.
//!
//! The builders here are safe: they only describe memory (address, length, key). Handing a
//! description to the NIC is the `unsafe` step, [`QueuePair::post_send`] and
//! [`QueuePair::post_recv`], whose contracts say how long the memory must stay untouched.
//!
//! [`QueuePair::post_send`]: crate::QueuePair::post_send
//! [`QueuePair::post_recv`]: crate::QueuePair::post_recv
#![allow(unsafe_code)] // writing the unions of ibv_send_wr

use std::marker::PhantomData;

use bitflags::bitflags;
use rdma_verbs_sys as sys;

use crate::ah::UdDestination;
use crate::mr::{LKey, RKey};

/// A scatter/gather entry (`struct ibv_sge`): `length` bytes at `addr` of the region named by
/// `lkey`. Build one with [`MemoryRegion::sge`](crate::MemoryRegion::sge), which checks the
/// bounds.
///
/// Zero lengths: `MemoryRegion::sge` refuses an empty range, and a region holds at least one
/// byte. An empty message is a work request with *no* SGE (`SendWr::send(id, &[])`, or an
/// empty [`Buffer`](crate::Buffer) in the buffer tier); it arrives as a receive of
/// `byte_len` 0. An SGE of length 0 built with [`Sge::new`] carries no bytes: rxe and mlx5
/// skip it (the device tests check rxe), so it is harmless but pointless.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Sge(sys::ibv_sge);

impl Sge {
    /// An SGE of `length` bytes at `addr`, in the region whose local key is `lkey`.
    #[must_use]
    pub fn new(addr: u64, length: u32, lkey: LKey) -> Sge {
        Sge(sys::ibv_sge { addr, length, lkey: lkey.0 })
    }

    /// The address.
    pub fn addr(&self) -> u64 {
        self.0.addr
    }

    /// The length in bytes.
    pub fn length(&self) -> u32 {
        self.0.length
    }

    /// The local key.
    pub fn lkey(&self) -> LKey {
        LKey(self.0.lkey)
    }
}

impl std::fmt::Debug for Sge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sge")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("length", &self.length())
            .field("lkey", &self.lkey())
            .finish()
    }
}

/// A peer's memory, as the target of RDMA WRITE or the source of RDMA READ: a virtual
/// address and the remote key of the region that holds it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RemoteAddr {
    /// The address in the peer's registration.
    pub addr: u64,
    /// The peer region's remote key.
    pub rkey: RKey,
}

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
/// let sges = [Sge::new(0x1000, 64, LKey(7))];
/// let wr = SendWr::send_with_imm(42, &sges, 0xcafe).flags(SendFlags::SIGNALED);
/// assert_eq!(wr.wr_id(), 42);
/// ```
#[repr(transparent)]
pub struct SendWr<'a> {
    raw: sys::ibv_send_wr,
    _sges: PhantomData<&'a [Sge]>,
}

// SAFETY: the request's pointers are `sg_list`, into the borrowed `&'a [Sge]` (plain data);
// `wr.ud.ah`, set only by `to` from a `&'a UdDestination` whose `AddressHandle` is Sync;
// `bind_mw.mw`, set only by `bind_mw` from a `&'a mut MemoryWindow` (Send and Sync), whose
// rkey `note_posted` writes through `&mut self` or after a post that had `&mut self`; and
// `next`, which this crate sets only inside a post (`post_send_chain`) and never follows
// otherwise (`as_single` clears it before a single post). Sharing one across threads gives
// only reads of these.
unsafe impl Send for SendWr<'_> {}
// SAFETY: as above: `&SendWr` reads the request, never writes through its pointers.
unsafe impl Sync for SendWr<'_> {}

impl<'a> SendWr<'a> {
    fn new(wr_id: u64, sges: &'a [Sge], opcode: sys::ibv_wr_opcode) -> Self {
        let raw = sys::ibv_send_wr {
            wr_id,
            sg_list: sges.as_ptr().cast_mut().cast(),
            num_sge: i32::try_from(sges.len()).unwrap_or(i32::MAX),
            opcode,
            ..Default::default()
        };
        SendWr { raw, _sges: PhantomData }
    }

    /// `IBV_WR_SEND`: the peer consumes a receive.
    #[must_use]
    pub fn send(wr_id: u64, sges: &'a [Sge]) -> Self {
        Self::new(wr_id, sges, sys::IBV_WR_SEND)
    }

    /// `IBV_WR_SEND_WITH_IMM`: a SEND carrying 32 bits of immediate data (host order here;
    /// sent big-endian).
    #[must_use]
    pub fn send_with_imm(wr_id: u64, sges: &'a [Sge], imm: u32) -> Self {
        let mut wr = Self::new(wr_id, sges, sys::IBV_WR_SEND_WITH_IMM);
        wr.raw.__bindgen_anon_1.imm_data = imm.to_be();
        wr
    }

    /// `IBV_WR_RDMA_WRITE`: write the SGEs' bytes to `remote`; the peer sees no completion.
    #[must_use]
    pub fn rdma_write(wr_id: u64, sges: &'a [Sge], remote: RemoteAddr) -> Self {
        let mut wr = Self::new(wr_id, sges, sys::IBV_WR_RDMA_WRITE);
        wr.set_remote(remote);
        wr
    }

    /// `IBV_WR_RDMA_WRITE_WITH_IMM`: an RDMA WRITE that also consumes a receive at the peer,
    /// which completes with `imm`.
    #[must_use]
    pub fn rdma_write_with_imm(wr_id: u64, sges: &'a [Sge], remote: RemoteAddr, imm: u32) -> Self {
        let mut wr = Self::new(wr_id, sges, sys::IBV_WR_RDMA_WRITE_WITH_IMM);
        wr.set_remote(remote);
        wr.raw.__bindgen_anon_1.imm_data = imm.to_be();
        wr
    }

    /// `IBV_WR_RDMA_READ`: read from `remote` into the SGEs (which need `LOCAL_WRITE`).
    #[must_use]
    pub fn rdma_read(wr_id: u64, sges: &'a [Sge], remote: RemoteAddr) -> Self {
        let mut wr = Self::new(wr_id, sges, sys::IBV_WR_RDMA_READ);
        wr.set_remote(remote);
        wr
    }

    /// `IBV_WR_ATOMIC_CMP_AND_SWP`: if the 8 bytes at `remote` equal `compare`, write
    /// `swap`; the old value lands in the (one, 8-byte, 8-byte-aligned) SGE. RC only.
    pub fn compare_swap(
        wr_id: u64,
        sges: &'a [Sge],
        remote: RemoteAddr,
        compare: u64,
        swap: u64,
    ) -> Self {
        let mut wr = Self::new(wr_id, sges, sys::IBV_WR_ATOMIC_CMP_AND_SWP);
        wr.raw.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
            remote_addr: remote.addr,
            compare_add: compare,
            swap,
            rkey: remote.rkey.0,
        };
        wr
    }

    /// `IBV_WR_ATOMIC_FETCH_AND_ADD`: add `add` to the 8 bytes at `remote`; the old value
    /// lands in the (one, 8-byte, 8-byte-aligned) SGE. RC only.
    #[must_use]
    pub fn fetch_add(wr_id: u64, sges: &'a [Sge], remote: RemoteAddr, add: u64) -> Self {
        let mut wr = Self::new(wr_id, sges, sys::IBV_WR_ATOMIC_FETCH_AND_ADD);
        wr.raw.wr.atomic = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_2 {
            remote_addr: remote.addr,
            compare_add: add,
            swap: 0,
            rkey: remote.rkey.0,
        };
        wr
    }

    /// `IBV_WR_LOCAL_INV`: invalidates `rkey` (a type-2 memory window's,
    /// [`MemoryWindow::rkey`](crate::MemoryWindow::rkey)) when it executes; from then on
    /// peers using it fail with a remote access error, and the window may be bound again.
    #[doc(alias = "IBV_WR_LOCAL_INV")]
    #[must_use]
    pub fn local_inv(wr_id: u64, rkey: RKey) -> Self {
        let mut wr = Self::new(wr_id, &[], sys::IBV_WR_LOCAL_INV);
        wr.raw.__bindgen_anon_1.invalidate_rkey = rkey.0;
        wr
    }

    /// `IBV_WR_SEND_WITH_INV`: a SEND that also invalidates the *peer's* `rkey` (a type-2
    /// window it bound, e.g. for this exchange) before the peer sees the receive complete
    /// (its completion has `IBV_WC_WITH_INV` in `wc_flags`). RC only.
    #[doc(alias = "IBV_WR_SEND_WITH_INV")]
    #[must_use]
    pub fn send_with_inv(wr_id: u64, sges: &'a [Sge], rkey: RKey) -> Self {
        let mut wr = Self::new(wr_id, sges, sys::IBV_WR_SEND_WITH_INV);
        wr.raw.__bindgen_anon_1.invalidate_rkey = rkey.0;
        wr
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
        let mut wr = Self::new(wr_id, &[], sys::IBV_WR_BIND_MW);
        wr.raw.__bindgen_anon_2.bind_mw =
            sys::ibv_send_wr__bindgen_ty_4__bindgen_ty_1 { mw, rkey: rkey.0, bind_info };
        wr
    }

    /// Addresses a SEND on a UD QP to `dest`.
    #[must_use]
    pub fn to(mut self, dest: &UdDestination<'a>) -> Self {
        self.raw.wr.ud = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_3 {
            ah: dest.ah.as_raw(),
            remote_qpn: dest.qpn.get(),
            remote_qkey: dest.qkey,
        };
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

    fn set_remote(&mut self, remote: RemoteAddr) {
        self.raw.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
            remote_addr: remote.addr,
            rkey: remote.rkey.0,
        };
    }

    /// Sets the send flags (replacing earlier ones).
    #[must_use]
    pub fn flags(mut self, flags: SendFlags) -> Self {
        self.set_flags(flags);
        self
    }

    /// Sets the send flags of a prebuilt WR (replacing earlier ones), e.g. to signal one in
    /// `cq_mod` of a reused list.
    pub fn set_flags(&mut self, flags: SendFlags) {
        self.raw.send_flags = flags.bits();
    }

    /// The `wr_id`, returned in the completion.
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    /// The send flags.
    #[must_use]
    pub fn send_flags(&self) -> SendFlags {
        SendFlags::from_bits_retain(self.raw.send_flags)
    }

    /// The SGEs' total length in bytes.
    pub fn total_len(&self) -> u64 {
        self.sges().iter().map(|s| u64::from(s.length())).sum()
    }

    /// The number of SGEs.
    pub fn num_sge(&self) -> usize {
        self.raw.num_sge as usize
    }

    pub(crate) fn sges(&self) -> &'a [Sge] {
        // SAFETY: sg_list/num_sge were built from a `&'a [Sge]`.
        unsafe { std::slice::from_raw_parts(self.raw.sg_list.cast(), self.raw.num_sge as usize) }
    }

    /// The raw request alone: its `next` cleared, so a WR that was part of an earlier
    /// [`post_send_list`](crate::QueuePair::post_send_list) posts only itself.
    #[inline]
    pub(crate) fn as_single(&mut self) -> *mut sys::ibv_send_wr {
        self.raw.next = std::ptr::null_mut();
        &mut self.raw
    }

    pub(crate) fn as_raw(&self) -> &sys::ibv_send_wr {
        &self.raw
    }

    /// Bookkeeping once the provider accepted this WR (see [`note_posted`]).
    #[inline]
    pub(crate) fn note_posted(&self) {
        note_posted(&self.raw);
    }

    /// The raw request; its SGE pointer still points into the borrowed slice.
    pub(crate) fn into_raw(self) -> sys::ibv_send_wr {
        self.raw
    }
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

/// A receive work request (`struct ibv_recv_wr`) over a borrowed SGE list.
#[repr(transparent)]
pub struct RecvWr<'a> {
    raw: sys::ibv_recv_wr,
    _sges: PhantomData<&'a [Sge]>,
}

// SAFETY: the request's pointers are `sg_list`, into the borrowed `&'a [Sge]` (plain data),
// and `next`, which is always NULL (receives are posted one at a time).
unsafe impl Send for RecvWr<'_> {}
// SAFETY: as above.
unsafe impl Sync for RecvWr<'_> {}

impl<'a> RecvWr<'a> {
    /// A receive into `sges`, reported with `wr_id`.
    #[must_use]
    pub fn new(wr_id: u64, sges: &'a [Sge]) -> Self {
        let raw = sys::ibv_recv_wr {
            wr_id,
            next: std::ptr::null_mut(),
            sg_list: sges.as_ptr().cast_mut().cast(),
            num_sge: i32::try_from(sges.len()).unwrap_or(i32::MAX),
        };
        RecvWr { raw, _sges: PhantomData }
    }

    /// The `wr_id`.
    pub fn wr_id(&self) -> u64 {
        self.raw.wr_id
    }

    pub(crate) fn as_raw_mut(&mut self) -> *mut sys::ibv_recv_wr {
        &mut self.raw
    }
}

impl std::fmt::Debug for RecvWr<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvWr").field("wr_id", &self.wr_id()).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builders_fill_the_raw_request() {
        let sges = [Sge::new(0x1000, 64, LKey(7)), Sge::new(0x2000, 36, LKey(7))];
        let remote = RemoteAddr { addr: 0xdead_0000, rkey: RKey(9) };
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
    fn invalidation_and_bind_requests_carry_their_keys() {
        let wr = SendWr::local_inv(1, RKey(0x1234_5678));
        assert_eq!((wr.raw.opcode, wr.num_sge()), (sys::IBV_WR_LOCAL_INV, 0));
        // SAFETY: written by local_inv.
        assert_eq!(unsafe { wr.raw.__bindgen_anon_1.invalidate_rkey }, 0x1234_5678);
        let sges = [Sge::new(0x1000, 8, LKey(3))];
        let wr = SendWr::send_with_inv(2, &sges, RKey(0x99));
        assert_eq!((wr.raw.opcode, wr.num_sge()), (sys::IBV_WR_SEND_WITH_INV, 1));
        // SAFETY: written by send_with_inv.
        assert_eq!(unsafe { wr.raw.__bindgen_anon_1.invalidate_rkey }, 0x99);
        let info = sys::ibv_mw_bind_info {
            mr: std::ptr::null_mut(),
            addr: 0x2000,
            length: 64,
            mw_access_flags: sys::IBV_ACCESS_REMOTE_READ,
        };
        let wr = SendWr::bind_mw_raw(3, std::ptr::null_mut(), RKey(0x101), info);
        assert_eq!((wr.raw.opcode, wr.num_sge()), (sys::IBV_WR_BIND_MW, 0));
        // SAFETY: written by bind_mw_raw.
        let bind = unsafe { wr.raw.__bindgen_anon_2.bind_mw };
        assert_eq!((bind.rkey, bind.bind_info.addr, bind.bind_info.length), (0x101, 0x2000, 64));
    }
}
