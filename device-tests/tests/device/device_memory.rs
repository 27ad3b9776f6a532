//! Device memory (`ibv_alloc_dm(3)`) on the soft devices: neither rxe nor siw has any (their
//! providers set no `alloc_dm` op, so libibverbs' stub answers `EOPNOTSUPP`, and the kernel
//! reports a `max_dm_size` of 0). Asking for it is a clean `Unsupported`, and the context
//! goes on as before. What device memory does is tested on the mock provider; ConnectX
//! hardware has not run it.

use rdma_verbs::*;
use rdma_verbs_device_tests::{require_device, RXE, SIW};

use super::test_cases;

fn device_memory_is_unsupported(device: &str) {
    let Some(ctx) = require_device(device) else { return };
    assert_eq!(ctx.max_dm_size().unwrap(), 0, "{device} reports device memory");
    let err = ctx.alloc_dm(4096, 0).expect_err("no device memory");
    assert!(matches!(err, Error::Unsupported { what: "ibv_alloc_dm" }), "{err:?}");
    println!("{device}: device memory: {err}");
    let pd = ctx.alloc_pd().unwrap();
    let mut mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    mr.as_mut_slice()[0] = 1;
}

test_cases! { device_memory_is_unsupported:
    device_memory_on_rxe_is_unsupported(RXE);
    device_memory_on_siw_is_unsupported(SIW);
}
