//! Memory beyond plain registration, against the mock: IOVA registration, dma-buf, memory
//! windows (the mock provider, like a device without them, has no `alloc_mw` op).

use std::os::fd::AsFd;

use rdma_verbs::{AccessFlags, InvalidInputKind, MwBind, MwType, RegisterOptions};
use rdma_verbs_mock::{Call, ContextConfig, Optional, Verb};

use super::{assert_unsupported, assert_verb_error, Fixture};

#[test]
fn registration_at_an_iova_sends_the_iova_and_sges_and_peers_use_it() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let mut bytes = vec![0u8; 4096];
    let addr = bytes.as_ptr() as usize;
    f.mock.take_calls();
    let access = AccessFlags::LOCAL_WRITE;
    let mr = pd.register_with(&mut bytes[..], access, RegisterOptions::at_iova(0x10_0000)).unwrap();
    let call = Call::RegMrIova2 { addr, length: 4096, iova: 0x10_0000, access: access.bits() };
    assert_eq!(f.mock.take_calls(), [call]);
    assert_eq!((mr.addr(), mr.iova()), (addr as u64, 0x10_0000));
    // The NIC addresses the region by its IOVA, in local SGEs and for peers alike.
    assert_eq!(mr.sge(16..32).unwrap().addr(), 0x10_0010);
    assert_eq!(mr.remote(16..).unwrap().addr, 0x10_0010);
    // A plain registration's IOVA is its address.
    let plain = pd.register(64, access).unwrap();
    assert_eq!(plain.iova(), plain.addr());
    assert_eq!(plain.sge(..).unwrap().addr(), plain.addr());
    assert_eq!(plain.remote(..).unwrap().addr, plain.addr());
}

/// A borrow ends with its region even when deregistration fails, so a borrowed slice is
/// registered for local access only (otherwise a peer's RDMA WRITE could land in
/// bytes the program owned again); an IOVA range past 2^64 is refused before the verb.
#[test]
fn borrowed_memory_is_local_only_and_an_iova_range_stays_below_2_64() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let mut bytes = vec![0u8; 4096];
    f.mock.take_calls();
    for remote in [AccessFlags::REMOTE_READ, AccessFlags::MW_BIND] {
        let err = pd.register(&mut bytes[..], AccessFlags::LOCAL_WRITE | remote).unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Access), "{err}");
        assert!(err.to_string().contains("register owned memory"), "{err}");
    }
    let writable = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let err = pd.register_remote_writable(&mut bytes[..], writable).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Access), "{err}");
    for (len, iova) in [(8192, u64::MAX - 4095), (1, u64::MAX)] {
        let err = pd
            .register_with(len, AccessFlags::LOCAL_WRITE, RegisterOptions::at_iova(iova))
            .unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Range), "{err}");
    }
    assert_eq!(f.mock.take_calls(), [], "nothing reached the library");
    assert!(pd.register(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).is_ok());
    assert!(pd
        .register_with(4096, AccessFlags::LOCAL_WRITE, RegisterOptions::at_iova(u64::MAX - 4096))
        .is_ok());
}

/// `take` on a pool whose chunks are all held (or in flight) finds none, and leaves each as it
/// was: a search that marked the chunks it probed free would hand one out twice (a
/// `then_some` built, and dropped, a token for each chunk it failed to claim).
#[test]
fn take_from_a_pool_with_no_free_chunk_finds_none_and_frees_none() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let pool =
        rdma_verbs::BufferPool::new(pd.register(4 * 64, AccessFlags::LOCAL_WRITE).unwrap(), 64)
            .unwrap();
    let held: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(held.len(), 4);
    for _ in 0..3 {
        assert!(pool.take().is_none(), "every chunk is held");
    }
    drop(held);
    let again: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(again.len(), 4, "the dropped buffers came back, once each");
}

/// A pool's chunks are written by the NIC after the post, so a leaked pool and QP
/// (`std::mem::forget`) would let a receive land in a borrowed slice after its borrow ended
/// (shown on the mock and on rxe0): a pool takes owned memory only.
#[test]
fn a_buffer_pool_refuses_a_region_over_borrowed_memory() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let mut bytes = vec![0u8; 4096];
    let borrowed = pd.register(&mut bytes[..], AccessFlags::LOCAL_WRITE).unwrap();
    let err = rdma_verbs::BufferPool::new(borrowed, 64).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::BorrowedMemory), "{err}");
    assert!(err.to_string().contains("register a length"), "{err}");
    let owned = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    assert!(rdma_verbs::BufferPool::new(owned, 64).is_ok());
}

#[test]
fn registration_at_an_iova_needs_reg_mr_iova2() {
    let f = Fixture::with(Optional::NONE, ContextConfig::default());
    let pd = f.ctx.alloc_pd().unwrap();
    f.mock.take_calls();
    let err =
        pd.register_with(4096, AccessFlags::LOCAL_WRITE, RegisterOptions::at_iova(0)).unwrap_err();
    assert_unsupported(&err, "ibv_reg_mr_iova2 (rdma-core v28+)");
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let err =
        pd.register_remote_writable_with(4096, access, RegisterOptions::at_iova(0)).unwrap_err();
    assert_unsupported(&err, "ibv_reg_mr_iova2 (rdma-core v28+)");
    assert_eq!(f.mock.take_calls(), [], "nothing reached the library");
}

#[test]
fn registration_at_an_iova_keeps_the_remote_write_rules() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let err =
        pd.register_with(64, AccessFlags::REMOTE_WRITE, RegisterOptions::at_iova(0)).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Access));
    assert!(err.to_string().contains("register_remote_writable"), "{err}");
    let err = pd
        .register_remote_writable_with(64, AccessFlags::REMOTE_WRITE, RegisterOptions::at_iova(0))
        .unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Access), "{err}");
    assert!(err.to_string().contains("lacks LOCAL_WRITE"), "{err}");
}

#[test]
fn dmabuf_registration_is_unsupported_without_the_symbol_or_the_provider() {
    let file = std::fs::File::open("/dev/null").unwrap();
    for (optional, what) in [
        (Optional::NONE, "ibv_reg_dmabuf_mr (rdma-core v34+)"),
        // The symbol exists but the provider (as rxe) answers EOPNOTSUPP.
        (Optional::ALL, "ibv_reg_dmabuf_mr"),
    ] {
        let f = Fixture::with(optional, ContextConfig::default());
        let pd = f.ctx.alloc_pd().unwrap();
        let err =
            pd.register_dmabuf(file.as_fd(), 0, 4096, 0, AccessFlags::LOCAL_WRITE).unwrap_err();
        assert_unsupported(&err, what);
    }
}

#[test]
fn dmabuf_registration_checks_its_arguments_first() {
    let f = Fixture::with(Optional::NONE, ContextConfig::default());
    let pd = f.ctx.alloc_pd().unwrap();
    let file = std::fs::File::open("/dev/null").unwrap();
    let err = pd.register_dmabuf(file.as_fd(), 0, 0, 0, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Size), "{err}");
    let err = pd.register_dmabuf(file.as_fd(), 0, 64, 0, AccessFlags::REMOTE_WRITE).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Access), "{err}");
    assert!(err.to_string().contains("lacks LOCAL_WRITE"), "{err}");
}

#[test]
fn alloc_mw_without_the_provider_op_is_unsupported() {
    let config = ContextConfig { memory_windows: false, ..ContextConfig::default() };
    let f = Fixture::with(Optional::ALL, config);
    let pd = f.ctx.alloc_pd().unwrap();
    for kind in [MwType::Type1, MwType::Type2] {
        assert_unsupported(&pd.alloc_mw(kind).unwrap_err(), "ibv_alloc_mw");
    }
}

#[test]
fn a_window_binding_is_refused_for_rights_the_region_lacks() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let read_only = pd.register(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ).unwrap();
    let err = MwBind::new(&read_only, .., AccessFlags::REMOTE_READ).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Access), "{err}");
    assert!(err.to_string().contains("without MW_BIND"), "{err}");

    let bindable = pd
        .register(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::MW_BIND)
        .unwrap();
    let err = MwBind::new(&bindable, .., AccessFlags::REMOTE_WRITE).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("would grant REMOTE_WRITE") && msg.contains("region"), "{msg}");
    let err = MwBind::new(&bindable, .., AccessFlags::LOCAL_WRITE).unwrap_err();
    assert!(err.to_string().contains("grants only REMOTE_READ"), "{err}");
    let err = MwBind::new(&bindable, 4000..5000, AccessFlags::REMOTE_READ).unwrap_err();
    assert!(err.to_string().contains("outside the 4096-byte"), "{err}");

    let bind = MwBind::new(&bindable, 100..200, AccessFlags::REMOTE_READ).unwrap();
    assert_eq!((bind.addr(), bind.len()), (bindable.iova() + 100, 100));

    let writable = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::MW_BIND;
    let target =
        pd.register_remote_writable_with(4096, writable, RegisterOptions::at_iova(0)).unwrap();
    let bind = MwBind::new(&target, 8.., AccessFlags::REMOTE_WRITE).unwrap();
    assert_eq!((bind.addr(), bind.len()), (8, 4088), "window addresses are IOVAs");
}

#[test]
fn einval_for_an_on_demand_registration_points_at_odp() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let odp = AccessFlags::LOCAL_WRITE | AccessFlags::ON_DEMAND;
    f.mock.fail(Verb::RegMrIova2, libc::EINVAL);
    let err = pd.register(64, odp).unwrap_err();
    assert_verb_error(&err, "ibv_reg_mr", libc::EINVAL, &["on-demand paging", "ibv_devinfo -v"]);
    f.mock.fail(Verb::RegMrIova2, libc::EOPNOTSUPP);
    assert_unsupported(&pd.register(64, odp).unwrap_err(), "ibv_reg_mr");
    // Without ON_DEMAND, EINVAL has no such hint.
    f.mock.fail(Verb::RegMrIova2, libc::EINVAL);
    let err = pd.register(64, AccessFlags::LOCAL_WRITE).unwrap_err();
    assert_verb_error(&err, "ibv_reg_mr", libc::EINVAL, &[]);
}

#[test]
fn odp_caps_fall_back_to_ibv_query_device_without_the_extended_op() {
    // The mock's verbs_context has no query_device_ex op: the inline's legacy path.
    let f = Fixture::new();
    f.mock.take_calls();
    let caps = f.ctx.odp_caps().unwrap();
    assert!(caps.general.is_empty() && caps.rc.is_empty(), "{caps:?}");
    assert_eq!(f.mock.take_calls(), [Call::QueryDevice]);
    f.mock.fail(Verb::QueryDevice, libc::EIO);
    assert_verb_error(&f.ctx.odp_caps().unwrap_err(), "ibv_query_device_ex", libc::EIO, &[]);
}

/// Access bits `AccessFlags` does not name (here `IBV_ACCESS_ZERO_BASED`, which would move the
/// region's IOVA to 0 behind the crate's back, and a bit no rdma-core defines) are refused by
/// every registration before the provider, saying which.
#[test]
fn access_flags_with_bits_the_crate_does_not_name_are_refused_before_the_provider() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let file = std::fs::File::open("/dev/null").unwrap();
    f.mock.take_calls();
    for unknown in [1 << 5, 1 << 30] {
        let local = AccessFlags::LOCAL_WRITE | AccessFlags::from_bits_retain(unknown);
        let remote = local | AccessFlags::REMOTE_WRITE;
        let errors = [
            pd.register(64, local).map(drop),
            pd.register_with(64, local, RegisterOptions::at_iova(0)).map(drop),
            pd.register_remote_writable(64, remote).map(drop),
            pd.register_remote_writable_with(64, remote, RegisterOptions::at_iova(0)).map(drop),
            pd.register_dmabuf(file.as_fd(), 0, 64, 0, local).map(drop),
        ];
        for err in errors.map(Result::unwrap_err) {
            assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::UnknownAccess), "{err}");
            let named = format!("does not name ({unknown:#x})");
            assert!(err.to_string().contains(&named), "{err}");
        }
    }
    assert_eq!(f.mock.take_calls(), []);
}
