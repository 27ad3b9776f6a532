//! Whether a send work request fits the queue pair that posts it, in one addition.
//!
//! A WR's [`Demand`] is worked out once, when the WR is built (and again when its flags or
//! destination change): how many SGEs, how many bytes, inline or not, which class of
//! operation, addressed or not. A QP's [`Slack`] is worked out once, when it is created or
//! changes state: how much of each it allows. A post then tests `demand + slack` against the
//! guard bits, instead of reading the WR's fields and the QP's limits one by one: the checks
//! the soundness proof needs (SGE count against `max_send_sge`, inline bytes against
//! `max_inline_data`, RDMA READ and atomics only where they can complete, a UD send
//! addressed and within the path MTU, an extended-path operation only where its builder
//! exists) cost the post the same five instructions however many there are, and a list's
//! demand (the union of its WRs', a bound of their field-wise maximum) is tested once for
//! the whole list.
//!
//! The test is conservative: when it passes, every exact check of
//! `QueuePair::check_send_fully` passes and the WR can be built by the fast extended batch;
//! when it fails, the exact checks run (and may still accept the WR, e.g. a size past a
//! field's range). Rare shapes (memory-window binds, misshapen atomics, atomics on the legacy
//! path) always take the exact checks.
//!
//! # The word
//!
//! Each field holds a value of `width` bits with a guard bit above it. A demand's field is
//! the WR's value, saturated at the field's maximum `M`; a slack's field is `M - limit`
//! (`limit` at most `M - 1`, so a saturated demand never fits), or 0 for "no limit". Their
//! sum stays below `2 M + 1`, so nothing carries into the next field, and the guard bit is set
//! exactly when `demand > limit`. One-bit fields are classes: demand 1 when the WR is of the
//! class, slack 1 when the QP forbids it.

/// One field of the word: `width` value bits from bit `shift`, the guard bit above them.
#[derive(Clone, Copy)]
pub(crate) struct Field {
    shift: u32,
    width: u32,
}

impl Field {
    const fn after(previous: Field, width: u32) -> Field {
        Field { shift: previous.shift + previous.width + 1, width }
    }

    const fn max(self) -> u64 {
        (1 << self.width) - 1
    }

    const fn guard(self) -> u64 {
        1 << (self.shift + self.width)
    }

    const fn mask(self) -> u64 {
        self.max() << self.shift
    }

    fn get(self, word: u64) -> u64 {
        (word & self.mask()) >> self.shift
    }

    fn with(self, word: u64, value: u64) -> u64 {
        (word & !self.mask()) | (value.min(self.max()) << self.shift)
    }
}

/// The number of SGEs.
pub(crate) const SGES: Field = Field { shift: 0, width: 8 };
/// The bytes copied into the WQE: the WR's length when it is `INLINE`, else 0.
pub(crate) const INLINE: Field = Field::after(SGES, 16);
/// The bytes the WR carries (a UD message's are at most the path MTU).
pub(crate) const LEN: Field = Field::after(INLINE, 16);
/// SEND, SEND with immediate.
pub(crate) const SEND: Field = Field::after(LEN, 1);
/// RDMA WRITE, with or without immediate.
pub(crate) const WRITE: Field = Field::after(SEND, 1);
/// RDMA READ.
pub(crate) const READ: Field = Field::after(WRITE, 1);
/// Compare-and-swap, fetch-and-add, of the shape they need (one 8-byte SGE, both addresses
/// 8-byte aligned).
pub(crate) const ATOMIC: Field = Field::after(READ, 1);
/// Local invalidate, SEND with invalidate.
pub(crate) const INV: Field = Field::after(ATOMIC, 1);
/// Not a SEND addressed with `SendWr::to` (a UD QP posts only those).
pub(crate) const UNADDRESSED: Field = Field::after(INV, 1);
/// Inline data from several buffers (`ibv_wr_set_inline_data_list`).
pub(crate) const INLINE_LIST: Field = Field::after(UNADDRESSED, 1);
/// Inline data from more buffers than an extended batch takes (`INLINE_BUFS`).
pub(crate) const INLINE_MANY: Field = Field::after(INLINE_LIST, 1);
/// Anything else: always the exact checks (binds, misshapen atomics, unknown opcodes).
pub(crate) const SLOW: Field = Field::after(INLINE_MANY, 1);

const FIELDS: [Field; 12] = [
    SGES,
    INLINE,
    LEN,
    SEND,
    WRITE,
    READ,
    ATOMIC,
    INV,
    UNADDRESSED,
    INLINE_LIST,
    INLINE_MANY,
    SLOW,
];

const GUARDS: u64 = {
    let mut guards = 0;
    let mut i = 0;
    while i < FIELDS.len() {
        guards |= FIELDS[i].guard();
        i += 1;
    }
    guards
};

/// The value bits of the one-bit fields (the classes), whose maximum is their OR.
const CLASSES: u64 = {
    let mut classes = 0;
    let mut i = 0;
    while i < FIELDS.len() {
        if FIELDS[i].width == 1 {
            classes |= FIELDS[i].mask();
        }
        i += 1;
    }
    classes
};

/// The wider fields, whose maximum is taken one by one.
const NUMBERS: [Field; 3] = [SGES, INLINE, LEN];

// Every field, with its guard, fits the word.
const _: () = assert!(SLOW.shift + SLOW.width < 64);
// Every field is a class or one of `NUMBERS`.
const _: () = {
    let mut all = 0;
    let mut i = 0;
    while i < FIELDS.len() {
        all |= FIELDS[i].mask();
        i += 1;
    }
    assert!(all == CLASSES | SGES.mask() | INLINE.mask() | LEN.mask());
};

/// What a send WR asks of the QP that posts it (see the module notes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Demand(u64);

impl Demand {
    /// The demand of an empty list: none of a WR, but the exact path (which posts nothing).
    pub(crate) const EMPTY: Demand = Demand(1 << SLOW.shift);

    /// The demand with each field of `values` set to its value (saturated; the fields are
    /// distinct, or classes set to 1).
    #[inline]
    pub(crate) fn of<const N: usize>(values: [(Field, u64); N]) -> Demand {
        Demand(values.iter().fold(0, |word, &(f, v)| word | v.min(f.max()) << f.shift))
    }

    /// This demand with `field` set to `value` (saturated).
    #[cfg(test)]
    #[must_use]
    pub(crate) fn with(self, field: Field, value: u64) -> Demand {
        Demand(field.with(self.0, value))
    }

    /// The field-wise maximum of two demands: what a list of both asks.
    #[must_use]
    #[inline]
    pub(crate) fn max(self, other: Demand) -> Demand {
        let classes = (self.0 | other.0) & CLASSES;
        Demand(
            NUMBERS
                .iter()
                .fold(classes, |word, f| word | f.get(self.0).max(f.get(other.0)) << f.shift),
        )
    }

    /// A bound of the field-wise maximum in one instruction, the bitwise OR: exact for the
    /// classes, and each wider field holds at least the larger value (exactly it when one
    /// value's bits cover the other's, as for equal lengths) without leaving its bits. So when
    /// the union of a list's demands fits, their maximum does; when it does not (lengths
    /// whose bits differ, e.g. 200 and 60 inline bytes against a limit of 220), only
    /// [`Demand::max`] can say.
    #[must_use]
    #[inline(always)]
    pub(crate) fn union(self, other: Demand) -> Demand {
        Demand(self.0 | other.0)
    }

    /// Whether the demand fits a QP of `slack`: every exact check passes.
    #[inline(always)]
    pub(crate) fn fits(self, slack: Slack) -> bool {
        self.0.wrapping_add(slack.0) & GUARDS == 0
    }
}

/// What a QP allows each field of a [`Demand`] (see the module notes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Slack(u64);

impl Slack {
    /// No limit on anything: the slack every limit narrows.
    pub(crate) const ANY: Slack = Slack(0);

    /// At most `limit` in `field` (of the wider fields).
    #[must_use]
    pub(crate) fn at_most(self, field: Field, limit: u64) -> Slack {
        let slack = field.max() - limit.min(field.max() - 1);
        Slack(field.with(self.0, field.get(self.0).max(slack)))
    }

    /// The class `field` allowed or not.
    #[must_use]
    pub(crate) fn allow(self, field: Field, allowed: bool) -> Slack {
        if allowed {
            self
        } else {
            Slack(field.with(self.0, 1))
        }
    }

    /// [`SLOW`] forbidden, as every QP has it.
    #[must_use]
    pub(crate) fn exact(self) -> Slack {
        self.allow(SLOW, false)
    }

    /// Every class forbidden: a QP that posts only through the exact checks (every WR is of
    /// one class).
    #[must_use]
    pub(crate) fn forbid_all(self) -> Slack {
        [SEND, WRITE, READ, ATOMIC, INV, SLOW].into_iter().fold(self, |s, f| s.allow(f, false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_fits_up_to_its_limit_and_a_saturated_value_never() {
        let slack = Slack::ANY.at_most(SGES, 4).at_most(INLINE, 64);
        let demand = |sges, inline| Demand::default().with(SGES, sges).with(INLINE, inline);
        assert!(demand(4, 64).fits(slack));
        assert!(!demand(5, 64).fits(slack));
        assert!(!demand(4, 65).fits(slack));
        assert!(demand(0, 0).fits(slack));
        // Limits past the field's range cap at one below its maximum; values saturate at it.
        let huge = Slack::ANY.at_most(LEN, u64::MAX);
        assert!(Demand::default().with(LEN, LEN.max() - 1).fits(huge));
        assert!(!Demand::default().with(LEN, u64::MAX).fits(huge));
        // No limit: anything fits.
        assert!(Demand::default().with(LEN, u64::MAX).fits(Slack::ANY));
    }

    #[test]
    fn a_class_fits_unless_forbidden_and_slow_never() {
        let read = Demand::default().with(READ, 1);
        assert!(read.fits(Slack::ANY.allow(READ, true)));
        assert!(!read.fits(Slack::ANY.allow(READ, false)));
        assert!(read.fits(Slack::ANY.allow(WRITE, false)), "another class's limit");
        // Every QP's slack forbids SLOW: an empty list, a bind, never fit.
        assert!(!Demand::EMPTY.fits(Slack::ANY.exact()));
        assert!(!Demand::default().with(SLOW, 1).fits(Slack::ANY.exact()));
        assert!(Demand::default().with(SEND, 1).fits(Slack::ANY.exact()));
        assert!(!Demand::default().with(SEND, 1).fits(Slack::ANY.forbid_all()));
    }

    fn values() -> impl proptest::strategy::Strategy<Value = [u64; 12]> {
        use proptest::prelude::*;
        // Small values (classes 0 and 1) and values past each field's range (saturating).
        proptest::array::uniform12(prop_oneof![0u64..3, 0u64..70_000])
    }

    proptest::proptest! {
        #[test]
        fn max_is_the_maximum_of_every_field(a in values(), b in values()) {
            let demand = |values: [u64; 12]| {
                FIELDS.iter().zip(values).fold(Demand::default(), |d, (&f, v)| d.with(f, v))
            };
            let (a, b) = (demand(a), demand(b));
            let expected = FIELDS.iter().fold(Demand::default(), |d, &f| {
                d.with(f, f.get(a.0).max(f.get(b.0)))
            });
            proptest::prop_assert_eq!(a.max(b), expected);
        }
    }

    fn slacks() -> impl proptest::strategy::Strategy<Value = Slack> {
        use proptest::prelude::*;
        (0u64..300, 0u64..300, 0u64..70_000, proptest::array::uniform9(any::<bool>())).prop_map(
            |(sges, inline, len, allowed)| {
                let classes =
                    [SEND, WRITE, READ, ATOMIC, INV, UNADDRESSED, INLINE_LIST, INLINE_MANY];
                let slack =
                    Slack::ANY.at_most(SGES, sges).at_most(INLINE, inline).at_most(LEN, len);
                classes.iter().zip(allowed).fold(slack, |s, (&f, a)| s.allow(f, a)).exact()
            },
        )
    }

    proptest::proptest! {
        #[test]
        fn a_union_bounds_the_maximum_and_fits_only_where_it_does(
            a in values(), b in values(), slack in slacks()
        ) {
            let demand = |values: [u64; 12]| {
                FIELDS.iter().zip(values).fold(Demand::default(), |d, (&f, v)| d.with(f, v))
            };
            let (a, b) = (demand(a), demand(b));
            let (union, max) = (a.union(b), a.max(b));
            for f in FIELDS {
                proptest::prop_assert!(f.get(union.0) >= f.get(max.0));
            }
            proptest::prop_assert!(!union.fits(slack) || max.fits(slack));
        }
    }

    #[test]
    fn a_lists_demand_is_the_field_wise_maximum() {
        let a = Demand::default().with(SGES, 3).with(LEN, 10).with(WRITE, 1);
        let b = Demand::default().with(SGES, 1).with(LEN, 4000).with(READ, 1);
        let both = a.max(b);
        assert_eq!(
            both,
            Demand::default().with(SGES, 3).with(LEN, 4000).with(WRITE, 1).with(READ, 1)
        );
        let slack = Slack::ANY.at_most(SGES, 3).at_most(LEN, 4096);
        assert!(both.fits(slack));
        assert!(!both.fits(slack.allow(READ, false)));
        assert!(!both.fits(slack.at_most(SGES, 2)));
    }
}
