//! CQs the device reported in error (`IBV_EVENT_CQ_ERR`: an overrun), so that their own polls
//! say so. The event is the only sign a provider gives: rxe drops the completions that did
//! not fit and goes on, and polls return what remained. Once [`AsyncEvents`](crate::AsyncEvents)
//! has read the event, the CQ's next poll that finds nothing fails with
//! [`Error::CompletionQueueOverrun`], once; a raw-tier program learns of the loss where it
//! polls, not only where it reads events.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::CompletionQueue;
use crate::error::{Error, Result};
use crate::event::CqId;

/// A context's CQs reported in error and not yet told to their polls.
#[derive(Debug, Default)]
pub(crate) struct CqErrors {
    /// Whether `reported` has any: the one load an empty poll makes.
    any: AtomicBool,
    reported: Mutex<Vec<CqId>>,
}

impl CqErrors {
    /// Notes an `IBV_EVENT_CQ_ERR` of `cq`.
    pub(crate) fn note(&self, cq: CqId) {
        let mut reported = self.lock();
        if !reported.contains(&cq) {
            reported.push(cq);
        }
        self.any.store(true, Ordering::Release);
    }

    /// Whether any CQ of the context was reported and not yet told.
    #[inline(always)]
    pub(crate) fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// Forgets `cq`'s report, if any, and says whether there was one.
    pub(crate) fn take(&self, cq: CqId) -> bool {
        let mut reported = self.lock();
        let Some(at) = reported.iter().position(|&id| id == cq) else { return false };
        reported.swap_remove(at);
        if reported.is_empty() {
            self.any.store(false, Ordering::Relaxed);
        }
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<CqId>> {
        // (A poisoned lock held only a push or a removal: the list is whole.)
        self.reported.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl CompletionQueue<'_> {
    /// After a poll that found nothing, with some CQ of the context reported in error:
    /// [`Error::CompletionQueueOverrun`] when it was this one (once).
    #[cold]
    #[inline(never)]
    pub(super) fn reported_error(&self) -> Result<()> {
        if self.context().cq_errors().take(self.id()) {
            return Err(Error::CompletionQueueOverrun);
        }
        Ok(())
    }
}
