//! Where the RDMA devices sit on the host, read from sysfs: PCIe place and link, NUMA node,
//! netdevs and bonds, ports and GID types; and which device is nearest a GPU, a NUMA node or
//! a set of CPUs.
//!
//! A data plane wants the NIC nearest its memory and its threads: a GPU's traffic behind the
//! GPU's own PCIe switch (GPUDirect RDMA never crosses the CPU), a thread's on its socket.
//! [`Topology::read`] takes a snapshot of what the kernel shows; it opens no device and
//! needs no libibverbs.
//!
//! | what | sysfs |
//! |---|---|
//! | devices | `/sys/class/infiniband/<dev>` |
//! | PCI function and bridges ([`PciPath`]) | the `device` link, resolved: `/sys/devices/pci0000:00/0000:00:01.0/…/0000:03:00.0` |
//! | NUMA node, local CPUs | the function's `numa_node` (-1: none), `local_cpulist` |
//! | PCIe link ([`PciLink`]) | the function's `current_link_width`, `current_link_speed`, `max_link_*` |
//! | netdevs ([`Netdev`]) | `device/net/*`, rxe's `parent`; their `operstate` |
//! | bonds ([`Bond`]) | `/sys/class/net/<if>/master` with `bonding_slave/state`; the bond's `bonding/mode`, `bonding/slaves` |
//! | ports ([`Port`]) | `ports/<N>/link_layer`, `rate`, `gid_attrs/types/<I>`, `gid_attrs/ndevs/<I>` |
//! | NUMA nodes' CPUs | `/sys/devices/system/node/node<N>/cpulist` |
//! | GPUs ([`Gpu`]) | `/sys/bus/pci/devices/*` of display `class` (`0x03xxxx`) and NVIDIA or AMD `vendor` |
//!
//! Software devices have no PCI place: rxe and siw sit under `/sys/devices/virtual`. rxe
//! names its netdev in `parent`; siw names it nowhere in sysfs (`rdma link` shows it, over
//! netlink). Kernels before siw's parent was removed put siw0 under its netdev's parent
//! device, and then it gets that device's PCI place.
//!
//! The queries rank every device by [`Distance`], the classes of NCCL's and UCX's topology
//! (same PCIe switch, same host bridge, same NUMA node, other), nearest first:
//! [`nearest_to_pci`](Topology::nearest_to_pci) (longest common PCIe path, then NUMA node),
//! [`nearest_to_numa_node`](Topology::nearest_to_numa_node) and
//! [`nearest_to_cpus`](Topology::nearest_to_cpus).
//!
//! ```no_run
//! use rdma_verbs::topology::Topology;
//!
//! # fn main() -> Result<(), rdma_verbs::topology::TopologyError> {
//! let topology = Topology::read()?;
//! for device in topology.devices() {
//!     println!("{} NUMA {:?} at {:?}", device.name, device.numa_node, device.pci);
//! }
//! // The GPU's address as nvidia-smi prints it.
//! if let Some(nearest) = topology.nearest_to_pci(&"00000000:3B:00.0".parse()?)?.first() {
//!     println!("use {} ({})", nearest.device.name, nearest.distance);
//! }
//! # Ok(()) }
//! ```
//!
//! [`Topology::read_from`] reads a tree under another root: a container's view of the host's
//! sysfs, or a recorded tree in tests.

mod device;
mod gpu;
mod nearest;
mod pci;
pub(crate) mod sysfs;

use std::path::{Path, PathBuf};

pub use device::{Bond, GidAttrs, Netdev, Port, RdmaDevice};
pub use gpu::{Gpu, GpuVendor};
pub use nearest::{Distance, Nearest};
pub use pci::{PciAddress, PciLink, PciPath};

/// What went wrong reading the topology or a query's argument.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// The root holds no sysfs.
    #[error(
        "{} is not a sysfs tree (it has no class/ directory): read the host's with \
         Topology::read, or pass the directory sysfs is mounted under, without `/sys`",
        path.display()
    )]
    NoSysfs {
        /// The `sys` directory looked at.
        path: PathBuf,
    },
    /// Text that is not a PCI address.
    #[error(
        "`{text}` is not a PCI address: write domain:bus:device.function in hex, as \
         `lspci -D` prints it (0000:3b:00.0)"
    )]
    BadPciAddress {
        /// The text.
        text: String,
    },
    /// A PCI address no device of the host has.
    #[error(
        "no PCI device {address} in {}: check the address with `lspci -D` (a GPU's is \
         `nvidia-smi --query-gpu=pci.bus_id --format=csv`)",
        path.display()
    )]
    PciDeviceNotFound {
        /// The address.
        address: PciAddress,
        /// Where it was looked for.
        path: PathBuf,
    },
}

/// A snapshot of the host's RDMA devices and NUMA nodes (see the [module docs](self)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Topology {
    root: PathBuf,
    devices: Vec<RdmaDevice>,
    numa_nodes: Vec<NumaNode>,
    gpus: Vec<Gpu>,
}

/// A NUMA node and its CPUs (`/sys/devices/system/node/node<N>`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct NumaNode {
    /// Its number.
    pub id: u32,
    /// Its CPUs, from `cpulist`.
    pub cpus: Vec<u32>,
}

impl Topology {
    /// Reads the host's topology from `/sys`.
    ///
    /// # Errors
    ///
    /// [`TopologyError::NoSysfs`] when sysfs is not mounted. A host without RDMA devices
    /// has an empty topology.
    pub fn read() -> Result<Topology, TopologyError> {
        Topology::read_from("/")
    }

    /// Reads the topology from `<root>/sys`: `root` is `/` for the host.
    ///
    /// # Errors
    ///
    /// [`TopologyError::NoSysfs`] when `<root>/sys/class` is not a directory.
    pub fn read_from(root: impl AsRef<Path>) -> Result<Topology, TopologyError> {
        // Resolved, as the `device` links will be, so those strip it off.
        let root = std::fs::canonicalize(&root).unwrap_or_else(|_| root.as_ref().to_path_buf());
        let sys = root.join("sys");
        if !sys.join("class").is_dir() {
            return Err(TopologyError::NoSysfs { path: sys });
        }
        let devices = sysfs::names(sys.join("class/infiniband"))
            .iter()
            .map(|name| RdmaDevice::read(&root, name))
            .collect();
        let nodes = sys.join("devices/system/node");
        let mut numa_nodes: Vec<NumaNode> = sysfs::names(&nodes)
            .iter()
            .filter_map(|n| {
                let id = n.strip_prefix("node")?.parse().ok()?;
                let cpus = parse_cpulist(&sysfs::read(nodes.join(n).join("cpulist"))?)?;
                Some(NumaNode { id, cpus })
            })
            .collect();
        numa_nodes.sort_by_key(|n| n.id);
        let gpus = gpu::read_gpus(&root);
        Ok(Topology { root, devices, numa_nodes, gpus })
    }

    /// The RDMA devices, by name.
    pub fn devices(&self) -> &[RdmaDevice] {
        &self.devices
    }

    /// The device named `name`.
    pub fn device(&self, name: &str) -> Option<&RdmaDevice> {
        self.devices.iter().find(|d| d.name == name)
    }

    /// The NUMA nodes, by number; empty on a kernel without NUMA support.
    pub fn numa_nodes(&self) -> &[NumaNode] {
        &self.numa_nodes
    }

    /// The NVIDIA and AMD GPUs on the PCI bus, by address (rank the RDMA devices by their
    /// distance to one with [`Topology::nearest_to_pci`]).
    pub fn gpus(&self) -> &[Gpu] {
        &self.gpus
    }

    /// The devices ranked by their distance to the PCI function at `address` (a GPU):
    /// the most PCIe bridges in common first ([`Distance::PciSwitch`] for a common switch),
    /// then under the same host bridge, then on the same NUMA node, then the rest.
    ///
    /// # Errors
    ///
    /// [`TopologyError::PciDeviceNotFound`] when `<root>/sys/bus/pci/devices/<address>` is
    /// absent.
    pub fn nearest_to_pci(&self, address: &PciAddress) -> Result<Vec<Nearest<'_>>, TopologyError> {
        let link = self.root.join("sys/bus/pci/devices").join(address.to_string());
        let path = std::fs::canonicalize(&link)
            .ok()
            .and_then(|dir| PciPath::of_dir(&self.root, &dir))
            .ok_or(TopologyError::PciDeviceNotFound { address: *address, path: link })?;
        let numa_node = device::numa_node(&path.dir(&self.root));
        Ok(self.rank_by_pci(&path, numa_node))
    }
}

/// A sysfs CPU list: `0-3,8,10-11` → 0, 1, 2, 3, 8, 10, 11; `None` if malformed. Empty
/// text (a node without CPUs) is an empty list.
fn parse_cpulist(text: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for range in text.trim().split(',').filter(|r| !r.is_empty()) {
        let (first, last) = range.split_once('-').unwrap_or((range, range));
        let (first, last): (u32, u32) = (first.parse().ok()?, last.parse().ok()?);
        if last < first {
            return None;
        }
        cpus.extend(first..=last);
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_expand() {
        assert_eq!(parse_cpulist("0-3,8,10-11\n"), Some(vec![0, 1, 2, 3, 8, 10, 11]));
        assert_eq!(parse_cpulist(""), Some(vec![]));
        assert_eq!(parse_cpulist("3-1"), None);
        assert_eq!(parse_cpulist("a-b"), None);
    }

    #[test]
    fn a_root_without_sysfs_is_refused_with_what_to_pass() {
        let e = Topology::read_from("/nonexistent-root").unwrap_err();
        assert!(matches!(e, TopologyError::NoSysfs { .. }), "{e}");
        assert!(e.to_string().contains("/nonexistent-root/sys is not a sysfs tree"), "{e}");
    }
}
