//! Rails: one RDMA WRITE or READ of a large region spread over several RC QPs on several
//! devices, which survives a rail's failure.
//!
//! A [`Rails`] owns its local memory ([`RailMemory`], registered once per device's PD) and
//! the connected RC QPs it sends on (the *rails*, added with [`Rails::add`]; the caller
//! connects them, or builds a loopback pair per device with [`loopback_pair`]).
//! [`Rails::transfer`] cuts a range of the memory into slices, assigns them round-robin to
//! the rails that are up, keeps at most a bounded number in flight on each, and returns
//! when every slice has completed ([`TransferReport`]: bytes and slices per rail, which
//! rails went down, how many slices moved).
//!
//! A rail goes down on an error completion, a refused post, no completion for the
//! transfer's timeout while work is in flight (a link that drops packets), or a
//! [`RailSwitch`] thrown from another thread (for example on the `PORT_ERR` async event of
//! its port: [`AsyncEvents`](crate::AsyncEvents)). Its QP is moved to ERROR, so the NIC
//! flushes what it had; its unfinished slices, flushed or never posted, go round-robin to
//! the rails still up. The rail stays down (and is reported so, [`Rails::rail_state`])
//! until the caller brings a connected QP back in its place ([`Rails::replace`]).
//!
//! # Striping as NCCL and UCX do it
//!
//! NCCL spreads a collective's data over channels, each bound to one NIC, and within a NIC
//! over several QPs (`NCCL_IB_QPS_PER_CONNECTION`, `NCCL_IB_SPLIT_DATA_ON_QPS`); UCX cuts a
//! large rendezvous transfer over up to `UCX_MAX_RNDV_RAILS` devices. Both register the
//! buffer once per device and complete the message when every piece has. Here a piece is a
//! slice (`slice_size`), a device's registration is one of [`RailMemory`]'s regions, the
//! QPs per device are rails of the same PD, and the remote side's per-device address and
//! rkey are the transfer's `remote` per rail. What this layer adds is the failover: a down
//! rail's slices are carried by the others, so one transfer outlives a link. Ordering the
//! rails by how close each device is to the memory ([`topology`](crate::topology)) is the
//! caller's, by the order of [`Rails::add`].
//!
#![allow(unsafe_code)]
//! # Safety
//!
//! Slices are posted through the raw tier, whose contract the rails keep by ownership: the
//! local memory is the [`Rails`]' own, registered in each rail QP's PD, for as long as the
//! rails live; the QPs are destroyed (which ends their work) before the memory is
//! deregistered, and when a QP's destroy fails the memory is leaked instead. Its bytes are
//! never lent as slices ([`RailMemory`]), so no reference races the NIC. A transfer returns
//! once every slice it posted has completed, been flushed, or, on a rail whose flushes do not
//! arrive, been left to that rail: such a rail ([`RailState::Stuck`]) keeps its QP until
//! the rails are dropped, since its work may still reach the memory.

mod memory;
mod transfer;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

pub use memory::RailMemory;
pub use transfer::{Direction, RailReport, Transfer, TransferReport};

use crate::access::AccessFlags;
use crate::cq::CompletionQueue;
use crate::endpoint::{Endpoint, Psn};
use crate::error::{Error, InvalidInputKind, Result};
use crate::pd::ProtectionDomain;
use crate::qp::{
    QpCapabilities, QpInitAttr, QueuePair, Rc, Reset, Rts, ToInitAttr, ToRtrAttr, ToRtsAttr,
};
use crate::wc::{WcStatus, WorkCompletion};

/// Why a rail went down.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RailDown {
    /// A slice completed with this status (the QP is in ERROR).
    Completion(WcStatus),
    /// A verb failed with this error: posting a slice, or polling the rail's CQ.
    Verb(String),
    /// No completion came within the transfer's timeout while slices were in flight.
    Stalled,
    /// Its [`RailSwitch`] was thrown.
    TakenDown,
}

/// A rail's state ([`Rails::rail_state`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RailState {
    /// Taking slices.
    Up,
    /// Down for this reason, until [`Rails::replace`] brings another QP in.
    Down(RailDown),
    /// Down, with this many work requests its QP neither completed nor flushed: the QP stays
    /// until the rails are dropped ([`Rails::replace`] refuses it).
    Stuck(RailDown, usize),
}

/// Takes a rail down from any thread, for example on its port's `PORT_ERR` async event: the
/// running (or next) [`Rails::transfer`] moves its QP to ERROR and its slices elsewhere.
#[derive(Clone, Debug)]
pub struct RailSwitch(Arc<AtomicBool>);

impl RailSwitch {
    /// Takes the rail down.
    pub fn take_down(&self) {
        self.0.store(true, Ordering::Release);
    }

    fn is_thrown(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// One rail: a connected RC QP, its send CQ, and whether it is up.
struct Rail<'r> {
    qp: QueuePair<'r, Rts, Rc>,
    cq: &'r CompletionQueue<'r>,
    switch: RailSwitch,
    down: Option<RailDown>,
    /// When it went down (to wait for its flushes).
    down_since: Option<Instant>,
    /// Work requests neither completed nor flushed after the wait.
    stuck: usize,
}

/// Connected RC QPs over one or more devices that carry one transfer together (see the
/// [module](self)), and the local memory they carry it from or into.
pub struct Rails<'r> {
    rails: Vec<Rail<'r>>,
    depth: u32,
    /// Tells completions of one transfer from a previous one's late flushes.
    generation: u32,
    /// Completions of other QPs polled from the rails' CQs ([`Rails::take_other_completions`]).
    others: Vec<WorkCompletion>,
    // Deregistered after the QPs are destroyed (`Drop`), or leaked.
    memory: std::mem::ManuallyDrop<RailMemory<'r>>,
}

impl<'r> Rails<'r> {
    /// No rails yet, over `memory`, keeping at most `depth` slices in flight per rail.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `depth` is 0.
    pub fn new(memory: RailMemory<'r>, depth: u32) -> Result<Rails<'r>> {
        if depth == 0 {
            return Err(Error::invalid(
                InvalidInputKind::Size,
                "rails need at least one slice in flight per rail (depth ≥ 1)".into(),
            ));
        }
        Ok(Rails {
            rails: Vec::new(),
            depth,
            generation: 0,
            others: Vec::new(),
            memory: std::mem::ManuallyDrop::new(memory),
        })
    }

    /// Adds a connected RC QP as the next rail and returns its index (the index of its
    /// remote address in a [`Transfer`]). `cq` is its send CQ, which the rails poll: no one
    /// else may poll it while a transfer runs (rails of one device may share it).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`]: `cq` is not the QP's send CQ ([`InvalidInputKind::OtherCq`]),
    /// the memory has no registration in the QP's PD ([`InvalidInputKind::OtherPd`]), or the
    /// QP's send queue or `cq` holds fewer than `depth` entries
    /// ([`InvalidInputKind::CqTooSmall`]). The QP is dropped.
    pub fn add(
        &mut self,
        qp: QueuePair<'r, Rts, Rc>,
        cq: &'r CompletionQueue<'r>,
    ) -> Result<usize> {
        self.check(&qp, cq)?;
        self.rails.push(Rail::new(qp, cq));
        Ok(self.rails.len() - 1)
    }

    /// Puts a freshly connected QP in place of rail `rail`, up again, and hands back the one
    /// it held (to reset and reconnect, or destroy). A [`RailSwitch`] of the old QP no longer
    /// reaches the rail.
    ///
    /// # Errors
    ///
    /// As [`add`](Self::add); [`Error::InvalidInput`] ([`InvalidInputKind::Range`]) for a rail
    /// that does not exist; [`Error::WrongState`] for a [`RailState::Stuck`] rail, whose QP
    /// stays. The new QP is dropped.
    pub fn replace(
        &mut self,
        rail: usize,
        qp: QueuePair<'r, Rts, Rc>,
        cq: &'r CompletionQueue<'r>,
    ) -> Result<QueuePair<'r, Rts, Rc>> {
        self.check(&qp, cq)?;
        let old = self.rail(rail)?;
        if old.stuck > 0 {
            return Err(Error::WrongState {
                message: format!(
                    "rail {rail} has {} work requests its QP neither completed nor flushed; \
                     it stays until the rails are dropped: add a new rail instead",
                    old.stuck
                ),
            });
        }
        Ok(std::mem::replace(&mut self.rails[rail], Rail::new(qp, cq)).qp)
    }

    /// Whether rail `rail` is up, down, or stuck; `None` when there is no such rail.
    pub fn rail_state(&self, rail: usize) -> Option<RailState> {
        self.rails.get(rail).map(|r| match (&r.down, r.stuck) {
            (None, _) => RailState::Up,
            (Some(why), 0) => RailState::Down(why.clone()),
            (Some(why), stuck) => RailState::Stuck(why.clone(), stuck),
        })
    }

    /// The switch that takes rail `rail` down from another thread; `None` when there is no
    /// such rail.
    pub fn switch(&self, rail: usize) -> Option<RailSwitch> {
        self.rails.get(rail).map(|r| r.switch.clone())
    }

    /// How many rails there are, up or down.
    pub fn len(&self) -> usize {
        self.rails.len()
    }

    /// Whether there is no rail.
    pub fn is_empty(&self) -> bool {
        self.rails.is_empty()
    }

    /// The local memory.
    pub fn memory(&self) -> &RailMemory<'r> {
        &self.memory
    }

    /// Copies `src` into the local memory at `offset` ([`RailMemory::write`]). (The memory
    /// itself is never lent mutably: replacing it would free what a stuck rail's work
    /// requests still name.)
    ///
    /// # Errors
    ///
    /// As [`RailMemory::write`].
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.memory.write(offset, src)
    }

    /// Completions of other queue pairs that a transfer polled from a rail's CQ (a CQ the
    /// rails share with other QPs), oldest first; kept until taken, so none is lost.
    pub fn take_other_completions(&mut self) -> Vec<WorkCompletion> {
        std::mem::take(&mut self.others)
    }

    fn rail(&self, rail: usize) -> Result<&Rail<'r>> {
        self.rails.get(rail).ok_or_else(|| {
            Error::invalid(
                InvalidInputKind::Range,
                format!("there is no rail {rail}: the rails are 0..{}", self.rails.len()),
            )
        })
    }

    fn check(&self, qp: &QueuePair<'r, Rts, Rc>, cq: &CompletionQueue<'_>) -> Result<()> {
        // SAFETY: a live QP; a plain read of the send CQ pointer it was created with.
        let send_cq = unsafe { (*qp.as_raw()).send_cq };
        if send_cq != cq.as_raw() {
            return Err(Error::invalid(
                InvalidInputKind::OtherCq,
                "a rail's CQ is its QP's send CQ, which the rails poll".into(),
            ));
        }
        if self.memory.region(qp.pd()).is_none() {
            return Err(Error::invalid(
                InvalidInputKind::OtherPd,
                "the rails' memory has no registration in this QP's protection domain: \
                 register it with every rail's PD (RailMemory::register)"
                    .into(),
            ));
        }
        if qp.caps().max_send_wr < self.depth || cq.capacity() < self.depth {
            return Err(Error::invalid(
                InvalidInputKind::CqTooSmall,
                format!(
                    "a rail keeps {} slices in flight: its send queue (max_send_wr {}) and CQ \
                     ({} entries) need room for them",
                    self.depth,
                    qp.caps().max_send_wr,
                    cq.capacity()
                ),
            ));
        }
        Ok(())
    }
}

impl<'r> Rail<'r> {
    fn new(qp: QueuePair<'r, Rts, Rc>, cq: &'r CompletionQueue<'r>) -> Rail<'r> {
        let switch = RailSwitch(Arc::new(AtomicBool::new(false)));
        Rail { qp, cq, switch, down: None, down_since: None, stuck: 0 }
    }
}

impl Drop for Rails<'_> {
    fn drop(&mut self) {
        let mut destroyed = true;
        for rail in self.rails.drain(..) {
            if let Err(error) = rail.qp.destroy() {
                log::warn!("a rail's QP was not destroyed ({error}): leaking the rails' memory");
                destroyed = false;
            }
        }
        if destroyed {
            // SAFETY: dropped once, here; every QP that could reach the memory is destroyed.
            unsafe { std::mem::ManuallyDrop::drop(&mut self.memory) };
        }
    }
}

/// Two RC QPs of `pd`'s device, both on `cq` with room for `depth` sends, in RTS and
/// connected to each other through port 1 (at its active MTU and routable GID): one rail's
/// loopback, the first to add to [`Rails`], the second the target of its RDMA WRITEs and READs
/// (it allows both).
///
/// # Errors
///
/// What `ibv_create_qp`, `ibv_query_port`, [`Context::routable_gid`](crate::Context::routable_gid)
/// and the transitions return.
pub fn loopback_pair<'r>(
    pd: &'r ProtectionDomain<'r>,
    cq: &'r CompletionQueue<'r>,
    depth: u32,
) -> Result<(QueuePair<'r, Rts, Rc>, QueuePair<'r, Rts, Rc>)> {
    let ctx = pd.context();
    let port = ctx.query_port(1)?;
    let gid = ctx.routable_gid(1)?;
    let cap = QpCapabilities { max_send_wr: depth, ..QpCapabilities::default() };
    let attr = QpInitAttr { cap, ..QpInitAttr::new(cq) };
    let (a, b) = (pd.create_rc_qp(&attr)?, pd.create_rc_qp(&attr)?);
    let psn = Psn::random();
    let up = |qp: QueuePair<'r, Reset, Rc>, peer| -> Result<QueuePair<'r, Rts, Rc>> {
        let access = AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ;
        let qp = qp.into_init(&ToInitAttr { access, ..ToInitAttr::default() })?;
        let peer = Endpoint { lid: port.lid(), qpn: peer, psn, gid: gid.gid };
        let rtr = ToRtrAttr::to_endpoint(&peer, 1, Some(gid.index), port.active_mtu());
        qp.into_rtr(&rtr)?.into_rts(&ToRtsAttr::new(psn))
    };
    let (a_qpn, b_qpn) = (a.qp_num(), b.qp_num());
    Ok((up(a, b_qpn)?, up(b, a_qpn)?))
}
