//! The device tier: one binary (one link, one run of the harness), whose tests need an RDMA
//! device (rxe0; siw0 for the tests named siw). See the crate's documentation for how
//! `scripts/test` builds the programs they run and runs this binary in the Soft-RoCE guest.

mod device;
