//! Fork protection (`rdma_verbs::fork`) on rxe0. Each test runs in a child process of
//! its own (`crash_isolated`): protection is process-wide and cannot be turned off, and the
//! tests fork. The forked processes run only `write`/`read`/`_exit`.

use rdma_verbs::fork::{self, ForkStatus};
use rdma_verbs::*;

use super::pair::{wait_for_success, Loopback};
use rdma_verbs_device_tests::{crash_isolated, crash_isolated_with, require_device, RXE};

/// The page size.
fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap()
}

/// Forks; the child runs `body` and exits 0. The child's pid.
fn fork_child(body: impl FnOnce()) -> libc::pid_t {
    // SAFETY: the child runs only `body` (async-signal-safe by each caller's choice) and
    // `_exit`, never returning into the test harness.
    match unsafe { libc::fork() } {
        -1 => panic!("fork: {}", std::io::Error::last_os_error()),
        0 => {
            body();
            // SAFETY: ends the child without running the parent's atexit handlers.
            unsafe { libc::_exit(0) }
        }
        pid => pid,
    }
}

/// Waits for child `pid`: its raw wait status.
fn wait_child(pid: libc::pid_t) -> libc::c_int {
    let mut status = 0;
    // SAFETY: waits for our own child, writing only `status`.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    status
}

/// Whether fork protection, once on, madvises registrations here: rdma-core v51 and later
/// skip it where the kernel copies pinned pages (`ForkStatus::UNNEEDED`).
fn protection_applies(ctx: &Context) -> bool {
    let major = ctx.library().rdma_core_version().and_then(|v| v.split('.').next()?.parse().ok());
    !(matches!(fork::status(), Ok(ForkStatus::UNNEEDED)) && major.is_some_and(|m: u32| m >= 51))
}

#[test]
fn unneeded_means_the_parents_writes_after_a_fork_still_reach_the_nic() {
    crash_isolated(
        "device::fork::unneeded_means_the_parents_writes_after_a_fork_still_reach_the_nic",
        || {
            let Some(ctx) = require_device(RXE) else { return };
            let status = fork::status().unwrap();
            eprintln!("ibv_is_fork_initialized: {status}");
            assert_ne!(status, ForkStatus::ENABLED, "nothing turned protection on here");
            let lo = Loopback::new(&ctx, 8);
            let (a, b) = lo.rc_pair(2, AccessFlags::empty());
            let (mut source, target) = (lo.region(64), lo.region(64));
            source.as_mut_slice()[..6].copy_from_slice(b"before");
            // A child that shares the pages until the SEND is done: it waits on a pipe.
            let mut pipe = [0; 2];
            // SAFETY: pipe writes the two descriptors it creates.
            assert_eq!(unsafe { libc::pipe(pipe.as_mut_ptr()) }, 0);
            let child = fork_child(|| {
                let mut byte = 0u8;
                // SAFETY: closes the child's copy of the write end, then reads into a local
                // byte, returning at EOF: when the parent closes its write end.
                unsafe {
                    libc::close(pipe[1]);
                    libc::read(pipe[0], (&raw mut byte).cast(), 1);
                }
            });
            // Without a kernel that copies pinned pages, this write copies the page and the
            // NIC keeps sending the old one.
            source.as_mut_slice()[..6].copy_from_slice(b"after!");
            let (send, recv) = ([source.sge(..6).unwrap()], [target.sge(..).unwrap()]);
            // SAFETY: both regions outlive the QPs' use of them, polled before being read.
            unsafe {
                b.post_recv_wr(&mut RecvWr::new(1, &recv)).unwrap();
                a.post_send_wr(&mut SendWr::send(2, &send).flags(SendFlags::SIGNALED)).unwrap();
            }
            wait_for_success(&lo.cq, 2);
            // SAFETY: closes the pipe's two ends, which this process owns.
            unsafe { (libc::close(pipe[0]), libc::close(pipe[1])) };
            assert_eq!(wait_child(child), 0, "the child exits 0");
            let fresh = &target.as_slice()[..6] == b"after!";
            assert_eq!(
                fresh,
                status == ForkStatus::UNNEEDED,
                "ibv_is_fork_initialized says {status}; the NIC sent {:?}",
                String::from_utf8_lossy(&target.as_slice()[..6])
            );
        },
    );
}

#[test]
fn fork_init_after_a_registration_is_refused_saying_why_and_what_to_do() {
    crash_isolated(
        "device::fork::fork_init_after_a_registration_is_refused_saying_why_and_what_to_do",
        || {
            let Some(ctx) = require_device(RXE) else { return };
            let lo = Loopback::new(&ctx, 8);
            let region = lo.region(64);
            match fork::init() {
                Err(e) => {
                    assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
                    let text = e.to_string();
                    assert!(
                        text.starts_with(
                            "ibv_fork_init failed: EINVAL; fork protection \
                             must be set up before the first memory registration, and this \
                             process registered memory already: call fork::init() before \
                             registering"
                        ),
                        "{text}"
                    );
                }
                // rdma-core v51+ does nothing where the kernel copies pinned pages.
                Ok(()) => assert!(!protection_applies(&ctx), "a late ibv_fork_init succeeded"),
            }
            drop(region);
        },
    );
}

#[test]
fn with_fork_protection_a_child_touching_the_rest_of_a_borrowed_regions_page_dies() {
    crash_isolated(
        "device::fork::with_fork_protection_a_child_touching_the_rest_of_a_borrowed_regions_page_dies",
        || {
            let Some(ctx) = require_device(RXE) else { return };
            fork::init().unwrap();
            fork::init().expect("a second call does nothing");
            let page = page_size();
            // Three pages of our own; the region is 100 bytes inside the second.
            // SAFETY: a fresh private anonymous mapping, unmapped below.
            let base = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    3 * page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(base, libc::MAP_FAILED);
            let base = base.cast::<u8>();
            // SAFETY: bytes page+100..page+200 of the mapping, borrowed by the region only.
            let slice = unsafe { std::slice::from_raw_parts_mut(base.add(page + 100), 100) };
            let pd = ctx.alloc_pd().unwrap();
            let region = pd.register(slice, AccessFlags::LOCAL_WRITE).unwrap();
            let write = |offset: usize| {
                // SAFETY: the byte lies in the mapping, outside the region; no reference to
                // it exists.
                move || unsafe { base.add(offset).write_volatile(1) }
            };
            // On the region's page, beside it; on the next page.
            let (beside, elsewhere) = (fork_child(write(page)), fork_child(write(2 * page)));
            let (beside, elsewhere) = (wait_child(beside), wait_child(elsewhere));
            assert_eq!(elsewhere, 0, "a child writing on another page lives");
            if protection_applies(&ctx) {
                assert!(
                    libc::WIFSIGNALED(beside) && libc::WTERMSIG(beside) == libc::SIGSEGV,
                    "a child writing beside the region on its page: wait status {beside:#x}"
                );
            } else {
                assert_eq!(beside, 0, "rdma-core ignores fork protection where it is unneeded");
            }
            drop(region);
            // SAFETY: the region is gone; nothing else uses the mapping.
            assert_eq!(unsafe { libc::munmap(base.cast(), 3 * page) }, 0);
        },
    );
}

/// A huge page on x86_64.
const HUGE_PAGE: usize = 2 << 20;

/// With fork protection on, registers the whole of a 2 MiB huge page, then 4 KiB of it at
/// 4 KiB, which `expect_part` judges.
fn register_a_huge_page_and_part_of_it(
    expect_part: impl FnOnce(&Context, Result<MemoryRegion<'_>>),
) {
    let Some(ctx) = require_device(RXE) else { return };
    fork::init().unwrap();
    // SAFETY: a fresh private anonymous huge-page mapping, unmapped below.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            HUGE_PAGE,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_HUGETLB,
            -1,
            0,
        )
    };
    assert_ne!(
        base,
        libc::MAP_FAILED,
        "no 2 MiB huge page ({}): scripts/rdma-vm boots the guest with hugepages=8",
        std::io::Error::last_os_error()
    );
    let base = base.cast::<u8>();
    let pd = ctx.alloc_pd().unwrap();
    // The whole huge page first: after a refused part of it, libibverbs (44.0) keeps its
    // range tree split at that part's 4 KiB boundaries and refuses the whole too.
    // SAFETY: the whole mapping, borrowed by the region only.
    let whole = unsafe { std::slice::from_raw_parts_mut(base, HUGE_PAGE) };
    drop(pd.register(whole, AccessFlags::LOCAL_WRITE).expect("the whole huge page"));
    // SAFETY: 4 KiB at 4 KiB into the mapping, borrowed by the region only.
    let part = unsafe { std::slice::from_raw_parts_mut(base.add(4096), 4096) };
    expect_part(&ctx, pd.register(part, AccessFlags::LOCAL_WRITE));
    // SAFETY: no region covers the mapping any more.
    assert_eq!(unsafe { libc::munmap(base.cast(), HUGE_PAGE) }, 0);
}

#[test]
fn with_fork_protection_a_huge_page_subrange_is_refused_naming_the_huge_pages() {
    crash_isolated(
        "device::fork::with_fork_protection_a_huge_page_subrange_is_refused_naming_the_huge_pages",
        || {
            register_a_huge_page_and_part_of_it(|ctx, part| match part {
                Err(e) => {
                    assert!(protection_applies(ctx), "{e}");
                    assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
                    let text = e.to_string();
                    let head = "ibv_reg_mr failed: EINVAL; fork protection \
                                (fork::init, RDMAV_FORK_SAFE) madvises whole pages";
                    assert!(text.starts_with(head), "{text}");
                    for needle in [
                        "these 4096 bytes at",
                        "lie in 2048 KiB huge pages",
                        "RDMAV_HUGEPAGES_SAFE=1",
                    ] {
                        assert!(text.contains(needle), "{needle:?} missing from {text}");
                    }
                }
                Ok(region) => {
                    assert!(!protection_applies(ctx), "registered with protection on");
                    drop(region);
                }
            });
        },
    );
}

#[test]
fn with_rdmav_hugepages_safe_the_same_huge_page_subrange_registers() {
    crash_isolated_with(
        "device::fork::with_rdmav_hugepages_safe_the_same_huge_page_subrange_registers",
        &[("RDMAV_HUGEPAGES_SAFE", "1")],
        || register_a_huge_page_and_part_of_it(|_, part| drop(part.unwrap())),
    );
}
