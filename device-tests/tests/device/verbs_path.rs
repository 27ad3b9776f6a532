//! One suite over a device for both verbs paths: SEND, SEND with immediate, RDMA
//! WRITE (with immediate, and from two SGEs), RDMA READ, atomics, and a batch of many WRs per doorbell, every
//! completion and byte checked. Its QPs connect through rdma_cm to the device's own address,
//! so the same code runs on rxe0 (`$RDMA_VM_IPV4`), which has the extended CQ and QP, and on
//! siw0 (`$RDMA_VM_SIW_IPV4`, `scripts/rdma-vm --siw`), which has neither: each run asserts
//! and prints the path its CQs and QPs took. Immediate data runs only over InfiniBand
//! transports (iWARP has none), atomics only where the device's `atomic_cap` allows them.
//! Neither device has completion timestamps nor CQ moderation: asking for them is
//! `Unsupported`.
//! Ports 19040–19049.

use std::net::SocketAddr;
use std::time::Duration;

use rdma_verbs::cm::{ConnParam, EventChannel};
use rdma_verbs::*;

use super::cm::{listen_on, resolved};
use super::pair::{pattern, wait_for, Loopback};
use super::test_cases;
use rdma_verbs_device_tests::{require_device, rxe, siw, Target, RXE};

const STEP: Duration = Duration::from_secs(20);
/// The bytes each single operation moves, and the WRs of the batch.
const LEN: usize = 256;
const BATCH: usize = 32;
/// Where each operation lands in the 64 KiB regions.
const SEND_AT: usize = 0;
const IMM_AT: usize = 4096;
const WRITE_AT: usize = 8192;
const WRITE_IMM_AT: usize = 12288;
const READ_AT: usize = 16384;
const ATOMIC_AT: usize = 20480;
const BATCH_AT: usize = 32768;

/// Two RC QPs of the fixture's PD, `a` on its CQ and `b` on `cq_b`, connected to each other
/// through rdma_cm on `t` at `port` (the server side on a second thread); runs `f` on them.
fn with_connected_pair(
    t: &Target,
    port: u16,
    f: impl FnOnce(&Loopback<'_>, &CompletionQueue<'_>, &QueuePair<'_, Rts>, &QueuePair<'_, Rts>),
) {
    let addr = SocketAddr::new(t.ip, port);
    let server_channel = EventChannel::new().expect("event channel");
    let listener = listen_on(&server_channel, addr);
    let channel = EventChannel::new().expect("event channel");
    let id = resolved(&channel, addr);
    // librdmacm opens one context per device: the server's connection id shares it.
    let ctx = id.context().expect("the id's context");
    assert_eq!(ctx.name(), t.device, "rdma_cm picked the device by address");
    let atomics = atomics(ctx);
    let lo = Loopback::new(ctx, 128);
    let (cq_a, cq_b) = (&lo.cq, ctx.create_cq(128).expect("cq"));
    let cap =
        QpCapabilities { max_send_wr: 64, max_recv_wr: 16, max_send_sge: 2, ..Default::default() };
    let mut access =
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    if atomics {
        access |= AccessFlags::REMOTE_ATOMIC;
    }
    let init = ToInitAttr { port: id.port_num(), access, ..ToInitAttr::default() };
    let new_qp = |cq| {
        let qp = lo.pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(cq) }).expect("qp");
        qp.into_init(&init).expect("INIT")
    };
    let (qp_a, qp_b) = (new_qp(cq_a), new_qp(&cq_b));
    let param = ConnParam { responder_resources: 4, initiator_depth: 4, ..ConnParam::default() };
    std::thread::scope(|s| {
        let server = s.spawn(move || {
            let request = listener.get_request(STEP).expect("connect request");
            let up =
                request.id.accept(qp_b, &param, STEP).unwrap_or_else(|e| panic!("accept: {e}"));
            (listener, request, up)
        });
        let a = id.connect(qp_a, &param, STEP).unwrap_or_else(|e| panic!("connect: {e}"));
        let (_listener, request, b) = server.join().expect("server thread");
        f(&lo, &cq_b, &a.qp, &b.qp);
        id.disconnect().expect("disconnect");
        drop((a, b, request));
    });
}

fn atomics(ctx: &Context) -> bool {
    ctx.query_device().expect("query_device").as_raw().atomic_cap != sys::IBV_ATOMIC_NONE
}

/// Polls `cq` for one completion; checks its id, status and opcode; returns it.
#[track_caller]
fn one(cq: &CompletionQueue<'_>, wr_id: u64, opcode: WcOpcode) -> WorkCompletion {
    let wc = wait_for(cq, 1).pop().expect("one completion");
    assert_eq!(
        (wc.wr_id(), wc.status(), wc.opcode()),
        (wr_id, WcStatus::SUCCESS, opcode),
        "{wc:?}"
    );
    wc
}

/// The suite on `target` (when it is there): every operation the device allows, on both
/// paths alike.
fn suite(target: Option<Target>, port: u16, expected: VerbsPath) {
    let Some(t) = &target else { return };
    with_connected_pair(t, port, |lo, cq_b, a, b| {
        let cq_a = &lo.cq;
        println!(
            "{}: CQ path {}, {}; QP send path {}, {}",
            t.device,
            cq_a.verbs_path(),
            cq_b.verbs_path(),
            a.verbs_path(),
            b.verbs_path()
        );
        for path in [cq_a.verbs_path(), cq_b.verbs_path(), a.verbs_path(), b.verbs_path()] {
            assert_eq!(path, expected, "{}: every CQ and QP takes the {expected}", t.device);
        }
        let region = 64 << 10;
        let mut local = lo.region(region);
        let mut remote_access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let atomics = atomics(lo.ctx);
        if atomics {
            remote_access |= AccessFlags::REMOTE_ATOMIC;
        }
        let mut target = lo.pd.register_remote_writable(region, remote_access).unwrap();
        let base = target.remote(..).unwrap();
        let remote = |at: usize| RemoteAddr { addr: base.addr + at as u64, rkey: base.rkey };
        let imm = !t.iwarp;

        // Receives for SEND, SEND with immediate and WRITE with immediate.
        let recv_sges = [
            [target.sge(SEND_AT..SEND_AT + LEN).unwrap()],
            [target.sge(IMM_AT..IMM_AT + LEN).unwrap()],
            [target.sge(WRITE_IMM_AT..WRITE_IMM_AT + LEN).unwrap()],
        ];
        for (i, sge) in recv_sges.iter().enumerate() {
            // SAFETY: the receive areas are read only after their completions.
            unsafe { b.post_recv_wr(&mut RecvWr::new(100 + i as u64, sge)).unwrap() };
        }

        // SEND.
        local.as_mut_slice()[SEND_AT..SEND_AT + LEN].copy_from_slice(&pattern(LEN, 1));
        let sge = [local.sge(SEND_AT..SEND_AT + LEN).unwrap()];
        // SAFETY: the source is not written until its completion.
        unsafe { a.post_send_wr(&mut SendWr::send(1, &sge).flags(SendFlags::SIGNALED)).unwrap() };
        one(cq_a, 1, WcOpcode::SEND);
        let wc = one(cq_b, 100, WcOpcode::RECV);
        assert_eq!((wc.byte_len(), wc.imm_data()), (LEN as u32, None));
        assert_eq!(wc.qp_num(), b.qp_num());
        let mut got = vec![0; LEN];
        target.read(SEND_AT, &mut got).unwrap();
        assert!(got == pattern(LEN, 1), "SEND: the receive buffer differs");

        if imm {
            local.as_mut_slice()[IMM_AT..IMM_AT + LEN].copy_from_slice(&pattern(LEN, 2));
            let sge = [local.sge(IMM_AT..IMM_AT + LEN).unwrap()];
            let mut wr = SendWr::send_with_imm(2, &sge, 0xfeed_0002).flags(SendFlags::SIGNALED);
            // SAFETY: as above.
            unsafe { a.post_send_wr(&mut wr).unwrap() };
            one(cq_a, 2, WcOpcode::SEND);
            let wc = one(cq_b, 101, WcOpcode::RECV);
            assert_eq!((wc.byte_len(), wc.imm_data()), (LEN as u32, Some(0xfeed_0002)));
            target.read(IMM_AT, &mut got).unwrap();
            assert!(got == pattern(LEN, 2), "SEND with immediate: the receive buffer differs");
        }

        // RDMA WRITE from two SGEs of different lengths (rxe's extended SGE list miscounts
        // them: the crate posts such WRs through ibv_post_send).
        local.as_mut_slice()[WRITE_AT..WRITE_AT + LEN].copy_from_slice(&pattern(LEN, 3));
        let split = WRITE_AT + LEN / 4;
        let sge = [local.sge(WRITE_AT..split).unwrap(), local.sge(split..WRITE_AT + LEN).unwrap()];
        let mut wr = SendWr::rdma_write(3, &sge, remote(WRITE_AT)).flags(SendFlags::SIGNALED);
        // SAFETY: as above.
        unsafe { a.post_send_wr(&mut wr).unwrap() };
        one(cq_a, 3, WcOpcode::RDMA_WRITE);
        target.read(WRITE_AT, &mut got).unwrap();
        assert!(got == pattern(LEN, 3), "RDMA WRITE: the target differs");

        if imm {
            local.as_mut_slice()[WRITE_IMM_AT..WRITE_IMM_AT + LEN]
                .copy_from_slice(&pattern(LEN, 4));
            let sge = [local.sge(WRITE_IMM_AT..WRITE_IMM_AT + LEN).unwrap()];
            let mut wr = SendWr::rdma_write_with_imm(4, &sge, remote(WRITE_IMM_AT), 0xfeed_0004)
                .flags(SendFlags::SIGNALED);
            // SAFETY: as above.
            unsafe { a.post_send_wr(&mut wr).unwrap() };
            one(cq_a, 4, WcOpcode::RDMA_WRITE);
            // The third receive: SEND with immediate consumed the second.
            let wc = one(cq_b, 102, WcOpcode::RECV_RDMA_WITH_IMM);
            assert_eq!(wc.imm_data(), Some(0xfeed_0004));
            target.read(WRITE_IMM_AT, &mut got).unwrap();
            assert!(got == pattern(LEN, 4), "RDMA WRITE with immediate: the target differs");
        }

        // RDMA READ.
        target.write(READ_AT, &pattern(LEN, 5)).unwrap();
        let sge = [local.sge(READ_AT..READ_AT + LEN).unwrap()];
        let mut wr = SendWr::rdma_read(5, &sge, remote(READ_AT)).flags(SendFlags::SIGNALED);
        // SAFETY: the destination is not touched until its completion.
        unsafe { a.post_send_wr(&mut wr).unwrap() };
        let wc = one(cq_a, 5, WcOpcode::RDMA_READ);
        assert_eq!(wc.byte_len(), LEN as u32);
        assert!(local.as_slice()[READ_AT..READ_AT + LEN] == pattern(LEN, 5), "RDMA READ differs");

        if atomics {
            target.write(ATOMIC_AT, &40u64.to_ne_bytes()).unwrap();
            let sge = [local.sge(ATOMIC_AT..ATOMIC_AT + 8).unwrap()];
            let mut wr =
                SendWr::fetch_add(6, &sge, remote(ATOMIC_AT), 2).flags(SendFlags::SIGNALED);
            // SAFETY: the result word is not touched until its completion.
            unsafe { a.post_send_wr(&mut wr).unwrap() };
            one(cq_a, 6, WcOpcode::FETCH_ADD);
            let old =
                u64::from_ne_bytes(local.as_slice()[ATOMIC_AT..ATOMIC_AT + 8].try_into().unwrap());
            assert_eq!(old, 40, "fetch-and-add returns the old value");
            let mut wr =
                SendWr::compare_swap(7, &sge, remote(ATOMIC_AT), 42, 7).flags(SendFlags::SIGNALED);
            // SAFETY: as above.
            unsafe { a.post_send_wr(&mut wr).unwrap() };
            one(cq_a, 7, WcOpcode::COMP_SWAP);
            let old =
                u64::from_ne_bytes(local.as_slice()[ATOMIC_AT..ATOMIC_AT + 8].try_into().unwrap());
            let mut now = [0; 8];
            target.read(ATOMIC_AT, &mut now).unwrap();
            assert_eq!((old, u64::from_ne_bytes(now)), (42, 7), "compare-and-swap");
        }

        // A batch of WRITEs, one doorbell, only the last signaled.
        let chunk = LEN / 2;
        for i in 0..BATCH {
            let at = BATCH_AT + i * chunk;
            local.as_mut_slice()[at..at + chunk].copy_from_slice(&pattern(chunk, 10 + i as u8));
        }
        let sges: Vec<[Sge; 1]> = (0..BATCH)
            .map(|i| [local.sge(BATCH_AT + i * chunk..BATCH_AT + (i + 1) * chunk).unwrap()])
            .collect();
        let mut wrs: Vec<SendWr<'_>> = sges
            .iter()
            .enumerate()
            .map(|(i, sge)| SendWr::rdma_write(1000 + i as u64, sge, remote(BATCH_AT + i * chunk)))
            .collect();
        wrs.last_mut().unwrap().set_flags(SendFlags::SIGNALED);
        let mut wrs = SendWrList::from(wrs);
        // SAFETY: the sources are not written until the last (signaled) WR completed.
        unsafe { a.post_send_wrs(&mut wrs).unwrap_or_else(|e| panic!("{e}")) };
        one(cq_a, 1000 + BATCH as u64 - 1, WcOpcode::RDMA_WRITE);
        let mut batch = vec![0; BATCH * chunk];
        target.read(BATCH_AT, &mut batch).unwrap();
        for (i, got) in batch.chunks(chunk).enumerate() {
            assert!(got == pattern(chunk, 10 + i as u8), "batch WRITE {i} differs");
        }

        // Nothing else completed anywhere.
        let mut rest: [WorkCompletion; 4] = Default::default();
        assert!(cq_a.poll(&mut rest).unwrap().is_empty(), "stray send completions");
        assert!(cq_b.poll(&mut rest).unwrap().is_empty(), "stray receive completions");
    });
}

test_cases! { suite:
    every_operation_and_a_batch_on_rxe_take_the_extended_verbs(rxe(), 19040, VerbsPath::Extended);
    every_operation_and_a_batch_on_siw_take_the_legacy_verbs(siw(), 19041, VerbsPath::Legacy);
}

/// siw has no extended CQ or QP: forcing them is `Unsupported` naming the verb, and the
/// default falls back.
#[test]
fn forcing_the_extended_verbs_on_siw_is_unsupported_naming_the_verb() {
    let Some(t) = siw() else { return };
    let ctx = Context::open(t.device).unwrap();
    let forced = CqAttr { verbs_path: Some(VerbsPath::Extended), ..CqAttr::default() };
    let err = ctx.create_cq_with(16, &forced).expect_err("siw has no extended CQ");
    assert!(matches!(err, Error::Unsupported { what: "ibv_create_cq_ex" }), "{err:?}");
    println!("{}: forced extended CQ: {err}", t.device);
    let cq = ctx.create_cq(32).unwrap();
    assert_eq!(cq.verbs_path(), VerbsPath::Legacy);
    let pd = ctx.alloc_pd().unwrap();
    let attr = QpInitAttr { verbs_path: Some(VerbsPath::Extended), ..QpInitAttr::new(&cq) };
    let err = pd.create_rc_qp(&attr).expect_err("siw has no extended QP");
    assert!(matches!(err, Error::Unsupported { what: "ibv_create_qp_ex" }), "{err:?}");
    println!("{}: forced extended QP: {err}", t.device);
    assert_eq!(pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap().verbs_path(), VerbsPath::Legacy);
}

/// Forcing the legacy verbs on rxe, which has both, gives legacy objects; the default gives
/// extended ones.
#[test]
fn rxe_takes_the_legacy_verbs_when_forced() {
    let Some(ctx) = require_device(RXE) else { return };
    let legacy = CqAttr { verbs_path: Some(VerbsPath::Legacy), ..CqAttr::default() };
    let cq = ctx.create_cq_with(32, &legacy).unwrap();
    assert_eq!(
        (cq.verbs_path(), ctx.create_cq(16).unwrap().verbs_path()),
        (VerbsPath::Legacy, VerbsPath::Extended)
    );
    let pd = ctx.alloc_pd().unwrap();
    let attr = QpInitAttr { verbs_path: Some(VerbsPath::Legacy), ..QpInitAttr::new(&cq) };
    assert_eq!(pd.create_rc_qp(&attr).unwrap().verbs_path(), VerbsPath::Legacy);
    assert_eq!(pd.create_rc_qp(&QpInitAttr::new(&cq)).unwrap().verbs_path(), VerbsPath::Extended);
}

/// Neither rxe nor siw stamps its completions: asking for timestamps is `Unsupported` (rxe's
/// `completion_timestamp_mask` is 0; siw has not even the extended CQ), never a CQ without
/// them. On `target`, when it is there.
fn completion_timestamps_are_unsupported(target: Option<Target>) {
    let Some(t) = &target else { return };
    let ctx = Context::open(t.device).unwrap();
    let attr = CqAttr { timestamps: true, ..CqAttr::default() };
    let err = ctx.create_cq_with(16, &attr).expect_err("no completion timestamps");
    assert!(matches!(err, Error::Unsupported { .. }), "{}: {err:?}", t.device);
    println!("{}: completion timestamps: {err}", t.device);
}

test_cases! { completion_timestamps_are_unsupported:
    completion_timestamps_are_unsupported_on_rxe(rxe());
    completion_timestamps_are_unsupported_on_siw(siw());
}

/// Neither rxe nor siw has CQ moderation (their providers set no `modify_cq` op): asking
/// for it is a clean `Unsupported`, and the CQ goes on as before.
fn cq_moderation_is_unsupported(target: Option<Target>) {
    let Some(t) = target else { return };
    let ctx = Context::open(t.device).unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let err = cq.set_moderation(16, 10).expect_err("no CQ moderation");
    assert!(matches!(err, Error::Unsupported { what: "ibv_modify_cq" }), "{err:?}");
    println!("{}: CQ moderation: {err}", t.device);
    assert!(cq.poll(&mut [WorkCompletion::EMPTY]).unwrap().is_empty());
}

#[test]
fn cq_moderation_on_rxe_is_unsupported() {
    cq_moderation_is_unsupported(rxe());
}

#[test]
fn cq_moderation_on_siw_is_unsupported() {
    cq_moderation_is_unsupported(siw());
}
