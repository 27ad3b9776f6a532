//! The extended QP: `ibv_create_qp_ex(3)` and the work request builders of `ibv_wr_post(3)`.
//!
//! A QP created with `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` has an `ibv_qp_ex` (from
//! `ibv_qp_to_qp_ex`) whose function pointers build send work requests in place, many per
//! doorbell: `ibv_wr_start`, then for each WR its `wr_id`/`wr_flags` fields, one operation
//! builder and one data setter, then `ibv_wr_complete` (or `ibv_wr_abort`). The C inlines call
//! the pointers blindly; these versions return `EOPNOTSUPP` for a NULL one (an operation the
//! QP was not created for) so that a caller can abort the batch instead of crashing.
//!
//! Only the members present since `ibv_qp_ex` first appeared (rdma-core v24) are wrapped: the
//! trailing `wr_atomic_write` (v44) and `wr_flush` (v45) may lie beyond the struct an older
//! provider allocated.

use std::ffi::{c_int, c_void};
use std::mem::offset_of;
use std::ptr;

use crate::bindings::*;
use crate::loader::IbverbsFns;

use super::{create_or_unsupported, verbs_ctx_op};

/// `ibv_create_qp_ex(3)`: the C inline's shortcut (a mask of only `IBV_QP_INIT_ATTR_PD` goes to
/// `ibv_create_qp`, whose attribute struct is a prefix of the extended one), else the
/// `create_qp_ex` op of `verbs_context`.
///
/// Returns the QP or NULL with `errno` set: `EOPNOTSUPP` when the provider has no
/// `create_qp_ex` op.
///
/// # Safety
///
/// `ctx` must be a live context of the library `fns` came from; `attr` a valid attribute
/// struct whose masked fields (PD, CQs, SRQ) are live objects of `ctx`.
pub unsafe fn ibv_create_qp_ex(
    fns: &IbverbsFns,
    ctx: *mut ibv_context,
    attr: *mut ibv_qp_init_attr_ex,
) -> *mut ibv_qp {
    // SAFETY: the caller guarantees `attr` is valid.
    let (mask, pd) = unsafe { ((*attr).comp_mask, (*attr).pd) };
    if mask == IBV_QP_INIT_ATTR_PD {
        // SAFETY: `ibv_qp_init_attr` is the prefix of `ibv_qp_init_attr_ex` (checked in lib.rs).
        return unsafe { (fns.ibv_create_qp)(pd, attr.cast()) };
    }
    // SAFETY: the caller guarantees a live context.
    let op =
        unsafe { verbs_ctx_op(ctx, offset_of!(verbs_context, create_qp_ex), |v| &v.create_qp_ex) };
    // SAFETY: the provider's op (if any), called under the caller's guarantees.
    unsafe { create_or_unsupported(op, ctx, attr) }
}

/// `ibv_qp_to_qp_ex(3)`: the extended view of `qp`, or NULL when the QP was not created with
/// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` or the library predates the symbol (rdma-core v24).
///
/// # Safety
///
/// `qp` must be a live QP of the library `fns` came from.
pub unsafe fn ibv_qp_to_qp_ex(fns: &IbverbsFns, qp: *mut ibv_qp) -> *mut ibv_qp_ex {
    match fns.ibv_qp_to_qp_ex {
        // SAFETY: forwarded under the caller's guarantee.
        Some(to_ex) => unsafe { to_ex(qp) },
        None => ptr::null_mut(),
    }
}

/// Declares one wrapper per `ibv_qp_ex` function pointer: it calls the pointer and returns 0,
/// or returns `EOPNOTSUPP` without calling anything when the pointer is NULL.
macro_rules! qp_ex_builders {
    ($( $(#[$doc:meta])* $name:ident => $field:ident ( $($arg:ident: $ty:ty),* ); )*) => {$(
        $(#[$doc])*
        ///
        /// Returns 0, or `EOPNOTSUPP` when the provider left this member NULL.
        ///
        /// # Safety
        ///
        /// `qp` must be a live extended QP (from `ibv_qp_to_qp_ex`) used as `ibv_wr_post(3)`
        /// orders the calls, by one thread between `ibv_wr_start` and `ibv_wr_complete` or
        /// `ibv_wr_abort`; pointer arguments must be valid for the call, and the memory that
        /// an SGE names must stay registered until the WR completes.
        #[inline]
        pub unsafe fn $name(qp: *mut ibv_qp_ex $(, $arg: $ty)*) -> c_int {
            // SAFETY: the caller guarantees a live extended QP.
            match unsafe { (*qp).$field } {
                Some(f) => {
                    // SAFETY: the provider's member, called as `ibv_wr_post(3)` documents.
                    unsafe { f(qp $(, $arg)*) };
                    0
                }
                None => libc::EOPNOTSUPP,
            }
        }
    )*};
}

qp_ex_builders! {
    /// `ibv_wr_start`: opens a batch of work requests on `qp` (takes the provider's QP lock).
    ibv_wr_start => wr_start();
    /// `ibv_wr_abort`: discards every work request built since `ibv_wr_start`.
    ibv_wr_abort => wr_abort();
    /// `ibv_wr_send`: a SEND.
    ibv_wr_send => wr_send();
    /// `ibv_wr_send_imm`: a SEND with immediate data (big-endian).
    ibv_wr_send_imm => wr_send_imm(imm_data: __be32);
    /// `ibv_wr_send_inv`: a SEND that invalidates `invalidate_rkey` at the receiver.
    ibv_wr_send_inv => wr_send_inv(invalidate_rkey: u32);
    /// `ibv_wr_rdma_write`: an RDMA WRITE to `remote_addr` under `rkey`.
    ibv_wr_rdma_write => wr_rdma_write(rkey: u32, remote_addr: u64);
    /// `ibv_wr_rdma_write_imm`: an RDMA WRITE with immediate data (big-endian).
    ibv_wr_rdma_write_imm => wr_rdma_write_imm(rkey: u32, remote_addr: u64, imm_data: __be32);
    /// `ibv_wr_rdma_read`: an RDMA READ from `remote_addr` under `rkey`.
    ibv_wr_rdma_read => wr_rdma_read(rkey: u32, remote_addr: u64);
    /// `ibv_wr_atomic_cmp_swp`: an 8-byte compare-and-swap at `remote_addr`.
    ibv_wr_atomic_cmp_swp => wr_atomic_cmp_swp(rkey: u32, remote_addr: u64, compare: u64, swap: u64);
    /// `ibv_wr_atomic_fetch_add`: an 8-byte fetch-and-add at `remote_addr`.
    ibv_wr_atomic_fetch_add => wr_atomic_fetch_add(rkey: u32, remote_addr: u64, add: u64);
    /// `ibv_wr_bind_mw`: binds a type-2 memory window with the new `rkey`.
    ibv_wr_bind_mw => wr_bind_mw(mw: *mut ibv_mw, rkey: u32, bind_info: *const ibv_mw_bind_info);
    /// `ibv_wr_local_inv`: invalidates `invalidate_rkey` locally.
    ibv_wr_local_inv => wr_local_inv(invalidate_rkey: u32);
    /// `ibv_wr_set_sge`: the WR's one scatter/gather element.
    ibv_wr_set_sge => wr_set_sge(lkey: u32, addr: u64, length: u32);
    /// `ibv_wr_set_sge_list`: the WR's `num_sge` scatter/gather elements.
    ibv_wr_set_sge_list => wr_set_sge_list(num_sge: usize, sg_list: *const ibv_sge);
    /// `ibv_wr_set_inline_data`: the WR's payload, copied into the WQE now.
    ibv_wr_set_inline_data => wr_set_inline_data(addr: *mut c_void, length: usize);
    /// `ibv_wr_set_inline_data_list`: the WR's payload from `num_buf` buffers, copied now.
    ibv_wr_set_inline_data_list => wr_set_inline_data_list(num_buf: usize, buf_list: *const ibv_data_buf);
    /// `ibv_wr_set_ud_addr`: a UD WR's destination (address handle, QP number, Q_Key).
    ibv_wr_set_ud_addr => wr_set_ud_addr(ah: *mut ibv_ah, remote_qpn: u32, remote_qkey: u32);
    /// `ibv_wr_set_xrc_srqn`: an XRC WR's destination, the remote XRC SRQ's number.
    ibv_wr_set_xrc_srqn => wr_set_xrc_srqn(remote_srqn: u32);
}

/// `ibv_wr_complete`: posts every work request built since `ibv_wr_start` with one doorbell.
///
/// Returns 0 or an errno value (`EOPNOTSUPP` when the provider left the member NULL); what an
/// error means for the batch is the provider's, as `ibv_wr_post(3)` says.
///
/// # Safety
///
/// As for the builders: a live extended QP inside a batch opened by `ibv_wr_start` on this
/// thread.
#[inline]
pub unsafe fn ibv_wr_complete(qp: *mut ibv_qp_ex) -> c_int {
    // SAFETY: the caller guarantees a live extended QP.
    match unsafe { (*qp).wr_complete } {
        // SAFETY: the provider's member, closing the batch the caller opened.
        Some(complete) => unsafe { complete(qp) },
        None => libc::EOPNOTSUPP,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn record_write(qp: *mut ibv_qp_ex, rkey: u32, remote_addr: u64) {
        // SAFETY: the test passes its own live struct.
        unsafe { (*qp).wr_id = remote_addr + u64::from(rkey) };
    }

    #[test]
    fn a_builder_calls_its_member_and_a_null_one_is_eopnotsupp() {
        // SAFETY: an all-zero ibv_qp_ex is valid: NULL pointers and NULL (None) members.
        let mut qp: ibv_qp_ex = unsafe { std::mem::zeroed() };
        qp.wr_rdma_write = Some(record_write);
        // SAFETY: the members read are this struct's, set above or NULL.
        unsafe {
            assert_eq!(ibv_wr_rdma_write(&mut qp, 7, 0x1000), 0);
            assert_eq!(qp.wr_id, 0x1007);
            assert_eq!(ibv_wr_send(&mut qp), libc::EOPNOTSUPP);
            assert_eq!(ibv_wr_complete(&mut qp), libc::EOPNOTSUPP);
        }
    }
}
