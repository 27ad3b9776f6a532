//! DC targets (DCT): the receiving end, fed by a shared receive queue.

use std::marker::PhantomData;

use rdma_verbs_sys as sys;

use crate::ah::AddressVector;
use crate::cq::CompletionQueue;
use crate::endpoint::{Lid, Qpn};
use crate::error::{Result, TransitionError};
use crate::gid::Gid;
use crate::pd::ProtectionDomain;
use crate::port::Mtu;
use crate::qp::{Init, QpCapabilities, QpInitAttr, QpState, Reset, RnrTimer, Rtr, ToInitAttr};
use crate::srq::SharedReceiveQueue;
use crate::try_twin::try_twin;

use super::context::{DcVersion, Mlx5Context};
use super::dci::DcRoute;
use super::endpoint::{DcEndpoint, DcKey};
use super::qp::{dv_attr, DcQp, DcTypestate};

/// What a DCT is created with. A DCT has no receive queue of its own: the kernel requires an
/// SRQ and a receive CQ, so both are fields here, not options.
#[derive(Clone, Copy, Debug)]
pub struct DctInitAttr<'res, 'srq> {
    /// Where its receives come from.
    pub srq: &'res SharedReceiveQueue<'srq>,
    /// Where its receive completions go.
    pub recv_cq: &'res CompletionQueue<'res>,
    /// The DC access key initiators must present (`dct_access_key`).
    pub key: DcKey,
}

/// INIT → RTR of a DCT (`IBV_QP_STATE | AV | PATH_MTU | MIN_RNR_TIMER`). The AV is the
/// DCT's own side of the route: its port and service level, and on RoCE a GRH naming its
/// source GID index, hop limit and traffic class, which its answers carry (the GRH's
/// destination GID is unused and left zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DctToRtrAttr {
    /// The path MTU.
    pub path_mtu: Mtu,
    /// The RNR NAK timer a DCI is told to wait before resending when the DCT's SRQ is empty
    /// ([`RnrTimer`]; 31 = 491.52 ms, with a DCI's 6 RNR retries ≈ 2.9 s to post a receive,
    /// as [`ToRtrAttr`](crate::ToRtrAttr) explains).
    pub min_rnr_timer: RnrTimer,
    /// The port (and GRH) the DCT answers on.
    pub av: AddressVector,
}

impl DctToRtrAttr {
    /// RTR on `port`, with a GRH from source GID `sgid_index` when one is given (RoCE),
    /// RNR timer 31 (491.52 ms), and the defaults of [`DcRoute::new`]: hop limit 255,
    /// traffic class 0, service level 0.
    #[must_use]
    pub fn new(port: u8, sgid_index: Option<u8>, path_mtu: Mtu) -> Self {
        DctToRtrAttr::from_route(&DcRoute::new(port, sgid_index, path_mtu))
    }

    /// RTR on `route`: its port, path MTU and service level, and, when it has a source GID
    /// index, a GRH with its hop limit and traffic class; RNR timer 31 (491.52 ms).
    #[must_use]
    pub fn from_route(route: &DcRoute) -> Self {
        DctToRtrAttr {
            path_mtu: route.path_mtu,
            min_rnr_timer: RnrTimer::DEFAULT,
            av: route.address_vector(Lid::new(0), Gid::ZERO),
        }
    }
}

/// A DC target (`mlx5dv_create_qp(3)` with `MLX5DV_DCTYPE_DCT`) in state `S`: RESET, INIT or
/// RTR — a DCT never sends, so it has no RTS. Its DCT number exists from RTR on.
///
/// It borrows its PD, SRQ and CQ, so they outlive it:
///
/// ```compile_fail,E0597
/// # use rdma_verbs::*;
/// # use rdma_verbs::mlx5::*;
/// # fn f(ctx: &Context, mlx5: &Mlx5Context<'_>) -> Result<()> {
/// let pd = ctx.alloc_pd()?;
/// let cq = ctx.create_cq(16)?;
/// let dct = {
///     let srq = pd.create_srq(16, 1)?;
///     mlx5.create_dct(&pd, &DctInitAttr { srq: &srq, recv_cq: &cq, key: DcKey::new(1) })?
/// }; // error: `srq` dropped while still borrowed
/// # drop(dct); Ok(()) }
/// ```
///
/// Its number cannot be read before RTR:
///
/// ```compile_fail,E0599
/// # use rdma_verbs::*;
/// # use rdma_verbs::mlx5::*;
/// # fn f(dct: Dct<'_, Init>) {
/// let n = dct.dctn(); // error: no method `dctn` on `Dct<Init>`
/// # }
/// ```
#[must_use = "the DCT is destroyed when dropped"]
pub struct Dct<'res, S: QpState> {
    qp: DcQp<'res>,
    key: DcKey,
    dc_version: DcVersion,
    _state: PhantomData<S>,
}

// SAFETY: the handle is immutable after creation; verbs on a QP are thread-safe.
unsafe impl<S: QpState> Send for Dct<'_, S> {}
// SAFETY: as above; no method mutates through `&self`.
unsafe impl<S: QpState> Sync for Dct<'_, S> {}

impl<'ctx> Mlx5Context<'ctx> {
    /// `mlx5dv_create_qp(3)`—A DC target on `pd`: `IBV_QPT_DRIVER`,
    /// `MLX5DV_QP_INIT_ATTR_MASK_DC`, `MLX5DV_DCTYPE_DCT` with the access key, the SRQ and
    /// the receive CQ (also given as send CQ, as UCX and perftest do). The CQ keeps the SRQ's
    /// [`max_wr`](SharedReceiveQueue::max_wr) entries for its receives, as for a QP on an SRQ
    /// (see [Room for completions](crate::CompletionQueue#room-for-completions)), until the
    /// DCT is destroyed.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) when `pd` is not of this device
    /// context, and as [`ProtectionDomain::create_qp`] refuses a QP on the SRQ and CQ: either
    /// of another device context, an SRQ of another PD, or a CQ with room for fewer
    /// completions than the SRQ's [`max_wr`](SharedReceiveQueue::max_wr) receives, or than
    /// those beside the entries its other QPs' posts and SRQs hold;
    /// [`Error::Unsupported`](crate::Error::Unsupported) naming the device when
    /// `mlx5dv_create_qp` answers `EOPNOTSUPP` (no DC on the device or its firmware);
    /// [`Error::Verb`](crate::Error::Verb) from `mlx5dv_create_qp`.
    #[doc(alias = "mlx5dv_create_qp")]
    pub fn create_dct<'res>(
        &self,
        pd: &'res ProtectionDomain<'res>,
        attr: &DctInitAttr<'res, '_>,
    ) -> Result<Dct<'res, Reset>> {
        // No queue of its own: every receive comes from the SRQ, and it never sends.
        let cap = QpCapabilities {
            max_send_wr: 0,
            max_recv_wr: 0,
            max_send_sge: 0,
            max_recv_sge: 0,
            max_inline_data: 0,
        };
        let objects = QpInitAttr { cap, srq: Some(attr.srq), ..QpInitAttr::new(attr.recv_cq) };
        let init = sys::ibv_qp_init_attr_ex { qp_type: sys::IBV_QPT_DRIVER, ..Default::default() };
        let mut dv = dv_attr(sys::MLX5DV_DCTYPE_DCT);
        dv.dc_init_attr.__bindgen_anon_1.dct_access_key = attr.key.get();
        let qp = DcQp::create(self, pd, &objects, init, dv)?;
        Ok(Dct { qp, key: attr.key, dc_version: self.caps().dc_version, _state: PhantomData })
    }
}

/// The attribute mask of a DCT's RESET → INIT.
pub(super) const DCT_INIT_MASK: u32 =
    sys::IBV_QP_PKEY_INDEX | sys::IBV_QP_PORT | sys::IBV_QP_ACCESS_FLAGS;
/// The attribute mask of a DCT's INIT → RTR.
pub(super) const DCT_RTR_MASK: u32 =
    sys::IBV_QP_AV | sys::IBV_QP_PATH_MTU | sys::IBV_QP_MIN_RNR_TIMER;

impl<'res, S: QpState> Dct<'res, S> {
    /// The DC access key it was created with.
    pub fn key(&self) -> DcKey {
        self.key
    }

    /// The protection domain.
    pub fn pd(&self) -> &'res ProtectionDomain<'res> {
        self.qp.pd()
    }

    /// The raw QP pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_qp {
        self.qp.as_raw()
    }

    /// `ibv_destroy_qp(3)`—Destroys the DCT, reporting failure (dropping logs instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`](crate::Error::Verb) from `ibv_destroy_qp`; the DCT is then leaked.
    pub fn destroy(self) -> Result<()> {
        self.qp.destroy()
    }
}

impl<'res, S: QpState> DcTypestate for Dct<'res, S> {
    type In<N: QpState> = Dct<'res, N>;

    fn dc_qp(&self) -> &DcQp<'_> {
        &self.qp
    }

    fn into_state<N: QpState>(self) -> Dct<'res, N> {
        let Dct { qp, key, dc_version, _state } = self;
        Dct { qp, key, dc_version, _state: PhantomData }
    }
}

impl<'res> Dct<'res, Reset> {
    try_twin! {
        /// RESET → INIT (`IBV_QP_STATE | PKEY_INDEX | PORT | ACCESS_FLAGS`): `attr.access` is
        /// what initiators may do (remote write/read; remote atomics need DC atomic support).
        ///
        /// # Errors
        ///
        /// The [`Error::Verb`](crate::Error::Verb) of `ibv_modify_qp`; the DCT is dropped.
        /// [`try_into_init`](Self::try_into_init) hands it back.
        pub fn into_init / try_into_init(
            self,
            attr: &ToInitAttr,
        ) -> Result<Dct<'res, Init>, TransitionError<Self>>
        try:
        /// [`into_init`](Self::into_init), handing the DCT back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] with the DCT and the [`Error::Verb`](crate::Error::Verb) of
        /// `ibv_modify_qp`.
        {
            let verb = "ibv_modify_qp (DCT RESET→INIT)";
            self.transition(attr.raw(), DCT_INIT_MASK, sys::IBV_QPS_INIT, verb)
        }
    }
}

impl<'res> Dct<'res, Init> {
    try_twin! {
        /// INIT → RTR (`IBV_QP_STATE | AV | PATH_MTU | MIN_RNR_TIMER`). The device creates the
        /// DCT object here, and libmlx5 sets its DCT number.
        ///
        /// # Errors
        ///
        /// The [`Error::Verb`](crate::Error::Verb) of `ibv_modify_qp` (`EINVAL` on RoCE without a
        /// GRH); the DCT is dropped. [`try_into_rtr`](Self::try_into_rtr) hands it back.
        pub fn into_rtr / try_into_rtr(
            self,
            attr: &DctToRtrAttr,
        ) -> Result<Dct<'res, Rtr>, TransitionError<Self>>
        try:
        /// [`into_rtr`](Self::into_rtr), handing the DCT back on failure.
        ///
        /// # Errors
        ///
        /// [`TransitionError`] with the DCT and the error of [`into_rtr`](Self::into_rtr).
        {
            let raw = sys::ibv_qp_attr {
                path_mtu: attr.path_mtu.0,
                min_rnr_timer: attr.min_rnr_timer.get(),
                ah_attr: attr.av.to_raw(),
                ..Default::default()
            };
            self.transition(raw, DCT_RTR_MASK, sys::IBV_QPS_RTR, "ibv_modify_qp (DCT INIT→RTR)")
        }
    }
}

impl Dct<'_, Rtr> {
    /// The DCT number initiators address it by (`ibv_qp.qp_num`, which libmlx5 sets only
    /// after the RTR transition).
    pub fn dctn(&self) -> Qpn {
        self.qp.qp_num()
    }

    /// The token an initiator needs: this DCT's number and key, with the GID and LID of the
    /// port it answers on and the DC version of its device.
    pub fn endpoint(&self, gid: Gid, lid: Lid) -> DcEndpoint {
        DcEndpoint::new(gid, lid, self.dctn(), self.key, self.dc_version)
    }
}

impl<S: QpState> std::fmt::Debug for Dct<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dct")
            .field("qpn", &format_args!("{:#x}", self.qp.qp_num().get()))
            .field("state", &S::NAME)
            .finish_non_exhaustive()
    }
}
