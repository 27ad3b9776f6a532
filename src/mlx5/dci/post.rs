//! Posting on a DCI: one batch of extended work requests, each addressed to its DCT.

use rdma_verbs_sys as sys;

use super::Dci;
use crate::error::{check_errno, Error, InvalidInputKind, Result};
use crate::mlx5::wr::{DcOpcode, DcWr};
use crate::qp::Rts;
use crate::wr::SendFlags;

impl Dci<'_, Rts> {
    /// `ibv_wr_post(3)`—Posts `wrs` with one doorbell through the extended work request API,
    /// each built as `ibv_wr_start` → `wr_id`/`wr_flags` → the operation →
    /// `mlx5dv_wr_set_dc_addr` (or its stream variant) → `ibv_wr_set_sge`/`_sge_list` →
    /// `ibv_wr_complete`. If a builder is missing, the batch is aborted (`ibv_wr_abort`) and
    /// nothing is posted.
    ///
    /// # Safety
    ///
    /// As [`QueuePair::post_send_wr`](crate::QueuePair::post_send_wr): until each WR's completion
    /// has been polled (for an unsignaled one, a later signaled one's) or the DCI destroyed,
    /// the memory its SGEs describe stays allocated and registered in a region of this DCI's
    /// PD, unwritten for SEND and RDMA WRITE, untouched for RDMA READ; each destination's
    /// address handle stays alive; `wr_id`s do not have bit 63 set.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] before any call for a WR with a stream on a DCI without
    /// streams, or with [`SendFlags::INLINE`] (not offered here); [`Error::Unsupported`] when
    /// the provider lacks a builder; [`Error::Verb`] from `ibv_wr_complete` (for the whole
    /// batch: `ibv_wr_post(3)` does not say which WR failed, so treat every WR of it as
    /// possibly posted and keep its memory until the DCI is destroyed).
    #[doc(alias = "ibv_wr_start")]
    #[doc(alias = "mlx5dv_wr_set_dc_addr")]
    pub unsafe fn post_send_wrs(&self, wrs: &[DcWr<'_>]) -> Result<()> {
        for wr in wrs {
            if wr.stream.is_some() && !self.streams {
                return Err(Error::invalid(
                    InvalidInputKind::DciStreams,
                    "a DC work request names a DCI stream, but this DCI was created without \
                     streams: set DciInitAttr::streams"
                        .into(),
                ));
            }
            if wr.flags.contains(SendFlags::INLINE) {
                return Err(Error::invalid(
                    InvalidInputKind::InlineTooLarge,
                    "SendFlags::INLINE is not offered on a DCI: post the payload by SGE".into(),
                ));
            }
        }
        let qp = self.qp_ex.as_ptr();
        // SAFETY: a live extended QP in RTS; this opens the batch (the provider's lock).
        check_errno(unsafe { sys::inline::ibv_wr_start(qp) }, "ibv_wr_start")?;
        for wr in wrs {
            // SAFETY: inside the batch this thread opened; the caller upholds the memory and
            // AH contracts.
            if let Err(e) = unsafe { self.build(wr) } {
                // SAFETY: closes the batch opened above, discarding what was built.
                unsafe { sys::inline::ibv_wr_abort(qp) };
                return Err(e);
            }
        }
        // SAFETY: closes the batch opened above.
        check_errno(unsafe { sys::inline::ibv_wr_complete(qp) }, "ibv_wr_complete")
    }

    /// One WR of the batch, in `ibv_wr_post(3)`'s order.
    ///
    /// # Safety
    ///
    /// Inside a batch opened by `ibv_wr_start` on this thread, under `post_send_wrs`'s contract.
    unsafe fn build(&self, wr: &DcWr<'_>) -> Result<()> {
        let (qp, mqp) = (self.qp_ex.as_ptr(), self.mqp.as_ptr());
        let step = |ret: i32, verb: &'static str| match ret {
            0 => Ok(()),
            errno => Err(Error::verb(verb, errno)),
        };
        // SAFETY: the caller guarantees an open batch; these fields are read by the next
        // operation builder, as `ibv_wr_post(3)` says.
        unsafe {
            (*qp).wr_id = wr.wr_id;
            (*qp).wr_flags = wr.flags.bits();
        }
        // SAFETY: each call is the next step of the WR in `ibv_wr_post(3)`'s order, on the
        // extended QP and the mlx5dv_qp_ex of this DCI; `stream` only on a DCI with streams
        // (checked in `post_send_wrs`).
        unsafe {
            match wr.opcode {
                DcOpcode::Send => step(sys::inline::ibv_wr_send(qp), "ibv_wr_send")?,
                DcOpcode::RdmaWrite(r) => step(
                    sys::inline::ibv_wr_rdma_write(qp, r.rkey.get(), r.addr),
                    "ibv_wr_rdma_write",
                )?,
                DcOpcode::RdmaRead(r) => step(
                    sys::inline::ibv_wr_rdma_read(qp, r.rkey.get(), r.addr),
                    "ibv_wr_rdma_read",
                )?,
            }
            let d = &wr.dest;
            match wr.stream {
                None => step(
                    sys::inline::mlx5dv_wr_set_dc_addr(
                        mqp,
                        d.ah.as_raw(),
                        d.dctn.get(),
                        d.key.get(),
                    ),
                    "mlx5dv_wr_set_dc_addr",
                )?,
                Some(id) => step(
                    sys::inline::mlx5dv_wr_set_dc_addr_stream(
                        mqp,
                        d.ah.as_raw(),
                        d.dctn.get(),
                        d.key.get(),
                        id,
                    ),
                    "mlx5dv_wr_set_dc_addr_stream",
                )?,
            }
            match wr.sges {
                [sge] => step(
                    sys::inline::ibv_wr_set_sge(qp, sge.lkey().get(), sge.addr(), sge.length()),
                    "ibv_wr_set_sge",
                ),
                sges => step(
                    sys::inline::ibv_wr_set_sge_list(qp, sges.len(), sges.as_ptr().cast()),
                    "ibv_wr_set_sge_list",
                ),
            }
        }
    }
}
