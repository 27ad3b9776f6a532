//! perftest's options, and the checks made before any verb runs.

use clap::Parser;

/// The largest -a size: perftest's 8 MiB.
pub const MAX_SIZE: u32 = 8 << 20;

/// Bandwidth test in perftest's style (ib_write_bw / ib_read_bw / ib_send_bw options).
#[derive(Parser, Debug, Clone)]
#[command(version)]
pub struct Args {
    /// RDMA device (default: the first one found)
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Port of the RDMA device
    #[arg(short = 'i', long = "ib-port", default_value_t = 1)]
    pub ib_port: u8,
    /// GID index (default on Ethernet ports: the routable GID)
    #[arg(short = 'x', long = "gid-index")]
    pub gid_index: Option<u8>,
    /// Message size in bytes
    #[arg(short = 's', long = "size", default_value_t = 65536)]
    pub size: u32,
    /// Iterations per QP
    #[arg(short = 'n', long = "iters", default_value_t = 5000)]
    pub iters: u64,
    /// Run all sizes 2 B .. 8 MiB (powers of two; capped by --max-size)
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Largest size of -a, in bytes
    #[arg(long = "max-size", default_value_t = MAX_SIZE)]
    pub max_size: u32,
    /// Number of QPs
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    pub qps: u32,
    /// Run for this many seconds instead of -n iterations
    #[arg(short = 'D', long = "duration")]
    pub duration: Option<u64>,
    /// Outstanding WRs per QP (tx depth)
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    pub tx_depth: u32,
    /// WRs per ibv_post_send call (post list)
    #[arg(short = 'l', long = "post_list", default_value_t = 1)]
    pub post_list: u32,
    /// Signal one WR in this many (CQ moderation; default 100, or -l when -l > 1)
    #[arg(short = 'Q', long = "cq-mod")]
    pub cq_mod: Option<u32>,
    /// Largest message sent inline, in bytes (default: what the QP offers)
    #[arg(short = 'I', long = "inline_size")]
    pub inline_size: Option<u32>,
    /// Path MTU in bytes (default: the port's active MTU)
    #[arg(short = 'm', long = "mtu")]
    pub mtu: Option<u32>,
    /// TCP port for the parameter exchange
    #[arg(short = 'p', long = "port", default_value_t = 18515)]
    pub port: u16,
    /// Connection type: RC, or DC (mlx5 Dynamically Connected: DCIs post to the peer's DCTs;
    /// needs --features mlx5 and a ConnectX device; always the raw tier)
    #[arg(short = 'c', long = "connection", default_value = "RC", value_parser = ["RC", "DC"])]
    pub connection: String,
    /// Connect the QPs through rdma_cm, on port -p + 1 (needs --features rdmacm)
    #[arg(short = 'R', long = "rdma_cm")]
    pub rdma_cm: bool,
    /// Both sides send (bidirectional)
    #[arg(short = 'b', long = "bidirectional")]
    pub bidirectional: bool,
    /// Report Gb/sec instead of MB/sec
    #[arg(long = "report_gbits")]
    pub report_gbits: bool,
    /// One JSON object per size on stdout instead of the table
    #[arg(long = "json")]
    pub json: bool,
    /// Post through the unsafe raw tier (one buffer per QP, as perftest) instead of the safe
    /// buffer tier
    #[arg(long = "raw")]
    pub raw: bool,
    /// Server to connect to (none: act as the server)
    pub server: Option<String>,
}

impl Args {
    /// The sizes to run.
    pub fn sizes(&self) -> Vec<u32> {
        if self.all {
            (1..=23).map(|p| 1u32 << p).filter(|&s| s <= self.max_size.min(MAX_SIZE)).collect()
        } else {
            vec![self.size]
        }
    }

    /// Whether `-c DC` was asked for.
    pub fn is_dc(&self) -> bool {
        self.connection == "DC"
    }

    /// The posting tier: DC has only the raw one.
    pub fn tier(&self) -> &'static str {
        if self.raw || self.is_dc() {
            "raw"
        } else {
            "safe"
        }
    }

    /// perftest's CQ moderation: -Q, else -l when posting lists, else 100; never above -t.
    pub fn cq_mod(&self) -> u32 {
        self.cq_mod
            .unwrap_or(if self.post_list > 1 { self.post_list } else { 100 })
            .min(self.tx_depth)
    }

    /// The checks that need no device: each message says what to change.
    pub fn check(&self) -> Result<(), String> {
        let positive = [
            ("-s (size)", self.size),
            ("-q (QPs)", self.qps),
            ("-t (tx depth)", self.tx_depth),
            ("-l (post list)", self.post_list),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if self.iters == 0 && self.duration.is_none() {
            return Err("-n (iterations) must be at least 1".into());
        }
        if self.duration == Some(0) {
            return Err("-D (duration) must be at least 1 second".into());
        }
        if let Some(q) = self.cq_mod {
            if q == 0 || q > self.tx_depth {
                return Err(format!(
                    "-Q {q} must be 1..={} (at most -t, the tx depth)",
                    self.tx_depth
                ));
            }
        }
        if self.post_list > self.tx_depth {
            return Err(format!(
                "-l {} must not exceed -t {} (the tx depth)",
                self.post_list, self.tx_depth
            ));
        }
        if self.is_dc() && self.rdma_cm {
            return Err("-c DC does not work with -R: DC QPs are not connected by rdma_cm".into());
        }
        if self.size > MAX_SIZE || (self.all && self.max_size < 2) {
            return Err(format!("sizes run from 2 B (-a) or 1 B to {MAX_SIZE} B"));
        }
        Ok(())
    }
}
