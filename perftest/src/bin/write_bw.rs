//! RDMA WRITE bandwidth, perftest style: `ib_write_bw`'s options, method and table.
//! See the crate's library for the tool shared by the bandwidth and latency tools.

fn main() -> std::process::ExitCode {
    rdma_verbs_perftest::main("write_bw")
}
