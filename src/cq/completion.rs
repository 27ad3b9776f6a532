//! One completion as [`CompletionQueue::poll_with`](crate::CompletionQueue::poll_with) hands
//! it over.

use crate::wc::WorkCompletion;

/// A completion with what only the extended CQ can report: its fields are those of
/// [`WorkCompletion`] (through `Deref`), plus [`timestamp`](Self::timestamp). Through
/// `DerefMut` it is a `&mut WorkCompletion` where one is taken, so
/// [`BufferPool::complete`](crate::BufferPool::complete) hands back the buffer it ended:
///
/// ```no_run
/// # use rdma_verbs::*;
/// # fn f(cq: &CompletionQueue<'_>, pool: &BufferPool<'_>) -> Result<()> {
/// cq.poll_with(16, |c| {
///     let at = c.timestamp();
///     if let Some(buf) = pool.complete(c) {
///         println!("{} bytes at {at:?}", buf.len());
///     }
/// })?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Completion {
    wc: WorkCompletion,
    timestamp: Option<u64>,
}

impl Completion {
    pub(crate) fn new(wc: WorkCompletion, timestamp: Option<u64>) -> Self {
        Completion { wc, timestamp }
    }

    /// The completion without its timestamp.
    pub(super) fn into_work_completion(self) -> WorkCompletion {
        self.wc
    }

    /// The device clock when the work request completed, in cycles of
    /// [`CompletionQueue::timestamp_clock_khz`](crate::CompletionQueue::timestamp_clock_khz)
    /// (`ibv_wc_read_completion_ts`); `None` unless the CQ was created with
    /// [`CqAttr::timestamps`](crate::CqAttr::timestamps).
    #[doc(alias = "ibv_wc_read_completion_ts")]
    #[inline]
    pub fn timestamp(&self) -> Option<u64> {
        self.timestamp
    }
}

impl std::ops::Deref for Completion {
    type Target = WorkCompletion;

    #[inline]
    fn deref(&self) -> &WorkCompletion {
        &self.wc
    }
}

impl std::ops::DerefMut for Completion {
    #[inline]
    fn deref_mut(&mut self) -> &mut WorkCompletion {
        &mut self.wc
    }
}
