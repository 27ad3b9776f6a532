//! DMA handles (`ibv_alloc_dmah(3)`, rdma-core v59): PCIe TLP Processing Hints (TPH) for the
//! DMA of a memory region: the CPU whose cache the device's writes should reach (the steering
//! tag the kernel looks up for `cpu_id`), the memory type behind it, and the processing hint
//! the device puts in its requests. A [`DmaHandle`] is allocated on a context and named when
//! a region is registered
//! ([`RegisterOptions::dma_handle`](crate::RegisterOptions::dma_handle), `ibv_reg_mr_ex`).
//! Among rdma-core's providers mlx5 implements them (`providers/mlx5/verbs.c`), on a kernel
//! with the DMAH uverbs object; rxe and siw do not.
#![allow(unsafe_code)]
//! # Safety
//!
//! A [`DmaHandle`] owns an `ibv_dmah` until `ibv_dealloc_dmah` and borrows its context; the
//! regions registered with it borrow it, so it is deallocated after them. It only carries
//! hints: no memory is reached through it.

use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::context::Context;
use crate::error::{check_errno, check_ptr, Error, InvalidInputKind, Result};
use crate::leak::drop_by;

/// The largest processing hint: PCIe's PH field has 2 bits (bidirectional, requester,
/// target, target with priority).
const MAX_PH: u8 = 3;

/// The memory the steering tag targets (`enum ibv_tph_mem_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TphMemType {
    /// Volatile memory (`IBV_TPH_MEM_TYPE_VM`).
    Volatile,
    /// Persistent memory (`IBV_TPH_MEM_TYPE_PM`).
    Persistent,
}

impl TphMemType {
    fn raw(self) -> u8 {
        let raw = match self {
            TphMemType::Volatile => sys::IBV_TPH_MEM_TYPE_VM,
            TphMemType::Persistent => sys::IBV_TPH_MEM_TYPE_PM,
        };
        raw as u8
    }
}

/// What a [`DmaHandle`] asks of the device (`struct ibv_dmah_init_attr`); a field left `None`
/// is left out of its `comp_mask`.
///
/// mlx5 requires [`ph`](Self::ph), and [`cpu_id`](Self::cpu_id) and
/// [`mem_type`](Self::mem_type) together or neither (`EINVAL` otherwise); other providers may
/// differ, so this crate passes what is given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DmaHandleAttr {
    /// The CPU the region's DMA is meant for (`cpu_id`, `IBV_DMAH_INIT_ATTR_MASK_CPU_ID`): the
    /// kernel turns it into the PCIe steering tag of that CPU.
    pub cpu_id: Option<u32>,
    /// The processing hint (`ph`, `IBV_DMAH_INIT_ATTR_MASK_PH`), 0 to 3: bidirectional data
    /// structure, requester, target, target with priority (the PCIe TPH PH field).
    pub ph: Option<u8>,
    /// The memory type the steering tag targets (`tph_mem_type`,
    /// `IBV_DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE`).
    pub mem_type: Option<TphMemType>,
}

impl DmaHandleAttr {
    fn raw(&self) -> Result<sys::ibv_dmah_init_attr> {
        let mut attr = sys::ibv_dmah_init_attr::default();
        if let Some(cpu_id) = self.cpu_id {
            attr.comp_mask |= sys::IBV_DMAH_INIT_ATTR_MASK_CPU_ID;
            attr.cpu_id = cpu_id;
        }
        if let Some(ph) = self.ph {
            if ph > MAX_PH {
                return Err(Error::invalid(
                    InvalidInputKind::Range,
                    format!(
                        "a processing hint of {ph} does not fit PCIe's 2-bit PH field: give \
                         0 (bidirectional), 1 (requester), 2 (target) or 3 (target with \
                         priority)"
                    ),
                ));
            }
            attr.comp_mask |= sys::IBV_DMAH_INIT_ATTR_MASK_PH;
            attr.ph = ph;
        }
        if let Some(mem_type) = self.mem_type {
            attr.comp_mask |= sys::IBV_DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE;
            attr.tph_mem_type = mem_type.raw();
        }
        Ok(attr)
    }
}

/// A DMA handle (`struct ibv_dmah`, `ibv_alloc_dmah(3)`): TPH hints a region registered with
/// it ([`RegisterOptions::dma_handle`](crate::RegisterOptions::dma_handle)) gives the
/// device's DMA. Deallocated (`ibv_dealloc_dmah`) when dropped.
///
/// It borrows its [`Context`], so it cannot outlive it:
///
/// ```compile_fail,E0597
/// # fn f() -> rdma_verbs::Result<()> {
/// let dmah = {
///     let ctx = rdma_verbs::Context::open_first()?;
///     ctx.alloc_dmah(&rdma_verbs::DmaHandleAttr { ph: Some(0), ..Default::default() })?
/// }; // error: `ctx` dropped while still borrowed
/// # drop(dmah); Ok(()) }
/// ```
///
/// and a region registered with it borrows it, so the handle outlives the region:
///
/// ```compile_fail,E0505
/// # use rdma_verbs::{AccessFlags, DmaHandleAttr, RegisterOptions};
/// # fn f(pd: &rdma_verbs::ProtectionDomain<'_>) -> rdma_verbs::Result<()> {
/// let dmah = pd.context().alloc_dmah(&DmaHandleAttr { ph: Some(0), ..Default::default() })?;
/// let options = RegisterOptions { dma_handle: Some(&dmah), ..Default::default() };
/// let mr = pd.register_with(4096, AccessFlags::LOCAL_WRITE, options)?;
/// drop(dmah); // error: cannot move out of `dmah` because it is borrowed
/// # drop(mr); Ok(()) }
/// ```
///
/// `Send + Sync`: it is never changed after allocation.
#[must_use = "the DMA handle is deallocated when dropped"]
pub struct DmaHandle<'ctx> {
    raw: NonNull<sys::ibv_dmah>,
    ctx: &'ctx Context,
    attr: DmaHandleAttr,
}

// SAFETY: allocation and deallocation of a DMA handle are thread-safe verbs, and the handle is
// only read (by registrations) after allocation.
unsafe impl Send for DmaHandle<'_> {}
// SAFETY: as above; every method takes `&self`.
unsafe impl Sync for DmaHandle<'_> {}

impl Context {
    /// `ibv_alloc_dmah(3)`—Allocates a DMA handle with the hints of `attr`, for regions
    /// registered with it ([`RegisterOptions::dma_handle`](crate::RegisterOptions::dma_handle)).
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] for a [`ph`](DmaHandleAttr::ph) above 3.
    /// - [`Error::Unsupported`] when the loaded libibverbs lacks `ibv_alloc_dmah` (before
    ///   rdma-core v59), or the provider has no DMA handles (rxe, siw: libibverbs' stub
    ///   answers `EOPNOTSUPP`; so does mlx5 for a `comp_mask` bit it does not know).
    /// - [`Error::Verb`] from `ibv_alloc_dmah`: mlx5 answers `EINVAL` without
    ///   [`ph`](DmaHandleAttr::ph) or with only one of [`cpu_id`](DmaHandleAttr::cpu_id) and
    ///   [`mem_type`](DmaHandleAttr::mem_type); the kernel's own refusals (a CPU or a device
    ///   it cannot give a steering tag for) come with its errno.
    #[doc(alias = "ibv_alloc_dmah")]
    pub fn alloc_dmah(&self, attr: &DmaHandleAttr) -> Result<DmaHandle<'_>> {
        let alloc = self
            .library()
            .fns
            .ibv_alloc_dmah
            .ok_or(Error::Unsupported { what: "ibv_alloc_dmah (rdma-core v59+)" })?;
        let mut raw_attr = attr.raw()?;
        // SAFETY: a live context of this library and a readable attribute struct.
        let raw = unsafe { alloc(self.as_raw(), &mut raw_attr) };
        Ok(DmaHandle { raw: check_ptr(raw, "ibv_alloc_dmah")?, ctx: self, attr: *attr })
    }
}

impl<'ctx> DmaHandle<'ctx> {
    /// The context it belongs to.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The hints it was allocated with.
    pub fn attr(&self) -> &DmaHandleAttr {
        &self.attr
    }

    /// The raw handle pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_dmah {
        self.raw.as_ptr()
    }

    /// `ibv_alloc_dmah(3)`—Deallocates the handle (`ibv_dealloc_dmah`), reporting failure
    /// (dropping logs instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_dealloc_dmah` (the handle is then leaked): `EBUSY` while a
    /// region registered by other means (raw pointers) still uses it.
    #[doc(alias = "ibv_dealloc_dmah")]
    pub fn destroy(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).dealloc()
    }

    fn dealloc(&self) -> Result<()> {
        // Only a library with `ibv_alloc_dmah` made one, and v59 added both together.
        let Some(dealloc) = self.ctx.library().fns.ibv_dealloc_dmah else {
            return Err(Error::Unsupported { what: "ibv_dealloc_dmah (rdma-core v59+)" });
        };
        // SAFETY: every region registered with it borrows it, so none is alive; deallocated
        // once.
        let ret = unsafe { dealloc(self.as_raw()) };
        check_errno(ret, "ibv_dealloc_dmah")
    }
}

drop_by!(DmaHandle<'_>, dealloc, |dmah| "a DMA handle of {}", dmah.ctx.name());

impl std::fmt::Debug for DmaHandle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaHandle")
            .field("device", &self.ctx.name())
            .field("attr", &self.attr)
            .finish()
    }
}
