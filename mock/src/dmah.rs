//! DMA handles (`ibv_alloc_dmah(3)`, rdma-core v59) and `ibv_reg_mr_ex`, present when
//! [`Optional::dmah`](super::Optional::dmah) says so. The mock device keeps mlx5's rules
//! (`providers/mlx5/verbs.c`, `mlx5_alloc_dmah`): `EOPNOTSUPP` for a `comp_mask` bit it does
//! not know, `EINVAL` without a processing hint or with only one of the CPU and the memory
//! type. As the kernel, a handle an MR uses cannot be deallocated (`EBUSY`). `ibv_reg_mr_ex`
//! registers addresses only (the mock has no dma-buf): `EOPNOTSUPP` for a file descriptor,
//! `EINVAL` without an address or with a handle that is not a live one of the PD's context.

use std::ffi::{c_int, c_uint};

use rdma_verbs_sys::bindings::*;

use super::call::{Call, Verb};
use super::state::{serve, Kind, State};
use super::verbs::{destroy, or_null, register};

/// The `comp_mask` bits of `struct ibv_dmah_init_attr`.
const DMAH_ATTRS: u32 = IBV_DMAH_INIT_ATTR_MASK_CPU_ID
    | IBV_DMAH_INIT_ATTR_MASK_PH
    | IBV_DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE;

/// The steering-tag bits, which mlx5 takes together or not at all.
const STEERING_TAG: u32 = IBV_DMAH_INIT_ATTR_MASK_CPU_ID | IBV_DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE;

/// The `comp_mask` bits of `struct ibv_mr_init_attr` the mock serves or refuses knowingly.
const MR_ATTRS: u32 = IBV_REG_MR_MASK_IOVA
    | IBV_REG_MR_MASK_ADDR
    | IBV_REG_MR_MASK_FD
    | IBV_REG_MR_MASK_FD_OFFSET
    | IBV_REG_MR_MASK_DMAH;

/// `ibv_alloc_dmah`.
///
/// # Safety
///
/// `attr` must be readable.
pub(super) unsafe extern "C" fn ibv_alloc_dmah(
    context: *mut ibv_context,
    attr: *mut ibv_dmah_init_attr,
) -> *mut ibv_dmah {
    // SAFETY: the caller made `attr` readable.
    let ibv_dmah_init_attr { comp_mask, cpu_id, ph, tph_mem_type } = unsafe { attr.read() };
    let call = Call::AllocDmah { comp_mask, cpu_id, ph, tph_mem_type };
    or_null(serve(|s| {
        s.begin(call, Verb::AllocDmah)?;
        s.expect(context, Kind::Context)?;
        if comp_mask & !DMAH_ATTRS != 0 {
            return Err(libc::EOPNOTSUPP);
        }
        let partial_tag = comp_mask & STEERING_TAG != 0 && comp_mask & STEERING_TAG != STEERING_TAG;
        if comp_mask & IBV_DMAH_INIT_ATTR_MASK_PH == 0 || partial_tag {
            return Err(libc::EINVAL);
        }
        Ok(s.adopt(ibv_dmah { context }, Kind::Dmah))
    }))
}

/// `ibv_dealloc_dmah`: `EBUSY` while a registered MR uses the handle.
pub(super) extern "C" fn ibv_dealloc_dmah(dmah: *mut ibv_dmah) -> c_int {
    destroy(dmah, Kind::Dmah, Call::DeallocDmah, Verb::DeallocDmah, |s| {
        forget_stale_users(s);
        if s.dmah_users.iter().any(|&(_, used)| used == dmah) {
            return Err(libc::EBUSY);
        }
        Ok(())
    })
}

/// Drops the handle users whose MR is deregistered.
fn forget_stale_users(s: &mut State) {
    let State { dmah_users, reg, .. } = s;
    dmah_users.retain(|(lkey, _)| reg.mrs.contains_key(lkey));
}

/// `ibv_reg_mr_ex`.
///
/// # Safety
///
/// `attr` must be readable.
pub(super) unsafe extern "C" fn ibv_reg_mr_ex(
    pd: *mut ibv_pd,
    attr: *mut ibv_mr_init_attr,
) -> *mut ibv_mr {
    // SAFETY: the caller made `attr` readable.
    let attr = unsafe { attr.read() };
    let mask = |bit: c_uint| attr.comp_mask & u64::from(bit) != 0;
    let call = Call::RegMrEx {
        comp_mask: attr.comp_mask,
        addr: attr.addr as usize,
        length: attr.length,
        iova: attr.iova,
        access: attr.access,
        dmah: mask(IBV_REG_MR_MASK_DMAH),
    };
    or_null(serve(|s| {
        s.begin(call, Verb::RegMrEx)?;
        s.expect(pd, Kind::Pd)?;
        if attr.comp_mask & !u64::from(MR_ATTRS) != 0 || mask(IBV_REG_MR_MASK_FD) {
            return Err(libc::EOPNOTSUPP);
        }
        if !mask(IBV_REG_MR_MASK_ADDR) || mask(IBV_REG_MR_MASK_FD_OFFSET) {
            return Err(libc::EINVAL);
        }
        let dmah = if mask(IBV_REG_MR_MASK_DMAH) {
            s.expect(attr.dmah, Kind::Dmah)?;
            // SAFETY: live mock PD and handle (checked above).
            if unsafe { (*attr.dmah).context != (*pd).context } {
                return Err(libc::EINVAL);
            }
            Some(attr.dmah)
        } else {
            None
        };
        let iova = if mask(IBV_REG_MR_MASK_IOVA) { attr.iova } else { attr.addr as u64 };
        let mr = register(s, pd, attr.addr, attr.length, iova, attr.access as c_uint)?;
        if let Some(dmah) = dmah {
            forget_stale_users(s);
            // SAFETY: the MR was just made.
            s.dmah_users.push((unsafe { (*mr).lkey }, dmah));
        }
        Ok(mr)
    }))
}
