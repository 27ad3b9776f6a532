//! The S3 operations over the directory tree: s3s's [`S3`] trait.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use s3s::crypto::{Checksum as _, Md5};
use s3s::dto::*;
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result, S3};

use crate::body::{blocking, io_error, receive, Expected};
use crate::cuobj;
use crate::layout::Layout;
use crate::list::{list, ListQuery, Listed};
use crate::locks::KeyLocks;
use crate::meta::ObjectMeta;
use crate::read::{OpenObject, ReadError};
use crate::write::{hex, publish, remove_stale_temp_files, ObjectWriter, TempFile};

/// The largest number of keys a listing returns, as in S3.
const MAX_KEYS: i32 = 1000;
/// S3's smallest part but the last.
const MIN_PART_SIZE: u64 = 5 << 20;

/// Size limits of what the store accepts.
#[derive(Debug, Clone, Copy)]
pub struct SizeLimits {
    /// The largest object, in bytes (PutObject, and a completed multipart upload).
    pub max_object: u64,
    /// The largest part of a multipart upload, in bytes.
    pub max_part: u64,
}

/// An S3 store over the directory tree of one root (see the crate's docs for its layout).
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    layout: Layout,
    locks: KeyLocks,
    limits: SizeLimits,
    /// The DC initiators of cuObject's `x-amz-rdma-token`, once given.
    dc: std::sync::OnceLock<crate::cuobj::Initiators>,
}

/// A multipart upload's own record: what the completed object is stored as.
#[derive(serde::Serialize, serde::Deserialize)]
struct Upload {
    bucket: String,
    key: String,
    content_type: Option<String>,
    user: std::collections::BTreeMap<String, String>,
}

impl Store {
    /// The store of `root`, which must be a directory; removes the temporary files a crash
    /// left (returns how many).
    pub fn open(root: PathBuf, limits: SizeLimits) -> std::io::Result<(Self, usize)> {
        if !root.is_dir() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} is not a directory; create it or give another --root", root.display()),
            ));
        }
        let removed = remove_stale_temp_files(&root)?;
        let layout = Layout::new(root);
        std::fs::create_dir_all(layout.uploads())?;
        Ok((
            Self {
                inner: Arc::new(Inner {
                    layout,
                    locks: KeyLocks::default(),
                    limits,
                    dc: Default::default(),
                }),
            },
            removed,
        ))
    }

    /// The names of the buckets (the root's directories whose names are bucket names).
    pub fn bucket_names(&self) -> std::io::Result<Vec<String>> {
        Ok(self.buckets()?.into_iter().map(|(name, _)| name).collect())
    }

    fn buckets(&self) -> std::io::Result<Vec<(String, SystemTime)>> {
        let mut buckets = Vec::new();
        for entry in std::fs::read_dir(self.inner.layout.root())? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else { continue };
            if entry.file_type()?.is_dir() && s3s::path::check_bucket_name(&name) {
                buckets.push((name, entry.metadata()?.modified()?));
            }
        }
        buckets.sort();
        Ok(buckets)
    }

    /// Moves the payloads of requests with `x-amz-rdma-token` through `initiators` (see
    /// [`cuobj`](crate::cuobj)); without them such requests are declined. Only the first
    /// call takes effect.
    pub fn serve_cuobj(&self, initiators: crate::cuobj::Initiators) {
        let _ = self.inner.dc.set(initiators);
    }

    fn layout(&self) -> &Layout {
        &self.inner.layout
    }

    async fn bucket_exists(&self, bucket: &str) -> S3Result<()> {
        let dir = self.layout().bucket(bucket);
        if blocking(move || Ok(dir.is_dir())).await? {
            Ok(())
        } else {
            Err(s3_error!(NoSuchBucket, "no bucket is named {bucket:?}"))
        }
    }

    pub(crate) async fn open_object(&self, bucket: &str, key: &str) -> S3Result<OpenObject> {
        self.bucket_exists(bucket).await?;
        let (data, meta) = self.layout().object(bucket, key)?;
        let store = self.clone();
        let name = format!("{bucket}/{key}");
        tokio::task::spawn_blocking(move || OpenObject::open(&store.inner.locks, &data, &meta))
            .await
            .map_err(S3Error::internal_error)?
            .map_err(|e| read_error(e, &name))
    }

    /// Whether a PutObject of `size` bytes to `bucket`/`key` would be taken: the bucket
    /// exists, the key is one, the size is within the limit. The error is PutObject's.
    pub(crate) async fn check_put(&self, bucket: &str, key: &str, size: u64) -> S3Result<()> {
        self.bucket_exists(bucket).await?;
        self.layout().object(bucket, key)?;
        if size > self.inner.limits.max_object {
            return Err(crate::body::too_large(self.inner.limits.max_object));
        }
        Ok(())
    }

    /// Whether an UploadPart of `size` bytes to upload `id` of `bucket`/`key` would be taken:
    /// the upload is in progress, the size within the limit. The error is UploadPart's.
    pub(crate) async fn check_part(
        &self,
        bucket: &str,
        key: &str,
        id: &str,
        size: u64,
    ) -> S3Result<()> {
        self.read_upload(id, bucket, key).await?;
        if size > self.inner.limits.max_part {
            return Err(crate::body::too_large(self.inner.limits.max_part));
        }
        Ok(())
    }

    async fn read_upload(&self, id: &str, bucket: &str, key: &str) -> S3Result<(PathBuf, Upload)> {
        let dir = self.layout().upload(id)?;
        let file = dir.join("upload");
        let upload: Upload = blocking(move || Ok(serde_json::from_slice(&std::fs::read(file)?)?))
            .await
            .map_err(|_| s3_error!(NoSuchUpload, "no multipart upload {id} is in progress"))?;
        if upload.bucket != bucket || upload.key != key {
            return Err(s3_error!(NoSuchUpload, "upload {id} is not of {bucket}/{key}"));
        }
        Ok((dir, upload))
    }
}

/// The S3 error of a failed read; a corrupt object is logged and refused, its checksums never
/// put in the response.
fn read_error(e: ReadError, name: &str) -> S3Error {
    match e {
        ReadError::NotFound => s3_error!(NoSuchKey, "no object {name}"),
        ReadError::Corrupt(why) => {
            eprintln!("s3rdma: refusing to serve {name}: {why}");
            s3_error!(
                InternalError,
                "the stored bytes of {name} fail their checksum; the object is not served"
            )
        }
        ReadError::Io(e) => io_error(e),
    }
}

/// `response` with the success headers of cuObject's RDMA path when its `size` bytes came
/// over RDMA.
fn rdma_reply<T>(mut response: S3Response<T>, size: Option<u64>) -> S3Response<T> {
    if let Some(size) = size {
        response.headers = cuobj::success(200, size);
    }
    response
}

/// The data and metadata files of part `number` in the upload directory `dir`.
fn part_paths(dir: &Path, number: i32) -> (PathBuf, PathBuf) {
    (dir.join(format!("part-{number:05}")), dir.join(format!("part-{number:05}.meta")))
}

fn timestamp(ms: u64) -> Timestamp {
    Timestamp::from(UNIX_EPOCH + Duration::from_millis(ms))
}

fn etag(meta: &ObjectMeta) -> ETag {
    ETag::Strong(meta.etag.clone())
}

fn user_metadata(user: &std::collections::BTreeMap<String, String>) -> Option<Metadata> {
    (!user.is_empty()).then(|| user.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
}

/// Removes the now empty directories from `path`'s parent up to (not including) `stop`.
fn remove_empty_parents(path: &Path, stop: &Path) {
    let mut dir = path.parent();
    while let Some(d) = dir.filter(|d| d.starts_with(stop) && *d != stop) {
        if std::fs::remove_dir(d).is_err() {
            break; // not empty (or gone): the directories above are not empty either
        }
        dir = d.parent();
    }
}

/// What the `input` of an upload (`req`) says of its body: its length, Content-MD5 and
/// `x-amz-checksum-*` values (headers, or the trailers of an aws-chunked body).
macro_rules! expected_body {
    ($input:ident, $req:ident) => {
        Expected {
            length: $input.content_length,
            content_md5: $input.content_md5.as_deref(),
            checksums: Checksum {
                checksum_crc32: $input.checksum_crc32,
                checksum_crc32c: $input.checksum_crc32c,
                checksum_crc64nvme: $input.checksum_crc64nvme,
                checksum_sha1: $input.checksum_sha1,
                checksum_sha256: $input.checksum_sha256,
                ..Default::default()
            },
            headers: &$req.headers,
            trailers: $req.trailing_headers.as_ref(),
        }
    };
}

/// The body of the upload `input` of `req` (PutObject, UploadPart): its own, or the client's
/// window over RDMA when `req` carries `x-amz-rdma-token` (see [`cuobj`]).
macro_rules! upload_body {
    ($store:ident, $input:ident, $req:ident) => {
        cuobj::upload_body(
            $store.inner.dc.get(),
            &$req.headers,
            &$req.uri,
            $input.body,
            $input.content_length,
        )
        .await?
    };
}

/// A GetObject or HeadObject output (`$output`) of the object `meta`, with `$field: $value`
/// added; `$checksum` says whether to give the whole object's CRC64NVME.
macro_rules! object_output {
    ($output:ident, $meta:expr, $checksum:expr, { $($field:ident: $value:expr),* $(,)? }) => {
        $output {
            accept_ranges: Some("bytes".into()),
            e_tag: Some(etag(&$meta)),
            last_modified: Some(timestamp($meta.last_modified_ms)),
            content_type: $meta.content_type.clone(),
            metadata: user_metadata(&$meta.user),
            checksum_crc64nvme: $checksum.then(|| $meta.crc64nvme.clone()),
            checksum_type: $checksum.then(|| ChecksumType::from_static(ChecksumType::FULL_OBJECT)),
            $($field: $value,)*
            ..Default::default()
        }
    };
}

#[async_trait::async_trait]
impl S3 for Store {
    async fn create_bucket(
        &self,
        req: S3Request<CreateBucketInput>,
    ) -> S3Result<S3Response<CreateBucketOutput>> {
        let bucket = req.input.bucket;
        let (dir, meta) = (self.layout().bucket(&bucket), self.layout().bucket_meta(&bucket));
        let created = tokio::task::spawn_blocking(move || {
            std::fs::create_dir(&dir).and_then(|()| std::fs::create_dir_all(meta))
        })
        .await
        .map_err(S3Error::internal_error)?;
        match created {
            Ok(()) => {
                Ok(S3Response::new(CreateBucketOutput { location: Some(format!("/{bucket}")) }))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Err(s3_error!(BucketAlreadyOwnedByYou, "bucket {bucket:?} exists"))
            }
            Err(e) => Err(io_error(e)),
        }
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.bucket_exists(&req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    async fn list_buckets(
        &self,
        _req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let store = self.clone();
        let buckets = blocking(move || store.buckets()).await?;
        let buckets = buckets
            .into_iter()
            .map(|(name, created)| Bucket {
                name: Some(name),
                creation_date: Some(created.into()),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput { buckets: Some(buckets), ..Default::default() }))
    }

    async fn delete_bucket(
        &self,
        req: S3Request<DeleteBucketInput>,
    ) -> S3Result<S3Response<DeleteBucketOutput>> {
        let bucket = req.input.bucket;
        self.bucket_exists(&bucket).await?;
        let (dir, meta) = (self.layout().bucket(&bucket), self.layout().bucket_meta(&bucket));
        let query = ListQuery { prefix: "", delimiter: None, after: Vec::new(), max: 1 };
        let list_dir = dir.clone();
        let page = blocking(move || list(&list_dir, &query, &|_| true)).await?;
        if !page.entries.is_empty() {
            return Err(s3_error!(
                BucketNotEmpty,
                "bucket {bucket:?} holds objects; delete them first"
            ));
        }
        blocking(move || {
            std::fs::remove_dir_all(&dir)?;
            match std::fs::remove_dir_all(meta) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
                _ => Ok(()),
            }
        })
        .await?;
        Ok(S3Response::new(DeleteBucketOutput::default()))
    }

    async fn put_object(
        &self,
        req: S3Request<PutObjectInput>,
    ) -> S3Result<S3Response<PutObjectOutput>> {
        let input = req.input;
        if input.if_match.is_some() || input.if_none_match.is_some() {
            return Err(s3_error!(
                NotImplemented,
                "conditional writes (If-Match, If-None-Match) are not supported"
            ));
        }
        self.bucket_exists(&input.bucket).await?;
        let (data, meta_path) = self.layout().object(&input.bucket, &input.key)?;
        let dir = data.parent().map(Path::to_path_buf).unwrap_or_default();
        let upload = upload_body!(self, input, req);
        let expected = Expected { length: upload.length, ..expected_body!(input, req) };
        let (temp, mut meta) =
            receive(upload.body, dir, self.inner.limits.max_object, expected).await?;
        meta.content_type = input.content_type;
        meta.user = input.metadata.unwrap_or_default().into_iter().collect();
        let store = self.clone();
        let output = PutObjectOutput {
            e_tag: Some(etag(&meta)),
            checksum_crc64nvme: Some(meta.crc64nvme.clone()),
            size: Some(meta.size as i64),
            ..Default::default()
        };
        blocking(move || publish(&store.inner.locks, temp, &data, &meta, &meta_path)).await?;
        Ok(rdma_reply(S3Response::new(output), upload.rdma))
    }

    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        if input.part_number.is_some() {
            return Err(s3_error!(
                NotImplemented,
                "GET by part number is not supported; use a Range"
            ));
        }
        let object = self.open_object(&input.bucket, &input.key).await?;
        let meta = object.meta.clone();
        let range = match &input.range {
            None => 0..meta.size,
            Some(range) => range.check(meta.size).map_err(|_| {
                s3_error!(InvalidRange, "the range is outside the object's {} bytes", meta.size)
            })?,
        };
        let name = format!("{}/{}", input.bucket, input.key);
        let full = input.range.is_none();
        let whole_checksum = full && input.checksum_mode.is_some();
        let content_range = (!full).then(|| {
            format!("bytes {}-{}/{}", range.start, range.end.saturating_sub(1), meta.size)
        });
        let len = range.end - range.start;
        let declined = match cuobj::get_path(self.inner.dc.get(), &req.headers, &req.uri, len)? {
            cuobj::GetPath::Body(headers) => headers,
            cuobj::GetPath::Rdma(peer) => {
                let pool = self.inner.dc.get().expect("a GET goes over RDMA only with a pool");
                let stream = object.stream(range.clone(), name.clone());
                let error = |e: std::io::Error| match e.kind() {
                    std::io::ErrorKind::InvalidData => {
                        read_error(ReadError::Corrupt(e.to_string()), &name)
                    }
                    _ => io_error(e),
                };
                let sent = cuobj::send(pool, peer, stream, error).await?;
                let status = if full { 200 } else { 206 };
                let output = object_output!(GetObjectOutput, meta, whole_checksum, {
                    content_length: Some(0),
                    content_range: content_range,
                });
                let mut response = S3Response::new(output);
                response.headers = cuobj::success(status, sent);
                return Ok(response);
            }
        };
        let mut stream = Box::pin(object.stream(range.clone(), name.clone()));
        // The first block is read and verified before answering, so that a corrupt object gets
        // an error status; a later block that fails cuts the response short.
        let first = match stream.next().await {
            Some(Err(e)) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(read_error(ReadError::Corrupt(e.to_string()), &name))
            }
            Some(Err(e)) => return Err(io_error(e)),
            Some(Ok(bytes)) => Some(Ok(bytes)),
            None => None,
        };
        let body = futures::stream::iter(first)
            .chain(stream.map(|r| r.inspect_err(|e| eprintln!("s3rdma: GET cut short: {e}"))));
        let output = object_output!(GetObjectOutput, meta, whole_checksum, {
            body: Some(StreamingBlob::wrap(body)),
            content_length: Some(len as i64),
            content_range: content_range,
        });
        let mut response = S3Response::new(output);
        response.headers = declined;
        Ok(response)
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let input = req.input;
        let meta = self.open_object(&input.bucket, &input.key).await?.meta;
        let whole_checksum = input.checksum_mode.is_some();
        Ok(S3Response::new(object_output!(HeadObjectOutput, meta, whole_checksum, {
            content_length: Some(meta.size as i64),
        })))
    }

    async fn delete_object(
        &self,
        req: S3Request<DeleteObjectInput>,
    ) -> S3Result<S3Response<DeleteObjectOutput>> {
        let input = req.input;
        self.bucket_exists(&input.bucket).await?;
        let (data, meta) = self.layout().object(&input.bucket, &input.key)?;
        let (bucket_dir, meta_dir) =
            (self.layout().bucket(&input.bucket), self.layout().bucket_meta(&input.bucket));
        let store = self.clone();
        blocking(move || {
            {
                let _guard = store.inner.locks.write(&data);
                for path in [&data, &meta] {
                    match std::fs::remove_file(path) {
                        Err(e)
                            if !matches!(
                                e.kind(),
                                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
                            ) =>
                        {
                            return Err(e)
                        }
                        _ => {}
                    }
                }
            }
            remove_empty_parents(&data, &bucket_dir);
            remove_empty_parents(&meta, &meta_dir);
            Ok(())
        })
        .await?;
        Ok(S3Response::new(DeleteObjectOutput::default()))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let input = req.input;
        self.bucket_exists(&input.bucket).await?;
        let token = match &input.continuation_token {
            Some(token) => base64_simd::URL_SAFE_NO_PAD.decode_to_vec(token).map_err(|_| {
                s3_error!(InvalidArgument, "the continuation token is not one this server gave")
            })?,
            None => Vec::new(),
        };
        let start_after = input.start_after.clone().unwrap_or_default().into_bytes();
        let prefix = input.prefix.clone().unwrap_or_default();
        let delimiter = input.delimiter.clone();
        let max = input.max_keys.unwrap_or(MAX_KEYS).clamp(0, MAX_KEYS);
        let (dir, meta_dir) =
            (self.layout().bucket(&input.bucket), self.layout().bucket_meta(&input.bucket));
        let (page, metas) = blocking(move || {
            let query = ListQuery {
                prefix: &prefix,
                delimiter: delimiter.as_deref(),
                after: token.max(start_after),
                max: max as usize,
            };
            let page = list(&dir, &query, &|key| meta_dir.join(key).is_file())?;
            // An object deleted since it was listed has no metadata left: it is left out.
            let metas: Vec<_> = page
                .entries
                .iter()
                .map(|e| match e {
                    Listed::Key(key) => ObjectMeta::read(&meta_dir.join(key)).ok(),
                    Listed::Prefix(_) => None,
                })
                .collect();
            Ok((page, metas))
        })
        .await?;
        let url = input.encoding_type.as_ref().is_some_and(|e| e.as_str() == EncodingType::URL);
        let encode = |s: &str| if url { urlencoding::encode(s).into_owned() } else { s.to_owned() };
        let next = page.truncated.then(|| {
            page.entries
                .last()
                .map(|e| base64_simd::URL_SAFE_NO_PAD.encode_to_string(e.resume_after()))
        });
        let (mut contents, mut prefixes) = (Vec::new(), Vec::new());
        for (entry, meta) in page.entries.into_iter().zip(metas) {
            match (entry, meta) {
                (Listed::Key(key), Some(meta)) => contents.push(Object {
                    key: Some(encode(&key)),
                    size: Some(meta.size as i64),
                    e_tag: Some(etag(&meta)),
                    last_modified: Some(timestamp(meta.last_modified_ms)),
                    ..Default::default()
                }),
                (Listed::Prefix(prefix), _) => {
                    prefixes.push(CommonPrefix { prefix: Some(encode(&prefix)) })
                }
                (Listed::Key(_), None) => {}
            }
        }
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            key_count: Some((contents.len() + prefixes.len()) as i32),
            contents: Some(contents),
            common_prefixes: Some(prefixes),
            is_truncated: Some(next.is_some()),
            next_continuation_token: next.flatten(),
            continuation_token: input.continuation_token,
            prefix: input.prefix.map(|p| encode(&p)),
            delimiter: input.delimiter.map(|d| encode(&d)),
            start_after: input.start_after.map(|s| encode(&s)),
            encoding_type: input.encoding_type,
            max_keys: Some(max),
            ..Default::default()
        }))
    }

    async fn create_multipart_upload(
        &self,
        req: S3Request<CreateMultipartUploadInput>,
    ) -> S3Result<S3Response<CreateMultipartUploadOutput>> {
        let input = req.input;
        self.bucket_exists(&input.bucket).await?;
        self.layout().object(&input.bucket, &input.key)?;
        let id = hex(&rand::random::<[u8; 16]>());
        let dir = self.layout().upload(&id)?;
        let upload = Upload {
            bucket: input.bucket.clone(),
            key: input.key.clone(),
            content_type: input.content_type,
            user: input.metadata.unwrap_or_default().into_iter().collect(),
        };
        blocking(move || {
            let mut temp = TempFile::create_in(&dir)?;
            temp.write_all(&serde_json::to_vec(&upload)?)?;
            temp.publish(&dir.join("upload"))
        })
        .await?;
        Ok(S3Response::new(CreateMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            upload_id: Some(id),
            ..Default::default()
        }))
    }

    async fn upload_part(
        &self,
        req: S3Request<UploadPartInput>,
    ) -> S3Result<S3Response<UploadPartOutput>> {
        let input = req.input;
        if !(1..=10_000).contains(&input.part_number) {
            return Err(s3_error!(InvalidArgument, "a part number is from 1 to 10000"));
        }
        let (dir, _) = self.read_upload(&input.upload_id, &input.bucket, &input.key).await?;
        let upload = upload_body!(self, input, req);
        let expected = Expected { length: upload.length, ..expected_body!(input, req) };
        let (temp, meta) =
            receive(upload.body, dir.clone(), self.inner.limits.max_part, expected).await?;
        let e_tag = etag(&meta);
        let (data, meta_path) = part_paths(&dir, input.part_number);
        let store = self.clone();
        blocking(move || publish(&store.inner.locks, temp, &data, &meta, &meta_path)).await?;
        let output = UploadPartOutput { e_tag: Some(e_tag), ..Default::default() };
        Ok(rdma_reply(S3Response::new(output), upload.rdma))
    }

    async fn complete_multipart_upload(
        &self,
        req: S3Request<CompleteMultipartUploadInput>,
    ) -> S3Result<S3Response<CompleteMultipartUploadOutput>> {
        let input = req.input;
        let (dir, upload) = self.read_upload(&input.upload_id, &input.bucket, &input.key).await?;
        let parts = input.multipart_upload.and_then(|m| m.parts).unwrap_or_default();
        if parts.is_empty() {
            return Err(s3_error!(MalformedXML, "the completion lists no parts"));
        }
        let mut numbers = Vec::with_capacity(parts.len());
        for part in &parts {
            let number = part
                .part_number
                .ok_or_else(|| s3_error!(MalformedXML, "a part has no PartNumber"))?;
            if numbers.last().is_some_and(|&last| number <= last) {
                return Err(s3_error!(
                    InvalidPartOrder,
                    "the parts must be listed in ascending order"
                ));
            }
            numbers.push(number);
        }
        let (data, meta_path) = self.layout().object(&input.bucket, &input.key)?;
        let limit = self.inner.limits.max_object;
        let store = self.clone();
        let sent: Vec<Option<String>> =
            parts.into_iter().map(|p| p.e_tag.map(|e| e.into_value())).collect();
        let (bucket, key) = (input.bucket.clone(), input.key.clone());
        let meta = tokio::task::spawn_blocking(move || -> S3Result<ObjectMeta> {
            let target_dir = data.parent().map(Path::to_path_buf).unwrap_or_default();
            let mut writer = ObjectWriter::create_in(&target_dir, limit).map_err(io_error)?;
            let mut md5s = Vec::with_capacity(numbers.len() * 16);
            for (i, (number, sent)) in numbers.iter().zip(&sent).enumerate() {
                let (part, part_meta) = part_paths(&dir, *number);
                let name = format!("part {number} of {bucket}/{key}");
                let part = OpenObject::open(&store.inner.locks, &part, &part_meta).map_err(
                    |e| match e {
                        ReadError::NotFound => {
                            s3_error!(InvalidPart, "part {number} was not uploaded")
                        }
                        e => read_error(e, &name),
                    },
                )?;
                if sent.as_deref().is_some_and(|sent| sent != part.meta.etag) {
                    return Err(s3_error!(
                        InvalidPart,
                        "part {number}'s ETag is not the one listed"
                    ));
                }
                if i + 1 < numbers.len() && part.meta.size < MIN_PART_SIZE {
                    return Err(s3_error!(
                        EntityTooSmall,
                        "part {number} is smaller than 5 MiB and not the last"
                    ));
                }
                md5s.extend_from_slice(&part.meta.md5);
                part.copy_to(&mut writer, &name).map_err(|e| read_error(e, &name))?;
            }
            let (temp, mut meta) = writer.finish();
            meta.etag = format!("{}-{}", hex(&Md5::checksum(&md5s)), numbers.len());
            meta.content_type = upload.content_type;
            meta.user = upload.user;
            publish(&store.inner.locks, temp, &data, &meta, &meta_path).map_err(io_error)?;
            std::fs::remove_dir_all(&dir).map_err(io_error)?;
            Ok(meta)
        })
        .await
        .map_err(S3Error::internal_error)??;
        Ok(S3Response::new(CompleteMultipartUploadOutput {
            bucket: Some(input.bucket),
            key: Some(input.key),
            e_tag: Some(etag(&meta)),
            ..Default::default()
        }))
    }

    async fn abort_multipart_upload(
        &self,
        req: S3Request<AbortMultipartUploadInput>,
    ) -> S3Result<S3Response<AbortMultipartUploadOutput>> {
        let input = req.input;
        let (dir, _) = self.read_upload(&input.upload_id, &input.bucket, &input.key).await?;
        blocking(move || std::fs::remove_dir_all(dir)).await?;
        Ok(S3Response::new(AbortMultipartUploadOutput::default()))
    }
}
