//! Extras layer: mlx5dv, GPU memory routes (the `gpu` module: dma-buf, peer memory), and
//! whether this runs in a container — then the container checklist (device nodes, /sys; the memlock limit
//! is the resources layer's `memlock` check).

use std::path::Path;

use super::library::Library;
use super::sysfs::{self, SysDevice, CLASS_INFINIBAND};
use super::Out;

/// Runs the layer's checks.
pub(super) fn check(out: &mut Out<'_>, devices: &[SysDevice], library: &Library) {
    mlx5dv(out, devices, library);

    super::gpu::check(out, devices, library);

    container(out, devices);
}

/// Whether this runs in a container and, if so, the checklist RDMA needs there.
fn container(out: &mut Out<'_>, devices: &[SysDevice]) {
    let markers = container_markers();
    if markers.is_empty() {
        let chroot: Vec<&str> =
            MARKER_FILES.into_iter().filter(|f| Path::new(f).exists()).collect();
        let seen = if chroot.is_empty() {
            "no: no /.dockerenv, /run/.containerenv, /run/systemd/container, nor a container \
             cgroup"
                .to_owned()
        } else {
            format!(
                "no: {} is in this root but not in PID 1's: a chroot of a container's file \
                 system (such as scripts/rdma-vm's guest), not a container; no container cgroup",
                chroot.join(", ")
            )
        };
        out.pass("container", seen);
        return;
    }
    out.pass("container", format!("yes: {}", markers.join(", ")));

    let nodes: Vec<String> =
        devices.iter().filter_map(|d| d.uverbs.as_ref()).map(|u| u.node()).collect();
    let missing: Vec<&str> =
        nodes.iter().filter(|n| !Path::new(n).exists()).map(String::as_str).collect();
    if nodes.is_empty() {
        out.skip("container: device nodes", "the kernel shows no uverbs device to pass in");
    } else if missing.is_empty() {
        out.pass("container: device nodes", format!("passed in: {}", nodes.join(", ")));
    } else {
        let devices: Vec<String> = missing.iter().map(|n| format!("--device={n}")).collect();
        out.fail(
            "container: device nodes",
            format!("not passed in: {}", missing.join(", ")),
            format!(
                "docker/podman run {} --device=/dev/infiniband/rdma_cm (or all of \
                 /dev/infiniband); Kubernetes: an RDMA device plugin",
                devices.join(" ")
            ),
        );
    }

    if !Path::new("/sys/class").is_dir() {
        out.fail(
            "container: /sys",
            "sysfs is not mounted",
            "do not mask /sys (container runtimes mount it by default)",
        );
    } else {
        let shown = sysfs::names(CLASS_INFINIBAND);
        let shown = if shown.is_empty() { "no RDMA device".into() } else { shown.join(", ") };
        out.pass("container: /sys", format!("mounted; {CLASS_INFINIBAND} shows {shown}"));
    }
    // (RLIMIT_MEMLOCK and CAP_IPC_LOCK have one verdict, the resources layer's `memlock`,
    // whose remedy names the container runtimes' flags.)
}

/// The files container runtimes put in a container's root (docker, podman).
const MARKER_FILES: [&str; 2] = ["/.dockerenv", "/run/.containerenv"];

/// The signs of a container: runtime marker files, and container managers in the cgroup
/// paths of this process and of PID 1.
///
/// A marker file counts only when PID 1 sees it too: a chroot into a container's file system
/// from outside the container (such as scripts/rdma-vm's guest, whose root is the host's, or
/// a rescue chroot) shows the container's `/.dockerenv` without running in one. Where PID 1's
/// root cannot be read (an unprivileged process), the file counts.
fn container_markers() -> Vec<String> {
    let pid1_root = Path::new("/proc/1/root");
    let mut markers: Vec<String> = MARKER_FILES
        .into_iter()
        .filter(|f| Path::new(f).exists() && seen_by_pid1(pid1_root, f))
        .map(String::from)
        .collect();
    if let Some(manager) = sysfs::read("/run/systemd/container") {
        markers.push(format!("/run/systemd/container says {manager}"));
    }
    for file in ["/proc/self/cgroup", "/proc/1/cgroup"] {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if let Some(path) = cgroup_marker(&text) {
            markers.push(format!("{file} has {path}"));
            break;
        }
    }
    markers
}

/// Whether `file` (absolute) exists under `root` (PID 1's root), or `root` cannot be read.
fn seen_by_pid1(root: &Path, file: &str) -> bool {
    match std::fs::symlink_metadata(root.join(file.trim_start_matches('/'))) {
        Ok(_) => true,
        Err(e) => e.kind() != std::io::ErrorKind::NotFound,
    }
}

/// The first cgroup path of a `/proc/<pid>/cgroup` text that names a container manager.
fn cgroup_marker(text: &str) -> Option<&str> {
    const MANAGERS: [&str; 6] = ["docker", "kubepods", "containerd", "libpod", "lxc", "crio"];
    text.lines()
        .filter_map(|line| line.rsplit(':').next())
        .find(|path| MANAGERS.iter().any(|m| path.contains(m)))
}

/// mlx5dv: with the `mlx5` feature, whether each mlx5 device passes `mlx5dv_is_supported` (the
/// gate of DC); otherwise what there is to say about libmlx5.
fn mlx5dv(out: &mut Out<'_>, devices: &[SysDevice], library: &Library) {
    let mlx5: Vec<&str> = devices.iter().filter(|d| d.is_mlx5()).map(|d| d.name.as_str()).collect();
    let libmlx5 = match (&library.libmlx5, &library.verbs) {
        (Some(path), _) => format!("libmlx5 at {}", path.display()),
        (None, Ok(_)) => "no libmlx5 found".into(),
        (None, Err(_)) => "libmlx5 not looked for (see Library)".into(),
    };
    if mlx5.is_empty() {
        return out.skip("mlx5dv", format!("no mlx5 device; {libmlx5}"));
    }
    #[cfg(all(feature = "mlx5", rdma_verbs_mlx5dv))]
    for name in mlx5 {
        let gate = crate::Context::open(name)
            .and_then(|ctx| crate::mlx5::Mlx5Context::open(&ctx).map(|m| m.caps()));
        match gate {
            Ok(caps) => out.pass(
                "mlx5dv",
                format!("{name}: mlx5dv_is_supported says yes, DC is available ({caps:?})"),
            ),
            Err(e) => out.fail(
                "mlx5dv",
                format!("{name}: {e}"),
                "check that libibverbs loaded its own libmlx5 (the Library layer's stack) and \
                 that the device is not in a half-initialised state (dmesg)",
            ),
        }
    }
    #[cfg(not(all(feature = "mlx5", rdma_verbs_mlx5dv)))]
    out.skip(
        "mlx5dv",
        format!(
            "mlx5 devices: {}; mlx5dv_is_supported is not called: this build lacks the `mlx5` \
             feature (DC); {libmlx5}",
            mlx5.join(", ")
        ),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_counts_only_when_pid1_sees_it_too() {
        let root = crate::diag::scratch_dir("pid1");
        assert!(!seen_by_pid1(&root, "/.dockerenv"), "a root without the file");
        std::fs::write(root.join(".dockerenv"), "").unwrap();
        assert!(seen_by_pid1(&root, "/.dockerenv"), "a root with the file");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn container_cgroups_are_recognised() {
        let docker = "12:memory:/docker/3f2a\n0::/system.slice/docker-3f2a.scope\n";
        assert_eq!(cgroup_marker(docker), Some("/docker/3f2a"));
        let k8s = "0::/kubepods.slice/kubepods-pod12.slice/cri-containerd-ab.scope\n";
        assert!(cgroup_marker(k8s).is_some());
        assert_eq!(cgroup_marker("0::/\n1:cpu:/user.slice\n"), None);
    }
}
