//! Two RC QPs of one device connected to each other, for in-process device tests.

use std::time::{Duration, Instant};

use rdma_verbs::*;

pub const PORT: u8 = 1;

/// A QP on `cq` (both queues) with room for `depth` WRs each way, taken to INIT with `access`
/// for the peer.
pub fn qp_in_init<'a>(
    pd: &'a ProtectionDomain<'a>,
    cq: &'a CompletionQueue<'a>,
    depth: u32,
    access: AccessFlags,
) -> QueuePair<'a, Init> {
    let cap = QpCapabilities { max_send_wr: depth, max_recv_wr: depth, ..Default::default() };
    let qp = pd.create_rc_qp(&QpInitAttr { cap, ..QpInitAttr::new(cq) }).unwrap();
    qp.into_init(&InitAttr { port: PORT, access, ..Default::default() }).unwrap()
}

/// The endpoint of `qp` on `ctx`'s port, through the routable GID, with `psn`.
pub fn endpoint<S: QpState>(ctx: &Context, qp: &QueuePair<'_, S>, psn: Psn) -> Endpoint {
    let gid = ctx.routable_gid(PORT).unwrap().gid;
    Endpoint { lid: ctx.query_port(PORT).unwrap().lid(), qpn: qp.qp_num(), psn, gid }
}

/// INIT → RTR → RTS towards `peer`, sending from `me.psn`.
pub fn up<'a>(
    ctx: &Context,
    qp: QueuePair<'a, Init>,
    me: &Endpoint,
    peer: &Endpoint,
) -> QueuePair<'a, Rts> {
    let gid = ctx.routable_gid(PORT).unwrap();
    let mtu = ctx.query_port(PORT).unwrap().active_mtu();
    let rtr = RtrAttr::to_endpoint(peer, PORT, Some(gid.index as u8), mtu);
    qp.into_rtr(&rtr).unwrap().into_rts(&RtsAttr::new(me.psn)).unwrap()
}

/// Connects two INIT QPs to each other.
pub fn connect<'a>(
    ctx: &Context,
    a: QueuePair<'a, Init>,
    b: QueuePair<'a, Init>,
) -> (QueuePair<'a, Rts>, QueuePair<'a, Rts>) {
    let (ea, eb) = (endpoint(ctx, &a, Psn::random()), endpoint(ctx, &b, Psn::random()));
    (up(ctx, a, &ea, &eb), up(ctx, b, &eb, &ea))
}

/// Polls until `n` completions arrived; fails after 30 s (Soft-RoCE is slow, not stuck).
pub fn wait_for(cq: &CompletionQueue<'_>, n: usize) -> Vec<WorkCompletion> {
    let start = Instant::now();
    let mut got = Vec::new();
    let mut storage: [WorkCompletion; 4] = Default::default();
    while got.len() < n {
        got.extend(cq.poll(&mut storage).unwrap().iter_mut().map(std::mem::take));
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} of {n} completions after 30 s: {got:?}",
            got.len()
        );
    }
    got
}
