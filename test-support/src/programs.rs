//! Where the programs under test are built. A test binary lives in `target/<profile>/deps/`;
//! the examples of rdma-verbs are built into `target/<profile>/examples/`, the workspace's
//! binaries (the perftest tools of `rdma-verbs-perftest`, `s3rdma` of
//! `rdma-verbs-s3rdma`) into `target/<profile>/`. A test of another package does not build
//! them: the caller does (scripts/test's device tier).

use std::path::PathBuf;

/// The path of rdma-verbs' example `name`: `cargo test` of the root crate builds them, the
/// device tier `cargo build --examples --all-features` first.
pub fn example(name: &str) -> PathBuf {
    built(&profile_dir().join("examples").join(name), "cargo build --examples --all-features")
}

/// The path of the workspace binary `name`: a perftest tool (`write_bw`, `read_lat`, …) or
/// `s3rdma`.
pub fn binary(name: &str) -> PathBuf {
    built(
        &profile_dir().join(name),
        "cargo build --all-features -p rdma-verbs-perftest -p rdma-verbs-s3rdma",
    )
}

/// `target/<profile>`: the parent of the running test binary's `deps/`.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent().and_then(|deps| deps.parent()).expect("target/<profile>/deps").to_path_buf()
}

/// `path`, asserting that it was built (by `how`).
fn built(path: &std::path::Path, how: &str) -> PathBuf {
    assert!(path.is_file(), "{} is missing: build it first ({how})", path.display());
    path.to_path_buf()
}
