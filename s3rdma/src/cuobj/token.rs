//! The cuObject DC v1 descriptor, the value of `x-amz-rdma-token`.
//!
//! Seven fields of fixed width, lowercase hex with zero padding, separated by `:` (81
//! characters):
//!
//! | # | field | hex digits |
//! |---|---|---|
//! | 1 | base address of the client's registered window | 16 |
//! | 2 | its size in bytes (a PUT's payload length) | 8 |
//! | 3 | its rkey | 8 |
//! | 4 | the client port's LID (`0000` on RoCE) | 4 |
//! | 5 | the client's DCT number | 6 |
//! | 6 | `1` when a GID follows that routes need (RoCE), else `0` | 1 |
//! | 7 | the client's GID, its 16 bytes in order | 32 |
//!
//! Older clients append `:ADDR:SIZE` (16 hex digits each), which overrides fields 1–2 for
//! the request; NIXL's `RDMA_PROTOCOL.md` also asks servers to accept a trailing `;`.

use std::fmt;

/// The fields' widths in hex digits.
const WIDTHS: [usize; 7] = [16, 8, 8, 4, 6, 1, 32];
/// The width of each part of the legacy `:ADDR:SIZE` suffix.
const SUFFIX_WIDTH: usize = 16;
/// The length of a `hipobj-rc-v2` token (44 bytes in hex).
const RC_TOKEN_LEN: usize = 88;

/// A client's window and the DC target it is reached through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// The window's base address in the client's address space.
    pub addr: u64,
    /// The window's size in bytes: what a GET may write, what a PUT reads. At most
    /// `u32::MAX` in the seven fields; the legacy suffix carries up to `u64::MAX`.
    pub size: u64,
    /// The window's rkey.
    pub rkey: u32,
    /// The client port's LID (0 on RoCE).
    pub lid: u16,
    /// The client's DCT number (24 bits).
    pub dctn: u32,
    /// The client's GID, when routes need one (RoCE).
    pub gid: Option<[u8; 16]>,
}

/// Why a token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// A `hipobj-rc-v2` token (88 hex digits), which this protocol does not take.
    #[error(
        "x-amz-rdma-token is a hipobj-rc-v2 (RC) token; send it to /.hipobj-rc/prepare, or send \
         a cuObject DC descriptor here"
    )]
    RcToken,
    /// Not a descriptor.
    #[error("x-amz-rdma-token is not a cuObject DC descriptor ({0}): expected ADDR(16):SIZE(8):RKEY(8):LID(4):DCTN(6):GID_PRESENT(1):GID(32) in hex, optionally followed by :ADDR(16):SIZE(16)")]
    Malformed(String),
}

fn malformed(why: impl Into<String>) -> TokenError {
    TokenError::Malformed(why.into())
}

impl Descriptor {
    /// Parses a header value: seven fields, optionally the legacy suffix, optionally a
    /// trailing `;`, surrounding whitespace ignored. Hex digits of either case.
    ///
    /// # Errors
    ///
    /// [`TokenError::RcToken`] for a `hipobj-rc-v2` token (with or without its own suffix),
    /// [`TokenError::Malformed`] for anything else that is not a descriptor.
    pub fn parse(value: &str) -> Result<Descriptor, TokenError> {
        let value = value.trim();
        let value = value.strip_suffix(';').unwrap_or(value);
        let fields: Vec<&str> = value.split(':').collect();
        if fields[0].len() == RC_TOKEN_LEN && is_hex(fields[0]) {
            return Err(TokenError::RcToken);
        }
        if fields.len() != WIDTHS.len() && fields.len() != WIDTHS.len() + 2 {
            return Err(malformed(format!("{} fields", fields.len())));
        }
        for (i, (field, width)) in fields.iter().zip(WIDTHS).enumerate() {
            if field.len() != width || !is_hex(field) {
                return Err(malformed(format!("field {} is not {width} hex digits", i + 1)));
            }
        }
        let hex = |s: &str| u64::from_str_radix(s, 16).expect("checked hex of at most 16 digits");
        let gid = match fields[5] {
            "0" => None,
            "1" => {
                let mut gid = [0; 16];
                for (i, byte) in gid.iter_mut().enumerate() {
                    *byte = hex(&fields[6][2 * i..2 * i + 2]) as u8;
                }
                Some(gid)
            }
            _ => return Err(malformed("field 6 (GID present) is neither 0 nor 1")),
        };
        let mut descriptor = Descriptor {
            addr: hex(fields[0]),
            size: hex(fields[1]),
            rkey: hex(fields[2]) as u32,
            lid: hex(fields[3]) as u16,
            dctn: hex(fields[4]) as u32,
            gid,
        };
        if let [addr, size] = fields[WIDTHS.len()..] {
            for part in [addr, size] {
                if part.len() != SUFFIX_WIDTH || !is_hex(part) {
                    return Err(malformed("the :ADDR:SIZE suffix is not 16 hex digits each"));
                }
            }
            descriptor.addr = hex(addr);
            descriptor.size = hex(size);
        }
        if descriptor.dctn == 0 {
            return Err(malformed("the DCT number is 0"));
        }
        Ok(descriptor)
    }

    /// Where byte `offset` of the window is, when `len` bytes from there stay inside it.
    pub fn at(&self, offset: u64, len: u64) -> Option<u64> {
        let end = offset.checked_add(len)?;
        (end <= self.size).then_some(())?;
        self.addr.checked_add(offset)
    }
}

impl fmt::Display for Descriptor {
    /// The seven fields (the size must fit in 8 hex digits, as every window a client
    /// registers does).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:016x}:{:08x}:{:08x}:{:04x}:{:06x}:{}:",
            self.addr,
            self.size,
            self.rkey,
            self.lid,
            self.dctn,
            u8::from(self.gid.is_some())
        )?;
        for byte in self.gid.unwrap_or_default() {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

fn is_hex(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A RoCE client's descriptor of a 4 MiB window, as libs3rdma mints one (the shape of
    /// minio-rs #234's probe).
    const ROCE: &str =
        "000073967e5ff000:00400000:01f2e973:0000:007a03:1:00000000000000000000ffffc0a80a05";

    fn roce() -> Descriptor {
        let mut gid = [0; 16];
        gid[10..].copy_from_slice(&[0xff, 0xff, 192, 168, 10, 5]);
        Descriptor {
            addr: 0x7396_7e5f_f000,
            size: 4 << 20,
            rkey: 0x01f2_e973,
            lid: 0,
            dctn: 0x7a03,
            gid: Some(gid),
        }
    }

    #[test]
    fn the_seven_fields_parse_and_print_back() {
        assert_eq!(ROCE.len(), 81);
        assert_eq!(Descriptor::parse(ROCE), Ok(roce()));
        assert_eq!(roce().to_string(), ROCE);
        let ib =
            "0000000000001000:00001000:00000abc:0012:000042:0:00000000000000000000000000000000";
        let parsed = Descriptor::parse(ib).unwrap();
        assert_eq!((parsed.lid, parsed.dctn, parsed.gid), (0x12, 0x42, None));
        assert_eq!(parsed.to_string(), ib);
    }

    #[test]
    fn a_trailing_semicolon_upper_case_and_the_legacy_suffix_are_taken() {
        assert_eq!(Descriptor::parse(&format!("{ROCE};")), Ok(roce()));
        assert_eq!(Descriptor::parse(&ROCE.to_uppercase()), Ok(roce()));
        let legacy = format!("{ROCE}:000073967e600000:0000000000001000;");
        let overridden = Descriptor { addr: 0x7396_7e60_0000, size: 0x1000, ..roce() };
        assert_eq!(Descriptor::parse(&legacy), Ok(overridden));
    }

    #[test]
    fn an_rc_token_is_told_apart() {
        let rc = format!("01{}", "0".repeat(86));
        assert_eq!(Descriptor::parse(&rc), Err(TokenError::RcToken));
        assert_eq!(Descriptor::parse(&format!("{rc}:1000:20")), Err(TokenError::RcToken));
    }

    #[test]
    fn anything_else_is_malformed() {
        let cases = [
            String::new(),
            ";".into(),
            ROCE.replace(":1:", ":2:"),
            ROCE.replace("007a03", "000000"),
            ROCE.replace("01f2e973", "01f2e97"),
            ROCE.replace("0000:007a03", "0000:007a0g"),
            ROCE.replacen("000073967e5ff000", "+00073967e5ff000", 1),
            format!("{ROCE}:"),
            format!("{ROCE}:1000:1000"),
            format!("{ROCE};;"),
            ROCE.rsplit_once(':').unwrap().0.into(),
        ];
        for case in cases {
            assert!(matches!(Descriptor::parse(&case), Err(TokenError::Malformed(_))), "{case:?}");
        }
    }

    #[test]
    fn at_stays_inside_the_window() {
        let d = roce();
        assert_eq!(d.at(0, 4 << 20), Some(d.addr));
        assert_eq!(d.at(1 << 20, 1 << 20), Some(d.addr + (1 << 20)));
        assert_eq!(d.at(1, 4 << 20), None);
        assert_eq!(d.at(u64::MAX, 2), None);
    }
}
