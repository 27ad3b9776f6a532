//! Creating queue pairs.

use std::marker::PhantomData;

use rdma_verbs_sys as sys;

use super::{QpCapabilities, QpInitAttr, QpType, QueuePair, Rc, Reset, SendLimits};
use crate::error::{check_ptr, Error, Result};
use crate::pd::ProtectionDomain;

impl<'res> ProtectionDomain<'res> {
    /// `ibv_create_qp(3)`—Creates a queue pair of transport type `T` ([`Rc`],
    /// [`Uc`](super::Uc) or [`Ud`](super::Ud)) in RESET.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when a CQ or the SRQ belongs to another device context;
    /// [`Error::Verb`] from `ibv_create_qp` (`EINVAL`: capabilities above the device's
    /// limits, named in the message; `ENOMEM`: out of resources); [`Error::Unsupported`] when
    /// the provider lacks the transport (e.g. UC on iWARP).
    #[doc(alias = "ibv_create_qp")]
    pub fn create_qp<T: QpType>(
        &'res self,
        attr: &QpInitAttr<'res>,
    ) -> Result<QueuePair<'res, Reset, T>> {
        let ctx = self.context().as_raw();
        let srq_ctx = attr.srq.map(|srq| srq.pd().context().as_raw());
        if attr.send_cq.context().as_raw() != ctx
            || attr.recv_cq.context().as_raw() != ctx
            || srq_ctx.is_some_and(|c| c != ctx)
        {
            return Err(Error::InvalidInput(
                "the QP's CQs and SRQ must belong to the same device context as its PD".into(),
            ));
        }
        let mut init = sys::ibv_qp_init_attr {
            send_cq: attr.send_cq.as_raw(),
            recv_cq: attr.recv_cq.as_raw(),
            srq: attr.srq.map_or(std::ptr::null_mut(), |srq| srq.as_raw()),
            cap: attr.cap.to_raw(),
            qp_type: T::RAW,
            sq_sig_all: attr.sq_sig_all.into(),
            ..Default::default()
        };
        // SAFETY: a live PD and CQs (and SRQ) of its context; `init` is a valid attribute
        // struct, which the provider updates with the capabilities it allocated.
        let raw = unsafe { (self.context().library().fns.ibv_create_qp)(self.as_raw(), &mut init) };
        let raw =
            check_ptr(raw, "ibv_create_qp").map_err(|e| self.explain_create_qp(e, &attr.cap))?;
        Ok(QueuePair {
            raw,
            pd: self,
            caps: QpCapabilities::from_raw(&init.cap),
            limits: SendLimits::default(),
            _res: PhantomData,
            _state: PhantomData,
        })
    }

    /// `ibv_create_qp(3)`—Creates a Reliable Connected queue pair in RESET: `create_qp::<Rc>`.
    ///
    /// # Errors
    ///
    /// As [`ProtectionDomain::create_qp`].
    #[doc(alias = "ibv_create_qp")]
    pub fn create_rc_qp(&'res self, attr: &QpInitAttr<'res>) -> Result<QueuePair<'res, Reset, Rc>> {
        self.create_qp::<Rc>(attr)
    }

    /// Adds the requested capabilities, and the device's limits, to an `EINVAL` from
    /// `ibv_create_qp`: the provider refused one of them but does not say which.
    fn explain_create_qp(&self, error: Error, cap: &QpCapabilities) -> Error {
        if error.errno() != Some(libc::EINVAL) {
            return error;
        }
        let limits = match self.context().query_device() {
            Ok(d) => format!(
                "device limits: max_qp_wr {}, max_sge {} (the device reports no inline limit)",
                d.max_qp_wr(),
                d.max_sge()
            ),
            Err(_) => "the device limits could not be queried".into(),
        };
        error.with_hint(format!(
            "the provider refused the requested capabilities max_send_wr {}, max_recv_wr {}, \
             max_send_sge {}, max_recv_sge {}, max_inline_data {}; {limits}; lower them",
            cap.max_send_wr,
            cap.max_recv_wr,
            cap.max_send_sge,
            cap.max_recv_sge,
            cap.max_inline_data
        ))
    }
}
