//! What a [`SendBufferList`](super::SendBufferList) entry asks of the send queue.

use crate::ah::UdDestination;
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

/// What a [`SendBufferList`](super::SendBufferList) entry asks of the send queue: a [`SendOp`] on a connected QP (RC, UC),
/// or a [`UdSend`] on a UD QP. Sealed: the list posts only what these two describe.
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
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::SendOp {}
    impl Sealed for super::UdSend<'_> {}
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
