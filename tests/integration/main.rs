//! Integration tests: one binary (one link, one run of the harness).
//!
//! - `host`: need only the host (and libibverbs where installed); run everywhere.
//! - `diag` (feature `diag`): the doctor on any host.
//! - `topology`: the topology view over recorded sysfs trees (`tests/fixtures/topology`).
//! - `mock`: the safe crate against the mock provider, crate `rdma-verbs-mock` (errors, masks,
//!   fallbacks, failed destroys); run everywhere, no libibverbs needed.
//!
//! The tests that need an RDMA device are crate `rdma-verbs-device-tests` (`device-tests/`),
//! run in the Soft-RoCE guest; the helpers both tiers use are crate `rdma-verbs-test-support`.

#[cfg(feature = "diag")]
mod diag;
mod host;
mod mock;
mod topology;
