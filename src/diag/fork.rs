//! Resources layer: fork protection (`ibv_fork_init(3)`, `RDMAV_FORK_SAFE`), and whether the
//! kernel copies pinned pages at `fork()` so that it is not needed.

use rdma_verbs_sys as sys;

use super::{Gate, Out};
use crate::error::Error;
use crate::fork::{self, ForkStatus};

/// What fork protection costs, for the findings that see it on.
const COST: &str = "every registration then madvises whole pages: a child process that \
     touches anything else on the pages of a borrowed region dies with SIGSEGV, a range in \
     huge pages that does not start and end on their boundaries fails with EINVAL (unless \
     RDMAV_HUGEPAGES_SAFE=1), and each registration costs a system call more";

/// What to do about [`COST`].
const WHOLE_PAGES: &str = "register whole pages (regions the crate allocates are), align \
     huge-page ranges to their huge pages or set RDMAV_HUGEPAGES_SAFE=1";

/// The finding `fork`.
pub(super) fn check(out: &mut Out<'_>, verbs: &Gate<&'static sys::Ibverbs>) {
    let check = "fork";
    if let Err(reason) = verbs {
        return out.skip(check, reason.clone());
    }
    let env = fork::requested_by_env();
    match (fork::status(), env) {
        (Ok(ForkStatus::UNNEEDED), None) => out.pass(
            check,
            "the kernel copies pinned pages at fork() (ibv_is_fork_initialized: unneeded): \
             fork protection is not needed, and it is off",
        ),
        (Ok(ForkStatus::UNNEEDED), Some((name, env))) => out.warn(
            check,
            format!(
                "{env} asks for fork protection, but the kernel copies pinned pages at fork() \
                 (ibv_is_fork_initialized: unneeded): rdma-core v51 and later ignore it here; \
                 older releases still turn it on, and {COST}"
            ),
            format!("unset {name}: this kernel needs no fork protection"),
        ),
        (Ok(status), env) if status == ForkStatus::ENABLED || env.is_some() => out.warn(
            check,
            format!(
                "fork protection is on ({}) and the kernel does not report copying pinned \
                 pages at fork(): {COST}",
                env.map_or_else(|| "ibv_fork_init".into(), |(_, env)| env)
            ),
            format!(
                "{WHOLE_PAGES}; a program that never forks while memory is registered can \
                 leave protection off"
            ),
        ),
        (Ok(status), _) => out.pass(
            check,
            format!(
                "fork protection is {status} and the kernel does not report copying pinned \
                 pages at fork() (ibv_is_fork_initialized: {status}; rdma-core asks over rdma \
                 netlink): a program that forks while memory is registered needs \
                 fork::init() (or RDMAV_FORK_SAFE=1) before it registers"
            ),
        ),
        (Err(Error::Unsupported { .. }), None) => out.pass(
            check,
            "fork protection is off; this rdma-core (before v35) has no \
             ibv_is_fork_initialized, so whether the kernel copies pinned pages at fork() is \
             unknown: a program that forks while memory is registered should call fork::init() \
             before it registers",
        ),
        (Err(Error::Unsupported { .. }), Some((_, env))) => out.warn(
            check,
            format!(
                "fork protection is on ({env}); this rdma-core (before v35) has no \
                 ibv_is_fork_initialized, so whether the kernel copies pinned pages at fork() \
                 (which would make protection unneeded) is unknown: {COST}"
            ),
            WHOLE_PAGES,
        ),
        (Err(e), _) => out.warn(check, format!("ibv_is_fork_initialized: {e}"), "see the error"),
    }
}
