//! The soundness proof's property suite: random sequences of *safe*
//! calls — buffer receives on QPs and an SRQ, alone and in lists, single and list sends of every `SendOp` on RC,
//! UC and UD (to the target by its own rkey or a type-1 window's), window binds, drains,
//! polls that hand buffers back, resets, drops, destroys and leaks (`mem::forget`), and faults
//! the mock injects — against the strict mock provider, which checks every work request it
//! receives (SGEs inside a live MR of that lkey and the queue's PD with the access the opcode
//! needs, inline bytes in CPU memory, a live AH on UD, atomics RC-only and aligned, no buffer-tier
//! `wr_id` in flight twice, registrations still live when queued work executes, and at the
//! end none deregistered under work still queued on a leaked QP). Any violation fails the
//! case, and proptest shrinks it to a short sequence.
//!
//! The rig: one context (legacy or extended verbs, drawn per case), two PDs, one CQ, an SRQ,
//! a pool per PD (the first one at a chosen IOVA or not, drawn per case) and one the NIC may
//! only read (no `LOCAL_WRITE`), a remote-writable
//! target, an AH, and three connected pairs — RC (its second QP fed by the SRQ), UC, UD — that
//! the mock executes loopback. `PROPTEST_CASES` sets the number of cases (scripts/test runs
//! 10,000).

use std::time::Duration;

use proptest::prelude::*;
use rdma_verbs::{
    AccessFlags, AddressHandle, AddressVector, BufferPool, CompletionQueue, Connected, Context,
    Endpoint, GlobalRoute, HasReceiveQueue, Mtu, MwBind, MwType, ProtectionDomain, Psn,
    QpCapabilities, QpInitAttr, Qpn, QueuePair, RKey, Rc, RecvBufferList, RegisterOptions,
    RemoteAddr, RemoteWritableRegion, Reset, Rts, SendBufferList, SendFlags, SendOp, SendWr,
    SendWrList, SharedReceiveQueue, ToInitAttr, ToRtrAttr, ToRtsAttr, Uc, Ud, UdDestination,
    UdSend, UdToInitAttr, VerbsPath, WorkCompletion,
};
use rdma_verbs_mock::{Call, ContextConfig, Mock, Optional, Verb};
use rdma_verbs_sys as sys;

use super::open;

const CHUNK: usize = 256;
const TARGET: usize = 4096;
const QKEY: u32 = 0x0d0d;
const PORT: u8 = 1;
/// The mock port's RoCE v2 IPv4-mapped GID.
const SGID_INDEX: u8 = 3;

/// One safe call (or a fault the mock injects before the next one).
#[derive(Clone, Debug)]
enum Step {
    /// `post_recv_buffer` on QP `qp` with a buffer of pool `pool` (1: the other PD's; 2: one
    /// without `LOCAL_WRITE`).
    Recv { qp: usize, pool: usize },
    /// `SharedReceiveQueue::post_recv_buffer`.
    SrqRecv { pool: usize },
    /// `post_recv_buffers` of a list with a buffer of each of `pools`, on QP `qp`, or on the
    /// SRQ when `None`; what it keeps is dropped.
    RecvBufferList { qp: Option<usize>, pools: Vec<usize> },
    /// `post_send_buffer` (`post_send_buffer_to` on UD) of `len` bytes with `op`, reaching
    /// the target through the memory window's rkey when `window`.
    Send { qp: usize, pool: usize, op: Op, len: usize, window: bool },
    /// `bind_mw`: the type-1 window over `len` bytes of the target from `start`, with `rights`.
    Bind { qp: usize, start: usize, len: usize, rights: AccessFlags },
    /// `post_send_buffers` (`post_send_buffers_to` on UD) of `n` buffers, the first and
    /// every other one of `ops[0]` and `lens[0]`, the rest of `ops[1]` and `lens[1]` (a list
    /// of WRs built alike or not).
    List { qp: usize, pool: usize, ops: [Op; 2], lens: [usize; 2], n: usize, signal_last: bool },
    /// `post_send_buffer_chained` (`post_send_buffer_chained_to` on UD) of `len` bytes with
    /// `op` through the list of `List` steps, `signaled` or not.
    Chained { qp: usize, pool: usize, op: Op, len: usize, signaled: bool },
    /// `poll`, then `complete` on every pool; the buffers are dropped.
    Poll,
    /// `poll_with` on every CQ, whose callback completes the buffers and panics at the
    /// completion numbered `panic_at` (never when past the last): the rest stay with the CQ.
    PollWith { panic_at: usize },
    /// The next WR executed on `qp` completes with an error (the QP goes to ERROR).
    FailNextWr { qp: usize },
    /// The next post (legacy verb or extended batch) fails with ENOMEM.
    FailPost,
    /// `reset`, then connected to its peer again.
    Reset { qp: usize },
    /// `drain` (RC, UC: ERROR, every flush handed to the pools, RESET), then connected again.
    Drain { qp: usize },
    /// Dropped, or `destroy`ed.
    Drop { qp: usize, destroy: bool },
    /// Leaked with `std::mem::forget`: safe, and the QP lives on in the provider with what
    /// was posted on it.
    Forget { qp: usize },
}

/// A `SendOp` with a remote offset into the target (which may be out of range or
/// misaligned: the safe API refuses or the "NIC" fails it, never a violation).
#[derive(Clone, Copy, Debug)]
enum Op {
    Send,
    SendWithImm,
    Write(usize),
    WriteWithImm(usize),
    Read(usize),
    CompareSwap(usize),
    FetchAdd(usize),
}

impl Op {
    /// The `SendOp` against `target`; `rkey` replaces the target's when given (a window's).
    fn send_op(self, target: RemoteAddr, rkey: Option<RKey>) -> SendOp {
        let target = RemoteAddr { rkey: rkey.unwrap_or(target.rkey), ..target };
        let at = |offset: usize| RemoteAddr { addr: target.addr + offset as u64, ..target };
        match self {
            Op::Send => SendOp::Send,
            Op::SendWithImm => SendOp::SendWithImm(7),
            Op::Write(o) => SendOp::RdmaWrite(at(o)),
            Op::WriteWithImm(o) => SendOp::RdmaWriteWithImm(at(o), 9),
            Op::Read(o) => SendOp::RdmaRead(at(o)),
            Op::CompareSwap(o) => SendOp::CompareSwap { remote: at(o), compare: 0, swap: 1 },
            Op::FetchAdd(o) => SendOp::FetchAdd { remote: at(o), add: 1 },
        }
    }

    fn imm(self) -> Option<u32> {
        matches!(self, Op::SendWithImm | Op::WriteWithImm(_)).then_some(7)
    }
}

fn op() -> impl Strategy<Value = Op> {
    // Offsets past the target's end and odd ones included.
    let offset = prop_oneof![(0..TARGET / 8).prop_map(|w| w * 8), 0..TARGET + CHUNK];
    prop_oneof![
        Just(Op::Send),
        Just(Op::SendWithImm),
        offset.clone().prop_map(Op::Write),
        offset.clone().prop_map(Op::WriteWithImm),
        offset.clone().prop_map(Op::Read),
        offset.clone().prop_map(Op::CompareSwap),
        offset.prop_map(Op::FetchAdd),
    ]
}

fn step() -> impl Strategy<Value = Step> {
    let qp = 0..QPS;
    // Mostly the QPs' own PD; sometimes the other one, or a region without LOCAL_WRITE.
    let pool = prop_oneof![4 => Just(0usize), 1 => Just(1usize), 1 => Just(2usize)];
    // Atomics want 8 bytes; 0 is an empty message.
    let len = prop_oneof![Just(8usize), Just(0usize), 0..=CHUNK];
    prop_oneof![
        3 => (qp.clone(), pool.clone()).prop_map(|(qp, pool)| Step::Recv { qp, pool }),
        1 => pool.clone().prop_map(|pool| Step::SrqRecv { pool }),
        2 => (proptest::option::of(qp.clone()), proptest::collection::vec(pool.clone(), 1..5))
            .prop_map(|(qp, pools)| Step::RecvBufferList { qp, pools }),
        4 => (qp.clone(), pool.clone(), op(), len.clone(), any::<bool>())
            .prop_map(|(qp, pool, op, len, window)| Step::Send { qp, pool, op, len, window }),
        1 => (qp.clone(), 0..TARGET + CHUNK, 0..TARGET, 0..8u32).prop_map(|(qp, start, len, r)| {
            let rights = AccessFlags::from_bits_truncate(r << 1) & WINDOW_RIGHTS;
            Step::Bind { qp, start, len, rights }
        }),
        2 => (qp.clone(), pool.clone(), op(), len.clone(), any::<bool>()).prop_map(
            |(qp, pool, op, len, signaled)| Step::Chained { qp, pool, op, len, signaled }
        ),
        2 => (qp.clone(), pool, [op(), op()], [len.clone(), len], 1..5usize, any::<bool>())
            .prop_map(|(qp, pool, ops, lens, n, signal_last)| Step::List {
                qp,
                pool,
                ops,
                lens,
                n,
                signal_last
            }),
        4 => Just(Step::Poll),
        2 => (0..20usize).prop_map(|panic_at| Step::PollWith { panic_at }),
        1 => qp.clone().prop_map(|qp| Step::FailNextWr { qp }),
        1 => Just(Step::FailPost),
        1 => qp.clone().prop_map(|qp| Step::Reset { qp }),
        1 => qp.clone().prop_map(|qp| Step::Drain { qp }),
        1 => (qp.clone(), any::<bool>()).prop_map(|(qp, destroy)| Step::Drop { qp, destroy }),
        1 => qp.prop_map(|qp| Step::Forget { qp }),
    ]
}

/// The remote rights a window may grant (`REMOTE_WRITE`, `REMOTE_READ`, `REMOTE_ATOMIC` are
/// bits 1..=3 of `IBV_ACCESS_*`).
const WINDOW_RIGHTS: AccessFlags =
    AccessFlags::REMOTE_WRITE.union(AccessFlags::REMOTE_READ).union(AccessFlags::REMOTE_ATOMIC);

/// RC a, RC b (on the SRQ), UC a, UC b, UD a, UD b; each pair's peer is `i ^ 1`.
const QPS: usize = 6;

/// A QP of the rig in RTS, or gone.
enum Slot<'a> {
    Rc(QueuePair<'a, Rts, Rc>),
    Uc(QueuePair<'a, Rts, Uc>),
    Ud(QueuePair<'a, Rts, Ud>),
    Gone,
}

/// What the QPs are made from (they borrow it, so it outlives them).
struct Parts<'a, 's> {
    ctx: &'a Context,
    pd: &'a ProtectionDomain<'a>,
    send_cq: &'a CompletionQueue<'a>,
    recv_cq: &'a CompletionQueue<'a>,
    srq: &'a SharedReceiveQueue<'s>,
    path: VerbsPath,
    /// Each QP's `max_send_wr` and `max_recv_wr`.
    max_wr: u32,
}

impl<'a, 's> Parts<'a, 's> {
    fn attr(&self, srq: bool) -> QpInitAttr<'a, 's> {
        let cap = QpCapabilities {
            max_send_wr: self.max_wr,
            max_recv_wr: self.max_wr,
            max_inline_data: 32,
            ..Default::default()
        };
        QpInitAttr {
            cap,
            srq: srq.then_some(self.srq),
            verbs_path: Some(self.path),
            recv_cq: self.recv_cq,
            ..QpInitAttr::new(self.send_cq)
        }
    }

    fn rtr(&self, peer: Qpn) -> ToRtrAttr {
        let gid = self.ctx.routable_gid(PORT).unwrap().gid;
        let lid = self.ctx.query_port(PORT).unwrap().lid();
        let endpoint = Endpoint { lid, qpn: peer, psn: Psn::new(0).unwrap(), gid };
        ToRtrAttr::to_endpoint(&endpoint, PORT, Some(SGID_INDEX), Mtu::MTU_1024)
    }

    /// RESET → RTS towards `peer`; `None` when a transition fails (the QP is dropped: the
    /// "NIC" may have moved it to ERROR meanwhile, e.g. a peer's queued work failing).
    fn connect<T: Connected>(
        &self,
        qp: QueuePair<'a, Reset, T>,
        peer: Qpn,
    ) -> Option<QueuePair<'a, Rts, T>> {
        let access =
            AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_ATOMIC;
        let qp = qp.into_init(&ToInitAttr { port: PORT, access, ..Default::default() }).ok()?;
        qp.into_rtr(&self.rtr(peer)).ok()?.into_rts(&ToRtsAttr::new(Psn::new(0).unwrap())).ok()
    }

    fn ud_up(&self, qp: QueuePair<'a, Reset, Ud>) -> Option<QueuePair<'a, Rts, Ud>> {
        let qp = qp.into_init(&UdToInitAttr { port: PORT, pkey_index: 0, qkey: QKEY }).ok()?;
        qp.into_rtr().ok()?.into_rts(Psn::new(0).unwrap()).ok()
    }

    fn create<T: HasReceiveQueue>(&self, srq: bool) -> QueuePair<'a, Reset, T> {
        self.pd.create_qp::<T>(&self.attr(srq)).unwrap()
    }

    /// The six QPs, each pair connected to each other.
    fn slots(&self) -> Vec<Slot<'a>> {
        let (ra, rb) = (self.create::<Rc>(false), self.create::<Rc>(true));
        let (ua, ub) = (self.create::<Uc>(false), self.create::<Uc>(false));
        let (ra_n, rb_n, ua_n, ub_n) = (ra.qp_num(), rb.qp_num(), ua.qp_num(), ub.qp_num());
        let up = |slot: Option<Slot<'a>>| slot.expect("a fresh QP connects");
        vec![
            up(self.connect(ra, rb_n).map(Slot::Rc)),
            up(self.connect(rb, ra_n).map(Slot::Rc)),
            up(self.connect(ua, ub_n).map(Slot::Uc)),
            up(self.connect(ub, ua_n).map(Slot::Uc)),
            up(self.ud_up(self.create::<Ud>(false)).map(Slot::Ud)),
            up(self.ud_up(self.create::<Ud>(false)).map(Slot::Ud)),
        ]
    }

    /// `slot` reset and reconnected to `peer` (a UD QP has none); gone when a transition
    /// fails.
    fn reconnect(&self, slot: Slot<'a>, peer: Qpn) -> Slot<'a> {
        let slot = match slot {
            Slot::Rc(qp) => qp.reset().ok().and_then(|qp| self.connect(qp, peer)).map(Slot::Rc),
            Slot::Uc(qp) => qp.reset().ok().and_then(|qp| self.connect(qp, peer)).map(Slot::Uc),
            Slot::Ud(qp) => qp.reset().ok().and_then(|qp| self.ud_up(qp)).map(Slot::Ud),
            Slot::Gone => None,
        };
        slot.unwrap_or(Slot::Gone)
    }
}

impl Slot<'_> {
    fn qp_num(&self) -> Option<Qpn> {
        match self {
            Slot::Rc(qp) => Some(qp.qp_num()),
            Slot::Uc(qp) => Some(qp.qp_num()),
            Slot::Ud(qp) => Some(qp.qp_num()),
            Slot::Gone => None,
        }
    }

    fn raw(&self) -> Option<*mut sys::ibv_qp> {
        match self {
            Slot::Rc(qp) => Some(qp.as_raw()),
            Slot::Uc(qp) => Some(qp.as_raw()),
            Slot::Ud(qp) => Some(qp.as_raw()),
            Slot::Gone => None,
        }
    }

    /// Drops it, or destroys it (a failed destroy leaks the QP, as a drop does).
    fn remove(self, destroy: bool) {
        if !destroy {
            return;
        }
        // Errors are outcomes here: only violations fail the case.
        let _ = match self {
            Slot::Rc(qp) => qp.destroy(),
            Slot::Uc(qp) => qp.destroy(),
            Slot::Ud(qp) => qp.destroy(),
            Slot::Gone => Ok(()),
        };
    }
}

/// The CQs of a run: the QPs' `max_send_wr`/`max_recv_wr` and the SRQ's `max_wr`, whether
/// sends and receives share one CQ, and how many entries the CQs have beyond the least each
/// QP's creation accepts. Small ones fill up: the buffer tier must then refuse posts rather
/// than let a CQ overrun.
#[derive(Clone, Copy, Debug)]
struct Cqs {
    max_wr: u32,
    srq_wr: u32,
    shared: bool,
    extra: u32,
}

/// Room for everything the rig's pools can put in flight.
const ROOMY: Cqs = Cqs { max_wr: 64, srq_wr: 64, shared: true, extra: 128 };

fn cqs() -> impl Strategy<Value = Cqs> {
    let small = (1..=4u32, 1..=4u32, any::<bool>(), 0..=8u32)
        .prop_map(|(max_wr, srq_wr, shared, extra)| Cqs { max_wr, srq_wr, shared, extra });
    prop_oneof![Just(ROOMY), small]
}

/// Runs `steps` against a fresh strict mock with roomy CQs (see [`run_with`]).
fn run(steps: &[Step], extended: bool, iova: bool) -> Result<usize, String> {
    run_with(steps, extended, iova, ROOMY)
}

/// Runs `steps` against a fresh strict mock with `cqs`: how many buffers completions handed
/// back, or the first step after which the mock recorded a violation or a CQ overran.
fn run_with(steps: &[Step], extended: bool, iova: bool, cqs: Cqs) -> Result<usize, String> {
    let mock = Mock::new();
    let config = if extended { ContextConfig::extended_verbs() } else { ContextConfig::default() };
    let ctx = open(&mock, Optional::ALL, config);
    let path = if extended { VerbsPath::Extended } else { VerbsPath::Legacy };
    let (pd, other_pd) = (ctx.alloc_pd().unwrap(), ctx.alloc_pd().unwrap());
    let region = if iova {
        pd.register_with(
            16 * CHUNK,
            AccessFlags::LOCAL_WRITE,
            RegisterOptions::at_iova(0x4000_0000),
        )
        .unwrap()
    } else {
        pd.register(16 * CHUNK, AccessFlags::LOCAL_WRITE).unwrap()
    };
    let pools = [
        BufferPool::new(region, CHUNK).unwrap(),
        BufferPool::new(other_pd.register(4 * CHUNK, AccessFlags::LOCAL_WRITE).unwrap(), CHUNK)
            .unwrap(),
        // The NIC may only read this one (no LOCAL_WRITE).
        BufferPool::new(pd.register(4 * CHUNK, AccessFlags::empty()).unwrap(), CHUNK).unwrap(),
    ];
    // After the pools: buffers lent to the SRQ outlive it.
    let srq = pd.create_srq(cqs.srq_wr, 1).unwrap();
    // (The provider may give the SRQ more than asked.)
    let recv = cqs.max_wr.max(srq.max_wr());
    let entries = cqs.extra + if cqs.shared { cqs.max_wr + recv } else { recv };
    let send_cq = ctx.create_cq(entries).unwrap();
    let own_recv_cq = (!cqs.shared).then(|| ctx.create_cq(entries).unwrap());
    let recv_cq = own_recv_cq.as_ref().unwrap_or(&send_cq);
    let access = AccessFlags::LOCAL_WRITE | AccessFlags::MW_BIND | WINDOW_RIGHTS;
    let target: RemoteWritableRegion<'_> = pd.register_remote_writable(TARGET, access).unwrap();
    let remote = target.remote(..).unwrap();
    let mut window = pd.alloc_mw(MwType::Type1).unwrap();
    let ah: AddressHandle<'_> = {
        let (gid, lid) = (ctx.routable_gid(PORT).unwrap().gid, ctx.query_port(PORT).unwrap().lid());
        let av = AddressVector::new(PORT, lid).with_grh(GlobalRoute::new(gid, SGID_INDEX));
        pd.create_ah(&av).unwrap()
    };
    let parts = Parts {
        ctx: &ctx,
        pd: &pd,
        send_cq: &send_cq,
        recv_cq,
        srq: &srq,
        path,
        max_wr: cqs.max_wr,
    };
    let both = [&send_cq, recv_cq];
    let mut slots = parts.slots();
    let qpns: Vec<Qpn> = slots.iter().map(|s| s.qp_num().unwrap()).collect();
    let mut list = SendBufferList::with_capacity(4);
    let mut ud_list = SendBufferList::with_capacity(4);
    // A UD QP sends to its pair's QP.
    let dest = |qp: usize| UdDestination { ah: &ah, qpn: qpns[qp ^ 1], qkey: QKEY };
    let mut wcs = [WorkCompletion::EMPTY; 16];
    let mut handed_back = 0;

    for (i, step) in steps.iter().enumerate() {
        match *step {
            Step::Recv { qp, pool } => {
                if let Some(buf) = pools[pool].take() {
                    let _ = match &slots[qp] {
                        Slot::Rc(q) => q.post_recv_buffer(buf).map_err(drop),
                        Slot::Uc(q) => q.post_recv_buffer(buf).map_err(drop),
                        Slot::Ud(q) => q.post_recv_buffer(buf).map_err(drop),
                        Slot::Gone => Ok(()),
                    };
                }
            }
            Step::SrqRecv { pool } => {
                if let Some(buf) = pools[pool].take() {
                    let _ = srq.post_recv_buffer(buf);
                }
            }
            Step::RecvBufferList { qp, pools: ref from } => {
                let mut receives = RecvBufferList::with_capacity(from.len());
                for buf in from.iter().filter_map(|&pool| pools[pool].take()) {
                    receives.push(buf).unwrap();
                }
                let _ = match qp.map(|qp| &slots[qp]) {
                    None => srq.post_recv_buffers(&mut receives),
                    Some(Slot::Rc(q)) => q.post_recv_buffers(&mut receives),
                    Some(Slot::Uc(q)) => q.post_recv_buffers(&mut receives),
                    Some(Slot::Ud(q)) => q.post_recv_buffers(&mut receives),
                    Some(Slot::Gone) => Ok(()),
                };
            }
            Step::Send { qp, pool, op, len, window: through_window } => {
                let Some(mut buf) = pools[pool].take() else { continue };
                buf.set_len(len).unwrap();
                let send_op = op.send_op(remote, through_window.then(|| window.rkey()));
                let _ = match &slots[qp] {
                    Slot::Rc(q) => q.post_send_buffer(buf, send_op).map_err(drop),
                    Slot::Uc(q) => q.post_send_buffer(buf, send_op).map_err(drop),
                    Slot::Ud(q) => q.post_send_buffer_to(buf, &dest(qp), op.imm()).map_err(drop),
                    Slot::Gone => Ok(()),
                };
            }
            Step::List { qp, pool, ops, lens, n, signal_last } => {
                let dest = dest(qp);
                for i in 0..n {
                    let Some(mut buf) = pools[pool].take() else { break };
                    let (op, len) = (ops[i % 2], lens[i % 2]);
                    buf.set_len(len).unwrap();
                    let _ = match &slots[qp] {
                        Slot::Ud(_) => ud_list.push(buf, UdSend { dest, imm: op.imm() }),
                        _ => list.push(buf, op.send_op(remote, None)),
                    };
                }
                let _ = match &slots[qp] {
                    Slot::Rc(q) => q.post_send_buffers(&mut list, signal_last),
                    Slot::Uc(q) => q.post_send_buffers(&mut list, signal_last),
                    Slot::Ud(q) => q.post_send_buffers_to(&mut ud_list, signal_last),
                    Slot::Gone => Ok(()),
                };
                // What the list kept (refused, or its QP gone) goes back to the pools.
                while list.pop().is_some() {}
                while ud_list.pop().is_some() {}
            }
            Step::Chained { qp, pool, op, len, signaled } => {
                let Some(mut buf) = pools[pool].take() else { continue };
                buf.set_len(len).unwrap();
                let (send_op, send) =
                    (op.send_op(remote, None), UdSend { dest: dest(qp), imm: op.imm() });
                let _ = match &slots[qp] {
                    Slot::Rc(q) => q.post_send_buffer_chained(&mut list, buf, send_op, signaled),
                    Slot::Uc(q) => q.post_send_buffer_chained(&mut list, buf, send_op, signaled),
                    Slot::Ud(q) => q.post_send_buffer_chained_to(&mut ud_list, buf, send, signaled),
                    Slot::Gone => Ok(()),
                };
            }
            // Window binds complete with the program's wr_id and are not counted (as raw WRs):
            // only the roomy CQs take them.
            Step::Bind { .. } if cqs.extra < ROOMY.extra => continue,
            Step::Bind { qp, start, len, rights } => {
                // A range past the target or rights it lacks are refused before the verb.
                let Ok(bind) = MwBind::new(&target, start..start + len, rights) else { continue };
                let flags = SendFlags::SIGNALED;
                let _ = match &slots[qp] {
                    Slot::Rc(q) => q.bind_mw(&mut window, &bind, 1, flags),
                    Slot::Uc(q) => q.bind_mw(&mut window, &bind, 1, flags),
                    // Windows bind on connected QPs only (the method does not exist on UD).
                    Slot::Ud(_) | Slot::Gone => continue,
                };
            }
            Step::Poll => {
                for cq in &both[..if cqs.shared { 1 } else { 2 }] {
                    let Ok(polled) = cq.poll(&mut wcs) else { continue };
                    for wc in polled.iter_mut() {
                        let back = pools.iter().filter_map(|p| p.complete(wc)).count();
                        assert!(back <= 1, "one completion handed back {back} buffers");
                        handed_back += back;
                    }
                }
            }
            Step::PollWith { panic_at } => {
                for cq in &both[..if cqs.shared { 1 } else { 2 }] {
                    let mut given = 0;
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        cq.poll_with(16, |c| {
                            handed_back +=
                                pools.iter().filter_map(|p| p.complete(&mut c.wc)).count();
                            given += 1;
                            if given == panic_at {
                                panic!("a callback panicking at completion {panic_at}");
                            }
                        })
                    }));
                }
            }
            Step::FailNextWr { qp } => {
                if let Some(raw) = slots[qp].raw() {
                    mock.fail_next_wr(raw, sys::IBV_WC_REM_ACCESS_ERR);
                }
            }
            Step::FailPost => {
                let verb = if extended { Verb::WrComplete } else { Verb::PostSend };
                mock.fail(verb, libc::ENOMEM);
            }
            Step::Reset { qp } => {
                let slot = std::mem::replace(&mut slots[qp], Slot::Gone);
                slots[qp] = parts.reconnect(slot, qpns[qp ^ 1]);
            }
            Step::Drain { qp } => {
                let mut hand_back = |wc: &mut WorkCompletion| {
                    handed_back += pools.iter().filter_map(|p| p.complete(wc)).count();
                };
                // (Short: with small CQs a drain may wait for room that never comes, as other QPs
                // reset or dropped with buffers in flight keep theirs.)
                let limit = Duration::from_millis(50);
                // A drain that fails hands the QP back (in ERROR): it stays as it is.
                slots[qp] = match std::mem::replace(&mut slots[qp], Slot::Gone) {
                    Slot::Rc(q) => match q.try_drain(&both, limit, &mut hand_back) {
                        Ok(q) => parts.connect(q, qpns[qp ^ 1]).map_or(Slot::Gone, Slot::Rc),
                        Err(e) => Slot::Rc(e.qp),
                    },
                    Slot::Uc(q) => match q.try_drain(&both, limit, &mut hand_back) {
                        Ok(q) => parts.connect(q, qpns[qp ^ 1]).map_or(Slot::Gone, Slot::Uc),
                        Err(e) => Slot::Uc(e.qp),
                    },
                    other => other,
                };
            }
            Step::Drop { qp, destroy } => {
                std::mem::replace(&mut slots[qp], Slot::Gone).remove(destroy);
            }
            Step::Forget { qp } => std::mem::forget(std::mem::replace(&mut slots[qp], Slot::Gone)),
        }
        let violations = mock.take_violations();
        if !violations.is_empty() {
            let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
            return Err(format!("after step {i} ({step:?}): {}", list.join("; ")));
        }
        let overruns: usize = both.iter().map(|cq| mock.cq_overruns(cq.as_raw())).sum();
        if overruns != 0 {
            return Err(format!("after step {i} ({step:?}): {overruns} completions overran a CQ"));
        }
    }
    // Then the SRQ and the pools: a pool whose chunks a leaked queue still holds must keep
    // its region registered.
    drop((list, ud_list, slots, parts, both));
    drop(srq);
    drop(pools);
    let (violations, dangling) = (mock.take_violations(), mock.dangling_work());
    if violations.is_empty() && dangling.is_empty() {
        Ok(handed_back)
    } else {
        Err(format!(
            "at teardown: {violations:?}, work queued on deregistered memory: {dangling:?}"
        ))
    }
}

#[test]
fn the_rig_executes_loopback_work_on_both_paths() {
    // A receive on the SRQ (RC b takes its receives there), a SEND from RC a, an RDMA WRITE
    // of a UC pair's, a UD datagram into the first of a list of two receives: the mock
    // executes each, and every buffer comes back with its completion (RC: send and receive;
    // UC WRITE: send only; UD: send and the receive it consumed).
    let steps = [
        Step::SrqRecv { pool: 0 },
        Step::Send { qp: 0, pool: 0, op: Op::Send, len: 100, window: false },
        Step::Send { qp: 2, pool: 0, op: Op::Write(64), len: 200, window: false },
        Step::RecvBufferList { qp: Some(5), pools: vec![0, 0] },
        Step::Send { qp: 4, pool: 0, op: Op::SendWithImm, len: 50, window: false },
        // And an RDMA READ through a window bound to the target: one more.
        Step::Bind { qp: 1, start: 0, len: 512, rights: AccessFlags::REMOTE_READ },
        Step::Send { qp: 0, pool: 0, op: Op::Read(128), len: 64, window: true },
        Step::Poll,
        // And a receive that only a drain's flush hands back.
        Step::Recv { qp: 3, pool: 0 },
        Step::Drain { qp: 3 },
    ];
    for (extended, iova) in [(false, false), (true, true)] {
        assert_eq!(run(&steps, extended, iova), Ok(7), "extended {extended}, iova {iova}");
    }
}

/// Holes once open, each a sequence the strict mock flagged before the fix: a list that
/// skipped `post_send_wr`'s checks (an atomic on UC, a misaligned atomic), and a pool over a
/// region at a chosen IOVA whose SGEs carried CPU addresses (receive, send, read).
#[test]
fn closed_holes_stay_closed() {
    let list =
        |qp, op| Step::List { qp, pool: 0, ops: [op; 2], lens: [8; 2], n: 2, signal_last: true };
    let holes = [
        ("an atomic on UC in a list", vec![list(2, Op::FetchAdd(0))], false),
        ("a misaligned atomic in a list", vec![list(0, Op::CompareSwap(4))], false),
        (
            "a pool over an IOVA region",
            vec![
                Step::SrqRecv { pool: 0 },
                Step::Send { qp: 0, pool: 0, op: Op::Send, len: 200, window: false },
                Step::Send { qp: 0, pool: 0, op: Op::Read(0), len: 100, window: false },
                Step::Poll,
            ],
            true,
        ),
    ];
    for (hole, steps, iova) in holes {
        for extended in [false, true] {
            let back = run(&steps, extended, iova);
            assert!(back.is_ok(), "{hole} (extended {extended}): {back:?}");
        }
    }
}

/// A pool run dry hands out no chunk the NIC holds: 17 receives on a pool of 16 chunks (the
/// last finds none), then one more. A search that freed each chunk it failed to claim (a
/// token built with `then_some`, dropped) gave the 18th receive a chunk of the first,
/// still queued (the mock's `Rule::BufferInFlight`).
#[test]
fn a_dry_pool_hands_out_no_chunk_in_flight() {
    let steps = vec![Step::Recv { qp: 0, pool: 0 }; 18];
    for extended in [false, true] {
        assert_eq!(run(&steps, extended, false), Ok(0), "extended {extended}");
    }
}

/// Hole 2: after a list post, a WR of the list posted alone posts only itself (its `next`
/// from the list is not followed), on the legacy verbs where `next` is the list.
#[test]
fn a_wr_once_posted_in_a_list_posts_only_itself() {
    let mock = Mock::new();
    let ctx = open(&mock, Optional::ALL, ContextConfig::default());
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(256).unwrap();
    let srq = pd.create_srq(4, 1).unwrap();
    let parts = Parts {
        ctx: &ctx,
        pd: &pd,
        send_cq: &cq,
        recv_cq: &cq,
        srq: &srq,
        path: VerbsPath::Legacy,
        max_wr: 64,
    };
    let mr = pd.register(3 * 64, AccessFlags::LOCAL_WRITE).unwrap();
    let qp = parts.connect(parts.create::<Rc>(false), Qpn::new(0xab_cdef).unwrap()).unwrap();
    let sges: Vec<_> = (0..3).map(|i| [mr.sge(i * 64..(i + 1) * 64).unwrap()]).collect();
    let mut wrs: SendWrList<'_> =
        sges.iter().enumerate().map(|(i, sge)| SendWr::send(i as u64, sge)).collect();
    mock.take_calls();
    // SAFETY: the QP's peer is no QP of the mock: nothing executes, and the bytes are never
    // written while the QP lives.
    unsafe { qp.post_send_wrs(&mut wrs).unwrap() };
    // Moved out of the list to a new allocation, the old one freed: a stale `next` would
    // point there (which memcheck reports as an invalid read).
    let mut moved = Vec::with_capacity(16);
    moved.append(&mut Vec::from(wrs));
    // SAFETY: as above.
    unsafe { qp.post_send_wr(&mut moved[0]).unwrap() };
    let posts: Vec<_> = mock
        .take_calls()
        .into_iter()
        .filter_map(|call| match call {
            Call::PostSend { wr_ids } => Some(wr_ids),
            _ => None,
        })
        .collect();
    assert_eq!(posts, [vec![0, 1, 2], vec![0]]);
}

proptest! {
    #![proptest_config(ProptestConfig { max_shrink_iters: 4096, ..ProptestConfig::default() })]

    #[test]
    fn no_sequence_of_safe_calls_touches_memory_it_does_not_own_or_overruns_a_cq(
        steps in proptest::collection::vec(step(), 1..40),
        extended in any::<bool>(),
        iova in any::<bool>(),
        cqs in cqs(),
    ) {
        if let Err(violation) = run_with(&steps, extended, iova, cqs) {
            return Err(TestCaseError::fail(violation));
        }
    }
}
