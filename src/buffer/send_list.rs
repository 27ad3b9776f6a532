//! The send list: buffers posted with one `ibv_post_send`, signaling at most the last.

use std::mem::ManuallyDrop;

use super::pool::Buffer;
use crate::wr::{SendOp, SendWrList, Sge};

/// Buffers to post with one `ibv_post_send` (a post list), signaling at most the last
/// (selective signaling, perftest's method): each with a [`SendOp`] on a connected QP
/// ([`QueuePair::post_send_buffers`](crate::QueuePair::post_send_buffers)), or a [`UdSend`](super::UdSend) on a UD QP
/// ([`QueuePair::post_send_buffers_to`](crate::QueuePair::post_send_buffers_to)). Its storage is allocated once, by
/// [`with_capacity`](Self::with_capacity), and reused by every post.
///
/// Unsignaled buffers are chained: when a signaled WR posted after them through this list
/// *on the same QP* is [completed](super::BufferPool::complete), they all return to their
/// pool, free for [`take`](super::BufferPool::take). So a list posts the buffers of one pool
/// (the chain is that pool's bookkeeping), and while such a chain is open it refuses to post
/// on another QP or buffers of another pool.
#[must_use = "a list does nothing until it is posted"]
pub struct SendBufferList<'p, Op = SendOp> {
    /// The buffers waiting, whose tokens are dropped (their chunks freed) only by `pop` and
    /// `Drop`: a post forgets those the provider took, without a drop per buffer.
    pub(super) entries: Vec<(ManuallyDrop<Buffer<'p>>, Op)>,
    pub(super) sges: Vec<Sge>,
    /// The WRs of the last post, rewritten in place by each (`SendWrList::rewrite`). They
    /// name `sges` and the entries' address handles through raw pointers, hence `'static`:
    /// `post_list` writes the SGEs before the WRs and uses both only within the post.
    pub(super) wrs: SendWrList<'static>,
    /// The unsignaled chunks posted last, until a signaled one closes their chain.
    pub(super) open: Option<OpenChain>,
}

/// The tail of a chain of unsignaled chunks in flight: which QP they were posted on, their
/// pool's id, and the last one's index, behind which the next posted is chained.
#[derive(Clone, Copy)]
pub(super) struct OpenChain {
    pub(super) qp: usize,
    pub(super) pool: u64,
    pub(super) tail: u32,
}

impl<'p, Op> SendBufferList<'p, Op> {
    /// After a post of its entries on QP `qp` (chaining chunks of pool `pool`) of which the
    /// provider took the first `posted`: their tokens are gone, their chunks in flight until a
    /// completion releases them, and they leave the list; the refused are the program's again
    /// and stay. The chain stays open unless its last posted WR was the signaled one.
    #[inline(always)]
    pub(super) fn settle(&mut self, posted: usize, signal_last: bool, qp: usize, pool: u64) {
        let n = self.entries.len();
        for (buffer, _) in &self.entries[posted..] {
            buffer.unmark();
        }
        if posted == n && signal_last {
            self.open = None;
        } else if let Some((last, _)) = posted.checked_sub(1).map(|i| &self.entries[i]) {
            self.open = Some(OpenChain { qp, pool, tail: last.link() });
        }
        // (Their tokens are `ManuallyDrop`: leaving the list forgets them.)
        if posted == n {
            self.entries.clear();
        } else {
            self.entries.drain(..posted);
        }
    }

    /// An empty list for up to `capacity` buffers.
    ///
    /// # Panics
    ///
    /// As `Vec::with_capacity`: when the storage would pass `isize::MAX` bytes (and, as any
    /// allocation, the process aborts when memory runs out). A list need hold no more than a
    /// queue's depth.
    pub fn with_capacity(capacity: usize) -> Self {
        let entries = Vec::with_capacity(capacity);
        // At least as many WRs as buffers (`Vec::with_capacity` promises at least what is
        // asked): a post of more buffers than WRs would count those left out as posted.
        let wrs = SendWrList::with_capacity(entries.capacity());
        SendBufferList { sges: Vec::with_capacity(entries.capacity()), entries, wrs, open: None }
    }

    /// Adds `buffer` with `op`; when the list is full, hands `buffer` back.
    ///
    /// # Errors
    ///
    /// The buffer, when the list holds [`capacity`](Self::capacity) buffers already.
    #[inline]
    pub fn push(&mut self, buffer: Buffer<'p>, op: Op) -> std::result::Result<(), Buffer<'p>> {
        if self.entries.len() == self.entries.capacity() {
            return Err(buffer);
        }
        self.entries.push((ManuallyDrop::new(buffer), op));
        Ok(())
    }

    /// Takes the last buffer back out.
    #[inline]
    pub fn pop(&mut self) -> Option<Buffer<'p>> {
        self.entries.pop().map(|(buffer, _)| ManuallyDrop::into_inner(buffer))
    }

    /// The number of buffers waiting.
    #[inline]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no buffer is waiting.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The most buffers it holds.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.entries.capacity()
    }
}

impl<Op> Drop for SendBufferList<'_, Op> {
    /// The buffers still waiting go back to their pool.
    fn drop(&mut self) {
        self.entries.drain(..).for_each(|(buffer, _)| drop(ManuallyDrop::into_inner(buffer)));
    }
}

impl<Op> std::fmt::Debug for SendBufferList<'_, Op> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendBufferList")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}
