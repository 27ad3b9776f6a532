//! Provider bugs the data path works around, only where the loaded provider has them: the
//! provider is told by the device's `vendor_id` (never by its name, which a user may choose),
//! the release by the loaded libibverbs' file name ([`Stack`]).
//!
//! Every fix below was merged upstream and backported to the stable lines, so whether a
//! release carries it depends on its minor version too (Debian's 33.2, 44.0 and 56.1 carry
//! none of them, its 65.0 all; 44.11 carries PR 1617). A release the file name does not tell (a bare
//! `libibverbs.so.1`, a MLNX_OFED build number) is taken to lack every fix.

use crate::context::Context;
use crate::error::Result;
use crate::stack::Stack;

/// The `vendor_id` Soft-RoCE (rxe) reports in `ibv_query_device` (the kernel's
/// `RXE_VENDOR_ID`).
pub(crate) const RXE_VENDOR_ID: u32 = 0xFF_FFFF;

/// The `vendor_id` of Mellanox/NVIDIA devices (mlx5; mlx4 shares it but has no `ibv_wr_*`
/// builders: its `create_qp_ex` refuses `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS`, so no extended
/// batch reaches it).
pub(crate) const MELLANOX_VENDOR_ID: u32 = 0x02c9;

/// The releases carrying a fix: the first release of each stable line it was backported to,
/// ending with the first mainline release (every later line has it).
struct Fix(&'static [(u32, u32)]);

impl Fix {
    /// Whether rdma-core `major.minor` carries the fix.
    fn in_release(&self, (major, minor): (u32, u32)) -> bool {
        let mainline = self.0.last().map_or(u32::MAX, |&(m, _)| m);
        major > mainline || self.0.iter().any(|&(m, first)| m == major && minor >= first)
    }
}

/// rdma-core PR 1617, "rxe: Fix double unlock in cq_ex polling": v59.0, backported to 36–58.
const RXE_NEXT_POLL_KEEPS_SESSION: Fix = Fix(&[
    (36, 16),
    (37, 15),
    (38, 14),
    (39, 13),
    (40, 12),
    (41, 12),
    (42, 12),
    (43, 11),
    (44, 11),
    (45, 10),
    (46, 9),
    (47, 8),
    (48, 7),
    (49, 7),
    (50, 6),
    (51, 6),
    (52, 5),
    (53, 5),
    (54, 4),
    (55, 3),
    (56, 3),
    (57, 2),
    (58, 1),
    (59, 0),
]);

/// rdma-core PRs 1744 ("rxe: Fix dma.length computation in wr_set_sge_list") and 1751
/// ("Fix missing length accumulation in wr_set_inline_data_list"), released together: v64.0,
/// backported to 40–63.
const RXE_WR_LIST_LENGTHS: Fix = Fix(&[
    (40, 13),
    (41, 13),
    (42, 13),
    (43, 12),
    (44, 12),
    (45, 11),
    (46, 10),
    (47, 9),
    (48, 8),
    (49, 8),
    (50, 7),
    (51, 7),
    (52, 6),
    (53, 6),
    (54, 5),
    (55, 4),
    (56, 4),
    (57, 3),
    (58, 2),
    (59, 2),
    (60, 2),
    (61, 1),
    (62, 1),
    (63, 1),
    (64, 0),
]);

/// The bugs of a context's provider that change how its data path is driven.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Quirks {
    /// `ibv_next_poll` returning `ENOENT` ends the extended CQ's session itself (stores the
    /// consumer index, releases the CQ lock), so the `ibv_end_poll` that
    /// `ibv_create_cq_ex(3)` asks for consumes a missing completion and unlocks twice: rxe
    /// without PR 1617.
    pub(crate) next_poll_ends_session: bool,
    /// `ibv_wr_set_sge_list` counts the first SGE's length once per SGE and
    /// `ibv_wr_set_inline_data_list` counts none (the WQE's total length is wrong, the
    /// inline bound unchecked): rxe without PRs 1744 and 1751.
    pub(crate) wr_list_lengths_wrong: bool,
}

impl Quirks {
    /// The quirks of `ctx`'s provider (the device attributes are queried once per context).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb) from `ibv_query_device`.
    pub(crate) fn of(ctx: &Context) -> Result<Quirks> {
        if ctx.cached_attr()?.vendor_id() != RXE_VENDOR_ID {
            return Ok(Quirks::default());
        }
        Ok(Quirks::rxe(Stack::of(ctx.library()).and_then(|s| s.rdma_core())))
    }

    /// rxe's quirks in rdma-core `release` (`None`: unknown, so every bug assumed).
    fn rxe(release: Option<(u32, u32)>) -> Quirks {
        let has = |fix: &Fix| release.is_some_and(|r| fix.in_release(r));
        Quirks {
            next_poll_ends_session: !has(&RXE_NEXT_POLL_KEEPS_SESSION),
            wr_list_lengths_wrong: !has(&RXE_WR_LIST_LENGTHS),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rxe(major: u32, minor: u32) -> (bool, bool) {
        let q = Quirks::rxe(Some((major, minor)));
        (q.next_poll_ends_session, q.wr_list_lengths_wrong)
    }

    #[test]
    fn stable_backports_count_by_minor_and_later_mainline_releases_have_the_fix() {
        // Debian's 11, 12 and 13: every bug.
        assert_eq!(rxe(33, 2), (true, true));
        assert_eq!(rxe(44, 0), (true, true));
        assert_eq!(rxe(56, 1), (true, true));
        // Stable backports.
        assert_eq!(rxe(44, 11), (false, true));
        assert_eq!(rxe(44, 12), (false, false));
        assert_eq!(rxe(56, 3), (false, true));
        // Mainline.
        assert_eq!(rxe(59, 0), (false, true));
        assert_eq!(rxe(63, 0), (false, true));
        assert_eq!(rxe(64, 0), (false, false));
        assert_eq!(rxe(70, 0), (false, false));
        // Older than any backport.
        assert_eq!(rxe(35, 99), (true, true));
        assert_eq!(
            Quirks::rxe(None),
            Quirks { next_poll_ends_session: true, wr_list_lengths_wrong: true }
        );
    }
}
