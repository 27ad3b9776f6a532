//! The extended verbs and their fallback: which path a CQ and a QP take for each
//! provider, the calls a batch of work requests and a poll make on the extended path, and a
//! missing member or `EOPNOTSUPP` surfacing as `Unsupported` naming it.

use std::net::Ipv6Addr;

use rdma_verbs::{
    AccessFlags, BufferPool, CompletionQueue, Context, CqAttr, Endpoint, Error, Gid,
    InvalidInputKind, LKey, Lid, MemoryRegion, Mtu, ProtectionDomain, Psn, QpCapabilities,
    QpInitAttr, Qpn, QueuePair, RKey, RemoteAddr, Reset, Rts, SendBufferList, SendFlags, SendOp,
    SendWr, SendWrList, Sge, ToInitAttr, ToRtrAttr, ToRtsAttr, VerbsPath, WcOpcode, WcStatus,
    WorkCompletion,
};
use rdma_verbs_mock::{self as mock, Call, ContextConfig, Mock, Optional, Verb, CORE_CLOCK_KHZ};
use rdma_verbs_sys as sys;

use super::{assert_queue_full, assert_unsupported, assert_verb_error, open, Fixture};

/// A provider with the extended CQ and QP (like rxe).
fn extended() -> Fixture {
    Fixture::with(Optional::ALL, ContextConfig::extended_verbs())
}

/// `extended()` whose device has completion timestamps.
fn timestamping() -> Fixture {
    let config = ContextConfig { completion_timestamps: true, ..ContextConfig::extended_verbs() };
    Fixture::with(Optional::ALL, config)
}

/// CQ attributes that ask for completion timestamps.
fn stamped() -> CqAttr<'static> {
    CqAttr { timestamps: true, ..CqAttr::default() }
}

/// A provider that looks like rxe (its `vendor_id`) with the extended CQ and QP and
/// completion timestamps (which real rxe lacks: so its polling sessions can be watched),
/// under a libibverbs of rdma-core `release`.
fn rxe(release: &str) -> Fixture {
    let mock = Mock::new();
    let raw = mock.context(ContextConfig {
        vendor_id: mock::RXE_VENDOR_ID,
        completion_timestamps: true,
        ..ContextConfig::extended_verbs()
    });
    let lib = mock::library_with_release(Optional::ALL, release);
    // SAFETY: a fresh context of the mock library, dropped before the mock (field order).
    let ctx = unsafe { Context::from_raw(lib, raw, mock::DEVICE_NAME.into()) };
    Fixture { ctx, mock }
}

/// `extended()` whose extended CQs and QPs leave `member` NULL.
fn lacking(member: &'static str) -> Fixture {
    let config = ContextConfig { missing_member: Some(member), ..ContextConfig::extended_verbs() };
    Fixture::with(Optional::ALL, config)
}

fn forced(path: VerbsPath) -> CqAttr<'static> {
    CqAttr { verbs_path: Some(path), ..CqAttr::default() }
}

/// An RC QP on `cq` with room for 16 sends of 2 SGEs and 64 inline bytes, taken to RTS
/// towards a RoCE peer.
fn rts_qp<'a>(pd: &'a ProtectionDomain<'a>, cq: &'a CompletionQueue<'a>) -> QueuePair<'a, Rts> {
    towards(new_qp(pd, cq), Qpn::new(0x12).unwrap())
}

/// Runs `body` with an RC QP of `f` taken to RTS as [`rts_qp`] does (on a CQ of 32 entries),
/// and a registered 4 KiB region to post from.
fn with_rts_qp<R>(
    f: &Fixture,
    body: impl FnOnce(&QueuePair<'_, Rts>, &MemoryRegion<'_>) -> R,
) -> R {
    let cq = f.ctx.create_cq(32).unwrap();
    let pd = f.ctx.alloc_pd().unwrap();
    let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = rts_qp(&pd, &cq);
    body(&qp, &mr)
}

/// An RC QP on `cq` with room for 16 sends of 2 SGEs and 64 inline bytes.
fn new_qp<'a>(pd: &'a ProtectionDomain<'a>, cq: &'a CompletionQueue<'a>) -> QueuePair<'a, Reset> {
    let cap = QpCapabilities {
        max_send_wr: 16,
        max_send_sge: 2,
        max_inline_data: 64,
        ..Default::default()
    };
    pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(cq) }).unwrap()
}

/// `qp` taken to RTS towards QP `peer` of a RoCE peer (a QP of this mock is its loopback peer).
fn towards(qp: QueuePair<'_, Reset>, peer: Qpn) -> QueuePair<'_, Rts> {
    let gid = Gid::from("::ffff:192.0.2.9".parse::<Ipv6Addr>().unwrap());
    let peer = Endpoint { lid: Lid::new(0), qpn: peer, psn: Psn::new(1).unwrap(), gid };
    let qp = qp.into_init(&ToInitAttr::default()).unwrap();
    // Index 3 of the mock port's GID table is its RoCE v2 IPv4-mapped entry.
    let qp = qp.into_rtr(&ToRtrAttr::to_endpoint(&peer, 1, Some(3), Mtu::MTU_1024)).unwrap();
    qp.into_rts(&ToRtsAttr::new(Psn::new(1).unwrap())).unwrap()
}

const RC_OPS: u64 = (sys::IBV_QP_EX_WITH_SEND
    | sys::IBV_QP_EX_WITH_SEND_WITH_IMM
    | sys::IBV_QP_EX_WITH_RDMA_WRITE
    | sys::IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM
    | sys::IBV_QP_EX_WITH_RDMA_READ) as u64;

#[test]
fn a_provider_without_the_extended_ops_gets_legacy_cqs_and_qps() {
    let f = Fixture::new();
    let cq = f.ctx.create_cq(32).unwrap();
    let pd = f.ctx.alloc_pd().unwrap();
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    assert_eq!((cq.verbs_path(), qp.verbs_path()), (VerbsPath::Legacy, VerbsPath::Legacy));
    assert_eq!((cq.as_raw_ex(), qp.as_raw_ex()), (None, None));
    let calls = f.mock.take_calls();
    assert!(matches!(calls[0], Call::CreateCq { cqe: 32, .. }), "{calls:?}");
    // The device's limits, queried once, are checked before the QP is created.
    assert!(matches!(calls[2..], [Call::QueryDevice, Call::CreateQp { .. }]), "{calls:?}");
    // Forcing the extended verbs names what is missing.
    let err = f.ctx.create_cq_with(16, &forced(VerbsPath::Extended)).unwrap_err();
    assert_unsupported(&err, "ibv_create_cq_ex");
    let attr = QpInitAttr { verbs_path: Some(VerbsPath::Extended), ..QpInitAttr::new(&cq) };
    assert_unsupported(&pd.create_rc_qp(&attr).unwrap_err(), "ibv_create_qp_ex");
}

#[test]
fn a_provider_with_them_gets_extended_ones_asking_for_what_the_device_allows() {
    let f = extended();
    let cq = f.ctx.create_cq(32).unwrap();
    let pd = f.ctx.alloc_pd().unwrap();
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    assert_eq!((cq.verbs_path(), qp.verbs_path()), (VerbsPath::Extended, VerbsPath::Extended));
    assert_eq!(cq.as_raw_ex().map(|c| c.cast()), Some(cq.as_raw()));
    let calls = f.mock.take_calls();
    let standard = u64::from(sys::IBV_WC_STANDARD_FLAGS);
    assert_eq!(
        calls[0],
        Call::CreateCqEx { cqe: 32, channel: false, comp_vector: 0, wc_flags: standard }
    );
    // The mock device has no atomics and no memory windows: SEND, WRITE, READ only.
    let create = Call::CreateQpEx {
        qp_type: sys::IBV_QPT_RC,
        comp_mask: sys::IBV_QP_INIT_ATTR_PD | sys::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
        send_ops_flags: RC_OPS,
    };
    assert_eq!(calls[2..], [Call::QueryDevice, create]);
    // Forcing the legacy verbs skips them.
    let legacy = f.ctx.create_cq_with(32, &forced(VerbsPath::Legacy)).unwrap();
    let attr = QpInitAttr { verbs_path: Some(VerbsPath::Legacy), ..QpInitAttr::new(&legacy) };
    let qp = pd.create_rc_qp(&attr).unwrap();
    assert_eq!((legacy.verbs_path(), qp.verbs_path()), (VerbsPath::Legacy, VerbsPath::Legacy));
    let calls = f.mock.take_calls();
    assert!(matches!(calls[..], [Call::CreateCq { .. }, Call::CreateQp { .. }]), "{calls:?}");
}

#[test]
fn eopnotsupp_from_the_extended_create_verbs_falls_back_unless_forced() {
    let f = extended();
    f.mock.fail(Verb::CreateCqEx, libc::EOPNOTSUPP);
    let cq = f.ctx.create_cq(32).unwrap();
    assert_eq!(cq.verbs_path(), VerbsPath::Legacy);
    let pd = f.ctx.alloc_pd().unwrap();
    f.mock.take_calls();
    f.mock.fail(Verb::CreateQpEx, libc::EOPNOTSUPP);
    let qp = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap();
    assert_eq!(qp.verbs_path(), VerbsPath::Legacy);
    let calls = f.mock.take_calls();
    assert!(
        matches!(calls[..], [Call::QueryDevice, Call::CreateQpEx { .. }, Call::CreateQp { .. }]),
        "{calls:?}"
    );
    f.mock.fail(Verb::CreateCqEx, libc::EOPNOTSUPP);
    let err = f.ctx.create_cq_with(16, &forced(VerbsPath::Extended)).unwrap_err();
    assert_unsupported(&err, "ibv_create_cq_ex");
    // Other errors are errors on either path, not a reason to fall back.
    f.mock.fail(Verb::CreateQpEx, libc::ENOMEM);
    let err = pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap_err();
    assert_verb_error(&err, "ibv_create_qp_ex", libc::ENOMEM, &[]);
}

#[test]
fn without_ibv_qp_to_qp_ex_the_qp_posts_through_ibv_post_send_or_is_refused_when_forced() {
    let f = Fixture::with(
        Optional { qp_to_qp_ex: false, ..Optional::ALL },
        ContextConfig::extended_verbs(),
    );
    let cq = f.ctx.create_cq(32).unwrap();
    let pd = f.ctx.alloc_pd().unwrap();
    assert_eq!(rts_qp(&pd, &cq).verbs_path(), VerbsPath::Legacy);
    f.mock.take_calls();
    let attr = QpInitAttr { verbs_path: Some(VerbsPath::Extended), ..QpInitAttr::new(&cq) };
    assert_unsupported(&pd.create_rc_qp(&attr).unwrap_err(), "ibv_qp_to_qp_ex (rdma-core v24+)");
    let calls = f.mock.take_calls();
    assert!(matches!(calls[..], [Call::CreateQpEx { .. }, Call::DestroyQp]), "{calls:?}");
}

/// The calls of posting, on `f`'s extended QP, a list with a WR of two SGEs and one of two
/// inline buffers between WRs of one.
fn multi_sge_list_calls(f: &Fixture) -> Vec<Call> {
    with_rts_qp(f, |qp, mr| {
        assert_eq!(qp.verbs_path(), VerbsPath::Extended);
        f.mock.take_calls();
        let (one, two) = ([mr.sge(..64).unwrap()], [mr.sge(..8).unwrap(), mr.sge(8..24).unwrap()]);
        let bytes = [7u8; 24];
        // Inline SGEs name CPU memory (`bytes`, alive and unchanged during the post).
        let inline = [
            Sge::new(bytes.as_ptr() as u64, 8, LKey::new(0)),
            Sge::new(bytes[8..].as_ptr() as u64, 16, LKey::new(0)),
        ];
        let remote = RemoteAddr { addr: 0x10_0000, rkey: RKey::new(7) };
        let mut wrs = SendWrList::from(vec![
            SendWr::send(1, &one),
            SendWr::rdma_write_with_imm(2, &two, remote, 9),
            SendWr::rdma_read(3, &one, remote).flags(SendFlags::SIGNALED),
            SendWr::send(4, &[]).flags(SendFlags::SIGNALED | SendFlags::INLINE),
            SendWr::send(5, &inline).flags(SendFlags::INLINE),
        ]);
        // SAFETY: the mock provider never touches the registered memory; inline bytes as above.
        unsafe { qp.post_send_wrs(&mut wrs) }.unwrap();
        f.mock.take_calls()
    })
}

#[test]
fn a_batch_is_one_wr_start_its_builders_and_one_wr_complete_around_multi_sge_posts_where_rxe_needs_them(
) {
    let build =
        |builder, wr_id, flags: SendFlags| Call::WrBuild { builder, wr_id, wr_flags: flags.bits() };
    let data = |setter, bytes| Call::WrData { setter, bytes };
    let inline = SendFlags::INLINE;
    let head = [Call::WrStart, build("wr_send", 1, SendFlags::empty()), data("wr_set_sge", 64)];
    let read = [build("wr_rdma_read", 3, SendFlags::SIGNALED), data("wr_set_sge", 64)];
    let empty_inline =
        [build("wr_send", 4, SendFlags::SIGNALED | inline), data("wr_set_inline_data", 0)];
    // Where the list setters count right (not rxe; rxe with PRs 1744 and 1751: 64.0, and
    // the stable 44.12): one batch.
    let one_batch = [
        &head[..],
        &[build("wr_rdma_write_imm", 2, SendFlags::empty()), data("wr_set_sge_list", 24)],
        &read,
        &empty_inline,
        &[build("wr_send", 5, inline), data("wr_set_inline_data_list", 24), Call::WrComplete],
    ]
    .concat();
    let counting_right: [&dyn Fn() -> Fixture; 3] = [&extended, &|| rxe("64.0"), &|| rxe("44.12")];
    for make in counting_right {
        assert_eq!(multi_sge_list_calls(&make()), one_batch);
    }
    // rxe without them (Debian's 33.2, 44.0, 56.1): several SGEs through ibv_post_send,
    // between batches.
    let around = [
        &head[..],
        &[Call::WrComplete, Call::PostSend { wr_ids: vec![2] }, Call::WrStart],
        &read,
        &empty_inline,
        &[Call::WrComplete, Call::PostSend { wr_ids: vec![5] }],
    ]
    .concat();
    for release in ["33.2", "44.0", "56.1", "63.0"] {
        assert_eq!(multi_sge_list_calls(&rxe(release)), around, "rdma-core {release}");
    }

    // One WR is a batch of one.
    let f = extended();
    let calls = with_rts_qp(&f, |qp, mr| {
        f.mock.take_calls();
        let one = [mr.sge(..64).unwrap()];
        // SAFETY: the mock provider never touches the memory.
        unsafe { qp.post_send_wr(&mut SendWr::send_with_imm(5, &one, 1)) }.unwrap();
        f.mock.take_calls()
    });
    assert_eq!(calls.first(), Some(&Call::WrStart));
    assert_eq!(calls.last(), Some(&Call::WrComplete));
    assert_eq!(calls.len(), 4, "{calls:?}");
}

/// `vendor_id`s of rxe and Mellanox (mlx5), whose failed `ibv_wr_complete` posts nothing.
const RXE: u32 = 0xFF_FFFF;
const MELLANOX: u32 = 0x02c9;

/// `extended()` reporting `vendor_id`.
fn extended_of(vendor_id: u32) -> Fixture {
    Fixture::with(Optional::ALL, ContextConfig { vendor_id, ..ContextConfig::extended_verbs() })
}

#[test]
fn a_failed_wr_complete_counts_what_the_provider_leaves_posted_with_the_post_send_hints() {
    // (vendor_id, errno, WRs counted as posted of the 2-WR batch)
    let cases = [
        // Unknown provider: which WR failed cannot be known, all may have gone out.
        (0, libc::ENOMEM, 2),
        (0, libc::ENOSPC, 2),
        // rxe: ENOSPC is a builder's qp->err, the batch never published; other errnos may
        // come from the doorbell after it was.
        (RXE, libc::ENOSPC, 0),
        (RXE, libc::ENOMEM, 2),
        // mlx5 rolls every failed batch back.
        (MELLANOX, libc::ENOMEM, 0),
        (MELLANOX, libc::ENOSPC, 0),
    ];
    for (vendor_id, errno, posted) in cases {
        let f = extended_of(vendor_id);
        let err = with_rts_qp(&f, |qp, mr| {
            let sge = [mr.sge(..64).unwrap()];
            let mut wrs = SendWrList::from(vec![SendWr::send(1, &sge), SendWr::send(2, &sge)]);
            f.mock.fail(Verb::WrComplete, errno);
            // SAFETY: the mock provider never touches the memory.
            unsafe { qp.post_send_wrs(&mut wrs) }.unwrap_err()
        });
        assert_eq!(err.posted, posted, "vendor {vendor_id:#x}, errno {errno}");
        assert_queue_full(&err.error, "ibv_wr_complete", errno);
    }
}

#[test]
fn a_refused_buffer_list_on_rxe_or_mlx5_strands_no_buffer() {
    // (vendor_id, errno, buffers free afterwards of 64 after a refused 12-WR list)
    for (vendor_id, errno, free) in
        [(RXE, libc::ENOSPC, 64), (MELLANOX, libc::ENOMEM, 64), (0, libc::ENOMEM, 52)]
    {
        let f = extended_of(vendor_id);
        let cq = f.ctx.create_cq(64).unwrap();
        let pd = f.ctx.alloc_pd().unwrap();
        let pool =
            BufferPool::new(pd.register(64 * 64, AccessFlags::LOCAL_WRITE).unwrap(), 64).unwrap();
        let qp = rts_qp(&pd, &cq);
        let mut list = SendBufferList::with_capacity(12);
        for _ in 0..12 {
            let mut buffer = pool.take().unwrap();
            buffer.fill(b"x").unwrap();
            list.push(buffer, SendOp::Send).unwrap();
        }
        f.mock.fail(Verb::WrComplete, errno);
        let err = qp.post_send_buffers(&mut list, true).unwrap_err();
        assert_queue_full(&err, "ibv_wr_complete", errno);
        while list.pop().is_some() {}
        let taken: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
        assert_eq!(taken.len(), free, "vendor {vendor_id:#x}");
    }
}

#[test]
fn an_operation_the_qp_was_not_created_for_aborts_the_batch_as_unsupported() {
    let f = extended();
    let (err, calls) = with_rts_qp(&f, |qp, mr| {
        f.mock.take_calls();
        let sge = [mr.sge(..64).unwrap()];
        // The mock device has no memory windows, so the QP was not created for invalidation.
        let mut wrs =
            SendWrList::from(vec![SendWr::send(1, &sge), SendWr::local_inv(2, RKey::new(5))]);
        // SAFETY: the mock provider never touches the memory.
        (unsafe { qp.post_send_wrs(&mut wrs) }.unwrap_err(), f.mock.take_calls())
    });
    assert_eq!(err.posted, 0);
    assert_unsupported(&err.error, "ibv_wr_local_inv");
    assert_eq!(calls.first(), Some(&Call::WrStart));
    assert_eq!(calls.last(), Some(&Call::WrAbort));
    assert!(!calls.contains(&Call::WrComplete), "{calls:?}");
}

#[test]
fn a_null_builder_aborts_the_batch_as_unsupported_naming_it() {
    let f = lacking("wr_send_imm");
    with_rts_qp(&f, |qp, mr| {
        assert_eq!(
            qp.verbs_path(),
            VerbsPath::Extended,
            "SEND with immediate is not needed to post"
        );
        f.mock.take_calls();
        let sge = [mr.sge(..64).unwrap()];
        // SAFETY: the mock provider never touches the memory.
        let err = unsafe { qp.post_send_wr(&mut SendWr::send_with_imm(1, &sge, 7)) }.unwrap_err();
        assert_unsupported(&err, "ibv_wr_send_imm");
        assert_eq!(f.mock.take_calls(), [Call::WrStart, Call::WrAbort]);
    });
}

#[test]
fn a_null_member_every_post_or_poll_needs_falls_back_or_is_unsupported_when_forced() {
    {
        let f = lacking("read_byte_len");
        let cq = f.ctx.create_cq(32).unwrap();
        assert_eq!(cq.verbs_path(), VerbsPath::Legacy);
        let err = f.ctx.create_cq_with(16, &forced(VerbsPath::Extended)).unwrap_err();
        assert_unsupported(&err, "ibv_wc_read_byte_len (ibv_cq_ex.read_byte_len)");
        let calls = f.mock.take_calls();
        // The incomplete CQ was destroyed again each time.
        assert_eq!(calls.iter().filter(|c| **c == Call::DestroyCq).count(), 2, "{calls:?}");
    }

    let f = lacking("wr_complete");
    let cq = f.ctx.create_cq(32).unwrap();
    let pd = f.ctx.alloc_pd().unwrap();
    assert_eq!(rts_qp(&pd, &cq).verbs_path(), VerbsPath::Legacy);
    let attr = QpInitAttr { verbs_path: Some(VerbsPath::Extended), ..QpInitAttr::new(&cq) };
    let err = pd.create_rc_qp(&attr).unwrap_err();
    assert_unsupported(&err, "ibv_wr_complete (ibv_qp_ex.wr_complete)");
}

/// A receive completion with immediate data, as a provider reports it.
fn recv_with_imm(wr_id: u64) -> sys::ibv_wc {
    let mut wc = sys::ibv_wc {
        wr_id,
        opcode: sys::IBV_WC_RECV,
        byte_len: 100 + wr_id as u32,
        qp_num: 0x101,
        wc_flags: sys::IBV_WC_WITH_IMM,
        ..Default::default()
    };
    wc.__bindgen_anon_1.imm_data = (0xab00 + wr_id as u32).to_be();
    wc
}

/// A CQ of `f` with timestamps holding `n` receive completions, and the calls cleared.
fn stamped_cq(f: &Fixture, n: u64) -> CompletionQueue<'_> {
    let cq = f.ctx.create_cq_with(32, &stamped()).unwrap();
    for wr_id in 1..=n {
        f.mock.push_completion(cq.as_raw(), recv_with_imm(wr_id));
    }
    f.mock.take_calls();
    cq
}

#[test]
fn the_default_poll_drains_a_batch_with_one_provider_call() {
    // Without timestamps: the provider's poll_cq op on the extended CQ, once for 16.
    let f = extended();
    let cq = f.ctx.create_cq(32).unwrap();
    assert_eq!(cq.verbs_path(), VerbsPath::Extended);
    for wr_id in 1..=16 {
        f.mock.push_completion(cq.as_raw(), recv_with_imm(wr_id));
    }
    f.mock.take_calls();
    let mut storage = [WorkCompletion::EMPTY; 16];
    let got: Vec<_> = cq.poll(&mut storage).unwrap().iter().map(|wc| wc.wr_id()).collect();
    assert_eq!(got, (1..=16).collect::<Vec<_>>());
    assert_eq!(f.mock.take_calls(), [Call::PollCq { num_entries: 16 }]);

    // With timestamps, where ibv_next_poll keeps the session (not rxe, or rxe with PR 1617:
    // 59.0, the stable 44.11): one session, 1 start + 15 next + 1 end.
    let session: Vec<_> = std::iter::once(Call::StartPoll)
        .chain(std::iter::repeat_n(Call::NextPoll, 15))
        .chain([Call::EndPoll])
        .collect();
    drop(cq);
    drop(f);
    let keeping_session: [&dyn Fn() -> Fixture; 3] =
        [&timestamping, &|| rxe("59.0"), &|| rxe("44.11")];
    for make in keeping_session {
        let f = make();
        let cq = stamped_cq(&f, 16);
        let mut stamps = Vec::new();
        assert_eq!(cq.poll_with(16, |c| stamps.push(c.timestamp.unwrap())).unwrap(), 16);
        assert_eq!(stamps, (1..=16).map(|n| n * 1000).collect::<Vec<_>>());
        assert_eq!(f.mock.take_calls(), session);
        // `poll` too, and a batch that runs dry ends with the next_poll that found nothing.
        for wr_id in 17..=18 {
            f.mock.push_completion(cq.as_raw(), recv_with_imm(wr_id));
        }
        assert_eq!(cq.poll(&mut storage).unwrap().len(), 2);
        assert_eq!(
            f.mock.take_calls(),
            [Call::StartPoll, Call::NextPoll, Call::NextPoll, Call::EndPoll]
        );
    }

    // rxe without PR 1617 (Debian's 44.0, 56.1; an unknown release): one session each.
    for release in ["44.0", "56.1", "58.0"] {
        let f = rxe(release);
        let cq = stamped_cq(&f, 16);
        assert_eq!(cq.poll(&mut storage).unwrap().len(), 16);
        assert_eq!(
            f.mock.take_calls(),
            (0..16).flat_map(|_| [Call::StartPoll, Call::EndPoll]).collect::<Vec<_>>(),
            "{release}"
        );
    }
}

#[test]
fn a_session_never_ends_an_empty_start_and_a_later_failure_waits_for_the_next_poll() {
    for release in ["44.0", "59.0"] {
        let f = rxe(release);
        let cq = stamped_cq(&f, 0);
        let flushed =
            sys::ibv_wc { wr_id: 3, status: sys::IBV_WC_WR_FLUSH_ERR, ..Default::default() };
        for wc in [recv_with_imm(1), recv_with_imm(2), flushed] {
            f.mock.push_completion(cq.as_raw(), wc);
        }
        let mut storage: [WorkCompletion; 2] = Default::default();
        let got: Vec<_> = cq
            .poll(&mut storage)
            .unwrap()
            .iter()
            .map(|wc| (wc.wr_id(), wc.opcode(), wc.byte_len(), wc.imm_data(), wc.qp_num().get()))
            .collect();
        assert_eq!(
            got,
            [
                (1, WcOpcode::RECV, 101, Some(0xab01), 0x101),
                (2, WcOpcode::RECV, 102, Some(0xab02), 0x101)
            ]
        );
        f.mock.take_calls();
        let got: Vec<_> =
            cq.poll(&mut storage).unwrap().iter().map(|wc| (wc.wr_id(), wc.status())).collect();
        assert_eq!(got, [(3, WcStatus::WR_FLUSH_ERR)]);
        assert!(cq.poll(&mut storage).unwrap().is_empty());
        // An empty start_poll (ENOENT) has no session: no end_poll for it.
        assert_eq!(f.mock.take_calls().last(), Some(&Call::StartPoll));

        f.mock.fail(Verb::StartPoll, libc::EIO);
        let err = cq.poll(&mut storage).unwrap_err();
        assert_verb_error(&err, "ibv_start_poll", libc::EIO, &["the CQ is broken"]);
        assert_eq!(f.mock.take_calls(), [Call::StartPoll], "a failed start_poll has no session");

        // A next_poll failure ends the batch (the session is closed) and is reported next.
        for wr_id in [4, 5] {
            f.mock.push_completion(cq.as_raw(), recv_with_imm(wr_id));
        }
        f.mock.fail(Verb::NextPoll, libc::EIO);
        let got: Vec<_> = cq.poll(&mut storage).unwrap().iter().map(|wc| wc.wr_id()).collect();
        let calls = f.mock.take_calls();
        assert_eq!(calls.last(), Some(&Call::EndPoll), "{calls:?}");
        assert!(!got.is_empty() && got[0] == 4, "{got:?}");
    }
}

#[test]
fn timestamps_come_with_completions_where_the_device_has_them() {
    let f = timestamping();
    let cq = f.ctx.create_cq_with(16, &stamped()).unwrap();
    assert_eq!(cq.timestamp_clock_khz(), Some(CORE_CLOCK_KHZ));
    for wr_id in [1, 2, 3] {
        f.mock.push_completion(cq.as_raw(), recv_with_imm(wr_id));
    }
    let mut got = Vec::new();
    let n = cq.poll_with(2, |c| got.push((c.wc.wr_id(), c.wc.imm_data(), c.timestamp))).unwrap();
    assert_eq!(n, 2);
    assert_eq!(got, [(1, Some(0xab01), Some(1000)), (2, Some(0xab02), Some(2000))]);
    let n = cq.poll_with(8, |c| got.push((c.wc.wr_id(), c.wc.imm_data(), c.timestamp))).unwrap();
    assert_eq!((n, got.len()), (1, 3));

    // Without timestamps (or on the legacy path) there are none, through the same call.
    let plain = f.ctx.create_cq(32).unwrap();
    let legacy = f.ctx.create_cq_with(16, &forced(VerbsPath::Legacy)).unwrap();
    for cq in [&plain, &legacy] {
        f.mock.push_completion(cq.as_raw(), recv_with_imm(4));
        let mut seen = None;
        assert_eq!(cq.poll_with(4, |c| seen = Some((c.wc.wr_id(), c.timestamp))).unwrap(), 1);
        assert_eq!(seen, Some((4, None)), "{:?}", cq.verbs_path());
        assert_eq!(cq.timestamp_clock_khz(), None);
    }
}

#[test]
fn buffers_come_back_through_timestamped_polling() {
    let f = timestamping();
    let cq = f.ctx.create_cq_with(64, &stamped()).unwrap();
    let pd = f.ctx.alloc_pd().unwrap();
    let pool =
        BufferPool::new(pd.register(4 * 256, AccessFlags::LOCAL_WRITE).unwrap(), 256).unwrap();
    let (a, b) = (new_qp(&pd, &cq), new_qp(&pd, &cq));
    let (a_num, b_num) = (a.qp_num(), b.qp_num());
    let (a, b) = (towards(a, b_num), towards(b, a_num));

    b.post_recv_buffer(pool.take().unwrap()).unwrap();
    let mut buf = pool.take().unwrap();
    buf.fill(b"stamped").unwrap();
    a.post_send_buffer(buf, SendOp::Send).unwrap();
    let mut back = Vec::new();
    let n = cq
        .poll_with(4, |c| {
            let at = c.timestamp;
            let buf = pool.complete(&mut c.wc).expect("the completion names a buffer of the pool");
            back.push((c.wc.opcode(), at.is_some(), buf.as_slice().to_vec()));
            assert!(pool.complete(&mut c.wc).is_none(), "completing consumed the wr_id");
        })
        .unwrap();
    back.sort_by_key(|(opcode, ..)| opcode.0);
    let sent = b"stamped".to_vec();
    assert_eq!(n, 2);
    assert_eq!(back, [(WcOpcode::SEND, true, sent.clone()), (WcOpcode::RECV, true, sent)]);
    let all: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(all.len(), 4, "both buffers went back to the pool");
}

#[test]
fn timestamps_where_the_device_has_none_are_unsupported_naming_them() {
    let f = extended();
    let err = f.ctx.create_cq_with(16, &stamped()).unwrap_err();
    assert_unsupported(
        &err,
        "completion timestamps (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP; the device's \
         completion_timestamp_mask is 0)",
    );
    let attr = CqAttr { verbs_path: Some(VerbsPath::Legacy), ..stamped() };
    let err = f.ctx.create_cq_with(16, &attr).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::NeedsExtendedVerbs), "{err:?}");
    // A context without an extended CQ cannot have them either.
    let legacy_only = open(&f.mock, Optional::ALL, ContextConfig::default());
    let err = legacy_only.create_cq_with(16, &stamped()).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
}

/// `poll_with` takes up to 16 completions at once and hands them over one by one: when the
/// callback panics on the first, the others stay with the CQ, and the next poll returns
/// them first, in order (`poll` alone, then `poll_with`, its timestamps kept) — on the legacy
/// CQ, the extended one, and the one polled in sessions.
#[test]
fn completions_polled_with_one_whose_callback_panicked_come_with_the_next_poll() {
    let f = timestamping();
    let legacy = f.ctx.create_cq_with(32, &forced(VerbsPath::Legacy)).unwrap();
    let extended = f.ctx.create_cq_with(32, &forced(VerbsPath::Extended)).unwrap();
    let sessions = f.ctx.create_cq_with(32, &stamped()).unwrap();
    for cq in [&legacy, &extended, &sessions] {
        for wr_id in 1..=5 {
            f.mock.push_completion(cq.as_raw(), recv_with_imm(wr_id));
        }
        let mut seen = Vec::new();
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            cq.poll_with(16, |c| {
                seen.push(c.wc.wr_id());
                assert_ne!(c.wc.wr_id(), 1, "the program's callback fails on the first");
            })
        }));
        assert!(panicked.is_err(), "{:?}", cq.verbs_path());
        assert_eq!(seen, [1]);
        let mut storage: [WorkCompletion; 2] = Default::default();
        let polled: Vec<_> = cq.poll(&mut storage).unwrap().iter().map(|wc| wc.wr_id()).collect();
        assert_eq!(polled, [2, 3], "{:?}", cq.verbs_path());
        let mut rest = Vec::new();
        assert_eq!(cq.poll_with(16, |c| rest.push((c.wc.wr_id(), c.timestamp))).unwrap(), 2);
        let stamped = cq.as_raw() == sessions.as_raw();
        let stamp = |wr_id: u64| stamped.then_some(wr_id * 1000);
        assert_eq!(rest, [(4, stamp(4)), (5, stamp(5))], "{:?}", cq.verbs_path());
        assert_eq!(cq.poll_with(16, |_| {}).unwrap(), 0, "each once");
    }
}
