//! `s3rdma ls`, `rm` and `mb`: listing buckets and objects, deleting an object, creating a
//! bucket.

use rusty_s3::actions::ListObjectsV2;
use rusty_s3::S3Action;
use serde::Deserialize;

use super::{object, Connection, Error, EXPIRES, S3};

/// `s3rdma ls [BUCKET[/PREFIX]]`.
#[derive(clap::Args)]
pub struct Ls {
    #[command(flatten)]
    connection: Connection,
    /// The keys asked for per ListObjectsV2 request (1 to 1000).
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u16).range(1..=1000))]
    page_size: u16,
    /// Without it: the buckets. With it: every key in BUCKET that starts with PREFIX.
    path: Option<String>,
}

/// `s3rdma rm BUCKET/KEY`.
#[derive(clap::Args)]
pub struct Rm {
    #[command(flatten)]
    connection: Connection,
    /// The object to delete.
    path: String,
}

/// `s3rdma mb BUCKET`.
#[derive(clap::Args)]
pub struct Mb {
    #[command(flatten)]
    connection: Connection,
    /// The bucket to create.
    bucket: String,
}

/// ListBuckets' answer (`ListAllMyBucketsResult`), what `ls` prints of it.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct Buckets {
    #[serde(default)]
    buckets: BucketList,
}

#[derive(Deserialize, Default)]
struct BucketList {
    #[serde(rename = "Bucket", default)]
    bucket: Vec<BucketEntry>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct BucketEntry {
    name: String,
    creation_date: Option<String>,
}

/// Lists the buckets (`CREATED  NAME` lines), or the objects under a prefix (`MODIFIED
/// SIZE  KEY` lines), following ListObjectsV2's continuation tokens to the last page.
pub fn ls(args: Ls) -> Result<(), Error> {
    let s3 = S3::connect(&args.connection)?;
    let Some(path) = args.path else {
        let mut response =
            s3.send("ListBuckets", rusty_s3::Method::Get, s3.service_url(), &[], (), &[200])?;
        let xml = response.body_mut().read_to_string()?;
        let list: Buckets = quick_xml::de::from_str(&xml)
            .map_err(|e| format!("ListBuckets' answer is not ListAllMyBucketsResult: {e}"))?;
        for bucket in list.buckets.bucket {
            println!("{:<24}  {}", bucket.creation_date.unwrap_or_default(), bucket.name);
        }
        return Ok(());
    };
    let (name, prefix) = path.split_once('/').unwrap_or((&path, ""));
    let bucket = s3.bucket(name)?;
    let mut token: Option<String> = None;
    loop {
        let mut action = bucket.list_objects_v2(Some(s3.key()));
        action.with_max_keys(args.page_size.into());
        if !prefix.is_empty() {
            action.with_prefix(prefix);
        }
        if let Some(token) = &token {
            action.with_continuation_token(token.as_str());
        }
        let url = action.sign(EXPIRES);
        let mut response = s3.send("ListObjectsV2", rusty_s3::Method::Get, url, &[], (), &[200])?;
        let xml = response.body_mut().with_config().limit(64 << 20).read_to_string()?;
        let page = ListObjectsV2::parse_response(&xml)
            .map_err(|e| format!("ListObjectsV2's answer is not ListBucketResult: {e}"))?;
        for object in &page.contents {
            let modified = object.last_modified.as_deref().unwrap_or("-");
            let size = object.size.map_or("-".into(), |size| size.to_string());
            println!("{modified:<24}  {size:>14}  {}", object.key);
        }
        match page.next_continuation_token {
            // A token that does not move would loop forever.
            Some(next) if token.as_ref() != Some(&next) => token = Some(next),
            Some(_) => {
                return Err("ListObjectsV2 answered the same continuation token twice".into())
            }
            None => return Ok(()),
        }
    }
}

/// Deletes an object.
pub fn rm(args: Rm) -> Result<(), Error> {
    let (name, key) = object(&args.path)?;
    S3::connect(&args.connection)?.delete_object(name, key)?;
    println!("s3rdma: deleted {name}/{key}");
    Ok(())
}

/// Creates a bucket.
pub fn mb(args: Mb) -> Result<(), Error> {
    let s3 = S3::connect(&args.connection)?;
    let url = s3.bucket(&args.bucket)?.create_bucket(s3.key()).sign(EXPIRES);
    s3.send("CreateBucket", rusty_s3::Method::Put, url, &[], (), &[200])?;
    println!("s3rdma: created bucket {}", args.bucket);
    Ok(())
}
