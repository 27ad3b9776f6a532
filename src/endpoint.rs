//! What two peers exchange to connect their queue pairs ([`Endpoint`]: [`Lid`], [`Qpn`],
//! [`Psn`], a GID; all four also at the crate root), and its wire formats: ibv_rc_pingpong's
//! address message ([`PINGPONG_MESSAGE_LEN`] bytes, [`Endpoint::to_pingpong_message`],
//! [`Endpoint::from_pingpong_message`], which fails with a [`WireError`]).
//!
//! The library keeps that one format, although it is an example program's, because it is the
//! only connection exchange rdma-core's own tools agree on: `ibv_rc_pingpong`,
//! `ibv_uc_pingpong` and `ibv_srq_pingpong` (rdma-core's `libibverbs/examples/`) all send
//! `"%04x:%06x:%06x:%s"` of LID, QPN, PSN and GID. A program that must meet those tools, or
//! any peer that speaks it, needs it byte for byte, and one parser that refuses a malformed
//! message with a [`WireError`] beats a copy in every program. A service free to choose its
//! own exchange sends the four [`Endpoint`] fields its own way.

use std::fmt;

use crate::error::{Error, InvalidInputKind, Result};
use crate::gid::Gid;
use crate::number::{number, shown};

number! {
    /// A Local Identifier: a port's 16-bit InfiniBand address (0 on Ethernet ports), shown
    /// as ibv_rc_pingpong prints it (`0x%04x`).
    #[derive(Default)]
    pub struct Lid(u16), shown: "{:#06x}"
}

/// Declares a 24-bit number of the wire (`what`, e.g. "PSN") in the style of `number!`:
/// the struct, `MAX`, `new` and `TryFrom<u32>` (which refuse more), `from_low_bits`, `get`,
/// shown as ibv_rc_pingpong prints it (`0x%06x`).
macro_rules! number_24 {
    ($(#[$meta:meta])* pub struct $name:ident, what: $what:literal) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
        pub struct $name(u32);

        impl $name {
            /// The largest value, 2²⁴ − 1.
            pub const MAX: u32 = 0xff_ffff;

            #[doc = concat!("The ", $what, " `value`.")]
            ///
            /// # Errors
            ///
            /// [`Error::InvalidInput`] ([`InvalidInputKind::Range`]) above `MAX`: the wire
            /// carries 24 bits, so a larger value would reach the peer as another.
            pub fn new(value: u32) -> Result<$name> {
                if value > Self::MAX {
                    return Err(Error::invalid(
                        InvalidInputKind::Range,
                        format!(
                            "{}::new({value:#x}): a {} has 24 bits, at most 0xffffff; a larger \
                             one would reach the wire as another",
                            stringify!($name),
                            $what
                        ),
                    ));
                }
                Ok($name(value))
            }

            /// The low 24 bits of `value`, for numbers that have no more (a device's own, six
            /// hex digits of a message) and for a random one.
            pub(crate) const fn from_low_bits(value: u32) -> $name {
                $name(value & Self::MAX)
            }

            /// The value.
            #[must_use]
            pub const fn get(self) -> u32 {
                self.0
            }
        }

        impl TryFrom<u32> for $name {
            type Error = Error;

            /// As [`new`](Self::new).
            fn try_from(value: u32) -> Result<$name> {
                $name::new(value)
            }
        }

        shown!($name(u32), "{:#08x}");
    };
}

number_24! {
    /// A Queue Pair Number: 24 bits, at most [`Qpn::MAX`] ([`Qpn::new`] refuses more). The
    /// device gives a QP its number ([`QueuePair::qp_num`](crate::QueuePair::qp_num)); the
    /// peer's comes over the wire ([`Endpoint::from_pingpong_message`]).
    pub struct Qpn, what: "QP number"
}

number_24! {
    /// An XRC SRQ's number: 24 bits, at most [`SrqNum::MAX`] ([`SrqNum::new`] refuses more).
    /// The device gives an [`XrcSrq`](crate::XrcSrq) its number
    /// ([`XrcSrq::srq_num`](crate::XrcSrq::srq_num), `ibv_get_srq_num(3)`); a sender names
    /// it in each SEND of an XRC initiator ([`SendWr::to_xrc_srq`](crate::SendWr::to_xrc_srq)).
    pub struct SrqNum, what: "SRQ number"
}

number_24! {
    /// A Packet Sequence Number: where a QP's send or receive sequence starts; 24 bits, at most
    /// [`Psn::MAX`] ([`Psn::new`] refuses more).
    pub struct Psn, what: "PSN"
}

impl Psn {
    /// A random PSN, as ibv_rc_pingpong picks (`lrand48() & 0xffffff`).
    #[must_use]
    pub fn random() -> Psn {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        h.write_u128(now.map_or(0, |d| d.as_nanos()));
        Psn::from_low_bits(h.finish() as u32)
    }
}

/// What a peer needs to connect an RC (or UC) queue pair to ours: LID, QPN, first PSN and
/// GID (`Gid::ZERO` when none is used, as on InfiniBand without a GRH).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// The port's LID (0 on RoCE).
    pub lid: Lid,
    /// The QP number.
    pub qpn: Qpn,
    /// The first PSN of the QP's send queue.
    pub psn: Psn,
    /// The GID used as source GID.
    pub gid: Gid,
}

/// The ibv_rc_pingpong message length: `"LLLL:QQQQQQ:PPPPPP:" + 32 GID hex digits + NUL`.
pub const PINGPONG_MESSAGE_LEN: usize = 52;

/// Why a peer's ibv_rc_pingpong address message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Not 52 bytes.
    #[error("the address message has {got} bytes, not {PINGPONG_MESSAGE_LEN}")]
    Length {
        /// Bytes received.
        got: usize,
    },
    /// Not the `LLLL:QQQQQQ:PPPPPP:GGGG…` layout, NUL-terminated.
    #[error("the address message is not \"LLLL:QQQQQQ:PPPPPP:<32 hex GID>\\0\": {text:?}")]
    Layout {
        /// The message, lossily decoded.
        text: String,
    },
    /// A field holds something other than hex digits.
    #[error("the {field} field of the address message is not hexadecimal: {text:?}")]
    NotHex {
        /// `lid`, `qpn`, `psn` or `gid`.
        field: &'static str,
        /// The field's text.
        text: String,
    },
}

impl Endpoint {
    /// The ibv_rc_pingpong wire message: `sprintf("%04x:%06x:%06x:%s")` of LID, QPN, PSN and
    /// the 16 GID bytes as 32 lower-case hex digits, NUL-terminated (52 bytes).
    pub fn to_pingpong_message(&self) -> [u8; PINGPONG_MESSAGE_LEN] {
        let gid: String = self.gid.get().iter().map(|b| format!("{b:02x}")).collect();
        let text =
            format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid.0, self.qpn.get(), self.psn.get());
        let mut msg = [0u8; PINGPONG_MESSAGE_LEN];
        msg[..text.len()].copy_from_slice(text.as_bytes());
        msg
    }

    /// Parses an ibv_rc_pingpong wire message (see [`Endpoint::to_pingpong_message`]).
    ///
    /// # Errors
    ///
    /// [`WireError`] naming what is wrong: the length, the layout, or a non-hex field.
    pub fn from_pingpong_message(msg: &[u8]) -> Result<Endpoint, WireError> {
        if msg.len() != PINGPONG_MESSAGE_LEN {
            return Err(WireError::Length { got: msg.len() });
        }
        let layout_err = || WireError::Layout { text: String::from_utf8_lossy(msg).into_owned() };
        // Exactly 51 characters, then the NUL.
        if msg.iter().position(|&b| b == 0) != Some(PINGPONG_MESSAGE_LEN - 1) {
            return Err(layout_err());
        }
        let text =
            std::str::from_utf8(&msg[..PINGPONG_MESSAGE_LEN - 1]).map_err(|_| layout_err())?;
        let fields: Vec<&str> = text.split(':').collect();
        let [lid, qpn, psn, gid] = fields[..] else { return Err(layout_err()) };
        if lid.len() != 4 || qpn.len() != 6 || psn.len() != 6 || gid.len() != 32 {
            return Err(layout_err());
        }
        let hex = |field, text: &str| {
            if text.bytes().all(|b| b.is_ascii_hexdigit()) {
                Ok(u32::from_str_radix(text, 16).expect("at most 6 hex digits"))
            } else {
                Err(WireError::NotHex { field, text: text.to_owned() })
            }
        };
        // All hex digits, so ASCII: the pairs below are sliced at character boundaries.
        if !gid.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(WireError::NotHex { field: "gid", text: gid.to_owned() });
        }
        let mut gid_bytes = [0u8; 16];
        for (i, byte) in gid_bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&gid[2 * i..2 * i + 2], 16).expect("two hex digits");
        }
        Ok(Endpoint {
            lid: Lid(hex("lid", lid)? as u16),
            // Six hex digits each: 24 bits, nothing lost.
            qpn: Qpn::from_low_bits(hex("qpn", qpn)?),
            psn: Psn::from_low_bits(hex("psn", psn)?),
            gid: Gid::new(gid_bytes),
        })
    }
}

/// As ibv_rc_pingpong prints an address: `LID 0x0000, QPN 0x000011, PSN 0x3c8a4d, GID ::ffff:192.0.2.1`.
impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LID {}, QPN {}, PSN {}, GID {}", self.lid, self.qpn, self.psn, self.gid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn endpoint() -> Endpoint {
        Endpoint {
            lid: Lid(0x12),
            qpn: Qpn(0x11),
            psn: Psn(0x3c8a4d),
            gid: Gid::from("::ffff:192.0.2.1".parse::<std::net::Ipv6Addr>().unwrap()),
        }
    }

    #[test]
    fn numbers_print_as_ibv_rc_pingpong_prints_them() {
        let shown = (Lid(0x12).to_string(), Qpn(0x11).to_string(), Psn(0x3c8a4d).to_string());
        assert_eq!(shown, ("0x0012".into(), "0x000011".into(), "0x3c8a4d".into()));
        let keys =
            (crate::LKey::new(0x1a2b).to_string(), crate::RKey::new(0xdead_beef).to_string());
        assert_eq!(keys, ("0x00001a2b".into(), "0xdeadbeef".into()));
        // Debug names the type around the same figures.
        let debug = format!("{:?}", (Qpn(0x11), Lid(0x12), crate::LKey::new(1)));
        assert_eq!(debug, "(Qpn(0x000011), Lid(0x0012), LKey(0x00000001))");
    }

    #[test]
    fn message_matches_the_c_format() {
        let msg = endpoint().to_pingpong_message();
        assert_eq!(&msg[..], b"0012:000011:3c8a4d:00000000000000000000ffffc0000201\0");
        assert_eq!(
            endpoint().to_string(),
            "LID 0x0012, QPN 0x000011, PSN 0x3c8a4d, GID ::ffff:192.0.2.1"
        );
    }

    #[test]
    fn bad_messages_say_what_is_wrong() {
        let ok = endpoint().to_pingpong_message();
        assert_eq!(Endpoint::from_pingpong_message(&ok[..10]), Err(WireError::Length { got: 10 }));
        let mut bad = ok;
        bad[0] = b'z';
        assert!(matches!(
            Endpoint::from_pingpong_message(&bad),
            Err(WireError::NotHex { field: "lid", .. })
        ));
        let mut bad = ok;
        bad[30] = b'g';
        assert!(matches!(
            Endpoint::from_pingpong_message(&bad),
            Err(WireError::NotHex { field: "gid", .. })
        ));
        let mut bad = ok;
        bad[51] = b'0';
        assert!(matches!(Endpoint::from_pingpong_message(&bad), Err(WireError::Layout { .. })));
        // A 32-byte GID field with a 3-byte character: refused, not sliced inside it.
        let mut multibyte = Vec::from(&b"0012:000011:3c8a4d:"[..]);
        multibyte.extend_from_slice("€".as_bytes());
        multibyte.extend_from_slice(&[b'0'; 29]);
        multibyte.push(0);
        assert!(matches!(
            Endpoint::from_pingpong_message(&multibyte),
            Err(WireError::NotHex { field: "gid", .. })
        ));
        // A 30-digit GID, padded with NULs to 52 bytes.
        let short = b"0012:000011:3c8a4d:000000000000000000ffffc0000201\0\0\0";
        assert!(matches!(Endpoint::from_pingpong_message(short), Err(WireError::Layout { .. })));
    }

    #[test]
    fn numbers_above_24_bits_are_refused_naming_the_type() {
        assert_eq!(
            (Qpn::new(Qpn::MAX).unwrap().get(), Psn::new(Psn::MAX).unwrap().get()),
            (Qpn::MAX, Psn::MAX)
        );
        let e = Qpn::new(0x100_0000).unwrap_err();
        assert_eq!(e.invalid_input_kind(), Some(InvalidInputKind::Range));
        assert_eq!(
            e.to_string(),
            "Qpn::new(0x1000000): a QP number has 24 bits, at most 0xffffff; a larger one would \
             reach the wire as another"
        );
        let e = Psn::new(0x100_0001).unwrap_err();
        assert!(e.to_string().starts_with("Psn::new(0x1000001): a PSN has 24 bits"), "{e}");
    }

    proptest! {
        #[test]
        fn every_number_above_24_bits_is_refused(v in 0x100_0000u32..) {
            prop_assert!(Qpn::new(v).is_err() && Psn::new(v).is_err());
        }

        #[test]
        fn message_round_trips(lid: u16, qpn in 0u32..=0xff_ffff, psn in 0u32..=0xff_ffff, gid: [u8; 16]) {
            let e = Endpoint { lid: Lid(lid), qpn: Qpn(qpn), psn: Psn(psn), gid: Gid::new(gid) };
            prop_assert_eq!(Endpoint::from_pingpong_message(&e.to_pingpong_message()), Ok(e));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..80)) {
            let _ = Endpoint::from_pingpong_message(&bytes);
        }

        #[test]
        fn corrupting_one_byte_is_refused_or_decodes_to_something_else(
            qpn in 0u32..=0xff_ffff, pos in 0usize..52, byte: u8,
        ) {
            let e = Endpoint { lid: Lid(1), qpn: Qpn(qpn), psn: Psn(7), gid: Gid::new([0xab; 16]) };
            let mut msg = e.to_pingpong_message();
            prop_assume!(msg[pos] != byte);
            msg[pos] = byte;
            // Hex digits of either case decode; anything else must be refused.
            if let Ok(decoded) = Endpoint::from_pingpong_message(&msg) {
                prop_assert!(byte.is_ascii_hexdigit());
                prop_assert!(decoded != e || byte.is_ascii_uppercase());
            }
        }
    }
}
