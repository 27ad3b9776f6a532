//! Thread domains (`ibv_alloc_td(3)`) on the soft devices: neither rxe nor siw has them
//! (their providers set no `alloc_td` op, so libibverbs' stub answers `EOPNOTSUPP`). Asking
//! for one is a clean `Unsupported`, and the context goes on as before. Thread and parent
//! domains are tested on the mock provider; ConnectX hardware has not run them.

use rdma_verbs::*;
use rdma_verbs_device_tests::{require_device, RXE, SIW};

use super::test_cases;

fn thread_domains_are_unsupported(device: &str) {
    let Some(ctx) = require_device(device) else { return };
    let err = ctx.alloc_td().expect_err("no thread domains");
    assert!(matches!(err, Error::Unsupported { what: "ibv_alloc_td" }), "{err:?}");
    println!("{device}: thread domains: {err}");
    let pd = ctx.alloc_pd().unwrap();
    let mut mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    mr.as_mut_slice()[0] = 1;
}

test_cases! { thread_domains_are_unsupported:
    thread_domains_on_rxe_are_unsupported(RXE);
    thread_domains_on_siw_are_unsupported(SIW);
}
