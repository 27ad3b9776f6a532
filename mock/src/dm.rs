//! Device memory: the `alloc_dm`, `free_dm` and `reg_dm_mr` ops of a context with
//! [`ContextConfig::device_memory`](super::ContextConfig::device_memory), the copy members of
//! the DMs they allocate, and `ibv_dm_export_dmabuf_fd`.
//!
//! A DM is a zeroed heap buffer standing in for the device's memory. The copies keep mlx5's
//! rules (`providers/mlx5/verbs.c`, `mlx5_access_dm`): `EFAULT` past the end, `EINVAL` for an
//! offset or length that is not a multiple of 4. A DM region is registered in the strict
//! mock's registry at IOVA 0 over the buffer, so work requests naming it execute into the
//! device memory; `free_dm` answers `EBUSY` while a region covers the DM.

use std::ffi::{c_int, c_uint, c_void};
use std::ptr;

use rdma_verbs_sys::bindings::*;

use super::call::{Call, Verb};
use super::registry::MrInfo;
use super::state::{serve, Kind, State};
use super::verbs::{destroy, or_null};

/// A mock DM: the `ibv_dm` callers see, first, and the bytes behind it.
#[repr(C)]
pub(super) struct MockDm {
    dm: ibv_dm,
    /// Reached only through this pointer (copies and executed work requests), never through
    /// a reference, so the strict mock's writes through raw addresses stay sound.
    bytes: *mut [u8],
}

impl Drop for MockDm {
    fn drop(&mut self) {
        // SAFETY: made by `Box::into_raw` in `alloc_dm`, freed only here.
        drop(unsafe { Box::from_raw(self.bytes) });
    }
}

impl MockDm {
    fn start(&self) -> *mut u8 {
        self.bytes.cast()
    }

    fn len(&self) -> usize {
        self.bytes.len()
    }
}

/// The live mock DM `dm` (`EINVAL` if it is not one).
fn live<'a>(s: &State, dm: *mut ibv_dm) -> Result<&'a MockDm, c_int> {
    s.expect(dm, Kind::Dm)?;
    // SAFETY: a live mock DM (checked just now), allocated as a `MockDm` whose `ibv_dm` is its
    // first field; it stays allocated while the caller serves the call.
    Ok(unsafe { &*dm.cast::<MockDm>() })
}

/// `verbs_context.alloc_dm`: `EINVAL` for a length of 0 or past
/// [`MAX_DM_SIZE`](crate::MAX_DM_SIZE) (as mlx5's `alloc_dm_memic`), or a `comp_mask`.
///
/// # Safety
///
/// `attr` must be readable.
pub(super) unsafe extern "C" fn alloc_dm(
    context: *mut ibv_context,
    attr: *mut ibv_alloc_dm_attr,
) -> *mut ibv_dm {
    // SAFETY: the caller made `attr` readable.
    let ibv_alloc_dm_attr { length, log_align_req, comp_mask } = unsafe { attr.read() };
    or_null(serve(|s| {
        s.begin(Call::AllocDm { length, log_align_req }, Verb::AllocDm)?;
        s.expect(context, Kind::Context)?;
        if length == 0 || length as u64 > crate::MAX_DM_SIZE || comp_mask != 0 {
            return Err(libc::EINVAL);
        }
        let bytes = Box::into_raw(vec![0u8; length].into_boxed_slice());
        // (The `handle` member, rdma-core v35's, is left out: older headers lack it.)
        let dm = ibv_dm {
            context,
            memcpy_to_dm: Some(memcpy_to_dm),
            memcpy_from_dm: Some(memcpy_from_dm),
            ..Default::default()
        };
        Ok(s.adopt(MockDm { dm, bytes }, Kind::Dm).cast::<ibv_dm>())
    }))
}

/// `verbs_context.free_dm`: `EBUSY` while a region covers the DM.
pub(super) extern "C" fn free_dm(dm: *mut ibv_dm) -> c_int {
    destroy(dm.cast::<MockDm>(), Kind::Dm, Call::FreeDm, Verb::FreeDm, |s| {
        let mock = live(s, dm)?;
        let covered = s.reg.mrs.values().any(|mr| mr.iova == 0 && mock.covers(mr));
        if covered {
            return Err(libc::EBUSY);
        }
        Ok(())
    })
}

impl MockDm {
    /// Whether `mr`'s memory lies in this DM.
    fn covers(&self, mr: &MrInfo) -> bool {
        let start = self.start() as usize;
        mr.addr >= start && mr.addr < start + self.len()
    }
}

/// `verbs_context.reg_dm_mr`: `EINVAL` without `IBV_ACCESS_ZERO_BASED`, for an empty range or
/// one past the DM's end, for a PD of another context, or remote write / atomic access
/// without local write.
pub(super) extern "C" fn reg_dm_mr(
    pd: *mut ibv_pd,
    dm: *mut ibv_dm,
    offset: u64,
    length: usize,
    access: c_uint,
) -> *mut ibv_mr {
    let call = Call::RegDmMr { offset, length, access };
    or_null(serve(|s| {
        s.begin(call, Verb::RegDmMr)?;
        s.expect(pd, Kind::Pd)?;
        let mock = live(s, dm)?;
        // SAFETY: `pd` is a live mock PD (checked above).
        let context = unsafe { (*pd).context };
        let end = usize::try_from(offset).ok().and_then(|o| o.checked_add(length));
        let remote = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
        if access & IBV_ACCESS_ZERO_BASED == 0
            || length == 0
            || end.is_none_or(|end| end > mock.len())
            || context != mock.dm.context
            || (access & remote != 0 && access & IBV_ACCESS_LOCAL_WRITE == 0)
        {
            return Err(libc::EINVAL);
        }
        let addr = mock.start().wrapping_add(offset as usize);
        let id = s.next_id();
        let (lkey, rkey) = (0x1000 + id, 0x2000 + id);
        // As the kernel's DM regions: zero-based, no CPU address.
        let mr = ibv_mr { context, pd, addr: ptr::null_mut(), length, handle: id, lkey, rkey };
        let info = MrInfo { pd, rkey, iova: 0, addr: addr as usize, len: length, access };
        s.reg.mrs.insert(lkey, info);
        Ok(s.adopt(mr, Kind::Mr))
    }))
}

/// The bytes `offset..offset + length` of the live DM `dm`, under mlx5's rules.
fn range(s: &State, dm: *mut ibv_dm, offset: u64, length: usize) -> Result<*mut u8, c_int> {
    let mock = live(s, dm)?;
    let end = usize::try_from(offset).ok().and_then(|o| o.checked_add(length));
    if end.is_none_or(|end| end > mock.len()) {
        return Err(libc::EFAULT);
    }
    if !length.is_multiple_of(4) || !offset.is_multiple_of(4) {
        return Err(libc::EINVAL);
    }
    Ok(mock.start().wrapping_add(offset as usize))
}

/// A DM's `memcpy_to_dm` member.
///
/// # Safety
///
/// `host_addr` must be readable for `length` bytes.
unsafe extern "C" fn memcpy_to_dm(
    dm: *mut ibv_dm,
    offset: u64,
    host_addr: *const c_void,
    length: usize,
) -> c_int {
    let call = Call::MemcpyToDm { offset, length };
    serve_copy(call, Verb::MemcpyToDm, dm, offset, length, |to| {
        // SAFETY: `to` holds `length` bytes of the DM (checked by `range`); the caller made
        // `host_addr` readable; host memory never lies in a DM's buffer.
        unsafe { ptr::copy_nonoverlapping(host_addr.cast::<u8>(), to, length) }
    })
}

/// A DM's `memcpy_from_dm` member.
///
/// # Safety
///
/// `host_addr` must be writable for `length` bytes.
unsafe extern "C" fn memcpy_from_dm(
    host_addr: *mut c_void,
    dm: *mut ibv_dm,
    offset: u64,
    length: usize,
) -> c_int {
    let call = Call::MemcpyFromDm { offset, length };
    serve_copy(call, Verb::MemcpyFromDm, dm, offset, length, |from| {
        // SAFETY: as in `memcpy_to_dm`, with `host_addr` writable.
        unsafe { ptr::copy_nonoverlapping(from, host_addr.cast::<u8>(), length) }
    })
}

/// Serves a copy between host memory and the bytes `offset..offset + length` of `dm`:
/// records `call`, takes a failure injected for `verb`, checks the range ([`range`]), then
/// has `copy` move the bytes at its start; 0 or the errno.
fn serve_copy(
    call: Call,
    verb: Verb,
    dm: *mut ibv_dm,
    offset: u64,
    length: usize,
    copy: impl FnOnce(*mut u8),
) -> c_int {
    let result = serve(|s| {
        s.begin(call, verb)?;
        copy(range(s, dm, offset, length)?);
        Ok(())
    });
    result.err().unwrap_or(0)
}

/// `ibv_dm_export_dmabuf_fd`: a new memfd standing in for the DM's dma-buf (the mock has no
/// dma-buf exporter), or -1 with `errno` set.
pub(super) extern "C" fn export_dmabuf_fd(dm: *mut ibv_dm) -> c_int {
    let result = serve(|s| {
        s.begin(Call::DmExportDmabufFd, Verb::DmExportDmabufFd)?;
        live(s, dm)?;
        // SAFETY: a NUL-terminated name and valid flags.
        let fd = unsafe { libc::memfd_create(c"mock-dm-dmabuf".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
        }
        Ok(fd)
    });
    result.unwrap_or_else(|errno| {
        // SAFETY: `__errno_location` returns this thread's errno, always valid to write.
        unsafe { *libc::__errno_location() = errno };
        -1
    })
}
