//! The pool, its buffers, and the in-flight bookkeeping.

use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use crate::cq::{Count, Credits};

use crate::access::AccessFlags;
use crate::error::{Error, InvalidInputKind, Result};
use crate::mr::MemoryRegion;
use crate::wc::{WcOpcode, WorkCompletion};
use crate::wr::id::{BUFFER_BIT, GEN_BITS, INDEX_BITS, POOL_BITS};
use crate::wr::LKey;
use crate::wr::Sge;

const FREE: u8 = 0;
const HELD: u8 = 1;
/// Posted with its own `wr_id`; returned by `complete`.
const IN_FLIGHT: u8 = 2;
/// Posted unsignaled in a list; released when the list's last WR completes.
const BATCHED: u8 = 3;

/// The bits below the pool's id in a `wr_id` (laid out in `wr::id`): a flight's generation
/// and chunk index.
const FLIGHT_BITS: u32 = INDEX_BITS + GEN_BITS;
const FLIGHT_MASK: u64 = (1 << FLIGHT_BITS) - 1;
const NO_PREV: u32 = u32::MAX;

/// A registered region cut into `count` chunks of `chunk_size` bytes that circulate between
/// the program and the NIC: [`take`](Self::take) a [`Buffer`], fill it, post it (it moves into
/// the QP), and get it back from [`complete`](Self::complete) with the completion.
///
/// ```compile_fail,E0382
/// # use rdma_verbs::*;
/// # fn f<'a>(qp: &QueuePair<'a, Rts>, pool: &'a BufferPool<'a>) -> Result<()> {
/// let buf = pool.take().unwrap();
/// qp.post_send_buffer(buf, SendOp::Send)?;
/// let first = buf.as_slice()[0]; // error: the buffer moved into the QP: in flight
/// # Ok(()) }
/// ```
///
/// The pool outlives every QP it lends buffers to:
///
/// ```compile_fail,E0597
/// # use rdma_verbs::*;
/// # fn f(pd: &ProtectionDomain<'_>, cq: &CompletionQueue<'_>) -> Result<()> {
/// let qp = pd.create_rc_qp(&QpInitAttr::new(cq))?.into_init(&ToInitAttr::default())?;
/// {
///     let pool = BufferPool::new(pd.register(4096, AccessFlags::LOCAL_WRITE)?, 1024)?;
///     qp.post_recv_buffer(pool.take().unwrap())?;
/// } // error: `pool` dropped while the QP may still write into it
/// drop(qp);
/// # Ok(()) }
/// ```
#[must_use = "the pool's region is deregistered when dropped"]
pub struct BufferPool<'a> {
    /// Dropped by the pool's `Drop`, or leaked (see there).
    mr: ManuallyDrop<MemoryRegion<'a>>,
    chunk: usize,
    /// Whether the region has `LOCAL_WRITE`, which receives, READs and atomics need.
    local_write: bool,
    /// The high bits of every `wr_id` of its chunks: bit 63 and the pool's id.
    wr_ids: u64,
    slots: Box<[Slot]>,
    /// Where `take` starts looking.
    hint: AtomicUsize,
    /// The queues (QPs, SRQs) given chunks of this pool and not destroyed yet
    /// ([`Lenders`](crate::lenders::Lenders)).
    queues: AtomicUsize,
}

/// One chunk's bookkeeping, 32 bytes in one place: a post and a completion each touch one
/// slot (one cache line; four arrays took four), behind one bounds check.
struct Slot {
    /// `FREE`, `HELD`, `IN_FLIGHT` or `BATCHED`.
    state: AtomicU8,
    /// For a batched chunk, the chunk posted before it in the same list.
    prev: AtomicU32,
    /// The length the chunk had when posted, restored when it completes.
    len: AtomicU32,
    /// The `wr_id` of the chunk's current flight.
    flight: AtomicU64,
    /// The credits its current flight took ([`Credits`]), given back when it completes.
    credits: AtomicPtr<Count>,
}
static_assertions::assert_eq_size!(Slot, [u8; 32]);

impl<'a> BufferPool<'a> {
    /// Cuts `mr` into `mr.len() / chunk_size` buffers (a tail shorter than a chunk is unused).
    /// Receives, RDMA READs and atomics need `mr` registered with `LOCAL_WRITE` (the NIC
    /// writes the buffer): without it the posts refuse them. The region must own its memory
    /// (registered with a length or a [`PinnedMemory`](crate::PinnedMemory) value,
    /// [`ProtectionDomain::register`](crate::ProtectionDomain::register)):
    /// a pool and a QP can be leaked (`std::mem::forget`), which ends a borrow without
    /// deregistering, and the NIC could then still write a receive into a borrowed slice
    /// that has been freed; leaked owned memory is never reused.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when the region borrows its memory, when `chunk_size` is 0,
    /// above `u32::MAX` or larger than the region, or the region holds more than 65536
    /// chunks, or when 2^20 pools were created.
    pub fn new(mr: MemoryRegion<'a>, chunk_size: usize) -> Result<Self> {
        static NEXT_ID: AtomicU32 = AtomicU32::new(1);
        if !mr.owns_memory() {
            return Err(Error::invalid(
                InvalidInputKind::BorrowedMemory,
                "a buffer pool needs a region over memory it owns: register a length \
                 (pd.register(len, access)) or a PinnedMemory value (e.g. HugePages), not a \
                 borrowed slice, which the NIC could go on \
                 writing after its borrow ends if the pool and a QP were leaked"
                    .into(),
            ));
        }
        if chunk_size == 0 || chunk_size > u32::MAX as usize || chunk_size > mr.len() {
            return Err(Error::invalid(InvalidInputKind::Size, format!(
                "a buffer pool over a {}-byte region needs a chunk size of 1..={} bytes, not {chunk_size}",
                mr.len(),
                mr.len().min(u32::MAX as usize)
            )));
        }
        let count = mr.len() / chunk_size;
        if count > 1 << INDEX_BITS {
            return Err(Error::invalid(
                InvalidInputKind::Size,
                format!(
                    "{count} chunks: a pool holds at most {} (use larger chunks or several pools)",
                    1 << INDEX_BITS
                ),
            ));
        }
        // Ids are never reused (two live pools sharing one could complete each other's
        // chunks), so the counter stops at the limit instead of wrapping after 2^32 calls.
        let id = NEXT_ID
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |id| {
                (id < 1 << POOL_BITS).then_some(id + 1)
            })
            .map_err(|_| {
                Error::invalid(
                    InvalidInputKind::Size,
                    format!("more than {} buffer pools were created", (1 << POOL_BITS) - 1),
                )
            })?;
        Ok(BufferPool {
            local_write: mr.access().contains(AccessFlags::LOCAL_WRITE),
            mr: ManuallyDrop::new(mr),
            chunk: chunk_size,
            wr_ids: BUFFER_BIT | u64::from(id) << FLIGHT_BITS,
            slots: (0..count)
                .map(|_| Slot {
                    state: AtomicU8::new(FREE),
                    prev: AtomicU32::new(NO_PREV),
                    len: AtomicU32::new(0),
                    flight: AtomicU64::new(0),
                    credits: AtomicPtr::new(std::ptr::null_mut()),
                })
                .collect(),
            hint: AtomicUsize::new(0),
            queues: AtomicUsize::new(0),
        })
    }

    /// The size of each buffer, in bytes.
    #[inline]
    pub fn chunk_size(&self) -> usize {
        self.chunk
    }

    /// The number of buffers.
    #[inline]
    pub fn count(&self) -> usize {
        self.slots.len()
    }

    /// A free buffer, with length 0; `None` when all are held or in flight.
    #[inline]
    pub fn take(&self) -> Option<Buffer<'_>> {
        // The chunk after the one taken last is free when they come back in the order they
        // went (a queue's completions do): tried first, without setting up the search.
        let hint = self.hint.load(Ordering::Relaxed);
        match self.slots.get(hint) {
            Some(slot) if self.claim(slot, hint) => {
                Some(Buffer { pool: self, index: hint as u32, len: 0 })
            }
            _ => self.search(hint),
        }
    }

    /// [`take`](Self::take)'s search when the hinted chunk is not free: from the hint to the
    /// end, then from the start (no division per probe).
    #[inline(never)]
    fn search(&self, hint: usize) -> Option<Buffer<'_>> {
        let start = hint.min(self.count());
        let (head, tail) = self.slots.split_at(start);
        tail.iter().zip(start..).chain(head.iter().zip(0..)).find_map(|(slot, index)| {
            // (`then`, not `then_some`: a token built for a chunk not claimed would free it
            // when dropped.)
            self.claim(slot, index).then(|| Buffer { pool: self, index: index as u32, len: 0 })
        })
    }

    /// Takes the chunk of `slot`, at `index`, if it is free, and moves the hint past it.
    #[inline(always)]
    fn claim(&self, slot: &Slot, index: usize) -> bool {
        if slot.state.compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed).is_err() {
            return false;
        }
        self.hint.store(index + 1, Ordering::Relaxed);
        true
    }

    /// The buffer that `wc` ended, when `wc` belongs to this pool: its length set to the
    /// bytes received for a successful receive, else to what it held when posted. It consumes
    /// `wc`'s `wr_id` (a second call returns `None`). Buffers posted before it in the same
    /// [`SendBufferList`](super::SendBufferList) go back to the pool (free for
    /// [`take`](Self::take)). Their entries of the CQ stop counting as due
    /// ([`CompletionQueue::due`](crate::CompletionQueue::due)) only here: a program that polls
    /// completions of buffers and never completes them has its posts refused once the CQ is
    /// full. Check `wc.status()` for the outcome.
    // Always inlined: called per completion, its `Option` then lives in registers.
    #[inline(always)]
    pub fn complete(&self, wc: &mut WorkCompletion) -> Option<Buffer<'_>> {
        let wr_id = wc.wr_id();
        if wr_id & !FLIGHT_MASK != self.wr_ids {
            return None;
        }
        let index = (wr_id & ((1 << INDEX_BITS) - 1)) as usize;
        let slot = self.slots.get(index)?;
        if slot.flight.load(Ordering::Acquire) != wr_id {
            return None;
        }
        slot.state.compare_exchange(IN_FLIGHT, HELD, Ordering::Acquire, Ordering::Relaxed).ok()?;
        wc.consume_wr_id();
        let batched = self.release_batch(slot.prev.swap(NO_PREV, Ordering::Relaxed));
        // SAFETY: the launch of this flight, and of those batched before it (of the same
        // queue), each took one of these credits, given back only here, once (the state
        // moved on from IN_FLIGHT and BATCHED).
        unsafe { Count::give_back(slot.credits.load(Ordering::Relaxed), 1 + batched) };
        let received = wc.is_success() && wc.opcode() == WcOpcode::RECV;
        // (What a launch stored is within the chunk; what the provider reports is held to it.)
        let len = if received {
            wc.byte_len().min(self.chunk as u32)
        } else {
            slot.len.load(Ordering::Relaxed)
        };
        Some(Buffer { pool: self, index: index as u32, len })
    }

    /// Frees the batched chunks chained from `index`; returns how many.
    #[inline]
    fn release_batch(&self, mut index: u32) -> u32 {
        let mut freed = 0;
        // (`NO_PREV` is past every slot.)
        while let Some(slot) = self.slots.get(index as usize) {
            index = slot.prev.swap(NO_PREV, Ordering::Relaxed);
            slot.state.store(FREE, Ordering::Release);
            freed += 1;
        }
        freed
    }

    #[inline]
    pub(super) fn chunk_ptr(&self, index: u32) -> *mut u8 {
        (self.mr.addr() as *mut u8).wrapping_add(index as usize * self.chunk)
    }

    #[inline]
    fn lkey(&self) -> LKey {
        self.mr.lkey()
    }

    /// Its id, which its buffers' `wr_id`s carry (and messages about them show).
    fn id(&self) -> u64 {
        (self.wr_ids & !BUFFER_BIT) >> FLIGHT_BITS
    }
}

impl Drop for BufferPool<'_> {
    /// Deregisters the region and frees its memory, unless a queue given chunks of it was
    /// leaked (`std::mem::forget`) or could not be destroyed: its work requests may still
    /// name them, so the region then stays registered, and its memory allocated, for good.
    fn drop(&mut self) {
        if self.queues.load(Ordering::Acquire) != 0 {
            log::warn!(
                "leaking a buffer pool's region: a queue holding its chunks was leaked or not \
                 destroyed, and the NIC may still use them"
            );
            return;
        }
        // SAFETY: dropped once, here, and not used again; no queue holds its chunks.
        unsafe { ManuallyDrop::drop(&mut self.mr) };
    }
}

impl std::fmt::Debug for BufferPool<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BufferPool")
            .field("id", &self.id())
            .field("chunk_size", &self.chunk)
            .field("count", &self.count())
            .field("mr", &*self.mr)
            .finish()
    }
}

/// One chunk of a [`BufferPool`], exclusively the program's until posted. It holds `len`
/// meaningful bytes out of [`capacity`](Self::capacity); dropping it frees the chunk.
#[must_use = "the buffer goes back to its pool when dropped"]
pub struct Buffer<'p> {
    pool: &'p BufferPool<'p>,
    /// Below the pool's chunk count: made only by `take` and `complete` from a slot's
    /// position (and kept by a `Flight`), which `slot` relies on.
    index: u32,
    len: u32,
}

// SAFETY: the token is the only access to its chunk; the pool is Sync.
unsafe impl Send for Buffer<'_> {}
// SAFETY: `&Buffer` gives only shared reads of its chunk.
unsafe impl Sync for Buffer<'_> {}

impl<'p> Buffer<'p> {
    /// The chunk's index in its pool.
    #[inline]
    pub fn index(&self) -> usize {
        self.index as usize
    }

    /// The chunk size in bytes.
    #[inline]
    pub fn capacity(&self) -> usize {
        self.pool.chunk
    }

    /// The meaningful bytes: what a send or RDMA WRITE sends, what an RDMA READ fetches, what
    /// a receive received.
    #[inline]
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether it holds no byte.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Sets the meaningful length.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `len` exceeds the capacity.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> Result<()> {
        if len > self.capacity() {
            return Err(Error::invalid(
                InvalidInputKind::BufferTooSmall,
                format!("{len} bytes exceed the {}-byte buffer", self.capacity()),
            ));
        }
        self.len = len as u32;
        Ok(())
    }

    /// Copies `data` in and sets the length to it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `data` exceeds the capacity.
    #[inline]
    pub fn fill(&mut self, data: &[u8]) -> Result<()> {
        self.set_len(data.len())?;
        self.as_mut_slice().copy_from_slice(data);
        Ok(())
    }

    /// The meaningful bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the token gives exclusive access to its in-bounds chunk, which no WR uses
        // while the token exists; `len <= capacity`.
        unsafe { std::slice::from_raw_parts(self.pool.chunk_ptr(self.index), self.len()) }
    }

    /// The meaningful bytes, mutably.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, exclusively.
        unsafe { std::slice::from_raw_parts_mut(self.pool.chunk_ptr(self.index), self.len()) }
    }

    /// The whole chunk, mutably, whatever the length.
    #[inline]
    pub fn capacity_mut(&mut self) -> &mut [u8] {
        // SAFETY: as `as_slice`, exclusively, over the whole in-bounds chunk.
        unsafe { std::slice::from_raw_parts_mut(self.pool.chunk_ptr(self.index), self.capacity()) }
    }

    /// An SGE over the first `len` bytes: by the chunk's CPU address when `inline` (the
    /// provider copies the bytes through it during the post), else by its address in the
    /// region's IOVA space, which is how the NIC addresses the region (they differ for a
    /// region registered at a chosen IOVA).
    #[inline]
    pub(crate) fn sge(&self, len: u32, inline: bool) -> Sge {
        let addr = if inline {
            self.pool.chunk_ptr(self.index) as u64
        } else {
            self.pool.mr.iova() + u64::from(self.index) * self.pool.chunk as u64
        };
        Sge::new(addr, len, self.pool.lkey())
    }

    /// The PD its pool's region is registered in.
    #[inline]
    pub(crate) fn pd_raw(&self) -> *mut crate::sys::ibv_pd {
        self.pool.mr.pd().as_raw()
    }

    /// Its pool's count of the queues holding its chunks, which a queue given this buffer
    /// notes itself in ([`Lenders::note`](crate::lenders::Lenders::note)).
    #[inline]
    pub(crate) fn pool_queues(&self) -> &'p AtomicUsize {
        &self.pool.queues
    }

    /// Its pool's id: two buffers with the same id are chunks of one pool.
    #[inline]
    pub(crate) fn pool_id(&self) -> u64 {
        self.pool.wr_ids
    }

    /// Whether its pool's region lets the NIC write it (`LOCAL_WRITE`).
    #[inline]
    pub(crate) fn local_write(&self) -> bool {
        self.pool.local_write
    }

    /// The `wr_id` of the chunk's next flight: the one [`launch`](Self::launch) gives it
    /// (the token is the only way to launch the chunk, so it holds until then).
    #[inline]
    pub(crate) fn next_wr_id(&self) -> u64 {
        let generation = (self.slot().flight.load(Ordering::Relaxed) >> INDEX_BITS) + 1;
        self.pool.wr_ids
            | (generation & ((1 << GEN_BITS) - 1)) << INDEX_BITS
            | u64::from(self.index)
    }

    /// Its chunk's bookkeeping.
    #[inline]
    fn slot(&self) -> &'p Slot {
        debug_assert!((self.index as usize) < self.pool.slots.len());
        // SAFETY: a buffer's index is below its pool's slot count (see `index`).
        unsafe { self.pool.slots.get_unchecked(self.index as usize) }
    }

    /// Hands the chunk to the NIC with its [next `wr_id`](Self::next_wr_id), in flight
    /// (completed by that `wr_id`). The token is gone until then, or [`Flight::restore`].
    #[inline]
    pub(crate) fn launch(self, len: u32, credits: &Credits) -> Flight<'p> {
        let wr_id = self.mark_launched(len, false, NO_PREV, credits);
        let (pool, index) = (self.pool, self.index);
        std::mem::forget(self);
        Flight { pool, index, len, wr_id }
    }

    /// Marks the chunk handed to the NIC with its [next `wr_id`](Self::next_wr_id), which
    /// it returns, as [`launch`](Self::launch) does, for a
    /// [`SendBufferList`](super::SendBufferList) that still holds the token: in flight, or
    /// `batched` behind chunk `before` of this pool (`NO_PREV` for none), which the completion
    /// of this one releases (and so on down the chain). The list then forgets the token once
    /// the provider took the WR, or [`unmark`](Self::unmark)s it. `len` is within the chunk
    /// (`complete` gives it back). The poster took one of `credits` for it, which `complete`
    /// gives back.
    #[inline]
    pub(crate) fn mark_launched(
        &self,
        len: u32,
        batched: bool,
        before: u32,
        credits: &Credits,
    ) -> u64 {
        debug_assert!(len as usize <= self.pool.chunk);
        let (slot, wr_id) = (self.slot(), self.next_wr_id());
        slot.len.store(len, Ordering::Relaxed);
        slot.credits.store(credits.as_ptr().cast_mut(), Ordering::Relaxed);
        slot.flight.store(wr_id, Ordering::Relaxed);
        slot.prev.store(before, Ordering::Relaxed);
        slot.state.store(if batched { BATCHED } else { IN_FLIGHT }, Ordering::Release);
        wr_id
    }

    /// Undoes [`mark_launched`](Self::mark_launched): the provider refused the WR (the NIC
    /// never saw it), the token is the program's again.
    #[inline]
    pub(crate) fn unmark(&self) {
        let slot = self.slot();
        slot.prev.store(NO_PREV, Ordering::Relaxed);
        slot.state.store(HELD, Ordering::Relaxed);
    }

    /// The chunk's index in its pool, as a chain link (`mark_launched`'s `before`).
    #[inline]
    pub(crate) fn link(&self) -> u32 {
        self.index
    }
}

/// No chunk before: the head of a chain (`Buffer::mark_launched`).
pub(crate) const UNCHAINED: u32 = NO_PREV;

impl Drop for Buffer<'_> {
    #[inline]
    fn drop(&mut self) {
        self.slot().state.store(FREE, Ordering::Release);
    }
}

impl std::fmt::Debug for Buffer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buffer")
            .field("pool", &self.pool.id())
            .field("index", &self.index)
            .field("len", &self.len)
            .finish()
    }
}

/// A chunk handed to the NIC: what the post needs, and the way back if the post is refused.
pub(crate) struct Flight<'p> {
    pool: &'p BufferPool<'p>,
    index: u32,
    len: u32,
    /// The WR's `wr_id`.
    pub(crate) wr_id: u64,
}

impl<'p> Flight<'p> {
    /// The token again, after the provider refused the WR (the NIC never saw it).
    pub(crate) fn restore(self) -> Buffer<'p> {
        let buffer = Buffer { pool: self.pool, index: self.index, len: self.len };
        buffer.unmark();
        buffer
    }
}
