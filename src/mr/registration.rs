//! Registration: the `ibv_reg_mr*` verbs ([`ProtectionDomain::register`] and its siblings),
//! the access rights each region type accepts, and the `ibv_mr` they create, which the region
//! types share ([`Registration`]).
#![allow(unsafe_code)]
//! # Safety
//!
//! A registration covers [`Memory`] that stays valid until it deregisters: owned (allocated
//! here, or a `PinnedMemory` value), or borrowed for the region's lifetime. It deregisters
//! before freeing owned memory (dropping a `PinnedMemory` owner), and leaks the memory when
//! deregistration fails. A borrow, though, ends with the region whether or
//! not deregistration succeeded, so borrowed memory is registered for local access only:
//! after a failed deregistration only this process's own work requests could name it, never
//! a peer (a local-only region has no rkey a peer may use, and no window binds to it).

use std::ops::RangeBounds;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use super::memory::{Memory, RegionMemory};
use super::{
    bounds, DmabufRegion, LKey, MemoryRegion, RKey, RegisterOptions, RemoteWritableRegion,
};
use crate::access::AccessFlags;
use crate::dmah::DmaHandle;
use crate::error::{check_errno, check_ptr, Error, InvalidInputKind, Result};
use crate::leak::drop_by;
use crate::pd::ProtectionDomain;
use crate::wr::{RemoteAddr, Sge};

/// The rights that let peers reach a region (directly, or through a window bound to it).
const REMOTE_ACCESS: AccessFlags = AccessFlags::REMOTE_READ
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_ATOMIC)
    .union(AccessFlags::MW_BIND);

/// One `ibv_mr` over [`Memory`]: what the region types share.
///
/// Two addresses name its first byte: `local`, where the CPU sees it (its virtual address; for
/// dma-buf memory, which the CPU does not map, the IOVA), and `iova`, where the NIC sees it:
/// the address in SGEs (with the lkey) *and* for peers (with the rkey), as `ibv_reg_mr(3)`
/// says of `ibv_reg_mr_iova2` and as rxe enforces. They are equal unless a registration chose
/// an IOVA.
pub(super) struct Registration<'a> {
    pub(super) raw: NonNull<sys::ibv_mr>,
    pub(super) memory: Memory<'a>,
    pub(super) local: u64,
    pub(super) iova: u64,
    pub(super) access: AccessFlags,
    pub(super) pd: &'a ProtectionDomain<'a>,
}

// SAFETY: the memory is owned or exclusively borrowed, reachable only through the region
// types' own methods (a `PinnedMemory` owner is `Send`); MR verbs are thread-safe.
unsafe impl Send for Registration<'_> {}
// SAFETY: shared methods only read (or copy out of) the memory, and never reach a
// `PinnedMemory` owner (only `free` does, through `&mut`).
unsafe impl Sync for Registration<'_> {}

impl<'a> Registration<'a> {
    /// Registers `memory` at its own address (`iova: None`) or at a chosen IOVA, which needs
    /// `ibv_reg_mr_iova2`; with a DMA handle through `ibv_reg_mr_ex` instead.
    pub(super) fn new(
        pd: &'a ProtectionDomain<'a>,
        memory: impl RegionMemory<'a>,
        access: AccessFlags,
        iova: Option<u64>,
        dmah: Option<&DmaHandle<'_>>,
    ) -> Result<Self> {
        access.check_named()?;
        let fns = &pd.context().library().fns;
        let reg_iova2 = match (iova, fns.ibv_reg_mr_iova2) {
            (Some(_), None) if dmah.is_none() => {
                return Err(Error::Unsupported { what: "ibv_reg_mr_iova2 (rdma-core v28+)" })
            }
            (_, reg) => reg,
        };
        let reg_ex = match dmah {
            Some(dmah) => Some((reg_mr_ex_for(pd, dmah)?, dmah)),
            None => None,
        };
        let mut memory = memory.into_memory()?;
        // Only a remote-writable region (the one kind with remote-write rights) never hands
        // out slices, which bytes another process writes must not be under.
        if memory.is_shared() && !access.intersects(AccessFlags::REMOTE_WRITES) {
            // SAFETY: never registered.
            unsafe { memory.free() };
            return Err(Error::invalid(
                InvalidInputKind::Access,
                "memory another process may write (SharedMemory, a memfd) is never read as a \
                 plain slice: register it with register_remote_writable (AccessFlags::\
                 LOCAL_WRITE | AccessFlags::REMOTE_WRITE), whose region copies in and out"
                    .into(),
            ));
        }
        if !memory.is_owned() && access.intersects(REMOTE_ACCESS) {
            return Err(Error::invalid(
                InvalidInputKind::Access,
                format!(
                    "borrowed memory is registered for local access only, not {:?}: a peer could \
                     keep reaching it through the rkey after the borrow ends if \
                     deregistration failed; register owned memory (a length, or a PinnedMemory \
                     value) for remote access",
                    access & REMOTE_ACCESS
                ),
            ));
        }
        let iova_range_fits = iova.is_none_or(|iova| iova.checked_add(memory.len as u64).is_some());
        if !iova_range_fits {
            // SAFETY: never registered.
            unsafe { memory.free() };
            return Err(Error::invalid(
                InvalidInputKind::Range,
                format!(
                    "an IOVA of {:#x} leaves no room for {} bytes below 2^64: choose a lower IOVA",
                    iova.unwrap_or_default(),
                    memory.len
                ),
            ));
        }
        let addr = memory.ptr.as_ptr();
        let raw = match (reg_ex, iova, reg_iova2) {
            (Some((reg, dmah)), _, _) => {
                let mut attr = mr_init_attr(addr.cast(), memory.len, access, iova, dmah.as_raw());
                // SAFETY: a live PD and a live DMA handle of its context, which the region
                // borrows; the memory stays valid until `dereg` (owned, or borrowed for 'a).
                unsafe { reg(pd.as_raw(), &mut attr) }
            }
            // SAFETY: a live PD; the memory stays valid until `dereg` (owned, or borrowed for
            // 'a).
            (None, Some(iova), Some(reg)) => unsafe {
                reg(pd.as_raw(), addr.cast(), memory.len, iova, access.bits())
            },
            // SAFETY: as above.
            _ => unsafe {
                sys::inline::ibv_reg_mr(fns, pd.as_raw(), addr.cast(), memory.len, access.bits())
            },
        };
        let verb = match (dmah, iova) {
            (Some(_), _) => "ibv_reg_mr_ex",
            (None, Some(_)) => "ibv_reg_mr_iova2",
            (None, None) => "ibv_reg_mr",
        };
        let explain =
            |e| crate::fork::huge_page_hint(odp_hint(e, access), addr as usize, memory.len);
        match check_ptr(raw, verb).map_err(explain) {
            Ok(raw) => {
                crate::fork::note_registration();
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

    pub(super) fn addr(&self) -> u64 {
        self.local
    }

    pub(super) fn lkey(&self) -> LKey {
        // SAFETY: a live MR; a plain field read.
        LKey::new(unsafe { (*self.raw.as_ptr()).lkey })
    }

    pub(super) fn rkey(&self) -> RKey {
        // SAFETY: a live MR; a plain field read.
        RKey::new(unsafe { (*self.raw.as_ptr()).rkey })
    }

    /// `start..end` of `range`, checked to be a non-empty part of the memory.
    pub(super) fn bounds(&self, range: impl RangeBounds<usize>) -> Result<(usize, usize)> {
        bounds(self.memory.len, range)
    }

    pub(super) fn sge(&self, range: impl RangeBounds<usize>) -> Result<Sge> {
        let (start, end) = self.bounds(range)?;
        let len = u32::try_from(end - start).map_err(|_| {
            Error::invalid(
                InvalidInputKind::Size,
                format!("an SGE holds at most {} bytes", u32::MAX),
            )
        })?;
        Ok(Sge::new(self.iova + start as u64, len, self.lkey()))
    }

    pub(super) fn remote(&self, range: impl RangeBounds<usize>) -> Result<RemoteAddr> {
        let (start, _) = self.bounds(range)?;
        Ok(RemoteAddr { addr: self.iova + start as u64, rkey: self.rkey() })
    }

    /// Deregisters, then frees owned memory; on failure the memory is leaked, never freed
    /// while the NIC may map it. Called once: by `Drop`, or by `destroy` (which skips Drop).
    fn dereg(&mut self) -> Result<()> {
        // SAFETY: a live MR, deregistered once.
        let ret = unsafe { (self.pd.context().library().fns.ibv_dereg_mr)(self.raw.as_ptr()) };
        check_errno(ret, "ibv_dereg_mr").map_err(|e| self.explain_dereg(e))?;
        // SAFETY: the registration is gone and this is the only call.
        unsafe { self.memory.free() };
        Ok(())
    }

    pub(super) fn destroy(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).dereg()
    }

    /// Says why `ibv_dereg_mr` answered `EINVAL` for a region windows may be bound to
    /// (`MW_BIND`): one still is (rxe's `rxe_dereg_mr` answers `EINVAL` while the region
    /// counts bound windows).
    fn explain_dereg(&self, error: Error) -> Error {
        if error.errno() != Some(libc::EINVAL) || !self.access.contains(AccessFlags::MW_BIND) {
            return error;
        }
        error.with_hint(
            "a memory window is still bound to this region (registered with MW_BIND): the \
             provider keeps the region while a window can reach it. Invalidate each window \
             bound to it (SendWr::local_inv, or the peer's SendWr::send_with_inv) or destroy \
             the window (MemoryWindow::destroy) before the region; this region's memory is \
             leaked, never freed while the window could reach it"
                .into(),
        )
    }
}

drop_by!(Registration<'_>, dereg, |reg| "a {}-byte memory region", reg.memory.len);

impl std::fmt::Debug for Registration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registration")
            .field("addr", &format_args!("{:#x}", self.local))
            .field("iova", &format_args!("{:#x}", self.iova))
            .field("len", &self.memory.len)
            .field("lkey", &self.lkey())
            .field("rkey", &self.rkey())
            .field("access", &self.access)
            .field("memory", &self.memory)
            .finish()
    }
}

impl<'a> ProtectionDomain<'a> {
    /// `ibv_reg_mr(3)`—Registers `memory` — a length (a zeroed buffer of whole pages the
    /// region allocates and owns), a [`PinnedMemory`](crate::PinnedMemory) value (owned by
    /// the region and dropped after it deregisters: [`HugePages`](crate::HugePages), or the
    /// caller's own memory) or a `&mut [u8]` (borrowed while registered) — with `access`.
    /// On any error the memory is freed (a `PinnedMemory` value dropped): it was never
    /// registered.
    ///
    /// With fork protection on ([`fork`](crate::fork)), libibverbs keeps children from
    /// inheriting every page the memory touches: a child that touches anything else on the
    /// pages of a borrowed slice dies with `SIGSEGV`, so borrow whole pages then.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] for `access` with bits [`AccessFlags`] does not name
    ///   ([`InvalidInputKind::UnknownAccess`](crate::InvalidInputKind::UnknownAccess)), empty
    ///   memory, `access` with `REMOTE_WRITE` /
    ///   `REMOTE_ATOMIC` (memory a peer may write is a [`RemoteWritableRegion`],
    ///   [`ProtectionDomain::register_remote_writable`]), or a borrowed slice with
    ///   `REMOTE_READ` or `MW_BIND`: its borrow ends with the region even when
    ///   deregistration fails, while a peer could still reach it, so only owned memory is
    ///   registered for peers; or memory another process may write
    ///   ([`SharedMemory`](crate::SharedMemory)), which only
    ///   [`ProtectionDomain::register_remote_writable`] registers.
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
        self.register_with(memory, access, RegisterOptions::default())
    }

    /// `ibv_reg_mr(3)`—Registers `memory` (as [`ProtectionDomain::register`]) for peers to
    /// write: `access` must hold `REMOTE_WRITE` or `REMOTE_ATOMIC`, and with them
    /// `LOCAL_WRITE`, which the verbs require.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `access` lacks remote-write rights or `LOCAL_WRITE`, or
    /// the memory is empty or borrowed (peers reach only owned memory: see
    /// [`ProtectionDomain::register`]); otherwise as [`ProtectionDomain::register`].
    #[doc(alias = "ibv_reg_mr")]
    pub fn register_remote_writable(
        &'a self,
        memory: impl RegionMemory<'a>,
        access: AccessFlags,
    ) -> Result<RemoteWritableRegion<'a>> {
        self.register_remote_writable_with(memory, access, RegisterOptions::default())
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
    /// - [`Error::InvalidInput`] for `len == 0`, `access` with bits [`AccessFlags`] does not
    ///   name, or `REMOTE_WRITE` / `REMOTE_ATOMIC` without `LOCAL_WRITE`.
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
        check_unmapped(len, access)?;
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
        Ok(DmabufRegion { reg: Registration::unmapped(self, raw, len, iova, access) })
    }
}

impl<'a> Registration<'a> {
    /// An `ibv_mr` over `len` bytes the CPU does not reach (a dma-buf's, a device
    /// allocation's), addressed by the NIC at `iova` and reported at it as its address too.
    pub(super) fn unmapped(
        pd: &'a ProtectionDomain<'a>,
        raw: NonNull<sys::ibv_mr>,
        len: usize,
        iova: u64,
        access: AccessFlags,
    ) -> Self {
        Registration { raw, memory: Memory::unmapped(len), local: iova, iova, access, pd }
    }
}

/// The arguments of a registration the CPU never touches (no slices, no copies), so any
/// rights may be asked for: at least 1 byte, named access bits, and the `LOCAL_WRITE` remote
/// writes need.
pub(super) fn check_unmapped(len: usize, access: AccessFlags) -> Result<()> {
    if len == 0 {
        return Err(Error::invalid(
            InvalidInputKind::Size,
            "a memory region needs at least 1 byte".into(),
        ));
    }
    access.check_named()?;
    if access.intersects(AccessFlags::REMOTE_WRITES) {
        check_remote_writable(access)?;
    }
    Ok(())
}

/// `ibv_reg_mr_ex` of `pd`'s library, after checking that `dmah` is one of `pd`'s context.
fn reg_mr_ex_for(pd: &ProtectionDomain<'_>, dmah: &DmaHandle<'_>) -> Result<RegMrEx> {
    if dmah.context().as_raw() != pd.context().as_raw() {
        return Err(Error::invalid(
            InvalidInputKind::OtherContext,
            format!(
                "a DMA handle of {} cannot be given to a registration on a protection domain \
                 of {}: allocate it from the PD's context",
                dmah.context().name(),
                pd.context().name()
            ),
        ));
    }
    pd.context()
        .library()
        .fns
        .ibv_reg_mr_ex
        .ok_or(Error::Unsupported { what: "ibv_reg_mr_ex (rdma-core v59+)" })
}

/// The type of `ibv_reg_mr_ex`.
type RegMrEx =
    unsafe extern "C" fn(*mut sys::ibv_pd, *mut sys::ibv_mr_init_attr) -> *mut sys::ibv_mr;

/// `ibv_reg_mr_ex`'s attributes for `len` bytes at `addr` with `dmah`, at `iova` if given.
fn mr_init_attr(
    addr: *mut std::ffi::c_void,
    len: usize,
    access: AccessFlags,
    iova: Option<u64>,
    dmah: *mut sys::ibv_dmah,
) -> sys::ibv_mr_init_attr {
    let mut comp_mask = sys::IBV_REG_MR_MASK_ADDR | sys::IBV_REG_MR_MASK_DMAH;
    if iova.is_some() {
        comp_mask |= sys::IBV_REG_MR_MASK_IOVA;
    }
    sys::ibv_mr_init_attr {
        length: len,
        access: access.bits() as std::ffi::c_int,
        comp_mask: u64::from(comp_mask),
        iova: iova.unwrap_or_default(),
        addr,
        dmah,
        ..Default::default()
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
pub(super) fn check_local_only(access: AccessFlags) -> Result<()> {
    if access.intersects(AccessFlags::REMOTE_WRITES) {
        return Err(Error::invalid(
            InvalidInputKind::Access,
            "REMOTE_WRITE / REMOTE_ATOMIC memory cannot be read as a plain slice: register \
             it with register_remote_writable, which gives copy-only access"
                .into(),
        ));
    }
    Ok(())
}

/// Remote-write rights, and the `LOCAL_WRITE` they need.
pub(super) fn check_remote_writable(access: AccessFlags) -> Result<()> {
    if !access.intersects(AccessFlags::REMOTE_WRITES) {
        return Err(Error::invalid(
            InvalidInputKind::Access,
            "register_remote_writable needs REMOTE_WRITE or REMOTE_ATOMIC; use register \
             for memory peers only read"
                .into(),
        ));
    }
    if !access.contains(AccessFlags::LOCAL_WRITE) {
        return Err(Error::invalid(
            InvalidInputKind::Access,
            format!(
                "{access:?} lacks LOCAL_WRITE, which REMOTE_WRITE and REMOTE_ATOMIC require \
             (ibv_reg_mr(3)): add AccessFlags::LOCAL_WRITE"
            ),
        ));
    }
    Ok(())
}
