//! DMA handles (`ibv_alloc_dmah`) and registration with one (`ibv_reg_mr_ex`): what reaches
//! the provider, the order of deallocation, and the refusals of libraries before rdma-core
//! v59 and providers without them.

use rdma_verbs::{AccessFlags, DmaHandleAttr, InvalidInputKind, RegisterOptions, TphMemType};
use rdma_verbs_mock::{Call, ContextConfig, Optional, Verb};
use rdma_verbs_sys as sys;

use super::{assert_unsupported, assert_verb_error, open, Fixture};

/// A processing hint alone: what mlx5 asks at least.
fn hint_only() -> DmaHandleAttr {
    DmaHandleAttr { ph: Some(0), ..Default::default() }
}

/// The `comp_mask` of an `ibv_reg_mr_ex` by address with a handle, and an IOVA if `iova`.
fn reg_mr_ex_mask(iova: bool) -> u64 {
    let iova = if iova { sys::IBV_REG_MR_MASK_IOVA } else { 0 };
    u64::from(sys::IBV_REG_MR_MASK_ADDR | sys::IBV_REG_MR_MASK_DMAH | iova)
}

#[test]
fn a_handle_carries_its_hints_and_its_regions_go_through_reg_mr_ex_before_it() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    f.mock.take_calls();
    let attr =
        DmaHandleAttr { cpu_id: Some(3), ph: Some(2), mem_type: Some(TphMemType::Persistent) };
    let dmah = f.ctx.alloc_dmah(&attr).unwrap();
    let all = sys::IBV_DMAH_INIT_ATTR_MASK_CPU_ID
        | sys::IBV_DMAH_INIT_ATTR_MASK_PH
        | sys::IBV_DMAH_INIT_ATTR_MASK_TPH_MEM_TYPE;
    let pm = sys::IBV_TPH_MEM_TYPE_PM as u8;
    let alloc = Call::AllocDmah { comp_mask: all, cpu_id: 3, ph: 2, tph_mem_type: pm };
    assert_eq!(f.mock.take_calls(), [alloc]);
    assert_eq!(dmah.attr(), &attr);
    assert_eq!(dmah.context().as_raw(), f.ctx.as_raw());

    let access = AccessFlags::LOCAL_WRITE;
    let options = RegisterOptions { dma_handle: Some(&dmah), ..Default::default() };
    let mr = pd.register_with(4096, access, options).unwrap();
    let iova = 0x10_0000;
    let options = RegisterOptions { iova: Some(iova), dma_handle: Some(&dmah) };
    let remote = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE;
    let writable = pd.register_remote_writable_with(8192, remote, options).unwrap();
    let (addr, writable_addr) = (mr.addr() as usize, writable.addr() as usize);
    assert_eq!(
        f.mock.take_calls(),
        [
            Call::RegMrEx {
                comp_mask: reg_mr_ex_mask(false),
                addr,
                length: 4096,
                iova: 0,
                access: access.bits() as i32,
                dmah: true
            },
            Call::RegMrEx {
                comp_mask: reg_mr_ex_mask(true),
                addr: writable_addr,
                length: 8192,
                iova,
                access: remote.bits() as i32,
                dmah: true
            },
        ]
    );
    assert_eq!(mr.iova(), mr.addr());
    assert_eq!(writable.iova(), iova);
    assert_eq!(writable.remote(16..).unwrap().addr, iova + 16);

    // The regions borrow the handle: they deregister first, and the mock (as the kernel)
    // would refuse to free a handle a region still used.
    drop((mr, writable));
    dmah.destroy().unwrap();
    assert_eq!(f.mock.take_calls(), [Call::DeregMr, Call::DeregMr, Call::DeallocDmah]);
}

#[test]
fn without_a_handle_register_with_takes_the_plain_verbs() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    f.mock.take_calls();
    let access = AccessFlags::LOCAL_WRITE;
    let mr = pd.register_with(64, access, RegisterOptions::default()).unwrap();
    let options = RegisterOptions { iova: Some(0), ..Default::default() };
    let at_zero = pd.register_with(64, access, options).unwrap();
    let (addr, zero_addr) = (mr.addr() as usize, at_zero.addr() as usize);
    // (The inline `ibv_reg_mr` calls `ibv_reg_mr_iova2` at the address, when it exists.)
    let bits = access.bits();
    assert_eq!(
        f.mock.take_calls(),
        [
            Call::RegMrIova2 { addr, length: 64, iova: addr as u64, access: bits },
            Call::RegMrIova2 { addr: zero_addr, length: 64, iova: 0, access: bits },
        ]
    );
}

#[test]
fn dma_handles_are_unsupported_before_v59_or_when_the_provider_refuses() {
    let before_v59 = Optional { dmah: false, ..Optional::ALL };
    let f = Fixture::with(before_v59, ContextConfig::default());
    assert_unsupported(
        &f.ctx.alloc_dmah(&hint_only()).unwrap_err(),
        "ibv_alloc_dmah (rdma-core v59+)",
    );
    assert_eq!(f.mock.take_calls(), [], "nothing reached the library");
    drop(f);

    // libibverbs' stubs answer EOPNOTSUPP for a provider without the ops (rxe, siw).
    let f = Fixture::new();
    f.mock.fail(Verb::AllocDmah, libc::EOPNOTSUPP);
    assert_unsupported(&f.ctx.alloc_dmah(&hint_only()).unwrap_err(), "ibv_alloc_dmah");
    let pd = f.ctx.alloc_pd().unwrap();
    let dmah = f.ctx.alloc_dmah(&hint_only()).unwrap();
    f.mock.fail(Verb::RegMrEx, libc::EOPNOTSUPP);
    let options = RegisterOptions { dma_handle: Some(&dmah), ..Default::default() };
    let err = pd.register_with(4096, AccessFlags::LOCAL_WRITE, options).unwrap_err();
    assert_unsupported(&err, "ibv_reg_mr_ex");
    // Nothing was left registered with the handle.
    dmah.destroy().unwrap();
}

#[test]
fn the_provider_rules_and_a_hint_outside_pcie_reach_the_caller() {
    let f = Fixture::new();
    // mlx5: a processing hint is required, and the CPU and memory type go together.
    let no_hint = DmaHandleAttr { cpu_id: Some(0), mem_type: Some(TphMemType::Volatile), ph: None };
    let cpu_alone = DmaHandleAttr { cpu_id: Some(0), ..hint_only() };
    for attr in [no_hint, cpu_alone] {
        let err = f.ctx.alloc_dmah(&attr).unwrap_err();
        assert_verb_error(&err, "ibv_alloc_dmah", libc::EINVAL, &[]);
    }
    f.mock.take_calls();
    let err = f.ctx.alloc_dmah(&DmaHandleAttr { ph: Some(4), ..Default::default() }).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::Range), "{err:?}");
    assert!(err.to_string().contains("2-bit PH field"), "{err}");
    assert_eq!(f.mock.take_calls(), [], "refused before the provider");
}

#[test]
fn a_handle_of_another_context_is_refused_before_the_provider() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let other = open(&f.mock, Optional::ALL, ContextConfig::default());
    let dmah = other.alloc_dmah(&hint_only()).unwrap();
    f.mock.take_calls();
    let options = RegisterOptions { dma_handle: Some(&dmah), ..Default::default() };
    let err = pd.register_with(4096, AccessFlags::LOCAL_WRITE, options).unwrap_err();
    assert_eq!(err.invalid_input_kind(), Some(InvalidInputKind::OtherContext), "{err:?}");
    assert!(err.to_string().contains("allocate it from the PD's context"), "{err}");
    assert_eq!(f.mock.take_calls(), []);
    drop(dmah);
    drop(other);
}

#[test]
fn a_leaked_region_keeps_its_handle_busy_and_a_failed_deallocation_leaks() {
    let f = Fixture::new();
    let pd = f.ctx.alloc_pd().unwrap();
    let dmah = f.ctx.alloc_dmah(&hint_only()).unwrap();
    let options = RegisterOptions { dma_handle: Some(&dmah), ..Default::default() };
    let mr = pd.register_with(4096, AccessFlags::LOCAL_WRITE, options).unwrap();
    f.mock.fail(Verb::DeregMr, libc::EIO);
    assert_verb_error(&mr.destroy().unwrap_err(), "ibv_dereg_mr", libc::EIO, &[]);
    // The leaked region still uses the handle: the provider refuses to free it.
    assert_verb_error(&dmah.destroy().unwrap_err(), "ibv_dealloc_dmah", libc::EBUSY, &[]);

    let dmah = f.ctx.alloc_dmah(&hint_only()).unwrap();
    f.mock.fail(Verb::DeallocDmah, libc::EIO);
    f.mock.take_calls();
    drop(dmah); // logs and leaks, never panics
    assert_eq!(f.mock.take_calls(), [Call::DeallocDmah]);
}
