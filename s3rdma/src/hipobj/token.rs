//! The 44-byte RDMA token of `hipobj-rc-v2` and the hex fields of its headers.
//!
//! The token travels as 88 hex digits (senders write lowercase, receivers accept either case);
//! its integers are little-endian:
//!
//! | offset | bytes | field |
//! |---|---|---|
//! | 0 | 1 | transport: 0 = DC, 1 = RC |
//! | 1 | 4 | QP number |
//! | 5 | 16 | GID |
//! | 21 | 4 | rkey |
//! | 25 | 8 | remote address |
//! | 33 | 8 | length |
//! | 41 | 1 | port number |
//! | 42 | 2 | LID |

use std::fmt;

/// The transport byte of an RC token.
pub const TRANSPORT_RC: u8 = 1;

/// The token's length in bytes (88 hex digits).
pub const TOKEN_LEN: usize = 44;

/// A malformed header value: says which header and what it must be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{header}: {problem}")]
pub struct BadHeader {
    /// The header's name.
    pub header: &'static str,
    /// What is wrong with its value.
    pub problem: String,
}

fn bad(header: &'static str, problem: impl Into<String>) -> BadHeader {
    BadHeader { header, problem: problem.into() }
}

/// A queue pair's address and, optionally, a memory region of its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Token {
    /// `0` DC, `1` RC ([`TRANSPORT_RC`]).
    pub transport: u8,
    /// The QP number.
    pub qpn: u32,
    /// The GID the QP is reached at (bytes 10–11 `ff ff`: IPv4-mapped).
    pub gid: [u8; 16],
    /// The region's rkey (0: none).
    pub rkey: u32,
    /// The region's address (0: none).
    pub addr: u64,
    /// The region's length in bytes.
    pub len: u64,
    /// The port number.
    pub port: u8,
    /// The port's LID (0 on RoCE).
    pub lid: u16,
}

impl Token {
    /// The 44 bytes.
    pub fn to_bytes(&self) -> [u8; TOKEN_LEN] {
        let mut b = [0; TOKEN_LEN];
        b[0] = self.transport;
        b[1..5].copy_from_slice(&self.qpn.to_le_bytes());
        b[5..21].copy_from_slice(&self.gid);
        b[21..25].copy_from_slice(&self.rkey.to_le_bytes());
        b[25..33].copy_from_slice(&self.addr.to_le_bytes());
        b[33..41].copy_from_slice(&self.len.to_le_bytes());
        b[41] = self.port;
        b[42..44].copy_from_slice(&self.lid.to_le_bytes());
        b
    }

    /// The token of `bytes`.
    pub fn from_bytes(b: &[u8; TOKEN_LEN]) -> Token {
        let le4 = |at: usize| u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"));
        let le8 = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"));
        Token {
            transport: b[0],
            qpn: le4(1),
            gid: b[5..21].try_into().expect("16 bytes"),
            rkey: le4(21),
            addr: le8(25),
            len: le8(33),
            port: b[41],
            lid: u16::from_le_bytes([b[42], b[43]]),
        }
    }

    /// Parses `header`'s value: 88 hex digits, optionally followed by `:ADDR:SIZE` (1–16 hex
    /// digits each; checked and ignored, as versitygw does).
    pub fn parse(header: &'static str, value: &str) -> Result<Token, BadHeader> {
        let (hex, suffix) = value.split_at(value.find(':').unwrap_or(value.len()));
        if !suffix.is_empty() {
            let parts: Vec<&str> = suffix[1..].split(':').collect();
            let well_formed =
                parts.len() == 2 && parts.iter().all(|p| (1..=16).contains(&p.len()) && is_hex(p));
            if !well_formed {
                return Err(bad(
                    header,
                    "the suffix after the 88 hex digits must be :ADDR:SIZE in hex",
                ));
            }
        }
        if hex.len() != 2 * TOKEN_LEN || !is_hex(hex) {
            return Err(bad(
                header,
                format!("expected {} hex digits, got {:?}", 2 * TOKEN_LEN, hex),
            ));
        }
        let mut bytes = [0; TOKEN_LEN];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).expect("checked hex");
        }
        Ok(Token::from_bytes(&bytes))
    }

    /// Whether it is the all-zero token ("loopback": the server's own GID).
    pub fn is_zero(&self) -> bool {
        *self == Token::default()
    }
}

/// 88 lowercase hex digits.
impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.to_bytes().iter().try_for_each(|b| write!(f, "{b:02x}"))
    }
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A hex number of `digits` (a range of allowed lengths) whose value fits `max`.
pub fn parse_hex(
    header: &'static str,
    value: &str,
    digits: std::ops::RangeInclusive<usize>,
    max: u64,
) -> Result<u64, BadHeader> {
    if !digits.contains(&value.len()) || !is_hex(value) {
        return Err(bad(
            header,
            format!("expected {}–{} hex digits, got {value:?}", digits.start(), digits.end()),
        ));
    }
    let n = u64::from_str_radix(value, 16).expect("checked hex");
    if n > max {
        return Err(bad(header, format!("{value} is above {max:#x}")));
    }
    Ok(n)
}

/// A PSN: 1–6 hex digits, 1..=0xFFFFFF.
pub fn parse_psn(header: &'static str, value: &str) -> Result<u32, BadHeader> {
    match parse_hex(header, value, 1..=6, 0xff_ffff)? {
        0 => Err(bad(header, "the PSN must not be 0")),
        psn => Ok(psn as u32),
    }
}

/// A cookie: exactly 8 hex digits, not 0.
pub fn parse_cookie(header: &'static str, value: &str) -> Result<u32, BadHeader> {
    match parse_hex(header, value, 8..=8, u32::MAX.into())? {
        0 => Err(bad(header, "the cookie must not be 0")),
        cookie => Ok(cookie as u32),
    }
}

/// A session id: exactly 32 hex digits.
pub fn parse_session(header: &'static str, value: &str) -> Result<u128, BadHeader> {
    if value.len() != 32 || !is_hex(value) {
        return Err(bad(header, format!("expected 32 hex digits, got {value:?}")));
    }
    Ok(u128::from_str_radix(value, 16).expect("checked hex"))
}

/// A decimal size or offset.
pub fn parse_decimal(header: &'static str, value: &str) -> Result<u64, BadHeader> {
    if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(header, format!("expected a decimal number, got {value:?}")));
    }
    value.parse().map_err(|_| bad(header, format!("{value} is too large")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout's offsets: each field written at its own place, little-endian.
    const TOKEN: &str = concat!(
        "01",                               // RC
        "78563412",                         // QPN 0x12345678
        "fe800000000000000000ffff0a000002", // GID
        "efbeadde",                         // rkey 0xdeadbeef
        "0807060504030201",                 // address 0x0102030405060708
        "0000100000000000",                 // length 1 MiB
        "01",                               // port 1
        "3412",                             // LID 0x1234
    );

    #[test]
    fn a_token_is_read_at_the_offsets_of_its_layout_and_written_back_the_same() {
        let token = Token::parse("t", TOKEN).unwrap();
        assert_eq!(token.transport, TRANSPORT_RC);
        assert_eq!(token.qpn, 0x1234_5678);
        assert_eq!(token.gid[..2], [0xfe, 0x80]);
        assert_eq!(token.gid[10..], [0xff, 0xff, 10, 0, 0, 2]);
        assert_eq!(token.rkey, 0xdead_beef);
        assert_eq!(token.addr, 0x0102_0304_0506_0708);
        assert_eq!(token.len, 1 << 20);
        assert_eq!((token.port, token.lid), (1, 0x1234));
        assert_eq!(token.to_string(), TOKEN);
        assert_eq!(Token::parse("t", &TOKEN.to_uppercase()).unwrap(), token);
    }

    #[test]
    fn a_token_takes_an_addr_size_suffix_and_refuses_other_shapes() {
        let token = Token::parse("t", TOKEN).unwrap();
        assert_eq!(Token::parse("t", &format!("{TOKEN}:7f00:1000")).unwrap(), token);
        for bad in [
            format!("{TOKEN}:"),
            format!("{TOKEN}:12"),
            format!("{TOKEN}:1:2:3"),
            format!("{TOKEN}:12345678901234567:1"),
            format!("{TOKEN}:xy:1"),
            TOKEN[..86].to_string(),
            format!("{TOKEN}00"),
            TOKEN.replace("01", "g1"),
            String::new(),
        ] {
            assert!(Token::parse("t", &bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn psn_cookie_session_and_sizes_are_checked() {
        assert_eq!(parse_psn("p", "00abCD"), Ok(0xabcd));
        assert!(parse_psn("p", "000000").is_err());
        assert!(parse_psn("p", "1000000").is_err());
        assert_eq!(parse_cookie("c", "DEADbeef"), Ok(0xdead_beef));
        for bad in ["00000000", "1234567", "123456789", "1234567x"] {
            assert!(parse_cookie("c", bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_session("s", &"a".repeat(32)),
            Ok(u128::from_str_radix(&"a".repeat(32), 16).unwrap())
        );
        assert!(parse_session("s", &"a".repeat(31)).is_err());
        assert_eq!(parse_hex("q", "0000000000000011", 1..=16, u32::MAX.into()), Ok(0x11));
        assert!(parse_hex("q", "100000000", 1..=16, u32::MAX.into()).is_err());
        assert_eq!(parse_decimal("n", "4096"), Ok(4096));
        for bad in ["", "-1", "1e3", "99999999999999999999"] {
            assert!(parse_decimal("n", bad).is_err(), "{bad}");
        }
    }
}
