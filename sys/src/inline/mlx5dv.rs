//! The `static inline` DC addressing verbs of `mlx5dv.h`: `mlx5dv_wr_set_dc_addr(3)` and
//! `mlx5dv_wr_set_dc_addr_stream`. Like the C inlines they call a function pointer of the
//! provider's `mlx5dv_qp_ex`; unlike them, a NULL pointer gives `EOPNOTSUPP`.

use std::ffi::c_int;

use crate::bindings::*;

/// `mlx5dv_wr_set_dc_addr(3)`: the destination of the DCI work request being built — the
/// address handle of the target's port, its DCT number and its DC access key.
///
/// Returns 0, or `EOPNOTSUPP` when the member is NULL (the QP is not a DCI).
///
/// # Safety
///
/// `mqp` must be the `mlx5dv_qp_ex` of a live DCI (from `mlx5dv_qp_ex_from_ibv_qp_ex` on a QP
/// libmlx5 created), called between `ibv_wr_start` and `ibv_wr_complete` after the
/// operation builder, by the thread that opened the batch; `ah` a live AH of the DCI's PD.
#[inline]
pub unsafe fn mlx5dv_wr_set_dc_addr(
    mqp: *mut mlx5dv_qp_ex,
    ah: *mut ibv_ah,
    remote_dctn: u32,
    remote_dc_key: u64,
) -> c_int {
    // SAFETY: the caller guarantees a live mlx5dv_qp_ex; a plain field read.
    match unsafe { (*mqp).wr_set_dc_addr } {
        Some(set) => {
            // SAFETY: the provider's member, called as `mlx5dv_wr_set_dc_addr(3)` documents.
            unsafe { set(mqp, ah, remote_dctn, remote_dc_key) };
            0
        }
        None => libc::EOPNOTSUPP,
    }
}

/// `mlx5dv_wr_set_dc_addr_stream`: as [`mlx5dv_wr_set_dc_addr`], on DCI stream `stream_id`.
///
/// Returns 0, or `EOPNOTSUPP` when the member is NULL.
///
/// # Safety
///
/// As [`mlx5dv_wr_set_dc_addr`], and the DCI must have been created with DCI streams
/// (`MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS`, which only a libmlx5 of rdma-core v37+ accepts):
/// the member lies beyond the `mlx5dv_qp_ex` of older providers.
#[inline]
pub unsafe fn mlx5dv_wr_set_dc_addr_stream(
    mqp: *mut mlx5dv_qp_ex,
    ah: *mut ibv_ah,
    remote_dctn: u32,
    remote_dc_key: u64,
    stream_id: u16,
) -> c_int {
    // SAFETY: the caller guarantees a live mlx5dv_qp_ex of a v37+ provider.
    match unsafe { (*mqp).wr_set_dc_addr_stream } {
        Some(set) => {
            // SAFETY: the provider's member, called as the header documents.
            unsafe { set(mqp, ah, remote_dctn, remote_dc_key, stream_id) };
            0
        }
        None => libc::EOPNOTSUPP,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    unsafe extern "C" fn record(mqp: *mut mlx5dv_qp_ex, _ah: *mut ibv_ah, dctn: u32, key: u64) {
        // SAFETY: the test passes its own live struct.
        unsafe { (*mqp).comp_mask = key + u64::from(dctn) };
    }

    #[test]
    fn set_dc_addr_calls_the_member_and_a_null_one_is_eopnotsupp() {
        // SAFETY: an all-zero mlx5dv_qp_ex is valid: every member NULL.
        let mut mqp: mlx5dv_qp_ex = unsafe { std::mem::zeroed() };
        // SAFETY: the members read are this struct's, NULL or set below.
        unsafe {
            assert_eq!(
                mlx5dv_wr_set_dc_addr(&mut mqp, std::ptr::null_mut(), 1, 2),
                libc::EOPNOTSUPP
            );
            mqp.wr_set_dc_addr = Some(record);
            assert_eq!(mlx5dv_wr_set_dc_addr(&mut mqp, std::ptr::null_mut(), 0x12, 0x100), 0);
            assert_eq!(
                mlx5dv_wr_set_dc_addr_stream(&mut mqp, std::ptr::null_mut(), 1, 2, 3),
                libc::EOPNOTSUPP
            );
        }
        assert_eq!(mqp.comp_mask, 0x112);
    }
}
