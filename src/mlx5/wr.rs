//! DC work requests and where they go: a [`DcDestination`] (AH, DCT number, key), the
//! [`DcPeer`] that builds one from a token, and the [`DcWr`] a [`Dci`](super::Dci) posts.

use crate::ah::AddressHandle;
use crate::endpoint::Qpn;
use crate::error::Result;
use crate::pd::ProtectionDomain;
use crate::wr::{RemoteAddr, SendFlags, Sge};

use super::context::{unsupported_text, Mlx5Context};
use super::dci::DcRoute;
use super::endpoint::{DcEndpoint, DcKey};

/// Where a DC work request goes: the address handle of the target's port, its DCT number
/// and its DC access key (the arguments of `mlx5dv_wr_set_dc_addr(3)`).
#[derive(Clone, Copy, Debug)]
pub struct DcDestination<'a> {
    /// The route to the target's port, on the DCI's PD.
    pub ah: &'a AddressHandle<'a>,
    /// The target's DCT number.
    pub dctn: Qpn,
    /// The target's DC access key.
    pub key: DcKey,
}

/// A DCT to send to, from its [`DcEndpoint`] token: an address handle made from the token's
/// GID and LID, with the DCT number and key.
#[derive(Debug)]
pub struct DcPeer<'pd> {
    ah: AddressHandle<'pd>,
    endpoint: DcEndpoint,
}

impl<'pd> DcPeer<'pd> {
    /// `ibv_create_ah(3)` on `pd` for the port `endpoint` names, from `route.port` with
    /// `route.sl`: by LID, plus a GRH from `route.sgid_index` to the token's GID with
    /// `route.hop_limit` and `route.traffic_class` when both are present (RoCE needs it;
    /// InfiniBand does without; the path MTU is not used here). First it checks that the
    /// token's DC version is `mlx5`'s device's.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`](crate::Error::Unsupported) when the token's DCT is on a device of the other DC version
    /// ([`DcVersion`](super::DcVersion): v1 and v2 do not interoperate, and a DCI would only
    /// time out); [`Error::Verb`](crate::Error::Verb) from `ibv_create_ah` (`EINVAL` on RoCE without a GRH).
    pub fn new(
        mlx5: &Mlx5Context<'_>,
        pd: &'pd ProtectionDomain<'pd>,
        endpoint: &DcEndpoint,
        route: &DcRoute,
    ) -> Result<Self> {
        let (ours, theirs) = (mlx5.caps().dc_version, endpoint.dc_version());
        if ours != theirs {
            return Err(unsupported_text(format!(
                "mlx5 DC between {} (device {}) and a DCT of {}: the two DC versions do not \
                 interoperate (a DCI would only time out); pair devices of one DC version",
                ours,
                mlx5.context().name(),
                theirs
            )));
        }
        let route = match endpoint.gid().is_zero() {
            true => DcRoute { sgid_index: None, ..*route },
            false => *route,
        };
        let av = route.address_vector(endpoint.lid(), endpoint.gid());
        Ok(DcPeer { ah: pd.create_ah(&av)?, endpoint: *endpoint })
    }

    /// The destination to put in work requests.
    pub fn destination(&self) -> DcDestination<'_> {
        DcDestination { ah: &self.ah, dctn: self.endpoint.dctn(), key: self.endpoint.dc_key() }
    }

    /// The token it was made from.
    pub fn endpoint(&self) -> &DcEndpoint {
        &self.endpoint
    }
}

/// What a DC work request does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DcOpcode {
    /// SEND: consumes a receive from the DCT's SRQ.
    Send,
    /// RDMA WRITE to the target's memory.
    RdmaWrite(RemoteAddr),
    /// RDMA READ from the target's memory.
    RdmaRead(RemoteAddr),
}

/// A DC send work request: operation, local memory, destination, and optionally the DCI
/// stream it runs on.
#[derive(Clone, Copy, Debug)]
pub struct DcWr<'a> {
    /// Returned in the work completion.
    pub wr_id: u64,
    /// `IBV_SEND_*` flags (`wr_flags`).
    pub flags: SendFlags,
    /// The operation.
    pub opcode: DcOpcode,
    /// The local memory: read for SEND and WRITE, written by READ.
    pub sges: &'a [Sge],
    /// The target.
    pub dest: DcDestination<'a>,
    /// The DCI stream, on a DCI created with streams.
    pub stream: Option<u16>,
}

impl<'a> DcWr<'a> {
    /// A SEND of `sges` to `dest`.
    #[must_use]
    pub fn send(wr_id: u64, sges: &'a [Sge], dest: DcDestination<'a>) -> Self {
        DcWr { wr_id, flags: SendFlags::empty(), opcode: DcOpcode::Send, sges, dest, stream: None }
    }

    /// An RDMA WRITE of `sges` to `remote` at `dest`.
    pub fn rdma_write(
        wr_id: u64,
        sges: &'a [Sge],
        remote: RemoteAddr,
        dest: DcDestination<'a>,
    ) -> Self {
        DcWr { opcode: DcOpcode::RdmaWrite(remote), ..DcWr::send(wr_id, sges, dest) }
    }

    /// An RDMA READ from `remote` at `dest` into `sges`.
    pub fn rdma_read(
        wr_id: u64,
        sges: &'a [Sge],
        remote: RemoteAddr,
        dest: DcDestination<'a>,
    ) -> Self {
        DcWr { opcode: DcOpcode::RdmaRead(remote), ..DcWr::send(wr_id, sges, dest) }
    }

    /// With these flags.
    #[must_use]
    pub fn flags(self, flags: SendFlags) -> Self {
        DcWr { flags, ..self }
    }

    /// On DCI stream `id`.
    #[must_use]
    pub fn stream(self, id: u16) -> Self {
        DcWr { stream: Some(id), ..self }
    }
}
