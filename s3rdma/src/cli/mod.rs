//! The client commands: plain S3 requests (path-style, presigned with rusty-s3, sent with
//! ureq over HTTP or HTTPS) to s3rdma or any other S3 server, and `hipobj-rc-v2` transfers
//! to an s3rdma server.

pub mod bench;
pub mod list;
mod progress;
pub mod transfer;

use std::path::PathBuf;
use std::time::Duration;

use rusty_s3::{Bucket, S3Action, UrlStyle};
use s3rdma::hipobj::client::Client;
use s3rdma::Credentials;

/// How long a presigned request stays valid.
const EXPIRES: Duration = Duration::from_secs(300);

/// The error of a command: a message for the user.
pub type Error = Box<dyn std::error::Error>;

/// Where the server is and how to sign for it (every client command).
#[derive(clap::Args)]
pub struct Connection {
    /// The server, http://HOST:PORT or https://HOST:PORT (requests are path-style).
    #[arg(long, default_value = "http://127.0.0.1:9000")]
    endpoint: String,
    /// The credentials file (its first key signs), as for serve; without it the
    /// environment's S3RDMA_ACCESS_KEY_ID and S3RDMA_SECRET_ACCESS_KEY.
    #[arg(long)]
    credentials: Option<PathBuf>,
    /// A PEM file of the CA certificate(s) an https:// server's certificate must chain to
    /// (default: the Mozilla roots built in).
    #[arg(long)]
    ca_cert: Option<PathBuf>,
    /// The region requests are signed for.
    #[arg(long, default_value = "us-east-1")]
    region: String,
}

/// A server, with the key that signs for it.
pub struct S3 {
    /// The client: its agent sends every request; it moves payloads over RDMA.
    client: Client,
    base: url::Url,
    region: String,
    key: rusty_s3::Credentials,
}

impl S3 {
    /// The server `connection` names, and its signing key.
    pub fn connect(connection: &Connection) -> Result<S3, Error> {
        let key = Credentials::load(connection.credentials.as_deref())?.swap_remove(0);
        let mut tls = ureq::tls::TlsConfig::builder();
        if let Some(ca) = &connection.ca_cert {
            let pem = std::fs::read(ca)
                .map_err(|e| format!("cannot read the CA certificates {}: {e}", ca.display()))?;
            let roots = ureq::tls::parse_pem(&pem)
                .filter_map(|item| match item {
                    Ok(ureq::tls::PemItem::Certificate(cert)) => Some(Ok(cert)),
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| format!("{}: {e}", ca.display()))?;
            if roots.is_empty() {
                return Err(format!(
                    "{} holds no certificate (PEM, -----BEGIN CERTIFICATE-----)",
                    ca.display()
                )
                .into());
            }
            tls = tls.root_certs(ureq::tls::RootCerts::new_with_certs(&roots));
        }
        let signing = rusty_s3::Credentials::new(&key.access_key_id, &key.secret_access_key);
        let client = Client::with_tls(&connection.endpoint, key, tls.build())?
            .with_region(&connection.region);
        let base = connection.endpoint.parse()?;
        Ok(S3 { client, base, region: connection.region.clone(), key: signing })
    }

    /// The `hipobj-rc-v2` client of the server.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The bucket `name`, addressed path-style.
    pub fn bucket(&self, name: &str) -> Result<Bucket, Error> {
        Ok(Bucket::new(self.base.clone(), UrlStyle::Path, name.to_owned(), self.region.clone())
            .map_err(|e| format!("bucket {name:?}: {e}"))?)
    }

    /// The signing key.
    pub fn key(&self) -> &rusty_s3::Credentials {
        &self.key
    }

    /// A presigned GET of the service (ListBuckets).
    fn service_url(&self) -> url::Url {
        let mut url = self.base.clone();
        url.set_path("/");
        rusty_s3::signing::sign(
            &jiff::Timestamp::now(),
            rusty_s3::Method::Get,
            url,
            self.key.key(),
            self.key.secret(),
            self.key.token(),
            &self.region,
            EXPIRES.as_secs(),
            std::iter::empty(),
            std::iter::empty(),
        )
    }

    /// Sends `method` to the presigned `url` with `headers` and `body`; the answer when its
    /// status is one of `ok`, else an error naming `what` with the server's S3 error.
    pub fn send(
        &self,
        what: &str,
        method: rusty_s3::Method,
        url: url::Url,
        headers: &[(&str, String)],
        body: impl ureq::AsSendBody,
        ok: &[u16],
    ) -> Result<http::Response<ureq::Body>, Error> {
        let mut request = http::Request::builder().method(method.to_str()).uri(url.as_str());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let mut response = self.client.agent().run(request.body(body)?)?;
        if ok.contains(&response.status().as_u16()) {
            return Ok(response);
        }
        let body = response.body_mut().read_to_string().unwrap_or_default();
        Err(format!("{what} answered {}: {body}", response.status()).into())
    }
}

/// `BUCKET/KEY` split at its first `/`.
pub fn object(path: &str) -> Result<(&str, &str), String> {
    path.split_once('/')
        .filter(|(b, k)| !b.is_empty() && !k.is_empty())
        .ok_or_else(|| format!("{path:?} is not BUCKET/KEY"))
}

/// Content-Length's value in `response`.
fn content_length(response: &http::Response<ureq::Body>) -> Option<u64> {
    header(response, "content-length")?.parse().ok()
}

impl S3 {
    /// PutObject of `len` bytes read from `body` as `bucket`/`key`; its ETag.
    pub fn put_object(
        &self,
        bucket: &str,
        key: &str,
        len: u64,
        body: impl ureq::AsSendBody,
    ) -> Result<String, Error> {
        let url = self.bucket(bucket)?.put_object(Some(&self.key), key).sign(EXPIRES);
        // With 100-continue, a refused upload gets the server's error, not a broken pipe.
        let headers = [("content-length", len.to_string()), ("expect", "100-continue".into())];
        let response =
            self.send("PutObject", rusty_s3::Method::Put, url, &headers, body, &[200])?;
        Ok(header(&response, "etag").unwrap_or_default().to_owned())
    }

    /// GetObject of `bucket`/`key`, or of its bytes in `range`: the answer, whose body is
    /// to be read.
    pub fn get_object(
        &self,
        bucket: &str,
        key: &str,
        range: Option<ByteRange>,
    ) -> Result<http::Response<ureq::Body>, Error> {
        let url = self.bucket(bucket)?.get_object(Some(&self.key), key).sign(EXPIRES);
        let Some(range) = range else {
            return self.send("GetObject", rusty_s3::Method::Get, url, &[], (), &[200]);
        };
        // A server that ignores Range answers 200 with the whole object: refused too.
        let headers = [("range", range.header())];
        self.send("GetObject", rusty_s3::Method::Get, url, &headers, (), &[206])
    }

    /// HeadObject of `bucket`/`key`: its size.
    pub fn object_size(&self, bucket: &str, key: &str) -> Result<u64, Error> {
        let url = self.bucket(bucket)?.head_object(Some(&self.key), key).sign(EXPIRES);
        let response = self.send("HeadObject", rusty_s3::Method::Head, url, &[], (), &[200])?;
        Ok(content_length(&response).ok_or("HeadObject's answer has no Content-Length")?)
    }

    /// DeleteObject of `bucket`/`key`.
    pub fn delete_object(&self, bucket: &str, key: &str) -> Result<(), Error> {
        let url = self.bucket(bucket)?.delete_object(Some(&self.key), key).sign(EXPIRES);
        self.send("DeleteObject", rusty_s3::Method::Delete, url, &[], (), &[200, 204])?;
        Ok(())
    }
}

/// Bytes `first` to `last` (both included; to the end without `last`), as `--range A-B` or
/// `A-` gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteRange {
    /// The first byte.
    pub first: u64,
    /// The last byte, included.
    pub last: Option<u64>,
}

impl ByteRange {
    /// The `Range` header's value.
    fn header(self) -> String {
        match self.last {
            Some(last) => format!("bytes={}-{last}", self.first),
            None => format!("bytes={}-", self.first),
        }
    }

    /// The offset and length of the range in an object of `size` bytes (a last byte past
    /// the end stops at the end, as HTTP does).
    pub fn within(self, size: u64) -> Result<(u64, u64), String> {
        if self.first >= size {
            return Err(format!(
                "the range starts at byte {}, past the object's {size} bytes",
                self.first
            ));
        }
        let last = self.last.map_or(size - 1, |last| last.min(size - 1));
        Ok((self.first, last - self.first + 1))
    }
}

impl std::str::FromStr for ByteRange {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || format!("{s:?} is not a byte range FIRST-LAST or FIRST- (e.g. 0-1023)");
        let (first, last) = s.split_once('-').ok_or_else(bad)?;
        let first = first.parse().map_err(|_| bad())?;
        let last = match last {
            "" => None,
            last => Some(last.parse().map_err(|_| bad())?),
        };
        if last.is_some_and(|last| last < first) {
            return Err(format!("{s:?}: the last byte comes before the first"));
        }
        Ok(ByteRange { first, last })
    }
}

/// Header `name`'s value in `response`.
fn header<'a>(response: &'a http::Response<ureq::Body>, name: &str) -> Option<&'a str> {
    response.headers().get(name)?.to_str().ok()
}

#[cfg(test)]
mod tests {
    use super::ByteRange;

    #[test]
    fn byte_ranges_parse_and_fit_the_object() {
        let range: ByteRange = "10-19".parse().unwrap();
        assert_eq!((range.header(), range.within(100)), ("bytes=10-19".into(), Ok((10, 10))));
        let open: ByteRange = "90-".parse().unwrap();
        assert_eq!((open.header(), open.within(100)), ("bytes=90-".into(), Ok((90, 10))));
        // A last byte past the end stops at the end; a first byte past it is an error.
        assert_eq!("95-200".parse::<ByteRange>().unwrap().within(100), Ok((95, 5)));
        assert!("100-".parse::<ByteRange>().unwrap().within(100).is_err());
        for bad in ["", "5", "-5", "a-b", "9-3", "1-2-3"] {
            assert!(bad.parse::<ByteRange>().is_err(), "{bad:?}");
        }
    }
}
