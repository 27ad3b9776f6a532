//! The transport's timers and retry counts (`ibv_modify_qp(3)`), as types that hold only
//! valid values: [`AckTimeout`], [`RetryCount`], [`RnrRetry`], [`RnrTimer`]. Waiting forever
//! is spelled by name ([`AckTimeout::INFINITE`], [`RnrRetry::INFINITE`]), never by a number:
//! the constructors refuse the codes that mean "forever", saying which constant to use.

use std::time::Duration;

use crate::error::{Error, InvalidInputKind, Result};

/// Declares the newtype over a QP attribute's code of `bits` bits: the struct, `from_code`
/// and `get` (documented as `get_doc`).
macro_rules! code {
    ($(#[$meta:meta])* pub struct $name:ident, bits: $bits:literal, get: $get_doc:literal) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub struct $name(u8);

        impl $name {
            /// A code as the device reports it (`ibv_query_qp(3)`): its low bits.
            pub(crate) const fn from_code(code: u8) -> $name {
                $name(code & ((1 << $bits) - 1))
            }

            #[doc = $get_doc]
            #[must_use]
            pub const fn get(self) -> u8 {
                self.0
            }
        }
    };
}

/// The code that means "forever" in a field, and what to say instead.
struct Forever {
    code: u8,
    /// What the code means ("never time out").
    meaning: &'static str,
    /// The constant that says it.
    constant: &'static str,
    /// What the constructor takes instead.
    takes: &'static str,
}

/// `value` when it is at most `max` and not `forever`'s code; else an error naming the field
/// `name` (and the constant that says "forever").
fn check_code(name: &str, value: u8, max: u8, forever: Option<Forever>) -> Result<u8> {
    let message = match forever {
        Some(f) if f.code == value => {
            format!("{name} {value} means {}: use {} for that; {}", f.meaning, f.constant, f.takes)
        }
        _ if value <= max => return Ok(value),
        f => format!(
            "{name} {value} is out of range: at most {max}{} (ibv_modify_qp(3))",
            f.map_or_else(String::new, |f| format!(", or {}", f.constant))
        ),
    };
    Err(Error::invalid(InvalidInputKind::Range, message))
}

code! {
    /// The local ACK timeout of an RC QP (`timeout` of `ibv_modify_qp(3)`, IBA 9.7.6.1.3): how
    /// long a send waits for its ACK before it is retried, **4.096 µs × 2^n** for an exponent n
    /// of 1–31 (17 ≈ 0.54 s, the default of [`ToRtsAttr::new`]; 31 ≈ 2.4 hours). The code 0 means
    /// "never time out": only [`AckTimeout::INFINITE`] says that.
    ///
    /// ```
    /// # use rdma_verbs::AckTimeout;
    /// # fn main() -> rdma_verbs::Result<()> {
    /// let t = AckTimeout::new(14)?;
    /// assert_eq!(t.duration(), Some(std::time::Duration::from_nanos(4096 << 14)));
    /// assert!(AckTimeout::new(0).is_err()); // "forever" has a name:
    /// assert_eq!(AckTimeout::INFINITE.duration(), None);
    /// # Ok(()) }
    /// ```
    ///
    /// [`ToRtsAttr::new`]: crate::ToRtsAttr::new
    pub struct AckTimeout, bits: 5,
    get: "The code `ibv_modify_qp` takes: the exponent, or 0 for [`AckTimeout::INFINITE`]."
}

impl AckTimeout {
    /// Never time out (code 0): a send to a peer that vanished waits forever.
    pub const INFINITE: AckTimeout = AckTimeout(0);

    /// The largest exponent, 31 (4.096 µs × 2^31 ≈ 2.4 hours).
    pub const MAX_EXPONENT: u8 = 31;

    /// The timeout 4.096 µs × 2^`exponent`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] ([`InvalidInputKind::Range`]) for 0, which would mean "never
    /// time out" (say [`AckTimeout::INFINITE`] for that), and above 31.
    pub fn new(exponent: u8) -> Result<AckTimeout> {
        let forever = Forever {
            code: 0,
            meaning: "never time out",
            constant: "AckTimeout::INFINITE",
            takes: "AckTimeout::new takes the exponent n of 4.096 µs × 2^n, 1–31",
        };
        check_code("timeout", exponent, Self::MAX_EXPONENT, Some(forever)).map(AckTimeout)
    }

    /// 4.096 µs × 2^n, or `None` for [`AckTimeout::INFINITE`].
    #[must_use]
    pub fn duration(self) -> Option<Duration> {
        (self.0 != 0).then(|| Duration::from_nanos(4096 << self.0))
    }
}

code! {
    /// How many times an RC QP retries a send that timed out or was NAKed for a sequence error
    /// before it completes with `RETRY_EXC_ERR` (`retry_cnt` of `ibv_modify_qp(3)`,
    /// `retry_count` of `rdma_connect(3)`): 0–7. rxe never counts 7 down (its completer treats
    /// 7 as "retry forever"), so 7 may never end there; the defaults use 6.
    pub struct RetryCount, bits: 3, get: "The count."
}

impl RetryCount {
    /// The largest count, 7.
    pub const MAX: u8 = 7;

    /// `count` retries.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] ([`InvalidInputKind::Range`]) above 7 (the field has 3 bits).
    pub fn new(count: u8) -> Result<RetryCount> {
        check_code("retry_cnt", count, Self::MAX, None).map(RetryCount)
    }
}

code! {
    /// How many times an RC QP resends after a receiver-not-ready NAK (the peer had no receive
    /// posted) before it completes with `RNR_RETRY_EXC_ERR` (`rnr_retry` of `ibv_modify_qp(3)`,
    /// `rnr_retry_count` of `rdma_connect(3)`, IBA 9.7.5.2.8): 0–6, or
    /// [`RnrRetry::INFINITE`] (code 7), which retries for as long as the peer posts nothing.
    pub struct RnrRetry, bits: 3,
    get: "The code `ibv_modify_qp` takes: the count, or 7 for [`RnrRetry::INFINITE`]."
}

impl RnrRetry {
    /// Retry forever (code 7) on every provider.
    pub const INFINITE: RnrRetry = RnrRetry(7);

    /// The largest finite count, 6.
    pub const MAX: u8 = 6;

    /// `count` retries.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] ([`InvalidInputKind::Range`]) for 7, which would mean "retry
    /// forever" (say [`RnrRetry::INFINITE`] for that), and above.
    pub fn new(count: u8) -> Result<RnrRetry> {
        let forever = Forever {
            code: 7,
            meaning: "retry forever",
            constant: "RnrRetry::INFINITE",
            takes: "RnrRetry::new takes a count of 0–6",
        };
        check_code("rnr_retry", count, Self::MAX, Some(forever)).map(RnrRetry)
    }

    /// The count, or `None` for [`RnrRetry::INFINITE`].
    #[must_use]
    pub const fn count(self) -> Option<u8> {
        if self.0 == 7 {
            None
        } else {
            Some(self.0)
        }
    }
}

code! {
    /// The RNR NAK timer of an RC receiver (`min_rnr_timer` of `ibv_modify_qp(3)`, IBA Table 45):
    /// how long the peer is told to wait before resending when no receive was posted. A code of
    /// 0–31 from a table (`IB_RNR_TIMER_*` in the kernel's `include/rdma/ib_verbs.h`): 1 =
    /// 0.01 ms … 12 = 0.64 ms (ibv_rc_pingpong's) … 31 = 491.52 ms (the default of
    /// [`ToRtrAttr::to_endpoint`]), and 0 = 655.36 ms, the longest. Every code is finite.
    ///
    /// [`ToRtrAttr::to_endpoint`]: crate::ToRtrAttr::to_endpoint
    pub struct RnrTimer, bits: 5, get: "The code `ibv_modify_qp` takes."
}

/// The RNR NAK timer of each code, in µs (IBA Table 45; `ibv_modify_qp(3)`).
const RNR_TIMER_MICROS: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

impl RnrTimer {
    /// The defaults' timer (`ToRtrAttr::to_endpoint`, and a DCT's RTR): code 31, 491.52 ms,
    /// which with 6 RNR retries gives a receiver ≈ 2.9 s to post.
    pub(crate) const DEFAULT: RnrTimer = RnrTimer(31);

    /// The largest code, 31 (491.52 ms; code 0 is longer, 655.36 ms).
    pub const MAX: u8 = 31;

    /// Timer code `code` (see the table above).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] ([`InvalidInputKind::Range`]) above 31.
    pub fn new(code: u8) -> Result<RnrTimer> {
        check_code("min_rnr_timer", code, Self::MAX, None).map(RnrTimer)
    }

    /// How long the code means.
    #[must_use]
    pub fn duration(self) -> Duration {
        Duration::from_micros(u64::from(RNR_TIMER_MICROS[usize::from(self.0)]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forever_is_refused_as_a_number_and_named_by_a_constant() {
        let e = AckTimeout::new(0).unwrap_err();
        assert_eq!(e.invalid_input_kind(), Some(InvalidInputKind::Range));
        assert_eq!(
            e.to_string(),
            "timeout 0 means never time out: use AckTimeout::INFINITE for that; \
             AckTimeout::new takes the exponent n of 4.096 µs × 2^n, 1–31"
        );
        let e = RnrRetry::new(7).unwrap_err();
        assert_eq!(e.invalid_input_kind(), Some(InvalidInputKind::Range));
        assert!(e
            .to_string()
            .starts_with("rnr_retry 7 means retry forever: use RnrRetry::INFINITE"));
        assert_eq!((AckTimeout::INFINITE.get(), AckTimeout::INFINITE.duration()), (0, None));
        assert_eq!((RnrRetry::INFINITE.get(), RnrRetry::INFINITE.count()), (7, None));
    }

    #[test]
    fn out_of_range_codes_are_refused_naming_the_field() {
        let cases = [
            (
                AckTimeout::new(32).map(AckTimeout::get),
                "timeout 32 is out of range: at most 31, or AckTimeout::INFINITE",
            ),
            (RetryCount::new(8).map(RetryCount::get), "retry_cnt 8 is out of range: at most 7"),
            (
                RnrRetry::new(8).map(RnrRetry::get),
                "rnr_retry 8 is out of range: at most 6, or RnrRetry::INFINITE",
            ),
            (RnrTimer::new(32).map(RnrTimer::get), "min_rnr_timer 32 is out of range: at most 31"),
        ];
        for (got, text) in cases {
            let e = got.unwrap_err();
            assert_eq!(e.invalid_input_kind(), Some(InvalidInputKind::Range), "{e}");
            assert_eq!(e.to_string(), format!("{text} (ibv_modify_qp(3))"));
        }
    }

    #[test]
    fn every_valid_code_keeps_its_value_and_unit() {
        for n in 1..=31 {
            let t = AckTimeout::new(n).unwrap();
            assert_eq!((t.get(), t.duration()), (n, Some(Duration::from_nanos(4096 << n))));
        }
        assert_eq!(AckTimeout::new(14).unwrap().duration().unwrap().as_micros(), 67_108);
        for n in 0..=7 {
            assert_eq!(RetryCount::new(n).unwrap().get(), n);
        }
        for n in 0..=6 {
            assert_eq!(RnrRetry::new(n).unwrap().count(), Some(n));
        }
        let timers = [0, 1, 12, 31].map(|c| RnrTimer::new(c).unwrap().duration().as_micros());
        assert_eq!(timers, [655_360, 10, 640, 491_520]);
    }
}
