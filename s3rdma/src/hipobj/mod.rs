//! `hipobj-rc-v2`: object payloads over RDMA Reliable Connection queue pairs, as AMD
//! hipObject defines it and versitygw serves it.
//!
//! # The protocol
//!
//! Two SigV4-signed, body-less `POST`s on the S3 port pair a queue pair of the client with
//! one of the server; the data then moves in one RDMA WRITE WITH IMMEDIATE, whose immediate
//! value is the session's cookie:
//!
//! 1. **`POST /.hipobj-rc/prepare`** with `x-amz-rdma-protocol: hipobj-rc-v2`,
//!    `x-amz-rdma-token` (the client QP's [`Token`]: QPN and GID), `x-amz-rdma-psn` (its
//!    first send PSN, hex), `x-amz-rdma-cookie` (8 hex digits, not 0), `x-amz-rdma-op`
//!    (`GET` or `PUT`), `x-amz-rdma-target` (`/bucket/key`, percent-encoded),
//!    `x-amz-rdma-size` (decimal, 1 to 2^31−1) and optionally `x-amz-rdma-offset` (decimal;
//!    offset + size ≤ 2^31−1). The server authorizes the target as GetObject or PutObject,
//!    creates the session's RC queue pair and a staging region of `size` bytes, reads a GET's
//!    range into it, and answers `200` with `x-amz-rdma-session` (32 hex digits),
//!    `x-amz-rdma-psn` (6 hex digits), `x-amz-rdma-qpn`, `x-amz-rdma-reply: 200:` + its own
//!    token, and `x-amz-rdma-mr-addr` / `x-amz-rdma-mr-rkey` of the staging region.
//! 2. The client moves its queue pair to RTR/RTS towards the server's (GET: and posts a
//!    receive), then sends **`POST /.hipobj-rc/ready`** with `x-amz-rdma-session`,
//!    `x-amz-rdma-cookie`, `x-amz-rdma-qpn` (its QPN) and, for a GET, `x-amz-rdma-mr-addr` /
//!    `x-amz-rdma-mr-rkey` of the region to write into. The server moves its queue pair to
//!    RTR/RTS and runs the data phase before it answers: a GET's RDMA WRITE WITH IMMEDIATE
//!    into the client's region, or for a PUT a receive that must complete as
//!    `RECV_RDMA_WITH_IMM` with the cookie and exactly `size` bytes, which the client writes
//!    right after sending READY (while READY's answer is outstanding). A PUT is then
//!    committed as any PutObject (checksums stored). The answer is `200` with
//!    `x-amz-rdma-cookie`, `x-amz-rdma-bytes-transferred` and `x-amz-rdma-etag` (a PUT: also
//!    `x-amz-rdma-checksum: CRC64NVME <base64>`).
//! 3. **`POST /.hipobj-rc/cancel`** with `x-amz-rdma-session` ends a session before READY;
//!    it answers `204` whether or not there was one, so session ids cannot be probed.
//!
//! Every successful answer carries `x-amz-rdma-protocol: hipobj-rc-v2`. Queue pairs route
//! with a GRH to the peer's GID (RoCE): the server's RTR takes the client's GID from the
//! PREPARE token, its QPN from READY, its PSN from PREPARE; path MTU the port's active one,
//! RNR timer 12, ACK timeout 14, retry and RNR retry counts 7.
//!
//! Sources: hipObject's `docs/interop.rst` (github.com/ROCm/hipObject) and versitygw's RC
//! port (github.com/versity/versitygw: `cuwrapper/rc/`, `rdma/rcroutes/`, `rdma/rcobj/`).
//!
//! # Security model
//!
//! The routes are authenticated by s3s's SigV4 check like every other request (a signed
//! `Authorization` header or a presigned URL); unsigned requests get `403`. A session
//! belongs to the access key that prepared it: READY and CANCEL of another key, and a READY
//! with the wrong cookie, are answered as for a session that does not exist (`404`). Every
//! configured key may do everything, so authorizing a target is the checks GetObject and
//! PutObject make themselves (the bucket exists, the key is one, the object exists, the size
//! is within the limit). Each session has a protection domain of its own with only its queue
//! pair and staging region in it, so a client's queue pair reaches no other session's memory
//! whatever address and rkey it sends; a PUT session's queue pair lets the client RDMA WRITE,
//! a GET session's nothing. The client's region is written only at the address and rkey READY
//! gave.
//!
//! # Status codes
//!
//! `501` with `X-Amz-Rdma-Protocol-Status: unsupported` when the server has no RDMA device or
//! the protocol header is missing or another; `400` for a malformed header, a target with a
//! query (parts over RC are not served), a size out of range or a GET range shorter than
//! `size`; `404` for an unknown session; `409` for a READY on a session that is not waiting
//! for one, or a GET whose client did not take the write (retryable: send READY again);
//! `429` at the session limits; `502` when the data phase fails or passes its deadline. S3
//! errors of the target (`NoSuchBucket`, `NoSuchKey`, …) pass through.
//!
//! # Limits
//!
//! [`SessionLimits`]: sessions at once in all and per access key, the time from PREPARE to
//! READY and the time of the data phase; a session whose deadline passes is removed (on
//! every request, and every 5 s). One transfer is at most 2^31−1 bytes.

mod control;
mod data_path;
mod device;
mod error;
mod session;
mod token;

pub mod client;

pub use control::{RcRoute, RouteNames};
pub use device::Device;
pub use session::SessionLimits;
pub use token::{BadHeader, Token, TRANSPORT_RC};

/// The protocol's name, the value of `x-amz-rdma-protocol`.
pub const PROTOCOL: &str = "hipobj-rc-v2";
/// The routes' path prefix.
pub const ROUTE_PREFIX: &str = "/.hipobj-rc";
/// The largest transfer, and the largest offset + size.
pub const MAX_TRANSFER: u64 = (1 << 31) - 1;

const H_PROTOCOL: &str = "x-amz-rdma-protocol";
const H_TOKEN: &str = "x-amz-rdma-token";
const H_PSN: &str = "x-amz-rdma-psn";
const H_COOKIE: &str = "x-amz-rdma-cookie";
const H_OP: &str = "x-amz-rdma-op";
const H_TARGET: &str = "x-amz-rdma-target";
const H_SIZE: &str = "x-amz-rdma-size";
const H_OFFSET: &str = "x-amz-rdma-offset";
const H_REPLY: &str = "x-amz-rdma-reply";
const H_SESSION: &str = "x-amz-rdma-session";
const H_QPN: &str = "x-amz-rdma-qpn";
const H_MR_ADDR: &str = "x-amz-rdma-mr-addr";
const H_MR_RKEY: &str = "x-amz-rdma-mr-rkey";
const H_BYTES: &str = "x-amz-rdma-bytes-transferred";
const H_ETAG: &str = "x-amz-rdma-etag";
const H_CHECKSUM: &str = "x-amz-rdma-checksum";
const H_CAPABILITIES: &str = "x-amz-rdma-capabilities";
/// What READY's success says this server does besides GET and PUT: `mp`, parts of
/// multipart uploads over RDMA.
const CAPABILITIES: &str = "mp";
/// `unsupported` on a `501`: the client falls back to plain S3.
const PROTOCOL_STATUS: &str = "x-amz-rdma-protocol-status";
