//! `s3rdma serve`: the S3 server over a directory tree (see the library's docs).

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use s3rdma::{Credentials, Limits, SizeLimits, Store};

#[derive(Parser)]
#[command(version, about = "An S3 server over a directory tree")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serves the buckets under --root over HTTP.
    Serve(Serve),
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
}

fn main() -> ExitCode {
    let Command::Serve(args) = Cli::parse().command;
    match run(args) {
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
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&args.listen)
            .await
            .map_err(|e| format!("cannot listen on {}: {e}", args.listen))?;
        println!(
            "s3rdma: serving {} ({} bucket(s){}) on http://{} for access key {}",
            args.root.display(),
            buckets.len(),
            if removed > 0 { format!(", {removed} stale temporary file(s) removed") } else { String::new() },
            listener.local_addr()?,
            credentials.access_key_id
        );
        println!(
            "s3rdma: limits: {} connections, objects {} B, parts {} B, headers {} B, header timeout {} s, body idle timeout {} s",
            limits.max_connections, sizes.max_object, sizes.max_part, limits.max_header_bytes, args.header_timeout, args.body_timeout
        );
        use std::io::Write;
        std::io::stdout().flush()?;
        let service = s3rdma::service(store, &credentials);
        tokio::select! {
            result = s3rdma::serve(listener, service, limits) => result.map_err(Into::into),
            _ = tokio::signal::ctrl_c() => Ok(()),
        }
    })
}
