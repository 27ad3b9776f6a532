//! Failed destroys: `Drop` logs a warning and leaks the object, never panics; the consuming
//! `destroy()` returns the error instead. The mock frees what leaked when it goes.

use log::Level;
use rdma_verbs::{
    AccessFlags, BufferPool, MwBind, MwType, QpInitAttr, SendFlags, ToInitAttr, VerbsPath,
    WorkCompletion,
};
use rdma_verbs_mock::{Call, QpAttr, Verb};

use super::{assert_verb_error, capture, errno_name, Fixture};

fn busy(verb: &str) -> String {
    format!("{verb} failed: {}", errno_name(libc::EBUSY))
}

/// The call that moves a QP whose destroy failed to RESET, so that it holds no work request
/// naming memory its owners may free once it is leaked.
fn reset_call() -> Call {
    let attr = QpAttr { qp_state: rdma_verbs::sys::IBV_QPS_RESET, ..QpAttr::default() };
    Call::ModifyQp { mask: rdma_verbs::sys::IBV_QP_STATE as i32, attr }
}

/// Asserts `raw` was destroyed once (`calls`), not freed, and `warning` was logged.
#[track_caller]
fn assert_leaked<T>(f: &Fixture, raw: *mut T, calls: Vec<Call>, warning: String) {
    assert_eq!(capture::take(), [(Level::Warn, warning)]);
    assert_eq!(f.mock.take_calls(), calls, "destroyed once, never retried");
    assert!(f.mock.is_live(raw), "leaked, not freed");
}

#[test]
fn each_object_that_fails_to_be_destroyed_is_logged_and_leaked() {
    capture::start();
    let f = Fixture::new();
    // The PD and CQ rows use their own, so that no leaked child keeps them busy.
    let (lone_pd, lone_cq) = (f.ctx.alloc_pd().unwrap(), f.ctx.create_cq(16).unwrap());
    let (pd, cq) = f.pd_and_cq(32);
    let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    let qpn = qp.qp_num().get();
    type Row<'a> = (*mut (), Box<dyn FnOnce() + 'a>, Verb, Vec<Call>, String);
    let rows: [Row<'_>; 4] = [
        (
            lone_pd.as_raw().cast(),
            Box::new(move || drop(lone_pd)),
            Verb::DeallocPd,
            vec![Call::DeallocPd],
            format!("leaking a protection domain of mock0: {}", busy("ibv_dealloc_pd")),
        ),
        (
            lone_cq.as_raw().cast(),
            Box::new(move || drop(lone_cq)),
            Verb::DestroyCq,
            vec![Call::DestroyCq],
            format!("leaking a completion queue of mock0: {}", busy("ibv_destroy_cq")),
        ),
        (
            mr.as_raw().cast(),
            Box::new(move || drop(mr)),
            Verb::DeregMr,
            vec![Call::DeregMr],
            format!("leaking a 4096-byte memory region: {}", busy("ibv_dereg_mr")),
        ),
        (
            qp.as_raw().cast(),
            Box::new(move || drop(qp)),
            Verb::DestroyQp,
            vec![Call::DestroyQp, reset_call()],
            format!("leaking QP {qpn:#x}: {}", busy("ibv_destroy_qp")),
        ),
    ];
    for (raw, drop_it, verb, calls, warning) in rows {
        f.mock.take_calls();
        f.mock.fail(verb, libc::EBUSY);
        drop_it();
        assert_leaked(&f, raw, calls, warning);
    }
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
    let (pd, cq) = f.pd_and_cq(32);
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    let qpn = qp.qp_num().get();
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
fn destroy_returns_the_error_or_frees_and_logs_nothing() {
    for fails in [true, false] {
        capture::start();
        let f = Fixture::new();
        let (pd, cq) = f.pd_and_cq(32);
        let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
        let raws =
            [mr.as_raw().cast::<()>(), qp.as_raw().cast(), cq.as_raw().cast(), pd.as_raw().cast()];
        f.mock.take_calls();
        let fail = |verb| {
            if fails {
                f.mock.fail(verb, libc::EBUSY);
            }
        };
        let check = |result: rdma_verbs::Result<()>, verb| match result {
            Err(err) if fails => assert_verb_error(&err, verb, libc::EBUSY, &[]),
            result => assert!(result.is_ok() && !fails, "{verb}: {result:?} (failing: {fails})"),
        };
        fail(Verb::DeregMr);
        check(mr.destroy(), "ibv_dereg_mr");
        fail(Verb::DestroyQp);
        check(qp.destroy(), "ibv_destroy_qp");
        // When failing, busy for real now: the leaked QP still uses the CQ and the PD.
        check(cq.destroy(), "ibv_destroy_cq");
        check(pd.destroy(), "ibv_dealloc_pd");
        assert_eq!(capture::take(), []);
        let mut calls = vec![Call::DeregMr, Call::DestroyQp, Call::DestroyCq, Call::DeallocPd];
        if fails {
            calls.insert(2, reset_call());
        }
        assert_eq!(f.mock.take_calls(), calls);
        assert!(raws.iter().all(|&raw| f.mock.is_live(raw) == fails), "failing: {fails}");
    }
}

/// A pool outlives the queues it lends chunks to only through their borrows, which
/// `std::mem::forget` ends without destroying the queue (otherwise a leaked
/// QP's posted receive could aim at a region deregistered and freed since). So a pool that a
/// queue leaked this way still holds chunks of leaks its region, saying so; a pool whose
/// queues were destroyed deregisters it, chunks still posted or not.
#[test]
fn a_pool_outlived_by_a_leaked_queue_holding_its_chunks_leaks_its_region() {
    for (leak, on_srq) in [(true, false), (true, true), (false, false), (false, true)] {
        capture::start();
        let f = Fixture::new();
        let (pd, cq) = f.pd_and_cq(32);
        let region = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let pool = BufferPool::new(region, 256).unwrap();
        if on_srq {
            let srq = pd.create_srq(16, 1).unwrap();
            srq.post_recv_buffer(pool.take().unwrap()).unwrap();
            if leak {
                std::mem::forget(srq);
            }
        } else {
            let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
            let qp = qp.into_init(&ToInitAttr::default()).unwrap();
            qp.post_recv_buffer(pool.take().unwrap()).unwrap();
            if leak {
                std::mem::forget(qp);
            }
        }
        f.mock.take_calls();
        drop(pool);
        let case = format!("leaked: {leak}, on an SRQ: {on_srq}");
        assert_eq!(f.mock.take_calls().contains(&Call::DeregMr), !leak, "{case}");
        let warning = "leaking a buffer pool's region: a queue holding its chunks was leaked or \
                       not destroyed, and the NIC may still use them";
        let expected = if leak { vec![(Level::Warn, warning.to_owned())] } else { vec![] };
        assert_eq!(capture::take(), expected, "{case}");
    }
}

/// A region with a memory window bound to it cannot be deregistered (rxe answers `EINVAL`, and
/// so does the mock): the error says a window is bound and what to do. `EINVAL` for a region
/// no window can be bound to (no `MW_BIND`) says nothing of windows.
#[test]
fn a_region_under_a_bound_window_fails_to_deregister_saying_so() {
    capture::start();
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(64);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND | AccessFlags::REMOTE_READ;
    let region = pd.register(4096, access).unwrap();
    let mut window = pd.alloc_mw(MwType::Type1).unwrap();
    let qp = super::refusals::rc_self(&f.ctx, &pd, &cq, VerbsPath::Legacy, 1);
    let bind = MwBind::new(&region, 0..64, AccessFlags::REMOTE_READ).unwrap();
    qp.bind_mw(&mut window, &bind, 1, SendFlags::SIGNALED).unwrap();
    let mut wcs = [WorkCompletion::EMPTY; 1];
    let bound = cq.poll(&mut wcs).unwrap();
    assert!(bound.len() == 1 && bound[0].is_success(), "{bound:?}");

    let err = region.destroy().unwrap_err();
    let what = ["a memory window is still bound", "SendWr::local_inv", "MemoryWindow::destroy"];
    assert_verb_error(&err, "ibv_dereg_mr", libc::EINVAL, &what);
    let plain = pd.register(64, AccessFlags::LOCAL_WRITE).unwrap();
    f.mock.fail(Verb::DeregMr, libc::EINVAL);
    assert_verb_error(&plain.destroy().unwrap_err(), "ibv_dereg_mr", libc::EINVAL, &[]);
    assert_eq!(capture::take(), []);
}
