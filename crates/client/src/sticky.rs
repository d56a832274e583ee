//! One connection per session, for `--connection-reuse-strategy sticky-user-sessions`.
//!
//! A pool that merely keeps one idle connection per session is not sticky: a session's next turn can
//! be sent before the previous response's connection has gone back to the pool, and the pool then
//! opens another. So each session here holds its connection itself (hyper's `client::conn` sender):
//! every turn waits until that connection is ready for the next request and goes out on it. A
//! connection the server has closed is replaced: when a reused connection fails before any byte of
//! the response, the request is sent once more on a new connection (the caller records why), as the
//! pooled client does. The session's connection is dropped (and closed) on [`Sticky::release`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hyper::body::Incoming;
use hyper::header::{HeaderValue, HOST};
use hyper::{Request, Response};
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::conn::TrackedConnector;
use super::JsonBody;

/// The sending half of a session's connection.
enum Sender {
    H1(hyper::client::conn::http1::SendRequest<JsonBody>),
    H2(hyper::client::conn::http2::SendRequest<JsonBody>),
}

impl Sender {
    async fn ready(&mut self) -> hyper::Result<()> {
        match self {
            Sender::H1(s) => s.ready().await,
            Sender::H2(s) => s.ready().await,
        }
    }

    async fn send(&mut self, mut req: Request<JsonBody>) -> hyper::Result<Response<Incoming>> {
        match self {
            Sender::H1(s) => {
                // HTTP/1.1 on a bare connection: origin-form target and a Host header.
                if !req.headers().contains_key(HOST) {
                    if let Some(host) = req
                        .uri()
                        .authority()
                        .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
                    {
                        req.headers_mut().insert(HOST, host);
                    }
                }
                if let Some(path_and_query) = req.uri().path_and_query().cloned() {
                    *req.uri_mut() = path_and_query.as_str().parse().unwrap_or_default();
                }
                s.send_request(req).await
            }
            Sender::H2(s) => s.send_request(req).await,
        }
    }
}

/// Why a sticky request got no response.
#[derive(Debug)]
pub(crate) struct StickyError {
    /// No connection could be opened (refused, DNS, TLS, timeout).
    pub connect: bool,
    /// What went wrong, for the request's failure.
    pub message: String,
}

/// The sessions' connections, by correlation id.
pub(crate) struct Sticky {
    connector: TrackedConnector,
    http2: bool,
    sessions: Mutex<HashMap<String, Arc<tokio::sync::Mutex<Option<Sender>>>>>,
}

impl Sticky {
    pub(crate) fn new(connector: TrackedConnector, http2: bool) -> Sticky {
        Sticky {
            connector,
            http2,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Drops a session's connection.
    pub(crate) fn release(&self, corr: &str) {
        self.sessions.lock().expect("sticky lock").remove(corr);
    }

    async fn connect(&self, uri: &hyper::Uri) -> Result<Sender, StickyError> {
        let connect_err = |message: String| StickyError {
            connect: true,
            message,
        };
        let io = tower_service::Service::call(&mut self.connector.clone(), uri.clone())
            .await
            .map_err(|e| connect_err(super::error_chain(e.as_ref())))?;
        let h2 = self.http2 || io.connected().is_negotiated_h2();
        if h2 {
            let (send, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
                .timer(TokioTimer::new())
                .handshake(io)
                .await
                .map_err(|e| {
                    connect_err(format!("HTTP/2 handshake: {}", super::error_chain(&e)))
                })?;
            tokio::spawn(conn);
            Ok(Sender::H2(send))
        } else {
            let (send, conn) = hyper::client::conn::http1::Builder::new()
                .max_buf_size(super::HTTP1_MAX_BUF)
                .handshake(io)
                .await
                .map_err(|e| {
                    connect_err(format!("HTTP/1.1 handshake: {}", super::error_chain(&e)))
                })?;
            tokio::spawn(conn);
            Ok(Sender::H1(send))
        }
    }

    /// Sends `req` on the session's connection (opening it on the session's first request, or
    /// when the server closed it). `spare` is the same request, sent on a new connection when a
    /// reused one fails before any response byte; the second value then says why.
    pub(crate) async fn send(
        &self,
        corr: &str,
        req: Request<JsonBody>,
        spare: Request<JsonBody>,
    ) -> Result<(Response<Incoming>, Option<String>), StickyError> {
        let slot = self
            .sessions
            .lock()
            .expect("sticky lock")
            .entry(corr.to_owned())
            .or_default()
            .clone();
        let mut held = slot.lock().await;
        let uri = req.uri().clone();
        let mut kept = held.take();
        let reused = match kept.as_mut() {
            Some(s) => s.ready().await.is_ok(),
            None => false,
        };
        let mut sender = match kept {
            Some(s) if reused => s,
            _ => self.connect(&uri).await?,
        };
        match sender.send(req).await {
            Ok(resp) => {
                *held = Some(sender);
                Ok((resp, None))
            }
            Err(e) if reused => {
                let why = super::error_chain(&e);
                let mut fresh = self.connect(&uri).await?;
                let resp = fresh.send(spare).await.map_err(|e| StickyError {
                    connect: false,
                    message: format!("{} (after a retry: {why})", super::error_chain(&e)),
                })?;
                *held = Some(fresh);
                Ok((
                    resp,
                    Some(format!(
                        "the session's connection failed before any response byte ({why}); sent again on a new connection"
                    )),
                ))
            }
            Err(e) => Err(StickyError {
                connect: false,
                message: super::error_chain(&e),
            }),
        }
    }
}
