//! An S3 server over a directory tree.
//!
//! `s3rdma serve` answers the S3 REST API (the s3s crate parses requests and checks AWS
//! Signature Version 4 signatures) from a directory, typically a mounted parallel file
//! system: every object is a plain file at `ROOT/BUCKET/KEY`. With an RDMA device it also
//! moves object payloads over RC queue pairs ([`hipobj`]: AMD hipObject's `hipobj-rc-v2`),
//! whose client is [`hipobj::client::Client`] and `s3rdma get` / `s3rdma put --rdma`, and,
//! on an NVIDIA ConnectX, over DC for requests that carry cuObject's `x-amz-rdma-token`
//! ([`cuobj`], whose client is [`cuobj::client::Client`]).
//!
//! # Running it
//!
//! ```text
//! s3rdma serve --root /mnt/pfs/s3 --listen 0.0.0.0:9000 --credentials creds.json
//! ```
//!
//! `creds.json` is `{"access_key_id": "...", "secret_access_key": "..."}`, or a list of such
//! keys; without
//! `--credentials` the server reads `S3RDMA_ACCESS_KEY_ID` and `S3RDMA_SECRET_ACCESS_KEY`,
//! and refuses to start without either. Any S3 client then works with path-style addressing
//! against `http://HOST:9000`, e.g. `aws --endpoint-url http://HOST:9000 s3 ls`.
//!
//! The binary is a client too, of this server or of any S3 server that takes path-style
//! requests (`--endpoint http(s)://HOST:PORT`, the same credentials as `serve`, `--ca-cert`
//! for a private CA): `s3rdma ls [BUCKET[/PREFIX]]`, `mb BUCKET`, `put FILE BUCKET/KEY`,
//! `get [--range FIRST-LAST] BUCKET/KEY FILE`, `rm BUCKET/KEY` and `bench BUCKET[/PREFIX]`
//! (PUT then GET of `--count` objects of `--size` bytes; MiB/s and operations/s of each).
//! `get --rdma` and `put --rdma` move the bytes over `hipobj-rc-v2` (over plain S3 when the
//! server declines it); `bench` does when the client has an RDMA device and the server serves
//! it.
//!
//! # Operations
//!
//! CreateBucket, HeadBucket, ListBuckets, DeleteBucket (of an empty bucket); PutObject,
//! GetObject (with `Range`), HeadObject, DeleteObject, ListObjectsV2 (prefix, delimiter,
//! start-after, continuation, URL encoding); CreateMultipartUpload, UploadPart,
//! CompleteMultipartUpload, AbortMultipartUpload. Other operations answer `NotImplemented`,
//! as do conditional writes and GET by part number. Conditional GET headers (`If-Match`,
//! `If-None-Match`, ...) are not evaluated.
//!
//! # Storage layout
//!
//! ```text
//! ROOT/BUCKET/KEY                      the object's bytes; a key's `/` are directories
//! ROOT/.s3rdma/meta/BUCKET/KEY         its metadata (JSON)
//! ROOT/.s3rdma/uploads/ID/             a multipart upload in progress: its record and parts
//! DIR/.s3rdma-tmp-RANDOM               a file being written
//! ```
//!
//! The metadata file holds the size, the ETag (the MD5 in hex; for a multipart upload the
//! MD5 of the parts' MD5s, `-` and the number of parts, as S3 computes it), the CRC64NVME of
//! the whole object, the CRC64NVME of every 1 MiB block, the time of publication, the
//! Content-Type and the user metadata (`x-amz-meta-*`). A file without a metadata file is not
//! an object and is not listed.
//!
//! Because keys are paths, a key cannot also be a directory of other keys (`a` and `a/b`
//! cannot both exist: the second write is refused with `InvalidRequest`), and keys with empty,
//! `.` or `..` segments, segments longer than 255 bytes, or segments starting with
//! `.s3rdma-tmp-` are refused. Keys ending with `/` (console "folders") are refused too.
//!
//! # Integrity
//!
//! - **Atomic publish.** An object is written to a temporary file in its target directory,
//!   fsynced, and renamed over the key with its metadata file (each fsynced, then the
//!   directory; a directory made for a new key is fsynced into its parent too): a reader sees
//!   the old object or the new one, never a part. Temporary files a
//!   crash left are removed at start, in one walk of the whole tree. Bytes and metadata are renamed under a per-key lock
//!   that readers take to open them, so one server process must own a root.
//! - **Checked on the way in.** A `Content-MD5` or `x-amz-checksum-*` value (CRC32, CRC32C,
//!   CRC64NVME, SHA-1, SHA-256; in a header or an aws-chunked trailer) that does not match
//!   the bytes received fails the request with `BadDigest` and nothing is stored.
//! - **Verified on the way out.** A GET reads whole 1 MiB blocks and checks each against its
//!   stored CRC64NVME before sending any of its bytes. When the first block fails, the
//!   answer is `500 InternalError`; when a later one does, the response is cut short (fewer
//!   bytes than its Content-Length), which every HTTP client reports as an error. Neither
//!   puts a checksum in the response; the server logs which bytes failed. With
//!   `x-amz-checksum-mode: ENABLED` a whole-object GET or HEAD returns the stored
//!   `x-amz-checksum-crc64nvme`.
//!
//! # Security model
//!
//! Every request must be signed with AWS Signature Version 4, in the `Authorization` header
//! or as a presigned URL, with one of the configured access keys; unsigned and wrongly signed
//! requests get `403`. Every key may do everything; `hipobj-rc-v2` sessions belong to the key
//! that prepared them (see [`hipobj`]); an `x-amz-rdma-token` must be a signed header, and
//! gives the server its client's window only (see [`cuobj`]).
//!
//! The server speaks plain HTTP unless given a certificate: signatures protect requests from
//! being altered, not from being read, so without TLS run it on a trusted network. With
//! `--tls-cert CERT.pem --tls-key KEY.pem` (the chain, the server's certificate first, and
//! its PKCS#8, PKCS#1 or SEC1 key) it serves HTTPS only, TLS 1.2 and 1.3 through rustls with
//! the *ring* provider ([`serve_tls`], [`tls_server_config`]). The connection bound counts a
//! connection from its accept, and its handshake must end within the header timeout. TLS
//! protects the requests and the object bytes sent over HTTP; the bytes `hipobj-rc-v2` moves
//! over RDMA are not encrypted (RC queue pairs have no encryption), only the control requests
//! that set the transfer up are.
//!
//! # Limits
//!
//! See [`Limits`] and [`SizeLimits`], set from the command line: connections served at once,
//! the request body (Content-Length), object and part sizes (checked on the bytes received
//! too), the header buffer, the time to send the headers, and the time a request body may
//! send nothing (a stalled upload fails with `RequestTimeout`, its connection is closed, and
//! other connections are not held up). A Content-Length that is not a number gets `400` from
//! hyper before the request reaches the server. Objects are streamed: a plain request holds
//! at most about one block (1 MiB) of an object's bytes in memory. RDMA transfers have limits
//! of their own ([`hipobj`], [`cuobj`]).
//!
//! # What is verified where
//!
//! | what | where |
//! |---|---|
//! | the S3 API, SigV4, stored and verified checksums, limits, multipart, TLS, the client commands | host tests (`tests/server.rs`, `tests/cli.rs`) and the AWS CLI and boto3 (`tests/aws_cli.sh`), in CI |
//! | `hipobj-rc-v2`: 4 KiB to 192 MiB both ways, ranges, parts, sessions bound to their key, another session's memory out of reach, a byte flipped on disk, clients at once, a client killed mid-transfer, flooding, huge lengths, stalled uploads | Soft-RoCE (rxe) in the device tier (`device-tests/tests/device/s3rdma*.rs`), in CI |
//! | `x-amz-rdma-token` over DC: the token, the whole flow against the mock libmlx5 (whose DC initiators carry out RDMA WRITE and READ on a DCT's memory), the decline on rxe | the mock provider (`tests/cuobj.rs`) and rxe, in CI |
//! | the gateway of the glibc 2.28 release artifact on rdma-core 33.2, 44.0, 56.1 and 65.0 | the release matrix in the Soft-RoCE guest, in CI |
//! | DC on a ConnectX; interop with NVIDIA's libcuobjclient and with other `hipobj-rc-v2` clients | not verified: a hardware test is written and `#[ignore]`d (`device::s3rdma::hardware`) |

mod backend;
mod body;
mod client_error;
mod credentials;
pub mod cuobj;
pub mod hipobj;
mod layout;
mod list;
mod locks;
mod meta;
mod read;
mod server;
mod tls;
mod write;

pub use backend::{SizeLimits, Store};
pub use client_error::ClientError;
pub use credentials::{Credentials, ENV_ACCESS_KEY, ENV_SECRET_KEY};
pub use server::{serve, serve_tls, BodyTimeout, Limits};
pub use tls::tls_server_config;

/// The S3 service of `store`, accepting requests signed with any of `keys`, with the
/// `hipobj-rc-v2` routes of `rc` (see [`hipobj`]).
pub fn service(store: Store, keys: &[Credentials], rc: hipobj::RcRoute) -> s3s::service::S3Service {
    let mut builder = s3s::service::S3ServiceBuilder::new(store);
    let mut auth = s3s::auth::SimpleAuth::new();
    for key in keys {
        auth.register(key.access_key_id.clone(), key.secret_access_key.clone().into());
    }
    builder.set_auth(auth);
    builder.set_route(rc);
    builder.set_validation(hipobj::RouteNames);
    builder.build()
}
