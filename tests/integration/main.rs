//! Integration tests: one binary (one link, one run of the harness).
//!
//! - `host`: need only the host (and libibverbs where installed); run everywhere.
//! - `device` (feature `device-tests`, so a plain `cargo test` on a host counts only tests
//!   that run there): need an RDMA device; they run in the Soft-RoCE guest
//!   (`scripts/rdma-vm`), where `RDMA_VERBS_REQUIRE_DEVICE=1` makes a missing device a
//!   failure, not a skip.
//! - `mock`: the safe crate against the mock provider, crate `rdma-verbs-mock` (errors, masks,
//!   fallbacks, failed destroys); run everywhere, no libibverbs needed.

mod common;
#[cfg(feature = "device-tests")]
mod device;
#[cfg(feature = "diag")]
mod diag;
mod host;
mod mock;
