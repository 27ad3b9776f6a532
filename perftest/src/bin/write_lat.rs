//! RDMA WRITE latency, perftest style: `ib_write_lat`'s options, method and table.
//! See the crate's library for the tool shared with the bandwidth tools, and its
//! `latency.rs` for the method.

fn main() -> std::process::ExitCode {
    rdma_verbs_perftest::main("write_lat")
}
