//! Creating PDs, MRs, CQs and QPs: what reaches the provider, and each verb's errors.

use rdma_verbs::{AccessFlags, InvalidInputKind, QpCapabilities, QpInitAttr};
use rdma_verbs_mock::{Call, ContextConfig, Optional, Verb};
use rdma_verbs_sys::{IBV_ACCESS_LOCAL_WRITE, IBV_QPT_RC};

use super::{assert_unsupported, assert_verb_error, open, Fixture};

#[test]
fn alloc_pd_errors() {
    let f = Fixture::new();
    f.mock.fail(Verb::AllocPd, libc::ENOMEM);
    assert_verb_error(&f.ctx.alloc_pd().unwrap_err(), "ibv_alloc_pd", libc::ENOMEM, &[]);
    // NULL without errno: a provider that forgot to set it is reported as EIO, not success.
    f.mock.fail(Verb::AllocPd, 0);
    assert_verb_error(&f.ctx.alloc_pd().unwrap_err(), "ibv_alloc_pd", libc::EIO, &[]);
    f.mock.fail(Verb::AllocPd, libc::EOPNOTSUPP);
    assert_unsupported(&f.ctx.alloc_pd().unwrap_err(), "ibv_alloc_pd");
    assert!(f.ctx.alloc_pd().is_ok(), "a failure hits one call only");
}

#[test]
fn register_uses_reg_mr_iova2_at_the_buffer_address_when_the_library_has_it() {
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::RELAXED_ORDERING;
    let mut bytes = vec![0u8; 4096];
    let addr = bytes.as_ptr() as usize;

    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    f.mock.take_calls();
    let mr = pd.register(&mut bytes[..], access).unwrap();
    assert_eq!(mr.addr(), addr as u64);
    let iova = addr as u64;
    let call = Call::RegMrIova2 { addr, length: 4096, iova, access: access.bits() };
    assert_eq!(f.mock.take_calls(), [call]);
    assert_ne!(mr.lkey().get(), mr.rkey().get());
    drop(mr);

    // Before rdma-core v28: ibv_reg_mr, without the optional (ordering) bit.
    let old = open(&f.mock, Optional::NONE, ContextConfig::default());
    let pd = old.alloc_pd().unwrap();
    f.mock.take_calls();
    let _mr = pd.register(&mut bytes[..], access).unwrap();
    let access = IBV_ACCESS_LOCAL_WRITE as i32;
    assert_eq!(f.mock.take_calls(), [Call::RegMr { addr, length: 4096, access }]);
}

#[test]
fn register_errors_explain_the_locked_memory_limit() {
    let memlock = ["RLIMIT_MEMLOCK is", "ulimit -l unlimited"];
    for (optional, verb) in [(Optional::ALL, Verb::RegMrIova2), (Optional::NONE, Verb::RegMr)] {
        let f = Fixture::with(optional, ContextConfig::default());
        let pd = f.ctx.alloc_pd().unwrap();
        for (errno, hint) in [
            (libc::ENOMEM, &memlock[..]),
            (libc::EPERM, &memlock[..]),
            (libc::EAGAIN, &memlock[..]),
            (libc::EINVAL, &[][..]),
            (libc::EACCES, &[][..]),
            (libc::EFAULT, &[][..]),
        ] {
            f.mock.fail(verb, errno);
            let err = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap_err();
            assert_verb_error(&err, "ibv_reg_mr", errno, hint);
        }
        let calls = f.mock.take_calls();
        let registrations =
            calls.iter().filter(|c| matches!(c, Call::RegMr { .. } | Call::RegMrIova2 { .. }));
        assert_eq!(registrations.count(), 6, "each attempt reached the provider once");
    }
}

#[test]
fn register_refuses_before_the_provider_what_it_checks_itself() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    f.mock.take_calls();
    let err = pd.register(4096, AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Access), "{err:?}");
    let err = pd.register_remote_writable(4096, AccessFlags::REMOTE_WRITE).unwrap_err();
    assert!(err.to_string().contains("lacks LOCAL_WRITE"), "{err}");
    assert_eq!(f.mock.take_calls(), []);
}

#[test]
fn create_cq_reports_the_provider_size_and_errors() {
    let f = Fixture::new();
    let cq = f.ctx.create_cq(10).unwrap();
    assert_eq!(cq.capacity(), 16, "the provider rounded the size up");
    assert_eq!(f.mock.take_calls(), [Call::CreateCq { cqe: 10, channel: false, comp_vector: 0 }]);
    // Above the device's max_cqe (4096): the provider refuses.
    assert_verb_error(&f.ctx.create_cq(5000).unwrap_err(), "ibv_create_cq", libc::EINVAL, &[]);
    f.mock.fail(Verb::CreateCq, libc::ENOMEM);
    assert_verb_error(&f.ctx.create_cq(16).unwrap_err(), "ibv_create_cq", libc::ENOMEM, &[]);
    let err = f.ctx.create_cq(0).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Size), "{err:?}");
}

#[test]
fn create_rc_qp_passes_the_attributes_and_keeps_the_provider_capabilities() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(32);
    f.mock.take_calls();
    let cap = QpCapabilities {
        max_send_wr: 5,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let attr = QpInitAttr { cap, sq_sig_all: true, ..QpInitAttr::new(&cq) };
    let qp = pd.create_rc_qp(&attr).unwrap();
    let call = Call::CreateQp {
        qp_type: IBV_QPT_RC,
        sq_sig_all: 1,
        max_send_wr: 5,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    // The device's limits, queried once for the context, are checked first.
    assert_eq!(f.mock.take_calls(), [Call::QueryDevice, call]);
    assert_eq!(qp.caps(), QpCapabilities { max_send_wr: 8, ..cap }, "what the provider allocated");
}

#[test]
fn create_rc_qp_errors_and_the_capability_hint() {
    let f = Fixture::new();
    let (pd, cq) = f.pd_and_cq(2048);
    f.mock.fail(Verb::CreateQp, libc::ENOMEM);
    let err = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap_err();
    assert_verb_error(&err, "ibv_create_qp", libc::ENOMEM, &[]);

    // Above the device's max_qp_wr (1024): refused before the provider, naming the field, the
    // limit and the device's value.
    let cap = QpCapabilities { max_send_wr: 2000, ..QpCapabilities::default() };
    let attr = QpInitAttr { cap, ..QpInitAttr::new(&cq) };
    f.mock.take_calls();
    let err = pd.create_rc_qp(&attr).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::DeviceLimit), "{err:?}");
    assert_eq!(
        err.to_string(),
        "max_send_wr 2000 is above the device's max_qp_wr 1024 (ibv_query_device): ask for at \
         most 1024"
    );
    assert_eq!(f.mock.take_calls(), [], "the limits were queried once, by the first creation");

    // What the device does not report (an inline limit) is the provider's to refuse: the hint
    // says what was asked and what the device allows.
    f.mock.fail(Verb::CreateQp, libc::EINVAL);
    let cap = QpCapabilities { max_inline_data: 1 << 20, ..QpCapabilities::default() };
    let err = pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) }).unwrap_err();
    let asked =
        "max_send_wr 1, max_recv_wr 16, max_send_sge 1, max_recv_sge 1, max_inline_data 1048576";
    let limits = "device limits: max_qp_wr 1024, max_sge 4";
    assert_verb_error(&err, "ibv_create_qp", libc::EINVAL, &[asked, limits]);
    assert!(matches!(f.mock.take_calls()[..], [Call::CreateQp { .. }, Call::QueryDevice]));

    f.mock.fail(Verb::CreateQp, libc::EINVAL);
    f.mock.fail(Verb::QueryDevice, libc::EIO);
    let err = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap_err();
    assert_verb_error(&err, "ibv_create_qp", libc::EINVAL, &["could not be queried"]);
}

#[test]
fn create_rc_qp_refuses_a_cq_of_another_context_before_the_provider() {
    let f = Fixture::new();
    let other = open(&f.mock, Optional::ALL, ContextConfig::default());
    let pd = f.ctx.alloc_pd().unwrap();
    let foreign = other.create_cq(16).unwrap();
    f.mock.take_calls();
    let err = pd.create_rc_qp(&QpInitAttr::new(&foreign)).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::OtherContext), "{err:?}");
    assert_eq!(f.mock.take_calls(), []);
}

#[test]
fn create_qp_refuses_a_cq_too_small_for_its_work_requests_before_the_provider() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    // The mock rounds CQ sizes to a power of two: 16 entries.
    let (cq, other) = (f.ctx.create_cq(16).unwrap(), f.ctx.create_cq(16).unwrap());
    f.mock.take_calls();
    // One CQ for both queues: the default 1 send + 16 receives do not fit 16.
    let err = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::CqTooSmall), "{err:?}");
    assert_eq!(
        err.to_string(),
        "the CQ holds 16 completions but this QP can have 17 work requests outstanding on it \
         (max_send_wr 1 + max_recv_wr 16): create the CQ with at least 17 entries or lower the \
         QP's capacities"
    );
    // Separate CQs: each is checked against its own queue.
    let cap = QpCapabilities { max_send_wr: 17, max_recv_wr: 16, ..QpCapabilities::default() };
    let split = QpInitAttr { recv_cq: &other, cap, ..QpInitAttr::new(&cq) };
    let err = pd.create_rc_qp(&split).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the send CQ holds 16 completions but this QP can have 17 work requests outstanding on \
         it (max_send_wr 17): create the CQ with at least 17 entries or lower the QP's \
         capacities"
    );
    let cap = QpCapabilities { max_send_wr: 16, max_recv_wr: 17, ..cap };
    let err = pd.create_rc_qp(&QpInitAttr { cap, ..split }).unwrap_err();
    assert!(err.to_string().starts_with("the receive CQ holds 16 completions"), "{err}");
    // Only the device's limits were queried (once): no QP was asked of the provider.
    assert_eq!(f.mock.take_calls(), [Call::QueryDevice], "refused before the provider");
    // Exactly full is enough.
    let cap = QpCapabilities { max_send_wr: 16, max_recv_wr: 16, ..cap };
    drop(pd.create_rc_qp(&QpInitAttr { cap, ..split }).unwrap());
    let cap = QpCapabilities { max_send_wr: 1, max_recv_wr: 15, ..cap };
    drop(pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) }).unwrap());
}
