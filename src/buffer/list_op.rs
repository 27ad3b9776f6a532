//! What a [`SendBufferList`](super::SendBufferList) entry asks of the send queue.

use crate::ah::UdDestination;
use crate::endpoint::SrqNum;
use crate::error::{Error, InvalidInputKind, Result};
use crate::pd::ProtectionDomain;
use crate::wr::SendOp;

/// A UD datagram in a [`SendBufferList`](super::SendBufferList): where it goes, and its immediate data if any.
#[derive(Clone, Copy, Debug)]
pub struct UdSend<'p> {
    /// The peer's address handle, QP number and Q_Key.
    pub dest: UdDestination<'p>,
    /// Immediate data (`IBV_WR_SEND_WITH_IMM`), or a plain SEND.
    pub imm: Option<u32>,
}

/// A buffer-tier send of an XRC initiator ([`XrcSend`](crate::XrcSend)): the operation, and
/// the number of the peer's XRC SRQ its message goes to
/// ([`QueuePair::post_send_buffer_to_srq`](crate::QueuePair::post_send_buffer_to_srq)).
#[derive(Clone, Copy, Debug)]
pub struct ToXrcSrq {
    /// The operation (RDMA READ and atomics are refused, as on UC).
    pub op: SendOp,
    /// The peer's XRC SRQ ([`XrcSrq::srq_num`](crate::XrcSrq::srq_num)).
    pub srqn: SrqNum,
}

/// What a [`SendBufferList`](super::SendBufferList) entry asks of the send queue: a [`SendOp`] on a connected QP (RC, UC),
/// or a [`UdSend`] on a UD QP; and what a single buffer-tier send of an XRC initiator asks, a
/// [`ToXrcSrq`]. Sealed: the tier posts only what these describe.
pub trait ListOp<'p>: Copy + sealed::Sealed {
    /// The operation, and the destination of a UD datagram.
    #[doc(hidden)]
    fn parts(self) -> (SendOp, Option<UdDestination<'p>>);
    /// Refuses what the op names in another PD than the QP's `pd` (a UD destination's AH).
    #[doc(hidden)]
    #[inline]
    fn check_pd(self, _pd: &ProtectionDomain<'_>) -> Result<()> {
        Ok(())
    }
    /// The remote XRC SRQ of an XRC initiator's WR.
    #[doc(hidden)]
    #[inline]
    fn xrc_srqn(self) -> Option<SrqNum> {
        None
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::SendOp {}
    impl Sealed for super::UdSend<'_> {}
    impl Sealed for super::ToXrcSrq {}
}

impl<'p> ListOp<'p> for SendOp {
    #[inline]
    fn parts(self) -> (SendOp, Option<UdDestination<'p>>) {
        (self, None)
    }
}

impl<'p> ListOp<'p> for UdSend<'p> {
    #[inline]
    fn parts(self) -> (SendOp, Option<UdDestination<'p>>) {
        (self.imm.map_or(SendOp::Send, SendOp::SendWithImm), Some(self.dest))
    }

    /// The NIC would use an AH of another PD for this QP's datagram (the strict mock counts
    /// it as a violation; a NIC may fail the QP): refused here, saying why.
    #[inline]
    fn check_pd(self, pd: &ProtectionDomain<'_>) -> Result<()> {
        if self.dest.ah.pd().as_raw() == pd.as_raw() {
            return Ok(());
        }
        Err(Error::invalid(
            InvalidInputKind::OtherPd,
            "the destination's address handle was created in another protection domain than \
             the UD QP it is posted on: create the AH with the QP's PD"
                .into(),
        ))
    }
}

impl<'p> ListOp<'p> for ToXrcSrq {
    #[inline]
    fn parts(self) -> (SendOp, Option<UdDestination<'p>>) {
        (self.op, None)
    }

    #[inline]
    fn xrc_srqn(self) -> Option<SrqNum> {
        Some(self.srqn)
    }
}
