//! Which RDMA device is nearest a PCI function, a NUMA node or a set of CPUs.

use std::cmp::Reverse;
use std::fmt;

use super::pci::PciPath;
use super::{RdmaDevice, Topology};

/// How far data goes between an RDMA device and something else on the host, nearest first.
///
/// The classes of NCCL's `NCCL_P2P_LEVEL` / `nvidia-smi topo -m` and of UCX's distance
/// ranking, coarsened to what sysfs shows for certain:
///
/// | class | path | NCCL |
/// |---|---|---|
/// | [`PciSwitch`](Self::PciSwitch) | through PCIe switches only: not the CPU | `PIX`, `PXB` |
/// | [`HostBridge`](Self::HostBridge) | through one root complex (host bridge) of the CPU | `PHB` |
/// | [`NumaNode`](Self::NumaNode) | between root complexes of one NUMA node | `NODE` |
/// | [`System`](Self::System) | across the link between sockets, or not known | `SYS` |
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Distance {
    /// Below a common bridge under the root port: the same PCIe switch (or the same card).
    /// GPUDirect RDMA traffic stays off the CPU.
    PciSwitch,
    /// Under the same host bridge (`pci0000:3a`), through the CPU's root complex.
    HostBridge,
    /// On the same NUMA node, under different host bridges; for a NUMA node or CPUs: local.
    NumaNode,
    /// On another NUMA node, or where the kernel does not say.
    System,
}

impl Distance {
    /// `PCIe switch`, `host bridge`, `NUMA node`, `system`.
    pub fn as_str(self) -> &'static str {
        match self {
            Distance::PciSwitch => "PCIe switch",
            Distance::HostBridge => "host bridge",
            Distance::NumaNode => "NUMA node",
            Distance::System => "system",
        }
    }
}

impl fmt::Display for Distance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An RDMA device in a ranking by [`Topology`]'s `nearest_*` queries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Nearest<'a> {
    /// The device.
    pub device: &'a RdmaDevice,
    /// Its distance class.
    pub distance: Distance,
    /// Within a class, the tie-break: PCIe bridges shared with the PCI function (from the
    /// root port down), or CPUs of the set local to the device.
    pub shared: usize,
}

impl Topology {
    /// The devices ranked by their distance to the PCI function at `path` on NUMA node
    /// `numa_node` (see [`Topology::nearest_to_pci`]).
    pub(crate) fn rank_by_pci(&self, path: &PciPath, numa_node: Option<u32>) -> Vec<Nearest<'_>> {
        self.rank(|device| {
            let shared = device.pci.as_ref().map_or(0, |p| p.common_bridges(path));
            let distance = match &device.pci {
                // Two bridges in common: the root port and one below it, a switch's port.
                Some(_) if shared >= 2 => Distance::PciSwitch,
                Some(p) if p.host_bridge == path.host_bridge => Distance::HostBridge,
                _ if self.same_node(device.numa_node, numa_node) => Distance::NumaNode,
                _ => Distance::System,
            };
            (distance, shared)
        })
    }

    /// The devices ranked by their distance to NUMA node `node`: those on it first
    /// ([`Distance::NumaNode`]), then the others ([`Distance::System`]). On a host with one
    /// node every device is local to it.
    pub fn nearest_to_numa_node(&self, node: u32) -> Vec<Nearest<'_>> {
        self.rank(|device| {
            let local = self.same_node(device.numa_node, Some(node));
            (if local { Distance::NumaNode } else { Distance::System }, 0)
        })
    }

    /// The devices ranked by their distance to the CPUs `cpus` (as `sched_getaffinity(2)`
    /// or `taskset` name them): the devices whose local CPUs (the function's
    /// `local_cpulist`, else its NUMA node's) hold the most of the set come first, as
    /// [`Distance::NumaNode`]; devices local to none of them are [`Distance::System`].
    pub fn nearest_to_cpus(&self, cpus: &[u32]) -> Vec<Nearest<'_>> {
        self.rank(|device| {
            let local = self.local_cpus(device);
            let shared = match local {
                Some(local) => cpus.iter().filter(|c| local.contains(c)).count(),
                // Nothing says where the device is: local only on a host with one node.
                None if self.numa_nodes.len() <= 1 => cpus.len(),
                None => 0,
            };
            (if shared > 0 { Distance::NumaNode } else { Distance::System }, shared)
        })
    }

    /// The CPUs near `device`, or `None` when sysfs does not say.
    fn local_cpus<'a>(&'a self, device: &'a RdmaDevice) -> Option<&'a [u32]> {
        if !device.local_cpus.is_empty() {
            return Some(&device.local_cpus);
        }
        let node = device.numa_node?;
        self.numa_nodes.iter().find(|n| n.id == node).map(|n| n.cpus.as_slice())
    }

    /// Whether two NUMA nodes, either perhaps unknown, are the same: on a host with at most
    /// one node, always.
    fn same_node(&self, a: Option<u32>, b: Option<u32>) -> bool {
        self.numa_nodes.len() <= 1 || matches!((a, b), (Some(a), Some(b)) if a == b)
    }

    /// The devices sorted by `(distance, shared)` of `measure`: nearer class first, then
    /// more shared, then by name.
    fn rank<'a>(&'a self, measure: impl Fn(&RdmaDevice) -> (Distance, usize)) -> Vec<Nearest<'a>> {
        let mut ranked: Vec<Nearest<'a>> = self
            .devices
            .iter()
            .map(|device| {
                let (distance, shared) = measure(device);
                Nearest { device, distance, shared }
            })
            .collect();
        ranked.sort_by_key(|n| (n.distance, Reverse(n.shared), n.device.name.clone()));
        ranked
    }
}
