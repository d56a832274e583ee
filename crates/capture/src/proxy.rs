//! The reverse proxy: every request goes upstream as it came (hop-by-hop headers aside), every
//! reply comes back frame by frame as it arrives ([`TapBody`] reads each frame on its way and
//! never holds the reply), and a request of a recorded API leaves one journal line when its reply
//! ends, breaks, or its client goes away.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use tokio::sync::mpsc;

use crate::journal::{CapturedRequest, CapturedText};
use crate::reply::{weka_stop, ReplyFacts, ReplyReader};
use crate::session::{Identity, Sessions};
use crate::wire::{self, Api, Prompt};
use crate::CaptureConfig;

/// Largest request body the proxy reads (a long agent context is a few MiB).
const MAX_REQUEST: usize = 256 << 20;

/// The body every reply is sent with.
pub(crate) type ReplyBody = BoxBody<Bytes, hyper::Error>;

type Upstream =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// What every request's handler shares.
pub(crate) struct Proxy {
    config: CaptureConfig,
    client: Upstream,
    sessions: Mutex<Sessions>,
    seq: std::sync::atomic::AtomicU64,
    journal: mpsc::UnboundedSender<CapturedRequest>,
}

impl Proxy {
    pub(crate) fn new(
        config: CaptureConfig,
        journal: mpsc::UnboundedSender<CapturedRequest>,
    ) -> Proxy {
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let client =
            hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(connector);
        Proxy {
            config,
            client,
            sessions: Mutex::new(Sessions::default()),
            seq: std::sync::atomic::AtomicU64::new(0),
            journal,
        }
    }
}

/// Unix seconds of an instant, from a reference pair taken together.
#[derive(Clone, Copy)]
struct Clock {
    instant: Instant,
    unix_s: f64,
}

impl Clock {
    fn now() -> Clock {
        Clock {
            instant: Instant::now(),
            unix_s: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |since| since.as_secs_f64()),
        }
    }

    fn unix_of(&self, at: Instant) -> f64 {
        self.unix_s + at.saturating_duration_since(self.instant).as_secs_f64()
    }
}

/// Hop-by-hop headers: the connection's own, never forwarded.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

fn text_reply(status: StatusCode, message: &str) -> Response<ReplyBody> {
    let body = serde_json::json!({"error": {"type": "capture_proxy", "message": message}});
    let mut response = Response::new(
        Full::new(Bytes::from(body.to_string()))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = status;
    response
}

/// Handles one request: forwards it, and taps its reply when its API is recorded.
pub(crate) async fn handle(
    proxy: Arc<Proxy>,
    request: Request<Incoming>,
) -> Result<Response<ReplyBody>, std::convert::Infallible> {
    let arrived = Clock::now();
    let api =
        Api::of_path(request.uri().path()).filter(|_| request.method() == hyper::Method::POST);
    let (parts, incoming) = request.into_parts();
    let body = match http_body_util::Limited::new(incoming, MAX_REQUEST)
        .collect()
        .await
    {
        Ok(collected) => collected.to_bytes(),
        Err(error) => {
            return Ok(text_reply(
                StatusCode::BAD_REQUEST,
                &format!("the capture proxy could not read the request body: {error}"),
            ))
        }
    };
    let recorded = api.and_then(
        |api| match wire::read_prompt(api, &body, &proxy.config.counter) {
            Ok(prompt) => Some((api, prompt)),
            Err(error) => {
                tracing::warn!(
                    "{} {}: not recorded ({error}); forwarded as it came",
                    parts.method,
                    parts.uri.path()
                );
                None
            }
        },
    );
    let pending = recorded.map(|(api, prompt)| {
        let blocks = wire::block_chain(&prompt.keys, proxy.config.block_size);
        let identity = proxy
            .sessions
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .identify(&parts.headers, &blocks);
        let kept = proxy
            .config
            .keep_text
            .then(|| serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null));
        Pending {
            seq: proxy.seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            api,
            prompt,
            blocks,
            identity,
            arrived,
            request_text: kept,
        }
    });
    let uri = match upstream_uri(&proxy.config.upstream, &parts.uri) {
        Ok(uri) => uri,
        Err(message) => return Ok(text_reply(StatusCode::BAD_GATEWAY, &message)),
    };
    let mut upstream = Request::builder().method(parts.method.clone()).uri(uri);
    for (name, value) in &parts.headers {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            upstream = upstream.header(name, value);
        }
    }
    let Ok(upstream) = upstream.body(Full::new(body)) else {
        return Ok(text_reply(
            StatusCode::BAD_REQUEST,
            "the capture proxy could not rebuild the request for upstream",
        ));
    };
    let sent = Instant::now();
    let response = match proxy.client.request(upstream).await {
        Ok(response) => response,
        Err(error) => {
            let message = format!(
                "the upstream {} did not answer: {}",
                proxy.config.upstream,
                agentx_protocol::error_chain(&error)
            );
            if let Some(pending) = pending {
                let facts = ReplyFacts::default();
                let line = pending.finish(&proxy, sent, 0, facts, Some(message.clone()));
                let _ = proxy.journal.send(line);
            }
            return Ok(text_reply(StatusCode::BAD_GATEWAY, &message));
        }
    };
    let (mut head, upstream_body) = response.into_parts();
    for name in HOP_BY_HOP {
        head.headers.remove(name);
    }
    let status = head.status.as_u16();
    let tap = pending.map(|pending| Tap {
        reader: ReplyReader::new(pending.api, pending.prompt.streaming, status, sent),
        pending,
        proxy: proxy.clone(),
        sent,
        status,
    });
    let body = TapBody {
        inner: upstream_body,
        tap,
    };
    Ok(Response::from_parts(head, body.boxed()))
}

/// The upstream URI of a request: the upstream's scheme and authority (and base path), the
/// request's path and query.
fn upstream_uri(upstream: &Uri, request: &Uri) -> Result<Uri, String> {
    let base = upstream.path().trim_end_matches('/');
    let path_and_query = request
        .path_and_query()
        .map_or("/", hyper::http::uri::PathAndQuery::as_str);
    let mut parts = upstream.clone().into_parts();
    parts.path_and_query = Some(
        format!("{base}{path_and_query}")
            .parse()
            .map_err(|e| format!("cannot forward {path_and_query}: {e}"))?,
    );
    Uri::from_parts(parts).map_err(|e| format!("cannot forward {path_and_query}: {e}"))
}

/// A recorded request waiting for its reply.
struct Pending {
    seq: u64,
    api: Api,
    prompt: Prompt,
    blocks: Vec<u64>,
    identity: Identity,
    arrived: Clock,
    request_text: Option<serde_json::Value>,
}

impl Pending {
    /// The journal line of the request whose reply ended (or broke) now.
    fn finish(
        self,
        proxy: &Proxy,
        sent: Instant,
        status: u16,
        facts: ReplyFacts,
        broken: Option<String>,
    ) -> CapturedRequest {
        let clock = self.arrived;
        let counter = &proxy.config.counter;
        let (input_tokens, input_source) = match facts.prompt_tokens {
            Some(tokens) => (tokens, "usage"),
            None => (self.prompt.keys.len() as u64, "tokenizer"),
        };
        let output_tokens = facts
            .completion_tokens
            .unwrap_or_else(|| counter.count(&facts.text));
        let mut output_types = Vec::new();
        if !facts.text.is_empty() {
            output_types.push("text".to_string());
        }
        if facts.thinking {
            output_types.push("thinking".to_string());
        }
        if facts.tool_use {
            output_types.push("tool_use".to_string());
        }
        let broken = broken
            .or(facts.malformed.clone())
            .or_else(|| (status >= 400).then(|| format!("upstream answered HTTP {status}")));
        CapturedRequest {
            seq: self.seq,
            root: self.identity.root,
            stream: self.identity.stream,
            parent: self.identity.parent,
            identity: self.identity.source,
            api: self.api.as_str().into(),
            model: self.prompt.model,
            streaming: self.prompt.streaming,
            arrived_s: clock.unix_s,
            sent_s: clock.unix_of(sent),
            first_token_s: facts.first_output.map(|at| clock.unix_of(at)),
            end_s: clock.unix_of(Instant::now()),
            status,
            input_tokens,
            input_source: input_source.into(),
            output_tokens,
            tool_tokens: self.prompt.tool_tokens,
            system_tokens: self.prompt.system_tokens,
            blocks: self.blocks,
            input_types: self.prompt.input_types,
            output_types,
            stop: weka_stop(facts.stop.as_deref(), facts.tool_use),
            broken,
            text: self.request_text.map(|request| CapturedText {
                request,
                reply: facts.text,
            }),
        }
    }
}

/// Reads a reply's frames on their way to the client.
struct Tap {
    reader: ReplyReader,
    pending: Pending,
    proxy: Arc<Proxy>,
    sent: Instant,
    status: u16,
}

impl Tap {
    fn close(self, broken: Option<String>) {
        let facts = self.reader.finish();
        let line = self
            .pending
            .finish(&self.proxy, self.sent, self.status, facts, broken);
        let _ = self.proxy.journal.send(line);
    }
}

/// The upstream reply's body, passed on frame by frame, with its tap.
struct TapBody {
    inner: Incoming,
    tap: Option<Tap>,
}

impl Body for TapBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(tap), Some(data)) = (self.tap.as_mut(), frame.data_ref()) {
                    tap.reader.feed(data);
                }
            }
            Poll::Ready(Some(Err(error))) => {
                if let Some(tap) = self.tap.take() {
                    tap.close(Some(format!(
                        "the upstream reply broke mid-stream: {}",
                        agentx_protocol::error_chain(error)
                    )));
                }
            }
            Poll::Ready(None) => {
                if let Some(tap) = self.tap.take() {
                    tap.close(None);
                }
            }
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        // Polled to its end while the tap waits, so the tap sees the end.
        self.tap.is_none() && self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TapBody {
    fn drop(&mut self) {
        if let Some(tap) = self.tap.take() {
            tap.close(Some(
                "the client went away before the reply ended".to_string(),
            ));
        }
    }
}
