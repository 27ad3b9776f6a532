//! Peer memory (`ProtectionDomain::register_peer_memory`) against the mock's simulated GPU,
//! whose device address faults on any CPU access: refused with what to do until a
//! peer-memory client is loaded, then registered and written by a peer through the rkey.

use rdma_verbs::{AccessFlags, BufferPool, InvalidInputKind, QpCapabilities};
use rdma_verbs_mock::{Call, Verb};

use super::{assert_verb_error, loopback_pair, write_through_pool, Fixture};

const WRITABLE: AccessFlags = AccessFlags::LOCAL_WRITE.union(AccessFlags::REMOTE_WRITE);

/// The hint of a registration no peer-memory client claimed names both ways out.
const NO_CLIENT: [&str; 3] =
    ["no peer-memory client", "modprobe nvidia_peermem", "register_dmabuf"];

#[test]
fn device_memory_registers_once_a_client_is_loaded_and_a_peer_writes_into_it() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let gpu = f.mock.device_memory(2 * 4096);
    // SAFETY: the mock's device memory outlives every region over it (dropped last), and the
    // mock is its "device context".
    let refused = unsafe { pd.register_peer_memory(gpu.addr(), gpu.len(), WRITABLE) };
    assert_verb_error(&refused.unwrap_err(), "ibv_reg_mr", libc::EFAULT, &NO_CLIENT);

    f.mock.load_peer_memory_client();
    f.mock.take_calls();
    // SAFETY: as above.
    let region = unsafe { pd.register_peer_memory(gpu.addr(), gpu.len(), WRITABLE) }.unwrap();
    // (The inline `ibv_reg_mr` of rdma-core v28+ calls `ibv_reg_mr_iova2` at the address.)
    let (addr, iova) = (gpu.addr() as usize, gpu.addr());
    let registered = Call::RegMrIova2 { addr, length: 8192, iova, access: 3 };
    assert_eq!(f.mock.take_calls(), [registered], "the device address, as given");
    assert_eq!((region.addr(), region.iova(), region.len()), (gpu.addr(), gpu.addr(), 8192));
    assert_eq!(region.sge(16..32).unwrap().addr(), gpu.addr() + 16);
    assert_eq!(region.remote(100..).unwrap().addr, gpu.addr() + 100);

    // A peer's RDMA WRITE lands in GPU memory: the NIC reaches it, the CPU never does.
    let (cq, peer_cq) = (f.ctx.create_cq(32).unwrap(), f.ctx.create_cq(32).unwrap());
    let pool = BufferPool::new(pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap(), 4096);
    let pool = pool.unwrap();
    let (a, b) = loopback_pair(&f, &pd, (&cq, &peer_cq), QpCapabilities::default());
    let pattern: Vec<u8> = (0..3000u32).map(|i| (i * 5 + 1) as u8).collect();
    write_through_pool(&a, &cq, &pool, &pattern, region.remote(100..).unwrap());
    let mut landed = vec![0u8; pattern.len()];
    gpu.read(100, &mut landed);
    assert_eq!(landed, pattern, "the bytes are in device memory");
    drop((a, b));
    region.destroy().unwrap();
    assert!(f.mock.take_violations().is_empty());
}

#[test]
fn a_range_past_the_allocation_is_refused_by_the_kernel_with_the_same_hint() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let gpu = f.mock.device_memory(4096);
    f.mock.load_peer_memory_client();
    // SAFETY: the device memory outlives the attempt; nothing is registered.
    let err = unsafe { pd.register_peer_memory(gpu.addr() + 4000, 200, WRITABLE) }.unwrap_err();
    assert_verb_error(&err, "ibv_reg_mr", libc::EFAULT, &NO_CLIENT);
    // Other errnos are the provider's own, with no peer-memory hint.
    f.mock.fail(Verb::RegMrIova2, libc::EOPNOTSUPP);
    // SAFETY: as above.
    let err = unsafe { pd.register_peer_memory(gpu.addr(), 4096, WRITABLE) }.unwrap_err();
    assert!(!err.to_string().contains("peer-memory"), "{err}");
}

#[test]
fn peer_memory_checks_its_arguments_before_the_provider() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    f.mock.take_calls();
    let local = AccessFlags::LOCAL_WRITE;
    for (addr, len, access, kind) in [
        (0x7000_0000, 0, local, InvalidInputKind::Size),
        (0x7000_0000, 64, AccessFlags::REMOTE_WRITE, InvalidInputKind::Access),
        (0, 64, local, InvalidInputKind::Range),
        (u64::MAX - 10, 64, local, InvalidInputKind::Range),
    ] {
        // SAFETY: every call is refused before the provider sees the address.
        let err = unsafe { pd.register_peer_memory(addr, len, access) }.unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(kind), "{addr:#x}+{len}: {err}");
    }
    assert_eq!(f.mock.take_calls(), [], "nothing reached the library");
}
