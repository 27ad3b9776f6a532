//! The memory a work request names: local (an [`Sge`], with the region's [`LKey`]) and the
//! peer's ([`RemoteAddr`], with its region's [`RKey`]).

use rdma_verbs_sys as sys;

use crate::number::number;

number! {
    /// A local key: names a registered region in *local* SGEs (`ibv_mr.lkey`). Distinct from
    /// [`RKey`], so one cannot be passed where the other is expected. Shown as
    /// ibv_rc_pingpong and perftest print keys (`0x%08x`).
    pub struct LKey(u32), shown: "{:#010x}"
}

number! {
    /// A remote key: what a peer needs to RDMA READ / WRITE a region (`ibv_mr.rkey`). Shown
    /// as ibv_rc_pingpong and perftest print keys (`0x%08x`).
    pub struct RKey(u32), shown: "{:#010x}"
}

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
    #[inline]
    pub fn new(addr: u64, length: u32, lkey: LKey) -> Sge {
        Sge(sys::ibv_sge { addr, length, lkey: lkey.get() })
    }

    /// The address.
    #[inline]
    pub fn addr(&self) -> u64 {
        self.0.addr
    }

    /// The length in bytes.
    #[inline]
    pub fn length(&self) -> u32 {
        self.0.length
    }

    /// The local key.
    #[inline]
    pub fn lkey(&self) -> LKey {
        LKey::new(self.0.lkey)
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
