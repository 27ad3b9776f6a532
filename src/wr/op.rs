//! The operations a send work request carries ([`SendOp`]), as both tiers post them.

use rdma_verbs_sys as sys;

use super::shape::{Build, Kind};
use super::RemoteAddr;
use crate::fit;

/// What a posted [`Buffer`](crate::Buffer) does on the send queue: the operations of a send
/// work request that carry data ([`SendWr`](super::SendWr) builds these and the memory
/// window operations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND its bytes; the peer consumes a receive.
    Send,
    /// SEND with 32 bits of immediate data.
    SendWithImm(u32),
    /// RDMA WRITE its bytes to the peer's memory.
    RdmaWrite(RemoteAddr),
    /// RDMA WRITE, then consume a receive at the peer carrying the immediate data.
    RdmaWriteWithImm(RemoteAddr, u32),
    /// RDMA READ `len` bytes of the peer's memory into it.
    RdmaRead(RemoteAddr),
    /// Atomic compare-and-swap on the peer's 8 bytes; the old value lands in the buffer,
    /// whose length must be 8. RC only.
    CompareSwap {
        /// The peer's 8-byte-aligned word.
        remote: RemoteAddr,
        /// The value expected there.
        compare: u64,
        /// The value written when it matches.
        swap: u64,
    },
    /// Atomic fetch-and-add on the peer's 8 bytes; the old value lands in the buffer, whose
    /// length must be 8. RC only.
    FetchAdd {
        /// The peer's 8-byte-aligned word.
        remote: RemoteAddr,
        /// What is added.
        add: u64,
    },
}

impl SendOp {
    /// Its `ibv_wr_opcode`.
    #[inline(always)]
    pub(crate) fn opcode(self) -> sys::ibv_wr_opcode {
        match self {
            SendOp::Send => sys::IBV_WR_SEND,
            SendOp::SendWithImm(_) => sys::IBV_WR_SEND_WITH_IMM,
            SendOp::RdmaWrite(_) => sys::IBV_WR_RDMA_WRITE,
            SendOp::RdmaWriteWithImm(..) => sys::IBV_WR_RDMA_WRITE_WITH_IMM,
            SendOp::RdmaRead(_) => sys::IBV_WR_RDMA_READ,
            SendOp::CompareSwap { .. } => sys::IBV_WR_ATOMIC_CMP_AND_SWP,
            SendOp::FetchAdd { .. } => sys::IBV_WR_ATOMIC_FETCH_AND_ADD,
        }
    }

    /// Whether the NIC writes the buffer (RDMA READ and atomics do): it then needs
    /// `LOCAL_WRITE`, and never goes inline.
    #[inline]
    pub(crate) fn writes_buffer(self) -> bool {
        matches!(self, SendOp::RdmaRead(_) | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }

    /// Whether `len` bytes go inline on a QP allowing `max_inline`: they fit, and the NIC
    /// does not write the buffer.
    #[inline]
    pub(crate) fn goes_inline(self, len: u32, max_inline: u32) -> bool {
        len <= max_inline && !self.writes_buffer()
    }
}

impl SendOp {
    /// [`kind_of_opcode`] of its opcode, told by the variant: one dispatch where the opcode's
    /// cost a post of the buffer tier two (see the test `a_send_op_is_of_its_opcodes_kind`).
    #[inline(always)]
    pub(super) fn kind(self, inline: bool, one_aligned_word: impl FnOnce(u64) -> bool) -> Kind {
        let kind = |class, slow, build| Kind { class, slow, build };
        match self {
            SendOp::Send => kind(fit::SEND, false, Build::Send),
            SendOp::SendWithImm(_) => kind(fit::SEND, false, Build::SendWithImm),
            SendOp::RdmaWrite(_) => kind(fit::WRITE, false, Build::RdmaWrite),
            SendOp::RdmaWriteWithImm(..) => kind(fit::WRITE, false, Build::RdmaWriteWithImm),
            SendOp::RdmaRead(_) => kind(fit::READ, inline, Build::RdmaRead),
            SendOp::CompareSwap { remote, .. } | SendOp::FetchAdd { remote, .. } => {
                kind(fit::ATOMIC, inline || !one_aligned_word(remote.addr), Build::Other)
            }
        }
    }
}
