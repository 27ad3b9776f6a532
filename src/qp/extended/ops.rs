//! The members of an `ibv_qp_ex` that posting calls, read once when the QP is created.

use std::ffi::{c_int, c_void};

use rdma_verbs_sys as sys;

/// A member of `ibv_qp_ex` taking the QP alone.
type QpFn<R = ()> = unsafe extern "C" fn(*mut sys::ibv_qp_ex) -> R;
/// A builder of an RDMA operation: the rkey and remote address.
type RdmaFn = unsafe extern "C" fn(*mut sys::ibv_qp_ex, u32, u64);
/// A builder taking one 32-bit value: immediate data or an rkey to invalidate.
type WordFn = unsafe extern "C" fn(*mut sys::ibv_qp_ex, u32);

/// The members a batch calls. Providers set them when they create the QP and never change
/// them; those every batch needs are required (a QP whose provider left one NULL posts
/// through `ibv_post_send`, or is refused), the rest are set only for the operations (and,
/// `set_ud_addr`, the QP type) the provider builds.
pub(super) struct QpOps {
    pub(super) start: QpFn,
    pub(super) complete: QpFn<c_int>,
    pub(super) abort: QpFn,
    pub(super) set_sge: unsafe extern "C" fn(*mut sys::ibv_qp_ex, u32, u64, u32),
    pub(super) set_sge_list: unsafe extern "C" fn(*mut sys::ibv_qp_ex, usize, *const sys::ibv_sge),
    pub(super) set_inline_data: unsafe extern "C" fn(*mut sys::ibv_qp_ex, *mut c_void, usize),
    /// Required on a UD QP.
    pub(super) set_ud_addr:
        Option<unsafe extern "C" fn(*mut sys::ibv_qp_ex, *mut sys::ibv_ah, u32, u32)>,
    pub(super) set_inline_data_list:
        Option<unsafe extern "C" fn(*mut sys::ibv_qp_ex, usize, *const sys::ibv_data_buf)>,
    pub(super) send: Option<QpFn>,
    pub(super) send_imm: Option<WordFn>,
    pub(super) send_inv: Option<WordFn>,
    pub(super) rdma_write: Option<RdmaFn>,
    pub(super) rdma_write_imm: Option<unsafe extern "C" fn(*mut sys::ibv_qp_ex, u32, u64, u32)>,
    pub(super) rdma_read: Option<RdmaFn>,
    pub(super) atomic_cmp_swp:
        Option<unsafe extern "C" fn(*mut sys::ibv_qp_ex, u32, u64, u64, u64)>,
    pub(super) atomic_fetch_add: Option<unsafe extern "C" fn(*mut sys::ibv_qp_ex, u32, u64, u64)>,
    pub(super) local_inv: Option<WordFn>,
    pub(super) bind_mw: bool,
}

impl QpOps {
    /// The members of `q` (a QP of type `qp_type`), or the name of the first required one
    /// the provider left NULL.
    pub(super) fn of(q: &sys::ibv_qp_ex, qp_type: sys::ibv_qp_type) -> Result<QpOps, &'static str> {
        // A member every batch needs, or the error naming it: "verb (struct.member)".
        macro_rules! member {
            ($field:ident, $verb:literal) => {
                q.$field.ok_or(concat!($verb, " (ibv_qp_ex.", stringify!($field), ")"))?
            };
        }
        Ok(QpOps {
            start: member!(wr_start, "ibv_wr_start"),
            complete: member!(wr_complete, "ibv_wr_complete"),
            abort: member!(wr_abort, "ibv_wr_abort"),
            set_sge: member!(wr_set_sge, "ibv_wr_set_sge"),
            set_sge_list: member!(wr_set_sge_list, "ibv_wr_set_sge_list"),
            set_inline_data: member!(wr_set_inline_data, "ibv_wr_set_inline_data"),
            set_ud_addr: match (qp_type, q.wr_set_ud_addr) {
                (sys::IBV_QPT_UD, None) => {
                    return Err("ibv_wr_set_ud_addr (ibv_qp_ex.wr_set_ud_addr)")
                }
                (_, member) => member,
            },
            set_inline_data_list: q.wr_set_inline_data_list,
            send: q.wr_send,
            send_imm: q.wr_send_imm,
            send_inv: q.wr_send_inv,
            rdma_write: q.wr_rdma_write,
            rdma_write_imm: q.wr_rdma_write_imm,
            rdma_read: q.wr_rdma_read,
            atomic_cmp_swp: q.wr_atomic_cmp_swp,
            atomic_fetch_add: q.wr_atomic_fetch_add,
            local_inv: q.wr_local_inv,
            bind_mw: q.wr_bind_mw.is_some(),
        })
    }

    /// Whether the provider set the builder of `opcode`.
    pub(super) fn builds(&self, opcode: sys::ibv_wr_opcode) -> bool {
        match opcode {
            sys::IBV_WR_SEND => self.send.is_some(),
            sys::IBV_WR_SEND_WITH_IMM => self.send_imm.is_some(),
            sys::IBV_WR_SEND_WITH_INV => self.send_inv.is_some(),
            sys::IBV_WR_RDMA_WRITE => self.rdma_write.is_some(),
            sys::IBV_WR_RDMA_WRITE_WITH_IMM => self.rdma_write_imm.is_some(),
            sys::IBV_WR_RDMA_READ => self.rdma_read.is_some(),
            sys::IBV_WR_ATOMIC_CMP_AND_SWP => self.atomic_cmp_swp.is_some(),
            sys::IBV_WR_ATOMIC_FETCH_AND_ADD => self.atomic_fetch_add.is_some(),
            sys::IBV_WR_LOCAL_INV => self.local_inv.is_some(),
            sys::IBV_WR_BIND_MW => self.bind_mw,
            _ => false,
        }
    }
}

/// An optional member that a WR fitting the QP's slack needs: the slack lets a WR through
/// only when the builder of its class and the setters of its data and address were set
/// when it was worked out ([`QpOps::builds`],
/// [`send_slack`](crate::qp::post::send_slack)), and the members never change.
///
/// # Safety
///
/// `member` is set: the member of a WR that fits the slack of this QP.
#[inline(always)]
pub(super) unsafe fn fitting<F>(member: Option<F>) -> F {
    // SAFETY: the caller's: the slack of the QP admitted the WR, so the member is set.
    unsafe { member.unwrap_unchecked() }
}
