//! Work completions.
#![allow(unsafe_code)] // reading the immediate-data union of ibv_wc

use rdma_verbs_sys as sys;

use crate::c_enum::c_enum;
use crate::endpoint::Qpn;
use crate::wr::id::Shown;

c_enum! {
    /// How a work request ended (`enum ibv_wc_status`, `ibv_poll_cq(3)`).
    pub struct WcStatus(u32) {
        /// Completed successfully.
        SUCCESS = sys::IBV_WC_SUCCESS => "success",
        /// Local length error: a receive buffer too small, or a send too long.
        LOC_LEN_ERR = sys::IBV_WC_LOC_LEN_ERR => "local length error",
        /// Local QP operation error.
        LOC_QP_OP_ERR = sys::IBV_WC_LOC_QP_OP_ERR => "local QP operation error",
        /// Local EE context operation error.
        LOC_EEC_OP_ERR = sys::IBV_WC_LOC_EEC_OP_ERR => "local EE context operation error",
        /// Local protection error: the SGE's lkey or range is wrong.
        LOC_PROT_ERR = sys::IBV_WC_LOC_PROT_ERR => "local protection error",
        /// Flushed: the QP was in the error state.
        WR_FLUSH_ERR = sys::IBV_WC_WR_FLUSH_ERR => "work request flushed",
        /// Memory window bind error.
        MW_BIND_ERR = sys::IBV_WC_MW_BIND_ERR => "memory window bind error",
        /// Bad response from the responder.
        BAD_RESP_ERR = sys::IBV_WC_BAD_RESP_ERR => "bad response",
        /// Local access error.
        LOC_ACCESS_ERR = sys::IBV_WC_LOC_ACCESS_ERR => "local access error",
        /// Remote invalid request: e.g. an operation the remote QP does not allow (see
        /// [`WcStatus::usual_cause`]).
        REM_INV_REQ_ERR = sys::IBV_WC_REM_INV_REQ_ERR => "remote invalid request",
        /// Remote access error: wrong rkey, range or rights (see [`WcStatus::usual_cause`]).
        REM_ACCESS_ERR = sys::IBV_WC_REM_ACCESS_ERR => "remote access error",
        /// Remote operation error.
        REM_OP_ERR = sys::IBV_WC_REM_OP_ERR => "remote operation error",
        /// Transport retries exceeded: the peer does not answer.
        RETRY_EXC_ERR = sys::IBV_WC_RETRY_EXC_ERR => "transport retry counter exceeded",
        /// Receiver-not-ready retries exceeded: the peer posted no receive in time.
        RNR_RETRY_EXC_ERR = sys::IBV_WC_RNR_RETRY_EXC_ERR => "RNR retry counter exceeded",
        /// Local RDD violation.
        LOC_RDD_VIOL_ERR = sys::IBV_WC_LOC_RDD_VIOL_ERR => "local RDD violation",
        /// Remote invalid RD request.
        REM_INV_RD_REQ_ERR = sys::IBV_WC_REM_INV_RD_REQ_ERR => "remote invalid RD request",
        /// Remote aborted.
        REM_ABORT_ERR = sys::IBV_WC_REM_ABORT_ERR => "remote aborted",
        /// Invalid EE context number.
        INV_EECN_ERR = sys::IBV_WC_INV_EECN_ERR => "invalid EE context number",
        /// Invalid EE context state.
        INV_EEC_STATE_ERR = sys::IBV_WC_INV_EEC_STATE_ERR => "invalid EE context state",
        /// Fatal error.
        FATAL_ERR = sys::IBV_WC_FATAL_ERR => "fatal error",
        /// Response timeout.
        RESP_TIMEOUT_ERR = sys::IBV_WC_RESP_TIMEOUT_ERR => "response timeout",
        /// General error.
        GENERAL_ERR = sys::IBV_WC_GENERAL_ERR => "general error",
    }
}

impl WcStatus {
    /// What usually causes this status, for the remote-access and retry statuses whose cause
    /// is usually one setting; `None` for the others.
    ///
    /// - [`WcStatus::REM_INV_REQ_ERR`]: the target QP's INIT attributes
    ///   ([`ToInitAttr::access`](crate::ToInitAttr::access)) lack `REMOTE_WRITE`,
    ///   `REMOTE_READ` or `REMOTE_ATOMIC` for an RDMA WRITE, READ or atomic, or a SEND is
    ///   longer than the receive buffer posted for it;
    /// - [`WcStatus::REM_ACCESS_ERR`]: the rkey or remote address is wrong, the remote range
    ///   is outside the peer's region, or the region was registered without that remote
    ///   access flag;
    /// - [`WcStatus::RNR_RETRY_EXC_ERR`]: the peer had no receive posted for a SEND (or an
    ///   RDMA WRITE with immediate) within the receiver-not-ready budget, the peer's
    ///   [`ToRtrAttr::min_rnr_timer`](crate::ToRtrAttr::min_rnr_timer) times this QP's
    ///   [`ToRtsAttr::rnr_retry`](crate::ToRtsAttr::rnr_retry);
    /// - [`WcStatus::RETRY_EXC_ERR`]: the peer never acknowledged: it is gone, its QP is not in
    ///   RTR or RTS, or the path (GID index, LID, MTU, the peer's QPN) is wrong.
    #[must_use]
    pub fn usual_cause(self) -> Option<&'static str> {
        Some(match self {
            WcStatus::REM_INV_REQ_ERR => {
                "the target QP's INIT access flags (ToInitAttr::access) lack REMOTE_WRITE / \
                 REMOTE_READ / REMOTE_ATOMIC for this operation, or a SEND is longer than the \
                 receive buffer posted for it"
            }
            WcStatus::REM_ACCESS_ERR => {
                "the rkey or remote address is wrong, the range is outside the peer's region, \
                 or the region was registered without the remote access flag (REMOTE_WRITE, \
                 REMOTE_READ, REMOTE_ATOMIC) the operation needs"
            }
            WcStatus::RNR_RETRY_EXC_ERR => {
                "the peer had no receive posted for this SEND within the receiver-not-ready \
                 budget (the peer's ToRtrAttr::min_rnr_timer times ToRtsAttr::rnr_retry): post \
                 receives before the peer sends, or keep more posted"
            }
            WcStatus::RETRY_EXC_ERR => {
                "the peer never acknowledged: it is gone, its QP is not in RTR or RTS, or the \
                 path is wrong (GID index, LID, MTU, or the peer's QP number)"
            }
            _ => return None,
        })
    }
}

c_enum! {
    /// The operation a completion reports (`enum ibv_wc_opcode`).
    pub struct WcOpcode(u32) {
        /// A SEND (with or without immediate) completed.
        SEND = sys::IBV_WC_SEND => "SEND",
        /// An RDMA WRITE completed.
        RDMA_WRITE = sys::IBV_WC_RDMA_WRITE => "RDMA_WRITE",
        /// An RDMA READ completed.
        RDMA_READ = sys::IBV_WC_RDMA_READ => "RDMA_READ",
        /// A compare-and-swap completed.
        COMP_SWAP = sys::IBV_WC_COMP_SWAP => "COMP_SWAP",
        /// A fetch-and-add completed.
        FETCH_ADD = sys::IBV_WC_FETCH_ADD => "FETCH_ADD",
        /// A memory window bind completed.
        BIND_MW = sys::IBV_WC_BIND_MW => "BIND_MW",
        /// A local invalidate completed.
        LOCAL_INV = sys::IBV_WC_LOCAL_INV => "LOCAL_INV",
        /// A receive completed.
        RECV = sys::IBV_WC_RECV => "RECV",
        /// A receive consumed by an RDMA WRITE with immediate.
        RECV_RDMA_WITH_IMM = sys::IBV_WC_RECV_RDMA_WITH_IMM => "RECV_RDMA_WITH_IMM",
    }
}

/// One completion (`struct ibv_wc`), filled by [`CompletionQueue::poll`](crate::CompletionQueue::poll).
///
/// On an error status only [`wr_id`](Self::wr_id), [`status`](Self::status),
/// [`vendor_err`](Self::vendor_err) and [`qp_num`](Self::qp_num) are meaningful.
///
/// Not `Copy` or `Clone`: the buffer tier's [`BufferPool::complete`](crate::BufferPool::complete)
/// consumes a completion, and a copy could hand the same buffer back twice. Storage for
/// polling: `let mut wcs: [WorkCompletion; 16] = Default::default();`, or
/// `[WorkCompletion::EMPTY; N]` for any `N`.
#[derive(Default)]
#[repr(transparent)]
pub struct WorkCompletion(sys::ibv_wc);

impl WorkCompletion {
    /// An empty completion, for filling poll storage.
    // SAFETY: ibv_wc is integers and a union of integers: all zeroes is a valid value.
    pub const EMPTY: WorkCompletion = WorkCompletion(unsafe { std::mem::zeroed() });

    /// The `wr_id` of the work request that ended.
    #[inline]
    pub fn wr_id(&self) -> u64 {
        self.0.wr_id
    }

    /// How it ended.
    #[inline]
    pub fn status(&self) -> WcStatus {
        WcStatus(self.0.status)
    }

    /// Whether it succeeded.
    #[inline]
    pub fn is_success(&self) -> bool {
        self.status() == WcStatus::SUCCESS
    }

    /// The operation (not meaningful on error completions).
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        WcOpcode(self.0.opcode)
    }

    /// Bytes received (receives and RDMA READ).
    #[inline]
    pub fn byte_len(&self) -> u32 {
        self.0.byte_len
    }

    /// The immediate data, in host order, when this is a receive completion whose flags say
    /// it carries one (`ibv_poll_cq(3)`: the flag is meaningful for receives only; some
    /// providers also set it on the sender's completion).
    #[inline]
    pub fn imm_data(&self) -> Option<u32> {
        let receive = self.0.opcode & sys::IBV_WC_RECV != 0;
        (receive && self.0.wc_flags & sys::IBV_WC_WITH_IMM != 0).then(|| {
            // SAFETY: WITH_IMM says the union holds imm_data (big-endian on the wire).
            u32::from_be(unsafe { self.0.__bindgen_anon_1.imm_data })
        })
    }

    /// The local QP the work request belonged to.
    #[inline]
    pub fn qp_num(&self) -> Qpn {
        Qpn::from_low_bits(self.0.qp_num)
    }

    /// The provider's own error code, for error completions.
    #[inline]
    pub fn vendor_err(&self) -> u32 {
        self.0.vendor_err
    }

    /// A completion read field by field from an extended CQ.
    #[inline]
    pub(crate) fn from_raw(raw: sys::ibv_wc) -> Self {
        WorkCompletion(raw)
    }

    /// Clears the `wr_id` once the buffer tier has taken this completion, so it cannot serve
    /// twice.
    pub(crate) fn consume_wr_id(&mut self) {
        self.0.wr_id = 0;
    }

    /// The raw completion.
    pub fn as_raw(&self) -> &sys::ibv_wc {
        &self.0
    }
}

/// For messages: the work request — its `wr_id`, or the buffer, pool and flight a buffer-tier
/// `wr_id` names — and how it ended, e.g. `buffer 3 of pool 1, flight 7: SEND: success` or
/// `wr_id 0x2a: transport retry counter exceeded (vendor error 0x81)`. (A completion
/// [`BufferPool::complete`](crate::BufferPool::complete) took shows `wr_id 0x0`: it consumed
/// the `wr_id`.)
impl std::fmt::Display for WorkCompletion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let wr = Shown(self.wr_id());
        if self.is_success() {
            write!(f, "{wr}: {}: {}", self.opcode(), self.status())
        } else {
            write!(f, "{wr}: {} (vendor error {:#x})", self.status(), self.vendor_err())
        }
    }
}

impl std::fmt::Debug for WorkCompletion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkCompletion")
            .field("wr_id", &format_args!("{}", Shown(self.wr_id())))
            .field("status", &self.status())
            .field("opcode", &self.opcode())
            .field("byte_len", &self.byte_len())
            .field("imm_data", &self.imm_data())
            .field("qp_num", &self.qp_num())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remote_and_retry_errors_name_their_usual_cause() {
        assert!(WcStatus::REM_INV_REQ_ERR.usual_cause().unwrap().contains("ToInitAttr::access"));
        assert!(WcStatus::REM_ACCESS_ERR.usual_cause().unwrap().contains("rkey"));
        assert!(WcStatus::RNR_RETRY_EXC_ERR.usual_cause().unwrap().contains("rnr_retry"));
        assert!(WcStatus::RETRY_EXC_ERR.usual_cause().unwrap().contains("never acknowledged"));
        assert_eq!(WcStatus::SUCCESS.usual_cause(), None);
    }

    #[test]
    fn unknown_status_is_kept_and_shown() {
        let s = WcStatus(4242);
        assert_eq!(s.name(), None);
        assert_eq!(s.to_string(), "unknown (4242)");
        assert_eq!(WcStatus::RNR_RETRY_EXC_ERR.to_string(), "RNR retry counter exceeded");
    }

    #[test]
    fn shown_with_its_work_request_and_outcome() {
        let mut wc = WorkCompletion::default();
        wc.0.wr_id = 0x2a;
        wc.0.opcode = sys::IBV_WC_RECV;
        assert_eq!(wc.to_string(), "wr_id 0x2a: RECV: success");
        wc.0.wr_id = crate::wr::id::BUFFER_BIT | 1 << 43 | 7 << 16 | 3;
        wc.0.status = sys::IBV_WC_RETRY_EXC_ERR;
        wc.0.vendor_err = 0x81;
        let shown = "buffer 3 of pool 1, flight 7: transport retry counter exceeded (vendor \
                     error 0x81)";
        assert_eq!(wc.to_string(), shown);
        assert!(format!("{wc:?}").contains("wr_id: buffer 3 of pool 1, flight 7,"), "{wc:?}");
    }

    #[test]
    fn imm_data_only_with_the_flag() {
        let mut wc = WorkCompletion::default();
        wc.0.__bindgen_anon_1.imm_data = 0x1234_5678u32.to_be();
        assert_eq!(wc.imm_data(), None);
        wc.0.wc_flags = sys::IBV_WC_WITH_IMM;
        wc.0.opcode = sys::IBV_WC_SEND;
        assert_eq!(wc.imm_data(), None, "not on the sender's completion");
        wc.0.opcode = sys::IBV_WC_RECV;
        assert_eq!(wc.imm_data(), Some(0x1234_5678));
        wc.0.opcode = sys::IBV_WC_RECV_RDMA_WITH_IMM;
        assert_eq!(wc.imm_data(), Some(0x1234_5678));
    }
}
