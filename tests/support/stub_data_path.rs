//! A mock context whose data-path ops (`post_send`, `post_recv`, `poll_cq`) are the caller's,
//! an RC QP on it brought to RTS, and stub members for its extended CQ and QP: for
//! `benches/data_path.rs` and `tests/no_alloc.rs`.
//!
//! The mock's own data-path ops record every call in a log that only grows, allocate the
//! list of `wr_id`s they record, and look the QP up in a hash map: costs that would swamp a
//! wrapper measured in nanoseconds, and allocations that would be counted as ours. Everything
//! else (the context, PD, CQ, MR, QP and its transitions) is the mock's.

use std::ffi::c_int;
use std::hint::black_box;
use std::net::Ipv6Addr;
use std::sync::Mutex;

use rdma_verbs::{
    AccessFlags, BufferPool, CompletionQueue, Context, Endpoint, Gid, Lid, Mtu, ProtectionDomain,
    Psn, QpCapabilities, QpInitAttr, Qpn, QueuePair, Reset, Rts, Sge, ToInitAttr, ToRtrAttr,
    ToRtsAttr,
};
use rdma_verbs_mock::{self as mock, ContextConfig, Mock, Optional};
use rdma_verbs_sys as sys;

/// The provider functions a context gets for its data path.
pub struct DataPath {
    pub post_send: unsafe extern "C" fn(
        *mut sys::ibv_qp,
        *mut sys::ibv_send_wr,
        *mut *mut sys::ibv_send_wr,
    ) -> c_int,
    pub post_recv: unsafe extern "C" fn(
        *mut sys::ibv_qp,
        *mut sys::ibv_recv_wr,
        *mut *mut sys::ibv_recv_wr,
    ) -> c_int,
    pub poll_cq: unsafe extern "C" fn(*mut sys::ibv_cq, c_int, *mut sys::ibv_wc) -> c_int,
}

/// A context of `mock` (which must outlive it), shaped by `config`, with `ops` as its legacy
/// data path.
pub fn context(mock: &Mock, ops: DataPath, config: ContextConfig) -> Context {
    context_with(mock, ops, config, None)
}

/// [`context`], whose extended CQs and QPs get `stubs` ([`stub_cq`], [`stub_qp`]) as they
/// are created: the crate reads their members once, at creation.
pub fn stubbed_context(
    mock: &Mock,
    ops: DataPath,
    config: ContextConfig,
    stubs: &'static ExtendedStubs,
) -> Context {
    context_with(mock, ops, config, Some(stubs))
}

fn context_with(
    mock: &Mock,
    ops: DataPath,
    config: ContextConfig,
    stubs: Option<&'static ExtendedStubs>,
) -> Context {
    let raw = mock.context(config);
    if let Some(stubs) = stubs {
        // SAFETY: a fresh extended context of the mock that nothing else uses yet.
        unsafe { wrap_creation(raw.as_ptr(), stubs) };
    }
    // SAFETY: a fresh context that nothing else uses yet: filling its op table is what a
    // provider does when it opens one.
    unsafe {
        let table = &mut (*raw.as_ptr()).ops;
        table.post_send = Some(ops.post_send);
        table.post_recv = Some(ops.post_recv);
        table.poll_cq = Some(ops.poll_cq);
    }
    // SAFETY: a fresh context of the mock library, owned by the returned value from now on;
    // callers drop it before the mock.
    unsafe { Context::from_raw(mock::library(Optional::ALL), raw, mock::DEVICE_NAME.into()) }
}

/// `qp` connected to a RoCE peer, in RTS.
fn into_rts(qp: QueuePair<'_, Reset>) -> QueuePair<'_, Rts> {
    let gid = Gid::from("::ffff:192.0.2.9".parse::<Ipv6Addr>().expect("an IPv6 address"));
    let peer =
        Endpoint { lid: Lid::new(0), qpn: Qpn::new(0x12).unwrap(), psn: Psn::new(1).unwrap(), gid };
    // Index 3 of the mock port's GID table is its RoCE v2 IPv4-mapped entry (RoCE needs a GRH).
    let rtr = ToRtrAttr::to_endpoint(&peer, 1, Some(3), Mtu::MTU_1024);
    let qp = qp.into_init(&ToInitAttr::default()).expect("RESET→INIT");
    let qp = qp.into_rtr(&rtr).expect("INIT→RTR");
    qp.into_rts(&ToRtsAttr::new(Psn::new(1).unwrap())).expect("RTR→RTS")
}

/// A WR that links to the next of its list, as those `ibv_post_send(3)` and
/// `ibv_post_recv(3)` take.
pub trait Linked {
    /// The next WR of the list; null after the last.
    fn next(&self) -> *mut Self;
}

impl Linked for sys::ibv_send_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

impl Linked for sys::ibv_recv_wr {
    fn next(&self) -> *mut Self {
        self.next
    }
}

/// Calls `f` with each WR of the list that `wr` heads, in order.
///
/// # Safety
///
/// `wr` is null or heads a valid list.
pub unsafe fn each_wr<W: Linked>(mut wr: *mut W, mut f: impl FnMut(&W)) {
    while !wr.is_null() {
        // SAFETY: an element of the caller's valid list.
        let w = unsafe { &*wr };
        f(w);
        wr = w.next();
    }
}

/// An RC QP of `pd` on `cq` with room for 64 sends and 64 receives, connected and in RTS.
pub fn rts_qp<'a>(pd: &'a ProtectionDomain<'_>, cq: &'a CompletionQueue<'_>) -> QueuePair<'a, Rts> {
    let cap = QpCapabilities { max_send_wr: 64, max_recv_wr: 64, ..Default::default() };
    into_rts(pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(cq) }).expect("an RC QP"))
}

/// Runs `f` with an RC QP of `ctx` in RTS (room for 64 sends and 64 receives), its CQ (room
/// for all their completions), an SGE of the first 64 bytes of a 4 KiB registered region,
/// and a pool of 64 buffers of 64 bytes in the QP's PD (which outlives the QP, as the buffer
/// tier needs).
pub fn with_rts_qp<R>(
    ctx: &Context,
    f: impl for<'q, 'a> FnOnce(
        &'q QueuePair<'a, Rts>,
        &'q CompletionQueue<'a>,
        Sge,
        &'a BufferPool<'a>,
    ) -> R,
) -> R {
    let pd = ctx.alloc_pd().expect("a PD");
    let cq = ctx.create_cq(128).expect("a CQ");
    let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).expect("an MR");
    let sge = mr.sge(..64).expect("an SGE");
    let pool = BufferPool::new(pd.register(64 * 64, AccessFlags::LOCAL_WRITE).expect("an MR"), 64)
        .expect("a pool");
    let qp = rts_qp(&pd, &cq);
    f(&qp, &cq, sge, &pool)
}

/// The members of an extended CQ and QP that a caller's stub provides; [`stub_cq`] and
/// [`stub_qp`] fill the others with stubs that do nothing but read their arguments.
pub struct ExtendedStubs {
    pub start_poll: unsafe extern "C" fn(*mut sys::ibv_cq_ex, *mut sys::ibv_poll_cq_attr) -> c_int,
    /// `None` keeps the mock's (a CQ polled one completion per session never calls it).
    pub next_poll: Option<unsafe extern "C" fn(*mut sys::ibv_cq_ex) -> c_int>,
    pub read_opcode: extern "C" fn(*mut sys::ibv_cq_ex) -> sys::ibv_wc_opcode,
    pub read_byte_len: extern "C" fn(*mut sys::ibv_cq_ex) -> u32,
    /// `None` keeps the mock's (for a caller that builds no SEND).
    pub wr_send: Option<unsafe extern "C" fn(*mut sys::ibv_qp_ex)>,
    pub wr_rdma_write: unsafe extern "C" fn(*mut sys::ibv_qp_ex, u32, u64),
}

type CreateCqEx = unsafe extern "C" fn(
    *mut sys::ibv_context,
    *mut sys::ibv_cq_init_attr_ex,
) -> *mut sys::ibv_cq_ex;
type CreateQpEx =
    unsafe extern "C" fn(*mut sys::ibv_context, *mut sys::ibv_qp_init_attr_ex) -> *mut sys::ibv_qp;

/// A context whose creation ops [`wrap_creation`] wrapped: the mock's, and the stubs.
struct Wrapped {
    ctx: usize,
    create_cq_ex: CreateCqEx,
    create_qp_ex: CreateQpEx,
    stubs: &'static ExtendedStubs,
}

static WRAPPED: Mutex<Vec<Wrapped>> = Mutex::new(Vec::new());

/// The mock's creation ops of `ctx` and its stubs.
fn wrapped(ctx: *mut sys::ibv_context) -> (CreateCqEx, CreateQpEx, &'static ExtendedStubs) {
    let all = WRAPPED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let w = all.iter().rev().find(|w| w.ctx == ctx as usize).expect("a wrapped context");
    (w.create_cq_ex, w.create_qp_ex, w.stubs)
}

/// Replaces the `create_cq_ex` and `create_qp_ex` ops of `ctx` with ones that call the
/// mock's and stub what they create.
///
/// # Safety
///
/// `ctx` must be a live extended context of the mock that nothing uses during the call.
unsafe fn wrap_creation(ctx: *mut sys::ibv_context, stubs: &'static ExtendedStubs) {
    // SAFETY: an extended context is the last field of its `verbs_context`; the caller's
    // unused context, whose ops a provider fills when it opens one.
    unsafe {
        let v = &mut *ctx
            .byte_sub(std::mem::offset_of!(sys::verbs_context, context))
            .cast::<sys::verbs_context>();
        let wrapped = Wrapped {
            ctx: ctx as usize,
            create_cq_ex: v.create_cq_ex.expect("the mock's create_cq_ex"),
            create_qp_ex: v.create_qp_ex.expect("the mock's create_qp_ex"),
            stubs,
        };
        WRAPPED.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push(wrapped);
        v.create_cq_ex = Some(create_cq_ex);
        v.create_qp_ex = Some(create_qp_ex);
    }
}

unsafe extern "C" fn create_cq_ex(
    ctx: *mut sys::ibv_context,
    attr: *mut sys::ibv_cq_init_attr_ex,
) -> *mut sys::ibv_cq_ex {
    let (create, _, stubs) = wrapped(ctx);
    // SAFETY: the mock's op, with the caller's arguments; a CQ it created is live and unused.
    unsafe {
        let cq = create(ctx, attr);
        if !cq.is_null() {
            stub_cq(cq, stubs);
        }
        cq
    }
}

unsafe extern "C" fn create_qp_ex(
    ctx: *mut sys::ibv_context,
    attr: *mut sys::ibv_qp_init_attr_ex,
) -> *mut sys::ibv_qp {
    let (_, create, stubs) = wrapped(ctx);
    let to_ex = mock::fns(Optional::ALL).ibv_qp_to_qp_ex.expect("the mock's ibv_qp_to_qp_ex");
    // SAFETY: the mock's op, with the caller's arguments; a QP it created is live and unused.
    unsafe {
        let qp = create(ctx, attr);
        if !qp.is_null() {
            let ex = to_ex(qp);
            if !ex.is_null() {
                stub_qp(ex, stubs);
            }
        }
        qp
    }
}

/// Replaces the mock's members of an extended CQ (which record calls, allocating) with
/// `stubs` and, for the rest, stubs that record nothing: zero for every field a completion
/// has besides its opcode and length, 1000 for its timestamp.
///
/// # Safety
///
/// `cq` must be a live extended CQ that nothing uses during the call.
unsafe fn stub_cq(cq: *mut sys::ibv_cq_ex, stubs: &ExtendedStubs) {
    // SAFETY: the caller's live, unused CQ; filling members is what a provider does.
    let c = unsafe { &mut *cq };
    c.start_poll = Some(stubs.start_poll);
    if let Some(next_poll) = stubs.next_poll {
        c.next_poll = Some(next_poll);
    }
    c.end_poll = Some(end_poll);
    c.read_opcode = Some(stubs.read_opcode);
    c.read_byte_len = Some(stubs.read_byte_len);
    c.read_vendor_err = Some(read_zero);
    c.read_imm_data = Some(read_zero);
    c.read_qp_num = Some(read_zero);
    c.read_src_qp = Some(read_zero);
    c.read_wc_flags = Some(read_zero);
    c.read_slid = Some(read_zero);
    c.read_sl = Some(read_zero_u8);
    c.read_dlid_path_bits = Some(read_zero_u8);
    c.read_completion_ts = Some(read_ts);
}

/// Replaces the mock's members of an extended QP with `stubs` and, for the rest, stubs that
/// record nothing.
///
/// # Safety
///
/// `qp` must be a live extended QP that nothing uses during the call.
unsafe fn stub_qp(qp: *mut sys::ibv_qp_ex, stubs: &ExtendedStubs) {
    // SAFETY: the caller's live, unused QP; filling members is what a provider does.
    let q = unsafe { &mut *qp };
    q.wr_start = Some(wr_nothing);
    q.wr_abort = Some(wr_nothing);
    q.wr_complete = Some(wr_complete);
    if let Some(wr_send) = stubs.wr_send {
        q.wr_send = Some(wr_send);
    }
    q.wr_rdma_write = Some(stubs.wr_rdma_write);
    q.wr_set_sge = Some(wr_set_sge);
}

extern "C" fn end_poll(cq: *mut sys::ibv_cq_ex) {
    black_box(cq);
}

extern "C" fn read_zero(_cq: *mut sys::ibv_cq_ex) -> u32 {
    0
}

extern "C" fn read_zero_u8(_cq: *mut sys::ibv_cq_ex) -> u8 {
    0
}

extern "C" fn read_ts(_cq: *mut sys::ibv_cq_ex) -> u64 {
    1000
}

extern "C" fn wr_nothing(qp: *mut sys::ibv_qp_ex) {
    black_box(qp);
}

extern "C" fn wr_complete(qp: *mut sys::ibv_qp_ex) -> c_int {
    black_box(qp);
    0
}

extern "C" fn wr_set_sge(_qp: *mut sys::ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    black_box((lkey, addr, length));
}
