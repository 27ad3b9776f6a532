//! Sharing a context's objects with an importer (`ibv_import_device`, `ibv_import_pd`,
//! `ibv_import_mr`): the importer reaches the exporter's PD and MR by handle and releases
//! them with `ibv_unimport_*`, never destroying them (the strict mock refuses and fails the
//! test otherwise); and the refusals of libraries before rdma-core v31, of unknown handles
//! and of descriptors that are no context's.

use std::os::fd::{AsRawFd, OwnedFd};

use rdma_verbs::{AccessFlags, Context, QpInitAttr};
use rdma_verbs_mock::{self as mock, Call, ContextConfig, Optional, DEVICE_NAME};

use super::{assert_unsupported, assert_verb_error, Fixture};

/// A duplicate of `ctx`'s command descriptor, as another process would receive it.
fn exported_fd(ctx: &Context) -> OwnedFd {
    ctx.cmd_fd().expect("a mock context has a command descriptor").try_clone_to_owned().unwrap()
}

/// The context `ctx` exports, imported through the same library.
fn import(ctx: &Context) -> Context {
    Context::import_in(ctx.library(), exported_fd(ctx)).unwrap()
}

#[test]
fn an_imported_context_reaches_the_exporters_pd_and_region_by_handle_and_only_unimports_them() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    f.mock.take_calls();

    let imported = import(&f.ctx);
    assert_eq!(imported.name(), DEVICE_NAME);
    assert_ne!(imported.as_raw(), f.ctx.as_raw());
    let twin = imported.import_pd(pd.handle()).unwrap();
    assert!(twin.is_imported() && !pd.is_imported());
    assert_eq!(twin.handle(), pd.handle());
    // SAFETY: `mr` and its memory stay registered until after the imported region is gone.
    let region = unsafe { twin.import_mr(mr.handle()) }.unwrap();
    assert_eq!((region.lkey(), region.rkey(), region.len()), (mr.lkey(), mr.rkey(), mr.len()));
    assert_eq!(region.handle(), mr.handle());
    assert!(region.pd().is_imported());
    let imports: Vec<Call> = f
        .mock
        .take_calls()
        .into_iter()
        .filter(|c| matches!(c, Call::ImportDevice | Call::ImportPd { .. } | Call::ImportMr { .. }))
        .collect();
    let expected = [
        Call::ImportDevice,
        Call::ImportPd { handle: pd.handle() },
        Call::ImportMr { handle: mr.handle() },
    ];
    assert_eq!(imports, expected);

    drop(region);
    drop(twin);
    assert_eq!(f.mock.take_calls(), [Call::UnimportMr, Call::UnimportPd]);
    drop(imported);
    assert_eq!(f.mock.take_calls(), [Call::CloseDevice]);
    // The exporter's objects are intact: its own verbs still free them.
    drop(mr);
    pd.destroy().unwrap();
    assert_eq!(f.mock.take_calls(), [Call::DeregMr, Call::DeallocPd]);
}

#[test]
fn the_import_calls_name_the_handles_given() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let mr = pd.register(64, AccessFlags::LOCAL_WRITE).unwrap();
    let imported = import(&f.ctx);
    let twin = imported.import_pd(pd.handle()).unwrap();
    f.mock.take_calls();
    // SAFETY: `mr` outlives the imported region.
    let region = unsafe { twin.import_mr(mr.handle()) }.unwrap();
    assert_eq!(f.mock.take_calls(), [Call::ImportMr { handle: mr.handle() }]);
    drop(region);
    let again = imported.import_pd(pd.handle()).unwrap();
    assert_eq!(f.mock.take_calls(), [Call::UnimportMr, Call::ImportPd { handle: pd.handle() }]);
    drop(again);
}

#[test]
fn an_imported_pd_serves_this_processs_own_regions_and_queues() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let imported = import(&f.ctx);
    let twin = imported.import_pd(pd.handle()).unwrap();
    let cq = imported.create_cq(32).unwrap();
    let mut own = twin.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    own.as_mut_slice()[0] = 7;
    let qp = twin.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    assert_eq!(qp.pd().as_raw(), twin.as_raw());
    drop(qp);
    drop(own);
    drop(cq);
    drop(twin);
    drop(imported);
    pd.destroy().unwrap();
}

#[test]
fn dropping_the_imported_context_leaves_the_exporters_descriptor_open() {
    let f = Fixture::new();
    let exported = f.ctx.cmd_fd().unwrap().as_raw_fd();
    drop(import(&f.ctx));
    // SAFETY: F_GETFD only reads the descriptor's flags; the exporter's context keeps it open.
    assert!(unsafe { libc::fcntl(exported, libc::F_GETFD) } >= 0);
}

#[test]
fn before_rdma_core_v31_every_import_is_unsupported() {
    let old = Optional { import: false, ..Optional::ALL };
    let f = Fixture::with(old, ContextConfig::default());
    let pd = f.ctx.alloc_pd().unwrap();
    let err = Context::import_in(f.ctx.library(), exported_fd(&f.ctx)).unwrap_err();
    assert_unsupported(&err, "ibv_import_device (rdma-core v31+)");
    assert_unsupported(
        &f.ctx.import_pd(pd.handle()).unwrap_err(),
        "ibv_import_pd (rdma-core v31+)",
    );
    // SAFETY: the call is refused before any region is imported.
    let err = unsafe { pd.import_mr(1) }.unwrap_err();
    assert_unsupported(&err, "ibv_import_mr (rdma-core v31+)");
    assert!(!f.mock.take_calls().iter().any(|c| matches!(c, Call::ImportPd { .. })));
}

#[test]
fn a_provider_without_imports_is_unsupported() {
    let f = Fixture::new();
    f.mock.fail(mock::Verb::ImportDevice, libc::EOPNOTSUPP);
    let err = Context::import_in(f.ctx.library(), exported_fd(&f.ctx)).unwrap_err();
    assert_unsupported(&err, "ibv_import_device");
    let pd = f.ctx.alloc_pd().unwrap();
    f.mock.fail(mock::Verb::ImportPd, libc::EOPNOTSUPP);
    assert_unsupported(&f.ctx.import_pd(pd.handle()).unwrap_err(), "ibv_import_pd");
    f.mock.fail(mock::Verb::ImportMr, libc::EOPNOTSUPP);
    // SAFETY: the call is refused before any region is imported.
    assert_unsupported(&unsafe { pd.import_mr(1) }.unwrap_err(), "ibv_import_mr");
}

#[test]
fn unknown_handles_and_foreign_descriptors_are_refused() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let mr = pd.register(64, AccessFlags::LOCAL_WRITE).unwrap();
    let imported = import(&f.ctx);
    let unknown = pd.handle().max(mr.handle()) + 100;
    assert_verb_error(
        &imported.import_pd(unknown).unwrap_err(),
        "ibv_import_pd",
        libc::EINVAL,
        &[],
    );
    let twin = imported.import_pd(pd.handle()).unwrap();
    // SAFETY: refused: no region is imported.
    let err = unsafe { twin.import_mr(unknown) }.unwrap_err();
    assert_verb_error(&err, "ibv_import_mr", libc::EINVAL, &[]);

    // Another mock context's PD is not on this context's file.
    let other = super::open(&f.mock, Optional::ALL, ContextConfig::default());
    let foreign = other.alloc_pd().unwrap();
    let err = imported.import_pd(foreign.handle()).unwrap_err();
    assert_verb_error(&err, "ibv_import_pd", libc::EINVAL, &[]);

    // A descriptor that is no context's command file.
    let stranger = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
    let err = Context::import_in(f.ctx.library(), stranger).unwrap_err();
    assert_verb_error(&err, "ibv_import_device", libc::ENODEV, &[]);
}

#[test]
fn the_exporter_cannot_deallocate_a_pd_an_importers_region_uses() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let imported = import(&f.ctx);
    let twin = imported.import_pd(pd.handle()).unwrap();
    let own = twin.register(64, AccessFlags::LOCAL_WRITE).unwrap();
    // Refused, and the PD left allocated (leaked here), so the importer's region stays valid.
    let err = pd.destroy().unwrap_err();
    assert_eq!(err.errno(), Some(libc::EBUSY), "{err}");
    assert_eq!(own.pd().handle(), twin.handle());
    drop(own);
    drop(twin);
}
