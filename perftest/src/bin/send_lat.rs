//! SEND latency, perftest style: `ib_send_lat`'s options, method and table.
//! See the crate's library for the tool shared with the bandwidth tools, and its
//! `latency.rs` for the method.

fn main() -> std::process::ExitCode {
    rdma_verbs_perftest::main("send_lat")
}
