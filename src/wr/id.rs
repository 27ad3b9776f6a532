//! The two namespaces of a work request's `wr_id`, and how messages show one.
//!
//! The raw tier's (bit 63 clear) are the caller's to choose: the raw posts' contracts keep
//! bit 63 for the buffer tier, whose `wr_id`s each name one flight of one chunk of one pool:
//! bit 63 | pool id (20 bits) | generation (27) | chunk index (16).

use std::fmt;

/// Bit 63: set in the buffer tier's `wr_id`s only.
pub(crate) const BUFFER_BIT: u64 = 1 << 63;
/// The bits of a buffer-tier `wr_id`'s chunk index, its lowest.
pub(crate) const INDEX_BITS: u32 = 16;
/// The bits of a buffer-tier `wr_id`'s generation, above the index.
pub(crate) const GEN_BITS: u32 = 27;
/// The bits of a buffer-tier `wr_id`'s pool id, above the generation.
pub(crate) const POOL_BITS: u32 = 20;

/// A `wr_id` as messages show it: the raw tier's in hex (`wr_id 0x2a`), the buffer tier's as
/// the chunk, pool and flight it names (`buffer 3 of pool 1, flight 7`).
pub(crate) struct Shown(pub(crate) u64);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let id = self.0;
        if id & BUFFER_BIT == 0 {
            return write!(f, "wr_id {id:#x}");
        }
        let field = |shift: u32, bits: u32| (id >> shift) & ((1 << bits) - 1);
        let (index, generation) = (field(0, INDEX_BITS), field(INDEX_BITS, GEN_BITS));
        let pool = field(INDEX_BITS + GEN_BITS, POOL_BITS);
        write!(f, "buffer {index} of pool {pool}, flight {generation}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffer_tier_ids_name_their_chunk_and_pool() {
        let id = BUFFER_BIT | 5 << (INDEX_BITS + GEN_BITS) | 9 << INDEX_BITS | 3;
        assert_eq!(Shown(id).to_string(), "buffer 3 of pool 5, flight 9");
        assert_eq!(Shown(0x2a).to_string(), "wr_id 0x2a");
    }
}
