//! The mock's exported verbs: the functions of its [`IbverbsFns`](rdma_verbs_sys::IbverbsFns).
//!
//! Each records its call, then fails if a failure was injected for it, then checks its
//! objects are live mock objects of the right kind (`EINVAL` otherwise: nothing unknown is
//! ever dereferenced), then does its work. Functions that write through caller pointers are
//! `unsafe`; the rest only touch objects the registry vouches for.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::io;
use std::mem::size_of;
use std::ptr;

use rdma_verbs_sys::bindings::*;

use super::call::{Call, Verb};
use super::device::{device_attr, gid_table, NODE_GUID};
use super::import::{refuse_imported, twins_in_use};
use super::ops::{check_port, new_context, serve_port_query, write_prefix};
use super::registry::MrInfo;
use super::state::{serve, Kind, State};
use super::ContextConfig;

/// The pointer, or NULL with `errno` set: how pointer-returning verbs report errors.
pub(super) fn or_null<T>(result: Result<*mut T, c_int>) -> *mut T {
    result.unwrap_or_else(|errno| {
        // errno is set last: nothing may run between this and the caller reading it.
        set_errno(errno);
        ptr::null_mut()
    })
}

/// 0, or -1 with `errno` set: how `ibv_query_gid` and the event verbs report errors.
fn or_minus_one(result: Result<(), c_int>) -> c_int {
    match result {
        Ok(()) => 0,
        Err(errno) => {
            // errno is set last: nothing may run between this and the caller reading it.
            set_errno(errno);
            -1
        }
    }
}

/// 0, or the errno: how `int` verbs report errors.
pub(super) fn status(result: Result<(), c_int>) -> c_int {
    result.err().unwrap_or(0)
}

/// A destroy verb: records `call` (failing if `verb` was told to), checks that `object` is a
/// live `kind`, lets `forget` refuse with its errno or drop what the registry keeps of the
/// object, and frees it.
pub(super) fn destroy<T>(
    object: *mut T,
    kind: Kind,
    call: Call,
    verb: Verb,
    forget: impl FnOnce(&mut State) -> Result<(), c_int>,
) -> c_int {
    status(serve(|s| {
        s.begin(call, verb)?;
        s.expect(object, kind)?;
        forget(s)?;
        s.release(object, kind)
    }))
}

/// `EBUSY` while the object is `in_use` by another.
fn busy_if(in_use: bool) -> Result<(), c_int> {
    if in_use {
        Err(libc::EBUSY)
    } else {
        Ok(())
    }
}

fn set_errno(errno: c_int) {
    // SAFETY: `__errno_location` returns this thread's errno, always valid to write.
    unsafe { *libc::__errno_location() = errno };
}

/// `ibv_get_device_list`: the mock device, in a NULL-terminated array.
///
/// # Safety
///
/// `num_devices` must be NULL or writable.
pub(super) unsafe extern "C" fn ibv_get_device_list(
    num_devices: *mut c_int,
) -> *mut *mut ibv_device {
    let list = serve(|s| {
        s.begin(Call::GetDeviceList, Verb::GetDeviceList)?;
        let list = [s.device(), ptr::null_mut()];
        Ok(s.adopt(list, Kind::DeviceList).cast::<*mut ibv_device>())
    });
    if !num_devices.is_null() {
        // SAFETY: the caller made a non-NULL `num_devices` writable.
        unsafe { num_devices.write(if list.is_ok() { 1 } else { 0 }) };
    }
    or_null(list)
}

/// `ibv_free_device_list`.
pub(super) extern "C" fn ibv_free_device_list(list: *mut *mut ibv_device) {
    // Nothing to report: freeing something unknown is ignored.
    let _ = serve(|s| {
        s.record(Call::FreeDeviceList);
        s.release(list, Kind::DeviceList)
    });
}

/// `ibv_get_device_name`: the name of the mock device, NULL for any other pointer.
pub(super) extern "C" fn ibv_get_device_name(device: *mut ibv_device) -> *const c_char {
    let name = serve(|s| {
        s.record(Call::GetDeviceName);
        let ours = s.device();
        // SAFETY: `device` is the mock's own device, which lives as long as the state.
        Ok(if device == ours { unsafe { (*ours).name.as_ptr() } } else { ptr::null() })
    });
    name.unwrap_or(ptr::null())
}

/// `ibv_get_device_guid`: [`NODE_GUID`], big-endian.
pub(super) extern "C" fn ibv_get_device_guid(device: *mut ibv_device) -> __be64 {
    let guid = serve(|s| {
        s.record(Call::GetDeviceGuid);
        Ok(if device == s.device() { NODE_GUID.to_be() } else { 0 })
    });
    guid.unwrap_or(0)
}

/// `ibv_open_device`: a context as [`ContextConfig::default`] describes.
pub(super) extern "C" fn ibv_open_device(device: *mut ibv_device) -> *mut ibv_context {
    or_null(serve(|s| {
        s.begin(Call::OpenDevice, Verb::OpenDevice)?;
        if device != s.device() {
            return Err(libc::ENODEV);
        }
        Ok(new_context(s, &ContextConfig::default()).as_ptr())
    }))
}

/// `ibv_close_device`. Objects of the context stay alive until the `Mock` is dropped.
pub(super) extern "C" fn ibv_close_device(context: *mut ibv_context) -> c_int {
    status(serve(|s| {
        s.begin(Call::CloseDevice, Verb::CloseDevice)?;
        s.release(context, Kind::Context)
    }))
}

/// `ibv_query_device`: [`device_attr`], with the context's configured `vendor_id` and limits.
///
/// # Safety
///
/// `attr` must be writable.
pub(super) unsafe extern "C" fn ibv_query_device(
    context: *mut ibv_context,
    attr: *mut ibv_device_attr,
) -> c_int {
    let result = serve(|s| {
        s.begin(Call::QueryDevice, Verb::QueryDevice)?;
        s.expect(context, Kind::Context)?;
        Ok(s.device_attr(context))
    });
    if let Ok(device) = result {
        // SAFETY: the caller made `attr` writable.
        unsafe { attr.write(device) };
    }
    status(result.map(drop))
}

/// The size of `struct _compat_ibv_port_attr`: it ends with `flags`, right before
/// `port_cap_flags2`, which newer rdma-core added.
const COMPAT_PORT_ATTR_LEN: usize = std::mem::offset_of!(ibv_port_attr, port_cap_flags2);
static_assertions::const_assert_eq!(COMPAT_PORT_ATTR_LEN, 48);

/// `ibv_query_port@@IBVERBS_1.1`: fills only the 48-byte compat struct.
///
/// # Safety
///
/// `port_attr` must be writable for 48 bytes.
pub(super) unsafe extern "C" fn ibv_query_port(
    context: *mut ibv_context,
    port_num: u8,
    port_attr: *mut _compat_ibv_port_attr,
) -> c_int {
    let call = Call::QueryPortCompat { port: port_num };
    let result = serve_port_query(call, Verb::QueryPortCompat, context, port_num);
    if result.is_ok() {
        // SAFETY: the caller made the 48-byte compat struct writable.
        unsafe { write_prefix(port_attr.cast(), COMPAT_PORT_ATTR_LEN) };
    }
    status(result)
}

/// Entry `index` of the mock port's GID table: `EINVAL` past it, `ENODATA` when empty.
pub(super) fn gid_entry(port: u32, index: u32) -> Result<ibv_gid_entry, c_int> {
    check_port(port)?;
    let table = gid_table();
    let entry = *table.get(index as usize).ok_or(libc::EINVAL)?;
    // SAFETY: every member of `union ibv_gid` is plain bytes.
    if unsafe { entry.gid.raw } == [0; 16] {
        return Err(libc::ENODATA);
    }
    Ok(entry)
}

/// `ibv_query_gid`: 0, or -1 with `errno` set, as its man page says; an empty entry reads
/// as the zero GID.
///
/// # Safety
///
/// `gid` must be writable.
pub(super) unsafe extern "C" fn ibv_query_gid(
    context: *mut ibv_context,
    port_num: u8,
    index: c_int,
    gid: *mut ibv_gid,
) -> c_int {
    let result = serve(|s| {
        s.begin(Call::QueryGid { port: port_num, index }, Verb::QueryGid)?;
        s.expect(context, Kind::Context)?;
        let index = u32::try_from(index).map_err(|_| libc::EINVAL)?;
        match gid_entry(port_num.into(), index) {
            Ok(entry) => Ok(entry.gid),
            Err(libc::ENODATA) => Ok(ibv_gid::default()),
            Err(errno) => Err(errno),
        }
    });
    or_minus_one(result.map(|value| {
        // SAFETY: the caller made `gid` writable.
        unsafe { gid.write(value) }
    }))
}

/// `_ibv_query_gid_ex`: `EINVAL` for non-zero flags or an entry smaller than this build's.
///
/// # Safety
///
/// `entry` must be writable for `entry_size` bytes.
pub(super) unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut ibv_context,
    port_num: u32,
    gid_index: u32,
    entry: *mut ibv_gid_entry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    let call = Call::QueryGidEx { port: port_num, index: gid_index, flags, entry_size };
    let result = serve(|s| {
        s.begin(call, Verb::QueryGidEx)?;
        s.expect(context, Kind::Context)?;
        if flags != 0 || entry_size < size_of::<ibv_gid_entry>() {
            return Err(libc::EINVAL);
        }
        gid_entry(port_num, gid_index)
    });
    match result {
        Ok(value) => {
            // SAFETY: the caller made `entry_size` bytes writable, at least one entry.
            unsafe { entry.write(value) };
            0
        }
        Err(errno) => errno,
    }
}

/// `ibv_query_port_speed`: [`PORT_SPEED`](crate::PORT_SPEED) for port 1; 0 or the errno,
/// as its man page says.
///
/// # Safety
///
/// `port_speed` must be writable.
pub(super) unsafe extern "C" fn ibv_query_port_speed(
    context: *mut ibv_context,
    port_num: u32,
    port_speed: *mut u64,
) -> c_int {
    let call = Call::QueryPortSpeed { port: port_num };
    let result = serve_port_query(call, Verb::QueryPortSpeed, context, port_num);
    match result {
        Ok(()) => {
            // SAFETY: the caller made `port_speed` writable.
            unsafe { port_speed.write(crate::PORT_SPEED) };
            0
        }
        Err(errno) => errno,
    }
}

/// `ibv_alloc_pd`.
pub(super) extern "C" fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd {
    or_null(serve(|s| {
        s.begin(Call::AllocPd, Verb::AllocPd)?;
        s.expect(context, Kind::Context)?;
        let handle = s.next_id();
        Ok(s.adopt(ibv_pd { context, handle }, Kind::Pd))
    }))
}

/// `ibv_dealloc_pd`: `EBUSY` while an MR or QP uses the PD (here or in a context that
/// imported it); `EINVAL` for an imported one.
pub(super) extern "C" fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int {
    destroy(pd, Kind::Pd, Call::DeallocPd, Verb::DeallocPd, |s| {
        refuse_imported(s, pd, "ibv_dealloc_pd")?;
        busy_if(s.pd_in_use(pd) || twins_in_use(s, pd))
    })
}

/// Registers `addr..addr + length` on `pd` (shared by both registration symbols): `EINVAL`
/// for an empty range, or remote write / atomic access without local write (as the kernel's
/// `ib_check_mr_access`); `EFAULT` for device memory without a peer-memory client
/// ([`PeerMemory::resolve`](crate::peer::PeerMemory::resolve)).
pub(super) fn register(
    s: &mut State,
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> Result<*mut ibv_mr, c_int> {
    s.expect(pd, Kind::Pd)?;
    let remote = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC;
    if addr.is_null()
        || length == 0
        || (access & remote != 0 && access & IBV_ACCESS_LOCAL_WRITE == 0)
    {
        return Err(libc::EINVAL);
    }
    // Device memory is reached through the NIC's view of it, never its device address.
    let nic = s.peer.resolve(addr as usize, length)?;
    // SAFETY: `pd` is a live mock PD (checked above).
    let context = unsafe { (*pd).context };
    let id = s.next_id();
    let (lkey, rkey) = (0x1000 + id, 0x2000 + id);
    let mr = ibv_mr { context, pd, addr, length, handle: id, lkey, rkey };
    let info = MrInfo { pd, rkey, iova, addr: nic, len: length, access };
    s.reg.mrs.insert(lkey, info);
    Ok(s.adopt(mr, Kind::Mr))
}

/// `ibv_reg_mr@@IBVERBS_1.1`.
pub(super) extern "C" fn ibv_reg_mr(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut ibv_mr {
    or_null(serve(|s| {
        s.begin(Call::RegMr { addr: addr as usize, length, access }, Verb::RegMr)?;
        register(s, pd, addr, length, addr as u64, access as c_uint)
    }))
}

/// `ibv_reg_mr_iova2`.
pub(super) extern "C" fn ibv_reg_mr_iova2(
    pd: *mut ibv_pd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_uint,
) -> *mut ibv_mr {
    or_null(serve(|s| {
        s.begin(Call::RegMrIova2 { addr: addr as usize, length, iova, access }, Verb::RegMrIova2)?;
        register(s, pd, addr, length, iova, access)
    }))
}

/// `ibv_reg_dmabuf_mr`: the mock device has no dma-buf support, so a live PD gets
/// `EOPNOTSUPP`, as from rxe (not recorded: nothing is registered).
pub(super) extern "C" fn ibv_reg_dmabuf_mr(
    pd: *mut ibv_pd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut ibv_mr {
    or_null(serve(|s| {
        s.expect(pd, Kind::Pd)?;
        Err(libc::EOPNOTSUPP)
    }))
}

/// `ibv_dereg_mr`: the MR leaves the registry, so work requests still naming it are
/// violations when they execute.
pub(super) extern "C" fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int {
    destroy(mr, Kind::Mr, Call::DeregMr, Verb::DeregMr, |s| {
        refuse_imported(s, mr, "ibv_dereg_mr")?;
        // SAFETY: a live mock MR (checked before `forget`).
        let lkey = unsafe { (*mr).lkey };
        // As rxe: not while a window is bound to it.
        if s.reg.has_windows(lkey) {
            return Err(libc::EINVAL);
        }
        s.reg.mrs.remove(&lkey);
        Ok(())
    })
}

/// `ibv_create_cq`: `EINVAL` outside `1..=max_cqe`; the CQ gets `cqe` rounded up to a power
/// of two, as providers round.
pub(super) extern "C" fn ibv_create_cq(
    context: *mut ibv_context,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut ibv_comp_channel,
    comp_vector: c_int,
) -> *mut ibv_cq {
    let call = Call::CreateCq { cqe, channel: !channel.is_null(), comp_vector };
    or_null(serve(|s| {
        s.begin(call, Verb::CreateCq)?;
        s.expect(context, Kind::Context)?;
        if !channel.is_null() {
            s.expect(channel, Kind::CompChannel)?;
        }
        if !(1..=device_attr().max_cqe).contains(&cqe) {
            return Err(libc::EINVAL);
        }
        let handle = s.next_id();
        let cq = ibv_cq {
            context,
            channel,
            cq_context,
            handle,
            cqe: (cqe as u32).next_power_of_two() as c_int,
            ..Default::default()
        };
        Ok(s.adopt(cq, Kind::Cq))
    }))
}

/// `ibv_destroy_cq`: `EBUSY` while a QP uses the CQ.
pub(super) extern "C" fn ibv_destroy_cq(cq: *mut ibv_cq) -> c_int {
    destroy(cq, Kind::Cq, Call::DestroyCq, Verb::DestroyCq, |s| busy_if(s.cq_in_use(cq)))
}

/// `ibv_create_comp_channel`: its descriptor is an eventfd, a real one callers can set flags
/// on and poll, readable while completion events are queued
/// ([`Mock::push_cq_event`](super::Mock::push_cq_event)).
pub(super) extern "C" fn ibv_create_comp_channel(
    context: *mut ibv_context,
) -> *mut ibv_comp_channel {
    or_null(serve(|s| {
        s.begin(Call::CreateCompChannel, Verb::CreateCompChannel)?;
        s.expect(context, Kind::Context)?;
        // (The channel owns the descriptor, closed when it is freed.)
        let fd = super::ops::event_fd();
        if fd < 0 {
            return Err(io::Error::last_os_error().raw_os_error().unwrap_or(libc::EMFILE));
        }
        Ok(s.adopt(ibv_comp_channel { context, fd, refcnt: 0 }, Kind::CompChannel))
    }))
}

/// `ibv_destroy_comp_channel`: `EBUSY` while a CQ uses the channel.
pub(super) extern "C" fn ibv_destroy_comp_channel(channel: *mut ibv_comp_channel) -> c_int {
    let (call, verb) = (Call::DestroyCompChannel, Verb::DestroyCompChannel);
    destroy(channel, Kind::CompChannel, call, verb, |s| busy_if(s.channel_in_use(channel)))
}

/// `ibv_get_cq_event`: the oldest event queued on `channel`, its CQ and that CQ's
/// `cq_context`; -1 with `errno` set on failure (`EAGAIN`: none queued, as on a non-blocking
/// channel; a blocking one would wait).
///
/// # Safety
///
/// `cq` and `cq_context` must be writable.
pub(super) unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut ibv_comp_channel,
    cq: *mut *mut ibv_cq,
    cq_context: *mut *mut c_void,
) -> c_int {
    let result = serve(|s| {
        s.begin(Call::GetCqEvent, Verb::GetCqEvent)?;
        s.expect(channel, Kind::CompChannel)?;
        s.pop_cq_event(channel)
    });
    or_minus_one(result.map(|got| {
        // SAFETY: the caller made both writable; `got` is a live CQ (an extended one starts
        // with the same fields).
        unsafe {
            cq.write(got);
            cq_context.write((*got).cq_context);
        }
    }))
}

/// `ibv_ack_cq_events`: counts the acknowledgements; a CQ destroyed with fewer (or more)
/// than its events read is fatal at the mock's drop.
pub(super) extern "C" fn ibv_ack_cq_events(cq: *mut ibv_cq, nevents: c_uint) {
    // Nothing to report: the function returns nothing.
    let _ = serve(|s| {
        s.record(Call::AckCqEvents { nevents });
        s.ack_cq_events(cq, nevents);
        Ok(())
    });
}

/// `ibv_get_async_event`: the oldest event queued on `context` by
/// [`Mock::push_async_event`](super::Mock::push_async_event), or -1 with `errno` set (`EAGAIN`
/// when none is queued and the async_fd is non-blocking).
///
/// # Safety
///
/// `event` must be writable.
pub(super) unsafe extern "C" fn ibv_get_async_event(
    context: *mut ibv_context,
    event: *mut ibv_async_event,
) -> c_int {
    let result = serve(|s| {
        s.begin(Call::GetAsyncEvent, Verb::GetAsyncEvent)?;
        s.expect(context, Kind::Context)?;
        s.pop_async_event(context)
    });
    or_minus_one(result.map(|got| {
        // SAFETY: the caller made `event` writable.
        unsafe { event.write(got) }
    }))
}

/// `ibv_ack_async_event`: counts the acknowledgement
/// ([`Mock::unacked_async_events`](super::Mock::unacked_async_events)).
///
/// # Safety
///
/// `event` must be readable.
pub(super) unsafe extern "C" fn ibv_ack_async_event(event: *mut ibv_async_event) {
    // SAFETY: the caller made `event` readable.
    let event_type = unsafe { (*event).event_type };
    // Nothing to report: the function returns nothing.
    let _ = serve(|s| {
        s.record(Call::AckAsyncEvent { event_type });
        s.ack_async_event();
        Ok(())
    });
}
