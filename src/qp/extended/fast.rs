//! The fast batch: WRs that fit the QP's slack, built without tests through the members
//! read at creation ([`QpOps`]): the builder of each WR's kind, its UD address and its data.

use std::ffi::c_void;

use rdma_verbs_sys as sys;

use super::ops::{fitting, QpOps};
use super::set_inline_list;
use crate::wr::{Build, SendWr};

/// Every WR of `wrs` in an open batch ([`build_as`]), each of build `common` or, for `None`,
/// of its own.
///
/// # Safety
///
/// As [`build_as`] for each WR, `common` its build when given.
#[inline(always)]
pub(super) unsafe fn build_each<const UD: bool>(
    qp: *mut sys::ibv_qp_ex,
    ops: *const QpOps,
    wrs: &[SendWr<'_>],
    common: Option<Build>,
) {
    for wr in wrs {
        let build = match common {
            Some(build) => build,
            None => wr.build(),
        };
        // SAFETY: the caller's.
        unsafe { build_as(qp, ops, wr.as_raw(), build, UD) };
    }
}

/// One WR of an open batch, built without tests: its id and flags, its builder, its UD
/// address, its data. `build` is the WR's [`Build`]: a WR of one plain SGE (the common one) is
/// built by its kind alone, a local invalidate with its builder alone (it has no data, as in
/// [`ExQp::build`]); any other by its opcode, then by its data.
///
/// # Safety
///
/// Inside a batch of `qp` opened on this thread, `ops` its members; `wr` valid as for
/// [`ExQp::post`], the request of a [`SendWr`] whose build is `build` and whose demand fits
/// the slack of `qp`'s QP: its opcode is one that [`builder`] knows (binds and other opcodes never fit), its
/// builder and data setter are set, and a UD WR is addressed.
#[inline(always)]
pub(super) unsafe fn build_as(
    qp: *mut sys::ibv_qp_ex,
    ops: *const QpOps,
    raw: &sys::ibv_send_wr,
    build: Build,
    ud: bool,
) {
    // SAFETY: inside the caller's batch, for a WR that fits (the caller's guarantees); no
    // reference to `*qp` is held across the calls, which may write it.
    unsafe {
        (*qp).wr_id = raw.wr_id;
        (*qp).wr_flags = raw.send_flags;
        let one = |opcode| {
            builder(qp, ops, raw, opcode);
            set_ud_addr(qp, ops, raw, ud);
            let s = *raw.sg_list;
            ((*ops).set_sge)(qp, s.lkey, s.addr, s.length);
        };
        match build {
            Build::Send => one(sys::IBV_WR_SEND),
            Build::SendWithImm => one(sys::IBV_WR_SEND_WITH_IMM),
            Build::RdmaWrite => one(sys::IBV_WR_RDMA_WRITE),
            Build::RdmaWriteWithImm => one(sys::IBV_WR_RDMA_WRITE_WITH_IMM),
            Build::RdmaRead => one(sys::IBV_WR_RDMA_READ),
            // It carries no data (no setter follows it), and never fits a UD QP.
            Build::LocalInv => builder(qp, ops, raw, sys::IBV_WR_LOCAL_INV),
            Build::Other => {
                builder(qp, ops, raw, raw.opcode);
                set_ud_addr(qp, ops, raw, ud);
                data_fast(qp, ops, raw);
            }
        }
    }
}

/// The builder of `opcode` (the WR's), called with the WR's fields.
///
/// # Safety
///
/// As [`build_as`]: inside the batch, `opcode` one of those below and its builder set.
#[inline(always)]
unsafe fn builder(
    qp: *mut sys::ibv_qp_ex,
    ops: *const QpOps,
    wr: &sys::ibv_send_wr,
    opcode: sys::ibv_wr_opcode,
) {
    // SAFETY: the caller's; the union members read are those the WR's opcode set (the
    // constructors of `SendWr` zero the rest).
    unsafe {
        let rdma = wr.wr.rdma;
        match opcode {
            sys::IBV_WR_SEND => fitting((*ops).send)(qp),
            sys::IBV_WR_SEND_WITH_IMM => {
                fitting((*ops).send_imm)(qp, wr.__bindgen_anon_1.imm_data);
            }
            sys::IBV_WR_RDMA_WRITE => {
                fitting((*ops).rdma_write)(qp, rdma.rkey, rdma.remote_addr);
            }
            sys::IBV_WR_RDMA_WRITE_WITH_IMM => fitting((*ops).rdma_write_imm)(
                qp,
                rdma.rkey,
                rdma.remote_addr,
                wr.__bindgen_anon_1.imm_data,
            ),
            sys::IBV_WR_RDMA_READ => {
                fitting((*ops).rdma_read)(qp, rdma.rkey, rdma.remote_addr);
            }
            sys::IBV_WR_ATOMIC_CMP_AND_SWP => {
                let atomic = wr.wr.atomic;
                fitting((*ops).atomic_cmp_swp)(
                    qp,
                    atomic.rkey,
                    atomic.remote_addr,
                    atomic.compare_add,
                    atomic.swap,
                );
            }
            sys::IBV_WR_ATOMIC_FETCH_AND_ADD => {
                let atomic = wr.wr.atomic;
                fitting((*ops).atomic_fetch_add)(
                    qp,
                    atomic.rkey,
                    atomic.remote_addr,
                    atomic.compare_add,
                );
            }
            sys::IBV_WR_LOCAL_INV => {
                fitting((*ops).local_inv)(qp, wr.__bindgen_anon_1.invalidate_rkey);
            }
            sys::IBV_WR_SEND_WITH_INV => {
                fitting((*ops).send_inv)(qp, wr.__bindgen_anon_1.invalidate_rkey);
            }
            // Every other opcode is `fit::SLOW` (`SendWr::refresh`): it never fits.
            _ => std::hint::unreachable_unchecked(),
        }
    }
}

/// A UD WR's destination, on a UD QP (`ud`).
///
/// # Safety
///
/// As [`build_as`]: after the builder; a WR that fits a UD QP is addressed.
#[inline(always)]
unsafe fn set_ud_addr(qp: *mut sys::ibv_qp_ex, ops: *const QpOps, wr: &sys::ibv_send_wr, ud: bool) {
    if ud {
        // SAFETY: the caller's; `wr.ud` was set by `SendWr::to`, `wr_set_ud_addr` read at
        // creation (`QpOps::of`, which requires it of a UD QP).
        unsafe {
            let ud = wr.wr.ud;
            fitting((*ops).set_ud_addr)(qp, ud.ah, ud.remote_qpn, ud.remote_qkey);
        }
    }
}

/// The data of a WR that fits, through its setter: as [`set_data`], without the tests.
///
/// # Safety
///
/// As [`build_as`]: after the builder (and UD address).
#[inline(always)]
unsafe fn data_fast(qp: *mut sys::ibv_qp_ex, ops: *const QpOps, wr: &sys::ibv_send_wr) {
    let n = wr.num_sge as usize;
    // SAFETY: the caller's; `sg_list` holds `num_sge` SGEs (a `SendWr`'s own); the setters a
    // fitting WR needs are set (`send_slack`); inline bytes are copied during the call.
    unsafe {
        if wr.send_flags & sys::IBV_SEND_INLINE == 0 {
            if n == 1 {
                let s = *wr.sg_list;
                ((*ops).set_sge)(qp, s.lkey, s.addr, s.length);
            } else {
                // No data is an empty list (an SGE of length 0 can mean 2 GiB to some hardware).
                ((*ops).set_sge_list)(qp, n, wr.sg_list);
            }
        } else if n <= 1 {
            let (addr, len) = if n == 1 {
                let s = *wr.sg_list;
                (s.addr as *mut c_void, s.length as usize)
            } else {
                (std::ptr::null_mut(), 0)
            };
            ((*ops).set_inline_data)(qp, addr, len);
        } else {
            // At most INLINE_BUFS buffers (more never fit), and the list setter set.
            set_inline_list(qp, std::slice::from_raw_parts(wr.sg_list, n));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use std::ptr::NonNull;

    use super::super::{ExQp, FailedBatch, QpOps};
    use super::*;
    use crate::wr::{LKey, RKey, RemoteAddr, SendWrList, Sge};

    thread_local! {
        /// The members the fake provider below was called through, in order.
        static CALLS: RefCell<Vec<&'static str>> = const { RefCell::new(Vec::new()) };
    }

    fn record(member: &'static str) {
        CALLS.with(|calls| calls.borrow_mut().push(member));
    }

    extern "C" fn wr_start(_: *mut sys::ibv_qp_ex) {
        record("wr_start");
    }

    extern "C" fn wr_complete(_: *mut sys::ibv_qp_ex) -> i32 {
        record("wr_complete");
        0
    }

    extern "C" fn wr_abort(_: *mut sys::ibv_qp_ex) {
        record("wr_abort");
    }

    extern "C" fn wr_set_inline_data(_: *mut sys::ibv_qp_ex, _: *mut c_void, _: usize) {
        record("wr_set_inline_data");
    }

    extern "C" fn wr_rdma_write(_: *mut sys::ibv_qp_ex, _: u32, _: u64) {
        record("wr_rdma_write");
    }

    extern "C" fn wr_local_inv(_: *mut sys::ibv_qp_ex, _: u32) {
        record("wr_local_inv");
    }

    extern "C" fn wr_send_inv(_: *mut sys::ibv_qp_ex, _: u32) {
        record("wr_send_inv");
    }

    extern "C" fn wr_set_sge(_: *mut sys::ibv_qp_ex, _: u32, _: u64, _: u32) {
        record("wr_set_sge");
    }

    extern "C" fn wr_set_sge_list(_: *mut sys::ibv_qp_ex, _: usize, _: *const sys::ibv_sge) {
        record("wr_set_sge_list");
    }

    #[test]
    fn the_fast_batch_calls_a_builder_and_a_setter_per_wr_and_none_after_a_local_invalidate() {
        // SAFETY: an all-zero ibv_qp_ex is valid: NULL pointers and NULL (None) members.
        let mut q: sys::ibv_qp_ex = unsafe { std::mem::zeroed() };
        q.wr_start = Some(wr_start);
        q.wr_complete = Some(wr_complete);
        q.wr_abort = Some(wr_abort);
        q.wr_set_inline_data = Some(wr_set_inline_data);
        q.wr_rdma_write = Some(wr_rdma_write);
        q.wr_local_inv = Some(wr_local_inv);
        q.wr_send_inv = Some(wr_send_inv);
        q.wr_set_sge = Some(wr_set_sge);
        q.wr_set_sge_list = Some(wr_set_sge_list);
        let send_ops = sys::IBV_QP_EX_WITH_RDMA_WRITE
            | sys::IBV_QP_EX_WITH_LOCAL_INV
            | sys::IBV_QP_EX_WITH_SEND_WITH_INV;
        let ops = QpOps::of(&q, sys::IBV_QPT_RC).expect("every member a batch needs");
        let ex = ExQp {
            raw: NonNull::from(&mut q),
            ops,
            send_ops,
            lists_right: true,
            failed_batch: FailedBatch::AllMayBePosted,
        };
        assert!([sys::IBV_WR_RDMA_WRITE, sys::IBV_WR_LOCAL_INV].iter().all(|&op| ex.builds(op)));
        let sges = [Sge::new(0x1000, 8, LKey::new(1)), Sge::new(0x2000, 8, LKey::new(1))];
        let remote = RemoteAddr { addr: 0x8000, rkey: RKey::new(2) };
        let list: SendWrList<'_> = [
            SendWr::rdma_write(1, &sges[..1], remote),
            SendWr::local_inv(2, RKey::new(3)),
            SendWr::send_with_inv(3, &sges, RKey::new(4)),
        ]
        .into_iter()
        .collect();
        // SAFETY: the fake members touch nothing; the WRs are the kinds the batch builds.
        let post =
            |list: &SendWrList<'_>| unsafe { ExQp::post_fast::<false>(&ex, list, list.builds()) };
        assert_eq!(post(&list), 0);
        let calls = CALLS.with(|calls| calls.take());
        assert_eq!(
            calls,
            [
                "wr_start",
                "wr_rdma_write",
                "wr_set_sge",
                "wr_local_inv",
                "wr_send_inv",
                "wr_set_sge_list",
                "wr_complete"
            ]
        );
        // WRs of one build, built by it (one dispatch for the list).
        let writes: SendWrList<'_> =
            (0..2).map(|i| SendWr::rdma_write(i, &sges[..1], remote)).collect();
        assert_eq!(post(&writes), 0);
        let calls = CALLS.with(|calls| calls.take());
        let each = ["wr_rdma_write", "wr_set_sge"];
        assert_eq!(calls, [&["wr_start"][..], &each, &each, &["wr_complete"]].concat());
    }
}
