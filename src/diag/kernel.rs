//! Kernel layer: RDMA in the kernel, its devices and drivers, their device nodes, and
//! whether libibverbs lists and opens each device.

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use rdma_verbs_sys as sys;

use super::sysfs::{self, SysDevice, CLASS_INFINIBAND, CLASS_VERBS};
use super::{named, process, Gate, Out, Targets};
use crate::context::Context;
use crate::device::{DeviceList, TransportType};

/// A device libibverbs opened, for the layers above.
pub(super) struct Opened {
    /// The open device.
    pub ctx: Context,
    /// How it connects (iWARP devices only through rdma_cm).
    pub transport: TransportType,
}

/// The node of the rdma_cm char device (from `rdma_ucm`).
const RDMA_CM: &str = "/dev/infiniband/rdma_cm";

/// Runs the layer's checks; returns each device, opened or with why it is not.
pub(super) fn check(
    out: &mut Out<'_>,
    devices: &[SysDevice],
    verbs: &Gate<&'static sys::Ibverbs>,
) -> Targets<Opened> {
    // When both libibverbs and the kernel fail, what depends on them names the earlier layer.
    let skip_all = |out: &mut Out<'_>, reason: String| {
        let reason = verbs.as_ref().err().cloned().unwrap_or(reason);
        out.skip("verbs", reason.clone());
        vec![(String::new(), Err(reason))]
    };
    if let Err(reason) = kernel_rdma(out, devices) {
        return skip_all(out, reason);
    }
    if devices.is_empty() {
        out.fail(
            "devices",
            format!("the kernel has RDMA, but {CLASS_INFINIBAND} lists no device"),
            "load the NIC's RDMA driver, or create a soft device: rdma link add rxe0 type rxe \
             netdev <netdev> (Soft-RoCE) or rdma link add siw0 type siw netdev <netdev>",
        );
        return skip_all(
            out,
            "needs an RDMA device, and there is none (see Kernel: devices)".into(),
        );
    }
    let nodes: Vec<Gate<()>> = devices.iter().map(|d| device(out, d)).collect();
    rdma_cm(out);
    opened(out, devices, nodes, verbs)
}

/// Whether the kernel exposes RDMA verbs at all.
fn kernel_rdma(out: &mut Out<'_>, devices: &[SysDevice]) -> Gate<()> {
    let check = "kernel RDMA";
    if !Path::new("/sys/class").is_dir() {
        out.fail(
            check,
            "sysfs is not mounted (no /sys/class): libibverbs finds devices there",
            "mount it (mount -t sysfs sysfs /sys); a container must not mask /sys",
        );
        return Err("needs sysfs, which is not mounted (see Kernel: kernel RDMA)".into());
    }
    if let Some(abi) = sysfs::read(format!("{CLASS_VERBS}/abi_version")) {
        out.pass(check, format!("{CLASS_VERBS} is present (ib_uverbs ABI {abi})"));
        return Ok(());
    }
    if !devices.is_empty() {
        let names: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        out.fail(
            check,
            format!(
                "RDMA devices exist ({}), but {CLASS_VERBS} is absent: ib_uverbs, the kernel's \
                 user-space verbs interface, is not loaded",
                names.join(", ")
            ),
            "modprobe ib_uverbs (rdma-core's rdma-load-modules service loads it at boot)",
        );
        return Err("needs ib_uverbs, which is not loaded (see Kernel: kernel RDMA)".into());
    }
    out.fail(
        check,
        format!(
            "{CLASS_VERBS} is absent: this kernel exposes no RDMA verbs interface, so libibverbs' \
             device list fails with ENOSYS (no RDMA driver is loaded, or the kernel lacks RDMA)"
        ),
        "load the NIC's RDMA driver (mlx5_ib, irdma, bnxt_re, ...) or create a Soft-RoCE device \
         (modprobe rdma_rxe && rdma link add rxe0 type rxe netdev <netdev>); a container sees \
         only what its host has; on a machine without RDMA support, use a VM such as \
         scripts/rdma-vm",
    );
    Err("needs RDMA in the kernel, which exposes none (see Kernel: kernel RDMA)".into())
}

/// One device, its driver and its `uverbsN` node; `Ok` when the node is usable.
fn device(out: &mut Out<'_>, dev: &SysDevice) -> Gate<()> {
    let check = named("device", &dev.name);
    let driver = match (&dev.driver, &dev.bus_id) {
        (Some(driver), Some(bus)) => format!("driver {driver} ({bus})"),
        (Some(driver), None) => format!("driver {driver}"),
        _ => format!("virtual device ({:?})", dev.node_desc),
    };
    let netdevs = if dev.netdevs.is_empty() {
        String::new()
    } else {
        format!(", netdev {}", dev.netdevs.join(", "))
    };
    let Some(uverbs) = &dev.uverbs else {
        out.fail(
            &check,
            format!("{driver}{netdevs}: no uverbs interface in {CLASS_VERBS}"),
            "ib_uverbs did not register it: check dmesg, and reload the driver",
        );
        return Err(format!("{} has no uverbs interface (see Kernel: {check})", dev.name));
    };
    out.pass(&check, format!("{driver}{netdevs}, verbs interface {}", uverbs.name));
    let node = uverbs.node();
    let check = named("node", &uverbs.name);
    let number = format!("char {}:{}", uverbs.major, uverbs.minor);
    match open_node(&node, uverbs.major, uverbs.minor) {
        Ok(shown) => {
            out.pass(&check, format!("{node} ({}): {shown}", dev.name));
            Ok(())
        }
        Err(NodeError::Missing) => {
            out.fail(
                &check,
                format!("{node} ({number}, for {}) is missing", dev.name),
                format!(
                    "in a container, pass the node in (docker/podman run --device={node}, or \
                     --device=/dev/infiniband for all); on a host, udev creates it from \
                     rdma-core's rules, or create it: mknod {node} c {} {}",
                    uverbs.major, uverbs.minor
                ),
            );
            Err(format!("needs {node}, which is missing (see Kernel: {check})"))
        }
        Err(e) => {
            out.fail(&check, format!("{node} (for {}): {e}", dev.name), e.remedy(&node));
            Err(format!("needs {node}, which this user cannot use (see Kernel: {check})"))
        }
    }
}

/// The rdma_cm node: needed by programs that connect through rdma_cm only.
fn rdma_cm(out: &mut Out<'_>) {
    let check = "rdma_cm node";
    let purpose = "rdma_cm connects iWARP devices and IP-addressed peers (the rdmacm feature uses \
                   it)";
    let Some((major, minor)) =
        sysfs::read("/sys/class/misc/rdma_cm/dev").and_then(|d| sysfs::parse_dev(&d))
    else {
        out.warn(
            check,
            format!("rdma_ucm is not loaded: no {RDMA_CM} ({purpose})"),
            "modprobe rdma_ucm",
        );
        return;
    };
    match open_node(RDMA_CM, major, minor) {
        Ok(shown) => out.pass(check, format!("{RDMA_CM}: {shown} ({purpose})")),
        Err(NodeError::Missing) => out.warn(
            check,
            format!("{RDMA_CM} (char {major}:{minor}) is missing ({purpose})"),
            format!(
                "in a container, pass it in (--device={RDMA_CM}); on a host, create it: mknod \
                 {RDMA_CM} c {major} {minor}"
            ),
        ),
        Err(e) => out.warn(check, format!("{RDMA_CM}: {e} ({purpose})"), e.remedy(RDMA_CM)),
    }
}

/// Why a device node cannot be used.
#[derive(Debug)]
enum NodeError {
    Missing,
    /// Not the char device the kernel assigned: a stale or hand-made node.
    WrongDevice {
        expected: (u32, u32),
        found: String,
    },
    /// It cannot be opened read-write (`mode` and owner given for the message).
    Open {
        error: io::Error,
        mode: u32,
        uid: u32,
        gid: u32,
    },
    Stat(io::Error),
}

impl std::fmt::Display for NodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NodeError::Missing => write!(f, "missing"),
            NodeError::WrongDevice { expected: (major, minor), found } => {
                write!(f, "is {found}, not the char device {major}:{minor} the kernel assigned")
            }
            NodeError::Open { error, mode, uid, gid } => write!(
                f,
                "cannot be opened read-write as uid {}: {error} (mode {mode:04o}, owner uid {uid} \
                 gid {gid})",
                process::euid().map_or("?".into(), |u| u.to_string())
            ),
            NodeError::Stat(e) => write!(f, "cannot be examined: {e}"),
        }
    }
}

impl NodeError {
    fn remedy(&self, node: &str) -> String {
        match self {
            NodeError::Open { error, gid, .. }
                if error.kind() == io::ErrorKind::PermissionDenied =>
            {
                format!(
                    "give this user read-write access to {node}: add it to the node's group (gid \
                     {gid}), or install a udev rule such as KERNEL==\"uverbs*\", MODE=\"0666\" \
                     (rdma-core's default)"
                )
            }
            NodeError::WrongDevice { expected: (major, minor), .. } => {
                format!(
                    "recreate it: rm {node} && mknod {node} c {major} {minor} && chmod 666 {node}"
                )
            }
            _ => format!("check {node} and dmesg"),
        }
    }
}

/// Checks that `path` is char device `major:minor` and opens it read-write, as libibverbs
/// does; describes it on success.
fn open_node(path: &str, major: u32, minor: u32) -> Result<String, NodeError> {
    let meta = match std::fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(NodeError::Missing),
        Err(e) => return Err(NodeError::Stat(e)),
        Ok(meta) => meta,
    };
    let found = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
    if !meta.file_type().is_char_device() || found != (major, minor) {
        let kind =
            if meta.file_type().is_char_device() { "char device" } else { "not a char device:" };
        return Err(NodeError::WrongDevice {
            expected: (major, minor),
            found: format!("{kind} {}:{}", found.0, found.1),
        });
    }
    let (mode, uid, gid) = (meta.mode() & 0o7777, meta.uid(), meta.gid());
    match OpenOptions::new().read(true).write(true).open(path) {
        Ok(_) => Ok(format!("mode {mode:04o}, owner uid {uid} gid {gid}, opens read-write")),
        Err(error) => Err(NodeError::Open { error, mode, uid, gid }),
    }
}

/// Whether libibverbs lists and opens each device whose node is usable.
fn opened(
    out: &mut Out<'_>,
    devices: &[SysDevice],
    nodes: Vec<Gate<()>>,
    verbs: &Gate<&'static sys::Ibverbs>,
) -> Targets<Opened> {
    let list = match verbs {
        Err(reason) => Err(reason.clone()),
        Ok(_) => DeviceList::new().map_err(|e| {
            out.fail("verbs", e.to_string(), "see the layers above for the cause");
            "libibverbs cannot list devices (see Kernel: verbs)".to_owned()
        }),
    };
    devices
        .iter()
        .zip(nodes)
        .map(|(dev, node)| {
            let check = named("verbs", &dev.name);
            let gate = match (&list, &node) {
                (Err(reason), _) | (_, Err(reason)) => {
                    out.skip(&check, reason.clone());
                    Err(reason.clone())
                }
                (Ok(list), Ok(())) => open(out, &check, list, &dev.name),
            };
            (dev.name.clone(), gate)
        })
        .collect()
}

fn open(out: &mut Out<'_>, check: &str, list: &DeviceList, name: &str) -> Gate<Opened> {
    let Some(device) = list.find(name) else {
        out.fail(
            check,
            format!(
                "libibverbs does not list {name}: no provider claimed it (libibverbs then warns \
                 \"no userspace device-specific driver found\")"
            ),
            "install the device's provider from libibverbs' rdma-core release (Debian/Ubuntu: \
             ibverbs-providers; RHEL/Rocky/Fedora: libibverbs); the provider checks of the \
             Library layer show which load",
        );
        return Err(format!("libibverbs does not list {name} (see Kernel: {check})"));
    };
    let transport = device.transport();
    match device.open() {
        Ok(ctx) => {
            out.pass(
                check,
                format!(
                    "listed and opened: transport {transport}, node type {}",
                    device.node_type()
                ),
            );
            Ok(Opened { ctx, transport })
        }
        Err(e) => {
            out.fail(check, e.to_string(), "see the node check above, and dmesg");
            Err(format!("libibverbs cannot open {name} (see Kernel: {check})"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_wrong_node_is_told_apart() {
        assert!(matches!(open_node("/nonexistent/uverbs9", 231, 201), Err(NodeError::Missing)));
        // /dev/null is char 1:3, not 231:192.
        let err = open_node("/dev/null", 231, 192).unwrap_err();
        assert_eq!(
            err.to_string(),
            "is char device 1:3, not the char device 231:192 the kernel assigned"
        );
        assert!(err.remedy("/dev/null").contains("mknod /dev/null c 231 192"));
        assert!(open_node("/dev/null", 1, 3).unwrap().ends_with("opens read-write"));
    }
}
