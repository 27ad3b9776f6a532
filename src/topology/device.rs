//! One RDMA device as sysfs shows it: its PCI place, NUMA node, netdevs and ports.

use std::fmt;
use std::path::Path;

use super::pci::{PciLink, PciPath};
use super::sysfs::{device_netdevs, link_name, names, read};

/// An RDMA device of `/sys/class/infiniband` and where it sits.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RdmaDevice {
    /// The kernel name (`mlx5_0`, `mlx5_bond_0`, `rxe0`).
    pub name: String,
    /// Its PCI function and the bridges above it; `None` for a device with no PCI parent
    /// (rxe, and siw where the kernel gives it none).
    pub pci: Option<PciPath>,
    /// The function's PCIe link; `None` without [`pci`](Self::pci).
    pub link: Option<PciLink>,
    /// The function's `numa_node`; `None` when the kernel reports -1 (a host without NUMA,
    /// or firmware that does not say) or the device has no PCI function.
    pub numa_node: Option<u32>,
    /// The CPUs nearest the function, its `local_cpulist`; empty when unknown.
    pub local_cpus: Vec<u32>,
    /// The netdevs sysfs ties to it: a NIC function's `device/net/*`, a software device's
    /// `parent` (rxe). A RoCE LAG device (`mlx5_bond_0`) shows its first port's netdev,
    /// whose [`bond`](Netdev::bond) names the bond and both ports.
    pub netdevs: Vec<Netdev>,
    /// Its ports, by number.
    pub ports: Vec<Port>,
}

impl RdmaDevice {
    /// Reads `<root>/sys/class/infiniband/<name>`.
    pub(crate) fn read(root: &Path, name: &str) -> RdmaDevice {
        let dir = root.join("sys/class/infiniband").join(name);
        let pci = std::fs::canonicalize(dir.join("device"))
            .ok()
            .and_then(|device| PciPath::of_dir(root, &device));
        let function = pci.as_ref().map(|p| p.dir(root));
        let local = function.as_ref().and_then(|f| read(f.join("local_cpulist")));
        RdmaDevice {
            name: name.to_owned(),
            link: function.as_deref().map(PciLink::read),
            numa_node: function.as_deref().and_then(numa_node),
            local_cpus: local.as_deref().and_then(super::parse_cpulist).unwrap_or_default(),
            netdevs: device_netdevs(&dir).iter().map(|n| Netdev::read(root, n)).collect(),
            ports: numbered(&dir.join("ports")).map(|n| Port::read(&dir, n)).collect(),
            pci,
        }
    }
}

/// The `numa_node` attribute of a device directory; `None` for -1 or absent.
pub(crate) fn numa_node(dir: &Path) -> Option<u32> {
    read(dir.join("numa_node"))?.parse().ok()
}

/// The entries of `dir` named by a number, in numeric order.
fn numbered(dir: &Path) -> impl Iterator<Item = u32> {
    let mut numbers: Vec<u32> = names(dir).iter().filter_map(|n| n.parse().ok()).collect();
    numbers.sort_unstable();
    numbers.into_iter()
}

/// A network interface of an RDMA device.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Netdev {
    /// Its name (`ens1f0np0`).
    pub name: String,
    /// `operstate`: `up`, `down`, `lowerlayerdown`, … (RFC 2863's names).
    pub operstate: Option<String>,
    /// The bond it is a port of, or that it is; `None` when not bonded.
    pub bond: Option<Bond>,
}

impl Netdev {
    /// Reads `<root>/sys/class/net/<name>`: a bond's port has a `master` link to the bond
    /// and a `bonding_slave/` directory (a bridge's or team's port has only the link).
    fn read(root: &Path, name: &str) -> Netdev {
        let net = root.join("sys/class/net");
        let dir = net.join(name);
        let bond = if dir.join("bonding").is_dir() {
            Some(name.to_owned())
        } else if dir.join("bonding_slave").is_dir() {
            link_name(dir.join("master"))
        } else {
            None
        };
        let bond = bond.map(|bond| {
            let bonding = net.join(&bond).join("bonding");
            Bond {
                mode: read(bonding.join("mode")),
                ports: read(bonding.join("slaves"))
                    .map(|s| s.split_whitespace().map(str::to_owned).collect())
                    .unwrap_or_default(),
                port_state: read(dir.join("bonding_slave/state")),
                name: bond,
            }
        });
        Netdev { name: name.to_owned(), operstate: read(dir.join("operstate")), bond }
    }
}

/// `ens1np0 up`, `rdma0 state unknown`, `ens1f0np0 up (active port of bond0: 802.3ad 4, ports ens1f0np0 ens1f1np1)`.
impl fmt::Display for Netdev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `unknown` is what drivers that do not track it report (dummy, some virtual NICs).
        let state = match self.operstate.as_deref() {
            None | Some("unknown") => "state unknown",
            Some(state) => state,
        };
        write!(f, "{} {state}", self.name)?;
        let Some(bond) = &self.bond else { return Ok(()) };
        let mode = bond.mode.as_deref().unwrap_or("mode unknown");
        match &bond.port_state {
            None => f.write_str(" (a bond")?,
            Some(state) => write!(f, " ({state} port of {}", bond.name)?,
        }
        write!(f, ": {mode}, ports {})", bond.ports.join(" "))
    }
}

/// A Linux bonding interface (`/sys/class/net/<bond>/bonding/`): over two ports of one
/// ConnectX card, the mlx5 driver joins their RDMA devices into one (RoCE LAG,
/// `mlx5_bond_0`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Bond {
    /// Its name (`bond0`).
    pub name: String,
    /// `bonding/mode`: the mode's name and number (`802.3ad 4`, `active-backup 1`).
    pub mode: Option<String>,
    /// `bonding/slaves`: its ports.
    pub ports: Vec<String>,
    /// The netdev's state as a port of the bond, `bonding_slave/state`: `active` or
    /// `backup`; `None` for the bond itself.
    pub port_state: Option<String>,
}

/// A port of an RDMA device (`ports/<N>`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Port {
    /// Its number, from 1.
    pub num: u32,
    /// `link_layer`: `InfiniBand` or `Ethernet`.
    pub link_layer: Option<String>,
    /// `rate`: `100 Gb/sec (4X EDR)`, `10 Gb/sec (1X QDR)`.
    pub rate: Option<String>,
    /// The populated entries of the GID table, by index.
    pub gids: Vec<GidAttrs>,
}

impl Port {
    /// Reads `<device dir>/ports/<num>`.
    fn read(device: &Path, num: u32) -> Port {
        let dir = device.join("ports").join(num.to_string());
        let attrs = dir.join("gid_attrs");
        // An unpopulated entry's `types/<I>` cannot be read (EINVAL): it is left out.
        let gids = numbered(&attrs.join("types"))
            .filter_map(|index| {
                let kind = read(attrs.join("types").join(index.to_string()))?;
                let netdev = read(attrs.join("ndevs").join(index.to_string()));
                Some(GidAttrs { index, kind, netdev })
            })
            .collect();
        Port { num, link_layer: read(dir.join("link_layer")), rate: read(dir.join("rate")), gids }
    }
}

/// A GID table entry's attributes (`ports/<N>/gid_attrs/{types,ndevs}/<I>`).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct GidAttrs {
    /// Its index in the table.
    pub index: u32,
    /// Its type: `IB/RoCE v1` or `RoCE v2`.
    pub kind: String,
    /// The netdev it belongs to (RoCE); `None` on InfiniBand.
    pub netdev: Option<String>,
}
