//! Memory the caller owns ([`PinnedMemory`]) and the crate's own mappings of it (huge pages,
//! memfds), against the mock: registered for peers, lent out by pools, written by a loopback
//! RDMA WRITE, handed back (dropped) only after deregistration, and leaked when it fails.

use std::ffi::c_void;
use std::os::fd::AsRawFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rdma_verbs::{
    AccessFlags, BufferPool, HugePageSize, HugePages, InvalidInputKind, PinnedMemory,
    QpCapabilities, SendOp, SharedMemory, WcStatus, WorkCompletion,
};
use rdma_verbs_mock::{Call, Verb};

use super::{assert_verb_error, loopback_pair, write_through_pool, Fixture};

/// `len` bytes of an anonymous mapping the test made, noting when it is dropped (and
/// unmapped).
pub(super) struct Mapped {
    addr: NonNull<u8>,
    len: usize,
    dropped: Arc<AtomicBool>,
}

// SAFETY: the mapping is reached only through the value.
unsafe impl Send for Mapped {}

impl Mapped {
    pub(super) fn new(len: usize) -> (Mapped, Arc<AtomicBool>) {
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        // SAFETY: a fresh mapping where the kernel chooses.
        let addr = unsafe { libc::mmap(std::ptr::null_mut(), len.max(1), prot, flags, -1, 0) };
        assert_ne!(addr, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        let dropped = Arc::new(AtomicBool::new(false));
        (
            Mapped { addr: NonNull::new(addr.cast()).unwrap(), len, dropped: dropped.clone() },
            dropped,
        )
    }
}

// SAFETY: read-write and zero-filled from `mmap` until `Drop`, the same range every call, its
// address given to nothing else.
unsafe impl PinnedMemory for Mapped {
    fn bytes(&mut self) -> NonNull<[u8]> {
        NonNull::slice_from_raw_parts(self.addr, self.len)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        self.dropped.store(true, Ordering::SeqCst);
        // SAFETY: mapped in `new`, unmapped once.
        unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len.max(1)) };
    }
}

const WRITABLE: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);

/// A caller-owned mapping is registered at its own address, for peers (windows too:
/// `MW_BIND`, which a borrowed slice may not have), and dropped — unmapped by its owner —
/// right after `ibv_dereg_mr`, whether the region is destroyed or dropped.
#[test]
fn caller_owned_memory_is_registered_for_peers_and_handed_back_after_deregistration() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    for destroy in [true, false] {
        let (memory, dropped) = Mapped::new(3 * 4096);
        let addr = memory.addr.as_ptr() as usize;
        f.mock.take_calls();
        let region = pd.register_remote_writable(memory, WRITABLE | AccessFlags::MW_BIND).unwrap();
        let access = (WRITABLE | AccessFlags::MW_BIND).bits();
        assert_eq!(
            f.mock.take_calls(),
            [Call::RegMrIova2 { addr, length: 3 * 4096, iova: addr as u64, access }]
        );
        assert_eq!((region.addr(), region.len()), (addr as u64, 3 * 4096));
        assert!(!dropped.load(Ordering::SeqCst), "registered: still the region's");
        if destroy {
            region.destroy().unwrap();
        } else {
            drop(region);
        }
        assert_eq!(f.mock.take_calls(), [Call::DeregMr]);
        assert!(dropped.load(Ordering::SeqCst), "deregistered: dropped (destroy: {destroy})");
    }
    // Empty memory is refused before the library, and dropped: never registered.
    let (empty, dropped) = Mapped::new(0);
    let err = pd.register(empty, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Size), "{err}");
    assert!(dropped.load(Ordering::SeqCst));
    // So is memory whose registration the provider refuses.
    let (memory, dropped) = Mapped::new(4096);
    f.mock.fail(Verb::RegMrIova2, libc::EFAULT);
    let err = pd.register_remote_writable(memory, WRITABLE).unwrap_err();
    assert_verb_error(&err, "ibv_reg_mr", libc::EFAULT, &[]);
    assert!(dropped.load(Ordering::SeqCst));
}

/// When `ibv_dereg_mr` fails the NIC may still reach the memory, so the owner is leaked, not
/// dropped (which would unmap it): by `destroy` and by `Drop` alike, and with the pool over it.
#[test]
fn a_failed_deregistration_leaks_caller_owned_memory_instead_of_handing_it_back() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let (memory, dropped) = Mapped::new(4096);
    let region = pd.register_remote_writable(memory, WRITABLE).unwrap();
    let raw = region.as_raw();
    f.mock.fail(Verb::DeregMr, libc::EBUSY);
    assert_verb_error(&region.destroy().unwrap_err(), "ibv_dereg_mr", libc::EBUSY, &[]);
    assert!(!dropped.load(Ordering::SeqCst), "leaked, still mapped");
    assert!(f.mock.is_live(raw), "the provider still has it");

    let (memory, dropped) = Mapped::new(4096);
    let region = pd.register(memory, AccessFlags::LOCAL_WRITE).unwrap();
    f.mock.fail(Verb::DeregMr, libc::EBUSY);
    drop(region);
    assert!(!dropped.load(Ordering::SeqCst), "leaked by Drop too");

    let (memory, dropped) = Mapped::new(4096);
    let pool = BufferPool::new(pd.register(memory, AccessFlags::LOCAL_WRITE).unwrap(), 64);
    f.mock.fail(Verb::DeregMr, libc::EBUSY);
    drop(pool.unwrap());
    assert!(!dropped.load(Ordering::SeqCst), "leaked by the pool's region");
}

/// A pool cut from caller-owned memory lends its chunks to a QP, whose RDMA WRITE lands byte
/// for byte in a remote-writable region over another caller-owned mapping; the strict mock
/// sees every SGE inside live registrations, and the owners come back after the QPs are gone.
#[test]
fn a_pool_over_caller_owned_memory_writes_into_caller_owned_memory() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let (cq, peer_cq) = (f.ctx.create_cq(32).unwrap(), f.ctx.create_cq(32).unwrap());
    let (source, source_dropped) = Mapped::new(4 * 4096);
    let pool = BufferPool::new(pd.register(source, AccessFlags::LOCAL_WRITE).unwrap(), 4096);
    let pool = pool.unwrap();
    let (target, target_dropped) = Mapped::new(2 * 4096);
    let target_addr = target.addr;
    let target = pd.register_remote_writable(target, WRITABLE).unwrap();
    let (a, b) = loopback_pair(&f, &pd, (&cq, &peer_cq), QpCapabilities::default());
    let pattern: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
    write_through_pool(&a, &cq, &pool, &pattern, target.remote(100..).unwrap());
    let mut landed = vec![0u8; pattern.len()];
    target.read(100, &mut landed).unwrap();
    assert_eq!(landed, pattern);
    // The owner's own view of its mapping holds the same bytes (read after the WRITE
    // completed: nothing writes it now).
    // SAFETY: the mapping is live (owned by the region), and quiet.
    let owner_view = unsafe { std::slice::from_raw_parts(target_addr.as_ptr().add(100), 3000) };
    assert_eq!(owner_view, &pattern[..]);
    drop((a, b));
    assert!(f.mock.take_violations().is_empty());
    assert!(f.mock.dangling_work().is_empty());
    drop((target, pool));
    assert!(source_dropped.load(Ordering::SeqCst) && target_dropped.load(Ordering::SeqCst));
}

/// Huge pages map when the kernel has them reserved; when it has none free, `mmap`'s
/// `ENOMEM` says how many to reserve and where (the host's `HugePages_Free` decides which
/// case this run checks).
#[test]
fn huge_pages_register_when_reserved_and_say_how_to_reserve_them_when_not() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let free = free_huge_pages("/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages");
    match HugePages::new(3 << 20, HugePageSize::Size2MiB) {
        Ok(pages) => {
            assert!(free >= 2, "mapped with {free} free 2 MiB pages");
            assert_eq!((pages.len(), pages.page_size()), (4 << 20, HugePageSize::Size2MiB));
            let mut region = pd.register(pages, AccessFlags::LOCAL_WRITE).unwrap();
            assert_eq!(region.len(), 4 << 20);
            assert_eq!(region.addr() % (2 << 20), 0, "huge-page aligned");
            assert!(region.as_slice().iter().all(|&b| b == 0), "zero-filled");
            region.as_mut_slice()[(4 << 20) - 1] = 7;
            let pool = BufferPool::new(region, 1 << 20).unwrap();
            assert_eq!(pool.count(), 4);
        }
        Err(err) => {
            assert!(free < 2, "{err}");
            let hint = ["2 free 2 MiB huge pages", "echo 2 > /proc/sys/vm/nr_hugepages"];
            assert_verb_error(&err, "mmap(MAP_HUGETLB)", libc::ENOMEM, &hint);
        }
    }
    let gib = "/sys/kernel/mm/hugepages/hugepages-1048576kB/free_hugepages";
    if std::fs::metadata(gib).is_ok() && free_huge_pages(gib) == 0 {
        let err = HugePages::new(1, HugePageSize::Size1GiB).unwrap_err();
        let knob = "echo 1 > /sys/kernel/mm/hugepages/hugepages-1048576kB/nr_hugepages";
        assert_verb_error(&err, "mmap(MAP_HUGETLB)", libc::ENOMEM, &[knob, "hugepagesz=1G"]);
    }
    for len in [0, usize::MAX] {
        let err = HugePages::new(len, HugePageSize::Size2MiB).unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Size), "{err}");
    }
}

fn free_huge_pages(path: &str) -> u64 {
    std::fs::read_to_string(path).map_or(0, |s| s.trim().parse().unwrap())
}

/// A memfd's pages, seen through a second mapping of its fd (as another process maps them):
/// a loopback RDMA WRITE into the region shows there, and so do the region's copies; its size
/// is sealed, and it is refused for a region that hands out slices.
#[test]
fn a_memfd_region_shares_its_pages_through_the_fd_and_only_copies() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let (cq, peer_cq) = (f.ctx.create_cq(32).unwrap(), f.ctx.create_cq(32).unwrap());
    let memory = SharedMemory::new(c"pinned-test", 5000).unwrap();
    assert_eq!(memory.len(), 8192, "whole pages");
    let fd = memory.fd().try_clone_to_owned().unwrap();
    // SAFETY: plain syscalls on our fd; the seals refuse both.
    assert_ne!(unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) }, 0, "shrinking is sealed");
    assert_eq!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EPERM));
    let other = OtherMapping::new(&fd, 8192);

    let refused =
        pd.register(SharedMemory::new(c"refused", 4096).unwrap(), AccessFlags::LOCAL_WRITE);
    let err = refused.unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Access), "{err}");
    assert!(err.to_string().contains("register_remote_writable"), "{err}");

    let pool = BufferPool::new(pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap(), 4096).unwrap();
    let mut region = pd.register_remote_writable(memory, WRITABLE).unwrap();
    let (a, _b) = loopback_pair(&f, &pd, (&cq, &peer_cq), QpCapabilities::default());
    let pattern: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8).collect();
    let mut buffer = pool.take().unwrap();
    buffer.fill(&pattern).unwrap();
    a.post_send_buffer(buffer, SendOp::RdmaWrite(region.remote(4000..).unwrap())).unwrap();
    let mut wcs = [WorkCompletion::EMPTY; 2];
    let polled = cq.poll(&mut wcs).unwrap();
    assert_eq!(polled[0].status(), WcStatus::SUCCESS);
    drop(pool.complete(&mut polled[0]).unwrap());
    assert_eq!(&other.bytes()[4000..8096], &pattern[..], "the other mapping sees the WRITE");
    region.write(0, b"from the region").unwrap();
    assert_eq!(&other.bytes()[..15], b"from the region");
    assert!(f.mock.take_violations().is_empty());
}

/// A second `MAP_SHARED` mapping of a memfd.
struct OtherMapping {
    addr: *mut c_void,
    len: usize,
}

impl OtherMapping {
    fn new(fd: &std::os::fd::OwnedFd, len: usize) -> Self {
        let prot = libc::PROT_READ;
        // SAFETY: a fresh mapping where the kernel chooses.
        let addr = unsafe {
            libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_SHARED, fd.as_raw_fd(), 0)
        };
        assert_ne!(addr, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        OtherMapping { addr, len }
    }

    /// The bytes, read once the writes to them completed.
    fn bytes(&self) -> Vec<u8> {
        // SAFETY: mapped readable for `len` bytes; copied out at once.
        unsafe { std::slice::from_raw_parts(self.addr.cast::<u8>(), self.len) }.to_vec()
    }
}

impl Drop for OtherMapping {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`, unmapped once.
        unsafe { libc::munmap(self.addr, self.len) };
    }
}
