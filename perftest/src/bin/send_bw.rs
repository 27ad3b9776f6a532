//! RDMA SEND bandwidth, perftest style: `ib_send_bw`'s options, method and table.
//! See the crate's library for the tool shared by the bandwidth and latency tools.

fn main() -> std::process::ExitCode {
    rdma_verbs_perftest::main("send_bw")
}
