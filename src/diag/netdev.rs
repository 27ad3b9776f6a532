//! Network interfaces — names, indexes and MACs from sysfs, IP addresses from `getifaddrs` —
//! to tell which netdev carries an RDMA port and whether it has an IP.
#![allow(unsafe_code)]
//! # Safety
//!
//! The list `getifaddrs` returns is only read while held, and freed once, after the last read.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::sysfs;

/// A network interface.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Netdev {
    /// Its name (`eth0`).
    pub name: String,
    /// Its index (what `ibv_gid_entry.ndev_ifindex` holds).
    pub ifindex: u32,
    /// Its MAC address (iWARP devices take their GID from it).
    pub mac: Option<[u8; 6]>,
    /// Its addresses with their prefix lengths.
    pub addrs: Vec<(IpAddr, u8)>,
}

impl Netdev {
    /// Whether it has an address other peers can route to: IPv4, or a global IPv6 address.
    pub fn has_routable_ip(&self) -> bool {
        self.addrs.iter().any(|(ip, _)| match ip {
            IpAddr::V4(v4) => !v4.is_loopback(),
            IpAddr::V6(v6) => !v6.is_loopback() && (v6.segments()[0] & 0xffc0) != 0xfe80,
        })
    }

    /// `rdma0: 192.0.2.1/24, fe80::1/64`, or `rdma0: no IP address`.
    pub fn describe(&self) -> String {
        if self.addrs.is_empty() {
            return format!("{}: no IP address", self.name);
        }
        let addrs: Vec<String> = self.addrs.iter().map(|(ip, len)| format!("{ip}/{len}")).collect();
        format!("{}: {}", self.name, addrs.join(", "))
    }
}

/// Every interface of `/sys/class/net`, with its addresses.
pub(super) fn all() -> Vec<Netdev> {
    let mut netdevs: Vec<Netdev> = sysfs::names("/sys/class/net")
        .into_iter()
        .filter_map(|name| {
            let dir = format!("/sys/class/net/{name}");
            let ifindex = sysfs::read(format!("{dir}/ifindex"))?.parse().ok()?;
            let mac = sysfs::read(format!("{dir}/address")).and_then(|m| parse_mac(&m));
            Some(Netdev { name, ifindex, mac, addrs: Vec::new() })
        })
        .collect();
    for (name, ip, len) in addresses() {
        if let Some(netdev) = netdevs.iter_mut().find(|n| n.name == name) {
            netdev.addrs.push((ip, len));
        }
    }
    netdevs
}

/// `aa:bb:cc:dd:ee:ff`; `None` for other lengths (InfiniBand's 20-byte hardware addresses).
fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let bytes: Vec<u8> =
        text.split(':').map(|b| u8::from_str_radix(b, 16).ok()).collect::<Option<_>>()?;
    bytes.try_into().ok()
}

/// `(interface, address, prefix length)` for every IP address, from `getifaddrs(3)`.
fn addresses() -> Vec<(String, IpAddr, u8)> {
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes the head of a list this function owns until freeifaddrs.
    if unsafe { libc::getifaddrs(&mut list) } != 0 {
        return Vec::new();
    }
    let mut found = Vec::new();
    let mut node = list;
    while !node.is_null() {
        // SAFETY: a node of the list, alive until freeifaddrs below.
        let ifa = unsafe { &*node };
        if let (Some(ip), false) = (ip_of(ifa.ifa_addr), ifa.ifa_name.is_null()) {
            // SAFETY: a non-NULL interface name is a NUL-terminated string of the list.
            let name = unsafe { CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned();
            let len = ip_of(ifa.ifa_netmask).map_or(0, |mask| match mask {
                IpAddr::V4(m) => u32::from(m).count_ones(),
                IpAddr::V6(m) => u128::from(m).count_ones(),
            });
            found.push((name, ip, len as u8));
        }
        node = ifa.ifa_next;
    }
    // SAFETY: the list from getifaddrs, freed once; nothing read from it is borrowed.
    unsafe { libc::freeifaddrs(list) };
    found
}

/// The IP address in a `sockaddr` of the `getifaddrs` list, when it holds one.
fn ip_of(addr: *const libc::sockaddr) -> Option<IpAddr> {
    if addr.is_null() {
        return None;
    }
    // SAFETY: a non-NULL sockaddr of the live list; every sockaddr starts with its family.
    let family = i32::from(unsafe { (*addr).sa_family });
    match family {
        libc::AF_INET => {
            // SAFETY: the family says it is a sockaddr_in; read unaligned to assume nothing.
            let sin = unsafe { addr.cast::<libc::sockaddr_in>().read_unaligned() };
            Some(IpAddr::V4(Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says it is a sockaddr_in6; read unaligned to assume nothing.
            let sin6 = unsafe { addr.cast::<libc::sockaddr_in6>().read_unaligned() };
            Some(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_parse_and_infiniband_addresses_do_not() {
        assert_eq!(parse_mac("be:8a:6c:23:f8:1e"), Some([0xbe, 0x8a, 0x6c, 0x23, 0xf8, 0x1e]));
        let ib = "00:00:01:07:fe:80:00:00:00:00:00:00:b8:59:9f:03:00:0a:1b:2c";
        assert_eq!(parse_mac(ib), None);
        assert_eq!(parse_mac("zz:00:00:00:00:00"), None);
    }

    #[test]
    fn loopback_has_its_address() {
        let lo = all().into_iter().find(|n| n.name == "lo").expect("every Linux box has lo");
        assert!(lo.addrs.iter().any(|(ip, _)| ip.is_loopback()), "{lo:?}");
        assert!(!lo.has_routable_ip());
    }

    #[test]
    fn routable_means_ipv4_or_global_ipv6() {
        let mut n = Netdev { name: "x".into(), ifindex: 9, mac: None, addrs: Vec::new() };
        assert_eq!(n.describe(), "x: no IP address");
        n.addrs.push(("fe80::1".parse().unwrap(), 64));
        assert!(!n.has_routable_ip());
        n.addrs.push(("192.0.2.1".parse().unwrap(), 24));
        assert!(n.has_routable_ip());
        assert_eq!(n.describe(), "x: fe80::1/64, 192.0.2.1/24");
    }
}
