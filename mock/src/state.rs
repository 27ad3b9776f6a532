//! The per-thread state of the mock: live objects, the call log, pending failures.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet, VecDeque};
use std::ffi::{c_int, c_void};
use std::mem::size_of;
use std::ptr;

use rdma_verbs_sys::bindings::*;

use super::call::{Call, Verb};
use super::peer::PeerMemory;
use super::registry::Registry;
use super::rule::{Queue, Rule, Violation};
use super::td::MockParentDomain;
use super::{device, ops};

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

/// Gives this thread a fresh state.
pub(super) fn install() {
    STATE.with_borrow_mut(|s| {
        assert!(s.is_none(), "this thread already has a mock provider");
        *s = Some(State::new());
    });
}

/// Drops this thread's state, freeing its objects. Never panics (it runs in `Drop`).
pub(super) fn uninstall() {
    let state = STATE.try_with(|s| s.try_borrow_mut().ok().and_then(|mut s| s.take()));
    drop(state);
}

/// Runs `f` on this thread's state, for [`Mock`](super::Mock)'s methods.
///
/// # Panics
///
/// When this thread has no state, which a live `Mock` rules out.
pub(super) fn with<R>(f: impl FnOnce(&mut State) -> R) -> R {
    STATE.with_borrow_mut(|s| f(s.as_mut().expect("this thread's Mock is alive")))
}

/// Runs a mock function's body on this thread's state: `ENODEV` when there is none (the
/// call comes from a thread without a `Mock`, or after it was dropped).
pub(super) fn serve<R>(f: impl FnOnce(&mut State) -> Result<R, c_int>) -> Result<R, c_int> {
    STATE.with_borrow_mut(|s| s.as_mut().map_or(Err(libc::ENODEV), f))
}

/// What a live object is, so it is validated and freed as the right type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    /// An `ibv_context` inside a boxed `verbs_context`.
    Context,
    /// A boxed `[*mut ibv_device; 2]` (the device and the NULL terminator).
    DeviceList,
    /// A boxed `ibv_pd`.
    Pd,
    /// A boxed `ibv_mr`.
    Mr,
    /// A boxed `ibv_cq`.
    Cq,
    /// A boxed extended CQ ([`MockCqEx`](super::extended::MockCqEx)); also a CQ.
    CqEx,
    /// A boxed `ibv_qp`.
    Qp,
    /// A boxed `ibv_qp_ex` (its `qp_base` first); also a QP.
    QpEx,
    /// A boxed `ibv_comp_channel`, owning its eventfd.
    CompChannel,
    /// A boxed `ibv_srq`.
    Srq,
    /// A boxed `ibv_ah`.
    Ah,
    /// A boxed `ibv_mw`.
    Mw,
    /// A boxed [`MockDm`](super::dm::MockDm).
    Dm,
    /// A boxed `ibv_td`.
    Td,
    /// A boxed `ibv_dmah`.
    Dmah,
    /// A boxed `ibv_xrcd`.
    Xrcd,
    /// A boxed [`MockParentDomain`](super::td::MockParentDomain); also a PD.
    ParentDomain,
}

impl Kind {
    /// Whether an object of this kind serves as one of `kind`.
    fn is(self, kind: Kind) -> bool {
        self == kind
            || matches!(
                (self, kind),
                (Kind::CqEx, Kind::Cq) | (Kind::QpEx, Kind::Qp) | (Kind::ParentDomain, Kind::Pd)
            )
    }
}

/// A completion queued on a CQ, with the outstanding work requests its poll retires.
struct Entry {
    wc: ibv_wc,
    retires: Vec<(Queue, u64)>,
}

/// The completions of one CQ.
#[derive(Default)]
struct CqQueue {
    entries: VecDeque<Entry>,
    /// Completions queued while the CQ already held `cqe` of them.
    overruns: usize,
    /// Completion events `ibv_get_cq_event` handed out for the CQ, and those acknowledged.
    events_read: u64,
    events_acked: u64,
}

pub(super) struct State {
    /// Boxed so its address, stored in contexts and device lists, never moves.
    device: Box<ibv_device>,
    calls: Vec<Call>,
    failures: HashMap<Verb, c_int>,
    objects: HashMap<*mut c_void, Kind>,
    completions: HashMap<*mut ibv_cq, CqQueue>,
    /// The strict mock's view of the live objects and their work requests.
    pub(super) reg: Registry,
    violations: Vec<Violation>,
    allowed: HashSet<Rule>,
    /// The length the next posted list must have ([`Mock::expect_chain_len`](super::Mock)).
    pub(super) chain_len: Option<usize>,
    /// Where the next receive post finds its queue full ([`Mock::fill_receive_queue_at`](super::Mock)).
    pub(super) recv_full_at: Option<usize>,
    async_events: HashMap<*mut ibv_context, VecDeque<ibv_async_event>>,
    /// Async events read by `ibv_get_async_event` and not yet acknowledged.
    unacked_async_events: usize,
    /// The completion events queued on each channel: the CQ each names.
    cq_events: HashMap<*mut ibv_comp_channel, VecDeque<*mut ibv_cq>>,
    /// CQs destroyed with events read and not acknowledged: the real `ibv_destroy_cq` would
    /// have blocked forever (fatal at drop, as a violation).
    blocked_destroys: Vec<String>,
    /// The member each context's extended CQs and QPs leave NULL
    /// ([`ContextConfig::missing_member`](super::ContextConfig::missing_member)).
    missing_members: HashMap<*mut ibv_context, &'static str>,
    /// What each context's device reports ([`ContextConfig::vendor_id`](super::ContextConfig::vendor_id),
    /// [`ContextConfig::limits`](super::ContextConfig::limits)).
    device_attrs: HashMap<*mut ibv_context, ibv_device_attr_ex>,
    /// Device memory and the peer-memory client ([`Mock::device_memory`](super::Mock)).
    pub(super) peer: PeerMemory,
    /// The DMA handle of each MR registered with one, by the MR's lkey (an entry whose lkey
    /// is no longer registered is stale).
    pub(super) dmah_users: Vec<(u32, *mut ibv_dmah)>,
    /// The live PDs and MRs made by `ibv_import_pd` / `ibv_import_mr`: the exporting
    /// context's objects, which only `ibv_unimport_*` may release here.
    pub(super) imported: HashSet<*mut c_void>,
    /// Imported objects the importer tried to destroy (`ibv_dealloc_pd`, `ibv_dereg_mr`):
    /// the kernel would have destroyed the exporting process's object (fatal at drop).
    pub(super) destroyed_imports: Vec<String>,
    next_id: u32,
}

impl State {
    fn new() -> State {
        State {
            device: Box::new(device::device()),
            calls: Vec::new(),
            failures: HashMap::new(),
            objects: HashMap::new(),
            completions: HashMap::new(),
            reg: Registry::default(),
            violations: Vec::new(),
            allowed: HashSet::new(),
            chain_len: None,
            recv_full_at: None,
            async_events: HashMap::new(),
            unacked_async_events: 0,
            cq_events: HashMap::new(),
            blocked_destroys: Vec::new(),
            missing_members: HashMap::new(),
            device_attrs: HashMap::new(),
            peer: PeerMemory::default(),
            dmah_users: Vec::new(),
            imported: HashSet::new(),
            destroyed_imports: Vec::new(),
            next_id: 0,
        }
    }

    pub(super) fn device(&mut self) -> *mut ibv_device {
        &mut *self.device
    }

    pub(super) fn fail(&mut self, verb: Verb, errno: c_int) {
        self.failures.insert(verb, errno);
    }

    pub(super) fn take_calls(&mut self) -> Vec<Call> {
        std::mem::take(&mut self.calls)
    }

    /// Records `call`, then consumes a failure injected for `verb`.
    pub(super) fn begin(&mut self, call: Call, verb: Verb) -> Result<(), c_int> {
        self.calls.push(call);
        self.failures.remove(&verb).map_or(Ok(()), Err)
    }

    /// Records a call of a function that cannot fail.
    pub(super) fn record(&mut self, call: Call) {
        self.calls.push(call);
    }

    /// A fresh number for handles, QP numbers and keys.
    pub(super) fn next_id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    /// Boxes `value` as a live object of `kind`.
    pub(super) fn adopt<T>(&mut self, value: T, kind: Kind) -> *mut T {
        let object = Box::into_raw(Box::new(value));
        self.register(object, kind);
        object
    }

    /// Makes `object` live as `kind`.
    pub(super) fn register<T>(&mut self, object: *mut T, kind: Kind) {
        self.objects.insert(object.cast(), kind);
        match kind {
            Kind::Cq | Kind::CqEx => {
                drop(self.completions.insert(object.cast(), CqQueue::default()))
            }
            Kind::Context => drop(self.async_events.insert(object.cast(), VecDeque::new())),
            Kind::CompChannel => drop(self.cq_events.insert(object.cast(), VecDeque::new())),
            _ => {}
        }
    }

    /// The live objects that are exactly of `kind`.
    pub(super) fn live_of(&self, kind: Kind) -> Vec<*mut c_void> {
        self.objects.iter().filter(|&(_, &k)| k == kind).map(|(&object, _)| object).collect()
    }

    /// `EINVAL` unless `object` is a live object of `kind` (an extended CQ or QP is also a
    /// CQ or QP): after this, it may be read as one.
    pub(super) fn expect<T>(&self, object: *mut T, kind: Kind) -> Result<(), c_int> {
        match self.objects.get(&object.cast()) {
            Some(&k) if k.is(kind) => Ok(()),
            _ => Err(libc::EINVAL),
        }
    }

    /// Frees the live object `object` of `kind` (`EINVAL` if it is not one).
    pub(super) fn release<T>(&mut self, object: *mut T, kind: Kind) -> Result<(), c_int> {
        self.expect(object, kind)?;
        let actual = self.objects.remove(&object.cast()).expect("checked live above");
        if let Some(cq) = self.completions.remove(&object.cast()) {
            self.forget_cq_events(object.cast(), &cq);
        }
        self.async_events.remove(&object.cast());
        self.cq_events.remove(&object.cast());
        self.imported.remove(&object.cast());
        // SAFETY: it was live as `actual`, and is no longer registered, so it is freed once.
        unsafe { free(object.cast(), actual) };
        Ok(())
    }

    /// Whether `object` is a live extended QP.
    pub(super) fn is_qp_ex(&self, object: *mut ibv_qp) -> bool {
        self.objects.get(&object.cast()) == Some(&Kind::QpEx)
    }

    pub(super) fn set_missing_member(&mut self, ctx: *mut ibv_context, member: &'static str) {
        self.missing_members.insert(ctx, member);
    }

    pub(super) fn set_device_attr(&mut self, ctx: *mut ibv_context, attr: ibv_device_attr_ex) {
        self.device_attrs.insert(ctx, attr);
    }

    /// What `ctx`'s device reports (`ibv_query_device_ex`, before completion timestamps).
    pub(super) fn device_attr_ex(&self, ctx: *mut ibv_context) -> ibv_device_attr_ex {
        self.device_attrs.get(&ctx).copied().unwrap_or_else(|| ibv_device_attr_ex {
            orig_attr: super::device::device_attr(),
            ..Default::default()
        })
    }

    /// What `ctx`'s device reports (`ibv_query_device`).
    pub(super) fn device_attr(&self, ctx: *mut ibv_context) -> ibv_device_attr {
        self.device_attr_ex(ctx).orig_attr
    }

    /// The member `ctx`'s extended objects leave NULL, if any.
    pub(super) fn missing_member(&self, ctx: *mut ibv_context) -> Option<&'static str> {
        self.missing_members.get(&ctx).copied()
    }

    pub(super) fn is_live(&self, object: *mut c_void) -> bool {
        self.objects.contains_key(&object)
    }

    /// Whether a live MR, QP, SRQ or AH belongs to `pd` (a provider refuses to free the PD then).
    pub(super) fn pd_in_use(&self, pd: *mut ibv_pd) -> bool {
        self.objects.iter().any(|(&object, &kind)| match kind {
            // SAFETY: a live MR, allocated as one.
            Kind::Mr => pd == unsafe { (*object.cast::<ibv_mr>()).pd },
            // SAFETY: a live QP (an extended one starts with its `ibv_qp`).
            Kind::Qp | Kind::QpEx => pd == unsafe { (*object.cast::<ibv_qp>()).pd },
            // SAFETY: a live SRQ, allocated as one.
            Kind::Srq => pd == unsafe { (*object.cast::<ibv_srq>()).pd },
            // SAFETY: a live AH, allocated as one.
            Kind::Ah => pd == unsafe { (*object.cast::<ibv_ah>()).pd },
            // SAFETY: a live window, allocated as one.
            Kind::Mw => pd == unsafe { (*object.cast::<ibv_mw>()).pd },
            // SAFETY: a live parent domain, allocated as one.
            Kind::ParentDomain => pd == unsafe { (*object.cast::<MockParentDomain>()).protection },
            _ => false,
        })
    }

    /// Whether a live parent domain is bound to `td` (a provider refuses to free it then).
    pub(super) fn td_in_use(&self, td: *mut ibv_td) -> bool {
        self.objects.iter().any(|(&object, &kind)| {
            // SAFETY: a live parent domain, allocated as one.
            kind == Kind::ParentDomain && td == unsafe { (*object.cast::<MockParentDomain>()).td }
        })
    }

    /// Whether a live QP uses `cq` (a provider refuses to destroy the CQ then).
    pub(super) fn cq_in_use(&self, cq: *mut ibv_cq) -> bool {
        self.objects.iter().filter(|&(_, &kind)| kind.is(Kind::Qp)).any(|(&object, _)| {
            // SAFETY: a live QP, allocated as one.
            let qp = unsafe { &*object.cast::<ibv_qp>() };
            qp.send_cq == cq || qp.recv_cq == cq
        })
    }

    /// Whether a live CQ uses `channel` (libibverbs then refuses to destroy it).
    pub(super) fn channel_in_use(&self, channel: *mut ibv_comp_channel) -> bool {
        // SAFETY: live CQs; an extended one starts with the same fields as an `ibv_cq`.
        self.completions.keys().any(|&cq| unsafe { (*cq).channel } == channel)
    }

    /// Queues a test's completion; its poll retires the oldest outstanding work request
    /// with its `wr_id` on a queue reporting to `cq`.
    pub(super) fn push_completion(&mut self, cq: *mut ibv_cq, wc: ibv_wc) {
        assert!(self.completions.contains_key(&cq), "push_completion wants a live mock CQ");
        let queue =
            self.reg.queues_of(cq).into_iter().find(|&q| self.reg.is_outstanding(q, wc.wr_id));
        self.push_entry(cq, wc, queue.map(|q| (q, wc.wr_id)).into_iter().collect());
    }

    /// Queues `wc` on the live CQ `cq`, counting an overrun when it is full; polling it
    /// retires `retires`.
    pub(super) fn push_entry(&mut self, cq: *mut ibv_cq, wc: ibv_wc, retires: Vec<(Queue, u64)>) {
        let Some(queue) = self.completions.get_mut(&cq) else { return };
        // SAFETY: a live CQ; an extended one starts with the same fields as an `ibv_cq`.
        let cqe = unsafe { (*cq).cqe };
        if queue.entries.len() >= usize::try_from(cqe).unwrap_or(0) {
            queue.overruns += 1;
        }
        queue.entries.push_back(Entry { wc, retires });
    }

    /// The overruns counted on `cq`.
    pub(super) fn cq_overruns(&self, cq: *mut ibv_cq) -> usize {
        self.completions.get(&cq).map_or(0, |q| q.overruns)
    }

    /// Records `violation`; whether its rule is allowed (the work request then goes on,
    /// poisoned).
    pub(super) fn violate(&mut self, violation: Violation) -> bool {
        let allowed = self.allowed.contains(&violation.rule);
        self.violations.push(violation);
        allowed
    }

    pub(super) fn allow(&mut self, rule: Rule) {
        self.allowed.insert(rule);
    }

    pub(super) fn take_violations(&mut self) -> Vec<Violation> {
        std::mem::take(&mut self.violations)
    }

    /// The violations of rules not allowed, recorded and never taken, the destroys that
    /// would have blocked, and the imported objects destroyed by the importer.
    pub(super) fn fatal_violations(&self) -> Vec<String> {
        let fatal = self.violations.iter().filter(|v| !self.allowed.contains(&v.rule));
        let other = self.blocked_destroys.iter().chain(&self.destroyed_imports).cloned();
        fatal.map(ToString::to_string).chain(other).collect()
    }

    /// Queues `event` on `ctx` and makes its async_fd readable for one more event.
    pub(super) fn push_async_event(&mut self, ctx: *mut ibv_context, event: ibv_async_event) {
        let queue = self.async_events.get_mut(&ctx).expect("push_async_event wants a live context");
        queue.push_back(event);
        // SAFETY: a live context, read for its descriptor.
        signal(unsafe { (*ctx).async_fd });
    }

    /// Takes the oldest async event of the live context `ctx`, as the provider's
    /// `read(async_fd)` would (see [`take_signal`]).
    pub(super) fn pop_async_event(
        &mut self,
        ctx: *mut ibv_context,
    ) -> Result<ibv_async_event, c_int> {
        // SAFETY: a live context's descriptor.
        take_signal(unsafe { (*ctx).async_fd })?;
        let event = self.async_events.get_mut(&ctx).and_then(VecDeque::pop_front);
        let event = event.expect("one queued event per count of the eventfd");
        self.unacked_async_events += 1;
        Ok(event)
    }

    /// Queues a completion event of the live CQ `cq` on its channel and makes the channel's
    /// descriptor readable for one more event, as the kernel does when an armed CQ completes.
    pub(super) fn push_cq_event(&mut self, cq: *mut ibv_cq) {
        assert!(self.completions.contains_key(&cq), "push_cq_event wants a live mock CQ");
        // SAFETY: a live CQ; an extended one starts with the same fields as an `ibv_cq`.
        let channel = unsafe { (*cq).channel };
        let queue =
            self.cq_events.get_mut(&channel).expect("push_cq_event wants a CQ with a channel");
        queue.push_back(cq);
        // SAFETY: a live channel's descriptor.
        signal(unsafe { (*channel).fd });
    }

    /// Takes the oldest completion event of the live channel `channel`, as libibverbs'
    /// `read(channel->fd)` would (see [`take_signal`]): its CQ.
    pub(super) fn pop_cq_event(
        &mut self,
        channel: *mut ibv_comp_channel,
    ) -> Result<*mut ibv_cq, c_int> {
        // SAFETY: a live channel's descriptor.
        take_signal(unsafe { (*channel).fd })?;
        let cq = self.cq_events.get_mut(&channel).and_then(VecDeque::pop_front);
        let cq = cq.expect("one queued event per count of the eventfd");
        if let Some(queue) = self.completions.get_mut(&cq) {
            queue.events_read += 1;
        }
        Ok(cq)
    }

    /// Counts `n` events of `cq` acknowledged.
    pub(super) fn ack_cq_events(&mut self, cq: *mut ibv_cq, n: u32) {
        if let Some(queue) = self.completions.get_mut(&cq) {
            queue.events_acked += u64::from(n);
        }
    }

    /// At the destruction of `cq`: its events still queued are dropped, as the kernel drops
    /// them; a count of events read that differs from the count acknowledged is a destroy
    /// that blocks forever (libibverbs waits until the two are equal).
    fn forget_cq_events(&mut self, cq: *mut ibv_cq, queue: &CqQueue) {
        if queue.events_read != queue.events_acked {
            self.blocked_destroys.push(format!(
                "ibv_destroy_cq would block forever: {} events read, {} acknowledged",
                queue.events_read, queue.events_acked
            ));
        }
        // SAFETY: a CQ being released, still allocated.
        let channel = unsafe { (*cq).channel };
        if let Some(events) = self.cq_events.get_mut(&channel) {
            let before = events.len();
            events.retain(|&c| c != cq);
            for _ in events.len()..before {
                // SAFETY: a live channel's descriptor, signalled once per queued event.
                let _ = take_signal(unsafe { (*channel).fd });
            }
        }
    }

    pub(super) fn ack_async_event(&mut self) {
        self.unacked_async_events = self.unacked_async_events.saturating_sub(1);
    }

    pub(super) fn unacked_async_events(&self) -> usize {
        self.unacked_async_events
    }

    /// Removes up to `n` completions of `cq`, oldest first, retiring what they report.
    pub(super) fn pop_completions(&mut self, cq: *mut ibv_cq, n: usize) -> Vec<ibv_wc> {
        let Some(queue) = self.completions.get_mut(&cq) else { return Vec::new() };
        let n = n.min(queue.entries.len());
        let entries: Vec<Entry> = queue.entries.drain(..n).collect();
        for &(queue, wr_id) in entries.iter().flat_map(|e| &e.retires) {
            self.reg.retire(queue, wr_id);
        }
        entries.into_iter().map(|e| e.wc).collect()
    }
}

/// Makes the eventfd `fd` readable for one more event (a semaphore eventfd counts them);
/// panics when it cannot (a context whose eventfd could not be made has -1).
fn signal(fd: c_int) {
    let one = 1u64;
    // SAFETY: 8 readable bytes; any descriptor, an invalid one failing with EBADF.
    let wrote = unsafe { libc::write(fd, ptr::from_ref(&one).cast(), size_of::<u64>()) };
    assert_eq!(wrote, 8, "signalling a mock eventfd");
}

/// Takes one count off the semaphore eventfd `fd`: `EAGAIN` when none is left and the
/// descriptor is non-blocking (a blocking one would wait).
fn take_signal(fd: c_int) -> Result<(), c_int> {
    let mut count = 0u64;
    // SAFETY: a descriptor, and 8 writable bytes.
    let read = unsafe { libc::read(fd, ptr::from_mut(&mut count).cast(), size_of::<u64>()) };
    if read != 8 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO));
    }
    Ok(())
}

impl Drop for State {
    /// Frees what is still alive: objects whose destroy failed, or that were never destroyed.
    fn drop(&mut self) {
        for (object, kind) in self.objects.drain() {
            // SAFETY: a live object of `kind`, drained from the registry, so freed once.
            unsafe { free(object, kind) };
        }
    }
}

/// Frees a mock object.
///
/// # Safety
///
/// `object` must be a live object of `kind`, allocated by this module, not freed before and
/// not used after.
unsafe fn free(object: *mut c_void, kind: Kind) {
    // SAFETY: each kind was allocated as a `Box` of the type it is freed as (`adopt`, and
    // `ops::new_context` for contexts), contexts and channels own their descriptors; the caller
    // guarantees it is freed once.
    unsafe {
        match kind {
            Kind::Context => {
                let vctx = Box::from_raw(ops::verbs_context_of(object.cast()));
                for fd in [vctx.context.async_fd, vctx.context.cmd_fd] {
                    if fd >= 0 {
                        libc::close(fd);
                    }
                }
            }
            Kind::DeviceList => drop(Box::from_raw(object.cast::<[*mut ibv_device; 2]>())),
            Kind::Pd => drop(Box::from_raw(object.cast::<ibv_pd>())),
            Kind::Mr => drop(Box::from_raw(object.cast::<ibv_mr>())),
            Kind::Cq => drop(Box::from_raw(object.cast::<ibv_cq>())),
            Kind::CqEx => drop(Box::from_raw(object.cast::<super::extended::MockCqEx>())),
            Kind::Qp => drop(Box::from_raw(object.cast::<ibv_qp>())),
            Kind::QpEx => drop(Box::from_raw(object.cast::<ibv_qp_ex>())),
            Kind::Srq => drop(Box::from_raw(object.cast::<ibv_srq>())),
            Kind::Ah => drop(Box::from_raw(object.cast::<ibv_ah>())),
            Kind::Mw => drop(Box::from_raw(object.cast::<ibv_mw>())),
            Kind::Dm => drop(Box::from_raw(object.cast::<super::dm::MockDm>())),
            Kind::Td => drop(Box::from_raw(object.cast::<ibv_td>())),
            Kind::Dmah => drop(Box::from_raw(object.cast::<ibv_dmah>())),
            Kind::Xrcd => drop(Box::from_raw(object.cast::<ibv_xrcd>())),
            Kind::ParentDomain => drop(Box::from_raw(object.cast::<MockParentDomain>())),
            Kind::CompChannel => {
                let channel = Box::from_raw(object.cast::<ibv_comp_channel>());
                libc::close(channel.fd);
            }
        }
    }
}
