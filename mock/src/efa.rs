//! A mock libefa for the SRD transport (`efadv_query_device`, `efadv_create_qp_ex`).
//!
//! - [`library`]: an [`Efa`] whose functions keep libefa's rules (its `providers/efa/verbs.c`):
//!   on a device that is not EFA ([`EfaConfig::efa`] `false`) both answer `EOPNOTSUPP`;
//!   `efadv_query_device` wants room up to `inline_buf_size` and reports the configured
//!   attributes; `efadv_create_qp_ex` wants `IBV_QPT_DRIVER`, `EFADV_QP_DRIVER_TYPE_SRD`, a
//!   zero `comp_mask` and extension (`EINVAL`), the PD in the mask and no SRQ (`EINVAL`), and
//!   capabilities within the configured ones (`EINVAL`).
//! - [`configure`]: what this thread's mock EFA device is ([`EfaConfig`]).
//!
//! The SRD QPs are QPs of the base mock of type `IBV_QPT_DRIVER`: they transition as UD QPs
//! do (the masks of `ibv_modify_qp(3)` for UD), their SENDs name an AH, remote QPN and Q_Key
//! as UD's, and SENDs between two of them are executed as UD's, without a GRH in the receive
//! buffer (EFA writes none) and waiting for a receive instead of being dropped (SRD is
//! reliable). Their creation is recorded as [`Call::CreateQp`] with `qp_type`
//! `IBV_QPT_DRIVER`, and fails as [`Verb::CreateQp`] is told to.

use std::cell::Cell;
use std::ffi::c_int;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::sync::OnceLock;

use rdma_verbs_sys::bindings::*;
use rdma_verbs_sys::efa::{Efa, EfaFns};

use super::call::{Call, Verb};
use super::qp::{new_qp_of_type, track};
use super::state::{serve, Kind};
use super::verbs::or_null;

/// What a mock libefa reports as its path.
pub const LIBRARY_PATH: &str = "mock/libefa.so.1";

/// What this thread's mock EFA device is ([`configure`]): [`EfaConfig::default`] until
/// configured, then kept for the thread until configured again.
#[derive(Clone, Copy, Debug)]
pub struct EfaConfig {
    /// Whether the device is an EFA one; `false` answers `EOPNOTSUPP`, as libefa does for a
    /// device of another provider.
    pub efa: bool,
    /// What `efadv_query_device` reports (its `comp_mask` is 0, as libefa's).
    pub attr: efadv_device_attr,
}

impl Default for EfaConfig {
    /// An EFA device of the mock's own numbers: 4096 WRs per queue, 2 send and 1 receive
    /// SGE, 32 bytes inline, RDMA READ up to 1 GiB, RNR retry.
    fn default() -> Self {
        EfaConfig {
            efa: true,
            attr: efadv_device_attr {
                max_sq_wr: 4096,
                max_rq_wr: 4096,
                max_sq_sge: 2,
                max_rq_sge: 1,
                inline_buf_size: 32,
                device_caps: EFADV_DEVICE_ATTR_CAPS_RDMA_READ | EFADV_DEVICE_ATTR_CAPS_RNR_RETRY,
                max_rdma_size: 1 << 30,
                ..Default::default()
            },
        }
    }
}

thread_local! {
    static CONFIG: Cell<EfaConfig> = Cell::new(EfaConfig::default());
}

/// Makes this thread's mock EFA device `config`.
pub fn configure(config: EfaConfig) {
    CONFIG.set(config);
}

/// The mock libefa as a process-wide library.
pub fn library() -> &'static Efa {
    static LIBRARY: OnceLock<Efa> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        let fns = EfaFns { efadv_query_device, efadv_create_qp_ex };
        // SAFETY: each function keeps the contract of its libefa namesake over the mock's
        // objects.
        unsafe { Efa::from_fns(fns, PathBuf::from(LIBRARY_PATH)) }
    })
}

/// `efadv_query_device`: 0 or the errno (`EOPNOTSUPP`: not EFA; `EINVAL`: `inlen` short of
/// `inline_buf_size`, libefa's "compatibility issues").
///
/// # Safety
///
/// `attr` must be writable for `inlen` bytes.
unsafe extern "C" fn efadv_query_device(
    _ctx: *mut ibv_context,
    attr: *mut efadv_device_attr,
    inlen: u32,
) -> c_int {
    let config = CONFIG.get();
    if !config.efa {
        return libc::EOPNOTSUPP;
    }
    let least = offset_of!(efadv_device_attr, inline_buf_size) + size_of::<u16>();
    if (inlen as usize) < least {
        return libc::EINVAL;
    }
    let len = (inlen as usize).min(size_of::<efadv_device_attr>());
    // SAFETY: the caller made `inlen` bytes writable; at most that many of the struct, zeroed
    // first as libefa does.
    unsafe {
        attr.cast::<u8>().write_bytes(0, inlen as usize);
        std::ptr::copy_nonoverlapping((&raw const config.attr).cast::<u8>(), attr.cast(), len);
    }
    0
}

/// `efadv_create_qp_ex`: an SRD QP of the base mock (see the module docs), or NULL with
/// `errno`.
///
/// # Safety
///
/// `attr_ex` must be valid for reads and writes, `efa_attr` for reads of `inlen` bytes.
unsafe extern "C" fn efadv_create_qp_ex(
    ctx: *mut ibv_context,
    attr_ex: *mut ibv_qp_init_attr_ex,
    efa_attr: *mut efadv_qp_init_attr,
    inlen: u32,
) -> *mut ibv_qp {
    let config = CONFIG.get();
    // SAFETY: the caller passes valid structs.
    let (a, efa) = unsafe { (attr_ex.read(), efa_attr.read()) };
    let call = Call::CreateQp {
        qp_type: a.qp_type,
        sq_sig_all: a.sq_sig_all,
        max_send_wr: a.cap.max_send_wr,
        max_recv_wr: a.cap.max_recv_wr,
        max_send_sge: a.cap.max_send_sge,
        max_recv_sge: a.cap.max_recv_sge,
        max_inline_data: a.cap.max_inline_data,
    };
    // SAFETY: the caller made `inlen` bytes of `efa_attr` readable.
    let extension = unsafe {
        std::slice::from_raw_parts(efa_attr.cast::<u8>(), inlen as usize)
            .get(offset_of!(efadv_qp_init_attr, driver_qp_type) + size_of::<u32>()..)
            .unwrap_or_default()
            .to_vec()
    };
    or_null(serve(|s| {
        s.begin(call, Verb::CreateQp)?;
        s.expect(ctx, Kind::Context)?;
        if !config.efa {
            return Err(libc::EOPNOTSUPP);
        }
        let least = offset_of!(efadv_qp_init_attr, driver_qp_type) + size_of::<u32>();
        if a.qp_type != IBV_QPT_DRIVER
            || (inlen as usize) < least
            || efa.comp_mask != 0
            || extension.iter().any(|&b| b != 0)
        {
            return Err(libc::EINVAL);
        }
        if efa.driver_qp_type != EFADV_QP_DRIVER_TYPE_SRD {
            return Err(libc::EOPNOTSUPP);
        }
        if a.comp_mask & IBV_QP_INIT_ATTR_PD == 0 || !a.srq.is_null() {
            return Err(libc::EINVAL);
        }
        let limits = config.attr;
        let cap = a.cap;
        if cap.max_send_wr > limits.max_sq_wr
            || cap.max_recv_wr > limits.max_rq_wr
            || cap.max_send_sge > limits.max_sq_sge.into()
            || cap.max_recv_sge > limits.max_rq_sge.into()
            || cap.max_inline_data > limits.inline_buf_size.into()
        {
            return Err(libc::EINVAL);
        }
        // SAFETY: `ibv_qp_init_attr` is the prefix of `ibv_qp_init_attr_ex`.
        let init = unsafe { &mut *attr_ex.cast::<ibv_qp_init_attr>() };
        let qp = new_qp_of_type(s, a.pd, init)?;
        let qp = s.adopt(qp, Kind::Qp);
        track(s, qp, init);
        Ok(qp)
    }))
}
