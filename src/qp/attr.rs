//! Attributes for creating a QP and for each state transition.
//!
//! Each transition takes a struct holding exactly what that transition needs, so the
//! `ibv_qp_attr_mask` is computed here, never supplied by the caller. Defaults are
//! ibv_rc_pingpong's, but for the timers and retry counts, which give a peer seconds rather
//! than milliseconds before the connection is given up ([`ToRtsAttr`]).

use rdma_verbs_sys as sys;

use crate::access::AccessFlags;
use crate::ah::AddressVector;
use crate::cq::CompletionQueue;
use crate::endpoint::{Endpoint, Psn, Qpn};
use crate::port::Mtu;
use crate::srq::SharedReceiveQueue;

use super::retry::{AckTimeout, RetryCount, RnrRetry, RnrTimer};
use crate::verbs_path::VerbsPath;

/// Work queue sizes (`struct ibv_qp_cap`). After creation, [`QueuePair::caps`] holds what
/// the provider actually allocated (at least what was asked).
///
/// [`QueuePair::caps`]: crate::QueuePair::caps
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpCapabilities {
    /// Outstanding send WRs.
    pub max_send_wr: u32,
    /// Outstanding receive WRs.
    pub max_recv_wr: u32,
    /// SGEs per send WR.
    pub max_send_sge: u32,
    /// SGEs per receive WR.
    pub max_recv_sge: u32,
    /// Bytes a send may carry inline.
    pub max_inline_data: u32,
}

impl Default for QpCapabilities {
    /// One send WR, 16 receive WRs, one SGE each, no inline data.
    fn default() -> Self {
        QpCapabilities {
            max_send_wr: 1,
            max_recv_wr: 16,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        }
    }
}

impl QpCapabilities {
    pub(crate) fn to_raw(self) -> sys::ibv_qp_cap {
        sys::ibv_qp_cap {
            max_send_wr: self.max_send_wr,
            max_recv_wr: self.max_recv_wr,
            max_send_sge: self.max_send_sge,
            max_recv_sge: self.max_recv_sge,
            max_inline_data: self.max_inline_data,
        }
    }

    pub(crate) fn from_raw(raw: &sys::ibv_qp_cap) -> Self {
        QpCapabilities {
            max_send_wr: raw.max_send_wr,
            max_recv_wr: raw.max_recv_wr,
            max_send_sge: raw.max_send_sge,
            max_recv_sge: raw.max_recv_sge,
            max_inline_data: raw.max_inline_data,
        }
    }
}

/// What a queue pair is created with (`struct ibv_qp_init_attr`, `ibv_create_qp(3)`).
///
/// `'res` is how long the CQs (and the SRQ) are borrowed — the QP's own `'res`; `'srq` is the
/// SRQ's own lifetime parameter (anything when there is none). The two are separate because a
/// [`SharedReceiveQueue`] is invariant in its lifetime (buffers lent to it must outlive it):
/// tying them together would demand a borrow of the SRQ that outlives the SRQ.
///
/// ```no_run
/// # use rdma_verbs::*;
/// # fn f(ctx: &Context) -> Result<()> {
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(64)?;
/// let srq = pd.create_srq(16, 1)?;
/// let attr = QpInitAttr { srq: Some(&srq), ..QpInitAttr::new(&cq) };
/// let a = pd.create_rc_qp(&attr)?;
/// let b = pd.create_rc_qp(&attr)?;
/// # drop((a, b)); Ok(()) }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct QpInitAttr<'res, 'srq> {
    /// The CQ for send completions.
    pub send_cq: &'res CompletionQueue<'res>,
    /// The CQ for receive completions (may be the same).
    pub recv_cq: &'res CompletionQueue<'res>,
    /// Work queue sizes.
    pub cap: QpCapabilities,
    /// Whether every send WR completes (`sq_sig_all`); otherwise only those posted with
    /// [`SendFlags::SIGNALED`](crate::SendFlags::SIGNALED).
    pub sq_sig_all: bool,
    /// A shared receive queue that feeds this QP's receives (its own receive queue is then
    /// unused: `max_recv_wr` is ignored).
    pub srq: Option<&'res SharedReceiveQueue<'srq>>,
    /// `None`: the extended QP (`ibv_create_qp_ex(3)`, sends through `ibv_wr_post(3)`) when
    /// the provider has it, else the legacy one. `Some` forces one (see [`VerbsPath`]).
    pub verbs_path: Option<VerbsPath>,
}

impl<'res> QpInitAttr<'res, '_> {
    /// Both queues on `cq`, default capabilities, selective signaling, no SRQ, the extended
    /// QP when the provider has it.
    #[must_use]
    pub fn new(cq: &'res CompletionQueue<'res>) -> Self {
        QpInitAttr {
            send_cq: cq,
            recv_cq: cq,
            cap: QpCapabilities::default(),
            sq_sig_all: false,
            srq: None,
            verbs_path: None,
        }
    }
}

/// RESET → INIT (`IBV_QP_STATE | PKEY_INDEX | PORT | ACCESS_FLAGS`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToInitAttr {
    /// The port, from 1.
    pub port: u8,
    /// The P_Key table index.
    pub pkey_index: u16,
    /// What the *peer* may do to memory through this QP (remote read/write/atomic).
    pub access: AccessFlags,
}

impl Default for ToInitAttr {
    /// Port 1, P_Key index 0, no remote access.
    fn default() -> Self {
        ToInitAttr { port: 1, pkey_index: 0, access: AccessFlags::empty() }
    }
}

impl ToInitAttr {
    /// The `ibv_qp_attr` of RESET → INIT (RC, UC and DCT).
    pub(crate) fn raw(&self) -> sys::ibv_qp_attr {
        sys::ibv_qp_attr {
            pkey_index: self.pkey_index,
            port_num: self.port,
            qp_access_flags: self.access.bits(),
            ..Default::default()
        }
    }
}

/// RESET → INIT of a UD QP (`IBV_QP_STATE | PKEY_INDEX | PORT | QKEY`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdToInitAttr {
    /// The port, from 1.
    pub port: u8,
    /// The P_Key table index.
    pub pkey_index: u16,
    /// The Q_Key: datagrams are accepted only when they carry it.
    pub qkey: u32,
}

impl Default for UdToInitAttr {
    /// Port 1, P_Key index 0, Q_Key 0x11111111 (ibv_ud_pingpong's and perftest's).
    fn default() -> Self {
        UdToInitAttr { port: 1, pkey_index: 0, qkey: 0x1111_1111 }
    }
}

/// INIT → RTR (`IBV_QP_STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC |
/// MIN_RNR_TIMER`).
///
/// **The receiver-not-ready budget.** When a SEND finds no receive posted here, this QP
/// answers with an RNR NAK carrying `min_rnr_timer`; the peer waits that long, resends, and
/// after its [`ToRtsAttr::rnr_retry`] resends completes the SEND with `RNR_RETRY_EXC_ERR`,
/// which moves its QP to ERROR: the connection is gone. With both sides' defaults, code 31
/// (491.52 ms) here and 6 resends there, this side has 6 × 491.52 ms ≈ 2.9 s to post a
/// receive before the peer gives up (ibv_rc_pingpong's code 12, 0.64 ms, allows 4 ms, which
/// a busy host exceeds). Every NAK costs the peer the whole timer, so a program that lets its
/// receive queue run empty on purpose and wants quick resends sets a shorter timer
/// (`min_rnr_timer: RnrTimer::new(12)?`, shrinking the budget with it), or has the peer
/// resend forever ([`RnrRetry::INFINITE`]); the defaults never wait forever.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToRtrAttr {
    /// The path MTU: at most both ports' active MTU. [`QueuePair::into_rtr`] lowers a larger
    /// one to our port's active MTU, as perftest does ([`QueuePair::query`] shows the value
    /// in effect): providers accept a larger one (rxe does, and then sends packets the link
    /// drops). The peer's port is the caller's to respect: exchange the MTUs, use the smaller.
    ///
    /// [`QueuePair::into_rtr`]: crate::QueuePair::into_rtr
    /// [`QueuePair::query`]: crate::QueuePair::query
    pub path_mtu: Mtu,
    /// The peer's QP number.
    pub dest_qpn: Qpn,
    /// The first PSN expected from the peer (its send PSN).
    pub rq_psn: Psn,
    /// RDMA READs / atomics the peer may have outstanding against us: at most the device's
    /// [`max_qp_rd_atom`](crate::DeviceAttr::max_qp_rd_atom), and with the context's other
    /// QPs at most its [`max_res_rd_atom`](crate::DeviceAttr::max_res_rd_atom).
    pub max_dest_rd_atomic: u8,
    /// The RNR NAK timer the peer is told to wait before resending when we have no receive
    /// posted ([`RnrTimer`]; 31 = 491.52 ms, see the budget above).
    pub min_rnr_timer: RnrTimer,
    /// How to reach the peer.
    pub av: AddressVector,
}

impl ToRtrAttr {
    /// The RTR attributes for connecting to `remote` from `port`, with one outstanding RDMA
    /// READ or atomic (ibv_rc_pingpong's) and RNR timer 31 (491.52 ms: the peer's SENDs wait
    /// ≈ 2.9 s for a receive, see the budget above).
    #[must_use]
    pub fn to_endpoint(remote: &Endpoint, port: u8, sgid_index: Option<u8>, path_mtu: Mtu) -> Self {
        ToRtrAttr {
            path_mtu,
            dest_qpn: remote.qpn,
            rq_psn: remote.psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: RnrTimer::DEFAULT,
            av: AddressVector::to_endpoint(remote, port, sgid_index),
        }
    }
}

/// RTR → RTS (`IBV_QP_STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN | MAX_QP_RD_ATOMIC`).
///
/// **The budgets.** A send the peer does not acknowledge is resent after `timeout` (at least
/// 4.096 µs × 2^n) up to `retry_cnt` times, then completes with `RETRY_EXC_ERR`; a SEND the
/// peer RNR-NAKs (it had no receive posted) is resent after the peer's RNR timer
/// ([`ToRtrAttr::min_rnr_timer`]) up to `rnr_retry` times, then completes with
/// `RNR_RETRY_EXC_ERR`. Either error moves the QP to ERROR. With the defaults of
/// [`ToRtsAttr::new`] (and the peer's [`ToRtrAttr::to_endpoint`]), a peer that stops
/// answering is given up after 7 tries of ≈ 0.54 s (exponent 17), ≈ 3.8 s, and one that
/// posts no receive after 6 resends 491.52 ms apart, ≈ 2.9 s: long enough for a busy host,
/// short enough to call the peer gone. Change them by their fields: a smaller `timeout`
/// resends a lost packet sooner and gives up sooner (perftest's 14, ≈ 67 ms, gives up after
/// ≈ 0.47 s), a smaller count gives up sooner; [`AckTimeout::INFINITE`] and
/// [`RnrRetry::INFINITE`] never give up, which no default does.
///
/// The timers and counts are types that hold only valid values; waiting forever is said by
/// name:
///
/// ```
/// # use rdma_verbs::*;
/// # fn main() -> Result<()> {
/// let rts = ToRtsAttr { timeout: AckTimeout::new(18)?, ..ToRtsAttr::new(Psn::random()) };
/// let patient = ToRtsAttr { rnr_retry: RnrRetry::INFINITE, ..rts };
/// # drop(patient); Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ToRtsAttr {
    /// The local ACK timeout, 4.096 µs × 2^n ([`AckTimeout`]; 17 ≈ 0.54 s);
    /// [`AckTimeout::INFINITE`] waits forever.
    pub timeout: AckTimeout,
    /// Transport retries (ACK timeouts, NAKs for sequence errors) before a
    /// `RETRY_EXC_ERR` completion ([`RetryCount`], 0–7; 7 never ends on rxe).
    pub retry_cnt: RetryCount,
    /// Receiver-not-ready retries before a `RNR_RETRY_EXC_ERR` completion ([`RnrRetry`],
    /// 0–6); [`RnrRetry::INFINITE`] retries forever on every provider.
    pub rnr_retry: RnrRetry,
    /// Our first send PSN (the one we told the peer).
    pub sq_psn: Psn,
    /// RDMA READs / atomics we may have outstanding: at most the device's
    /// [`max_qp_init_rd_atom`](crate::DeviceAttr::max_qp_init_rd_atom).
    pub max_rd_atomic: u8,
}

impl ToRtsAttr {
    /// Values that end on every provider, with send PSN `sq_psn`: timeout 17 (≈ 0.54 s per
    /// try), 6 transport retries and 6 RNR retries (neither is "forever": a dead peer or a
    /// receiver that never posts ends in an error completion after ≈ 3.8 s or ≈ 2.9 s, see
    /// the budgets above), one outstanding RDMA READ or atomic. ibv_rc_pingpong and perftest
    /// peers use 7 and 7; these are local to each side, so they interoperate.
    #[must_use]
    pub fn new(sq_psn: Psn) -> Self {
        ToRtsAttr {
            timeout: AckTimeout::from_code(17),
            retry_cnt: RetryCount::from_code(6),
            rnr_retry: RnrRetry::from_code(6),
            sq_psn,
            max_rd_atomic: 1,
        }
    }

    /// The `ibv_qp_attr` of RTR → RTS (RC and DCI; each masks what its type takes).
    pub(crate) fn raw(&self) -> sys::ibv_qp_attr {
        sys::ibv_qp_attr {
            timeout: self.timeout.get(),
            retry_cnt: self.retry_cnt.get(),
            rnr_retry: self.rnr_retry.get(),
            sq_psn: self.sq_psn.get(),
            max_rd_atomic: self.max_rd_atomic,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::endpoint::Lid;
    use crate::gid::Gid;

    /// The defaults' budgets, as the attribute docs state them: how long a sender tries before
    /// it gives up on a silent peer (the first try and `retry_cnt` resends, each waiting
    /// `timeout`) and on a receiver without receives (`rnr_retry` resends, each after the
    /// receiver's RNR timer).
    fn budgets(rtr: &ToRtrAttr, rts: &ToRtsAttr) -> (Duration, Duration) {
        let timeout = rts.timeout.duration().expect("a finite ACK timeout");
        let rnr_retry = rts.rnr_retry.count().expect("a finite RNR retry count");
        let transport = timeout * (u32::from(rts.retry_cnt.get()) + 1);
        (transport, rtr.min_rnr_timer.duration() * u32::from(rnr_retry))
    }

    #[test]
    fn the_default_budgets_are_seconds_and_bounded() {
        let remote = Endpoint {
            lid: Lid::new(1),
            qpn: Qpn::from_low_bits(2),
            psn: Psn::from_low_bits(3),
            gid: Gid::ZERO,
        };
        let rtr = ToRtrAttr::to_endpoint(&remote, 1, None, Mtu::MTU_1024);
        let rts = ToRtsAttr::new(Psn::from_low_bits(4));
        // Codes, as ibv_modify_qp takes them: 7 for rnr_retry would be forever, 0 for timeout.
        assert_eq!((rtr.min_rnr_timer.get(), rts.rnr_retry.get()), (31, 6));
        assert_eq!((rts.timeout.get(), rts.retry_cnt.get()), (17, 6));
        let (transport, rnr) = budgets(&rtr, &rts);
        assert_eq!(rnr, Duration::from_micros(6 * 491_520));
        assert_eq!(transport, Duration::from_nanos(7 * (4096 << 17)));
        for budget in [transport, rnr] {
            let seconds = budget.as_secs_f64();
            assert!((2.0..5.0).contains(&seconds), "{budget:?}: seconds, and bounded");
        }
        // ibv_rc_pingpong's RNR timer gave a receiver 4 ms.
        let pingpong = ToRtrAttr { min_rnr_timer: RnrTimer::new(12).unwrap(), ..rtr };
        assert_eq!(budgets(&pingpong, &rts).1, Duration::from_micros(6 * 640));
    }
}
