//! The mock's imports: a duplicate of a context's command descriptor imports it, the PD and
//! MR of the exporting context are found by handle, and an importer that destroys them
//! instead of unimporting them is refused and fails the test.

use std::io;
use std::os::fd::{AsRawFd, IntoRawFd, OwnedFd};
use std::ptr::NonNull;

use rdma_verbs_mock::{library, ContextConfig, Mock, Optional};
use rdma_verbs_sys::bindings::*;
use rdma_verbs_sys::IbverbsFns;

fn fns() -> &'static IbverbsFns {
    &library(Optional::ALL).fns
}

/// An exporting context with a PD and a 64-byte MR, and a context imported from a duplicate
/// of its command descriptor, on a mock of this thread.
struct Shared {
    ctx: NonNull<ibv_context>,
    pd: *mut ibv_pd,
    mr: *mut ibv_mr,
    importer: *mut ibv_context,
    /// The MR's memory.
    _buf: Box<[u8; 64]>,
    /// Last, so dropped last: its drop fails the test on what the importer did wrong.
    mock: Mock,
}

impl Shared {
    fn new() -> Shared {
        let f = fns();
        let mock = Mock::new();
        let mut buf = Box::new([0u8; 64]);
        let ctx = mock.context(ContextConfig::default());
        // SAFETY: a live mock context, a live PD, and a live buffer of 64 bytes, kept as long
        // as the mock.
        let (pd, mr) = unsafe {
            let pd = (f.ibv_alloc_pd)(ctx.as_ptr());
            (pd, (f.ibv_reg_mr)(pd, buf.as_mut_ptr().cast(), 64, IBV_ACCESS_LOCAL_WRITE as i32))
        };
        // SAFETY: a live mock context, which keeps its descriptor open.
        let dup = unsafe { libc::dup((*ctx.as_ptr()).cmd_fd) };
        assert!(dup >= 0);
        // SAFETY: the duplicate is ours to hand over.
        let importer = unsafe { (f.ibv_import_device.unwrap())(dup) };
        assert!(!importer.is_null() && !pd.is_null() && !mr.is_null());
        Shared { ctx, pd, mr, importer, _buf: buf, mock }
    }

    /// The exporter's PD, imported into the importing context.
    fn import_pd(&self) -> *mut ibv_pd {
        // SAFETY: a live imported context and PD.
        let pd = unsafe { (fns().ibv_import_pd.unwrap())(self.importer, (*self.pd).handle) };
        assert!(!pd.is_null());
        pd
    }
}

#[test]
fn an_imported_mr_has_the_exporters_keys_and_no_address() {
    let s = Shared::new();
    let f = fns();
    let pd = s.import_pd();
    // SAFETY: live mock objects; the imported ones are unimported before the exporter's go.
    unsafe {
        assert_eq!(((*pd).context, (*pd).handle), (s.importer, (*s.pd).handle));
        let mr = (f.ibv_import_mr.unwrap())(pd, (*s.mr).handle);
        assert!((*mr).addr.is_null());
        assert_eq!(((*mr).lkey, (*mr).rkey, (*mr).length), ((*s.mr).lkey, (*s.mr).rkey, 64));
        assert_eq!(((*mr).pd, (*mr).context), (pd, s.importer));
        (f.ibv_unimport_mr.unwrap())(mr);
        (f.ibv_unimport_pd.unwrap())(pd);
        assert_eq!((f.ibv_close_device)(s.importer), 0);
        assert_eq!((f.ibv_dereg_mr)(s.mr), 0);
        assert_eq!((f.ibv_dealloc_pd)(s.pd), 0);
        assert_eq!((f.ibv_close_device)(s.ctx.as_ptr()), 0);
    }
}

#[test]
#[should_panic(expected = "ibv_dealloc_pd of the imported")]
fn an_importer_deallocating_the_pd_is_refused_and_fatal() {
    let s = Shared::new();
    // SAFETY: a live imported PD.
    assert_eq!(unsafe { (fns().ibv_dealloc_pd)(s.import_pd()) }, libc::EINVAL);
}

#[test]
#[should_panic(expected = "ibv_dereg_mr of the imported")]
fn an_importer_deregistering_the_mr_is_refused_and_fatal() {
    let s = Shared::new();
    let f = fns();
    // SAFETY: live mock objects.
    unsafe {
        let mr = (f.ibv_import_mr.unwrap())(s.import_pd(), (*s.mr).handle);
        assert_eq!((f.ibv_dereg_mr)(mr), libc::EINVAL);
    }
}

#[test]
#[should_panic(expected = "ibv_unimport_pd of")]
fn unimporting_a_pd_that_was_allocated_is_fatal() {
    let s = Shared::new();
    // SAFETY: a live mock PD, allocated rather than imported: the mistake under test.
    unsafe { (fns().ibv_unimport_pd.unwrap())(s.pd) };
}

#[test]
fn a_descriptor_of_no_context_is_refused_and_left_open() {
    let _mock = Mock::new();
    let stranger = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
    let raw = stranger.as_raw_fd();
    // SAFETY: a live descriptor, handed over.
    let ctx = unsafe { (fns().ibv_import_device.unwrap())(stranger.into_raw_fd()) };
    assert!(ctx.is_null());
    assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::ENODEV));
    // SAFETY: the refused import left the descriptor ours; closed once.
    assert_eq!(unsafe { libc::close(raw) }, 0);
}

#[test]
fn a_handle_of_another_file_is_refused() {
    let s = Shared::new();
    let f = fns();
    let other = s.mock.context(ContextConfig::default());
    // SAFETY: live mock objects.
    unsafe {
        let foreign = (f.ibv_alloc_pd)(other.as_ptr());
        assert!((f.ibv_import_pd.unwrap())(s.importer, (*foreign).handle).is_null());
        assert_eq!(io::Error::last_os_error().raw_os_error(), Some(libc::EINVAL));
    }
}
