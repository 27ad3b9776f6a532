//! Turns the header facts published by rdma-verbs-sys into cfgs saying which bindings exist.
//!
//! What the *running* library supports is decided at run time; these cfgs only say what this
//! build can call at all.

use std::env;

fn main() {
    for (fact, cfg) in [("MLX5DV", "rdma_verbs_mlx5dv"), ("RDMA_CMA", "rdma_verbs_rdma_cma")] {
        let var = format!("DEP_RDMA_VERBS_SYS_{fact}");
        println!("cargo:rerun-if-env-changed={var}");
        if env::var(&var).as_deref() == Ok("1") {
            println!("cargo:rustc-cfg={cfg}");
        }
    }
    if let Ok(v) = env::var("DEP_RDMA_VERBS_SYS_RDMA_CORE_VERSION") {
        println!("cargo:rustc-env=RDMA_VERBS_BUILT_WITH_RDMA_CORE={v}");
    }
}
