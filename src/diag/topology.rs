//! Where each device sits (kernel layer): NUMA node, PCIe path and link, netdevs and
//! bonds, ports with their GID types — from [`crate::topology`].

use super::{named, Out};
use crate::topology::{Port, RdmaDevice, Topology, TopologyError};

/// One `topology <dev>` finding per device of the host.
pub(super) fn check(out: &mut Out<'_>) {
    report(out, Topology::read());
}

/// The findings for `topology`: PASS with each device's place, WARN when its PCIe link
/// trained below what the card supports.
fn report(out: &mut Out<'_>, topology: Result<Topology, TopologyError>) {
    let topology = match topology {
        Ok(topology) => topology,
        Err(e) => return out.skip("topology", e.to_string()),
    };
    for device in topology.devices() {
        let check = named("topology", &device.name);
        let seen = describe(device);
        match &device.link {
            Some(link) if link.is_degraded() => out.warn(
                &check,
                format!("{seen}; the PCIe link runs below the card's maximum"),
                "seat the card in a slot with as many lanes as it has (a riser or a shared \
                 slot halves them), and check the slot's speed and bifurcation in the firmware \
                 setup; dmesg shows the kernel's `limited by` message",
            ),
            _ => out.pass(&check, seen),
        }
    }
}

/// `NUMA node 0, PCIe pci0000:17 > … > 0000:1a:00.0, link x16 16.0 GT/s PCIe (max …);
/// netdev ens1np0 up; port 1: Ethernet, 100 Gb/sec (4X EDR), GIDs 2 IB/RoCE v1, 2 RoCE v2`.
fn describe(device: &RdmaDevice) -> String {
    let mut parts = Vec::new();
    match (&device.pci, &device.link) {
        (Some(pci), Some(link)) => {
            let numa =
                device.numa_node.map_or("NUMA node unknown".into(), |n| format!("NUMA node {n}"));
            parts.push(format!("{numa}, PCIe {pci}, link {link}"));
        }
        _ => parts.push("virtual device, no PCI place".into()),
    }
    let netdevs: Vec<String> = device.netdevs.iter().map(ToString::to_string).collect();
    parts.push(match netdevs.len() {
        0 => "no netdev in sysfs".into(),
        _ => format!("netdev {}", netdevs.join(", ")),
    });
    parts.extend(device.ports.iter().map(port));
    parts.join("; ")
}

/// `port 1: Ethernet, 100 Gb/sec (4X EDR), GIDs 2 IB/RoCE v1, 2 RoCE v2`.
fn port(port: &Port) -> String {
    let mut kinds: Vec<(&str, usize)> = Vec::new();
    for gid in &port.gids {
        match kinds.iter_mut().find(|(kind, _)| *kind == gid.kind) {
            Some((_, count)) => *count += 1,
            None => kinds.push((&gid.kind, 1)),
        }
    }
    let gids: Vec<String> = kinds.iter().map(|(kind, n)| format!("{n} {kind}")).collect();
    let gids = if gids.is_empty() { "no GID".into() } else { format!("GIDs {}", gids.join(", ")) };
    format!(
        "port {}: {}, {}, {gids}",
        port.num,
        port.link_layer.as_deref().unwrap_or("link layer unknown"),
        port.rate.as_deref().unwrap_or("rate unknown"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::{Layer, Report, Status};
    use rdma_verbs_test_support::fixtures::topology_root;

    fn findings(host: &str) -> Report {
        let mut report = Report::default();
        super::report(&mut report.layer(Layer::Kernel), Topology::read_from(topology_root(host)));
        report
    }

    #[test]
    fn each_device_shows_its_place_and_a_narrow_link_warns() {
        let report = findings("two-socket");
        let nic0 = report.expect("topology mlx5_0", Status::Pass);
        assert_eq!(
            nic0.detail,
            "NUMA node 0, PCIe pci0000:17 > 0000:17:00.0 > 0000:18:00.0 > 0000:19:00.0 > \
             0000:1a:00.0, link x16 16.0 GT/s PCIe (max x16 16.0 GT/s PCIe); netdev ens1np0 up; \
             port 1: Ethernet, 100 Gb/sec (4X EDR), GIDs 2 IB/RoCE v1, 2 RoCE v2"
        );
        let nic1 = report.expect("topology mlx5_1", Status::Warn);
        assert!(nic1.detail.contains("link x8 16.0 GT/s PCIe (max x16"), "{nic1}");
        assert!(nic1.remedy.as_deref().is_some_and(|r| r.contains("lanes")), "{nic1}");
    }

    #[test]
    fn bonds_and_virtual_devices_are_described() {
        let lag = findings("roce-lag");
        let detail = &lag.find("topology mlx5_bond_0").unwrap().detail;
        assert!(
            detail.contains("netdev ens1f0np0 up (active port of bond0: 802.3ad 4"),
            "{detail}"
        );
        let vm = findings("vm");
        let siw = vm.find("topology siw0").unwrap();
        assert_eq!(
            siw.detail,
            "virtual device, no PCI place; no netdev in sysfs; port 1: Ethernet, \
             2.5 Gb/sec (1X SDR), GIDs 1 IB/RoCE v1"
        );
        let mut report = Report::default();
        let missing = Topology::read_from("/nonexistent-root");
        super::report(&mut report.layer(Layer::Kernel), missing);
        assert_eq!(report.find("topology").map(|f| f.status), Some(Status::Skip));
    }
}
