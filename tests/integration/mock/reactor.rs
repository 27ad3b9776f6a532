//! The `tokio` feature over the mock: async events awaited, the completion stream's
//! poll–arm–poll order, and the refusals.

use std::time::Duration;

use rdma_verbs::reactor::{AsyncCompletionChannel, AsyncEventStream, CompletionStream};
use rdma_verbs::{AsyncEvent, Error, InvalidInputKind, WorkCompletion};
use rdma_verbs_mock::Call;
use rdma_verbs_sys as sys;

use super::Fixture;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

#[test]
fn async_events_are_awaited_and_a_fatal_one_does_not_end_the_stream() {
    let f = Fixture::new();
    let qp_cq = f.ctx.create_cq(32).unwrap();
    let pd = f.ctx.alloc_pd().unwrap();
    let qp = pd.create_rc_qp(&rdma_verbs::QpInitAttr::new(&qp_cq)).unwrap();
    runtime().block_on(async {
        let stream = AsyncEventStream::new(f.ctx.async_events().unwrap()).unwrap();
        let quiet = tokio::time::timeout(Duration::from_millis(50), stream.next()).await;
        assert!(quiet.is_err(), "nothing pending: {quiet:?}");

        let ctx = f.ctx.as_raw();
        let element = sys::ibv_async_event__bindgen_ty_1 { qp: qp.as_raw() };
        let fatal = sys::ibv_async_event { element, event_type: sys::IBV_EVENT_QP_FATAL };
        f.mock.push_async_event(ctx, fatal);
        let next = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
        assert_eq!(next.unwrap().unwrap(), AsyncEvent::QpFatal(qp.qp_num()));

        let element = sys::ibv_async_event__bindgen_ty_1 { cq: qp_cq.as_raw() };
        let cq_err = sys::ibv_async_event { element, event_type: sys::IBV_EVENT_CQ_ERR };
        f.mock.push_async_event(ctx, cq_err);
        let next = tokio::time::timeout(Duration::from_secs(5), stream.next()).await;
        assert_eq!(next.unwrap().unwrap(), AsyncEvent::CqError(qp_cq.id()));
    });
    assert_eq!(f.mock.unacked_async_events(), 0);
}

#[test]
fn the_completion_stream_arms_then_polls_again_before_it_sleeps() {
    let f = Fixture::new();
    let channel = f.ctx.create_comp_channel().unwrap();
    let cq = f.ctx.create_cq_with_channel(16, &channel, 0).unwrap();
    runtime().block_on(async {
        let mut stream = CompletionStream::new(&cq, &channel).unwrap();
        let mut wc = sys::ibv_wc { wr_id: 7, ..Default::default() };
        f.mock.push_completion(cq.as_raw(), wc);
        wc.wr_id = 8;
        f.mock.push_completion(cq.as_raw(), wc);
        f.mock.take_calls();
        let mut storage = [WorkCompletion::EMPTY; 4];
        let ids: Vec<_> =
            stream.poll(&mut storage).await.unwrap().iter().map(|w| w.wr_id()).collect();
        assert_eq!(ids, [7, 8], "what is there comes without waiting");
        assert_eq!(f.mock.take_calls(), [Call::PollCq { num_entries: 4 }]);

        // Empty: poll, arm, poll again (a completion before the arming raises no event), then
        // sleep on the channel, which the mock never wakes.
        let waited = tokio::time::timeout(Duration::from_millis(50), stream.next()).await;
        assert!(waited.is_err(), "{waited:?}");
        let poll = Call::PollCq { num_entries: 1 };
        let arm = Call::ReqNotifyCq { solicited_only: 0 };
        assert_eq!(f.mock.take_calls(), [poll.clone(), arm, poll]);

        let err = stream.poll(&mut []).await.unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::EmptyStorage), "{err:?}");
    });
}

#[test]
fn streams_refuse_a_foreign_channel_a_second_registration_and_no_runtime() {
    let f = Fixture::new();
    let channel = f.ctx.create_comp_channel().unwrap();
    let other = f.ctx.create_comp_channel().unwrap();
    let cq = f.ctx.create_cq_with_channel(16, &channel, 0).unwrap();
    let plain = f.ctx.create_cq(16).unwrap();

    let err = CompletionStream::new(&cq, &channel).unwrap_err();
    assert!(matches!(err, Error::NoRuntime { what: "a completion channel" }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "a completion channel can be awaited only inside a tokio runtime: create it within one \
         (with I/O enabled: Builder::enable_io or enable_all)"
    );
    runtime().block_on(async {
        for (cq, channel) in [(&cq, &other), (&plain, &channel)] {
            let err = CompletionStream::new(cq, channel).unwrap_err();
            assert!(err
                .to_string()
                .starts_with("this CQ does not report to this completion channel"));
        }
        let first = AsyncCompletionChannel::new(&channel).unwrap();
        let err = AsyncCompletionChannel::new(&channel).unwrap_err();
        assert_eq!(err.errno(), Some(libc::EEXIST), "{err}");
        drop(first);
        drop(AsyncCompletionChannel::new(&channel).unwrap());
    });
}
