//! Devices and device contexts.
#![allow(unsafe_code)]
//! # Safety
//!
//! `DeviceList` owns the array from `ibv_get_device_list` until `ibv_free_device_list`;
//! a [`Device`] borrows the list, so it cannot outlive it. A [`Context`] owns an
//! `ibv_context` until `ibv_close_device`, and every child (PD, CQ, ...) borrows the context.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::c_enum::c_enum;
use crate::error::{check_errno, check_ptr, Error, Result};
use crate::gid::{routable_gid, Gid, GidEntry, GidType};
use crate::port::PortAttr;

c_enum! {
    /// What kind of node a device is (`enum ibv_node_type`).
    pub struct NodeType(i32) {
        /// An InfiniBand or RoCE channel adapter.
        CA = sys::IBV_NODE_CA => "CA",
        /// A switch.
        SWITCH = sys::IBV_NODE_SWITCH => "switch",
        /// A router.
        ROUTER = sys::IBV_NODE_ROUTER => "router",
        /// An iWARP NIC.
        RNIC = sys::IBV_NODE_RNIC => "RNIC",
        /// Cisco usNIC.
        USNIC = sys::IBV_NODE_USNIC => "usNIC",
        /// Cisco usNIC over UDP.
        USNIC_UDP = sys::IBV_NODE_USNIC_UDP => "usNIC UDP",
        /// Not specified.
        UNSPECIFIED = sys::IBV_NODE_UNSPECIFIED => "unspecified",
    }
}

c_enum! {
    /// The transport a device speaks (`enum ibv_transport_type`).
    pub struct TransportType(i32) {
        /// InfiniBand transport: InfiniBand and RoCE devices (mlx5, rxe).
        IB = sys::IBV_TRANSPORT_IB => "InfiniBand",
        /// iWARP (siw, irdma in iWARP mode): RC only, connected through rdma_cm.
        IWARP = sys::IBV_TRANSPORT_IWARP => "iWARP",
        /// Cisco usNIC.
        USNIC = sys::IBV_TRANSPORT_USNIC => "usNIC",
        /// Cisco usNIC over UDP.
        USNIC_UDP = sys::IBV_TRANSPORT_USNIC_UDP => "usNIC UDP",
        /// Not specified.
        UNSPECIFIED = sys::IBV_TRANSPORT_UNSPECIFIED => "unspecified",
        /// Unknown.
        UNKNOWN = sys::IBV_TRANSPORT_UNKNOWN => "unknown",
    }
}

fn lib() -> Result<&'static sys::Ibverbs> {
    Ok(sys::ibverbs()?)
}

/// The RDMA devices libibverbs sees (`ibv_get_device_list(3)`).
pub struct DeviceList {
    list: NonNull<*mut sys::ibv_device>,
    len: usize,
    lib: &'static sys::Ibverbs,
}

// SAFETY: the list is immutable after creation and libibverbs' device objects are
// thread-safe; freeing it from another thread is allowed.
unsafe impl Send for DeviceList {}
// SAFETY: only read after creation.
unsafe impl Sync for DeviceList {}

impl DeviceList {
    /// `ibv_get_device_list(3)`—Lists the RDMA devices.
    ///
    /// An empty list means the kernel has RDMA but no device (the caller decides what that
    /// means; [`Context::open_by_name`] turns it into [`Error::NoDevices`]).
    ///
    /// # Errors
    ///
    /// [`Error::Load`] when libibverbs cannot be loaded; [`Error::NoKernelSupport`] when the
    /// kernel exposes no uverbs at all (`ENOSYS`); [`Error::Verb`] otherwise.
    #[doc(alias = "ibv_get_device_list")]
    pub fn new() -> Result<DeviceList> {
        let lib = lib()?;
        let mut n = 0;
        // SAFETY: `n` is writable; the function returns a NULL-terminated array or NULL.
        let list = unsafe { (lib.fns.ibv_get_device_list)(&mut n) };
        match NonNull::new(list) {
            Some(list) => Ok(DeviceList { list, len: n.max(0) as usize, lib }),
            None => match std::io::Error::last_os_error().raw_os_error() {
                Some(libc::ENOSYS) => Err(Error::NoKernelSupport),
                Some(e) if e != 0 => Err(Error::verb("ibv_get_device_list", e)),
                _ => Err(Error::verb("ibv_get_device_list", libc::EIO)),
            },
        }
    }

    /// The number of devices.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no device.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The devices, in libibverbs' order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = Device<'_>> + '_ {
        (0..self.len).map(move |i| {
            // SAFETY: `i < len` entries of the array are valid, non-NULL device pointers.
            let raw = unsafe { *self.list.as_ptr().add(i) };
            Device {
                raw: NonNull::new(raw).expect("entries before the terminator are non-NULL"),
                lib: self.lib,
                _list: PhantomData,
            }
        })
    }

    /// The device named `name`.
    pub fn find(&self, name: &str) -> Option<Device<'_>> {
        self.iter().find(|d| d.name() == name)
    }

    /// The device names, comma-separated (`(none)` when empty), for messages.
    pub fn names(&self) -> String {
        let names: Vec<_> = self.iter().map(|d| d.name().to_owned()).collect();
        if names.is_empty() {
            "(none)".into()
        } else {
            names.join(", ")
        }
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the array came from ibv_get_device_list and is freed once; the borrow
        // checker guarantees no `Device` of it is still alive.
        unsafe { (self.lib.fns.ibv_free_device_list)(self.list.as_ptr()) }
    }
}

impl std::fmt::Debug for DeviceList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One RDMA device of a [`DeviceList`].
#[derive(Clone, Copy)]
pub struct Device<'list> {
    raw: NonNull<sys::ibv_device>,
    lib: &'static sys::Ibverbs,
    _list: PhantomData<&'list DeviceList>,
}

impl<'list> Device<'list> {
    /// `ibv_get_device_name(3)`—The kernel name of the device (e.g. `mlx5_0`, `rxe0`).
    #[doc(alias = "ibv_get_device_name")]
    pub fn name(&self) -> &'list str {
        // SAFETY: `name` is a NUL-terminated array inside the device, alive as long as the
        // list ('list).
        let name = unsafe { CStr::from_ptr((*self.raw.as_ptr()).name.as_ptr()) };
        name.to_str().unwrap_or("(non-UTF-8 name)")
    }

    /// `ibv_get_device_guid(3)`—The node GUID, in host order.
    #[doc(alias = "ibv_get_device_guid")]
    pub fn guid(&self) -> u64 {
        // SAFETY: a live device of the list.
        u64::from_be(unsafe { (self.lib.fns.ibv_get_device_guid)(self.raw.as_ptr()) })
    }

    /// The node type.
    pub fn node_type(&self) -> NodeType {
        // SAFETY: a live device of the list; a plain field read.
        NodeType(unsafe { (*self.raw.as_ptr()).node_type })
    }

    /// The transport type.
    pub fn transport(&self) -> TransportType {
        // SAFETY: a live device of the list; a plain field read.
        TransportType(unsafe { (*self.raw.as_ptr()).transport_type })
    }

    /// `ibv_open_device(3)`—Opens the device. The context does not borrow the list.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from `ibv_open_device` (e.g. `EACCES` without permission on
    /// `/dev/infiniband/uverbsN`).
    #[doc(alias = "ibv_open_device")]
    pub fn open(&self) -> Result<Context> {
        // SAFETY: a live device; libibverbs keeps it referenced by the context it opens.
        let raw = unsafe { (self.lib.fns.ibv_open_device)(self.raw.as_ptr()) };
        let raw = check_ptr(raw, "ibv_open_device")?;
        Ok(Context { raw, lib: self.lib, name: self.name().to_owned(), attr: Default::default() })
    }

    /// The raw device pointer.
    pub fn as_raw(&self) -> *mut sys::ibv_device {
        self.raw.as_ptr()
    }
}

impl std::fmt::Debug for Device<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Device")
            .field("name", &self.name())
            .field("guid", &format_args!("{:016x}", self.guid()))
            .field("node_type", &self.node_type())
            .field("transport", &self.transport())
            .finish()
    }
}

/// An open device (`struct ibv_context`): the parent of every other verbs object.
pub struct Context {
    raw: NonNull<sys::ibv_context>,
    lib: &'static sys::Ibverbs,
    name: String,
    /// The device attributes, queried once when a check first needs them.
    attr: std::sync::OnceLock<DeviceAttr>,
}

// SAFETY: libibverbs verbs are thread-safe (rdma-core's documented guarantee); the context
// is only mutated by the library under its own locks.
unsafe impl Send for Context {}
// SAFETY: as above: every method takes `&self` and calls thread-safe verbs.
unsafe impl Sync for Context {}

impl Context {
    /// Opens the device named `name`, or the first device when `name` is `None`.
    ///
    /// # Errors
    ///
    /// [`Error::NoKernelSupport`] / [`Error::NoDevices`] when there is no device,
    /// [`Error::DeviceNotFound`] (naming the devices present) when none has that name, and the
    /// errors of [`Device::open`].
    pub fn open_by_name(name: Option<&str>) -> Result<Context> {
        let list = DeviceList::new()?;
        let device = match name {
            None => list.iter().next().ok_or(Error::NoDevices)?,
            Some(name) => list.find(name).ok_or_else(|| Error::DeviceNotFound {
                name: name.to_owned(),
                available: list.names(),
            })?,
        };
        device.open()
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
        Context { raw, lib, name, attr: Default::default() }
    }

    /// The device's name.
    pub fn name(&self) -> &str {
        &self.name
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

    /// The device attributes, queried on first use and kept (they do not change).
    pub(crate) fn cached_attr(&self) -> Result<&DeviceAttr> {
        if let Some(attr) = self.attr.get() {
            return Ok(attr);
        }
        let attr = self.query_device()?;
        Ok(self.attr.get_or_init(|| attr))
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

    /// `ibv_query_gid_ex(3)`—Entry `index` of `port`'s GID table, `None` when it is empty.
    ///
    /// With an rdma-core older than v32 (no `ibv_query_gid_ex`), the GID comes from
    /// `ibv_query_gid(3)` and its type from sysfs.
    ///
    /// # Errors
    ///
    /// [`Error::Verb`] from the query (e.g. `EINVAL` for an index past the table).
    #[doc(alias = "ibv_query_gid_ex")]
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Option<GidEntry>> {
        let mut raw = sys::ibv_gid_entry::default();
        // SAFETY: a live context of `lib` and a writable entry of this build's size.
        let ret = unsafe {
            sys::inline::ibv_query_gid_ex(
                &self.lib.fns,
                self.as_raw(),
                port.into(),
                index,
                &mut raw,
                0,
            )
        };
        let entry = match ret {
            0 => GidEntry {
                gid: Gid::from_raw(&raw.gid),
                index,
                port,
                gid_type: GidType(raw.gid_type),
                ndev_ifindex: raw.ndev_ifindex,
            },
            libc::ENODATA => return Ok(None),
            libc::EOPNOTSUPP => return self.query_gid_compat(port, index),
            e => return Err(Error::verb("ibv_query_gid_ex", e)),
        };
        Ok((!entry.gid.is_zero()).then_some(entry))
    }

    fn query_gid_compat(&self, port: u8, index: u32) -> Result<Option<GidEntry>> {
        let mut gid = sys::ibv_gid::default();
        let c_index =
            i32::try_from(index).map_err(|_| Error::verb("ibv_query_gid", libc::EINVAL))?;
        // SAFETY: a live context and a writable GID.
        let ret = unsafe { (self.lib.fns.ibv_query_gid)(self.as_raw(), port, c_index, &mut gid) };
        check_errno(ret, "ibv_query_gid")?;
        let gid = Gid::from_raw(&gid);
        let path =
            format!("/sys/class/infiniband/{}/ports/{port}/gid_attrs/types/{index}", self.name);
        let gid_type = match std::fs::read_to_string(path).as_deref().map(str::trim) {
            Ok("RoCE v2") => GidType::ROCE_V2,
            Ok("IB/RoCE v1") if self.query_port(port)?.is_ethernet() => GidType::ROCE_V1,
            _ => GidType::IB,
        };
        Ok((!gid.is_zero()).then_some(GidEntry { gid, index, port, gid_type, ndev_ifindex: 0 }))
    }

    /// The non-empty entries of `port`'s GID table.
    ///
    /// # Errors
    ///
    /// As [`Context::query_port`] and [`Context::query_gid`].
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        let len = self.query_port(port)?.gid_tbl_len();
        let mut table = Vec::new();
        for index in 0..len {
            table.extend(self.query_gid(port, index)?);
        }
        Ok(table)
    }

    /// The non-empty GID entry `index` of `port`.
    ///
    /// # Errors
    ///
    /// [`Error::GidIndexInvalid`], naming the valid indexes, when `index` is past the table
    /// or its entry is empty; otherwise as [`Context::gid_table`].
    pub fn gid(&self, port: u8, index: u32) -> Result<GidEntry> {
        let table = self.gid_table(port)?;
        table.iter().find(|e| e.index == index).copied().ok_or_else(|| Error::GidIndexInvalid {
            device: self.name.clone(),
            port,
            index,
            valid: if table.is_empty() {
                "none (the table is empty)".into()
            } else {
                table.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
            },
        })
    }

    /// The GID to use by default on `port`: on Ethernet (RoCE) the routable one (RoCE v2 with
    /// an IPv4-mapped address, else RoCE v2 global IPv6, else link-local); on InfiniBand
    /// index 0.
    ///
    /// # Errors
    ///
    /// [`Error::NoRoutableGid`] on an Ethernet port without a RoCE GID; otherwise as
    /// [`Context::gid_table`].
    pub fn routable_gid(&self, port: u8) -> Result<GidEntry> {
        let table = self.gid_table(port)?;
        let pick = if self.query_port(port)?.is_ethernet() {
            routable_gid(&table)
        } else {
            table.iter().find(|e| e.index == 0)
        };
        pick.copied().ok_or_else(|| Error::NoRoutableGid { device: self.name.clone(), port })
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

    /// The most outstanding RDMA READ / atomic operations a QP can be the target of.
    pub fn max_qp_rd_atom(&self) -> i32 {
        self.0.max_qp_rd_atom
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

impl std::fmt::Debug for DeviceAttr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceAttr")
            .field("fw_ver", &self.fw_ver())
            .field("max_qp", &self.max_qp())
            .field("max_qp_wr", &self.max_qp_wr())
            .field("max_cqe", &self.max_cqe())
            .field("phys_port_cnt", &self.phys_port_cnt())
            .finish_non_exhaustive()
    }
}
