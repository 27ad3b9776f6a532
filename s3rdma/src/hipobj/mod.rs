//! `hipobj-rc-v2`: object payloads over RDMA Reliable Connection queue pairs, as AMD
//! hipObject defines it and versitygw serves it.
//!
//! # The protocol
//!
//! Two SigV4-signed, body-less `POST`s on the S3 port pair a queue pair of the client with
//! one of the server; the data then moves in RDMA WRITEs, the last WITH IMMEDIATE, whose
//! immediate value is the session's cookie:
//!
//! 1. **`POST /.hipobj-rc/prepare`** with `x-amz-rdma-protocol: hipobj-rc-v2`,
//!    `x-amz-rdma-token` (the client QP's [`Token`]: QPN and GID), `x-amz-rdma-psn` (its
//!    first send PSN, hex), `x-amz-rdma-cookie` (8 hex digits, not 0), `x-amz-rdma-op`
//!    (`GET` or `PUT`), `x-amz-rdma-target` (`/bucket/key`, percent-encoded; for a PUT of a
//!    part of a multipart upload `/bucket/key?uploadId=ID&partNumber=N`, exactly that query),
//!    `x-amz-rdma-size` (decimal, 1 to 2^31−1) and optionally `x-amz-rdma-offset` (decimal;
//!    offset + size ≤ 2^31−1). The server authorizes the target as GetObject, PutObject or
//!    UploadPart (a GET's object is opened and its range checked, not read), creates the
//!    session's RC queue pair and registered region (see *Memory*), and answers `200` with
//!    `x-amz-rdma-session` (32 hex digits), `x-amz-rdma-psn` (6 hex digits), `x-amz-rdma-qpn`,
//!    `x-amz-rdma-reply: 200:` + its own token, and `x-amz-rdma-mr-addr` /
//!    `x-amz-rdma-mr-rkey` of the region.
//! 2. The client moves its queue pair to RTR/RTS towards the server's (GET: and posts a
//!    receive), then sends **`POST /.hipobj-rc/ready`** with `x-amz-rdma-session`,
//!    `x-amz-rdma-cookie`, `x-amz-rdma-qpn` (its QPN) and, for a GET, `x-amz-rdma-mr-addr` /
//!    `x-amz-rdma-mr-rkey` of the region to write into. The server moves its queue pair to
//!    RTR/RTS and runs the data phase before it answers:
//!    - a GET reads the range a block (1 MiB) at a time, checks each block against its
//!      stored CRC64NVME as a plain GetObject does, and RDMA WRITEs it to the client's
//!      region at its offset while the next is read; the last WRITE carries the immediate.
//!      RC places a queue pair's WRITEs in order, so the client's one receive completes
//!      after every byte is there; the receive's byte count is the last WRITE's, READY's
//!      `x-amz-rdma-bytes-transferred` the whole. A block that fails its checksum ends the
//!      transfer (`502`): the receive never completes and no success is answered.
//!    - a PUT posts a receive that must complete as `RECV_RDMA_WITH_IMM` with the cookie and
//!      exactly `size` bytes, which the client writes in one WRITE right after sending
//!      READY (while READY's answer is outstanding). The bytes are then committed from the
//!      staging region, a block at a time, as any PutObject or UploadPart (checksums stored).
//!
//!    The answer is `200` with `x-amz-rdma-cookie`, `x-amz-rdma-bytes-transferred`,
//!    `x-amz-rdma-etag` (the object's, or the part's), `x-amz-rdma-capabilities: mp` (parts
//!    are served) and, for a PUT of an object, `x-amz-rdma-checksum: CRC64NVME <base64>`.
//! 3. **`POST /.hipobj-rc/cancel`** with `x-amz-rdma-session` ends a session before READY;
//!    it answers `204` whether or not there was one, so session ids cannot be probed.
//!
//! versitygw reads a GET's range at PREPARE into a staging region of `size` bytes and sends
//! it in one WRITE; this server reads it at READY and sends it in several, the last with the
//! immediate, as Ceph's relay does (`doc/radosgw/s3-rdma.rst` in github.com/ceph/ceph): a
//! client must not expect the receive's byte count to be `size`.
//!
//! Every successful answer carries `x-amz-rdma-protocol: hipobj-rc-v2`. Queue pairs route
//! with a GRH to the peer's GID (RoCE): the server's RTR takes the client's GID from the
//! PREPARE token, its QPN from READY, its PSN from PREPARE; path MTU the port's active one,
//! RNR timer 12, ACK timeout 14, retry and RNR retry counts 7.
//!
//! Sources: hipObject's `docs/interop.rst` (github.com/ROCm/hipObject) and versitygw's RC
//! port (github.com/versity/versitygw: `cuwrapper/rc/`, `rdma/rcroutes/`, `rdma/rcobj/`;
//! parts' targets in `rdma/rcroutes/target.go`).
//!
//! # Security model
//!
//! The routes are authenticated by s3s's SigV4 check like every other request (a signed
//! `Authorization` header or a presigned URL); unsigned requests get `403`. A session
//! belongs to the access key that prepared it: READY and CANCEL of another key, and a READY
//! with the wrong cookie, are answered as for a session that does not exist (`404`). Every
//! configured key may do everything, so authorizing a target is the checks GetObject and
//! PutObject or UploadPart make themselves (the bucket exists, the key is one, the object or
//! the upload exists, the size is within the limit). Each session has a protection domain of
//! its own with only its queue pair and region in it, so a client's queue pair reaches no
//! other session's memory whatever address and rkey it sends; a PUT session's queue pair lets
//! the client RDMA WRITE, a GET session's nothing. The client's region is written only at
//! the address and rkey READY gave, from its start to `size` bytes on.
//!
//! # Status codes
//!
//! `501` with `X-Amz-Rdma-Protocol-Status: unsupported` when the server has no RDMA device or
//! the protocol header is missing or another; `400` for a malformed header, a target with a
//! query other than a part's (or a GET of a part), a size out of range or an object shorter
//! than offset + size; `404` for an unknown session; `409` for a READY on a session that is
//! not waiting for one, or a GET whose client did not take the writes (retryable: send READY
//! again, the range is sent again from its start); `429` at the session limits; `502` when
//! the data phase fails, passes its deadline, or a GET's block fails its checksum. S3 errors
//! of the target (`NoSuchBucket`, `NoSuchKey`, `NoSuchUpload`, …) pass through.
//!
//! # Memory
//!
//! A session registers one region in its protection domain at PREPARE and holds it until it
//! ends: a GET a ring of 4 blocks (4 MiB; less for a range of fewer blocks), whatever the
//! size; a PUT a staging region of `size` bytes, because the client writes the whole object
//! in one WRITE to the region PREPARE advertised. A PUT's commit reads 2 blocks ahead of the
//! file being written. [`SessionLimits::max_staged_bytes`] bounds the sum of the regions.
//!
//! # Limits
//!
//! [`SessionLimits`]: sessions at once in all and per access key, the bytes their regions
//! hold, the time from PREPARE to READY and the time of the data phase; a session whose
//! deadline passes is removed (on every request, and every 5 s). One transfer is at most
//! 2^31−1 bytes.

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
