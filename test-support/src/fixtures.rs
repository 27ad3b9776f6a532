//! Recorded sysfs trees, built on first use by the scripts of the root crate's
//! `tests/fixtures`.

use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

/// The root (the directory holding `sys/`) of the sysfs tree of `host` that
/// `tests/fixtures/topology/build.sh` builds: `two-socket`, `roce-lag` or `vm`.
///
/// The trees are built once per version of the script, in a temporary directory named after
/// its contents, and shared by every test process after that: each process builds into a
/// directory of its own and renames it into place, so none reads a tree being built.
pub fn topology_root(host: &str) -> PathBuf {
    static TREES: OnceLock<PathBuf> = OnceLock::new();
    let trees = TREES.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/topology/build.sh");
        let text = std::fs::read(script).unwrap_or_else(|e| panic!("{script}: {e}"));
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        text.hash(&mut hasher);
        let dir =
            std::env::temp_dir().join(format!("rdma-verbs-topology-{:016x}", hasher.finish()));
        if !dir.is_dir() {
            let scratch = dir.with_extension(std::process::id().to_string());
            let status =
                Command::new("bash").arg(script).arg(&scratch).status().expect("runs bash");
            assert!(status.success(), "{script} {}: {status}", scratch.display());
            // Another process may have renamed its tree into place first: then ours goes.
            if std::fs::rename(&scratch, &dir).is_err() {
                let _ = std::fs::remove_dir_all(&scratch);
            }
        }
        dir
    });
    trees.join(host)
}
