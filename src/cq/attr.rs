//! What a completion queue is created with.

use crate::channel::CompletionChannel;
use crate::verbs_path::VerbsPath;

/// Options of [`Context::create_cq_with`](crate::Context::create_cq_with) (the fields of
/// `struct ibv_cq_init_attr_ex` this crate sets). The default: no channel, vector 0, no
/// timestamps, the extended CQ when the provider has it.
///
/// ```no_run
/// # use rdma_verbs::*;
/// # fn f(ctx: &Context) -> Result<()> {
/// let cq = ctx.create_cq_with(64, &CqAttr { timestamps: true, ..CqAttr::default() })?;
/// cq.poll_with(16, |c| println!("{} at {:?}", c.wc.wr_id(), c.timestamp))?;
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct CqAttr<'a> {
    /// The completion channel its events go to (armed with
    /// [`CompletionQueue::req_notify`](crate::CompletionQueue::req_notify)).
    pub channel: Option<&'a CompletionChannel<'a>>,
    /// The completion vector (below the context's `num_comp_vectors`); used with a channel.
    pub comp_vector: u32,
    /// Whether completions carry the device's timestamp (`IBV_WC_EX_WITH_COMPLETION_TIMESTAMP`),
    /// read with [`Completion::timestamp`](crate::Completion::timestamp). Needs the extended
    /// CQ and a device whose `completion_timestamp_mask` is not 0.
    pub timestamps: bool,
    /// `None`: the extended CQ when the provider has it, else the legacy one. `Some` forces
    /// one (see [`VerbsPath`]).
    pub verbs_path: Option<VerbsPath>,
}
