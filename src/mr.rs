//! Memory regions over buffers they own.
#![allow(unsafe_code)]
//! # Safety
//!
//! A [`MemoryRegion`] owns a page-aligned heap buffer that never moves or grows, registered
//! for its whole life: the registration cannot dangle. Remote-writable access is refused here
//! (a remote peer could write while safe code holds a `&[u8]`), and what the NIC does with
//! local-write access is governed by the `unsafe` posting contracts, which forbid touching a
//! buffer while a work request that uses it is outstanding.

use std::alloc::{self, Layout};
use std::mem::ManuallyDrop;
use std::ops::{Bound, RangeBounds};
use std::ptr::NonNull;

use bitflags::bitflags;
use rdma_verbs_sys as sys;

use crate::error::{check_errno, check_ptr, Error, Result};
use crate::pd::ProtectionDomain;
use crate::wr::{RemoteAddr, Sge};

bitflags! {
    /// Memory region access rights (`enum ibv_access_flags`), `ibv_reg_mr(3)`.
    #[repr(transparent)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct AccessFlags: u32 {
        /// `IBV_ACCESS_LOCAL_WRITE`: the NIC may write (receives, RDMA READ results).
        const LOCAL_WRITE = sys::IBV_ACCESS_LOCAL_WRITE;
        /// `IBV_ACCESS_REMOTE_WRITE`: peers may RDMA WRITE into it.
        const REMOTE_WRITE = sys::IBV_ACCESS_REMOTE_WRITE;
        /// `IBV_ACCESS_REMOTE_READ`: peers may RDMA READ from it.
        const REMOTE_READ = sys::IBV_ACCESS_REMOTE_READ;
        /// `IBV_ACCESS_REMOTE_ATOMIC`: peers may run atomics on it.
        const REMOTE_ATOMIC = sys::IBV_ACCESS_REMOTE_ATOMIC;
        /// `IBV_ACCESS_MW_BIND`: memory windows may be bound to it.
        const MW_BIND = sys::IBV_ACCESS_MW_BIND;
        /// `IBV_ACCESS_RELAXED_ORDERING`: optional; ignored by kernels that lack it.
        const RELAXED_ORDERING = sys::IBV_ACCESS_RELAXED_ORDERING;
        // Bits of newer rdma-core survive a round trip.
        const _ = !0;
    }
}

/// A local key: names a registered region in *local* SGEs (`ibv_mr.lkey`). Distinct from
/// [`RKey`], so one cannot be passed where the other is expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LKey(pub u32);

/// A remote key: what a peer needs to RDMA READ / WRITE a region (`ibv_mr.rkey`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RKey(pub u32);

/// A page-aligned, zero-initialised heap buffer that never moves.
struct AlignedBuf {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl AlignedBuf {
    fn zeroed(len: usize) -> Result<Self> {
        let layout = Layout::from_size_align(len, page_size())
            .map_err(|_| Error::InvalidInput(format!("a {len}-byte buffer cannot be allocated")))?;
        // SAFETY: `len > 0` (checked by the caller), so the layout is not zero-sized.
        let ptr = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| {
            Error::InvalidInput(format!("out of memory allocating a {len}-byte buffer"))
        })?;
        Ok(AlignedBuf { ptr, layout })
    }
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: allocated by `zeroed` with this layout, freed once.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n.is_power_of_two()).unwrap_or(4096)
}

/// A registered memory region over a buffer it owns (`struct ibv_mr`, `ibv_reg_mr(3)`).
///
/// The buffer is page-aligned, zero-filled, and registered for as long as the region lives;
/// the region borrows its [`ProtectionDomain`], so it cannot outlive it:
///
/// ```compile_fail,E0597
/// # fn f(ctx: &rdma_verbs::Context) -> rdma_verbs::Result<()> {
/// let mr = {
///     let pd = ctx.alloc_pd()?;
///     pd.register(4096, rdma_verbs::AccessFlags::LOCAL_WRITE)?
/// }; // error: `pd` dropped while still borrowed
/// # drop(mr); Ok(()) }
/// ```
pub struct MemoryRegion<'pd> {
    raw: NonNull<sys::ibv_mr>,
    /// Freed by `dereg` only after a successful deregistration.
    buf: ManuallyDrop<AlignedBuf>,
    access: AccessFlags,
    pd: &'pd ProtectionDomain<'pd>,
}

// SAFETY: the buffer is owned and only reachable through `&self`/`&mut self`; MR verbs are
// thread-safe.
unsafe impl Send for MemoryRegion<'_> {}
// SAFETY: `&self` gives only shared reads of the buffer.
unsafe impl Sync for MemoryRegion<'_> {}

impl<'pd> ProtectionDomain<'pd> {
    /// `ibv_reg_mr(3)`—Allocates a zeroed, page-aligned buffer of `len` bytes and registers
    /// it with `access`.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] when `len` is 0, or `access` asks for `REMOTE_WRITE` or
    ///   `REMOTE_ATOMIC` (memory a peer may write cannot be handed out as a plain slice; that
    ///   region type is not in this release) or lacks `LOCAL_WRITE` next to them.
    /// - [`Error::Verb`] from `ibv_reg_mr`: `ENOMEM`/`EPERM`/`EAGAIN` usually mean the
    ///   locked-memory limit (the message gives `RLIMIT_MEMLOCK` and how to raise it).
    #[doc(alias = "ibv_reg_mr")]
    pub fn register(&'pd self, len: usize, access: AccessFlags) -> Result<MemoryRegion<'pd>> {
        if len == 0 {
            return Err(Error::InvalidInput("a memory region needs at least 1 byte".into()));
        }
        if access.intersects(AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_ATOMIC) {
            return Err(Error::InvalidInput(
                "REMOTE_WRITE / REMOTE_ATOMIC regions are not supported by this release: \
                 memory a peer may write cannot be exposed as a plain slice"
                    .into(),
            ));
        }
        let buf = AlignedBuf::zeroed(len)?;
        // SAFETY: a live PD; the buffer is `len` bytes, owned by the region, and outlives the
        // registration (the region deregisters before freeing it: field order and Drop).
        let raw = unsafe {
            sys::inline::ibv_reg_mr(
                &self.context().library().fns,
                self.as_raw(),
                buf.ptr.as_ptr().cast(),
                len,
                access.bits(),
            )
        };
        let raw = check_ptr(raw, "ibv_reg_mr")?;
        Ok(MemoryRegion { raw, buf: ManuallyDrop::new(buf), access, pd: self })
    }
}

impl<'pd> MemoryRegion<'pd> {
    /// The local key, for SGEs.
    pub fn lkey(&self) -> LKey {
        // SAFETY: a live MR; a plain field read.
        LKey(unsafe { (*self.raw.as_ptr()).lkey })
    }

    /// The remote key, for peers.
    pub fn rkey(&self) -> RKey {
        // SAFETY: a live MR; a plain field read.
        RKey(unsafe { (*self.raw.as_ptr()).rkey })
    }

    /// The buffer's virtual address (its IOVA for this registration).
    pub fn addr(&self) -> u64 {
        self.buf.ptr.as_ptr() as u64
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.buf.layout.size()
    }

    /// Always `false`: regions hold at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The access rights it was registered with.
    pub fn access(&self) -> AccessFlags {
        self.access
    }

    /// The protection domain.
    pub fn pd(&self) -> &'pd ProtectionDomain<'pd> {
        self.pd
    }

    /// The bytes. Reading them while a receive or RDMA READ into them is outstanding breaks
    /// the contract of the `unsafe` post that started it.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` initialised bytes owned by self; shared borrow of self.
        unsafe { std::slice::from_raw_parts(self.buf.ptr.as_ptr(), self.len()) }
    }

    /// The bytes, mutably (see [`MemoryRegion::as_slice`]).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `len` initialised bytes owned by self; exclusive borrow of self.
        unsafe { std::slice::from_raw_parts_mut(self.buf.ptr.as_ptr(), self.len()) }
    }

    /// A scatter/gather entry for `range` of this region.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when the range is empty, reversed, past the end, or longer
    /// than 4 GiB − 1 (an SGE's length is 32 bits).
    pub fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge> {
        let (start, end) = self.bounds(range)?;
        let len = u32::try_from(end - start)
            .map_err(|_| Error::InvalidInput(format!("an SGE holds at most {} bytes", u32::MAX)))?;
        Ok(Sge::new(self.addr() + start as u64, len, self.lkey()))
    }

    /// What a peer needs to RDMA READ `range` of this region: address, length and rkey.
    ///
    /// # Errors
    ///
    /// As [`MemoryRegion::sge`].
    pub fn remote(&self, range: impl RangeBounds<usize>) -> Result<RemoteAddr> {
        let (start, _) = self.bounds(range)?;
        Ok(RemoteAddr { addr: self.addr() + start as u64, rkey: self.rkey() })
    }

    fn bounds(&self, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
        let start = match range.start_bound() {
            Bound::Included(&s) => s,
            Bound::Excluded(&s) => s.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let end = match range.end_bound() {
            Bound::Included(&e) => e.saturating_add(1),
            Bound::Excluded(&e) => e,
            Bound::Unbounded => self.len(),
        };
        if start >= end || end > self.len() {
            return Err(Error::InvalidInput(format!(
                "range {start}..{end} is empty or outside the {}-byte memory region",
                self.len()
            )));
        }
        Ok((start, end))
    }

    /// The raw MR pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_mr {
        self.raw.as_ptr()
    }

    /// `ibv_dereg_mr(3)`—Deregisters the region, reporting failure (dropping logs instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_dereg_mr`; the buffer is then leaked, never freed while the
    /// NIC may still map it.
    #[doc(alias = "ibv_dereg_mr")]
    pub fn destroy(self) -> Result<()> {
        ManuallyDrop::new(self).dereg()
    }

    /// Deregisters, then frees the buffer, or leaks it when deregistration fails. Called
    /// once: by `Drop` or by `destroy` (which suppresses `Drop`).
    fn dereg(&mut self) -> Result<()> {
        // SAFETY: a live MR, deregistered once.
        let ret = unsafe { (self.pd.context().library().fns.ibv_dereg_mr)(self.as_raw()) };
        check_errno(ret, "ibv_dereg_mr")?;
        // SAFETY: the registration is gone, so the NIC no longer maps the buffer; this is the
        // only place it is dropped, and `self` is not used afterwards.
        unsafe { ManuallyDrop::drop(&mut self.buf) };
        Ok(())
    }
}

impl Drop for MemoryRegion<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.dereg() {
            log::warn!("leaking a {}-byte memory region: {e}", self.len());
        }
    }
}

impl std::fmt::Debug for MemoryRegion<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &format_args!("{:#x}", self.addr()))
            .field("len", &self.len())
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .field("access", &self.access)
            .finish()
    }
}
