//! Sharing verbs objects between processes (`ibv_import_device(3)`, `ibv_import_pd(3)`,
//! `ibv_import_mr(3)`) on the soft devices: rdma-core's rxe and siw providers set no
//! `import_context` op, so `ibv_import_device` answers `EOPNOTSUPP` before it touches the
//! descriptor (`libibverbs/device.c`), and their `import_pd` / `import_mr` are libibverbs'
//! stubs, `EOPNOTSUPP` too. Each is a clean `Unsupported`, and the exporting context goes on
//! as before. What imports do is tested on the mock provider; mlx5 (the provider with them)
//! has not run them.

use rdma_verbs::*;
use rdma_verbs_device_tests::{require_device, RXE, SIW};

use super::test_cases;

fn imports_are_unsupported(device: &str) {
    let Some(ctx) = require_device(device) else { return };
    let fd = ctx.cmd_fd().expect("libibverbs opens a command descriptor").try_clone_to_owned();
    let err = Context::import(fd.unwrap()).expect_err("no import_context op");
    assert!(matches!(err, Error::Unsupported { what: "ibv_import_device" }), "{err:?}");
    println!("{device}: import a context: {err}");

    let pd = ctx.alloc_pd().unwrap();
    let other = ctx.alloc_pd().unwrap();
    // The kernel names each object of the uverbs file by its own handle.
    assert_ne!(pd.handle(), other.handle());
    let err = ctx.import_pd(pd.handle()).expect_err("libibverbs' stub");
    assert!(matches!(err, Error::Unsupported { what: "ibv_import_pd" }), "{err:?}");
    println!("{device}: import a PD: {err}");

    let mut mr = pd.register(4096, AccessFlags::LOCAL_WRITE).unwrap();
    // SAFETY: refused before any region is imported; `mr` outlives the call anyway.
    let err = unsafe { pd.import_mr(mr.handle()) }.expect_err("libibverbs' stub");
    assert!(matches!(err, Error::Unsupported { what: "ibv_import_mr" }), "{err:?}");
    println!("{device}: import an MR: {err}");
    mr.as_mut_slice()[0] = 1;
    drop(mr);
    pd.destroy().unwrap();
}

test_cases! { imports_are_unsupported:
    imports_on_rxe_are_unsupported(RXE);
    imports_on_siw_are_unsupported(SIW);
}
