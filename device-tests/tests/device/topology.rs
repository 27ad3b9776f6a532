//! `rdma_verbs::topology` of the guest's real sysfs: rxe0 and siw0 are virtual devices with
//! no PCI place; rxe0's netdev and GID types agree with what libibverbs reports.

use rdma_verbs::topology::{Distance, Topology};
use rdma_verbs::GidType;
use rdma_verbs_device_tests::{require_device, RXE, SIW};

/// The ifindex of netdev `name`, from `/sys/class/net/<name>/ifindex`.
fn ifindex(name: &str) -> u32 {
    let path = format!("/sys/class/net/{name}/ifindex");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .trim()
        .parse()
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn rxe_is_virtual_and_its_netdev_and_gid_types_match_the_verbs_gid_table() {
    let Some(ctx) = require_device(RXE) else { return };
    let topology = Topology::read().unwrap();
    let rxe = topology.device(RXE).unwrap_or_else(|| panic!("no {RXE} in {topology:?}"));
    assert!(rxe.pci.is_none() && rxe.link.is_none() && rxe.numa_node.is_none(), "{rxe:?}");

    // The netdev sysfs names (`parent`) is the one the routable GID belongs to.
    assert_eq!(rxe.netdevs.len(), 1, "{rxe:?}");
    let netdev = &rxe.netdevs[0];
    // The guest's netdevs report `unknown` (no carrier tracking); never `down` while rxe0 works.
    assert!(netdev.operstate.as_deref().is_some_and(|s| s != "down"), "{netdev}");
    assert!(netdev.bond.is_none(), "{netdev}");
    assert_eq!(ifindex(&netdev.name), ctx.routable_gid(1).unwrap().ndev_ifindex, "{netdev}");

    // The populated GID entries, their types and netdevs, as ibv_query_gid_table sees them.
    assert_eq!(rxe.ports.len(), 1);
    let port = &rxe.ports[0];
    assert_eq!(port.num, 1);
    assert_eq!(port.link_layer.as_deref(), Some("Ethernet"));
    assert!(port.rate.as_deref().is_some_and(|r| r.contains(" Gb/sec (")), "{port:?}");
    let table = ctx.gid_table(1).unwrap();
    let from_sysfs: Vec<(u32, String, Option<u32>)> = port
        .gids
        .iter()
        .map(|g| (g.index, g.kind.clone(), g.netdev.as_deref().map(ifindex)))
        .collect();
    let from_verbs: Vec<(u32, String, Option<u32>)> = table
        .iter()
        .map(|e| {
            let kind = if e.gid_type == GidType::ROCE_V2 { "RoCE v2" } else { "IB/RoCE v1" };
            (u32::from(e.index), kind.to_owned(), Some(e.ndev_ifindex))
        })
        .collect();
    assert_eq!(from_sysfs, from_verbs);

    // One NUMA node in the guest: rxe0 is local to every CPU and every PCI function.
    assert!(topology.numa_nodes().len() <= 1, "{:?}", topology.numa_nodes());
    let near = topology.nearest_to_cpus(&[0]);
    let rxe_rank = near.iter().find(|n| n.device.name == RXE).unwrap();
    assert_eq!(rxe_rank.distance, Distance::NumaNode);
    let function = std::fs::read_dir("/sys/bus/pci/devices")
        .unwrap()
        .find_map(|e| e.ok()?.file_name().into_string().ok())
        .expect("the guest has PCI devices");
    let near = topology.nearest_to_pci(&function.parse().unwrap()).unwrap();
    let rxe_rank = near.iter().find(|n| n.device.name == RXE).unwrap();
    assert_eq!((rxe_rank.distance, rxe_rank.shared), (Distance::NumaNode, 0), "{function}");
}

#[test]
fn siw_is_virtual_with_one_port() {
    if require_device(SIW).is_none() {
        return;
    }
    let topology = Topology::read().unwrap();
    let siw = topology.device(SIW).unwrap_or_else(|| panic!("no {SIW} in {topology:?}"));
    assert!(siw.pci.is_none() && siw.link.is_none(), "{siw:?}");
    assert_eq!(siw.ports.len(), 1, "{siw:?}");
    assert_eq!(siw.ports[0].link_layer.as_deref(), Some("Ethernet"), "{siw:?}");
}
