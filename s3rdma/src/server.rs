//! The HTTP/1.1 server: connections bounded in number, header size and time; request bodies
//! bounded in size and cut off when they stall; the S3 protocol handled by s3s.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use s3s::service::S3Service;
use s3s::{s3_error, HttpResponse};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::time::{Instant, Sleep};

/// Bounds on connections and requests.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once; more wait in the listen backlog.
    pub max_connections: usize,
    /// The largest request body, in bytes: a larger Content-Length is refused before any byte
    /// is read (`EntityTooLarge`). Object and part sizes are checked again on the bytes
    /// received.
    pub max_body: u64,
    /// The buffer that must hold a request's line and headers, in bytes (at least 8192);
    /// larger headers get `431 Request Header Fields Too Large`.
    pub max_header_bytes: usize,
    /// How long a request's headers may take to arrive; over HTTPS, also how long the TLS
    /// handshake may take.
    pub header_timeout: Duration,
    /// How long a request body may send nothing before the request fails (`RequestTimeout`)
    /// and its connection is closed.
    pub body_idle_timeout: Duration,
}

/// `Connection: close`, on answers that leave a request body unread.
const CLOSE: hyper::header::HeaderValue = hyper::header::HeaderValue::from_static("close");

/// A request body that sent nothing for its idle timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body sent nothing for {0:?}")]
pub struct BodyTimeout(pub Duration);

/// A request body that fails with [`BodyTimeout`] when no frame arrives in time.
struct IdleTimeout {
    inner: Incoming,
    timeout: Duration,
    sleep: Pin<Box<Sleep>>,
}

impl Body for IdleTimeout {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                let deadline = Instant::now() + self.timeout;
                self.sleep.as_mut().reset(deadline);
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => match self.sleep.as_mut().poll(cx) {
                Poll::Ready(()) => Poll::Ready(Some(Err(BodyTimeout(self.timeout).into()))),
                Poll::Pending => Poll::Pending,
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Serves `service` over HTTP on `listener` until an accept fails.
pub async fn serve(
    listener: TcpListener,
    service: S3Service,
    limits: Limits,
) -> std::io::Result<()> {
    serve_on(listener, service, limits, None).await
}

/// Serves `service` over HTTPS on `listener` until an accept fails, with `tls` (see
/// [`tls_server_config`](crate::tls_server_config)). A connection counts against
/// [`Limits::max_connections`] from its accept, and its TLS handshake must end within
/// [`Limits::header_timeout`].
pub async fn serve_tls(
    listener: TcpListener,
    service: S3Service,
    limits: Limits,
    tls: Arc<rustls::ServerConfig>,
) -> std::io::Result<()> {
    serve_on(listener, service, limits, Some(tokio_rustls::TlsAcceptor::from(tls))).await
}

async fn serve_on(
    listener: TcpListener,
    service: S3Service,
    limits: Limits,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> std::io::Result<()> {
    let permits = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    loop {
        let permit = permits.clone().acquire_owned().await.map_err(std::io::Error::other)?;
        let (stream, peer) = listener.accept().await?;
        let service = service.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => connection(stream, peer, service, limits).await,
                Some(tls) => {
                    match tokio::time::timeout(limits.header_timeout, tls.accept(stream)).await {
                        Ok(Ok(stream)) => connection(stream, peer, service, limits).await,
                        Ok(Err(e)) => eprintln!("s3rdma: TLS handshake with {peer}: {e}"),
                        Err(_) => eprintln!(
                            "s3rdma: TLS handshake with {peer} took more than {:?}",
                            limits.header_timeout
                        ),
                    }
                }
            }
            drop(permit);
        });
    }
}

/// Serves the requests of one connection (plain or TLS) until it closes.
async fn connection<S>(stream: S, peer: SocketAddr, service: S3Service, limits: Limits)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let handler = hyper::service::service_fn(move |req| handle(service.clone(), limits, req));
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .max_buf_size(limits.max_header_bytes.max(8192))
        .serve_connection(TokioIo::new(stream), handler);
    if let Err(e) = connection.await {
        log_connection_error(peer, &e);
    }
}

fn log_connection_error(peer: SocketAddr, e: &hyper::Error) {
    if !e.is_incomplete_message() {
        eprintln!("s3rdma: connection from {peer}: {e}");
    }
}

async fn handle(
    service: S3Service,
    limits: Limits,
    req: hyper::Request<Incoming>,
) -> Result<HttpResponse, s3s::HttpError> {
    // hyper has refused a Content-Length that is not a number; one too large is refused here,
    // before the body is read.
    let length = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if length.is_some_and(|length| length > limits.max_body) {
        let e = s3_error!(
            EntityTooLarge,
            "this server accepts request bodies of at most {} bytes",
            limits.max_body
        );
        let mut response = e.to_http_response().map_err(|e| s3s::HttpError::new(Box::new(e)))?;
        // The body is not read: the connection cannot carry another request.
        response.headers_mut().insert(hyper::header::CONNECTION, CLOSE);
        return Ok(response);
    }
    let timeout = limits.body_idle_timeout;
    let has_body = !req.body().is_end_stream();
    let req = req.map(|inner| {
        s3s::Body::http_body_unsync(IdleTimeout {
            inner,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
        })
    });
    let mut response = service.call(req).await?;
    // A request refused (bad signature, no such bucket, ...) may have left its body unread, and
    // hyper then closes the connection after the answer: the client is told so, rather than
    // finding out when it reuses the connection.
    if has_body && (response.status().is_client_error() || response.status().is_server_error()) {
        response.headers_mut().insert(hyper::header::CONNECTION, CLOSE);
    }
    Ok(response)
}
