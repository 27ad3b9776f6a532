//! GPU memory routes (extras layer): the host's GPUs, and whether GPU memory can be
//! registered — through dma-buf (`ibv_reg_dmabuf_mr(3)`: rdma-core v34+, Linux 5.12+, a
//! provider that takes it) or through a peer-memory client (`ibv_reg_mr(3)` of a GPU
//! address: `nvidia_peermem`, ROCm's `amdgpu`, on the peer-memory API of MLNX_OFED/DOCA-OFED
//! kernels) — for the host, then for each RDMA device.

use std::io::BufRead;
use std::os::fd::AsFd;
use std::path::Path;

use super::library::Library;
use super::sysfs::{read, SysDevice};
use super::{named, Gate, Out};
use crate::topology::{Gpu, GpuVendor, Topology};
use crate::{AccessFlags, Error};

/// The NVIDIA peer-memory clients: the driver's own module, and the older one of MLNX_OFED.
const NVIDIA_CLIENTS: [&str; 2] = ["nvidia_peermem", "nv_peer_mem"];
/// The symbol of the peer-memory API (MLNX_OFED/DOCA-OFED's `ib_core`; not in mainline).
const PEER_API: &str = "ib_register_peer_memory_client";
/// What the NVIDIA remedies say about dma-buf.
const NVIDIA_DMABUF: &str = "ProtectionDomain::register_dmabuf with the GPU's dma-buf fd \
                             (cuMemGetHandleForAddressRange; Linux 5.12+, rdma-core v34+)";

/// Runs the GPU checks on this host.
pub(super) fn check(out: &mut Out<'_>, devices: &[SysDevice], library: &Library) {
    let host = Host::read(Path::new("/"));
    let symbol = library.verbs.as_ref().map(|v| v.fns.ibv_reg_dmabuf_mr.is_some());
    let routes: Vec<DeviceRoutes> = devices
        .iter()
        .map(|d| DeviceRoutes {
            name: d.name.clone(),
            software: d.driver.is_none(),
            dmabuf: match &library.verbs {
                Err(reason) => Err(reason.clone()),
                Ok(_) => Ok(probe_dmabuf(&d.name)),
            },
        })
        .collect();
    report(out, &host, symbol.map_err(Clone::clone), &routes);
}

/// What the host shows of its GPUs and their drivers, under a root (`/` for the host).
#[derive(Debug)]
struct Host {
    /// The GPUs, each with the RDMA device nearest it (`mlx5_0 (PCIe switch)`).
    gpus: Vec<(Gpu, Option<String>)>,
    /// The NVIDIA driver's version, from `/proc/driver/nvidia/version`.
    nvidia_driver: Option<String>,
    /// The loaded peer-memory clients of [`NVIDIA_CLIENTS`], in that order.
    nvidia_clients: Vec<&'static str>,
    /// Whether `amdgpu` is loaded.
    amdgpu: bool,
    /// Whether `/proc/kallsyms` has [`PEER_API`]; `None` when it cannot be read.
    peer_api: Option<bool>,
    /// The running kernel's release (`5.15.0-105-generic`).
    kernel: Option<String>,
}

impl Host {
    fn read(root: &Path) -> Host {
        let topology = Topology::read_from(root).ok();
        let gpus = topology.as_ref().map_or(&[][..], |t| t.gpus());
        let gpus = gpus
            .iter()
            .map(|gpu| {
                let nearest = topology.as_ref().and_then(|t| {
                    let first = t.nearest_to_pci(&gpu.address).ok()?.into_iter().next()?;
                    Some(format!("{} ({})", first.device.name, first.distance))
                });
                (gpu.clone(), nearest)
            })
            .collect();
        let module = |name: &str| root.join("sys/module").join(name).is_dir();
        let version = read(root.join("proc/driver/nvidia/version"));
        Host {
            gpus,
            nvidia_driver: version.as_deref().map(nvidia_version),
            nvidia_clients: NVIDIA_CLIENTS.into_iter().filter(|m| module(m)).collect(),
            amdgpu: module("amdgpu"),
            peer_api: has_symbol(&root.join("proc/kallsyms"), PEER_API),
            kernel: read(root.join("proc/sys/kernel/osrelease")),
        }
    }

    fn has(&self, vendor: GpuVendor) -> bool {
        self.gpus.iter().any(|(gpu, _)| gpu.vendor == vendor)
    }

    fn nvidia(&self) -> bool {
        self.has(GpuVendor::Nvidia) || self.nvidia_driver.is_some()
    }

    fn any_gpu(&self) -> bool {
        self.nvidia() || self.has(GpuVendor::Amd)
    }

    /// The peer-memory client that serves this host's GPUs, if one is loaded.
    fn peer_client(&self) -> Option<&'static str> {
        let amd = self.amdgpu && self.peer_api == Some(true);
        self.nvidia_clients.first().copied().or(amd.then_some("amdgpu"))
    }
}

/// The driver version of `/proc/driver/nvidia/version`'s first line (`NVRM version: NVIDIA
/// UNIX x86_64 Kernel Module  550.54.15  Tue Mar …`), or the line itself.
fn nvidia_version(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default();
    let mut words = line.split_whitespace().skip_while(|w| *w != "Module").skip(1);
    words.next().unwrap_or(line).to_owned()
}

/// Whether a `/proc/kallsyms` lists `symbol` (names are shown to every reader, addresses
/// only to root); `None` when the file cannot be read.
fn has_symbol(kallsyms: &Path, symbol: &str) -> Option<bool> {
    let file = std::io::BufReader::new(std::fs::File::open(kallsyms).ok()?);
    Some(file.lines().map_while(Result::ok).any(|l| l.split_whitespace().nth(2) == Some(symbol)))
}

/// `(major, minor)` of a kernel release: `5.15.0-105-generic` → (5, 15).
fn kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(['.', '-']);
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Whether a device's provider takes dma-buf registrations.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Dmabuf {
    Yes,
    /// Why not.
    No(String),
    /// The probe's unexpected answer.
    Unknown(String),
}

/// One RDMA device's inputs to its `gpu routes` finding.
struct DeviceRoutes {
    name: String,
    /// rxe, siw: no bus driver, the CPU moves the data.
    software: bool,
    /// The probe's answer, or why there was none.
    dmabuf: Gate<Dmabuf>,
}

/// Asks `device`'s provider to register a dma-buf that is none (`/dev/null`): a provider
/// that takes dma-bufs passes the call to the kernel, which refuses the descriptor (`EINVAL`,
/// `EBADF`); one that does not answers `EOPNOTSUPP` itself. Nothing is registered.
fn probe_dmabuf(device: &str) -> Dmabuf {
    let null = match std::fs::File::open("/dev/null") {
        Ok(null) => null,
        Err(e) => return Dmabuf::Unknown(format!("not probed: /dev/null: {e}")),
    };
    let pd = crate::Context::open(device).and_then(|ctx| {
        let pd = ctx.alloc_pd()?;
        let access = AccessFlags::LOCAL_WRITE;
        Ok(pd.register_dmabuf(null.as_fd(), 0, 4096, 0, access).map(drop))
    });
    match pd {
        Err(e) => Dmabuf::Unknown(format!("not probed: {e}")),
        Ok(answer) => classify(answer),
    }
}

/// What the provider's answer to the `/dev/null` registration says.
fn classify(answer: Result<(), Error>) -> Dmabuf {
    match answer {
        Ok(()) => Dmabuf::Yes,
        Err(Error::Unsupported { what }) if what.contains("v34") => {
            Dmabuf::No("libibverbs lacks ibv_reg_dmabuf_mr (before rdma-core v34)".into())
        }
        Err(Error::Unsupported { .. }) => Dmabuf::No(
            "the provider or kernel driver refuses ibv_reg_dmabuf_mr (EOPNOTSUPP)".into(),
        ),
        Err(e) if matches!(e.errno(), Some(libc::EINVAL | libc::EBADF)) => Dmabuf::Yes,
        Err(e) => Dmabuf::Unknown(e.to_string()),
    }
}

/// The findings: `GPU`, `dmabuf`, `peer memory`, and `gpu routes <dev>` per device.
fn report(out: &mut Out<'_>, host: &Host, symbol: Gate<bool>, devices: &[DeviceRoutes]) {
    gpus(out, host);
    dmabuf(out, host, symbol);
    peer_memory(out, host);
    for device in devices {
        routes(out, host, device);
    }
}

fn gpus(out: &mut Out<'_>, host: &Host) {
    if !host.any_gpu() {
        return out.pass(
            "GPU",
            "none: no NVIDIA or AMD function of display class on the PCI bus, no NVIDIA driver",
        );
    }
    let mut seen: Vec<String> = host
        .gpus
        .iter()
        .map(|(gpu, nearest)| {
            let numa =
                gpu.numa_node.map_or("NUMA node unknown".into(), |n| format!("NUMA node {n}"));
            let nearest = nearest.as_deref().unwrap_or("none");
            format!("{} {} ({numa}; nearest RDMA device {nearest})", gpu.vendor, gpu.address)
        })
        .collect();
    if let Some(version) = &host.nvidia_driver {
        seen.push(format!("NVIDIA driver {version}"));
    }
    out.pass("GPU", seen.join("; "));
}

fn dmabuf(out: &mut Out<'_>, host: &Host, symbol: Gate<bool>) {
    let symbol = match symbol {
        Err(reason) => return out.skip("dmabuf", reason),
        Ok(symbol) => symbol,
    };
    let kernel = host.kernel.as_deref().unwrap_or("(release unknown)");
    let old_kernel = host.kernel.as_deref().and_then(kernel_version).is_some_and(|v| v < (5, 12));
    let (problem, remedy) = if !symbol {
        (
            "libibverbs lacks ibv_reg_dmabuf_mr (rdma-core before v34)",
            "upgrade rdma-core to v34 or later",
        )
    } else if old_kernel {
        (
            "the kernel predates dma-buf registration (Linux 5.12)",
            "upgrade the kernel to 5.12 or later, or register GPU memory through a peer-memory \
             client (modprobe nvidia_peermem)",
        )
    } else {
        return out.pass(
            "dmabuf",
            format!(
                "libibverbs exports ibv_reg_dmabuf_mr (rdma-core v34+) and Linux {kernel} \
                 registers dma-bufs (5.12+); each device's provider decides (gpu routes <dev>)"
            ),
        );
    };
    let detail = format!("{problem}; Linux {kernel}");
    if host.any_gpu() {
        out.warn("dmabuf", format!("{detail}: GPU memory needs a peer-memory client"), remedy);
    } else {
        out.pass("dmabuf", format!("{detail}; only GPU memory needs it, and there is no GPU"));
    }
}

fn peer_memory(out: &mut Out<'_>, host: &Host) {
    let api = match host.peer_api {
        Some(true) => format!("the kernel has the peer-memory API ({PEER_API})"),
        Some(false) => format!(
            "the kernel lacks the peer-memory API ({PEER_API}: MLNX_OFED/DOCA-OFED's ib_core \
             has it, mainline kernels do not)"
        ),
        None => "/proc/kallsyms cannot be read to look for the peer-memory API".into(),
    };
    if let Some(client) = host.peer_client() {
        return out.pass(
            "peer memory",
            format!(
                "{client} is loaded, {api}: ibv_reg_mr takes GPU addresses (register_peer_memory)"
            ),
        );
    }
    if !host.any_gpu() {
        return out.pass("peer memory", format!("no client loaded; no GPU needs one; {api}"));
    }
    let vendor =
        if host.nvidia() { "nvidia_peermem" } else { "amdgpu (ROCm's, as a peer-memory client)" };
    let detail = format!("no peer-memory client ({vendor}) is loaded; {api}");
    out.warn("peer memory", detail, remedy(host));
}

/// How a host with a GPU and no peer-memory client gets GPU memory registered.
fn remedy(host: &Host) -> String {
    match (host.nvidia(), host.peer_api) {
        (true, Some(false)) => format!(
            "use {NVIDIA_DMABUF}; nvidia_peermem needs MLNX_OFED/DOCA-OFED's kernel modules"
        ),
        (true, _) => format!("modprobe nvidia_peermem, or use {NVIDIA_DMABUF}"),
        (false, _) => "use ProtectionDomain::register_dmabuf with the GPU memory's dma-buf fd \
                       (ROCm exports one: hsa_amd_portable_export_dmabuf)"
            .into(),
    }
}

fn routes(out: &mut Out<'_>, host: &Host, device: &DeviceRoutes) {
    let check = named("gpu routes", &device.name);
    let dmabuf = match &device.dmabuf {
        Err(reason) => return out.skip(&check, reason.clone()),
        Ok(answer) => answer,
    };
    let dmabuf_text = match dmabuf {
        Dmabuf::Yes => "dma-buf yes (the provider passes ibv_reg_dmabuf_mr to the kernel)".into(),
        Dmabuf::No(why) => format!("dma-buf no: {why}"),
        Dmabuf::Unknown(what) => format!("dma-buf unknown: {what}"),
    };
    let peer = if device.software { None } else { host.peer_client() };
    let peer_text = match (device.software, peer) {
        (true, _) => "peer memory no: a software device, whose data the CPU moves, and the CPU \
                      must not touch GPU memory"
            .to_owned(),
        (false, Some(client)) => format!("peer memory yes ({client})"),
        (false, None) => "peer memory no: no peer-memory client is loaded".to_owned(),
    };
    let seen = format!("{dmabuf_text}; {peer_text}");
    if !host.any_gpu() {
        return out.pass(&check, format!("no GPU on this host; {seen}"));
    }
    if *dmabuf == Dmabuf::Yes || peer.is_some() {
        return out.pass(&check, seen);
    }
    let remedy = if device.software {
        "register GPU memory on a hardware RDMA device (ConnectX: mlx5): rxe and siw take none"
            .to_owned()
    } else {
        remedy(host)
    };
    out.warn(&check, format!("{seen}: GPU memory cannot be registered on it"), remedy);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::{Layer, Report, Status};
    use rdma_verbs_test_support::fixtures::topology_root;

    fn findings(host: &Host, symbol: Gate<bool>, devices: &[DeviceRoutes]) -> Report {
        let mut findings = Report::default();
        report(&mut findings.layer(Layer::Extras), host, symbol, devices);
        findings
    }

    fn device(name: &str, software: bool, dmabuf: Dmabuf) -> DeviceRoutes {
        DeviceRoutes { name: name.into(), software, dmabuf: Ok(dmabuf) }
    }

    fn refused() -> Dmabuf {
        classify(Err(Error::Unsupported { what: "ibv_reg_dmabuf_mr" }))
    }

    #[test]
    fn an_nvidia_host_without_nvidia_peermem_is_told_to_load_it_or_use_dmabuf() {
        let host = Host::read(&topology_root("two-socket"));
        assert_eq!(host.kernel.as_deref(), Some("5.15.0-105-generic"));
        let devices = [device("mlx5_0", false, Dmabuf::Yes), device("mlx5_1", false, refused())];
        let report = findings(&host, Ok(true), &devices);
        let gpu = report.find("GPU").unwrap();
        assert_eq!(
            gpu.detail,
            "NVIDIA 0000:1b:00.0 (NUMA node 0; nearest RDMA device mlx5_0 (PCIe switch)); \
             NVIDIA 0000:d8:00.0 (NUMA node 1; nearest RDMA device mlx5_1 (NUMA node)); \
             NVIDIA driver 550.54.15",
            "the BMC's VGA function and the NVMe drive are no GPUs"
        );
        report.expect("dmabuf", Status::Pass);
        let peer = report.expect("peer memory", Status::Warn);
        assert!(peer.detail.contains("the kernel has the peer-memory API"), "{peer}");
        let remedy = peer.remedy.as_deref().unwrap();
        assert!(
            remedy.starts_with("modprobe nvidia_peermem, or use ProtectionDomain::register_dmabuf")
        );
        assert!(remedy.contains("cuMemGetHandleForAddressRange"), "{remedy}");
        let nic0 = report.find("gpu routes mlx5_0").unwrap();
        assert_eq!(nic0.status, Status::Pass, "dma-buf is one route: {nic0}");
        let nic1 = report.expect("gpu routes mlx5_1", Status::Warn);
        assert!(nic1.detail.starts_with("dma-buf no: the provider or kernel driver refuses"));
        assert!(nic1.remedy.as_deref().unwrap().starts_with("modprobe nvidia_peermem"));
    }

    #[test]
    fn a_loaded_client_makes_peer_memory_a_route_of_hardware_devices_only() {
        let mut host = Host::read(&topology_root("two-socket"));
        host.nvidia_clients = vec!["nvidia_peermem"];
        let devices = [device("mlx5_1", false, refused()), device("rxe0", true, refused())];
        let report = findings(&host, Ok(true), &devices);
        let peer = report.expect("peer memory", Status::Pass);
        assert!(peer.detail.starts_with("nvidia_peermem is loaded"), "{peer}");
        let nic = report.expect("gpu routes mlx5_1", Status::Pass);
        assert!(nic.detail.ends_with("peer memory yes (nvidia_peermem)"), "{nic}");
        let rxe = report.expect("gpu routes rxe0", Status::Warn);
        assert!(rxe.detail.contains("peer memory no: a software device"), "{rxe}");
        assert!(rxe.remedy.as_deref().unwrap().contains("hardware RDMA device"), "{rxe}");
    }

    #[test]
    fn an_amd_host_with_rocm_amdgpu_and_the_api_has_peer_memory() {
        let host = Host::read(&topology_root("roce-lag"));
        let report = findings(&host, Ok(true), &[device("mlx5_bond_0", false, refused())]);
        let gpu = report.find("GPU").unwrap();
        assert!(gpu.detail.starts_with("AMD 0000:c1:00.0 (NUMA node 0; nearest"), "{gpu}");
        let peer = report.expect("peer memory", Status::Pass);
        assert!(peer.detail.starts_with("amdgpu is loaded"), "{peer}");
        report.expect("gpu routes mlx5_bond_0", Status::Pass);
    }

    #[test]
    fn a_host_without_a_gpu_passes_every_check_and_says_why() {
        let host = Host::read(&topology_root("vm"));
        assert_eq!(host.peer_api, Some(false), "an inbox kernel");
        let devices = [device("rxe0", true, refused()), device("siw0", true, refused())];
        let report = findings(&host, Ok(false), &devices);
        for check in ["GPU", "dmabuf", "peer memory", "gpu routes rxe0", "gpu routes siw0"] {
            report.expect(check, Status::Pass);
        }
        assert!(report.find("GPU").unwrap().detail.starts_with("none: "));
        let dmabuf = &report.find("dmabuf").unwrap().detail;
        assert!(dmabuf.starts_with("libibverbs lacks ibv_reg_dmabuf_mr"), "{dmabuf}");
        let rxe = &report.find("gpu routes rxe0").unwrap().detail;
        assert!(rxe.starts_with("no GPU on this host; dma-buf no: "), "{rxe}");
    }

    #[test]
    fn without_peer_memory_api_an_nvidia_host_is_sent_to_dmabuf_and_an_old_kernel_warns() {
        let mut host = Host::read(&topology_root("two-socket"));
        host.peer_api = Some(false);
        host.kernel = Some("5.4.0-150-generic".into());
        let report = findings(&host, Ok(true), &[]);
        let peer = report.find("peer memory").unwrap();
        assert!(peer.detail.contains("the kernel lacks the peer-memory API"), "{peer}");
        assert!(peer
            .remedy
            .as_deref()
            .unwrap()
            .starts_with("use ProtectionDomain::register_dmabuf"));
        let dmabuf = report.expect("dmabuf", Status::Warn);
        assert!(dmabuf.detail.contains("predates dma-buf registration (Linux 5.12); Linux 5.4.0"));
        let report = findings(&host, Err("needs libibverbs".into()), &[]);
        report.expect("dmabuf", Status::Skip);
    }

    #[test]
    fn the_probe_answers_are_read_as_the_provider_meant_them() {
        assert_eq!(classify(Ok(())), Dmabuf::Yes);
        let kernel_refused_the_fd = Error::verb("ibv_reg_dmabuf_mr", libc::EINVAL);
        assert_eq!(classify(Err(kernel_refused_the_fd)), Dmabuf::Yes);
        let old = classify(Err(Error::Unsupported { what: "ibv_reg_dmabuf_mr (rdma-core v34+)" }));
        assert!(matches!(old, Dmabuf::No(why) if why.contains("before rdma-core v34")));
        assert!(matches!(refused(), Dmabuf::No(why) if why.contains("EOPNOTSUPP")));
        let odd = classify(Err(Error::verb("ibv_reg_dmabuf_mr", libc::ENOMEM)));
        assert!(matches!(odd, Dmabuf::Unknown(_)), "{odd:?}");
        assert_eq!(kernel_version("6.1.0-18-amd64"), Some((6, 1)));
        assert_eq!(nvidia_version("garbage"), "garbage");
    }
}
