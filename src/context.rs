//! Device contexts: an open device ([`Context`], the parent of every other verbs object) and
//! its attributes and limits ([`DeviceAttr`]). Its GID queries are in `gid`, its on-demand
//! paging capabilities in `odp`.
#![allow(unsafe_code)]
//! # Safety
//!
//! A [`Context`] owns an `ibv_context` until `ibv_close_device`, and every child (PD, CQ, ...)
//! borrows the context.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};

use rdma_verbs_sys as sys;

use crate::device::DeviceList;
use crate::error::{check_errno, Error, InvalidInputKind, Result};
use crate::port::PortAttr;
use crate::summary::summary_debug;
use crate::Lid;

/// An open device (`struct ibv_context`): the parent of every other verbs object.
#[must_use = "the device is closed when the context is dropped"]
pub struct Context {
    raw: NonNull<sys::ibv_context>,
    lib: &'static sys::Ibverbs,
    name: String,
    /// The device attributes, queried once when a check first needs them.
    attr: std::sync::OnceLock<DeviceAttr>,
    /// Its CQs reported in error by async events read and not yet told to their polls.
    cq_errors: crate::cq::CqErrors,
    /// The RDMA READ / atomic responder resources its QPs hold: the sum of their
    /// `max_dest_rd_atomic` from RTR until RESET or destruction, held to the device's
    /// `max_res_rd_atom`.
    responder_resources: AtomicU64,
}

// SAFETY: libibverbs verbs are thread-safe (rdma-core's documented guarantee); the context
// is only mutated by the library under its own locks.
unsafe impl Send for Context {}
// SAFETY: as above: every method takes `&self` and calls thread-safe verbs.
unsafe impl Sync for Context {}

impl Context {
    /// Its CQs reported in error ([`CqErrors`](crate::cq::CqErrors)).
    pub(crate) fn cq_errors(&self) -> &crate::cq::CqErrors {
        &self.cq_errors
    }

    /// Opens the device named `name` (as `ibv_devices` lists it, e.g. `mlx5_0` or `rxe0`).
    ///
    /// # Errors
    ///
    /// [`Error::NoKernelSupport`] / [`Error::NoDevices`] when there is no device,
    /// [`Error::DeviceNotFound`] (naming the devices present) when none has that name, and the
    /// errors of [`Device::open`](crate::Device::open).
    pub fn open(name: &str) -> Result<Context> {
        let list = DeviceList::new()?;
        let device = list.find(name).ok_or_else(|| Error::DeviceNotFound {
            name: name.to_owned(),
            available: list.names(),
        })?;
        device.open()
    }

    /// Opens the first device `ibv_get_device_list(3)` returns.
    ///
    /// # Errors
    ///
    /// [`Error::NoKernelSupport`] / [`Error::NoDevices`] when there is no device, and the
    /// errors of [`Device::open`](crate::Device::open).
    pub fn open_first() -> Result<Context> {
        DeviceList::new()?.iter().next().ok_or(Error::NoDevices)?.open()
    }

    /// Opens the device `name` when given, else the first one: what a tool's `-d` option
    /// means in rdma-core's and perftest's tools.
    ///
    /// # Errors
    ///
    /// As [`Context::open`] or [`Context::open_first`].
    pub fn open_or_first(name: Option<&str>) -> Result<Context> {
        match name {
            Some(name) => Context::open(name),
            None => Context::open_first(),
        }
    }

    /// Wraps a context opened elsewhere (by rdma_cm, a provider's own open call, or a mock
    /// provider); dropping the returned value closes it with `ibv_close_device`.
    ///
    /// # Safety
    ///
    /// - `raw` must be a live `ibv_context` opened through `lib`, and stay live while the
    ///   returned value (and everything made from it) is in use;
    /// - either the returned value owns it — nothing else closes it, and the value's drop
    ///   does — or it is *lent*: the caller keeps the value from ever being dropped
    ///   (`ManuallyDrop`, as the `cm` module does with the context an rdma_cm id owns) and
    ///   its owner closes it only after the value and its children are gone;
    /// - `lib` must be the library whose functions operate on it.
    pub unsafe fn from_raw(
        lib: &'static sys::Ibverbs,
        raw: NonNull<sys::ibv_context>,
        name: String,
    ) -> Context {
        Context {
            raw,
            lib,
            name,
            attr: Default::default(),
            cq_errors: Default::default(),
            responder_resources: AtomicU64::new(0),
        }
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The completion vectors the device's CQs can raise their events through
    /// (`ibv_context.num_comp_vectors`): a CQ's `comp_vector` is below it. See
    /// `ibv_create_cq(3)`.
    pub fn num_comp_vectors(&self) -> u32 {
        // SAFETY: the context is live while `self` is; a plain field read.
        let n = unsafe { (*self.as_raw()).num_comp_vectors };
        u32::try_from(n).unwrap_or(0)
    }

    /// The loaded libibverbs this context belongs to.
    pub fn library(&self) -> &'static sys::Ibverbs {
        self.lib
    }

    /// The raw context pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_context {
        self.raw.as_ptr()
    }

    /// `ibv_query_device(3)`—The device's attributes and limits.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_query_device`.
    #[doc(alias = "ibv_query_device")]
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let mut attr = sys::ibv_device_attr::default();
        // SAFETY: a live context and a writable attribute struct of this build's layout.
        let ret = unsafe { (self.lib.fns.ibv_query_device)(self.as_raw(), &mut attr) };
        check_errno(ret, "ibv_query_device")?;
        Ok(DeviceAttr(attr))
    }

    /// `ibv_query_device_ex(3)`: the extended attributes, or those of `ibv_query_device` with
    /// the rest zeroed when the provider lacks the extended verb (as the C inline falls back).
    pub(crate) fn query_device_ex(&self) -> Result<sys::ibv_device_attr_ex> {
        let mut attr = sys::ibv_device_attr_ex::default();
        // SAFETY: a live context of this library and a writable struct of this build's layout.
        let ret =
            unsafe { sys::inline::ibv_query_device_ex(&self.lib.fns, self.as_raw(), &mut attr) };
        check_errno(ret, "ibv_query_device_ex")?;
        Ok(attr)
    }

    /// The device attributes, queried on first use and kept (they do not change).
    pub(crate) fn cached_attr(&self) -> Result<&DeviceAttr> {
        if let Some(attr) = self.attr.get() {
            return Ok(attr);
        }
        let attr = self.query_device()?;
        Ok(self.attr.get_or_init(|| attr))
    }

    /// Takes `n` RDMA READ / atomic responder resources for a QP entering RTR with
    /// `max_dest_rd_atomic` `n` (or raising it), refused when this context's QPs would then
    /// hold more than the device's `max_res_rd_atom` (`ibv_query_device(3)`; 0 means the
    /// device reports no such bound). Other contexts and processes on the device draw on the
    /// same resources, which this count cannot see: the provider may still refuse.
    pub(crate) fn take_responder_resources(&self, n: u8) -> Result<()> {
        let limit = u64::try_from(self.cached_attr()?.max_res_rd_atom()).unwrap_or(0);
        let n = u64::from(n);
        let taken =
            self.responder_resources.fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (limit == 0 || held + n <= limit).then_some(held + n)
            });
        match taken {
            Ok(_) => Ok(()),
            Err(held) => Err(Error::invalid(
                InvalidInputKind::DeviceLimit,
                format!(
                    "max_dest_rd_atomic {n} would bring the RDMA READ / atomic responder \
                     resources of this device context's QPs to {} (they hold {held} in RTR and \
                     RTS), above the device's max_res_rd_atom {limit}: lower max_dest_rd_atomic, \
                     or reset or destroy a QP first",
                    held + n
                ),
            )),
        }
    }

    /// Gives back `n` responder resources taken by [`Context::take_responder_resources`].
    pub(crate) fn give_responder_resources(&self, n: u8) {
        let n = u64::from(n);
        // Saturating: a give never exceeds what was taken, and a slip must not wrap.
        let _ = self
            .responder_resources
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |h| Some(h.saturating_sub(n)));
    }

    /// `ibv_query_port(3)`—The attributes of `port` (from 1).
    ///
    /// # Errors
    ///
    /// [`Error::PortNotFound`] when the device has no such port; [`Error::Verb`] from
    /// `ibv_query_port` or `ibv_query_device`.
    #[doc(alias = "ibv_query_port")]
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        let count = self.query_device()?.phys_port_cnt();
        if port == 0 || port > count {
            return Err(Error::PortNotFound { device: self.name.clone(), port, count });
        }
        let mut attr = sys::ibv_port_attr::default();
        // SAFETY: a live context of `lib` and a writable attribute struct.
        let ret =
            unsafe { sys::inline::ibv_query_port(&self.lib.fns, self.as_raw(), port, &mut attr) };
        check_errno(ret, "ibv_query_port")?;
        Ok(PortAttr(attr))
    }

    /// `ibv_query_port_speed(3)`—The effective bandwidth of `port` (from 1) in Mb/s, over
    /// all its lanes: what the link carries now (its width times its lane rate, or a bond's
    /// or a virtual function's share), which [`PortAttr`]'s width and speed codes do not
    /// always say. The verb counts in units of 100 Mb/s; this is that count times 100.
    ///
    /// A change is announced by [`AsyncEvent::DeviceSpeedChange`](crate::AsyncEvent::DeviceSpeedChange).
    ///
    /// # Errors
    ///
    /// - [`Error::PortNotFound`] when the device has no such port.
    /// - [`Error::Unsupported`] when the loaded libibverbs lacks the verb (before rdma-core
    ///   v62), or the provider or the kernel cannot answer it (`EOPNOTSUPP`).
    /// - [`Error::Verb`] from `ibv_query_port_speed` otherwise.
    #[doc(alias = "ibv_query_port_speed")]
    pub fn query_port_speed(&self, port: u8) -> Result<u64> {
        let count = self.query_device()?.phys_port_cnt();
        if port == 0 || port > count {
            return Err(Error::PortNotFound { device: self.name.clone(), port, count });
        }
        let query = self
            .lib
            .fns
            .ibv_query_port_speed
            .ok_or(Error::Unsupported { what: "ibv_query_port_speed (rdma-core v62+)" })?;
        let mut speed = 0u64;
        // SAFETY: a live context of `lib` and a writable u64. The verb returns the errno
        // itself (not -1), which `check_errno` takes as it comes.
        let ret = unsafe { query(self.as_raw(), u32::from(port), &mut speed) };
        check_errno(ret, "ibv_query_port_speed")?;
        Ok(speed.saturating_mul(100))
    }

    /// The LID to send from on `port`, what a peer addresses this side by: on InfiniBand the
    /// port's base LID, which the subnet manager assigns; on Ethernet (RoCE, iWARP) 0, as
    /// routes there carry GIDs ([`Context::source_gid`]).
    ///
    /// # Errors
    ///
    /// [`Error::NoLid`] on an InfiniBand port that has no LID yet; otherwise as
    /// [`Context::query_port`].
    #[doc(alias = "ibv_query_port")]
    pub fn source_lid(&self, port: u8) -> Result<Lid> {
        let attr = self.query_port(port)?;
        attr.source_lid().ok_or_else(|| Error::NoLid { device: self.name.clone(), port })
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: every child borrows the context, so none is alive; closed once.
        let ret = unsafe { (self.lib.fns.ibv_close_device)(self.as_raw()) };
        if let Err(e) = check_errno(ret, "ibv_close_device") {
            log::warn!("leaking the context of {}: {e}", self.name);
        }
    }
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context").field("device", &self.name).finish_non_exhaustive()
    }
}

/// A device's attributes and limits (`struct ibv_device_attr`).
#[derive(Clone, Copy)]
pub struct DeviceAttr(sys::ibv_device_attr);

impl DeviceAttr {
    /// The firmware version string.
    pub fn fw_ver(&self) -> String {
        let bytes: Vec<u8> =
            self.0.fw_ver.iter().map(|&c| c as u8).take_while(|&c| c != 0).collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The node GUID, in host order.
    pub fn node_guid(&self) -> u64 {
        u64::from_be(self.0.node_guid)
    }

    /// The IEEE vendor ID.
    pub fn vendor_id(&self) -> u32 {
        self.0.vendor_id
    }

    /// The vendor's part ID.
    pub fn vendor_part_id(&self) -> u32 {
        self.0.vendor_part_id
    }

    /// The largest memory region, in bytes.
    pub fn max_mr_size(&self) -> u64 {
        self.0.max_mr_size
    }

    /// The most QPs.
    pub fn max_qp(&self) -> i32 {
        self.0.max_qp
    }

    /// The most outstanding WRs per work queue.
    pub fn max_qp_wr(&self) -> i32 {
        self.0.max_qp_wr
    }

    /// The most SGEs per WR.
    pub fn max_sge(&self) -> i32 {
        self.0.max_sge
    }

    /// The most CQs.
    pub fn max_cq(&self) -> i32 {
        self.0.max_cq
    }

    /// The most entries per CQ.
    pub fn max_cqe(&self) -> i32 {
        self.0.max_cqe
    }

    /// The most memory regions.
    pub fn max_mr(&self) -> i32 {
        self.0.max_mr
    }

    /// The most outstanding RDMA READ / atomic operations a QP can be the target of: the
    /// bound of [`ToRtrAttr::max_dest_rd_atomic`](crate::ToRtrAttr::max_dest_rd_atomic).
    pub fn max_qp_rd_atom(&self) -> i32 {
        self.0.max_qp_rd_atom
    }

    /// The most outstanding RDMA READ / atomic operations a QP can initiate: the bound of
    /// [`ToRtsAttr::max_rd_atomic`](crate::ToRtsAttr::max_rd_atomic) (`ibv_query_device(3)`).
    pub fn max_qp_init_rd_atom(&self) -> i32 {
        self.0.max_qp_init_rd_atom
    }

    /// The most outstanding RDMA READ / atomic operations the device can be the target of,
    /// over all its QPs (`ibv_query_device(3)`): the bound of the sum of their
    /// [`ToRtrAttr::max_dest_rd_atomic`](crate::ToRtrAttr::max_dest_rd_atomic); 0 when the
    /// device reports none.
    pub fn max_res_rd_atom(&self) -> i32 {
        self.0.max_res_rd_atom
    }

    /// The number of physical ports.
    pub fn phys_port_cnt(&self) -> u8 {
        self.0.phys_port_cnt
    }

    /// The raw attributes.
    pub fn as_raw(&self) -> &sys::ibv_device_attr {
        &self.0
    }
}

summary_debug!(DeviceAttr: fw_ver, max_qp, max_qp_wr, max_cqe, phys_port_cnt);
