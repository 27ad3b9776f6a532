//! What a send WR asks of the QP that posts it ([`Demand`]) and how the extended path's fast
//! batch builds it ([`Build`]), worked out from its parts in one place.

use rdma_verbs_sys as sys;

use super::{SendFlags, SendOp, Sge, INLINE_BUFS};
use crate::ah::UdDestination;
use crate::fit::{self, Demand};

/// How the extended path's fast batch builds a WR: the common ones, of one SGE and not
/// inline, and local invalidates, by their kind alone; any other by its opcode, then by its
/// data. One bit each, so that the builds of a list's WRs are collected by OR ([`Builds`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Build {
    Send = 1,
    SendWithImm = 1 << 1,
    RdmaWrite = 1 << 2,
    RdmaWriteWithImm = 1 << 3,
    RdmaRead = 1 << 4,
    /// Local invalidate: its builder alone (it carries no data).
    LocalInv = 1 << 5,
    Other = 1 << 6,
}

/// The builds of a list's WRs, one bit each: one OR per WR keeps them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Builds(u8);

impl Builds {
    /// Those of no WR.
    pub(crate) const NONE: Builds = Builds(0);

    #[must_use]
    #[inline(always)]
    pub(crate) fn with(self, build: Build) -> Builds {
        Builds(self.0 | build as u8)
    }

    /// The build every WR has, when they share one: `None` where they differ, or for none.
    #[inline(always)]
    pub(crate) fn common(self) -> Option<Build> {
        // (Build's discriminants; a unit test checks each way round.)
        Some(match self.0 {
            1 => Build::Send,
            0b10 => Build::SendWithImm,
            0b100 => Build::RdmaWrite,
            0b1000 => Build::RdmaWriteWithImm,
            0b1_0000 => Build::RdmaRead,
            0b10_0000 => Build::LocalInv,
            0b100_0000 => Build::Other,
            _ => return None,
        })
    }
}

/// What sort of operation a WR is, as its [`Demand`] and [`Build`] need it: its class (one of
/// `fit`'s one-bit fields), whether only the exact checks may pass it, and its build when it
/// carries one SGE and no inline data.
#[derive(Clone, Copy)]
pub(super) struct Kind {
    pub(super) class: fit::Field,
    pub(super) slow: bool,
    pub(super) build: Build,
}

/// The [`Kind`] of a WR of `opcode`: `inline` and, asked of an atomic only,
/// `one_aligned_word` (one 8-byte SGE and a remote address, both 8-byte aligned).
#[inline(always)]
pub(super) fn kind_of_opcode(
    opcode: sys::ibv_wr_opcode,
    inline: bool,
    one_aligned_word: impl FnOnce() -> bool,
) -> Kind {
    let kind = |class, slow, build| Kind { class, slow, build };
    match opcode {
        sys::IBV_WR_SEND => kind(fit::SEND, false, Build::Send),
        sys::IBV_WR_SEND_WITH_IMM => kind(fit::SEND, false, Build::SendWithImm),
        sys::IBV_WR_RDMA_WRITE => kind(fit::WRITE, false, Build::RdmaWrite),
        sys::IBV_WR_RDMA_WRITE_WITH_IMM => kind(fit::WRITE, false, Build::RdmaWriteWithImm),
        // INLINE on a READ or an atomic, which `check_send_fully` refuses, is slow.
        sys::IBV_WR_RDMA_READ => kind(fit::READ, inline, Build::RdmaRead),
        sys::IBV_WR_ATOMIC_CMP_AND_SWP | sys::IBV_WR_ATOMIC_FETCH_AND_ADD => {
            kind(fit::ATOMIC, inline || !one_aligned_word(), Build::Other)
        }
        sys::IBV_WR_LOCAL_INV => kind(fit::INV, false, Build::LocalInv),
        sys::IBV_WR_SEND_WITH_INV => kind(fit::INV, false, Build::Other),
        // Binds (whose window `note_posted` updates) and anything else.
        _ => kind(fit::SLOW, true, Build::Other),
    }
}

/// What a WR of `kind` asks of the QP that posts it ([`Demand`]), and how the extended
/// path's fast batch builds it, from its parts: `n` SGEs of `len` bytes in all, `inline`,
/// `addressed` (a SEND to a UD destination). The one place a demand is worked out:
/// `SendWr::refresh` reads the parts from the request, `SendWr::rewrite` has them at hand.
#[inline(always)]
pub(super) fn shape(
    kind: Kind,
    n: u64,
    len: u64,
    inline: bool,
    addressed: bool,
) -> (Demand, Build) {
    let demand = Demand::of([
        (fit::SGES, n),
        (fit::LEN, len),
        (fit::INLINE, if inline { len } else { 0 }),
        (fit::INLINE_LIST, u64::from(inline && n > 1)),
        (fit::INLINE_MANY, u64::from(inline && n > INLINE_BUFS as u64)),
        (fit::UNADDRESSED, u64::from(!addressed)),
        (kind.class, 1),
        (fit::SLOW, u64::from(kind.slow)),
    ]);
    let build = match kind.build {
        Build::LocalInv => Build::LocalInv,
        _ if n != 1 || inline => Build::Other,
        build => build,
    };
    (demand, build)
}

/// The demand and build of the request [`SendWr::rewrite`] writes from these parts, worked
/// out from the parts (as `refresh` does from the request): for the buffer tier, whose
/// extended path builds from them without writing the request.
#[inline(always)]
pub(crate) fn shape_of_parts(
    sges: &[Sge],
    len: u64,
    op: SendOp,
    flags: SendFlags,
    dest: Option<&UdDestination<'_>>,
) -> (Demand, Build) {
    let addressed = dest.is_some() && matches!(op, SendOp::Send | SendOp::SendWithImm(_));
    let inline = flags.contains(SendFlags::INLINE);
    let aligned = |a: u64| a.is_multiple_of(8);
    let kind = op.kind(inline, |remote| {
        matches!(sges, [s] if s.length() == 8 && aligned(s.addr())) && aligned(remote)
    });
    shape(kind, sges.len() as u64, len, inline, addressed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wr::{RKey, RemoteAddr};

    #[test]
    fn a_send_op_is_of_its_opcodes_kind() {
        let remote = RemoteAddr { addr: 0x8000, rkey: RKey::new(1) };
        let ops = [
            SendOp::Send,
            SendOp::SendWithImm(1),
            SendOp::RdmaWrite(remote),
            SendOp::RdmaWriteWithImm(remote, 1),
            SendOp::RdmaRead(remote),
            SendOp::CompareSwap { remote, compare: 1, swap: 2 },
            SendOp::FetchAdd { remote, add: 1 },
        ];
        for op in ops {
            for (inline, aligned, n) in [(false, true, 1), (true, true, 1), (false, false, 0)] {
                let by_op = op.kind(inline, |_| aligned);
                let by_opcode = kind_of_opcode(op.opcode(), inline, || aligned);
                assert_eq!(
                    shape(by_op, n, 8, inline, false),
                    shape(by_opcode, n, 8, inline, false),
                    "{op:?}, inline {inline}, aligned {aligned}, {n} SGEs"
                );
            }
        }
    }

    #[test]
    fn builds_name_the_build_their_wrs_share_and_none_where_they_differ() {
        let all = [
            Build::Send,
            Build::SendWithImm,
            Build::RdmaWrite,
            Build::RdmaWriteWithImm,
            Build::RdmaRead,
            Build::LocalInv,
            Build::Other,
        ];
        assert_eq!(Builds::NONE.common(), None);
        for a in all {
            assert_eq!(Builds::NONE.with(a).with(a).common(), Some(a));
            for b in all.into_iter().filter(|&b| b != a) {
                assert_eq!(Builds::NONE.with(a).with(b).common(), None, "{a:?} and {b:?}");
            }
        }
    }
}
