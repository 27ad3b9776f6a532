//! perftest's options, and the checks made before any verb runs.

use clap::{CommandFactory, FromArgMatches, Parser};
use rdma_verbs::c_number::parse as c_number;

use super::Mode;

/// The largest -a size: perftest's 8 MiB.
pub const MAX_SIZE: u32 = 8 << 20;

/// perftest's fewest iterations of a latency test (`MIN_ITER`): the report drops the two
/// largest of the n - 1 samples.
pub const MIN_LATENCY_ITERS: u64 = 5;

/// Which of perftest's two families a tool belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// `*_bw`: messages back to back, bandwidth and message rate.
    Bandwidth,
    /// `*_lat`: one message at a time, latency.
    Latency,
}

impl Test {
    /// The tool name's suffix: `bw` or `lat`.
    pub fn suffix(self) -> &'static str {
        match self {
            Test::Bandwidth => "bw",
            Test::Latency => "lat",
        }
    }

    /// The family named by a tool name's suffix.
    pub fn from_suffix(suffix: &str) -> Option<Test> {
        [Test::Bandwidth, Test::Latency].into_iter().find(|t| t.suffix() == suffix)
    }

    fn family(self) -> &'static str {
        match self {
            Test::Bandwidth => "bandwidth",
            Test::Latency => "latency",
        }
    }
}

/// A test in perftest's style, with ib_{write,read,send}_{bw,lat}'s options. The defaults of
/// size, iterations and the options each family has are set per tool by [`parse`].
#[derive(Parser, Debug, Clone)]
#[command(version)]
pub struct Args {
    /// RDMA device (default: the first one found); for the bandwidth tools, a comma-separated
    /// list runs the test on each device at once (-q QPs each, TCP ports -p, -p + 1, ...) and
    /// reports them together
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Port of the RDMA device
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = c_number::<u8>)]
    pub ib_port: u8,
    /// GID index (default on Ethernet ports: the routable GID)
    #[arg(short = 'x', long = "gid-index", value_parser = c_number::<u8>)]
    pub gid_index: Option<u8>,
    /// Message size in bytes
    #[arg(short = 's', long = "size", default_value_t = 65536, value_parser = c_number::<u32>)]
    pub size: u32,
    /// Iterations (per QP)
    #[arg(short = 'n', long = "iters", default_value_t = 5000, value_parser = c_number::<u64>)]
    pub iters: u64,
    /// Run all sizes 2 B .. 8 MiB (powers of two; capped by --max-size)
    #[arg(short = 'a', long = "all")]
    pub all: bool,
    /// Largest size of -a, in bytes
    #[arg(long = "max-size", default_value_t = MAX_SIZE, value_parser = c_number::<u32>)]
    pub max_size: u32,
    /// Number of QPs
    #[arg(short = 'q', long = "qp", default_value_t = 1, value_parser = c_number::<u32>)]
    pub qps: u32,
    /// Run for this many seconds instead of -n iterations
    #[arg(short = 'D', long = "duration", value_parser = c_number::<u64>)]
    pub duration: Option<u64>,
    /// Outstanding WRs per QP (tx depth)
    #[arg(short = 't', long = "tx-depth", default_value_t = 128, value_parser = c_number::<u32>)]
    pub tx_depth: u32,
    /// Receives kept posted per QP by send_bw's receiving side (default 512, as perftest;
    /// at most -n)
    #[arg(short = 'r', long = "rx-depth", value_parser = c_number::<u32>)]
    pub rx_depth: Option<u32>,
    /// WRs per ibv_post_send call (post list)
    #[arg(short = 'l', long = "post_list", default_value_t = 1, value_parser = c_number::<u32>)]
    pub post_list: u32,
    /// Signal one WR in this many (CQ moderation; default 100, or -l when -l > 1)
    #[arg(short = 'Q', long = "cq-mod", value_parser = c_number::<u32>)]
    pub cq_mod: Option<u32>,
    /// RDMA READs outstanding per QP (read tests; default, and at most: the device's limit,
    /// max_qp_rd_atom, as perftest)
    #[arg(short = 'o', long = "outs", value_parser = c_number::<u32>)]
    pub outs: Option<u32>,
    /// Service level, 0-15 (default 0)
    #[arg(short = 'S', long = "sl", value_parser = c_number::<u8>)]
    pub sl: Option<u8>,
    /// Traffic class of the GRH (on RoCE: DSCP << 2 | ECN; default 0)
    #[arg(long = "tclass", value_parser = c_number::<u8>)]
    pub tclass: Option<u8>,
    /// Local ACK timeout: 4.096 us x 2^n, n 1-31, or 0: never (default 14)
    #[arg(short = 'u', long = "qp-timeout", value_parser = c_number::<u8>)]
    pub qp_timeout: Option<u8>,
    /// Retries of a send that is not acknowledged, 0-7 (default 6; rxe never counts 7 down)
    #[arg(long = "retry_count", value_parser = c_number::<u8>)]
    pub retry_count: Option<u8>,
    /// Largest message sent inline, in bytes (default: what the QP offers)
    #[arg(short = 'I', long = "inline_size", value_parser = c_number::<u32>)]
    pub inline_size: Option<u32>,
    /// Path MTU in bytes (default: the port's active MTU)
    #[arg(short = 'm', long = "mtu", value_parser = c_number::<u32>)]
    pub mtu: Option<u32>,
    /// TCP port for the parameter exchange
    #[arg(short = 'p', long = "port", default_value_t = 18515, value_parser = c_number::<u16>)]
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
    /// Register the buffers without PCIe relaxed ordering (perftest asks for it by default)
    #[arg(long = "disable_pcie_relaxed")]
    pub disable_pcie_relaxed: bool,
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
    /// Put the buffers in the device's own memory (ibv_alloc_dm, registered zero-based with
    /// ibv_reg_dm_mr), as perftest's --use_dm: the bandwidth tools with --raw, on devices that
    /// have device memory (ConnectX; Soft-RoCE and soft-iWARP have none)
    #[arg(long = "use_dm")]
    pub use_dm: bool,
    /// Post sends with ibv_post_send, not the extended ibv_wr_* calls the provider may have
    /// (perftest's header says which it uses: "ibv_wr* API")
    #[arg(long = "use_old_post_send")]
    pub use_old_post_send: bool,
    /// Print every sample, sorted, before its size's line (the two dropped largest left out)
    #[arg(short = 'H', long = "report-histogram")]
    pub histogram: bool,
    /// Print every sample in the order measured before its size's line
    #[arg(short = 'U', long = "report-unsorted")]
    pub unsorted: bool,
    /// Microseconds to wait (spinning) before each post
    #[arg(long = "latency_gap", default_value_t = 0, value_parser = c_number::<u64>)]
    pub latency_gap: u64,
    /// Sleep on CQ events instead of busy-polling the CQs (read and send tests, with -n)
    #[arg(short = 'e', long = "events")]
    pub events: bool,
    /// Completion vector of the CQs' events (with -e; default 0)
    #[arg(short = 'X', long = "vector", value_parser = c_number::<u32>)]
    pub comp_vector: Option<u32>,
    /// Put the buffers on 2 MiB huge pages (MAP_HUGETLB), as perftest's: the pages must be
    /// reserved (/proc/sys/vm/nr_hugepages)
    #[arg(long = "use_hugepages")]
    pub use_hugepages: bool,
    /// Limit the send rate to this many --rate_units (see --rate_limit_type)
    #[arg(long = "rate_limit")]
    pub rate_limit: Option<f64>,
    /// Units of --rate_limit: g (Gb/s, the default), M (MiB/s) or p (messages per second)
    #[arg(long = "rate_units", value_parser = ["g", "M", "p"])]
    pub rate_units: Option<String>,
    /// How --rate_limit holds: HW (the route's static rate, the default), PP (the QP's packet
    /// pacing, ibv_modify_qp's rate_limit) or SW (the bandwidth tools post in bursts at the
    /// rate)
    #[arg(long = "rate_limit_type", value_parser = ["HW", "PP", "SW"])]
    pub rate_limit_type: Option<String>,
    /// WRs per burst of the SW rate limiter (default: -t)
    #[arg(long = "burst_size", value_parser = c_number::<u32>)]
    pub burst_size: Option<u32>,
    /// Server to connect to (none: act as the server)
    pub server: Option<String>,
    /// The tool's family, set by [`parse`].
    #[arg(skip = Test::Bandwidth)]
    pub test: Test,
}

/// An option of one family only: (long name, short letter, the [`Args`] field, the family,
/// why the other family's tools refuse it).
type FamilyOption = (&'static str, Option<char>, Option<&'static str>, Test, &'static str);

/// The options of one family only; perftest refuses them in the other the same way.
const ONE_FAMILY: &[FamilyOption] = &[
    (
        "bidirectional",
        Some('b'),
        Some("bidirectional"),
        Test::Bandwidth,
        "a ping-pong runs both ways already",
    ),
    ("qp", Some('q'), Some("qps"), Test::Bandwidth, "latency is measured on one QP, as perftest's"),
    ("tx-depth", Some('t'), Some("tx_depth"), Test::Bandwidth, "one WR is in flight at a time"),
    ("post_list", Some('l'), Some("post_list"), Test::Bandwidth, "one WR is in flight at a time"),
    ("cq-mod", Some('Q'), Some("cq_mod"), Test::Bandwidth, "every WR is signaled"),
    ("report_gbits", None, Some("report_gbits"), Test::Bandwidth, "latency is reported in usec"),
    ("noPeak", Some('N'), None, Test::Bandwidth, "a latency run has no peak bandwidth"),
    (
        "report-histogram",
        Some('H'),
        Some("histogram"),
        Test::Latency,
        "a bandwidth run keeps no per-WR samples",
    ),
    (
        "report-unsorted",
        Some('U'),
        Some("unsorted"),
        Test::Latency,
        "a bandwidth run keeps no per-WR samples",
    ),
    ("latency_gap", None, Some("latency_gap"), Test::Latency, "a bandwidth run posts back to back"),
];

/// The arguments of tool `mode`_`test` from `argv` (program name first, noted options
/// already dropped by [`perftest_argv`]), with perftest's defaults for that tool: 64 KiB and
/// 5000 iterations for write_bw, 64 KiB and 1000 for read_bw and send_bw, 2 B and 1000 for
/// the latency tools. Prints help, version or a usage error and exits, as clap does.
pub fn parse(test: Test, mode: Mode, argv: Vec<String>) -> Args {
    let tool = format!("{}_{}", mode.name(), test.suffix());
    let mut cmd = Args::command().about(format!(
        "{} {} test in perftest's style (ib_{tool}'s options, method and table)",
        mode.title(),
        test.family()
    ));
    for (_, _, id, family, _) in ONE_FAMILY {
        if let (Some(id), true) = (id, *family != test) {
            cmd = cmd.mut_arg(*id, |a| a.hide(true));
        }
    }
    if test == Test::Latency {
        cmd = cmd
            .mut_arg("rx_depth", |a| a.hide(true))
            .mut_arg("size", |a| a.default_value("2"))
            .mut_arg("connection", |a| a.help("Connection type: RC (DC: the bw tools only)"));
    }
    if test == Test::Latency || mode != Mode::Write {
        cmd = cmd.mut_arg("iters", |a| a.default_value("1000"));
    }
    let matches = cmd.get_matches_from(argv);
    let mut args = Args::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    args.test = test;
    args
}

/// Options the latency tools accept with a note, as in [`NOTED`]; the bandwidth tools
/// implement them.
const NOTED_LATENCY: &[(&str, Option<char>, bool, &str)] = &[(
    "rx-depth",
    Some('r'),
    true,
    "one message is in flight at a time: the receiver keeps 2 receives posted",
)];

/// perftest 4.5's options that are accepted but change nothing here: (long name, short
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

/// perftest 4.5's options these tools refuse, and why: (long name, short letter, reason).
const REFUSED: &[(&str, Option<char>, &str)] = &[
    ("use_cuda", None, "GPU memory (CUDA) is not supported: buffers are host memory"),
    ("use_rocm", None, "GPU memory (ROCm) is not supported: buffers are host memory"),
    ("use_neuron", None, "Neuron device memory is not supported: buffers are host memory"),
    ("use_hl", None, "Habana device memory is not supported: buffers are host memory"),
    ("mmap", None, "buffers from an mmap'ed file are not supported"),
    ("mmap-offset", None, "buffers from an mmap'ed file are not supported"),
    ("odp", None, "on-demand paging is not supported by this tool (the crate has it: odp)"),
    ("mr_per_qp", None, "the buffer tier gives each QP its own region already (--raw: one)"),
    (
        "report-cycles",
        Some('C'),
        "times come from the monotonic clock, in usec: there are no cycle counts to report",
    ),
    ("cpu_util", None, "CPU utilisation is not measured"),
    ("report-counters", Some('W'), "port counters are not read"),
    ("report-both", None, "one direction's figures only (with -b: the sum)"),
    ("report-per-port", None, "dual-port runs are not supported"),
    ("dualport", Some('O'), "dual-port runs are not supported"),
    ("reversed", None, "the server never sends in this tool"),
    ("run_infinitely", None, "runs are -n iterations or -D seconds"),
    ("limit_bw", Some('w'), "pass/fail limits are not checked"),
    ("limit_msgrate", Some('y'), "pass/fail limits are not checked"),
    (
        "typical_pkt_size",
        None,
        "perftest's packet-pacing burst control is for raw Ethernet QPs: PP here sets the \
         RC QPs' rate only",
    ),
    ("recv_post_list", None, "receives are posted one at a time"),
    ("inline_recv", None, "inline receive (scatter to CQE) is not supported"),
    ("use-srq", None, "receives go to each QP's own queue, not an SRQ"),
    ("mcg", Some('g'), "multicast is not supported"),
    ("MGID", Some('M'), "multicast is not supported"),
    (
        "tos",
        Some('T'),
        "rdma_cm's type of service (-R) is not set by this tool: connected by hand (without \
         -R), --tclass sets the GRH's traffic class",
    ),
    (
        "hop_limit",
        Some('L'),
        "perftest takes it for raw Ethernet QPs only; the RC QPs here send with hop limit 255, \
         as perftest's",
    ),
    ("pkey_index", None, "P_Key index 0 is used"),
    ("dlid", None, "the peer's LID comes from the exchange"),
    ("source_ip", None, "rdma_cm binds to the device's address (-R)"),
    ("ipv6", None, "the exchange connects over IPv4 or the address given"),
    ("com_rdma_cm", Some('z'), "the exchange is TCP; -R connects the QPs through rdma_cm"),
    ("output", None, "the table (or --json) is the only output"),
    ("out_json_file", None, "--json writes to stdout: redirect it"),
    ("log_dci_streams", None, "DCI streams are not supported by this tool"),
    ("log_active_dci_streams", None, "DCI streams are not supported by this tool"),
    ("aes_block_size", None, "crypto (AES-XTS) memory keys are not supported"),
];

/// What perftest's command line `argv` (program name first) means to a `test` tool: the
/// arguments for [`parse`], each noted option dropped with its note on stderr; or the reason
/// a refused option (or one of the other family's) cannot be honoured. A short option may
/// carry its value (`-q4`).
pub fn perftest_argv(
    test: Test,
    argv: impl IntoIterator<Item = String>,
) -> Result<Vec<String>, String> {
    let mut kept = Vec::new();
    let mut argv = argv.into_iter();
    while let Some(arg) = argv.next() {
        let (name, inline_value) = match arg.strip_prefix("--") {
            Some(long) => match long.split_once('=') {
                Some((name, _)) => (name.to_owned(), true),
                None => (long.to_owned(), false),
            },
            None => match arg.strip_prefix('-').map(|a| a.chars().collect::<Vec<_>>()) {
                Some(short) if !short.is_empty() => (short[0].to_string(), short.len() > 1),
                _ => {
                    kept.push(arg);
                    continue;
                }
            },
        };
        let is = |long: &str, short: Option<char>| {
            name == long || (name.len() == 1 && short.is_some_and(|c| name.starts_with(c)))
        };
        if let Some((long, .., family, why)) =
            ONE_FAMILY.iter().find(|(l, s, _, f, _)| *f != test && is(l, *s))
        {
            return Err(format!("--{long} is for the {} tools only: {why}", family.family()));
        }
        let latency_noted = if test == Test::Latency { NOTED_LATENCY } else { &[] };
        let mut noted = NOTED.iter().chain(latency_noted);
        if let Some((long, _, takes_value, why)) = noted.find(|(l, s, ..)| is(l, *s)) {
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
    /// The verbs path of the QPs: the legacy `ibv_post_send` with `--use_old_post_send`, else
    /// the crate's choice for the provider.
    pub fn verbs_path(&self) -> Option<rdma_verbs::VerbsPath> {
        self.use_old_post_send.then_some(rdma_verbs::VerbsPath::Legacy)
    }

    /// The sizes to run.
    pub fn sizes(&self) -> Vec<u32> {
        if self.all {
            (1..=23).map(|p| 1u32 << p).filter(|&s| s <= self.max_size.min(MAX_SIZE)).collect()
        } else {
            vec![self.size]
        }
    }

    /// The largest of [`Args::sizes`]: what the buffers are made for.
    pub fn largest_size(&self) -> u32 {
        *self.sizes().iter().max().expect("at least one size")
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

    /// perftest's receive depth for send_bw: -r, else 512; at most -n in a run of -n
    /// iterations, as perftest clips it.
    pub fn rx_depth(&self) -> u32 {
        let depth = self.rx_depth.unwrap_or(512);
        match self.duration {
            None => depth.min(u32::try_from(self.iters).unwrap_or(u32::MAX)),
            Some(_) => depth,
        }
    }

    /// perftest's CQ moderation: -Q, else -l when posting lists, else every WR signaled for
    /// messages over 8 KiB (not with -a, whose sizes share one setting), else 100; never above
    /// -t.
    pub fn cq_mod(&self) -> u32 {
        let default = match self.post_list {
            1 if self.size > 8192 && !self.all => 1,
            1 => 100,
            list => list,
        };
        self.cq_mod.unwrap_or(default).min(self.tx_depth)
    }

    /// The access every region of ours adds, as perftest's: PCIe relaxed ordering (an
    /// optional flag, which a device without it ignores) unless --disable_pcie_relaxed.
    pub fn relaxed(&self) -> rdma_verbs::AccessFlags {
        match self.disable_pcie_relaxed {
            true => rdma_verbs::AccessFlags::empty(),
            false => rdma_verbs::AccessFlags::RELAXED_ORDERING,
        }
    }

    /// The checks that need no device, for the tool of `mode`: each message says what to
    /// change.
    pub fn check(&self, mode: Mode) -> Result<(), String> {
        let positive = [
            ("-s (size)", self.size),
            ("-q (QPs)", self.qps),
            ("-t (tx depth)", self.tx_depth),
            ("-l (post list)", self.post_list),
            ("-r (rx depth)", self.rx_depth.unwrap_or(1)),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{name} must be at least 1"));
        }
        if self.test == Test::Latency {
            self.check_latency()?;
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
        if self.use_dm && (!self.raw || self.test == Test::Latency || self.is_dc()) {
            return Err("--use_dm needs --raw and a bandwidth tool over RC: the buffer tier's \
                        buffers and write_lat's polled byte are host memory"
                .into());
        }
        self.check_devices()?;
        crate::rate::Limit::of(self, mode)?;
        if self.is_dc() && self.rdma_cm {
            return Err("-c DC does not work with -R: DC QPs are not connected by rdma_cm".into());
        }
        self.check_path()?;
        self.check_events(mode)?;
        if self.size > MAX_SIZE || (self.all && self.max_size < 2) {
            return Err(format!("sizes run from 2 B (-a) or 1 B to {MAX_SIZE} B"));
        }
        Ok(())
    }

    /// The devices of a `-d` list of more than one, in its order; `None` for one device or
    /// none (the first found).
    pub fn devices(&self) -> Option<Vec<String>> {
        let list = self.ib_dev.as_deref()?;
        list.contains(',').then(|| list.split(',').map(str::to_owned).collect())
    }

    /// A `-d` list: names, each once, for a bandwidth test connected by hand, TCP ports that
    /// exist.
    fn check_devices(&self) -> Result<(), String> {
        let Some(names) = self.devices() else { return Ok(()) };
        if names.iter().any(String::is_empty) {
            return Err(format!("-d {}: a device name is empty", names.join(",")));
        }
        if let Some(again) = names.iter().enumerate().find(|(i, n)| names[..*i].contains(n)) {
            return Err(format!("-d lists {} twice: give each device once", again.1));
        }
        let why = if self.test == Test::Latency {
            Some("a latency test runs on one device")
        } else if self.rdma_cm {
            Some("with -R, rdma_cm picks the device by address: run one test per address")
        } else if self.is_dc() {
            Some("-c DC runs on one device")
        } else if self.events {
            Some("-e's watchdog watches the waits of one device")
        } else {
            None
        };
        if let Some(why) = why {
            return Err(format!("-d lists several devices, but {why}"));
        }
        if usize::from(self.port) + names.len() > usize::from(u16::MAX) + 1 {
            return Err(format!(
                "-p {}: the {} devices take TCP ports -p to -p + {}, past 65535",
                self.port,
                names.len(),
                names.len() - 1
            ));
        }
        Ok(())
    }

    /// -S, --tclass, -u and --retry_count: in range, and only where this tool sets them (by
    /// hand all four; with -R rdma_cm's route sets all but the retry count; a DC route takes
    /// -S and --tclass, a DCI's timers are the crate's).
    fn check_path(&self) -> Result<(), String> {
        // What -R (rdma_cm's route) and -c DC (the crate's DCI timers) set themselves.
        let (with, why, theirs): (_, _, &[(&str, bool)]) = if self.rdma_cm {
            (
                "-R",
                "rdma_cm takes the path and the ACK timeout from its route; connect by hand \
                 (without -R) to set them",
                &[("-S", self.sl.is_some()), ("--tclass", self.tclass.is_some())],
            )
        } else if self.is_dc() {
            (
                "-c DC",
                "a DCI's timers are the crate's defaults (DciInitAttr)",
                &[("--retry_count", self.retry_count.is_some())],
            )
        } else {
            ("", "", &[])
        };
        let timeout = [("-u", self.qp_timeout.is_some() && !with.is_empty())];
        if let Some((name, _)) = theirs.iter().chain(&timeout).find(|(_, given)| *given) {
            return Err(format!("{name} is not set with {with}: {why}"));
        }
        if let Some(sl) = self.sl.filter(|&sl| sl > 15) {
            return Err(format!("-S {sl} must be 0-15 (a 4-bit service level)"));
        }
        match self.qp_timeout {
            Some(0) => {
                eprintln!("note: -u 0: the QPs never time out waiting for an ACK, as perftest's")
            }
            Some(n) if n > rdma_verbs::AckTimeout::MAX_EXPONENT => {
                return Err(format!(
                    "-u {n} must be 1-31, the exponent of 4.096 us x 2^n, or 0 (never time out)"
                ))
            }
            _ => {}
        }
        if let Some(n) = self.retry_count.filter(|&n| n > rdma_verbs::RetryCount::MAX) {
            return Err(format!("--retry_count {n} must be 0-7"));
        }
        Ok(())
    }

    /// Sets -S, --tclass, -u and --retry_count on the attributes of a QP connected by hand,
    /// and the GRH's hop limit to 255, as perftest's (a route across IP routers; values
    /// checked by [`Args::check`]).
    ///
    /// # Errors
    ///
    /// `--tclass` on a route without GRH: the peer sent no GID.
    pub fn set_path(
        &self,
        rtr: &mut rdma_verbs::ToRtrAttr,
        rts: &mut rdma_verbs::ToRtsAttr,
    ) -> Result<(), String> {
        rtr.av.sl = self.sl.unwrap_or(rtr.av.sl);
        match rtr.av.grh.as_mut() {
            Some(grh) => {
                grh.hop_limit = 255;
                grh.traffic_class = self.tclass.unwrap_or(grh.traffic_class);
            }
            None if self.tclass.is_some() => {
                return Err("--tclass sets the GRH's traffic class, but the peer sent no GID: \
                            give -x on both sides"
                    .into())
            }
            None => {}
        }
        if let Some(n) = self.qp_timeout {
            rts.timeout = match n {
                0 => rdma_verbs::AckTimeout::INFINITE,
                n => rdma_verbs::AckTimeout::new(n).map_err(|e| e.to_string())?,
            };
        }
        if let Some(n) = self.retry_count {
            rts.retry_cnt = rdma_verbs::RetryCount::new(n).map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// -e and -X where perftest takes them: -e not on WRITE nor with -D, -X only with -e.
    fn check_events(&self, mode: Mode) -> Result<(), String> {
        if self.comp_vector.is_some() && !self.events {
            return Err("-X picks the completion vector of -e's events: give -e too".into());
        }
        if self.events && mode == Mode::Write {
            return Err("-e is not available on RDMA WRITE, as in perftest (write_lat watches \
                        memory, not a CQ): use the read or send tools for events"
                .into());
        }
        if self.events && self.duration.is_some() {
            return Err("-e does not work with -D, as in perftest (a -D run polls to watch the \
                        clock): give -n iterations"
                .into());
        }
        Ok(())
    }

    /// The latency tools' own checks.
    fn check_latency(&self) -> Result<(), String> {
        if self.duration.is_none() && self.iters < MIN_LATENCY_ITERS {
            return Err(format!(
                "-n {} must be at least {MIN_LATENCY_ITERS}: the report drops the two largest \
                 of the n - 1 samples",
                self.iters
            ));
        }
        if self.duration.is_some() && (self.histogram || self.unsorted) {
            return Err("-H and -U list the samples of -n iterations: a -D run keeps none".into());
        }
        if self.is_dc() {
            return Err("-c DC is implemented for the bw tools only: use -c RC".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(test: Test, args: &[&str]) -> Result<Vec<String>, String> {
        perftest_argv(test, std::iter::once("tool").chain(args.iter().copied()).map(String::from))
    }

    /// The parsed arguments of tool `mode`_`test` given `args`.
    fn parsed(test: Test, mode: Mode, args: &[&str]) -> Args {
        parse(
            test,
            mode,
            std::iter::once("tool").chain(args.iter().copied()).map(String::from).collect(),
        )
    }

    #[test]
    fn numbers_are_read_as_perftest_reads_them_decimal_hex_or_octal() {
        let args =
            parsed(Test::Bandwidth, Mode::Write, &["-s", "0x10000", "-x", "03", "-n", "010"]);
        assert_eq!((args.size, args.gid_index, args.iters), (65536, Some(3), 8));
        assert_eq!(parsed(Test::Bandwidth, Mode::Write, &["--tclass", "0X6a"]).tclass, Some(106));
    }

    #[test]
    fn a_noted_option_is_dropped_with_its_value_attached_or_not() {
        for args in [&["-f", "2", "-s", "8"][..], &["-f2", "-s", "8"], &["--margin=2", "-s", "8"]] {
            assert_eq!(argv(Test::Latency, args).unwrap(), ["tool", "-s", "8"], "{args:?}");
        }
    }

    #[test]
    fn each_family_refuses_the_others_options_only() {
        assert_eq!(argv(Test::Bandwidth, &["-q", "4", "-b"]).unwrap(), ["tool", "-q", "4", "-b"]);
        assert_eq!(argv(Test::Latency, &["-H", "-U"]).unwrap(), ["tool", "-H", "-U"]);
        for (test, arg) in [(Test::Latency, "-t"), (Test::Latency, "-N"), (Test::Bandwidth, "-U")] {
            let e = argv(test, &[arg]).unwrap_err();
            assert!(e.contains("tools only"), "{arg}: {e}");
        }
    }

    #[test]
    fn the_receive_depth_is_perftests_and_a_note_on_the_latency_tools() {
        let send_bw = |args: &[&str]| parsed(Test::Bandwidth, Mode::Send, args).rx_depth();
        assert_eq!(send_bw(&[]), 512);
        assert_eq!(send_bw(&["-r", "64"]), 64);
        assert_eq!(send_bw(&["-n", "100"]), 100, "clipped to -n, as perftest");
        assert_eq!(send_bw(&["-n", "100", "-D", "2"]), 512, "not in a -D run");
        assert_eq!(argv(Test::Latency, &["-r", "64", "-s", "8"]).unwrap(), ["tool", "-s", "8"]);
        assert_eq!(argv(Test::Bandwidth, &["-r", "64"]).unwrap(), ["tool", "-r", "64"]);
    }

    #[test]
    fn the_path_options_are_checked_and_refused_where_rdma_cm_or_dc_sets_the_path() {
        let check = |args: &[&str]| parsed(Test::Bandwidth, Mode::Write, args).check(Mode::Write);
        let all = ["-S", "15", "--tclass", "0x60", "-u", "31", "--retry_count", "7"];
        assert_eq!(check(&all), Ok(()));
        assert_eq!(check(&["-R", "--retry_count", "5"]), Ok(()));
        assert_eq!(check(&["-c", "DC", "-S", "3", "--tclass", "106"]), Ok(()));
        for (args, says) in [
            (&["-S", "16"][..], "-S 16 must be 0-15"),
            (&["-u", "32"], "-u 32 must be 1-31"),
            (&["--retry_count", "8"], "--retry_count 8 must be 0-7"),
            (&["-R", "--tclass", "96"], "--tclass is not set with -R"),
            (&["-R", "-u", "16"], "-u is not set with -R"),
            (&["-c", "DC", "--retry_count", "3"], "--retry_count is not set with -c DC"),
        ] {
            let e = check(args).unwrap_err();
            assert!(e.starts_with(says), "{args:?}: {e}");
        }
    }

    #[test]
    fn a_device_list_is_taken_by_the_bandwidth_tools_connected_by_hand() {
        let check = |test, args: &[&str]| parsed(test, Mode::Send, args).check(Mode::Send);
        let list = parsed(Test::Bandwidth, Mode::Send, &["-d", "mlx5_0,mlx5_1"]);
        assert_eq!(list.devices(), Some(vec!["mlx5_0".to_owned(), "mlx5_1".to_owned()]));
        assert_eq!(parsed(Test::Bandwidth, Mode::Send, &["-d", "mlx5_0"]).devices(), None);
        assert_eq!(check(Test::Bandwidth, &["-d", "a,b,c", "-q", "4", "-p", "65533"]), Ok(()));
        for (test, args, says) in [
            (Test::Latency, &["-d", "a,b"][..], "a latency test runs on one device"),
            (Test::Bandwidth, &["-d", "a,b", "-R"], "with -R, rdma_cm picks the device"),
            (Test::Bandwidth, &["-d", "a,b", "-c", "DC"], "-c DC runs on one device"),
            (Test::Bandwidth, &["-d", "a,b", "-e"], "-e's watchdog"),
            (Test::Bandwidth, &["-d", "a,,b"], "-d a,,b: a device name is empty"),
            (Test::Bandwidth, &["-d", "a,b,a"], "-d lists a twice"),
            (Test::Bandwidth, &["-d", "a,b", "-p", "65535"], "-p 65535: the 2 devices take"),
        ] {
            let e = check(test, args).unwrap_err();
            assert!(e.contains(says), "{args:?}: {e}");
        }
    }

    #[test]
    fn use_dm_is_taken_by_the_raw_bandwidth_tools_over_rc_only() {
        let check = |test, args: &[&str]| parsed(test, Mode::Write, args).check(Mode::Write);
        assert_eq!(check(Test::Bandwidth, &["--raw", "--use_dm"]), Ok(()));
        for (test, args) in [
            (Test::Bandwidth, &["--use_dm"][..]),
            (Test::Latency, &["--raw", "--use_dm"]),
            (Test::Bandwidth, &["--raw", "--use_dm", "-c", "DC"]),
        ] {
            let e = check(test, args).unwrap_err();
            assert!(e.starts_with("--use_dm needs --raw"), "{args:?}: {e}");
        }
    }

    #[test]
    fn events_are_taken_where_perftest_takes_them() {
        let check = |mode, args: &[&str]| parsed(Test::Latency, mode, args).check(mode);
        assert_eq!(check(Mode::Read, &["-e", "-X", "1"]), Ok(()));
        assert_eq!(check(Mode::Send, &["-e"]), Ok(()));
        for (mode, args, says) in [
            (Mode::Write, &["-e"][..], "-e is not available on RDMA WRITE"),
            (Mode::Send, &["-e", "-D", "2"], "-e does not work with -D"),
            (Mode::Read, &["-X", "1"], "-X picks the completion vector of -e's events"),
        ] {
            let e = check(mode, args).unwrap_err();
            assert!(e.starts_with(says), "{args:?}: {e}");
        }
    }

    #[test]
    fn the_path_options_set_the_attributes_of_a_qp_connected_by_hand() {
        use rdma_verbs::{AckTimeout, Endpoint, Gid, Lid, Mtu, Psn, Qpn, RetryCount};
        use std::net::Ipv4Addr;
        let args = |args: &[&str]| parsed(Test::Bandwidth, Mode::Write, args);
        let psn = Psn::new(0).unwrap();
        let peer = |gid| Endpoint { lid: Lid::new(0), qpn: Qpn::new(5).unwrap(), psn, gid };
        let roce = peer(Gid::from(Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped()));
        let attrs = |peer: &Endpoint| {
            let rtr = rdma_verbs::ToRtrAttr::to_endpoint(peer, 1, Some(3), Mtu::MTU_1024);
            (rtr, rdma_verbs::ToRtsAttr::new(psn))
        };

        let (mut rtr, mut rts) = attrs(&roce);
        let given = args(&["-S", "3", "--tclass", "0x68", "-u", "18", "--retry_count", "4"]);
        given.set_path(&mut rtr, &mut rts).unwrap();
        let grh = rtr.av.grh.unwrap();
        assert_eq!((rtr.av.sl, grh.traffic_class, grh.hop_limit), (3, 0x68, 255));
        assert_eq!(
            (rts.timeout, rts.retry_cnt),
            (AckTimeout::new(18).unwrap(), RetryCount::new(4).unwrap())
        );

        // Unset, the defaults stay, but for perftest's hop limit; -u 0 is never.
        let (mut rtr, mut rts) = attrs(&roce);
        args(&["-u", "0"]).set_path(&mut rtr, &mut rts).unwrap();
        let (default_rtr, default_rts) = attrs(&roce);
        assert_eq!((rtr.av.sl, rtr.av.grh.unwrap().traffic_class), (0, 0));
        assert_eq!(rtr.av.grh.unwrap().hop_limit, 255);
        assert_eq!(rts.retry_cnt, default_rts.retry_cnt);
        assert_eq!(rts.timeout, AckTimeout::INFINITE);
        assert_ne!(default_rtr.av.grh.unwrap().hop_limit, 255);

        // No GRH when the peer sent no GID: a traffic class has nowhere to go.
        let (mut rtr, mut rts) = attrs(&peer(Gid::ZERO));
        let e = args(&["--tclass", "96"]).set_path(&mut rtr, &mut rts).unwrap_err();
        assert!(e.contains("the peer sent no GID: give -x on both sides"), "{e}");
    }

    #[test]
    fn cq_moderation_is_perftests_every_wr_for_messages_over_8_kib() {
        let cq_mod = |args: &[&str]| parsed(Test::Bandwidth, Mode::Write, args).cq_mod();
        assert_eq!(cq_mod(&[]), 1, "64 KiB by default");
        assert_eq!(cq_mod(&["-s", "8192"]), 100);
        assert_eq!(cq_mod(&["-a"]), 100, "-a's sizes share one setting");
        assert_eq!(cq_mod(&["-l", "4"]), 4, "a post list's size");
        assert_eq!(cq_mod(&["-Q", "10"]), 10, "as asked");
        assert_eq!(cq_mod(&["-s", "64", "-t", "50"]), 50, "at most the tx depth");
    }

    #[test]
    fn each_tool_has_perftests_defaults() {
        let write_bw = parsed(Test::Bandwidth, Mode::Write, &[]);
        assert_eq!((write_bw.size, write_bw.iters), (65536, 5000));
        let send_bw = parsed(Test::Bandwidth, Mode::Send, &[]);
        assert_eq!((send_bw.size, send_bw.iters), (65536, 1000));
        let read_lat = parsed(Test::Latency, Mode::Read, &[]);
        assert_eq!((read_lat.size, read_lat.iters, read_lat.test), (2, 1000, Test::Latency));
    }
}
