//! The safe owned-buffer tier on rxe0.

use rdma_verbs::*;

use super::pair::{connect, qp_in_init, wait_for};
use crate::common::{require_device, RXE};

#[test]
fn buffers_move_in_on_post_and_come_back_with_their_bytes() {
    let Some(ctx) = require_device(RXE) else { return };
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let pool =
        BufferPool::new(pd.register(16 * 4096, AccessFlags::LOCAL_WRITE).unwrap(), 4096).unwrap();
    assert_eq!((pool.count(), pool.chunk_size()), (16, 4096));
    let (a, b) = connect(
        &ctx,
        qp_in_init(&pd, &cq, 8, AccessFlags::empty()),
        qp_in_init(&pd, &cq, 8, AccessFlags::empty()),
    );

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
    for mut wc in wait_for(&cq, 8) {
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
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let pool =
        BufferPool::new(pd.register(8 * 256, AccessFlags::LOCAL_WRITE).unwrap(), 256).unwrap();
    let qp = qp_in_init(&pd, &cq, 2, AccessFlags::empty());
    // Providers may round the queue up past the reported capacity: fill it until refused.
    let err = (0..pool.count())
        .find_map(|_| {
            let mut buf = pool.take().unwrap();
            buf.fill(b"kept").unwrap();
            qp.post_recv_buffer(buf).err()
        })
        .expect("a receive queue of 2 refuses one of 8 receives");
    assert_eq!(err.error.errno(), Some(libc::ENOMEM), "{}", err.error);
    assert!(err.to_string().contains("the work queue is full"), "{err}");
    assert_eq!(err.buffer.as_slice(), b"kept");
}
