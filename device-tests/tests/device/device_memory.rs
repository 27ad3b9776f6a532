//! Device memory (`ibv_alloc_dm(3)`) and thread domains (`ibv_alloc_td(3)`) on the soft
//! devices: neither rxe nor siw has them (their providers set no `alloc_dm` nor `alloc_td` op,
//! so libibverbs' stubs answer `EOPNOTSUPP`, and the kernel reports a `max_dm_size` of 0).
//! Asking for either is a clean `Unsupported`, and the context goes on as before. What they
//! do is tested on the mock provider; ConnectX hardware has not run them.

use rdma_verbs::*;
use rdma_verbs_device_tests::{require_device, RXE, SIW};

use super::test_cases;

fn device_memory_and_thread_domains_are_unsupported(device: &str) {
    let Some(ctx) = require_device(device) else { return };
    assert_eq!(ctx.max_dm_size().unwrap(), 0, "{device} reports device memory");
    let err = ctx.alloc_dm(4096, 0).expect_err("no device memory");
    assert!(matches!(err, Error::Unsupported { what: "ibv_alloc_dm" }), "{err:?}");
    println!("{device}: device memory: {err}");
    let err = ctx.alloc_td().expect_err("no thread domains");
    assert!(matches!(err, Error::Unsupported { what: "ibv_alloc_td" }), "{err:?}");
    println!("{device}: thread domains: {err}");
    let pd = ctx.alloc_pd().unwrap();
    let mut mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    mr.as_mut_slice()[0] = 1;
}

test_cases! { device_memory_and_thread_domains_are_unsupported:
    device_memory_and_thread_domains_on_rxe_are_unsupported(RXE);
    device_memory_and_thread_domains_on_siw_are_unsupported(SIW);
}
