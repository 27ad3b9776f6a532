//! Run-time QP states and the validated `modify_raw` escape hatch.

use bitflags::bitflags;
use rdma_verbs_sys as sys;

use crate::c_enum::c_enum;
use crate::error::{Error, InvalidInputKind, Result};

c_enum! {
    /// A QP state as the device reports it (`enum ibv_qp_state`), from
    /// [`QueuePair::query_state`](crate::QueuePair::query_state).
    pub struct QueuePairState(u32) {
        /// RESET.
        RESET = sys::IBV_QPS_RESET => "RESET",
        /// INIT.
        INIT = sys::IBV_QPS_INIT => "INIT",
        /// Ready To Receive.
        RTR = sys::IBV_QPS_RTR => "RTR",
        /// Ready To Send.
        RTS = sys::IBV_QPS_RTS => "RTS",
        /// Send Queue Drained.
        SQD = sys::IBV_QPS_SQD => "SQD",
        /// Send Queue Error (UC, UD).
        SQE = sys::IBV_QPS_SQE => "SQE",
        /// Error: outstanding WRs complete flushed.
        ERR = sys::IBV_QPS_ERR => "ERROR",
        /// Unknown.
        UNKNOWN = sys::IBV_QPS_UNKNOWN => "UNKNOWN",
    }
}

bitflags! {
    /// Which fields of an `ibv_qp_attr` a modify or query uses (`enum ibv_qp_attr_mask`),
    /// `ibv_modify_qp(3)`.
    #[repr(transparent)]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct QpAttrMask: u32 {
        /// `IBV_QP_STATE`
        const STATE = sys::IBV_QP_STATE;
        /// `IBV_QP_CUR_STATE`
        const CUR_STATE = sys::IBV_QP_CUR_STATE;
        /// `IBV_QP_EN_SQD_ASYNC_NOTIFY`
        const EN_SQD_ASYNC_NOTIFY = sys::IBV_QP_EN_SQD_ASYNC_NOTIFY;
        /// `IBV_QP_ACCESS_FLAGS`
        const ACCESS_FLAGS = sys::IBV_QP_ACCESS_FLAGS;
        /// `IBV_QP_PKEY_INDEX`
        const PKEY_INDEX = sys::IBV_QP_PKEY_INDEX;
        /// `IBV_QP_PORT`
        const PORT = sys::IBV_QP_PORT;
        /// `IBV_QP_QKEY`
        const QKEY = sys::IBV_QP_QKEY;
        /// `IBV_QP_AV`
        const AV = sys::IBV_QP_AV;
        /// `IBV_QP_PATH_MTU`
        const PATH_MTU = sys::IBV_QP_PATH_MTU;
        /// `IBV_QP_TIMEOUT`
        const TIMEOUT = sys::IBV_QP_TIMEOUT;
        /// `IBV_QP_RETRY_CNT`
        const RETRY_CNT = sys::IBV_QP_RETRY_CNT;
        /// `IBV_QP_RNR_RETRY`
        const RNR_RETRY = sys::IBV_QP_RNR_RETRY;
        /// `IBV_QP_RQ_PSN`
        const RQ_PSN = sys::IBV_QP_RQ_PSN;
        /// `IBV_QP_MAX_QP_RD_ATOMIC`
        const MAX_QP_RD_ATOMIC = sys::IBV_QP_MAX_QP_RD_ATOMIC;
        /// `IBV_QP_ALT_PATH`
        const ALT_PATH = sys::IBV_QP_ALT_PATH;
        /// `IBV_QP_MIN_RNR_TIMER`
        const MIN_RNR_TIMER = sys::IBV_QP_MIN_RNR_TIMER;
        /// `IBV_QP_SQ_PSN`
        const SQ_PSN = sys::IBV_QP_SQ_PSN;
        /// `IBV_QP_MAX_DEST_RD_ATOMIC`
        const MAX_DEST_RD_ATOMIC = sys::IBV_QP_MAX_DEST_RD_ATOMIC;
        /// `IBV_QP_PATH_MIG_STATE`
        const PATH_MIG_STATE = sys::IBV_QP_PATH_MIG_STATE;
        /// `IBV_QP_CAP`
        const CAP = sys::IBV_QP_CAP;
        /// `IBV_QP_DEST_QPN`
        const DEST_QPN = sys::IBV_QP_DEST_QPN;
        /// `IBV_QP_RATE_LIMIT`
        const RATE_LIMIT = sys::IBV_QP_RATE_LIMIT;
    }
}

/// The attributes a transition requires and those it may also take, for a QP of type
/// `qp_type` (the InfiniBand specification's QP state table, as the kernel's
/// `ib_modify_qp_is_ok` applies it). `None` when that type cannot make the transition.
pub(crate) fn transition_masks(
    qp_type: sys::ibv_qp_type,
    from: QueuePairState,
    to: QueuePairState,
) -> Option<(QpAttrMask, QpAttrMask)> {
    use QpAttrMask as M;
    use QueuePairState as S;
    // A `QueuePair` of `IBV_QPT_DRIVER` is EFA's SRD (feature `efa`), which transitions as UD
    // does (DC QPs are types of their own, not checked here).
    let rc = qp_type == sys::IBV_QPT_RC;
    let ud = qp_type == sys::IBV_QPT_UD || qp_type == sys::IBV_QPT_DRIVER;
    // Each half of XRC is one side of RC: the target responds (its RTR takes RC's responder
    // attributes, its RTS only a timeout), the initiator requests (its RTS is RC's).
    let (xrc_send, xrc_recv) = (qp_type == sys::IBV_QPT_XRC_SEND, qp_type == sys::IBV_QPT_XRC_RECV);
    let none = M::empty();
    // UD QPs take a Q_Key where connected ones take access flags and paths.
    let (init, path) = if ud {
        (M::PKEY_INDEX | M::PORT | M::QKEY, M::QKEY)
    } else {
        (
            M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS,
            M::ACCESS_FLAGS | M::ALT_PATH | M::PATH_MIG_STATE,
        )
    };
    let rnr = if rc { M::MIN_RNR_TIMER } else { none };
    Some(match (from, to) {
        (_, S::RESET) | (_, S::ERR) => (none, none),
        (S::RESET, S::INIT) => (init, none),
        (S::INIT, S::INIT) => (none, init),
        (S::INIT, S::RTR) if ud => (none, M::PKEY_INDEX | M::QKEY),
        (S::INIT, S::RTR) => {
            let required = M::AV | M::PATH_MTU | M::DEST_QPN | M::RQ_PSN;
            let rc_only =
                if rc || xrc_recv { M::MAX_DEST_RD_ATOMIC | M::MIN_RNR_TIMER } else { none };
            (required | rc_only, M::ALT_PATH | M::ACCESS_FLAGS | M::PKEY_INDEX)
        }
        (S::RTR, S::RTS) => {
            let rc_only = if rc || xrc_send {
                M::MAX_QP_RD_ATOMIC | M::RETRY_CNT | M::RNR_RETRY | M::TIMEOUT
            } else if xrc_recv {
                M::TIMEOUT
            } else {
                none
            };
            (M::SQ_PSN | rc_only, M::CUR_STATE | path | rnr)
        }
        (S::RTS, S::RTS) | (S::SQD, S::RTS) => (none, M::CUR_STATE | path | rnr),
        (S::SQE, S::RTS) if !rc => {
            (none, M::CUR_STATE | if ud { M::QKEY } else { M::ACCESS_FLAGS })
        }
        (S::RTS, S::SQD) => (none, M::EN_SQD_ASYNC_NOTIFY),
        _ => return None,
    })
}

/// Checks `mask` (without `STATE`) for the transition `from → to` of a `name` QP.
pub(crate) fn check_mask(
    qp_type: sys::ibv_qp_type,
    name: &str,
    from: QueuePairState,
    to: QueuePairState,
    mask: QpAttrMask,
) -> Result<()> {
    let (required, optional) = transition_masks(qp_type, from, to).ok_or_else(|| {
        Error::invalid(
            InvalidInputKind::Transition,
            format!("{name} QPs cannot go from {from} to {to}"),
        )
    })?;
    let mask = mask - QpAttrMask::STATE;
    let missing = required - mask;
    let extra = mask - required - optional;
    if missing.is_empty() && extra.is_empty() {
        return Ok(());
    }
    let mut why = Vec::new();
    if !missing.is_empty() {
        why.push(format!("missing attribute mask bits {}", names(missing)));
    }
    if !extra.is_empty() {
        why.push(format!("bits not allowed in this transition: {}", names(extra)));
    }
    Err(Error::invalid(
        InvalidInputKind::Transition,
        format!("modify_raw {from}→{to} ({name} QP): {}", why.join("; ")),
    ))
}

fn names(mask: QpAttrMask) -> String {
    mask.iter_names().map(|(n, _)| n).collect::<Vec<_>>().join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use QpAttrMask as M;
    use QueuePairState as S;

    fn check_rc_mask(from: S, to: S, mask: M) -> Result<()> {
        check_mask(sys::IBV_QPT_RC, "RC", from, to, mask)
    }

    #[test]
    fn the_typed_transitions_pass_the_table() {
        use crate::qp::kind::{QpType, Rc, Uc, Ud, XrcRecv, XrcSend};
        fn typed<T: QpType>(init: M) {
            let check = |from, to, mask| check_mask(T::RAW, T::NAME, from, to, mask);
            assert!(check(S::RESET, S::INIT, init | M::STATE).is_ok(), "{} INIT", T::NAME);
            assert!(check(S::INIT, S::RTR, T::RTR_MASK).is_ok(), "{} RTR", T::NAME);
            assert!(check(S::RTR, S::RTS, T::RTS_MASK).is_ok(), "{} RTS", T::NAME);
            assert!(check(S::RTS, S::ERR, M::STATE).is_ok(), "{} ERR", T::NAME);
        }
        typed::<Rc>(M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
        typed::<Uc>(M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
        typed::<Ud>(M::PKEY_INDEX | M::PORT | M::QKEY);
        typed::<XrcSend>(M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
        typed::<XrcRecv>(M::PKEY_INDEX | M::PORT | M::ACCESS_FLAGS);
        assert!(check_mask(sys::IBV_QPT_UC, "UC", S::RTR, S::RTS, M::SQ_PSN | M::TIMEOUT).is_err());
    }

    #[test]
    fn errors_name_missing_and_extra_bits() {
        let e =
            check_rc_mask(S::RTR, S::RTS, M::TIMEOUT | M::RETRY_CNT | M::RNR_RETRY | M::PATH_MTU)
                .unwrap_err()
                .to_string();
        assert_eq!(
            e,
            "modify_raw RTR→RTS (RC QP): missing attribute mask bits MAX_QP_RD_ATOMIC | SQ_PSN; \
             bits not allowed in this transition: PATH_MTU"
        );
        let e = check_rc_mask(S::INIT, S::RTS, M::empty()).unwrap_err().to_string();
        assert_eq!(e, "RC QPs cannot go from INIT to RTS");
    }
}
