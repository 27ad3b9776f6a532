//! Peer memory: `ibv_reg_mr(3)` of a device address (a GPU's), which the kernel resolves
//! through a peer-memory client instead of pinning CPU pages ([`PeerMemoryRegion`]).
#![allow(unsafe_code)]
//! # Safety
//!
//! The address is never dereferenced: the region's memory is unmapped (no slices, no
//! copies, nothing to free), and the caller of [`ProtectionDomain::register_peer_memory`]
//! promises the allocation outlives the registration.

use super::registration::{check_unmapped, Registration};
use super::PeerMemoryRegion;
use crate::access::AccessFlags;
use crate::error::{check_ptr, Error, InvalidInputKind, Result};
use crate::pd::ProtectionDomain;

use rdma_verbs_sys as sys;

impl<'a> ProtectionDomain<'a> {
    /// `ibv_reg_mr(3)`—Registers `len` bytes of device memory at `addr`: a GPU allocation
    /// (`cudaMalloc`, `cuMemAlloc`, `hipMalloc`) that the kernel maps for the NIC through a
    /// peer-memory client — `nvidia_peermem` (or the older `nv_peer_mem`) for NVIDIA GPUs,
    /// ROCm's `amdgpu` for AMD ones — the route of GPUDirect RDMA. The NIC then reads and
    /// writes GPU memory directly; SGEs and peers address it by `addr`
    /// ([`PeerMemoryRegion::iova`]).
    ///
    /// The CPU never touches the memory through the region (it has no slices and no
    /// copies), so any rights may be asked for (remote writes still need `LOCAL_WRITE`).
    /// Where the kernel offers it (Linux 5.12+, rdma-core v34+), dma-buf
    /// (`ibv_reg_dmabuf_mr(3)`: [`ProtectionDomain::register_dmabuf`] with the fd
    /// `cuMemGetHandleForAddressRange` gives) reaches the same memory with no peer-memory
    /// client and no `unsafe`. The guide's
    /// [GPU memory](crate::guide::deployment#gpu-memory) compares the two routes.
    ///
    /// # Safety
    ///
    /// - `addr..addr + len` is device memory of one allocation, and stays allocated (no
    ///   `cudaFree`, `cuMemFree`, `hipFree`) until the region is gone: dropped, or
    ///   [`destroy`](PeerMemoryRegion::destroy) returned `Ok`. When deregistration fails the
    ///   NIC may still reach it, so it must stay allocated for the rest of the process.
    /// - The device context that owns it (the CUDA or HIP context) stays alive as long.
    ///
    /// The verbs cannot check either: a device address is no CPU memory the crate could
    /// look at. (`nvidia_peermem` also revokes the NIC's mapping when the GPU driver frees
    /// the memory, but the verbs promise nothing of the kind.)
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] for `addr == 0`, `len == 0`, a range past 2^64, `access`
    ///   with bits [`AccessFlags`] does not name, or `REMOTE_WRITE` / `REMOTE_ATOMIC` without
    ///   `LOCAL_WRITE`.
    /// - [`Error::Verb`] from `ibv_reg_mr`. `EFAULT` or `EINVAL` usually mean no peer-memory
    ///   client claimed the address, so the kernel tried to pin it as CPU memory: the
    ///   message says to load `nvidia_peermem` or use dma-buf (the doctor's `peer memory` and
    ///   `gpu routes <dev>` checks say which the host offers). Software devices (rxe, siw)
    ///   move data with the CPU and never take device memory.
    #[doc(alias = "ibv_reg_mr")]
    pub unsafe fn register_peer_memory(
        &'a self,
        addr: u64,
        len: usize,
        access: AccessFlags,
    ) -> Result<PeerMemoryRegion<'a>> {
        check_unmapped(len, access)?;
        if addr == 0 || addr.checked_add(len as u64).is_none() {
            return Err(Error::invalid(
                InvalidInputKind::Range,
                format!(
                    "{addr:#x}+{len} is not a device allocation: pass the address \
                     cudaMalloc/hipMalloc returned and a length inside it"
                ),
            ));
        }
        let fns = &self.context().library().fns;
        let ptr = addr as usize as *mut std::ffi::c_void;
        // SAFETY: a live PD; the caller keeps the device allocation alive until the region
        // deregisters. The kernel resolves the address (a peer-memory client, or it fails);
        // neither libibverbs nor the provider dereferences it.
        let raw = unsafe { sys::inline::ibv_reg_mr(fns, self.as_raw(), ptr, len, access.bits()) };
        let raw = check_ptr(raw, "ibv_reg_mr").map_err(no_client_hint)?;
        // `ibv_reg_mr`, unlike `ibv_reg_dmabuf_mr`, makes fork protection too late to turn on.
        crate::fork::note_registration();
        Ok(PeerMemoryRegion { reg: Registration::unmapped(self, raw, len, addr, access) })
    }
}

/// Explains `EFAULT` / `EINVAL` from registering a device address: the kernel pins CPU pages
/// unless a peer-memory client claims the range, and a GPU address has none to pin.
fn no_client_hint(e: Error) -> Error {
    if !matches!(e.errno(), Some(libc::EFAULT | libc::EINVAL)) {
        return e;
    }
    e.with_hint(
        "no peer-memory client claimed this device address, so the kernel tried to pin it as \
         CPU memory: load one (`modprobe nvidia_peermem`, or `nv_peer_mem` with older NVIDIA \
         drivers; it needs the peer-memory API of MLNX_OFED/DOCA-OFED kernel modules), or \
         register the memory through dma-buf instead: ProtectionDomain::register_dmabuf with \
         the fd cuMemGetHandleForAddressRange gives (Linux 5.12+, rdma-core v34+)"
            .into(),
    )
}
