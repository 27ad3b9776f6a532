//! Our side of every session's RC connection: port, LID, source GID and path MTU (the port's
//! active one), what the peer needs to connect to a QP, and a QP's way to RTS.

use rdma_verbs::*;

use crate::Error;

/// Our side of every RC connection: port, LID, source GID and path MTU.
#[derive(Clone, Copy, Debug)]
pub struct Link {
    pub port: u8,
    lid: Lid,
    /// The source GID and its index, when routes carry a GRH (RoCE, or `-g`).
    gid: Option<(Gid, u8)>,
    mtu: Mtu,
}

impl Link {
    /// Port `port_num` of `ctx` at its active MTU, sending from GID `gid_index` (default: the
    /// routable GID on RoCE, none on InfiniBand).
    pub fn new(ctx: &Context, port_num: u8, gid_index: Option<u8>) -> Result<Link, Error> {
        let lid = ctx.source_lid(port_num)?;
        let mtu = ctx.query_port(port_num)?.active_mtu();
        let gid = ctx.source_gid(port_num, gid_index)?.map(|e| (e.gid, e.index));
        Ok(Link { port: port_num, lid, gid, mtu })
    }

    /// What the peer needs to connect to `qp`, whose first send PSN is `psn`.
    pub fn endpoint<S: QpState>(&self, qp: &QueuePair<'_, S>, psn: Psn) -> Endpoint {
        let gid = self.gid.map_or(Gid::ZERO, |(gid, _)| gid);
        Endpoint { lid: self.lid, qpn: qp.qp_num(), psn, gid }
    }

    /// INIT → RTR → RTS towards `remote`, with `rd_atomic` RDMA READs in flight each way.
    pub fn connect<'r>(
        &self,
        qp: QueuePair<'r, Init>,
        remote: &Endpoint,
        psn: Psn,
        rd_atomic: u8,
    ) -> Result<QueuePair<'r, Rts>, Error> {
        let sgid = self.gid.map(|(_, index)| index);
        let rtr = ToRtrAttr {
            max_dest_rd_atomic: rd_atomic,
            ..ToRtrAttr::to_endpoint(remote, self.port, sgid, self.mtu)
        };
        let qp = qp.into_rtr(&rtr)?;
        let rts = ToRtsAttr { max_rd_atomic: rd_atomic, ..ToRtsAttr::new(psn) };
        Ok(qp.into_rts(&rts)?)
    }
}
