//! Posting buffers: one at a time, or as a list with selective signaling.

use std::mem::ManuallyDrop;

use super::list_op::{ListOp, ToXrcSrq, UdSend};
use super::pool::{Buffer, UNCHAINED};
use super::send_list::{OpenChain, SendBufferList};
use crate::ah::UdDestination;
use crate::error::{Error, InvalidInputKind, PostListError, Result};
use crate::pd::ProtectionDomain;
use crate::qp::{Connected, Datagram, HasSendQueue, QueuePair, Rts, XrcSend};
use crate::try_twin::try_twin;
use crate::wr::{LKey, SendFlags, SendOp, SendWr, Sge};

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

/// A QP type's list posts, whose buffers go with `$op` (a connected QP's [`SendOp`], UD's
/// [`UdSend`] with its destination): the list at once ([`QueuePair::post_list`]), and one
/// buffer as the next WR of a list's chain ([`QueuePair::post_chained`], and its `try_` twin).
macro_rules! list_posts {
    (
        $(#[$list_attr:meta])*
        list: $list:ident;
        $(#[$chained_attr:meta])*
        chained: $chained:ident / $try_chained:ident($op_name:ident: $op:ty)
        try: $(#[$try_attr:meta])*
    ) => {
        $(#[$list_attr])*
        pub fn $list<'p>(&self, list: &mut SendBufferList<'p, $op>, signal_last: bool) -> Result<()>
        where
            'p: 'res,
        {
            self.post_list(list, signal_last)
        }

        try_twin! {
            $(#[$chained_attr])*
            pub fn $chained / $try_chained<'p>(
                &self,
                list: &mut SendBufferList<'p, $op>,
                buffer: Buffer<'p>,
                $op_name: $op,
                signaled: bool,
            ) -> Result<(), PostError<'p>>
            where 'p: 'res
            try: $(#[$try_attr])*
            {
                self.post_chained(list, buffer, $op_name, signaled)
            }
        }
    };
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

    list_posts! {
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
        list: post_send_buffers;
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
        chained: post_send_buffer_chained / try_post_send_buffer_chained(op: SendOp)
        try:
        /// [`post_send_buffer_chained`](Self::post_send_buffer_chained), handing the buffer back
        /// on failure.
        ///
        /// # Errors
        ///
        /// [`PostError`] with the buffer (`None` when the provider may have taken the WR) and the
        /// error of [`post_send_buffer_chained`](Self::post_send_buffer_chained).
        #[doc(alias = "ibv_post_send")]
    }
}

impl<'res, T: Datagram> QueuePair<'res, Rts, T> {
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

    list_posts! {
        /// `ibv_post_send(3)`—Posts every datagram of `list`, each to its own
        /// [`UdSend::dest`], with one call, as [`QueuePair::post_send_buffers`] does on a
        /// connected QP. The address handles outlive the QP (`'p: 'res`).
        ///
        /// # Errors
        ///
        /// As [`QueuePair::post_send_buffers`], and the UD checks of [`QueuePair::post_send_wr`]
        /// (a datagram above the path MTU).
        #[doc(alias = "ibv_post_send")]
        list: post_send_buffers_to;
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
        chained: post_send_buffer_chained_to / try_post_send_buffer_chained_to(send: UdSend<'p>)
        try:
        /// [`post_send_buffer_chained_to`](Self::post_send_buffer_chained_to), handing the buffer
        /// back on failure.
        ///
        /// # Errors
        ///
        /// [`PostError`] with the buffer (`None` when the provider may have taken the WR) and the
        /// error of [`post_send_buffer_chained_to`](Self::post_send_buffer_chained_to).
        #[doc(alias = "ibv_post_send")]
    }
}

impl<'res> QueuePair<'res, Rts, XrcSend> {
    try_twin! {
        /// `ibv_post_send(3)`—Posts `buffer` with `send.op`, signaled, to the peer's XRC SRQ
        /// `send.srqn` (a SEND lands in that SRQ's receives): [`QueuePair::post_send_buffer`]
        /// of an XRC initiator. The buffer comes back from
        /// [`BufferPool::complete`](super::BufferPool::complete) with its completion.
        ///
        /// # Errors
        ///
        /// As [`QueuePair::post_send_buffer`] (RDMA READ and atomics are refused).
        /// [`try_post_send_buffer_to_srq`](Self::try_post_send_buffer_to_srq) hands the buffer
        /// back.
        #[doc(alias = "ibv_post_send")]
        pub fn post_send_buffer_to_srq / try_post_send_buffer_to_srq<'p>(
            &self,
            buffer: Buffer<'p>,
            send: ToXrcSrq,
        ) -> Result<(), PostError<'p>>
        where 'p: 'res
        try:
        /// [`post_send_buffer_to_srq`](Self::post_send_buffer_to_srq), handing the buffer back
        /// on failure.
        ///
        /// # Errors
        ///
        /// [`PostError`] with the buffer, unchanged, and the error of
        /// [`post_send_buffer_to_srq`](Self::post_send_buffer_to_srq).
        #[doc(alias = "ibv_post_send")]
        {
            self.post_buffer(buffer, send)
        }
    }
}

impl<'res, T: HasSendQueue> QueuePair<'res, Rts, T> {
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
        if let Some(srqn) = op.xrc_srqn() {
            // An XRC initiator has no extended view: its WRs go through `ibv_post_send`.
            let sges = sge.map_or(&[][..], std::slice::from_ref);
            let wr = SendWr::of_len(wr_id, sges, len.into(), send_op, flags, None);
            // SAFETY: as below.
            return unsafe { self.post_one(&mut wr.to_xrc_srq(srqn)) };
        }
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
