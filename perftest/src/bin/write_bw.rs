//! RDMA WRITE bandwidth, perftest style: `ib_write_bw`'s options, method and table.
//! See `examples/bw/mod.rs` for the tool shared by the bandwidth and latency tools.

#[path = "bw/mod.rs"]
mod bw;
#[path = "common/mod.rs"]
mod common;

fn main() -> std::process::ExitCode {
    bw::main("write_bw")
}
