//! DC initiators (DCI): one send queue that reaches any DCT, each work request addressed on
//! its own.

use std::marker::PhantomData;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::ah::{AddressVector, GlobalRoute};
use crate::cq::CompletionQueue;
use crate::endpoint::{Lid, Psn, Qpn};
use crate::error::{check_errno, check_ptr, Error, InvalidInputKind, Result, TransitionError};
use crate::gid::Gid;
use crate::pd::ProtectionDomain;
use crate::port::Mtu;
use crate::qp::{Init, QpCapabilities, QpInitAttr, QpState, Reset, Rtr, Rts, ToRtsAttr};
use crate::try_twin::try_twin;

use super::context::{unsupported, Mlx5Context};
use super::endpoint::DcEndpoint;
use super::qp::{dv_attr, DcQp, DcTypestate};
use super::wr::DcPeer;

mod post;

/// What a DCI is created with. It has no receive queue: receives go to DCTs.
#[derive(Clone, Copy, Debug)]
pub struct DciInitAttr<'res> {
    /// The CQ for send completions (also given as receive CQ, which a DCI never uses).
    pub send_cq: &'res CompletionQueue<'res>,
    /// Send queue sizes (the receive fields are ignored).
    pub cap: QpCapabilities,
    /// Whether every WR completes; otherwise only [`SendFlags::SIGNALED`](crate::SendFlags::SIGNALED) ones.
    pub sq_sig_all: bool,
    /// DCI streams, when wanted (see [`DcCaps::dci_streams`](super::DcCaps::dci_streams)).
    pub streams: Option<DciStreams>,
    /// The most RDMA READs (and atomics) outstanding at once, set at RTS by
    /// [`Mlx5Context::connect_dci`]: `None` for the device's DC limit
    /// ([`DcCaps::dci_max_rd_atomic`](super::DcCaps::dci_max_rd_atomic)); a larger value is
    /// lowered to that limit. A DCI with 1 serves one READ at a time.
    pub max_rd_atomic: Option<u8>,
}

impl<'res> DciInitAttr<'res> {
    /// Sends on `cq`, 64 send WRs of one SGE, selective signaling, no streams, as many
    /// outstanding RDMA READs as the device allows. `cq` needs room for the 64 completions
    /// ([`Mlx5Context::create_dci`] refuses a smaller one).
    #[must_use]
    pub fn new(cq: &'res CompletionQueue<'res>) -> Self {
        DciInitAttr {
            send_cq: cq,
            cap: QpCapabilities { max_send_wr: 64, max_recv_wr: 0, ..QpCapabilities::default() },
            sq_sig_all: false,
            streams: None,
            max_rd_atomic: None,
        }
    }
}

/// A DCI stream configuration (`struct mlx5dv_dci_streams`), as base-2 logarithms: WRs on
/// different streams may proceed concurrently to different targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DciStreams {
    /// log₂ of the concurrent streams.
    pub log_concurrent: u8,
    /// log₂ of the streams that may be in error before the DCI as a whole is.
    pub log_errored: u8,
}

/// INIT → RTR of a DCI (`IBV_QP_STATE | PATH_MTU`).
///
/// No AV: a DCI has no fixed peer, every WR names its own (pyverbs' DC masks). perftest
/// also passes `IBV_QP_AV` with its first peer's route, which newer mlx5_ib kernels accept as
/// optional but older ones refuse (their DCI check allows only `PKEY_INDEX` beside
/// `PATH_MTU`); `PATH_MTU` alone suits both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DciToRtrAttr {
    /// The path MTU.
    pub path_mtu: Mtu,
}

/// The local side of a DC route, for [`Mlx5Context::connect_dci`], [`DcPeer::new`] and
/// [`DctToRtrAttr::from_route`](super::DctToRtrAttr::from_route): our port, the source GID index
/// for the GRH (RoCE; `None` on InfiniBand without GRH), the path MTU, and the class of
/// service of the packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DcRoute {
    /// Our port, from 1.
    pub port: u8,
    /// Our source GID index, when a GRH is used.
    pub sgid_index: Option<u8>,
    /// The path MTU.
    pub path_mtu: Mtu,
    /// The GRH hop limit (IPv6 hop limit / IPv4 TTL on RoCE v2): how many routers a packet
    /// may cross. [`DcRoute::new`] sets 255, as perftest and UCX do; 1 drops every packet
    /// past the first router.
    pub hop_limit: u8,
    /// The GRH traffic class (on RoCE v2 the IP DSCP and ECN bits: DSCP = class >> 2). A
    /// DSCP-based lossless fabric maps only its configured DSCP to the lossless priority:
    /// with 0, DC traffic rides the lossy class there. 0 by [`DcRoute::new`].
    pub traffic_class: u8,
    /// The service level (InfiniBand SL; on RoCE the kernel may map it to a VLAN priority).
    /// 0 by [`DcRoute::new`].
    pub sl: u8,
}

impl DcRoute {
    /// `port`, `sgid_index` and `path_mtu`, with hop limit 255, traffic class 0 and SL 0.
    #[must_use]
    pub fn new(port: u8, sgid_index: Option<u8>, path_mtu: Mtu) -> Self {
        DcRoute { port, sgid_index, path_mtu, hop_limit: 255, traffic_class: 0, sl: 0 }
    }

    /// The AV of this route to `dlid`, with a GRH to `dgid` when it has a source GID index.
    pub(super) fn address_vector(&self, dlid: Lid, dgid: Gid) -> AddressVector {
        let grh = self.sgid_index.map(|sgid_index| GlobalRoute {
            dgid,
            sgid_index,
            hop_limit: self.hop_limit,
            flow_label: 0,
            traffic_class: self.traffic_class,
        });
        AddressVector { sl: self.sl, grh, ..AddressVector::new(self.port, dlid) }
    }
}

/// A DC initiator (`mlx5dv_create_qp(3)` with `MLX5DV_DCTYPE_DCI`) in state `S`. It posts
/// only in RTS and only through the extended work request API ([`Dci::post_send_wrs`]).
///
/// ```compile_fail,E0599
/// # use rdma_verbs::*;
/// # use rdma_verbs::mlx5::*;
/// # fn f(dci: Dci<'_, Rtr>, wr: &DcWr<'_>) -> Result<()> {
/// // error: no method `post_send_wrs` on `Dci<Rtr>`
/// unsafe { dci.post_send_wrs(std::slice::from_ref(wr))? };
/// # Ok(()) }
/// ```
#[must_use = "the DCI is destroyed when dropped"]
pub struct Dci<'res, S: QpState> {
    qp: DcQp<'res>,
    qp_ex: NonNull<sys::ibv_qp_ex>,
    mqp: NonNull<sys::mlx5dv_qp_ex>,
    lib: &'static sys::Mlx5,
    streams: bool,
    _state: PhantomData<S>,
}

// SAFETY: the handles are immutable after creation; the provider locks the send queue from
// `ibv_wr_start` to `ibv_wr_complete`/`ibv_wr_abort`, and `post_send_wrs` writes the `ibv_qp_ex`
// fields only inside that section.
unsafe impl<S: QpState> Send for Dci<'_, S> {}
// SAFETY: as above.
unsafe impl<S: QpState> Sync for Dci<'_, S> {}

/// The attribute mask of a DCI's RESET → INIT.
pub(super) const DCI_INIT_MASK: u32 = sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT;
/// The attribute mask of a DCI's INIT → RTR.
pub(super) const DCI_RTR_MASK: u32 = sys::IBV_QP_PATH_MTU;
/// The attribute mask of a DCI's RTR → RTS.
pub(super) const DCI_RTS_MASK: u32 = sys::IBV_QP_TIMEOUT
    | sys::IBV_QP_RETRY_CNT
    | sys::IBV_QP_RNR_RETRY
    | sys::IBV_QP_SQ_PSN
    | sys::IBV_QP_MAX_QP_RD_ATOMIC;

/// The operations a DCI is created for (`IBV_QP_EX_WITH_*`).
const SEND_OPS: u32 =
    sys::IBV_QP_EX_WITH_SEND | sys::IBV_QP_EX_WITH_RDMA_WRITE | sys::IBV_QP_EX_WITH_RDMA_READ;

impl<'ctx> Mlx5Context<'ctx> {
    /// `mlx5dv_create_qp(3)`—A DC initiator on `pd`: `IBV_QPT_DRIVER` with
    /// `IBV_QP_INIT_ATTR_SEND_OPS_FLAGS` (SEND, RDMA WRITE, RDMA READ),
    /// `MLX5DV_QP_INIT_ATTR_MASK_DC` with `MLX5DV_DCTYPE_DCI`, and DCI streams when asked.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] when streams are asked of a device that reports none, when
    /// `mlx5dv_create_qp` answers `EOPNOTSUPP` (no DC on the device or its firmware; the
    /// message names the device), or when libibverbs lacks `ibv_qp_to_qp_ex` (rdma-core
    /// v24+); [`Error::InvalidInput`] for more
    /// streams than [`DcCaps::dci_streams`](super::DcCaps::dci_streams) allows, a PD of
    /// another context, and as [`ProtectionDomain::create_qp`] refuses a QP on the CQ: one of
    /// another device context, or with room for fewer completions than `cap.max_send_wr`;
    /// [`Error::Verb`] from `mlx5dv_create_qp`.
    #[doc(alias = "mlx5dv_create_qp")]
    pub fn create_dci<'res>(
        &self,
        pd: &'res ProtectionDomain<'res>,
        attr: &DciInitAttr<'res>,
    ) -> Result<Dci<'res, Reset>> {
        let cap = QpCapabilities { max_recv_wr: 0, max_recv_sge: 0, ..attr.cap };
        let objects =
            QpInitAttr { cap, sq_sig_all: attr.sq_sig_all, ..QpInitAttr::new(attr.send_cq) };
        let init = sys::ibv_qp_init_attr_ex {
            qp_type: sys::IBV_QPT_DRIVER,
            comp_mask: sys::IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
            send_ops_flags: u64::from(SEND_OPS),
            ..Default::default()
        };
        let mut dv = dv_attr(sys::MLX5DV_DCTYPE_DCI);
        if let Some(streams) = attr.streams {
            self.check_streams(streams)?;
            dv.comp_mask |= u64::from(sys::MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS);
            dv.dc_init_attr.__bindgen_anon_1.dci_streams = sys::mlx5dv_dci_streams {
                log_num_concurent: streams.log_concurrent,
                log_num_errored: streams.log_errored,
            };
        }
        let qp = DcQp::create(self, pd, &objects, init, dv)?;
        // SAFETY: a live QP of the library `fns` came from, created with send ops.
        let qp_ex = unsafe { sys::inline::ibv_qp_to_qp_ex(qp.fns(), qp.as_raw()) };
        let Some(qp_ex) = NonNull::new(qp_ex) else {
            return Err(Error::Unsupported { what: "ibv_qp_to_qp_ex (rdma-core v24+)" });
        };
        // SAFETY: `qp_ex` belongs to a QP that this mlx5 context's `mlx5dv_create_qp` made
        // (the gate passed), so libmlx5's `container_of` finds its `mlx5dv_qp_ex`.
        let mqp = unsafe { (self.library().fns.mlx5dv_qp_ex_from_ibv_qp_ex)(qp_ex.as_ptr()) };
        let mqp = check_ptr(mqp, "mlx5dv_qp_ex_from_ibv_qp_ex")?;
        Ok(Dci {
            qp,
            qp_ex,
            mqp,
            lib: self.library(),
            streams: attr.streams.is_some(),
            _state: PhantomData,
        })
    }

    fn check_streams(&self, asked: DciStreams) -> Result<()> {
        let Some(caps) = self.caps().dci_streams else {
            let why = "the device or its libmlx5 (rdma-core v37+) reports no DCI streams";
            return Err(unsupported(self.context().name(), why));
        };
        if asked.log_concurrent > caps.max_log_concurrent
            || asked.log_errored > caps.max_log_errored
        {
            return Err(Error::invalid(
                InvalidInputKind::DciStreams,
                format!(
                    "DCI streams 2^{} concurrent / 2^{} errored exceed {}'s 2^{} / 2^{}: ask for \
                     less",
                    asked.log_concurrent,
                    asked.log_errored,
                    self.context().name(),
                    caps.max_log_concurrent,
                    caps.max_log_errored
                ),
            ));
        }
        Ok(())
    }

    /// A DCI on `pd` taken straight to RTS (`route.port`, P_Key index 0, `route.path_mtu`,
    /// ibv_rc_pingpong's RTS values with send PSN 0 and
    /// [`Mlx5Context::dci_max_rd_atomic`]`(attr.max_rd_atomic)` outstanding READs), and the
    /// destination `peer` describes, with its address handle made from the token and `route`:
    /// what a client needs to post to a DCT whose token it received.
    ///
    /// # Errors
    ///
    /// As [`Mlx5Context::create_dci`], the transitions, and [`DcPeer::new`] (which is called
    /// first, so a peer of the other DC version is refused before any QP is made).
    pub fn connect_dci<'res>(
        &self,
        pd: &'res ProtectionDomain<'res>,
        attr: &DciInitAttr<'res>,
        route: &DcRoute,
        peer: &DcEndpoint,
    ) -> Result<(Dci<'res, Rts>, DcPeer<'res>)> {
        let peer = DcPeer::new(self, pd, peer, route)?;
        let rts = ToRtsAttr {
            max_rd_atomic: self.dci_max_rd_atomic(attr.max_rd_atomic),
            ..ToRtsAttr::new(Psn::from_low_bits(0))
        };
        let dci = self
            .create_dci(pd, attr)?
            .into_init(route.port, 0)?
            .into_rtr(&DciToRtrAttr { path_mtu: route.path_mtu })?
            .into_rts(&rts)?;
        Ok((dci, peer))
    }

    /// The outstanding RDMA READs (and atomics) to give a DCI at RTS (`max_rd_atomic`) when
    /// `asked` is wanted: the smaller of `asked` and the device's DC limit
    /// ([`DcCaps::dci_max_rd_atomic`](super::DcCaps::dci_max_rd_atomic)), the limit for
    /// `None`, and at least 1.
    pub fn dci_max_rd_atomic(&self, asked: Option<u8>) -> u8 {
        let limit = u8::try_from(self.caps().dci_max_rd_atomic).unwrap_or(u8::MAX);
        asked.map_or(limit, |asked| asked.min(limit)).max(1)
    }

    /// A DCI in RESET from `dci`, in whatever state the device holds it (after an error
    /// completion it is in ERROR, and every later WR would flush): `ibv_modify_qp(3)` to
    /// RESET, which mainline kernels accept from any state; where the kernel refuses it
    /// (older mlx5_ib), `dci` is destroyed and a new DCI created with `attr`, which has
    /// another QP number. Either way, bring it to RTS again before posting.
    ///
    /// # Errors
    ///
    /// As [`Mlx5Context::create_dci`], when the reset was refused and the new DCI cannot
    /// be made (the old one is then destroyed, or leaked as its drop logs).
    pub fn renew_dci<'res, S: QpState>(
        &self,
        dci: Dci<'res, S>,
        attr: &DciInitAttr<'res>,
    ) -> Result<Dci<'res, Reset>> {
        match dci.try_reset() {
            Ok(dci) => Ok(dci),
            Err(refused) => {
                log::debug!("DCI reset refused ({}): recreating the DCI", refused.error);
                let pd = refused.qp.pd();
                drop(refused.qp);
                self.create_dci(pd, attr)
            }
        }
    }
}

impl<'res, S: QpState> Dci<'res, S> {
    /// The DCI's QP number.
    pub fn qp_num(&self) -> Qpn {
        self.qp.qp_num()
    }

    /// The protection domain.
    pub fn pd(&self) -> &'res ProtectionDomain<'res> {
        self.qp.pd()
    }

    /// The raw QP pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_qp {
        self.qp.as_raw()
    }

    /// Whether it was created with DCI streams.
    pub fn has_streams(&self) -> bool {
        self.streams
    }

    /// `ibv_destroy_qp(3)`—Destroys the DCI, reporting failure (dropping logs instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_destroy_qp`; the DCI is then leaked.
    pub fn destroy(self) -> Result<()> {
        self.qp.destroy()
    }

    try_twin! {
        /// `ibv_modify_qp(3)` to RESET (`IBV_QP_STATE` only), from whatever state the device
        /// holds the DCI in: the way back after an error completion moved it to ERROR. Mainline
        /// mlx5_ib accepts it from any state; older kernels refuse it (`EINVAL`) — then destroy
        /// the DCI and create another, or let [`Mlx5Context::renew_dci`] do either.
        ///
        /// # Errors
        ///
        /// The [`Error::Verb`] of `ibv_modify_qp`; the DCI is dropped.
        /// [`try_reset`](Self::try_reset) hands it back.
        pub fn reset / try_reset(self) -> Result<Dci<'res, Reset>, TransitionError<Self>>
        try:
        /// [`reset`](Self::reset), handing the DCI back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] with the DCI and the [`Error::Verb`] of `ibv_modify_qp`.
        {
            let raw = sys::ibv_qp_attr::default();
            self.transition(raw, 0, sys::IBV_QPS_RESET, "ibv_modify_qp (DCI →RESET)")
        }
    }
}

impl<'res, S: QpState> DcTypestate for Dci<'res, S> {
    type In<N: QpState> = Dci<'res, N>;

    fn dc_qp(&self) -> &DcQp<'_> {
        &self.qp
    }

    fn into_state<N: QpState>(self) -> Dci<'res, N> {
        let Dci { qp, qp_ex, mqp, lib, streams, _state } = self;
        Dci { qp, qp_ex, mqp, lib, streams, _state: PhantomData }
    }
}

impl<'res> Dci<'res, Reset> {
    try_twin! {
        /// RESET → INIT (`IBV_QP_STATE | PKEY_INDEX | PORT`).
        ///
        /// # Errors
        ///
        /// The [`Error::Verb`] of `ibv_modify_qp`; the DCI is dropped.
        /// [`try_into_init`](Self::try_into_init) hands it back.
        pub fn into_init / try_into_init(
            self,
            port: u8,
            pkey_index: u16,
        ) -> Result<Dci<'res, Init>, TransitionError<Self>>
        try:
        /// [`into_init`](Self::into_init), handing the DCI back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] with the DCI and the [`Error::Verb`] of `ibv_modify_qp`.
        {
            let raw = sys::ibv_qp_attr { pkey_index, port_num: port, ..Default::default() };
            let verb = "ibv_modify_qp (DCI RESET→INIT)";
            self.transition(raw, DCI_INIT_MASK, sys::IBV_QPS_INIT, verb)
        }
    }
}

impl<'res> Dci<'res, Init> {
    try_twin! {
        /// INIT → RTR (`IBV_QP_STATE | PATH_MTU`): no peer data.
        ///
        /// # Errors
        ///
        /// The [`Error::Verb`] of `ibv_modify_qp`; the DCI is dropped.
        /// [`try_into_rtr`](Self::try_into_rtr) hands it back.
        pub fn into_rtr / try_into_rtr(
            self,
            attr: &DciToRtrAttr,
        ) -> Result<Dci<'res, Rtr>, TransitionError<Self>>
        try:
        /// [`into_rtr`](Self::into_rtr), handing the DCI back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] with the DCI and the [`Error::Verb`] of `ibv_modify_qp`.
        {
            let raw = sys::ibv_qp_attr { path_mtu: attr.path_mtu.0, ..Default::default() };
            self.transition(raw, DCI_RTR_MASK, sys::IBV_QPS_RTR, "ibv_modify_qp (DCI INIT→RTR)")
        }
    }
}

impl<'res> Dci<'res, Rtr> {
    try_twin! {
        /// RTR → RTS (`IBV_QP_STATE | TIMEOUT | RETRY_CNT | RNR_RETRY | SQ_PSN |
        /// MAX_QP_RD_ATOMIC`).
        ///
        /// # Errors
        ///
        /// The [`Error::Verb`] of `ibv_modify_qp`; the DCI is dropped.
        /// [`try_into_rts`](Self::try_into_rts) hands it back.
        pub fn into_rts / try_into_rts(
            self,
            attr: &ToRtsAttr,
        ) -> Result<Dci<'res, Rts>, TransitionError<Self>>
        try:
        /// [`into_rts`](Self::into_rts), handing the DCI back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] with the DCI and the [`Error::Verb`] of `ibv_modify_qp`.
        {
            let verb = "ibv_modify_qp (DCI RTR→RTS)";
            self.transition(attr.raw(), DCI_RTS_MASK, sys::IBV_QPS_RTS, verb)
        }
    }
}

impl Dci<'_, Rts> {
    /// `mlx5dv_dci_stream_id_reset(3)`—Takes DCI stream `stream_id` out of error, so that
    /// its later WRs run again (the DCI stays in RTS while fewer than
    /// 2^[`DciStreams::log_errored`] streams are in error).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] on a DCI without streams, before any call;
    /// [`Error::Unsupported`] when libmlx5 lacks the function (`MLX5_1.21`, rdma-core v37);
    /// [`Error::Verb`] from it (`EINVAL` for a stream the DCI does not have).
    #[doc(alias = "mlx5dv_dci_stream_id_reset")]
    pub fn reset_stream(&self, stream_id: u16) -> Result<()> {
        if !self.streams {
            return Err(Error::invalid(
                InvalidInputKind::DciStreams,
                "reset_stream on a DCI created without streams: set DciInitAttr::streams".into(),
            ));
        }
        let Some(reset) = self.lib.fns.mlx5dv_dci_stream_id_reset else {
            return Err(Error::Unsupported {
                what: "mlx5dv_dci_stream_id_reset (libmlx5 of rdma-core v37+)",
            });
        };
        // SAFETY: a live DCI with streams, created by this library's `mlx5dv_create_qp`.
        let ret = unsafe { reset(self.as_raw(), stream_id) };
        check_errno(ret, "mlx5dv_dci_stream_id_reset")
    }
}

impl<S: QpState> std::fmt::Debug for Dci<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dci")
            .field("qpn", &format_args!("{:#x}", self.qp.qp_num().get()))
            .field("state", &S::NAME)
            .field("streams", &self.streams)
            .finish()
    }
}
