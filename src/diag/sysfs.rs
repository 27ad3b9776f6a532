//! What the kernel tells about RDMA devices in sysfs, read once and shared by the layers.

use std::path::Path;

use crate::topology::sysfs::{device_netdevs, link_name};
pub(super) use crate::topology::sysfs::{names, read};

/// The kernel's RDMA devices (`ib_device`).
pub(super) const CLASS_INFINIBAND: &str = "/sys/class/infiniband";
/// Their user-space verbs interfaces (`ib_uverbs`): one `uverbsN` per device.
pub(super) const CLASS_VERBS: &str = "/sys/class/infiniband_verbs";

/// A device in [`CLASS_INFINIBAND`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct SysDevice {
    /// The kernel name (`mlx5_0`, `rxe0`).
    pub name: String,
    /// The bus driver (`mlx5_core`), `None` for a virtual device (rxe, siw).
    pub driver: Option<String>,
    /// The bus address (`0000:3b:00.0`) of a device with a driver.
    pub bus_id: Option<String>,
    /// `node_desc`: a virtual device's only self-description (`rxe`, `Software iWARP stack`).
    pub node_desc: String,
    /// The netdevs sysfs ties to it: rxe's `parent`, a NIC's `device/net/*`.
    pub netdevs: Vec<String>,
    /// Its `uverbsN` interface, if ib_uverbs created one.
    pub uverbs: Option<Uverbs>,
}

impl SysDevice {
    /// Whether it is a ConnectX function (mlx5), the devices mlx5dv serves.
    pub fn is_mlx5(&self) -> bool {
        self.driver.as_deref() == Some("mlx5_core")
    }
}

/// A `uverbsN` entry of [`CLASS_VERBS`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Uverbs {
    /// `uverbs0`: also the node's name in `/dev/infiniband`.
    pub name: String,
    /// The char device number the node must carry (`231:192`).
    pub major: u32,
    /// See `major`.
    pub minor: u32,
}

impl Uverbs {
    /// Where udev (or a container runtime) puts the node.
    pub fn node(&self) -> String {
        format!("/dev/infiniband/{}", self.name)
    }
}

/// The devices of [`CLASS_INFINIBAND`], with their `uverbsN` from [`CLASS_VERBS`].
pub(super) fn devices() -> Vec<SysDevice> {
    let verbs = uverbs();
    names(CLASS_INFINIBAND)
        .into_iter()
        .map(|name| {
            let dir = Path::new(CLASS_INFINIBAND).join(&name);
            SysDevice {
                driver: link_name(dir.join("device/driver")),
                bus_id: link_name(dir.join("device")),
                node_desc: read(dir.join("node_desc")).unwrap_or_default(),
                netdevs: device_netdevs(&dir),
                uverbs: verbs.iter().find(|(ibdev, _)| *ibdev == name).map(|(_, u)| u.clone()),
                name,
            }
        })
        .collect()
}

/// `(ibdev, uverbs)` for each `uverbsN` of [`CLASS_VERBS`].
fn uverbs() -> Vec<(String, Uverbs)> {
    names(CLASS_VERBS)
        .into_iter()
        .filter(|n| n.starts_with("uverbs"))
        .filter_map(|name| {
            let dir = Path::new(CLASS_VERBS).join(&name);
            let (major, minor) = parse_dev(&read(dir.join("dev"))?)?;
            Some((read(dir.join("ibdev"))?, Uverbs { name, major, minor }))
        })
        .collect()
}

/// A sysfs `dev` attribute: `231:192`.
pub(super) fn parse_dev(text: &str) -> Option<(u32, u32)> {
    let (major, minor) = text.trim().split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_numbers_parse() {
        assert_eq!(parse_dev("231:192\n"), Some((231, 192)));
        assert_eq!(parse_dev("10:124"), Some((10, 124)));
        assert_eq!(parse_dev("231"), None);
        assert_eq!(parse_dev("a:b"), None);
    }

    #[test]
    fn uverbs_nodes_live_in_dev_infiniband() {
        let u = Uverbs { name: "uverbs3".into(), major: 231, minor: 195 };
        assert_eq!(u.node(), "/dev/infiniband/uverbs3");
    }
}
