//! Mock contexts and the ops the inline verbs call through them.

use std::ffi::{c_int, c_void};
use std::mem::{offset_of, size_of};
use std::ptr::{self, NonNull};

use rdma_verbs_sys::bindings::*;

use super::call::{Call, Verb};
use super::device::port_attr;
use super::dm;
use super::extended;
use super::mw;
use super::post::{post_recv, post_send, post_srq_recv};
use super::state::{serve, Kind, State};
use super::td;
use super::xrc;
use super::ContextConfig;

/// A new live context, embedded last in a boxed `verbs_context` as libibverbs does.
pub(super) fn new_context(s: &mut State, config: &ContextConfig) -> NonNull<ibv_context> {
    let mut vctx = verbs_context {
        query_port: config.query_port.then_some(query_port),
        modify_cq: config.cq_moderation.then_some(modify_cq),
        create_cq_ex: config.create_cq_ex.then_some(extended::create_cq_ex),
        create_qp_ex: (config.create_qp_ex || config.xrc).then_some(extended::create_qp_ex),
        query_device_ex: (config.completion_timestamps
            || config.device_memory
            || config.limits.qp_rate_limit_max != 0)
            .then_some(extended::query_device_ex),
        alloc_dm: config.device_memory.then_some(dm::alloc_dm),
        free_dm: config.device_memory.then_some(dm::free_dm),
        reg_dm_mr: config.device_memory.then_some(dm::reg_dm_mr),
        alloc_td: config.thread_domains.then_some(td::alloc_td),
        dealloc_td: config.thread_domains.then_some(td::dealloc_td),
        alloc_parent_domain: config.thread_domains.then_some(td::alloc_parent_domain),
        open_xrcd: config.xrc.then_some(xrc::open_xrcd),
        close_xrcd: config.xrc.then_some(xrc::close_xrcd),
        create_srq_ex: config.xrc.then_some(xrc::create_srq_ex),
        get_srq_num: config.xrc.then_some(xrc::get_srq_num),
        sz: config.sz,
        ..Default::default()
    };
    let ctx = &mut vctx.context;
    ctx.device = s.device();
    // A descriptor of its own, as a provider's context has its uverbs file: what
    // `ibv_import_device` is given a duplicate of (-1 if it cannot be made).
    ctx.cmd_fd = cmd_fd();
    // An eventfd counting the events queued by `Mock::push_async_event`: readable while any
    // is queued, like a provider's async_fd (-1 if it cannot be made: reads then fail EBADF).
    // (The context owns the descriptor, closed in `free`.)
    ctx.async_fd = event_fd();
    ctx.num_comp_vectors = 1;
    // `__VERBS_ABI_IS_EXTENDED` marks a context that lives inside a `verbs_context`.
    ctx.abi_compat = if config.extended { usize::MAX as *mut c_void } else { ptr::null_mut() };
    ctx.ops.post_send = config.post_send.then_some(post_send);
    ctx.ops.post_recv = config.post_recv.then_some(post_recv);
    ctx.ops.post_srq_recv = Some(post_srq_recv);
    ctx.ops.alloc_mw = config.memory_windows.then_some(mw::alloc_mw);
    ctx.ops.dealloc_mw = config.memory_windows.then_some(mw::dealloc_mw);
    ctx.ops.bind_mw = config.memory_windows.then_some(mw::bind_mw);
    ctx.ops.poll_cq = config.poll_cq.then_some(poll_cq);
    ctx.ops.req_notify_cq = config.req_notify_cq.then_some(req_notify_cq);
    let vctx = Box::into_raw(Box::new(vctx));
    // SAFETY: `vctx` was just allocated; this only computes a field's address.
    let ctx = unsafe { &raw mut (*vctx).context };
    s.register(ctx, Kind::Context);
    if let Some(member) = config.missing_member {
        s.set_missing_member(ctx, member);
    }
    let mut device = config.limits.device_attr_ex(config.vendor_id);
    if config.completion_timestamps {
        device.completion_timestamp_mask = (1 << 48) - 1;
        device.hca_core_clock = extended::CORE_CLOCK_KHZ;
    }
    if config.device_memory {
        device.max_dm_size = crate::MAX_DM_SIZE;
    }
    if config.xrc {
        device.orig_attr.device_cap_flags |= IBV_DEVICE_XRC;
    }
    s.set_device_attr(ctx, device);
    NonNull::new(ctx).expect("a field of a live allocation is not NULL")
}

/// The `verbs_context` a mock context is embedded in (`container_of`).
pub(super) fn verbs_context_of(ctx: *mut ibv_context) -> *mut verbs_context {
    ctx.wrapping_byte_sub(offset_of!(verbs_context, context)).cast()
}

/// `ibv_context.ops.poll_cq`: returns the completions queued by
/// [`Mock::push_completion`](super::Mock::push_completion), or `-errno`.
///
/// # Safety
///
/// As `ibv_poll_cq(3)`: `wc` writable for `num_entries` entries.
unsafe extern "C" fn poll_cq(cq: *mut ibv_cq, num_entries: c_int, wc: *mut ibv_wc) -> c_int {
    let polled = serve(|s| {
        s.begin(Call::PollCq { num_entries }, Verb::PollCq)?;
        s.expect(cq, Kind::Cq)?;
        Ok(s.pop_completions(cq, usize::try_from(num_entries).unwrap_or(0)))
    });
    match polled {
        Ok(polled) => {
            // SAFETY: at most `num_entries` entries, which the caller made writable.
            unsafe { ptr::copy_nonoverlapping(polled.as_ptr(), wc, polled.len()) };
            polled.len() as c_int
        }
        Err(errno) => -errno,
    }
}

/// `ibv_context.ops.req_notify_cq`: records the request (events are raised by the test:
/// [`Mock::push_cq_event`](crate::Mock::push_cq_event)).
extern "C" fn req_notify_cq(cq: *mut ibv_cq, solicited_only: c_int) -> c_int {
    let result = serve(|s| {
        s.begin(Call::ReqNotifyCq { solicited_only }, Verb::ReqNotifyCq)?;
        s.expect(cq, Kind::Cq)
    });
    result.err().unwrap_or(0)
}

/// `verbs_context.modify_cq`: records the moderation asked for; `EINVAL` for a mask with
/// bits past `IBV_CQ_ATTR_MODERATE`, as mlx5 answers.
///
/// # Safety
///
/// `attr` must be readable.
unsafe extern "C" fn modify_cq(cq: *mut ibv_cq, attr: *mut ibv_modify_cq_attr) -> c_int {
    // SAFETY: the caller made `attr` readable.
    let ibv_modify_cq_attr { attr_mask, moderate } = unsafe { attr.read() };
    let call =
        Call::ModifyCq { attr_mask, cq_count: moderate.cq_count, cq_period: moderate.cq_period };
    let result = serve(|s| {
        s.begin(call, Verb::ModifyCq)?;
        s.expect(cq, Kind::Cq)?;
        if attr_mask >= IBV_CQ_ATTR_RESERVED {
            return Err(libc::EINVAL);
        }
        Ok(())
    });
    result.err().unwrap_or(0)
}

/// `verbs_context.query_port`: fills `port_attr_len` bytes as libibverbs' `__lib_query_port`
/// does (zeroed, then as much of [`port_attr`] as fits).
///
/// # Safety
///
/// `port_attr` must be writable for `port_attr_len` bytes.
unsafe extern "C" fn query_port(
    context: *mut ibv_context,
    port_num: u8,
    attr: *mut ibv_port_attr,
    attr_len: usize,
) -> c_int {
    let call = Call::QueryPortOp { port: port_num, attr_len };
    let result = serve_port_query(call, Verb::QueryPortOp, context, port_num);
    if let Err(errno) = result {
        return errno;
    }
    // SAFETY: the caller made `attr_len` bytes writable.
    unsafe { write_prefix(attr.cast(), attr_len) };
    0
}

/// Serves a query of port `port` of `context`: records `call`, takes a failure injected
/// for `verb`, checks `context` is a live context, then gives [`check_port`]'s answer.
pub(super) fn serve_port_query(
    call: Call,
    verb: Verb,
    context: *mut ibv_context,
    port: impl Into<u32>,
) -> Result<(), c_int> {
    serve(|s| {
        s.begin(call, verb)?;
        s.expect(context, Kind::Context)?;
        check_port(port)
    })
}

/// `EINVAL` for any port but 1, the mock device's only one.
pub(super) fn check_port(port: impl Into<u32>) -> Result<(), c_int> {
    if port.into() == 1 {
        Ok(())
    } else {
        Err(libc::EINVAL)
    }
}

/// Zeroes `len` bytes at `dst`, then copies into them as much of [`port_attr`] as fits.
///
/// # Safety
///
/// `dst` must be writable for `len` bytes.
pub(super) unsafe fn write_prefix(dst: *mut u8, len: usize) {
    let attr = port_attr();
    // SAFETY: the caller made `len` bytes writable.
    unsafe { ptr::write_bytes(dst, 0, len) };
    let n = len.min(size_of::<ibv_port_attr>());
    // SAFETY: `n` bytes fit in both `attr` and the caller's buffer.
    unsafe { ptr::copy_nonoverlapping(ptr::from_ref(&attr).cast::<u8>(), dst, n) };
}

/// A file standing for a context's uverbs command file: a memfd, whose inode names it
/// (duplicates share it), as a character device's number names a real one.
fn cmd_fd() -> c_int {
    if cfg!(miri) {
        return -1;
    }
    // SAFETY: a NUL-terminated name; memfd_create has no other preconditions.
    unsafe { libc::memfd_create(c"mock-uverbs".as_ptr(), libc::MFD_CLOEXEC) }
}

/// A new eventfd (or -1) whose reads take one event each (`EFD_SEMAPHORE`), as a provider's
/// channels hand over events; under Miri, which has no `EFD_SEMAPHORE`, a plain one, whose
/// read takes all that are pending (no test run under Miri counts events).
pub(crate) fn event_fd() -> c_int {
    let semaphore = if cfg!(miri) { 0 } else { libc::EFD_SEMAPHORE };
    // SAFETY: eventfd has no preconditions.
    unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | semaphore) }
}
