//! Device memory of a simulated GPU, and the peer-memory client that lets `ibv_reg_mr`
//! register it (as `nvidia_peermem` does for a `cudaMalloc` pointer).
//!
//! A [`DeviceMemory`] has two views: its device address, reserved `PROT_NONE` so that any
//! CPU access faults (the process dies: the program touched GPU memory), and the NIC's,
//! through which the mock's execution of work requests moves data, and the test copies in
//! and out ([`DeviceMemory::read`], [`DeviceMemory::write`]: what `cudaMemcpy` would do).

use std::ffi::c_int;
use std::ptr;

use crate::state::{self, State};

/// A simulated GPU allocation (see the module notes). Made by
/// [`Mock::device_memory`](crate::Mock::device_memory); unmapped on drop, so it must outlive
/// the regions registered over it, as a `cudaMalloc` allocation must.
#[derive(Debug)]
pub struct DeviceMemory {
    device: *mut u8,
    nic: *mut u8,
    len: usize,
}

impl DeviceMemory {
    /// The device address of the first byte: what `cudaMalloc` returns.
    pub fn addr(&self) -> u64 {
        self.device as u64
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Always `false`: at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Copies the bytes at `offset` into `dst` (device to host).
    ///
    /// # Panics
    ///
    /// When the range is outside the allocation.
    pub fn read(&self, offset: usize, dst: &mut [u8]) {
        assert!(offset.checked_add(dst.len()).is_some_and(|end| end <= self.len));
        // SAFETY: in bounds of the NIC view, a live mapping of `len` bytes.
        unsafe { ptr::copy(self.nic.add(offset), dst.as_mut_ptr(), dst.len()) };
    }

    /// Copies `src` to `offset` (host to device).
    ///
    /// # Panics
    ///
    /// When the range is outside the allocation.
    pub fn write(&self, offset: usize, src: &[u8]) {
        assert!(offset.checked_add(src.len()).is_some_and(|end| end <= self.len));
        // SAFETY: as in `read`.
        unsafe { ptr::copy(src.as_ptr(), self.nic.add(offset), src.len()) };
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        let device = self.device as usize;
        let _ = state::serve(|s| {
            s.peer.ranges.retain(|r| r.device != device);
            Ok(())
        });
        // SAFETY: the two mappings made in `new`, unmapped once.
        unsafe {
            libc::munmap(self.device.cast(), self.len);
            libc::munmap(self.nic.cast(), self.len);
        }
    }
}

/// A live [`DeviceMemory`]'s two views.
#[derive(Clone, Copy, Debug)]
struct Range {
    device: usize,
    nic: usize,
    len: usize,
}

/// The device memory of this thread's mock, and whether a peer-memory client is loaded.
#[derive(Debug, Default)]
pub(crate) struct PeerMemory {
    ranges: Vec<Range>,
    pub client: bool,
}

impl PeerMemory {
    /// Where the NIC reaches `addr..addr + len` for a registration: the address itself when
    /// it is no device memory (CPU memory), the NIC view when it lies in one allocation and
    /// a peer-memory client is loaded; `EFAULT` otherwise, as the kernel's page pinning
    /// gives for an address no CPU page backs.
    pub fn resolve(&self, addr: usize, len: usize) -> Result<usize, c_int> {
        let end = addr.checked_add(len).ok_or(libc::EINVAL)?;
        let Some(r) = self.ranges.iter().find(|r| addr < r.device + r.len && r.device < end) else {
            return Ok(addr);
        };
        if !self.client || addr < r.device || end > r.device + r.len {
            return Err(libc::EFAULT);
        }
        Ok(r.nic + (addr - r.device))
    }
}

/// Maps `len` bytes of device memory for `s`.
///
/// # Panics
///
/// When `len` is 0 or the mappings fail.
pub(crate) fn new(s: &mut State, len: usize) -> DeviceMemory {
    assert!(len > 0, "device memory of at least 1 byte");
    let map = |prot: c_int| {
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
        // SAFETY: a fresh anonymous mapping; no existing memory is touched.
        let p = unsafe { libc::mmap(ptr::null_mut(), len, prot, flags, -1, 0) };
        assert_ne!(p, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
        p.cast::<u8>()
    };
    let memory = DeviceMemory {
        device: map(libc::PROT_NONE),
        nic: map(libc::PROT_READ | libc::PROT_WRITE),
        len,
    };
    s.peer.ranges.push(Range { device: memory.device as usize, nic: memory.nic as usize, len });
    memory
}
