//! The extended CQ: `ibv_create_cq_ex(3)` and its polling members.
//!
//! An `ibv_cq_ex` is polled in a session: `ibv_start_poll` (which takes the provider's CQ
//! lock and reads the first completion), then `ibv_next_poll` for each further one, then
//! `ibv_end_poll`. The rules of `ibv_create_cq_ex(3)`: when `ibv_start_poll` returns `ENOENT`
//! (empty) or another error, there is no session and `ibv_end_poll` must not be called; after
//! a `ibv_next_poll` error the session is still open and `ibv_end_poll` must be called. Inside
//! a session `wr_id` and `status` are plain fields of the current completion, and the
//! `ibv_wc_read_*` members read the rest: only those whose `IBV_WC_EX_WITH_*` flag the CQ was
//! created with (`wc_flags`), plus opcode, vendor_err and wc_flags, which always are.
//!
//! Providers disagree on the session after `ibv_next_poll` reports `ENOENT`: rxe (rdma-core
//! v44) ends it there (it stores the consumer index and releases the CQ lock), so a following
//! `ibv_end_poll` consumes a slot twice; mlx5 keeps it open until `ibv_end_poll`. A caller that
//! must work on both reads one completion per session.
//!
//! The C inlines call the members blindly; these versions return `EOPNOTSUPP` (or `None` for
//! a read) for a NULL one instead of crashing. Only members present since `ibv_cq_ex` first
//! appeared are wrapped: the trailing `read_completion_wallclock_ns` may lie beyond the struct
//! an older provider allocated.

use std::ffi::c_int;
use std::mem::offset_of;

use crate::bindings::*;

use super::{create_or_unsupported, verbs_ctx_op};

/// `ibv_create_cq_ex(3)`: the `create_cq_ex` op of `verbs_context`.
///
/// Returns the CQ or NULL with `errno` set: `EOPNOTSUPP` when the context has no such op (a
/// provider without it gets libibverbs' stub, which fails with `EOPNOTSUPP` too).
///
/// # Safety
///
/// `ctx` must be a live context; `attr` a valid attribute struct whose channel, when not
/// NULL, is a live channel of `ctx`.
pub unsafe fn ibv_create_cq_ex(
    ctx: *mut ibv_context,
    attr: *mut ibv_cq_init_attr_ex,
) -> *mut ibv_cq_ex {
    // SAFETY: the caller guarantees a live context.
    let op =
        unsafe { verbs_ctx_op(ctx, offset_of!(verbs_context, create_cq_ex), |v| &v.create_cq_ex) };
    // SAFETY: the provider's op (if any), called under the caller's guarantees.
    unsafe { create_or_unsupported(op, ctx, attr) }
}

/// `ibv_cq_ex_to_cq(3)`: the plain CQ an extended one starts with (for `ibv_destroy_cq`,
/// `ibv_req_notify_cq`, QP creation, ...).
pub fn ibv_cq_ex_to_cq(cq: *mut ibv_cq_ex) -> *mut ibv_cq {
    cq.cast()
}

/// `ibv_start_poll`: opens a polling session and reads the first completion.
///
/// Returns 0 (a completion is current), `ENOENT` (none; no session), another errno (no
/// session), or `EOPNOTSUPP` when the member is NULL.
///
/// # Safety
///
/// `cq` must be a live extended CQ with no session open on this thread; `attr` valid.
#[inline]
pub unsafe fn ibv_start_poll(cq: *mut ibv_cq_ex, attr: *mut ibv_poll_cq_attr) -> c_int {
    // SAFETY: the caller guarantees a live extended CQ.
    match unsafe { (*cq).start_poll } {
        // SAFETY: the provider's member, called as `ibv_create_cq_ex(3)` documents.
        Some(start) => unsafe { start(cq, attr) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_next_poll`: moves the session to the next completion.
///
/// Returns 0, `ENOENT` (no more), another errno, or `EOPNOTSUPP` when the member is NULL;
/// the session stays open in every case.
///
/// # Safety
///
/// `cq` must be a live extended CQ inside a session opened by [`ibv_start_poll`] on this
/// thread.
#[inline]
pub unsafe fn ibv_next_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the caller guarantees a live extended CQ.
    match unsafe { (*cq).next_poll } {
        // SAFETY: the provider's member, inside the caller's session.
        Some(next) => unsafe { next(cq) },
        None => libc::EOPNOTSUPP,
    }
}

/// `ibv_end_poll`: closes the session (releasing the provider's CQ lock).
///
/// Returns 0, or `EOPNOTSUPP` when the member is NULL.
///
/// # Safety
///
/// As [`ibv_next_poll`]; the session is over afterwards.
#[inline]
pub unsafe fn ibv_end_poll(cq: *mut ibv_cq_ex) -> c_int {
    // SAFETY: the caller guarantees a live extended CQ.
    match unsafe { (*cq).end_poll } {
        Some(end) => {
            // SAFETY: the provider's member, closing the caller's session.
            unsafe { end(cq) };
            0
        }
        None => libc::EOPNOTSUPP,
    }
}

/// Declares one wrapper per `ibv_cq_ex` read member: `Some(value)`, or `None` without calling
/// anything when the member is NULL.
macro_rules! wc_readers {
    ($( $(#[$doc:meta])* $name:ident => $field:ident -> $ty:ty; )*) => {$(
        $(#[$doc])*
        ///
        /// Returns `None` when the provider left this member NULL.
        ///
        /// # Safety
        ///
        /// `cq` must be a live extended CQ inside a polling session on this thread, on a
        /// current completion, created with the `IBV_WC_EX_WITH_*` flag of this field when it
        /// has one.
        #[inline]
        pub unsafe fn $name(cq: *mut ibv_cq_ex) -> Option<$ty> {
            // SAFETY: the caller guarantees a live extended CQ.
            let read = unsafe { (*cq).$field }?;
            // SAFETY: the provider's member, on the caller's current completion.
            Some(unsafe { read(cq) })
        }
    )*};
}

wc_readers! {
    /// `ibv_wc_read_opcode`: the operation of the current completion.
    ibv_wc_read_opcode => read_opcode -> ibv_wc_opcode;
    /// `ibv_wc_read_vendor_err`: the provider's error code.
    ibv_wc_read_vendor_err => read_vendor_err -> u32;
    /// `ibv_wc_read_byte_len` (`IBV_WC_EX_WITH_BYTE_LEN`): bytes received.
    ibv_wc_read_byte_len => read_byte_len -> u32;
    /// `ibv_wc_read_imm_data` (`IBV_WC_EX_WITH_IMM`): the immediate data, big-endian, when
    /// `wc_flags` holds `IBV_WC_WITH_IMM` (or the invalidated rkey, with `IBV_WC_WITH_INV`).
    ibv_wc_read_imm_data => read_imm_data -> __be32;
    /// `ibv_wc_read_qp_num` (`IBV_WC_EX_WITH_QP_NUM`): the local QP number.
    ibv_wc_read_qp_num => read_qp_num -> u32;
    /// `ibv_wc_read_src_qp` (`IBV_WC_EX_WITH_SRC_QP`): the remote QP number (UD).
    ibv_wc_read_src_qp => read_src_qp -> u32;
    /// `ibv_wc_read_wc_flags`: the completion's `IBV_WC_*` flags.
    ibv_wc_read_wc_flags => read_wc_flags -> u32;
    /// `ibv_wc_read_slid` (`IBV_WC_EX_WITH_SLID`): the source LID.
    ibv_wc_read_slid => read_slid -> u32;
    /// `ibv_wc_read_sl` (`IBV_WC_EX_WITH_SL`): the service level.
    ibv_wc_read_sl => read_sl -> u8;
    /// `ibv_wc_read_dlid_path_bits` (`IBV_WC_EX_WITH_DLID_PATH_BITS`).
    ibv_wc_read_dlid_path_bits => read_dlid_path_bits -> u8;
    /// `ibv_wc_read_completion_ts` (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`): the device clock
    /// at completion, in cycles of `ibv_device_attr_ex.hca_core_clock` (kHz).
    ibv_wc_read_completion_ts => read_completion_ts -> u64;
    /// `ibv_wc_read_cvlan` (`IBV_WC_EX_WITH_CVLAN`).
    ibv_wc_read_cvlan => read_cvlan -> u16;
    /// `ibv_wc_read_flow_tag` (`IBV_WC_EX_WITH_FLOW_TAG`).
    ibv_wc_read_flow_tag => read_flow_tag -> u32;
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn empty(_cq: *mut ibv_cq_ex, _attr: *mut ibv_poll_cq_attr) -> c_int {
        libc::ENOENT
    }

    unsafe extern "C" fn len(_cq: *mut ibv_cq_ex) -> u32 {
        42
    }

    #[test]
    fn members_are_called_and_null_ones_refused() {
        // SAFETY: an all-zero ibv_cq_ex is valid: NULL pointers and NULL (None) members.
        let mut cq: ibv_cq_ex = unsafe { std::mem::zeroed() };
        cq.start_poll = Some(empty);
        cq.read_byte_len = Some(len);
        let mut attr = ibv_poll_cq_attr::default();
        // SAFETY: the members read are this struct's, set above or NULL.
        unsafe {
            assert_eq!(ibv_start_poll(&mut cq, &mut attr), libc::ENOENT);
            assert_eq!(ibv_wc_read_byte_len(&mut cq), Some(42));
            assert_eq!(ibv_wc_read_qp_num(&mut cq), None);
            assert_eq!(ibv_next_poll(&mut cq), libc::EOPNOTSUPP);
            assert_eq!(ibv_end_poll(&mut cq), libc::EOPNOTSUPP);
        }
        assert_eq!(ibv_cq_ex_to_cq(&mut cq).cast::<ibv_cq_ex>(), &raw mut cq);
    }
}
