//! Memory the crate maps for a region to own: huge pages ([`HugePages`], `mmap(2)` with
//! `MAP_HUGETLB`) and a memfd another process can map too ([`SharedMemory`],
//! `memfd_create(2)`). Both are [`PinnedMemory`]: registered by value, unmapped when the
//! region drops them after deregistering.
#![allow(unsafe_code)]
//! # Safety
//!
//! A [`Mapping`] is made here by `mmap` and unmapped only by its `Drop`; nothing else has its
//! address until [`PinnedMemory::bytes`] hands it to a registration, so the pinned-memory
//! contract holds. A memfd's size is sealed (`F_SEAL_SHRINK | F_SEAL_GROW`): no process
//! holding the fd can truncate the pages from under the mapping.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;

use super::memory::page_size;
use super::pinned::PinnedMemory;
use crate::error::{Error, InvalidInputKind, Result};

/// `len` bytes of this process's address space, mapped read-write, unmapped on drop.
struct Mapping {
    addr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory reached only through its owner.
unsafe impl Send for Mapping {}
// SAFETY: shared references give out nothing but the length.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// `mmap(2)` of `len` bytes (a multiple of the page size in use) with `flags`, of `fd`
    /// when given.
    fn new(len: usize, flags: libc::c_int, fd: Option<RawFd>) -> io::Result<Self> {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // SAFETY: a new mapping where the kernel chooses (no MAP_FIXED): no existing memory is
        // touched.
        let addr =
            unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd.unwrap_or(-1), 0) };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let addr =
            NonNull::new(addr.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?;
        Ok(Mapping { addr, len })
    }

    fn bytes(&self) -> NonNull<[u8]> {
        NonNull::slice_from_raw_parts(self.addr, self.len)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`, unmapped once; the registration over it, if any, is gone
        // (the pinned-memory contract drops the owner only then).
        if unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len) } != 0 {
            log::warn!("munmap of {} bytes: {}", self.len, io::Error::last_os_error());
        }
    }
}

/// `len` rounded up to a multiple of `page`, refusing 0 and overflow.
fn whole_pages(len: usize, page: usize, what: &str) -> Result<usize> {
    len.checked_next_multiple_of(page).filter(|&len| len != 0).ok_or_else(|| {
        Error::invalid(
            InvalidInputKind::Size,
            format!("{what} of {len} bytes: needs 1 to {} bytes", usize::MAX - page + 1),
        )
    })
}

/// The size of huge pages ([`HugePages::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HugePageSize {
    /// 2 MiB pages (`MAP_HUGE_2MB`; x86-64's and arm64's PMD size).
    Size2MiB,
    /// 1 GiB pages (`MAP_HUGE_1GB`), usually reserved at boot (`hugepagesz=1G hugepages=N`).
    Size1GiB,
}

impl HugePageSize {
    /// The page size in bytes.
    pub fn bytes(self) -> usize {
        match self {
            HugePageSize::Size2MiB => 2 << 20,
            HugePageSize::Size1GiB => 1 << 30,
        }
    }

    fn mmap_flag(self) -> libc::c_int {
        match self {
            HugePageSize::Size2MiB => libc::MAP_HUGE_2MB,
            HugePageSize::Size1GiB => libc::MAP_HUGE_1GB,
        }
    }

    /// Where the pool of this size is reserved.
    fn knob(self) -> &'static str {
        match self {
            HugePageSize::Size2MiB => "/proc/sys/vm/nr_hugepages",
            HugePageSize::Size1GiB => "/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages",
        }
    }
}

/// Huge pages of this process (`mmap(2)` with `MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB`),
/// zero-filled, unmapped when dropped — by the region that owns them, after it deregisters.
///
/// A region over huge pages lets the NIC map it with a few large translations instead of
/// many 4 KiB ones. Register it as any owned memory:
///
/// ```no_run
/// # fn f(pd: &rdma_verbs::ProtectionDomain<'_>) -> rdma_verbs::Result<()> {
/// use rdma_verbs::{AccessFlags, BufferPool, HugePageSize, HugePages};
/// let pages = HugePages::new(8 << 20, HugePageSize::Size2MiB)?; // four 2 MiB pages
/// let pool = BufferPool::new(pd.register(pages, AccessFlags::LOCAL_WRITE)?, 4096)?;
/// # drop(pool); Ok(()) }
/// ```
///
/// The pages come from the kernel's reserved pool of their size (`/proc/meminfo`'s
/// `HugePages_Free` for the default size), which is empty unless an administrator reserved
/// some; see [`HugePages::new`].
pub struct HugePages {
    map: Mapping,
    page: HugePageSize,
}

impl HugePages {
    /// `mmap(2)`—Maps `len` bytes, rounded up to whole pages of `page` size, of huge pages.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] for `len == 0`, or one that rounds past `usize::MAX`.
    /// - [`Error::Verb`] from `mmap`: `ENOMEM` when too few pages of that size are free
    ///   (none are reserved by default): the message names the pages needed and how to
    ///   reserve them (`/proc/sys/vm/nr_hugepages` for 2 MiB pages,
    ///   `/sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages` for 1 GiB); `EINVAL`
    ///   when the kernel or CPU has no pages of that size.
    #[doc(alias = "MAP_HUGETLB")]
    pub fn new(len: usize, page: HugePageSize) -> Result<Self> {
        let len = whole_pages(len, page.bytes(), "huge pages")?;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB | page.mmap_flag();
        let map = Mapping::new(len, flags, None).map_err(|e| huge_page_error(e, len, page))?;
        Ok(HugePages { map, page })
    }

    /// The length in bytes: whole pages of [`HugePages::page_size`].
    pub fn len(&self) -> usize {
        self.map.len
    }

    /// Always `false`: at least one page is mapped.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The size of the pages.
    pub fn page_size(&self) -> HugePageSize {
        self.page
    }
}

/// `mmap`'s error for `len` bytes of huge pages, saying what to reserve.
fn huge_page_error(e: io::Error, len: usize, page: HugePageSize) -> Error {
    let pages = len / page.bytes();
    let mib = page.bytes() >> 20;
    let hint = match e.raw_os_error() {
        Some(libc::ENOMEM) => format!(
            "fewer than {pages} free {mib} MiB huge pages (none are reserved by default; \
             /proc/meminfo's HugePages_Free counts those of the default size): reserve them \
             as root, e.g. `echo {pages} > {}` (1 GiB pages are reliably reserved only at \
             boot: hugepagesz=1G hugepages={pages} on the kernel command line), or use \
             ordinary pages (register a length)",
            page.knob()
        ),
        Some(libc::EINVAL) => format!(
            "this kernel or CPU offers no {mib} MiB huge pages (/sys/kernel/mm/hugepages lists \
             the sizes it has)"
        ),
        _ => return Error::Verb { verb: "mmap(MAP_HUGETLB)", source: e, hint: None },
    };
    Error::Verb { verb: "mmap(MAP_HUGETLB)", source: e, hint: Some(hint) }
}

impl std::fmt::Debug for HugePages {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HugePages").field("len", &self.map.len).field("page", &self.page).finish()
    }
}

// SAFETY: see the module's safety notes: a mapping made here, read-write and zero-filled until
// `Drop`, its address given to nothing else, the same range every call, not shared.
unsafe impl PinnedMemory for HugePages {
    fn bytes(&mut self) -> NonNull<[u8]> {
        self.map.bytes()
    }
}

/// Memory another process can map too: a memfd (`memfd_create(2)`) of whole pages, mapped
/// `MAP_SHARED`, its size sealed (`F_SEAL_SHRINK | F_SEAL_GROW`, `fcntl(2)`) so no holder of
/// the fd can truncate it. Another process maps the same pages from the fd
/// ([`SharedMemory::fd`]; pass it over a Unix socket with `SCM_RIGHTS`, or to a child).
///
/// Another process may write the bytes at any moment, as a peer may, so it is registered only
/// with [`register_remote_writable`](crate::ProtectionDomain::register_remote_writable), whose
/// region copies in and out instead of handing out slices; the region owns it, and unmaps it
/// (closing this process's fd) after deregistering. The fd is reachable only before
/// registering: duplicate it then (`BorrowedFd::try_clone_to_owned`) to keep it.
///
/// ```no_run
/// # fn f(pd: &rdma_verbs::ProtectionDomain<'_>) -> Result<(), Box<dyn std::error::Error>> {
/// use rdma_verbs::{AccessFlags, SharedMemory};
/// let memory = SharedMemory::new(c"frames", 1 << 20)?;
/// let fd = memory.fd().try_clone_to_owned()?; // for the other process
/// let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
/// let region = pd.register_remote_writable(memory, access)?;
/// # drop((fd, region)); Ok(()) }
/// ```
pub struct SharedMemory {
    map: Mapping,
    fd: OwnedFd,
}

impl SharedMemory {
    /// `memfd_create(2)`—Creates a memfd named `name` (shown in `/proc/PID/fd`, for
    /// debugging) of `len` bytes rounded up to whole pages, zero-filled, and maps it.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] for `len == 0`, or one that rounds past `usize::MAX`.
    /// - [`Error::Verb`] from `memfd_create` (e.g. `EMFILE`), `ftruncate` (`ENOSPC`, `EFBIG`
    ///   past the memory limits), `fcntl(F_ADD_SEALS)` or `mmap` (`ENOMEM`).
    #[doc(alias = "memfd_create")]
    pub fn new(name: &CStr, len: usize) -> Result<Self> {
        let len = whole_pages(len, page_size(), "a memfd")?;
        let os = |verb| move |source| Error::Verb { verb, source, hint: None };
        let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
        // SAFETY: `name` is NUL-terminated; the new fd is owned below.
        let raw = unsafe { libc::memfd_create(name.as_ptr(), flags) };
        if raw < 0 {
            return Err(os("memfd_create")(io::Error::last_os_error()));
        }
        // SAFETY: a new fd nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let size = libc::off_t::try_from(len).map_err(|_| {
            Error::invalid(InvalidInputKind::Size, format!("a memfd of {len} bytes is too large"))
        })?;
        // SAFETY: plain syscalls on an fd we own.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
            return Err(os("ftruncate")(io::Error::last_os_error()));
        }
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        // SAFETY: as above.
        if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
            return Err(os("fcntl(F_ADD_SEALS)")(io::Error::last_os_error()));
        }
        let map = Mapping::new(len, libc::MAP_SHARED, Some(fd.as_raw_fd())).map_err(os("mmap"))?;
        Ok(SharedMemory { map, fd })
    }

    /// The length in bytes: whole pages.
    pub fn len(&self) -> usize {
        self.map.len
    }

    /// Always `false`: at least one page is mapped.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The memfd, for another process to map (`mmap(2)` with `MAP_SHARED`, at offset 0,
    /// [`SharedMemory::len`] bytes).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsFd for SharedMemory {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd()
    }
}

impl std::fmt::Debug for SharedMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedMemory").field("len", &self.map.len).field("fd", &self.fd).finish()
    }
}

// SAFETY: see the module's safety notes; other processes may write the bytes, which
// `is_shared` says.
unsafe impl PinnedMemory for SharedMemory {
    fn bytes(&mut self) -> NonNull<[u8]> {
        self.map.bytes()
    }

    fn is_shared(&self) -> bool {
        true
    }
}
