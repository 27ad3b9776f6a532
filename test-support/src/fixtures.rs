//! Recorded sysfs trees, built on first use by the scripts of the root crate's
//! `tests/fixtures`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The root (the directory holding `sys/`) of the sysfs tree of `host` that
/// `tests/fixtures/topology/build.sh` builds: `two-socket`, `roce-lag` or `vm`. The trees
/// are built once per process, in a scratch directory.
pub fn topology_root(host: &str) -> PathBuf {
    static TREES: OnceLock<PathBuf> = OnceLock::new();
    let trees = TREES.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("rdma-verbs-topology-{}", std::process::id()));
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/topology/build.sh");
        let status = Command::new("bash").arg(script).arg(&dir).status().expect("runs bash");
        assert!(status.success(), "{script} {}: {status}", dir.display());
        dir
    });
    trees.join(host)
}
