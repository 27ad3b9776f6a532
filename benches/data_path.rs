//! The data path's cost over the provider, on both verbs paths: our `post_send_wr` (one WR,
//! and a 16-WR list through `post_send_wrs`), `post_recv_wr` (one, and a 16-WR list through
//! `post_recv_wrs`) and `poll` (16 completions) against a direct call of the same provider
//! functions in the same run — on the legacy path the op read from `(*(*qp).context).ops` at
//! each call as the C inline verbs do; on the extended path `ibv_wr_start` / `ibv_wr_*` /
//! `ibv_wr_complete` and `ibv_start_poll` / `ibv_next_poll` / `ibv_end_poll` called through
//! the members of `ibv_qp_ex` / `ibv_cq_ex`, as C code calls them. Compare each `ours` with its `direct` (target: ≤ 1.05×).
//!
//! The provider is the mock (crate `rdma-verbs-mock`) with stub data-path ops and members
//! that do the least a provider must and record nothing (see `stub_data_path.rs` for why not
//! the mock's own): posts read every WR, builders read their arguments, polls write every
//! completion they return. No device needed.
//!
//! `cargo bench --bench data_path` times them with criterion. `scripts/bench-counts` runs this
//! binary under valgrind instead, with `DATA_PATH_COUNT="CASE SIDE N"` set: it then runs one
//! case's `ours` or `direct` N times and exits (`DATA_PATH_COUNT=list` names the cases,
//! `DATA_PATH_COUNT=calls` prints the mock provider's calls per 16-completion poll), so that
//! instruction counts per operation can be taken, deterministically.

#[path = "../tests/support/stub_data_path.rs"]
mod stub_data_path;

use std::cell::RefCell;
use std::ffi::c_int;
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};

use criterion::Criterion;
use rdma_verbs::{
    Context, CqAttr, RKey, RecvBufferList, RecvWr, RecvWrList, RemoteAddr, SendBufferList,
    SendFlags, SendOp, SendWr, SendWrList, VerbsPath, WorkCompletion,
};
use rdma_verbs_mock::{self as mock, Call, ContextConfig, Mock, Optional};
use rdma_verbs_sys as sys;

use stub_data_path::{context, each_wr, stubbed_context, with_rts_qp, DataPath, ExtendedStubs};

const LIST: usize = 16;

/// The `wr_id` of the last WR posted, which the next poll completes first.
static LAST_WR_ID: AtomicU64 = AtomicU64::new(0);

/// Reads each WR of the list and accepts them all.
///
/// # Safety
///
/// As `ibv_post_send(3)`: `wr` is a valid list.
unsafe extern "C" fn post_send(
    _qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_send_wr,
    _bad_wr: *mut *mut sys::ibv_send_wr,
) -> c_int {
    // SAFETY: the caller's valid list.
    unsafe {
        each_wr(wr, |w| {
            black_box((w.sg_list, w.num_sge, w.opcode, w.send_flags));
            LAST_WR_ID.store(w.wr_id, Ordering::Relaxed);
        })
    };
    0
}

/// As [`post_send`], for receive WRs.
///
/// # Safety
///
/// As `ibv_post_recv(3)`: `wr` is a valid list.
unsafe extern "C" fn post_recv(
    _qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_recv_wr,
    _bad_wr: *mut *mut sys::ibv_recv_wr,
) -> c_int {
    // SAFETY: the caller's valid list.
    unsafe {
        each_wr(wr, |w| {
            black_box((w.wr_id, w.sg_list, w.num_sge));
        })
    };
    0
}

/// A CQ that always has completions: fills all `num_entries`.
///
/// # Safety
///
/// As `ibv_poll_cq(3)`: `wc` is writable for `num_entries` entries.
unsafe extern "C" fn poll_cq(
    _cq: *mut sys::ibv_cq,
    num_entries: c_int,
    wc: *mut sys::ibv_wc,
) -> c_int {
    for i in 0..num_entries.max(0) as usize {
        let done = sys::ibv_wc {
            wr_id: if i == 0 { LAST_WR_ID.load(Ordering::Relaxed) } else { i as u64 },
            opcode: sys::IBV_WC_RDMA_WRITE,
            byte_len: 64,
            ..Default::default()
        };
        // SAFETY: `i < num_entries`, which the caller made writable.
        unsafe { wc.add(i).write(done) };
    }
    num_entries
}

thread_local! {
    /// The `wr_id`s of the receives posted through [`post_recv_noting`] and not yet polled.
    static NOTED: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// As [`post_recv`], noting each receive's `wr_id` for [`poll_noted`] to complete: the
/// receiving context's, for the buffer tier's receives, which must come back to their pool.
///
/// # Safety
///
/// As `ibv_post_recv(3)`: `wr` is a valid list.
unsafe extern "C" fn post_recv_noting(
    _qp: *mut sys::ibv_qp,
    wr: *mut sys::ibv_recv_wr,
    _bad_wr: *mut *mut sys::ibv_recv_wr,
) -> c_int {
    NOTED.with_borrow_mut(|noted| {
        // SAFETY: the caller's valid list.
        unsafe {
            each_wr(wr, |w| {
                black_box((w.sg_list, w.num_sge));
                noted.push(w.wr_id);
            })
        };
    });
    0
}

/// Completes the oldest receives [`post_recv_noting`] noted, up to `num_entries`, each
/// having received 64 bytes.
///
/// # Safety
///
/// As `ibv_poll_cq(3)`: `wc` is writable for `num_entries` entries.
unsafe extern "C" fn poll_noted(
    _cq: *mut sys::ibv_cq,
    num_entries: c_int,
    wc: *mut sys::ibv_wc,
) -> c_int {
    NOTED.with_borrow_mut(|noted| {
        let n = noted.len().min(num_entries.max(0) as usize);
        for (i, &wr_id) in noted[..n].iter().enumerate() {
            let done =
                sys::ibv_wc { wr_id, opcode: sys::IBV_WC_RECV, byte_len: 64, ..Default::default() };
            // SAFETY: `i < num_entries`, which the caller made writable.
            unsafe { wc.add(i).write(done) };
        }
        noted.drain(..n);
        n as c_int
    })
}

/// Reads the WR's fields as a provider's builder does.
///
/// # Safety
///
/// `qp` is a live extended QP inside a batch.
unsafe extern "C" fn wr_rdma_write(qp: *mut sys::ibv_qp_ex, rkey: u32, remote_addr: u64) {
    // SAFETY: the caller's live extended QP.
    let q = unsafe { &*qp };
    black_box((q.wr_flags, rkey, remote_addr));
    LAST_WR_ID.store(q.wr_id, Ordering::Relaxed);
}

/// A CQ that always has a completion: each makes `wr_id` and `status` current.
///
/// # Safety
///
/// `cq` is a live extended CQ.
unsafe extern "C" fn start_poll(
    cq: *mut sys::ibv_cq_ex,
    _attr: *mut sys::ibv_poll_cq_attr,
) -> c_int {
    // SAFETY: the caller's live extended CQ.
    unsafe { next_poll(cq) }
}

/// As [`start_poll`].
///
/// # Safety
///
/// `cq` is a live extended CQ inside a session.
unsafe extern "C" fn next_poll(cq: *mut sys::ibv_cq_ex) -> c_int {
    // SAFETY: the caller's live extended CQ.
    unsafe {
        (*cq).wr_id = black_box(1);
        (*cq).status = sys::IBV_WC_SUCCESS;
    }
    0
}

extern "C" fn read_opcode(_cq: *mut sys::ibv_cq_ex) -> sys::ibv_wc_opcode {
    sys::IBV_WC_RDMA_WRITE
}

extern "C" fn read_len(_cq: *mut sys::ibv_cq_ex) -> u32 {
    64
}

/// The stub's extended CQ and QP: stubs that record nothing.
const EXTENDED: ExtendedStubs = ExtendedStubs {
    start_poll,
    next_poll: Some(next_poll),
    read_opcode,
    read_byte_len: read_len,
    wr_send: None,
    wr_rdma_write,
};

/// What the binary does with each case: time it with criterion ([`Time`]), run one side of
/// one case `n` times for an instruction count ([`Count`]), or print its name ([`List`]).
/// `data_path` is generic over it, so each mode has its own copy of every closure: in the
/// count's copy each side's closure has one call site, in [`repeat`], and LLVM inlines it
/// there as it would into a caller's loop (`post_send_wr` and the rest are `#[inline(always)]`);
/// neither count then holds a call, frame or spill of the harness that the other does not.
trait Mode {
    /// Runs `ours` and `direct` of case `name` as the mode says.
    fn case<A, B>(&mut self, name: &str, ours: impl FnMut() -> A, direct: impl FnMut() -> B);
}

struct Time<'c>(&'c mut Criterion);

impl Mode for Time<'_> {
    fn case<A, B>(
        &mut self,
        name: &str,
        mut ours: impl FnMut() -> A,
        mut direct: impl FnMut() -> B,
    ) {
        let mut g = self.0.benchmark_group(name);
        g.bench_function("ours", |b| b.iter(&mut ours));
        g.bench_function("direct", |b| b.iter(&mut direct));
        g.finish();
    }
}

struct Count {
    case: String,
    side: String,
    n: u64,
}

impl Mode for Count {
    fn case<A, B>(&mut self, name: &str, ours: impl FnMut() -> A, direct: impl FnMut() -> B) {
        match (self.case == name, self.side.as_str()) {
            (true, "ours") => repeat(self.n, ours),
            (true, _) => repeat(self.n, direct),
            (false, _) => {}
        }
    }
}

struct List;

impl Mode for List {
    fn case<A, B>(&mut self, name: &str, _: impl FnMut() -> A, _: impl FnMut() -> B) {
        println!("{name}");
    }
}

/// Calls `op` `n` times, each result through `black_box`.
#[inline(never)]
fn repeat<A>(n: u64, mut op: impl FnMut() -> A) {
    for _ in 0..black_box(n) {
        black_box(op());
    }
}

fn data_path(mode: &mut impl Mode) {
    let mock = Mock::new();
    let ops = DataPath { post_send, post_recv, poll_cq };
    let legacy = context(&mock, ops, ContextConfig::default());
    let config = ContextConfig { completion_timestamps: true, ..ContextConfig::extended_verbs() };
    let ops = DataPath { post_send, post_recv, poll_cq };
    let extended = stubbed_context(&mock, ops, config, &EXTENDED);
    for (path, ctx) in [("legacy", &legacy), ("extended", &extended)] {
        with_rts_qp(ctx, |qp, cq, sge, pool| {
            let stamped = ctx.create_cq_with(16, &CqAttr { timestamps: true, ..CqAttr::default() });
            let stamped = stamped.ok().filter(|cq| cq.verbs_path() == VerbsPath::Extended);
            assert_eq!(qp.verbs_path() == VerbsPath::Extended, path == "extended");
            let (qp_raw, cq_raw) = (qp.as_raw(), cq.as_raw());

            // The same WRs for both sides: ours as the crate builds them, the direct side's as C
            // code fills the structs, each list linked once.
            let sges = [sge];
            let remote = RemoteAddr { addr: 0x1000, rkey: RKey::new(7) };
            let mut raw_sge = raw_sge_of(sges[0]);
            let mut raw_send = raw_rdma_write(&mut raw_sge, remote);
            let mut raw_list = [raw_send; LIST];
            link(&mut raw_list, |wr| &mut wr.next);
            let mut raw_recv = sys::ibv_recv_wr {
                wr_id: 1,
                sg_list: &mut raw_sge,
                num_sge: 1,
                ..Default::default()
            };
            let mut raw_recv_list = [raw_recv; LIST];
            link(&mut raw_recv_list, |wr| &mut wr.next);
            let wr = || SendWr::rdma_write(1, &sges, remote);
            let mut one = wr().flags(SendFlags::SIGNALED);
            let mut list: SendWrList<'_> = (0..LIST).map(|_| wr()).collect();
            list.set_flags(LIST - 1, SendFlags::SIGNALED).unwrap();
            let mut recv = RecvWr::new(1, &sges);
            let mut recv_list: RecvWrList<'_> = (0..LIST).map(|_| RecvWr::new(1, &sges)).collect();
            let mut storage = [WorkCompletion::EMPTY; LIST];
            let mut raw_storage = [sys::ibv_wc::default(); LIST];
            let (mut stamps, mut raw_stamps) = ([0u64; LIST], [0u64; LIST]);

            // A WR built for every post, as users write it (the C side fills its structs
            // each time too): ours from the SGEs and the remote address, signaled.
            let ours_built = || {
                let wr = SendWr::rdma_write(1, black_box(&sges), black_box(remote));
                // SAFETY: the stub provider only reads the WRs; nothing touches the memory.
                unsafe { black_box(qp).post_send_wr(&mut wr.flags(SendFlags::SIGNALED)) }.is_ok()
            };
            let built = |sge: &mut sys::ibv_sge| {
                *sge = raw_sge_of(black_box(&sges)[0]);
                raw_rdma_write(sge, black_box(remote))
            };
            match qp.as_raw_ex() {
                None => {
                    mode.case(&format!("{path}/post_send_built"), ours_built, || {
                        let mut sge = sys::ibv_sge::default();
                        direct_post_send(black_box(qp_raw), &mut built(&mut sge)) == 0
                    });
                    mode.case(
                        &format!("{path}/post_send"),
                        // SAFETY: the stub provider only reads the WRs; nothing touches the memory.
                        || unsafe { black_box(qp).post_send_wr(&mut one) }.is_ok(),
                        || direct_post_send(black_box(qp_raw), &mut raw_send) == 0,
                    );
                    mode.case(
                        &format!("{path}/post_send_list_16"),
                        // SAFETY: the stub provider only reads the WRs; nothing touches the memory.
                        || unsafe { black_box(qp).post_send_wrs(&mut list) }.is_ok(),
                        || direct_post_send(black_box(qp_raw), &mut raw_list[0]) == 0,
                    );
                }
                Some(qpx) => {
                    mode.case(&format!("{path}/post_send_built"), ours_built, || {
                        let mut sge = sys::ibv_sge::default();
                        direct_wr_post(black_box(qpx), &[built(&mut sge)]) == 0
                    });
                    mode.case(
                        &format!("{path}/post_send"),
                        // SAFETY: the stub provider only reads the WRs; nothing touches the memory.
                        || unsafe { black_box(qp).post_send_wr(&mut one) }.is_ok(),
                        || direct_wr_post(black_box(qpx), std::slice::from_ref(&raw_send)) == 0,
                    );
                    mode.case(
                        &format!("{path}/post_send_list_16"),
                        // SAFETY: the stub provider only reads the WRs; nothing touches the memory.
                        || unsafe { black_box(qp).post_send_wrs(&mut list) }.is_ok(),
                        || direct_wr_post(black_box(qpx), &raw_list) == 0,
                    );
                }
            }
            // The buffer tier over the raw one: each round takes its buffers, posts them
            // (one signaled) and hands the signaled one's completion back to the pool (the
            // rest of a list return with it); the raw side posts the same WRs (its list
            // built once) and polls the same completion.
            let op = SendOp::RdmaWrite(remote);
            let take = || {
                let mut buffer = pool.take().expect("every round returns what it takes");
                buffer.set_len(64).expect("64 bytes fit");
                buffer
            };
            let complete = |storage: &mut [WorkCompletion; 1]| {
                if let Ok([wc]) = cq.poll(storage) {
                    drop(pool.complete(wc));
                }
            };
            let (mut safe_wc, mut raw_wc) = ([WorkCompletion::EMPTY], [WorkCompletion::EMPTY]);
            let mut buffers = SendBufferList::with_capacity(LIST);
            mode.case(
                &format!("{path}/buffer_send"),
                || {
                    let posted = black_box(qp).post_send_buffer(take(), op).is_ok();
                    complete(&mut safe_wc);
                    posted
                },
                || {
                    // SAFETY: the stub provider only reads the WRs; nothing touches the memory.
                    let posted = unsafe { black_box(qp).post_send_wr(&mut one) }.is_ok();
                    complete(&mut raw_wc);
                    posted
                },
            );
            mode.case(
                &format!("{path}/buffer_send_list_16"),
                || {
                    for _ in 0..LIST {
                        let _ = buffers.push(take(), op);
                    }
                    let posted = black_box(qp).post_send_buffers(&mut buffers, true).is_ok();
                    complete(&mut safe_wc);
                    posted
                },
                || {
                    // SAFETY: the stub provider only reads the WRs; nothing touches the memory.
                    let posted = unsafe { black_box(qp).post_send_wrs(&mut list) }.is_ok();
                    complete(&mut raw_wc);
                    posted
                },
            );
            // write_bw's pattern (-l 1, -Q 16): a WR per post, each 16th signaled; ours as
            // lists of one, and through a list's chain without storing the buffer in it
            // (`post_send_buffer_chained`, what write_bw does).
            let mut single: SendWrList<'_> = std::iter::once(wr()).collect();
            let mut raw_1x16 = || {
                let mut posted = true;
                for i in 0..LIST {
                    let flags =
                        if i + 1 == LIST { SendFlags::SIGNALED } else { SendFlags::empty() };
                    let _ = single.set_flags(0, flags);
                    // SAFETY: the stub provider only reads the WRs; nothing touches the memory.
                    posted &= unsafe { black_box(qp).post_send_wrs(&mut single) }.is_ok();
                }
                complete(&mut raw_wc);
                posted
            };
            mode.case(
                &format!("{path}/buffer_send_1x16"),
                || {
                    let mut posted = true;
                    for i in 0..LIST {
                        let _ = buffers.push(take(), op);
                        posted &=
                            black_box(qp).post_send_buffers(&mut buffers, i + 1 == LIST).is_ok();
                    }
                    complete(&mut safe_wc);
                    posted
                },
                &mut raw_1x16,
            );
            mode.case(
                &format!("{path}/buffer_send_chained_1x16"),
                || {
                    let mut posted = true;
                    for i in 0..LIST {
                        let signaled = i + 1 == LIST;
                        posted &= black_box(qp)
                            .post_send_buffer_chained(&mut buffers, take(), op, signaled)
                            .is_ok();
                    }
                    complete(&mut safe_wc);
                    posted
                },
                &mut raw_1x16,
            );
            mode.case(
                &format!("{path}/post_recv"),
                // SAFETY: the stub provider only reads the WRs; nothing touches the memory.
                || unsafe { black_box(qp).post_recv_wr(&mut recv) }.is_ok(),
                || direct_post_recv(black_box(qp_raw), &mut raw_recv) == 0,
            );
            mode.case(
                &format!("{path}/post_recv_list_16"),
                // SAFETY: the stub provider only reads the WRs; nothing touches the memory.
                || unsafe { black_box(qp).post_recv_wrs(&mut recv_list) }.is_ok(),
                || direct_post_recv(black_box(qp_raw), &mut raw_recv_list[0]) == 0,
            );
            mode.case(
                &format!("{path}/poll_16"),
                || black_box(cq).poll(&mut storage).map_or(0, |done| done.len()),
                || direct_poll(black_box(cq_raw), &mut raw_storage),
            );
            if let Some(stamped) = &stamped {
                let cqx = stamped.as_raw_ex().expect("an extended CQ");
                mode.case(
                    &format!("{path}/poll_16_timestamps"),
                    || {
                        let mut i = 0;
                        let n = black_box(stamped).poll_with(LIST, |c| {
                            stamps[i] = c.timestamp.unwrap_or_default();
                            i += 1;
                        });
                        n.unwrap_or(0)
                    },
                    || direct_poll_session(black_box(cqx), &mut raw_storage, &mut raw_stamps),
                );
            }
        });
    }
    // The buffer tier's receive list over the raw tier's, on a context whose stubs complete
    // what was posted: each round posts 16 receives with one call and polls their 16
    // completions, the buffer tier's going back to their pool (the raw side asks the pool
    // too, which names none of its WRs). One path: receives are posted the same way on both.
    let ops = DataPath { post_send, post_recv: post_recv_noting, poll_cq: poll_noted };
    let receiving = context(&mock, ops, ContextConfig::default());
    with_rts_qp(&receiving, |qp, cq, sge, pool| {
        let sges = [sge];
        let mut raw: RecvWrList<'_> = (0..LIST).map(|_| RecvWr::new(1, &sges)).collect();
        let mut buffers = RecvBufferList::with_capacity(LIST);
        let returned = |storage: &mut [WorkCompletion; LIST]| {
            cq.poll(storage)
                .map_or(0, |wcs| wcs.iter_mut().filter_map(|wc| pool.complete(wc)).count())
        };
        let (mut safe_wcs, mut raw_wcs) =
            ([WorkCompletion::EMPTY; LIST], [WorkCompletion::EMPTY; LIST]);
        mode.case(
            "legacy/buffer_recv_list_16",
            || {
                for _ in 0..LIST {
                    let _ = buffers.push(pool.take().expect("every round returns what it takes"));
                }
                let posted = black_box(qp).post_recv_buffers(&mut buffers).is_ok();
                posted && returned(&mut safe_wcs) == LIST
            },
            || {
                // SAFETY: the stub provider only reads the WRs; nothing touches the memory.
                let posted = unsafe { black_box(qp).post_recv_wrs(&mut raw) }.is_ok();
                posted && returned(&mut raw_wcs) == 0
            },
        );
    });
}

/// Links `wrs` in order through the `next` that `next_of` names, as C code builds a list.
fn link<T>(wrs: &mut [T], next_of: fn(&mut T) -> &mut *mut T) {
    let base = wrs.as_mut_ptr();
    for i in 1..wrs.len() {
        // SAFETY: `i - 1` and `i` are elements of `wrs`, reached from its own pointer.
        unsafe { *next_of(&mut *base.add(i - 1)) = base.add(i) };
    }
}

// The C inline verbs: the provider's op, read through the object's context at each call, with
// no check (the stub context sets every data-path op).

/// `sge` as C code fills an `ibv_sge`.
fn raw_sge_of(sge: rdma_verbs::Sge) -> sys::ibv_sge {
    sys::ibv_sge { addr: sge.addr(), length: sge.length(), lkey: sge.lkey().get() }
}

/// A signaled RDMA WRITE of `sge` to `remote`, as C code fills an `ibv_send_wr`.
fn raw_rdma_write(sge: &mut sys::ibv_sge, remote: RemoteAddr) -> sys::ibv_send_wr {
    let mut wr = sys::ibv_send_wr {
        wr_id: 1,
        sg_list: sge,
        num_sge: 1,
        opcode: sys::IBV_WR_RDMA_WRITE,
        send_flags: sys::IBV_SEND_SIGNALED,
        ..Default::default()
    };
    wr.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
        remote_addr: remote.addr,
        rkey: remote.rkey.get(),
    };
    wr
}

fn direct_post_send(qp: *mut sys::ibv_qp, wr: &mut sys::ibv_send_wr) -> c_int {
    let mut bad = std::ptr::null_mut();
    // SAFETY: a live QP of the stub context, whose post_send is set; a valid WR list.
    unsafe { (*(*qp).context).ops.post_send.unwrap_unchecked()(qp, wr, &mut bad) }
}

fn direct_post_recv(qp: *mut sys::ibv_qp, wr: &mut sys::ibv_recv_wr) -> c_int {
    let mut bad = std::ptr::null_mut();
    // SAFETY: a live QP of the stub context, whose post_recv is set; a valid WR.
    unsafe { (*(*qp).context).ops.post_recv.unwrap_unchecked()(qp, wr, &mut bad) }
}

fn direct_poll(cq: *mut sys::ibv_cq, storage: &mut [sys::ibv_wc; LIST]) -> c_int {
    // SAFETY: a live CQ of the stub context, whose poll_cq is set; LIST writable entries.
    unsafe {
        (*(*cq).context).ops.poll_cq.unwrap_unchecked()(cq, LIST as c_int, storage.as_mut_ptr())
    }
}

/// `ibv_wr_post(3)` as C code writes it for RDMA WRITEs of one SGE: `ibv_wr_start`, each
/// WR's id, flags, builder and SGE, `ibv_wr_complete`, each member called unchecked.
fn direct_wr_post(qp: *mut sys::ibv_qp_ex, wrs: &[sys::ibv_send_wr]) -> c_int {
    // SAFETY: a live extended QP whose members the stubs set; each WR's one SGE is valid.
    unsafe {
        let q = &mut *qp;
        q.wr_start.unwrap_unchecked()(qp);
        for wr in wrs {
            q.wr_id = wr.wr_id;
            q.wr_flags = wr.send_flags;
            q.wr_rdma_write.unwrap_unchecked()(qp, wr.wr.rdma.rkey, wr.wr.rdma.remote_addr);
            let sge = *wr.sg_list;
            q.wr_set_sge.unwrap_unchecked()(qp, sge.lkey, sge.addr, sge.length);
        }
        q.wr_complete.unwrap_unchecked()(qp)
    }
}

/// 16 completions with their timestamps in one session, as C code reads them: every field
/// `struct ibv_wc` has (the immediate only when the flags say), and the timestamp.
fn direct_poll_session(
    cq: *mut sys::ibv_cq_ex,
    storage: &mut [sys::ibv_wc; LIST],
    stamps: &mut [u64; LIST],
) -> usize {
    let mut attr = sys::ibv_poll_cq_attr::default();
    // SAFETY: a live extended CQ whose members the stubs set; a session opened and closed
    // here, reads inside it.
    unsafe {
        let c = &mut *cq;
        if c.start_poll.unwrap_unchecked()(cq, &mut attr) != 0 {
            return 0;
        }
        let mut n = 0;
        loop {
            let wc_flags = c.read_wc_flags.unwrap_unchecked()(cq);
            let wc = &mut storage[n];
            *wc = sys::ibv_wc {
                wr_id: c.wr_id,
                status: c.status,
                opcode: c.read_opcode.unwrap_unchecked()(cq),
                vendor_err: c.read_vendor_err.unwrap_unchecked()(cq),
                byte_len: c.read_byte_len.unwrap_unchecked()(cq),
                qp_num: c.read_qp_num.unwrap_unchecked()(cq),
                src_qp: c.read_src_qp.unwrap_unchecked()(cq),
                wc_flags,
                slid: c.read_slid.unwrap_unchecked()(cq) as u16,
                sl: c.read_sl.unwrap_unchecked()(cq),
                dlid_path_bits: c.read_dlid_path_bits.unwrap_unchecked()(cq),
                ..Default::default()
            };
            if wc_flags & (sys::IBV_WC_WITH_IMM | sys::IBV_WC_WITH_INV) != 0 {
                wc.__bindgen_anon_1.imm_data = c.read_imm_data.unwrap_unchecked()(cq);
            }
            stamps[n] = c.read_completion_ts.unwrap_unchecked()(cq);
            n += 1;
            if n == LIST || c.next_poll.unwrap_unchecked()(cq) != 0 {
                break;
            }
        }
        c.end_poll.unwrap_unchecked()(cq);
        n
    }
}

/// The mock provider's own calls for a poll that drains 16 completions, on each kind of CQ.
fn provider_calls() {
    let configs: [(&str, &str, u32, bool, bool); 5] = [
        ("legacy CQ", "", 0, false, false),
        ("extended CQ", "", 0, true, false),
        ("extended CQ, timestamps", "", 0, true, true),
        (
            "extended CQ, timestamps, rxe with PR 1617 (59.0)",
            "59.0",
            mock::RXE_VENDOR_ID,
            true,
            true,
        ),
        ("extended CQ, timestamps, rxe without it (44.0)", "44.0", mock::RXE_VENDOR_ID, true, true),
    ];
    println!("| CQ | poll_cq | start_poll | next_poll | end_poll |");
    println!("|---|---|---|---|---|");
    for (name, release, vendor_id, extended, timestamps) in configs {
        let mock = Mock::new();
        let base =
            if extended { ContextConfig::extended_verbs() } else { ContextConfig::default() };
        let raw =
            mock.context(ContextConfig { vendor_id, completion_timestamps: timestamps, ..base });
        let lib = if release.is_empty() {
            mock::library(Optional::ALL)
        } else {
            mock::library_with_release(Optional::ALL, release)
        };
        // SAFETY: a fresh context of the mock library, dropped before the mock.
        let ctx = unsafe { Context::from_raw(lib, raw, mock::DEVICE_NAME.into()) };
        let cq = ctx.create_cq_with(32, &CqAttr { timestamps, ..CqAttr::default() }).unwrap();
        for wr_id in 0..LIST as u64 {
            mock.push_completion(cq.as_raw(), sys::ibv_wc { wr_id, ..Default::default() });
        }
        mock.take_calls();
        assert_eq!(cq.poll_with(LIST, |_| ()).unwrap(), LIST);
        let calls = mock.take_calls();
        let count = |call: Call| calls.iter().filter(|c| **c == call).count();
        let poll_cq = calls.iter().filter(|c| matches!(c, Call::PollCq { .. })).count();
        println!(
            "| {name} | {poll_cq} | {} | {} | {} |",
            count(Call::StartPoll),
            count(Call::NextPoll),
            count(Call::EndPoll)
        );
        drop(cq);
        drop(ctx);
    }
}

fn main() {
    match std::env::var("DATA_PATH_COUNT").as_deref() {
        Ok("list") => data_path(&mut List),
        Ok("calls") => provider_calls(),
        Ok(spec) => {
            let mut words = spec.split_whitespace();
            let (case, side) = (words.next().unwrap_or_default(), words.next().unwrap_or_default());
            let n =
                words.next().and_then(|n| n.parse().ok()).expect("DATA_PATH_COUNT=\"CASE SIDE N\"");
            data_path(&mut Count { case: case.into(), side: side.into(), n });
        }
        Err(_) => {
            // No plots (criterion is built without its plotters backend, and gnuplot, where
            // installed, is not asked): the numbers are the result.
            let mut c = Criterion::default().without_plots().configure_from_args();
            data_path(&mut Time(&mut c));
            c.final_summary();
        }
    }
}
