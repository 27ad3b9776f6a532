//! The doctor: a layered diagnosis of the RDMA stack.
//!
//! RDMA fails in layers, and each C tool sees one of them (`ibstat` the link, `ibv_devinfo`
//! the device, `ib_write_bw` the transport). [`run`] checks them bottom-up and returns a
//! [`Report`] of [`Finding`]s — layer, check, [`Status`], what was seen, and what to do:
//!
//! | layer | what it looks at |
//! |---|---|
//! | [`Layer::Library`] | where libibverbs was loaded from, its rdma-core version, MLNX_OFED / DOCA-OFED or inbox, librdmacm and libmlx5, the providers in the driver config and whether each loads |
//! | [`Layer::Kernel`] | the devices in `/sys/class/infiniband` and their driver, their `/dev/infiniband/uverbsN` nodes (present, and openable by this user), the `rdma_cm` node, whether libibverbs lists and opens each device, where each device sits ([`crate::topology`]: NUMA node, PCIe path and link, netdevs and bonds, GID types) |
//! | [`Layer::Link`] | per port: state, physical state, link layer, rate, active MTU; LID and SM LID on InfiniBand |
//! | [`Layer::Addressing`] | the GID table (type, netdev), the routable RoCE v2 GID, the netdev's IP addresses |
//! | [`Layer::Resources`] | `RLIMIT_MEMLOCK`, fork protection (on? needed: does the kernel copy pinned pages at `fork()`?), and a loopback smoke test per device (PD, 1 MiB MR, CQ, two RC QPs to RTS, one SEND) |
//! | [`Layer::Extras`] | mlx5dv; GPU memory routes: the GPUs (and the RDMA device nearest each), dma-buf registration (rdma-core v34+, Linux 5.12+), peer memory (`nvidia_peermem`, ROCm's `amdgpu`, the peer-memory API), and per device whether its provider takes dma-bufs; a container checklist |
//!
//! Check names, for [`Report::find`]: `libibverbs`, `stack`, `librdmacm`, `libmlx5`,
//! `driver config`, `provider <name>`; `kernel RDMA`, `device <dev>`, `node <uverbsN>`,
//! `rdma_cm node`, `verbs <dev>`, `topology <dev>`; `port <dev>/<port>`; `GID table <dev>/<port>`,
//! `routable GID <dev>/<port>`, `IP <dev>/<port>`; `memlock`, `fork`, `smoke test <dev>`; `mlx5dv`,
//! `GPU`, `dmabuf`, `peer memory`, `gpu routes <dev>`, `container`, `container: <item>`. A check skipped for a whole
//! layer has no object (`port`), one skipped for a device names only the device (`port rxe0`).
//!
//! A check that needs what a failed earlier check would have provided SKIPs and names it (no
//! libibverbs: no port can be queried); checks that do not depend on it still run (the
//! sysfs and `/dev` checks need no libibverbs), so one run shows every independent problem.
//!
//! Loading a provider runs its initialisers, which the diagnosing process should not do for
//! providers of hardware that is not there. So the provider checks load each one in a child
//! process: the program itself ([`std::env::current_exe`]) started with a hidden argument,
//! which [`provider_probe_main`] — called first thing in `main` — recognises.
//!
//! ```no_run
//! use rdma_verbs::diag::{self, ProviderProbe, Status};
//!
//! fn main() -> std::process::ExitCode {
//!     diag::provider_probe_main(); // returns at once unless started as a probe
//!     let report = diag::run(ProviderProbe::CurrentExe);
//!     for f in report.findings().iter().filter(|f| f.status != Status::Pass) {
//!         println!("{f}");
//!     }
//!     if report.has_failures() {
//!         std::process::ExitCode::FAILURE
//!     } else {
//!         std::process::ExitCode::SUCCESS
//!     }
//! }
//! ```

mod addressing;
mod extras;
mod fork;
mod gpu;
mod kernel;
mod library;
mod link;
mod netdev;
mod probe;
mod process;
mod providers;
mod resources;
mod sysfs;
mod topology;

use std::fmt;

/// A layer of the RDMA stack, in the order the doctor checks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Layer {
    /// User-space libraries: libibverbs, librdmacm, libmlx5, the providers.
    Library,
    /// The kernel's RDMA devices and their device nodes.
    Kernel,
    /// The ports' physical and logical link.
    Link,
    /// GIDs and IP addresses.
    Addressing,
    /// Locked memory and a loopback smoke test.
    Resources,
    /// GPU and mlx5 extras, and containers.
    Extras,
}

impl Layer {
    /// Every layer, in check order.
    pub const ALL: [Layer; 6] = [
        Layer::Library,
        Layer::Kernel,
        Layer::Link,
        Layer::Addressing,
        Layer::Resources,
        Layer::Extras,
    ];

    /// A heading for people (`Kernel and device nodes`).
    pub fn title(self) -> &'static str {
        match self {
            Layer::Library => "Library",
            Layer::Kernel => "Kernel and device nodes",
            Layer::Link => "Link",
            Layer::Addressing => "Addressing",
            Layer::Resources => "Resources",
            Layer::Extras => "Extras",
        }
    }

    /// A lower-case key for machines (`kernel`).
    pub fn key(self) -> &'static str {
        match self {
            Layer::Library => "library",
            Layer::Kernel => "kernel",
            Layer::Link => "link",
            Layer::Addressing => "addressing",
            Layer::Resources => "resources",
            Layer::Extras => "extras",
        }
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.title())
    }
}

/// The outcome of one check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Status {
    /// Fine.
    Pass,
    /// Works, but something will bite later (a stale provider entry, a low memlock limit).
    Warn,
    /// Broken: RDMA programs will fail here.
    Fail,
    /// Not checked; the detail says why (usually an earlier failure it depends on).
    Skip,
}

impl Status {
    /// `PASS`, `WARN`, `FAIL` or `SKIP`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
            Status::Skip => "SKIP",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One check's result.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Finding {
    /// The layer it belongs to.
    pub layer: Layer,
    /// What was checked, with its object where there is one (`port rxe0/1`, `node uverbs0`).
    pub check: String,
    /// The outcome.
    pub status: Status,
    /// What was seen; for a SKIP, why it was not checked.
    pub detail: String,
    /// What to do about a WARN or FAIL.
    pub remedy: Option<String>,
}

/// `FAIL  port rxe0/1: DOWN, ... (fix: ...)`.
impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}  {}: {}", self.status, self.check, self.detail)?;
        match &self.remedy {
            Some(remedy) => write!(f, " (fix: {remedy})"),
            None => Ok(()),
        }
    }
}

/// Everything [`run`] found, in check order.
#[derive(Clone, Debug, Default)]
pub struct Report {
    findings: Vec<Finding>,
}

impl Report {
    /// The findings, layer by layer.
    pub fn findings(&self) -> &[Finding] {
        &self.findings
    }

    /// The finding of the check named `check` (as in [`Finding::check`]).
    pub fn find(&self, check: &str) -> Option<&Finding> {
        self.findings.iter().find(|f| f.check == check)
    }

    /// The finding of `check`, which a test expects to have `status`.
    #[cfg(test)]
    fn expect(&self, check: &str, status: Status) -> &Finding {
        let finding = self.find(check).unwrap_or_else(|| panic!("no {check:?} in {self:?}"));
        assert_eq!(finding.status, status, "{finding}");
        finding
    }

    /// How many findings have `status`.
    pub fn count(&self, status: Status) -> usize {
        self.findings.iter().filter(|f| f.status == status).count()
    }

    /// Whether any check FAILed: the stack is broken somewhere.
    pub fn has_failures(&self) -> bool {
        self.count(Status::Fail) > 0
    }

    fn layer(&mut self, layer: Layer) -> Out<'_> {
        Out { report: self, layer }
    }
}

/// How the provider-load checks run their child process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProviderProbe {
    /// Start this program again ([`std::env::current_exe`]) with a hidden first argument,
    /// once per provider. Its `main` must call [`provider_probe_main`] first, or it would run
    /// its normal course with that argument.
    CurrentExe,
    /// Load no provider: those checks SKIP.
    Skip,
}

/// Diagnoses the RDMA stack, layer by layer (see the [module docs](self)).
///
/// It never fails: what goes wrong becomes a [`Finding`]. It opens each device, registers
/// 1 MiB per device for the smoke test and, with [`ProviderProbe::CurrentExe`], starts one
/// short-lived child process per configured provider, all at once. That usually takes well
/// under a few seconds; at worst it waits 10 s per device for the smoke test's completions,
/// and 30 s in all for provider initialisers that hang.
pub fn run(probe: ProviderProbe) -> Report {
    let mut report = Report::default();
    let devices = sysfs::devices();
    let library = library::check(&mut report.layer(Layer::Library), &devices, probe);
    let opened = kernel::check(&mut report.layer(Layer::Kernel), &devices, &library.verbs);
    topology::check(&mut report.layer(Layer::Kernel));
    let ports = link::check(&mut report.layer(Layer::Link), &opened);
    let routes = addressing::check(&mut report.layer(Layer::Addressing), &devices, &ports);
    resources::check(&mut report.layer(Layer::Resources), &library.verbs, &routes);
    extras::check(&mut report.layer(Layer::Extras), &devices, &library);
    report
}

/// The hook that makes this program its own provider probe: call it first thing in `main`
/// of a program that calls [`run`] with [`ProviderProbe::CurrentExe`].
///
/// When the process was started as a probe (a hidden first argument), it loads libibverbs,
/// then the provider named by the remaining arguments with `dlopen` — running the provider's
/// initialisers in this otherwise idle process — prints the outcome on stdout for the parent
/// and exits. Otherwise it returns at once, having done nothing.
pub fn provider_probe_main() {
    probe::main_if_probe();
}

/// What a check that depends on an earlier one gets: its result, or why to SKIP.
type Gate<T> = Result<T, String>;

/// A list of objects to check (`rxe0`, `rxe0/1`), each usable or with the reason it is not;
/// an empty label stands for "every object" when a whole layer is gated.
type Targets<T> = Vec<(String, Gate<T>)>;

/// Appends findings to one layer of a report.
struct Out<'a> {
    report: &'a mut Report,
    layer: Layer,
}

impl Out<'_> {
    fn add(&mut self, check: &str, status: Status, detail: String, remedy: Option<String>) {
        let layer = self.layer;
        let check = check.to_owned();
        self.report.findings.push(Finding { layer, check, status, detail, remedy });
    }

    fn pass(&mut self, check: &str, detail: impl Into<String>) {
        self.add(check, Status::Pass, detail.into(), None);
    }

    fn warn(&mut self, check: &str, detail: impl Into<String>, remedy: impl Into<String>) {
        self.add(check, Status::Warn, detail.into(), Some(remedy.into()));
    }

    fn fail(&mut self, check: &str, detail: impl Into<String>, remedy: impl Into<String>) {
        self.add(check, Status::Fail, detail.into(), Some(remedy.into()));
    }

    fn skip(&mut self, check: &str, reason: impl Into<String>) {
        self.add(check, Status::Skip, reason.into(), None);
    }
}

/// `check` followed by its object, or alone for a whole-layer entry (empty label).
fn named(check: &str, label: &str) -> String {
    if label.is_empty() {
        check.to_owned()
    } else {
        format!("{check} {label}")
    }
}

/// A byte count for people: `unlimited` for `None`, else the largest exact binary unit.
fn bytes(n: Option<u64>) -> String {
    let Some(n) = n else { return "unlimited".into() };
    match n {
        0 => "0 bytes".into(),
        n if n % (1 << 30) == 0 => format!("{} GiB", n >> 30),
        n if n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// A fresh directory for a test's files, named after `name` and this process.
#[cfg(test)]
fn scratch_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rdma-verbs-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_counts_use_the_largest_exact_unit() {
        assert_eq!(bytes(None), "unlimited");
        assert_eq!(bytes(Some(65536)), "64 KiB");
        assert_eq!(bytes(Some(8 << 20)), "8 MiB");
        assert_eq!(bytes(Some(3 << 30)), "3 GiB");
        assert_eq!(bytes(Some(1000)), "1000 bytes");
        assert_eq!(bytes(Some(0)), "0 bytes");
    }

    #[test]
    fn report_counts_and_finds() {
        let mut report = Report::default();
        report.layer(Layer::Kernel).fail("kernel RDMA", "absent", "load it");
        report.layer(Layer::Link).skip(&named("port", ""), "needs the kernel");
        report.layer(Layer::Link).pass(&named("port", "rxe0/1"), "ACTIVE");
        assert!(report.has_failures());
        assert_eq!((report.count(Status::Fail), report.count(Status::Skip)), (1, 1));
        let port = report.find("port rxe0/1").expect("named with its object");
        assert_eq!((port.layer, port.status), (Layer::Link, Status::Pass));
        assert_eq!(
            report.find("kernel RDMA").map(ToString::to_string).as_deref(),
            Some("FAIL  kernel RDMA: absent (fix: load it)")
        );
        assert!(report.find("port").is_some_and(|f| f.remedy.is_none()));
    }
}
