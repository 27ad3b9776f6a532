//! CQ moderation (`ibv_modify_cq(3)`): a completion event for a batch of completions rather
//! than for each, on devices that have it (mlx5 does; rxe and siw do not).
#![allow(unsafe_code)]

use rdma_verbs_sys as sys;

use super::CompletionQueue;
use crate::error::{check_errno, Result};

impl CompletionQueue<'_> {
    /// `ibv_modify_cq(3)`—Moderates the CQ's completion events: once armed, its completion
    /// channel is signalled when `count` completions have arrived or `period_us`
    /// microseconds have passed since the first of them, whichever comes first, instead of
    /// at the first completion. Fewer events (and wake-ups) for a busy CQ, at the cost of up
    /// to `period_us` of latency for the last completions of a burst. `(1, 0)` asks for an
    /// event per completion again.
    ///
    /// Polling is not affected: completions are in the CQ as soon as they happen; only the
    /// events of a [`CompletionChannel`](crate::CompletionChannel) are moderated. The
    /// device's limits are `cq_mod_caps` of `ibv_query_device_ex(3)` (`max_cq_count`,
    /// `max_cq_period`).
    ///
    /// # Errors
    ///
    /// - [`Error::Unsupported`](crate::Error::Unsupported) when the provider has no CQ
    ///   moderation (rxe, siw), or the loaded libibverbs' context has no `modify_cq` op.
    /// - [`Error::Verb`](crate::Error::Verb) from `ibv_modify_cq`: `EINVAL` for a count or
    ///   period past the device's limits.
    #[doc(alias = "ibv_modify_cq")]
    pub fn set_moderation(&self, count: u16, period_us: u16) -> Result<()> {
        let mut attr = sys::ibv_modify_cq_attr {
            attr_mask: sys::IBV_CQ_ATTR_MODERATE,
            moderate: sys::ibv_moderate_cq { cq_count: count, cq_period: period_us },
        };
        // SAFETY: a live CQ (borrowed by `self`) and a readable attribute struct.
        let ret = unsafe { sys::inline::ibv_modify_cq(self.as_raw(), &mut attr) };
        check_errno(ret, "ibv_modify_cq")
    }
}
