//! Numbers as rdma-core's and perftest's C tools read their options: `strtol(3)` with base 0,
//! so decimal, `0x` hex or `0` octal (`ibv_rc_pingpong -p 0x4853 -g 03`). A Rust tool that
//! takes those tools' command lines reads the same with [`parse`], clap's `value_parser`
//! included:
//!
//! ```
//! # use rdma_verbs::c_number;
//! #[derive(clap::Parser)]
//! struct Args {
//!     /// Port of the RDMA device
//!     #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = c_number::parse::<u8>)]
//!     ib_port: u8,
//! }
//! ```

/// A number as the C tools read their options (`strtol` with base 0): decimal, `0x` hex or
/// `0` octal (`-s 0x10000`, `-x 03`), after white space and a sign, here within `T`'s range.
///
/// # Errors
///
/// A message naming `s` and what it should be: not a number in those bases, or out of `T`'s
/// range (a negative number included; `-0` is 0).
pub fn parse<T: CNumber>(s: &str) -> Result<T, String> {
    let t = s.trim_start();
    let (negative, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (radix, digits) = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => (16, hex),
        None if t.len() > 1 && t.starts_with('0') => (8, &t[1..]),
        None => (10, t),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(format!("{s:?} is not a number (decimal, 0x hex or 0 octal)"));
    }
    // (Digits past u128 are past `T` too: out of range, as strtol clamps them.)
    u128::from_str_radix(digits, radix)
        .ok()
        .filter(|&value| !negative || value == 0)
        .and_then(|value| T::try_from(value).ok())
        .ok_or_else(|| format!("{s:?} is out of range: {}..={}", T::MIN, T::MAX))
}

/// The integer types [`parse`] reads: `u8`, `u16`, `u32` and `u64`.
pub trait CNumber: TryFrom<u128> + Clone + Send + Sync + 'static {
    /// The smallest value.
    const MIN: u128 = 0;
    /// The largest value.
    const MAX: u128;
}

impl CNumber for u8 {
    const MAX: u128 = u8::MAX as u128;
}
impl CNumber for u16 {
    const MAX: u128 = u16::MAX as u128;
}
impl CNumber for u32 {
    const MAX: u128 = u32::MAX as u128;
}
impl CNumber for u64 {
    const MAX: u128 = u64::MAX as u128;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_hex_and_octal_as_strtol_reads_them() {
        for (arg, value) in [("42", 42), ("0x2a", 42), ("0X2A", 42), ("052", 42), (" +0377", 255)] {
            assert_eq!(parse::<u8>(arg), Ok(value), "{arg}");
        }
        assert_eq!(parse::<u8>("-0"), Ok(0));
        assert_eq!(parse::<u8>("0"), Ok(0));
        assert_eq!(parse::<u64>("0xffffffffffffffff"), Ok(u64::MAX));
    }

    #[test]
    fn what_is_not_a_number_of_the_type_is_refused_saying_why() {
        for (arg, says) in [
            ("", "is not a number"),
            ("0x", "is not a number"),
            ("12ab", "is not a number"),
            ("09", "is not a number"),
            ("-1", "is out of range: 0..=255"),
            ("256", "is out of range: 0..=255"),
            ("0x100", "is out of range: 0..=255"),
            ("999999999999999999999999999999999999999999", "is out of range: 0..=255"),
        ] {
            let e = parse::<u8>(arg).unwrap_err();
            assert!(e.starts_with(&format!("{arg:?} ")) && e.contains(says), "{arg}: {e}");
        }
    }
}
