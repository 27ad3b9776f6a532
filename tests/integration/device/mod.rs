//! Device-tier tests: they need an RDMA device (rxe0 in the Soft-RoCE guest).

mod bandwidth;
mod buffers;
mod doctor;
mod events;
mod examples;
mod lifecycle;
mod limits;
mod loopback;
mod pair;
mod rc_pingpong;
mod service;
mod transfers;
