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
    /// One JSON object per size on stdout instead of the table (perftest's --out_json)
    #[arg(long = "json", visible_alias = "out_json")]
    pub json: bool,
    /// Post through the unsafe raw tier (one buffer per QP, as perftest) instead of the safe
    /// buffer tier
    #[arg(long = "raw")]
    pub raw: bool,
    /// Server to connect to (none: act as the server)
    pub server: Option<String>,
}

/// perftest 4.5's bw options that are accepted but change nothing here: (long name, short
/// letter, whether a value follows, why). Each one given is dropped with this note on stderr.
const NOTED: &[(&str, Option<char>, bool, &str)] = &[
    (
        "CPU-freq",
        Some('F'),
        false,
        "times come from the monotonic clock, not cycle counters: there is no CPU-frequency \
         mismatch to warn about",
    ),
    ("noPeak", Some('N'), false, "the peak is always reported (it costs nothing extra)"),
    (
        "dont_xchg_versions",
        None,
        false,
        "the exchange carries no perftest version string to compare",
    ),
    ("perform_warm_up", None, false, "no separate warm-up: every iteration is measured"),
    (
        "margin",
        Some('f'),
        true,
        "a -D run measures the whole duration, without perftest's warm-up and cool-down margins",
    ),
    ("force-link", None, true, "the link layer is read from the port, not forced"),
    ("wait_destroy", None, true, "resources are freed at once at the end"),
];

/// perftest 4.5's bw options this tool refuses, and why: (long name, short letter, reason).
const REFUSED: &[(&str, Option<char>, &str)] = &[
    ("use_cuda", None, "GPU memory (CUDA) is not supported: buffers are host memory"),
    ("use_rocm", None, "GPU memory (ROCm) is not supported: buffers are host memory"),
    ("use_neuron", None, "Neuron device memory is not supported: buffers are host memory"),
    ("use_hl", None, "Habana device memory is not supported: buffers are host memory"),
    ("mmap", None, "buffers from an mmap'ed file are not supported"),
    ("mmap-offset", None, "buffers from an mmap'ed file are not supported"),
    ("use_hugepages", None, "huge-page buffers are not supported"),
    ("odp", None, "on-demand paging is not supported by this tool (the crate has it: odp)"),
    ("mr_per_qp", None, "the buffer tier gives each QP its own region already (--raw: one)"),
    ("use_old_post_send", None, "the verbs path is chosen per provider (QpInitAttr::verbs_path)"),
    ("events", Some('e'), "completion events are not used: the CQs are busy-polled"),
    ("vector", Some('X'), "completion vectors need -e, which is not supported"),
    ("cpu_util", None, "CPU utilisation is not measured"),
    ("report-counters", Some('W'), "port counters are not read"),
    ("report-both", None, "one direction's figures only (with -b: the sum)"),
    ("report-per-port", None, "dual-port runs are not supported"),
    ("dualport", Some('O'), "dual-port runs are not supported"),
    ("reversed", None, "the server never sends in this tool"),
    ("run_infinitely", None, "runs are -n iterations or -D seconds"),
    ("limit_bw", Some('w'), "pass/fail limits are not checked"),
    ("limit_msgrate", Some('y'), "pass/fail limits are not checked"),
    ("burst_size", None, "rate limiting is not supported"),
    ("typical_pkt_size", None, "rate limiting is not supported"),
    ("rate_limit", None, "rate limiting is not supported"),
    ("rate_units", None, "rate limiting is not supported"),
    ("rate_limit_type", None, "rate limiting is not supported"),
    ("recv_post_list", None, "receives are posted one at a time"),
    ("inline_recv", None, "inline receive (scatter to CQE) is not supported"),
    ("use-srq", None, "receives go to each QP's own queue, not an SRQ"),
    ("rx-depth", Some('r'), "the receive depth follows -t"),
    ("outs", Some('o'), "the outstanding RDMA READs per QP are not settable here"),
    ("mcg", Some('g'), "multicast is not supported"),
    ("MGID", Some('M'), "multicast is not supported"),
    ("sl", Some('S'), "the service level is 0 (set it in code: ToRtrAttr)"),
    ("tos", Some('T'), "the traffic class is 0 (set it in code: ToRtrAttr)"),
    ("tclass", None, "the traffic class is 0 (set it in code: ToRtrAttr)"),
    ("hop_limit", Some('L'), "the hop limit is the default (set it in code: ToRtrAttr)"),
    ("qp-timeout", Some('u'), "the QP timeout is the default (set it in code: ToRtsAttr)"),
    ("retry_count", None, "the retry count is the default (set it in code: ToRtsAttr)"),
    ("pkey_index", None, "P_Key index 0 is used"),
    ("dlid", None, "the peer's LID comes from the exchange"),
    ("source_ip", None, "rdma_cm binds to the device's address (-R)"),
    ("ipv6", None, "the exchange connects over IPv4 or the address given"),
    ("com_rdma_cm", Some('z'), "the exchange is TCP; -R connects the QPs through rdma_cm"),
    ("output", None, "the table (or --json) is the only output"),
    ("out_json_file", None, "--json writes to stdout: redirect it"),
    ("disable_pcie_relaxed", None, "relaxed ordering is never asked for"),
    ("log_dci_streams", None, "DCI streams are not supported by this tool"),
    ("log_active_dci_streams", None, "DCI streams are not supported by this tool"),
    ("aes_block_size", None, "crypto (AES-XTS) memory keys are not supported"),
];

/// What perftest's command line `argv` (program name first) means here: the arguments for
/// [`Args`], each noted option dropped with its note on stderr; or the reason a refused option
/// cannot be honoured.
pub fn perftest_argv(argv: impl IntoIterator<Item = String>) -> Result<Vec<String>, String> {
    let mut kept = Vec::new();
    let mut argv = argv.into_iter();
    while let Some(arg) = argv.next() {
        let (name, inline_value) = match arg.strip_prefix("--") {
            Some(long) => match long.split_once('=') {
                Some((name, _)) => (name.to_owned(), true),
                None => (long.to_owned(), false),
            },
            None => match arg.strip_prefix('-').map(|a| a.chars().collect::<Vec<_>>()) {
                Some(short) if short.len() == 1 => (short[0].to_string(), false),
                _ => {
                    kept.push(arg);
                    continue;
                }
            },
        };
        let is = |long: &str, short: Option<char>| {
            name == long || (name.len() == 1 && short.is_some_and(|c| name.starts_with(c)))
        };
        if let Some((long, _, takes_value, why)) = NOTED.iter().find(|(l, s, ..)| is(l, *s)) {
            eprintln!("note: --{long} changes nothing here: {why}");
            if *takes_value && !inline_value {
                argv.next();
            }
        } else if let Some((long, _, why)) = REFUSED.iter().find(|(l, s, _)| is(l, *s)) {
            return Err(format!("--{long} is not supported: {why}"));
        } else {
            kept.push(arg);
        }
    }
    Ok(kept)
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
