//! Completion channels: creation, events read through the library, and their errors; CQ
//! moderation of their events.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use log::Level;
use rdma_verbs::{CompletionChannel, CqAttr, InvalidInputKind, VerbsPath, WorkCompletion};
use rdma_verbs_mock::{Call, ContextConfig, Optional, Verb};

use rdma_verbs_test_support::finishes_within;

use super::{
    assert_non_blocking, assert_verb_error, capture, clear_non_blocking_of_a_duplicate, errno_name,
    is_non_blocking, open, Fixture,
};

/// Runs `body` on a thread of its own (the mock's state is per thread) that must finish within
/// 30 s: on a blocking descriptor with nothing pending, the mock's read blocks for good, as the
/// kernel's would.
fn without_hanging(body: impl FnOnce() + Send + 'static) {
    finishes_within(Duration::from_secs(30), "blocked in a read?", body);
}

#[test]
fn a_channel_blocks_as_c_until_a_call_must_not_and_reads_events_through_the_library() {
    without_hanging(|| {
        let f = Fixture::new();
        let channel = f.ctx.create_comp_channel().unwrap();
        assert!(!is_non_blocking(&channel), "C's descriptor, for the one blocking read");
        let cq = f.ctx.create_cq_with_channel(16, &channel, 0).unwrap();
        let create_cq = Call::CreateCq { cqe: 16, channel: true, comp_vector: 0 };
        assert_eq!(f.mock.take_calls(), [Call::CreateCompChannel, create_cq]);

        // An unbounded wait is C's one read (the mock's eventfd, blocking too, has the event).
        f.mock.push_cq_event(cq.as_raw());
        assert_eq!(channel.wait(None).unwrap(), 1);
        assert_eq!(f.mock.take_calls(), [Call::GetCqEvent]);
        assert!(!is_non_blocking(&channel), "only a call that must not block switches it");

        assert_eq!(channel.try_get_events().unwrap(), 0, "EAGAIN: nothing pending");
        assert_non_blocking(&channel);
        assert_eq!(channel.wait(Some(Duration::from_millis(1))).unwrap(), 0, "timed out");
        assert_eq!(
            f.mock.take_calls(),
            [Call::GetCqEvent, Call::GetCqEvent],
            "wait tried one read before sleeping, and none after: the file never became readable"
        );
        f.mock.push_cq_event(cq.as_raw());
        assert_eq!(channel.wait(None).unwrap(), 1, "unbounded, on the non-blocking descriptor");
        f.mock.fail(Verb::GetCqEvent, libc::EIO);
        let err = channel.try_get_events().unwrap_err();
        assert_verb_error(&err, "ibv_get_cq_event", libc::EIO, &[]);
        drop(cq);
    });
}

#[test]
fn each_call_that_must_not_block_makes_the_descriptor_non_blocking_before_it_reads() {
    let calls: [fn(&CompletionChannel<'_>) -> usize; 2] = [
        |channel| channel.wait(Some(Duration::from_millis(1))).unwrap(),
        |channel| channel.try_get_events().unwrap(),
    ];
    for call in calls {
        without_hanging(move || {
            let f = Fixture::new();
            let channel = f.ctx.create_comp_channel().unwrap();
            assert_eq!(call(&channel), 0, "nothing pending");
            assert_non_blocking(&channel);
        });
    }
}

/// A timed wait is timed whatever the descriptor's flags: after the program cleared
/// `O_NONBLOCK` on a duplicate of the channel's descriptor (which shares it), a timed wait
/// with nothing pending ends at its timeout instead of blocking in its read, and
/// `try_get_events` returns at once; an event pending is still read.
#[test]
fn a_timed_wait_ends_on_time_after_the_program_cleared_o_nonblock() {
    finishes_within(Duration::from_secs(10), "a timed wait blocked in its read", || {
        let f = Fixture::new();
        let channel = f.ctx.create_comp_channel().unwrap();
        let cq = f.ctx.create_cq_with_channel(16, &channel, 0).unwrap();
        assert_eq!(channel.wait(Some(Duration::from_millis(1))).unwrap(), 0);
        assert_non_blocking(&channel);

        clear_non_blocking_of_a_duplicate(&channel);
        let start = Instant::now();
        assert_eq!(channel.wait(Some(Duration::from_millis(200))).unwrap(), 0, "timed out");
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(200) && took < Duration::from_secs(5), "{took:?}");
        assert_non_blocking(&channel);

        clear_non_blocking_of_a_duplicate(&channel);
        assert_eq!(channel.try_get_events().unwrap(), 0, "nothing pending, and no blocking");
        clear_non_blocking_of_a_duplicate(&channel);
        f.mock.push_cq_event(cq.as_raw());
        assert_eq!(channel.wait(Some(Duration::from_millis(200))).unwrap(), 1);
        drop(cq);
    });
}

#[test]
fn signals_neither_end_a_wait_early_nor_extend_it() {
    extern "C" fn interrupt(_: libc::c_int) {}
    // SAFETY: a handler that does nothing is async-signal-safe; without SA_RESTART, as ppoll
    // is never restarted anyway: each signal ends the system call with EINTR.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t;
        assert_eq!(libc::sigaction(libc::SIGUSR1, &action, std::ptr::null_mut()), 0);
    }
    let f = Fixture::new();
    let channel = f.ctx.create_comp_channel().unwrap();
    let (timeout, limit) = (Duration::from_millis(300), Duration::from_secs(2));
    // SAFETY: pthread_self has no preconditions.
    let waiter = unsafe { libc::pthread_self() };
    let done = AtomicBool::new(false);
    let took = std::thread::scope(|s| {
        s.spawn(|| {
            // Bounded, so that a wait that never ends shows as a failure, not a hang.
            let start = Instant::now();
            while !done.load(Ordering::Relaxed) && start.elapsed() < timeout + limit {
                // SAFETY: `waiter` runs until `done`, and SIGUSR1 has a handler.
                unsafe { libc::pthread_kill(waiter, libc::SIGUSR1) };
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let start = Instant::now();
        assert_eq!(channel.wait(Some(timeout)).unwrap(), 0);
        let took = start.elapsed();
        done.store(true, Ordering::Relaxed);
        took
    });
    // A wait that restarted its timeout at each signal (every 5 ms) would outlast them all.
    assert!(took >= timeout && took < timeout + limit, "{took:?}");
}

#[test]
fn channel_errors() {
    capture::start();
    let f = Fixture::new();
    f.mock.fail(Verb::CreateCompChannel, libc::ENOMEM);
    let err = f.ctx.create_comp_channel().unwrap_err();
    assert_verb_error(&err, "ibv_create_comp_channel", libc::ENOMEM, &[]);

    let channel = f.ctx.create_comp_channel().unwrap();
    let other = open(&f.mock, Optional::ALL, ContextConfig::default());
    f.mock.take_calls();
    assert_eq!(f.ctx.num_comp_vectors(), 1);
    let err = f.ctx.create_cq_with_channel(16, &channel, 1).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Range), "{err:?}");
    assert_eq!(err.to_string(), "completion vector 1 does not exist: mock0 has vectors 0..1");
    let err = other.create_cq_with_channel(16, &channel, 0).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::OtherContext), "{err:?}");
    assert_eq!(f.mock.take_calls(), [], "refused before the provider");

    // A CQ leaked on it (safe: `mem::forget`) keeps it busy: the channel is leaked too.
    std::mem::forget(f.ctx.create_cq_with_channel(4, &channel, 0).unwrap());
    let raw = channel.as_raw();
    drop(channel);
    let warning = format!(
        "leaking a completion channel of mock0: ibv_destroy_comp_channel failed: {}",
        errno_name(libc::EBUSY)
    );
    assert_eq!(capture::take(), [(Level::Warn, warning)]);
    assert!(f.mock.is_live(raw));

    let channel = f.ctx.create_comp_channel().unwrap();
    f.mock.fail(Verb::DestroyCompChannel, libc::EBUSY);
    let err = channel.destroy().unwrap_err();
    assert_verb_error(&err, "ibv_destroy_comp_channel", libc::EBUSY, &[]);
    assert_eq!(capture::take(), []);
}

/// Runs `test` on each verbs path: a fixture, a channel, and CQ attributes of that path on it.
/// (Each [`without_hanging`].)
fn on_each_path(
    test: impl Fn(&Fixture, &CompletionChannel<'_>, &CqAttr<'_>, VerbsPath) + Copy + Send + 'static,
) {
    for (config, path) in [
        (ContextConfig::default(), VerbsPath::Legacy),
        (ContextConfig::extended_verbs(), VerbsPath::Extended),
    ] {
        without_hanging(move || {
            let f = Fixture::with(Optional::ALL, config);
            let channel = f.ctx.create_comp_channel().unwrap();
            let attr =
                CqAttr { channel: Some(&channel), verbs_path: Some(path), ..CqAttr::default() };
            test(&f, &channel, &attr, path);
        });
    }
}

#[test]
fn events_are_acknowledged_in_one_call_right_before_their_cq_is_destroyed() {
    on_each_path(|f, channel, attr, path| {
        let (a, b) =
            (f.ctx.create_cq_with(4, attr).unwrap(), f.ctx.create_cq_with(4, attr).unwrap());
        for cq in [&a, &b, &a] {
            f.mock.push_cq_event(cq.as_raw());
        }
        f.mock.take_calls();
        assert_eq!(channel.wait(Some(Duration::from_secs(5))).unwrap(), 1);
        assert_eq!(channel.try_get_events().unwrap(), 2);
        assert_eq!(
            f.mock.take_calls(),
            vec![Call::GetCqEvent; 4],
            "{path}: read, none acknowledged"
        );

        a.destroy().unwrap();
        assert_eq!(f.mock.take_calls(), [Call::AckCqEvents { nevents: 2 }, Call::DestroyCq]);
        // Queued and never read: the kernel drops it with the CQ, and nothing is owed for it.
        f.mock.push_cq_event(b.as_raw());
        drop(b);
        assert_eq!(f.mock.take_calls(), [Call::AckCqEvents { nevents: 1 }, Call::DestroyCq]);
        assert_eq!(channel.try_get_events().unwrap(), 0, "{path}: the unread event went too");
    });
}

#[test]
fn the_mock_fails_a_destroy_that_would_wait_for_acknowledgements_forever() {
    let f = Fixture::new();
    let channel = f.ctx.create_comp_channel().unwrap();
    let fns = &f.ctx.library().fns;
    // SAFETY: a live context and channel of the mock; no user context.
    let cq = unsafe {
        (fns.ibv_create_cq)(f.ctx.as_raw(), 4, std::ptr::null_mut(), channel.as_raw(), 0)
    };
    f.mock.push_cq_event(cq);
    let (mut got, mut cq_context) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: a live channel and two writable out-pointers.
    assert_eq!(unsafe { (fns.ibv_get_cq_event)(channel.as_raw(), &mut got, &mut cq_context) }, 0);
    assert_eq!((got, cq_context), (cq, std::ptr::null_mut()));
    // SAFETY: the CQ is live and used by nothing; its event is deliberately not acknowledged.
    assert_eq!(unsafe { (fns.ibv_destroy_cq)(cq) }, 0);
    drop(channel);
    let Fixture { ctx, mock } = f;
    drop(ctx);
    let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| drop(mock))).unwrap_err();
    let message = panic.downcast_ref::<String>().unwrap();
    assert!(
        message.contains("ibv_destroy_cq would block forever: 1 events read, 0 acknowledged"),
        "{message}"
    );
}

#[test]
fn events_of_a_cq_whose_destroy_failed_are_acknowledged_as_they_are_read() {
    on_each_path(|f, channel, attr, path| {
        let cq = f.ctx.create_cq_with(4, attr).unwrap();
        let raw = cq.as_raw();
        f.mock.push_cq_event(raw);
        assert_eq!(channel.try_get_events().unwrap(), 1);
        f.mock.fail(Verb::DestroyCq, libc::EBUSY);
        f.mock.take_calls();
        assert_verb_error(&cq.destroy().unwrap_err(), "ibv_destroy_cq", libc::EBUSY, &[]);
        assert_eq!(f.mock.take_calls(), [Call::AckCqEvents { nevents: 1 }, Call::DestroyCq]);
        // Leaked and still raising events: nothing will acknowledge them later, so each is
        // acknowledged when read.
        f.mock.push_cq_event(raw);
        f.mock.push_cq_event(raw);
        assert_eq!(channel.try_get_events().unwrap(), 2);
        let ack = Call::AckCqEvents { nevents: 1 };
        let read_and_ack = [Call::GetCqEvent, ack.clone(), Call::GetCqEvent, ack, Call::GetCqEvent];
        assert_eq!(f.mock.take_calls(), read_and_ack, "{path}");
    });
}

#[test]
fn poll_blocking_returns_what_one_poll_brings_and_re_arms_after_each_event_until_time_is_up() {
    without_hanging(|| {
        let f = Fixture::new();
        let channel = f.ctx.create_comp_channel().unwrap();
        let cq = f.ctx.create_cq_with_channel(4, &channel, 0).unwrap();
        let mut wcs = [WorkCompletion::EMPTY; 4];
        let wc = rdma_verbs_sys::ibv_wc { wr_id: 7, ..Default::default() };
        f.mock.push_completion(cq.as_raw(), wc);
        f.mock.take_calls();
        let got = cq.poll_blocking(&channel, &mut wcs, Duration::from_secs(5)).unwrap();
        assert_eq!(got.iter().map(|wc| wc.wr_id()).collect::<Vec<_>>(), [7]);
        assert_eq!(f.mock.take_calls(), [Call::PollCq { num_entries: 4 }], "no sleep");

        // An event whose completion was already polled: the CQ is re-armed and polled again,
        // then the wait sleeps out the rest of its time and returns nothing.
        f.mock.push_cq_event(cq.as_raw());
        let (limit, start) = (Duration::from_millis(50), Instant::now());
        assert!(cq.poll_blocking(&channel, &mut wcs, limit).unwrap().is_empty());
        assert!(start.elapsed() >= limit, "{:?}", start.elapsed());
        let calls = f
            .mock
            .take_calls_where(|c| matches!(c, Call::PollCq { .. } | Call::ReqNotifyCq { .. }));
        let (poll, arm) =
            (Call::PollCq { num_entries: 4 }, Call::ReqNotifyCq { solicited_only: 0 });
        assert_eq!(calls[..3], [poll.clone(), arm, poll], "{calls:?}");
        drop(cq);
    });
}

#[test]
fn cq_moderation_reaches_the_provider_and_is_unsupported_without_its_op() {
    let f = Fixture::new();
    let cq = f.ctx.create_cq(16).unwrap();
    f.mock.take_calls();
    cq.set_moderation(32, 100).unwrap();
    let moderate = rdma_verbs_sys::IBV_CQ_ATTR_MODERATE;
    assert_eq!(
        f.mock.take_calls(),
        [Call::ModifyCq { attr_mask: moderate, cq_count: 32, cq_period: 100 }]
    );
    // The provider's refusal (a value past the device's limits).
    f.mock.fail(Verb::ModifyCq, libc::EINVAL);
    assert_verb_error(
        &cq.set_moderation(u16::MAX, 1).unwrap_err(),
        "ibv_modify_cq",
        libc::EINVAL,
        &[],
    );
    drop(cq);
    drop(f); // one mock per thread

    // rxe and siw have no op; nor has a context that is not extended.
    for config in [
        ContextConfig { cq_moderation: false, ..ContextConfig::default() },
        ContextConfig { extended: false, ..ContextConfig::default() },
    ] {
        let f = Fixture::with(Optional::ALL, config);
        let cq = f.ctx.create_cq(16).unwrap();
        let err = cq.set_moderation(32, 100).unwrap_err();
        assert!(matches!(err, rdma_verbs::Error::Unsupported { what: "ibv_modify_cq" }), "{err:?}");
    }
}
