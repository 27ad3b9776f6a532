//! cuObject's `x-amz-rdma-token`: object payloads of ordinary S3 requests moved over RDMA
//! Dynamically Connected (DC) transport (NVIDIA's `CUOBJ_PROTO_RDMA_DC_V1`).
//!
//! # The protocol
//!
//! The client registers a window of its memory, makes it reachable through a DC target
//! (DCT) of its own, and sends one ordinary, SigV4-signed S3 request with the window's
//! [`Descriptor`] in `x-amz-rdma-token` (among the signed headers), an empty body and
//! `x-amz-content-sha256: UNSIGNED-PAYLOAD` (the hash of the empty body is taken too). The
//! server is the initiator of every RDMA operation, from DC initiators (DCIs) of its own that
//! reach the client's DCT with the DC access key both sides were configured with (cuObject's
//! default `0xffeeddcc`):
//!
//! - **GetObject** (and a ranged one): the server reads the object (each 1 MiB block checked
//!   against its stored CRC64NVME, as a plain GET does) and RDMA WRITEs it into the window,
//!   byte 0 of the response at the window's base whatever the range, in chunks from a
//!   registered staging ring, several on the wire at once. Only once every write has completed does it answer: `200` (a
//!   range: `206` with `Content-Range`), empty body, `Content-Length: 0`,
//!   `x-amz-rdma-reply: 200` (`206`), `x-amz-rdma-bytes-transferred`, and the usual ETag,
//!   Last-Modified, Content-Type and user metadata.
//! - **PutObject, UploadPart**: the size is the descriptor's (field 2, or the legacy suffix's);
//!   the server RDMA READs the window in chunks and stores the bytes as any upload, checking
//!   the `x-amz-checksum-*` sent against them and storing its checksums; the answer is `200`
//!   with the ETag, `x-amz-rdma-reply: 200` and `x-amz-rdma-bytes-transferred`.
//! - Every other operation ignores the token.
//!
//! Sources: the S3 RDMA protocol draft `RDMA_PROTOCOL_SPEC.md` (github.com/KiranModukuri/aws-c-s3),
//! NIXL's object plugin `RDMA_PROTOCOL.md` (github.com/ai-dynamo/nixl and forks), NVIDIA's
//! cuObject documentation (docs.nvidia.com/gpudirect-storage/cuobject), versitygw's
//! `vgwrdma` (github.com/versity/versitygw: `cumiddleware/cuobj.go`, `rdma/rdma_common.go`)
//! and Ceph's RGW cuObject support (ceph/ceph PR 70458, `doc/radosgw/s3rdma.rst`).
//!
//! # Status codes
//!
//! - `x-amz-rdma-reply: 501` is the decline: the server has no DC-capable device (DC needs
//!   an NVIDIA ConnectX, mlx5: Soft-RoCE and others are refused by `mlx5dv_is_supported`), or
//!   the transfer is larger than it moves at once ([`DcConfig::max_transfer`]). A GET is then
//!   answered in the body as plain S3 (`200`/`206`, the real Content-Length); a PUT or
//!   UploadPart with `501 NotImplemented` and nothing stored, for the client to send the
//!   bytes in the body.
//! - A `hipobj-rc-v2` token (88 hex digits) on a plain request: `501 NotImplemented`
//!   without `x-amz-rdma-reply` (as versitygw answers), so the client falls back to HTTP.
//! - `400 InvalidArgument`, without `x-amz-rdma-reply`: a malformed descriptor, a PUT of a
//!   0-byte window (create empty objects over HTTP; the server never stores a 0-byte object
//!   for a body-less PUT), a body sent with the token, a GET response larger than the window.
//! - `403 AccessDenied`: the token is not a signed header.
//! - `500 InternalError`: an RDMA operation failed or passed the transfer's deadline, or a
//!   stored block failed its checksum. Nothing was stored (PUT); the window may hold part
//!   of the response (GET).
//!
//! # Security model
//!
//! The token gives whoever holds it, and the DC key, access to the client's window until
//! the client deregisters it: the server can read and write exactly that window, and the
//! server never goes past `base + size`. The request that carries the token is
//! authenticated like any other (SigV4, the token among the signed headers, so it cannot be
//! swapped in transit). A client should register only the window it moves and, where it
//! can, with the access the operation needs. This crate's [`client::Client`] does: it keeps
//! a GET's window (remote write) and a PUT's (remote read), each reused across requests,
//! where cuObject's clients register one window with both, so that a PUT's token cannot be
//! used to write into its memory. The DC key is no secret worth the name (cuObject's
//! default is public): what keeps others out of a window is that its rkey and address are
//! known only to the client and the server it sent them to, over a network that must be
//! trusted for that.
//! The server's staging areas are registered for local access only: a client reaches no
//! server memory.
//!
//! # Limits
//!
//! [`DcConfig`]: the DCIs (each one transfer at a time, with a staging ring of
//! [`IN_FLIGHT`] chunks, as many operations on the wire), the chunk
//! size, the largest transfer (1 GiB by default, vgwrdma's and cuObject's largest call) and
//! the deadline of a whole transfer. A window is at most 4 GiB − 1 (field 2 is 32 bits).
//!
//! # Flows and threads
//!
//! [`Initiators::open`] opens the device through the mlx5 gate (refused on any device
//! without DC) and starts one thread per DCI; `s3rdma serve` does so unless `--rdma off`,
//! with `--rdma-dc-key` and `--rdma-dc-initiators`, and says which protocols it serves. A
//! DCI's attributes are cuObjServer's defaults (as versitygw mirrors them): ACK timeout
//! exponent 16, retry count 7, hop limit 4, traffic class 96, SL 0; the address handle
//! comes from the descriptor's GID when field 6 is 1, else from its LID. A DCI whose
//! operation failed or passed the deadline is reset (or made again) before its next
//! transfer, and what its CQ still holds is polled away, so a late completion never reaches
//! a reused staging ring or another transfer.
//!
//! # What is verified where
//!
//! On the mock provider (`s3rdma/tests/cuobj.rs`), whose libmlx5 carries out a DCI's RDMA
//! WRITE and READ against a DCT's registered memory (DC key, rkey, bounds and access
//! checked): PUT then GET, ranged GET, UploadPart, byte for byte; the refusals and the
//! declines, also when `mlx5dv_is_supported` says no. On Soft-RoCE (`device-tests`): the
//! real gate refuses, and a token GET is answered in the body, a token PUT declined. A real
//! DC fabric (DCIs reaching a remote DCT, RoCE and InfiniBand address handles, the NIC's DC
//! key check, RNR and retries) needs a ConnectX-5 or newer: the `#[ignore]`d hardware test
//! in `device-tests/tests/device/s3rdma.rs` says how to run it. Interop with NVIDIA's
//! libcuobjclient has not been tried.

pub mod client;
mod initiator;
mod port;
mod request;
mod token;
mod transfer;

pub use initiator::{DcConfig, Initiators, TransferError, Worker, IN_FLIGHT};
pub use token::{Descriptor, TokenError};
pub(crate) use transfer::{get_path, send, upload_body, GetPath};

/// cuObject's default DC access key (libcuobjclient, cuObjServer, vgwrdma, Ceph).
pub const DEFAULT_DC_KEY: u64 = 0xffee_ddcc;

const H_TOKEN: &str = "x-amz-rdma-token";
const H_REPLY: &str = "x-amz-rdma-reply";
const H_BYTES: &str = "x-amz-rdma-bytes-transferred";

pub(crate) use request::success;
