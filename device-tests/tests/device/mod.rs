//! Device-tier tests: they need an RDMA device (rxe0 in the Soft-RoCE guest).

mod async_events;
mod bandwidth;
mod buffers;
#[cfg(feature = "rdmacm")]
mod cm;
#[cfg(feature = "rdmacm")]
mod cm_addr;
#[cfg(all(feature = "rdmacm", feature = "tokio"))]
mod cm_async;
#[cfg(feature = "mlx5")]
mod dc;
mod device_memory;
#[cfg(feature = "diag")]
mod doctor;
mod drift;
mod events;
mod examples;
mod faults;
mod fds;
mod field;
mod fork;
mod import;
mod latency;
mod lifecycle;
mod limits;
mod loopback;
mod memory;
mod mtu;
mod pair;
#[cfg(feature = "rails")]
mod rails;
mod rc_pingpong;
mod s3rdma;
mod s3rdma_large;
mod s3rdma_pressure;
mod service;
#[cfg(feature = "rdmacm")]
mod service_cm;
mod soundness;
#[cfg(feature = "efa")]
mod srd;
mod topology;
mod transfers;
mod transports;
mod two_devices;
mod uc;
#[cfg(feature = "rdmacm")]
mod verbs_path;
mod xrc;

/// `#[test]`s that run one body in several ways, a line each: `test_cases! { body: a(x, 1);
/// b(y, 2); }` declares `#[test] fn a() { body(x, 1) }` and `#[test] fn b() { body(y, 2) }`
/// (the arguments are evaluated as each test runs).
macro_rules! test_cases {
    ($body:path: $($name:ident($($arg:expr),* $(,)?);)+) => {
        $(
            #[test]
            fn $name() {
                $body($($arg),*)
            }
        )+
    };
}
use test_cases;
