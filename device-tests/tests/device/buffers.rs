//! The safe owned-buffer tier on rxe0.

use rdma_verbs::*;

use super::pair::{wait_for, Loopback};
use rdma_verbs_device_tests::{require_device, RXE};

#[test]
fn buffers_move_in_on_post_and_come_back_with_their_bytes() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 64);
    let pool = lo.pool(16, 4096);
    assert_eq!((pool.count(), pool.chunk_size()), (16, 4096));
    let (a, b) = lo.rc_pair(8, AccessFlags::empty());

    for _ in 0..4 {
        b.post_recv_buffer(pool.take().unwrap()).unwrap();
    }
    for i in 0..4u8 {
        let mut buf = pool.take().unwrap();
        let msg: Vec<u8> = (0..1000 + u32::from(i) * 700).map(|j| (j as u8) ^ i).collect();
        buf.fill(&msg).unwrap();
        a.post_send_buffer(buf, SendOp::SendWithImm(u32::from(i))).unwrap();
    }
    let mut received = Vec::new();
    let mut sent = 0;
    for mut wc in wait_for(&lo.cq, 8) {
        assert!(wc.is_success(), "{wc:?}");
        let imm = wc.imm_data();
        let buf = pool.complete(&mut wc).expect("every completion names one of the pool's buffers");
        assert!(pool.complete(&mut wc).is_none(), "a completion serves once");
        match imm {
            Some(i) => received.push((i, buf.as_slice().to_vec())),
            None => sent += 1,
        }
    }
    assert_eq!(sent, 4);
    received.sort();
    for (i, bytes) in received {
        let expected: Vec<u8> = (0..1000 + i * 700).map(|j| (j as u8) ^ i as u8).collect();
        assert_eq!(bytes, expected, "message {i}");
    }
    // Every buffer came back: all 16 can be taken again.
    let all: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(all.len(), 16);
}

#[test]
fn a_refused_post_returns_the_buffer() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let pool = lo.pool(8, 256);
    let qp = lo.rc_in_init(2, AccessFlags::empty());
    // Providers may round the queue up past the reported capacity: fill it until refused.
    let err = (0..pool.count())
        .find_map(|_| {
            let mut buf = pool.take().unwrap();
            buf.fill(b"kept").unwrap();
            qp.try_post_recv_buffer(buf).err()
        })
        .expect("a receive queue of 2 refuses one of 8 receives");
    assert_eq!(err.error.errno(), Some(libc::ENOMEM), "{}", err.error);
    assert!(err.error.to_string().contains("the work queue is full"), "{}", err.error);
    assert_eq!(err.buffer.unwrap().as_slice(), b"kept");
}

/// A `RecvBufferList` longer than the receive queue: rxe takes what fits and names the first WR it
/// refused, which stays in the list with the rest; each receive it took then lands a SEND.
#[test]
fn a_receive_list_on_a_short_queue_keeps_what_did_not_fit_and_the_rest_receive() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 64);
    let pool = lo.pool(16, 256);
    let (a, b) = lo.rc_pair(2, AccessFlags::empty());
    let mut list = RecvBufferList::with_capacity(8);
    for _ in 0..8 {
        list.push(pool.take().unwrap()).unwrap();
    }
    let err = b.post_recv_buffers(&mut list).unwrap_err();
    assert_eq!(err.errno(), Some(libc::ENOMEM), "{err}");
    let taken = 8 - list.len();
    // (Providers may round the queue up past the capacity asked for.)
    assert!((2..8).contains(&taken), "a queue of 2 took {taken} of 8");
    drop(list);
    for i in 0..taken as u8 {
        let mut buf = pool.take().unwrap();
        buf.fill(&[i; 100]).unwrap();
        a.post_send_buffer(buf, SendOp::Send).unwrap();
        for mut wc in wait_for(&lo.cq, 2) {
            assert!(wc.is_success(), "{wc:?}");
            let recv = wc.opcode() == WcOpcode::RECV;
            let buf = pool.complete(&mut wc).expect("a buffer of the pool");
            assert!(!recv || buf.as_slice() == [i; 100], "message {i}");
        }
    }
    let all: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(all.len(), 16, "every buffer came back");
}

/// Eight RDMA WRITEs, only the last signaled, posted as one list (one `ibv_post_send`) and
/// then one at a time through the list's chain (`post_send_buffer_chained`): the signaled
/// completion frees all eight, and the data landed.
#[test]
fn a_send_list_or_its_chain_signals_the_last_and_frees_them_all() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let pool = lo.pool(8, 1024);
    let target = lo.write_target(8 * 1024);
    let remote_access = AccessFlags::REMOTE_WRITE;
    let (a, b) = lo.rc_pair(8, remote_access);

    let mut list = SendBufferList::with_capacity(8);
    for chained in [false, true] {
        for i in 0..8u8 {
            let mut buf = pool.take().unwrap();
            buf.fill(&[i + u8::from(chained); 1024]).unwrap();
            let op = SendOp::RdmaWrite(target.remote(usize::from(i) * 1024..).unwrap());
            match chained {
                true => a.post_send_buffer_chained(&mut list, buf, op, i == 7).unwrap(),
                false => list.push(buf, op).unwrap(),
            }
        }
        assert!(pool.take().is_none(), "all 8 buffers are in the list or in flight");
        if !chained {
            a.post_send_buffers(&mut list, true).unwrap();
        }
        assert!(list.is_empty());

        let mut wcs = wait_for(&lo.cq, 1);
        assert!(wcs[0].is_success(), "{wcs:?}");
        let last = pool.complete(&mut wcs[0]).expect("the signaled last WR names its buffer");
        assert_eq!(last.as_slice(), &[7 + u8::from(chained); 1024][..]);
        drop(last);
        // The seven unsignaled ones came back with it.
        let free: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
        assert_eq!(free.len(), 8, "chained: {chained}");
        let mut written = vec![0u8; 8 * 1024];
        target.read(0, &mut written).unwrap();
        for (i, chunk) in written.chunks(1024).enumerate() {
            let want = i + usize::from(chained);
            assert!(chunk.iter().all(|&b| usize::from(b) == want), "chunk {i}, chained: {chained}");
        }
        assert!(
            lo.cq.poll(&mut [WorkCompletion::EMPTY; 4]).unwrap().is_empty(),
            "only the last WR was signaled"
        );
    }
    drop(b);
}

#[test]
fn raw_lists_post_many_receives_with_one_call_and_many_sends_with_one_doorbell() {
    let Some(ctx) = require_device(RXE) else { return };
    let lo = Loopback::new(&ctx, 16);
    let mr = lo.region(8 * 64);
    let (a, b) = lo.rc_pair(8, AccessFlags::empty());
    let recv: Vec<_> = (4..8).map(|i| [mr.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
    let mut recvs: RecvWrList<'_> =
        recv.iter().zip(10..).map(|(s, id)| RecvWr::new(id, s)).collect();
    // SAFETY: the receive areas are not touched until their completions.
    unsafe { b.post_recv_wrs(&mut recvs).unwrap() };
    let send: Vec<_> = (0..4).map(|i| [mr.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
    let mut wrs: Vec<_> =
        send.iter().enumerate().map(|(i, sge)| SendWr::send(i as u64, sge)).collect();
    wrs[3] = SendWr::send(3, &send[3]).flags(SendFlags::SIGNALED);
    let mut wrs = SendWrList::from(wrs);
    // SAFETY: the send areas are not written until the signaled last send completes.
    unsafe { a.post_send_wrs(&mut wrs).unwrap() };
    let wcs = wait_for(&lo.cq, 5);
    let mut ids: Vec<_> = wcs.iter().map(|wc| (wc.wr_id(), wc.status())).collect();
    ids.sort_by_key(|x| x.0);
    let ok = WcStatus::SUCCESS;
    assert_eq!(
        ids,
        [(3, ok), (10, ok), (11, ok), (12, ok), (13, ok)],
        "one send completion, four receives"
    );
}

/// rxe frees a send-queue slot as soon as its kernel has completed the WR, so a QP with
/// `max_send_wr` 1 on a CQ of 1 takes any number of posts: 1,024 signaled buffer sends
/// overran the CQ (1,023 completions and their buffers lost, the QP still in RTS, a
/// `CQ_ERR` async event the only sign). The buffer tier refuses every post past the CQ's
/// room until the completion is polled and its buffer handed back.
#[test]
fn a_cq_of_one_refuses_unpolled_sends_past_its_room_instead_of_overrunning() {
    let Some(ctx) = require_device(RXE) else { return };
    let events = ctx.async_events().unwrap();
    let lo = Loopback::new(&ctx, 1);
    let room = lo.cq.capacity() as usize;
    let pool = lo.pool(room + 1, 64);
    let target = lo.write_target(64);
    let cap = QpCapabilities { max_send_wr: 1, max_recv_wr: 0, ..Default::default() };
    let attr = QpInitAttr { cap, ..QpInitAttr::new(&lo.cq) };
    let (a, _b) = lo.pair::<Rc>(&attr, AccessFlags::REMOTE_WRITE);
    let write = SendOp::RdmaWrite(target.remote(..).unwrap());
    let mut refused = 0;
    for _ in 0..1024 {
        match a.try_post_send_buffer(pool.take().unwrap(), write) {
            Ok(()) => {}
            Err(e) => {
                assert!(matches!(e.error, Error::CompletionsDue { .. }), "{}", e.error);
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 1024 - room, "a CQ of {room}");
    for mut wc in wait_for(&lo.cq, room) {
        assert!(wc.is_success(), "{wc:?}");
        drop(pool.complete(&mut wc).expect("a buffer of the pool"));
    }
    let free: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(free.len(), room + 1, "every buffer came back");
    assert_eq!(a.query_state().unwrap(), QueuePairState::RTS);
    let overrun = events.next(Some(std::time::Duration::from_millis(500))).unwrap();
    assert!(overrun.is_none(), "no async event: {overrun:?}");
}

/// Raw-tier WRs are not counted, so a program can overrun a CQ with them; rxe then drops the
/// completions that did not fit, with an `IBV_EVENT_CQ_ERR` async event. Once that event is
/// read, the CQ's next poll that finds nothing says so: the program learns of the loss where
/// it polls.
#[test]
fn a_raw_tier_overrun_fails_the_cqs_next_empty_poll() {
    let Some(ctx) = require_device(RXE) else { return };
    let events = ctx.async_events().unwrap();
    let lo = Loopback::new(&ctx, 1);
    let room = lo.cq.capacity() as u64;
    let (target, mr) = (lo.write_target(64), lo.region(64));
    let cap = QpCapabilities { max_send_wr: 1, max_recv_wr: 0, ..Default::default() };
    let attr = QpInitAttr { cap, ..QpInitAttr::new(&lo.cq) };
    let (a, _b) = lo.pair::<Rc>(&attr, AccessFlags::REMOTE_WRITE);
    let sge = [mr.sge(..).unwrap()];
    let remote = target.remote(..).unwrap();
    let start = std::time::Instant::now();
    for id in 0..room + 3 {
        let mut wr = SendWr::rdma_write(id, &sge, remote).flags(SendFlags::SIGNALED);
        // rxe frees the one slot once its kernel completed the WR before.
        // SAFETY: `mr` stays registered and unwritten while the QP lives.
        while let Err(e) = unsafe { a.post_send_wr(&mut wr) } {
            assert!(matches!(e, Error::WorkQueueFull { .. }), "{e}");
            assert!(start.elapsed() < std::time::Duration::from_secs(30), "{e}");
            std::thread::yield_now();
        }
    }
    let event = events.next(Some(std::time::Duration::from_secs(30))).unwrap();
    assert_eq!(event, Some(AsyncEvent::CqError(lo.cq.id())));
    let mut wcs = [WorkCompletion::EMPTY; 8];
    let mut polled = 0;
    let err = loop {
        match lo.cq.poll(&mut wcs) {
            Ok(got) => polled += got.len() as u64,
            Err(e) => break e,
        }
        assert!(start.elapsed() < std::time::Duration::from_secs(60), "no poll reported it");
    };
    assert!(matches!(err, Error::CompletionQueueOverrun), "{err}");
    assert!(polled <= room, "{polled} completions from a CQ of {room}");
}
