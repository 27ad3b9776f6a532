//! Memory regions: registered memory, owned or exclusively borrowed ([`MemoryRegion`],
//! [`RemoteWritableRegion`]), or a device's, which the CPU does not reach ([`DmabufRegion`],
//! [`PeerMemoryRegion`], [`DeviceMemoryRegion`]), and their keys ([`LKey`], [`RKey`]). The
//! registration verbs (`ibv_reg_mr(3)`) and the `ibv_mr` the regions share are in
//! `registration`, the memory under them in `memory`: memory the caller owns and hands over
//! by value under the [`PinnedMemory`] contract in `pinned`, and the huge pages
//! ([`HugePages`], `mmap(2)`) and memfds ([`SharedMemory`], `memfd_create(2)`) the crate maps
//! for it in `mapped`; device memory's regions are in `device_memory`.
#![allow(unsafe_code)]
//! # Safety
//!
//! A registration covers bytes that never move and outlive it: a heap buffer of whole pages the
//! region owns, a [`PinnedMemory`] value it owns (whose bytes stay valid until the value
//! drops), or a `&'a mut [u8]` it holds for `'a`. The region deregisters before it frees or
//! releases them, and leaks what it owns when deregistration fails. Device memory (a
//! [`DmabufRegion`]'s, which the kernel holds a reference to; a [`PeerMemoryRegion`]'s,
//! which the caller of the `unsafe` registration keeps allocated) is never touched by the
//! CPU: those regions have no slices and no copies. Memory a *peer* may
//! write ([`RemoteWritableRegion`]), or another process (a shared [`PinnedMemory`]), is never
//! exposed as a plain slice, only copied in and out; what the local NIC does with
//! `LOCAL_WRITE` memory is governed by the posting contracts (the raw tier) or by buffer
//! ownership (the buffer tier).

mod mapped;
mod memory;
mod options;
mod peer;
mod pinned;
mod registration;

use std::ops::{Bound, RangeBounds};
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

pub use device_memory::DeviceMemoryRegion;
pub use mapped::{HugePageSize, HugePages, SharedMemory};
pub use memory::RegionMemory;
pub use options::RegisterOptions;
pub use pinned::PinnedMemory;
use registration::Registration;

use crate::access::AccessFlags;
use crate::error::{Error, InvalidInputKind, Result};
use crate::pd::ProtectionDomain;
use crate::wr::{LKey, RKey, RemoteAddr, Sge};

/// `start..end` of `range`, checked to be a non-empty part of a `len`-byte region.
pub(crate) fn bounds(len: usize, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
    let start = match range.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => len,
    };
    if start >= end || end > len {
        return Err(Error::invalid(
            InvalidInputKind::Range,
            format!("range {start}..{end} is empty or outside the {len}-byte memory region"),
        ));
    }
    Ok((start, end))
}

/// Methods every region type shares, delegating to its registration, and its `Debug`
/// (the registration's).
macro_rules! region_common {
    ($ty:ident) => {
        impl<'a> $ty<'a> {
            /// The local key, for SGEs.
            pub fn lkey(&self) -> LKey {
                self.reg.lkey()
            }

            /// The remote key, for peers.
            pub fn rkey(&self) -> RKey {
                self.reg.rkey()
            }

            /// The memory's virtual address: where the CPU sees the first byte (a
            /// [`DmabufRegion`](crate::DmabufRegion) or
            /// [`DeviceMemoryRegion`](crate::DeviceMemoryRegion), which the CPU does not map,
            /// gives its IOVA; a [`PeerMemoryRegion`](crate::PeerMemoryRegion) the device
            /// address it was registered at).
            pub fn addr(&self) -> u64 {
                self.reg.addr()
            }

            /// Where the NIC sees the first byte: the address in SGEs (with [`Self::lkey`],
            /// [`Self::sge`]) and for peers (with [`Self::rkey`], [`Self::remote`]). The IOVA
            /// chosen at registration, else [`Self::addr`].
            pub fn iova(&self) -> u64 {
                self.reg.iova
            }

            /// The length in bytes.
            pub fn len(&self) -> usize {
                self.reg.memory.len
            }

            /// Always `false`: regions hold at least one byte.
            pub fn is_empty(&self) -> bool {
                false
            }

            /// The access rights it was registered with.
            pub fn access(&self) -> AccessFlags {
                self.reg.access
            }

            /// The protection domain.
            pub fn pd(&self) -> &'a ProtectionDomain<'a> {
                self.reg.pd
            }

            /// A scatter/gather entry for `range` of this region: its address is
            /// [`Self::iova`] + offset.
            ///
            /// # Errors
            ///
            /// [`Error::InvalidInput`] when the range is empty, reversed, past the end, or
            /// longer than 4 GiB − 1 (an SGE's length is 32 bits).
            pub fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge> {
                self.reg.sge(range)
            }

            /// What a peer needs to reach the memory from the start of `range`: its address
            /// in the registration's IOVA space ([`Self::iova`] + offset) and the rkey.
            ///
            /// # Errors
            ///
            /// As [`Self::sge`].
            pub fn remote(&self, range: impl RangeBounds<usize>) -> Result<RemoteAddr> {
                self.reg.remote(range)
            }

            /// The raw MR pointer.
            pub fn as_raw(&self) -> *mut sys::ibv_mr {
                self.reg.raw.as_ptr()
            }

            /// The kernel's handle of the region (`ibv_mr.handle`): what another process
            /// that imported this context passes to
            /// [`ProtectionDomain::import_mr`](crate::ProtectionDomain::import_mr)
            /// (`ibv_import_mr(3)`), with the handle of this region's PD.
            pub fn handle(&self) -> u32 {
                // SAFETY: the MR is live while `self` is; a plain field read.
                unsafe { (*self.reg.raw.as_ptr()).handle }
            }

            /// The live `ibv_mr`, for binding memory windows to it.
            pub(crate) fn raw(&self) -> NonNull<sys::ibv_mr> {
                self.reg.raw
            }

            /// `ibv_dereg_mr(3)`—Deregisters the region, reporting failure (dropping logs
            /// instead).
            ///
            /// # Errors
            ///
            /// [`Error::Verb`] from `ibv_dereg_mr`; the memory is then leaked (and a borrowed
            /// slice stays borrowed), never freed while the NIC may still map it. `EINVAL`
            /// for a region registered with `MW_BIND` says a memory window is still bound to
            /// it (rxe refuses the deregistration then), and what to do about it.
            #[doc(alias = "ibv_dereg_mr")]
            pub fn destroy(self) -> Result<()> {
                self.reg.destroy()
            }
        }

        impl std::fmt::Debug for $ty<'_> {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.debug_tuple(stringify!($ty)).field(&self.reg).finish()
            }
        }
    };
}

// After the macro, which it uses.
mod device_memory;

/// A registered memory region the program reads and writes directly (`struct ibv_mr`,
/// `ibv_reg_mr(3)`): local access, and at most `REMOTE_READ` for peers.
///
/// It borrows its [`ProtectionDomain`], so it cannot outlive it:
///
/// ```compile_fail,E0597
/// # fn f(ctx: &rdma_verbs::Context) -> rdma_verbs::Result<()> {
/// let mr = {
///     let pd = ctx.alloc_pd()?;
///     pd.register(4096, rdma_verbs::AccessFlags::LOCAL_WRITE)?
/// }; // error: `pd` dropped while still borrowed
/// # drop(mr); Ok(()) }
/// ```
///
/// A borrowed buffer is reachable only through the region while registered:
///
/// ```compile_fail,E0499
/// # fn f(pd: &rdma_verbs::ProtectionDomain<'_>) -> rdma_verbs::Result<()> {
/// let mut bytes = vec![0u8; 4096];
/// let mut mr = pd.register(&mut bytes[..], rdma_verbs::AccessFlags::LOCAL_WRITE)?;
/// bytes[0] = 1; // error: `bytes` is mutably borrowed by the region
/// mr.as_mut_slice()[0] = 2;
/// # Ok(()) }
/// ```
///
/// nor freed:
///
/// ```compile_fail,E0505
/// # fn f(pd: &rdma_verbs::ProtectionDomain<'_>) -> rdma_verbs::Result<()> {
/// let mut bytes = vec![0u8; 4096];
/// let mr = pd.register(&mut bytes[..], rdma_verbs::AccessFlags::LOCAL_WRITE)?;
/// drop(bytes); // error: cannot move out of `bytes` because it is borrowed
/// # drop(mr); Ok(()) }
/// ```
#[must_use = "the region is deregistered when dropped"]
pub struct MemoryRegion<'a> {
    reg: Registration<'a>,
}

region_common!(MemoryRegion);

impl MemoryRegion<'_> {
    /// Whether the region owns its memory (registered with a length or a [`PinnedMemory`]),
    /// rather than borrowing a `&mut [u8]`.
    pub(crate) fn owns_memory(&self) -> bool {
        self.reg.memory.is_owned()
    }

    /// The bytes. With the raw tier, reading them while a receive or RDMA READ into them is
    /// outstanding breaks the contract of the `unsafe` post that started it.
    pub fn as_slice(&self) -> &[u8] {
        let m = &self.reg.memory;
        // SAFETY: `len` initialised bytes reachable only through this region; shared borrow.
        unsafe { std::slice::from_raw_parts(m.ptr.as_ptr(), m.len) }
    }

    /// The bytes, mutably (see [`MemoryRegion::as_slice`]).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let m = &self.reg.memory;
        // SAFETY: `len` initialised bytes reachable only through this region; exclusive borrow.
        unsafe { std::slice::from_raw_parts_mut(m.ptr.as_ptr(), m.len) }
    }
}

/// A registered memory region that peers may write (`REMOTE_WRITE` / `REMOTE_ATOMIC`).
///
/// A peer can write it at any moment, so it never hands out `&[u8]` or `&mut [u8]`: its
/// bytes are copied in and out ([`read`](Self::read), [`write`](Self::write)), or viewed
/// through the `unsafe` [`as_slice`](Self::as_slice) when the protocol guarantees quiet.
///
/// ```compile_fail,E0599
/// # fn f(pd: &rdma_verbs::ProtectionDomain<'_>) -> rdma_verbs::Result<()> {
/// use rdma_verbs::AccessFlags;
/// let mr = pd.register_remote_writable(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)?;
/// let first = mr.as_mut_slice()[0]; // error: no safe slice view
/// # Ok(()) }
/// ```
#[must_use = "the region is deregistered when dropped"]
pub struct RemoteWritableRegion<'a> {
    reg: Registration<'a>,
}

region_common!(RemoteWritableRegion);

impl RemoteWritableRegion<'_> {
    /// Copies `dst.len()` bytes from `offset` into `dst`. Bytes a peer writes meanwhile may
    /// arrive partly: order access with the peer (e.g. a SEND or immediate after its WRITE).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `offset..offset + dst.len()` is outside the region.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        let (start, _) = self.copy_bounds(offset, dst.len())?;
        // SAFETY: in bounds; no reference to the region's bytes exists (none is ever handed
        // out), and the peer's NIC is not a Rust thread: a concurrent write shows up as
        // torn bytes in `dst`, which is what copying shared memory means.
        unsafe { std::ptr::copy_nonoverlapping(self.byte_ptr(start), dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Copies `src` into the region at `offset`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `offset..offset + src.len()` is outside the region.
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        let (start, _) = self.copy_bounds(offset, src.len())?;
        // SAFETY: in bounds, exclusive borrow of the region; as in `read`, no reference to
        // the bytes exists.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), self.byte_ptr(start), src.len()) };
        Ok(())
    }

    /// The bytes as a slice.
    ///
    /// # Safety
    ///
    /// While the slice lives, no peer may write the region (for example: the protocol
    /// guarantees the peer finished its RDMA WRITEs, by a SEND or immediate that followed
    /// them, and starts no new one until told), nor, for shared memory
    /// ([`SharedMemory`]), another process or a `write(2)` through its fd.
    pub unsafe fn as_slice(&self) -> &[u8] {
        let m = &self.reg.memory;
        // SAFETY: initialised bytes owned or borrowed by the region; the caller guarantees no
        // peer writes them while the slice lives.
        unsafe { std::slice::from_raw_parts(m.ptr.as_ptr(), m.len) }
    }

    /// The bytes as a mutable slice.
    ///
    /// # Safety
    ///
    /// As [`RemoteWritableRegion::as_slice`].
    pub unsafe fn as_mut_slice(&mut self) -> &mut [u8] {
        let m = &self.reg.memory;
        // SAFETY: as `as_slice`, with `&mut self` for exclusivity on our side.
        unsafe { std::slice::from_raw_parts_mut(m.ptr.as_ptr(), m.len) }
    }

    fn copy_bounds(&self, offset: usize, len: usize) -> Result<(usize, usize)> {
        if len == 0 && offset <= self.len() {
            return Ok((offset, offset));
        }
        self.reg.bounds(offset..offset.saturating_add(len))
    }

    fn byte_ptr(&self, offset: usize) -> *mut u8 {
        self.reg.memory.ptr.as_ptr().wrapping_add(offset)
    }
}

/// A registered dma-buf (`ibv_reg_dmabuf_mr(3)`): device memory another driver exported,
/// which the CPU does not reach through this region (no slices, no copies). SGEs and peers
/// address it by the IOVA chosen at registration ([`DmabufRegion::iova`], which
/// [`DmabufRegion::addr`] also returns).
pub struct DmabufRegion<'a> {
    reg: Registration<'a>,
}

region_common!(DmabufRegion);

/// A registered device allocation (`ibv_reg_mr(3)` of a GPU address, resolved by a
/// peer-memory client such as `nvidia_peermem`): memory the CPU must not touch, so the region
/// has no slices and no copies. SGEs and peers address it by the device address it was
/// registered at ([`PeerMemoryRegion::iova`], which [`PeerMemoryRegion::addr`] also
/// returns). Made by the `unsafe` [`ProtectionDomain::register_peer_memory`].
pub struct PeerMemoryRegion<'a> {
    reg: Registration<'a>,
}

region_common!(PeerMemoryRegion);
