//! Queue pairs of one device connected to each other (RC, UC) or addressed through an AH
//! (UD), for in-process device tests: [`Loopback`] holds what a test shares (PD, CQ) and
//! makes its pairs, pools and regions.

use std::time::{Duration, Instant};

use rdma_verbs::*;

pub const PORT: u8 = 1;

/// What a device test shares: a PD and a CQ of one context, on [`PORT`]. The QPs, pools and
/// regions it makes borrow it, so declare it first (they drop before it).
pub struct Loopback<'c> {
    pub ctx: &'c Context,
    pub pd: ProtectionDomain<'c>,
    pub cq: CompletionQueue<'c>,
}

impl<'c> Loopback<'c> {
    /// A PD and a CQ of `cqe` entries on `ctx`.
    pub fn new(ctx: &'c Context, cqe: u32) -> Self {
        Self::with_cq(ctx, ctx.create_cq(cqe).unwrap())
    }

    /// A PD on `ctx`, sharing `cq` (one made by the test, e.g. with a completion channel).
    pub fn with_cq(ctx: &'c Context, cq: CompletionQueue<'c>) -> Self {
        Loopback { ctx, pd: ctx.alloc_pd().unwrap(), cq }
    }

    /// What QPs on the CQ (both queues) with room for `depth` WRs each way are created with.
    pub fn attr(&self, depth: u32) -> QpInitAttr<'_, '_> {
        let cap = QpCapabilities { max_send_wr: depth, max_recv_wr: depth, ..Default::default() };
        QpInitAttr { cap, ..QpInitAttr::new(&self.cq) }
    }

    /// An RC QP with room for `depth` WRs each way, in INIT with `access` for the peer.
    pub fn rc_in_init(&self, depth: u32, access: AccessFlags) -> QueuePair<'_, Init> {
        qp_in_init(&self.pd, &self.cq, depth, access)
    }

    /// Two RC QPs with room for `depth` WRs each way, connected to each other: the first
    /// grants its peer nothing, the second `access`.
    pub fn rc_pair(
        &self,
        depth: u32,
        access: AccessFlags,
    ) -> (QueuePair<'_, Rts>, QueuePair<'_, Rts>) {
        self.pair(&self.attr(depth), access)
    }

    /// Two connected QPs of type `T` created with `attr`: the first grants its peer nothing,
    /// the second `access`.
    pub fn pair<'a, T: Connected>(
        &'a self,
        attr: &QpInitAttr<'a, '_>,
        access: AccessFlags,
    ) -> (QueuePair<'a, Rts, T>, QueuePair<'a, Rts, T>) {
        self.pair_with(attr, access, &ToRtsAttr::new(Psn::random()))
    }

    /// Two connected QPs as [`Loopback::pair`] makes them, the first taken to RTS with `rts`
    /// (its `sq_psn` is the PSN the second expects), the second with the defaults.
    pub fn pair_with<'a, T: Connected>(
        &'a self,
        attr: &QpInitAttr<'a, '_>,
        access: AccessFlags,
        rts: &ToRtsAttr,
    ) -> (QueuePair<'a, Rts, T>, QueuePair<'a, Rts, T>) {
        let (a, b) =
            (init_qp(&self.pd, attr, AccessFlags::empty()), init_qp(&self.pd, attr, access));
        connect_with(self.ctx, a, b, rts)
    }

    /// A sender and a receiver that takes its receives from `srq`, RC QPs connected to each
    /// other, granting their peer nothing: each has room for 4 sends and 1 receive and
    /// completes on the CQ, but for the receiver's receives, which complete on `recv_cq`.
    pub fn srq_pair<'a>(
        &'a self,
        srq: &'a SharedReceiveQueue<'_>,
        recv_cq: &'a CompletionQueue<'a>,
    ) -> (QueuePair<'a, Rts>, QueuePair<'a, Rts>) {
        let cap = QpCapabilities { max_send_wr: 4, max_recv_wr: 1, ..Default::default() };
        let sender = QpInitAttr { cap, ..QpInitAttr::new(&self.cq) };
        let receiver = QpInitAttr { recv_cq, srq: Some(srq), ..sender };
        let none = AccessFlags::empty();
        connect(self.ctx, init_qp(&self.pd, &sender, none), init_qp(&self.pd, &receiver, none))
    }

    /// Two UD QPs with room for `depth` WRs each way, in RTS with Q_Key `qkey`.
    pub fn ud_pair(
        &self,
        depth: u32,
        qkey: u32,
    ) -> (QueuePair<'_, Rts, Ud>, QueuePair<'_, Rts, Ud>) {
        let attr = self.attr(depth);
        (ud_in_rts(&self.pd, &attr, qkey), ud_in_rts(&self.pd, &attr, qkey))
    }

    /// An address handle reaching QPs of this port.
    pub fn ah(&self) -> AddressHandle<'_> {
        loopback_ah(self.ctx, &self.pd)
    }

    /// `len` bytes registered for local writes.
    pub fn region(&self, len: usize) -> MemoryRegion<'_> {
        self.pd.register(len, AccessFlags::LOCAL_WRITE).unwrap()
    }

    /// A zeroed region of `len` bytes that peers may RDMA WRITE into.
    pub fn write_target(&self, len: usize) -> RemoteWritableRegion<'_> {
        let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
        self.pd.register_remote_writable(len, access).unwrap()
    }

    /// A pool of `count` buffers of `chunk` bytes.
    pub fn pool(&self, count: usize, chunk: usize) -> BufferPool<'_> {
        BufferPool::new(self.region(count * chunk), chunk).unwrap()
    }
}

/// A QP on `cq` (both queues) with room for `depth` WRs each way, taken to INIT with `access`
/// for the peer.
pub fn qp_in_init<'a>(
    pd: &'a ProtectionDomain<'a>,
    cq: &'a CompletionQueue<'a>,
    depth: u32,
    access: AccessFlags,
) -> QueuePair<'a, Init> {
    let cap = QpCapabilities { max_send_wr: depth, max_recv_wr: depth, ..Default::default() };
    init_qp(pd, &QpInitAttr { cap, ..QpInitAttr::new(cq) }, access)
}

/// A connected QP (RC or UC) created with `attr`, taken to INIT with `access` for the peer.
pub fn init_qp<'a, T: Connected>(
    pd: &'a ProtectionDomain<'a>,
    attr: &QpInitAttr<'a, '_>,
    access: AccessFlags,
) -> QueuePair<'a, Init, T> {
    let qp = pd.create_qp::<T>(attr).unwrap();
    qp.into_init(&ToInitAttr { port: PORT, access, ..Default::default() }).unwrap()
}

/// The endpoint of `qp` on `ctx`'s port, through the routable GID, with `psn`.
pub fn endpoint<S: QpState, T: QpType>(
    ctx: &Context,
    qp: &QueuePair<'_, S, T>,
    psn: Psn,
) -> Endpoint {
    let gid = ctx.routable_gid(PORT).unwrap().gid;
    Endpoint { lid: ctx.query_port(PORT).unwrap().lid(), qpn: qp.qp_num(), psn, gid }
}

/// The routable GID's index, as an AV's source GID index.
pub fn sgid_index(ctx: &Context) -> u8 {
    ctx.routable_gid(PORT).unwrap().index
}

/// INIT → RTR towards `peer` → RTS with `rts` (its `sq_psn` is what the peer expects).
pub fn up_with<'a, T: Connected>(
    ctx: &Context,
    qp: QueuePair<'a, Init, T>,
    peer: &Endpoint,
    rts: &ToRtsAttr,
) -> QueuePair<'a, Rts, T> {
    let mtu = ctx.query_port(PORT).unwrap().active_mtu();
    let rtr = ToRtrAttr::to_endpoint(peer, PORT, Some(sgid_index(ctx)), mtu);
    qp.into_rtr(&rtr).unwrap().into_rts(rts).unwrap()
}

/// Connects two INIT QPs to each other.
pub fn connect<'a, T: Connected>(
    ctx: &Context,
    a: QueuePair<'a, Init, T>,
    b: QueuePair<'a, Init, T>,
) -> (QueuePair<'a, Rts, T>, QueuePair<'a, Rts, T>) {
    connect_with(ctx, a, b, &ToRtsAttr::new(Psn::random()))
}

/// Connects two INIT QPs to each other, `a` going to RTS with `rts` (from its `sq_psn`), `b`
/// with the defaults (from a random PSN).
pub fn connect_with<'a, T: Connected>(
    ctx: &Context,
    a: QueuePair<'a, Init, T>,
    b: QueuePair<'a, Init, T>,
    rts: &ToRtsAttr,
) -> (QueuePair<'a, Rts, T>, QueuePair<'a, Rts, T>) {
    let (ea, eb) = (endpoint(ctx, &a, rts.sq_psn), endpoint(ctx, &b, Psn::random()));
    (up_with(ctx, a, &eb, rts), up_with(ctx, b, &ea, &ToRtsAttr::new(eb.psn)))
}

/// A UD QP created with `attr`, in RTS with Q_Key `qkey`.
pub fn ud_in_rts<'a>(
    pd: &'a ProtectionDomain<'a>,
    attr: &QpInitAttr<'a, '_>,
    qkey: u32,
) -> QueuePair<'a, Rts, Ud> {
    let qp = pd.create_qp::<Ud>(attr).unwrap();
    let qp = qp.into_init(&UdToInitAttr { port: PORT, pkey_index: 0, qkey }).unwrap();
    qp.into_rtr().unwrap().into_rts(Psn::new(0).unwrap()).unwrap()
}

/// An address handle for reaching QPs of this same port (GRH from the routable GID).
pub fn loopback_ah<'a>(ctx: &Context, pd: &'a ProtectionDomain<'a>) -> AddressHandle<'a> {
    let (gid, lid) = (ctx.routable_gid(PORT).unwrap().gid, ctx.query_port(PORT).unwrap().lid());
    let av = AddressVector::new(PORT, lid).with_grh(GlobalRoute::new(gid, sgid_index(ctx)));
    pd.create_ah(&av).unwrap()
}

/// `len` recognisable bytes, different for each `seed`.
pub fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

/// `target` holds `expected` at `offset`; else fails saying `what`.
pub fn assert_holds(target: &RemoteWritableRegion<'_>, offset: usize, expected: &[u8], what: &str) {
    let mut held = vec![0; expected.len()];
    target.read(offset, &mut held).unwrap();
    assert!(held == expected, "{what}");
}

/// Moves what `cq` holds now (up to 4 completions) to the end of `got`.
fn poll_into(cq: &CompletionQueue<'_>, got: &mut Vec<WorkCompletion>) {
    let mut storage: [WorkCompletion; 4] = Default::default();
    got.extend(cq.poll(&mut storage).unwrap().iter_mut().map(std::mem::take));
}

/// Polls until `n` completions arrived; fails after 30 s (Soft-RoCE is slow, not stuck).
pub fn wait_for(cq: &CompletionQueue<'_>, n: usize) -> Vec<WorkCompletion> {
    let start = Instant::now();
    let mut got = Vec::new();
    while got.len() < n {
        poll_into(cq, &mut got);
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} of {n} completions after 30 s: {got:?}",
            got.len()
        );
    }
    got
}

/// Waits for `n` completions ([`wait_for`]) and asserts each succeeded.
#[track_caller]
pub fn wait_for_success(cq: &CompletionQueue<'_>, n: usize) -> Vec<WorkCompletion> {
    let wcs = wait_for(cq, n);
    assert!(wcs.iter().all(WorkCompletion::is_success), "{wcs:?}");
    wcs
}

/// Asserts nothing arrives on `cq` while it is polled for `quiet` ([`drain_for`]); `what`
/// says what that shows.
#[track_caller]
pub fn assert_quiet(cq: &CompletionQueue<'_>, quiet: Duration, what: &str) {
    let late = drain_for(cq, quiet);
    assert!(late.is_empty(), "{what}: {late:?}");
}

/// Polls `cq` for `quiet` and returns whatever arrived (nothing, when nothing should).
pub fn drain_for(cq: &CompletionQueue<'_>, quiet: Duration) -> Vec<WorkCompletion> {
    let start = Instant::now();
    let mut got = Vec::new();
    while start.elapsed() < quiet {
        poll_into(cq, &mut got);
        std::thread::sleep(Duration::from_millis(5));
    }
    got
}
