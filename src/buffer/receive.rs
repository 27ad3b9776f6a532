//! Posting buffers as receives: a QP's receive queue, as the buffer tier sees it (an SRQ's
//! is built the same way).

use super::pool::Buffer;
use super::post::{check_pool, PostError};
use crate::cq::Credits;
use crate::error::{Error, InvalidInputKind, Result};
use crate::grh_room::GrhRoom;
use crate::pd::ProtectionDomain;
use crate::qp::{HasReceiveQueue, QpState, QpType, QueuePair, ReceiveReady};
use crate::try_twin::try_twin;
use crate::wr::RecvWr;

impl<S: QpState, T: QpType> QueuePair<'_, S, T> {
    /// What the buffer tier posts receives to: its receive queue, whose receives take its
    /// receive CQ's credits.
    #[inline(always)]
    pub(crate) fn receive_queue(&self) -> ReceiveQueue<'_> {
        ReceiveQueue {
            pd: self.pd(),
            max_sge: self.caps().max_recv_sge,
            room: GrhRoom::of::<T>(),
            credits: self.recv_credits(),
        }
    }

    /// Notes that the QP is given chunks of `buffer`'s pool (before it posts them).
    #[inline]
    pub(crate) fn lent(&self, buffer: &Buffer<'_>) {
        self.lenders().note(buffer.pool_queues());
    }
}

impl<'res, S: ReceiveReady, T: HasReceiveQueue> QueuePair<'res, S, T> {
    try_twin! {
        /// `ibv_post_recv(3)`—Posts `buffer`'s whole capacity as a receive; it comes back from
        /// [`BufferPool::complete`](super::BufferPool::complete) with the completion, its length
        /// set to the bytes received.
        ///
        /// # Errors
        ///
        /// [`Error::InvalidInput`] when the buffer's pool is registered in another PD than the
        /// QP's or without `LOCAL_WRITE`, or when the QP takes no SGE per receive
        /// (`max_recv_sge` 0) or, on a UD QP, the buffer is shorter than the GRH area, else that
        /// of [`QueuePair::post_recv_wr`] (e.g. `ENOMEM` when the receive queue is full). The
        /// buffer goes back to its pool; [`try_post_recv_buffer`](Self::try_post_recv_buffer)
        /// hands it back.
        #[doc(alias = "ibv_post_recv")]
        pub fn post_recv_buffer / try_post_recv_buffer<'p>(
            &self,
            buffer: Buffer<'p>,
        ) -> Result<(), PostError<'p>>
        where 'p: 'res
        try:
        /// [`post_recv_buffer`](Self::post_recv_buffer), handing the buffer back on failure.
        ///
        /// # Errors
        ///
        /// [`PostError`] with the buffer, unchanged, and the error of
        /// [`post_recv_buffer`](Self::post_recv_buffer).
        #[doc(alias = "ibv_post_recv")]
        {
            self.lent(&buffer);
            post_receive(buffer, &self.receive_queue(), |wr| {
                // SAFETY: as in `post_buffer`: the chunk is the NIC's alone until `complete`, and
                // its SGE names it by IOVA in a region of this QP's PD (checked).
                unsafe { self.post_recv_wr(wr) }
            })
        }
    }
}

/// What the buffer tier needs of a queue it posts receives to (a QP's or an SRQ): its PD,
/// the SGEs it takes per receive, the receive length its QPs' type needs, and the credits
/// its receives take ([`Credits`]: the receive CQ's, or the SRQ's own).
pub(crate) struct ReceiveQueue<'q> {
    pub(crate) pd: &'q ProtectionDomain<'q>,
    pub(crate) max_sge: u32,
    pub(crate) room: GrhRoom<'q>,
    pub(crate) credits: &'q Credits,
}

impl ReceiveQueue<'_> {
    /// [`check_pool`] for a receive (the NIC writes it): a queue that takes no SGE (created
    /// with `max_recv_sge` 0) would refuse the buffer's one SGE in the provider (the strict
    /// mock's `Rule::TooManySges`), so it is refused here, saying why; so is a chunk shorter
    /// than `room` allows (a UD QP's GRH area).
    #[inline]
    pub(super) fn check(&self, buffer: &Buffer<'_>) -> Result<()> {
        if self.max_sge == 0 {
            return Err(Error::invalid(
                InvalidInputKind::TooManySges,
                "this queue was created to take no SGE per receive (max_recv_sge / max_sge \
                 0): create it with at least 1 to post buffers to it"
                    .into(),
            ));
        }
        self.room.check(|| buffer.capacity() as u64)?;
        check_pool(buffer, self.pd, true)
    }
}

/// Posts `buffer` as one receive of its whole capacity to `queue` with `post` (its
/// `post_recv_wr`), after [`ReceiveQueue::check`], taking one of its credits: the buffer comes
/// back with the error when either fails.
pub(crate) fn post_receive<'p>(
    buffer: Buffer<'p>,
    queue: &ReceiveQueue<'_>,
    post: impl FnOnce(&mut RecvWr<'_>) -> Result<()>,
) -> Result<(), PostError<'p>> {
    if let Err(error) = queue.check(&buffer).and_then(|()| queue.credits.take(1)) {
        return Err(PostError { buffer: Some(buffer), error });
    }
    let len = buffer.len() as u32;
    let sge = [buffer.sge(buffer.capacity() as u32, false)];
    let flight = buffer.launch(len, queue.credits);
    post(&mut RecvWr::new(flight.wr_id, &sge)).map_err(|error| {
        queue.credits.put_back(1);
        PostError { buffer: Some(flight.restore()), error }
    })
}
