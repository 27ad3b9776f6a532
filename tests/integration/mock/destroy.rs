//! Failed destroys: `Drop` logs a warning and leaks the object, never panics; the consuming
//! `destroy()` returns the error instead. The mock frees what leaked when it goes.

use log::Level;
use rdma_verbs::{AccessFlags, QpInitAttr};
use rdma_verbs_mock::{Call, Verb};

use super::{assert_verb_error, capture, errno_text, Fixture};

fn busy(verb: &str) -> String {
    format!("{verb} failed: {}", errno_text(libc::EBUSY))
}

/// Asserts `raw` was destroyed once (`call`), not freed, and `warning` was logged.
#[track_caller]
fn assert_leaked<T>(f: &Fixture, raw: *mut T, call: Call, warning: String) {
    assert_eq!(capture::take(), [(Level::Warn, warning)]);
    assert_eq!(f.mock.take_calls(), [call], "destroyed once, never retried");
    assert!(f.mock.is_live(raw), "leaked, not freed");
}

#[test]
fn a_pd_that_fails_to_deallocate_is_logged_and_leaked() {
    capture::start();
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let raw = pd.as_raw();
    f.mock.take_calls();
    f.mock.fail(Verb::DeallocPd, libc::EBUSY);
    drop(pd);
    let warning = format!("leaking a protection domain of mock0: {}", busy("ibv_dealloc_pd"));
    assert_leaked(&f, raw, Call::DeallocPd, warning);
}

#[test]
fn a_cq_that_fails_to_be_destroyed_is_logged_and_leaked() {
    capture::start();
    let f = Fixture::new();
    let cq = f.ctx.create_cq(16).unwrap();
    let raw = cq.as_raw();
    f.mock.take_calls();
    f.mock.fail(Verb::DestroyCq, libc::EBUSY);
    drop(cq);
    let warning = format!("leaking a completion queue of mock0: {}", busy("ibv_destroy_cq"));
    assert_leaked(&f, raw, Call::DestroyCq, warning);
}

#[test]
fn an_mr_that_fails_to_deregister_is_logged_and_leaked() {
    capture::start();
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let raw = mr.as_raw();
    f.mock.take_calls();
    f.mock.fail(Verb::DeregMr, libc::EBUSY);
    drop(mr);
    let warning = format!("leaking a 4096-byte memory region: {}", busy("ibv_dereg_mr"));
    assert_leaked(&f, raw, Call::DeregMr, warning);
}

#[test]
fn a_qp_that_fails_to_be_destroyed_is_logged_and_leaked() {
    capture::start();
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let cq = f.ctx.create_cq(32).unwrap();
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    let (raw, qpn) = (qp.as_raw(), qp.qp_num().0);
    f.mock.take_calls();
    f.mock.fail(Verb::DestroyQp, libc::EBUSY);
    drop(qp);
    assert_leaked(
        &f,
        raw,
        Call::DestroyQp,
        format!("leaking QP {qpn:#x}: {}", busy("ibv_destroy_qp")),
    );
}

#[test]
fn a_context_that_fails_to_close_is_logged_and_leaked() {
    capture::start();
    let Fixture { ctx, mock } = Fixture::new();
    let raw = ctx.as_raw();
    mock.fail(Verb::CloseDevice, libc::EBUSY);
    drop(ctx);
    let warning = format!("leaking the context of mock0: {}", busy("ibv_close_device"));
    assert_eq!(capture::take(), [(Level::Warn, warning)]);
    assert_eq!(mock.take_calls(), [Call::CloseDevice]);
    assert!(mock.is_live(raw));
}

#[test]
fn a_leaked_qp_keeps_its_cq_and_pd_busy_and_every_drop_still_only_logs() {
    capture::start();
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let cq = f.ctx.create_cq(32).unwrap();
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    let qpn = qp.qp_num().0;
    f.mock.fail(Verb::DestroyQp, libc::EBUSY);
    drop(qp);
    // The provider refuses the parents while the leaked QP uses them (as the kernel does).
    drop(cq);
    drop(pd);
    let warnings = [
        format!("leaking QP {qpn:#x}: {}", busy("ibv_destroy_qp")),
        format!("leaking a completion queue of mock0: {}", busy("ibv_destroy_cq")),
        format!("leaking a protection domain of mock0: {}", busy("ibv_dealloc_pd")),
    ];
    assert_eq!(capture::take(), warnings.map(|w| (Level::Warn, w)));
}

#[test]
fn destroy_returns_the_error_and_logs_nothing() {
    capture::start();
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let cq = f.ctx.create_cq(32).unwrap();
    let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    let raws =
        [mr.as_raw().cast::<()>(), qp.as_raw().cast(), cq.as_raw().cast(), pd.as_raw().cast()];
    f.mock.take_calls();
    f.mock.fail(Verb::DeregMr, libc::EBUSY);
    assert_verb_error(&mr.destroy().unwrap_err(), "ibv_dereg_mr", libc::EBUSY, &[]);
    f.mock.fail(Verb::DestroyQp, libc::EBUSY);
    assert_verb_error(&qp.destroy().unwrap_err(), "ibv_destroy_qp", libc::EBUSY, &[]);
    // Busy for real now: the leaked QP still uses the CQ and the PD.
    assert_verb_error(&cq.destroy().unwrap_err(), "ibv_destroy_cq", libc::EBUSY, &[]);
    assert_verb_error(&pd.destroy().unwrap_err(), "ibv_dealloc_pd", libc::EBUSY, &[]);
    assert_eq!(capture::take(), []);
    let calls = [Call::DeregMr, Call::DestroyQp, Call::DestroyCq, Call::DeallocPd];
    assert_eq!(f.mock.take_calls(), calls);
    assert!(raws.iter().all(|&raw| f.mock.is_live(raw)));
}

#[test]
fn destroy_frees_and_logs_nothing_when_it_succeeds() {
    capture::start();
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let cq = f.ctx.create_cq(32).unwrap();
    let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    let raws =
        [mr.as_raw().cast::<()>(), qp.as_raw().cast(), cq.as_raw().cast(), pd.as_raw().cast()];
    f.mock.take_calls();
    mr.destroy().unwrap();
    qp.destroy().unwrap();
    cq.destroy().unwrap();
    pd.destroy().unwrap();
    assert_eq!(capture::take(), []);
    let calls = [Call::DeregMr, Call::DestroyQp, Call::DestroyCq, Call::DeallocPd];
    assert_eq!(f.mock.take_calls(), calls);
    assert!(raws.iter().all(|&raw| !f.mock.is_live(raw)));
}
