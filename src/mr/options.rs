//! Registration with options: an IOVA and a DMA handle ([`RegisterOptions`]), through
//! `ibv_reg_mr_ex` when a handle is given.

use super::memory::RegionMemory;
use super::registration::{check_local_only, check_remote_writable, Registration};
use super::{MemoryRegion, RemoteWritableRegion};
use crate::access::AccessFlags;
use crate::dmah::DmaHandle;
use crate::error::Result;
use crate::pd::ProtectionDomain;

/// What a registration asks beyond its memory and rights
/// ([`ProtectionDomain::register_with`]); the default asks nothing more, as
/// [`ProtectionDomain::register`].
#[derive(Clone, Copy, Debug, Default)]
pub struct RegisterOptions<'h> {
    /// The address the NIC gives the region's first byte (`ibv_reg_mr_iova2(3)`,
    /// `IBV_REG_MR_MASK_IOVA`); `None`: its own address. The NIC addresses the region by
    /// it, both in this process's SGEs (with the lkey) and for peers (with the rkey) — "the
    /// virtual base address of the MR when accessed through a lkey or rkey"
    /// (`ibv_reg_mr(3)`): [`MemoryRegion::sge`], [`MemoryRegion::remote`] and
    /// [`MemoryRegion::iova`] use it; only [`MemoryRegion::addr`] and the slices are the
    /// CPU's view. An IOVA lets addresses a peer holds stay valid across re-registrations,
    /// or start at 0 (a zero-based region).
    pub iova: Option<u64>,
    /// The DMA handle whose TPH hints the device applies to the region's DMA
    /// (`IBV_REG_MR_MASK_DMAH`, `ibv_alloc_dmah(3)`). The region borrows it, so it stays
    /// allocated while the region is registered.
    pub dma_handle: Option<&'h DmaHandle<'h>>,
}

impl RegisterOptions<'_> {
    /// A registration at `iova` ([`RegisterOptions::iova`]), without a DMA handle.
    #[must_use]
    pub fn at_iova(iova: u64) -> Self {
        RegisterOptions { iova: Some(iova), dma_handle: None }
    }
}

impl<'a> ProtectionDomain<'a> {
    /// `ibv_reg_mr(3)`—Registers `memory` as [`ProtectionDomain::register`] does, with
    /// `options`: with a [`dma_handle`](RegisterOptions::dma_handle) through `ibv_reg_mr_ex`
    /// (rdma-core v59), otherwise through `ibv_reg_mr` or, for an
    /// [`iova`](RegisterOptions::iova), `ibv_reg_mr_iova2`.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`](crate::Error::InvalidInput) as for
    ///   [`ProtectionDomain::register`], for an [`iova`](RegisterOptions::iova) whose region
    ///   would pass 2^64, or for a
    ///   DMA handle of another context.
    /// - [`Error::Unsupported`](crate::Error::Unsupported) with a DMA handle when the loaded
    ///   libibverbs lacks `ibv_reg_mr_ex` (before rdma-core v59), or the provider registers
    ///   no region with a DMA handle (`EOPNOTSUPP`: libibverbs' stub for a provider without
    ///   the op); without one, when the loaded rdma-core lacks `ibv_reg_mr_iova2` (before
    ///   v28) for an [`iova`](RegisterOptions::iova).
    /// - [`Error::Verb`](crate::Error::Verb) from `ibv_reg_mr_ex` (or the verb used), as
    ///   [`ProtectionDomain::register`].
    #[doc(alias = "ibv_reg_mr_ex")]
    #[doc(alias = "ibv_reg_mr_iova2")]
    pub fn register_with(
        &'a self,
        memory: impl RegionMemory<'a>,
        access: AccessFlags,
        options: RegisterOptions<'a>,
    ) -> Result<MemoryRegion<'a>> {
        check_local_only(access)?;
        let reg = Registration::new(self, memory, access, options.iova, options.dma_handle)?;
        Ok(MemoryRegion { reg })
    }

    /// `ibv_reg_mr(3)`—[`ProtectionDomain::register_remote_writable`] with `options`, as
    /// [`ProtectionDomain::register_with`].
    ///
    /// # Errors
    ///
    /// As [`ProtectionDomain::register_remote_writable`] and
    /// [`ProtectionDomain::register_with`].
    #[doc(alias = "ibv_reg_mr_ex")]
    #[doc(alias = "ibv_reg_mr_iova2")]
    pub fn register_remote_writable_with(
        &'a self,
        memory: impl RegionMemory<'a>,
        access: AccessFlags,
        options: RegisterOptions<'a>,
    ) -> Result<RemoteWritableRegion<'a>> {
        check_remote_writable(access)?;
        let reg = Registration::new(self, memory, access, options.iova, options.dma_handle)?;
        Ok(RemoteWritableRegion { reg })
    }
}
