//! rdma_cm on tokio (features `rdmacm` and `tokio`) in the Soft-RoCE guest: an async server
//! and an async client in one current-thread runtime, on rxe0 and siw0 (see cm.rs for the
//! addresses), their completions awaited too; a connect cancelled by a timeout, after which
//! the same channel connects again. Ports 19120–19129.

use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::pin::pin;
use std::task::Poll;
use std::time::Duration;

use rdma_verbs::cm::{AsyncEventChannel, CmEventKind, CmId, ConnParam, EventChannel, PortSpace};
use rdma_verbs::reactor::CompletionStream;
use rdma_verbs::{Error, InvalidInputKind, QpInitAttr, SendFlags, SendWr};

use super::cm::{listen_on, receiving};
use super::pair::Loopback;
use super::test_cases;
use rdma_verbs_device_tests::{rxe, siw, Target};

const STEP: Duration = Duration::from_secs(20);
const CM_TIMEOUT: Duration = Duration::from_secs(5);
const CLIENT_HELLO: &[u8] = b"async client: hello";
const SERVER_HELLO: &[u8] = b"async server: welcome";
const MESSAGE: &[u8] = b"a SEND on a QP connected on tokio";

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime")
}

/// Runs `a` and `b` concurrently on the current task, until both are done.
async fn both<A: Future, B: Future>(a: A, b: B) -> (A::Output, B::Output) {
    let (mut a, mut b) = (pin!(a), pin!(b));
    let (mut ra, mut rb) = (None, None);
    poll_fn(|cx| {
        if ra.is_none() {
            if let Poll::Ready(v) = a.as_mut().poll(cx) {
                ra = Some(v);
            }
        }
        if rb.is_none() {
            if let Poll::Ready(v) = b.as_mut().poll(cx) {
                rb = Some(v);
            }
        }
        if ra.is_some() && rb.is_some() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
    (ra.unwrap(), rb.unwrap())
}

/// The next completion of `completions`, awaited on the reactor within [`STEP`]; it must
/// succeed. Its `wr_id`.
async fn one_completion(completions: &mut CompletionStream<'_>, what: &str) -> u64 {
    let wc = tokio::time::timeout(STEP, completions.next()).await.expect(what).expect(what);
    assert!(wc.is_success(), "{what}: {}", wc.status());
    wc.wr_id()
}

/// The next event on `cm`, which must be `kind` for `id`.
async fn expect_event(cm: &mut AsyncEventChannel<'_>, id: &CmId<'_>, kind: CmEventKind) {
    let event = tokio::time::timeout(STEP, cm.next()).await.expect("an event in time").unwrap();
    assert_eq!((event.kind(), event.id_raw()), (kind, id.as_raw()), "status {}", event.status());
}

/// Server: accept one client as a future, receive its SEND, await its disconnect.
async fn serve<'ch>(t: &Target, cm: &mut AsyncEventChannel<'ch>, listener: &CmId<'ch>) {
    let request = cm.get_request(listener).await.expect("connect request");
    assert!(request.private_data.starts_with(CLIENT_HELLO), "{:?}", request.private_data);
    let id = &request.id;
    let ctx = id.context().expect("the request's context");
    assert_eq!(ctx.name(), t.device);
    let comp = ctx.create_comp_channel().expect("completion channel");
    let lo = Loopback::with_cq(ctx, ctx.create_cq_with_channel(64, &comp, 0).expect("cq"));
    let mut completions = CompletionStream::new(&lo.cq, &comp).expect("completion stream");
    // SAFETY: `mr` stays alive and untouched until the completion is awaited below.
    let (qp, mut mr) = unsafe { receiving(&lo, id, MESSAGE.len()) };
    let param = ConnParam::with_private_data(SERVER_HELLO);
    let up = cm.accept(id, qp, &param).await.unwrap_or_else(|e| panic!("accept: {}", e.error));
    assert_eq!(one_completion(&mut completions, "receive").await, 7);
    assert_eq!(&mr.as_mut_slice()[..MESSAGE.len()], MESSAGE);
    expect_event(cm, id, CmEventKind::DISCONNECTED).await;
    drop(up);
}

/// Client: resolve and connect as futures on `cm`, send one message, disconnect.
async fn client(t: &Target, cm: &mut AsyncEventChannel<'_>, at: SocketAddr) {
    let id = CmId::new(cm.channel(), PortSpace::TCP).expect("id");
    cm.resolve_addr(&id, None, at, CM_TIMEOUT).await.expect("resolve_addr");
    cm.resolve_route(&id, CM_TIMEOUT).await.expect("resolve_route");
    let ctx = id.context().expect("the id's context");
    assert_eq!(ctx.name(), t.device);
    let comp = ctx.create_comp_channel().expect("completion channel");
    let lo = Loopback::with_cq(ctx, ctx.create_cq_with_channel(64, &comp, 0).expect("cq"));
    let mut completions = CompletionStream::new(&lo.cq, &comp).expect("completion stream");
    let qp = lo.pd.create_rc_qp(&QpInitAttr::new(&lo.cq)).expect("qp");
    let param = ConnParam::with_private_data(CLIENT_HELLO);
    let up = cm.connect(&id, qp, &param).await.unwrap_or_else(|e| panic!("connect: {}", e.error));
    assert!(up.private_data.starts_with(SERVER_HELLO), "{:?}", up.private_data);
    let mut mr = lo.region(4096);
    mr.as_mut_slice()[..MESSAGE.len()].copy_from_slice(MESSAGE);
    let sge = [mr.sge(..MESSAGE.len()).unwrap()];
    let mut wr = SendWr::send(9, &sge).flags(SendFlags::SIGNALED);
    // SAFETY: `mr` stays registered and unwritten until the completion is polled below.
    unsafe { up.qp.post_send_wr(&mut wr).expect("post_send") };
    assert_eq!(one_completion(&mut completions, "send").await, 9);
    id.disconnect().expect("disconnect");
    expect_event(cm, &id, CmEventKind::DISCONNECTED).await;
    drop(up);
}

/// An async server listening at `at` and an async client connecting to it, both on this
/// task, each with its own channel.
async fn exchange(t: &Target, client_cm: &mut AsyncEventChannel<'_>, at: SocketAddr) {
    let channel = EventChannel::new().expect("event channel");
    let listener = listen_on(&channel, at);
    let mut server_cm = AsyncEventChannel::new(&channel).expect("async channel");
    let served = serve(t, &mut server_cm, &listener);
    tokio::time::timeout(STEP * 3, both(served, client(t, client_cm, at)))
        .await
        .expect("the exchange within its time");
}

fn connect_send_disconnect(target: Option<Target>, port: u16) {
    let Some(t) = &target else { return };
    runtime().block_on(async {
        let channel = EventChannel::new().expect("event channel");
        let mut cm = AsyncEventChannel::new(&channel).expect("async channel");
        exchange(t, &mut cm, SocketAddr::new(t.ip, port)).await;
    });
}

test_cases! { connect_send_disconnect:
    async_accept_and_connect_exchange_a_send_on_rxe(rxe(), 19120);
    async_accept_and_connect_exchange_a_send_on_siw(siw(), 19121);
}

/// A connect to a listener that never answers, cancelled by a timeout: the id is dropped
/// (with its late events), and the same channel then connects to a server that answers.
fn cancelled_connect(target: Option<Target>, port: u16) {
    let Some(t) = &target else { return };
    runtime().block_on(async {
        // Its connect requests are never read, so the client waits for an answer.
        let silent_channel = EventChannel::new().expect("event channel");
        let silent = SocketAddr::new(t.ip, port);
        let _silent = listen_on(&silent_channel, silent);
        let channel = EventChannel::new().expect("event channel");
        let mut cm = AsyncEventChannel::new(&channel).expect("async channel");
        {
            let id = CmId::new(&channel, PortSpace::TCP).expect("id");
            cm.resolve_addr(&id, None, silent, CM_TIMEOUT).await.expect("resolve_addr");
            cm.resolve_route(&id, CM_TIMEOUT).await.expect("resolve_route");
            let lo = Loopback::new(id.context().unwrap(), 64);
            let qp = lo.pd.create_rc_qp(&QpInitAttr::new(&lo.cq)).expect("qp");
            let param = ConnParam::default();
            let connect = cm.connect(&id, qp, &param);
            let outcome = tokio::time::timeout(Duration::from_millis(500), connect).await;
            assert!(outcome.is_err(), "nobody answers, yet: {:?}", outcome.map(|r| r.is_ok()));
            // Leaving the block drops the PD and CQ, then the id, with its late events.
        }
        exchange(t, &mut cm, SocketAddr::new(t.ip, port + 1)).await;
    });
}

test_cases! { cancelled_connect:
    a_cancelled_async_connect_leaves_the_channel_working_on_rxe(rxe(), 19122);
    a_cancelled_async_connect_leaves_the_channel_working_on_siw(siw(), 19124);
}

/// The registration's refusals, and the descriptor made non-blocking again.
#[test]
fn an_async_channel_needs_a_runtime_a_non_blocking_fd_and_its_own_ids() {
    let Some(_) = rxe() else { return };
    let channel = EventChannel::new().expect("event channel");
    let e = AsyncEventChannel::new(&channel).expect_err("outside a runtime");
    assert!(matches!(e, Error::NoRuntime { .. }), "{e}");
    // A program may clear O_NONBLOCK (the open file's flag); registering sets it again.
    let fd = channel.fd();
    // SAFETY: F_GETFL/F_SETFL on the channel's live descriptor change only its status flags.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    assert_ne!(flags & libc::O_NONBLOCK, 0, "EventChannel::new made it non-blocking");
    // SAFETY: as above.
    assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK) }, 0);
    runtime().block_on(async {
        let mut cm = AsyncEventChannel::new(&channel).expect("async channel");
        // SAFETY: as above.
        let now = unsafe { libc::fcntl(fd, libc::F_GETFL) };
        assert_ne!(now & libc::O_NONBLOCK, 0, "registering made it non-blocking again");
        let other_channel = EventChannel::new().expect("event channel");
        let other = CmId::new(&other_channel, PortSpace::TCP).expect("id");
        let at = SocketAddr::new(rxe().unwrap().ip, 19126);
        let e = cm.resolve_addr(&other, None, at, CM_TIMEOUT).await.expect_err("other channel");
        assert_eq!(e.invalid_input_kind(), Some(InvalidInputKind::OtherChannel), "{e}");
    });
}
