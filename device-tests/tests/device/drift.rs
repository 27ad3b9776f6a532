//! Structure drift canaries on rxe0. Every structure the crate hands libibverbs to fill
//! (queries, the capabilities a create writes back, completions, async events) is passed here
//! as the crate passes it — this build's binding type, through the same function — with
//! canary bytes right after it. Were the loaded library's structure larger than the
//! binding's (headers older than the library, or a library that ignores the size it is
//! told), it would write into them. (`mlx5dv_query_device`'s `mlx5dv_context` needs mlx5
//! hardware and is not checked here.)

use std::ffi::c_int;
use std::time::Duration;

use rdma_verbs::sys;
use rdma_verbs::*;

use super::pair::{wait_for, Loopback, PORT};
use rdma_verbs_device_tests::{require_device, RXE};

/// Canary bytes after each structure.
const CANARY_LEN: usize = 256;
/// Their value: what no library writes by chance.
const CANARY: u8 = 0xa5;

/// `T` followed by canary bytes (`repr(C)`: the canary starts where `T`'s size ends).
#[repr(C)]
struct Canaried<T> {
    value: T,
    canary: [u8; CANARY_LEN],
}

/// Calls `fill` with a pointer to `init` that has [`CANARY_LEN`] canary bytes after it, and
/// asserts the canary is intact: the library wrote only `size_of::<T>()` bytes. Returns what
/// it wrote and what `fill` returned.
fn canaried<T, R>(what: &str, init: T, fill: impl FnOnce(*mut T) -> R) -> (T, R) {
    let mut boxed = Box::new(Canaried { value: init, canary: [CANARY; CANARY_LEN] });
    let ret = fill(&raw mut boxed.value);
    let clobbered = boxed.canary.iter().position(|&b| b != CANARY);
    assert_eq!(
        clobbered,
        None,
        "{what}: the library wrote past the {} bytes of this build's structure",
        size_of::<T>()
    );
    (boxed.value, ret)
}

/// [`canaried`] for a create that writes into its structure (the capabilities it granted):
/// asserts the object was made, destroys it with `destroy`, and returns what was written.
fn created<T, P>(
    what: &str,
    init: T,
    create: impl FnOnce(*mut T) -> *mut P,
    destroy: impl FnOnce(*mut P) -> c_int,
) -> T {
    let (written, object) = canaried(what, init, create);
    assert!(!object.is_null(), "{what}: {}", std::io::Error::last_os_error());
    ok("destroying it", destroy(object));
    written
}

/// Asserts a verb's `int` return is 0.
#[track_caller]
fn ok(what: &str, ret: c_int) {
    assert_eq!(ret, 0, "{what} failed: errno {ret}");
}

#[test]
fn a_structure_smaller_than_the_librarys_clobbers_the_canary() {
    let Some(ctx) = require_device(RXE) else { return };
    // 64 bytes where ibv_query_device writes a whole ibv_device_attr (more, but less than
    // 64 + CANARY_LEN): the check must see it.
    const { assert!(size_of::<sys::ibv_device_attr>() > 64) };
    const { assert!(size_of::<sys::ibv_device_attr>() < 64 + CANARY_LEN) };
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        canaried("ibv_query_device", [0u8; 64], |attr| {
            // SAFETY: a live context; `attr` has room for an ibv_device_attr (with the
            // canary), which is all ibv_query_device writes.
            unsafe { (ctx.library().fns.ibv_query_device)(ctx.as_raw(), attr.cast()) }
        })
    }));
    let message = caught.expect_err("the canary must catch a short structure");
    let text = message.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(text.contains("wrote past the 64 bytes"), "{text}");
}

#[test]
fn device_port_and_gid_queries_write_no_further_than_the_bindings_structures() {
    let Some(ctx) = require_device(RXE) else { return };
    let (fns, raw) = (&ctx.library().fns, ctx.as_raw());
    let (attr, ret) = canaried("ibv_query_device", Default::default(), |a| {
        // SAFETY: a live context of this library and a writable structure of
        // the type the function takes, followed by the canary.
        unsafe { (fns.ibv_query_device)(raw, a) }
    });
    ok("ibv_query_device", ret);
    let attr: sys::ibv_device_attr = attr;
    assert!(attr.phys_port_cnt >= 1);
    let (attr_ex, ret) = canaried("ibv_query_device_ex", Default::default(), |a| {
        // SAFETY: a live context of this library and a writable structure of
        // the type the function takes, followed by the canary.
        unsafe { sys::inline::ibv_query_device_ex(fns, raw, a) }
    });
    ok("ibv_query_device_ex", ret);
    let attr_ex: sys::ibv_device_attr_ex = attr_ex;
    assert_eq!(attr_ex.orig_attr.max_qp, attr.max_qp);
    let (port, ret) = canaried("ibv_query_port", Default::default(), |p| {
        // SAFETY: a live context of this library and a writable structure of
        // the type the function takes, followed by the canary.
        unsafe { sys::inline::ibv_query_port(fns, raw, PORT, p) }
    });
    ok("ibv_query_port", ret);
    let port: sys::ibv_port_attr = port;
    assert_eq!(port.state, sys::IBV_PORT_ACTIVE);
    let (_, ret) = canaried("ibv_query_gid", sys::ibv_gid::default(), |g| {
        // SAFETY: a live context of this library and a writable structure of
        // the type the function takes, followed by the canary.
        unsafe { (fns.ibv_query_gid)(raw, PORT, 0, g) }
    });
    ok("ibv_query_gid", ret);
    let (entry, ret) = canaried("ibv_query_gid_ex", sys::ibv_gid_entry::default(), |e| {
        // SAFETY: a live context of this library and a writable structure of
        // the type the function takes, followed by the canary.
        unsafe { sys::inline::ibv_query_gid_ex(fns, raw, u32::from(PORT), 0, e, 0) }
    });
    ok("ibv_query_gid_ex", ret);
    assert_eq!(entry.port_num, u32::from(PORT));
}

#[test]
fn creates_write_back_capabilities_no_further_than_the_bindings_structures() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let (fns, cq) = (&ctx.library().fns, lo.cq.as_raw());
    let cap = sys::ibv_qp_cap {
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = sys::ibv_qp_init_attr {
        send_cq: cq,
        recv_cq: cq,
        cap,
        qp_type: sys::IBV_QPT_RC,
        ..Default::default()
    };
    let destroy_qp = |qp| {
        // SAFETY: the QP just created, destroyed once.
        unsafe { (fns.ibv_destroy_qp)(qp) }
    };
    let create = |a| {
        // SAFETY: a live PD and a valid creation structure whose CQs are live.
        unsafe { (fns.ibv_create_qp)(lo.pd.as_raw(), a) }
    };
    let init = created("ibv_create_qp", init, create, destroy_qp);
    assert!(init.cap.max_send_wr >= 4, "the capabilities written back");

    let init_ex = sys::ibv_qp_init_attr_ex {
        send_cq: cq,
        recv_cq: cq,
        cap,
        qp_type: sys::IBV_QPT_RC,
        comp_mask: sys::IBV_QP_INIT_ATTR_PD | sys::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        pd: lo.pd.as_raw(),
        send_ops_flags: u64::from(sys::IBV_QP_EX_WITH_SEND),
        ..Default::default()
    };
    let create = |a| {
        // SAFETY: a live context and a valid extended creation structure (live PD and CQs).
        unsafe { sys::inline::ibv_create_qp_ex(fns, ctx.as_raw(), a) }
    };
    let init_ex = created("ibv_create_qp_ex", init_ex, create, destroy_qp);
    assert!(init_ex.cap.max_send_wr >= 4, "the capabilities written back");

    let srq_init = sys::ibv_srq_init_attr {
        attr: sys::ibv_srq_attr { max_wr: 4, max_sge: 1, srq_limit: 0 },
        ..Default::default()
    };
    let create = |a| {
        // SAFETY: a live PD and a valid SRQ creation structure.
        unsafe { (fns.ibv_create_srq)(lo.pd.as_raw(), a) }
    };
    let destroy = |srq| {
        // SAFETY: the SRQ just created, destroyed once.
        unsafe { (fns.ibv_destroy_srq)(srq) }
    };
    let srq_init = created("ibv_create_srq", srq_init, create, destroy);
    assert!(srq_init.attr.max_wr >= 4, "the sizes written back");
}

#[test]
fn query_qp_and_a_completion_write_no_further_than_the_bindings_structures() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let (a, b) = lo.rc_pair(2, AccessFlags::empty());
    let fns = &ctx.library().fns;
    // Every attribute libibverbs can query (ibv_cmd_query_qp refuses RATE_LIMIT, which needs
    // the extended path, with EOPNOTSUPP).
    let every = (QpAttrMask::all() - QpAttrMask::RATE_LIMIT).bits() as c_int;
    let (init, (attr, ret)) =
        canaried("ibv_query_qp (init_attr)", sys::ibv_qp_init_attr::default(), |init| {
            canaried("ibv_query_qp (attr)", sys::ibv_qp_attr::default(), |attr| {
                // SAFETY: a live QP and two writable structures, each followed by its canary.
                unsafe { (fns.ibv_query_qp)(a.as_raw(), attr, every, init) }
            })
        });
    ok("ibv_query_qp", ret);
    assert_eq!((attr.qp_state, attr.dest_qp_num), (sys::IBV_QPS_RTS, b.qp_num().get()));
    assert!(init.cap.max_send_wr >= 2);

    // SAFETY: a zero-length SEND names no memory; b's receive takes nothing either.
    unsafe {
        b.post_recv_wr(&mut RecvWr::new(1, &[])).unwrap();
        a.post_send_wr(&mut SendWr::send(2, &[]).flags(SendFlags::SIGNALED)).unwrap();
    }
    // Wait for both, then put them back one by one through the verb the crate polls with.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut seen = 0;
    while seen < 2 {
        let (wc, n) = canaried("ibv_poll_cq", sys::ibv_wc::default(), |wc| {
            // SAFETY: a live CQ and room for one completion (followed by the canary).
            unsafe { sys::inline::ibv_poll_cq(lo.cq.as_raw(), 1, wc) }
        });
        assert!(n >= 0, "ibv_poll_cq: {n}");
        if n == 1 {
            assert_eq!(wc.status, sys::IBV_WC_SUCCESS, "wr {}", wc.wr_id);
            seen += 1;
        }
        assert!(std::time::Instant::now() < deadline, "{seen} of 2 completions in 30 s");
    }
}

#[test]
fn an_async_event_writes_no_further_than_the_bindings_structure() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 64);
    let srq = lo.pd.create_srq(8, 1).unwrap();
    let attr = QpInitAttr { srq: Some(&srq), ..lo.attr(8) };
    let (a, _b) = lo.pair::<Rc>(&attr, AccessFlags::empty());
    for id in 0..8 {
        // SAFETY: a receive of nothing.
        unsafe { srq.post_recv_wr(&mut RecvWr::new(id, &[])).unwrap() };
    }
    // Below 4 receives left raises IBV_EVENT_SRQ_LIMIT_REACHED.
    srq.arm_limit(4).unwrap();
    for id in 0..5 {
        // SAFETY: a zero-length SEND names no memory.
        unsafe {
            a.post_send_wr(&mut SendWr::send(100 + id, &[]).flags(SendFlags::SIGNALED)).unwrap()
        };
    }
    drop(wait_for(&lo.cq, 10));
    let raw = ctx.as_raw();
    // SAFETY: a live context; its async_fd is a plain field.
    let mut pfd = libc::pollfd { fd: unsafe { (*raw).async_fd }, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    assert_eq!(unsafe { libc::poll(&mut pfd, 1, 30_000) }, 1, "no async event within 30 s");
    let fns = &ctx.library().fns;
    let (mut event, ret) = canaried("ibv_get_async_event", sys::ibv_async_event::default(), |e| {
        // SAFETY: a live context with an event waiting, and a writable event structure.
        unsafe { (fns.ibv_get_async_event)(raw, e) }
    });
    ok("ibv_get_async_event", ret);
    assert_eq!(event.event_type, sys::IBV_EVENT_SRQ_LIMIT_REACHED);
    // SAFETY: the event just read, acknowledged once.
    unsafe { (fns.ibv_ack_async_event)(&mut event) };
}
