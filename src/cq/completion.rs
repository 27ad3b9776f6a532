//! One completion as [`CompletionQueue::poll_with`](crate::CompletionQueue::poll_with) hands
//! it over.

use crate::wc::WorkCompletion;

/// A completion with what only the extended CQ can report: its [`WorkCompletion`], and the
/// [`timestamp`](Self::timestamp). Two plain fields: hand `&mut c.wc` where a
/// `WorkCompletion` is taken, so [`BufferPool::complete`](crate::BufferPool::complete) hands
/// back the buffer it ended:
///
/// ```no_run
/// # use rdma_verbs::*;
/// # fn f(cq: &CompletionQueue<'_>, pool: &BufferPool<'_>) -> Result<()> {
/// cq.poll_with(16, |c| {
///     if let Some(buf) = pool.complete(&mut c.wc) {
///         println!("{} bytes at {:?}", buf.len(), c.timestamp);
///     }
/// })?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct Completion {
    /// The fields every CQ reports.
    pub wc: WorkCompletion,
    /// The device clock when the work request completed, in cycles of
    /// [`CompletionQueue::timestamp_clock_khz`](crate::CompletionQueue::timestamp_clock_khz)
    /// (`ibv_wc_read_completion_ts`); `None` unless the CQ was created with
    /// [`CqAttr::timestamps`](crate::CqAttr::timestamps).
    #[doc(alias = "ibv_wc_read_completion_ts")]
    pub timestamp: Option<u64>,
}

impl Completion {
    pub(crate) fn new(wc: WorkCompletion, timestamp: Option<u64>) -> Self {
        Completion { wc, timestamp }
    }
}
