//! Device-tier tests: they need an RDMA device (rxe0 in the Soft-RoCE guest).

mod bandwidth;
mod buffers;
#[cfg(feature = "rdmacm")]
mod cm;
mod doctor;
mod events;
mod examples;
mod faults;
mod lifecycle;
mod limits;
mod loopback;
mod memory;
mod pair;
mod rc_pingpong;
mod service;
mod transfers;
mod transports;
#[cfg(feature = "rdmacm")]
mod verbs_path;
