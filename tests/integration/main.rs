//! Integration tests: one binary (see STYLE 24).
//!
//! - `host`: need only the host (and libibverbs where installed); run everywhere.
//! - `device`: need an RDMA device; they run in the Soft-RoCE guest (`scripts/rdma-vm`), where
//!   `RDMA_VERBS_REQUIRE_DEVICE=1` makes a missing device a failure, not a skip.

mod common;
mod device;
mod host;
