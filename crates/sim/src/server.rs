//! The HTTP side: the accept loop, routing, request handling and graceful shutdown.
//!
//! One hyper HTTP/1.1 connection task per client connection; no task per request beyond that.
//! A handler never panics on input: every failure becomes an HTTP answer (or, for injected
//! resets and `stop_after`, a closed connection), and the server keeps serving others.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::anthropic;
use super::cache::BlockIndex;
use super::config::{SimConfig, Timing};
use super::engine::{Admission, Engine};
use super::faults;
use super::gpu;
use super::metrics::{self, EngineMetrics, Exposition};
use super::prep::{Preparer, PREPARE_INLINE_BYTES};
use super::record::{logged_headers, Arrival, RequestLog};
use super::reply::ReplyPlan;
use super::request::{self, Api, ApiError, ChatRequest};
use super::response::{Ident, Usage};
use super::responses;
use super::router::Dispatcher;
use super::rx_stamp::{RxClock, RxStamped};
use super::stream::{self, Pace, StreamFaults, StreamPlan, TokenStream, Words};
use agentx_protocol::headers::{
    RECEIVED_HEADER, RESPONSE_START_HEADER, SIM_ADMIT_SEQ_HEADER, SIM_CACHED_TOKENS_HEADER,
    SIM_ENGINE_HEADER, SIM_MISS_CAPACITY_HEADER, SIM_MISS_COLD_HEADER, SIM_MISS_ROUTING_HEADER,
    SIM_PREFILL_MS_HEADER, SIM_PROMPT_TOKENS_HEADER, SIM_QUEUE_MS_HEADER,
};
use agentx_tokens::blocks::{hash_str, mix64};

/// How long shutdown waits for in-flight responses before cutting them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// State shared by every connection of one server.
pub(crate) struct Shared {
    pub config: SimConfig,
    pub engines: Vec<Arc<Engine>>,
    /// Chat completion requests received (numbering for ids, faults and `stop_after`).
    chat_requests: AtomicU64,
    /// Which engine each request runs on.
    dispatcher: Dispatcher,
    /// Signalled once `stop_after` requests have arrived.
    stop_accepting: Notify,
    /// Set (and signalled) when the engine dies (`die_at`).
    dead: AtomicBool,
    die: Notify,
    /// Chat requests' headers, when `record_headers` is on.
    received: std::sync::Mutex<Vec<Received>>,
    /// Connections accepted so far (numbering for [`Received::conn`]).
    accepted: AtomicU64,
    /// The request log (`--record-requests`).
    request_log: Option<RequestLog>,
    /// `GET /dcgm/metrics` pages served (for `Faults::gpu_counter_reset_every`).
    gpu_pages: AtomicU64,
    /// The threads that log and parse long bodies off the reactor.
    preparer: Preparer,
}

/// The number of the connection a request came on (0 for the first accepted), as a request
/// extension.
#[derive(Debug, Clone, Copy)]
struct ConnNo(u64);

/// What arrived with one chat request (`SimConfig::record_headers`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The connection it came on: 0 for the first accepted, then 1, 2, …
    pub conn: u64,
    /// Header names (lowercase) and values, in arrival order; `authorization` is left out.
    pub headers: Vec<(String, String)>,
}

impl Received {
    /// The value of header `name` (lowercase), if it came once or more (the first).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

impl Shared {
    /// Fresh state for `config` (already validated), logging requests to `request_log` if given.
    pub(crate) fn new(config: SimConfig, request_log: Option<RequestLog>) -> Shared {
        let index = Arc::new(BlockIndex::default());
        let engines = (0..config.engines)
            .map(|_| Arc::new(Engine::new(&config, index.clone())))
            .collect();
        let dispatcher = Dispatcher::new(&config);
        Shared {
            config,
            engines,
            chat_requests: AtomicU64::new(0),
            dispatcher,
            stop_accepting: Notify::new(),
            dead: AtomicBool::new(false),
            die: Notify::new(),
            received: std::sync::Mutex::new(Vec::new()),
            accepted: AtomicU64::new(0),
            request_log,
            gpu_pages: AtomicU64::new(0),
            preparer: Preparer::default(),
        }
    }

    /// The Prometheus text of every engine.
    pub(crate) fn metrics_text(&self) -> String {
        let engines: Vec<&EngineMetrics> = self.engines.iter().map(|e| &e.metrics).collect();
        metrics::render(&Exposition {
            model: &self.config.model,
            block_size: self.config.block_size,
            capacity_tokens: self.config.cache_capacity_tokens,
            engines: &engines,
            names: self.config.metric_names,
            unkeyed: self.dispatcher.unkeyed(),
        })
    }

    /// The dcgm-exporter page of the engines' GPUs, `None` without simulated GPUs. The page after
    /// Every `Faults::gpu_counter_reset_every` pages, a page shows every energy counter restarted.
    pub(crate) fn dcgm_text(&self) -> Option<String> {
        let model = self.config.gpu?;
        let served = self.gpu_pages.fetch_add(1, Relaxed);
        let now = std::time::Instant::now();
        let reset_every = self.config.faults.gpu_counter_reset_every.map(u64::from);
        if reset_every.is_some_and(|every| every > 0 && served > 0 && served.is_multiple_of(every))
        {
            tracing::warn!(
                "every simulated GPU's energy counter restarts from 0 after {served} pages \
                 (gpu_counter_reset_every)"
            );
            for meter in self.engines.iter().filter_map(|e| e.gpu.as_ref()) {
                meter.reset_counter(now);
            }
        }
        let views: Vec<gpu::GpuView> = self
            .engines
            .iter()
            .filter_map(|e| {
                Some(gpu::GpuView {
                    reading: e.gpu.as_ref()?.read(now),
                    kv_tokens: e.metrics.kv_tokens.load(Relaxed),
                })
            })
            .collect();
        Some(gpu::render(&views, model.energy_counter))
    }

    /// Each engine's GPU's energy so far, joules (empty without simulated GPUs).
    pub(crate) fn gpu_energy_joules(&self) -> Vec<f64> {
        let now = std::time::Instant::now();
        self.engines
            .iter()
            .filter_map(|e| Some(gpu::joules(e.gpu.as_ref()?.read(now).energy_pj)))
            .collect()
    }

    /// Chat completion requests received so far.
    pub(crate) fn chat_requests(&self) -> u64 {
        self.chat_requests.load(Relaxed)
    }

    /// The recorded chat requests so far (empty unless `record_headers` is on).
    pub(crate) fn received(&self) -> Vec<Received> {
        self.received.lock().expect("received lock").clone()
    }

    fn record(&self, conn: u64, req: &Request<Incoming>) {
        let headers = req
            .headers()
            .iter()
            .filter(|(k, _)| *k != hyper::header::AUTHORIZATION)
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        self.received
            .lock()
            .expect("received lock")
            .push(Received { conn, headers });
    }
}

/// A response body: a whole buffer or a token stream.
pub(crate) enum SimBody {
    Full(Option<Bytes>),
    Stream(Box<TokenStream>),
}

impl Body for SimBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match self.get_mut() {
            SimBody::Full(b) => Poll::Ready(b.take().map(|b| Ok(Frame::data(b)))),
            SimBody::Stream(s) => Pin::new(s.as_mut()).poll_frame(cx),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            SimBody::Full(b) => b.is_none(),
            SimBody::Stream(s) => s.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            SimBody::Full(Some(b)) => SizeHint::with_exact(b.len() as u64),
            SimBody::Full(None) => SizeHint::with_exact(0),
            SimBody::Stream(_) => SizeHint::default(),
        }
    }
}

/// Why a request gets no answer: hyper closes its connection.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Dropped {
    #[error("connection closed: the server stopped accepting after {0} requests (--stop-after)")]
    StopAfter(u64),
    #[error("connection closed: the engine died at request {0} (--die-at-request)")]
    Dead(u64),
    #[error("connection reset before the response (--reset-rate)")]
    Reset,
    #[error("reading the request body failed: {0}")]
    Body(String),
}

fn full(
    status: StatusCode,
    content_type: &'static str,
    body: impl Into<Bytes>,
) -> Response<SimBody> {
    let mut response = Response::new(SimBody::Full(Some(body.into())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}

fn json(status: StatusCode, body: impl Into<Bytes>) -> Response<SimBody> {
    full(status, "application/json", body)
}

fn api_error(error: &ApiError, api: Api) -> Response<SimBody> {
    let body = match api {
        // vLLM answers its `/v1/responses` with the same error shape as chat.
        Api::Chat | Api::Responses => error.body(),
        Api::Anthropic => anthropic::error_body(error),
    };
    json(
        StatusCode::from_u16(error.status).unwrap_or(StatusCode::BAD_REQUEST),
        body,
    )
}

/// Route one request.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<SimBody>, Dropped> {
    let path = req.uri().path();
    let route = match path {
        "/v1/chat/completions" | "/v1/messages" | "/v1/responses" => Some(Method::POST),
        "/health" | "/v1/models" | "/metrics" | "/dcgm/metrics" => Some(Method::GET),
        _ => None,
    };
    match route {
        None => Ok(json(StatusCode::NOT_FOUND, r#"{"detail":"Not Found"}"#)),
        Some(m) if m != req.method() && !(m == Method::GET && req.method() == Method::HEAD) => {
            Ok(json(
                StatusCode::METHOD_NOT_ALLOWED,
                r#"{"detail":"Method Not Allowed"}"#,
            ))
        }
        Some(_) => match path {
            "/health" => Ok(full(StatusCode::OK, "application/json", Bytes::new())),
            "/v1/models" => Ok(json(StatusCode::OK, models_json(&shared.config))),
            "/metrics" => Ok(full(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                shared.metrics_text(),
            )),
            "/dcgm/metrics" => Ok(match shared.dcgm_text() {
                Some(page) => full(
                    StatusCode::OK,
                    "text/plain; version=0.0.4; charset=utf-8",
                    page,
                ),
                None => json(StatusCode::NOT_FOUND, r#"{"detail":"Not Found"}"#),
            }),
            "/v1/messages" => chat(shared, req, Api::Anthropic).await,
            "/v1/responses" => chat(shared, req, Api::Responses).await,
            _ => chat(shared, req, Api::Chat).await,
        },
    }
}

fn models_json(config: &SimConfig) -> String {
    let created = unix_now();
    serde_json::json!({
        "object": "list",
        "data": [{
            "id": config.model,
            "object": "model",
            "created": created,
            "owned_by": "vllm",
            "root": config.model,
            "parent": null,
            "max_model_len": config.max_model_len,
            "permission": [],
        }]
    })
    .to_string()
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn millis(duration: Duration) -> HeaderValue {
    HeaderValue::from_str(&format!("{:.3}", duration.as_secs_f64() * 1e3))
        .unwrap_or(HeaderValue::from_static("0"))
}

/// Who a chat request is: its number, id, engine and the draws keyed by it.
struct Meta {
    arrival: Instant,
    /// The key of the request's draws and faults: its `x-request-id`, else its number.
    key: u64,
    /// The `x-request-id` it came with, echoed on the answer.
    header_id: Option<String>,
    /// The completion id.
    id: String,
    engine_ix: usize,
    /// The request's own draws (after the id: its natural output length).
    draws: ChaCha8Rng,
    /// What the request log keeps of its arrival.
    logged: Option<Arrival>,
}

impl Meta {
    /// Numbers the request (or drops it past `stop_after`) and keys its draws, id and engine.
    fn of(shared: &Shared, req: &Request<Incoming>, api: Api) -> Result<Meta, Dropped> {
        let arrival = Instant::now();
        let config = &shared.config;
        let seq = shared.chat_requests.fetch_add(1, Relaxed) + 1;
        if let Some(die_at) = config.faults.die_at {
            if seq >= die_at {
                if !shared.dead.swap(true, Relaxed) {
                    tracing::warn!("the engine dies at request {die_at} (--die-at-request): every connection closes, new ones are refused");
                    shared.die.notify_one();
                }
                return Err(Dropped::Dead(die_at));
            }
        }
        if let Some(stop_after) = config.faults.stop_after {
            if seq > stop_after {
                return Err(Dropped::StopAfter(stop_after));
            }
            if seq == stop_after {
                shared.stop_accepting.notify_one();
            }
        }
        let header_id = req
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
            .map(str::to_owned);
        let key = match &header_id {
            Some(id) => hash_str(id),
            None => mix64(seq),
        };
        // 128 bits of id are always drawn first (used when the client sent no id).
        let mut draws = ChaCha8Rng::seed_from_u64(config.seed ^ key ^ 0x5eed);
        let drawn_id: u128 = draws.random();
        let prefix = match api {
            Api::Chat => "chatcmpl-",
            Api::Anthropic => "msg_",
            Api::Responses => "resp_",
        };
        let request_id = match &header_id {
            Some(h) => format!("{prefix}{h}"),
            None => format!("{prefix}{drawn_id:032x}"),
        };
        let engine_ix = shared.dispatcher.pick(req.headers(), &shared.engines);
        let logged = shared.request_log.as_ref().map(|_| Arrival {
            seq,
            conn: req.extensions().get::<ConnNo>().map_or(0, |c| c.0),
            at: arrival,
            headers: logged_headers()
                .iter()
                .filter_map(|name| {
                    let value = req.headers().get(name.as_str())?;
                    Some((
                        name.as_str(),
                        String::from_utf8_lossy(value.as_bytes()).into_owned(),
                    ))
                })
                .collect(),
        });
        Ok(Meta {
            arrival,
            key,
            header_id,
            id: request_id,
            engine_ix,
            draws,
            logged,
        })
    }

    /// `response` with the request's `x-request-id` echoed.
    fn with_id(&self, mut response: Response<SimBody>) -> Response<SimBody> {
        if let Some(header_id) = &self.header_id {
            if let Ok(value) = HeaderValue::from_str(header_id) {
                response.headers_mut().insert("x-request-id", value);
            }
        }
        response
    }
}

/// What a chat request asks for once read and checked.
struct Accepted {
    parsed: ChatRequest,
    /// The output limit: the request's `max_tokens`, else what the context leaves.
    max_tokens: u64,
    /// When the body's last byte was read.
    received: Instant,
    /// When it arrived at the server's socket, in unix time (the kernel's stamp of the read that
    /// brought it, [`crate::rx_stamp`]); `None` where the kernel gives no stamp.
    arrived: Option<Duration>,
}

/// `instant` in unix nanoseconds (through the wall clock now, so the two stamps of a request differ
/// by exactly their monotonic difference when read together).
fn unix_ns_at(instant: Instant, now: Instant, unix_now: Duration) -> HeaderValue {
    let stamp = if instant >= now {
        unix_now + (instant - now)
    } else {
        unix_now.saturating_sub(now - instant)
    };
    HeaderValue::from(stamp.as_nanos() as u64)
}

/// A chat completion or, with [`Api::Anthropic`], a Messages API request, with [`Api::Responses`]
/// a Responses API request.
async fn chat(
    shared: Arc<Shared>,
    req: Request<Incoming>,
    api: Api,
) -> Result<Response<SimBody>, Dropped> {
    let mut meta = Meta::of(&shared, &req, api)?;
    let Accepted {
        parsed,
        max_tokens,
        received,
        arrived,
    } = match read_chat(&shared, &meta, req, api).await? {
        Ok(a) => a,
        Err(e) => return Ok(meta.with_id(api_error(&e, api))),
    };
    let config = &shared.config;
    // Reasoning comes before the drawn content and counts toward max_tokens, as on real servers.
    let reasoning_wanted = if parsed.stream {
        u64::from(config.replies.reasoning_tokens)
    } else {
        0
    };
    let total = if parsed.ignore_eos {
        max_tokens
    } else {
        let natural = u64::from(config.natural_output_tokens.max(1));
        meta.draws
            .random_range(natural.div_ceil(2)..=natural + natural / 2)
            .saturating_add(reasoning_wanted)
            .min(max_tokens)
    };
    let reply = if parsed.stream {
        ReplyPlan::of(
            (&config.replies, &config.faults),
            meta.key,
            (total, reasoning_wanted.min(total)),
            parsed.tool_name.as_deref(),
        )
    } else {
        ReplyPlan::default()
    };
    let plan = faults::plan(&config.faults, meta.key, total);
    if let Some(status) = plan.fail {
        return Ok(meta.with_id(api_error(&injected_failure(status), api)));
    }
    let engine = &shared.engines[meta.engine_ix];
    let adm = engine
        .admit(
            &config.timing,
            parsed.prompt_tokens,
            &parsed.blocks,
            meta.arrival,
        )
        .await;
    let answer = Answer {
        ident: Ident::new(
            &meta.id,
            parsed.model.as_deref().unwrap_or(&config.model),
            unix_now(),
        ),
        usage: Usage {
            prompt_tokens: parsed.prompt_tokens,
            completion_tokens: total,
            cached_tokens: adm.cached_tokens,
            reasoning_tokens: reply.reasoning,
        },
        finish_reason: if reply.tool.is_some() {
            "tool_calls"
        } else if total == max_tokens {
            "length"
        } else {
            "stop"
        },
        words: Words::new(config.seed ^ meta.key),
        reply,
    };
    let sim_headers = [
        (SIM_ENGINE_HEADER, HeaderValue::from(meta.engine_ix as u64)),
        (
            SIM_PROMPT_TOKENS_HEADER,
            HeaderValue::from(parsed.prompt_tokens),
        ),
        (
            SIM_CACHED_TOKENS_HEADER,
            HeaderValue::from(adm.cached_tokens),
        ),
        (SIM_PREFILL_MS_HEADER, millis(adm.prefill)),
        (SIM_QUEUE_MS_HEADER, millis(adm.queued)),
        (SIM_ADMIT_SEQ_HEADER, HeaderValue::from(adm.admit_seq)),
        (SIM_MISS_COLD_HEADER, HeaderValue::from(adm.miss.cold)),
        (
            SIM_MISS_CAPACITY_HEADER,
            HeaderValue::from(adm.miss.capacity),
        ),
        (SIM_MISS_ROUTING_HEADER, HeaderValue::from(adm.miss.routing)),
    ];
    let first_token_at = adm.first_token_at;
    if let Some(first_token) =
        first_token_at.filter(|_| parsed.stream && config.headers_at_first_token)
    {
        tokio::time::sleep_until(first_token).await;
    }
    let mut response = if parsed.stream {
        streamed(config, &meta, (&parsed, api), adm, answer, plan.stream)
    } else {
        one_shot(config, engine, (&meta, api), adm, answer, plan.stream).await?
    };
    let now = Instant::now();
    let unix = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // A streamed answer's first token goes out when due (its headers now); a one-shot answer now.
    let start = match first_token_at {
        Some(t) if parsed.stream => t.max(now),
        _ => now,
    };
    let headers = response.headers_mut();
    for (name, v) in sim_headers {
        headers.insert(name, v);
    }
    // The kernel's stamp when there is one: how late this server read the request is its own time.
    let arrived = arrived.filter(|&at| at <= unix).map_or_else(
        || unix_ns_at(received, now, unix),
        |at| HeaderValue::from(at.as_nanos() as u64),
    );
    headers.insert(RECEIVED_HEADER, arrived);
    headers.insert(RESPONSE_START_HEADER, unix_ns_at(start, now, unix));
    Ok(meta.with_id(response))
}

/// Reads the body (refusing an oversized one), logs it, parses it and checks the model and the
/// context: the request, or the API error to answer with.
async fn read_chat(
    shared: &Arc<Shared>,
    meta: &Meta,
    req: Request<Incoming>,
    api: Api,
) -> Result<Result<Accepted, ApiError>, Dropped> {
    let config = &shared.config;
    let limit = config.max_body_bytes;
    let declared = req
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = |len: Option<u64>| {
        let size = len.map_or_else(|| format!("over {limit}"), |l| l.to_string());
        ApiError {
            status: 413,
            kind: "BadRequestError",
            message: format!(
                "request body is {size} bytes, over the limit of {limit} bytes; shorten the \
                 prompt or raise the server's --max-body-bytes"
            ),
            param: None,
        }
    };
    let rx_clock = req.extensions().get::<RxClock>().cloned();
    // Refused before reading when its length is declared.
    if declared.is_some_and(|l| l > limit as u64) {
        return Ok(Err(too_large(declared)));
    }
    let body = match Limited::new(req.into_body(), limit).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) if e.is::<http_body_util::LengthLimitError>() => return Ok(Err(too_large(None))),
        Err(e) => return Err(Dropped::Body(e.to_string())),
    };
    let received = Instant::now();
    let arrived = rx_clock.and_then(|clock| clock.last());
    let parsed = if body.len() > PREPARE_INLINE_BYTES {
        let (job_shared, logged) = (Arc::clone(shared), meta.logged.clone());
        let prepare = move || parse_body(&job_shared, logged.as_ref(), &body, api);
        shared.preparer.run(prepare).await.map_err(|_| {
            Dropped::Body("parsing the request body failed: its preparation thread ended".into())
        })?
    } else {
        parse_body(shared, meta.logged.as_ref(), &body, api)
    };
    match parsed {
        Ok(r) => Ok(check_chat(config, r, api, (received, arrived))),
        Err(e) => Ok(Err(e)),
    }
}

/// Logs a request's body (with `--record-requests`) and parses it in its API's shape.
fn parse_body(
    shared: &Shared,
    logged: Option<&crate::record::Arrival>,
    body: &[u8],
    api: Api,
) -> Result<ChatRequest, ApiError> {
    let config = &shared.config;
    if let (Some(log), Some(logged)) = (&shared.request_log, logged) {
        log.log(logged, body, &config.tokenizer);
    }
    match api {
        Api::Chat => request::parse_chat(body, config.block_size, &config.tokenizer),
        Api::Anthropic => anthropic::parse(body, config.block_size, &config.tokenizer),
        Api::Responses => responses::parse(body, config.block_size, &config.tokenizer),
    }
}

/// The model and the context window: the output limit, or the error to answer with.
fn check_chat(
    config: &SimConfig,
    parsed: ChatRequest,
    api: Api,
    (received, arrived): (Instant, Option<Duration>),
) -> Result<Accepted, ApiError> {
    if let Some(model) = &parsed.model {
        if config.strict_model && model != &config.model {
            return Err(ApiError {
                status: 404,
                kind: "NotFoundError",
                message: format!("The model `{model}` does not exist."),
                param: Some("model".into()),
            });
        }
    }
    let prompt = parsed.prompt_tokens;
    let max_len = config.max_model_len;
    let max_tokens = match parsed.max_tokens {
        Some(out) if prompt + out > max_len && api == Api::Anthropic => {
            return Err(anthropic::context_overflow(max_len, prompt, out))
        }
        Some(out) if prompt + out > max_len => {
            return Err(request::context_overflow(max_len, prompt, Some(out)))
        }
        Some(out) => out,
        None if prompt >= max_len => return Err(request::context_overflow(max_len, prompt, None)),
        None => max_len - prompt,
    };
    Ok(Accepted {
        parsed,
        max_tokens,
        received,
        arrived,
    })
}

/// The error of an injected failure (`--fail-rate`) with `status`.
fn injected_failure(status: u16) -> ApiError {
    let (kind, message) = if status == 500 {
        (
            "InternalServerError",
            "simulated engine failure (--fail-rate); retry the request",
        )
    } else {
        (
            "ServiceUnavailableError",
            "simulated overload: the engine is unavailable (--fail-rate); retry later",
        )
    };
    ApiError {
        status,
        kind,
        message: message.into(),
        param: None,
    }
}

/// What an answer says whichever way it is sent.
struct Answer {
    ident: Ident,
    usage: Usage,
    finish_reason: &'static str,
    words: Words,
    /// The reasoning and the tool call (none in a one-shot answer).
    reply: ReplyPlan,
}

/// A streamed answer: the tokens flow from the admission's first-token time at the pace of the
/// timing model.
fn streamed(
    config: &SimConfig,
    meta: &Meta,
    (parsed, api): (&ChatRequest, Api),
    adm: Admission,
    answer: Answer,
    faults: StreamFaults,
) -> Response<SimBody> {
    let pace = match &config.timing {
        Timing::Instant => Pace::Instant,
        Timing::Fixed { itl, .. } => Pace::Fixed(*itl),
        Timing::Modeled(m) => Pace::Modeled {
            timing: m.clone(),
            block_size: u64::from(config.block_size),
        },
    };
    let mut response = full(
        StatusCode::OK,
        "text/event-stream; charset=utf-8",
        Bytes::new(),
    );
    *response.body_mut() = SimBody::Stream(Box::new(TokenStream::new(StreamPlan {
        api,
        running: adm.running,
        ident: answer.ident,
        pace,
        first_token_at: adm.first_token_at,
        arrival: meta.arrival,
        total_tokens: answer.usage.completion_tokens,
        finish_reason: answer.finish_reason,
        include_usage: parsed.include_usage,
        usage: answer.usage,
        words: answer.words,
        tokens_per_chunk: config.tokens_per_chunk,
        faults,
        reply: answer.reply,
    })));
    response
}

/// A one-shot answer: waits out the whole generation, then answers at once.
async fn one_shot(
    config: &SimConfig,
    engine: &Engine,
    (meta, api): (&Meta, Api),
    adm: Admission,
    mut answer: Answer,
    faults: StreamFaults,
) -> Result<Response<SimBody>, Dropped> {
    let metrics = &engine.metrics;
    let total = answer.usage.completion_tokens;
    let itl = match &config.timing {
        Timing::Instant => Duration::ZERO,
        Timing::Fixed { itl, .. } => *itl,
        Timing::Modeled(mt) => mt.itl(metrics.running.load(Relaxed)),
    };
    let steps = total.saturating_sub(1);
    metrics.itl.observe_n(itl.as_nanos() as u64, steps);
    let mut done_at =
        adm.first_token_at.unwrap_or(meta.arrival) + itl * steps.min(u64::from(u32::MAX)) as u32;
    if faults.stall_before.is_some() {
        done_at += faults.stall;
    }
    if done_at > Instant::now() {
        tokio::time::sleep_until(done_at).await;
    }
    let mut running = adm.running;
    running.add_kv(total);
    metrics.generation_tokens.fetch_add(total, Relaxed);
    if faults.reset_after.is_some() {
        metrics.success_abort.fetch_add(1, Relaxed);
        return Err(Dropped::Reset);
    }
    metrics
        .e2e
        .observe_duration(Instant::now().saturating_duration_since(meta.arrival));
    metrics.generation_len.observe_n(total, 1);
    if answer.finish_reason == "length" {
        metrics.success_length.fetch_add(1, Relaxed);
    } else {
        metrics.success_stop.fetch_add(1, Relaxed);
    }
    let text = answer.words.text(total);
    let write = match api {
        Api::Chat => stream::completion_json,
        Api::Anthropic => anthropic::message_json,
        Api::Responses => responses::response_object,
    };
    let mut body = write(&answer.ident, &text, answer.finish_reason, &answer.usage);
    if faults.malformed_before.is_some() {
        body.truncate(body.len() / 2);
    }
    drop(running);
    Ok(json(StatusCode::OK, body))
}

/// Accept connections until shutdown, then drain them for at most [`SHUTDOWN_GRACE`].
pub(crate) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let graceful = GracefulShutdown::new();
    let mut conns = JoinSet::new();
    // HTTP/1.1 with keep-alive, and HTTP/2 without TLS (h2c, prior knowledge) on the same port.
    let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let keep_alive = shared.config.keep_alive;
    builder
        .http1()
        .timer(TokioTimer::new())
        .keep_alive(true)
        // hyper times the wait for the next request's head from when the connection went idle.
        .header_read_timeout(keep_alive.idle);
    let ka_header = keep_alive.header.then(|| {
        let mut value = format!("timeout={}", keep_alive.idle.as_secs_f64().ceil() as u64);
        if let Some(max_requests) = keep_alive.max {
            value.push_str(&format!(", max={max_requests}"));
        }
        HeaderValue::from_str(&value).expect("ascii header")
    });
    builder.http2().timer(TokioTimer::new());
    let mut listener = Some(listener);
    loop {
        tokio::select! {
            changed = shutdown.changed() => {
                if changed.is_err() || *shutdown.borrow() {
                    break;
                }
            }
            () = shared.stop_accepting.notified(), if listener.is_some() => {
                // Closing the socket makes new connections fail to connect.
                listener = None;
            }
            () = shared.die.notified() => {
                // A dead engine: no listener, and every connection (idle or mid-stream) closed.
                listener = None;
                conns.abort_all();
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = accept(listener.as_ref()), if listener.is_some() => match accepted {
                Ok((stream, _peer)) => {
                    let _ = stream.set_nodelay(true);
                    let (stream, rx_clock) = RxStamped::new(stream);
                    let shared = shared.clone();
                    let served = Arc::new(AtomicU64::new(0));
                    let ka_header = ka_header.clone();
                    let conn_no = shared.accepted.fetch_add(1, Relaxed);
                    let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
                        let (shared, served, ka_header) = (shared.clone(), served.clone(), ka_header.clone());
                        req.extensions_mut().insert(ConnNo(conn_no));
                        req.extensions_mut().insert(rx_clock.clone());
                        if shared.config.record_headers
                            && matches!(req.uri().path(), "/v1/chat/completions" | "/v1/messages" | "/v1/responses") {
                            shared.record(conn_no, &req);
                        }
                        async move {
                            let served_count = served.fetch_add(1, Relaxed) + 1;
                            let mut resp = handle(shared, req).await?;
                            let headers = resp.headers_mut();
                            if let Some(value) = ka_header {
                                headers.insert("keep-alive", value);
                            }
                            if keep_alive.max.is_some_and(|m| served_count >= u64::from(m)) {
                                headers.insert(hyper::header::CONNECTION, HeaderValue::from_static("close"));
                            }
                            Ok::<_, Dropped>(resp)
                        }
                    });
                    let conn = builder.serve_connection(TokioIo::new(stream), service).into_owned();
                    let conn = graceful.watch(conn);
                    conns.spawn(async move {
                        let _ = conn.await;
                    });
                }
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!("accepting a connection failed: {e}");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
        }
    }
    drop(listener);
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep(SHUTDOWN_GRACE) => {}
    }
    conns.abort_all();
    while conns.join_next().await.is_some() {}
}

async fn accept(
    listener: Option<&TcpListener>,
) -> std::io::Result<(tokio::net::TcpStream, SocketAddr)> {
    match listener {
        Some(listener) => listener.accept().await,
        None => std::future::pending().await,
    }
}
