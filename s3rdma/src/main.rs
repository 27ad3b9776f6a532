//! `s3rdma serve`: the S3 server over a directory tree; `s3rdma get` / `put`: its client, over
//! plain S3 or `hipobj-rc-v2` (`--rdma`). See the library's docs.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use s3rdma::hipobj::client::{Client, PART_SIZE};
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
    /// Downloads BUCKET/KEY into FILE.
    Get(Transfer),
    /// Uploads FILE as BUCKET/KEY.
    Put(Transfer),
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
struct Transfer {
    /// The server, http://HOST:PORT.
    #[arg(long, default_value = "http://127.0.0.1:9000")]
    endpoint: String,
    /// The credentials file (its first key signs), as for serve.
    #[arg(long)]
    credentials: Option<PathBuf>,
    /// Moves the object's bytes over RDMA (hipobj-rc-v2) instead of in the HTTP body (put:
    /// a file over 1 GiB as a multipart upload of 1 GiB parts).
    #[arg(long)]
    rdma: bool,
    #[command(flatten)]
    device: Rdma,
    /// get: BUCKET/KEY FILE; put: FILE BUCKET/KEY.
    #[arg(num_args = 2)]
    paths: Vec<String>,
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
    /// Seconds a request's headers may take to arrive.
    #[arg(long, default_value_t = 30)]
    header_timeout: u64,
    /// Seconds a request body may send nothing before the request fails.
    #[arg(long, default_value_t = 60)]
    body_timeout: u64,
    /// Serves hipobj-rc-v2 only if an RDMA device opens (without: plain S3, the RC routes
    /// answer 501); "off" serves plain S3 only.
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
    /// Bytes all hipobj-rc-v2 sessions may stage in memory at once.
    #[arg(long, default_value_t = SessionLimits::default().max_staged_bytes)]
    rdma_max_staged_bytes: u64,
    /// Milliseconds a prepared session waits for READY.
    #[arg(long, default_value_t = SessionLimits::default().prepare_timeout.as_millis() as u64)]
    rdma_prepare_timeout_ms: u64,
    /// Milliseconds a session's data phase may take.
    #[arg(long, default_value_t = SessionLimits::default().exec_timeout.as_millis() as u64)]
    rdma_exec_timeout_ms: u64,
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Serve(args) => run(args),
        Command::Get(args) => get(args),
        Command::Put(args) => put(args),
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
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
        println!(
            "s3rdma: serving {} ({} bucket(s){}) on http://{} for access key(s) {}",
            args.root.display(),
            buckets.len(),
            if removed > 0 { format!(", {removed} stale temporary file(s) removed") } else { String::new() },
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
            result = s3rdma::serve(listener, service, limits) => result.map_err(Into::into),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}

/// `BUCKET/KEY` split at its first `/`.
fn object(path: &str) -> Result<(&str, &str), String> {
    path.split_once('/')
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
        .ok_or_else(|| format!("{path:?} is not BUCKET/KEY"))
}

fn client(args: &Transfer) -> Result<Client, Box<dyn std::error::Error>> {
    let key = Credentials::load(args.credentials.as_deref())?.swap_remove(0);
    Ok(Client::new(&args.endpoint, key)?)
}

fn device(args: &Transfer) -> Result<Device, Box<dyn std::error::Error>> {
    Ok(Device::open(args.device.rdma_device.as_deref(), args.device.rdma_gid_index)?)
}

/// The S3 error of a plain request that failed.
fn refused(what: &str, mut response: http::Response<ureq::Body>) -> Box<dyn std::error::Error> {
    let body = response.body_mut().read_to_string().unwrap_or_default();
    format!("{what} answered {}: {body}", response.status()).into()
}

fn get(args: Transfer) -> Result<(), Box<dyn std::error::Error>> {
    let (bucket, key) = object(&args.paths[0])?;
    let file = &args.paths[1];
    let client = client(&args)?;
    let head = client.object_url(rusty_s3::Method::Head, bucket, key);
    let response = client.agent().head(head.as_str()).call()?;
    if response.status() != 200 {
        return Err(refused("HeadObject", response));
    }
    let size: u64 = response
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .ok_or("HeadObject's answer has no Content-Length")?;
    if args.rdma && size == 0 {
        // Nothing to move: RDMA transfers are of 1 byte or more.
        std::fs::write(file, b"").map_err(|e| format!("cannot write {file}: {e}"))?;
        println!("s3rdma: got 0 bytes (an empty object)");
    } else if args.rdma {
        let size = usize::try_from(size).map_err(|_| "the object does not fit in memory")?;
        let (data, done) = client.get(&device(&args)?, bucket, key, 0, size)?;
        std::fs::write(file, data).map_err(|e| format!("cannot write {file}: {e}"))?;
        println!(
            "s3rdma: got {} bytes over RDMA, ETag {}",
            done.bytes,
            done.etag.unwrap_or_default()
        );
    } else {
        let url = client.object_url(rusty_s3::Method::Get, bucket, key);
        let mut response = client.agent().get(url.as_str()).call()?;
        if response.status() != 200 {
            return Err(refused("GetObject", response));
        }
        let mut out =
            std::fs::File::create(file).map_err(|e| format!("cannot create {file}: {e}"))?;
        let copied = std::io::copy(&mut response.body_mut().as_reader(), &mut out)?;
        println!("s3rdma: got {copied} bytes");
    }
    Ok(())
}

fn put(args: Transfer) -> Result<(), Box<dyn std::error::Error>> {
    let file = &args.paths[0];
    let (bucket, key) = object(&args.paths[1])?;
    let client = client(&args)?;
    let data = std::fs::read(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    if args.rdma {
        let done = client.upload(&device(&args)?, (bucket, key), &data, PART_SIZE)?;
        println!(
            "s3rdma: put {} bytes over RDMA, ETag {}, {}",
            done.bytes,
            done.etag.unwrap_or_default(),
            done.checksum.unwrap_or_default()
        );
    } else {
        let url = client.object_url(rusty_s3::Method::Put, bucket, key);
        let response = client.agent().put(url.as_str()).send(&data[..])?;
        if response.status() != 200 {
            return Err(refused("PutObject", response));
        }
        println!("s3rdma: put {} bytes", data.len());
    }
    Ok(())
}
