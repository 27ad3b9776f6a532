//! Devices: the list libibverbs sees ([`DeviceList`]) and its entries ([`Device`], with
//! their [`NodeType`] and [`TransportType`]). An opened device is a [`Context`].
#![allow(unsafe_code)]
//! # Safety
//!
//! `DeviceList` owns the array from `ibv_get_device_list` until `ibv_free_device_list`;
//! a [`Device`] borrows the list, so it cannot outlive it.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::path::Path;
use std::ptr::NonNull;

use rdma_verbs_sys as sys;

use crate::c_enum::c_enum;
use crate::context::Context;
use crate::error::{check_ptr, descriptors_exhausted, Error, Result};

/// The sysfs class of the uverbs devices, which libibverbs reads to list them.
const UVERBS_CLASS: &str = "/sys/class/infiniband_verbs";

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
#[must_use = "the list is freed when dropped"]
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
    /// means; [`Context::open_first`] turns it into [`Error::NoDevices`]).
    ///
    /// # Errors
    ///
    /// [`Error::Load`] when libibverbs cannot be loaded; [`Error::NoKernelSupport`] when the
    /// kernel exposes no uverbs at all (`ENOSYS`, and `/sys/class/infiniband_verbs` is
    /// absent); [`Error::Verb`] otherwise — with `EMFILE` and RLIMIT_NOFILE named when the
    /// `ENOSYS` came from the process having no file descriptor left.
    #[doc(alias = "ibv_get_device_list")]
    pub fn new() -> Result<DeviceList> {
        let lib = lib()?;
        let mut n = 0;
        // SAFETY: `n` is writable; the function returns a NULL-terminated array or NULL.
        let list = unsafe { (lib.fns.ibv_get_device_list)(&mut n) };
        match NonNull::new(list) {
            Some(list) => Ok(DeviceList { list, len: n.max(0) as usize, lib }),
            None => match std::io::Error::last_os_error().raw_os_error() {
                // libibverbs says ENOSYS whenever it cannot read the class directory; stat
                // needs no descriptor, so tell "absent" from "no descriptor left".
                Some(libc::ENOSYS) if !Path::new(UVERBS_CLASS).exists() => {
                    Err(Error::NoKernelSupport)
                }
                Some(libc::ENOSYS) if descriptors_exhausted() => Err(Error::out_of_descriptors(
                    "ibv_get_device_list",
                    "libibverbs could not open /sys/class/infiniband_verbs (it reports \
                         ENOSYS then, as if the kernel had no RDMA)",
                )),
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
        // SAFETY: `raw` was just opened by this library's `ibv_open_device`; the context owns
        // it (nothing else closes it).
        Ok(unsafe { Context::from_raw(self.lib, raw, self.name().to_owned()) })
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
