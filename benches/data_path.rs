//! The data path's cost over the provider: our `post_send` (one WR, and a 16-WR list through
//! `post_send_list`), `post_recv` and `poll` (16 completions) against a direct call of the same
//! provider function pointer, read from `(*(*qp).context).ops` at each call as the C inline
//! verbs do, in the same run. Compare each `ours` with its `direct` (target: ≤ 1.05×).
//!
//! The provider is the mock (crate `rdma-verbs-mock`) with stub data-path ops that do the least
//! a provider must (see `stub_data_path.rs` for why not the mock's own): posts read every WR of
//! the list, polls write every completion they return. No device needed.
//!
//! `cargo bench --bench data_path`

#[path = "../tests/support/stub_data_path.rs"]
mod stub_data_path;

use std::ffi::c_int;
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use rdma_verbs::{
    AccessFlags, QpCapabilities, QpInitAttr, RKey, RecvWr, RemoteAddr, SendFlags, SendWr,
    WorkCompletion,
};
use rdma_verbs_mock::{ContextConfig, Mock};
use rdma_verbs_sys as sys;

use stub_data_path::{context, into_rts, DataPath};

const LIST: usize = 16;

/// Reads each WR of the list and accepts them all.
///
/// # Safety
///
/// As `ibv_post_send(3)`: `wr` is a valid list.
unsafe extern "C" fn post_send(
    _qp: *mut sys::ibv_qp,
    mut wr: *mut sys::ibv_send_wr,
    _bad_wr: *mut *mut sys::ibv_send_wr,
) -> c_int {
    while !wr.is_null() {
        // SAFETY: an element of the caller's valid list.
        let w = unsafe { &*wr };
        black_box((w.wr_id, w.sg_list, w.num_sge, w.opcode, w.send_flags));
        wr = w.next;
    }
    0
}

/// As [`post_send`], for receive WRs.
///
/// # Safety
///
/// As `ibv_post_recv(3)`: `wr` is a valid list.
unsafe extern "C" fn post_recv(
    _qp: *mut sys::ibv_qp,
    mut wr: *mut sys::ibv_recv_wr,
    _bad_wr: *mut *mut sys::ibv_recv_wr,
) -> c_int {
    while !wr.is_null() {
        // SAFETY: an element of the caller's valid list.
        let w = unsafe { &*wr };
        black_box((w.wr_id, w.sg_list, w.num_sge));
        wr = w.next;
    }
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
            wr_id: i as u64,
            opcode: sys::IBV_WC_RDMA_WRITE,
            byte_len: 64,
            ..Default::default()
        };
        // SAFETY: `i < num_entries`, which the caller made writable.
        unsafe { wc.add(i).write(done) };
    }
    num_entries
}

fn data_path(c: &mut Criterion) {
    let mock = Mock::new();
    let ctx = context(&mock, DataPath { post_send, post_recv, poll_cq }, ContextConfig::default());
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(128).unwrap(); // room for 64 sends and 64 receives
    let mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let cap = QpCapabilities { max_send_wr: 64, max_recv_wr: 64, ..Default::default() };
    let qp = into_rts(pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(&cq) }).unwrap());
    let (qp_raw, cq_raw) = (qp.as_raw(), cq.as_raw());

    // The same WRs for both sides: ours as the crate builds them, the direct side's as C
    // code fills the structs, its list linked once (ours links at each post).
    let sges = [mr.sge(..64).unwrap()];
    let remote = RemoteAddr { addr: 0x1000, rkey: RKey(7) };
    let mut raw_sge = sys::ibv_sge { addr: sges[0].addr(), length: 64, lkey: sges[0].lkey().0 };
    let mut raw_send = sys::ibv_send_wr {
        wr_id: 1,
        sg_list: &mut raw_sge,
        num_sge: 1,
        opcode: sys::IBV_WR_RDMA_WRITE,
        send_flags: sys::IBV_SEND_SIGNALED,
        ..Default::default()
    };
    raw_send.wr.rdma = sys::ibv_send_wr__bindgen_ty_2__bindgen_ty_1 {
        remote_addr: remote.addr,
        rkey: remote.rkey.0,
    };
    let mut raw_list = [raw_send; LIST];
    for i in 1..LIST {
        raw_list[i - 1].next = &mut raw_list[i];
    }
    let mut raw_recv =
        sys::ibv_recv_wr { wr_id: 1, sg_list: &mut raw_sge, num_sge: 1, ..Default::default() };
    let wr = || SendWr::rdma_write(1, &sges, remote);

    let mut g = c.benchmark_group("post_send");
    let mut ours = wr().flags(SendFlags::SIGNALED);
    g.bench_function("ours", |b| {
        // SAFETY: the stub provider only reads the WRs; nothing touches the memory.
        b.iter(|| unsafe { black_box(&qp).post_send(&mut ours) })
    });
    g.bench_function("direct", |b| b.iter(|| direct_post_send(black_box(qp_raw), &mut raw_send)));
    g.finish();

    let mut g = c.benchmark_group("post_send_list_16");
    let mut ours: Vec<SendWr<'_>> = (0..LIST).map(|_| wr()).collect();
    ours[LIST - 1].set_flags(SendFlags::SIGNALED);
    g.bench_function("ours", |b| {
        // SAFETY: as above.
        b.iter(|| unsafe { black_box(&qp).post_send_list(&mut ours) })
    });
    g.bench_function("direct", |b| {
        b.iter(|| direct_post_send(black_box(qp_raw), &mut raw_list[0]))
    });
    g.finish();

    let mut g = c.benchmark_group("post_recv");
    let mut ours = RecvWr::new(1, &sges);
    g.bench_function("ours", |b| {
        // SAFETY: as above.
        b.iter(|| unsafe { black_box(&qp).post_recv(&mut ours) })
    });
    g.bench_function("direct", |b| b.iter(|| direct_post_recv(black_box(qp_raw), &mut raw_recv)));
    g.finish();

    let mut g = c.benchmark_group("poll_16");
    let mut storage = [WorkCompletion::EMPTY; LIST];
    let mut raw_storage = [sys::ibv_wc::default(); LIST];
    g.bench_function("ours", |b| {
        b.iter(|| black_box(&cq).poll(&mut storage).map(|done| done.len()))
    });
    g.bench_function("direct", |b| b.iter(|| direct_poll(black_box(cq_raw), &mut raw_storage)));
    g.finish();
}

// The C inline verbs: the provider's op, read through the object's context at each call, with
// no check (the stub context sets every data-path op).

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

criterion_group! {
    name = benches;
    // No HTML plots: plotters' ab_glyph feature (which examples/bench_report.rs enables)
    // draws text only in fonts registered first, and criterion registers none.
    config = Criterion::default().without_plots();
    targets = data_path
}
criterion_main!(benches);
