//! What `ibv_query_qp(3)` reports of a QP: the attributes in effect.
#![allow(unsafe_code)]

use rdma_verbs_sys as sys;

use super::attr::QpCapabilities;
use super::modify::QueuePairState;
use super::retry::{AckTimeout, RetryCount, RnrRetry, RnrTimer};
use super::state::QpState;
use super::{QpType, QueuePair};
use crate::access::AccessFlags;
use crate::endpoint::{Psn, Qpn};
use crate::error::{check_errno, Result};
use crate::port::Mtu;

/// The attributes of a QP in effect, as
/// [`ibv_query_qp(3)`](https://man7.org/linux/man-pages/man3/ibv_query_qp.3.html) reports
/// them, from [`QueuePair::query`]. Fields a transition has not set yet read as the provider
/// reports them (usually 0); the UD-only and connected-only ones are 0 on the other types.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct QpAttributes {
    /// The state the device reports now (`qp_state`).
    pub state: QueuePairState,
    /// The port, from 1 (`port_num`).
    pub port: u8,
    /// The P_Key table index (`pkey_index`).
    pub pkey_index: u16,
    /// The Q_Key (`qkey`, UD).
    pub qkey: u32,
    /// What the peer may do to memory through this QP (`qp_access_flags`, RC and UC).
    pub access: AccessFlags,
    /// The path MTU (`path_mtu`, RC and UC).
    pub path_mtu: Mtu,
    /// The peer's QP number (`dest_qp_num`, RC and UC).
    pub dest_qpn: Qpn,
    /// The first PSN expected from the peer (`rq_psn`).
    pub rq_psn: Psn,
    /// The next send PSN (`sq_psn`).
    pub sq_psn: Psn,
    /// The local ACK timeout, 4.096 µs × 2^n (`timeout`, RC; before RTS the provider's
    /// value, usually the code 0, [`AckTimeout::INFINITE`]).
    pub timeout: AckTimeout,
    /// Transport retries before an error completion (`retry_cnt`, RC).
    pub retry_cnt: RetryCount,
    /// Receiver-not-ready retries (`rnr_retry`, RC).
    pub rnr_retry: RnrRetry,
    /// The RNR NAK timer (`min_rnr_timer`, RC).
    pub min_rnr_timer: RnrTimer,
    /// RDMA READs / atomics this QP may have outstanding (`max_rd_atomic`, RC).
    pub max_rd_atomic: u8,
    /// RDMA READs / atomics the peer may have outstanding against it (`max_dest_rd_atomic`,
    /// RC).
    pub max_dest_rd_atomic: u8,
    /// The work queue sizes the provider allocated (`cap`): at least what was asked, often
    /// more (rxe fits 7 send WRs where 4 were asked), where [`QueuePair::caps`] says what
    /// was asked.
    pub caps: QpCapabilities,
}

impl QpAttributes {
    fn from_raw(a: &sys::ibv_qp_attr) -> Self {
        QpAttributes {
            state: QueuePairState(a.qp_state),
            port: a.port_num,
            pkey_index: a.pkey_index,
            qkey: a.qkey,
            access: AccessFlags::from_bits_retain(a.qp_access_flags),
            path_mtu: Mtu(a.path_mtu),
            dest_qpn: Qpn::from_low_bits(a.dest_qp_num),
            rq_psn: Psn::from_low_bits(a.rq_psn),
            sq_psn: Psn::from_low_bits(a.sq_psn),
            timeout: AckTimeout::from_code(a.timeout),
            retry_cnt: RetryCount::from_code(a.retry_cnt),
            rnr_retry: RnrRetry::from_code(a.rnr_retry),
            min_rnr_timer: RnrTimer::from_code(a.min_rnr_timer),
            max_rd_atomic: a.max_rd_atomic,
            max_dest_rd_atomic: a.max_dest_rd_atomic,
            caps: QpCapabilities::from_raw(&a.cap),
        }
    }
}

/// Every attribute [`QpAttributes`] holds.
const QUERY_MASK: u32 = sys::IBV_QP_STATE
    | sys::IBV_QP_PORT
    | sys::IBV_QP_PKEY_INDEX
    | sys::IBV_QP_QKEY
    | sys::IBV_QP_ACCESS_FLAGS
    | sys::IBV_QP_PATH_MTU
    | sys::IBV_QP_DEST_QPN
    | sys::IBV_QP_RQ_PSN
    | sys::IBV_QP_SQ_PSN
    | sys::IBV_QP_TIMEOUT
    | sys::IBV_QP_RETRY_CNT
    | sys::IBV_QP_RNR_RETRY
    | sys::IBV_QP_MIN_RNR_TIMER
    | sys::IBV_QP_MAX_QP_RD_ATOMIC
    | sys::IBV_QP_MAX_DEST_RD_ATOMIC
    | sys::IBV_QP_CAP;

impl<S: QpState, T: QpType> QueuePair<'_, S, T> {
    /// [`ibv_query_qp(3)`](https://man7.org/linux/man-pages/man3/ibv_query_qp.3.html)—The
    /// attributes in effect: the state the device reports now, what the transitions set
    /// (path MTU, PSNs, timeouts, retry counts, read depths, access), and the capabilities
    /// as the provider set them.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb) from `ibv_query_qp`.
    #[doc(alias = "ibv_query_qp")]
    pub fn query(&self) -> Result<QpAttributes> {
        Ok(QpAttributes::from_raw(&self.query_raw(QUERY_MASK)?))
    }

    /// `ibv_query_qp` of the attributes `mask` names.
    pub(super) fn query_raw(&self, mask: u32) -> Result<sys::ibv_qp_attr> {
        let mut attr = sys::ibv_qp_attr::default();
        let mut init = sys::ibv_qp_init_attr::default();
        // SAFETY: a live QP and writable attribute structs.
        let ret = unsafe {
            (self.pd.context().library().fns.ibv_query_qp)(
                self.as_raw(),
                &mut attr,
                mask as i32,
                &mut init,
            )
        };
        check_errno(ret, "ibv_query_qp")?;
        Ok(attr)
    }
}
