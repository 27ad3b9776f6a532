//! An object store whose GETs and PUTs move the object's bytes by RDMA, as an S3-over-RDMA
//! gateway does: requests travel on an HTTP/1.1 control channel, the bytes by RDMA READ and
//! WRITE between the server's registered staging pool and the client's registered buffer.
//! No rdma_cm: the QPs' coordinates are exchanged over HTTP.
//!
//! ```text
//! objstore serve --root DIR [-d rxe0] [-p 18900]      # buckets are DIR's directories
//! objstore put  BUCKET/KEY FILE SERVER                # over RDMA
//! objstore get  BUCKET/KEY FILE SERVER
//! objstore bench --size 4K..192M SERVER               # RDMA and TCP, PUT and GET
//! curl -T FILE http://SERVER:18900/BUCKET/KEY         # over TCP: no token
//! ```
//!
//! # The control channel
//!
//! - `POST /session`, body: the client's RC QP in the `ibv_rc_pingpong` format, 52 bytes
//!   `LLLL:QQQQQQ:PPPPPP:GGGG…` (LID, QPN, PSN in hex, the 32-hex-digit GID, a NUL) — see
//!   [`rdma_verbs::Endpoint::to_pingpong_message`]. The server creates one RC QP for the
//!   session, takes it RESET→INIT→RTR→RTS, and answers `201` with header
//!   `X-Rdma-Session: <id>` (decimal) and its own QP in the same format. The client then takes
//!   its QP to RTS. Every request of that client uses the session's QP.
//! - `GET /session/<id>`: `moved=<bytes>`, what the session's current request has moved
//!   (the client's progress bar). `DELETE /session/<id>` ends a session (`204`).
//! - `PUT /<bucket>/<key>` and `GET /<bucket>/<key>` with header
//!   `X-Rdma-Token: session=<id>;addr=<hex>;len=<n>;rkey=<hex>` (the client's registered
//!   buffer: its address and rkey in hex, with or without `0x`, its length in decimal bytes;
//!   any order, each once) move the bytes by RDMA: for a PUT the server RDMA-READs `len`
//!   bytes of the buffer (the object's size), for a GET it RDMA-WRITEs the object into it,
//!   then answers. A PUT carries the object's CRC32C in `X-Crc32c: <8 hex digits>`; the
//!   server checks it before the object is stored. A GET's answer carries `X-Object-Size` and
//!   `X-Crc32c`, which the client checks. A GET whose buffer is smaller than the object is
//!   answered `416` with `X-Object-Size`.
//! - Without a token, `PUT` and `GET` carry the object in the HTTP body (`curl` works),
//!   `HEAD` answers its size and `DELETE` removes it.
//!
//! Errors are answered with a line saying what to do: `400` a malformed token, key or CRC
//! mismatch, or an RDMA transfer that failed on the client's buffer (wrong rkey, a range
//! outside its region; the session is then closed); `404` no such object; `410` no such
//! session (closed, failed, or idle too long: open a new one); `416` a buffer too small;
//! `503` too many sessions; `507` the disk is full (nothing stored).
//!
//! # The data path
//!
//! One CQ serves every session; a poller thread hands each completion (and its staging
//! buffer) to the request that posted it, by QP number. The staging pool is registered once:
//! `--workers` × [`DEPTH`] chunks of [`CHUNK`] bytes; each request moves its object through
//! at most [`DEPTH`] chunks in flight, so the pool never grows with the object and never runs
//! out. A PUT is written to a temporary file in the bucket, fsynced, renamed into place and
//! the directory fsynced before it is answered: concurrent PUTs of one key leave one whole
//! object. CRC32C (Castagnoli) is computed by [`crc32c`], a slicing-by-8 table in this
//! program.

mod client;
mod link;
mod server;

use std::fmt;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// The error of every step: a message for the user.
type Error = Box<dyn std::error::Error + Send + Sync>;

/// The staging chunk: what one RDMA READ or WRITE moves.
pub(crate) const CHUNK: usize = 1 << 20;
/// Chunks one request keeps in flight (and RDMA READs each QP allows at once).
pub(crate) const DEPTH: usize = 4;
/// How long a request waits for one of its RDMA operations to complete, and a client for an
/// HTTP answer to start arriving.
pub(crate) const RDMA_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest an HTTP exchange may take, body included.
pub(crate) const HTTP_TIMEOUT: Duration = Duration::from_secs(600);
/// The request headers of the RDMA path.
pub(crate) const TOKEN: &str = "X-Rdma-Token";
pub(crate) const SESSION: &str = "X-Rdma-Session";
pub(crate) const CRC: &str = "X-Crc32c";
pub(crate) const SIZE: &str = "X-Object-Size";
/// The server's file and CRC32C time of an RDMA request, the standard header's syntax:
/// `file;dur=<ms>, crc;dur=<ms>`.
pub(crate) const TIMING: &str = "Server-Timing";

/// An object store over RDMA: the server and its clients.
#[derive(Parser, Debug)]
#[command(version)]
struct Cli {
    #[command(flatten)]
    rdma: RdmaArgs,
    #[command(subcommand)]
    command: Command,
}

/// The RDMA device and the TCP port, as in rc_pingpong.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct RdmaArgs {
    /// Listen on / connect to TCP port (HTTP)
    #[arg(short = 'p', long = "port", default_value_t = 18900, global = true)]
    pub port: u16,
    /// RDMA device to use (default: the first one found)
    #[arg(short = 'd', long = "ib-dev", global = true)]
    pub ib_dev: Option<String>,
    /// Port of the RDMA device
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, global = true)]
    pub ib_port: u8,
    /// Local port GID index (default on Ethernet ports: the routable GID)
    #[arg(short = 'g', long = "gid-idx", global = true)]
    pub gid_idx: Option<u8>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve the buckets (directories) of --root until killed
    Serve {
        /// The object root: one directory per bucket, one file per object
        #[arg(long)]
        root: std::path::PathBuf,
        /// Requests served at once (each holds up to 4 staging chunks of 1 MiB)
        #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=256))]
        workers: u16,
        /// Sessions (RC QPs) open at once; more are refused with 503
        #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u16).range(1..=4096))]
        max_sessions: u16,
        /// A session unused this many seconds is closed when another opens
        #[arg(long, default_value_t = 300)]
        idle_secs: u64,
    },
    /// Store FILE as BUCKET/KEY over RDMA
    Put { object: String, file: std::path::PathBuf, server: String },
    /// Fetch BUCKET/KEY into FILE over RDMA
    Get { object: String, file: std::path::PathBuf, server: String },
    /// PUT and GET throughput over RDMA and over TCP
    Bench {
        /// Object sizes, comma-separated: A..B is the powers of two from A to B, and B
        /// (suffixes K, M, G)
        #[arg(long, default_value = "4K..192M")]
        size: Sizes,
        /// Transfers of each kind per size
        #[arg(short = 'n', long = "iters", default_value_t = 5,
              value_parser = clap::value_parser!(u32).range(1..))]
        iters: u32,
        server: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { root, workers, max_sessions, idle_secs } => server::run(
            &cli.rdma,
            server::Config {
                root,
                workers: workers.into(),
                max_sessions: max_sessions.into(),
                idle: Duration::from_secs(idle_secs),
            },
        ),
        Command::Put { object, file, server } => {
            client::with_session(&cli.rdma, &server, |c| c.put(&object, &file))
        }
        Command::Get { object, file, server } => {
            client::with_session(&cli.rdma, &server, |c| c.get(&object, &file))
        }
        Command::Bench { size, iters, server } => {
            client::with_session(&cli.rdma, &server, |c| c.bench(&size, iters))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("objstore: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `X-Rdma-Token`: the client's buffer for one request of session `session`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Token {
    pub(crate) session: u64,
    pub(crate) addr: u64,
    pub(crate) len: u64,
    pub(crate) rkey: u32,
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Token { session, addr, len, rkey } = self;
        write!(f, "session={session};addr={addr:#x};len={len};rkey={rkey:#x}")
    }
}

impl std::str::FromStr for Token {
    type Err = String;

    fn from_str(s: &str) -> Result<Token, String> {
        let hex = |v: &str| {
            let v = v.strip_prefix("0x").unwrap_or(v);
            u64::from_str_radix(v, 16).ok()
        };
        let (mut session, mut addr, mut len, mut rkey) = (None, None, None, None);
        for field in s.split(';').map(str::trim) {
            let (name, value) =
                field.split_once('=').ok_or_else(|| format!("{field:?} is not name=value"))?;
            let (slot, parsed) = match name {
                "session" => (&mut session, value.parse().ok()),
                "addr" => (&mut addr, hex(value)),
                "len" => (&mut len, value.parse().ok()),
                "rkey" => (&mut rkey, hex(value).filter(|k| *k <= u32::MAX.into())),
                _ => return Err(format!("unknown field {name:?}")),
            };
            if slot.is_some() {
                return Err(format!("{name} is given twice"));
            }
            *slot = Some(parsed.ok_or_else(|| format!("bad {name} {value:?}"))?);
        }
        let missing = |name| format!("{name} is missing");
        Ok(Token {
            session: session.ok_or_else(|| missing("session"))?,
            addr: addr.ok_or_else(|| missing("addr"))?,
            len: len.ok_or_else(|| missing("len"))?,
            rkey: rkey.ok_or_else(|| missing("rkey"))? as u32,
        })
    }
}

/// The CRC32C (Castagnoli, reflected polynomial 0x82F63B78) of the bytes fed so far.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Crc32c(u32);

/// Slicing-by-8 tables: `TABLES[k][b]` is the CRC of byte `b` followed by `k` zero bytes.
static TABLES: [[u32; 256]; 8] = {
    let mut t = [[0u32; 256]; 8];
    let mut b = 0;
    while b < 256 {
        let mut crc = b as u32;
        let mut i = 0;
        while i < 8 {
            crc = if crc & 1 == 1 { crc >> 1 ^ 0x82F6_3B78 } else { crc >> 1 };
            i += 1;
        }
        t[0][b] = crc;
        b += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut b = 0;
        while b < 256 {
            let prev = t[k - 1][b];
            t[k][b] = prev >> 8 ^ t[0][(prev & 0xff) as usize];
            b += 1;
        }
        k += 1;
    }
    t
};

impl Crc32c {
    pub(crate) fn update(&mut self, bytes: &[u8]) {
        let mut crc = !self.0;
        let mut words = bytes.chunks_exact(8);
        for w in &mut words {
            let lo = crc ^ u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            crc = TABLES[7][(lo & 0xff) as usize]
                ^ TABLES[6][(lo >> 8 & 0xff) as usize]
                ^ TABLES[5][(lo >> 16 & 0xff) as usize]
                ^ TABLES[4][(lo >> 24) as usize]
                ^ TABLES[3][w[4] as usize]
                ^ TABLES[2][w[5] as usize]
                ^ TABLES[1][w[6] as usize]
                ^ TABLES[0][w[7] as usize];
        }
        for &b in words.remainder() {
            crc = crc >> 8 ^ TABLES[0][((crc ^ b as u32) & 0xff) as usize];
        }
        self.0 = !crc;
    }

    pub(crate) fn value(self) -> u32 {
        self.0
    }
}

/// The CRC32C of `bytes`.
pub(crate) fn crc32c(bytes: &[u8]) -> u32 {
    let mut crc = Crc32c::default();
    crc.update(bytes);
    crc.value()
}

/// A `X-Crc32c` value: 8 hex digits.
pub(crate) fn parse_crc(value: &str) -> Option<u32> {
    u32::from_str_radix(value.trim().trim_start_matches("0x"), 16).ok()
}

/// Object sizes for `bench --size`.
#[derive(Clone, Debug)]
pub(crate) struct Sizes(pub Vec<usize>);

impl std::str::FromStr for Sizes {
    type Err = String;

    fn from_str(s: &str) -> Result<Sizes, String> {
        let one = |v: &str| -> Result<usize, String> {
            let v = v.trim();
            let (digits, unit) = match v.char_indices().last() {
                Some((i, c)) if c.is_ascii_alphabetic() => (&v[..i], c.to_ascii_uppercase()),
                _ => (v, 'B'),
            };
            let shift = match unit {
                'B' => 0,
                'K' => 10,
                'M' => 20,
                'G' => 30,
                _ => return Err(format!("bad size {v:?}: use a number with K, M or G")),
            };
            let n: usize = digits.parse().map_err(|_| format!("bad size {v:?}"))?;
            n.checked_shl(shift).filter(|&n| n > 0).ok_or_else(|| format!("bad size {v:?}"))
        };
        let mut sizes = Vec::new();
        for part in s.split(',') {
            let (from, to) = match part.split_once("..") {
                Some((a, b)) => (one(a)?, one(b)?),
                None => (one(part)?, one(part)?),
            };
            if from > to {
                return Err(format!("{part}: the first size is larger than the last"));
            }
            sizes.extend(
                std::iter::successors(Some(from), |&n| n.checked_mul(2)).take_while(|&n| n < to),
            );
            sizes.push(to);
        }
        Ok(Sizes(sizes))
    }
}

/// `bytes` as KiB/MiB.
pub(crate) fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / f64::from(1 << 20)),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_check_values() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let mut split = Crc32c::default();
        split.update(&data[..333]);
        split.update(&data[333..]);
        assert_eq!(split.value(), crc32c(&data));
    }

    #[test]
    fn tokens_round_trip_and_refuse_garbage() {
        let t = Token { session: 3, addr: 0x7f00_1234, len: 4096, rkey: 0xabc };
        assert_eq!(t.to_string().parse::<Token>(), Ok(t));
        for bad in [
            "",
            "session=1",
            "session=x;addr=1;len=1;rkey=1",
            "session=1;addr=1;len=1;rkey=1;rkey=2",
            "session=1;addr=1;len=1;rkey=100000000",
            "session=1;addr=1;len=1;rkey=1;x=1",
        ] {
            assert!(bad.parse::<Token>().is_err(), "{bad}");
        }
    }

    #[test]
    fn size_ranges() {
        let s: Sizes = "4K..192M".parse().unwrap();
        assert_eq!(s.0.first(), Some(&4096));
        assert_eq!(s.0.last(), Some(&(192 << 20)));
        assert_eq!(s.0.len(), 17);
        assert_eq!("64K".parse::<Sizes>().unwrap().0, [65536]);
        assert_eq!("64K,1M..4M".parse::<Sizes>().unwrap().0, [64 << 10, 1 << 20, 2 << 20, 4 << 20]);
        assert!("1M..4K".parse::<Sizes>().is_err());
    }
}
