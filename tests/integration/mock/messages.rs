//! Error messages as reporters show them: each error of a `source()` chain says its own part,
//! and none repeats another's (anyhow's `{:#}` and eyre's reports print each once).

use rdma_verbs::{
    AccessFlags, BufferPool, Error, QpInitAttr, RecvWr, RecvWrList, Sge, ToInitAttr,
    TransitionError,
};
use rdma_verbs_mock::Verb;

use super::Fixture;

/// The messages of `err`'s chain, asserted to be `len` long, none empty and none holding a
/// later one's.
#[track_caller]
fn assert_each_cause_once(err: &dyn std::error::Error, len: usize) -> Vec<String> {
    let chain: Vec<String> =
        std::iter::successors(Some(err), |&e| e.source()).map(ToString::to_string).collect();
    assert_eq!(chain.len(), len, "{chain:?}");
    for (i, outer) in chain.iter().enumerate() {
        assert!(!outer.is_empty(), "{chain:?}");
        for inner in &chain[i + 1..] {
            assert!(!outer.contains(inner.as_str()), "{outer:?} repeats its cause {inner:?}");
        }
    }
    chain
}

#[test]
fn every_error_of_a_chain_says_its_own_part_once() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let other = f.ctx.alloc_pd().unwrap();
    let cq = f.ctx.create_cq(32).unwrap();
    let pool = BufferPool::new(pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap(), 64).unwrap();
    let foreign =
        BufferPool::new(other.register(4096, AccessFlags::LOCAL_WRITE).unwrap(), 64).unwrap();
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();

    // A verb's error, then the QP handed back with it.
    f.mock.fail(Verb::ModifyQp, libc::EINVAL);
    let TransitionError { qp, error } = qp.try_into_init(&ToInitAttr::default()).unwrap_err();
    let chain = assert_each_cause_once(&error, 2);
    assert_eq!(chain[1], std::io::Error::from_raw_os_error(libc::EINVAL).to_string());
    f.mock.fail(Verb::ModifyQp, libc::EINVAL);
    let failed = qp.try_into_init(&ToInitAttr::default()).unwrap_err();
    let chain = assert_each_cause_once(&failed, 3);
    assert_eq!(chain[1], failed.error.to_string());
    let qp = failed.qp.into_init(&ToInitAttr::default()).unwrap();

    // A refused buffer, handed back: its error has no source.
    let failed = qp.try_post_recv_buffer(foreign.take().unwrap()).unwrap_err();
    assert_each_cause_once(&failed, 2);
    assert!(failed.buffer.is_some());

    // A full receive queue, in a raw list post and in a buffer post.
    let region = pd.register(64, AccessFlags::LOCAL_WRITE).unwrap();
    let sge: [Sge; 1] = [region.sge(..).unwrap()];
    let mut list: RecvWrList<'_> = [RecvWr::new(1, &sge)].into_iter().collect();
    f.mock.fill_receive_queue_at(0);
    // SAFETY: refused by the provider: nothing is posted.
    let failed = unsafe { qp.post_recv_wrs(&mut list) }.unwrap_err();
    assert_each_cause_once(&failed, 3);
    let full = Error::from(failed);
    assert!(matches!(full, Error::WorkQueueFull { .. }), "{full:?}");
    f.mock.fill_receive_queue_at(0);
    let failed = qp.try_post_recv_buffer(pool.take().unwrap()).unwrap_err();
    assert_each_cause_once(&failed, 3);
    assert!(failed.buffer.is_some());
    drop(qp);

    // A boxed error (what `?` makes of it in `main`) keeps the chain.
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(failed.error);
    assert_each_cause_once(boxed.as_ref(), 2);
}

/// rdma_cm's connect error hands the QP back, saying only that.
#[cfg(feature = "rdmacm")]
#[test]
fn a_connect_error_says_its_own_part_once() {
    use rdma_verbs::cm::ConnectError;
    use rdma_verbs::{QpAttrMask, Rc};

    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(32);
    let qp = pd.create_qp::<Rc>(&QpInitAttr::new(&cq)).unwrap();
    let reset = rdma_verbs::sys::ibv_qp_attr::default();
    let qp = qp.modify_raw(&reset, QpAttrMask::STATE).unwrap();
    let error = Error::Verb {
        verb: "rdma_connect",
        source: std::io::Error::from_raw_os_error(libc::ETIMEDOUT),
        hint: None,
    };
    let failed = ConnectError { qp, error, rejection: None };
    assert_each_cause_once(&failed, 3);
}
