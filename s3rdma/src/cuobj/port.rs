//! The port both sides of the DC path use: port 1, its GID, LID and path MTU.

use rdma_verbs::{Context, GidEntry, Lid, Mtu};

/// Port 1 of `ctx`, sending from GID `gid_index` (default: the port's routable RoCE v2 GID).
pub struct Port {
    /// The port number.
    pub number: u8,
    /// The GID sent from.
    pub gid: GidEntry,
    /// The port's LID (0 on RoCE).
    pub lid: Lid,
    /// Its active MTU; 1024 when it reports less than 512 (unknown), as versitygw takes it.
    pub mtu: Mtu,
}

impl Port {
    /// Queries port 1 of `ctx`.
    pub fn query(ctx: &Context, gid_index: Option<u8>) -> rdma_verbs::Result<Port> {
        let number = 1;
        let attr = ctx.query_port(number)?;
        let gid = match gid_index {
            Some(index) => ctx.gid(number, index)?,
            None => ctx.routable_gid(number)?,
        };
        let mtu = Some(attr.active_mtu())
            .filter(|m| m.bytes().is_some_and(|b| b >= 512))
            .unwrap_or(Mtu::MTU_1024);
        Ok(Port { number, gid, lid: attr.lid(), mtu })
    }
}
