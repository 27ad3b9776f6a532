//! GIDs and the GID table: [`Gid`], [`GidEntry`], the queries of a port's table
//! ([`Context::query_gid`], [`Context::gid_table`], with the fallback for rdma-core before
//! v32), and the choice of the routable GID ([`Context::routable_gid`]).
#![allow(unsafe_code)]
//! # Safety
//!
//! The bytes of `union ibv_gid` are read as the plain 16 bytes they are; the queries pass a
//! live context of its own library and writable structs of this build's layout.

use std::fmt;
use std::net::Ipv6Addr;

use rdma_verbs_sys as sys;

use crate::c_enum::c_enum;
use crate::context::Context;
use crate::error::{check_errno, Error, Result};

/// A 128-bit Global Identifier (`union ibv_gid`): an InfiniBand port GID, or on RoCE an IPv6
/// address (IPv4 addresses appear IPv4-mapped, `::ffff:a.b.c.d`). Made and read as the other
/// identifiers are ([`Lid`](crate::Lid), [`Qpn`](crate::Qpn), …: `new`, `get`, `From`),
/// shown as an IPv6 address.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Gid([u8; 16]);

impl Gid {
    /// The all-zero GID, which marks an empty table entry.
    pub const ZERO: Gid = Gid([0; 16]);

    /// The GID of these 16 bytes, in network order.
    #[must_use]
    pub const fn new(bytes: [u8; 16]) -> Gid {
        Gid(bytes)
    }

    /// Its 16 bytes, in network order.
    #[must_use]
    pub const fn get(self) -> [u8; 16] {
        self.0
    }

    /// Whether every byte is zero.
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The low 64 bits (the interface ID), big-endian.
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().expect("8 bytes"))
    }

    /// The GID as an IPv6 address.
    #[must_use]
    pub fn to_ipv6(&self) -> Ipv6Addr {
        Ipv6Addr::from(self.0)
    }

    /// Whether this is an IPv4-mapped address (`::ffff:a.b.c.d`).
    pub fn is_ipv4_mapped(&self) -> bool {
        self.to_ipv6().to_ipv4_mapped().is_some()
    }

    /// Whether this is an IPv6 link-local address (`fe80::/10`).
    pub fn is_link_local(&self) -> bool {
        self.0[0] == 0xfe && self.0[1] & 0xc0 == 0x80
    }

    pub(crate) fn from_raw(raw: &sys::ibv_gid) -> Gid {
        // SAFETY: both union members are plain bytes; `raw` views all 16.
        Gid(unsafe { raw.raw })
    }

    pub(crate) fn to_raw(self) -> sys::ibv_gid {
        sys::ibv_gid { raw: self.0 }
    }
}

/// Shown as an IPv6 address, as `inet_ntop` (and so ibv_rc_pingpong) prints it.
impl fmt::Display for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.to_ipv6().fmt(f)
    }
}

impl fmt::Debug for Gid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Gid({self})")
    }
}

impl From<Ipv6Addr> for Gid {
    fn from(ip: Ipv6Addr) -> Self {
        Gid(ip.octets())
    }
}

impl From<Gid> for Ipv6Addr {
    fn from(gid: Gid) -> Self {
        gid.to_ipv6()
    }
}

impl From<[u8; 16]> for Gid {
    fn from(bytes: [u8; 16]) -> Self {
        Gid(bytes)
    }
}

impl From<Gid> for [u8; 16] {
    fn from(gid: Gid) -> Self {
        gid.0
    }
}

c_enum! {
    /// How a GID is used on the wire (`enum ibv_gid_type`).
    pub struct GidType(u32) {
        /// InfiniBand.
        IB = sys::IBV_GID_TYPE_IB => "IB",
        /// RoCE v1: Ethernet, not IP routable.
        ROCE_V1 = sys::IBV_GID_TYPE_ROCE_V1 => "RoCE v1",
        /// RoCE v2: UDP/IP, routable.
        ROCE_V2 = sys::IBV_GID_TYPE_ROCE_V2 => "RoCE v2",
    }
}

/// One entry of a port's GID table (`struct ibv_gid_entry`, `ibv_query_gid_ex(3)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GidEntry {
    /// The GID.
    pub gid: Gid,
    /// Its index in the port's table: the `sgid_index` of a route from it
    /// ([`GlobalRoute::sgid_index`](crate::GlobalRoute::sgid_index)).
    pub index: u8,
    /// The port, from 1.
    pub port: u8,
    /// Its type.
    pub gid_type: GidType,
    /// The `ifindex` of the netdev it belongs to (RoCE), 0 when none or unknown.
    pub ndev_ifindex: u32,
}

impl fmt::Display for GidEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} {})", self.index, self.gid_type, self.gid)
    }
}

/// The GID to use by default on a RoCE port, of its `table`: the RoCE v2 GID with an
/// IPv4-mapped address, else a RoCE v2 GID with a global IPv6 address, else a link-local one
/// (RoCE v2 before v1). `None` when the table has no RoCE GID.
pub(crate) fn routable_roce_gid(table: &[GidEntry]) -> Option<&GidEntry> {
    let roce = |e: &&GidEntry| e.gid_type == GidType::ROCE_V2 || e.gid_type == GidType::ROCE_V1;
    let rank = |e: &GidEntry| {
        let v2 = e.gid_type == GidType::ROCE_V2;
        match (v2, e.gid.is_ipv4_mapped(), e.gid.is_link_local()) {
            (true, true, _) => 0,
            (true, false, false) => 1,
            (true, false, true) => 2,
            (false, _, true) => 4,
            (false, _, false) => 3,
        }
    };
    table.iter().filter(|e| !e.gid.is_zero()).filter(roce).min_by_key(|e| (rank(e), e.index))
}

impl Context {
    /// `ibv_query_gid_ex(3)`—Entry `index` of `port`'s GID table, `None` when it is empty.
    ///
    /// With an rdma-core older than v32 (no `ibv_query_gid_ex`), the GID comes from
    /// `ibv_query_gid(3)` and its type from sysfs.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from the query (e.g. `EINVAL` for an index past the table).
    #[doc(alias = "ibv_query_gid_ex")]
    pub fn query_gid(&self, port: u8, index: u8) -> Result<Option<GidEntry>> {
        let mut raw = sys::ibv_gid_entry::default();
        // SAFETY: a live context of `lib` and a writable entry of this build's size.
        let ret = unsafe {
            sys::inline::ibv_query_gid_ex(
                &self.library().fns,
                self.as_raw(),
                port.into(),
                index.into(),
                &mut raw,
                0,
            )
        };
        let entry = match ret {
            0 => GidEntry {
                gid: Gid::from_raw(&raw.gid),
                index,
                port,
                gid_type: GidType(raw.gid_type),
                ndev_ifindex: raw.ndev_ifindex,
            },
            libc::ENODATA => return Ok(None),
            libc::EOPNOTSUPP => return self.query_gid_compat(port, index),
            e => return Err(Error::verb("ibv_query_gid_ex", e)),
        };
        Ok((!entry.gid.is_zero()).then_some(entry))
    }

    fn query_gid_compat(&self, port: u8, index: u8) -> Result<Option<GidEntry>> {
        let mut gid = sys::ibv_gid::default();
        let c_index = i32::from(index);
        // SAFETY: a live context and a writable GID.
        let ret =
            unsafe { (self.library().fns.ibv_query_gid)(self.as_raw(), port, c_index, &mut gid) };
        check_errno(ret, "ibv_query_gid")?;
        let gid = Gid::from_raw(&gid);
        let path =
            format!("/sys/class/infiniband/{}/ports/{port}/gid_attrs/types/{index}", self.name());
        let gid_type = match std::fs::read_to_string(path).as_deref().map(str::trim) {
            Ok("RoCE v2") => GidType::ROCE_V2,
            Ok("IB/RoCE v1") if self.query_port(port)?.is_ethernet() => GidType::ROCE_V1,
            _ => GidType::IB,
        };
        Ok((!gid.is_zero()).then_some(GidEntry { gid, index, port, gid_type, ndev_ifindex: 0 }))
    }

    /// The non-empty entries of `port`'s GID table (the first 256: a route's `sgid_index` is
    /// a `u8`, so entries past 255 cannot be used).
    ///
    /// # Errors
    ///
    /// As [`Context::query_port`] and [`Context::query_gid`].
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        let len = self.query_port(port)?.gid_tbl_len();
        let mut table = Vec::new();
        for index in (0..=u8::MAX).take(len as usize) {
            table.extend(self.query_gid(port, index)?);
        }
        Ok(table)
    }

    /// The non-empty GID entry `index` of `port`.
    ///
    /// # Errors
    ///
    /// [`Error::GidIndexInvalid`], naming the valid indexes, when `index` is past the table
    /// or its entry is empty; otherwise as [`Context::gid_table`].
    pub fn gid(&self, port: u8, index: u8) -> Result<GidEntry> {
        let table = self.gid_table(port)?;
        table.iter().find(|e| e.index == index).copied().ok_or_else(|| Error::GidIndexInvalid {
            device: self.name().to_owned(),
            port,
            index,
            valid: if table.is_empty() {
                "none (the table is empty)".into()
            } else {
                table.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            },
        })
    }

    /// The GID to use by default on `port`: on Ethernet (RoCE) the routable one (RoCE v2 with
    /// an IPv4-mapped address, else RoCE v2 global IPv6, else link-local); on InfiniBand
    /// index 0.
    ///
    /// The one way to ask for it: the choice depends on the port's link layer as much as on
    /// its GID table (the RoCE rule over an InfiniBand port's table would find nothing), so
    /// it is made where both are read. To choose otherwise, filter
    /// [`Context::gid_table`] yourself.
    ///
    /// # Errors
    ///
    /// [`Error::NoRoutableGid`] on an Ethernet port without a RoCE GID; otherwise as
    /// [`Context::gid_table`].
    pub fn routable_gid(&self, port: u8) -> Result<GidEntry> {
        let table = self.gid_table(port)?;
        let pick = if self.query_port(port)?.is_ethernet() {
            routable_roce_gid(&table)
        } else {
            table.iter().find(|e| e.index == 0)
        };
        pick.copied().ok_or_else(|| Error::NoRoutableGid { device: self.name().to_owned(), port })
    }

    /// The GID to send from on `port`: entry `index` when one is given (a user's `-g`);
    /// otherwise on Ethernet (RoCE, where every packet carries a GRH) the
    /// [routable](Context::routable_gid) one, and on InfiniBand `None` (LID routing, no GRH).
    /// Its index is the `sgid_index` of the routes from it.
    ///
    /// # Errors
    ///
    /// As [`Context::gid`] when `index` is given; otherwise as [`Context::query_port`] and
    /// [`Context::routable_gid`].
    pub fn source_gid(&self, port: u8, index: Option<u8>) -> Result<Option<GidEntry>> {
        Ok(match index {
            Some(index) => Some(self.gid(port, index)?),
            None if self.query_port(port)?.is_ethernet() => Some(self.routable_gid(port)?),
            None => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u8, ip: &str, gid_type: GidType) -> GidEntry {
        let gid = Gid::from(ip.parse::<Ipv6Addr>().unwrap());
        GidEntry { gid, index, port: 1, gid_type, ndev_ifindex: 2 }
    }

    #[test]
    fn display_matches_inet_ntop() {
        let g = entry(1, "::ffff:192.0.2.1", GidType::ROCE_V2).gid;
        assert_eq!(g.to_string(), "::ffff:192.0.2.1");
        assert!(g.is_ipv4_mapped());
        assert_eq!(Gid::ZERO.to_string(), "::");
    }

    #[test]
    fn routable_prefers_ipv4_mapped_v2_then_global_then_link_local() {
        let ll = entry(0, "fe80::1", GidType::ROCE_V2);
        let v6 = entry(2, "2001:db8::1", GidType::ROCE_V2);
        let v4 = entry(3, "::ffff:10.0.0.1", GidType::ROCE_V2);
        let v4_v1 = entry(1, "::ffff:10.0.0.1", GidType::ROCE_V1);
        assert_eq!(routable_roce_gid(&[ll, v4_v1, v6, v4]).unwrap().index, 3);
        assert_eq!(routable_roce_gid(&[ll, v4_v1, v6]).unwrap().index, 2);
        assert_eq!(routable_roce_gid(&[ll, v4_v1]).unwrap().index, 0);
        assert_eq!(routable_roce_gid(&[v4_v1]).unwrap().index, 1);
        assert_eq!(routable_roce_gid(&[entry(0, "fe80::1", GidType::IB)]), None);
    }

    #[test]
    fn interface_id_is_the_low_64_bits() {
        assert_eq!(entry(0, "fe80::1:2", GidType::IB).gid.interface_id(), 0x1_0002);
        assert_eq!(Gid::ZERO.interface_id(), 0);
    }
}
