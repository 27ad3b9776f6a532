//! `s3rdma serve`: the S3 server over a directory tree; `s3rdma ls`, `get`, `put`, `rm`, `mb`
//! and `bench`: a client of it (over plain S3 or `hipobj-rc-v2`) or of any S3 server. See the
//! library's docs.

mod cli;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use s3rdma::cuobj::{DcConfig, Initiators};
use s3rdma::hipobj::{Device, RcRoute, SessionLimits};
use s3rdma::{Credentials, Limits, SizeLimits, Store};

#[derive(Parser)]
#[command(version, about = "An S3 server over a directory tree")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serves the buckets under --root over HTTP, and hipobj-rc-v2 over RDMA.
    Serve(Serve),
    /// Lists the buckets, or the objects of BUCKET[/PREFIX].
    Ls(cli::list::Ls),
    /// Downloads BUCKET/KEY into FILE.
    Get(cli::transfer::Get),
    /// Uploads FILE as BUCKET/KEY.
    Put(cli::transfer::Put),
    /// Deletes BUCKET/KEY.
    Rm(cli::list::Rm),
    /// Creates BUCKET.
    Mb(cli::list::Mb),
    /// Writes then reads COUNT objects of SIZE bytes; prints MiB/s and operations/s.
    Bench(cli::bench::Bench),
}

/// The RDMA device (both sides).
#[derive(clap::Args)]
struct Rdma {
    /// The RDMA device (default: the first one).
    #[arg(long)]
    rdma_device: Option<String>,
    /// The index of the GID to send from (default: the port's RoCE v2 IPv4 GID).
    #[arg(long)]
    rdma_gid_index: Option<u8>,
}

#[derive(clap::Args)]
struct Serve {
    /// The directory whose subdirectories are the buckets.
    #[arg(long)]
    root: PathBuf,
    /// The address to listen on (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: String,
    /// A JSON file {"access_key_id": ..., "secret_access_key": ...}; without it the
    /// environment's S3RDMA_ACCESS_KEY_ID and S3RDMA_SECRET_ACCESS_KEY.
    #[arg(long)]
    credentials: Option<PathBuf>,
    /// A PEM file of the server's certificate chain (its certificate first): serves HTTPS.
    #[arg(long, requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The PEM file of the certificate's private key.
    #[arg(long, requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Connections served at once.
    #[arg(long, default_value_t = 256)]
    max_connections: usize,
    /// The largest object, in bytes.
    #[arg(long, default_value_t = 5 << 40)]
    max_object_size: u64,
    /// The largest part of a multipart upload, in bytes.
    #[arg(long, default_value_t = 5 << 30)]
    max_part_size: u64,
    /// The buffer a request's line and headers must fit in, in bytes (at least 8192).
    #[arg(long, default_value_t = 64 << 10)]
    max_header_bytes: usize,
    /// Seconds a request's headers (over HTTPS: also the TLS handshake) may take to arrive.
    #[arg(long, default_value_t = 30)]
    header_timeout: u64,
    /// Seconds a request body may send nothing before the request fails.
    #[arg(long, default_value_t = 60)]
    body_timeout: u64,
    /// Serves hipobj-rc-v2 only if an RDMA device opens (without: plain S3, the RC routes
    /// answer 501), and cuObject's x-amz-rdma-token if it has DC (without: declined with
    /// x-amz-rdma-reply: 501); "off" serves plain S3 only.
    #[arg(long, default_value = "auto", value_parser = ["auto", "off"])]
    rdma: String,
    #[command(flatten)]
    device: Rdma,
    /// hipobj-rc-v2 sessions open at once.
    #[arg(long, default_value_t = SessionLimits::default().max_sessions)]
    rdma_max_sessions: usize,
    /// hipobj-rc-v2 sessions open at once per access key.
    #[arg(long, default_value_t = SessionLimits::default().max_per_principal)]
    rdma_max_sessions_per_key: usize,
    /// Bytes all hipobj-rc-v2 sessions may hold registered at once (a GET its ring of 4 MiB,
    /// a PUT its size).
    #[arg(long, default_value_t = SessionLimits::default().max_staged_bytes)]
    rdma_max_staged_bytes: u64,
    /// Milliseconds a prepared session waits for READY.
    #[arg(long, default_value_t = SessionLimits::default().prepare_timeout.as_millis() as u64)]
    rdma_prepare_timeout_ms: u64,
    /// Milliseconds a session's data phase may take.
    #[arg(long, default_value_t = SessionLimits::default().exec_timeout.as_millis() as u64)]
    rdma_exec_timeout_ms: u64,
    /// The DC access key of cuObject's x-amz-rdma-token clients' DCTs (0x and hex digits,
    /// or decimal).
    #[arg(long, default_value = "0xffeeddcc", value_parser = rdma_verbs::c_number::parse::<u64>)]
    rdma_dc_key: u64,
    /// DC initiators: x-amz-rdma-token transfers at once.
    #[arg(long, default_value_t = DcConfig::default().initiators)]
    rdma_dc_initiators: usize,
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Serve(args) => run(args),
        Command::Ls(args) => cli::list::ls(args),
        Command::Get(args) => cli::transfer::get(args),
        Command::Put(args) => cli::transfer::put(args),
        Command::Rm(args) => cli::list::rm(args),
        Command::Mb(args) => cli::list::mb(args),
        Command::Bench(args) => cli::bench::bench(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("s3rdma: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: Serve) -> Result<(), Box<dyn std::error::Error>> {
    let credentials = Credentials::load(args.credentials.as_deref())?;
    let sizes = SizeLimits { max_object: args.max_object_size, max_part: args.max_part_size };
    let largest = sizes.max_object.max(sizes.max_part);
    let limits = Limits {
        max_connections: args.max_connections,
        // aws-chunked framing adds a little to the bytes of an object or a part.
        max_body: largest.saturating_add(largest / 64 + (64 << 10)),
        max_header_bytes: args.max_header_bytes,
        header_timeout: Duration::from_secs(args.header_timeout),
        body_idle_timeout: Duration::from_secs(args.body_timeout),
    };
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(s3rdma::tls_server_config(cert, key)?),
        _ => None,
    };
    let (store, removed) = Store::open(args.root.clone(), sizes)?;
    let buckets = store.bucket_names()?;
    let device = match args.rdma.as_str() {
        "off" => None,
        _ => match Device::open(args.device.rdma_device.as_deref(), args.device.rdma_gid_index) {
            Ok(device) => {
                println!("s3rdma: hipobj-rc-v2 over {device:?}");
                Some(device)
            }
            Err(e) => {
                println!(
                    "s3rdma: no RDMA device ({e}); serving plain S3, hipobj-rc-v2 answers 501"
                );
                None
            }
        },
    };
    let sessions = SessionLimits {
        max_sessions: args.rdma_max_sessions,
        max_per_principal: args.rdma_max_sessions_per_key,
        max_staged_bytes: args.rdma_max_staged_bytes,
        prepare_timeout: Duration::from_millis(args.rdma_prepare_timeout_ms),
        exec_timeout: Duration::from_millis(args.rdma_exec_timeout_ms),
    };
    let rc = RcRoute::new(store.clone(), device, sessions);
    if args.rdma != "off" {
        let config = DcConfig {
            key: args.rdma_dc_key,
            initiators: args.rdma_dc_initiators,
            ..DcConfig::default()
        };
        let (name, gid) = (args.device.rdma_device.as_deref(), args.device.rdma_gid_index);
        match Initiators::open(name, gid, config) {
            Ok(pool) => {
                println!("s3rdma: cuObject x-amz-rdma-token (DC) with {pool:?}");
                store.serve_cuobj(pool);
            }
            Err(e) => println!(
                "s3rdma: no DC-capable device ({e}); x-amz-rdma-token requests are declined \
                 (x-amz-rdma-reply: 501)"
            ),
        }
    } else {
        println!("s3rdma: --rdma off: plain S3 only; hipobj-rc-v2 and x-amz-rdma-token declined");
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
        println!(
            "s3rdma: serving {} ({} bucket(s){}) on {}://{} for access key(s) {}",
            args.root.display(),
            buckets.len(),
            if removed > 0 { format!(", {removed} stale temporary file(s) removed") } else { String::new() },
            if tls.is_some() { "https" } else { "http" },
            listener.local_addr()?,
            credentials.iter().map(|k| k.access_key_id.as_str()).collect::<Vec<_>>().join(", ")
        );
        println!(
            "s3rdma: limits: {} connections, objects {} B, parts {} B, headers {} B, header timeout {} s, body idle timeout {} s",
            limits.max_connections, sizes.max_object, sizes.max_part, limits.max_header_bytes, args.header_timeout, args.body_timeout
        );
        use std::io::Write;
        std::io::stdout().flush()?;
        let service = s3rdma::service(store, &credentials, rc);
        tokio::select! {
            result = async {
                match tls {
                    Some(tls) => s3rdma::serve_tls(listener, service, limits, tls).await,
                    None => s3rdma::serve(listener, service, limits).await,
                }
            } => result.map_err(Into::into),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}
