//! Device-tier tests: they need an RDMA device (rxe0 in the Soft-RoCE guest).

mod examples;
mod loopback;
mod rc_pingpong;
