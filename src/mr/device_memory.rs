//! Regions over device memory (`ibv_reg_dm_mr`, [`DeviceMemoryRegion`]): zero-based, so SGEs
//! and peers address their bytes by offset.
#![allow(unsafe_code)]
//! # Safety
//!
//! A region borrows the [`DeviceMemory`] it covers, which is therefore freed only after it;
//! the CPU never reaches the bytes through it (no slices, no copies: those are the DM's).

use std::ops::RangeBounds;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use super::memory::Memory;
use super::registration::{check_remote_writable, Registration};
use super::{bounds, LKey, RKey};
use crate::access::AccessFlags;
use crate::dm::DeviceMemory;
use crate::error::{check_ptr, Error, InvalidInputKind, Result};
use crate::pd::ProtectionDomain;
use crate::wr::{RemoteAddr, Sge};

/// A registered range of device memory (`ibv_reg_dm_mr`, see `ibv_alloc_dm(3)`): zero-based,
/// so its IOVA is 0 and [`sge`](Self::sge) and [`remote`](Self::remote) address its bytes by
/// their offset in the region. The raw tier posts from and into it as from any region; the
/// host fills and reads it through the [`DeviceMemory`] ([`DeviceMemory::copy_to`],
/// [`DeviceMemory::copy_from`]).
///
/// It borrows the device memory, so it cannot outlive it:
///
/// ```compile_fail,E0597
/// # fn f(ctx: &rdma_verbs::Context, pd: &rdma_verbs::ProtectionDomain<'_>) -> rdma_verbs::Result<()> {
/// let mr = {
///     let dm = ctx.alloc_dm(4096, 0)?;
///     pd.register_dm(&dm, .., rdma_verbs::AccessFlags::LOCAL_WRITE)?
/// }; // error: `dm` dropped while still borrowed
/// # drop(mr); Ok(()) }
/// ```
///
/// nor can the device memory be freed before it:
///
/// ```compile_fail,E0505
/// # fn f(ctx: &rdma_verbs::Context, pd: &rdma_verbs::ProtectionDomain<'_>) -> rdma_verbs::Result<()> {
/// let dm = ctx.alloc_dm(4096, 0)?;
/// let mr = pd.register_dm(&dm, .., rdma_verbs::AccessFlags::LOCAL_WRITE)?;
/// dm.destroy()?; // error: cannot move out of `dm` because it is borrowed
/// # drop(mr); Ok(()) }
/// ```
#[must_use = "the region is deregistered when dropped"]
pub struct DeviceMemoryRegion<'a> {
    reg: Registration<'a>,
    dm: &'a DeviceMemory<'a>,
}

region_common!(DeviceMemoryRegion);

impl<'a> DeviceMemoryRegion<'a> {
    /// The device memory it covers.
    pub fn device_memory(&self) -> &'a DeviceMemory<'a> {
        self.dm
    }
}

impl<'a> ProtectionDomain<'a> {
    /// `ibv_reg_dm_mr` (`ibv_alloc_dm(3)`)—Registers `range` of the device memory `dm` with
    /// `access`, zero-based (`IBV_ACCESS_ZERO_BASED` is added here, as the verb requires): the
    /// region's first byte is at IOVA 0 for SGEs and peers alike, whatever the range's offset
    /// in `dm`.
    ///
    /// The CPU never reaches the bytes through the region, so any rights may be asked for
    /// (remote writes still need `LOCAL_WRITE`).
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] for an empty range or one past `dm`'s end, `dm` of another
    ///   context than the PD's, `access` with bits [`AccessFlags`] does not name, or
    ///   `REMOTE_WRITE` / `REMOTE_ATOMIC` without `LOCAL_WRITE`.
    /// - [`Error::Unsupported`] when the provider or the loaded libibverbs has no
    ///   `reg_dm_mr` op.
    /// - [`Error::Verb`] from `ibv_reg_dm_mr`: `EINVAL` for rights the device refuses.
    #[doc(alias = "ibv_reg_dm_mr")]
    pub fn register_dm(
        &'a self,
        dm: &'a DeviceMemory<'a>,
        range: impl RangeBounds<usize>,
        access: AccessFlags,
    ) -> Result<DeviceMemoryRegion<'a>> {
        let (start, end) = bounds(dm.len(), range)?;
        if dm.context().as_raw() != self.context().as_raw() {
            return Err(Error::invalid(
                InvalidInputKind::OtherContext,
                format!(
                    "device memory of {} cannot be registered on a protection domain of {}: \
                     allocate both from one context",
                    dm.context().name(),
                    self.context().name()
                ),
            ));
        }
        access.check_named()?;
        if access.intersects(AccessFlags::REMOTE_WRITES) {
            check_remote_writable(access)?;
        }
        let len = end - start;
        let bits = access.bits() | sys::IBV_ACCESS_ZERO_BASED;
        // SAFETY: a live PD and a live DM of its context (checked above), the range inside
        // the DM; the region borrows the DM, so the DM outlives it.
        let raw = unsafe {
            sys::inline::ibv_reg_dm_mr(self.as_raw(), dm.as_raw(), start as u64, len, bits)
        };
        let raw = check_ptr(raw, "ibv_reg_dm_mr")?;
        let memory = Memory::unmapped(len);
        let reg = Registration { raw, memory, local: 0, iova: 0, access, pd: self };
        Ok(DeviceMemoryRegion { reg, dm })
    }
}
