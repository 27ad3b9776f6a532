//! The rules the strict mock holds every work request to, and what breaking one records.

use std::fmt;

/// A rule of the strict mock: what a paranoid NIC checks before it touches memory for a work
/// request. Every rule is fatal by default ([`Mock::new`](crate::Mock::new)); a test that
/// breaks one on purpose opts out by name ([`Mock::allow`](crate::Mock::allow)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    /// An SGE names an lkey no live MR has, or bytes outside that MR's IOVA range.
    SgeOutsideMr,
    /// An SGE's lkey belongs to a live MR of another PD than the QP's (or SRQ's).
    LkeyOfOtherPd,
    /// The opcode writes the local SGE (RDMA READ, atomics, receives) but its MR lacks
    /// `IBV_ACCESS_LOCAL_WRITE`.
    MissingLocalWrite,
    /// Inline data (`IBV_SEND_INLINE`) points into the IOVA range of a live MR registered at
    /// an IOVA other than its address, outside every MR's CPU range: an IOVA passed where the
    /// CPU must read.
    InlineNotCpuMemory,
    /// Inline data (`IBV_SEND_INLINE`) on an RDMA READ or atomic, whose response the NIC
    /// writes into the local SGEs: there is no registered memory for it to write.
    InlineReadOrAtomic,
    /// A UD work request without a live address handle.
    MissingAh,
    /// A UD work request whose address handle belongs to another PD than the QP's.
    AhOfOtherPd,
    /// An atomic on a QP that is not RC.
    AtomicNotRc,
    /// An atomic without exactly one 8-byte SGE.
    AtomicShape,
    /// An atomic whose local or remote address is not 8-byte aligned.
    AtomicMisaligned,
    /// More SGEs than the QP (or SRQ) was created for.
    TooManySges,
    /// A posted list whose length differs from the one declared by
    /// [`Mock::expect_chain_len`](crate::Mock::expect_chain_len).
    ChainLength,
    /// A buffer-tier `wr_id` (bit 63 set) posted while an earlier work request with the same
    /// `wr_id` is still outstanding on any queue of this mock.
    WrIdInFlight,
    /// A buffer-tier work request (`wr_id` bit 63) whose SGE overlaps, in the same MR, an SGE
    /// of another buffer-tier work request still outstanding on any queue of this mock: the
    /// buffer tier handed out a chunk the NIC still owns.
    BufferInFlight,
    /// A queued work request, when the mock came to execute it, named memory that is no
    /// longer registered: the NIC would access memory the program may have freed.
    MrGoneBeforeExecution,
    /// A memory-window bind of a window that is not live or not of the QP's PD, or over a
    /// range that is not inside a live MR of that PD: peers would reach memory the program
    /// did not register for them.
    BindOutsideMr,
}

impl Rule {
    /// What the rule forbids, in words.
    pub fn describe(self) -> &'static str {
        match self {
            Rule::SgeOutsideMr => "an SGE outside every live MR",
            Rule::LkeyOfOtherPd => "an SGE whose lkey belongs to another PD",
            Rule::MissingLocalWrite => "a local write into an MR without LOCAL_WRITE",
            Rule::InlineNotCpuMemory => "inline data at an IOVA that is not CPU memory",
            Rule::InlineReadOrAtomic => "inline data on an RDMA READ or atomic",
            Rule::MissingAh => "a UD work request without a live address handle",
            Rule::AhOfOtherPd => "a UD work request with an address handle of another PD",
            Rule::AtomicNotRc => "an atomic on a QP that is not RC",
            Rule::AtomicShape => "an atomic without exactly one 8-byte SGE",
            Rule::AtomicMisaligned => "an atomic at an address that is not 8-byte aligned",
            Rule::TooManySges => "more SGEs than the queue allows",
            Rule::ChainLength => "a posted list of another length than declared",
            Rule::WrIdInFlight => "a buffer-tier wr_id posted while it is outstanding",
            Rule::BufferInFlight => "a buffer-tier SGE over bytes of an outstanding one",
            Rule::MrGoneBeforeExecution => {
                "the NIC would access memory that is no longer registered"
            }
            Rule::BindOutsideMr => "a memory-window bind outside a live MR of the QP's PD",
        }
    }
}

/// Where a work request was posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Queue {
    /// The send queue of the QP with this number.
    Send(u32),
    /// The receive queue of the QP with this number.
    Recv(u32),
    /// The shared receive queue with this handle.
    Srq(u32),
}

impl fmt::Display for Queue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Queue::Send(qpn) => write!(f, "the send queue of QP {qpn:#x}"),
            Queue::Recv(qpn) => write!(f, "the receive queue of QP {qpn:#x}"),
            Queue::Srq(handle) => write!(f, "SRQ {handle}"),
        }
    }
}

/// One broken [`Rule`]: which work request broke it, and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule broken.
    pub rule: Rule,
    /// Where the work request was posted.
    pub queue: Queue,
    /// The work request's `wr_id`.
    pub wr_id: u64,
    /// Its position in the list or batch it was posted in (0 for the first).
    pub position: usize,
    /// What exactly was wrong (the SGE, key or address).
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({:?}): WR #{} (wr_id {:#x}) on {}: {}",
            self.rule.describe(),
            self.rule,
            self.position,
            self.wr_id,
            self.queue,
            self.detail
        )
    }
}

/// A broken rule before it is placed: the rule and the detail.
pub(crate) type Broken = (Rule, String);
