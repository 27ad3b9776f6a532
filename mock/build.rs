//! Turns the header facts published by rdma-verbs-sys into the cfgs saying whether the mock
//! libmlx5 and libefa can be built (they need the mlx5dv and efadv bindings), as the root
//! crate's build.rs does.

use std::env;

fn main() {
    // And the mock libefa, the efadv bindings.
    for (fact, cfg) in [("MLX5DV", "rdma_verbs_mlx5dv"), ("EFADV", "rdma_verbs_efadv")] {
        let var = format!("DEP_RDMA_VERBS_SYS_{fact}");
        println!("cargo:rerun-if-env-changed={var}");
        println!("cargo::rustc-check-cfg=cfg({cfg})");
        if env::var(&var).as_deref() == Ok("1") {
            println!("cargo:rustc-cfg={cfg}");
        }
    }
}
