//! This process's limits and credentials, from `/proc/self` (text, so no FFI is needed).

/// `CAP_IPC_LOCK`: lets a process lock (and so register) memory past `RLIMIT_MEMLOCK`.
const CAP_IPC_LOCK: u32 = 14;

/// `RLIMIT_MEMLOCK`, in bytes; `None` is unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Memlock {
    /// The soft limit: what applies now.
    pub soft: Option<u64>,
    /// The hard limit: how far an unprivileged process may raise the soft one.
    pub hard: Option<u64>,
}

/// This process's `RLIMIT_MEMLOCK`, from `/proc/self/limits`.
pub(super) fn memlock() -> Option<Memlock> {
    parse_memlock(&std::fs::read_to_string("/proc/self/limits").ok()?)
}

/// Whether this process holds `CAP_IPC_LOCK` in its effective set (`CapEff` of
/// `/proc/self/status`).
pub(super) fn has_ipc_lock() -> Option<bool> {
    ipc_lock_in(&status_field(&std::fs::read_to_string("/proc/self/status").ok()?, "CapEff")?)
}

/// Whether a hexadecimal capability set holds `CAP_IPC_LOCK`.
fn ipc_lock_in(caps: &str) -> Option<bool> {
    Some(u64::from_str_radix(caps, 16).ok()? & (1 << CAP_IPC_LOCK) != 0)
}

/// The effective user ID (`Uid` of `/proc/self/status`: real, effective, saved, fs).
pub(super) fn euid() -> Option<u32> {
    let uids = status_field(&std::fs::read_to_string("/proc/self/status").ok()?, "Uid")?;
    uids.split_whitespace().nth(1)?.parse().ok()
}

/// The value of `name:` in a `/proc/<pid>/status` text.
fn status_field(status: &str, name: &str) -> Option<String> {
    status.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key == name).then(|| value.trim().to_owned())
    })
}

/// The `Max locked memory` row of a `/proc/<pid>/limits` text.
fn parse_memlock(limits: &str) -> Option<Memlock> {
    let row = limits.lines().find_map(|l| l.strip_prefix("Max locked memory"))?;
    let mut cols = row.split_whitespace();
    let mut limit = || match cols.next()? {
        "unlimited" => Some(None),
        n => n.parse().ok().map(Some),
    };
    Some(Memlock { soft: limit()?, hard: limit()? })
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: &str = "\
Limit                     Soft Limit           Hard Limit           Units     
Max processes             63465                63465                processes 
Max locked memory         65536                unlimited            bytes     
Max address space         unlimited            unlimited            bytes     
";

    #[test]
    fn memlock_row_parses() {
        let m = parse_memlock(LIMITS).unwrap();
        assert_eq!(m, Memlock { soft: Some(65536), hard: None });
        let unlimited = LIMITS.replace("65536                unlimited", "unlimited unlimited");
        assert_eq!(parse_memlock(&unlimited).unwrap(), Memlock { soft: None, hard: None });
        assert_eq!(parse_memlock("Max processes 1 1 processes"), None);
    }

    #[test]
    fn status_fields_parse() {
        let status = "Name:\tdoctor\nUid:\t0\t65534\t65534\t65534\nCapEff:\t0000000000004000\n";
        assert_eq!(status_field(status, "CapEff").as_deref(), Some("0000000000004000"));
        assert_eq!(status_field(status, "Uid").as_deref(), Some("0\t65534\t65534\t65534"));
        assert_eq!(status_field(status, "Cap"), None);
        assert_eq!(ipc_lock_in("0000000000004000"), Some(true));
        assert_eq!(ipc_lock_in("000001fffeffbfff"), Some(false));
        assert_eq!(ipc_lock_in("zz"), None);
    }

    #[test]
    fn this_process_reads_its_own_values() {
        assert!(memlock().is_some());
        assert!(has_ipc_lock().is_some());
        assert!(euid().is_some());
    }
}
