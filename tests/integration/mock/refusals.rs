//! Safe calls that would make a work request reach the provider in a shape the crate
//! promises to refuse, each a way into the send path once open: each test asserts
//! the crate refuses before the provider (and the strict mock records no violation).
use rdma_verbs::{
    AccessFlags, AddressHandle, AddressVector, BufferPool, CompletionQueue, Context, Endpoint,
    Error, GlobalRoute, HasReceiveQueue, Init, InvalidInputKind, ProtectionDomain, Psn, QpAttrMask,
    QpCapabilities, QpInitAttr, QpType, Qpn, QueuePair, Rc, ReceiveReady, RecvBufferList, RecvWr,
    RecvWrList, RemoteAddr, Rtr, Rts, SendFlags, SendOp, SendWr, SendWrList, Sge,
    SharedReceiveQueue, ToInitAttr, ToRtrAttr, ToRtsAttr, Uc, Ud, UdDestination, UdToInitAttr,
    VerbsPath, WorkCompletion,
};
use rdma_verbs_mock::{Call, ContextConfig, Mock, Optional, Verb};

use super::Fixture;

const PORT: u8 = 1;
/// The mock port's RoCE v2 IPv4-mapped GID.
const SGID_INDEX: u8 = 3;
const QKEY: u32 = 0x0d0d;

/// A mock context posting through `path`'s verbs.
fn fixture(path: VerbsPath) -> Fixture {
    let config = match path {
        VerbsPath::Extended => ContextConfig::extended_verbs(),
        _ => ContextConfig::default(),
    };
    Fixture::with(Optional::ALL, config)
}

/// A pool of 16 buffers of 256 bytes over a region of `pd` with `access`.
fn pool<'a>(pd: &'a ProtectionDomain<'a>, access: AccessFlags) -> BufferPool<'a> {
    BufferPool::new(pd.register(4096, access).unwrap(), 256).unwrap()
}

fn attr<'a>(cq: &'a rdma_verbs::CompletionQueue<'a>, path: VerbsPath) -> QpInitAttr<'a, 'a> {
    let cap = QpCapabilities {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_inline_data: 32,
        ..Default::default()
    };
    QpInitAttr { cap, verbs_path: Some(path), ..QpInitAttr::new(cq) }
}

fn endpoint(ctx: &Context, qpn: Qpn) -> Endpoint {
    let gid = ctx.routable_gid(PORT).unwrap().gid;
    let lid = ctx.query_port(PORT).unwrap().lid();
    Endpoint { lid, qpn, psn: Psn::new(0).unwrap(), gid }
}

fn ah<'a>(ctx: &Context, pd: &'a ProtectionDomain<'a>) -> AddressHandle<'a> {
    let (gid, lid) = (ctx.routable_gid(PORT).unwrap().gid, ctx.query_port(PORT).unwrap().lid());
    let av = AddressVector::new(PORT, lid).with_grh(GlobalRoute::new(gid, SGID_INDEX));
    pd.create_ah(&av).unwrap()
}

/// An RC QP connected to itself (the mock executes loopback), in RTS with `max_rd_atomic`.
pub(super) fn rc_self<'a>(
    ctx: &Context,
    pd: &'a ProtectionDomain<'a>,
    cq: &'a rdma_verbs::CompletionQueue<'a>,
    path: VerbsPath,
    max_rd_atomic: u8,
) -> QueuePair<'a, Rts, Rc> {
    let qp = pd.create_qp::<Rc>(&attr(cq, path)).unwrap();
    let me = qp.qp_num();
    rc_up(ctx, qp, me, max_rd_atomic)
}

/// `qp` RESET → RTS towards `peer`, with `max_rd_atomic`.
fn rc_up<'a>(
    ctx: &Context,
    qp: QueuePair<'a, rdma_verbs::Reset, Rc>,
    peer: Qpn,
    max_rd_atomic: u8,
) -> QueuePair<'a, Rts, Rc> {
    let qp = rc_rtr(ctx, qp, peer);
    qp.into_rts(&ToRtsAttr { max_rd_atomic, ..ToRtsAttr::new(Psn::new(0).unwrap()) }).unwrap()
}

/// `qp` RESET → RTR towards `peer`.
fn rc_rtr<'a>(
    ctx: &Context,
    qp: QueuePair<'a, rdma_verbs::Reset, Rc>,
    peer: Qpn,
) -> QueuePair<'a, Rtr, Rc> {
    let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
    let qp = qp.into_init(&ToInitAttr { port: PORT, access, ..Default::default() }).unwrap();
    let rtr = ToRtrAttr::to_endpoint(
        &endpoint(ctx, peer),
        PORT,
        Some(SGID_INDEX),
        rdma_verbs::Mtu::MTU_1024,
    );
    qp.into_rtr(&rtr).unwrap()
}

fn ud_up<'a>(
    pd: &'a ProtectionDomain<'a>,
    cq: &'a rdma_verbs::CompletionQueue<'a>,
    path: VerbsPath,
) -> QueuePair<'a, Rts, Ud> {
    let qp = pd.create_qp::<Ud>(&attr(cq, path)).unwrap();
    let qp = qp.into_init(&UdToInitAttr { port: PORT, pkey_index: 0, qkey: QKEY }).unwrap();
    qp.into_rtr().unwrap().into_rts(Psn::new(0).unwrap()).unwrap()
}

/// Asserts that a buffer of `pool` posted as a receive on `qp` and on `srq`, alone and in a
/// list, is refused (as `refused` checks) before the provider, the list keeping it.
fn assert_receives_refused<'a, S: ReceiveReady, T: HasReceiveQueue>(
    qp: &QueuePair<'a, S, T>,
    srq: &SharedReceiveQueue<'a>,
    pool: &'a BufferPool<'a>,
    refused: impl Fn(&Error),
) {
    refused(&qp.post_recv_buffer(pool.take().unwrap()).unwrap_err());
    refused(&srq.post_recv_buffer(pool.take().unwrap()).unwrap_err());
    let mut receives = RecvBufferList::with_capacity(1);
    receives.push(pool.take().unwrap()).unwrap();
    refused(&qp.post_recv_buffers(&mut receives).unwrap_err());
    refused(&srq.post_recv_buffers(&mut receives).unwrap_err());
    assert_eq!(receives.len(), 1, "the list keeps its buffer");
}

/// A check that an error is the invalid input `kind`.
fn of_kind(kind: InvalidInputKind) -> impl Fn(&Error) {
    move |error| assert_eq!(error.invalid_input_kind(), Some(kind), "{error}")
}

/// Runs `test` on a fresh mock context, PD and CQ for each verbs path.
fn on_each_path(
    test: impl for<'a> Fn(
        VerbsPath,
        &'a Mock,
        &'a Context,
        &'a ProtectionDomain<'a>,
        &'a CompletionQueue<'a>,
    ),
) {
    for path in [VerbsPath::Legacy, VerbsPath::Extended] {
        let fx = fixture(path);
        let pd = fx.ctx.alloc_pd().unwrap();
        let cq = fx.ctx.create_cq(64).unwrap();
        test(path, &fx.mock, &fx.ctx, &pd, &cq);
    }
}

/// A UD send whose address handle belongs to another PD than the QP's (the strict mock's
/// `Rule::AhOfOtherPd`) is refused, naming the AH's PD.
#[test]
fn a_ud_send_with_an_address_handle_of_another_pd_is_refused() {
    on_each_path(|path, mock, ctx, pd, cq| {
        let other = ctx.alloc_pd().unwrap();
        let pool = pool(pd, AccessFlags::LOCAL_WRITE);
        let foreign_ah = ah(ctx, &other);
        let qp = ud_up(pd, cq, path);
        let dest = UdDestination { ah: &foreign_ah, qpn: qp.qp_num(), qkey: QKEY };
        let mut buf = pool.take().unwrap();
        buf.fill(b"hello").unwrap();
        let result = qp.post_send_buffer_to(buf, &dest, None);
        let violations = mock.take_violations();
        let refused = result.as_ref().err().and_then(|e| e.invalid_input_kind());
        assert!(
            violations.is_empty() && refused == Some(InvalidInputKind::OtherPd),
            "{path:?}: the crate let a UD WR with another PD's AH through: {:?}; mock: {violations:?}",
            result
        );
    });
}

/// a WR mutated inside a `SendWrList` through its only `&mut` API (`set_flags`) to
/// INLINE above `max_inline_data`, and a list whose SGE count goes past `max_send_sge` after
/// pop/push, are still refused by `post_send_wrs` (whose contract is met: every SGE names
/// live registered memory and no wr_id has bit 63 set).
#[test]
fn a_list_mutated_in_place_is_checked_again() {
    on_each_path(|path, mock, ctx, pd, cq| {
        let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let qp = rc_self(ctx, pd, cq, path, 1);
        let max_sge = qp.caps().max_send_sge as usize;
        let sges: Vec<Sge> = (0..max_sge + 1).map(|i| mr.sge(i * 8..i * 8 + 8).unwrap()).collect();
        let big = [mr.sge(0..1024).unwrap()];
        let mut list = SendWrList::with_capacity(3);
        list.push(SendWr::send(1, &sges[..1])).unwrap();
        list.push(SendWr::send(2, &big)).unwrap();
        list.set_flags(1, SendFlags::INLINE | SendFlags::SIGNALED).unwrap();
        // SAFETY: every SGE names `mr` (live, this PD, never written during the test); the
        // wr_ids are small. (Inline SGEs by IOVA equal the CPU address: plain `register`.)
        let err = unsafe { qp.post_send_wrs(&mut list) }.unwrap_err();
        assert_eq!(
            err.error.invalid_input_kind(),
            Some(InvalidInputKind::InlineTooLarge),
            "{path:?}"
        );
        list.set_flags(1, SendFlags::SIGNALED).unwrap();
        list.pop().unwrap();
        list.push(SendWr::rdma_write(3, &sges, RemoteAddr { addr: 0, rkey: mr.rkey() })).unwrap();
        // SAFETY: as above.
        let err = unsafe { qp.post_send_wrs(&mut list) }.unwrap_err();
        assert_eq!(err.error.invalid_input_kind(), Some(InvalidInputKind::TooManySges), "{path:?}");
        assert!(mock.take_violations().is_empty());
    });
}

/// The counterpart of the test above: a list whose WRs each fit, but whose lengths' bits
/// together pass the inline limit (a list's demand is a bitwise union, which overstates
/// them), is posted, not refused.
#[test]
fn a_list_of_inline_lengths_whose_bits_pass_the_limit_together_is_posted() {
    on_each_path(|path, mock, ctx, pd, cq| {
        let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let qp = rc_self(ctx, pd, cq, path, 1);
        let limit = qp.caps().max_inline_data as usize;
        // The lowest bit the limit lacks, below it: `limit | low` passes `limit`.
        let low = 1 << limit.trailing_ones();
        assert!(low < limit && limit | low > limit, "{path:?}: limit {limit}");
        let (a, b) = ([mr.sge(..limit).unwrap()], [mr.sge(..low).unwrap()]);
        let mut list = SendWrList::from(vec![
            SendWr::send(1, &a).flags(SendFlags::INLINE),
            SendWr::send(2, &b).flags(SendFlags::INLINE | SendFlags::SIGNALED),
        ]);
        // SAFETY: the SGEs name `mr` (live, this PD, never written during the test; inline
        // by IOVA, which equals the CPU address of a plain `register`); small wr_ids.
        unsafe { qp.post_send_wrs(&mut list) }.unwrap_or_else(|e| panic!("{path:?}: {e}"));
        assert!(mock.take_violations().is_empty());
    });
}

/// a UD datagram above the port's active MTU, as one buffer and in a list, is refused
/// before the provider (legacy and extended paths).
#[test]
fn a_ud_datagram_above_the_mtu_is_refused() {
    on_each_path(|path, mock, ctx, pd, cq| {
        let mtu = ctx.query_port(PORT).unwrap().active_mtu().bytes().unwrap() as usize;
        let pool =
            BufferPool::new(pd.register(4 * mtu + 64, AccessFlags::LOCAL_WRITE).unwrap(), mtu + 1)
                .unwrap();
        let ah = ah(ctx, pd);
        let qp = ud_up(pd, cq, path);
        let dest = UdDestination { ah: &ah, qpn: qp.qp_num(), qkey: QKEY };
        let mut buf = pool.take().unwrap();
        buf.set_len(mtu + 1).unwrap();
        let err = qp.try_post_send_buffer_to(buf, &dest, None).unwrap_err();
        assert_eq!(err.error.invalid_input_kind(), Some(InvalidInputKind::UdTooLarge), "{path:?}");
        let mut list = rdma_verbs::SendBufferList::with_capacity(2);
        let mut small = pool.take().unwrap();
        small.set_len(8).unwrap();
        list.push(small, rdma_verbs::UdSend { dest, imm: None }).unwrap();
        list.push(err.buffer.unwrap(), rdma_verbs::UdSend { dest, imm: Some(1) }).unwrap();
        let err = qp.post_send_buffers_to(&mut list, true).unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::UdTooLarge), "{path:?}");
        assert_eq!(list.len(), 2, "nothing posted");
        assert!(mock.take_violations().is_empty(), "{path:?}");
    });
}

/// `QueuePair::bind_mw` refuses a `wr_id` with bit 63 set, the buffer tier's mark: a bind
/// signaled with the `wr_id` of a buffer whose SEND is still queued would complete first and
/// `BufferPool::complete` would hand that buffer back while the NIC has yet to read it. The
/// mock's `Rule::WrIdInFlight` is made lenient, as a real provider does not check wr_ids.
#[test]
fn bind_mw_refuses_a_buffer_tier_wr_id() {
    let fx = fixture(VerbsPath::Legacy);
    let (ctx, mock) = (&fx.ctx, &fx.mock);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let pool = pool(&pd, AccessFlags::LOCAL_WRITE);
    let access = AccessFlags::LOCAL_WRITE
        | AccessFlags::MW_BIND
        | AccessFlags::REMOTE_WRITE
        | AccessFlags::REMOTE_READ;
    let target = pd.register_remote_writable(4096, access).unwrap();
    let mut window = pd.alloc_mw(rdma_verbs::MwType::Type1).unwrap();
    // `a` SENDs to itself: the SEND waits at the head of its queue (no receive posted).
    let a = rc_self(ctx, &pd, &cq, VerbsPath::Legacy, 1);
    let c = rc_self(ctx, &pd, &cq, VerbsPath::Legacy, 1);
    let mut buf = pool.take().unwrap();
    buf.fill(&[7; 200]).unwrap();
    // A real provider does not check wr_ids: the strict mock's rule for them (which would
    // fail the bind with EINVAL, the only thing that stops it now) is made lenient, so the
    // bind is posted as a provider would post it.
    mock.allow(rdma_verbs_mock::Rule::WrIdInFlight);
    let _ = mock.take_calls();
    a.post_send_buffer(buf, SendOp::Send).unwrap();
    let in_flight = mock
        .take_calls()
        .into_iter()
        .find_map(|call| match call {
            rdma_verbs_mock::Call::PostSend { wr_ids } => wr_ids.first().copied(),
            _ => None,
        })
        .unwrap();
    assert_ne!(in_flight & (1 << 63), 0);
    let bind = rdma_verbs::MwBind::new(&target, 0..64, AccessFlags::REMOTE_READ).unwrap();
    let bound = c.bind_mw(&mut window, &bind, in_flight, SendFlags::SIGNALED);
    let mut wcs = [rdma_verbs::WorkCompletion::EMPTY; 4];
    let handed_back: Vec<_> =
        cq.poll(&mut wcs).unwrap().iter_mut().filter_map(|wc| pool.complete(wc)).collect();
    let violations = mock.take_violations();
    let refused = bound.as_ref().err().and_then(rdma_verbs::Error::invalid_input_kind);
    assert!(
        refused.is_some() && handed_back.is_empty(),
        "bind_mw took the in-flight buffer's wr_id ({bound:?}) and complete handed back \
         {handed_back:?} while its SEND is still queued; mock: {violations:?}"
    );
    drop(handed_back);
}

/// A QP raised with `modify_raw` and retyped with `into_checked` is held to what the typed
/// transitions record: an RC QP in RTS with `max_rd_atomic` 0 refuses an RDMA READ (which
/// rxe would leave queued for good), and a UD QP carries up to its port's active MTU (it
/// refused every payload with a limit of 0).
#[test]
fn a_qp_raised_by_modify_raw_is_checked_as_a_typed_one() {
    on_each_path(|path, mock, ctx, pd, cq| {
        let (pool, ah) = (pool(pd, AccessFlags::LOCAL_WRITE), ah(ctx, pd));
        let qp = pd.create_qp::<Rc>(&attr(cq, path)).unwrap();
        let me = qp.qp_num();
        let mut raw = rdma_verbs::sys::ibv_qp_attr {
            qp_state: rdma_verbs::sys::IBV_QPS_RTS,
            timeout: 14,
            retry_cnt: 6,
            rnr_retry: 6,
            max_rd_atomic: 0,
            ..Default::default()
        };
        let mask = QpAttrMask::STATE | <Rc as QpType>::RTS_MASK;
        let rc = rc_rtr(ctx, qp, me).modify_raw(&raw, mask).unwrap();
        let rc = rc.into_checked::<Rts>().unwrap();
        let mut buf = pool.take().unwrap();
        buf.set_len(8).unwrap();
        let remote = RemoteAddr { addr: 0, rkey: rdma_verbs::RKey::new(0) };
        let err = rc.try_post_send_buffer(buf, SendOp::RdmaRead(remote)).unwrap_err();
        assert_eq!(err.error.invalid_input_kind(), Some(InvalidInputKind::Range), "{path:?}");

        let mtu = ctx.query_port(PORT).unwrap().active_mtu().bytes().unwrap() as usize;
        raw = rdma_verbs::sys::ibv_qp_attr {
            qp_state: rdma_verbs::sys::IBV_QPS_INIT,
            port_num: PORT,
            qkey: QKEY,
            ..Default::default()
        };
        let mask = QpAttrMask::STATE | QpAttrMask::PKEY_INDEX | QpAttrMask::PORT | QpAttrMask::QKEY;
        let ud = pd.create_qp::<Ud>(&attr(cq, path)).unwrap().modify_raw(&raw, mask).unwrap();
        let ud = ud.into_checked::<Init>().unwrap().into_rtr().unwrap();
        let ud = ud.into_rts(Psn::new(0).unwrap()).unwrap();
        let dest = UdDestination { ah: &ah, qpn: ud.qp_num(), qkey: QKEY };
        let mut buf = err.buffer.unwrap();
        buf.set_len(mtu.min(buf.capacity())).unwrap();
        ud.post_send_buffer_to(buf, &dest, None).unwrap();
        assert!(mock.take_violations().is_empty(), "{path:?}");
    });
}

/// A pool whose region lacks `LOCAL_WRITE` cannot take what the NIC writes: receives (on a
/// QP and on an SRQ, alone or in a list), RDMA READs and atomics, alone or in a list, are refused before the
/// provider (a NIC would fail them with a protection error; the strict mock counts
/// `Rule::MissingLocalWrite`); its buffers still send.
#[test]
fn a_pool_without_local_write_refuses_what_the_nic_would_write() {
    on_each_path(|path, mock, ctx, pd, cq| {
        let pool = pool(pd, AccessFlags::empty());
        let qp = rc_self(ctx, pd, cq, path, 1);
        let srq = pd.create_srq(16, 1).unwrap();
        let access = |error: &rdma_verbs::Error| {
            assert_eq!(error.invalid_input_kind(), Some(InvalidInputKind::Access), "{path:?}")
        };
        assert_receives_refused(&qp, &srq, &pool, of_kind(InvalidInputKind::Access));
        let remote = RemoteAddr { addr: 0, rkey: rdma_verbs::RKey::new(0) };
        let writers = [
            SendOp::RdmaRead(remote),
            SendOp::FetchAdd { remote, add: 1 },
            SendOp::CompareSwap { remote, compare: 0, swap: 1 },
        ];
        let mut list = rdma_verbs::SendBufferList::with_capacity(2);
        for op in writers {
            let mut buf = pool.take().unwrap();
            buf.set_len(8).unwrap();
            let err = qp.try_post_send_buffer(buf, op).unwrap_err();
            access(&err.error);
            list.push(err.buffer.unwrap(), op).unwrap();
            access(&qp.post_send_buffers(&mut list, true).unwrap_err());
            assert_eq!(list.len(), 1, "nothing posted");
            drop(list.pop());
        }
        let mut buf = pool.take().unwrap();
        buf.fill(b"sent").unwrap();
        qp.post_send_buffer(buf, SendOp::Send).unwrap();
        assert!(mock.take_violations().is_empty(), "{path:?}");
    });
}

/// A QP or SRQ created to take no SGE per receive (`max_recv_sge` / `max_sge` 0) would be
/// handed a buffer's one SGE (the strict mock's `Rule::TooManySges`; a provider fails it):
/// buffer receives there are refused before the provider, alone or in a list.
#[test]
fn a_queue_that_takes_no_receive_sge_refuses_buffer_receives() {
    on_each_path(|path, mock, _, pd, cq| {
        let pool = pool(pd, AccessFlags::LOCAL_WRITE);
        let mut init = attr(cq, path);
        init.cap.max_recv_sge = 0;
        let qp = pd.create_qp::<Rc>(&init).unwrap();
        let qp = qp.into_init(&ToInitAttr { port: PORT, ..Default::default() }).unwrap();
        let srq = pd.create_srq(16, 0).unwrap();
        assert_receives_refused(&qp, &srq, &pool, of_kind(InvalidInputKind::TooManySges));
        assert!(mock.take_violations().is_empty(), "{path:?}");
    });
}

/// A QP whose destroy fails is moved to RESET before it is leaked: the borrow that kept its
/// receive buffer's pool alive ends with it, so when a peer's SEND arrives after the pool
/// (and its region) is gone, the receive must no longer be queued (the strict mock's
/// `Rule::MrGoneBeforeExecution`).
#[test]
fn a_qp_that_fails_to_be_destroyed_keeps_no_work_into_memory_dropped_after_it() {
    on_each_path(|path, mock, ctx, pd, cq| {
        let sender = pool(pd, AccessFlags::LOCAL_WRITE);
        let b = pd.create_qp::<Rc>(&attr(cq, path)).unwrap();
        let a_qpn = {
            let pool = pool(pd, AccessFlags::LOCAL_WRITE);
            let a = pd.create_qp::<Rc>(&attr(cq, path)).unwrap();
            let a = rc_up(ctx, a, b.qp_num(), 1);
            a.post_recv_buffer(pool.take().unwrap()).unwrap();
            mock.fail(Verb::DestroyQp, libc::EBUSY);
            a.qp_num()
        }; // `a` leaked, then the pool's region deregistered
        let b = rc_up(ctx, b, a_qpn, 1);
        let mut buf = sender.take().unwrap();
        buf.fill(b"late").unwrap();
        b.post_send_buffer(buf, SendOp::Send).unwrap();
        let mut wcs = [WorkCompletion::EMPTY; 4];
        let _ = cq.poll(&mut wcs).unwrap();
        assert_eq!(mock.take_violations(), [], "{path:?}");
    });
}

/// The raw tier refuses `INLINE` on an RDMA READ or atomic (their response is written into
/// the SGEs; the strict mock's `Rule::InlineReadOrAtomic`), alone and in a list.
#[test]
fn an_inline_read_or_atomic_is_refused() {
    on_each_path(|path, mock, ctx, pd, cq| {
        let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let qp = rc_self(ctx, pd, cq, path, 1);
        let sge = [mr.sge(0..8).unwrap()];
        let remote = RemoteAddr { addr: 64, rkey: mr.rkey() };
        let flags = SendFlags::INLINE | SendFlags::SIGNALED;
        for wr in [
            SendWr::rdma_read(1, &sge, remote),
            SendWr::fetch_add(2, &sge, remote, 1),
            SendWr::compare_swap(3, &sge, remote, 0, 1),
        ] {
            let mut wr = wr.flags(flags);
            // SAFETY: `sge` names `mr` (live, this PD, untouched during the test); small
            // wr_ids. (Refused before the provider in any case.)
            let err = unsafe { qp.post_send_wr(&mut wr) }.unwrap_err();
            assert_eq!(
                err.invalid_input_kind(),
                Some(InvalidInputKind::InlineReadOrAtomic),
                "{path:?}"
            );
            let mut list = SendWrList::with_capacity(1);
            list.push(wr).unwrap();
            // SAFETY: as above.
            let err = unsafe { qp.post_send_wrs(&mut list) }.unwrap_err();
            assert_eq!(
                err.error.invalid_input_kind(),
                Some(InvalidInputKind::InlineReadOrAtomic),
                "{path:?}"
            );
        }
        assert_eq!(mock.take_violations(), [], "{path:?}");
    });
}

/// A `SendBufferList` chains its unsignaled buffers in one pool's bookkeeping, so it refuses
/// buffers of two pools, in one post or behind an open chain of another pool's (found by the
/// property suite: the chain indexed the other pool, freeing a chunk it did not post or
/// running past its end).
#[test]
fn a_send_list_refuses_buffers_of_two_pools() {
    on_each_path(|path, mock, ctx, pd, cq| {
        let (a, b) = (pool(pd, AccessFlags::LOCAL_WRITE), pool(pd, AccessFlags::LOCAL_WRITE));
        let qp = rc_self(ctx, pd, cq, path, 1);
        let other_pool = |result: rdma_verbs::Result<()>| {
            let kind = result.unwrap_err().invalid_input_kind();
            assert_eq!(kind, Some(InvalidInputKind::OtherPool), "{path:?}");
        };
        let mut list = rdma_verbs::SendBufferList::with_capacity(2);
        list.push(a.take().unwrap(), SendOp::Send).unwrap();
        list.push(b.take().unwrap(), SendOp::Send).unwrap();
        other_pool(qp.post_send_buffers(&mut list, true));
        assert_eq!(list.len(), 2, "nothing posted");
        drop(list.pop());
        // `a`'s buffer posted unsignaled: the chain stays open on `a`.
        qp.post_send_buffers(&mut list, false).unwrap();
        list.push(b.take().unwrap(), SendOp::Send).unwrap();
        other_pool(qp.post_send_buffers(&mut list, true));
        assert_eq!(mock.take_violations(), [], "{path:?}");
    });
}

/// A list's chain is one QP's and one pool's: a post through it on another QP while it is
/// open, or of another pool's buffer, is refused, by `post_send_buffers` and by
/// `post_send_buffer_chained` alike, the buffer back and the chain as it was; a signaled post
/// through it then releases every chunk chained.
#[test]
fn a_chain_refuses_another_qp_or_pool_and_a_signaled_post_releases_it() {
    on_each_path(|path, mock, ctx, pd, cq| {
        let (a, b) = (pool(pd, AccessFlags::LOCAL_WRITE), pool(pd, AccessFlags::LOCAL_WRITE));
        let (qp, other) = (rc_self(ctx, pd, cq, path, 1), rc_self(ctx, pd, cq, path, 1));
        fn refused(
            err: rdma_verbs::PostError<'_>,
            kind: InvalidInputKind,
        ) -> rdma_verbs::Buffer<'_> {
            assert_eq!(err.error.invalid_input_kind(), Some(kind), "{:?}", err.error);
            err.buffer.expect("a refused buffer comes back")
        }
        for _ in 0..2 {
            qp.post_recv_buffer(b.take().unwrap()).unwrap();
        }
        let mut list = rdma_verbs::SendBufferList::with_capacity(1);
        qp.post_send_buffer_chained(&mut list, a.take().unwrap(), SendOp::Send, false).unwrap();
        let elsewhere = InvalidInputKind::UnsignaledInFlight;
        let err =
            other.try_post_send_buffer_chained(&mut list, a.take().unwrap(), SendOp::Send, true);
        let buf = refused(err.unwrap_err(), elsewhere);
        list.push(buf, SendOp::Send).unwrap();
        let err = other.post_send_buffers(&mut list, true).unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(elsewhere), "{path:?}");
        drop(list.pop());
        let err = qp.try_post_send_buffer_chained(&mut list, b.take().unwrap(), SendOp::Send, true);
        drop(refused(err.unwrap_err(), InvalidInputKind::OtherPool));
        // The chain as it was: a signaled post closes it, and its completion frees both (the
        // SENDs land in the receives of `b`'s chunks, QP to itself).
        qp.post_send_buffer_chained(&mut list, a.take().unwrap(), SendOp::Send, true).unwrap();
        let mut wcs = [WorkCompletion::EMPTY; 4];
        let back: Vec<_> =
            cq.poll(&mut wcs).unwrap().iter_mut().filter_map(|wc| a.complete(wc)).collect();
        assert_eq!(back.len(), 1, "{path:?}: one signaled WR");
        drop(back);
        let free: Vec<_> = std::iter::from_fn(|| a.take()).collect();
        assert_eq!(free.len(), a.count(), "{path:?}: the unsignaled chunk came back too");
        // Closed, the chain takes another QP's posts.
        other.post_send_buffer_chained(&mut list, b.take().unwrap(), SendOp::Send, true).unwrap();
        assert_eq!(mock.take_violations(), [], "{path:?}");
    });
}

/// A type-1 bind on a QP of another PD than the window's is refused before the provider
/// (the strict mock's `Rule::BindOutsideMr`).
#[test]
fn bind_mw_on_a_qp_of_another_pd_is_refused() {
    on_each_path(|path, mock, ctx, pd, cq| {
        let other = ctx.alloc_pd().unwrap();
        let qp = rc_self(ctx, pd, cq, path, 1);
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::MW_BIND;
        let region = other.register_remote_writable(4096, access).unwrap();
        let mut window = other.alloc_mw(rdma_verbs::MwType::Type1).unwrap();
        let bind = rdma_verbs::MwBind::new(&region, 0..64, AccessFlags::REMOTE_WRITE).unwrap();
        let err = qp.bind_mw(&mut window, &bind, 1, SendFlags::SIGNALED).unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::OtherPd), "{path:?}: {err}");
        assert_eq!(mock.take_violations(), [], "{path:?}");
    });
}

/// On a provider this crate does not know (the mock's vendor), a failed `ibv_wr_complete`
/// may have posted the batch: one buffer's post then keeps it in flight (no buffer in the
/// `PostError`, none back in the pool from the plain post), as a list's keeps its buffers
/// (and a chained post its one), instead of handing back a chunk the NIC may still read.
#[test]
fn a_failed_wr_complete_keeps_one_buffer_in_flight_as_a_lists() {
    let fx = fixture(VerbsPath::Extended);
    let pd = fx.ctx.alloc_pd().unwrap();
    let cq = fx.ctx.create_cq(64).unwrap();
    let pool = pool(&pd, AccessFlags::LOCAL_WRITE);
    let qp = rc_self(&fx.ctx, &pd, &cq, VerbsPath::Extended, 1);
    let mut list = rdma_verbs::SendBufferList::with_capacity(1);
    list.push(pool.take().unwrap(), SendOp::Send).unwrap();
    fx.mock.fail(rdma_verbs_mock::Verb::WrComplete, libc::EIO);
    assert!(qp.post_send_buffers(&mut list, true).is_err());
    assert!(list.is_empty(), "the list's buffer stays in flight");
    fx.mock.fail(rdma_verbs_mock::Verb::WrComplete, libc::EIO);
    let err = qp.try_post_send_buffer(pool.take().unwrap(), SendOp::Send).unwrap_err();
    assert!(err.buffer.is_none(), "the buffer stays in flight: {:?}", err.buffer);
    assert_eq!(err.error.errno(), Some(libc::EIO));
    fx.mock.fail(rdma_verbs_mock::Verb::WrComplete, libc::EIO);
    let err = qp.try_post_send_buffer_chained(&mut list, pool.take().unwrap(), SendOp::Send, true);
    assert!(err.unwrap_err().buffer.is_none(), "a chained buffer stays in flight too");
    // The plain post drops only what it may: the chunk stays in flight there too.
    fx.mock.fail(rdma_verbs_mock::Verb::WrComplete, libc::EIO);
    let err = qp.post_send_buffer(pool.take().unwrap(), SendOp::Send).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EIO));
    let free: Vec<_> = std::iter::from_fn(|| pool.take()).collect();
    assert_eq!(free.len(), pool.count() - 4, "the four chunks stay the NIC's");
}

/// Whether `calls` hold a QP creation (either verb).
fn creates_a_qp(calls: &[Call]) -> bool {
    calls.iter().any(|c| matches!(c, Call::CreateQp { .. } | Call::CreateQpEx { .. }))
}

/// Every UD receive starts with the 40-byte GRH area, so a shorter one can take no message:
/// the provider (and the mock) completes it with `LOC_LEN_ERR` and moves the QP to ERROR.
/// Each receive path of a UD QP refuses it when posted, before the provider: raw single and
/// list, buffer single and list, on the QP and on an SRQ that feeds one; 40 bytes pass. An
/// SRQ that had short receives is refused to a UD QP (it serves RC ones still).
#[test]
fn ud_receives_shorter_than_the_grh_area_are_refused_on_every_path() {
    on_each_path(|path, mock, _, pd, cq| {
        let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
        let short = BufferPool::new(pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap(), 39);
        let short = short.unwrap();
        let qp = ud_up(pd, cq, path);
        let srq = pd.create_srq(16, 1).unwrap();
        let ud = QpInitAttr { srq: Some(&srq), ..attr(cq, path) };
        let _fed = pd.create_qp::<Ud>(&ud).unwrap();
        let (grh, tiny) = ([mr.sge(..40).unwrap()], [mr.sge(40..79).unwrap()]);
        let refused = |e: &Error| {
            assert_eq!(e.invalid_input_kind(), Some(InvalidInputKind::BufferTooSmall), "{e}");
            assert!(e.to_string().contains("40-byte GRH area"), "{e}");
        };
        let mut raw_list = RecvWrList::with_capacity(2);
        raw_list.push(RecvWr::new(2, &grh)).unwrap();
        raw_list.push(RecvWr::new(3, &tiny)).unwrap();
        mock.take_calls();
        // SAFETY: every post below is refused before the provider; `mr` outlives the QPs.
        unsafe {
            refused(&qp.post_recv_wr(&mut RecvWr::new(1, &tiny)).unwrap_err());
            let e = qp.post_recv_wrs(&mut raw_list).unwrap_err();
            assert_eq!(e.posted, 0);
            refused(&e.error);
            refused(&srq.post_recv_wr(&mut RecvWr::new(1, &tiny)).unwrap_err());
            let e = srq.post_recv_wrs(&mut raw_list).unwrap_err();
            assert_eq!(e.posted, 0);
            refused(&e.error);
        }
        assert_receives_refused(&qp, &srq, &short, refused);
        assert_eq!(mock.take_calls(), [], "{path:?}: nothing reached the provider");
        // The GRH area alone fits (a message of 0 bytes).
        // SAFETY: `mr` outlives the QPs and is not touched while the receives are posted.
        unsafe {
            qp.post_recv_wr(&mut RecvWr::new(4, &grh)).unwrap();
            srq.post_recv_wr(&mut RecvWr::new(5, &grh)).unwrap();
        }

        // An SRQ that took a short receive (no UD QP on it yet) is no UD QP's.
        let rc_srq = pd.create_srq(16, 1).unwrap();
        // SAFETY: as above.
        unsafe { rc_srq.post_recv_wr(&mut RecvWr::new(6, &tiny)).unwrap() };
        mock.take_calls();
        let err = pd.create_qp::<Ud>(&QpInitAttr { srq: Some(&rc_srq), ..ud }).unwrap_err();
        assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::BufferTooSmall), "{err}");
        assert!(!creates_a_qp(&mock.take_calls()), "{path:?}");
        drop(pd.create_qp::<Rc>(&QpInitAttr { srq: Some(&rc_srq), ..ud }).unwrap());
        assert_eq!(mock.take_violations(), [], "{path:?}");
    });
}

/// A QP checks the receives it takes from an SRQ against its own PD, so an SRQ of another PD
/// would fail the first message to arrive and move both QPs to ERROR (rxe does, and the mock
/// models it): refused at creation, for every type, before the provider.
#[test]
fn a_qp_on_an_srq_of_another_pd_is_refused() {
    on_each_path(|path, mock, ctx, pd, cq| {
        let other = ctx.alloc_pd().unwrap();
        let srq = other.create_srq(16, 1).unwrap();
        let on_srq = QpInitAttr { srq: Some(&srq), ..attr(cq, path) };
        mock.take_calls();
        let errors = [
            pd.create_qp::<Rc>(&on_srq).map(drop),
            pd.create_qp::<Uc>(&on_srq).map(drop),
            pd.create_qp::<Ud>(&on_srq).map(drop),
        ];
        for err in errors.map(Result::unwrap_err) {
            assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::OtherPd), "{err}");
            assert!(err.to_string().contains("in the QP's PD"), "{err}");
        }
        assert!(!creates_a_qp(&mock.take_calls()), "{path:?}");
        drop(other.create_qp::<Rc>(&on_srq).unwrap());
    });
}
