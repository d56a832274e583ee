//! OTLP/HTTP export of a run's spans (`--otlp-endpoint`): one `CLIENT` span per request record
//! (warmup and profiling, the phase an attribute) and one per stream (a session, or one stream of a
//! session tree), the request spans children of their stream's span and a subagent stream's span a
//! child of the stream that spawned it, in one trace per tree. The ids are the ones the requests'
//! `traceparent` named ([`agentx_protocol::trace_context`]).
//!
//! Attributes follow the OpenTelemetry GenAI semantic conventions where they name the figure
//! (`gen_ai.operation.name`, `gen_ai.request.model`, `gen_ai.usage.input_tokens`,
//! `gen_ai.usage.output_tokens`, `gen_ai.request.max_tokens`, `gen_ai.response.finish_reasons`,
//! `gen_ai.conversation.id`, `error.type`) and are `agentx.*` otherwise (phase, lane, turn, trace,
//! cached tokens, TTFT).
//!
//! The exporter is a task on the run's runtime fed through a bounded queue: [`Exporter::record`]
//! never waits (a full queue drops the span and counts it), batches go out every second or every
//! [`BATCH_SPANS`] spans, and a batch the collector does not take within [`POST_TIMEOUT`] is dropped
//! and counted. Stream spans go out at [`Exporter::finish`], when every stream has ended.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    span, status, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message;
use tokio::sync::mpsc;

use agentx_protocol::trace_context::{request_span_id, stream_span_id, trace_id};
use agentx_record::outcome::Outcome;
use agentx_record::{RecordWatcher, RequestRecord, NO_OUTPUT_LIMIT};

/// Spans per batch.
pub const BATCH_SPANS: usize = 512;
/// How long the collector has to take a batch.
pub const POST_TIMEOUT: Duration = Duration::from_secs(5);
/// Records the queue holds before it drops them (a collector far behind the run).
const QUEUE_RECORDS: usize = 16_384;
/// How often a partial batch goes out.
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// What the export needs to know of the run.
#[derive(Debug, Clone)]
pub struct OtlpConfig {
    /// `--otlp-endpoint`: the collector's base URL (`http://host:4318`, where `/v1/traces` is
    /// added) or its full traces URL.
    pub endpoint: String,
    /// The model the requests named.
    pub model: String,
    /// The run clock's anchor (Unix ns): the records' offsets become span times with it.
    pub anchor_unix_ns: u64,
    /// The run's id, scenario and (sharded) shard, as resource attributes.
    pub run_id: String,
    /// The scenario's name and version.
    pub scenario: String,
    /// This shard's index in a sharded run.
    pub shard: Option<u32>,
}

/// Why the export cannot start.
#[derive(Debug, thiserror::Error)]
pub enum OtlpError {
    /// The endpoint is not an http(s) URL.
    #[error("--otlp-endpoint {endpoint:?}: {why}; give the collector's OTLP/HTTP address, e.g. http://localhost:4318")]
    Endpoint {
        /// What was given.
        endpoint: String,
        /// What is wrong with it.
        why: String,
    },
}

/// What the export did, for the log and the manifest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExportStats {
    /// Spans the collector took.
    pub spans_sent: u64,
    /// Spans dropped: a full queue, or a batch the collector refused or did not take in time.
    pub spans_dropped: u64,
    /// Batches that failed, and the last failure.
    pub batches_failed: u64,
    /// What the last failure was.
    pub last_error: Option<String>,
}

/// The traces URL of `endpoint`: its own path, or `/v1/traces` when it has none.
pub fn traces_url(endpoint: &str) -> Result<hyper::Uri, OtlpError> {
    let bad = |why: &str| OtlpError::Endpoint {
        endpoint: endpoint.to_string(),
        why: why.to_string(),
    };
    let uri: hyper::Uri = endpoint.parse().map_err(|_| bad("not a URL"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => return Err(bad("the scheme must be http or https")),
    }
    if uri.host().is_none() {
        return Err(bad("no host"));
    }
    if matches!(uri.path(), "" | "/") {
        let base = endpoint.trim_end_matches('/');
        return format!("{base}/v1/traces")
            .parse()
            .map_err(|_| bad("not a URL"));
    }
    Ok(uri)
}

/// A running export.
pub struct Exporter {
    queue: SpanQueue,
    task: tokio::task::JoinHandle<ExportStats>,
}

/// The export's input: finished requests, never waited on (a full queue drops and counts).
#[derive(Clone)]
pub struct SpanQueue {
    sender: mpsc::Sender<RequestRecord>,
    dropped: Arc<AtomicU64>,
}

impl SpanQueue {
    /// Hands a finished request to the export.
    pub fn record(&self, record: &RequestRecord) {
        if self.sender.try_send(record.clone()).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Exporter {
    /// Starts the export on `runtime`.
    pub fn start(
        config: OtlpConfig,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Exporter, OtlpError> {
        let url = traces_url(&config.endpoint)?;
        let (sender, records) = mpsc::channel(QUEUE_RECORDS);
        let dropped = Arc::new(AtomicU64::new(0));
        let task = runtime.spawn(run(config, url, records, dropped.clone()));
        Ok(Exporter {
            queue: SpanQueue { sender, dropped },
            task,
        })
    }

    /// Hands a finished request to the export; never waits (a full queue drops it, counted).
    pub fn record(&self, record: &RequestRecord) {
        self.queue.record(record);
    }

    /// A record sink's watcher that hands it every record as it is written.
    pub fn watcher(&self) -> RecordWatcher {
        let queue = self.queue.clone();
        Box::new(move |record: &RequestRecord| queue.record(record))
    }

    /// Sends what is queued and every stream's span, waiting at most `within` (every watcher must
    /// be gone: the record sink closed); what is not sent by then is counted as dropped.
    pub async fn finish(self, within: Duration) -> ExportStats {
        let Exporter { queue, mut task } = self;
        let dropped = queue.dropped.clone();
        drop(queue);
        let mut stats = match tokio::time::timeout(within, &mut task).await {
            Ok(Ok(stats)) => stats,
            Ok(Err(e)) => ExportStats {
                last_error: Some(format!("the export task failed: {e}")),
                ..ExportStats::default()
            },
            Err(_) => {
                task.abort();
                ExportStats {
                    last_error: Some(format!(
                        "the collector did not take every batch within {within:?}"
                    )),
                    ..ExportStats::default()
                }
            }
        };
        stats.spans_dropped += dropped.load(Ordering::Relaxed);
        stats
    }
}

/// One stream (session) as its requests showed it.
struct Stream {
    trace: [u8; 16],
    parent: Option<String>,
    lane: u32,
    trace_id: String,
    first_send_ns: u64,
    last_end_ns: u64,
    requests: u64,
    failed: bool,
}

/// The export task: batches of request spans as records come, stream spans at the end.
async fn run(
    config: OtlpConfig,
    url: hyper::Uri,
    mut records: mpsc::Receiver<RequestRecord>,
    dropped: Arc<AtomicU64>,
) -> ExportStats {
    let mut poster = Poster::new(url, resource(&config));
    let mut stats = ExportStats::default();
    let mut streams: HashMap<String, Stream> = HashMap::new();
    let mut batch: Vec<Span> = Vec::with_capacity(BATCH_SPANS);
    let mut tick = tokio::time::interval(FLUSH_EVERY);
    loop {
        tokio::select! {
            received = records.recv() => {
                let Some(record) = received else { break };
                note_stream(&mut streams, &record);
                batch.push(request_span(&record, &config));
                if batch.len() >= BATCH_SPANS {
                    poster.post(std::mem::take(&mut batch), &mut stats).await;
                }
            }
            _ = tick.tick() => {
                if !batch.is_empty() {
                    poster.post(std::mem::take(&mut batch), &mut stats).await;
                }
            }
        }
    }
    let mut ended: Vec<(&String, &Stream)> = streams.iter().collect();
    ended.sort_by_key(|(_, stream)| stream.first_send_ns);
    for (correlation_id, stream) in ended {
        batch.push(stream_span(correlation_id, stream, &config));
        if batch.len() >= BATCH_SPANS {
            poster.post(std::mem::take(&mut batch), &mut stats).await;
        }
    }
    if !batch.is_empty() {
        poster.post(batch, &mut stats).await;
    }
    stats.spans_dropped += dropped.swap(0, Ordering::Relaxed);
    stats
}

fn note_stream(streams: &mut HashMap<String, Stream>, record: &RequestRecord) {
    let stream = streams
        .entry(record.correlation_id.clone())
        .or_insert_with(|| Stream {
            trace: trace_id(record.session_root()),
            parent: record
                .tree
                .as_ref()
                .and_then(|tree| tree.parent_correlation_id.clone()),
            lane: record.lane,
            trace_id: record.trace_id.clone(),
            first_send_ns: record.send_ns,
            last_end_ns: record.end_ns,
            requests: 0,
            failed: false,
        });
    stream.first_send_ns = stream.first_send_ns.min(record.send_ns);
    stream.last_end_ns = stream.last_end_ns.max(record.end_ns);
    stream.requests += 1;
    stream.failed |= Outcome::of(record) == Outcome::Failed;
}

/// A request's span.
fn request_span(record: &RequestRecord, config: &OtlpConfig) -> Span {
    let mut attributes = vec![
        text("gen_ai.operation.name", "chat"),
        text("gen_ai.request.model", &config.model),
        int("gen_ai.usage.input_tokens", record.isl),
        int("gen_ai.usage.output_tokens", record.osl),
        text("gen_ai.conversation.id", &record.correlation_id),
        text("agentx.phase", record.phase.as_str()),
        int("agentx.lane", u64::from(record.lane)),
        int("agentx.turn", u64::from(record.turn)),
        text("agentx.trace_id", &record.trace_id),
        text("agentx.request_id", &record.request_id),
    ];
    if record.max_tokens != NO_OUTPUT_LIMIT {
        attributes.push(int(
            "gen_ai.request.max_tokens",
            u64::from(record.max_tokens),
        ));
    }
    if let Some(reason) = &record.finish_reason {
        attributes.push(KeyValue {
            key: "gen_ai.response.finish_reasons".into(),
            key_strindex: 0,
            value: Some(AnyValue {
                value: Some(any_value::Value::ArrayValue(
                    opentelemetry_proto::tonic::common::v1::ArrayValue {
                        values: vec![AnyValue {
                            value: Some(any_value::Value::StringValue(reason.clone())),
                        }],
                    },
                )),
            }),
        });
    }
    if let Some(cached) = record.usage.cached_tokens {
        attributes.push(int("agentx.usage.cached_tokens", cached));
    }
    if let Some(ttft) = record.ttft_ns() {
        attributes.push(int("agentx.ttft_ns", ttft));
    }
    let outcome = Outcome::of(record);
    let status = match (&record.error, outcome) {
        (Some(error), Outcome::Failed | Outcome::ContextOverflow | Outcome::Cancelled) => {
            attributes.push(text("error.type", &error.kind));
            Status {
                code: status::StatusCode::Error as i32,
                message: error.message.clone(),
            }
        }
        _ => Status::default(),
    };
    Span {
        trace_id: trace_id(record.session_root()).to_vec(),
        span_id: request_span_id(&record.request_id).to_vec(),
        parent_span_id: stream_span_id(&record.correlation_id).to_vec(),
        name: format!("chat {}", config.model),
        kind: span::SpanKind::Client as i32,
        start_time_unix_nano: config.anchor_unix_ns + record.send_ns,
        end_time_unix_nano: config.anchor_unix_ns + record.end_ns,
        attributes,
        status: Some(status),
        ..Span::default()
    }
}

/// A stream's span: from its first send to its last end, a child of the stream that spawned it.
fn stream_span(correlation_id: &str, stream: &Stream, config: &OtlpConfig) -> Span {
    let status = if stream.failed {
        Status {
            code: status::StatusCode::Error as i32,
            message: "a request of the session failed".into(),
        }
    } else {
        Status::default()
    };
    Span {
        trace_id: stream.trace.to_vec(),
        span_id: stream_span_id(correlation_id).to_vec(),
        parent_span_id: stream
            .parent
            .as_deref()
            .map(|parent| stream_span_id(parent).to_vec())
            .unwrap_or_default(),
        name: format!("session {}", stream.trace_id),
        kind: span::SpanKind::Internal as i32,
        start_time_unix_nano: config.anchor_unix_ns + stream.first_send_ns,
        end_time_unix_nano: config.anchor_unix_ns + stream.last_end_ns,
        attributes: vec![
            text("gen_ai.conversation.id", correlation_id),
            int("agentx.lane", u64::from(stream.lane)),
            text("agentx.trace_id", &stream.trace_id),
            int("agentx.requests", stream.requests),
        ],
        status: Some(status),
        ..Span::default()
    }
}

fn resource(config: &OtlpConfig) -> Resource {
    let mut attributes = vec![
        text("service.name", "agentx"),
        text("service.version", env!("CARGO_PKG_VERSION")),
        text("agentx.run_id", &config.run_id),
        text("agentx.scenario", &config.scenario),
    ];
    if let Some(shard) = config.shard {
        attributes.push(int("agentx.shard", u64::from(shard)));
    }
    Resource {
        attributes,
        ..Resource::default()
    }
}

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        key_strindex: 0,
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
    }
}

fn int(key: &str, value: u64) -> KeyValue {
    KeyValue {
        key: key.into(),
        key_strindex: 0,
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(
                i64::try_from(value).unwrap_or(i64::MAX),
            )),
        }),
    }
}

/// Posts batches to the collector.
struct Poster {
    url: hyper::Uri,
    resource: Resource,
    client: Client<
        hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>,
        Full<Bytes>,
    >,
    warned: bool,
}

impl Poster {
    fn new(url: hyper::Uri, resource: Resource) -> Poster {
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .build();
        Poster {
            url,
            resource,
            client: Client::builder(TokioExecutor::new()).build(connector),
            warned: false,
        }
    }

    /// Sends one batch; a failure drops it (counted, and said the first time).
    async fn post(&mut self, spans: Vec<Span>, stats: &mut ExportStats) {
        let count = spans.len() as u64;
        let message = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "agentx".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..InstrumentationScope::default()
                    }),
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        let request = hyper::Request::post(self.url.clone())
            .header(hyper::header::CONTENT_TYPE, "application/x-protobuf")
            .body(Full::new(Bytes::from(message.encode_to_vec())));
        let outcome = match request {
            Ok(request) => {
                match tokio::time::timeout(POST_TIMEOUT, self.client.request(request)).await {
                    Ok(Ok(response)) if response.status().is_success() => {
                        let _ = response.into_body().collect().await;
                        Ok(())
                    }
                    Ok(Ok(response)) => Err(format!("HTTP {}", response.status())),
                    Ok(Err(e)) => Err(e.to_string()),
                    Err(_) => Err(format!("no answer within {POST_TIMEOUT:?}")),
                }
            }
            Err(e) => Err(e.to_string()),
        };
        match outcome {
            Ok(()) => stats.spans_sent += count,
            Err(why) => {
                stats.spans_dropped += count;
                stats.batches_failed += 1;
                if !self.warned {
                    self.warned = true;
                    tracing::warn!(
                        "OTLP export to {}: {why}; spans are dropped and counted, the run goes on",
                        self.url
                    );
                }
                stats.last_error = Some(why);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::testkit::{failed, in_stream, in_tree, rec};
    use std::sync::Mutex;

    async fn receiver() -> (String, Arc<Mutex<Vec<Span>>>) {
        let receiver = crate::testkit::Receiver::start().await;
        (receiver.url.clone(), receiver.spans)
    }

    fn config(endpoint: String) -> OtlpConfig {
        OtlpConfig {
            endpoint,
            model: "agentx-sim".into(),
            anchor_unix_ns: 1_700_000_000_000_000_000,
            run_id: "run-1".into(),
            scenario: "agentx 1.0.0".into(),
            shard: None,
        }
    }

    fn child_of(record: RequestRecord, root: &str) -> RequestRecord {
        in_tree(record, root, Some(root))
    }

    #[tokio::test]
    async fn one_span_per_request_and_per_stream_with_the_tree_as_parents() {
        let (url, received) = receiver().await;
        let exporter = Exporter::start(config(url), &tokio::runtime::Handle::current()).unwrap();
        let root_first = in_tree(in_stream(rec(0, &[4], 100, 1), "root", 0), "root", None);
        let records = vec![
            root_first,
            child_of(in_stream(rec(10, &[3], 80, 1), "child", 0), "root"),
            child_of(in_stream(failed(20, 90), "child", 1), "root"),
            in_stream(rec(5, &[2], 50, 1), "alone", 0),
        ];
        for record in &records {
            exporter.record(record);
        }
        let stats = exporter.finish(Duration::from_secs(10)).await;
        assert_eq!(
            stats,
            ExportStats {
                spans_sent: 4 + 3,
                ..ExportStats::default()
            }
        );
        let spans = received.lock().unwrap().clone();
        assert_eq!(spans.len(), 7);
        let by_id: HashMap<Vec<u8>, &Span> = spans.iter().map(|s| (s.span_id.clone(), s)).collect();
        for record in &records {
            let span = by_id[&request_span_id(&record.request_id).to_vec()];
            assert_eq!(
                span.parent_span_id,
                stream_span_id(&record.correlation_id).to_vec()
            );
            assert_eq!(
                span.start_time_unix_nano,
                1_700_000_000_000_000_000 + record.send_ns
            );
        }
        // The child's stream span hangs under the root's, in the root's trace; the lone session is
        // its own trace.
        let child = by_id[&stream_span_id("child").to_vec()];
        assert_eq!(child.parent_span_id, stream_span_id("root").to_vec());
        assert_eq!(child.trace_id, trace_id("root").to_vec());
        assert_eq!(
            child.status.as_ref().unwrap().code,
            status::StatusCode::Error as i32
        );
        let root = by_id[&stream_span_id("root").to_vec()];
        assert!(root.parent_span_id.is_empty());
        assert_eq!(
            by_id[&stream_span_id("alone").to_vec()].trace_id,
            trace_id("alone").to_vec()
        );
        // The failed request says why.
        let failure = by_id[&request_span_id("child-r1").to_vec()];
        assert!(failure.attributes.iter().any(|kv| kv.key == "error.type"));
    }

    #[tokio::test]
    async fn a_collector_that_is_down_loses_spans_counted_and_the_run_does_not_wait() {
        // A port nothing listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let exporter = Exporter::start(
            config(format!("http://127.0.0.1:{port}")),
            &tokio::runtime::Handle::current(),
        )
        .unwrap();
        for turn in 0..3 {
            exporter.record(&in_stream(
                rec(u64::from(turn) * 10, &[2], 10, 1),
                "s",
                turn,
            ));
        }
        let stats = exporter.finish(Duration::from_secs(10)).await;
        assert_eq!((stats.spans_sent, stats.spans_dropped), (0, 4));
        assert!(
            stats.batches_failed >= 1 && stats.last_error.is_some(),
            "{stats:?}"
        );
    }

    #[test]
    fn an_endpoint_gets_its_traces_path_and_a_bad_one_names_the_flag() {
        assert_eq!(
            traces_url("http://collector:4318").unwrap().to_string(),
            "http://collector:4318/v1/traces"
        );
        assert_eq!(
            traces_url("https://c/").unwrap().to_string(),
            "https://c/v1/traces"
        );
        assert_eq!(
            traces_url("http://c:4318/custom/traces").unwrap().path(),
            "/custom/traces"
        );
        for bad in ["collector:4318", "grpc://c:4317", "not a url"] {
            let e = traces_url(bad).unwrap_err().to_string();
            assert!(
                e.contains("--otlp-endpoint") && e.contains("http://localhost:4318"),
                "{e}"
            );
        }
    }
}
