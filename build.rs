//! Turns the header facts published by rdma-verbs-sys into cfgs saying which bindings exist.
//!
//! What the *running* library supports is decided at run time; these cfgs only say what this
//! build can call at all.

use std::env;

fn main() {
    for (fact, cfg) in [
        ("MLX5DV", "rdma_verbs_mlx5dv"),
        ("RDMA_CMA", "rdma_verbs_rdma_cma"),
        ("EFADV", "rdma_verbs_efadv"),
    ] {
        let var = format!("DEP_RDMA_VERBS_SYS_{fact}");
        println!("cargo:rerun-if-env-changed={var}");
        if env::var(&var).as_deref() == Ok("1") {
            println!("cargo:rustc-cfg={cfg}");
        }
    }
    // Headers with an mlx5dv.h too old for DC: refuse the feature rather than leave it empty.
    println!("cargo:rerun-if-env-changed=DEP_RDMA_VERBS_SYS_MLX5DV_TOO_OLD");
    if env::var_os("CARGO_FEATURE_MLX5").is_some()
        && env::var("DEP_RDMA_VERBS_SYS_MLX5DV_TOO_OLD").as_deref() == Ok("1")
    {
        eprintln!(
            "\nerror: rdma-verbs: feature `mlx5` needs infiniband/mlx5dv.h of rdma-core v37 or \
             later: the Dynamically Connected transport uses DCI streams \
             (mlx5dv_dci_streams_caps, MLX5DV_QP_INIT_ATTR_MASK_DCI_STREAMS), which the headers \
             found ({}) predate. Build without `mlx5`, or point RDMA_CORE_INCLUDE_DIR at newer \
             headers.\n",
            env::var("DEP_RDMA_VERBS_SYS_VERBS_H").unwrap_or_default()
        );
        std::process::exit(1);
    }
    if let Ok(v) = env::var("DEP_RDMA_VERBS_SYS_RDMA_CORE_VERSION") {
        println!("cargo:rustc-env=RDMA_VERBS_BUILT_WITH_RDMA_CORE={v}");
    }
}
