//! A mock context whose data-path ops (`post_send`, `post_recv`, `poll_cq`) are the caller's,
//! and an RC QP on it brought to RTS: for `benches/data_path.rs` and `tests/no_alloc.rs`.
//!
//! The mock's own data-path ops record every call in a log that only grows, allocate the
//! list of `wr_id`s they record, and look the QP up in a hash map: costs that would swamp a
//! wrapper measured in nanoseconds, and allocations that would be counted as ours. Everything
//! else (the context, PD, CQ, MR, QP and its transitions) is the mock's.

use std::ffi::c_int;
use std::net::Ipv6Addr;

use rdma_verbs::{
    Context, Endpoint, Gid, Lid, Mtu, Psn, Qpn, QueuePair, Reset, Rts, ToInitAttr, ToRtrAttr,
    ToRtsAttr,
};
use rdma_verbs_mock::{self as mock, ContextConfig, Mock, Optional};
use rdma_verbs_sys as sys;

/// The provider functions a context gets for its data path.
pub struct DataPath {
    pub post_send: unsafe extern "C" fn(
        *mut sys::ibv_qp,
        *mut sys::ibv_send_wr,
        *mut *mut sys::ibv_send_wr,
    ) -> c_int,
    pub post_recv: unsafe extern "C" fn(
        *mut sys::ibv_qp,
        *mut sys::ibv_recv_wr,
        *mut *mut sys::ibv_recv_wr,
    ) -> c_int,
    pub poll_cq: unsafe extern "C" fn(*mut sys::ibv_cq, c_int, *mut sys::ibv_wc) -> c_int,
}

/// A context of `mock` (which must outlive it), shaped by `config`, with `ops` as its legacy
/// data path.
pub fn context(mock: &Mock, ops: DataPath, config: ContextConfig) -> Context {
    let raw = mock.context(config);
    // SAFETY: a fresh context that nothing else uses yet: filling its op table is what a
    // provider does when it opens one.
    unsafe {
        let table = &mut (*raw.as_ptr()).ops;
        table.post_send = Some(ops.post_send);
        table.post_recv = Some(ops.post_recv);
        table.poll_cq = Some(ops.poll_cq);
    }
    // SAFETY: a fresh context of the mock library, owned by the returned value from now on;
    // callers drop it before the mock.
    unsafe { Context::from_raw(mock::library(Optional::ALL), raw, mock::DEVICE_NAME.into()) }
}

/// `qp` connected to a RoCE peer, in RTS.
pub fn into_rts(qp: QueuePair<'_, Reset>) -> QueuePair<'_, Rts> {
    let gid = Gid::from("::ffff:192.0.2.9".parse::<Ipv6Addr>().expect("an IPv6 address"));
    let peer =
        Endpoint { lid: Lid(0), qpn: Qpn::new(0x12).unwrap(), psn: Psn::new(1).unwrap(), gid };
    // Index 3 of the mock port's GID table is its RoCE v2 IPv4-mapped entry (RoCE needs a GRH).
    let rtr = ToRtrAttr::to_endpoint(&peer, 1, Some(3), Mtu::MTU_1024);
    let qp = qp.into_init(&ToInitAttr::default()).map_err(|e| e.error).expect("RESET→INIT");
    let qp = qp.into_rtr(&rtr).map_err(|e| e.error).expect("INIT→RTR");
    qp.into_rts(&ToRtsAttr::new(Psn::new(1).unwrap())).map_err(|e| e.error).expect("RTR→RTS")
}
