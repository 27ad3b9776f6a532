//! The data path allocates nothing in steady state: each post and each poll, in the raw tier
//! (`post_send_wr`, `post_send_wrs`, `post_recv_wr`, `post_recv_wrs`, `poll`, also through the
//! extended verbs: `ibv_wr_*` batches and `ibv_start_poll`) and in the buffer tier
//! (`post_send_buffer`, `post_send_buffers`, `post_send_buffer_chained`, `post_recv_buffer`,
//! `post_recv_buffers`, `complete`), against the mock provider with stub data-path ops that
//! keep their WRs in a fixed ring (the mock's own allocate; see `support/stub_data_path.rs`).
//!
//! A binary of its own, not a module of `integration`: a global allocator is per binary, and
//! this one counts. It counts per thread, so the harness and the other tests, on their own
//! threads, leave the measured thread's count alone.

#[path = "support/stub_data_path.rs"]
mod stub_data_path;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::{Cell, RefCell};
use std::ffi::c_int;
use std::hint::black_box;

use rdma_verbs::{
    AccessFlags, BufferPool, QueuePair, RKey, RecvBufferList, RecvWr, RecvWrList, RemoteAddr, Rts,
    SendBufferList, SendFlags, SendOp, SendWr, SendWrList, Sge, WorkCompletion,
};
use rdma_verbs_mock::{ContextConfig, Mock};
use rdma_verbs_sys as sys;

use stub_data_path::{
    context, each_wr, rts_qp, stubbed_context, with_rts_qp, DataPath, ExtendedStubs,
};

thread_local! {
    /// Allocations (alloc, alloc_zeroed, realloc) made by this thread. `const`, with no
    /// destructor: using it allocates nothing itself.
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

struct Counting;

// SAFETY: every call is forwarded to the system allocator unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded under the caller's guarantees.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: forwarded under the caller's guarantees.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: forwarded under the caller's guarantees.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded under the caller's guarantees.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn count() {
    // `try_with`: a thread being torn down may still allocate.
    let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

/// How many allocations this thread made while running `f`.
fn allocations_in<R>(f: impl FnOnce() -> R) -> u64 {
    let before = ALLOCATIONS.with(Cell::get);
    black_box(f());
    ALLOCATIONS.with(Cell::get) - before
}

/// Rounds of every operation measured (after one unmeasured round that warms up lazy state).
const ROUNDS: usize = 100;
const LIST: usize = 16;

/// The stub provider's CQ: the completions of the signaled sends and the receives posted,
/// in a fixed ring (nothing here may allocate).
struct Ring {
    slots: [(u64, sys::ibv_wc_opcode, u32); 256],
    head: usize,
    tail: usize,
}

thread_local! {
    static RING: RefCell<Ring> =
        const { RefCell::new(Ring { slots: [(0, 0, 0); 256], head: 0, tail: 0 }) };
}

fn complete_later(wr_id: u64, opcode: sys::ibv_wc_opcode, byte_len: u32) {
    RING.with_borrow_mut(|r| {
        assert!(r.tail - r.head < r.slots.len(), "the stub CQ overflowed: poll more often");
        let at = r.tail % r.slots.len();
        r.slots[at] = (wr_id, opcode, byte_len);
        r.tail += 1;
    });
}

/// Accepts the list; each signaled WR will complete.
///
/// # Safety
///
/// As `ibv_post_send(3)`: `wr` is a valid list.
unsafe extern "C" fn post_send(
    _qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_send_wr,
    _bad_wr: *mut *mut sys::ibv_send_wr,
) -> c_int {
    let signaled = |w: &sys::ibv_send_wr| {
        if w.send_flags & sys::IBV_SEND_SIGNALED != 0 {
            let opcode = match w.opcode {
                sys::IBV_WR_RDMA_READ => sys::IBV_WC_RDMA_READ,
                sys::IBV_WR_SEND => sys::IBV_WC_SEND,
                _ => sys::IBV_WC_RDMA_WRITE,
            };
            complete_later(w.wr_id, opcode, 0);
        }
    };
    // SAFETY: the caller's valid list.
    unsafe { each_wr(wr, signaled) };
    0
}

/// Accepts the list; each receive will complete, filled.
///
/// # Safety
///
/// As `ibv_post_recv(3)`: `wr` is a valid list.
unsafe extern "C" fn post_recv(
    _qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_recv_wr,
    _bad_wr: *mut *mut sys::ibv_recv_wr,
) -> c_int {
    let filled = |w: &sys::ibv_recv_wr| {
        let len = (0..w.num_sge as usize)
            // SAFETY: a WR of the caller's valid list, with `num_sge` valid SGEs.
            .map(|i| unsafe { (*w.sg_list.add(i)).length })
            .sum();
        complete_later(w.wr_id, sys::IBV_WC_RECV, len);
    };
    // SAFETY: the caller's valid list.
    unsafe { each_wr(wr, filled) };
    0
}

/// Returns the oldest completions, up to `num_entries`.
///
/// # Safety
///
/// As `ibv_poll_cq(3)`: `wc` is writable for `num_entries` entries.
unsafe extern "C" fn poll_cq(
    _cq: *mut sys::ibv_cq,
    num_entries: c_int,
    wc: *mut sys::ibv_wc,
) -> c_int {
    RING.with_borrow_mut(|r| {
        let n = (r.tail - r.head).min(num_entries.max(0) as usize);
        for i in 0..n {
            let (wr_id, opcode, byte_len) = r.slots[(r.head + i) % r.slots.len()];
            let done = sys::ibv_wc { wr_id, opcode, byte_len, ..Default::default() };
            // SAFETY: `i < num_entries`, which the caller made writable.
            unsafe { wc.add(i).write(done) };
        }
        r.head += n;
        n as c_int
    })
}

const STUB: DataPath = DataPath { post_send, post_recv, poll_cq };

/// The stub's extended QP: each signaled WR built completes, as with `post_send`.
unsafe extern "C" fn wr_send(qp: *mut sys::ibv_qp_ex) {
    // SAFETY: the caller's live extended QP.
    let (wr_id, flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    if flags & sys::IBV_SEND_SIGNALED != 0 {
        complete_later(wr_id, sys::IBV_WC_SEND, 0);
    }
}

unsafe extern "C" fn wr_rdma_write(qp: *mut sys::ibv_qp_ex, _rkey: u32, _addr: u64) {
    // SAFETY: the caller's live extended QP.
    let (wr_id, flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    if flags & sys::IBV_SEND_SIGNALED != 0 {
        complete_later(wr_id, sys::IBV_WC_RDMA_WRITE, 0);
    }
}

thread_local! {
    /// The completion the stub's extended CQ is reading.
    static CURRENT: Cell<(u64, sys::ibv_wc_opcode, u32)> = const { Cell::new((0, 0, 0)) };
}

/// The stub's extended CQ: the oldest completion of the ring, one per session.
unsafe extern "C" fn start_poll(
    cq: *mut sys::ibv_cq_ex,
    _attr: *mut sys::ibv_poll_cq_attr,
) -> c_int {
    let next = RING.with_borrow_mut(|r| {
        (r.head < r.tail).then(|| {
            r.head += 1;
            r.slots[(r.head - 1) % r.slots.len()]
        })
    });
    let Some(wc) = next else { return libc::ENOENT };
    CURRENT.set(wc);
    // SAFETY: the caller's live extended CQ.
    unsafe { (*cq).wr_id = wc.0 };
    0
}

extern "C" fn read_opcode(_cq: *mut sys::ibv_cq_ex) -> sys::ibv_wc_opcode {
    CURRENT.get().1
}

extern "C" fn read_byte_len(_cq: *mut sys::ibv_cq_ex) -> u32 {
    CURRENT.get().2
}

/// The stub's extended CQ and QP: each signaled WR built completes; each session reads the
/// oldest completion of the ring.
const EXTENDED: ExtendedStubs = ExtendedStubs {
    start_poll,
    next_poll: None,
    read_opcode,
    read_byte_len,
    wr_send: Some(wr_send),
    wr_rdma_write,
};

/// Runs `round` once to warm up lazy state, then [`ROUNDS`] times, and asserts that none of
/// the operations it measures allocated in those: `round` returns their allocations in the
/// order of `names`, which the failure names them by.
#[track_caller]
fn assert_rounds_allocate_nothing<const N: usize>(
    names: [&str; N],
    mut round: impl FnMut() -> [u64; N],
) {
    round();
    let mut counts = names.map(|name| (name, 0));
    for _ in 0..ROUNDS {
        for (count, n) in counts.iter_mut().zip(round()) {
            count.1 += n;
        }
    }
    let offenders: Vec<_> = counts.iter().filter(|(_, n)| *n > 0).collect();
    assert!(offenders.is_empty(), "allocations in {ROUNDS} rounds (name, count): {offenders:?}");
}

/// The sends of a round: one signaled RDMA WRITE, and a list of [`LIST`] SENDs whose last
/// alone is signaled (two completions).
fn signaled_sends(sges: &[Sge]) -> (SendWr<'_>, SendWrList<'_>) {
    let remote = RemoteAddr { addr: 0x1000, rkey: RKey::new(7) };
    let one = SendWr::rdma_write(1, sges, remote).flags(SendFlags::SIGNALED);
    let mut list: SendWrList<'_> = (0..LIST).map(|i| SendWr::send(i as u64, sges)).collect();
    list.set_flags(LIST - 1, SendFlags::SIGNALED).unwrap();
    (one, list)
}

/// The allocations of posting `one` (`post_send_wr`), then `list` (`post_send_wrs`).
fn post_sends(
    qp: &QueuePair<'_, Rts>,
    one: &mut SendWr<'_>,
    list: &mut SendWrList<'_>,
) -> [u64; 2] {
    [
        // SAFETY: the stub provider never touches the memory.
        allocations_in(|| unsafe { qp.post_send_wr(one) }.unwrap()),
        // SAFETY: as above.
        allocations_in(|| unsafe { qp.post_send_wrs(list) }.unwrap()),
    ]
}

#[test]
fn the_counter_sees_an_allocation_on_this_thread_only() {
    assert_eq!(allocations_in(|| Box::new(black_box(7u64))), 1);
    let other_thread = allocations_in(|| std::thread::spawn(|| Box::new(1u64)).join());
    let spawned = allocations_in(|| std::thread::spawn(|| ()).join());
    assert_eq!(other_thread, spawned, "the spawned thread's Box is not counted here");
    assert_eq!(allocations_in(|| black_box(3) + 4), 0);
}

#[test]
fn the_raw_tier_posts_and_polls_without_allocating() {
    let mock = Mock::new();
    let ctx = context(&mock, STUB, ContextConfig::default());
    with_rts_qp(&ctx, |qp, cq, sge, _pool| {
        let sges = [sge];
        let (mut one, mut list) = signaled_sends(&sges);
        let mut recv = RecvWr::new(2, &sges);
        let mut recvs: RecvWrList<'_> = (3..5).map(|id| RecvWr::new(id, &sges)).collect();
        let mut wcs = [WorkCompletion::EMPTY; LIST];
        let names = ["post_send_wr", "post_send_wrs", "post_recv_wr", "post_recv_wrs", "poll"];
        assert_rounds_allocate_nothing(names, || {
            let [send, send_list] = post_sends(qp, &mut one, &mut list);
            // SAFETY: the stub provider never touches the memory.
            let recv = allocations_in(|| unsafe { qp.post_recv_wr(&mut recv) }.unwrap());
            // SAFETY: as above.
            let recv_list = allocations_in(|| unsafe { qp.post_recv_wrs(&mut recvs) }.unwrap());
            let mut polled = 0;
            let poll = allocations_in(|| polled = cq.poll(&mut wcs).unwrap().len());
            assert_eq!(polled, 5, "one completion for each signaled post and each receive");
            [send, send_list, recv, recv_list, poll]
        });
    });
}

#[test]
fn the_extended_verbs_post_and_poll_without_allocating() {
    let mock = Mock::new();
    let ctx = stubbed_context(&mock, STUB, ContextConfig::extended_verbs(), &EXTENDED);
    with_rts_qp(&ctx, |qp, cq, sge, _pool| {
        cq.as_raw_ex().expect("an extended CQ");
        qp.as_raw_ex().expect("an extended QP");
        let sges = [sge];
        let (mut one, mut list) = signaled_sends(&sges);
        let mut wcs = [WorkCompletion::EMPTY; LIST];
        let names = ["post_send_wr", "post_send_wrs", "poll", "poll_with"];
        assert_rounds_allocate_nothing(names, || {
            let [send, send_list] = post_sends(qp, &mut one, &mut list);
            let mut polled = 0;
            let poll = allocations_in(|| polled = cq.poll(&mut wcs[..1]).unwrap().len());
            let poll_with = allocations_in(|| {
                polled += cq
                    .poll_with(LIST, |c| {
                        black_box(c.wc.wr_id());
                    })
                    .unwrap()
            });
            assert_eq!(polled, 2, "one completion for each signaled post");
            [send, send_list, poll, poll_with]
        });
    });
}

#[test]
fn the_buffer_tier_posts_and_completes_without_allocating() {
    let mock = Mock::new();
    let ctx = context(&mock, STUB, ContextConfig::default());
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(128).unwrap(); // room for 64 sends and 64 receives
                                          // Declared before the QP: the pool outlives every QP it lends buffers to.
    let pool =
        BufferPool::new(pd.register(64 * 64, AccessFlags::LOCAL_WRITE).unwrap(), 64).unwrap();
    let qp = rts_qp(&pd, &cq);
    let op = SendOp::RdmaWrite(RemoteAddr { addr: 0x1000, rkey: RKey::new(7) });
    let mut list = SendBufferList::with_capacity(LIST);
    let mut receives = RecvBufferList::with_capacity(2);
    let mut wcs = [WorkCompletion::EMPTY; LIST];

    let names = [
        "take",
        "post_send_buffer",
        "post_send_buffers",
        "post_send_buffer_chained",
        "post_recv_buffer",
        "post_recv_buffers",
        "poll",
        "complete",
    ];
    assert_rounds_allocate_nothing(names, || {
        let mut n = [0; 8];
        let mut take = || {
            let mut buffer = None;
            n[0] += allocations_in(|| buffer = pool.take());
            let mut buffer = buffer.expect("a free buffer: every round returns all it takes");
            buffer.set_len(64).unwrap();
            buffer
        };
        let one = take();
        let chained = [take(), take()];
        let batch: Vec<_> = (0..LIST).map(|_| take()).collect();
        let receive = take();
        for buffer in batch {
            list.push(buffer, op).unwrap();
        }
        for _ in 0..2 {
            receives.push(take()).unwrap();
        }
        n[1] = allocations_in(|| qp.post_send_buffer(one, op).unwrap());
        n[2] = allocations_in(|| qp.post_send_buffers(&mut list, true).unwrap());
        // Two through the list's chain, the second signaled: it brings the first back.
        for (buffer, signaled) in chained.into_iter().zip([false, true]) {
            n[3] += allocations_in(|| {
                qp.post_send_buffer_chained(&mut list, buffer, op, signaled).unwrap()
            });
        }
        n[4] = allocations_in(|| qp.post_recv_buffer(receive).unwrap());
        n[5] = allocations_in(|| qp.post_recv_buffers(&mut receives).unwrap());
        let done = {
            let mut done = None;
            n[6] = allocations_in(|| done = Some(cq.poll(&mut wcs).unwrap()));
            done.unwrap()
        };
        assert_eq!(done.len(), 6, "one completion for each signaled post and each receive");
        for wc in done.iter_mut() {
            let mut back = None;
            n[7] += allocations_in(|| back = pool.complete(wc));
            assert!(back.is_some(), "each completion returns its buffer");
        }
        n
    });
}
