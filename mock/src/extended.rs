//! The mock's extended verbs: the `create_cq_ex`, `create_qp_ex` and `query_device_ex` ops of
//! `verbs_context`, the members of the CQs and QPs they create, and `ibv_qp_to_qp_ex`.
//!
//! An extended CQ shares the completions queued by
//! [`Mock::push_completion`](super::Mock::push_completion) with `poll_cq`; the `n`th
//! completion polled from it (from 1) carries the timestamp `n * 1000`. An extended QP's
//! `wr_*` members record what they are called with and build the batch: `wr_complete` checks
//! every work request of it as the legacy `post_send` does (a violation not allowed fails it
//! with `EINVAL`, posting nothing of the batch), then posts them all; it fails as
//! [`Verb::WrComplete`] was told to (posting nothing). A member named by
//! [`ContextConfig::missing_member`](super::ContextConfig::missing_member) is left NULL.

use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::ptr;

use rdma_verbs_sys::bindings::*;

use super::call::{Call, Verb};
use super::device::device_attr;
use super::mw::request;
use super::post::{after_post, check_chain, enqueue_send};
use super::qp::{new_qp, track};
use super::registry::SendWork;
use super::rule::{Queue, Violation};
use super::state::{serve, Kind, State};
use super::strict::{check_send, read_inline};
use super::verbs::or_null;

/// The device clock the mock's `query_device_ex` reports, in kHz.
pub const CORE_CLOCK_KHZ: u64 = 1_000_000;

/// An extended CQ: the struct callers see, then the completion being read.
#[repr(C)]
pub(super) struct MockCqEx {
    ex: ibv_cq_ex,
    current: ibv_wc,
    polled: u64,
}

/// `Some(f)` unless `member` is the one the context leaves NULL.
fn member<F>(missing: Option<&str>, member: &str, f: F) -> Option<F> {
    (missing != Some(member)).then_some(f)
}

/// `verbs_context.create_cq_ex`: a CQ as `ibv_create_cq` makes one, with every member set
/// (but the missing one).
///
/// # Safety
///
/// `attr` must be valid for reads.
pub(super) unsafe extern "C" fn create_cq_ex(
    context: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: the caller passes a valid attribute struct.
    let a = unsafe { &*attr };
    let call = Call::CreateCqEx {
        cqe: a.cqe,
        channel: !a.channel.is_null(),
        comp_vector: a.comp_vector,
        wc_flags: a.wc_flags,
    };
    or_null(serve(|s| {
        s.begin(call, Verb::CreateCqEx)?;
        s.expect(context, Kind::Context)?;
        if !a.channel.is_null() {
            s.expect(a.channel, Kind::CompChannel)?;
        }
        if !(1..=device_attr().max_cqe as u32).contains(&a.cqe) {
            return Err(libc::EINVAL);
        }
        let m = s.missing_member(context);
        // SAFETY: all-zero is a valid ibv_cq_ex (NULL pointers and members, zeroed locks).
        let mut ex: ibv_cq_ex = unsafe { std::mem::zeroed() };
        ex.context = context;
        ex.channel = a.channel;
        ex.cq_context = a.cq_context;
        ex.handle = s.next_id();
        ex.cqe = a.cqe.next_power_of_two() as c_int;
        ex.start_poll = member(m, "start_poll", start_poll);
        ex.next_poll = member(m, "next_poll", next_poll);
        ex.end_poll = member(m, "end_poll", end_poll);
        ex.read_opcode = member(m, "read_opcode", read_opcode);
        ex.read_vendor_err = member(m, "read_vendor_err", read_vendor_err);
        ex.read_byte_len = member(m, "read_byte_len", read_byte_len);
        ex.read_imm_data = member(m, "read_imm_data", read_imm_data);
        ex.read_qp_num = member(m, "read_qp_num", read_qp_num);
        ex.read_src_qp = member(m, "read_src_qp", read_src_qp);
        ex.read_wc_flags = member(m, "read_wc_flags", read_wc_flags);
        ex.read_slid = member(m, "read_slid", read_slid);
        ex.read_sl = member(m, "read_sl", read_sl);
        ex.read_dlid_path_bits = member(m, "read_dlid_path_bits", read_dlid_path_bits);
        ex.read_completion_ts = member(m, "read_completion_ts", read_completion_ts);
        let cq = MockCqEx { ex, current: ibv_wc::default(), polled: 0 };
        Ok(s.adopt(cq, Kind::CqEx).cast::<ibv_cq_ex>())
    }))
}

/// Makes the next queued completion of `cq` current; `ENOENT` when there is none.
///
/// # Safety
///
/// `cq` must be a live mock extended CQ.
unsafe fn advance(cq: *mut ibv_cq_ex, call: Call, verb: Verb) -> c_int {
    let next = serve(|s| {
        s.begin(call, verb)?;
        s.expect(cq, Kind::CqEx)?;
        s.pop_completions(cq.cast(), 1).pop().ok_or(libc::ENOENT)
    });
    match next {
        Ok(wc) => {
            // SAFETY: a live mock extended CQ (checked above), allocated as a `MockCqEx`.
            let mock = unsafe { &mut *cq.cast::<MockCqEx>() };
            mock.ex.wr_id = wc.wr_id;
            mock.ex.status = wc.status;
            mock.current = wc;
            mock.polled += 1;
            0
        }
        Err(errno) => errno,
    }
}

unsafe extern "C" fn start_poll(cq: *mut ibv_cq_ex, _attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: the caller's live CQ.
    unsafe { advance(cq, Call::StartPoll, Verb::StartPoll) }
}

unsafe extern "C" fn next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the caller's live CQ.
    unsafe { advance(cq, Call::NextPoll, Verb::NextPoll) }
}

extern "C" fn end_poll(_cq: *mut ibv_cq_ex) {
    let _ = serve(|s| {
        s.record(Call::EndPoll);
        Ok(())
    });
}

/// The current completion of a mock extended CQ.
///
/// # Safety
///
/// `cq` must be a live mock extended CQ.
unsafe fn current<'a>(cq: *mut ibv_cq_ex) -> &'a MockCqEx {
    // SAFETY: the caller's live CQ, allocated as a `MockCqEx`.
    unsafe { &*cq.cast::<MockCqEx>() }
}

/// Declares `read_*` members returning a field of the current completion.
macro_rules! readers {
    ($($name:ident -> $ty:ty = |$c:ident| $value:expr;)*) => {$(
        unsafe extern "C" fn $name(cq: *mut ibv_cq_ex) -> $ty {
            // SAFETY: the caller's live CQ, inside a polling session.
            let $c = unsafe { current(cq) };
            $value
        }
    )*};
}

readers! {
    read_opcode -> ibv_wc_opcode = |c| c.current.opcode;
    read_vendor_err -> u32 = |c| c.current.vendor_err;
    read_byte_len -> u32 = |c| c.current.byte_len;
    // SAFETY: every member of the union is a plain u32.
    read_imm_data -> __be32 = |c| unsafe { c.current.__bindgen_anon_1.imm_data };
    read_qp_num -> u32 = |c| c.current.qp_num;
    read_src_qp -> u32 = |c| c.current.src_qp;
    read_wc_flags -> u32 = |c| c.current.wc_flags;
    read_slid -> u32 = |c| u32::from(c.current.slid);
    read_sl -> u8 = |c| c.current.sl;
    read_dlid_path_bits -> u8 = |c| c.current.dlid_path_bits;
    read_completion_ts -> u64 = |c| c.polled * 1000;
}

/// `verbs_context.query_device_ex` of a context with completion timestamps, device memory or
/// packet pacing: its device attributes as `ibv_query_device` reports them, and, as
/// configured, a 48-bit timestamp mask with a clock of [`CORE_CLOCK_KHZ`], a `max_dm_size` of
/// [`MAX_DM_SIZE`](crate::MAX_DM_SIZE) and the packet pacing range.
///
/// # Safety
///
/// `attr` must be writable for `attr_size` bytes.
pub(super) unsafe extern "C" fn query_device_ex(
    context: *mut ibv_context,
    _input: *const ibv_query_device_ex_input,
    attr: *mut ibv_device_attr_ex,
    attr_size: usize,
) -> c_int {
    let result = serve(|s| {
        s.begin(Call::QueryDeviceEx { attr_size }, Verb::QueryDeviceEx)?;
        s.expect(context, Kind::Context)?;
        Ok(s.device_attr_ex(context))
    });
    let full = match result {
        Ok(device) => device,
        Err(errno) => return errno,
    };
    let n = attr_size.min(size_of::<ibv_device_attr_ex>());
    // SAFETY: the caller made `attr_size` bytes writable; `n` bytes fit both.
    unsafe {
        ptr::write_bytes(attr.cast::<u8>(), 0, attr_size);
        ptr::copy_nonoverlapping(ptr::from_ref(&full).cast::<u8>(), attr.cast::<u8>(), n);
    }
    0
}

/// `verbs_context.create_qp_ex`: a QP as `ibv_create_qp` makes one (RC only), inside an
/// `ibv_qp_ex` whose members record their calls; `EINVAL` without `IBV_QP_INIT_ATTR_PD`.
///
/// # Safety
///
/// `attr` must be valid for reads and writes.
pub(super) unsafe extern "C" fn create_qp_ex(
    context: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: the caller passes a valid, exclusive attribute struct. (A copy: `init` below
    // borrows the struct mutably while these fields are still read.)
    let a = unsafe { attr.read() };
    let call = Call::CreateQpEx {
        qp_type: a.qp_type,
        comp_mask: a.comp_mask,
        send_ops_flags: a.send_ops_flags,
    };
    or_null(serve(|s| {
        s.begin(call, Verb::CreateQpEx)?;
        s.expect(context, Kind::Context)?;
        if a.qp_type == IBV_QPT_XRC_RECV {
            return super::xrc::create_recv_qp(s, context, &a);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 {
            return Err(libc::EINVAL);
        }
        // SAFETY: `ibv_qp_init_attr` is the prefix of `ibv_qp_init_attr_ex`.
        let init = unsafe { &mut *attr.cast::<ibv_qp_init_attr>() };
        let qp_base = new_qp(s, a.pd, init)?;
        let qpn = qp_base.qp_num;
        let m = s.missing_member(context);
        // SAFETY: all-zero is a valid ibv_qp_ex (NULL pointers and members).
        let mut ex: ibv_qp_ex = unsafe { std::mem::zeroed() };
        ex.qp_base = qp_base;
        ex.wr_start = member(m, "wr_start", wr_start);
        ex.wr_complete = member(m, "wr_complete", wr_complete);
        ex.wr_abort = member(m, "wr_abort", wr_abort);
        ex.wr_send = member(m, "wr_send", wr_send);
        ex.wr_send_imm = member(m, "wr_send_imm", wr_send_imm);
        ex.wr_send_inv = member(m, "wr_send_inv", wr_send_inv);
        ex.wr_rdma_write = member(m, "wr_rdma_write", wr_rdma_write);
        ex.wr_rdma_write_imm = member(m, "wr_rdma_write_imm", wr_rdma_write_imm);
        ex.wr_rdma_read = member(m, "wr_rdma_read", wr_rdma_read);
        ex.wr_atomic_cmp_swp = member(m, "wr_atomic_cmp_swp", wr_atomic_cmp_swp);
        ex.wr_atomic_fetch_add = member(m, "wr_atomic_fetch_add", wr_atomic_fetch_add);
        ex.wr_local_inv = member(m, "wr_local_inv", wr_local_inv);
        ex.wr_bind_mw = member(m, "wr_bind_mw", wr_bind_mw);
        ex.wr_set_sge = member(m, "wr_set_sge", wr_set_sge);
        ex.wr_set_sge_list = member(m, "wr_set_sge_list", wr_set_sge_list);
        ex.wr_set_inline_data = member(m, "wr_set_inline_data", wr_set_inline_data);
        ex.wr_set_inline_data_list = member(m, "wr_set_inline_data_list", wr_set_inline_data_list);
        ex.wr_set_ud_addr = member(m, "wr_set_ud_addr", wr_set_ud_addr);
        let qp = s.adopt(ex, Kind::QpEx).cast::<ibv_qp>();
        // SAFETY: as above.
        track(s, qp, unsafe { &*attr.cast::<ibv_qp_init_attr>() });
        debug_assert_eq!(s.reg.qpn_of(qp), Some(qpn));
        Ok(qp)
    }))
}

/// `ibv_qp_to_qp_ex`: the extended QP of one created by `create_qp_ex`, else NULL.
pub(super) extern "C" fn ibv_qp_to_qp_ex(qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    match serve(|s| Ok(s.is_qp_ex(qp))) {
        Ok(true) => qp.cast(),
        _ => ptr::null_mut(),
    }
}

/// Records a call of a member that cannot fail.
fn record(call: Call) {
    let _ = serve(|s| {
        s.record(call);
        Ok(())
    });
}

/// Runs `f` on the batch of the live extended QP `qp`, if one is open (`wr_start` called).
fn with_batch(qp: *mut ibv_qp_ex, f: impl FnOnce(&mut State, u32, &mut Vec<SendWork>)) {
    let _ = serve(|s| {
        let Some(qpn) = s.reg.qpn_of(qp.cast()) else { return Ok(()) };
        let Some(mut batch) = s.reg.qps.get_mut(&qpn).and_then(|q| q.batch.take()) else {
            return Ok(());
        };
        f(s, qpn, &mut batch);
        if let Some(info) = s.reg.qps.get_mut(&qpn) {
            info.batch = Some(batch);
        }
        Ok(())
    });
}

/// Runs `f` on the work request being built (the last of the batch).
fn with_last(qp: *mut ibv_qp_ex, f: impl FnOnce(&State, &mut SendWork)) {
    with_batch(qp, |s, _, batch| {
        if let Some(last) = batch.last_mut() {
            f(s, last);
        }
    });
}

/// Records an operation builder with the WR's id and flags as set before it, and opens a
/// work request of `opcode` in the batch, `fill`ed with the builder's arguments.
///
/// # Safety
///
/// `qp` must be a live mock extended QP.
unsafe fn build(
    qp: *mut ibv_qp_ex,
    builder: &'static str,
    opcode: ibv_wr_opcode,
    fill: impl FnOnce(&mut SendWork),
) {
    // SAFETY: the caller's live QP.
    let (wr_id, wr_flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    record(Call::WrBuild { builder, wr_id, wr_flags });
    let mut work = SendWork {
        wr_id,
        opcode,
        signaled: wr_flags & IBV_SEND_SIGNALED != 0,
        ..Default::default()
    };
    fill(&mut work);
    with_batch(qp, |_, _, batch| batch.push(work));
}

extern "C" fn wr_start(qp: *mut ibv_qp_ex) {
    record(Call::WrStart);
    let _ = serve(|s| {
        if let Some(info) = s.reg.qpn_of(qp.cast()).and_then(|n| s.reg.qps.get_mut(&n)) {
            info.batch = Some(Vec::new());
        }
        Ok(())
    });
}

/// `wr_complete`: checks the batch, then posts all of it or (`EINVAL`) none.
extern "C" fn wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    let result = serve(|s| {
        let batch =
            s.reg.qpn_of(qp.cast()).and_then(|n| Some((n, s.reg.qps.get_mut(&n)?.batch.take()?)));
        s.begin(Call::WrComplete, Verb::WrComplete)?;
        s.expect(qp.cast::<ibv_qp>(), Kind::QpEx)?;
        let Some((qpn, batch)) = batch else { return Ok(()) };
        complete_batch(s, qpn, batch)
    });
    result.err().unwrap_or(0)
}

/// Checks every work request of `batch` for QP `qpn`, then posts them all, or none when one
/// breaks a rule that is not allowed (`EINVAL`).
fn complete_batch(s: &mut State, qpn: u32, mut batch: Vec<SendWork>) -> Result<(), c_int> {
    let queue = Queue::Send(qpn);
    let ids: Vec<u64> = batch.iter().map(|w| w.wr_id).collect();
    let mut fatal = !check_chain(s, queue, &ids);
    for position in 0..batch.len() {
        let (earlier, rest) = batch.split_at_mut(position);
        let work = &mut rest[0];
        // A failed inline read was recorded when its setter ran.
        fatal |= work.fatal;
        if work.poisoned {
            continue;
        }
        if let Err((rule, detail)) = check_send(&s.reg, &s.reg.qps[&qpn], work, earlier) {
            let wr_id = work.wr_id;
            fatal |= !s.violate(Violation { rule, queue, wr_id, position, detail });
            work.poisoned = true;
        }
    }
    if fatal {
        return Err(libc::EINVAL);
    }
    for work in batch {
        enqueue_send(s, qpn, work);
    }
    after_post(s, qpn);
    Ok(())
}

extern "C" fn wr_abort(qp: *mut ibv_qp_ex) {
    record(Call::WrAbort);
    with_batch(qp, |_, _, batch| batch.clear());
    let _ = serve(|s| {
        if let Some(info) = s.reg.qpn_of(qp.cast()).and_then(|n| s.reg.qps.get_mut(&n)) {
            info.batch = None;
        }
        Ok(())
    });
}

/// Declares operation builders that record themselves and open a work request.
macro_rules! builders {
    ($($name:ident($($arg:ident: $ty:ty),*) => $opcode:ident |$w:ident| $fill:expr;)*) => {$(
        unsafe extern "C" fn $name(qp: *mut ibv_qp_ex $(, $arg: $ty)*) {
            // SAFETY: the caller's live QP.
            unsafe { build(qp, stringify!($name), $opcode, |$w| $fill) };
        }
    )*};
}

builders! {
    wr_send() => IBV_WR_SEND |_w| ();
    wr_send_imm(imm: __be32) => IBV_WR_SEND_WITH_IMM |w| w.imm = imm;
    wr_send_inv(rkey: u32) => IBV_WR_SEND_WITH_INV |w| w.rkey = rkey;
    wr_rdma_write(rkey: u32, addr: u64) => IBV_WR_RDMA_WRITE |w| (w.rkey, w.remote_addr) = (rkey, addr);
    wr_rdma_write_imm(rkey: u32, addr: u64, imm: __be32) => IBV_WR_RDMA_WRITE_WITH_IMM
        |w| (w.rkey, w.remote_addr, w.imm) = (rkey, addr, imm);
    wr_rdma_read(rkey: u32, addr: u64) => IBV_WR_RDMA_READ |w| (w.rkey, w.remote_addr) = (rkey, addr);
    wr_atomic_cmp_swp(rkey: u32, addr: u64, compare: u64, swap: u64) => IBV_WR_ATOMIC_CMP_AND_SWP
        |w| (w.rkey, w.remote_addr, w.compare_add, w.swap) = (rkey, addr, compare, swap);
    wr_atomic_fetch_add(rkey: u32, addr: u64, add: u64) => IBV_WR_ATOMIC_FETCH_AND_ADD
        |w| (w.rkey, w.remote_addr, w.compare_add) = (rkey, addr, add);
    wr_local_inv(rkey: u32) => IBV_WR_LOCAL_INV |w| w.rkey = rkey;
}

/// `wr_bind_mw`: a type-2 bind, with what it names read now (checked at `wr_complete`).
///
/// # Safety
///
/// `info` must be valid for reads.
unsafe extern "C" fn wr_bind_mw(
    qp: *mut ibv_qp_ex,
    mw: *mut ibv_mw,
    rkey: u32,
    info: *const ibv_mw_bind_info,
) {
    // SAFETY: the caller's valid bind info.
    let info = unsafe { *info };
    let bind = serve(|s| Ok(request(s, mw, rkey, &info))).ok();
    // SAFETY: the caller's live QP.
    unsafe {
        build(qp, "wr_bind_mw", IBV_WR_BIND_MW, |w| {
            w.rkey = rkey;
            w.bind = bind;
        })
    };
}

extern "C" fn wr_set_sge(qp: *mut ibv_qp_ex, lkey: u32, addr: u64, length: u32) {
    record(Call::WrData { setter: "wr_set_sge", bytes: u64::from(length) });
    with_last(qp, |_, w| w.sges = vec![ibv_sge { addr, length, lkey }]);
}

unsafe extern "C" fn wr_set_sge_list(qp: *mut ibv_qp_ex, num_sge: usize, sg_list: *const ibv_sge) {
    // SAFETY: the caller passes `num_sge` valid SGEs (none when 0).
    let sges = unsafe { slice_or_empty(sg_list, num_sge) };
    let bytes = sges.iter().map(|s| u64::from(s.length)).sum();
    record(Call::WrData { setter: "wr_set_sge_list", bytes });
    with_last(qp, |_, w| w.sges = sges.to_vec());
}

/// Copies inline data into the work request being built, as a provider does at once; an
/// address that is not CPU memory poisons it with the violation recorded at `wr_complete`.
fn set_inline(qp: *mut ibv_qp_ex, chunks: &[(usize, usize)]) {
    with_batch(qp, |s, qpn, batch| {
        let position = batch.len().saturating_sub(1);
        let Some(w) = batch.last_mut() else { return };
        match read_inline(&s.reg, chunks) {
            Ok(bytes) => w.inline = Some(bytes),
            Err((rule, detail)) => {
                let (queue, wr_id) = (Queue::Send(qpn), w.wr_id);
                w.poisoned = true;
                w.inline = Some(Vec::new());
                w.fatal = !s.violate(Violation { rule, queue, wr_id, position, detail });
            }
        }
    });
}

extern "C" fn wr_set_inline_data(qp: *mut ibv_qp_ex, addr: *mut c_void, length: usize) {
    record(Call::WrData { setter: "wr_set_inline_data", bytes: length as u64 });
    set_inline(qp, &[(addr as usize, length)]);
}

unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut ibv_qp_ex,
    num_buf: usize,
    buf_list: *const ibv_data_buf,
) {
    // SAFETY: the caller passes `num_buf` valid buffers (none when 0).
    let bufs = unsafe { slice_or_empty(buf_list, num_buf) };
    let bytes = bufs.iter().map(|b| b.length as u64).sum();
    record(Call::WrData { setter: "wr_set_inline_data_list", bytes });
    let chunks: Vec<_> = bufs.iter().map(|b| (b.addr as usize, b.length)).collect();
    set_inline(qp, &chunks);
}

extern "C" fn wr_set_ud_addr(
    qp: *mut ibv_qp_ex,
    ah: *mut ibv_ah,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    record(Call::WrUdAddr { remote_qpn, remote_qkey });
    with_last(qp, |_, w| (w.ah, w.remote_qpn) = (ah as usize, remote_qpn));
}

/// `len` elements at `ptr`, or none (`ptr` may then be NULL).
///
/// # Safety
///
/// When `len` is not 0, `ptr` must be valid for `len` reads.
unsafe fn slice_or_empty<'a, T>(ptr: *const T, len: usize) -> &'a [T] {
    if len == 0 {
        return &[];
    }
    // SAFETY: the caller's guarantee.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}
