//! Which family of verbs an object uses: the extended ones, or the legacy ones they extend.

/// The verbs a [`CompletionQueue`](crate::CompletionQueue) polls with or a
/// [`QueuePair`](crate::QueuePair) posts with, chosen per object when it is created.
///
/// Both families serve the same public methods; the extended one is taken when the provider
/// has it, the legacy one otherwise (siw, for one, has neither the extended CQ nor the
/// extended QP). Ask for one at creation with `CqAttr::verbs_path` or `QpInitAttr::verbs_path`: a
/// forced [`Legacy`](Self::Legacy) never tries the extended verbs, a forced
/// [`Extended`](Self::Extended) fails with [`Error::Unsupported`](crate::Error::Unsupported)
/// naming what the provider lacks instead of falling back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VerbsPath {
    /// `ibv_create_cq_ex(3)` polled one completion per `ibv_start_poll`/`ibv_end_poll`
    /// session (see [`CompletionQueue::poll`](crate::CompletionQueue::poll)), and
    /// `ibv_create_qp_ex(3)` with the `ibv_wr_*` builders of `ibv_wr_post(3)` (many work
    /// requests per doorbell).
    Extended,
    /// `ibv_create_cq(3)` with `ibv_poll_cq(3)`, and `ibv_create_qp(3)` with
    /// `ibv_post_send(3)`.
    Legacy,
}

impl std::fmt::Display for VerbsPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            VerbsPath::Extended => "extended verbs",
            VerbsPath::Legacy => "legacy verbs",
        })
    }
}
