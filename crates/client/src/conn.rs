//! The connections under the client's pools ([`super::pool`]) and its sessions' own connections
//! ([`super::sticky`]): the HTTPS-or-HTTP connector that puts a [`ConnMeta`] (when the connection was
//! opened, how many responses it served) on every connection it makes.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use hyper::Uri;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};

pub(crate) type Https = hyper_rustls::HttpsConnector<HttpConnector>;
type Stream = hyper_rustls::MaybeHttpsStream<hyper_util::rt::TokioIo<tokio::net::TcpStream>>;

/// What the pool knows of one connection; cloned into every response's extensions.
#[derive(Debug, Clone)]
pub(crate) struct ConnMeta {
    /// When the connection was established.
    pub(crate) opened: Instant,
    /// Responses (heads) received on it so far.
    pub(crate) served: Arc<AtomicU32>,
}

/// The HTTPS-or-HTTP connector, with a [`ConnMeta`] on every connection it makes.
#[derive(Clone)]
pub(crate) struct TrackedConnector(Https);

impl TrackedConnector {
    pub(crate) fn new(https: Https) -> TrackedConnector {
        TrackedConnector(https)
    }
}

/// A connection with its [`ConnMeta`].
pub(crate) struct Tracked {
    inner: Stream,
    meta: ConnMeta,
}

impl tower_service::Service<Uri> for TrackedConnector {
    type Response = Tracked;
    type Error = <Https as tower_service::Service<Uri>>::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Tracked, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let fut = self.0.call(uri);
        Box::pin(async move {
            let inner = fut.await?;
            Ok(Tracked {
                inner,
                meta: ConnMeta {
                    opened: Instant::now(),
                    served: Arc::new(AtomicU32::new(0)),
                },
            })
        })
    }
}

impl Connection for Tracked {
    fn connected(&self) -> Connected {
        self.inner.connected().extra(self.meta.clone())
    }
}

impl hyper::rt::Read for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
