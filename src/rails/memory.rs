//! One memory, registered once per protection domain ([`RailMemory`]): what lets the QPs of
//! several devices reach the same bytes.
#![allow(unsafe_code)]
//! # Safety
//!
//! The caller's [`PinnedMemory`] value moves into an [`Arc`]ed owner, which asks it for its
//! bytes once and drops it only when the last registration over them is gone (each holds a
//! clone of the `Arc`; one whose deregistration fails leaks its clone, and so the value).
//! Every registration says its memory is shared ([`PinnedMemory::is_shared`]): the other
//! registrations' NICs write the same bytes, as another process would, so each is a
//! [`RemoteWritableRegion`], which never hands out a reference to them and only copies in
//! and out. No Rust reference to the bytes exists, so what any NIC does to them races no
//! reference: a copy made meanwhile sees torn bytes, as a copy of a peer's target does.

use std::ptr::NonNull;
use std::sync::Arc;

use crate::access::AccessFlags;
use crate::error::{Error, InvalidInputKind, Result};
use crate::mr::{PinnedMemory, RemoteWritableRegion};
use crate::pd::ProtectionDomain;

/// The caller's memory and where its bytes are, asked once.
struct Owner {
    bytes: NonNull<[u8]>,
    // Only dropped, never touched: it keeps the bytes valid (its `PinnedMemory` contract).
    _value: Box<dyn PinnedMemory>,
}

// SAFETY: `bytes` is a plain address, valid from any thread (the value's contract), and the
// value is `Send` and never reached through a shared reference.
unsafe impl Send for Owner {}
// SAFETY: as above: a shared `Owner` only gives out the address.
unsafe impl Sync for Owner {}

/// One registration's share of the owner.
struct Share(Arc<Owner>);

// SAFETY: the bytes are the owner's value's, valid (mapped read-write, initialised, never
// moved) until it drops, which is after every share drops; `bytes` returns the same range
// each call; the other shares' registrations write them too, which `is_shared` declares, so
// each region only copies (see the module's Safety).
unsafe impl PinnedMemory for Share {
    fn bytes(&mut self) -> NonNull<[u8]> {
        self.0.bytes
    }

    fn is_shared(&self) -> bool {
        true
    }
}

/// Memory registered once per protection domain (`ibv_reg_mr(3)` on each): the local side of
/// [`Rails`](super::Rails), whose QPs on several devices read and write the same bytes through
/// their own device's registration, and the remote side of a transfer whose peers reach it
/// through several devices.
///
/// A peer may write it, and so may every device it is registered with, so its bytes are
/// copied in and out ([`read`](Self::read), [`write`](Self::write)), never lent as slices.
pub struct RailMemory<'a> {
    regions: Vec<RemoteWritableRegion<'a>>,
}

impl<'a> RailMemory<'a> {
    /// Registers `memory` with each of `pds`, in order, with `access`, which must hold
    /// `LOCAL_WRITE | REMOTE_WRITE` (the memory is shared between the registrations, as
    /// [`SharedMemory`](crate::SharedMemory) between processes); add `REMOTE_READ` for peers'
    /// RDMA READs. A memfd ([`SharedMemory`](crate::SharedMemory)) or huge pages
    /// ([`HugePages`](crate::HugePages)) are the usual `memory`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `pds` is empty or names one PD twice, and what
    /// [`ProtectionDomain::register_remote_writable`] returns (an empty memory, `access`
    /// without `REMOTE_WRITE`, `ibv_reg_mr`'s errors); the registrations made are undone.
    pub fn register(
        mut memory: impl PinnedMemory,
        pds: &[&'a ProtectionDomain<'a>],
        access: AccessFlags,
    ) -> Result<RailMemory<'a>> {
        let twice = pds
            .iter()
            .enumerate()
            .any(|(i, pd)| pds[..i].iter().any(|other| other.as_raw() == pd.as_raw()));
        if pds.is_empty() || twice {
            return Err(Error::invalid(
                InvalidInputKind::OtherPd,
                "rail memory needs one protection domain per device, each named once".into(),
            ));
        }
        let owner = Arc::new(Owner { bytes: memory.bytes(), _value: Box::new(memory) });
        let regions = pds
            .iter()
            .map(|pd| pd.register_remote_writable(Share(owner.clone()), access))
            .collect::<Result<Vec<_>>>()?;
        Ok(RailMemory { regions })
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.regions[0].len()
    }

    /// Always `false`: the memory holds at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The registration with `pd`, if it is one of those the memory was registered with: its
    /// keys and addresses are what a peer reaching the memory through `pd`'s device needs
    /// ([`RemoteWritableRegion::remote`]).
    pub fn region(&self, pd: &ProtectionDomain<'_>) -> Option<&RemoteWritableRegion<'a>> {
        self.regions.iter().find(|r| r.pd().as_raw() == pd.as_raw())
    }

    /// Every registration, in the order of the PDs given to [`register`](Self::register).
    pub fn regions(&self) -> &[RemoteWritableRegion<'a>] {
        &self.regions
    }

    /// Copies `dst.len()` bytes from `offset` into `dst` (see
    /// [`RemoteWritableRegion::read`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `offset..offset + dst.len()` is outside the memory.
    pub fn read(&self, offset: usize, dst: &mut [u8]) -> Result<()> {
        self.regions[0].read(offset, dst)
    }

    /// Copies `src` into the memory at `offset` (see [`RemoteWritableRegion::write`]).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `offset..offset + src.len()` is outside the memory.
    pub fn write(&mut self, offset: usize, src: &[u8]) -> Result<()> {
        self.regions[0].write(offset, src)
    }
}

impl std::fmt::Debug for RailMemory<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RailMemory").field("regions", &self.regions).finish()
    }
}
