//! Memory regions: registered memory, owned or exclusively borrowed.
#![allow(unsafe_code)]
//! # Safety
//!
//! A registration covers bytes that never move and outlive it: a page-aligned heap buffer the
//! region owns, or a `&'a mut [u8]` it holds for `'a`. The region deregisters before it frees
//! or releases them. Memory a *peer* may write ([`RemoteWritableRegion`]) is never exposed as
//! a plain slice, only copied in and out; what the local NIC does with `LOCAL_WRITE` memory is
//! governed by the posting contracts (the raw tier) or by buffer ownership (the buffer tier).

use std::alloc::{self, Layout};
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use bitflags::bitflags;
use rdma_verbs_sys as sys;

use crate::device::Context;
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
        /// `IBV_ACCESS_ON_DEMAND`: on-demand paging (ODP): pages are not pinned at
        /// registration but faulted in when the NIC touches them. Only some devices have it
        /// (mlx5 reports it in `ibv_query_device_ex`'s `odp_caps`); Soft-RoCE in Linux 6.1
        /// refuses it (`EINVAL`).
        const ON_DEMAND = sys::IBV_ACCESS_ON_DEMAND;
        /// `IBV_ACCESS_RELAXED_ORDERING`: optional; ignored by kernels that lack it.
        const RELAXED_ORDERING = sys::IBV_ACCESS_RELAXED_ORDERING;
        // Bits of newer rdma-core survive a round trip.
        const _ = !0;
    }
}

bitflags! {
    /// What on-demand paging a device offers (`ibv_odp_caps.general_caps`,
    /// `enum ibv_odp_general_caps`), `ibv_query_device_ex(3)`.
    #[repr(transparent)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct OdpGeneralCaps: u64 {
        /// `IBV_ODP_SUPPORT`: [`AccessFlags::ON_DEMAND`] registrations work.
        const SUPPORT = sys::IBV_ODP_SUPPORT as u64;
        /// `IBV_ODP_SUPPORT_IMPLICIT`: an implicit ODP region may cover the whole address
        /// space.
        const SUPPORT_IMPLICIT = sys::IBV_ODP_SUPPORT_IMPLICIT as u64;
        const _ = !0;
    }
}

bitflags! {
    /// Which operations of one transport may touch ODP memory (`ibv_odp_caps`'
    /// `rc_odp_caps` / `uc_odp_caps` / `ud_odp_caps`, `enum ibv_odp_transport_cap_bits`).
    #[repr(transparent)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct OdpTransportCaps: u32 {
        /// `IBV_ODP_SUPPORT_SEND`
        const SEND = sys::IBV_ODP_SUPPORT_SEND;
        /// `IBV_ODP_SUPPORT_RECV`
        const RECV = sys::IBV_ODP_SUPPORT_RECV;
        /// `IBV_ODP_SUPPORT_WRITE`
        const WRITE = sys::IBV_ODP_SUPPORT_WRITE;
        /// `IBV_ODP_SUPPORT_READ`
        const READ = sys::IBV_ODP_SUPPORT_READ;
        /// `IBV_ODP_SUPPORT_ATOMIC`
        const ATOMIC = sys::IBV_ODP_SUPPORT_ATOMIC;
        /// `IBV_ODP_SUPPORT_SRQ_RECV`
        const SRQ_RECV = sys::IBV_ODP_SUPPORT_SRQ_RECV;
        const _ = !0;
    }
}

/// A device's on-demand paging capabilities (`struct ibv_odp_caps`), from
/// [`Context::odp_caps`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OdpCaps {
    /// Whether ODP works at all, and implicit ODP.
    pub general: OdpGeneralCaps,
    /// Operations of RC QPs that may use ODP memory.
    pub rc: OdpTransportCaps,
    /// Operations of UC QPs that may use ODP memory.
    pub uc: OdpTransportCaps,
    /// Operations of UD QPs that may use ODP memory.
    pub ud: OdpTransportCaps,
}

impl Context {
    /// `ibv_query_device_ex(3)`—The device's on-demand paging capabilities: all empty when it
    /// has none (as rxe in Linux 6.1), or when the provider lacks `query_device_ex` (the C
    /// inline's fallback to `ibv_query_device`, which knows no ODP).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_query_device_ex` (or the `ibv_query_device` fallback).
    #[doc(alias = "ibv_query_device_ex")]
    pub fn odp_caps(&self) -> Result<OdpCaps> {
        let mut attr = sys::ibv_device_attr_ex::default();
        // SAFETY: a live context of this library and a writable struct of this build's layout.
        let ret = unsafe {
            sys::inline::ibv_query_device_ex(&self.library().fns, self.as_raw(), &mut attr)
        };
        check_errno(ret, "ibv_query_device_ex")?;
        let odp = attr.odp_caps;
        let transport = OdpTransportCaps::from_bits_retain;
        Ok(OdpCaps {
            general: OdpGeneralCaps::from_bits_retain(odp.general_caps),
            rc: transport(odp.per_transport_caps.rc_odp_caps),
            uc: transport(odp.per_transport_caps.uc_odp_caps),
            ud: transport(odp.per_transport_caps.ud_odp_caps),
        })
    }
}

impl AccessFlags {
    /// The rights that let a peer write the memory.
    pub const REMOTE_WRITES: AccessFlags =
        AccessFlags::REMOTE_WRITE.union(AccessFlags::REMOTE_ATOMIC);
}

/// A local key: names a registered region in *local* SGEs (`ibv_mr.lkey`). Distinct from
/// [`RKey`], so one cannot be passed where the other is expected.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LKey(pub u32);

/// A remote key: what a peer needs to RDMA READ / WRITE a region (`ibv_mr.rkey`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RKey(pub u32);

/// Memory a region can be registered over: a length (a zeroed, page-aligned buffer the
/// region allocates and owns) or a `&mut [u8]` (borrowed for the region's life).
pub trait RegionMemory<'a>: sealed::Sealed {
    #[doc(hidden)]
    fn into_memory(self) -> Result<Memory<'a>>;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for usize {}
    impl Sealed for &mut [u8] {}

    pub trait Region {}
    impl Region for super::MemoryRegion<'_> {}
    impl Region for super::RemoteWritableRegion<'_> {}
    impl Region for super::DmabufRegion<'_> {}
}

impl<'a> RegionMemory<'a> for usize {
    fn into_memory(self) -> Result<Memory<'a>> {
        if self == 0 {
            return Err(Error::InvalidInput("a memory region needs at least 1 byte".into()));
        }
        let layout = Layout::from_size_align(self, page_size()).map_err(|_| {
            Error::InvalidInput(format!("a {self}-byte buffer cannot be allocated"))
        })?;
        // SAFETY: the layout is not zero-sized (checked above).
        let ptr = NonNull::new(unsafe { alloc::alloc_zeroed(layout) }).ok_or_else(|| {
            Error::InvalidInput(format!("out of memory allocating a {self}-byte buffer"))
        })?;
        Ok(Memory { ptr, len: self, owned: Some(layout), _borrow: PhantomData })
    }
}

impl<'a> RegionMemory<'a> for &'a mut [u8] {
    fn into_memory(self) -> Result<Memory<'a>> {
        if self.is_empty() {
            return Err(Error::InvalidInput("a memory region needs at least 1 byte".into()));
        }
        let len = self.len();
        let ptr = NonNull::from(self).cast();
        Ok(Memory { ptr, len, owned: None, _borrow: PhantomData })
    }
}

/// The bytes under a registration. Frees them only when told (after deregistration).
#[doc(hidden)]
#[derive(Debug)]
pub struct Memory<'a> {
    ptr: NonNull<u8>,
    len: usize,
    /// `Some` when allocated here (and freed by `free`), `None` when borrowed.
    owned: Option<Layout>,
    _borrow: PhantomData<&'a mut [u8]>,
}

impl Memory<'_> {
    /// `len` bytes the CPU cannot reach (a dma-buf's): never dereferenced, nothing to free.
    fn unmapped(len: usize) -> Self {
        Memory { ptr: NonNull::dangling(), len, owned: None, _borrow: PhantomData }
    }

    /// Frees owned memory.
    ///
    /// # Safety
    ///
    /// Called at most once, after the registration is gone, and the memory is not used again.
    unsafe fn free(&mut self) {
        if let Some(layout) = self.owned.take() {
            // SAFETY: allocated with this layout in `into_memory`; the caller guarantees
            // nothing uses it any more.
            unsafe { alloc::dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n.is_power_of_two()).unwrap_or(4096)
}

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
        return Err(Error::InvalidInput(format!(
            "range {start}..{end} is empty or outside the {len}-byte memory region"
        )));
    }
    Ok((start, end))
}

/// The region types a [`MemoryWindow`](crate::MemoryWindow) can be bound to:
/// [`MemoryRegion`], [`RemoteWritableRegion`] and [`DmabufRegion`].
pub trait BindableRegion<'a>: sealed::Region {
    #[doc(hidden)]
    fn bind_parts(&self) -> BindParts<'a>;
}

/// What binding a window needs to know of its region.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct BindParts<'a> {
    pub(crate) mr: NonNull<sys::ibv_mr>,
    pub(crate) iova: u64,
    pub(crate) len: usize,
    pub(crate) access: AccessFlags,
    pub(crate) pd: &'a ProtectionDomain<'a>,
}

/// One `ibv_mr` over [`Memory`]: what the region types share.
///
/// Two addresses name its first byte: `local`, where the CPU sees it (its virtual address; for
/// dma-buf memory, which the CPU does not map, the IOVA), and `iova`, where the NIC sees it:
/// the address in SGEs (with the lkey) *and* for peers (with the rkey), as `ibv_reg_mr(3)`
/// says of `ibv_reg_mr_iova2` and as rxe enforces. They are equal unless a registration chose
/// an IOVA.
struct Registration<'a> {
    raw: NonNull<sys::ibv_mr>,
    memory: Memory<'a>,
    local: u64,
    iova: u64,
    access: AccessFlags,
    pd: &'a ProtectionDomain<'a>,
}

// SAFETY: the memory is owned or exclusively borrowed, reachable only through the region
// types' own methods; MR verbs are thread-safe.
unsafe impl Send for Registration<'_> {}
// SAFETY: shared methods only read (or copy out of) the memory.
unsafe impl Sync for Registration<'_> {}

impl<'a> Registration<'a> {
    /// Registers `memory` at its own address (`iova: None`) or at a chosen IOVA, which needs
    /// `ibv_reg_mr_iova2`.
    fn new(
        pd: &'a ProtectionDomain<'a>,
        memory: impl RegionMemory<'a>,
        access: AccessFlags,
        iova: Option<u64>,
    ) -> Result<Self> {
        let fns = &pd.context().library().fns;
        let reg_iova2 = match (iova, fns.ibv_reg_mr_iova2) {
            (Some(_), None) => {
                return Err(Error::Unsupported { what: "ibv_reg_mr_iova2 (rdma-core v28+)" })
            }
            (_, reg) => reg,
        };
        let mut memory = memory.into_memory()?;
        let addr = memory.ptr.as_ptr();
        let raw = match (iova, reg_iova2) {
            // SAFETY: a live PD; the memory stays valid until `dereg` (owned, or borrowed for
            // 'a).
            (Some(iova), Some(reg)) => unsafe {
                reg(pd.as_raw(), addr.cast(), memory.len, iova, access.bits())
            },
            // SAFETY: as above.
            _ => unsafe {
                sys::inline::ibv_reg_mr(fns, pd.as_raw(), addr.cast(), memory.len, access.bits())
            },
        };
        let verb = if iova.is_some() { "ibv_reg_mr_iova2" } else { "ibv_reg_mr" };
        match check_ptr(raw, verb).map_err(|e| odp_hint(e, access)) {
            Ok(raw) => {
                let local = addr as u64;
                let iova = iova.unwrap_or(local);
                Ok(Registration { raw, memory, local, iova, access, pd })
            }
            Err(e) => {
                // SAFETY: never registered, never used again.
                unsafe { memory.free() };
                Err(e)
            }
        }
    }

    fn addr(&self) -> u64 {
        self.local
    }

    fn lkey(&self) -> LKey {
        // SAFETY: a live MR; a plain field read.
        LKey(unsafe { (*self.raw.as_ptr()).lkey })
    }

    fn rkey(&self) -> RKey {
        // SAFETY: a live MR; a plain field read.
        RKey(unsafe { (*self.raw.as_ptr()).rkey })
    }

    /// `start..end` of `range`, checked to be a non-empty part of the memory.
    fn bounds(&self, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
        bounds(self.memory.len, range)
    }

    fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge> {
        let (start, end) = self.bounds(range)?;
        let len = u32::try_from(end - start)
            .map_err(|_| Error::InvalidInput(format!("an SGE holds at most {} bytes", u32::MAX)))?;
        Ok(Sge::new(self.iova + start as u64, len, self.lkey()))
    }

    fn remote(&self, range: impl RangeBounds<usize>) -> Result<RemoteAddr> {
        let (start, _) = self.bounds(range)?;
        Ok(RemoteAddr { addr: self.iova + start as u64, rkey: self.rkey() })
    }

    /// Deregisters, then frees owned memory; on failure the memory is leaked, never freed
    /// while the NIC may map it. Called once: by `Drop`, or by `destroy` (which skips Drop).
    fn dereg(&mut self) -> Result<()> {
        // SAFETY: a live MR, deregistered once.
        let ret = unsafe { (self.pd.context().library().fns.ibv_dereg_mr)(self.raw.as_ptr()) };
        check_errno(ret, "ibv_dereg_mr")?;
        // SAFETY: the registration is gone and this is the only call.
        unsafe { self.memory.free() };
        Ok(())
    }

    fn destroy(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).dereg()
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.dereg() {
            log::warn!("leaking a {}-byte memory region: {e}", self.memory.len);
        }
    }
}

impl std::fmt::Debug for Registration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("addr", &format_args!("{:#x}", self.local))
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.memory.len)
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .field("access", &self.access)
            .field("owned", &self.memory.owned.is_some())
            .finish()
    }
}

/// Methods both region types share, delegating to their registration.
macro_rules! region_common {
    ($ty:ident) => {
        impl<'a> BindableRegion<'a> for $ty<'a> {
            fn bind_parts(&self) -> BindParts<'a> {
                let reg = &self.reg;
                BindParts {
                    mr: reg.raw,
                    iova: reg.iova,
                    len: reg.memory.len,
                    access: reg.access,
                    pd: reg.pd,
                }
            }
        }

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
            /// [`DmabufRegion`], which the CPU does not map, gives its IOVA).
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

            /// `ibv_dereg_mr(3)`—Deregisters the region, reporting failure (dropping logs
            /// instead).
            ///
            /// # Errors
            ///
            /// [`Error::Verb`] from `ibv_dereg_mr`; the memory is then leaked (and a borrowed
            /// slice stays borrowed), never freed while the NIC may still map it.
            #[doc(alias = "ibv_dereg_mr")]
            pub fn destroy(self) -> Result<()> {
                self.reg.destroy()
            }
        }
    };
}

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
pub struct MemoryRegion<'a> {
    reg: Registration<'a>,
}

region_common!(MemoryRegion);

impl<'a> ProtectionDomain<'a> {
    /// `ibv_reg_mr(3)`—Registers `memory` — a length (a zeroed, page-aligned buffer the
    /// region allocates and owns) or a `&mut [u8]` (borrowed while registered) — with
    /// `access`.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] for empty memory, or `access` with `REMOTE_WRITE` /
    ///   `REMOTE_ATOMIC`: memory a peer may write is a [`RemoteWritableRegion`]
    ///   ([`ProtectionDomain::register_remote_writable`]).
    /// - [`Error::Verb`] from `ibv_reg_mr`: `ENOMEM`/`EPERM`/`EAGAIN` usually mean the
    ///   locked-memory limit (the message gives `RLIMIT_MEMLOCK` and how to raise it);
    ///   `EINVAL` rights the device refuses.
    /// - [`Error::Unsupported`] when the device refuses an access bit with `EOPNOTSUPP`.
    ///   [`AccessFlags::ON_DEMAND`] on a device without on-demand paging fails with
    ///   `EOPNOTSUPP` or, on older kernels (rxe in Linux 6.1), `EINVAL`, whose message then
    ///   says so.
    #[doc(alias = "ibv_reg_mr")]
    pub fn register(
        &'a self,
        memory: impl RegionMemory<'a>,
        access: AccessFlags,
    ) -> Result<MemoryRegion<'a>> {
        check_local_only(access)?;
        Ok(MemoryRegion { reg: Registration::new(self, memory, access, None)? })
    }

    /// `ibv_reg_mr_iova2(3)`—Registers `memory` as [`ProtectionDomain::register`] does, but
    /// at `iova`: the NIC addresses its first byte as `iova`, both in this process's SGEs
    /// (with the lkey) and for peers (with the rkey) — "the virtual base address of the MR
    /// when accessed through a lkey or rkey" (`ibv_reg_mr(3)`). [`MemoryRegion::sge`],
    /// [`MemoryRegion::remote`] and [`MemoryRegion::iova`] use the IOVA; only
    /// [`MemoryRegion::addr`] and the slices are the CPU's view. An IOVA lets addresses a
    /// peer holds stay valid across re-registrations, or start at 0 (a zero-based region).
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] when the loaded rdma-core lacks `ibv_reg_mr_iova2` (before
    /// v28); otherwise as [`ProtectionDomain::register`] (the verb named `ibv_reg_mr_iova2`).
    #[doc(alias = "ibv_reg_mr_iova2")]
    pub fn register_with_iova(
        &'a self,
        memory: impl RegionMemory<'a>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<MemoryRegion<'a>> {
        check_local_only(access)?;
        Ok(MemoryRegion { reg: Registration::new(self, memory, access, Some(iova))? })
    }

    /// `ibv_reg_mr(3)`—Registers `memory` (as [`ProtectionDomain::register`]) for peers to
    /// write: `access` must hold `REMOTE_WRITE` or `REMOTE_ATOMIC`, and with them
    /// `LOCAL_WRITE`, which the verbs require.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `access` lacks remote-write rights or `LOCAL_WRITE`, or
    /// the memory is empty; otherwise as [`ProtectionDomain::register`].
    #[doc(alias = "ibv_reg_mr")]
    pub fn register_remote_writable(
        &'a self,
        memory: impl RegionMemory<'a>,
        access: AccessFlags,
    ) -> Result<RemoteWritableRegion<'a>> {
        check_remote_writable(access)?;
        Ok(RemoteWritableRegion { reg: Registration::new(self, memory, access, None)? })
    }

    /// `ibv_reg_mr_iova2(3)`—[`ProtectionDomain::register_remote_writable`] at `iova`, with
    /// the addresses of [`ProtectionDomain::register_with_iova`].
    ///
    /// # Errors
    ///
    /// As [`ProtectionDomain::register_remote_writable`] and
    /// [`ProtectionDomain::register_with_iova`].
    #[doc(alias = "ibv_reg_mr_iova2")]
    pub fn register_remote_writable_with_iova(
        &'a self,
        memory: impl RegionMemory<'a>,
        iova: u64,
        access: AccessFlags,
    ) -> Result<RemoteWritableRegion<'a>> {
        check_remote_writable(access)?;
        Ok(RemoteWritableRegion { reg: Registration::new(self, memory, access, Some(iova))? })
    }

    /// `ibv_reg_dmabuf_mr(3)`—Registers `len` bytes at `offset` of the dma-buf `fd` (memory
    /// another driver exports, e.g. a GPU's), addressed as `iova` by this process's SGEs and
    /// by peers (the CPU does not map it: [`DmabufRegion::addr`] is the IOVA too).
    ///
    /// The kernel takes its own reference to the dma-buf, so `fd` may be closed afterwards.
    /// The CPU never touches the bytes through the region, so any rights may be asked for
    /// (remote writes still need `LOCAL_WRITE`).
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] for `len == 0`, or `REMOTE_WRITE` / `REMOTE_ATOMIC` without
    ///   `LOCAL_WRITE`.
    /// - [`Error::Unsupported`] when the loaded rdma-core lacks `ibv_reg_dmabuf_mr` (before
    ///   v34) or the provider refuses with `EOPNOTSUPP` (e.g. rxe, siw).
    /// - [`Error::Verb`] from `ibv_reg_dmabuf_mr`: e.g. `EINVAL` when `fd` is not a dma-buf
    ///   or the range is outside it.
    #[doc(alias = "ibv_reg_dmabuf_mr")]
    pub fn register_dmabuf(
        &'a self,
        fd: BorrowedFd<'_>,
        offset: u64,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Result<DmabufRegion<'a>> {
        if len == 0 {
            return Err(Error::InvalidInput("a memory region needs at least 1 byte".into()));
        }
        if access.intersects(AccessFlags::REMOTE_WRITES) {
            check_remote_writable(access)?;
        }
        let reg = self
            .context()
            .library()
            .fns
            .ibv_reg_dmabuf_mr
            .ok_or(Error::Unsupported { what: "ibv_reg_dmabuf_mr (rdma-core v34+)" })?;
        let access_bits = access.bits() as std::ffi::c_int;
        // SAFETY: a live PD; the kernel validates the fd and range and keeps its own
        // reference to the dma-buf; no CPU memory is involved.
        let raw = unsafe { reg(self.as_raw(), offset, len, iova, fd.as_raw_fd(), access_bits) };
        let raw = check_ptr(raw, "ibv_reg_dmabuf_mr")?;
        let memory = Memory::unmapped(len);
        Ok(DmabufRegion { reg: Registration { raw, memory, local: iova, iova, access, pd: self } })
    }
}

/// Explains `EINVAL` for an on-demand registration: kernels before 6.x report a device
/// without ODP that way (rxe in Linux 6.1 does), newer ones with `EOPNOTSUPP`.
fn odp_hint(e: Error, access: AccessFlags) -> Error {
    if access.contains(AccessFlags::ON_DEMAND) && e.errno() == Some(libc::EINVAL) {
        return e.with_hint(
            "the device may lack on-demand paging (ON_DEMAND): Context::odp_caps (or \
             `ibv_devinfo -v`) lists its ODP capabilities; register without \
             AccessFlags::ON_DEMAND"
                .into(),
        );
    }
    e
}

/// Refuses remote-write rights for memory exposed as plain slices.
fn check_local_only(access: AccessFlags) -> Result<()> {
    if access.intersects(AccessFlags::REMOTE_WRITES) {
        return Err(Error::InvalidInput(
            "REMOTE_WRITE / REMOTE_ATOMIC memory cannot be read as a plain slice: register \
             it with register_remote_writable, which gives copy-only access"
                .into(),
        ));
    }
    Ok(())
}

/// Remote-write rights, and the `LOCAL_WRITE` they need.
fn check_remote_writable(access: AccessFlags) -> Result<()> {
    if !access.intersects(AccessFlags::REMOTE_WRITES) {
        return Err(Error::InvalidInput(
            "register_remote_writable needs REMOTE_WRITE or REMOTE_ATOMIC; use register \
             for memory peers only read"
                .into(),
        ));
    }
    if !access.contains(AccessFlags::LOCAL_WRITE) {
        return Err(Error::InvalidInput(format!(
            "{access:?} lacks LOCAL_WRITE, which REMOTE_WRITE and REMOTE_ATOMIC require \
             (ibv_reg_mr(3)): add AccessFlags::LOCAL_WRITE"
        )));
    }
    Ok(())
}

impl MemoryRegion<'_> {
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

impl std::fmt::Debug for MemoryRegion<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("MemoryRegion").field(&self.reg).finish()
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
    /// them, and starts no new one until told).
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

impl std::fmt::Debug for RemoteWritableRegion<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("RemoteWritableRegion").field(&self.reg).finish()
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

impl std::fmt::Debug for DmabufRegion<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("DmabufRegion").field(&self.reg).finish()
    }
}
