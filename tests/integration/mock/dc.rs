//! DC (feature `mlx5`) against the mock libmlx5: the gate, the creation attributes, the
//! exact transition masks, the DCT number after RTR, and the order and arguments of each
//! posted work request.

use std::net::Ipv6Addr;

use rdma_verbs::mlx5::{
    DcEndpoint, DcKey, DcPeer, DcRoute, DcVersion, DcWr, Dci, DciInitAttr, DciStreams,
    DciToRtrAttr, Dct, DctInitAttr, DctToRtrAttr, Mlx5Context,
};
use rdma_verbs::{
    AccessFlags, CompletionQueue, Context, Error, Gid, InvalidInputKind, Lid, MemoryRegion, Mtu,
    OdpTransportCaps, ProtectionDomain, Psn, QpCapabilities, QpInitAttr, Qpn, RemoteAddr, Reset,
    Rts, SendFlags, Sge, SharedReceiveQueue, ToInitAttr, ToRtsAttr, WcOpcode, WcStatus,
    WorkCompletion,
};
use rdma_verbs_mock::mlx5::{self as mock_mlx5, Mlx5Call, Mlx5Verb};
use rdma_verbs_mock::{self as mock, Call, ContextConfig, Mock, QpAttr, Verb};
use rdma_verbs_sys as sys;

use super::{assert_queue_full, assert_verb_error};

/// A context of the mock libibverbs that models SRQs, AHs and DC QPs. Fields drop in order.
struct Fixture {
    ctx: Context,
    mock: Mock,
}

/// Another context of `mock` (which must outlive it) through the DC mock library.
fn open(mock: &Mock) -> Context {
    let raw = mock.context(ContextConfig::default());
    // SAFETY: a fresh context of the DC mock library, owned by the returned value from now
    // on; callers drop it before the mock (a `Fixture` by its field order).
    unsafe { Context::from_raw(mock_mlx5::ibverbs_library(), raw, mock::DEVICE_NAME.into()) }
}

/// What a DC test works with: the gate passed, a PD and a CQ for every completion, of one
/// [`Fixture`]'s context.
struct Dc<'f> {
    mlx5: Mlx5Context<'f>,
    pd: ProtectionDomain<'f>,
    cq: CompletionQueue<'f>,
}

impl Fixture {
    /// A fresh mock, whose mlx5 device is the default one.
    fn new() -> Fixture {
        let mock = Mock::new();
        mock_mlx5::configure(mock_mlx5::DeviceConfig::default());
        Fixture { ctx: open(&mock), mock }
    }

    /// The gate, with a mock libmlx5 whose `mlx5dv_is_supported` says `supported`.
    fn mlx5(&self, supported: bool) -> Result<Mlx5Context<'_>, Error> {
        // SAFETY: the mock libmlx5 keeps libmlx5's contracts over this mock's objects.
        unsafe { Mlx5Context::with_library(&self.ctx, mock_mlx5::library(supported)) }
    }

    /// The gate of a supported device and the objects DC needs, on the device as last
    /// configured (`mock_mlx5::configure`).
    fn dc(&self) -> Dc<'_> {
        self.dc_with(mock_mlx5::library(true))
    }

    /// As [`Fixture::dc`], through the mock libmlx5 `lib`.
    fn dc_with(&self, lib: &'static sys::mlx5::Mlx5) -> Dc<'_> {
        // SAFETY: the mock libmlx5 keeps libmlx5's contracts over this mock's objects.
        let mlx5 = unsafe { Mlx5Context::with_library(&self.ctx, lib) }.expect("the gate");
        let pd = self.ctx.alloc_pd().expect("a PD");
        // Room for a DCI's 64 sends (`DciInitAttr::new`) and a DCT's 16 receives.
        let cq = self.ctx.create_cq(128).expect("a CQ");
        Dc { mlx5, pd, cq }
    }

    /// The DC calls recorded since the last time (other calls dropped).
    fn dc_calls(&self) -> Vec<Mlx5Call> {
        let calls = self.mock.take_calls();
        calls
            .into_iter()
            .filter_map(|c| if let Call::Mlx5(c) = c { Some(c) } else { None })
            .collect()
    }

    /// The masks and attributes of the `ibv_modify_qp` calls recorded since the last time.
    fn modifies(&self) -> Vec<(u32, QpAttr)> {
        let calls = self.mock.take_calls();
        calls
            .into_iter()
            .filter_map(|c| match c {
                Call::ModifyQp { mask, attr } => Some((mask as u32, attr)),
                _ => None,
            })
            .collect()
    }
}

impl Dc<'_> {
    /// A 4 KiB region to post from.
    fn mr(&self) -> MemoryRegion<'_> {
        self.pd.register(4096, AccessFlags::LOCAL_WRITE).expect("an MR")
    }

    /// An SRQ for a DCT's receives.
    fn srq(&self) -> SharedReceiveQueue<'_> {
        self.pd.create_srq(16, 1).expect("an SRQ")
    }

    /// A DCT with `key` on `srq` and the CQ, in RESET.
    fn create_dct<'a>(
        &'a self,
        srq: &'a SharedReceiveQueue<'_>,
        key: DcKey,
    ) -> Result<Dct<'a, Reset>, Error> {
        self.mlx5.create_dct(&self.pd, &DctInitAttr { srq, recv_cq: &self.cq, key })
    }

    /// A DCI of `attr`, in RESET.
    fn create_dci<'a>(&'a self, attr: &DciInitAttr<'a>) -> Result<Dci<'a, Reset>, Error> {
        self.mlx5.create_dci(&self.pd, attr)
    }

    /// A DCI of `attr` connected to `peer` over `route`, as `connect_dci` makes it.
    fn connect_with<'a>(
        &'a self,
        attr: &DciInitAttr<'a>,
        route: &DcRoute,
        peer: &DcEndpoint,
    ) -> Result<(Dci<'a, Rts>, DcPeer<'a>), Error> {
        self.mlx5.connect_dci(&self.pd, attr, route, peer)
    }

    /// A default DCI connected to [`token`] over [`route`], and a region to post from.
    fn connected(&self) -> (Dci<'_, Rts>, DcPeer<'_>, MemoryRegion<'_>) {
        let (dci, peer) = self.connect(&route(), &token()).expect("a connected DCI");
        (dci, peer, self.mr())
    }

    /// A default DCI connected to `peer` over `route`.
    fn connect(
        &self,
        route: &DcRoute,
        peer: &DcEndpoint,
    ) -> Result<(Dci<'_, Rts>, DcPeer<'_>), Error> {
        self.connect_with(&DciInitAttr::new(&self.cq), route, peer)
    }
}

/// Posts one SEND of `sge` to `peer` on `dci`.
fn post_send(dci: &Dci<'_, Rts>, peer: &DcPeer<'_>, wr_id: u64, sge: &Sge) -> Result<(), Error> {
    // SAFETY: the mock touches no memory.
    unsafe {
        dci.post_send_wrs(&[DcWr::send(wr_id, std::slice::from_ref(sge), peer.destination())])
    }
}

/// Index 3 of the mock port's GID table: its RoCE v2 IPv4-mapped entry.
const SGID_INDEX: u8 = 3;

fn route() -> DcRoute {
    DcRoute::new(1, Some(SGID_INDEX), Mtu::MTU_1024)
}

fn token() -> DcEndpoint {
    let gid = Gid::from("::ffff:192.0.2.9".parse::<Ipv6Addr>().unwrap());
    let key = DcKey::new(0x0123_4567_89ab_cdef);
    DcEndpoint::new(gid, Lid::new(0x12), Qpn::new(0xab_cdef).unwrap(), key, DcVersion::V2)
}

#[test]
fn a_device_mlx5dv_is_supported_refuses_is_unsupported_and_nothing_else_is_called() {
    let f = Fixture::new();
    f.mock.take_calls();
    let err = f.mlx5(false).unwrap_err();
    let Error::Unsupported { what } = &err else { panic!("{err:?}") };
    assert!(what.contains("on device mock0"), "{err}");
    assert!(what.contains("mlx5dv_is_supported says no"), "{err}");
    assert!(what.contains("ConnectX"), "{err}");
    // Only the gate ran: no capability query, no QP, no mlx5dv_qp_ex_from_ibv_qp_ex.
    assert_eq!(f.dc_calls(), [Mlx5Call::IsSupported]);
}

#[test]
fn open_finds_the_provider_of_a_context_and_refuses_a_non_mlx5_one() {
    // The mock context's ops live in this test binary, which has no mlx5dv symbols: the
    // same path a Soft-RoCE context takes to librxe.
    let f = Fixture::new();
    f.mock.take_calls();
    let err = Mlx5Context::open(&f.ctx).unwrap_err();
    let Error::Unsupported { what } = &err else { panic!("{err:?}") };
    assert!(what.contains("on device mock0"), "{err}");
    assert!(what.contains("not libmlx5"), "{err}");
    assert_eq!(f.dc_calls(), []);
}

#[test]
fn the_gate_reports_the_dc_capabilities() {
    let f = Fixture::new();
    f.mock.take_calls();
    let mlx5 = f.mlx5(true).unwrap();
    let asked = u64::from(
        sys::MLX5DV_CONTEXT_MASK_DC_ODP_CAPS
            | sys::MLX5DV_CONTEXT_MASK_DCI_STREAMS
            | sys::mlx5::MLX5DV_CONTEXT_MASK_MAX_DC_RD_ATOM,
    );
    assert_eq!(f.dc_calls(), [Mlx5Call::IsSupported, Mlx5Call::QueryDevice { comp_mask: asked }]);
    let caps = mlx5.caps();
    assert_eq!(caps.dc_odp, OdpTransportCaps::SEND | OdpTransportCaps::RECV);
    let streams = caps.dci_streams.unwrap();
    assert_eq!((streams.max_log_concurrent, streams.max_log_errored), (4, 3));
}

#[test]
fn a_failed_capability_query_is_the_verbs_error() {
    let f = Fixture::new();
    f.mock.fail(Verb::Mlx5(Mlx5Verb::QueryDevice), libc::EIO);
    assert_verb_error(&f.mlx5(true).unwrap_err(), "mlx5dv_query_device", libc::EIO, &[]);
}

#[test]
fn a_dct_is_created_with_driver_type_dc_key_srq_and_cq_and_goes_to_rtr_with_the_exact_masks() {
    let f = Fixture::new();
    let dc = f.dc();
    let srq = dc.srq();
    f.mock.take_calls();

    let key = DcKey::new(0xfeed_beef);
    let dct = dc.create_dct(&srq, key).unwrap();
    // Its receives come from the SRQ and complete on its CQ, which keeps their entries.
    assert_eq!(dc.cq.due(), srq.max_wr());
    assert_eq!(
        f.dc_calls(),
        [Mlx5Call::CreateQp {
            qp_type: sys::IBV_QPT_DRIVER,
            comp_mask: sys::IBV_QP_INIT_ATTR_PD,
            send_ops_flags: 0,
            srq: true,
            recv_cq: true,
            dv_comp_mask: u64::from(sys::MLX5DV_QP_INIT_ATTR_MASK_DC),
            create_flags: 0,
            dc_type: sys::MLX5DV_DCTYPE_DCT,
            dct_access_key: Some(0xfeed_beef),
            dci_streams: None,
        }]
    );
    // SAFETY: a live QP; libmlx5 leaves the number unset until RTR.
    assert_eq!(unsafe { (*dct.as_raw()).qp_num }, 0);

    let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let dct = dct.into_init(&ToInitAttr { port: 1, pkey_index: 0, access }).unwrap();
    let dct = dct.into_rtr(&DctToRtrAttr::new(1, Some(SGID_INDEX), Mtu::MTU_2048)).unwrap();
    let modifies = f.modifies();
    assert_eq!(
        modifies.iter().map(|m| m.0).collect::<Vec<_>>(),
        [
            sys::IBV_QP_STATE
                | sys::IBV_QP_PKEY_INDEX
                | sys::IBV_QP_PORT
                | sys::IBV_QP_ACCESS_FLAGS,
            sys::IBV_QP_STATE | sys::IBV_QP_AV | sys::IBV_QP_PATH_MTU | sys::IBV_QP_MIN_RNR_TIMER,
        ]
    );
    let (init, rtr) = (modifies[0].1, modifies[1].1);
    assert_eq!(
        (init.qp_state, init.port_num, init.pkey_index, init.qp_access_flags),
        (sys::IBV_QPS_INIT, 1, 0, sys::IBV_ACCESS_REMOTE_WRITE | sys::IBV_ACCESS_REMOTE_READ)
    );
    assert_eq!(
        (rtr.qp_state, rtr.path_mtu, rtr.min_rnr_timer, rtr.ah_port_num, rtr.is_global),
        (sys::IBV_QPS_RTR, sys::IBV_MTU_2048, 31, 1, 1)
    );
    assert_eq!(rtr.sgid_index, SGID_INDEX);

    // The number appears at RTR, and the token carries it with the key.
    let dctn = dct.dctn();
    assert_ne!(dctn, Qpn::new(0).unwrap());
    let gid = token().gid();
    let ep = dct.endpoint(gid, Lid::new(0));
    assert_eq!((ep.gid(), ep.lid(), ep.dctn(), ep.dc_key()), (gid, Lid::new(0), dctn, key));
    assert_eq!(ep.to_string().parse::<DcEndpoint>().unwrap(), ep);

    let raw = dct.as_raw();
    dct.destroy().unwrap();
    assert!(!mock_mlx5::is_live(raw));
    assert_eq!(dc.cq.due(), 0, "the SRQ's entries free again");
}

#[test]
fn a_failed_dct_creation_is_the_verbs_error() {
    let f = Fixture::new();
    let dc = f.dc();
    f.mock.fail(Verb::Mlx5(Mlx5Verb::CreateQp), libc::EINVAL);
    let srq = dc.srq();
    let err = dc.create_dct(&srq, DcKey::new(1)).unwrap_err();
    assert_verb_error(&err, "mlx5dv_create_qp", libc::EINVAL, &[]);
}

#[test]
fn a_dci_goes_to_rts_with_no_peer_data_and_the_exact_masks() {
    let f = Fixture::new();
    let dc = f.dc();
    f.mock.take_calls();

    let dci: Dci<'_, Reset> = dc.create_dci(&DciInitAttr::new(&dc.cq)).unwrap();
    let send_ops =
        sys::IBV_QP_EX_WITH_SEND | sys::IBV_QP_EX_WITH_RDMA_WRITE | sys::IBV_QP_EX_WITH_RDMA_READ;
    assert_eq!(
        f.dc_calls(),
        [
            Mlx5Call::CreateQp {
                qp_type: sys::IBV_QPT_DRIVER,
                comp_mask: sys::IBV_QP_INIT_ATTR_PD | sys::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
                send_ops_flags: u64::from(send_ops),
                srq: false,
                recv_cq: true,
                dv_comp_mask: u64::from(sys::MLX5DV_QP_INIT_ATTR_MASK_DC),
                create_flags: 0,
                dc_type: sys::MLX5DV_DCTYPE_DCI,
                dct_access_key: None,
                dci_streams: None,
            },
            Mlx5Call::QpExFromIbvQpEx,
        ]
    );
    assert!(!dci.has_streams());

    let dci = dci.into_init(1, 0).unwrap();
    let dci = dci.into_rtr(&DciToRtrAttr { path_mtu: Mtu::MTU_4096 }).unwrap();
    let _dci = dci.into_rts(&ToRtsAttr::new(Psn::new(0x42).unwrap())).unwrap();
    let modifies = f.modifies();
    assert_eq!(
        modifies.iter().map(|m| m.0).collect::<Vec<_>>(),
        [
            sys::IBV_QP_STATE | sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT,
            sys::IBV_QP_STATE | sys::IBV_QP_PATH_MTU,
            sys::IBV_QP_STATE
                | sys::IBV_QP_TIMEOUT
                | sys::IBV_QP_RETRY_CNT
                | sys::IBV_QP_RNR_RETRY
                | sys::IBV_QP_SQ_PSN
                | sys::IBV_QP_MAX_QP_RD_ATOMIC,
        ]
    );
    let rts = modifies[2].1;
    assert_eq!(
        (rts.qp_state, rts.timeout, rts.retry_cnt, rts.rnr_retry, rts.sq_psn, rts.max_rd_atomic),
        (sys::IBV_QPS_RTS, 17, 6, 6, 0x42, 1)
    );
    // No peer: no destination QPN, no AV.
    assert_eq!((modifies[1].1.dest_qp_num, modifies[1].1.is_global), (0, 0));
}

#[test]
fn a_client_goes_straight_to_rts_from_a_token_and_each_wr_is_built_in_order() {
    let f = Fixture::new();
    let dc = f.dc();
    let mr = dc.mr();
    f.mock.take_calls();

    let text = token().to_string();
    let peer_token: DcEndpoint = text.parse().unwrap();
    let (dci, peer) = dc.connect(&route(), &peer_token).unwrap();
    let calls = f.mock.take_calls();
    let masks: Vec<u32> = calls
        .iter()
        .filter_map(|c| if let Call::ModifyQp { mask, .. } = c { Some(*mask as u32) } else { None })
        .collect();
    assert_eq!(masks.len(), 3, "{calls:?}");
    // The peer's one AH comes from the token: its GID as destination, our GID index and port.
    let ah = created_ah(&calls);
    assert_eq!(
        (ah.is_global, ah.dgid, ah.sgid_index, ah.ah_port_num, ah.dlid),
        (1, token().gid().get(), SGID_INDEX, 1, 0x12)
    );

    let sge = mr.sge(0..64).unwrap();
    let sge2 = mr.sge(64..192).unwrap();
    let remote = RemoteAddr { addr: 0x7000, rkey: rdma_verbs::RKey::new(0x99) };
    let wrs = [
        DcWr::send(1, std::slice::from_ref(&sge), peer.destination()).flags(SendFlags::SIGNALED),
        DcWr::rdma_write(2, std::slice::from_ref(&sge2), remote, peer.destination()),
    ];
    // SAFETY: the mock reads no memory; `mr` outlives the posts.
    unsafe { dci.post_send_wrs(&wrs).unwrap() };
    let dc = |c: Call| if let Call::Mlx5(c) = c { c } else { panic!("{c:?}") };
    let posted: Vec<Mlx5Call> = f.mock.take_calls().into_iter().map(dc).collect();
    let addr = Mlx5Call::WrSetDcAddr {
        ah: peer.destination().ah.as_raw() as usize,
        remote_dctn: 0xab_cdef,
        remote_dc_key: 0x0123_4567_89ab_cdef,
    };
    assert_eq!(
        posted,
        [
            Mlx5Call::WrStart,
            Mlx5Call::WrSend { wr_id: 1, wr_flags: sys::IBV_SEND_SIGNALED },
            addr.clone(),
            Mlx5Call::WrSetSge { lkey: mr.lkey().get(), addr: sge.addr(), length: 64 },
            Mlx5Call::WrRdmaWrite { wr_id: 2, wr_flags: 0, rkey: 0x99, remote_addr: 0x7000 },
            addr,
            Mlx5Call::WrSetSge { lkey: mr.lkey().get(), addr: sge2.addr(), length: 128 },
            Mlx5Call::WrComplete,
        ]
    );
}

#[test]
fn a_missing_builder_aborts_the_batch_and_a_failed_complete_is_the_verbs_error() {
    let f = Fixture::new();
    let config = mock_mlx5::DeviceConfig { dci_rdma_read: false, ..Default::default() };
    mock_mlx5::configure(config);
    let dc = f.dc();
    let (dci, peer, mr) = dc.connected();
    let sge = mr.sge(0..8).unwrap();
    let remote = RemoteAddr { addr: 0x7000, rkey: rdma_verbs::RKey::new(1) };
    f.mock.take_calls();

    // This mock DCI leaves wr_rdma_read NULL.
    let read = DcWr::rdma_read(3, std::slice::from_ref(&sge), remote, peer.destination());
    // SAFETY: the mock touches no memory.
    let err = unsafe { dci.post_send_wrs(&[read]) }.unwrap_err();
    assert!(matches!(err, Error::Unsupported { what: "ibv_wr_rdma_read" }), "{err:?}");
    assert_eq!(f.dc_calls(), [Mlx5Call::WrStart, Mlx5Call::WrAbort]);

    f.mock.fail(Verb::Mlx5(Mlx5Verb::WrComplete), libc::ENOMEM);
    let err = post_send(&dci, &peer, 4, &sge).unwrap_err();
    assert_queue_full(&err, "ibv_wr_complete", libc::ENOMEM);
}

#[test]
fn dci_streams_are_asked_within_the_caps_and_used_per_wr() {
    let f = Fixture::new();
    let dc = f.dc();
    let mr = dc.mr();
    f.mock.take_calls();

    let too_many = DciInitAttr {
        streams: Some(DciStreams { log_concurrent: 5, log_errored: 1 }),
        ..DciInitAttr::new(&dc.cq)
    };
    let err = dc.create_dci(&too_many).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::DciStreams), "{err:?}");
    assert!(err.to_string().contains("2^5 concurrent"), "{err}");
    assert_eq!(f.dc_calls(), [], "refused before mlx5dv_create_qp");

    let attr = DciInitAttr {
        streams: Some(DciStreams { log_concurrent: 2, log_errored: 1 }),
        ..DciInitAttr::new(&dc.cq)
    };
    let (dci, peer) = dc.connect_with(&attr, &route(), &token()).unwrap();
    assert!(dci.has_streams());
    let calls = f.dc_calls();
    let create = calls.into_iter().find(|c| matches!(c, Mlx5Call::CreateQp { .. })).unwrap();
    let Mlx5Call::CreateQp { dv_comp_mask, dci_streams, .. } = create else { panic!("{create:?}") };
    let streams_mask = sys::MLX5DV_QP_INIT_ATTR_MASK_DC | sys::MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS;
    assert_eq!((dv_comp_mask, dci_streams), (u64::from(streams_mask), Some((2, 1))));

    let sge = mr.sge(0..8).unwrap();
    let wr = DcWr::send(5, std::slice::from_ref(&sge), peer.destination()).stream(3);
    // SAFETY: the mock touches no memory.
    unsafe { dci.post_send_wrs(&[wr]).unwrap() };
    let calls = f.dc_calls();
    assert!(
        matches!(
            calls[2],
            Mlx5Call::WrSetDcAddrStream { stream_id: 3, remote_dctn: 0xab_cdef, .. }
        ),
        "{calls:?}"
    );
}

#[test]
fn a_stream_on_a_dci_without_streams_is_refused_before_any_call() {
    let f = Fixture::new();
    let dc = f.dc();
    let (dci, peer, mr) = dc.connected();
    let sge = mr.sge(0..8).unwrap();
    f.mock.take_calls();
    let wr = DcWr::send(6, std::slice::from_ref(&sge), peer.destination()).stream(0);
    // SAFETY: refused before the device sees it.
    let err = unsafe { dci.post_send_wrs(&[wr]) }.unwrap_err();
    assert!(
        err.invalid_input_kind() == Some(InvalidInputKind::DciStreams)
            && err.to_string().contains("DciInitAttr::streams"),
        "{err:?}"
    );
    assert_eq!(f.dc_calls(), []);
}

#[test]
fn a_pd_of_another_context_is_refused() {
    let f = Fixture::new();
    let mlx5 = f.mlx5(true).unwrap();
    let other = open(&f.mock);
    let pd = other.alloc_pd().unwrap();
    let cq = other.create_cq(8).unwrap();
    let err = mlx5.create_dci(&pd, &DciInitAttr::new(&cq)).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::OtherContext), "{err:?}");
    assert!(err.to_string().contains("Mlx5Context"), "{err}");
}

/// Asserts that `dc` was refused as `create_rc_qp` refuses `rc` (the same kind and message,
/// one checking path), with `kind`.
#[track_caller]
fn assert_refused_as_create_qp<T>(
    dc: Result<T, Error>,
    rc: Result<impl Sized, Error>,
    kind: InvalidInputKind,
) {
    let (Err(dc), Err(rc)) = (dc, rc) else { panic!("both creations should be refused") };
    assert_eq!(dc.invalid_input_kind(), Some(kind), "{dc:?}");
    assert_eq!(dc.to_string(), rc.to_string());
}

#[test]
fn dc_qps_on_a_cq_or_srq_of_another_context_are_refused_as_create_qp_refuses_them() {
    let f = Fixture::new();
    let dc = f.dc();
    let other = open(&f.mock);
    let (other_pd, other_cq) = (other.alloc_pd().unwrap(), other.create_cq(128).unwrap());
    let other_srq = other_pd.create_srq(16, 1).unwrap();
    let srq = dc.srq();
    f.mock.take_calls();

    let rc = dc.pd.create_rc_qp(&QpInitAttr::new(&other_cq));
    assert_refused_as_create_qp(
        dc.create_dci(&DciInitAttr::new(&other_cq)),
        rc,
        InvalidInputKind::OtherContext,
    );
    let dct = dc
        .mlx5
        .create_dct(&dc.pd, &DctInitAttr { srq: &srq, recv_cq: &other_cq, key: DcKey::new(1) });
    let rc = dc.pd.create_rc_qp(&QpInitAttr { srq: Some(&srq), ..QpInitAttr::new(&other_cq) });
    assert_refused_as_create_qp(dct, rc, InvalidInputKind::OtherContext);
    let rc = dc.pd.create_rc_qp(&QpInitAttr { srq: Some(&other_srq), ..QpInitAttr::new(&dc.cq) });
    assert_refused_as_create_qp(
        dc.create_dct(&other_srq, DcKey::new(1)),
        rc,
        InvalidInputKind::OtherContext,
    );
    assert_eq!(f.dc_calls(), []);
}

#[test]
fn dc_qps_on_a_cq_too_small_for_their_work_requests_are_refused_as_create_qp_refuses_them() {
    let f = Fixture::new();
    let dc = f.dc();
    let small = f.ctx.create_cq(8).unwrap();
    let srq = dc.srq();
    f.mock.take_calls();

    // A DCI's 64 sends (its receive fields ignored) on a CQ of 8.
    let dci = DciInitAttr {
        cap: QpCapabilities { max_send_wr: 64, max_recv_wr: 0, ..QpCapabilities::default() },
        ..DciInitAttr::new(&small)
    };
    let rc = dc.pd.create_rc_qp(&QpInitAttr { cap: dci.cap, ..QpInitAttr::new(&small) });
    assert_refused_as_create_qp(dc.create_dci(&dci), rc, InvalidInputKind::CqTooSmall);
    // A DCT's receives: the SRQ's 16, on a CQ of 8.
    let dct =
        dc.mlx5.create_dct(&dc.pd, &DctInitAttr { srq: &srq, recv_cq: &small, key: DcKey::new(1) });
    let no_sends = QpCapabilities { max_send_wr: 0, ..QpCapabilities::default() };
    let rc = dc.pd.create_rc_qp(&QpInitAttr {
        cap: no_sends,
        srq: Some(&srq),
        ..QpInitAttr::new(&small)
    });
    assert_refused_as_create_qp(dct, rc, InvalidInputKind::CqTooSmall);
    assert_eq!(f.dc_calls(), []);
    // Room enough, and the same objects make both.
    let fits = DciInitAttr { cap: QpCapabilities { max_send_wr: 8, ..dci.cap }, ..dci };
    drop(dc.create_dci(&fits).unwrap());
    let cq = f.ctx.create_cq(16).unwrap();
    let dct = DctInitAttr { srq: &srq, recv_cq: &cq, key: DcKey::new(1) };
    drop(dc.mlx5.create_dct(&dc.pd, &dct).unwrap());
}

// DC ready for its first ConnectX run.

impl Dc<'_> {
    /// The token of a DCT taken to RTR on `rtr` (then destroyed).
    fn dct_at_rtr(&self, rtr: &DctToRtrAttr) -> Result<DcEndpoint, Error> {
        let srq = self.srq();
        let dct = self.create_dct(&srq, DcKey::new(7))?;
        let access = AccessFlags::REMOTE_WRITE;
        let dct = dct.into_init(&ToInitAttr { port: 1, pkey_index: 0, access })?;
        let dct = dct.into_rtr(rtr)?;
        Ok(dct.endpoint(Gid::ZERO, Lid::new(0)))
    }
}

/// The attributes of the one AH that `ibv_create_ah` made, from `calls`.
fn created_ah(calls: &[Call]) -> QpAttr {
    let ahs: Vec<QpAttr> = calls
        .iter()
        .filter_map(|c| if let Call::CreateAh { attr } = c { Some(*attr) } else { None })
        .collect();
    let [ah] = ahs[..] else { panic!("one ibv_create_ah in {calls:?}") };
    ah
}

#[test]
fn dci_streams_reported_with_zero_concurrent_are_absent() {
    let f = Fixture::new();
    // libmlx5 v37+ sets the DCI_STREAMS bit whenever asked, also on a device without.
    let none = sys::mlx5dv_dci_streams_caps { max_log_num_concurent: 0, max_log_num_errored: 0 };
    mock_mlx5::configure(mock_mlx5::DeviceConfig { dci_streams: none, ..Default::default() });
    let dc = f.dc();
    assert_eq!(dc.mlx5.caps().dci_streams, None);
    f.mock.take_calls();
    let attr = DciInitAttr {
        streams: Some(DciStreams { log_concurrent: 0, log_errored: 0 }),
        ..DciInitAttr::new(&dc.cq)
    };
    let err = dc.create_dci(&attr).unwrap_err();
    let Error::Unsupported { what } = &err else { panic!("{err:?}") };
    assert!(what.contains("reports no DCI streams"), "{err}");
    assert_eq!(f.dc_calls(), [], "refused before mlx5dv_create_qp");
}

#[test]
fn dc_routes_default_to_hop_limit_255_and_carry_traffic_class_and_sl() {
    // DSCP 26, a common RoCE lossless class: traffic class 26 << 2.
    let routed = DcRoute { traffic_class: 26 << 2, sl: 3, hop_limit: 64, ..route() };
    for (route, expected) in [(route(), (255, 0, 0)), (routed, (64, 104, 3))] {
        let f = Fixture::new();
        let dc = f.dc();
        f.mock.take_calls();
        dc.dct_at_rtr(&DctToRtrAttr::from_route(&route)).unwrap();
        let rtr = f.modifies()[1].1;
        let (_dci, _peer) = dc.connect(&route, &token()).unwrap();
        let ah = created_ah(&f.mock.take_calls());
        for (what, av) in [("DCT AV", rtr), ("DCI AH", ah)] {
            assert_eq!(av.is_global, 1, "{what}");
            assert_eq!((av.hop_limit, av.traffic_class, av.sl), expected, "{what}");
        }
    }
    assert_eq!(DctToRtrAttr::new(1, Some(3), Mtu::MTU_1024), DctToRtrAttr::from_route(&route()));
}

#[test]
fn a_dci_in_error_goes_back_to_reset_and_to_rts_again() {
    let f = Fixture::new();
    let dc = f.dc();
    let (dci, peer, mr) = dc.connected();
    let qpn = dci.qp_num();
    // A WR failed: the device moved the DCI to ERROR while it is still typed Rts.
    mock_mlx5::move_to_error(dci.as_raw());
    f.mock.take_calls();
    let dci = dci.reset().unwrap();
    assert_eq!(
        f.modifies().iter().map(|m| (m.0, m.1.qp_state)).collect::<Vec<_>>(),
        [(sys::IBV_QP_STATE, sys::IBV_QPS_RESET)]
    );
    assert_eq!(mock_mlx5::state(dci.as_raw()), sys::IBV_QPS_RESET);
    let dci = dci.into_init(1, 0).unwrap().into_rtr(&DciToRtrAttr { path_mtu: Mtu::MTU_1024 });
    let dci = dci.unwrap().into_rts(&ToRtsAttr::new(Psn::new(0).unwrap())).unwrap();
    assert_eq!((dci.qp_num(), mock_mlx5::state(dci.as_raw())), (qpn, sys::IBV_QPS_RTS));
    post_send(&dci, &peer, 1, &mr.sge(0..8).unwrap()).unwrap();
}

#[test]
fn renew_dci_resets_or_where_the_kernel_refuses_recreates_the_dci() {
    for dci_reset in [true, false] {
        let f = Fixture::new();
        mock_mlx5::configure(mock_mlx5::DeviceConfig { dci_reset, ..Default::default() });
        let dc = f.dc();
        let (dci, _peer) = dc.connect(&route(), &token()).unwrap();
        let old_qpn = dci.qp_num();
        mock_mlx5::move_to_error(dci.as_raw());
        if !dci_reset {
            // An older kernel: RESET only from RESET.
            let refused = dc.connect(&route(), &token()).unwrap().0;
            let err = refused.reset().unwrap_err();
            assert_verb_error(&err, "ibv_modify_qp (DCI →RESET)", libc::EINVAL, &[]);
        }
        f.mock.take_calls();
        let renewed = dc.mlx5.renew_dci(dci, &DciInitAttr::new(&dc.cq)).unwrap();
        let destroyed = f.mock.take_calls().contains(&Call::DestroyQp);
        assert_eq!(mock_mlx5::state(renewed.as_raw()), sys::IBV_QPS_RESET);
        // Reset in place keeps the QP; recreated, the old one is destroyed and the number new.
        assert_eq!(renewed.qp_num() == old_qpn, dci_reset, "dci_reset {dci_reset}");
        assert_eq!(destroyed, !dci_reset, "dci_reset {dci_reset}");
    }
}

#[test]
fn a_dci_stream_is_reset_through_the_optional_symbol() {
    let streams = Some(DciStreams { log_concurrent: 2, log_errored: 1 });
    // (library, DCI streams, stream id, expected outcome)
    let cases: [(&'static rdma_verbs_sys::mlx5::Mlx5, _, u16, Result<(), &str>); 4] = [
        (mock_mlx5::library(true), streams, 3, Ok(())),
        (mock_mlx5::library(true), streams, 4, Err("EINVAL")),
        (mock_mlx5::library(true), None, 0, Err("created without streams")),
        (mock_mlx5::library_without_stream_reset(), streams, 0, Err("rdma-core v37+")),
    ];
    for (lib, streams, id, expected) in cases {
        let f = Fixture::new();
        let dc = f.dc_with(lib);
        let attr = DciInitAttr { streams, ..DciInitAttr::new(&dc.cq) };
        let (dci, _peer) = dc.connect_with(&attr, &route(), &token()).unwrap();
        f.mock.take_calls();
        let got = dci.reset_stream(id);
        let calls = f.dc_calls();
        match (expected, got) {
            (Ok(()), Ok(())) => {
                assert_eq!(calls, [Mlx5Call::DciStreamIdReset { stream_id: id }]);
            }
            (Err("EINVAL"), Err(e)) => {
                assert_verb_error(&e, "mlx5dv_dci_stream_id_reset", libc::EINVAL, &[]);
            }
            (Err(text), Err(e)) => {
                assert!(e.to_string().contains(text), "{e}");
                assert_eq!(calls, [], "refused before any call");
            }
            (expected, got) => panic!("stream {id}: expected {expected:?}, got {got:?}"),
        }
    }
}

#[test]
fn the_dci_read_depth_is_the_smaller_of_the_dc_limit_and_the_asked_one() {
    // (DC limit reported, asked, set at RTS); the RC fallback is the mock's 16.
    let cases = [
        (Some(mock_mlx5::DC_RD_ATOM), None, 4),
        (Some(mock_mlx5::DC_RD_ATOM), Some(2), 2),
        (Some(mock_mlx5::DC_RD_ATOM), Some(9), 4),
        (None, None, 16),
        (None, Some(8), 8),
    ];
    for (dc_rd_atom, asked, expected) in cases {
        let f = Fixture::new();
        mock_mlx5::configure(mock_mlx5::DeviceConfig { dc_rd_atom, ..Default::default() });
        let dc = f.dc();
        let caps = dc.mlx5.caps();
        assert_eq!(caps.dc_rd_atomic_reported, dc_rd_atom.is_some());
        assert_eq!(u64::from(caps.dci_max_rd_atomic), dc_rd_atom.map_or(16, |(_, init)| init));
        f.mock.take_calls();
        let attr = DciInitAttr { max_rd_atomic: asked, ..DciInitAttr::new(&dc.cq) };
        let connected = dc.connect_with(&attr, &route(), &token()).unwrap();
        let rts = f.modifies()[2].1;
        assert_eq!(rts.max_rd_atomic, expected, "limit {dc_rd_atom:?}, asked {asked:?}");
        drop(connected);
    }
    // Above the DC limit the kernel refuses the RTS transition.
    let f = Fixture::new();
    let dc = f.dc();
    let dci = dc.create_dci(&DciInitAttr::new(&dc.cq)).unwrap().into_init(1, 0).unwrap();
    let dci = dci.into_rtr(&DciToRtrAttr { path_mtu: Mtu::MTU_1024 }).unwrap();
    let err = dci.into_rts(&ToRtsAttr { max_rd_atomic: 5, ..ToRtsAttr::new(Psn::new(0).unwrap()) });
    let rts = "ibv_modify_qp (DCI RTR→RTS)";
    // (The generic EINVAL hint of an RTS transition names iWARP; it does not know DC.)
    assert_verb_error(&err.unwrap_err(), rts, libc::EINVAL, &["rdma_cm"]);
}

#[test]
fn the_dc_version_comes_from_the_part_id_and_a_mixed_pair_is_refused_before_any_qp() {
    for (part, version) in [
        (4113, DcVersion::V1),  // Connect-IB
        (4115, DcVersion::V1),  // ConnectX-4
        (4117, DcVersion::V1),  // ConnectX-4 Lx
        (4118, DcVersion::V1),  // ConnectX-4 Lx VF
        (4119, DcVersion::V2),  // ConnectX-5
        (4125, DcVersion::V2),  // ConnectX-6 Dx
        (41686, DcVersion::V2), // BlueField-2
    ] {
        assert_eq!(DcVersion::from_vendor_part_id(part), version, "part {part}");
    }
    let f = Fixture::new();
    mock_mlx5::configure(mock_mlx5::DeviceConfig { vendor_part_id: 4117, ..Default::default() });
    let dc = f.dc();
    assert_eq!(dc.mlx5.caps().dc_version, DcVersion::V1);
    // Our DCT's token says v1.
    let ours = dc.dct_at_rtr(&DctToRtrAttr::from_route(&route())).unwrap();
    assert_eq!(ours.dc_version(), DcVersion::V1);
    assert!(ours.to_string().ends_with(":1"), "{ours}");
    f.mock.take_calls();
    let v2_peer = token();
    let err = dc.connect(&route(), &v2_peer).unwrap_err();
    let Error::Unsupported { what } = &err else { panic!("{err:?}") };
    assert!(what.contains("DC v1") && what.contains("DC v2"), "{err}");
    assert!(what.contains("do not interoperate"), "{err}");
    assert_eq!(f.dc_calls(), [], "no AH, no QP");
}

#[test]
fn a_device_without_dc_is_unsupported_naming_it() {
    let f = Fixture::new();
    mock_mlx5::configure(mock_mlx5::DeviceConfig { dc: false, ..Default::default() });
    let dc = f.dc();
    let srq = dc.srq();
    let dct = dc.create_dct(&srq, DcKey::new(1));
    let dci = dc.create_dci(&DciInitAttr::new(&dc.cq));
    for err in [dct.unwrap_err(), dci.unwrap_err()] {
        let Error::Unsupported { what } = &err else { panic!("{err:?}") };
        assert!(what.contains("on device mock0"), "{err}");
        assert!(what.contains("EOPNOTSUPP"), "{err}");
        assert!(what.contains("Connect-IB, ConnectX-4 or later"), "{err}");
        assert!(what.contains("DC enabled"), "{err}");
    }
}

#[test]
fn a_dct_refuses_every_transition_but_reset_init_rtr() {
    let f = Fixture::new();
    let dc = f.dc();
    let access = AccessFlags::REMOTE_WRITE;
    let srq = dc.srq();
    let dct = dc.create_dct(&srq, DcKey::new(1)).unwrap();
    let init = dct.into_init(&ToInitAttr { port: 1, pkey_index: 0, access }).unwrap();
    let modify = |qp: *mut sys::ibv_qp, state| {
        let mut attr = sys::ibv_qp_attr { qp_state: state, ..Default::default() };
        let fns = &mock_mlx5::ibverbs_library().fns;
        // SAFETY: a live DC QP of this mock and a valid attribute struct.
        unsafe { (fns.ibv_modify_qp)(qp, &mut attr, sys::IBV_QP_STATE as i32) }
    };
    for state in [sys::IBV_QPS_RESET, sys::IBV_QPS_ERR] {
        assert_eq!(modify(init.as_raw(), state), libc::EINVAL, "INIT → {state}");
    }
    let rtr = init.into_rtr(&DctToRtrAttr::from_route(&route())).unwrap();
    for state in [sys::IBV_QPS_RESET, sys::IBV_QPS_ERR, sys::IBV_QPS_RTS] {
        assert_eq!(modify(rtr.as_raw(), state), libc::EINVAL, "RTR → {state}");
    }
    assert_eq!(mock_mlx5::state(rtr.as_raw()), sys::IBV_QPS_RTR);
}

#[test]
fn dc_needs_a_grh_on_roce_and_none_on_infiniband() {
    // (link layer, GRH, whether DCT RTR and the DCI's AH succeed)
    let cases = [
        (sys::IBV_LINK_LAYER_ETHERNET, Some(SGID_INDEX), true),
        (sys::IBV_LINK_LAYER_ETHERNET, None, false),
        (sys::IBV_LINK_LAYER_INFINIBAND, None, true),
        (sys::IBV_LINK_LAYER_INFINIBAND, Some(SGID_INDEX), true),
    ];
    for (link_layer, sgid_index, ok) in cases {
        let f = Fixture::new();
        mock_mlx5::configure(mock_mlx5::DeviceConfig { link_layer, ..Default::default() });
        let dc = f.dc();
        let route = DcRoute { sgid_index, ..route() };
        let dct = dc.dct_at_rtr(&DctToRtrAttr::from_route(&route));
        let mr = dc.mr();
        // An InfiniBand token: a LID, no GID.
        let ib_peer = DcEndpoint::new(
            Gid::ZERO,
            Lid::new(0x12),
            Qpn::new(0x77).unwrap(),
            DcKey::new(1),
            DcVersion::V2,
        );
        let peer_token = if sgid_index.is_some() { token() } else { ib_peer };
        f.mock.take_calls();
        let dci = dc.connect(&route, &peer_token);
        let case = format!("link layer {link_layer}, GRH {sgid_index:?}");
        if !ok {
            let rtr = "ibv_modify_qp (DCT INIT→RTR)";
            assert_verb_error(&dct.unwrap_err(), rtr, libc::EINVAL, &["global route"]);
            assert_verb_error(&dci.unwrap_err(), "ibv_create_ah", libc::EINVAL, &[]);
            continue;
        }
        dct.unwrap();
        let (dci, peer) = dci.unwrap();
        let ah = created_ah(&f.mock.take_calls());
        assert_eq!((ah.is_global, ah.dlid), (u8::from(sgid_index.is_some()), 0x12), "{case}");
        post_send(&dci, &peer, 1, &mr.sge(0..8).unwrap()).unwrap();
    }
}

/// A DCI whose destroy fails is moved to RESET before it is leaked, as any QP: the work it
/// held must not outlive the memory dropped after it.
#[test]
fn a_dci_that_fails_to_be_destroyed_is_reset_before_it_is_leaked() {
    let f = Fixture::new();
    let dc = f.dc();
    let (dci, _peer) = dc.connect(&route(), &token()).unwrap();
    let raw = dci.as_raw();
    f.mock.take_calls();
    f.mock.fail(Verb::DestroyQp, libc::EBUSY);
    let err = dci.destroy().unwrap_err();
    assert_verb_error(&err, "ibv_destroy_qp", libc::EBUSY, &[]);
    assert_eq!(mock_mlx5::state(raw), sys::IBV_QPS_RESET);
    assert_eq!(f.modifies().len(), 1, "one modify, to RESET");
}

/// Polls the one completion `cq` holds.
fn one_completion(cq: &CompletionQueue<'_>) -> WorkCompletion {
    let mut wcs = [WorkCompletion::EMPTY];
    assert_eq!(cq.poll(&mut wcs).unwrap().len(), 1, "a completion");
    let [wc] = wcs;
    wc
}

#[test]
fn a_dci_writes_and_reads_a_dct_s_region_and_is_refused_what_its_key_or_rkey_does_not_reach() {
    let f = Fixture::new();
    let dc = f.dc();
    let srq = dc.srq();
    let key = DcKey::new(0xffee_ddcc);
    let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
    let dct = dc.create_dct(&srq, key).unwrap();
    let dct = dct.into_init(&ToInitAttr { port: 1, pkey_index: 0, access }).unwrap();
    let dct = dct.into_rtr(&DctToRtrAttr::from_route(&route())).unwrap();
    let mut window =
        dc.pd.register_remote_writable(4096, AccessFlags::LOCAL_WRITE | access).unwrap();
    let gid = f.ctx.gid(1, SGID_INDEX).unwrap().gid;
    let endpoint = dct.endpoint(gid, Lid::new(0));
    let (dci, peer) = dc.connect(&route(), &endpoint).unwrap();
    let mut local = dc.pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    let bytes: Vec<u8> = (0..100u8).collect();
    local.as_mut_slice()[..100].copy_from_slice(&bytes);
    let post = |dci: &Dci<'_, Rts>, wr: DcWr<'_>| {
        // SAFETY: `local` and `window` outlive the DCIs; each completion is polled before the
        // memory is read.
        unsafe { dci.post_send_wrs(&[wr.flags(SendFlags::SIGNALED)]).unwrap() }
    };

    let at_1000 = window.remote(1000..1100).unwrap();
    let sge = local.sge(..100).unwrap();
    post(&dci, DcWr::rdma_write(1, std::slice::from_ref(&sge), at_1000, peer.destination()));
    let wc = one_completion(&dc.cq);
    assert!(wc.is_success() && wc.opcode() == WcOpcode::RDMA_WRITE, "{wc}");
    assert_eq!((wc.wr_id(), wc.byte_len()), (1, 100));
    let mut landed = [0; 100];
    window.read(1000, &mut landed).unwrap();
    assert_eq!(landed[..], bytes[..]);

    window.write(3000, &[7; 50]).unwrap();
    let into = local.sge(2000..2050).unwrap();
    let at_3000 = window.remote(3000..3050).unwrap();
    post(&dci, DcWr::rdma_read(2, std::slice::from_ref(&into), at_3000, peer.destination()));
    let wc = one_completion(&dc.cq);
    assert!(wc.is_success() && wc.opcode() == WcOpcode::RDMA_READ, "{wc}");
    assert_eq!(local.as_slice()[2000..2050], [7; 50]);

    // Past the window's end: a remote access error, and the DCI is in ERROR.
    let past = RemoteAddr { addr: at_1000.addr + 3050, ..at_1000 };
    post(&dci, DcWr::rdma_write(3, std::slice::from_ref(&sge), past, peer.destination()));
    assert_eq!(one_completion(&dc.cq).status(), WcStatus::REM_ACCESS_ERR);
    assert_eq!(mock_mlx5::state(dci.as_raw()), sys::IBV_QPS_ERR);

    // Another DC key: the DCT drops the packets, the DCI's retries run out.
    let version = dc.mlx5.caps().dc_version;
    let wrong = DcEndpoint::new(gid, Lid::new(0), dct.dctn(), DcKey::new(1), version);
    let (dci, peer) = dc.connect(&route(), &wrong).unwrap();
    post(&dci, DcWr::rdma_write(4, std::slice::from_ref(&sge), at_1000, peer.destination()));
    assert_eq!(one_completion(&dc.cq).status(), WcStatus::RETRY_EXC_ERR);
    window.read(1000, &mut landed).unwrap();
    assert_eq!(landed[..], bytes[..], "nothing else was written");
}
