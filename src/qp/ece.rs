//! Enhanced Connection Establishment: the vendor options a QP offers its peer
//! (`ibv_query_ece(3)`, `ibv_set_ece(3)`, rdma-core v31).
#![allow(unsafe_code)]

use rdma_verbs_sys as sys;

use super::{QpState, QpType, QueuePair};
use crate::error::{check_errno, Error, Result};

/// ECE options (`struct ibv_ece`): what a QP's provider supports or is asked to enable,
/// exchanged with the peer out of band (rdma_cm carries them in its private data).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Ece {
    /// The provider vendor's IEEE OUI, telling vendors apart in a mixed network.
    pub vendor_id: u32,
    /// Provider-specific options.
    pub options: u32,
    /// Which fields are valid (`comp_mask`).
    pub comp_mask: u32,
}

impl Ece {
    fn from_raw(raw: sys::ibv_ece) -> Self {
        Ece { vendor_id: raw.vendor_id, options: raw.options, comp_mask: raw.comp_mask }
    }

    fn to_raw(self) -> sys::ibv_ece {
        sys::ibv_ece { vendor_id: self.vendor_id, options: self.options, comp_mask: self.comp_mask }
    }
}

impl<S: QpState, T: QpType> QueuePair<'_, S, T> {
    /// `ibv_query_ece(3)`—The QP's current ECE options.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] when the loaded libibverbs lacks the verb (before rdma-core
    /// v31), or the provider has no ECE (`EOPNOTSUPP`: rxe, siw); [`Error::Verb`] from
    /// `ibv_query_ece` otherwise.
    #[doc(alias = "ibv_query_ece")]
    pub fn query_ece(&self) -> Result<Ece> {
        let query = self
            .pd
            .context()
            .library()
            .fns
            .ibv_query_ece
            .ok_or(Error::Unsupported { what: "ibv_query_ece (rdma-core v31+)" })?;
        let mut raw = sys::ibv_ece::default();
        // SAFETY: a live QP of this library and a writable struct. The verb returns the errno
        // itself (not -1), which `check_errno` takes as it comes.
        check_errno(unsafe { query(self.as_raw(), &mut raw) }, "ibv_query_ece")?;
        Ok(Ece::from_raw(raw))
    }

    /// `ibv_set_ece(3)`—Asks for the ECE options `ece` (usually what the peer offered),
    /// used by the modify stages that follow; returns those the provider accepted.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] when the loaded libibverbs lacks the verb (before rdma-core
    /// v31), or the provider has no ECE (`EOPNOTSUPP`: rxe, siw); [`Error::Verb`] from
    /// `ibv_set_ece` otherwise (`EINVAL`: options the provider refuses).
    #[doc(alias = "ibv_set_ece")]
    pub fn set_ece(&self, ece: &Ece) -> Result<Ece> {
        let set = self
            .pd
            .context()
            .library()
            .fns
            .ibv_set_ece
            .ok_or(Error::Unsupported { what: "ibv_set_ece (rdma-core v31+)" })?;
        let mut raw = ece.to_raw();
        // SAFETY: a live QP of this library and a valid struct, which the verb updates with
        // the accepted options. It returns the errno itself.
        check_errno(unsafe { set(self.as_raw(), &mut raw) }, "ibv_set_ece")?;
        Ok(Ece::from_raw(raw))
    }
}
