//! The safe posting tier: buffers that move into a queue pair when posted and come back,
//! with their bytes, in the completion that ends them.
#![allow(unsafe_code)]
//! # Safety
//!
//! A [`BufferPool`] owns a [`MemoryRegion`] cut into equal chunks and hands each out as a
//! [`Buffer`] token, the only way to touch that chunk. Posting consumes the token; the pool
//! marks the chunk in flight and tags the work request with a `wr_id` naming the pool and
//! chunk (bit 63 set; the raw tier's contract reserves those ids). Only
//! [`BufferPool::complete`], given the completion carrying that `wr_id`, turns the chunk back
//! into a token, and it consumes the completion's `wr_id` so it cannot serve twice. So no
//! reference to a chunk exists while the NIC may read or write it. The pool must outlive every
//! QP it lends chunks to (`'p: 'res` on the post methods, with `QueuePair` invariant in
//! `'res`), so the memory stays registered while any QP could still use it.

use std::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};

use crate::error::{Error, Result};
use crate::mr::{LKey, MemoryRegion};
use crate::qp::{QueuePair, ReceiveReady, Rts};
use crate::wc::{WcOpcode, WorkCompletion};
use crate::wr::{RecvWr, RemoteAddr, SendFlags, SendWr, Sge};

const FREE: u8 = 0;
const HELD: u8 = 1;
const IN_FLIGHT: u8 = 2;

/// Bit 63 marks the `wr_id`s of this tier; bits 32..63 hold the pool's id, 0..32 the chunk.
pub(crate) const BUFFER_WR_ID_BIT: u64 = 1 << 63;

/// A registered region cut into `count` chunks of `chunk_size` bytes that circulate between
/// the program and the NIC: [`take`](Self::take) a [`Buffer`], fill it, post it (it moves into
/// the QP), and get it back from [`complete`](Self::complete) with the completion.
///
/// ```compile_fail,E0382
/// # use rdma_verbs::*;
/// # fn f<'a>(qp: &QueuePair<'a, Rts>, pool: &'a BufferPool<'a>) -> Result<()> {
/// let buf = pool.take().unwrap();
/// qp.post_send_buffer(buf, SendOp::Send).map_err(|e| e.error)?;
/// let first = buf.as_slice()[0]; // error: the buffer moved into the QP: in flight
/// # Ok(()) }
/// ```
///
/// The pool outlives every QP it lends buffers to:
///
/// ```compile_fail,E0597
/// # use rdma_verbs::*;
/// # fn f(pd: &ProtectionDomain<'_>, cq: &CompletionQueue<'_>) -> Result<()> {
/// let qp = pd.create_rc_qp(&QpInitAttr::new(cq))?.into_init(&InitAttr::default())?;
/// {
///     let pool = BufferPool::new(pd.register(4096, AccessFlags::LOCAL_WRITE)?, 1024)?;
///     qp.post_recv_buffer(pool.take().unwrap()).map_err(|e| e.error)?;
/// } // error: `pool` dropped while the QP may still write into it
/// drop(qp);
/// # Ok(()) }
/// ```
pub struct BufferPool<'a> {
    mr: MemoryRegion<'a>,
    chunk: usize,
    id: u64,
    states: Box<[AtomicU8]>,
    /// The length each chunk had when posted, restored when it completes.
    lens: Box<[AtomicU32]>,
    /// Where `take` starts looking.
    hint: AtomicUsize,
}

impl<'a> BufferPool<'a> {
    /// Cuts `mr` into `mr.len() / chunk_size` buffers (a tail shorter than a chunk is unused).
    /// Receives and RDMA READs need `mr` registered with `LOCAL_WRITE`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `chunk_size` is 0, above `u32::MAX`, or larger than the
    /// region, or the region holds more than 2³² chunks.
    pub fn new(mr: MemoryRegion<'a>, chunk_size: usize) -> Result<Self> {
        static NEXT_ID: AtomicU32 = AtomicU32::new(1);
        if chunk_size == 0 || chunk_size > u32::MAX as usize || chunk_size > mr.len() {
            return Err(Error::InvalidInput(format!(
                "a buffer pool over a {}-byte region needs a chunk size of 1..={} bytes, not {chunk_size}",
                mr.len(),
                mr.len().min(u32::MAX as usize)
            )));
        }
        let count = mr.len() / chunk_size;
        if u32::try_from(count).is_err() {
            return Err(Error::InvalidInput(format!("{count} chunks: a pool holds at most 2^32")));
        }
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if id >= 1 << 31 {
            return Err(Error::InvalidInput("more than 2^31 buffer pools were created".into()));
        }
        Ok(BufferPool {
            mr,
            chunk: chunk_size,
            id: u64::from(id),
            states: (0..count).map(|_| AtomicU8::new(FREE)).collect(),
            lens: (0..count).map(|_| AtomicU32::new(0)).collect(),
            hint: AtomicUsize::new(0),
        })
    }

    /// The size of each buffer, in bytes.
    pub fn chunk_size(&self) -> usize {
        self.chunk
    }

    /// The number of buffers.
    pub fn count(&self) -> usize {
        self.states.len()
    }

    /// A free buffer, with length 0; `None` when all are held or in flight.
    pub fn take(&self) -> Option<Buffer<'_>> {
        let n = self.count();
        let start = self.hint.load(Ordering::Relaxed);
        (0..n).map(|i| (start + i) % n).find_map(|index| {
            self.states[index]
                .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
                .ok()?;
            self.hint.store(index + 1, Ordering::Relaxed);
            Some(Buffer { pool: self, index: index as u32, len: 0 })
        })
    }

    /// The buffer that `wc` ended, when `wc` belongs to this pool: with its length set to the
    /// bytes received for a successful receive, else to what it held when posted. It consumes
    /// `wc`'s `wr_id` (a second call returns `None`). Check `wc.status()` for the outcome.
    pub fn complete(&self, wc: &mut WorkCompletion) -> Option<Buffer<'_>> {
        let wr_id = wc.wr_id();
        if wr_id & BUFFER_WR_ID_BIT == 0 || (wr_id >> 32) & 0x7fff_ffff != self.id {
            return None;
        }
        let index = wr_id as u32;
        let state = self.states.get(index as usize)?;
        state.compare_exchange(IN_FLIGHT, HELD, Ordering::Acquire, Ordering::Relaxed).ok()?;
        wc.consume_wr_id();
        let received = wc.is_success() && wc.opcode() == WcOpcode::RECV;
        let len = if received {
            wc.byte_len()
        } else {
            self.lens[index as usize].load(Ordering::Relaxed)
        };
        Some(Buffer { pool: self, index, len: len.min(self.chunk as u32) })
    }

    fn chunk_ptr(&self, index: u32) -> *mut u8 {
        (self.mr.addr() as *mut u8).wrapping_add(index as usize * self.chunk)
    }

    fn lkey(&self) -> LKey {
        self.mr.lkey()
    }
}

impl std::fmt::Debug for BufferPool<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("chunk_size", &self.chunk)
            .field("count", &self.count())
            .field("mr", &self.mr)
            .finish()
    }
}

/// One chunk of a [`BufferPool`], exclusively the program's until posted. It holds `len`
/// meaningful bytes out of [`capacity`](Self::capacity); dropping it frees the chunk.
pub struct Buffer<'p> {
    pool: &'p BufferPool<'p>,
    index: u32,
    len: u32,
}

// SAFETY: the token is the only access to its chunk; the pool is Sync.
unsafe impl Send for Buffer<'_> {}
// SAFETY: `&Buffer` gives only shared reads of its chunk.
unsafe impl Sync for Buffer<'_> {}

impl<'p> Buffer<'p> {
    /// The chunk's index in its pool.
    pub fn index(&self) -> usize {
        self.index as usize
    }

    /// The chunk size in bytes.
    pub fn capacity(&self) -> usize {
        self.pool.chunk
    }

    /// The meaningful bytes: what a send or RDMA WRITE sends, what an RDMA READ fetches, what
    /// a receive received.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the meaningful length.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `len` exceeds the capacity.
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if len > self.capacity() {
            return Err(Error::InvalidInput(format!(
                "{len} bytes exceed the {}-byte buffer",
                self.capacity()
            )));
        }
        self.len = len as u32;
        Ok(())
    }

    /// Copies `data` in and sets the length to it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `data` exceeds the capacity.
    pub fn fill(&mut self, data: &[u8]) -> Result<()> {
        self.set_len(data.len())?;
        self.as_mut_slice().copy_from_slice(data);
        Ok(())
    }

    /// The meaningful bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the token gives exclusive access to its in-bounds chunk, which no WR uses
        // while the token exists; `len <= capacity`.
        unsafe { std::slice::from_raw_parts(self.pool.chunk_ptr(self.index), self.len()) }
    }

    /// The meaningful bytes, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.pool.chunk_ptr(self.index), self.len()) }
    }

    /// The whole chunk, mutably, whatever the length.
    pub fn capacity_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, exclusively, over the whole in-bounds chunk.
        unsafe { std::slice::from_raw_parts_mut(self.pool.chunk_ptr(self.index), self.capacity()) }
    }

    /// An SGE over the first `len` bytes.
    fn sge(&self, len: usize) -> Sge {
        Sge::new(self.pool.chunk_ptr(self.index) as u64, len as u32, self.pool.lkey())
    }

    /// Marks the chunk in flight, remembering `len`, and returns its `wr_id`; the token is
    /// gone until [`BufferPool::complete`] or [`Self::restore`].
    fn launch(self, len: u32) -> (u64, &'p BufferPool<'p>, u32) {
        let (pool, index) = (self.pool, self.index);
        pool.lens[index as usize].store(len, Ordering::Relaxed);
        pool.states[index as usize].store(IN_FLIGHT, Ordering::Release);
        std::mem::forget(self);
        (BUFFER_WR_ID_BIT | pool.id << 32 | u64::from(index), pool, index)
    }

    /// The token again, after a post the provider refused (so the NIC never saw it).
    fn restore(pool: &'p BufferPool<'p>, index: u32, len: u32) -> Self {
        pool.states[index as usize].store(HELD, Ordering::Relaxed);
        Buffer { pool, index, len }
    }
}

impl Drop for Buffer<'_> {
    fn drop(&mut self) {
        self.pool.states[self.index as usize].store(FREE, Ordering::Release);
    }
}

impl std::fmt::Debug for Buffer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer").field("index", &self.index).field("len", &self.len).finish()
    }
}

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

impl<'res> QueuePair<'res, Rts> {
    /// `ibv_post_send(3)`—Posts `buffer`'s [`len`](Buffer::len) bytes with `op`, signaled;
    /// the buffer comes back from [`BufferPool::complete`] with the completion. Bytes that fit
    /// the QP's `max_inline_data` go inline.
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
        let len = buffer.len;
        let sge = [buffer.sge(len as usize)];
        let sges = if len == 0 { &sge[..0] } else { &sge[..] };
        let mut flags = SendFlags::SIGNALED;
        if len <= self.caps().max_inline_data && !matches!(op, SendOp::RdmaRead(_)) {
            flags |= SendFlags::INLINE;
        }
        let (wr_id, pool, index) = buffer.launch(len);
        let mut wr = match op {
            SendOp::Send => SendWr::send(wr_id, sges),
            SendOp::SendWithImm(imm) => SendWr::send_with_imm(wr_id, sges, imm),
            SendOp::RdmaWrite(remote) => SendWr::rdma_write(wr_id, sges, remote),
            SendOp::RdmaWriteWithImm(remote, imm) => {
                SendWr::rdma_write_with_imm(wr_id, sges, remote, imm)
            }
            SendOp::RdmaRead(remote) => SendWr::rdma_read(wr_id, sges, remote),
        }
        .flags(flags);
        // SAFETY: the chunk is ours alone (its token was consumed by `launch`) until
        // `complete` sees this WR's completion (it is signaled); it stays registered while
        // this QP lives because the pool outlives 'res ('p: 'res); `wr_id` is the tier's own.
        unsafe { self.post_send(&mut wr) }
            .map_err(|error| PostError { buffer: Buffer::restore(pool, index, len), error })
    }
}

impl<'res, S: ReceiveReady> QueuePair<'res, S> {
    /// `ibv_post_recv(3)`—Posts `buffer`'s whole capacity as a receive; it comes back from
    /// [`BufferPool::complete`] with the completion, its length set to the bytes received.
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
        let len = buffer.len;
        let sge = [buffer.sge(buffer.capacity())];
        let (wr_id, pool, index) = buffer.launch(0);
        // SAFETY: as in `post_send_buffer`: the chunk is the NIC's alone until `complete`.
        unsafe { self.post_recv(&mut RecvWr::new(wr_id, &sge)) }
            .map_err(|error| PostError { buffer: Buffer::restore(pool, index, len), error })
    }
}
