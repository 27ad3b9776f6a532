//! Posting receive buffers as a list: one `ibv_post_recv` (or `ibv_post_srq_recv`) for many.

use std::mem::ManuallyDrop;

use rdma_verbs_sys as sys;

use super::pool::{Buffer, UNCHAINED};
use super::receive::ReceiveQueue;
use crate::error::Result;
use crate::qp::{HasReceiveQueue, QueuePair, ReceiveReady};
use crate::wr::LKey;
use crate::wr::{RecvWrList, Sge};

/// Buffers to post as receives with one call: [`QueuePair::post_recv_buffers`] or
/// [`SharedReceiveQueue::post_recv_buffers`](crate::SharedReceiveQueue::post_recv_buffers).
/// Each receives into its whole capacity and comes back, with its own completion, from
/// [`BufferPool::complete`](super::BufferPool::complete); a list may hold buffers of several
/// pools. Its storage is allocated once, by [`with_capacity`](Self::with_capacity), and
/// reused by every post.
///
/// One call for many receives is what a provider's receive path is built for: one lock and,
/// on a NIC that rings a doorbell record per post, one update for the batch.
#[must_use = "a list does nothing until it is posted"]
pub struct RecvBufferList<'p> {
    /// The buffers waiting, whose tokens are dropped (their chunks freed) only by `pop` and
    /// `Drop`: a post forgets those the provider took, without a drop per buffer.
    buffers: Vec<ManuallyDrop<Buffer<'p>>>,
    /// One SGE per buffer, exactly `capacity` of them: the list's capacity.
    sges: Box<[Sge]>,
    /// The WRs of a post, linked once and rewritten by each post to name `sges` (hence
    /// `'static`: they are read only within a post).
    wrs: RecvWrList<'static>,
}

impl<'p> RecvBufferList<'p> {
    /// An empty list for up to `capacity` buffers.
    ///
    /// # Panics
    ///
    /// As `Vec::with_capacity`: when the storage would pass `isize::MAX` bytes (and, as any
    /// allocation, the process aborts when memory runs out). A list need hold no more than a
    /// queue's depth.
    pub fn with_capacity(capacity: usize) -> Self {
        RecvBufferList {
            buffers: Vec::with_capacity(capacity),
            sges: vec![Sge::new(0, 0, LKey::new(0)); capacity].into_boxed_slice(),
            wrs: RecvWrList::with_capacity(capacity),
        }
    }

    /// Adds `buffer`; when the list is full, hands it back.
    ///
    /// # Errors
    ///
    /// The buffer, when the list holds [`capacity`](Self::capacity) buffers already.
    #[inline]
    pub fn push(&mut self, buffer: Buffer<'p>) -> std::result::Result<(), Buffer<'p>> {
        if self.buffers.len() == self.capacity() {
            return Err(buffer);
        }
        self.buffers.push(ManuallyDrop::new(buffer));
        Ok(())
    }

    /// Takes the last buffer back out.
    #[inline]
    pub fn pop(&mut self) -> Option<Buffer<'p>> {
        self.buffers.pop().map(ManuallyDrop::into_inner)
    }

    /// The number of buffers waiting.
    #[inline]
    pub fn len(&self) -> usize {
        self.buffers.len()
    }

    /// Whether no buffer is waiting.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.buffers.is_empty()
    }

    /// The most buffers it holds.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.sges.len()
    }

    /// Posts every buffer to `queue` with `post` (its `ibv_post_recv`, named `verb` in
    /// errors) after [`ReceiveQueue::check`], taking one of its credits each, and
    /// `note` (the queue's lenders) for each pool: each chunk launched as one receive of its whole
    /// capacity. The buffers the provider took leave the list; the others are the program's
    /// again and stay.
    pub(crate) fn post(
        &mut self,
        queue: &ReceiveQueue<'_>,
        note: impl Fn(&Buffer<'p>),
        verb: &'static str,
        post: impl FnOnce(*mut sys::ibv_recv_wr, &mut *mut sys::ibv_recv_wr) -> i32,
    ) -> Result<()> {
        if self.buffers.is_empty() {
            return Ok(());
        }
        // The checks first, so that a refusal leaves the list as it was. They are the pool's
        // (its PD and access), so they run once for each run of one pool's buffers: a list
        // most often holds a single pool's.
        let mut checked = std::ptr::null();
        for buffer in &self.buffers {
            let pool = std::ptr::from_ref(buffer.pool_queues());
            if pool != checked {
                queue.check(buffer)?;
                checked = pool;
            }
        }
        let n = self.buffers.len();
        let credits = queue.credits;
        credits.take(u32::try_from(n).unwrap_or(u32::MAX))?;
        let mut noted = std::ptr::null();
        let items = self.buffers.iter().zip(self.sges.iter_mut());
        self.wrs.rewrite(items, |(buffer, sge), wr| {
            let pool = std::ptr::from_ref(buffer.pool_queues());
            if pool != noted {
                note(buffer);
                noted = pool;
            }
            *sge = buffer.sge(buffer.capacity() as u32, false);
            let wr_id = buffer.mark_launched(buffer.len() as u32, false, UNCHAINED, credits);
            // SAFETY: the list's own SGE, not changed until the next post, which rewrites
            // every WR it hands over (hence `'static`: the WRs are read only within a post).
            wr.refill(wr_id, unsafe { &*std::ptr::from_ref(std::slice::from_ref(sge)) });
        });
        let result = self.wrs.post_with(verb, post);
        let posted = result.as_ref().map_or_else(|e| e.posted, |()| self.wrs.len());
        for buffer in &self.buffers[posted..] {
            buffer.unmark();
        }
        credits.put_back((n - posted) as u32);
        // (Their tokens are `ManuallyDrop`: leaving the list forgets them, their chunks in
        // flight until a completion hands each back.)
        self.buffers.drain(..posted);
        result.map_err(|e| e.error)
    }
}

impl Drop for RecvBufferList<'_> {
    /// The buffers still waiting go back to their pool.
    fn drop(&mut self) {
        self.buffers.drain(..).for_each(|buffer| drop(ManuallyDrop::into_inner(buffer)));
    }
}

impl std::fmt::Debug for RecvBufferList<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecvBufferList")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl<'res, S: ReceiveReady, T: HasReceiveQueue> QueuePair<'res, S, T> {
    /// `ibv_post_recv(3)`—Posts every buffer of `list` as a receive of its whole capacity,
    /// with one call, and empties the list. Each comes back from
    /// [`BufferPool::complete`](super::BufferPool::complete) with its own completion, its
    /// length set to the bytes received. No allocation.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) when a buffer's pool is registered
    /// in another PD than the QP's, or without `LOCAL_WRITE`, when the QP takes no SGE per
    /// receive (`max_recv_sge` 0), or, on a UD QP, a buffer is shorter than the GRH area
    /// ([`QueuePair::post_recv_wr`]): nothing is posted and the list is as it was. Otherwise the
    /// provider's [`Error::Verb`](crate::Error::Verb) (`ENOMEM`
    /// when the receive queue is full): the buffers before the one it refused are posted, the
    /// rest stay in `list`.
    #[doc(alias = "ibv_post_recv")]
    pub fn post_recv_buffers<'p>(&self, list: &mut RecvBufferList<'p>) -> Result<()>
    where
        'p: 'res,
    {
        list.post(
            &self.receive_queue(),
            |buffer| self.lent(buffer),
            "ibv_post_recv",
            |head, bad| {
                // SAFETY: a live QP in a receive-ready state; `head` is a valid list of WRs, each
                // naming one whole chunk, the NIC's alone until `complete` sees its completion,
                // by its IOVA in a region of this QP's PD with LOCAL_WRITE (checked) whose pool
                // outlives the QP ('p: 'res); the wr_ids are the tier's own.
                unsafe { sys::inline::ibv_post_recv(self.as_raw(), head, bad) }
            },
        )
    }
}
