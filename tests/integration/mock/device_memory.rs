//! Device memory: allocation against `max_dm_size`, copies and their bounds and alignment,
//! zero-based regions posted through the raw tier, the dma-buf export, and the refusals of
//! providers and libraries without them.

use std::os::fd::AsRawFd;
use std::time::Duration;

use rdma_verbs::{
    AccessFlags, DeviceMemory, Error, InvalidInputKind, MwBind, ProtectionDomain, QpCapabilities,
    RecvWr, SendFlags, SendWr, WorkCompletion,
};
use rdma_verbs_mock::{self as mock, Call, ContextConfig, Optional, Verb};
use rdma_verbs_sys as sys;

use super::{assert_unsupported, assert_verb_error, loopback_pair, open, Fixture};

/// A context with device memory, on a device that looks like mlx5 (whose DMs the crate
/// copies through).
fn mlx5_like() -> ContextConfig {
    ContextConfig {
        device_memory: true,
        vendor_id: mock::MELLANOX_VENDOR_ID,
        ..ContextConfig::default()
    }
}

fn fixture() -> Fixture {
    Fixture::with(Optional::ALL, mlx5_like())
}

/// A PD and `len` bytes of device memory of `f`'s context: what a region of it is made from.
fn pd_and_dm(f: &Fixture, len: usize) -> (ProtectionDomain<'_>, DeviceMemory<'_>) {
    (f.ctx.alloc_pd().unwrap(), f.ctx.alloc_dm(len, 0).unwrap())
}

#[track_caller]
fn assert_invalid(err: &Error, kind: InvalidInputKind, phrases: &[&str]) {
    assert_eq!(err.invalid_input_kind(), Some(kind), "{err:?}");
    for phrase in phrases {
        assert!(err.to_string().contains(phrase), "{phrase:?} missing from {err}");
    }
}

#[test]
fn device_memory_is_allocated_copied_both_ways_and_freed() {
    let f = fixture();
    f.mock.take_calls();
    let dm = f.ctx.alloc_dm(4096, 3).unwrap();
    assert_eq!(dm.len(), 4096);
    let calls = f.mock.take_calls();
    assert!(
        matches!(
            calls[..],
            [Call::QueryDeviceEx { .. }, Call::AllocDm { length: 4096, log_align_req: 3 }]
        ),
        "{calls:?}"
    );

    dm.copy_to(8, b"device memory!!!").unwrap();
    let mut back = [0u8; 12];
    dm.copy_from(12, &mut back).unwrap();
    assert_eq!(&back, b"ce memory!!!");
    // The first and last words are untouched (zero, as allocated).
    let mut edges = [0xffu8; 8];
    dm.copy_from(4, &mut edges[..4]).unwrap();
    dm.copy_from(4092, &mut edges[4..]).unwrap();
    assert_eq!(edges, [0; 8]);
    let copies = f
        .mock
        .take_calls_where(|c| matches!(c, Call::MemcpyToDm { .. } | Call::MemcpyFromDm { .. }));
    assert_eq!(
        copies[..2],
        [Call::MemcpyToDm { offset: 8, length: 16 }, Call::MemcpyFromDm { offset: 12, length: 12 }]
    );
    // An empty copy checks its offset and copies nothing.
    dm.copy_to(4096, &[]).unwrap();
    assert!(f.mock.take_calls().is_empty());

    drop(dm);
    assert_eq!(f.mock.take_calls(), [Call::FreeDm]);
}

#[test]
fn copies_out_of_bounds_or_unaligned_are_refused_before_the_provider() {
    let f = fixture();
    let dm = f.ctx.alloc_dm(64, 0).unwrap();
    f.mock.take_calls();
    let mut dst = [0u8; 8];
    for (offset, len) in [(60, 8), (64, 4), (usize::MAX - 3, 4), (68, 0)] {
        let err = dm.copy_to(offset, &[0; 64][..len]).unwrap_err();
        assert_invalid(
            &err,
            InvalidInputKind::Range,
            &["ibv_memcpy_to_dm", "64-byte device memory"],
        );
        let err = dm.copy_from(offset, &mut [0; 64][..len]).unwrap_err();
        assert_invalid(&err, InvalidInputKind::Range, &["ibv_memcpy_from_dm"]);
    }
    for (offset, len) in [(2, 4), (0, 3), (4, 6)] {
        let err = dm.copy_to(offset, &[0; 8][..len]).unwrap_err();
        assert_invalid(&err, InvalidInputKind::Alignment, &["multiples of 4", "pad the copy"]);
        let err = dm.copy_from(offset, &mut dst[..len]).unwrap_err();
        assert_invalid(&err, InvalidInputKind::Alignment, &["ibv_memcpy_from_dm"]);
    }
    assert!(f.mock.take_calls().is_empty());
}

#[test]
fn copies_are_unsupported_on_a_device_that_is_not_mlx5_and_refusals_are_reported() {
    let f = Fixture::with(
        Optional::ALL,
        ContextConfig { device_memory: true, ..ContextConfig::default() },
    );
    let dm = f.ctx.alloc_dm(64, 0).unwrap();
    f.mock.take_calls();
    assert_unsupported(&dm.copy_to(0, &[1; 4]).unwrap_err(), "ibv_memcpy_to_dm");
    assert_unsupported(&dm.copy_from(0, &mut [0; 4]).unwrap_err(), "ibv_memcpy_from_dm");
    assert!(!f
        .mock
        .take_calls()
        .iter()
        .any(|c| matches!(c, Call::MemcpyToDm { .. } | Call::MemcpyFromDm { .. })));
    drop(dm);
    drop(f); // one mock per thread

    let f = fixture();
    let dm = f.ctx.alloc_dm(64, 0).unwrap();
    f.mock.fail(Verb::MemcpyToDm, libc::EIO);
    assert_verb_error(&dm.copy_to(0, &[1; 4]).unwrap_err(), "ibv_memcpy_to_dm", libc::EIO, &[]);
    f.mock.fail(Verb::MemcpyFromDm, libc::EFAULT);
    let err = dm.copy_from(0, &mut [0; 4]).unwrap_err();
    assert_verb_error(&err, "ibv_memcpy_from_dm", libc::EFAULT, &[]);
}

#[test]
fn a_request_past_max_dm_size_names_the_limit_and_reaches_no_provider() {
    let f = fixture();
    assert_eq!(f.ctx.max_dm_size().unwrap(), mock::MAX_DM_SIZE);
    f.mock.take_calls();
    let too_much = mock::MAX_DM_SIZE as usize + 1;
    let err = f.ctx.alloc_dm(too_much, 0).unwrap_err();
    let limit = format!("max_dm_size (ibv_query_device_ex) is {} bytes", mock::MAX_DM_SIZE);
    assert_invalid(&err, InvalidInputKind::Size, &[&limit, &format!("{too_much} bytes")]);
    let err = f.ctx.alloc_dm(0, 0).unwrap_err();
    assert_invalid(&err, InvalidInputKind::Size, &["at least 1 byte"]);
    assert!(!f.mock.take_calls().iter().any(|c| matches!(c, Call::AllocDm { .. })));
    // The whole of it is granted.
    drop(f.ctx.alloc_dm(mock::MAX_DM_SIZE as usize, 0).unwrap());
}

#[test]
fn allocation_is_unsupported_without_the_op_or_when_the_provider_stubs_it() {
    // No alloc_dm op (a provider without device memory), a context that is not extended, and
    // a library whose verbs_context ends before the device-memory ops.
    let short =
        size_of::<sys::verbs_context>() - std::mem::offset_of!(sys::verbs_context, alloc_dm) - 8;
    for config in [
        ContextConfig::default(),
        ContextConfig { extended: false, ..mlx5_like() },
        ContextConfig { sz: short, ..mlx5_like() },
    ] {
        let f = Fixture::with(Optional::ALL, config);
        assert_unsupported(&f.ctx.alloc_dm(64, 0).unwrap_err(), "ibv_alloc_dm");
    }

    // rxe and siw: libibverbs' stub op answers EOPNOTSUPP; the device reports no max_dm_size.
    let f = fixture();
    f.mock.fail(Verb::AllocDm, libc::EOPNOTSUPP);
    assert_unsupported(&f.ctx.alloc_dm(64, 0).unwrap_err(), "ibv_alloc_dm");
    // A provider out of device memory.
    f.mock.fail(Verb::AllocDm, libc::ENOMEM);
    assert_verb_error(&f.ctx.alloc_dm(64, 0).unwrap_err(), "ibv_alloc_dm", libc::ENOMEM, &[]);
}

#[test]
fn a_failed_free_is_reported_by_destroy_and_the_memory_leaked() {
    let f = fixture();
    let dm = f.ctx.alloc_dm(64, 0).unwrap();
    f.mock.fail(Verb::FreeDm, libc::EBUSY);
    assert_verb_error(&dm.destroy().unwrap_err(), "ibv_free_dm", libc::EBUSY, &[]);
}

/// A DM region is zero-based: its SGEs and remote addresses are offsets in the region, the
/// provider is asked for `IBV_ACCESS_ZERO_BASED`, and the raw tier's work requests move data
/// into and out of the device memory.
#[test]
fn a_zero_based_region_of_device_memory_is_written_and_sent_from_through_the_raw_tier() {
    let f = fixture();
    let (pd, dm) = pd_and_dm(&f, 256);
    f.mock.take_calls();
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let region = pd.register_dm(&dm, 64..192, access).unwrap();
    let zero_based = access.bits() | sys::IBV_ACCESS_ZERO_BASED;
    assert_eq!(
        f.mock.take_calls(),
        [Call::RegDmMr { offset: 64, length: 128, access: zero_based }]
    );
    assert_eq!((region.iova(), region.addr(), region.len()), (0, 0, 128));
    assert_eq!(region.access(), access);
    let sge = region.sge(16..32).unwrap();
    assert_eq!((sge.addr(), sge.length(), sge.lkey()), (16, 16, region.lkey()));
    assert_eq!(region.remote(8..).unwrap().addr, 8);

    let (cq, peer_cq) = (f.ctx.create_cq(32).unwrap(), f.ctx.create_cq(32).unwrap());
    let (a, b) = loopback_pair(&f, &pd, (&cq, &peer_cq), QpCapabilities::default());
    let mut host = pd.register(64, AccessFlags::LOCAL_WRITE).unwrap();
    host.as_mut_slice()[..8].copy_from_slice(b"to DM..!");
    let from_host = [host.sge(..8).unwrap()];
    let into_host = [host.sge(32..40).unwrap()];
    let from_dm = [region.sge(8..16).unwrap()];
    // SAFETY: `host` and `region` (and `dm` under it) outlive the QPs' work, and `host` is not
    // touched until the completions below are polled.
    unsafe {
        let write = SendWr::rdma_write(1, &from_host, region.remote(8..).unwrap());
        a.post_send_wr(&mut write.flags(SendFlags::SIGNALED)).unwrap();
        b.post_recv_wr(&mut RecvWr::new(2, &into_host)).unwrap();
        a.post_send_wr(&mut SendWr::send(3, &from_dm).flags(SendFlags::SIGNALED)).unwrap();
    }
    let mut wcs = [WorkCompletion::EMPTY; 2];
    for wc in cq.wait_for(2, Duration::from_secs(5), &mut wcs).unwrap().iter() {
        assert!(wc.is_success(), "{wc}");
    }
    let recv = peer_cq.wait_for(1, Duration::from_secs(5), &mut wcs).unwrap();
    assert!(recv[0].is_success(), "{}", recv[0]);
    // The WRITE landed at offset 8 of the region: byte 64 + 8 of the device memory.
    let mut landed = [0u8; 8];
    dm.copy_from(72, &mut landed).unwrap();
    assert_eq!(&landed, b"to DM..!");
    // The SEND took it from there into the host region.
    assert_eq!(&host.as_slice()[32..40], b"to DM..!");
    assert!(f.mock.take_violations().is_empty());
}

#[test]
fn registration_checks_its_arguments_and_reports_the_provider() {
    let f = fixture();
    let (pd, dm) = pd_and_dm(&f, 64);
    f.mock.take_calls();
    let local = AccessFlags::LOCAL_WRITE;
    assert_invalid(&pd.register_dm(&dm, 32..96, local).unwrap_err(), InvalidInputKind::Range, &[]);
    assert_invalid(&pd.register_dm(&dm, 8..8, local).unwrap_err(), InvalidInputKind::Range, &[]);
    let err = pd.register_dm(&dm, .., AccessFlags::REMOTE_WRITE).unwrap_err();
    assert_invalid(&err, InvalidInputKind::Access, &["LOCAL_WRITE"]);
    let unnamed = AccessFlags::from_bits_retain(sys::IBV_ACCESS_ZERO_BASED);
    let err = pd.register_dm(&dm, .., unnamed).unwrap_err();
    assert_invalid(&err, InvalidInputKind::UnknownAccess, &[]);
    // Device memory of another context.
    let other = open(&f.mock, Optional::ALL, mlx5_like());
    let other_pd = other.alloc_pd().unwrap();
    let err = other_pd.register_dm(&dm, .., local).unwrap_err();
    assert_invalid(&err, InvalidInputKind::OtherContext, &["allocate both from one context"]);
    assert!(!f.mock.take_calls().iter().any(|c| matches!(c, Call::RegDmMr { .. })));

    f.mock.fail(Verb::RegDmMr, libc::EINVAL);
    assert_verb_error(
        &pd.register_dm(&dm, .., local).unwrap_err(),
        "ibv_reg_dm_mr",
        libc::EINVAL,
        &[],
    );
    drop(other_pd);
    drop(other);
}

/// A provider without `reg_dm_mr` gets libibverbs' stub, which answers `EOPNOTSUPP`.
#[test]
fn registration_refused_with_eopnotsupp_is_unsupported() {
    let f = fixture();
    let (pd, dm) = pd_and_dm(&f, 64);
    f.mock.fail(Verb::RegDmMr, libc::EOPNOTSUPP);
    let err = pd.register_dm(&dm, .., AccessFlags::LOCAL_WRITE).unwrap_err();
    assert_unsupported(&err, "ibv_reg_dm_mr");
}

#[test]
fn the_dmabuf_export_is_an_owned_fd_and_unsupported_before_v62() {
    let f = fixture();
    let dm = f.ctx.alloc_dm(64, 0).unwrap();
    f.mock.take_calls();
    let fd = dm.export_dmabuf_fd().unwrap();
    assert_eq!(f.mock.take_calls(), [Call::DmExportDmabufFd]);
    // SAFETY: F_GETFD on a live descriptor only reads its flags.
    assert_ne!(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) }, -1);
    f.mock.fail(Verb::DmExportDmabufFd, libc::EOPNOTSUPP);
    assert_unsupported(&dm.export_dmabuf_fd().unwrap_err(), "ibv_dm_export_dmabuf_fd");
    f.mock.fail(Verb::DmExportDmabufFd, libc::EINVAL);
    let err = dm.export_dmabuf_fd().unwrap_err();
    assert_verb_error(&err, "ibv_dm_export_dmabuf_fd", libc::EINVAL, &[]);
    drop((fd, dm));
    drop(f); // one mock per thread

    let old = Optional { dm_export_dmabuf_fd: false, ..Optional::ALL };
    let f = Fixture::with(old, mlx5_like());
    let dm = f.ctx.alloc_dm(64, 0).unwrap();
    let err = dm.export_dmabuf_fd().unwrap_err();
    assert_unsupported(&err, "ibv_dm_export_dmabuf_fd (rdma-core v62+)");
    assert!(err.to_string().contains("v62"), "{err}");
}

/// A window binds to a DM region as to any: at the region's zero-based offsets, within its
/// rights.
#[test]
fn a_window_binds_to_a_region_of_device_memory_at_its_offsets() {
    let f = fixture();
    let (pd, dm) = pd_and_dm(&f, 256);
    let writable = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::MW_BIND;
    let region = pd.register_dm(&dm, 128.., writable).unwrap();
    let bind = MwBind::new(&region, 8.., AccessFlags::REMOTE_WRITE).unwrap();
    assert_eq!((bind.addr(), bind.len()), (8, 120));
    let err = MwBind::new(&region, .., AccessFlags::REMOTE_READ).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Access), "{err}");
}
