//! The errors of calls that leave something behind: how many WRs a list post posted, the QP
//! a failed transition hands back.

use std::fmt;

use super::Error;

/// A list post the provider refused part-way
/// ([`QueuePair::post_send_wrs`](crate::QueuePair::post_send_wrs),
/// [`QueuePair::post_recv_wrs`](crate::QueuePair::post_recv_wrs),
/// [`SharedReceiveQueue::post_recv_wrs`](crate::SharedReceiveQueue::post_recv_wrs)): how
/// many of its work requests were posted, and, as its source, why the rest were not.
#[derive(Debug, thiserror::Error)]
#[error("a list post stopped after {posted} work requests")]
pub struct PostListError {
    /// How many work requests, from the list's start, were posted (and will complete).
    pub posted: usize,
    /// Why the rest were not.
    #[source]
    pub error: Error,
}

impl From<PostListError> for Error {
    /// The error alone: how many were posted is lost.
    fn from(e: PostListError) -> Self {
        e.error
    }
}

/// A failed QP state change that hands the queue pair back, to retry or reuse: the error of
/// the `try_` calls ([`QueuePair::try_into_rtr`](crate::QueuePair::try_into_rtr), …; see
/// [`Error`] for why their plain twins return an [`Error`] instead).
///
/// It converts into an [`Error`] with `?` in a function returning [`Result`] (the QP is then
/// dropped, and so destroyed); its message says only that the QP is handed back, its
/// [`source`](std::error::Error::source) is the [`Error`].
pub struct TransitionError<Q> {
    /// The queue pair, in the state it was in (after [`QueuePair::try_drain`]'s failures
    /// past its checks, in ERROR).
    ///
    /// [`QueuePair::try_drain`]: crate::QueuePair::try_drain
    pub qp: Q,
    /// Why the state change failed.
    pub error: Error,
}

impl<Q> fmt::Debug for TransitionError<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransitionError").field("error", &self.error).finish_non_exhaustive()
    }
}

impl<Q> fmt::Display for TransitionError<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the queue pair's state change failed; the queue pair is handed back")
    }
}

impl<Q> std::error::Error for TransitionError<Q> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<Q> From<TransitionError<Q>> for Error {
    /// The error alone: the queue pair is dropped (destroyed).
    fn from(e: TransitionError<Q>) -> Self {
        e.error
    }
}
