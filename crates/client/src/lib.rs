//! The HTTP side of a replay: connection pool, request bodies, incremental SSE decoding, timestamps.
//! It measures and reports; it never decides policy.
//!
//! - [`Client`] holds one hyper connection pool (HTTP/1.1 keep-alive, or h2c with prior knowledge,
//!   TLS through rustls for `https://` endpoints) that follows the server's `Keep-Alive` header
//!   (`pool`): idle connections are retired before the server's deadline and connections before
//!   the server's request limit. A request that fails on a reused connection before any byte of the
//!   response arrived is sent once more on a fresh connection, and the record says so; once a byte
//!   has arrived it is never retried.
//! - [`Client::send`] posts one chat completion and reads the stream as it arrives: every non-empty
//!   content chunk is timestamped on the monotonic clock, the final `usage` chunk is kept, and the reply
//!   text is collected when the caller needs it (live-assistant mode). Every way a request can go wrong
//!   (connect, status, reset, malformed SSE, an `error` event, timeout, cancellation) ends in an
//!   [`Exchange`] (in `exchange`) whose [`Failure`] says what happened; nothing here returns an error or panics on what
//!   a server sends.
//! - [`RequestBody`] (in `body`) makes the JSON body from the prompt synthesis's shared pieces ([`JsonBody`]),
//!   which go to the socket with vectored writes, without being copied into one buffer. Under
//!   `--use-dynamo-conv-aware-routing` each body carries its stream turn's `nvext.session_control`
//!   ([`session_control`]: `bind` with the lease, `close` on a root stream's final turn).
//!
//! - Under `--endpoint-type anthropic` the bodies and the stream are Anthropic's Messages API
//!   ([`anthropic`]): the key goes as `x-api-key`, with `anthropic-version`. Under
//!   `--endpoint-type responses` they are the OpenAI Responses API (`agentx_protocol::responses`),
//!   the key as for chat.
//!
//! The `Authorization` header is marked sensitive and never appears in `Debug` output or records.

#![forbid(unsafe_code)]

mod conn;
mod pool;
pub mod preflight;
mod replay_transport;
pub mod scrape;
pub mod scrape_journal;
mod sticky;

use agentx_protocol::trace_context::{traceparent, TRACEPARENT};
use std::time::{Duration, Instant};

use http_body_util::BodyExt;
use hyper::header::{HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::{capture_connection, HttpConnector};
use tokio::sync::watch;

use agentx_protocol::sse::SseDecoder;
use agentx_protocol::{
    anthropic, error_chain, excerpt, server_error_message, server_ttft, Failure, FailureKind,
    StreamState, ERROR_EXCERPT,
};
// The protocol's names that the client's users reach through it (`agentx::client::Exchange`...).
pub use agentx_protocol::{
    routing, session_control, sse, ConnectionReuse, DynamoRouting, EndpointType, Exchange,
    JsonBody, RequestBody, RequestIds, RoutingHeaders,
};

/// The most an HTTP/1 connection buffers (hyper's default is 400 KiB). A body goes out a frame at
/// a time while the socket takes it; when the server reads slowly (one core reading a thousand
/// long prompts) the frames queued at each connection wait in the client's memory, so the queue is
/// kept to two frames of a written body ([`agentx_protocol::WrittenPiece`]). It also bounds the
/// read buffer, which only a response head must fit in.
pub(crate) const HTTP1_MAX_BUF: usize = 64 << 10;

/// Makes room for `needed` open files (sockets of the lanes, plus the process's own): raises the
/// soft `RLIMIT_NOFILE` towards the hard limit when it is lower, as a server would. Returns
/// `Err((soft, hard))` when even the hard limit is below `needed`.
pub fn ensure_open_files(needed: u64) -> Result<(), (u64, u64)> {
    #[cfg(unix)]
    {
        use rustix::process::{getrlimit, setrlimit, Resource};
        let mut limit = getrlimit(Resource::Nofile);
        let soft = limit.current.unwrap_or(u64::MAX);
        let hard = limit.maximum.unwrap_or(u64::MAX);
        if soft >= needed {
            return Ok(());
        }
        let want = needed.min(hard);
        limit.current = Some(want);
        if setrlimit(Resource::Nofile, limit).is_ok() {
            tracing::debug!(from = soft, to = want, "raised the open-file limit");
        } else {
            return Err((soft, hard));
        }
        if want < needed {
            return Err((want, hard));
        }
    }
    #[cfg(not(unix))]
    let _ = needed;
    Ok(())
}

/// The server's base URL as `--url` was written: OpenAI clients take `http://host:8000/v1`, servers
/// are often named `http://host:8000`; both mean the same base here. `note` says what was understood
/// when the URL was rewritten.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BaseUrl {
    /// The base URL, without a trailing `/`.
    pub url: String,
    /// What was understood, when the URL was rewritten (`None`: taken as written).
    pub note: Option<String>,
}

/// Reads `--url` against `--endpoint`: checks the scheme, host and port; takes a trailing `/v1`
/// as part of the base when the endpoint starts with `/v1/`; refuses a URL that already names an
/// endpoint (`…/v1/chat/completions`), with the fix.
pub fn base_url(url: &str, endpoint: &str) -> Result<BaseUrl, ClientError> {
    let err = |why: String| ClientError::Url {
        url: url.to_owned(),
        why,
    };
    let uri: Uri = url.trim().parse().map_err(|e| err(format!("{e}")))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(s) => return Err(err(format!("the scheme {s:?} is not http or https"))),
        None => return Err(err("it has no scheme (write http:// or https://)".into())),
    }
    let Some(auth) = uri.authority() else {
        return Err(err("it has no host".into()));
    };
    if auth.host().is_empty() {
        return Err(err("it has no host".into()));
    }
    // `Authority::port` hides a port that does not fit a u16: read the text after the host.
    if let Some((_, port_text)) = auth
        .as_str()
        .rsplit_once(':')
        .filter(|(_, port_text)| !port_text.contains(']'))
    {
        if !matches!(port_text.parse::<u16>(), Ok(1..=65535)) {
            return Err(err(format!("the port {port_text} is not from 1 to 65535")));
        }
    }
    if uri.query().is_some() {
        return Err(err("a base URL has no query (`?…`)".into()));
    }
    let path = uri.path().trim_end_matches('/');
    let root = format!("{}://{}", uri.scheme_str().unwrap_or("http"), auth.as_str());
    const ENDPOINTS: &[&str] = &["/chat/completions", "/completions", "/messages", "/models"];
    if let Some(suffix) = ENDPOINTS.iter().find(|suffix| path.ends_with(*suffix)) {
        let base = &path[..path.len() - suffix.len()];
        let base = base.strip_suffix("/v1").unwrap_or(base);
        return Err(err(format!(
            "it names the endpoint {path}; pass the server's base URL, --url {root}{base} (the request path comes from --endpoint, {endpoint})"
        )));
    }
    if endpoint.starts_with("/v1/") {
        if let Some(base) = path.strip_suffix("/v1") {
            let base_url = format!("{root}{base}");
            return Ok(BaseUrl {
                note: Some(format!(
                    "--url {url}: read as the base URL {base_url}; requests go to {base_url}{endpoint}"
                )),
                url: base_url,
            });
        }
    }
    Ok(BaseUrl {
        url: format!("{root}{path}"),
        note: None,
    })
}

/// How to reach the server.
#[derive(Clone)]
pub struct ClientConfig {
    /// `http://host:port` or `https://host:port` (a path prefix is kept).
    pub url: String,
    /// The request path, `/v1/chat/completions`.
    pub endpoint: String,
    /// The API the requests speak.
    pub api: EndpointType,
    /// Bearer token for `Authorization`, read from the environment by the caller.
    pub api_key: Option<String>,
    /// Idle pooled connections are closed after this long.
    pub idle_timeout: Duration,
    /// The limit of opening one connection (TCP, and TLS for `https://`).
    pub connect_timeout: Duration,
    /// Whole-request limit, from send to the end of the stream.
    pub request_timeout: Duration,
    /// Speak HTTP/2 without TLS (h2c, prior knowledge) instead of HTTP/1.1.
    pub http2: bool,
    /// Session headers from the correlation id, and the correlation header's name.
    pub routing: RoutingHeaders,
    /// Which connection each request goes out on.
    pub reuse: ConnectionReuse,
    /// `TCP_USER_TIMEOUT` of every connection (Linux): how long sent data may stay unacknowledged
    /// before the kernel drops the connection.
    pub tcp_user_timeout: Option<Duration>,
    /// Each request carries a W3C `traceparent` derived from its tree and its id
    /// ([`agentx_protocol::trace_context`]), so a server's spans join the client's.
    pub trace_context: bool,
}

impl std::fmt::Debug for ClientConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientConfig")
            .field("url", &self.url)
            .field("endpoint", &self.endpoint)
            .field("api", &self.api)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("idle_timeout", &self.idle_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("http2", &self.http2)
            .field("routing", &self.routing)
            .field("reuse", &self.reuse)
            .field("tcp_user_timeout", &self.tcp_user_timeout)
            .field("trace_context", &self.trace_context)
            .finish()
    }
}

/// A setup error: the URL or the TLS configuration is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// `--url` is not a usable http(s) base URL.
    #[error(
        "--url {url:?} is not a usable http(s) URL: {why}; pass e.g. --url http://localhost:8000"
    )]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// `--endpoint` does not start with `/` (the path it holds).
    #[error("--endpoint {0:?} must start with `/`, e.g. --endpoint /v1/chat/completions")]
    Endpoint(String),
    /// The API key cannot be sent as a header value.
    #[error("the API key is not a valid header value (it contains control characters)")]
    ApiKey,
    /// The TLS configuration could not be built (the reason).
    #[error("cannot set up TLS: {0}")]
    Tls(String),
}

/// A pooled HTTP client bound to one endpoint.
#[derive(Clone)]
pub struct Client {
    pools: std::sync::Arc<pool::Pools>,
    /// `scheme://authority` plus the URL's path prefix (for [`Client::get`]).
    base: String,
    uri: Uri,
    api: EndpointType,
    /// `Authorization: Bearer` (chat, Responses) or `x-api-key` (Anthropic).
    auth: Option<(hyper::header::HeaderName, HeaderValue)>,
    request_timeout: Duration,
    routing: std::sync::Arc<RoutingHeaders>,
    reuse: ConnectionReuse,
    /// Send a `traceparent` with each request.
    trace_context: bool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("uri", &self.uri).finish()
    }
}

impl Client {
    /// A client for `cfg`: checks the URL and the key, and sets up the connection pools (no connection
    /// is opened yet).
    pub fn new(cfg: &ClientConfig) -> Result<Client, ClientError> {
        let url_err = |why: String| ClientError::Url {
            url: cfg.url.clone(),
            why,
        };
        if !cfg.endpoint.starts_with('/') {
            return Err(ClientError::Endpoint(cfg.endpoint.clone()));
        }
        let base: Uri = cfg.url.parse().map_err(|e| url_err(format!("{e}")))?;
        match base.scheme_str() {
            Some("http" | "https") => {}
            Some(s) => return Err(url_err(format!("the scheme {s:?} is not http or https"))),
            None => return Err(url_err("it has no scheme".into())),
        }
        if base.host().is_none() {
            return Err(url_err("it has no host".into()));
        }
        let prefix = base.path().trim_end_matches('/');
        let uri: Uri = format!(
            "{}://{}{}{}",
            base.scheme_str().unwrap_or("http"),
            base.authority()
                .map(hyper::http::uri::Authority::as_str)
                .unwrap_or(""),
            prefix,
            cfg.endpoint
        )
        .parse()
        .map_err(|e| url_err(format!("{e}")))?;

        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(cfg.connect_timeout));
        http.set_keepalive(Some(Duration::from_secs(30)));
        http.set_tcp_user_timeout(cfg.tcp_user_timeout);
        let builder = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http();
        let connector = if cfg.http2 {
            builder.enable_http2().wrap_connector(http)
        } else {
            builder.enable_http1().enable_http2().wrap_connector(http)
        };
        let pools = pool::Pools::new(connector, cfg.idle_timeout, cfg.http2);
        let auth = match &cfg.api_key {
            Some(k) => {
                let (name, value) = match cfg.api {
                    EndpointType::Chat | EndpointType::Responses => {
                        (AUTHORIZATION, format!("Bearer {k}"))
                    }
                    EndpointType::Anthropic => (
                        hyper::header::HeaderName::from_static("x-api-key"),
                        k.clone(),
                    ),
                };
                let mut header_value =
                    HeaderValue::from_str(&value).map_err(|_| ClientError::ApiKey)?;
                header_value.set_sensitive(true);
                Some((name, header_value))
            }
            None => None,
        };
        Ok(Client {
            pools: std::sync::Arc::new(pools),
            base: format!(
                "{}://{}{}",
                base.scheme_str().unwrap_or("http"),
                base.authority()
                    .map(hyper::http::uri::Authority::as_str)
                    .unwrap_or(""),
                prefix
            ),
            uri,
            api: cfg.api,
            auth,
            request_timeout: cfg.request_timeout,
            routing: std::sync::Arc::new(cfg.routing.clone()),
            reuse: cfg.reuse,
            trace_context: cfg.trace_context,
        })
    }

    /// The full request URI.
    pub fn uri(&self) -> &Uri {
        &self.uri
    }

    /// Whether the base URL has a path (a prefix before the endpoint).
    pub(crate) fn has_path(&self) -> bool {
        self.base
            .splitn(4, '/')
            .nth(3)
            .is_some_and(|p| !p.is_empty())
    }

    /// How long the pool keeps an idle connection now (lowered by the server's `Keep-Alive`).
    pub fn idle_timeout(&self) -> Duration {
        self.pools.idle_timeout()
    }

    /// `GET` of `path` under the URL's prefix through the same pool (so the server's keep-alive is
    /// learned from it too), with a whole-request limit: status, headers and at most `limit` bytes
    /// of the body. For the pre-flight check; a failure is an error, not data.
    pub async fn get(
        &self,
        path: &str,
        timeout: Duration,
        limit: usize,
    ) -> Result<(hyper::StatusCode, hyper::HeaderMap, Vec<u8>), GetError> {
        let url = format!("{}{}", self.base, path);
        let uri: Uri = url.parse().map_err(|e| GetError::Other(format!("{e}")))?;
        let req = self.headers(Request::get(uri));
        let req = req
            .body(JsonBody::default())
            .map_err(|e| GetError::Other(e.to_string()))?;
        let work = async {
            let resp = self.pools.pooled().request(req).await.map_err(|e| {
                if e.is_connect() {
                    GetError::Connect(error_chain(&e))
                } else {
                    GetError::Other(error_chain(&e))
                }
            })?;
            self.learn(&resp, None);
            let (parts, mut body) = resp.into_parts();
            let mut out = Vec::new();
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| GetError::Other(error_chain(&e)))?;
                if let Some(data) = frame.data_ref() {
                    let room = limit.saturating_sub(out.len());
                    out.extend_from_slice(&data[..data.len().min(room)]);
                    if out.len() >= limit {
                        break;
                    }
                }
            }
            Ok((parts.status, parts.headers, out))
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            Err(_) => Err(GetError::Timeout(timeout)),
        }
    }

    /// The key's header and, for the Anthropic API, `anthropic-version`.
    fn headers(&self, mut req: hyper::http::request::Builder) -> hyper::http::request::Builder {
        if let Some((name, value)) = &self.auth {
            req = req.header(name, value.clone());
        }
        if self.api == EndpointType::Anthropic {
            req = req.header("anthropic-version", anthropic::VERSION);
        }
        req
    }

    /// Follows the server's `Keep-Alive` header of a response: lowers the pool's idle timeout below
    /// the server's, and retires the connection before the server's request limit.
    fn learn<B>(
        &self,
        resp: &hyper::Response<B>,
        capture: Option<&hyper_util::client::legacy::connect::CaptureConnection>,
    ) {
        let served = resp
            .extensions()
            .get::<conn::ConnMeta>()
            .map(|m| m.served.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1);
        let Some(keep_alive) = resp
            .headers()
            .get("keep-alive")
            .and_then(|v| v.to_str().ok())
            .and_then(pool::KeepAlive::parse)
        else {
            return;
        };
        if let Some(timeout_s) = keep_alive.timeout {
            let idle = pool::idle_deadline(Duration::from_secs(timeout_s));
            if self.pools.lower_idle_timeout(idle) {
                tracing::info!(
                    "the server closes connections idle for {timeout_s} s (Keep-Alive: timeout={timeout_s}); \
                     idle pooled connections are now retired after {idle:?}"
                );
            }
        }
        if let (Some(max), Some(served), Some(captured)) = (keep_alive.max, served, capture) {
            // The server closes the connection after `max` responses; retire it one early.
            if served.saturating_add(1) >= max {
                if let Some(conn) = captured.connection_metadata().as_ref() {
                    conn.poison();
                }
            }
        }
    }

    /// Posts `body` and reads the response to its end, or until `cancel` turns true or the request
    /// timeout passes. `keep_text` collects the reply text.
    pub async fn send(
        &self,
        body: JsonBody,
        ids: RequestIds<'_>,
        keep_text: bool,
        cancel: &mut watch::Receiver<bool>,
    ) -> Exchange {
        let sent = Instant::now();
        let mut exchange = Exchange::new(sent);
        let cut = {
            let work = self.exchange(body, ids, keep_text, &mut exchange);
            let cancelled = async {
                if cancel.wait_for(|c| *c).await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                biased;
                () = work => None,
                () = cancelled => Some(FailureKind::Cancelled),
                () = tokio::time::sleep(self.request_timeout) => Some(FailureKind::Timeout),
            }
        };
        match cut {
            Some(FailureKind::Cancelled) => exchange.fail(Failure::new(
                exchange.status,
                FailureKind::Cancelled,
                "cancelled: the run ended before the response did".into(),
            )),
            Some(kind) => exchange.fail(Failure::new(
                exchange.status,
                kind,
                format!(
                    "no complete response within the request timeout of {:?} (--request-timeout-seconds)",
                    self.request_timeout
                ),
            )),
            None => {}
        }
        exchange.end = Instant::now();
        if self.reuse == ConnectionReuse::Sticky && (ids.last || exchange.failure.is_some()) {
            self.pools.sticky.release(ids.correlation_id);
        }
        exchange
    }

    /// Ends a sticky session that stops before its final turn (the run ended): its connection
    /// closes.
    pub fn end_session(&self, correlation_id: &str) {
        if self.reuse == ConnectionReuse::Sticky {
            self.pools.sticky.release(correlation_id);
        }
    }

    async fn exchange(
        &self,
        body: JsonBody,
        ids: RequestIds<'_>,
        keep_text: bool,
        exchange: &mut Exchange,
    ) {
        let build = |body: JsonBody| {
            let req = Request::post(self.uri.clone())
                .header(CONTENT_TYPE, "application/json")
                .header("x-request-id", ids.request_id);
            let mut req = self.headers(req);
            if self.trace_context {
                // The trace is the tree's (a session is its own root).
                let root = ids.root();
                req = req.header(TRACEPARENT, traceparent(root, ids.request_id));
            }
            self.routing.apply(req, &ids).body(body)
        };
        // The pieces are shared, so keeping a copy for the one retry costs no body bytes.
        let again = body.clone();
        let mut req = match build(body) {
            Ok(r) => r,
            Err(e) => {
                exchange.fail(Failure::new(
                    0,
                    FailureKind::Request,
                    format!("cannot build the request: {e}"),
                ));
                return;
            }
        };
        let capture = capture_connection(&mut req);
        if self.reuse == ConnectionReuse::Sticky {
            let spare = match build(again) {
                Ok(r) => r,
                Err(e) => {
                    exchange.fail(Failure::new(0, FailureKind::Request, e.to_string()));
                    return;
                }
            };
            // Boxed: the sticky send (a connection's handshake, HTTP/1 or HTTP/2) is 8 KB of state,
            // which every request's future would otherwise hold, sticky or not.
            let sent = Box::pin(self.pools.sticky.send(ids.correlation_id, req, spare)).await;
            let resp = match sent {
                Ok((r, retried)) => {
                    exchange.retried = retried;
                    r
                }
                Err(e) => {
                    let kind = if e.connect {
                        FailureKind::Connect
                    } else {
                        FailureKind::Reset
                    };
                    exchange.fail(Failure::new(0, kind, e.message));
                    return;
                }
            };
            return self
                .read_response(
                    resp,
                    Some(&capture),
                    (keep_text, ids.on_first_token),
                    exchange,
                )
                .await;
        }
        let pool = match self.reuse {
            ConnectionReuse::Never => self.pools.fresh().clone(),
            _ => self.pools.pooled(),
        };
        let first = pool.request(req).await;
        let resp = match first {
            Ok(r) => r,
            Err(e) if !e.is_connect() && reused_before(&e, exchange.sent) => {
                // The connection was opened before this request and failed before any response
                // byte: most likely the server closed it as we reused it. Once more, on a new one.
                let why = error_chain(&e);
                exchange.retried = Some(format!(
                    "a reused connection failed before any response byte ({why}); sent again on a new connection"
                ));
                let req = match build(again) {
                    Ok(r) => r,
                    Err(e) => {
                        exchange.fail(Failure::new(0, FailureKind::Request, e.to_string()));
                        return;
                    }
                };
                match self.pools.fresh().request(req).await {
                    Ok(r) => r,
                    Err(e) => {
                        let kind = if e.is_connect() {
                            FailureKind::Connect
                        } else {
                            FailureKind::Reset
                        };
                        exchange.fail(Failure::new(
                            0,
                            kind,
                            format!("{} (after a retry: {why})", error_chain(&e)),
                        ));
                        return;
                    }
                }
            }
            Err(e) => {
                let kind = if e.is_connect() {
                    FailureKind::Connect
                } else {
                    FailureKind::Reset
                };
                exchange.fail(Failure::new(0, kind, error_chain(&e)));
                return;
            }
        };
        self.read_response(
            resp,
            Some(&capture),
            (keep_text, ids.on_first_token),
            exchange,
        )
        .await;
    }

    /// Reads a response to its end into `exchange`: status, error body, or the token stream (its
    /// first chunk told to `on_first_token` as it arrives).
    async fn read_response(
        &self,
        resp: hyper::Response<hyper::body::Incoming>,
        capture: Option<&hyper_util::client::legacy::connect::CaptureConnection>,
        (keep_text, on_first_token): (bool, Option<agentx_protocol::FirstTokenHook<'_>>),
        exchange: &mut Exchange,
    ) {
        exchange.first_byte = Some(Instant::now());
        exchange.server_ttft = server_ttft(resp.headers());
        exchange.server = agentx_protocol::server_side::from_headers(resp.headers());
        self.learn(&resp, capture);
        let status = resp.status();
        exchange.status = status.as_u16();
        let mut body = resp.into_body();
        if !status.is_success() {
            let mut excerpt = Vec::new();
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(f) => {
                        if let Some(data) = f.data_ref() {
                            let room = ERROR_EXCERPT.saturating_sub(excerpt.len());
                            excerpt.extend_from_slice(&data[..data.len().min(room)]);
                        }
                    }
                    Err(_) => break,
                }
                if excerpt.len() >= ERROR_EXCERPT {
                    break;
                }
            }
            let text = String::from_utf8_lossy(&excerpt).into_owned();
            let (kind, message) = server_error_message(&text);
            let mut failure = Failure::new(
                exchange.status,
                FailureKind::Http,
                format!(
                    "HTTP {status}: {message}{}",
                    self.api.refusal_hint(status, &self.uri)
                ),
            );
            failure.server_type = kind;
            exchange.error_body = Some(text);
            exchange.fail(failure);
            return;
        }
        let mut dec = SseDecoder::new();
        let mut state = StreamState {
            api: self.api,
            keep_text,
            done: false,
            failure: None,
        };
        loop {
            let frame = match body.frame().await {
                None => break,
                Some(Ok(f)) => f,
                Some(Err(e)) => {
                    let failure = Failure::new(
                        exchange.status,
                        FailureKind::Reset,
                        format!(
                            "the connection broke mid-stream after {} content chunks: {}",
                            exchange.chunk_offsets_ns.len(),
                            error_chain(&e)
                        ),
                    );
                    exchange.fail(failure);
                    return;
                }
            };
            let Some(data) = frame.data_ref() else {
                continue;
            };
            let now = Instant::now();
            let before = exchange.chunk_offsets_ns.len();
            let fed = dec.feed(data, |event| state.on_event(event, now, exchange));
            if before == 0 {
                if let (Some(hook), Some(first)) = (on_first_token, exchange.first_token()) {
                    (hook.0)(first);
                }
            }
            if let Err(error) = fed {
                exchange.fail(Failure::new(
                    exchange.status,
                    FailureKind::MalformedSse,
                    error.to_string(),
                ));
                return;
            }
            if let Some(failure) = state.failure.take() {
                exchange.fail(failure);
                return;
            }
            if state.done {
                break;
            }
        }
        if !state.done {
            let why = if dec.has_partial() {
                "the stream ended in the middle of an event, without"
            } else {
                "the stream ended without"
            };
            let why = format!("{why} {}", self.api.end_marker());
            exchange.fail(Failure::new(
                exchange.status,
                FailureKind::Incomplete,
                format!(
                    "{why} after {} content chunks",
                    exchange.chunk_offsets_ns.len()
                ),
            ));
        }
    }
}

/// Whether a request error happened on a connection that was open before the request was sent
/// (a reused one), as the connection's [`conn::ConnMeta`] tells.
fn reused_before(error: &hyper_util::client::legacy::Error, sent: Instant) -> bool {
    let Some(info) = error.connect_info() else {
        return false;
    };
    let mut ext = hyper::http::Extensions::new();
    info.get_extras(&mut ext);
    ext.get::<conn::ConnMeta>().is_some_and(|m| m.opened < sent)
}

/// Why a [`Client::get`] failed.
#[derive(Debug, thiserror::Error)]
pub enum GetError {
    /// No connection: refused, unreachable, DNS, TLS, connect timeout.
    #[error("cannot connect: {0}")]
    Connect(String),
    /// No complete answer within the limit given.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// Anything else: the request could not be built, or the connection broke (the error chain).
    #[error("{0}")]
    Other(String),
}

#[cfg(test)]
mod tests {
    use agentx_record::Usage;
    use bytes::Bytes;

    use super::*;

    #[test]
    fn base_urls_are_read_as_users_write_them() {
        let ep = "/v1/chat/completions";
        let b = base_url("http://h:8000", ep).unwrap();
        assert_eq!((b.url.as_str(), b.note), ("http://h:8000", None));
        let b = base_url("http://h:8000/v1/", ep).unwrap();
        assert_eq!(b.url, "http://h:8000");
        assert!(b
            .note
            .unwrap()
            .contains("http://h:8000/v1/chat/completions"));
        assert_eq!(
            base_url("https://h/proxy", ep).unwrap().url,
            "https://h/proxy"
        );
        let e = base_url("http://h:8000/v1/chat/completions", ep)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--url http://h:8000 "), "{e}");
        let e = base_url("http://h/gw/v1/models", ep)
            .unwrap_err()
            .to_string();
        assert!(e.contains("--url http://h/gw "), "{e}");
        for bad in [
            "http://h:99999",
            "http://h:0",
            "ftp://h",
            "h:8000",
            "http://:80",
            "http://h/?x=1",
        ] {
            assert!(base_url(bad, ep).is_err(), "{bad}");
        }
    }

    #[test]
    fn pieced_body_equals_the_written_one() {
        use http_body::Body;
        let b = RequestBody::new("m", true, true, &[("k".into(), serde_json::json!([1, 2]))]);
        let mut one = Vec::new();
        b.write(&mut one, 7, |o| {
            o.extend_from_slice(
                br#"[{"role":"user","content":"a"},{"role":"user","content":"b"}]"#,
            );
        });
        let msgs = vec![
            Bytes::from_static(br#"[{"role":"user","content":"a"}"#),
            Bytes::new(),
            Bytes::from_static(br#",{"role":"user","content":"b"}"#),
        ];
        let mut body = b.build(7, msgs);
        assert_eq!(body.to_vec(), one);
        assert_eq!(body.size_hint().exact(), Some(one.len() as u64));
        // The frames, polled one by one, are the same bytes; the empty piece is not sent.
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        let mut got = Vec::new();
        let mut frames = 0;
        while let std::task::Poll::Ready(Some(Ok(f))) =
            std::pin::Pin::new(&mut body).poll_frame(&mut cx)
        {
            got.extend_from_slice(f.data_ref().unwrap());
            frames += 1;
        }
        assert_eq!(got, one);
        assert_eq!(frames, 4);
        assert!(body.is_end_stream() && body.is_empty());
        let v: serde_json::Value = serde_json::from_slice(&one).unwrap();
        assert_eq!(v["messages"][1]["content"], "b");
        assert_eq!(v["k"], serde_json::json!([1, 2]));
    }

    #[test]
    fn body_is_json_with_extras_and_min_one_token() {
        let b = RequestBody::new(
            "m\"x",
            true,
            true,
            &[("ignore_eos".into(), serde_json::json!(true))],
        );
        let mut out = Vec::new();
        b.write(&mut out, 0, |o| o.extend_from_slice(b"[]"));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["model"], "m\"x");
        assert_eq!(v["max_tokens"], 1);
        assert_eq!(v["stream"], true);
        assert_eq!(v["stream_options"]["include_usage"], true);
        assert_eq!(v["ignore_eos"], true);
    }

    #[test]
    fn a_turn_without_a_limit_has_no_token_field() {
        for legacy in [false, true] {
            let b = RequestBody::new("m", true, true, &[]).with_max_completion_tokens(!legacy);
            let mut out = Vec::new();
            b.write(&mut out, agentx_record::NO_OUTPUT_LIMIT, |o| {
                o.extend_from_slice(b"[]");
            });
            let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
            assert!(v.get("max_tokens").is_none(), "{v}");
            assert!(v.get("max_completion_tokens").is_none(), "{v}");
            assert_eq!(v["stream"], true);
        }
    }

    #[test]
    fn error_messages_from_every_shape() {
        assert_eq!(
            server_error_message(r#"{"error":{"message":"too long","type":"BadRequestError"}}"#),
            (Some("BadRequestError".into()), "too long".into())
        );
        assert_eq!(
            server_error_message(r#"{"error":"Input validation error"}"#),
            (None, "Input validation error".into())
        );
        assert_eq!(
            server_error_message(r#"{"object":"error","message":"x","type":"t"}"#),
            (Some("t".into()), "x".into())
        );
        assert_eq!(
            server_error_message("upstream gone\n"),
            (None, "upstream gone".into())
        );
    }

    #[test]
    fn events_collect_chunks_usage_and_errors() {
        let mut ex = Exchange::new(Instant::now());
        let mut st = StreamState {
            api: EndpointType::Chat,
            keep_text: true,
            done: false,
            failure: None,
        };
        let now = Instant::now();
        st.on_event(
            r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#,
            now,
            &mut ex,
        );
        st.on_event(r#"{"choices":[{"delta":{"content":"a\n"}}]}"#, now, &mut ex);
        st.on_event(
            r#"{"choices":[{"delta":{"reasoning_content":"hm"}}]}"#,
            now,
            &mut ex,
        );
        st.on_event(
            r#"{"choices":[{"delta":{"content":"b"},"finish_reason":"length"}]}"#,
            now,
            &mut ex,
        );
        st.on_event(
            r#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":3}}}"#,
            now,
            &mut ex,
        );
        assert_eq!(ex.chunk_offsets_ns.len(), 3);
        assert_eq!(ex.content_chunks, 2);
        assert_eq!(ex.text, "a\nb");
        assert_eq!(ex.finish_reason.as_deref(), Some("length"));
        assert_eq!(
            ex.usage,
            Some(Usage {
                prompt_tokens: Some(5),
                completion_tokens: Some(2),
                cached_tokens: Some(3),
                reasoning_tokens: None,
            })
        );
        st.on_event("[DONE]", now, &mut ex);
        assert!(st.done);

        let mut st = StreamState {
            api: EndpointType::Chat,
            keep_text: false,
            done: false,
            failure: None,
        };
        st.on_event("{not json", now, &mut ex);
        assert_eq!(st.failure.unwrap().kind, FailureKind::MalformedSse);
        let mut st = StreamState {
            api: EndpointType::Chat,
            keep_text: false,
            done: false,
            failure: None,
        };
        st.on_event(
            r#"{"error":{"message":"boom","type":"InternalServerError","code":500}}"#,
            now,
            &mut ex,
        );
        let f = st.failure.unwrap();
        assert_eq!(f.kind, FailureKind::StreamError);
        assert!(f.message.contains("boom"));
    }
}
