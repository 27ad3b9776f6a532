//! The room every UD receive needs for the GRH: the first [`Grh::LEN`] bytes of a receive
//! taken by a UD QP hold the Global Route Header (or its empty area), whatever the message. A
//! receive shorter than that can take no message: the provider completes it with
//! `IBV_WC_LOC_LEN_ERR` and moves the QP to ERROR. So receives that a UD QP would take are
//! refused shorter, when they are posted, on every path ([`GrhRoom`]).

use std::sync::atomic::{AtomicU8, Ordering};

use rdma_verbs_sys as sys;

use crate::ah::Grh;
use crate::error::{Error, InvalidInputKind, Result};
use crate::qp::QpType;

/// What a receive queue asks of the length of a receive posted to it.
#[derive(Clone, Copy)]
pub(crate) enum GrhRoom<'q> {
    /// Any length: the receive queue of an RC or UC QP.
    Any,
    /// At least [`Grh::LEN`]: the receive queue of a UD QP.
    Ud,
    /// An SRQ's: at least [`Grh::LEN`] once it feeds a UD QP ([`SrqGrhRoom`]).
    Srq(&'q SrqGrhRoom),
}

impl GrhRoom<'_> {
    /// The rule of a QP's own receive queue.
    #[inline(always)]
    pub(crate) fn of<T: QpType>() -> Self {
        if T::RAW == sys::IBV_QPT_UD {
            GrhRoom::Ud
        } else {
            GrhRoom::Any
        }
    }

    /// Checks a receive, or the shortest of several, of `len()` bytes (computed only when the
    /// queue has a rule).
    #[inline(always)]
    pub(crate) fn check(self, len: impl FnOnce() -> u64) -> Result<()> {
        match self {
            GrhRoom::Any => Ok(()),
            GrhRoom::Ud => match len() {
                len if len < Grh::LEN as u64 => Err(too_short(len, false)),
                _ => Ok(()),
            },
            GrhRoom::Srq(srq) => srq.post(len()),
        }
    }
}

/// An SRQ's side of the rule: an SRQ does not know the QPs that take its receives, so it
/// remembers which came first, a UD QP on it or a receive too short for one, and refuses the
/// other from then on.
#[derive(Debug, Default)]
pub(crate) struct SrqGrhRoom(AtomicU8);

/// No UD QP and no short receive yet.
const OPEN: u8 = 0;
/// A UD QP takes its receives: short ones are refused.
const FEEDS_UD: u8 = 1;
/// A receive shorter than [`Grh::LEN`] was posted: UD QPs are refused.
const HAD_SHORT: u8 = 2;

impl SrqGrhRoom {
    /// Before receives of at least `shortest` bytes are posted.
    fn post(&self, shortest: u64) -> Result<()> {
        if shortest >= Grh::LEN as u64 {
            return Ok(());
        }
        match self.0.compare_exchange(OPEN, HAD_SHORT, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) | Err(HAD_SHORT) => Ok(()),
            Err(_) => Err(too_short(shortest, true)),
        }
    }

    /// Before a UD QP is created on the SRQ (which then refuses short receives, even if the
    /// creation fails).
    pub(crate) fn claim_for_ud(&self) -> Result<()> {
        match self.0.compare_exchange(OPEN, FEEDS_UD, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) | Err(FEEDS_UD) => Ok(()),
            Err(_) => Err(Error::invalid(
                InvalidInputKind::BufferTooSmall,
                format!(
                    "receives shorter than the {}-byte GRH area have been posted to this SRQ, \
                     and a UD QP would fail on them (IBV_WC_LOC_LEN_ERR, the QP in ERROR): \
                     give the UD QP an SRQ whose receives all hold at least {} bytes",
                    Grh::LEN,
                    Grh::LEN
                ),
            )),
        }
    }
}

/// The error of a receive of `len` bytes that a UD QP would take (through an SRQ: `srq`).
#[cold]
#[inline(never)]
fn too_short(len: u64, srq: bool) -> Error {
    Error::invalid(
        InvalidInputKind::BufferTooSmall,
        format!(
            "a receive of {len} bytes is shorter than the {}-byte GRH area (Grh::LEN) that \
             every receive of a UD QP starts with{}, so it could take no message: the provider \
             would complete it with IBV_WC_LOC_LEN_ERR and move the QP to ERROR; post at \
             least {} bytes plus the largest message expected",
            Grh::LEN,
            if srq { ", and this SRQ feeds a UD QP" } else { "" },
            Grh::LEN
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_srq_refuses_short_receives_once_it_feeds_ud_and_ud_once_it_had_short_ones() {
        let fed = SrqGrhRoom::default();
        GrhRoom::Srq(&fed).check(|| 40).unwrap();
        fed.claim_for_ud().unwrap();
        fed.claim_for_ud().unwrap();
        let e = GrhRoom::Srq(&fed).check(|| 39).unwrap_err();
        assert_eq!(e.invalid_input_kind(), Some(InvalidInputKind::BufferTooSmall));
        assert!(e.to_string().contains("starts with, and this SRQ feeds a UD QP, so"), "{e}");

        let short = SrqGrhRoom::default();
        GrhRoom::Srq(&short).check(|| 0).unwrap();
        GrhRoom::Srq(&short).check(|| 8).unwrap();
        let e = short.claim_for_ud().unwrap_err();
        assert_eq!(e.invalid_input_kind(), Some(InvalidInputKind::BufferTooSmall));
    }

    #[test]
    fn only_ud_queues_ask_for_the_grh_area() {
        GrhRoom::of::<crate::qp::Rc>().check(|| unreachable!("no rule, no length")).unwrap();
        GrhRoom::of::<crate::qp::Uc>().check(|| 0).unwrap();
        let ud = GrhRoom::of::<crate::qp::Ud>();
        ud.check(|| 40).unwrap();
        let e = ud.check(|| 39).unwrap_err();
        assert_eq!(
            e.to_string(),
            "a receive of 39 bytes is shorter than the 40-byte GRH area (Grh::LEN) that every \
             receive of a UD QP starts with, so it could take no message: the provider would \
             complete it with IBV_WC_LOC_LEN_ERR and move the QP to ERROR; post at least 40 \
             bytes plus the largest message expected"
        );
    }
}
