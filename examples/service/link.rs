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

/// The options that choose our side of every connection.
#[derive(clap::Args, Debug)]
pub(crate) struct LinkArgs {
    /// Port of the RDMA device
    #[arg(short = 'i', long = "ib-port", default_value_t = 1, value_parser = c_number::parse::<u8>)]
    ib_port: u8,
    /// Local port GID index (default on Ethernet ports: the routable GID)
    #[arg(short = 'g', long = "gid-idx", value_parser = c_number::parse::<u8>)]
    gid_index: Option<u8>,
    /// Path MTU in bytes: 256, 512, 1024, 2048 or 4096 (default: the port's active MTU)
    #[arg(short = 'm', long = "mtu", value_parser = c_number::parse::<u32>)]
    mtu: Option<u32>,
}

impl Link {
    /// Port `args.ib_port` of `ctx`, sending from GID `args.gid_index` (default: the routable GID
    /// on RoCE, none on InfiniBand), with path MTU `args.mtu` bytes (default: the port's active
    /// MTU).
    pub(crate) fn new(ctx: &Context, args: &LinkArgs) -> Result<Link, Error> {
        let port = args.ib_port;
        let lid = ctx.source_lid(port)?;
        let mtu = match args.mtu {
            Some(bytes) => Mtu::from_bytes(bytes)
                .ok_or_else(|| format!("invalid MTU {bytes}: use 256, 512, 1024, 2048 or 4096"))?,
            None => ctx.query_port(port)?.active_mtu(),
        };
        let gid = ctx.source_gid(port, args.gid_index)?.map(|e| (e.gid, e.index));
        Ok(Link { port, lid, gid, mtu })
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
