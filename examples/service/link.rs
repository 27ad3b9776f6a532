//! Our side of every RC connection the service makes by hand (the TCP exchange): port, LID,
//! source GID and path MTU, what the peer needs to connect to a QP, and a QP's way to RTS.

use rdma_verbs::*;

use crate::Error;

/// Our side of every RC connection: port, LID, source GID and path MTU.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Link {
    pub(crate) port: u8,
    lid: Lid,
    /// The source GID and its index, when routes carry a GRH (RoCE, or `-g`).
    gid: Option<(Gid, u8)>,
    mtu: Mtu,
}

impl Link {
    /// Port `port_num` of `ctx`, sending from GID `gid_index` (default: the routable GID on
    /// RoCE, none on InfiniBand), with path MTU `mtu` bytes (default: the port's active MTU).
    pub(crate) fn new(
        ctx: &Context,
        port_num: u8,
        gid_index: Option<u8>,
        mtu: Option<u32>,
    ) -> Result<Link, Error> {
        let lid = ctx.source_lid(port_num)?;
        let mtu = match mtu {
            Some(bytes) => Mtu::from_bytes(bytes)
                .ok_or_else(|| format!("invalid MTU {bytes}: use 256, 512, 1024, 2048 or 4096"))?,
            None => ctx.query_port(port_num)?.active_mtu(),
        };
        let gid = ctx.source_gid(port_num, gid_index)?.map(|e| (e.gid, e.index));
        Ok(Link { port: port_num, lid, gid, mtu })
    }

    /// What the peer needs to connect to `qp`, whose first send PSN is `psn`.
    pub(crate) fn endpoint<S: QpState>(&self, qp: &QueuePair<'_, S>, psn: Psn) -> Endpoint {
        let gid = self.gid.map_or(Gid::ZERO, |(gid, _)| gid);
        Endpoint { lid: self.lid, qpn: qp.qp_num(), psn, gid }
    }

    /// INIT → RTR → RTS towards `remote` (SENDs only: one RDMA READ in flight each way, the
    /// verbs' default).
    pub(crate) fn connect<'r>(
        &self,
        qp: QueuePair<'r, Init>,
        remote: &Endpoint,
        psn: Psn,
    ) -> Result<QueuePair<'r, Rts>, Error> {
        let sgid = self.gid.map(|(_, index)| index);
        let rtr = ToRtrAttr::to_endpoint(remote, self.port, sgid, self.mtu);
        let qp = qp.into_rtr(&rtr)?;
        Ok(qp.into_rts(&ToRtsAttr::new(psn))?)
    }
}
