//! Turns the header facts published by rdma-verbs-sys into the cfg saying whether the mock
//! libmlx5 can be built (it needs the mlx5dv bindings), as the root crate's build.rs does.

use std::env;

fn main() {
    let var = "DEP_RDMA_VERBS_SYS_MLX5DV";
    println!("cargo:rerun-if-env-changed={var}");
    println!("cargo::rustc-check-cfg=cfg(rdma_verbs_mlx5dv)");
    if env::var(var).as_deref() == Ok("1") {
        println!("cargo:rustc-cfg=rdma_verbs_mlx5dv");
    }
}
