//! `s3rdma bench`: PUT then GET of N objects of one size, over RDMA when the client has a
//! device and the server serves `hipobj-rc-v2`, else over plain S3; the throughput and the
//! operations per second of each direction.

use std::time::{Duration, Instant};

use s3rdma::hipobj::{Device, MAX_TRANSFER};

use super::transfer::{declined, open};
use super::{Connection, Error, S3};
use crate::Rdma;

/// `s3rdma bench BUCKET[/PREFIX]`.
#[derive(clap::Args)]
pub struct Bench {
    #[command(flatten)]
    connection: Connection,
    /// "auto": over RDMA when a device opens and the server serves hipobj-rc-v2, else plain
    /// S3; "off": plain S3.
    #[arg(long, default_value = "auto", value_parser = ["auto", "off"])]
    rdma: String,
    #[command(flatten)]
    device: Rdma,
    /// The objects written, then read.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    count: u64,
    /// The bytes of each object: a number, with K, M or G for KiB, MiB or GiB.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    size: u64,
    /// Leaves the objects in place (else they are deleted at the end).
    #[arg(long)]
    keep: bool,
    /// The bucket, and the prefix of the keys written (default: s3rdma-bench/).
    path: String,
}

/// How the bytes move.
enum Transport {
    Rdma(Device),
    Plain,
}

impl Transport {
    fn name(&self) -> &'static str {
        match self {
            Transport::Rdma(_) => "rdma",
            Transport::Plain => "s3",
        }
    }
}

/// One direction's result.
struct Pass {
    op: &'static str,
    transport: &'static str,
    elapsed: Duration,
}

/// Runs the benchmark and prints its table.
pub fn bench(args: Bench) -> Result<(), Error> {
    let (bucket, prefix) = match args.path.split_once('/') {
        Some((bucket, prefix)) => (bucket, prefix),
        None => (args.path.as_str(), "s3rdma-bench/"),
    };
    let s3 = S3::connect(&args.connection)?;
    let mut transport = Transport::Plain;
    if args.rdma == "auto" && (1..=MAX_TRANSFER).contains(&args.size) {
        match open(&args.device) {
            Ok(device) => transport = Transport::Rdma(device),
            Err(e) => eprintln!("s3rdma: no RDMA device ({e}): plain S3"),
        }
    }
    let mut data =
        vec![0; usize::try_from(args.size).map_err(|_| "--size does not fit in memory")?];
    rand::fill(&mut data[..]);
    let keys: Vec<String> = (0..args.count).map(|i| format!("{prefix}{i:06}")).collect();

    let put = pass(&mut transport, "PUT", |transport| {
        for key in &keys {
            match transport {
                Transport::Rdma(device) => drop(s3.client().put(device, bucket, key, &data)?),
                Transport::Plain => drop(s3.put_object(bucket, key, args.size, &data[..])?),
            }
        }
        Ok(())
    })?;
    let get = pass(&mut transport, "GET", |transport| {
        for key in &keys {
            let got = match transport {
                Transport::Rdma(device) => s3.client().get(device, bucket, key, 0, data.len())?.0,
                Transport::Plain => s3
                    .get_object(bucket, key, None)?
                    .body_mut()
                    .with_config()
                    .limit(args.size)
                    .read_to_vec()?,
            };
            if got != data {
                return Err(
                    format!("{bucket}/{key} read back differs from what was written").into()
                );
            }
        }
        Ok(())
    })?;
    if !args.keep {
        for key in &keys {
            s3.delete_object(bucket, key)?;
        }
    }
    println!("op   transport  objects  bytes/object  seconds     MiB/s     ops/s");
    for pass in [put, get] {
        let seconds = pass.elapsed.as_secs_f64();
        let bytes = (args.count * args.size) as f64;
        println!(
            "{:<4} {:<9}  {:>7}  {:>12}  {:>7.3}  {:>8.1}  {:>8.1}",
            pass.op,
            pass.transport,
            args.count,
            args.size,
            seconds,
            bytes / f64::from(1 << 20) / seconds,
            args.count as f64 / seconds
        );
    }
    Ok(())
}

/// Times `run` over `transport`; when the server declines RDMA, switches to plain S3 and
/// runs it again.
fn pass(
    transport: &mut Transport,
    op: &'static str,
    run: impl Fn(&Transport) -> Result<(), Error>,
) -> Result<Pass, Error> {
    let start = Instant::now();
    let (start, result) = match run(transport) {
        Err(e) if declined(&e) => {
            eprintln!("s3rdma: {e}: plain S3");
            *transport = Transport::Plain;
            (Instant::now(), run(transport))
        }
        done => (start, done),
    };
    result?;
    Ok(Pass { op, transport: transport.name(), elapsed: start.elapsed() })
}

/// `N`, `NK`, `NM` or `NG` bytes (binary units).
fn parse_size(s: &str) -> Result<u64, String> {
    let (digits, shift) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 30),
        _ => (s, 0),
    };
    let n: u64 =
        digits.parse().map_err(|_| format!("{s:?} is not a size (e.g. 4096, 64K, 1M, 2G)"))?;
    n.checked_mul(1 << shift)
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{s:?}: the size must be 1 byte to 2^64-1 bytes"))
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_take_binary_units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("64K"), Ok(64 << 10));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        for bad in ["", "0", "K", "1T", "-1", "99999999999G"] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }
}
