//! What to do about a verb's errno, where that is known: the hints [`Error::Verb`](super::Error::Verb) carries.
#![allow(unsafe_code)] // getrlimit

/// What to do about `errno` from `verb`, where that is known.
pub(super) fn hint(verb: &str, errno: i32) -> Option<String> {
    let memlock = || match memlock_limit() {
        Some(limit) => format!(
            "memory registration pins pages and RLIMIT_MEMLOCK is {limit}; raise it \
             (ulimit -l unlimited; LimitMEMLOCK=infinity for a systemd service; \
             --ulimit memlock=-1 for a container)"
        ),
        None => "memory registration pins pages: check RLIMIT_MEMLOCK (ulimit -l)".into(),
    };
    Some(match (verb, errno) {
        (v, libc::ENOMEM | libc::EPERM | libc::EAGAIN) if v.starts_with("ibv_reg_mr") => memlock(),
        ("ibv_open_device", libc::EACCES | libc::EPERM) => {
            "no permission on /dev/infiniband/uverbs*: add the user to the group owning it \
             or fix the udev rule"
                .into()
        }
        (v, libc::EINVAL) if v.ends_with("→RTR)") => {
            "on RoCE the RTR transition needs a global route: check the source GID index \
             (GlobalRoute::sgid_index) exists on this port and the remote GID, MTU and QPN \
             are right"
                .into()
        }
        (v, libc::EINVAL) if v.ends_with("→RTS)") => {
            "iWARP devices (siw, irdma in iWARP mode) connect only through rdma_cm".into()
        }
        ("ibv_post_send" | "ibv_wr_complete" | "ibv_post_recv", libc::EINVAL) => {
            "the QP is not in a state that allows this post, or a WR exceeds the QP's \
             max_sge / max_inline_data"
                .into()
        }
        ("ibv_get_device_list", libc::ENOSYS) => {
            "/sys/class/infiniband_verbs exists but libibverbs could not read it: its \
             abi_version may be one this rdma-core does not support (see the kernel log)"
                .into()
        }
        (_, libc::EMFILE) => descriptors_hint(),
        (_, libc::ENFILE) => {
            "the system's table of open files is full (sysctl fs.file-max): close files or \
             raise it"
                .into()
        }
        _ => return None,
    })
}

/// What to do when the process has every file descriptor it may.
pub(super) fn descriptors_hint() -> String {
    let limit = nofile_limit().map_or_else(|| "its limit".to_owned(), |n| n.to_string());
    format!(
        "the process has as many file descriptors open as RLIMIT_NOFILE allows ({limit}): \
         close some, or raise the limit (ulimit -n; LimitNOFILE= for a systemd service; \
         --ulimit nofile= for a container; setrlimit(RLIMIT_NOFILE))"
    )
}

/// RLIMIT_NOFILE's soft limit, `None` when unlimited or unknown.
pub(super) fn nofile_limit() -> Option<u64> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes only the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return None;
    }
    (lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

/// Descriptors a library may need at once to look at sysfs or open a device node (a netlink
/// socket, a directory, a file in it).
const DESCRIPTOR_HEADROOM: u64 = 4;

/// Whether this process has (nearly) every descriptor RLIMIT_NOFILE allows open, so that a
/// library could not open a directory or node it then reported as absent: the descriptors
/// in `/proc/self/fd` against the limit (listing them fails with `EMFILE` itself when none
/// is left).
pub(crate) fn descriptors_exhausted() -> bool {
    let Some(limit) = nofile_limit() else { return false };
    match std::fs::read_dir("/proc/self/fd") {
        Err(e) => e.raw_os_error() == Some(libc::EMFILE),
        // The listing's own descriptor is among them.
        Ok(dir) => (dir.count() as u64).saturating_sub(1) + DESCRIPTOR_HEADROOM > limit,
    }
}

/// RLIMIT_MEMLOCK's soft limit, for error messages.
fn memlock_limit() -> Option<String> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes only the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) } != 0 {
        return None;
    }
    Some(match lim.rlim_cur {
        libc::RLIM_INFINITY => "unlimited".into(),
        n => format!("{} KiB", n / 1024),
    })
}
