//! The RDMA device both sides use, and the RC queue pair of a transfer with the attributes of
//! `hipobj-rc-v2` (versitygw's port of the hipObject core, `cuwrapper/rc/v2-transport.cpp`).

use std::time::{Duration, Instant};

use rdma_verbs::*;

use super::token::{Token, TRANSPORT_RC};

/// Work requests each way (one CQ for both, with room for all of them).
const DEPTH: u32 = 16;
/// How long a completion wait sleeps between polls (versitygw polls every 2 ms).
const POLL_EVERY: Duration = Duration::from_millis(1);

/// An opened device: its protection domain, port, source GID and path MTU.
///
/// The context and the PD live as long as the process: every session's queue pair, CQ and
/// region borrow them, from threads of their own.
pub struct Device {
    /// The client's PD, which its regions and queue pairs are made in. A server session
    /// makes its own ([`Device::alloc_pd`]).
    pub pd: &'static ProtectionDomain<'static>,
    ctx: &'static Context,
    port: u8,
    lid: Lid,
    gid: GidEntry,
    mtu: Mtu,
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} port {} GID {} (index {})",
            self.ctx.name(),
            self.port,
            self.gid.gid,
            self.gid.index
        )
    }
}

impl Device {
    /// Opens `name` (default: the first device), port 1, sending from GID `gid_index`
    /// (default: the port's routable RoCE v2 GID).
    pub fn open(name: Option<&str>, gid_index: Option<u8>) -> Result<Device> {
        let ctx = match name {
            Some(name) => Context::open(name)?,
            None => Context::open_first()?,
        };
        let ctx: &'static Context = Box::leak(Box::new(ctx));
        let port = 1;
        let attr = ctx.query_port(port)?;
        let gid = match gid_index {
            Some(index) => ctx.gid(port, index)?,
            None => ctx.routable_gid(port)?,
        };
        let pd = Box::leak(Box::new(ctx.alloc_pd()?));
        // Emulated NICs report 1024; below 512 is taken as unknown, as versitygw does.
        let mtu = Some(attr.active_mtu())
            .filter(|m| m.bytes().is_some_and(|b| b >= 512))
            .unwrap_or(Mtu::MTU_1024);
        Ok(Device { pd, ctx, port, lid: attr.lid(), gid, mtu })
    }

    /// The GID this side sends from.
    pub fn gid(&self) -> Gid {
        self.gid.gid
    }

    /// The port number.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The port's LID (0 on RoCE).
    pub fn lid(&self) -> u16 {
        self.lid.get()
    }

    /// The PREPARE token of this side's RC queue pair `qpn`, whose `len` bytes go to or
    /// come from `region`.
    pub fn token(&self, qpn: Qpn, region: RemoteAddr, len: u64) -> Token {
        Token {
            transport: TRANSPORT_RC,
            qpn: qpn.get(),
            gid: self.gid().get(),
            rkey: region.rkey.get(),
            addr: region.addr,
            len,
            port: self.port,
            lid: self.lid(),
        }
    }

    /// A CQ for one transfer's queue pair.
    pub fn create_cq(&self) -> Result<CompletionQueue<'static>> {
        self.ctx.create_cq(2 * DEPTH)
    }

    /// A protection domain of its own, for one server session: a peer's queue pair reaches
    /// only the regions of its session's PD, so no client can RDMA into another's staging
    /// region, whatever address and rkey it tries.
    pub fn alloc_pd(&self) -> Result<ProtectionDomain<'static>> {
        self.ctx.alloc_pd()
    }

    /// An RC queue pair of `pd` on `cq` in INIT, the peer allowed `access` (RDMA WRITE into
    /// the regions of `pd` that allow it, or nothing).
    pub fn create_qp<'a>(
        &self,
        pd: &'a ProtectionDomain<'a>,
        cq: &'a CompletionQueue<'a>,
        access: AccessFlags,
    ) -> Result<QueuePair<'a, Init>> {
        let cap = QpCapabilities {
            max_send_wr: DEPTH,
            max_recv_wr: DEPTH,
            max_send_sge: 1,
            max_recv_sge: 1,
            ..Default::default()
        };
        pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(cq) })?
            .into_init(&self.to_init(access))
    }

    /// RESET → INIT: our port, the peer allowed `access`.
    pub fn to_init(&self, access: AccessFlags) -> ToInitAttr {
        ToInitAttr { port: self.port, access, ..ToInitAttr::default() }
    }

    /// INIT → RTR → RTS towards the QP `peer_qpn` at `peer_gid` (a GRH route: RoCE), which
    /// sends from `peer_psn`; ours sends from `own_psn`.
    pub fn connect<'a>(
        &self,
        qp: QueuePair<'a, Init>,
        peer_qpn: Qpn,
        peer_gid: Gid,
        peer_psn: Psn,
        own_psn: Psn,
    ) -> Result<QueuePair<'a, Rts>> {
        let grh = GlobalRoute { hop_limit: 64, ..GlobalRoute::new(peer_gid, self.gid.index) };
        let rtr = ToRtrAttr {
            path_mtu: self.mtu,
            dest_qpn: peer_qpn,
            rq_psn: peer_psn,
            max_dest_rd_atomic: 1,
            min_rnr_timer: RnrTimer::new(12)?,
            av: AddressVector::new(self.port, Lid::default()).with_grh(grh),
        };
        let rts = ToRtsAttr {
            timeout: AckTimeout::new(14)?,
            retry_cnt: RetryCount::new(7)?,
            rnr_retry: RnrRetry::INFINITE,
            sq_psn: own_psn,
            max_rd_atomic: 1,
        };
        qp.into_rtr(&rtr)?.into_rts(&rts)
    }
}

/// Waits for one completion on `cq` until `deadline`; `None` when it passes first.
pub fn wait_one(cq: &CompletionQueue<'_>, deadline: Instant) -> Result<Option<WorkCompletion>> {
    let mut wcs = [WorkCompletion::EMPTY];
    loop {
        if cq.poll(&mut wcs)?.len() == 1 {
            let [wc] = wcs;
            return Ok(Some(wc));
        }
        if Instant::now() >= deadline {
            return Ok(None);
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// A random PSN that is not 0 (the protocol's PSNs are 1..=0xFFFFFF).
pub fn nonzero_psn() -> Psn {
    loop {
        let psn = Psn::random();
        if psn.get() != 0 {
            return psn;
        }
    }
}
