//! `rdma_verbs::topology` over recorded sysfs trees, which `tests/fixtures/topology/build.sh`
//! builds in a scratch directory: parsing, and the ranking of the nearest device.

use rdma_verbs::topology::{Distance, GpuVendor, Nearest, PciAddress, Topology, TopologyError};
use rdma_verbs_test_support::fixtures::topology_root;

fn fixture(host: &str) -> Topology {
    Topology::read_from(topology_root(host)).unwrap_or_else(|e| panic!("{host}: {e}"))
}

fn bdf(text: &str) -> PciAddress {
    text.parse().unwrap()
}

/// `(device, distance, shared)` of a ranking, nearest first.
fn ranking(ranked: &[Nearest<'_>]) -> Vec<(String, Distance, usize)> {
    ranked.iter().map(|n| (n.device.name.clone(), n.distance, n.shared)).collect()
}

fn entry(name: &str, distance: Distance, shared: usize) -> (String, Distance, usize) {
    (name.to_owned(), distance, shared)
}

#[test]
fn two_socket_host_devices_have_their_pci_place_numa_node_and_ports() {
    let t = fixture("two-socket");
    let names: Vec<&str> = t.devices().iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["mlx5_0", "mlx5_1"]);
    assert_eq!(t.numa_nodes().len(), 2);
    assert_eq!(t.numa_nodes()[1].cpus.len(), 32);

    let nic0 = t.device("mlx5_0").unwrap();
    assert_eq!(nic0.numa_node, Some(0));
    let pci = nic0.pci.as_ref().unwrap();
    assert_eq!(
        pci.to_string(),
        "pci0000:17 > 0000:17:00.0 > 0000:18:00.0 > 0000:19:00.0 > 0000:1a:00.0"
    );
    assert_eq!(pci.function, bdf("0000:1a:00.0"));
    let link = nic0.link.as_ref().unwrap();
    assert_eq!((link.width, link.speed.as_deref()), (Some(16), Some("16.0 GT/s PCIe")));
    assert!(!link.is_degraded());
    assert_eq!(nic0.local_cpus.len(), 32);
    assert_eq!(nic0.netdevs.len(), 1);
    assert_eq!(nic0.netdevs[0].to_string(), "ens1np0 up");
    let port = &nic0.ports[0];
    assert_eq!((port.num, port.link_layer.as_deref()), (1, Some("Ethernet")));
    assert_eq!(port.rate.as_deref(), Some("100 Gb/sec (4X EDR)"));
    let gids: Vec<(u32, &str, Option<&str>)> =
        port.gids.iter().map(|g| (g.index, g.kind.as_str(), g.netdev.as_deref())).collect();
    assert_eq!(gids[1], (1, "RoCE v2", Some("ens1np0")));
    assert_eq!(gids.len(), 4);

    let nic1 = t.device("mlx5_1").unwrap();
    assert_eq!(nic1.numa_node, Some(1));
    assert_eq!(nic1.pci.as_ref().unwrap().bridges, [bdf("0000:ae:00.0")]);
    let link = nic1.link.as_ref().unwrap();
    assert!(link.is_degraded(), "x8 of x16: {link}");
    assert_eq!(link.to_string(), "x8 16.0 GT/s PCIe (max x16 16.0 GT/s PCIe)");
    assert_eq!(nic1.ports[0].link_layer.as_deref(), Some("InfiniBand"));
    assert_eq!(nic1.ports[0].gids[0].netdev, None);
}

#[test]
fn a_gpu_behind_a_nics_pcie_switch_ranks_that_nic_first() {
    let t = fixture("two-socket");
    // GPU 0: the switch's other downstream port. `nvidia-smi` spells its address this way.
    let gpu0 = t.nearest_to_pci(&bdf("00000000:1B:00.0")).unwrap();
    assert_eq!(
        ranking(&gpu0),
        [entry("mlx5_0", Distance::PciSwitch, 2), entry("mlx5_1", Distance::System, 0)]
    );
    // An NVMe drive on another root port of mlx5_0's host bridge.
    let nvme = t.nearest_to_pci(&bdf("0000:20:00.0")).unwrap();
    assert_eq!(
        ranking(&nvme),
        [entry("mlx5_0", Distance::HostBridge, 0), entry("mlx5_1", Distance::System, 0)]
    );
    // GPU 1: on NUMA node 1 under a host bridge of its own.
    let gpu1 = t.nearest_to_pci(&bdf("0000:d8:00.0")).unwrap();
    assert_eq!(
        ranking(&gpu1),
        [entry("mlx5_1", Distance::NumaNode, 0), entry("mlx5_0", Distance::System, 0)]
    );
    // A NIC's own function: every bridge and the function itself in common.
    let own = t.nearest_to_pci(&bdf("0000:af:00.0")).unwrap();
    assert_eq!(ranking(&own)[0], entry("mlx5_1", Distance::PciSwitch, 2));
}

/// GPUs are NVIDIA and AMD functions of display class: not the NVMe drive, nor the BMC's
/// VGA function (ASPEED); each ranks the devices as any PCI function does.
#[test]
fn gpus_are_nvidia_and_amd_display_functions_and_rank_the_devices() {
    let t = fixture("two-socket");
    let gpus: Vec<(String, GpuVendor, Option<u32>)> =
        t.gpus().iter().map(|g| (g.address.to_string(), g.vendor, g.numa_node)).collect();
    assert_eq!(
        gpus,
        [
            ("0000:1b:00.0".to_owned(), GpuVendor::Nvidia, Some(0)),
            ("0000:d8:00.0".to_owned(), GpuVendor::Nvidia, Some(1)),
        ]
    );
    let nearest = t.nearest_to_pci(&t.gpus()[1].address).unwrap();
    assert_eq!(nearest[0].device.name, "mlx5_1");
    let amd = fixture("roce-lag");
    assert_eq!(amd.gpus().len(), 1);
    assert_eq!(
        (amd.gpus()[0].vendor.to_string(), amd.gpus()[0].address),
        ("AMD".into(), bdf("c1:00.0"))
    );
    assert!(fixture("vm").gpus().is_empty());
}

#[test]
fn numa_nodes_and_cpu_sets_rank_the_local_nic_first() {
    let t = fixture("two-socket");
    let node1 = t.nearest_to_numa_node(1);
    assert_eq!(
        ranking(&node1),
        [entry("mlx5_1", Distance::NumaNode, 0), entry("mlx5_0", Distance::System, 0)]
    );
    // Mostly on socket 1: CPUs 16 and 17 (node 1), 0 (node 0).
    let cpus = t.nearest_to_cpus(&[0, 16, 17]);
    assert_eq!(
        ranking(&cpus),
        [entry("mlx5_1", Distance::NumaNode, 2), entry("mlx5_0", Distance::NumaNode, 1)]
    );
    let far = t.nearest_to_cpus(&[40]);
    assert_eq!(ranking(&far)[1], entry("mlx5_1", Distance::System, 0));
    assert_eq!(ranking(&far)[0].0, "mlx5_0");
}

#[test]
fn an_unknown_or_malformed_pci_address_is_refused_with_where_to_find_one() {
    let t = fixture("two-socket");
    let e = t.nearest_to_pci(&bdf("0000:99:00.0")).unwrap_err();
    assert!(matches!(e, TopologyError::PciDeviceNotFound { .. }), "{e}");
    assert!(
        e.to_string().contains("no PCI device 0000:99:00.0 in ")
            && e.to_string().contains("lspci -D"),
        "{e}"
    );
    let e = "GPU0".parse::<PciAddress>().unwrap_err();
    assert!(e.to_string().contains("`GPU0` is not a PCI address"), "{e}");
}

#[test]
fn a_roce_lag_device_shows_its_bond_and_both_ports() {
    let t = fixture("roce-lag");
    assert_eq!(t.devices().len(), 1, "one RDMA device for both ports");
    let lag = t.device("mlx5_bond_0").unwrap();
    assert_eq!(lag.pci.as_ref().unwrap().function, bdf("0000:3b:00.0"));
    assert_eq!(lag.netdevs.len(), 1);
    let netdev = &lag.netdevs[0];
    let bond = netdev.bond.as_ref().expect("a port of bond0");
    assert_eq!((bond.name.as_str(), bond.mode.as_deref()), ("bond0", Some("802.3ad 4")));
    assert_eq!(bond.ports, ["ens1f0np0", "ens1f1np1"]);
    assert_eq!(bond.port_state.as_deref(), Some("active"));
    assert_eq!(
        netdev.to_string(),
        "ens1f0np0 up (active port of bond0: 802.3ad 4, ports ens1f0np0 ens1f1np1)"
    );
    assert!(lag.ports[0].gids.iter().all(|g| g.netdev.as_deref() == Some("bond0")));
    // One NUMA node: every device is local to it, and to the second function's devices.
    assert_eq!(ranking(&t.nearest_to_numa_node(0))[0], entry("mlx5_bond_0", Distance::NumaNode, 0));
    let sibling = t.nearest_to_pci(&bdf("0000:3b:00.1")).unwrap();
    assert_eq!(ranking(&sibling), [entry("mlx5_bond_0", Distance::HostBridge, 1)]);
}

#[test]
fn a_vms_soft_devices_have_no_pci_place() {
    let t = fixture("vm");
    let rxe = t.device("rxe0").unwrap();
    assert_eq!((&rxe.pci, &rxe.link, rxe.numa_node), (&None, &None, None));
    let netdevs: Vec<String> = rxe.netdevs.iter().map(ToString::to_string).collect();
    assert_eq!(netdevs, ["rdma0 state unknown"]);
    assert_eq!(rxe.ports[0].gids.len(), 2);
    let siw = t.device("siw0").unwrap();
    assert!(siw.pci.is_none() && siw.netdevs.is_empty(), "{siw:?}");
    assert_eq!(siw.ports[0].gids[0].kind, "IB/RoCE v1");
    // One NUMA node: the soft devices are local to any CPU; by name within the class.
    let cpus = t.nearest_to_cpus(&[1]);
    assert_eq!(
        ranking(&cpus),
        [entry("rxe0", Distance::NumaNode, 1), entry("siw0", Distance::NumaNode, 1)]
    );
}
