//! Posting buffers: one at a time, or as a list with selective signaling.

use std::mem::ManuallyDrop;

use super::pool::{Buffer, UNCHAINED};
use crate::ah::UdDestination;
use crate::cq::Credits;
use crate::error::{Error, InvalidInputKind, PostListError, Result};
use crate::grh_room::GrhRoom;
use crate::pd::ProtectionDomain;
use crate::qp::{Connected, QpState, QpType, QueuePair, ReceiveReady, Rts, Ud};
use crate::try_twin::try_twin;
use crate::wr::{LKey, RecvWr, SendFlags, SendOp, SendWrList, Sge};

/// A UD datagram in a [`SendBufferList`]: where it goes, and its immediate data if any.
#[derive(Clone, Copy, Debug)]
pub struct UdSend<'p> {
    /// The peer's address handle, QP number and Q_Key.
    pub dest: UdDestination<'p>,
    /// Immediate data (`IBV_WR_SEND_WITH_IMM`), or a plain SEND.
    pub imm: Option<u32>,
}

/// What a [`SendBufferList`] entry asks of the send queue: a [`SendOp`] on a connected QP (RC, UC),
/// or a [`UdSend`] on a UD QP. Sealed: the list posts only what these two describe.
pub trait ListOp<'p>: Copy + sealed::Sealed {
    /// The operation, and the destination of a UD datagram.
    #[doc(hidden)]
    fn parts(self) -> (SendOp, Option<UdDestination<'p>>);
    /// Refuses what the op names in another PD than the QP's `pd` (a UD destination's AH).
    #[doc(hidden)]
    #[inline]
    fn check_pd(self, _pd: &ProtectionDomain<'_>) -> Result<()> {
        Ok(())
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::SendOp {}
    impl Sealed for super::UdSend<'_> {}
}

impl<'p> ListOp<'p> for SendOp {
    #[inline]
    fn parts(self) -> (SendOp, Option<UdDestination<'p>>) {
        (self, None)
    }
}

impl<'p> ListOp<'p> for UdSend<'p> {
    #[inline]
    fn parts(self) -> (SendOp, Option<UdDestination<'p>>) {
        (self.imm.map_or(SendOp::Send, SendOp::SendWithImm), Some(self.dest))
    }

    /// The NIC would use an AH of another PD for this QP's datagram (the strict mock counts
    /// it as a violation; a NIC may fail the QP): refused here, saying why.
    #[inline]
    fn check_pd(self, pd: &ProtectionDomain<'_>) -> Result<()> {
        if self.dest.ah.pd().as_raw() == pd.as_raw() {
            return Ok(());
        }
        Err(Error::invalid(
            InvalidInputKind::OtherPd,
            "the destination's address handle was created in another protection domain than \
             the UD QP it is posted on: create the AH with the QP's PD"
                .into(),
        ))
    }
}

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

/// A failed post that hands the buffer back, to retry or reuse: the error of the `try_`
/// posts ([`QueuePair::try_post_send_buffer`], …; see [`Error`] for why their plain twins
/// return an [`Error`] instead).
///
/// It converts into an [`Error`] with `?` in a function returning
/// [`Result`](crate::Result) (the buffer then goes back to its pool); its message says only
/// what became of the buffer, its [`source`](std::error::Error::source) is the [`Error`].
#[derive(Debug)]
pub struct PostError<'p> {
    /// The buffer, unchanged; `None` when the provider may have taken its WR anyway (a
    /// failed `ibv_wr_complete` on a provider that does not say which WRs it kept, see
    /// [`QueuePair::post_send_wr`]): the chunk then stays in flight, handed back by
    /// [`BufferPool::complete`](super::BufferPool::complete) if a completion comes, else
    /// when the QP is drained or reset and the pool dropped.
    pub buffer: Option<Buffer<'p>>,
    /// Why.
    pub error: Error,
}

impl std::fmt::Display for PostError<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.buffer {
            Some(_) => "the buffer was not posted; it is handed back",
            None => "the provider may have taken the buffer's work request: it stays in flight",
        })
    }
}

impl std::error::Error for PostError<'_> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl From<PostError<'_>> for Error {
    /// The error alone: the buffer goes back to its pool.
    fn from(e: PostError<'_>) -> Self {
        e.error
    }
}

impl<'res, T: Connected> QueuePair<'res, Rts, T> {
    try_twin! {
        /// `ibv_post_send(3)`—Posts `buffer`'s [`len`](Buffer::len) bytes with `op`, signaled;
        /// the buffer comes back from [`BufferPool::complete`](super::BufferPool::complete) with
        /// the completion. Bytes that fit the QP's `max_inline_data` go inline. RC and UC only: a
        /// UD QP sends with [`QueuePair::post_send_buffer_to`].
        ///
        /// ```compile_fail,E0599
        /// # use rdma_verbs::*;
        /// # fn f<'a>(qp: &QueuePair<'a, Rts, Ud>, pool: &'a BufferPool<'a>) {
        /// qp.post_send_buffer(pool.take().unwrap(), SendOp::Send); // error: UD needs a destination
        /// # }
        /// ```
        ///
        /// # Errors
        ///
        /// [`Error::InvalidInput`] when the buffer's pool is registered in another PD than the
        /// QP's, else those of [`QueuePair::post_send_wr`] (its checks, e.g. an atomic on UC or not
        /// 8-byte aligned; then the provider's, e.g. `ENOMEM` when the send queue is full). The
        /// buffer goes back to its pool (or stays in flight where the provider may have taken its
        /// WR, see [`PostError::buffer`]); [`try_post_send_buffer`](Self::try_post_send_buffer)
        /// hands it back.
        #[doc(alias = "ibv_post_send")]
        pub fn post_send_buffer / try_post_send_buffer<'p>(
            &self,
            buffer: Buffer<'p>,
            op: SendOp,
        ) -> Result<(), PostError<'p>>
        where 'p: 'res
        try:
        /// [`post_send_buffer`](Self::post_send_buffer), handing the buffer back on failure.
        ///
        /// # Errors
        ///
        /// [`PostError`] with the buffer, unchanged, and the error of
        /// [`post_send_buffer`](Self::post_send_buffer).
        #[doc(alias = "ibv_post_send")]
        {
            self.post_buffer(buffer, op)
        }
    }

    /// `ibv_post_send(3)`—Posts every buffer of `list` with one call and empties the list.
    /// All WRs are unsignaled except the last when `signal_last`; the unsignaled ones come
    /// back with the next signaled WR of this list on this QP. No allocation. Every WR passes
    /// the checks of [`QueuePair::post_send_wr`] before any is posted.
    ///
    /// ```compile_fail,E0599
    /// # use rdma_verbs::*;
    /// # fn f<'a>(qp: &QueuePair<'a, Rts, Ud>, list: &mut SendBufferList<'a>) {
    /// qp.post_send_buffers(list, true); // error: UD lists carry destinations (post_send_buffers_to)
    /// # }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when the list has unsignaled buffers in flight on another QP,
    /// holds buffers of two pools (or of another pool than those in flight), when a buffer's
    /// pool is in another PD or lacks `LOCAL_WRITE` for a READ or atomic, or when a WR fails
    /// [`QueuePair::post_send_wr`]'s checks: then nothing is posted and the list is as it was.
    /// Otherwise the [`Error`] of the provider: buffers from the first refused WR on are back
    /// in `list`; those it accepted join the open chain, released by a later signaled post.
    #[doc(alias = "ibv_post_send")]
    pub fn post_send_buffers<'p>(
        &self,
        list: &mut SendBufferList<'p>,
        signal_last: bool,
    ) -> Result<()>
    where
        'p: 'res,
    {
        self.post_list(list, signal_last)
    }

    try_twin! {
        /// `ibv_post_send(3)`—Posts `buffer` with `op` as the next WR of `list`'s chain,
        /// signaled or not: what [`QueuePair::post_send_buffers`] does for a list of this one
        /// buffer, without storing it in `list` first (perftest's `-l 1`: a post per WR, with
        /// selective signaling). Unsignaled, the buffer comes back with the next signaled WR
        /// posted through `list` on this QP; signaled, from
        /// [`BufferPool::complete`](super::BufferPool::complete) with its completion, and the
        /// unsignaled ones chained before it go back to the pool. Buffers waiting in `list` stay
        /// there (a later post chains them behind this one).
        ///
        /// # Errors
        ///
        /// The error of [`QueuePair::post_send_buffers`] for a list of this buffer; the list's
        /// chain is then as it was, and the buffer goes back to its pool — unless the provider
        /// may have taken the WR anyway (see [`PostError::buffer`]): it then joins the chain as
        /// posted. [`try_post_send_buffer_chained`](Self::try_post_send_buffer_chained) hands it
        /// back.
        #[doc(alias = "ibv_post_send")]
        pub fn post_send_buffer_chained / try_post_send_buffer_chained<'p>(
            &self,
            list: &mut SendBufferList<'p>,
            buffer: Buffer<'p>,
            op: SendOp,
            signaled: bool,
        ) -> Result<(), PostError<'p>>
        where 'p: 'res
        try:
        /// [`post_send_buffer_chained`](Self::post_send_buffer_chained), handing the buffer back
        /// on failure.
        ///
        /// # Errors
        ///
        /// [`PostError`] with the buffer (`None` when the provider may have taken the WR) and the
        /// error of [`post_send_buffer_chained`](Self::post_send_buffer_chained).
        #[doc(alias = "ibv_post_send")]
        {
            self.post_chained(list, buffer, op, signaled)
        }
    }
}

impl<'res> QueuePair<'res, Rts, Ud> {
    try_twin! {
        /// `ibv_post_send(3)`—Sends `buffer`'s [`len`](Buffer::len) bytes (at most the path MTU)
        /// as one datagram to `dest`, signaled, with `imm` as immediate data when given. The
        /// destination's address handle outlives the QP (`'p: 'res`), so it is alive whenever the
        /// NIC uses it.
        ///
        /// # Errors
        ///
        /// As [`QueuePair::post_send_buffer`], and the UD checks of [`QueuePair::post_send_wr`].
        /// [`try_post_send_buffer_to`](Self::try_post_send_buffer_to) hands the buffer back.
        #[doc(alias = "ibv_post_send")]
        pub fn post_send_buffer_to / try_post_send_buffer_to<'p>(
            &self,
            buffer: Buffer<'p>,
            dest: &UdDestination<'p>,
            imm: Option<u32>,
        ) -> Result<(), PostError<'p>>
        where 'p: 'res
        try:
        /// [`post_send_buffer_to`](Self::post_send_buffer_to), handing the buffer back on
        /// failure.
        ///
        /// # Errors
        ///
        /// [`PostError`] with the buffer, unchanged, and the error of
        /// [`post_send_buffer_to`](Self::post_send_buffer_to).
        #[doc(alias = "ibv_post_send")]
        {
            self.post_buffer(buffer, UdSend { dest: *dest, imm })
        }
    }

    /// `ibv_post_send(3)`—Posts every datagram of `list`, each to its own
    /// [`UdSend::dest`], with one call, as [`QueuePair::post_send_buffers`] does on a
    /// connected QP. The address handles outlive the QP (`'p: 'res`).
    ///
    /// # Errors
    ///
    /// As [`QueuePair::post_send_buffers`], and the UD checks of [`QueuePair::post_send_wr`]
    /// (a datagram above the path MTU).
    #[doc(alias = "ibv_post_send")]
    pub fn post_send_buffers_to<'p>(
        &self,
        list: &mut SendBufferList<'p, UdSend<'p>>,
        signal_last: bool,
    ) -> Result<()>
    where
        'p: 'res,
    {
        self.post_list(list, signal_last)
    }

    try_twin! {
        /// `ibv_post_send(3)`—Sends `buffer` as one datagram to `send`'s destination, as the next
        /// WR of `list`'s chain, signaled or not: [`QueuePair::post_send_buffer_chained`] on a
        /// UD QP. The address handle outlives the QP (`'p: 'res`).
        ///
        /// # Errors
        ///
        /// As [`QueuePair::post_send_buffer_chained`], and the UD checks of
        /// [`QueuePair::post_send_wr`] (a datagram above the path MTU).
        /// [`try_post_send_buffer_chained_to`](Self::try_post_send_buffer_chained_to) hands the
        /// buffer back.
        #[doc(alias = "ibv_post_send")]
        pub fn post_send_buffer_chained_to / try_post_send_buffer_chained_to<'p>(
            &self,
            list: &mut SendBufferList<'p,
            UdSend<'p>>,
            buffer: Buffer<'p>,
            send: UdSend<'p>,
            signaled: bool,
        ) -> Result<(), PostError<'p>>
        where 'p: 'res
        try:
        /// [`post_send_buffer_chained_to`](Self::post_send_buffer_chained_to), handing the buffer
        /// back on failure.
        ///
        /// # Errors
        ///
        /// [`PostError`] with the buffer (`None` when the provider may have taken the WR) and the
        /// error of [`post_send_buffer_chained_to`](Self::post_send_buffer_chained_to).
        #[doc(alias = "ibv_post_send")]
        {
            self.post_chained(list, buffer, send, signaled)
        }
    }
}

impl<'res, T: QpType> QueuePair<'res, Rts, T> {
    /// One buffer with `op`, signaled: the path of every single-buffer send.
    #[inline(always)]
    fn post_buffer<'p, Op: ListOp<'p>>(
        &self,
        buffer: Buffer<'p>,
        op: Op,
    ) -> Result<(), PostError<'p>>
    where
        'p: 'res,
    {
        if let Err(error) = check_pool(&buffer, self.pd(), op.parts().0.writes_buffer())
            .and_then(|()| op.check_pd(self.pd()))
            .and_then(|()| self.send_credits().take(1))
        {
            return Err(PostError { buffer: Some(buffer), error });
        }
        self.lent(&buffer);
        // SAFETY: signaled, the chunk is the NIC's alone until `complete` sees this WR's
        // completion; its pool is in this QP's PD (checked) and outlives the QP ('p: 'res), as
        // does a UD destination's AH.
        match unsafe { self.post_marked(&buffer, op, true, UNCHAINED) } {
            Ok(()) => {
                // The token is gone: the chunk is in flight.
                std::mem::forget(buffer);
                Ok(())
            }
            Err(PostListError { posted: 0, error }) => {
                buffer.unmark();
                self.send_credits().put_back(1);
                Err(PostError { buffer: Some(buffer), error })
            }
            // The provider may have taken it: the chunk stays in flight, for its completion.
            Err(PostListError { error, .. }) => {
                std::mem::forget(buffer);
                Err(PostError { buffer: None, error })
            }
        }
    }

    /// Marks `buffer`'s chunk launched ([`Buffer::mark_launched`]: in flight when `signaled`,
    /// else batched behind chunk `before`) and posts its WR with `op`, built on the stack:
    /// a single post, or a list of one without a list's bookkeeping. Bytes that fit the QP's
    /// `max_inline_data` go inline. The caller forgets the token once the provider took the
    /// WR, or [`unmark`](Buffer::unmark)s it.
    ///
    /// # Safety
    ///
    /// The chunk is the NIC's alone until a completion releases it (its own when `signaled`,
    /// else that of a later signaled WR of this QP chained behind it); its pool is in this
    /// QP's PD and outlives the QP, as does a UD destination's address handle.
    #[inline(always)]
    unsafe fn post_marked<'p, Op: ListOp<'p>>(
        &self,
        buffer: &Buffer<'p>,
        op: Op,
        signaled: bool,
        before: u32,
    ) -> Result<(), PostListError> {
        let (send_op, dest) = op.parts();
        let len = buffer.len() as u32;
        let inline = send_op.goes_inline(len, self.caps().max_inline_data);
        let sge = buffer.sge(len, inline);
        let wr_id = buffer.mark_launched(len, !signaled, before, self.send_credits());
        let flags = send_flags(signaled, inline);
        let sge = (len != 0).then_some(&sge);
        // SAFETY: the caller's guarantees for the chunk; an inline SGE holds the chunk's CPU
        // address, any other its IOVA in the pool's region; `wr_id` is the tier's own.
        unsafe { self.post_parts(wr_id, sge, len.into(), send_op, flags, dest.as_ref()) }
    }

    /// Posts a list: every WR is built and checked first, so a refused check leaves the list
    /// as it was; then the buffers are launched and the WRs posted with one call.
    fn post_list<'p, Op: ListOp<'p>>(
        &self,
        list: &mut SendBufferList<'p, Op>,
        signal_last: bool,
    ) -> Result<()>
    where
        'p: 'res,
    {
        if list.entries.len() == 1 {
            // One WR on the stack, as a single post, without the list's arrays of WRs and
            // SGEs: what a list of one costs is then that of one post.
            let Some((buffer, op)) = list.entries.pop() else { return Ok(()) };
            return match self.post_chained(list, ManuallyDrop::into_inner(buffer), op, signal_last)
            {
                Ok(()) => Ok(()),
                // Refused: the list as it was.
                Err(PostError { buffer: Some(buffer), error }) => {
                    list.entries.push((ManuallyDrop::new(buffer), op));
                    Err(error)
                }
                Err(PostError { buffer: None, error }) => Err(error),
            };
        }
        let qp = self.as_raw() as usize;
        if list.open.is_some_and(|open| open.qp != qp) {
            return Err(open_elsewhere());
        }
        let Some((first, _)) = list.entries.first() else { return Ok(()) };
        // The chain of unsignaled chunks is kept in one pool's bookkeeping (`mark_launched`).
        let pool = list.open.map_or(first.pool_id(), |open| open.pool);
        let before = list.open.map_or(UNCHAINED, |open| open.tail);
        // The checks that need no WR first, so that a refusal leaves the list as it was.
        for (buffer, op) in &list.entries {
            self.check_entry(buffer, *op, pool)?;
        }
        let n = list.entries.len();
        self.send_credits().take(u32::try_from(n).unwrap_or(u32::MAX))?;
        // (One pool: noting its first buffer notes them all.)
        self.lent(&list.entries[0].0);
        // (Settled in each arm: with all posted, the compiler drops what handles the refused.)
        match self.post_many(list, signal_last, before) {
            Ok(()) => {
                list.settle(n, signal_last, qp, pool);
                Ok(())
            }
            Err(PostListError { posted, error }) => {
                list.settle(posted, signal_last, qp, pool);
                self.send_credits().put_back((n - posted) as u32);
                Err(error)
            }
        }
    }

    /// Posts `buffer` with `op` as the next WR of `list`'s chain (behind its open chain's
    /// tail), after the checks of a list's entry; the chain then ends with it, or is closed
    /// when it is signaled.
    #[inline(always)]
    fn post_chained<'p, Op: ListOp<'p>>(
        &self,
        list: &mut SendBufferList<'p, Op>,
        buffer: Buffer<'p>,
        op: Op,
        signaled: bool,
    ) -> Result<(), PostError<'p>>
    where
        'p: 'res,
    {
        let qp = self.as_raw() as usize;
        let (pool, before) = match list.open {
            Some(open) if open.qp != qp => {
                return Err(PostError { buffer: Some(buffer), error: open_elsewhere() })
            }
            Some(open) => (open.pool, open.tail),
            None => (buffer.pool_id(), UNCHAINED),
        };
        if let Err(error) =
            self.check_entry(&buffer, op, pool).and_then(|()| self.send_credits().take(1))
        {
            return Err(PostError { buffer: Some(buffer), error });
        }
        self.lent(&buffer);
        // SAFETY: as in `post_buffer`; unsignaled, the chunk is released by a later signaled
        // WR of this list on this QP (on a send queue, after all before it).
        let refused = match unsafe { self.post_marked(&buffer, op, signaled, before) } {
            Ok(()) => None,
            Err(PostListError { posted: 0, error }) => {
                buffer.unmark();
                self.send_credits().put_back(1);
                return Err(PostError { buffer: Some(buffer), error });
            }
            // The provider may have taken it: counted as posted, as in a list.
            Err(PostListError { error, .. }) => Some(error),
        };
        list.open = (!signaled).then_some(OpenChain { qp, pool, tail: buffer.link() });
        // The token is gone: the chunk is in flight.
        std::mem::forget(buffer);
        match refused {
            None => Ok(()),
            Some(error) => Err(PostError { buffer: None, error }),
        }
    }

    /// The checks of a list's entry that need no WR: its buffer is of the list's `pool`, whose
    /// region is in this QP's PD and lets the NIC write it when the op does, and a UD
    /// destination's AH is of this PD.
    #[inline(always)]
    fn check_entry<'p, Op: ListOp<'p>>(
        &self,
        buffer: &Buffer<'p>,
        op: Op,
        pool: u64,
    ) -> Result<()> {
        if buffer.pool_id() != pool {
            return Err(Error::invalid(
                InvalidInputKind::OtherPool,
                "a SendBufferList chains the buffers of one pool: this one holds (or its \
                 unsignaled buffers in flight are of) another pool's; post those through another \
                 list"
                    .into(),
            ));
        }
        check_pool(buffer, self.pd(), op.parts().0.writes_buffer())?;
        op.check_pd(self.pd())
    }

    /// Writes each chunk's SGE and WR where the last post left them (the SGE first: the WR
    /// names it), the chunk marked the NIC's and chained behind the one before it (the first
    /// behind `before`, the open chain's tail), and posts the WRs with one call. A list the
    /// exact checks refuse posts nothing. The caller forgets the tokens of the posted, and
    /// [`unmark`](Buffer::unmark)s the others. (Out of line, so that LLVM inlines the WR
    /// writing here and in the one-WR path of `post_list` both, which it did not in one
    /// function.)
    #[inline(never)]
    fn post_many<'p, Op: ListOp<'p>>(
        &self,
        list: &mut SendBufferList<'p, Op>,
        signal_last: bool,
        mut before: u32,
    ) -> Result<(), PostListError>
    where
        'p: 'res,
    {
        let n = list.entries.len();
        let (max_inline, credits) = (self.caps().max_inline_data, self.send_credits());
        if list.sges.len() < n {
            list.sges.resize(n, Sge::new(0, 0, LKey::new(0)));
        }
        let (entries, sges) = (&list.entries, list.sges.as_mut_ptr());
        list.wrs.rewrite(n, |i, wr| {
            let (buffer, op) = &entries[i];
            let (send_op, dest) = op.parts();
            let (len, signaled) = (buffer.len() as u32, signal_last && i + 1 == n);
            let inline = send_op.goes_inline(len, max_inline);
            let sge = sges.wrapping_add(i);
            let wr_id = buffer.mark_launched(len, !signaled, before, credits);
            before = buffer.link();
            // SAFETY: `i < n <= list.sges.len()`, written through the vector's own pointer
            // (taken after any resize, and not moved since), then read as the WR's zero or
            // one SGE, whose length is `len`; the WR was built by `SendWr::of`
            // (`SendWrList::rewrite`); the SGE is not changed while `list.wrs` names it (until
            // the next post); a UD destination's AH outlives the QP ('p: 'res).
            unsafe {
                sge.write(buffer.sge(len, inline));
                let flags = send_flags(signaled, inline);
                let sges = std::slice::from_raw_parts(sge, usize::from(len != 0));
                wr.rewrite(wr_id, sges, len.into(), send_op, flags, dest.as_ref());
            }
        });
        if let Err(error) = self.check_list(&list.wrs) {
            return Err(PostListError { posted: 0, error });
        }
        // SAFETY: as in `post_buffer`, for every chunk: each is the NIC's alone until a later
        // signaled WR of this QP completes (on a send queue, after all before it); every WR
        // passed `check_list` and every pool is in this QP's PD; `wrs` and `sges` are not
        // touched until the next post; the wr_ids are the tier's own.
        unsafe { self.post_checked_list(&mut list.wrs) }
    }
}

impl<'res, S: ReceiveReady, T: QpType> QueuePair<'res, S, T> {
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

/// The NIC checks an SGE's lkey against the PD of the queue it is posted to, and that the
/// region lets it write where it `writes` (a receive, READ or atomic); a pool failing either
/// would only fail there (or, on the strict mock, count as a violation), so it is refused
/// here, where the error can say why.
// Its errors are built out of line so that the test inlines where the post does: two
// compares, where a call and its `Result` in memory cost a dozen instructions.
#[inline]
pub(super) fn check_pool(
    buffer: &Buffer<'_>,
    pd: &ProtectionDomain<'_>,
    writes: bool,
) -> Result<()> {
    if buffer.pd_raw() != pd.as_raw() {
        return Err(pool_refused(true));
    }
    if writes && !buffer.local_write() {
        return Err(pool_refused(false));
    }
    Ok(())
}

/// [`QueuePair::post_send_buffers`]'s error for a list whose open chain is on another QP.
#[cold]
#[inline(never)]
fn open_elsewhere() -> Error {
    Error::invalid(
        InvalidInputKind::UnsignaledInFlight,
        "this SendBufferList has unsignaled buffers in flight on another QP: post a signaled WR \
         there first"
            .into(),
    )
}

/// [`check_pool`]'s error: the pool is of another PD, or else lacks LOCAL_WRITE.
#[cold]
#[inline(never)]
fn pool_refused(other_pd: bool) -> Error {
    if other_pd {
        return Error::invalid(
            InvalidInputKind::OtherPd,
            "the buffer's pool is registered in another protection domain than the queue it \
             is posted to: use a pool of that queue's PD"
                .into(),
        );
    }
    Error::invalid(
        InvalidInputKind::Access,
        "the NIC writes this buffer (a receive, RDMA READ or atomic), but its pool's \
         region lacks LOCAL_WRITE: register the pool's region with AccessFlags::LOCAL_WRITE"
            .into(),
    )
}

/// SIGNALED and INLINE as asked.
#[inline]
fn send_flags(signaled: bool, inline: bool) -> SendFlags {
    let mut flags = SendFlags::empty();
    flags.set(SendFlags::SIGNALED, signaled);
    flags.set(SendFlags::INLINE, inline);
    flags
}

/// Buffers to post with one `ibv_post_send` (a post list), signaling at most the last
/// (selective signaling, perftest's method): each with a [`SendOp`] on a connected QP
/// ([`QueuePair::post_send_buffers`]), or a [`UdSend`] on a UD QP
/// ([`QueuePair::post_send_buffers_to`]). Its storage is allocated once, by
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
    entries: Vec<(ManuallyDrop<Buffer<'p>>, Op)>,
    sges: Vec<Sge>,
    /// The WRs of the last post, rewritten in place by each (`SendWrList::rewrite`). They
    /// name `sges` and the entries' address handles through raw pointers, hence `'static`:
    /// `post_list` writes the SGEs before the WRs and uses both only within the post.
    wrs: SendWrList<'static>,
    /// The unsignaled chunks posted last, until a signaled one closes their chain.
    open: Option<OpenChain>,
}

/// The tail of a chain of unsignaled chunks in flight: which QP they were posted on, their
/// pool's id, and the last one's index, behind which the next posted is chained.
#[derive(Clone, Copy)]
struct OpenChain {
    qp: usize,
    pool: u64,
    tail: u32,
}

impl<'p, Op> SendBufferList<'p, Op> {
    /// After a post of its entries on QP `qp` (chaining chunks of pool `pool`) of which the
    /// provider took the first `posted`: their tokens are gone, their chunks in flight until a
    /// completion releases them, and they leave the list; the refused are the program's again
    /// and stay. The chain stays open unless its last posted WR was the signaled one.
    #[inline(always)]
    fn settle(&mut self, posted: usize, signal_last: bool, qp: usize, pool: u64) {
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
