//! Memory on rxe0 beyond plain registration: a chosen IOVA, on-demand paging, dma-buf, DMA
//! handles, peer memory and memory windows of both types, each with the outcome Soft-RoCE
//! (Linux 6.1) gives.

use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use rdma_verbs::*;

use super::pair::{assert_holds, pattern, wait_for, Loopback};
use rdma_verbs_device_tests::{require_device, RXE};

const LEN: usize = 4096;

/// The rights the target side's QP grants its peer.
const QP_REMOTE: AccessFlags = AccessFlags::REMOTE_WRITE.union(AccessFlags::REMOTE_READ);

/// Target memory peers may write, windows may be bound to.
const TARGET: AccessFlags = AccessFlags::LOCAL_WRITE
    .union(AccessFlags::REMOTE_WRITE)
    .union(AccessFlags::REMOTE_READ)
    .union(AccessFlags::MW_BIND);

/// Posts an RDMA WRITE of `sge` to `remote` on `qp` and returns the completion's status.
fn write_status(
    qp: &QueuePair<'_, Rts>,
    cq: &CompletionQueue<'_>,
    sge: Sge,
    remote: RemoteAddr,
) -> WcStatus {
    op_status(qp, cq, SendWr::rdma_write(7, &[sge], remote))
}

/// Posts `wr` (id 7) signaled and returns its completion's status.
fn op_status(qp: &QueuePair<'_, Rts>, cq: &CompletionQueue<'_>, wr: SendWr<'_>) -> WcStatus {
    let mut wr = wr.flags(SendFlags::SIGNALED);
    // SAFETY: the local region outlives the completion polled below and is not touched
    // meanwhile.
    unsafe { qp.post_send_wr(&mut wr).unwrap() };
    let wc = &wait_for(cq, 1)[0];
    assert_eq!(wc.wr_id(), 7);
    wc.status()
}

/// What a window test starts from: `src`, whose first bytes are `data`, for WRITEs through the
/// window; the `target` region (with [`TARGET`] rights) windows are bound to; a window `mw`;
/// and an RC pair whose second QP (which binds the windows) lets the first write and read.
struct Windowed<'a> {
    src: MemoryRegion<'a>,
    data: Vec<u8>,
    target: RemoteWritableRegion<'a>,
    mw: MemoryWindow<'a>,
    a: QueuePair<'a, Rts>,
    b: QueuePair<'a, Rts>,
}

impl<'a> Windowed<'a> {
    /// On `lo`, with a window of type `kind` and `len` recognisable bytes (from `seed`).
    fn new(lo: &'a Loopback<'_>, kind: MwType, len: usize, seed: u8) -> Self {
        let mut src = lo.region(LEN);
        let data = pattern(len, seed);
        src.as_mut_slice()[..len].copy_from_slice(&data);
        let target = lo.pd.register_remote_writable(LEN, TARGET).unwrap();
        let mw = lo.pd.alloc_mw(kind).unwrap();
        let (a, b) = lo.rc_pair(4, QP_REMOTE);
        Windowed { src, data, target, mw, a, b }
    }
}

/// Posts `wr` on `qp` and returns its completion's (status, opcode).
fn run(
    qp: &QueuePair<'_, Rts>,
    cq: &CompletionQueue<'_>,
    mut wr: SendWr<'_>,
) -> (WcStatus, WcOpcode) {
    // SAFETY: the WR carries no SGE (bind / invalidate).
    unsafe { qp.post_send_wr(&mut wr).unwrap() };
    let wc = &wait_for(cq, 1)[0];
    assert_eq!(wc.wr_id(), wr.wr_id());
    (wc.status(), wc.opcode())
}

#[test]
fn a_region_registered_at_an_iova_is_addressed_by_that_iova_locally_and_by_peers() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let mut src = lo
        .pd
        .register_with(LEN, AccessFlags::LOCAL_WRITE, RegisterOptions::at_iova(0x7000_0000))
        .unwrap();
    assert_eq!(src.sge(8..).unwrap().addr(), 0x7000_0008);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let target = lo
        .pd
        .register_remote_writable_with(LEN, access, RegisterOptions::at_iova(0x1_0000))
        .unwrap();
    assert_eq!(target.iova(), 0x1_0000);
    assert_eq!(target.remote(256..).unwrap().addr, 0x1_0100);
    let data = pattern(512, 0x3c);
    src.as_mut_slice()[..512].copy_from_slice(&data);
    let pair = || lo.rc_pair(4, QP_REMOTE);

    let (a, _b) = pair();
    let status = write_status(&a, &lo.cq, src.sge(..512).unwrap(), target.remote(256..).unwrap());
    assert_eq!(status, WcStatus::SUCCESS);
    assert_holds(&target, 256, &data, "the WRITE at IOVA 0x10100 did not land at offset 256");

    // The virtual address means nothing to the NIC: not in a local SGE (one failure per
    // connection: it moves the QP to the error state) ...
    let by_va = Sge::new(src.addr(), 512, src.lkey());
    let status = write_status(&a, &lo.cq, by_va, target.remote(256..).unwrap());
    assert_eq!(status, WcStatus::LOC_PROT_ERR);
    // ... nor for a peer.
    let (c, _d) = pair();
    let by_va = RemoteAddr { addr: target.addr() + 256, rkey: target.rkey() };
    let status = write_status(&c, &lo.cq, src.sge(..512).unwrap(), by_va);
    assert_eq!(status, WcStatus::REM_ACCESS_ERR);
}

#[test]
fn rxe_has_no_on_demand_paging_and_refuses_it_with_einval_and_a_hint() {
    let Some(ctx) = require_device(RXE) else { return };
    let none = OdpTransportCaps::empty();
    let caps = ctx.odp_caps().unwrap();
    assert_eq!(caps, OdpCaps { general: OdpGeneralCaps::empty(), rc: none, uc: none, ud: none });
    let pd = ctx.alloc_pd().unwrap();
    let err = pd.register(LEN, AccessFlags::LOCAL_WRITE | AccessFlags::ON_DEMAND).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EINVAL), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with("ibv_reg_mr failed: EINVAL"), "{msg}");
    assert!(msg.contains("on-demand paging"), "{msg}");
}

#[test]
fn dmabuf_registration_is_unsupported_on_rxe() {
    let Some(ctx) = require_device(RXE) else { return };
    let pd = ctx.alloc_pd().unwrap();
    // SAFETY: memfd_create with a NUL-terminated name; the fd is owned below.
    let fd = unsafe { libc::memfd_create(c"rdma-verbs-test".as_ptr(), 0) };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: a fresh fd nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: ftruncate on an fd we own.
    assert_eq!(unsafe { libc::ftruncate(fd.as_raw_fd(), LEN as i64) }, 0);
    let err = pd.register_dmabuf(fd.as_fd(), 0, LEN, 0, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert!(matches!(err, Error::Unsupported { what: "ibv_reg_dmabuf_mr" }), "{err:?}");
}

/// DMA handles (TPH hints) arrived in rdma-core v59: a library before it is named in the
/// refusal; from it on, rxe has no `alloc_dmah` op and libibverbs' stub answers `EOPNOTSUPP`.
/// Registration with options but no handle takes the plain verbs, which rxe serves.
#[test]
fn dma_handles_are_unsupported_on_rxe_naming_the_release() {
    let Some(ctx) = require_device(RXE) else { return };
    let release = Stack::loaded().unwrap().and_then(|s| s.rdma_core());
    let attr = DmaHandleAttr { ph: Some(0), ..Default::default() };
    match ctx.alloc_dmah(&attr).unwrap_err() {
        Error::Unsupported { what } if release.is_some_and(|r| r < (59, 0)) => {
            assert_eq!(what, "ibv_alloc_dmah (rdma-core v59+)")
        }
        e => assert!(
            matches!(e, Error::Unsupported { what: "ibv_alloc_dmah" }),
            "{release:?}: {e:?}"
        ),
    }
    let pd = ctx.alloc_pd().unwrap();
    let options = RegisterOptions { iova: Some(0), ..Default::default() };
    let mr = pd.register_with(LEN, AccessFlags::LOCAL_WRITE, options).unwrap();
    assert_eq!((mr.iova(), mr.len()), (0, LEN));
}

/// With no peer-memory client (and rxe takes none), a device address is pinned as CPU
/// memory: an address no readable page backs (a `PROT_NONE` reservation, as a GPU's
/// allocation looks to the CPU) fails with `EFAULT`, and the error names both ways out.
#[test]
fn peer_memory_without_a_client_is_refused_with_what_to_do() {
    let Some(ctx) = require_device(RXE) else { return };
    let pd = ctx.alloc_pd().unwrap();
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE;
    // SAFETY: a fresh anonymous reservation; no existing memory is touched.
    let addr = unsafe { libc::mmap(std::ptr::null_mut(), LEN, libc::PROT_NONE, flags, -1, 0) };
    assert_ne!(addr, libc::MAP_FAILED, "mmap: {}", std::io::Error::last_os_error());
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    // SAFETY: the reservation stays mapped past the call, and the registration fails.
    let err = unsafe { pd.register_peer_memory(addr as u64, LEN, access) }.unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("ibv_reg_mr failed: EFAULT"), "{msg}");
    assert!(msg.contains("modprobe nvidia_peermem") && msg.contains("register_dmabuf"), "{msg}");
    // SAFETY: the reservation made above, unmapped once; nothing registered it.
    assert_eq!(unsafe { libc::munmap(addr, LEN) }, 0);
}

#[test]
fn a_type_1_window_gives_peers_its_range_until_it_is_rebound() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let Windowed { src, data, target, mut mw, a, b } = Windowed::new(&lo, MwType::Type1, 128, 0x77);

    let bind = MwBind::new(&target, 1024..2048, AccessFlags::REMOTE_WRITE).unwrap();
    let before = mw.rkey();
    let rkey = b.bind_mw(&mut mw, &bind, 11, SendFlags::SIGNALED).unwrap();
    assert_eq!(rkey, mw.rkey());
    assert_eq!(
        rkey.get(),
        rdma_verbs::sys::inline::ibv_inc_rkey(before.get()),
        "bind moves the key"
    );
    let wc = &wait_for(&lo.cq, 1)[0];
    assert_eq!((wc.wr_id(), wc.status(), wc.opcode()), (11, WcStatus::SUCCESS, WcOpcode::BIND_MW));
    assert_ne!(rkey, target.rkey());

    let remote = mw.remote(&bind);
    assert_eq!(remote.addr, target.iova() + 1024);
    assert_eq!(write_status(&a, &lo.cq, src.sge(..128).unwrap(), remote), WcStatus::SUCCESS);
    assert_holds(&target, 1024, &data, "the WRITE through the window did not land at offset 1024");

    // Rebinding moves the rkey: the old one stops working.
    let rebind = MwBind::new(&target, 1024..2048, AccessFlags::REMOTE_WRITE).unwrap();
    let new_rkey = b.bind_mw(&mut mw, &rebind, 12, SendFlags::SIGNALED).unwrap();
    let wc = &wait_for(&lo.cq, 1)[0];
    assert_eq!((wc.wr_id(), wc.status()), (12, WcStatus::SUCCESS));
    assert_ne!(new_rkey, rkey);
    assert_eq!(write_status(&a, &lo.cq, src.sge(..128).unwrap(), remote), WcStatus::REM_ACCESS_ERR);

    // rxe refuses to deregister a region a window is bound to (the region is then leaked).
    let err = target.destroy().unwrap_err();
    assert_eq!(err.errno(), Some(libc::EINVAL), "{err}");
}

#[test]
fn a_type_2_window_is_bound_by_a_wr_and_invalidation_closes_it() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let Windowed { src, data, target, mut mw, a, b } = Windowed::new(&lo, MwType::Type2, 64, 0x11);

    let bind = MwBind::new(&target, 0..512, AccessFlags::REMOTE_WRITE).unwrap();
    let before = mw.rkey();
    let wr = SendWr::bind_mw(21, &mut mw, &bind).unwrap().flags(SendFlags::SIGNALED);
    assert_eq!(run(&b, &lo.cq, wr), (WcStatus::SUCCESS, WcOpcode::BIND_MW));
    assert_eq!(mw.rkey().get(), rdma_verbs::sys::inline::ibv_inc_rkey(before.get()));

    let remote = mw.remote(&bind);
    assert_eq!(write_status(&a, &lo.cq, src.sge(..64).unwrap(), remote), WcStatus::SUCCESS);
    assert_holds(&target, 0, &data, "the WRITE through the window did not land");

    let inv = SendWr::local_inv(22, mw.rkey()).flags(SendFlags::SIGNALED);
    assert_eq!(run(&b, &lo.cq, inv), (WcStatus::SUCCESS, WcOpcode::LOCAL_INV));
    assert_eq!(write_status(&a, &lo.cq, src.sge(..64).unwrap(), remote), WcStatus::REM_ACCESS_ERR);

    // Invalidated, the window binds again, under a new rkey (on a new pair: the failed access
    // moved both `a` and `b` to the error state).
    let (c, d) = lo.rc_pair(4, QP_REMOTE);
    let rebind = MwBind::new(&target, 512..1024, AccessFlags::REMOTE_WRITE).unwrap();
    let wr = SendWr::bind_mw(23, &mut mw, &rebind).unwrap().flags(SendFlags::SIGNALED);
    assert_eq!(run(&d, &lo.cq, wr), (WcStatus::SUCCESS, WcOpcode::BIND_MW));
    assert_ne!(mw.rkey(), remote.rkey);
    let status = write_status(&c, &lo.cq, src.sge(..64).unwrap(), mw.remote(&rebind));
    assert_eq!(status, WcStatus::SUCCESS);
    let what = "the WRITE through the rebound window did not land at offset 512";
    assert_holds(&target, 512, &data, what);
    // Before the QP it is bound through: rxe's destroy of `d` would wait 50 s for the window
    // to let go of it (see `MemoryWindow`).
    drop(mw);
}

#[test]
fn a_peer_s_send_with_invalidate_closes_a_type_2_window() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let inbox = lo.region(LEN);
    let Windowed { src, target, mut mw, a, b, .. } = Windowed::new(&lo, MwType::Type2, 64, 0x53);
    let bind = MwBind::new(&target, .., AccessFlags::REMOTE_WRITE).unwrap();
    let wr = SendWr::bind_mw(51, &mut mw, &bind).unwrap().flags(SendFlags::SIGNALED);
    assert_eq!(run(&b, &lo.cq, wr), (WcStatus::SUCCESS, WcOpcode::BIND_MW));
    let remote = mw.remote(&bind);
    assert_eq!(write_status(&a, &lo.cq, src.sge(..64).unwrap(), remote), WcStatus::SUCCESS);

    let recv_sges = [inbox.sge(..64).unwrap()];
    // SAFETY: `inbox` is not touched until the receive's completion below.
    unsafe { b.post_recv_wr(&mut RecvWr::new(52, &recv_sges)).unwrap() };
    let send_sges = [src.sge(..16).unwrap()];
    let mut send = SendWr::send_with_inv(53, &send_sges, mw.rkey()).flags(SendFlags::SIGNALED);
    // SAFETY: `src` is not written until the completion below.
    unsafe { a.post_send_wr(&mut send).unwrap() };
    let mut wcs = wait_for(&lo.cq, 2);
    wcs.sort_by_key(|wc| wc.wr_id());
    let (recv, sent) = (&wcs[0], &wcs[1]);
    assert_eq!(
        (recv.wr_id(), recv.status(), recv.opcode()),
        (52, WcStatus::SUCCESS, WcOpcode::RECV)
    );
    // rxe copies the kernel's wc_flags as they are: its IB_WC_WITH_INVALIDATE is 1 << 2,
    // which libibverbs calls IBV_WC_IP_CSUM_OK (IBV_WC_WITH_INV is 1 << 3). So on rxe the
    // notice of the invalidation arrives in the wrong bit.
    use rdma_verbs::sys::{IBV_WC_GRH, IBV_WC_IP_CSUM_OK};
    assert_eq!(recv.as_raw().wc_flags, IBV_WC_GRH | IBV_WC_IP_CSUM_OK, "{recv:?}");
    assert_eq!((sent.wr_id(), sent.status()), (53, WcStatus::SUCCESS));

    assert_eq!(write_status(&a, &lo.cq, src.sge(..64).unwrap(), remote), WcStatus::REM_ACCESS_ERR);
}

/// Soft-RoCE in Linux 6.1 checks an access through a window against the *region's* range only
/// (`check_rkey` in rxe_resp.c ends in `mr_check_range(mw->mr, ...)`), so a WRITE crossing the
/// window's end lands; hardware refuses it. Peers are not to be trusted with the window's
/// bounds on rxe.
#[test]
fn a_window_s_rkey_dies_with_it_and_rxe_checks_only_the_region_range() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let Windowed { src, data, target, mut mw, a, b } = Windowed::new(&lo, MwType::Type1, 64, 0x42);
    let bind = MwBind::new(&target, 0..256, AccessFlags::REMOTE_WRITE).unwrap();
    b.bind_mw(&mut mw, &bind, 31, SendFlags::SIGNALED).unwrap();
    assert_eq!(wait_for(&lo.cq, 1)[0].status(), WcStatus::SUCCESS);
    let remote = mw.remote(&bind);

    // 64 bytes from offset 224 cross the window's end, inside the region: rxe lets them in.
    let past_end = RemoteAddr { addr: remote.addr + 224, rkey: remote.rkey };
    assert_eq!(write_status(&a, &lo.cq, src.sge(..64).unwrap(), past_end), WcStatus::SUCCESS);
    assert_holds(&target, 224, &data, "the crossing WRITE did not land at offset 224");

    assert_eq!(write_status(&a, &lo.cq, src.sge(..64).unwrap(), remote), WcStatus::SUCCESS);
    mw.destroy().unwrap();
    assert_eq!(write_status(&a, &lo.cq, src.sge(..64).unwrap(), remote), WcStatus::REM_ACCESS_ERR);
}

#[test]
fn a_window_bound_with_rights_the_region_lacks_is_refused_before_the_verb() {
    let Some(ctx) = require_device(RXE) else { return };
    let pd = ctx.alloc_pd().unwrap();
    let mut mw = pd.alloc_mw(MwType::Type1).unwrap();
    let read_only = pd.register(LEN, AccessFlags::REMOTE_READ | AccessFlags::MW_BIND).unwrap();
    let err = MwBind::new(&read_only, .., AccessFlags::REMOTE_WRITE).unwrap_err();
    let msg = err.to_string();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Access), "{err:?}");
    assert!(msg.contains("would grant REMOTE_WRITE") && msg.contains("lacks"), "{msg}");
    let no_bind = pd
        .register_remote_writable(LEN, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE)
        .unwrap();
    let err = MwBind::new(&no_bind, .., AccessFlags::REMOTE_WRITE).unwrap_err();
    assert!(err.to_string().contains("without MW_BIND"), "{err}");
    // A type-2 window is not bound through ibv_bind_mw, nor a type-1 one by a WR.
    let target = pd.register_remote_writable(LEN, TARGET).unwrap();
    let bind = MwBind::new(&target, .., AccessFlags::REMOTE_WRITE).unwrap();
    let err = SendWr::bind_mw(1, &mut mw, &bind).unwrap_err();
    assert!(err.to_string().contains("QueuePair::bind_mw"), "{err}");
}

/// `len` bytes of an anonymous mapping the test makes, handed to a region by value and
/// unmapped when the region gives it back; `unmapped` says when.
struct Mapped {
    addr: std::ptr::NonNull<u8>,
    len: usize,
    unmapped: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

// SAFETY: the mapping is reached only through the value.
unsafe impl Send for Mapped {}

// SAFETY: read-write and zero-filled from `mmap` until `Drop`, the same range every call, its
// address given to nothing else.
unsafe impl PinnedMemory for Mapped {
    fn bytes(&mut self) -> std::ptr::NonNull<[u8]> {
        std::ptr::NonNull::slice_from_raw_parts(self.addr, self.len)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: mapped by `map`, unmapped once.
        unsafe { libc::munmap(self.addr.as_ptr().cast(), self.len) };
        self.unmapped.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// `mmap(2)` of `len` bytes: anonymous and private without `fd`, else `MAP_SHARED` of it.
fn map(len: usize, fd: Option<&OwnedFd>) -> std::ptr::NonNull<u8> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let (flags, fd) = match fd {
        None => (libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1),
        Some(fd) => (libc::MAP_SHARED, fd.as_raw_fd()),
    };
    // SAFETY: a fresh mapping where the kernel chooses.
    let addr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
    assert_ne!(addr, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
    std::ptr::NonNull::new(addr.cast()).unwrap()
}

/// A peer's RDMA WRITE lands byte for byte, and its RDMA READ reads the bytes back, in memory
/// the program mapped itself and in a memfd (seen too through a second mapping of its fd, as
/// another process would map it), and in huge pages when the guest has some reserved (else
/// their `ENOMEM` names the knob), and through a window bound to the caller-owned region; the
/// program's mapping comes back, unmapped, once the region is destroyed.
#[test]
fn a_peer_s_rdma_write_and_read_reach_caller_owned_memfd_and_huge_page_memory() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 8);
    let mut src = lo.region(LEN);
    let data = pattern(3000, 0x5a);
    src.as_mut_slice()[..3000].copy_from_slice(&data);
    let mut dst = lo.region(LEN);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let unmapped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mapped = Mapped { addr: map(2 * LEN, None), len: 2 * LEN, unmapped: unmapped.clone() };
    let owner_view = mapped.addr;
    let caller_owned =
        lo.pd.register_remote_writable(mapped, access | AccessFlags::MW_BIND).unwrap();
    let memory = SharedMemory::new(c"device-test", LEN).unwrap();
    let fd = memory.fd().try_clone_to_owned().unwrap();
    let memfd = lo.pd.register_remote_writable(memory, access).unwrap();
    let huge = match HugePages::new(1, HugePageSize::Size2MiB) {
        Ok(pages) => Some(lo.pd.register_remote_writable(pages, access).unwrap()),
        Err(err) => {
            assert_eq!(err.errno(), Some(libc::ENOMEM), "{err}");
            assert!(err.to_string().contains("/proc/sys/vm/nr_hugepages"), "{err}");
            eprintln!("no 2 MiB huge pages reserved in this guest: {err}");
            None
        }
    };
    let (a, b) = lo.rc_pair(4, QP_REMOTE);
    for (target, what) in [(&caller_owned, "caller-owned"), (&memfd, "memfd")]
        .into_iter()
        .chain(huge.as_ref().map(|huge| (huge, "huge-page")))
    {
        let status =
            write_status(&a, &lo.cq, src.sge(..3000).unwrap(), target.remote(100..).unwrap());
        assert_eq!(status, WcStatus::SUCCESS, "{what}");
        assert_holds(target, 100, &data, &format!("the WRITE did not land in {what} memory"));
        dst.as_mut_slice()[..3000].fill(0);
        let read = target.remote(100..3100).unwrap();
        let status = op_status(&a, &lo.cq, SendWr::rdma_read(7, &[dst.sge(..3000).unwrap()], read));
        assert_eq!(status, WcStatus::SUCCESS, "{what}");
        assert!(dst.as_slice()[..3000] == data[..], "the READ from {what} memory");
    }
    // SAFETY: the mapping is live (the region owns it) and quiet: the WRITE completed.
    let owned = unsafe { std::slice::from_raw_parts(owner_view.as_ptr().add(100), 3000) };
    assert!(owned == &data[..], "the program's own view of its mapping");
    let other = map(LEN, Some(&fd));
    // SAFETY: mapped above for LEN bytes; quiet, as above.
    let shared = unsafe { std::slice::from_raw_parts(other.as_ptr().add(100), 3000) };
    assert!(shared == &data[..], "a second mapping of the memfd");
    // SAFETY: mapped above, unmapped once; `shared` is not used again.
    unsafe { libc::munmap(other.as_ptr().cast(), LEN) };

    // A window bound to the caller-owned region gives a peer part of it.
    let mut mw = lo.pd.alloc_mw(MwType::Type1).unwrap();
    let bind = MwBind::new(&caller_owned, 5000..6000, AccessFlags::REMOTE_WRITE).unwrap();
    b.bind_mw(&mut mw, &bind, 11, SendFlags::SIGNALED).unwrap();
    assert_eq!(wait_for(&lo.cq, 1)[0].status(), WcStatus::SUCCESS);
    let through = pattern(900, 0x21);
    src.as_mut_slice()[..900].copy_from_slice(&through);
    let status = write_status(&a, &lo.cq, src.sge(..900).unwrap(), mw.remote(&bind));
    assert_eq!(status, WcStatus::SUCCESS);
    assert_holds(&caller_owned, 5000, &through, "the WRITE through the window did not land");
    mw.destroy().unwrap();
    caller_owned.destroy().unwrap();
    assert!(unmapped.load(std::sync::atomic::Ordering::SeqCst), "handed back after dereg");
}
