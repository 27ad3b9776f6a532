//! Reading sysfs attributes: the helpers the topology and the doctor share.

use std::path::Path;

/// A sysfs attribute, trimmed; `None` when absent or unreadable.
pub(crate) fn read(path: impl AsRef<Path>) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

/// The entry names of a directory, sorted; empty when it cannot be read.
pub(crate) fn names(dir: impl AsRef<Path>) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    names.sort();
    names
}

/// The last component of a symlink's target (`.../drivers/mlx5_core` → `mlx5_core`).
pub(crate) fn link_name(path: impl AsRef<Path>) -> Option<String> {
    let target = std::fs::read_link(path).ok()?;
    Some(target.file_name()?.to_str()?.to_owned())
}

/// The netdevs sysfs ties to the RDMA device in `dir` (`/sys/class/infiniband/<dev>`): a
/// software device's `parent` (rxe), and the `net/` entries of its bus device (a NIC's PF).
pub(crate) fn device_netdevs(dir: &Path) -> Vec<String> {
    let mut netdevs: Vec<String> = read(dir.join("parent")).into_iter().collect();
    for name in names(dir.join("device/net")) {
        if !netdevs.contains(&name) {
            netdevs.push(name);
        }
    }
    netdevs
}
