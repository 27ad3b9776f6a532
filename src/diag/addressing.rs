//! Addressing layer: each port's GID table, its routable GID, and the IP addresses of the
//! netdev behind it.

use super::link::Port;
use super::netdev::{self, Netdev};
use super::sysfs::SysDevice;
use super::{named, Gate, Out, Targets};
use crate::device::TransportType;
use crate::gid::{routable_roce_gid, GidEntry, GidType};

/// A port and the GID to address it with (`None` on iWARP, addressed by IP through rdma_cm).
#[derive(Clone, Copy)]
pub(super) struct Route<'a> {
    /// The port.
    pub port: Port<'a>,
    /// Its routable GID.
    pub gid: Option<GidEntry>,
}

/// Runs the layer's checks; returns each port with its GID, or why it has none.
pub(super) fn check<'a>(
    out: &mut Out<'_>,
    devices: &[SysDevice],
    ports: &Targets<Port<'a>>,
) -> Targets<Route<'a>> {
    let netdevs = netdev::all();
    ports
        .iter()
        .map(|(label, gate)| {
            let port = match gate {
                Ok(port) => *port,
                Err(reason) => {
                    for check in ["GID table", "routable GID", "IP"] {
                        out.skip(&named(check, label), reason.clone());
                    }
                    return (label.clone(), Err(reason.clone()));
                }
            };
            let table = match port.ctx.gid_table(port.num) {
                Ok(table) => table,
                Err(e) => {
                    out.fail(&named("GID table", label), e.to_string(), "check dmesg");
                    let reason =
                        format!("the GID table of {label} cannot be read (see Addressing)");
                    for check in ["routable GID", "IP"] {
                        out.skip(&named(check, label), reason.clone());
                    }
                    return (label.clone(), Err(reason));
                }
            };
            let sys = devices.iter().find(|d| d.name == port.device);
            let carriers = carriers(&table, sys, &netdevs);
            gid_table(out, label, &port, &table, &netdevs, &carriers);
            let gid = routable(out, label, &port, &table, &carriers);
            ip(out, label, &port, &carriers);
            (label.clone(), gid.map(|gid| Route { port, gid }))
        })
        .collect()
}

/// The netdevs behind a port: those its GIDs name (RoCE), those sysfs ties to the device
/// (rxe's `parent`, a NIC's `device/net`), else the one whose MAC the GID holds (iWARP takes
/// its GID from the MAC).
fn carriers<'n>(
    table: &[GidEntry],
    sys: Option<&SysDevice>,
    netdevs: &'n [Netdev],
) -> Vec<&'n Netdev> {
    let by_gid = table
        .iter()
        .filter(|e| e.ndev_ifindex != 0)
        .flat_map(|e| netdevs.iter().filter(move |n| n.ifindex == e.ndev_ifindex));
    let by_sysfs = sys
        .iter()
        .flat_map(|s| &s.netdevs)
        .flat_map(|name| netdevs.iter().filter(move |n| &n.name == name));
    let mut found = distinct(by_gid.chain(by_sysfs));
    if found.is_empty() {
        found = distinct(table.iter().filter(|e| e.gid.get()[6..] == [0; 10]).flat_map(|e| {
            netdevs.iter().filter(move |n| n.mac.is_some_and(|m| e.gid.get()[..6] == m))
        }));
    }
    found
}

/// `netdevs` without repeats, in order.
fn distinct<'n>(netdevs: impl Iterator<Item = &'n Netdev>) -> Vec<&'n Netdev> {
    let mut found: Vec<&Netdev> = Vec::new();
    for n in netdevs {
        if !found.iter().any(|f| f.name == n.name) {
            found.push(n);
        }
    }
    found
}

fn gid_table(
    out: &mut Out<'_>,
    label: &str,
    port: &Port<'_>,
    table: &[GidEntry],
    netdevs: &[Netdev],
    carriers: &[&Netdev],
) {
    let check = named("GID table", label);
    if table.is_empty() {
        let remedy = if port.attr.is_ethernet() {
            format!(
                "RoCE and iWARP take GIDs from the netdev: bring {} up",
                carrier_names(carriers)
            )
        } else {
            "an InfiniBand port gets its GID from the subnet manager: check opensm".to_owned()
        };
        out.fail(&check, "the table is empty", remedy);
        return;
    }
    let entries: Vec<String> = table
        .iter()
        .map(|e| {
            let ndev = netdevs.iter().find(|n| n.ifindex == e.ndev_ifindex && e.ndev_ifindex != 0);
            match ndev {
                Some(n) => format!("{} {}", e, n.name),
                None => e.to_string(),
            }
        })
        .collect();
    out.pass(&check, entries.join("; "));
}

/// The GID a connection from this port would use; `Err` (SKIP reason) when there is none.
fn routable(
    out: &mut Out<'_>,
    label: &str,
    port: &Port<'_>,
    table: &[GidEntry],
    carriers: &[&Netdev],
) -> Gate<Option<GidEntry>> {
    let check = named("routable GID", label);
    if port.transport == TransportType::IWARP {
        out.skip(&check, "iWARP addresses peers by IP through rdma_cm, not by GID");
        return Ok(None);
    }
    let none = format!("{label} has no GID to connect with (see Addressing: {check})");
    if !port.attr.is_ethernet() {
        let Some(first) = table.iter().find(|e| e.index == 0) else {
            out.fail(&check, "InfiniBand, but GID index 0 is empty", "check the subnet manager");
            return Err(none);
        };
        out.pass(
            &check,
            format!("InfiniBand: index 0 ({}); peers in the subnet go by LID", first.gid),
        );
        return Ok(Some(*first));
    }
    let netdev = carrier_names(carriers);
    let add_ip = format!(
        "give {netdev} an IPv4 address (ip addr add <address>/<prefix> dev {netdev}): RoCE v2 \
         then adds an IPv4-mapped GID"
    );
    let Some(gid) = routable_roce_gid(table).copied() else {
        out.fail(&check, "no RoCE GID in the table", add_ip);
        return Err(none);
    };
    let seen = format!("index {} ({}, {})", gid.index, gid.gid, gid.gid_type);
    if gid.gid_type != GidType::ROCE_V2 {
        out.warn(&check, format!("only {seen}: RoCE v1 is not IP-routable"), add_ip);
    } else if gid.gid.is_link_local() {
        out.warn(
            &check,
            format!("only {seen}: link-local, so peers must share the L2 segment"),
            add_ip,
        );
    } else {
        out.pass(&check, format!("{seen}: give -g {} to tools such as ibv_rc_pingpong", gid.index));
    }
    Ok(Some(gid))
}

/// Which netdev carries the port, and whether it has an IP.
fn ip(out: &mut Out<'_>, label: &str, port: &Port<'_>, carriers: &[&Netdev]) {
    let check = named("IP", label);
    if carriers.is_empty() {
        if port.attr.is_ethernet() {
            out.warn(
                &check,
                "cannot tell which netdev carries this port",
                "rdma link show lists each port's netdev",
            );
        } else {
            out.skip(&check, "InfiniBand port without an IPoIB netdev: only rdma_cm needs an IP");
        }
        return;
    }
    let seen: Vec<String> = carriers.iter().map(|n| n.describe()).collect();
    let seen = seen.join("; ");
    if carriers.iter().any(|n| n.has_routable_ip()) {
        out.pass(&check, seen);
    } else {
        let netdev = carrier_names(carriers);
        out.warn(
            &check,
            format!("{seen}: no IPv4 or global IPv6 address, so rdma_cm and routed RoCE v2 cannot reach it"),
            format!("ip addr add <address>/<prefix> dev {netdev}"),
        );
    }
}

fn carrier_names(carriers: &[&Netdev]) -> String {
    match carriers {
        [] => "its netdev".into(),
        _ => carriers.iter().map(|n| n.name.as_str()).collect::<Vec<_>>().join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gid::Gid;

    fn netdev(name: &str, ifindex: u32, mac: [u8; 6]) -> Netdev {
        Netdev { name: name.into(), ifindex, mac: Some(mac), addrs: Vec::new() }
    }

    fn entry(index: u8, gid: Gid, ndev_ifindex: u32) -> GidEntry {
        GidEntry { gid, index, port: 1, gid_type: GidType::ROCE_V2, ndev_ifindex }
    }

    #[test]
    fn carriers_come_from_gids_then_sysfs_then_the_mac() {
        let mac = [0xbe, 0x8a, 0x6c, 0x23, 0xf8, 0x1e];
        let netdevs = [netdev("rdma0", 2, [2; 6]), netdev("rdma1", 3, mac)];
        let roce =
            [entry(1, Gid::from("::ffff:192.0.2.1".parse::<std::net::Ipv6Addr>().unwrap()), 2)];
        let names = |c: Vec<&Netdev>| c.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(carriers(&roce, None, &netdevs)), ["rdma0"]);

        let sys = SysDevice {
            name: "rxe0".into(),
            driver: None,
            bus_id: None,
            node_desc: "rxe".into(),
            netdevs: vec!["rdma0".into()],
            uverbs: None,
        };
        assert_eq!(names(carriers(&roce, Some(&sys), &netdevs)), ["rdma0"], "no repeats");

        let mut raw = [0; 16];
        raw[..6].copy_from_slice(&mac);
        let iwarp = [entry(0, Gid::new(raw), 0)];
        assert_eq!(names(carriers(&iwarp, None, &netdevs)), ["rdma1"]);
        assert!(carriers(&[], None, &netdevs).is_empty());
    }
}
