//! RDMA WRITE latency, perftest style: `ib_write_lat`'s options, method and table.
//! See `examples/bw/mod.rs` for the tool shared with the bandwidth tools, and
//! `examples/bw/latency.rs` for the method.

#[path = "bw/mod.rs"]
mod bw;
#[path = "common/mod.rs"]
mod common;

fn main() -> std::process::ExitCode {
    bw::main("write_lat")
}
