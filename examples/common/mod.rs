//! Code the examples share, included by each with `#[path = "common/mod.rs"] mod common;` (a
//! file directly in `examples/` would build as an example of its own): the device options,
//! the exit status, opening the device the user named, the source GID, the LID check.
#![allow(dead_code)] // each example uses the part it needs

use std::process::ExitCode;

use rdma_verbs::{Context, GidEntry, Mtu, PortAttr, Result};

/// How long the examples that exchange with a peer wait for it over TCP, and for a
/// completion once running.
pub const PEER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// The ping-pongs' wr_ids (`ibv_rc_pingpong`'s), kept as the kinds of completion each waits
/// for: its receives', and its send's.
pub const RECV_WRID: u64 = 1;
/// See [`RECV_WRID`].
pub const SEND_WRID: u64 = 2;

/// A number as the C tools read their options (`strtol` with base 0): decimal, `0x` hex or
/// `0` octal (`-s 0x10000`, `-x 03`), here within `T`'s range; for clap's `value_parser`.
pub fn c_number<T: CNumber>(s: &str) -> std::result::Result<T, String> {
    let t = s.trim_start();
    let (negative, t) = match t.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let (radix, digits) = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(hex) => (16, hex),
        None if t.len() > 1 && t.starts_with('0') => (8, &t[1..]),
        None => (10, t),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return Err(format!("{s:?} is not a number (decimal, 0x hex or 0 octal)"));
    }
    // (Digits past u128 are past `T` too: out of range, as strtol clamps them.)
    u128::from_str_radix(digits, radix)
        .ok()
        .filter(|&value| !negative || value == 0)
        .and_then(|value| T::try_from(value).ok())
        .ok_or_else(|| format!("{s:?} is out of range: {}..={}", T::MIN, T::MAX))
}

/// The integer types of the options [`c_number`] reads.
pub trait CNumber: TryFrom<u128> + Clone + Send + Sync + 'static {
    const MIN: u128 = 0;
    const MAX: u128;
}

impl CNumber for u8 {
    const MAX: u128 = u8::MAX as u128;
}
impl CNumber for u16 {
    const MAX: u128 = u16::MAX as u128;
}
impl CNumber for u32 {
    const MAX: u128 = u32::MAX as u128;
}
impl CNumber for u64 {
    const MAX: u128 = u64::MAX as u128;
}

/// The device options of the examples, as `ibv_rc_pingpong` spells them.
#[derive(clap::Args, Debug, Clone)]
pub struct DeviceArgs {
    /// RDMA device to use (default: the first one found)
    #[arg(short = 'd', long = "ib-dev")]
    pub ib_dev: Option<String>,
    /// Port of the RDMA device
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = c_number::<u8>)]
    pub ib_port: u8,
    /// Local port GID index (default on Ethernet ports: the routable GID)
    #[arg(short = 'g', long = "gid-idx", value_parser = c_number::<u8>)]
    pub gid_idx: Option<u8>,
}

/// The exit status of the example `name` whose run ended with `result`: success, or failure
/// (1) after "`name`: the error: its cause: …" on stderr (each error of the `source` chain
/// says only its own part).
pub fn exit_code<E: Into<Box<dyn std::error::Error>>>(
    name: &str,
    result: std::result::Result<(), E>,
) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let e = e.into();
            let mut line = format!("{name}: {e}");
            let mut cause = e.source();
            while let Some(c) = cause {
                line.push_str(&format!(": {c}"));
                cause = c.source();
            }
            eprintln!("{line}");
            ExitCode::FAILURE
        }
    }
}

/// The path MTU of `bytes` (`-m`), or an error naming the sizes there are.
pub fn path_mtu(bytes: u32) -> std::result::Result<Mtu, String> {
    Mtu::from_bytes(bytes)
        .ok_or_else(|| format!("invalid MTU {bytes}: use 256, 512, 1024, 2048 or 4096"))
}

/// With rdma_cm, `-d` (`ib_dev`, when given) must name the device rdma_cm picked by address.
pub fn check_cm_device(ib_dev: Option<&str>, ctx: &Context) -> std::result::Result<(), String> {
    match ib_dev {
        Some(dev) if dev != ctx.name() => Err(format!(
            "rdma_cm picked {} by address, not -d {dev}: use an address of {dev}'s netdev",
            ctx.name()
        )),
        _ => Ok(()),
    }
}

/// Opens the device `name`, or the first one `ibv_get_device_list(3)` returns.
pub fn open_device(name: Option<&str>) -> Result<Context> {
    match name {
        Some(name) => Context::open(name),
        None => Context::open_first(),
    }
}

/// The GID to send from on port `port_num` (`port` its attributes): entry `index` when one is
/// given; else on an Ethernet (RoCE) port the routable one; on InfiniBand none (LID routing).
pub fn source_gid(
    ctx: &Context,
    port_num: u8,
    port: &PortAttr,
    index: Option<u8>,
) -> Result<Option<GidEntry>> {
    Ok(match index {
        Some(index) => Some(ctx.gid(port_num, index)?),
        None if port.is_ethernet() => Some(ctx.routable_gid(port_num)?),
        None => None,
    })
}

/// Refuses an InfiniBand port without a LID: no subnet manager has configured it.
pub fn require_lid(
    ctx: &Context,
    port_num: u8,
    port: &PortAttr,
) -> std::result::Result<(), String> {
    if !port.is_ethernet() && port.lid().get() == 0 {
        return Err(format!(
            "{} port {port_num} has no LID: is the subnet manager running?",
            ctx.name()
        ));
    }
    Ok(())
}

/// The error of the examples that share [`Link`]: a message for the user.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Our side of every RC connection: port, LID, source GID and path MTU.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    pub port: u8,
    pub lid: rdma_verbs::Lid,
    /// The source GID and its index, when routes carry a GRH (RoCE, or `-g`).
    pub gid: Option<(rdma_verbs::Gid, u8)>,
    pub mtu: rdma_verbs::Mtu,
}

impl Link {
    /// Port `port_num` of `ctx`, sending from GID `gid_index` (see [`source_gid`]), with path
    /// MTU `mtu` bytes (default: the port's active MTU).
    pub fn new(
        ctx: &Context,
        port_num: u8,
        gid_index: Option<u8>,
        mtu: Option<u32>,
    ) -> std::result::Result<Link, BoxError> {
        let port = ctx.query_port(port_num)?;
        require_lid(ctx, port_num, &port)?;
        let mtu = match mtu {
            Some(bytes) => path_mtu(bytes)?,
            None => port.active_mtu(),
        };
        let gid = source_gid(ctx, port_num, &port, gid_index)?.map(|e| (e.gid, e.index));
        Ok(Link { port: port_num, lid: port.lid(), gid, mtu })
    }

    /// What the peer needs to connect to `qp`, whose first send PSN is `psn`.
    pub fn endpoint<S: rdma_verbs::QpState>(
        &self,
        qp: &rdma_verbs::QueuePair<'_, S>,
        psn: rdma_verbs::Psn,
    ) -> rdma_verbs::Endpoint {
        let gid = self.gid.map_or(rdma_verbs::Gid::ZERO, |(gid, _)| gid);
        rdma_verbs::Endpoint { lid: self.lid, qpn: qp.qp_num(), psn, gid }
    }

    /// INIT → RTR → RTS towards `remote`, with `rd_atomic` RDMA READs (and atomics) in flight
    /// each way.
    pub fn connect<'r>(
        &self,
        qp: rdma_verbs::QueuePair<'r, rdma_verbs::Init>,
        remote: &rdma_verbs::Endpoint,
        psn: rdma_verbs::Psn,
        rd_atomic: u8,
    ) -> std::result::Result<rdma_verbs::QueuePair<'r, rdma_verbs::Rts>, BoxError> {
        let sgid = self.gid.map(|(_, index)| index);
        let rtr = rdma_verbs::ToRtrAttr {
            max_dest_rd_atomic: rd_atomic,
            ..rdma_verbs::ToRtrAttr::to_endpoint(remote, self.port, sgid, self.mtu)
        };
        let qp = qp.into_rtr(&rtr)?;
        let rts =
            rdma_verbs::ToRtsAttr { max_rd_atomic: rd_atomic, ..rdma_verbs::ToRtsAttr::new(psn) };
        Ok(qp.into_rts(&rts)?)
    }
}

/// A CQ of `n` entries that wakes `channel`, armed: [`poll_within`] keeps it so.
pub fn armed_cq<'c>(
    ctx: &'c Context,
    channel: &'c rdma_verbs::CompletionChannel<'_>,
    n: u32,
) -> Result<rdma_verbs::CompletionQueue<'c>> {
    let cq = ctx.create_cq_with_channel(n, channel, 0)?;
    cq.req_notify(false)?;
    Ok(cq)
}

/// The completions of an armed `cq`, sleeping on its channel while there are none, for at
/// most `limit`: empty only when nothing completed in that time. Sleeping rather than busy
/// polling leaves the CPUs to other clients and to the provider (Soft-RoCE works in the
/// kernel).
pub fn poll_within<'w>(
    cq: &rdma_verbs::CompletionQueue<'_>,
    channel: &rdma_verbs::CompletionChannel<'_>,
    wcs: &'w mut [rdma_verbs::WorkCompletion],
    limit: std::time::Duration,
) -> Result<&'w mut [rdma_verbs::WorkCompletion]> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let n = cq.poll(wcs)?.len();
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if n > 0 || left.is_zero() {
            return Ok(&mut wcs[..n]);
        }
        // An event means the CQ fired and disarmed itself: re-arm before polling again.
        if channel.wait(Some(left))? > 0 {
            cq.req_notify(false)?;
        }
    }
}
