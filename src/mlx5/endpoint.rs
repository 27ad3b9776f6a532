//! The DC endpoint token: what a DCT's owner hands to initiators.

use std::fmt;
use std::str::FromStr;

use crate::endpoint::{Lid, Qpn};
use crate::gid::Gid;
use crate::number::number;

use super::context::DcVersion;

number! {
    /// A DC access key (`dct_access_key`): a DCT accepts only work requests that carry it.
    /// Shown as 16 hex digits.
    #[derive(Default)]
    pub struct DcKey(u64), shown: "{:#018x}"
}

/// Everything an initiator needs to reach a DCT: its port's GID and LID, its DCT number, its
/// DC access key, and the [`DcVersion`] its device speaks (so that a DCI of the other
/// version is refused with a clear error instead of timing out). Made by
/// [`Dct::endpoint`](super::Dct::endpoint), [`DcEndpoint::new`] or parsing; each checks the
/// DCT number fits in 24 bits, so every value encodes to a token that parses back to it.
///
/// Two encodings, both versioned (format 2; format 1, without the DC version, is refused):
///
/// - text, 67 characters: `dc2:` then the GID as 32 hex digits, the LID as 4, the DCT number
///   as 6, the key as 16 and the DC version as 1, separated by `:` (`Display` / `FromStr`);
/// - bytes, [`DcEndpoint::BYTES`] long: `0xdc 0x02`, then the GID (16), the LID (2), the DCT
///   number (4), the key (8), big-endian, and the DC version (1) ([`DcEndpoint::to_bytes`] /
///   [`DcEndpoint::from_bytes`]).
///
/// ```
/// # use rdma_verbs::{Gid, Lid, Qpn};
/// # use rdma_verbs::mlx5::{DcEndpoint, DcKey, DcVersion};
/// # fn main() -> rdma_verbs::Result<()> {
/// let ep = DcEndpoint::new(Gid::ZERO, Lid::new(7), Qpn::new(0x1234)?, DcKey::new(42), DcVersion::V2);
/// let text = ep.to_string();
/// assert_eq!(text, "dc2:00000000000000000000000000000000:0007:001234:000000000000002a:2");
/// assert_eq!(text.parse::<DcEndpoint>().unwrap(), ep);
/// assert_eq!(DcEndpoint::from_bytes(&ep.to_bytes()).unwrap(), ep);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DcEndpoint {
    gid: Gid,
    lid: Lid,
    /// At most 24 bits (every constructor checks).
    dctn: Qpn,
    dc_key: DcKey,
    dc_version: DcVersion,
}

/// Why a DC endpoint token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DcTokenError {
    /// The text does not start with `dc2:`, or the bytes with `0xdc 0x02` (a format-1 token,
    /// `dc1:`, carries no DC version: make it again with this release).
    #[error("not a DC endpoint token (format 2): it must start with {expected}, got {got:?}")]
    Version {
        /// The expected prefix.
        expected: &'static str,
        /// What the token starts with.
        got: String,
    },
    /// The token is not `dc2:` + five `:`-separated fields of 32, 4, 6, 16 and 1 hex digits,
    /// or not [`DcEndpoint::BYTES`] bytes.
    #[error("malformed DC endpoint token: {reason}")]
    Layout {
        /// What is wrong.
        reason: String,
    },
    /// A field holds something other than hex digits.
    #[error("the {field} field of the DC endpoint token is not hexadecimal: {text:?}")]
    NotHex {
        /// `gid`, `lid`, `dctn`, `key` or `dc version`.
        field: &'static str,
        /// The field's text.
        text: String,
    },
    /// The DC version is neither 1 nor 2.
    #[error("the DC version {value} of the DC endpoint token is neither 1 nor 2")]
    DcVersion {
        /// The value found.
        value: u8,
    },
    /// The DCT number does not fit in 24 bits.
    #[error("the DCT number {dctn:#x} of the DC endpoint token exceeds 24 bits")]
    DctnRange {
        /// The value found.
        dctn: u32,
    },
}

const TEXT_PREFIX: &str = "dc2:";
const BYTES_PREFIX: [u8; 2] = [0xdc, 0x02];
/// The field widths of the text form, in hex digits.
const WIDTHS: [(&str, usize); 5] =
    [("gid", 32), ("lid", 4), ("dctn", 6), ("key", 16), ("dc version", 1)];

impl DcEndpoint {
    /// The length of the byte form.
    pub const BYTES: usize = 33;

    /// The endpoint of the DCT numbered `dctn` with key `dc_key`, on the port with `gid` (zero
    /// on InfiniBand without GRH) and `lid` (0 on RoCE), of a device speaking `dc_version`.
    #[must_use]
    pub fn new(gid: Gid, lid: Lid, dctn: Qpn, dc_key: DcKey, dc_version: DcVersion) -> Self {
        DcEndpoint { gid, lid, dctn, dc_key, dc_version }
    }

    /// The DC version of the DCT's device.
    pub fn dc_version(&self) -> DcVersion {
        self.dc_version
    }

    /// The GID of the DCT's port (zero on InfiniBand without GRH).
    pub fn gid(&self) -> Gid {
        self.gid
    }

    /// The LID of the DCT's port (0 on RoCE).
    pub fn lid(&self) -> Lid {
        self.lid
    }

    /// The DCT number (24 bits).
    pub fn dctn(&self) -> Qpn {
        self.dctn
    }

    /// The DC access key.
    pub fn dc_key(&self) -> DcKey {
        self.dc_key
    }

    /// The byte form (see the type's docs).
    pub fn to_bytes(&self) -> [u8; Self::BYTES] {
        let mut b = [0u8; Self::BYTES];
        b[..2].copy_from_slice(&BYTES_PREFIX);
        b[2..18].copy_from_slice(&self.gid.get());
        b[18..20].copy_from_slice(&self.lid.get().to_be_bytes());
        b[20..24].copy_from_slice(&self.dctn.get().to_be_bytes());
        b[24..32].copy_from_slice(&self.dc_key.0.to_be_bytes());
        b[32] = self.dc_version.number();
        b
    }

    /// Parses the byte form.
    ///
    /// # Errors
    ///
    /// [`DcTokenError`]: wrong length, wrong format prefix, a DCT number above 24 bits, or a
    /// DC version other than 1 and 2.
    pub fn from_bytes(b: &[u8]) -> Result<Self, DcTokenError> {
        if !b.starts_with(&BYTES_PREFIX) {
            let got = b.iter().take(2).map(|x| format!("{x:#04x} ")).collect::<String>();
            return Err(DcTokenError::Version { expected: "bytes 0xdc 0x02", got });
        }
        let b: &[u8; Self::BYTES] = b.try_into().map_err(|_| DcTokenError::Layout {
            reason: format!("{} bytes, not {}", b.len(), Self::BYTES),
        })?;
        let dctn = u32::from_be_bytes(b[20..24].try_into().expect("4 bytes"));
        Ok(DcEndpoint::new(
            Gid::new(b[2..18].try_into().expect("16 bytes")),
            Lid::new(u16::from_be_bytes([b[18], b[19]])),
            Qpn::new(dctn).map_err(|_| DcTokenError::DctnRange { dctn })?,
            DcKey(u64::from_be_bytes(b[24..32].try_into().expect("8 bytes"))),
            dc_version(u128::from(b[32]))?,
        ))
    }
}

impl fmt::Display for DcEndpoint {
    /// The text form (see the type's docs).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(TEXT_PREFIX)?;
        for byte in self.gid.get() {
            write!(f, "{byte:02x}")?;
        }
        write!(
            f,
            ":{:04x}:{:06x}:{:016x}:{:x}",
            self.lid.get(),
            self.dctn.get(),
            self.dc_key.0,
            self.dc_version.number()
        )
    }
}

impl FromStr for DcEndpoint {
    type Err = DcTokenError;

    /// Parses the text form; surrounding whitespace (a trailing newline) is ignored.
    fn from_str(s: &str) -> Result<Self, DcTokenError> {
        let s = s.trim();
        let Some(rest) = s.strip_prefix(TEXT_PREFIX) else {
            let got = s.chars().take(TEXT_PREFIX.len()).collect();
            return Err(DcTokenError::Version { expected: "text \"dc2:\"", got });
        };
        let fields: Vec<&str> = rest.split(':').collect();
        if fields.len() != WIDTHS.len() {
            return Err(DcTokenError::Layout {
                reason: format!(
                    "{} fields after \"dc2:\", not 5 (GID:LID:DCTN:KEY:DC version): {s:?}",
                    fields.len()
                ),
            });
        }
        let mut values = [0u128; 5];
        for ((text, (field, width)), value) in fields.iter().zip(WIDTHS).zip(&mut values) {
            if !text.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(DcTokenError::NotHex { field, text: (*text).to_owned() });
            }
            if text.len() != width {
                return Err(DcTokenError::Layout {
                    reason: format!(
                        "the {field} field has {} hex digits, not {width}: {text:?}",
                        text.len()
                    ),
                });
            }
            *value = u128::from_str_radix(text, 16).expect("at most 32 hex digits");
        }
        let [gid, lid, dctn, key, version] = values;
        // Each value has at most its field's digits (checked above): the casts keep them whole.
        Ok(DcEndpoint::new(
            Gid::new(gid.to_be_bytes()),
            Lid::new(lid as u16),
            Qpn::from_low_bits(dctn as u32),
            DcKey(key as u64),
            dc_version(version)?,
        ))
    }
}

/// The DC version numbered `n`, or [`DcTokenError::DcVersion`].
fn dc_version(n: u128) -> Result<DcVersion, DcTokenError> {
    let value = u8::try_from(n).unwrap_or(u8::MAX);
    DcVersion::from_number(value).ok_or(DcTokenError::DcVersion { value })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn endpoint() -> impl Strategy<Value = DcEndpoint> {
        let version = prop_oneof![Just(DcVersion::V1), Just(DcVersion::V2)];
        (any::<[u8; 16]>(), any::<u16>(), 0u32..=0xff_ffff, any::<u64>(), version).prop_map(
            |(gid, lid, dctn, key, version)| {
                DcEndpoint::new(
                    Gid::new(gid),
                    Lid::new(lid),
                    Qpn::new(dctn).unwrap(),
                    DcKey(key),
                    version,
                )
            },
        )
    }

    proptest! {
        #[test]
        fn text_round_trips(ep in endpoint()) {
            let text = ep.to_string();
            prop_assert_eq!(text.len(), 67);
            prop_assert_eq!(text.parse::<DcEndpoint>().unwrap(), ep);
        }

        #[test]
        fn bytes_round_trip(ep in endpoint()) {
            prop_assert_eq!(DcEndpoint::from_bytes(&ep.to_bytes()).unwrap(), ep);
        }

        #[test]
        fn a_dctn_above_24_bits_makes_no_endpoint(dctn in 0x100_0000u32..) {
            let mut b = sample().to_bytes();
            b[20..24].copy_from_slice(&dctn.to_be_bytes());
            prop_assert_eq!(DcEndpoint::from_bytes(&b), Err(DcTokenError::DctnRange { dctn }));
        }

        #[test]
        fn any_text_is_parsed_or_refused_without_panic(s in "\\PC{0,80}") {
            let _ = s.parse::<DcEndpoint>();
        }

        #[test]
        fn any_bytes_are_parsed_or_refused_without_panic(b in proptest::collection::vec(any::<u8>(), 0..40)) {
            let _ = DcEndpoint::from_bytes(&b);
        }
    }

    fn sample() -> DcEndpoint {
        let gid = Gid::new("::ffff:192.0.2.1".parse::<std::net::Ipv6Addr>().unwrap().octets());
        let dctn = Qpn::new(0xabcdef).unwrap();
        DcEndpoint::new(gid, Lid::new(0), dctn, DcKey(0x0123_4567_89ab_cdef), DcVersion::V1)
    }

    #[test]
    fn bad_text_is_refused_with_the_reason() {
        let good = sample().to_string();
        assert!(matches!("rc1:x".parse::<DcEndpoint>(), Err(DcTokenError::Version { .. })));
        let short = good.replacen("cdef:1", "cde:1", 1);
        let e = short.parse::<DcEndpoint>().unwrap_err();
        assert!(e.to_string().contains("key field has 15 hex digits"), "{e}");
        let e = good.replacen(":0000:", ":00g0:", 1).parse::<DcEndpoint>().unwrap_err();
        assert_eq!(e, DcTokenError::NotHex { field: "lid", text: "00g0".into() });
        let e = format!("{good}:00").parse::<DcEndpoint>().unwrap_err();
        assert!(e.to_string().contains("6 fields"), "{e}");
        let e = good.replacen("dc2:", "dc1:", 1).parse::<DcEndpoint>().unwrap_err();
        assert!(matches!(e, DcTokenError::Version { .. }), "a format-1 token: {e}");
        let e = format!("{}3", &good[..good.len() - 1]).parse::<DcEndpoint>().unwrap_err();
        assert_eq!(e, DcTokenError::DcVersion { value: 3 });
        assert_eq!(format!(" {good}\n").parse::<DcEndpoint>().unwrap(), sample());
    }

    #[test]
    fn bad_bytes_are_refused_with_the_reason() {
        let good = sample().to_bytes();
        let e = DcEndpoint::from_bytes(&good[..32]).unwrap_err();
        assert!(e.to_string().contains("32 bytes, not 33"), "{e}");
        let mut unknown = good;
        unknown[32] = 0;
        assert_eq!(DcEndpoint::from_bytes(&unknown), Err(DcTokenError::DcVersion { value: 0 }));
        let mut wrong = good;
        wrong[1] = 1;
        assert!(matches!(DcEndpoint::from_bytes(&wrong), Err(DcTokenError::Version { .. })));
        let mut big = good;
        big[20] = 1;
        assert_eq!(
            DcEndpoint::from_bytes(&big),
            Err(DcTokenError::DctnRange { dctn: 0x01ab_cdef })
        );
    }
}
