//! Creating a completion queue: through `ibv_create_cq_ex(3)` where the provider has it,
//! else `ibv_create_cq(3)`.

use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use super::acks::HeapAcks;
use super::kept::Kept;
use super::{extended, CompletionQueue, CqAttr, Credits};
use crate::channel::CompletionChannel;
use crate::context::Context;
use crate::error::{check_ptr, Error, InvalidInputKind, Result};
use crate::verbs_path::VerbsPath;

impl Context {
    /// `ibv_create_cq_ex(3)` or `ibv_create_cq(3)`—Creates a completion queue for at least
    /// `cqe` entries, extended where the provider allows (see
    /// [`Context::create_cq_with`]).
    ///
    /// Size it for every WR that can be outstanding on the QPs that share it (see
    /// [Room for completions](CompletionQueue#room-for-completions)).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `cqe` is 0 or above `i32::MAX`; [`Error::Verb`] from
    /// the create verb (`EINVAL` when above the device's `max_cqe`).
    #[doc(alias = "ibv_create_cq")]
    #[doc(alias = "ibv_create_cq_ex")]
    pub fn create_cq(&self, cqe: u32) -> Result<CompletionQueue<'_>> {
        self.create_cq_with(cqe, &CqAttr::default())
    }

    /// `ibv_create_cq_ex(3)` or `ibv_create_cq(3)`—Creates a completion queue for at least
    /// `cqe` entries (as [`Context::create_cq`]) whose events go to `channel`, interrupting through completion vector `comp_vector` (below
    /// the context's `num_comp_vectors`; 0 always exists).
    ///
    /// Events fire only once armed with [`CompletionQueue::req_notify`]. The CQ borrows the
    /// channel, so the channel outlives it:
    ///
    /// ```compile_fail,E0597
    /// # fn f(ctx: &rdma_verbs::Context) -> rdma_verbs::Result<()> {
    /// let cq = {
    ///     let channel = ctx.create_comp_channel()?;
    ///     ctx.create_cq_with_channel(16, &channel, 0)?
    /// }; // error: `channel` dropped while still borrowed
    /// # drop(cq); Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `cqe` is 0 or above `i32::MAX`, when `channel` belongs
    /// to another context, or when `comp_vector` is not below `num_comp_vectors`;
    /// [`Error::Verb`] from the create verb (`EINVAL` when above the device's `max_cqe`).
    ///
    /// # References
    ///
    /// <https://man7.org/linux/man-pages/man3/ibv_create_cq.3.html>
    #[doc(alias = "ibv_create_cq")]
    pub fn create_cq_with_channel<'a>(
        &'a self,
        cqe: u32,
        channel: &'a CompletionChannel<'_>,
        comp_vector: u32,
    ) -> Result<CompletionQueue<'a>> {
        self.create_cq_with(
            cqe,
            &CqAttr { channel: Some(channel), comp_vector, ..CqAttr::default() },
        )
    }

    /// `ibv_create_cq_ex(3)`, falling back to `ibv_create_cq(3)`—Creates a completion queue
    /// for at least `cqe` entries as `attr` says: its channel and completion vector, whether
    /// completions carry timestamps, and which verbs to use.
    ///
    /// The extended CQ is asked for the standard completion fields (`IBV_WC_STANDARD_FLAGS`:
    /// byte_len, imm_data, qp_num, src_qp, slid, sl, dlid_path_bits), plus
    /// `IBV_WC_EX_WITH_COMPLETION_TIMESTAMP` with [`CqAttr::timestamps`]. When the provider
    /// has no extended CQ (`EOPNOTSUPP`), or leaves a polling member NULL, and neither
    /// timestamps nor [`VerbsPath::Extended`] were asked for, the CQ is a legacy one.
    ///
    /// An extended CQ without timestamps is polled through the provider's `poll_cq` op,
    /// which every provider with extended CQs (rxe, mlx5) implements for them too:
    /// `ibv_cq_ex_to_cq(3)` is a cast, the CQ's context ops are the provider's, and the op
    /// fills the whole batch under one lock. With timestamps it is polled in
    /// `ibv_start_poll`/`ibv_next_poll`/`ibv_end_poll` sessions, the only calls that read
    /// them.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `cqe` is 0 or above `i32::MAX`, when the channel belongs
    /// to another context, when `comp_vector` is not below `num_comp_vectors`, or when
    /// timestamps are asked of a forced legacy CQ; [`Error::Unsupported`] naming what is
    /// missing when timestamps or the extended path were asked for and the device lacks them
    /// (`ibv_create_cq_ex`, an `ibv_cq_ex` member, or completion timestamps);
    /// [`Error::Verb`] from the create verb (`EINVAL` when above the device's `max_cqe`).
    ///
    /// # References
    ///
    /// <https://man7.org/linux/man-pages/man3/ibv_create_cq_ex.3.html>
    #[doc(alias = "ibv_create_cq_ex")]
    pub fn create_cq_with<'a>(
        &'a self,
        cqe: u32,
        attr: &CqAttr<'a>,
    ) -> Result<CompletionQueue<'a>> {
        let n = i32::try_from(cqe).ok().filter(|&n| n > 0).ok_or_else(|| {
            Error::invalid(
                InvalidInputKind::Size,
                format!("a CQ needs 1..={} entries, not {cqe}", i32::MAX),
            )
        })?;
        let (channel, vector) = match attr.channel {
            Some(channel) => (channel.as_raw(), self.check_channel(channel, attr.comp_vector)?),
            None => (std::ptr::null_mut(), 0),
        };
        if attr.timestamps && attr.verbs_path == Some(VerbsPath::Legacy) {
            return Err(Error::invalid(
                InvalidInputKind::NeedsExtendedVerbs,
                "completion timestamps need the extended CQ: do not force VerbsPath::Legacy".into(),
            ));
        }
        // Owned by the CQ once it exists; freed here if none does.
        let acks = attr.channel.map(|_| HeapAcks::new());
        let cq_context = acks.as_ref().map_or(std::ptr::null_mut(), HeapAcks::as_context);
        let with = |raw: NonNull<sys::ibv_cq>, ex: Option<extended::ExCq>| {
            // SAFETY: a live CQ; a plain field read.
            let entries = unsafe { (*raw.as_ptr()).cqe }.max(0) as u32;
            CompletionQueue {
                raw,
                kept: Kept::new(ex.as_ref().is_some_and(extended::ExCq::in_sessions)),
                ex,
                acks,
                credits: Credits::new(entries, "completion queue"),
                ctx: self,
            }
        };
        if attr.verbs_path != Some(VerbsPath::Legacy) {
            let strict = attr.timestamps || attr.verbs_path == Some(VerbsPath::Extended);
            match extended::create(self, n, channel, cq_context, vector, attr.timestamps) {
                Ok((raw, ex)) => return Ok(with(raw, Some(ex))),
                Err(e) if strict || !matches!(e, Error::Unsupported { .. }) => return Err(e),
                // The provider lacks it: the legacy verbs serve.
                Err(_) => {}
            }
        }
        // SAFETY: a live context; `channel` is NULL or a live channel of this context that
        // the caller keeps alive as long as the CQ; `cq_context` is NULL or its event counter,
        // alive as long as the CQ.
        let raw = unsafe {
            (self.library().fns.ibv_create_cq)(self.as_raw(), n, cq_context, channel, vector)
        };
        Ok(with(check_ptr(raw, "ibv_create_cq")?, None))
    }

    /// The completion vector as a C int, checking `channel` is this context's.
    fn check_channel(&self, channel: &CompletionChannel<'_>, comp_vector: u32) -> Result<i32> {
        if !std::ptr::eq(channel.context(), self) {
            return Err(Error::invalid(
                InvalidInputKind::OtherContext,
                format!(
                    "the completion channel belongs to device {}, not to this context of {}",
                    channel.context().name(),
                    self.name()
                ),
            ));
        }
        let vectors = self.num_comp_vectors();
        i32::try_from(comp_vector).ok().filter(|_| comp_vector < vectors).ok_or_else(|| {
            Error::invalid(
                InvalidInputKind::Range,
                format!(
                    "completion vector {comp_vector} does not exist: {} has vectors 0..{vectors}",
                    self.name()
                ),
            )
        })
    }
}
