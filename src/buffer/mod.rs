//! The safe posting tier: buffers that move into a queue pair when posted and come back,
//! with their bytes, in the completion that ends them.
#![allow(unsafe_code)]
//! # Safety
//!
//! A [`BufferPool`] owns a [`MemoryRegion`](crate::MemoryRegion) cut into equal chunks and
//! hands each out as a [`Buffer`] token, the only way to touch that chunk. Posting consumes
//! the token; the pool marks the chunk in flight and tags the work request with a `wr_id`
//! naming pool, chunk and this flight's generation (bit 63 set: the raw tier's contract
//! reserves those ids). Only [`BufferPool::complete`], given the completion carrying exactly
//! that `wr_id`, turns the chunk back into a token, and it consumes the completion's
//! `wr_id` so the same completion cannot serve twice.
//!
//! A [`RecvBufferList`] posts several receives with one call; each is a flight of its own, as
//! a single receive is. A [`SendBufferList`] posts several buffers with one `ibv_post_send`,
//! signaling only the last (perftest's selective signaling). The others are *batched* behind
//! it: their WRs carry no usable `wr_id`, and they are released when the last one's
//! completion arrives, which on a send queue means every WR before it is finished (executed
//! or flushed). The chain is kept as indices into one pool, so a list posts the chunks of one
//! pool only (checked before posting): a completion releases exactly the chunks its own chain
//! launched.
//!
//! So no reference to a chunk exists while the NIC may read or write it. The pool must outlive
//! every QP it lends chunks to (`'p: 'res` on the post methods, with `QueuePair` invariant in
//! `'res`), so the memory stays registered while any QP could still use it.
//!
//! Borrows do not survive `std::mem::forget`, which ends them without destroying what
//! holds them, so two rules do not rest on lifetimes: a pool takes owned memory only (a
//! leaked pool's region is never deregistered nor freed, where a borrowed slice would be
//! freed under it), and each queue notes the pools it was given chunks of (`Lenders`),
//! releasing them when it is destroyed; a pool still noted by a queue when it drops (one
//! leaked, or whose destroy failed) leaks its region instead of freeing it.
//!
//! What the NIC is told is right by construction, so no safe caller can make it reach other
//! memory:
//! - each SGE covers exactly one chunk (at most its capacity) of the pool's region, by the
//!   region's lkey and its address in the region's IOVA space; an inline SGE carries the
//!   chunk's CPU address instead, which the provider copies from during the post;
//! - the pool's region is in the PD of the queue it is posted to (checked before posting:
//!   the lkey would not be valid there), and has `LOCAL_WRITE` where the NIC writes the chunk
//!   (receives, RDMA READ, atomics; checked too);
//! - every send, single or in a list, passes the raw tier's checks
//!   (`QueuePair::check_list`, `post_send_wr`: SGE count, inline size, atomics RC-only with one
//!   8-byte aligned SGE and remote word, UD destination and MTU) before any is posted; a UD send
//!   always has a destination (lists of [`UdSend`]) whose address handle outlives the QP;
//! - the `wr_id`s carry bit 63 and a fresh generation, so no two flights share one.
//!
//! Remote addresses and rkeys are plain values: a wrong one makes the WR complete with an
//! error status, and the peer's NIC checks them against its own registrations.
//!
//! The one residual case: a completion kept *unconsumed* while its chunk is posted again
//! 2^27 times could match the chunk's current flight (the generation has 27 bits).

mod list_op;
mod pool;
mod post;
mod receive;
mod recv_list;
mod send_list;

pub use list_op::{ListOp, ToXrcSrq, UdSend};
pub use pool::{Buffer, BufferPool};
pub use post::PostError;
pub(crate) use receive::{post_receive, ReceiveQueue};
pub use recv_list::RecvBufferList;
pub use send_list::SendBufferList;
