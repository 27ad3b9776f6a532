//! Memory windows: rkeys to parts of a registered region, bound and invalidated cheaply on a
//! queue pair's send queue (`ibv_alloc_mw(3)`, `ibv_bind_mw(3)`, `ibv_post_send(3)`).
//!
//! The overview is on [`MemoryWindow`]; [`BindableRegion`] is what a window needs of the
//! region it is bound to.
#![allow(unsafe_code)]

use std::ops::RangeBounds;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::access::AccessFlags;
use crate::error::{check_errno, check_ptr, Error, InvalidInputKind, Result};
use crate::leak::drop_by;
use crate::mr::{bounds, DeviceMemoryRegion, DmabufRegion, MemoryRegion, RemoteWritableRegion};
use crate::pd::ProtectionDomain;
use crate::qp::{Connected, QueuePair, Rts};
use crate::wr::{RKey, RemoteAddr, SendFlags, SendWr};

/// The region types a [`MemoryWindow`] can be bound to:
/// [`MemoryRegion`](crate::MemoryRegion), [`RemoteWritableRegion`](crate::RemoteWritableRegion),
/// [`DmabufRegion`](crate::DmabufRegion) and [`DeviceMemoryRegion`](crate::DeviceMemoryRegion).
pub trait BindableRegion<'a>: sealed::Region {
    #[doc(hidden)]
    fn bind_parts(&self) -> BindParts<'a>;
}

/// What binding a window needs to know of its region.
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct BindParts<'a> {
    pub(crate) mr: NonNull<sys::ibv_mr>,
    pub(crate) iova: u64,
    pub(crate) len: usize,
    pub(crate) access: AccessFlags,
    pub(crate) pd: &'a ProtectionDomain<'a>,
}

/// Implements [`BindableRegion`] for region types, from their accessors.
macro_rules! bindable {
    ($($ty:ident),*) => {$(
        impl<'a> BindableRegion<'a> for $ty<'a> {
            fn bind_parts(&self) -> BindParts<'a> {
                BindParts {
                    mr: self.raw(),
                    iova: self.iova(),
                    len: self.len(),
                    access: self.access(),
                    pd: self.pd(),
                }
            }
        }
    )*};
}

bindable!(MemoryRegion, RemoteWritableRegion, DmabufRegion, DeviceMemoryRegion);

mod sealed {
    use crate::mr::{DeviceMemoryRegion, DmabufRegion, MemoryRegion, RemoteWritableRegion};

    pub trait Region {}
    impl Region for DeviceMemoryRegion<'_> {}
    impl Region for MemoryRegion<'_> {}
    impl Region for RemoteWritableRegion<'_> {}
    impl Region for DmabufRegion<'_> {}
}

/// The type of a memory window (`enum ibv_mw_type`), chosen at allocation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MwType {
    /// `IBV_MW_TYPE_1`: bound with `ibv_bind_mw` ([`QueuePair::bind_mw`]).
    Type1,
    /// `IBV_MW_TYPE_2`: bound with an `IBV_WR_BIND_MW` send WR ([`SendWr::bind_mw`]), unbound
    /// by invalidation.
    Type2,
}

impl MwType {
    fn raw(self) -> sys::ibv_mw_type {
        match self {
            MwType::Type1 => sys::IBV_MW_TYPE_1,
            MwType::Type2 => sys::IBV_MW_TYPE_2,
        }
    }
}

/// The rights a window may grant: remote ones only.
const WINDOW_RIGHTS: AccessFlags =
    AccessFlags::REMOTE_READ.union(AccessFlags::REMOTE_WRITE).union(AccessFlags::REMOTE_ATOMIC);

/// `A | B` for flags, `none` when empty.
fn names(flags: AccessFlags) -> String {
    let mut text = String::new();
    match bitflags::parser::to_writer(&flags, &mut text) {
        Ok(()) if !text.is_empty() => text,
        _ => "none".into(),
    }
}

/// A validated binding: a non-empty range of a region and the rights a window over it grants
/// (`struct ibv_mw_bind_info`). Built by [`MwBind::new`], which refuses rights the region
/// lacks; used by [`QueuePair::bind_mw`] (type 1) and [`SendWr::bind_mw`] (type 2).
#[derive(Clone, Copy, Debug)]
pub struct MwBind<'r> {
    region: BindParts<'r>,
    addr: u64,
    len: u64,
    rights: AccessFlags,
}

impl<'r> MwBind<'r> {
    /// A binding of bytes `range` of `region` (offsets into the region, as for
    /// [`MemoryRegion::sge`](crate::MemoryRegion::sge)) with `rights`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`], before any verb, when:
    /// - `rights` holds anything but `REMOTE_READ`, `REMOTE_WRITE`, `REMOTE_ATOMIC`;
    /// - the region was registered without [`AccessFlags::MW_BIND`];
    /// - `rights` holds a right the region's access flags lack (see *Rights* on [`MemoryWindow`]);
    /// - the range is empty or outside the region.
    pub fn new<R: BindableRegion<'r>>(
        region: &'r R,
        range: impl RangeBounds<usize>,
        rights: AccessFlags,
    ) -> Result<Self> {
        let region = region.bind_parts();
        let extra = rights - WINDOW_RIGHTS;
        if !extra.is_empty() {
            return Err(Error::invalid(
                InvalidInputKind::Access,
                format!(
                "a memory window grants only REMOTE_READ, REMOTE_WRITE and REMOTE_ATOMIC, not {}",
                names(extra)
            ),
            ));
        }
        if !region.access.contains(AccessFlags::MW_BIND) {
            return Err(Error::invalid(
                InvalidInputKind::Access,
                format!(
                    "the region was registered with {}, without MW_BIND: windows cannot be bound \
                 to it; register it with AccessFlags::MW_BIND",
                    names(region.access)
                ),
            ));
        }
        let lacking = rights - region.access;
        if !lacking.is_empty() {
            return Err(Error::invalid(
                InvalidInputKind::Access,
                format!(
                    "the window would grant {}, which the region (registered with {}) lacks: a \
                 window grants at most its region's rights",
                    names(lacking),
                    names(region.access)
                ),
            ));
        }
        let (start, end) = bounds(region.len, range)?;
        Ok(MwBind { region, addr: region.iova + start as u64, len: (end - start) as u64, rights })
    }

    /// The first byte's address in the region's IOVA space: what peers use with the window's
    /// rkey.
    pub fn addr(&self) -> u64 {
        self.addr
    }

    /// The length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Always `false`: a binding covers at least one byte.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The rights the window grants.
    pub fn rights(&self) -> AccessFlags {
        self.rights
    }

    fn raw(&self) -> sys::ibv_mw_bind_info {
        sys::ibv_mw_bind_info {
            mr: self.region.mr.as_ptr(),
            addr: self.addr,
            length: self.len,
            mw_access_flags: self.rights.bits(),
        }
    }

    /// The window's PD must be the region's.
    fn check_pd(&self, mw: &MemoryWindow<'_>) -> Result<()> {
        if !std::ptr::eq(self.region.pd.as_raw(), mw.pd.as_raw()) {
            return Err(Error::invalid(
                InvalidInputKind::OtherPd,
                "the window and the region belong to different protection domains".into(),
            ));
        }
        Ok(())
    }
}

/// A memory window (`struct ibv_mw`, `ibv_alloc_mw(3)`): an rkey to part of a registered
/// region, bound and invalidated cheaply on a queue pair's send queue. Freed with
/// `ibv_dealloc_mw` on drop.
///
/// A window is allocated on a PD, then *bound* to a range of a region registered with
/// [`AccessFlags::MW_BIND`], which gives it an rkey for exactly that range and the rights of the
/// binding:
///
/// - **type 1** ([`MwType::Type1`]): bound with [`QueuePair::bind_mw`] (`ibv_bind_mw`), which
///   posts a bind WR; binding again replaces the binding;
/// - **type 2** ([`MwType::Type2`]): bound with a send WR ([`SendWr::bind_mw`],
///   `IBV_WR_BIND_MW`) on a QP of the window's PD, and unbound by invalidating its rkey
///   ([`SendWr::local_inv`], `IBV_WR_LOCAL_INV`, or a peer's SEND with invalidate); it must be
///   invalidated before it is bound again.
///
/// Each bind moves the rkey's low 8 bits to a new value (`ibv_inc_rkey`), so an rkey handed out
/// for an earlier binding stops working. Binding takes the window by `&mut`: it changes its
/// rkey. Addresses in a window are those of the region's IOVA
/// space ([`MemoryRegion::iova`](crate::MemoryRegion::iova)), as for the region's own rkey.
///
/// # Rights
///
/// A window grants at most what its region grants: each of `REMOTE_READ`, `REMOTE_WRITE`,
/// `REMOTE_ATOMIC` of the binding must be in the region's access flags, and the region must have
/// `MW_BIND`; [`MwBind::new`] refuses anything else before any verb is called. This is stricter
/// than the verbs (which let a window grant remote writes over a region registered with only
/// `LOCAL_WRITE | MW_BIND`), and it is what keeps memory handed out as plain slices
/// ([`MemoryRegion`](crate::MemoryRegion)) unwritable by peers: only a
/// [`RemoteWritableRegion`](crate::RemoteWritableRegion) can back a writable window. It also
/// covers the verbs' own rule that remote write and atomic rights need `LOCAL_WRITE`.
///
/// Binding is therefore safe: a window exposes nothing the region's own rkey does not.
/// Deregistering a region while windows are bound to it may fail (rxe: `EINVAL`); the region is
/// then leaked, never freed under the NIC. Drop windows (or invalidate type-2 ones) first.
/// Likewise for the QP a type-2 window was bound through: on rxe (Linux 6.1) the bound window
/// holds a reference to that QP, and destroying the QP first makes `ibv_destroy_qp` wait 50 s
/// in the kernel (with a warning from `__rxe_cleanup` in its log) before it goes on.
///
/// # Example
///
/// A type-2 window over part of a region, handed to a peer, then closed:
///
/// ```no_run
/// # use rdma_verbs::*;
/// # fn f<'a>(pd: &'a ProtectionDomain<'a>, qp: &QueuePair<'a, Rts>) -> Result<()> {
/// let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::MW_BIND;
/// let region = pd.register_remote_writable(1 << 20, access)?;
/// let mut mw = pd.alloc_mw(MwType::Type2)?;
/// let bind = MwBind::new(&region, 4096..8192, AccessFlags::REMOTE_WRITE)?;
/// let mut wr = SendWr::bind_mw(1, &mut mw, &bind)?.flags(SendFlags::SIGNALED);
/// // SAFETY: a bind WR carries no SGE.
/// unsafe { qp.post_send_wr(&mut wr)? };
/// // ... once it has completed, send `mw.remote(&bind)` to the peer; later:
/// let mut inv = SendWr::local_inv(2, mw.rkey()).flags(SendFlags::SIGNALED);
/// // SAFETY: as above.
/// unsafe { qp.post_send_wr(&mut inv)? };
/// # Ok(()) }
/// ```
///
/// A window cannot outlive its protection domain:
///
/// ```compile_fail,E0597
/// # fn f(ctx: &rdma_verbs::Context) -> rdma_verbs::Result<()> {
/// let mw = {
///     let pd = ctx.alloc_pd()?;
///     pd.alloc_mw(rdma_verbs::MwType::Type1)?
/// }; // error: `pd` dropped while still borrowed
/// # drop(mw); Ok(()) }
/// ```
///
/// and a binding keeps its region borrowed:
///
/// ```compile_fail,E0505
/// # use rdma_verbs::*;
/// # fn f<'a>(pd: &'a ProtectionDomain<'a>) -> Result<()> {
/// let access = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::MW_BIND;
/// let region = pd.register_remote_writable(4096, access)?;
/// let bind = MwBind::new(&region, .., AccessFlags::REMOTE_WRITE)?;
/// drop(region); // error: cannot move out of `region` because it is borrowed
/// # let _ = bind; Ok(()) }
/// ```
#[must_use = "the window is deallocated when dropped"]
pub struct MemoryWindow<'a> {
    raw: NonNull<sys::ibv_mw>,
    kind: MwType,
    pd: &'a ProtectionDomain<'a>,
}

// SAFETY: the window is a provider object used only through thread-safe verbs; its rkey
// changes only under `&mut self` (binds).
unsafe impl Send for MemoryWindow<'_> {}
// SAFETY: as above; shared methods only read.
unsafe impl Sync for MemoryWindow<'_> {}

impl<'a> ProtectionDomain<'a> {
    /// `ibv_alloc_mw(3)`—Allocates a memory window of type `kind`, unbound.
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] when the provider has no memory windows (a NULL `alloc_mw` op
    /// or `EOPNOTSUPP`); [`Error::Verb`] from `ibv_alloc_mw` (e.g. `EINVAL` for a type the
    /// device lacks, `ENOMEM`).
    #[doc(alias = "ibv_alloc_mw")]
    pub fn alloc_mw(&'a self, kind: MwType) -> Result<MemoryWindow<'a>> {
        // SAFETY: a live PD.
        let raw = unsafe { sys::inline::ibv_alloc_mw(self.as_raw(), kind.raw()) };
        let raw = check_ptr(raw, "ibv_alloc_mw")?;
        Ok(MemoryWindow { raw, kind, pd: self })
    }
}

impl<'a> MemoryWindow<'a> {
    /// Its type.
    pub fn kind(&self) -> MwType {
        self.kind
    }

    /// The rkey of the latest bind posted (the initial one before any): what peers use
    /// (`ibv_mw.rkey`).
    pub fn rkey(&self) -> RKey {
        // SAFETY: a live window; written only under `&mut self` (binds).
        RKey::new(unsafe { (*self.raw.as_ptr()).rkey })
    }

    /// What a peer needs to reach the bytes of `bind` through this window: the binding's
    /// address and the window's current rkey.
    pub fn remote(&self, bind: &MwBind<'_>) -> RemoteAddr {
        RemoteAddr { addr: bind.addr, rkey: self.rkey() }
    }

    /// The protection domain.
    pub fn pd(&self) -> &'a ProtectionDomain<'a> {
        self.pd
    }

    /// The raw window pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_mw {
        self.raw.as_ptr()
    }

    /// `ibv_dealloc_mw(3)`—Frees the window, reporting failure (dropping logs instead).
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_dealloc_mw`; the window is then leaked.
    #[doc(alias = "ibv_dealloc_mw")]
    pub fn destroy(self) -> Result<()> {
        std::mem::ManuallyDrop::new(self).dealloc()
    }

    /// Called once: by `Drop`, or by `destroy` (which skips Drop).
    fn dealloc(&mut self) -> Result<()> {
        // SAFETY: a live window, freed once.
        let ret = unsafe { sys::inline::ibv_dealloc_mw(self.raw.as_ptr()) };
        check_errno(ret, "ibv_dealloc_mw")
    }
}

drop_by!(MemoryWindow<'_>, dealloc, |_| "a memory window");

impl std::fmt::Debug for MemoryWindow<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryWindow")
            .field("kind", &self.kind)
            .field("rkey", &self.rkey())
            .finish_non_exhaustive()
    }
}

impl<T: Connected> QueuePair<'_, Rts, T> {
    /// `ibv_bind_mw(3)`—Binds the type-1 window `mw` to `bind` by posting a bind WR on this
    /// (RC or UC: the verbs bind windows only on connected QPs) QP's send queue, and returns the window's new rkey (also [`MemoryWindow::rkey`] from
    /// now on). The bind completes on the send CQ (`WcOpcode::BIND_MW`, reported with `wr_id`
    /// when `flags` has [`SendFlags::SIGNALED`] or the QP signals every WR); peers may use the
    /// rkey once it has completed. A provider that refuses the binding itself reports it in
    /// that completion (`MW_BIND_ERR`). Like a raw WR, the bind is not counted in
    /// [`CompletionQueue::due`](crate::CompletionQueue::due): keeping the send CQ's room for
    /// it is the program's (see
    /// [Room for completions](crate::CompletionQueue#room-for-completions)).
    ///
    /// # Errors
    ///
    /// Before the verb: [`Error::InvalidInput`] when `mw` is type 2 (bind it with
    /// [`SendWr::bind_mw`]), belongs to another PD than the region or this QP, or `wr_id` has
    /// bit 63 set (the buffer tier's mark). Then from
    /// `ibv_bind_mw`: [`Error::Unsupported`] when the provider has no `bind_mw` op,
    /// [`Error::Verb`] otherwise (`ENOMEM`: the send queue is full).
    #[doc(alias = "ibv_bind_mw")]
    pub fn bind_mw(
        &self,
        mw: &mut MemoryWindow<'_>,
        bind: &MwBind<'_>,
        wr_id: u64,
        flags: SendFlags,
    ) -> Result<RKey> {
        if mw.kind != MwType::Type1 {
            return Err(Error::invalid(
                InvalidInputKind::MwType,
                "a type-2 memory window is bound with a send WR (SendWr::bind_mw), not \
                 ibv_bind_mw"
                    .into(),
            ));
        }
        bind.check_pd(mw)?;
        if !std::ptr::eq(mw.pd.as_raw(), self.pd().as_raw()) {
            return Err(Error::invalid(
                InvalidInputKind::OtherPd,
                "the window belongs to another protection domain than the QP: bind it on a QP \
                 of the window's PD"
                    .into(),
            ));
        }
        // The buffer tier reads a completion with this bit as one of its own buffers': one
        // named by a bind would hand that buffer back while the NIC still owns it.
        if wr_id & crate::wr::id::BUFFER_BIT != 0 {
            return Err(Error::invalid(
                InvalidInputKind::Range,
                format!(
                    "wr_id {wr_id:#x} has bit 63 set, which marks the buffer tier's work \
                     requests: use a wr_id below 2^63"
                ),
            ));
        }
        let mut raw = sys::ibv_mw_bind { wr_id, send_flags: flags.bits(), bind_info: bind.raw() };
        // SAFETY: a live QP in RTS and a live window of the region's PD; the MR is alive for
        // the borrow in `bind`; `raw` is readable for the call.
        let ret = unsafe { sys::inline::ibv_bind_mw(self.as_raw(), mw.as_raw(), &mut raw) };
        check_errno(ret, "ibv_bind_mw")?;
        // The provider stored the new rkey in the window.
        Ok(mw.rkey())
    }
}

impl<'a> SendWr<'a> {
    /// `IBV_WR_BIND_MW`: binds the type-2 window `mw` to `bind` when it executes, under the
    /// window's next rkey (`ibv_inc_rkey`). Posting the WR makes that the window's rkey
    /// ([`MemoryWindow::rkey`], as `ibv_bind_mw` does for type 1); peers may use it once the
    /// WR has completed successfully. If the bind completes with an error, the device kept the
    /// old rkey while the window names the new one: drop the window. Post it on an RC or UC QP
    /// of the window's PD; a window already bound must first be invalidated
    /// ([`SendWr::local_inv`]), or the WR completes with `MW_BIND_ERR`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `mw` is type 1 ([`QueuePair::bind_mw`] binds those) or
    /// belongs to another PD than the region.
    #[doc(alias = "IBV_WR_BIND_MW")]
    pub fn bind_mw(wr_id: u64, mw: &'a mut MemoryWindow<'_>, bind: &MwBind<'a>) -> Result<Self> {
        if mw.kind != MwType::Type2 {
            return Err(Error::invalid(
                InvalidInputKind::MwType,
                "a type-1 memory window is bound with QueuePair::bind_mw (ibv_bind_mw), not a \
                 send WR"
                    .into(),
            ));
        }
        bind.check_pd(mw)?;
        let rkey = RKey::new(sys::inline::ibv_inc_rkey(mw.rkey().get()));
        Ok(SendWr::bind_mw_raw(wr_id, mw.as_raw(), rkey, bind.raw()))
    }
}
