//! Asynchronous events: decoded with the object they name, acknowledged at once, and a fatal
//! event does not end the stream.

use std::time::{Duration, Instant};

use rdma_verbs::{AsyncEvent, AsyncEventType, CompletionQueue, Error, QpInitAttr, WorkCompletion};
use rdma_verbs_mock::{Call, Verb};
use rdma_verbs_sys as sys;

use super::{assert_non_blocking, assert_verb_error, clear_non_blocking_of_a_duplicate, Fixture};
use rdma_verbs_test_support::finishes_within;

fn event(event_type: u32, element: sys::ibv_async_event__bindgen_ty_1) -> sys::ibv_async_event {
    sys::ibv_async_event { element, event_type }
}

#[test]
fn a_qp_fatal_event_arrives_typed_acknowledged_and_the_stream_goes_on() {
    let f = Fixture::new();
    let events = f.ctx.async_events().unwrap();
    assert_non_blocking(&events);
    let (pd, cq) = f.pd_and_cq(32);
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    assert_eq!(events.try_next().unwrap(), None, "nothing pending");
    f.mock.take_calls();

    let ctx = f.ctx.as_raw();
    let qp_element = sys::ibv_async_event__bindgen_ty_1 { qp: qp.as_raw() };
    f.mock.push_async_event(ctx, event(sys::IBV_EVENT_QP_FATAL, qp_element));
    let port = sys::ibv_async_event__bindgen_ty_1 { port_num: 1 };
    f.mock.push_async_event(ctx, event(sys::IBV_EVENT_PORT_ERR, port));

    let first = events.next(Some(Duration::from_secs(5))).unwrap();
    assert_eq!(first, Some(AsyncEvent::QpFatal(qp.qp_num())));
    assert_eq!(f.mock.unacked_async_events(), 0, "acknowledged before it was returned");
    let second = events.next(Some(Duration::from_secs(5))).unwrap().unwrap();
    assert_eq!(second, AsyncEvent::PortError(1));
    assert_eq!(second.to_string(), "port error on port 1");
    let fatal = AsyncEventType::QP_FATAL;
    let port_err = AsyncEventType::PORT_ERR;
    assert_eq!(
        f.mock.take_calls(),
        [
            Call::GetAsyncEvent,
            Call::AckAsyncEvent { event_type: fatal.0 },
            Call::GetAsyncEvent,
            Call::AckAsyncEvent { event_type: port_err.0 },
        ]
    );

    // Empty again: a timeout, after sleeping on the descriptor for about that long.
    let start = Instant::now();
    assert_eq!(events.next(Some(Duration::from_millis(100))).unwrap(), None);
    assert!(start.elapsed() >= Duration::from_millis(100), "{:?}", start.elapsed());
    assert_eq!(f.mock.unacked_async_events(), 0);
    drop(qp);
}

#[test]
fn cq_and_srq_events_name_their_object_and_unknown_types_are_kept() {
    let f = Fixture::new();
    let events = f.ctx.async_events().unwrap();
    let (cq, other) = (f.ctx.create_cq(16).unwrap(), f.ctx.create_cq(16).unwrap());
    let ctx = f.ctx.as_raw();
    let cq_element = sys::ibv_async_event__bindgen_ty_1 { cq: cq.as_raw() };
    f.mock.push_async_event(ctx, event(sys::IBV_EVENT_CQ_ERR, cq_element));
    // The mock has no SRQs: any address stands for one, as only the address is kept.
    let srq = std::ptr::dangling_mut::<sys::ibv_srq>();
    let srq_element = sys::ibv_async_event__bindgen_ty_1 { srq };
    f.mock.push_async_event(ctx, event(sys::IBV_EVENT_SRQ_LIMIT_REACHED, srq_element));
    let none = sys::ibv_async_event__bindgen_ty_1 { port_num: 0 };
    f.mock.push_async_event(ctx, event(0x7777, none));
    f.mock.push_async_event(ctx, event(sys::IBV_EVENT_DEVICE_FATAL, none));
    f.mock.push_async_event(ctx, event(sys::IBV_EVENT_DEVICE_SPEED_CHANGE, none));

    let mut got = Vec::new();
    while let Some(e) = events.try_next().unwrap() {
        got.push(e);
    }
    let [AsyncEvent::CqError(id), AsyncEvent::SrqLimitReached(_), unknown, AsyncEvent::DeviceFatal, speed] =
        got[..]
    else {
        panic!("{got:?}");
    };
    assert_eq!(id, cq.id());
    assert_ne!(id, other.id());
    assert_eq!(unknown, AsyncEvent::Unknown(AsyncEventType(0x7777)));
    assert_eq!(unknown.to_string(), "unknown (30583)");
    assert_eq!(speed, AsyncEvent::DeviceSpeedChange);
    assert_eq!(speed.to_string(), "device speed change");
    assert_eq!(f.mock.unacked_async_events(), 0);
}

#[test]
fn a_failed_read_is_a_verb_error_and_the_event_stays_queued() {
    let f = Fixture::new();
    let events = f.ctx.async_events().unwrap();
    let port = sys::ibv_async_event__bindgen_ty_1 { port_num: 1 };
    f.mock.push_async_event(f.ctx.as_raw(), event(sys::IBV_EVENT_PORT_ACTIVE, port));
    f.mock.fail(Verb::GetAsyncEvent, libc::EIO);
    let err = events.try_next().unwrap_err();
    assert_verb_error(&err, "ibv_get_async_event", libc::EIO, &[]);
    assert_eq!(events.try_next().unwrap(), Some(AsyncEvent::PortActive(1)));
}

/// A timed `next` is timed whatever the descriptor's flags: after the program cleared
/// `O_NONBLOCK` on a duplicate of the context's `async_fd` (which shares it), `next` with
/// nothing pending ends at its timeout and `try_next` returns at once, instead of blocking
/// in their read; an event pending is still read.
#[test]
fn a_timed_next_ends_on_time_after_the_program_cleared_o_nonblock() {
    finishes_within(Duration::from_secs(10), "a timed next blocked in its read", || {
        let f = Fixture::new();
        let events = f.ctx.async_events().unwrap();
        clear_non_blocking_of_a_duplicate(&events);
        let start = Instant::now();
        assert_eq!(events.next(Some(Duration::from_millis(200))).unwrap(), None, "timed out");
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(200) && took < Duration::from_secs(5), "{took:?}");
        assert_non_blocking(&events);

        clear_non_blocking_of_a_duplicate(&events);
        assert_eq!(events.try_next().unwrap(), None, "nothing pending, and no blocking");
        clear_non_blocking_of_a_duplicate(&events);
        let port = sys::ibv_async_event__bindgen_ty_1 { port_num: 1 };
        f.mock.push_async_event(f.ctx.as_raw(), event(sys::IBV_EVENT_PORT_ACTIVE, port));
        let next = events.next(Some(Duration::from_millis(200))).unwrap();
        assert_eq!(next, Some(AsyncEvent::PortActive(1)));
    });
}

/// An overrun's only sign is the `IBV_EVENT_CQ_ERR` event: once it is read, the CQ's next
/// poll that finds nothing says so (once), through `poll` and `poll_with` alike, and other
/// CQs' polls do not.
#[test]
fn a_cq_reported_in_error_fails_its_next_empty_poll_once() {
    let f = Fixture::new();
    let events = f.ctx.async_events().unwrap();
    let (cq, other) = (f.ctx.create_cq(16).unwrap(), f.ctx.create_cq(16).unwrap());
    let mut wcs = [WorkCompletion::EMPTY; 4];
    for poll_with in [false, true] {
        let element = sys::ibv_async_event__bindgen_ty_1 { cq: cq.as_raw() };
        f.mock.push_async_event(f.ctx.as_raw(), event(sys::IBV_EVENT_CQ_ERR, element));
        let poll = |cq: &CompletionQueue<'_>, wcs: &mut [WorkCompletion]| match poll_with {
            true => cq.poll_with(4, |_| {}),
            false => cq.poll(wcs).map(|polled| polled.len()),
        };
        assert_eq!(poll(&cq, &mut wcs).unwrap(), 0, "not told before the event is read");
        assert_eq!(events.try_next().unwrap(), Some(AsyncEvent::CqError(cq.id())));
        assert_eq!(poll(&other, &mut wcs).unwrap(), 0);
        let err = poll(&cq, &mut wcs).unwrap_err();
        assert!(matches!(err, Error::CompletionQueueOverrun), "{err:?}");
        assert!(err.to_string().contains("IBV_EVENT_CQ_ERR"), "{err}");
        assert_eq!(poll(&cq, &mut wcs).unwrap(), 0, "once");
    }
}
