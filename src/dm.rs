//! Device memory (`ibv_alloc_dm(3)`): memory on the device itself ([`DeviceMemory`]), which
//! the program fills and reads by copies and the NIC reaches without crossing PCIe once it is
//! registered as a region ([`DeviceMemoryRegion`](crate::DeviceMemoryRegion)). NVIDIA
//! ConnectX devices offer it (mlx5's MEMIC); rxe and siw do not.
#![allow(unsafe_code)]
//! # Safety
//!
//! A [`DeviceMemory`] owns an `ibv_dm` until `ibv_free_dm` and borrows its context; regions
//! over it borrow it. Its bytes are never host memory: the only host memory the copies touch
//! is the caller's slice, of the length checked here.

use std::os::fd::{FromRawFd, OwnedFd};
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::context::Context;
use crate::error::{check_errno, check_ptr, last_errno, Error, InvalidInputKind, Result};
use crate::leak::drop_by;
use crate::quirks::MELLANOX_VENDOR_ID;

/// The unit mlx5 copies in: offsets and lengths of copies are multiples of it
/// (`providers/mlx5/verbs.c`, `mlx5_access_dm`: "DM access address and length must be aligned
/// to 4 bytes", `EINVAL` otherwise).
const COPY_ALIGN: usize = 4;

/// Memory on the device (`struct ibv_dm`, `ibv_alloc_dm(3)`), `len` bytes the host reaches only
/// by copying ([`copy_to`](Self::copy_to), [`copy_from`](Self::copy_from)) and the NIC through a
/// region registered over it
/// ([`ProtectionDomain::register_dm`](crate::ProtectionDomain::register_dm)). Freed
/// (`ibv_free_dm`) when dropped.
///
/// It borrows its [`Context`], so it cannot outlive it:
///
/// ```compile_fail,E0597
/// # fn f() -> rdma_verbs::Result<()> {
/// let dm = {
///     let ctx = rdma_verbs::Context::open_first()?;
///     ctx.alloc_dm(4096, 0)?
/// }; // error: `ctx` dropped while still borrowed
/// # drop(dm); Ok(()) }
/// ```
///
/// `Send + Sync`: copies take `&self`. Two threads copying into the same bytes leave one's or
/// the other's words there (mlx5 copies 4-byte words), as two peers writing would.
#[must_use = "the device memory is freed when dropped"]
pub struct DeviceMemory<'ctx> {
    raw: NonNull<sys::ibv_dm>,
    ctx: &'ctx Context,
    len: usize,
}

// SAFETY: the DM verbs are thread-safe, and its bytes are device memory: no Rust reference to
// them exists, and copies touch host memory only through the caller's slices.
unsafe impl Send for DeviceMemory<'_> {}
// SAFETY: as above; every method takes `&self`.
unsafe impl Sync for DeviceMemory<'_> {}

impl Context {
    /// `ibv_query_device_ex(3)`—The most device memory one [`Context::alloc_dm`] may ask for,
    /// in bytes (`max_dm_size`): 0 when the device reports none (rxe, siw, a provider without
    /// `query_device_ex`).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_query_device_ex` (or the `ibv_query_device` fallback).
    #[doc(alias = "ibv_query_device_ex")]
    pub fn max_dm_size(&self) -> Result<u64> {
        Ok(self.query_device_ex()?.max_dm_size)
    }

    /// `ibv_alloc_dm(3)`—Allocates `len` bytes of the device's own memory, its start aligned
    /// to `2^log_align_req` bytes (0 for no requirement; atomics on it want 3, 8 bytes).
    ///
    /// The length is checked against [`Context::max_dm_size`] first; a device that reports 0
    /// is left to answer itself (rxe and siw answer `EOPNOTSUPP`).
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] for `len == 0`, or a `len` past the device's `max_dm_size`
    ///   (the message names it).
    /// - [`Error::Unsupported`] when the provider has no device memory (rxe, siw: libibverbs'
    ///   stub answers `EOPNOTSUPP`) or the loaded libibverbs' context has no `alloc_dm` op
    ///   (before rdma-core v18).
    /// - [`Error::Verb`] from `ibv_alloc_dm`: `ENOMEM` when the device's memory is used up
    ///   (by this or other processes), `EINVAL` for an alignment it cannot give.
    #[doc(alias = "ibv_alloc_dm")]
    pub fn alloc_dm(&self, len: usize, log_align_req: u32) -> Result<DeviceMemory<'_>> {
        if len == 0 {
            return Err(Error::invalid(
                InvalidInputKind::Size,
                "device memory needs at least 1 byte".into(),
            ));
        }
        let max = self.max_dm_size()?;
        if max != 0 && len as u64 > max {
            return Err(Error::invalid(
                InvalidInputKind::Size,
                format!(
                    "{len} bytes of device memory is more than {} offers: its max_dm_size \
                     (ibv_query_device_ex) is {max} bytes; ask for at most that, or keep the \
                     rest in host memory",
                    self.name()
                ),
            ));
        }
        let mut attr = sys::ibv_alloc_dm_attr { length: len, log_align_req, comp_mask: 0 };
        // SAFETY: a live context and a readable attribute struct.
        let raw = unsafe { sys::inline::ibv_alloc_dm(self.as_raw(), &mut attr) };
        Ok(DeviceMemory { raw: check_ptr(raw, "ibv_alloc_dm")?, ctx: self, len })
    }
}

impl<'ctx> DeviceMemory<'ctx> {
    /// The length in bytes, as allocated.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: device memory holds at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The context it belongs to.
    pub fn context(&self) -> &'ctx Context {
        self.ctx
    }

    /// The raw DM pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_dm {
        self.raw.as_ptr()
    }

    /// `ibv_memcpy_to_dm(3)`—Copies `src` into the device memory at `offset`.
    ///
    /// `offset` and `src.len()` must be multiples of 4: mlx5 copies 4-byte words and refuses
    /// anything else (`providers/mlx5/verbs.c`); the check is made here for every provider,
    /// with a message. An empty `src` copies nothing.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] when `offset..offset + src.len()` is outside the memory
    ///   ([`InvalidInputKind::Range`]) or not 4-byte aligned
    ///   ([`InvalidInputKind::Alignment`]).
    /// - [`Error::Unsupported`] on a device that is not an NVIDIA/Mellanox one (by its
    ///   `vendor_id`): among rdma-core's providers only mlx5 sets a DM's copy functions;
    ///   MANA's `alloc_dm` leaves them unset (`providers/mana/mana.c`), and calling them would
    ///   jump through garbage. Its memory is still reachable through a registered region.
    /// - [`Error::Verb`] from `ibv_memcpy_to_dm`.
    #[doc(alias = "ibv_memcpy_to_dm")]
    pub fn copy_to(&self, offset: usize, src: &[u8]) -> Result<()> {
        if !self.check_copy(offset, src.len(), "ibv_memcpy_to_dm")? {
            return Ok(());
        }
        // SAFETY: a live DM whose provider sets its copy functions (`check_copy`); `src` is
        // readable for its length, which lies inside the DM.
        let ret = unsafe {
            sys::inline::ibv_memcpy_to_dm(
                self.as_raw(),
                offset as u64,
                src.as_ptr().cast(),
                src.len(),
            )
        };
        check_errno(ret, "ibv_memcpy_to_dm")
    }

    /// `ibv_memcpy_from_dm(3)`—Copies `dst.len()` bytes of the device memory from `offset`
    /// into `dst`, under the rules of [`DeviceMemory::copy_to`]. Bytes the NIC writes
    /// meanwhile (through a region) may arrive partly: order access with the work requests
    /// that write them.
    ///
    /// # Errors
    ///
    /// As [`DeviceMemory::copy_to`] (the verb named `ibv_memcpy_from_dm`).
    #[doc(alias = "ibv_memcpy_from_dm")]
    pub fn copy_from(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        if !self.check_copy(offset, dst.len(), "ibv_memcpy_from_dm")? {
            return Ok(());
        }
        // SAFETY: as in `copy_to`, with `dst` writable for its length.
        let ret = unsafe {
            sys::inline::ibv_memcpy_from_dm(
                dst.as_mut_ptr().cast(),
                self.as_raw(),
                offset as u64,
                dst.len(),
            )
        };
        check_errno(ret, "ibv_memcpy_from_dm")
    }

    /// Whether a copy of `len` bytes at `offset` is to be made (`false`: nothing to copy),
    /// after the range, alignment and provider checks of [`DeviceMemory::copy_to`].
    fn check_copy(&self, offset: usize, len: usize, verb: &'static str) -> Result<bool> {
        let end = offset.checked_add(len).filter(|&end| end <= self.len).ok_or_else(|| {
            Error::invalid(
                InvalidInputKind::Range,
                format!(
                    "{verb}: {len} bytes at offset {offset} pass the end of the {}-byte device \
                     memory",
                    self.len
                ),
            )
        })?;
        if !offset.is_multiple_of(COPY_ALIGN) || !len.is_multiple_of(COPY_ALIGN) {
            return Err(Error::invalid(
                InvalidInputKind::Alignment,
                format!(
                    "{verb}: offset {offset} and length {len} must be multiples of \
                     {COPY_ALIGN}: the device copies {COPY_ALIGN}-byte words; pad the copy"
                ),
            ));
        }
        if self.ctx.cached_attr()?.vendor_id() != MELLANOX_VENDOR_ID {
            return Err(Error::Unsupported { what: verb });
        }
        Ok(end > offset)
    }

    /// `ibv_dm_export_dmabuf_fd(3)`—A dma-buf file descriptor for the device memory, for
    /// another driver (a GPU's, another RDMA device's `ibv_reg_dmabuf_mr`) to map it. Closing
    /// it releases what the export took; the kernel keeps the memory while the dma-buf is in
    /// use.
    ///
    /// # Errors
    ///
    /// - [`Error::Unsupported`] when the loaded libibverbs lacks the verb (before rdma-core
    ///   v62), or the provider or the kernel cannot export device memory (`EOPNOTSUPP`).
    /// - [`Error::Verb`] from `ibv_dm_export_dmabuf_fd` otherwise.
    #[doc(alias = "ibv_dm_export_dmabuf_fd")]
    pub fn export_dmabuf_fd(&self) -> Result<OwnedFd> {
        let export = self
            .ctx
            .library()
            .fns
            .ibv_dm_export_dmabuf_fd
            .ok_or(Error::Unsupported { what: "ibv_dm_export_dmabuf_fd (rdma-core v62+)" })?;
        // SAFETY: a live DM of this library.
        let fd = unsafe { export(self.as_raw()) };
        if fd < 0 {
            return Err(Error::verb("ibv_dm_export_dmabuf_fd", last_errno()));
        }
        // SAFETY: a new descriptor the verb handed over, owned by nothing else.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }

    /// `ibv_free_dm(3)`—Frees the device memory, reporting failure (dropping logs instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_free_dm` (the memory is then leaked): `EBUSY` while a region
    /// made by other means (raw pointers) still covers it.
    #[doc(alias = "ibv_free_dm")]
    pub fn destroy(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).free()
    }

    fn free(&self) -> Result<()> {
        // SAFETY: every region over it borrows it, so none is alive; freed once.
        let ret = unsafe { sys::inline::ibv_free_dm(self.as_raw()) };
        check_errno(ret, "ibv_free_dm")
    }
}

drop_by!(DeviceMemory<'_>, free, |dm| "{} bytes of device memory of {}", dm.len, dm.ctx.name());

impl std::fmt::Debug for DeviceMemory<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceMemory")
            .field("device", &self.ctx.name())
            .field("len", &self.len)
            .finish()
    }
}
