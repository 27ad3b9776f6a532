//! Test scaffolding shared by rdma-verbs' host tier (the root crate's tests, the perftest
//! tools' tests) and its device tier (crate `rdma-verbs-device-tests`): where a test runs,
//! running programs with a time limit ([`process`]), locating the built programs
//! ([`programs`]), reading the doctor's findings ([`doctor`]) and building recorded sysfs
//! trees ([`fixtures`]). Not published.

pub mod doctor;
pub mod fixtures;
pub mod process;
pub mod programs;

use std::time::{Duration, Instant};

/// Whether a missing device must fail the test (set by `scripts/rdma-vm` in the guest).
pub fn device_required() -> bool {
    std::env::var("RDMA_VERBS_REQUIRE_DEVICE").is_ok_and(|v| v == "1")
}

/// Whether this host's kernel has RDMA (`/sys/class/infiniband_verbs`), saying that the
/// calling test, which covers hosts without, skipped when it has: such a test returns then.
pub fn skipped_for_kernel_rdma() -> bool {
    let has = std::path::Path::new("/sys/class/infiniband_verbs").exists();
    if has {
        eprintln!("skipped: this host's kernel has RDMA (the test covers hosts without)");
    }
    has
}

/// Runs `body` on a thread of its own and fails, saying `suspect`, if it has not finished
/// within `limit`: what would block for good (a read on a blocking descriptor,
/// `ibv_destroy_cq` waiting for unacknowledged events) shows as a failure, not a hang. A panic
/// of `body` is passed on.
pub fn finishes_within(limit: Duration, suspect: &str, body: impl FnOnce() + Send + 'static) {
    let worker = std::thread::spawn(body);
    let start = Instant::now();
    while !worker.is_finished() {
        assert!(start.elapsed() < limit, "not finished after {limit:?}: {suspect}");
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Err(panic) = worker.join() {
        std::panic::resume_unwind(panic);
    }
}
