//! Posting buffers: one at a time, or as a list with selective signaling.

use super::pool::{Buffer, Flight};
use crate::ah::UdDestination;
use crate::error::{Error, Result};
use crate::qp::{QpType, QueuePair, ReceiveReady, Rts, Ud};
use crate::sys;
use crate::wr::{RecvWr, RemoteAddr, SendFlags, SendWr, Sge};

/// What a posted [`Buffer`] does on the send queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// SEND its bytes; the peer consumes a receive.
    Send,
    /// SEND with 32 bits of immediate data.
    SendWithImm(u32),
    /// RDMA WRITE its bytes to the peer's memory.
    RdmaWrite(RemoteAddr),
    /// RDMA WRITE, then consume a receive at the peer carrying the immediate data.
    RdmaWriteWithImm(RemoteAddr, u32),
    /// RDMA READ `len` bytes of the peer's memory into it.
    RdmaRead(RemoteAddr),
    /// Atomic compare-and-swap on the peer's 8 bytes; the old value lands in the buffer,
    /// whose length must be 8. RC only.
    CompareSwap {
        /// The peer's 8-byte-aligned word.
        remote: RemoteAddr,
        /// The value expected there.
        compare: u64,
        /// The value written when it matches.
        swap: u64,
    },
    /// Atomic fetch-and-add on the peer's 8 bytes; the old value lands in the buffer, whose
    /// length must be 8. RC only.
    FetchAdd {
        /// The peer's 8-byte-aligned word.
        remote: RemoteAddr,
        /// What is added.
        add: u64,
    },
}

impl SendOp {
    /// The WR for `len` bytes in `sge` (none when `len` is 0), with `flags` plus INLINE when
    /// the bytes fit `max_inline` (never for RDMA READ, which writes the buffer).
    fn work_request(
        self,
        wr_id: u64,
        sge: &Sge,
        len: u32,
        max_inline: u32,
        mut flags: SendFlags,
    ) -> SendWr<'_> {
        let sges = if len == 0 { &[][..] } else { std::slice::from_ref(sge) };
        if len <= max_inline && !self.writes_buffer() {
            flags |= SendFlags::INLINE;
        }
        match self {
            SendOp::Send => SendWr::send(wr_id, sges),
            SendOp::SendWithImm(imm) => SendWr::send_with_imm(wr_id, sges, imm),
            SendOp::RdmaWrite(remote) => SendWr::rdma_write(wr_id, sges, remote),
            SendOp::RdmaWriteWithImm(remote, imm) => {
                SendWr::rdma_write_with_imm(wr_id, sges, remote, imm)
            }
            SendOp::RdmaRead(remote) => SendWr::rdma_read(wr_id, sges, remote),
            SendOp::CompareSwap { remote, compare, swap } => {
                SendWr::compare_swap(wr_id, sges, remote, compare, swap)
            }
            SendOp::FetchAdd { remote, add } => SendWr::fetch_add(wr_id, sges, remote, add),
        }
        .flags(flags)
    }

    /// Whether the NIC writes the buffer (so it cannot go inline).
    fn writes_buffer(self) -> bool {
        matches!(self, SendOp::RdmaRead(_) | SendOp::CompareSwap { .. } | SendOp::FetchAdd { .. })
    }
}

/// A post the provider refused, with the buffer back.
#[derive(Debug)]
pub struct PostError<'p> {
    /// The buffer, unchanged.
    pub buffer: Buffer<'p>,
    /// Why.
    pub error: Error,
}

impl std::fmt::Display for PostError<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

impl std::error::Error for PostError<'_> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<'res, T: QpType> QueuePair<'res, Rts, T> {
    /// `ibv_post_send(3)`—Posts `buffer`'s [`len`](Buffer::len) bytes with `op`, signaled;
    /// the buffer comes back from [`BufferPool::complete`](super::BufferPool::complete) with
    /// the completion. Bytes that fit the QP's `max_inline_data` go inline.
    ///
    /// # Errors
    ///
    /// [`PostError`] with the buffer and the [`Error`] of [`QueuePair::post_send`] (e.g.
    /// `ENOMEM` when the send queue is full).
    #[doc(alias = "ibv_post_send")]
    pub fn post_send_buffer<'p>(&self, buffer: Buffer<'p>, op: SendOp) -> Result<(), PostError<'p>>
    where
        'p: 'res,
    {
        let len = buffer.len() as u32;
        let sge = buffer.sge(len as usize);
        let flight = buffer.launch(len, false);
        let max_inline = self.caps().max_inline_data;
        let mut wr = op.work_request(flight.wr_id, &sge, len, max_inline, SendFlags::SIGNALED);
        // SAFETY: the chunk is the NIC's alone (its token was consumed by `launch`) until
        // `complete` sees this WR's completion (it is signaled); it stays registered while this
        // QP lives because the pool outlives 'res ('p: 'res); `wr_id` is the tier's own.
        unsafe { self.post_send(&mut wr) }
            .map_err(|error| PostError { buffer: flight.restore(), error })
    }
}

impl<'res> QueuePair<'res, Rts, Ud> {
    /// `ibv_post_send(3)`—Sends `buffer`'s [`len`](Buffer::len) bytes (at most the path MTU)
    /// as one datagram to `dest`, signaled, with `imm` as immediate data when given. The
    /// destination's address handle outlives the QP (`'p: 'res`), so it is alive whenever the
    /// NIC uses it.
    ///
    /// # Errors
    ///
    /// As [`QueuePair::post_send_buffer`], and the UD checks of [`QueuePair::post_send`].
    #[doc(alias = "ibv_post_send")]
    pub fn post_send_buffer_to<'p>(
        &self,
        buffer: Buffer<'p>,
        dest: &UdDestination<'p>,
        imm: Option<u32>,
    ) -> Result<(), PostError<'p>>
    where
        'p: 'res,
    {
        let len = buffer.len() as u32;
        let sge = buffer.sge(len as usize);
        let flight = buffer.launch(len, false);
        let op = imm.map_or(SendOp::Send, SendOp::SendWithImm);
        let max_inline = self.caps().max_inline_data;
        let wr = op.work_request(flight.wr_id, &sge, len, max_inline, SendFlags::SIGNALED);
        let mut wr = wr.to(dest);
        // SAFETY: as in `post_send_buffer`; the AH outlives this QP ('p: 'res).
        unsafe { self.post_send(&mut wr) }
            .map_err(|error| PostError { buffer: flight.restore(), error })
    }
}

impl<'res, S: ReceiveReady, T: QpType> QueuePair<'res, S, T> {
    /// `ibv_post_recv(3)`—Posts `buffer`'s whole capacity as a receive; it comes back from
    /// [`BufferPool::complete`](super::BufferPool::complete) with the completion, its length
    /// set to the bytes received.
    ///
    /// # Errors
    ///
    /// [`PostError`] with the buffer and the [`Error`] of [`QueuePair::post_recv`] (e.g.
    /// `ENOMEM` when the receive queue is full).
    #[doc(alias = "ibv_post_recv")]
    pub fn post_recv_buffer<'p>(&self, buffer: Buffer<'p>) -> Result<(), PostError<'p>>
    where
        'p: 'res,
    {
        let len = buffer.len() as u32;
        let sge = [buffer.sge(buffer.capacity())];
        let flight = buffer.launch(len, false);
        // SAFETY: as in `post_send_buffer`: the chunk is the NIC's alone until `complete`.
        unsafe { self.post_recv(&mut RecvWr::new(flight.wr_id, &sge)) }
            .map_err(|error| PostError { buffer: flight.restore(), error })
    }
}

/// Buffers to post with one `ibv_post_send` (a post list), signaling at most the last
/// (selective signaling, perftest's method). Its storage is allocated once, by
/// [`with_capacity`](Self::with_capacity), and reused by every post.
///
/// Unsignaled buffers are chained: when a signaled WR posted after them through this list
/// *on the same QP* is [completed](super::BufferPool::complete), they all return to their
/// pool, free for [`take`](super::BufferPool::take). While such a chain is open the list
/// refuses to post on another QP.
pub struct SendList<'p> {
    entries: Vec<(Buffer<'p>, SendOp)>,
    sges: Vec<Sge>,
    wrs: Vec<sys::ibv_send_wr>,
    flights: Vec<(Flight<'p>, SendOp)>,
    /// The last unsignaled chunk posted, and on which QP: the tail of the open chain.
    open: Option<(usize, Flight<'p>)>,
}

impl<'p> SendList<'p> {
    /// An empty list for up to `capacity` buffers.
    pub fn with_capacity(capacity: usize) -> Self {
        SendList {
            entries: Vec::with_capacity(capacity),
            sges: Vec::with_capacity(capacity),
            wrs: Vec::with_capacity(capacity),
            flights: Vec::with_capacity(capacity),
            open: None,
        }
    }

    /// Adds `buffer` with `op`; when the list is full, hands `buffer` back.
    ///
    /// # Errors
    ///
    /// The buffer, when the list holds [`capacity`](Self::capacity) buffers already.
    pub fn push(&mut self, buffer: Buffer<'p>, op: SendOp) -> std::result::Result<(), Buffer<'p>> {
        if self.entries.len() == self.entries.capacity() {
            return Err(buffer);
        }
        self.entries.push((buffer, op));
        Ok(())
    }

    /// Takes the last buffer back out.
    pub fn pop(&mut self) -> Option<Buffer<'p>> {
        self.entries.pop().map(|(buffer, _)| buffer)
    }

    /// The number of buffers waiting.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no buffer is waiting.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The most buffers it holds.
    pub fn capacity(&self) -> usize {
        self.entries.capacity()
    }
}

impl std::fmt::Debug for SendList<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendList")
            .field("len", &self.len())
            .field("capacity", &self.capacity())
            .finish()
    }
}

impl<'res, T: QpType> QueuePair<'res, Rts, T> {
    /// `ibv_post_send(3)`—Posts every buffer of `list` with one call and empties the list.
    /// All WRs are unsignaled except the last when `signal_last`; the unsignaled ones come
    /// back with the next signaled WR of this list on this QP. No allocation.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when the list has unsignaled buffers in flight on another QP.
    /// Otherwise the [`Error`] of the provider: buffers from the first refused WR on are back
    /// in `list`; those it accepted join the open chain, released by a later signaled post.
    #[doc(alias = "ibv_post_send")]
    pub fn post_send_buffers<'p>(&self, list: &mut SendList<'p>, signal_last: bool) -> Result<()>
    where
        'p: 'res,
    {
        let n = list.entries.len();
        let qp = self.as_raw() as usize;
        if list.open.as_ref().is_some_and(|(open_qp, _)| *open_qp != qp) {
            return Err(Error::InvalidInput(
                "this SendList has unsignaled buffers in flight on another QP: post a signaled \
                 WR there first"
                    .into(),
            ));
        }
        if n == 0 {
            return Ok(());
        }
        let max_inline = self.caps().max_inline_data;
        list.sges.clear();
        list.sges.extend(list.entries.iter().map(|(buf, _)| buf.sge(buf.len())));
        list.wrs.clear();
        for (i, (buffer, op)) in list.entries.drain(..).enumerate() {
            let signaled = signal_last && i + 1 == n;
            let len = buffer.len() as u32;
            let flight = buffer.launch(len, !signaled);
            match list.flights.last() {
                Some((before, _)) => before.chain_before(&flight),
                None => {
                    if let Some((_, tail)) = &list.open {
                        tail.chain_before(&flight);
                    }
                }
            }
            let flags = if signaled { SendFlags::SIGNALED } else { SendFlags::empty() };
            list.wrs.push(
                op.work_request(flight.wr_id, &list.sges[i], len, max_inline, flags).into_raw(),
            );
            list.flights.push((flight, op));
        }
        // SAFETY: as in `post_send_buffer`, for every chunk: each is the NIC's alone until a
        // later signaled WR of this QP completes (on a send queue, after all before it); `wrs`
        // and `sges` are not touched until the next post; the wr_ids are the tier's own.
        let refused = unsafe { self.post_send_chain(&mut list.wrs) };
        let (posted, result) = match refused {
            Ok(()) => (n, Ok(())),
            Err((posted, error)) => (posted, Err(error)),
        };
        for (flight, op) in list.flights.drain(posted..).rev() {
            list.entries.insert(0, (flight.restore(), op));
        }
        // The chain stays open unless its last posted WR was the signaled one.
        let fully_signaled = posted == n && signal_last;
        if let Some((tail, _)) = list.flights.pop().filter(|_| !fully_signaled) {
            list.open = Some((qp, tail));
        } else if fully_signaled {
            list.open = None;
        }
        list.flights.clear();
        result
    }
}
