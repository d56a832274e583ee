//! Server metrics scraping: GET `/metrics` from one or more endpoints every interval during a run,
//! and keep what was seen as compact per-series time series.
//!
//! One tokio task per endpoint fetches, stamps the scrape on the run's [`Clock`] (the moment the
//! response headers arrived, when the server had just rendered the page), parses it and folds it into
//! that endpoint's [`EndpointLog`]. Invariants:
//! - A scrape that fails (connection refused, timeout, a status other than 200, an unreadable body,
//!   a parse error) is counted by kind and logged once; it never fails the run and never stops the
//!   scraping.
//! - No raw text is kept. Each series is a [`Track`] of change points (scrape index, value), so an
//!   idle series costs nothing per scrape and an hour at 3 scrapes/s stays bounded by the number of
//!   value changes; scrape times are kept once per endpoint.
//! - `stop()` asks every task to take one final scrape (the end state of the run) and returns the
//!   [`ScrapeLog`]; [`Scraper::snapshot`] reads the latest values for a live view meanwhile.
//! - Prometheus summaries and `_created` timestamps are not kept (aiperf ignores them too).

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::{Request, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::metrics::prometheus::{self, MetricType};
use crate::record::Clock;

/// aiperf's default cadence: about three scrapes a second.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(333);

/// The environment variables that set the interval (in seconds), in order of precedence.
pub const INTERVAL_ENV: [&str; 2] = [
    "AGENTX_SERVER_METRICS_COLLECTION_INTERVAL",
    "AIPERF_SERVER_METRICS_COLLECTION_INTERVAL",
];

/// Errors of setting up a scraper (scrapes themselves never fail the run).
#[derive(Debug, thiserror::Error)]
pub enum ScrapeError {
    #[error("server metrics URL {url:?} is not usable: {why}; pass e.g. http://localhost:8000 or http://localhost:8000/metrics")]
    Url { url: String, why: String },
    #[error("{var}={value:?} is not a scrape interval: give seconds, e.g. {var}=0.333")]
    Interval { var: String, value: String },
    #[error("server metrics scraping needs a tokio runtime")]
    NoRuntime,
}

/// Parse an interval variable's value: seconds as a decimal number, more than 0 and at most an hour.
pub fn parse_interval(var: &str, value: &str) -> Result<Duration, ScrapeError> {
    let bad = || ScrapeError::Interval {
        var: var.to_string(),
        value: value.to_string(),
    };
    let s: f64 = value.trim().parse().map_err(|_| bad())?;
    if !(s > 0.0 && s <= 3600.0) {
        return Err(bad());
    }
    Ok(Duration::from_secs_f64(s))
}

/// The `/metrics` URL of a server: `base` itself when its path already ends in `/metrics`,
/// otherwise `base` with `/metrics` appended.
pub fn metrics_url(base: &str) -> Result<String, ScrapeError> {
    let bad = |why: String| ScrapeError::Url {
        url: base.to_string(),
        why,
    };
    let uri: Uri = base.trim().parse().map_err(|e| bad(format!("{e}")))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        Some(s) => return Err(bad(format!("the scheme {s:?} is not http or https"))),
        None => return Err(bad("it has no scheme".into())),
    }
    let Some(authority) = uri.authority() else {
        return Err(bad("it has no host".into()));
    };
    let path = uri.path().trim_end_matches('/');
    let path = if path.ends_with("/metrics") {
        path.to_string()
    } else {
        format!("{path}/metrics")
    };
    let query = uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    Ok(format!(
        "{}://{}{}{}",
        uri.scheme_str().unwrap_or("http"),
        authority,
        path,
        query
    ))
}

/// How to scrape.
#[derive(Debug, Clone)]
pub struct ScrapeConfig {
    /// Server base URLs or full `/metrics` URLs (see [`metrics_url`]).
    pub urls: Vec<String>,
    pub interval: Duration,
    /// Limit of one fetch, connect to the end of the body.
    pub timeout: Duration,
    /// Largest accepted page; a larger one counts as a body failure.
    pub max_body_bytes: usize,
}

impl ScrapeConfig {
    /// The defaults: 333 ms interval, 5 s timeout, 64 MiB pages.
    pub fn new(urls: Vec<String>) -> ScrapeConfig {
        ScrapeConfig {
            urls,
            interval: DEFAULT_INTERVAL,
            timeout: Duration::from_secs(5),
            max_body_bytes: 64 << 20,
        }
    }
}

/// One value of a [`Track`] from a scrape index on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Index into [`EndpointLog::scrape_ns`].
    pub idx: u32,
    pub value: f64,
    /// False when the series was missing from the page from this scrape on.
    pub present: bool,
}

/// A series' values as change points: a value holds from its scrape until the next point.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Track {
    points: Vec<Point>,
}

impl Track {
    fn push(&mut self, idx: u32, value: Option<f64>) {
        let (value, present) = match value {
            Some(v) => (v, true),
            None => (0.0, false),
        };
        match self.points.last() {
            // Compare bits so a NaN that stays NaN is no change.
            Some(p) if p.present == present && p.value.to_bits() == value.to_bits() => {}
            None if !present => {}
            _ => self.points.push(Point {
                idx,
                value,
                present,
            }),
        }
    }

    /// The value at scrape `idx`, `None` when the series was absent then.
    pub fn at(&self, idx: u32) -> Option<f64> {
        let n = self.points.partition_point(|p| p.idx <= idx);
        let p = self.points.get(n.checked_sub(1)?)?;
        p.present.then_some(p.value)
    }

    /// The change points, in scrape order.
    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// The first value seen.
    pub fn first(&self) -> Option<f64> {
        self.points.iter().find(|p| p.present).map(|p| p.value)
    }
}

/// One `le` bucket of a histogram series (cumulative counts, as served).
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    pub le: f64,
    /// The bound as the server wrote it (`0.5`, `1.0`, `+Inf`), for export keys.
    pub le_text: String,
    pub track: Track,
}

/// A histogram series: its buckets in increasing `le`, `_sum` and `_count`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramTrack {
    pub buckets: Vec<Bucket>,
    pub sum: Track,
    pub count: Track,
}

/// The values of one series (one label set of one family on one endpoint).
#[derive(Debug, Clone, PartialEq)]
pub enum SeriesLog {
    /// Counters, gauges and untyped metrics.
    Scalar(Track),
    Histogram(HistogramTrack),
}

/// Labels of a series, sorted by name (`le` removed from histogram buckets).
pub type Labels = Vec<(String, String)>;

/// One metric family as seen on one endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct FamilyLog {
    pub kind: MetricType,
    pub help: String,
    pub series: BTreeMap<Labels, SeriesLog>,
    /// The scrape that last carried each series (to mark the ones that disappear).
    seen: BTreeMap<Labels, u32>,
}

/// What became of one fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchOutcome {
    /// Parsed; `changed` when the page differed from the previous successful one.
    Ok {
        changed: bool,
    },
    Connect,
    Status(u16),
    Timeout,
    Body,
    Parse,
}

/// One fetch of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fetch {
    /// Clock offset when the request was sent.
    pub start_ns: u64,
    /// Send to the end of the body (or the failure).
    pub latency_ns: u64,
    pub outcome: FetchOutcome,
}

/// Failed fetches by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FailureCounts {
    pub connect: u64,
    pub status: u64,
    pub timeout: u64,
    pub body: u64,
    pub parse: u64,
}

impl FailureCounts {
    pub fn total(&self) -> u64 {
        self.connect + self.status + self.timeout + self.body + self.parse
    }
}

/// Everything scraped from one endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointLog {
    /// The full `/metrics` URL.
    pub url: String,
    /// Every fetch, successful or not, in order.
    pub fetches: Vec<Fetch>,
    /// Clock offsets of the successful scrapes; [`Point::idx`] indexes this.
    pub scrape_ns: Vec<u64>,
    /// Families by name (counters without `_total`).
    pub families: BTreeMap<String, FamilyLog>,
    pub failures: FailureCounts,
    /// What the latest failure was, for the log and the export.
    pub last_error: Option<String>,
    last_hash: Option<u64>,
}

impl EndpointLog {
    fn new(url: String) -> EndpointLog {
        EndpointLog {
            url,
            fetches: Vec::new(),
            scrape_ns: Vec::new(),
            families: BTreeMap::new(),
            failures: FailureCounts::default(),
            last_error: None,
            last_hash: None,
        }
    }

    fn fail(&mut self, fetch: Fetch, message: String) {
        match fetch.outcome {
            FetchOutcome::Connect => self.failures.connect += 1,
            FetchOutcome::Status(_) => self.failures.status += 1,
            FetchOutcome::Timeout => self.failures.timeout += 1,
            FetchOutcome::Body => self.failures.body += 1,
            FetchOutcome::Parse => self.failures.parse += 1,
            FetchOutcome::Ok { .. } => {}
        }
        if self.failures.total() == 1 {
            tracing::warn!(url = %self.url, "server metrics scrape failed (counted, the run goes on): {message}");
        } else {
            tracing::debug!(url = %self.url, "server metrics scrape failed: {message}");
        }
        self.last_error = Some(message);
        self.fetches.push(fetch);
    }

    /// Fold one parsed page, scraped at `t_ns`, into the series.
    fn ingest(
        &mut self,
        mut fetch: Fetch,
        t_ns: u64,
        hash: u64,
        families: Vec<prometheus::Family>,
    ) {
        let changed = self.last_hash != Some(hash);
        self.last_hash = Some(hash);
        fetch.outcome = FetchOutcome::Ok { changed };
        self.fetches.push(fetch);
        let idx = self.scrape_ns.len() as u32;
        self.scrape_ns.push(t_ns);
        for f in families {
            if f.kind == MetricType::Summary || f.name.ends_with("_created") {
                continue;
            }
            let fam = self
                .families
                .entry(f.name.clone())
                .or_insert_with(|| FamilyLog {
                    kind: f.kind,
                    help: f.help.clone(),
                    series: BTreeMap::new(),
                    seen: BTreeMap::new(),
                });
            if fam.kind != f.kind {
                // A family that changed type (a restarted server of another version) keeps its
                // first type; its new samples are not comparable with the old ones.
                continue;
            }
            if fam.help.is_empty() && !f.help.is_empty() {
                fam.help = f.help.clone();
            }
            for s in &f.samples {
                let role = f.role(s);
                let histogram = fam.kind == MetricType::Histogram;
                if role == "_created" || (!histogram && !matches!(role, "" | "_total")) {
                    continue;
                }
                let mut labels: Labels = s
                    .labels
                    .iter()
                    .filter(|(k, _)| !(histogram && k == "le"))
                    .cloned()
                    .collect();
                labels.sort();
                fam.seen.insert(labels.clone(), idx);
                let series = fam.series.entry(labels).or_insert_with(|| {
                    if histogram {
                        SeriesLog::Histogram(HistogramTrack::default())
                    } else {
                        SeriesLog::Scalar(Track::default())
                    }
                });
                match series {
                    SeriesLog::Scalar(t) => t.push(idx, Some(s.value)),
                    SeriesLog::Histogram(h) => match role {
                        "_sum" => h.sum.push(idx, Some(s.value)),
                        "_count" => h.count.push(idx, Some(s.value)),
                        "_bucket" => {
                            let Some(le_text) = s.label("le") else {
                                continue;
                            };
                            let Some(le) = prometheus::parse_value(le_text) else {
                                continue;
                            };
                            let i = match h.buckets.iter().position(|b| b.le == le) {
                                Some(i) => i,
                                None => {
                                    let at = h.buckets.partition_point(|b| b.le < le);
                                    h.buckets.insert(
                                        at,
                                        Bucket {
                                            le,
                                            le_text: le_text.to_string(),
                                            track: Track::default(),
                                        },
                                    );
                                    at
                                }
                            };
                            h.buckets[i].track.push(idx, Some(s.value));
                        }
                        _ => {}
                    },
                }
            }
        }
        // Series missing from this page are absent from this scrape on.
        for fam in self.families.values_mut() {
            for (labels, series) in fam.series.iter_mut() {
                if fam.seen.get(labels) == Some(&idx) {
                    continue;
                }
                match series {
                    SeriesLog::Scalar(t) => t.push(idx, None),
                    SeriesLog::Histogram(h) => {
                        h.sum.push(idx, None);
                        h.count.push(idx, None);
                        for b in &mut h.buckets {
                            b.track.push(idx, None);
                        }
                    }
                }
            }
        }
    }

    /// A log built from pages already fetched: `(clock offset, Some(page))` for a scrape, `(offset,
    /// None)` for a failed one (counted as a connection failure). For offline replays and tests.
    pub fn from_pages<'a>(
        url: &str,
        pages: impl IntoIterator<Item = (u64, Option<&'a str>)>,
    ) -> Result<EndpointLog, prometheus::ParseError> {
        let mut log = EndpointLog::new(url.to_string());
        for (t, page) in pages {
            let fetch = Fetch {
                start_ns: t,
                latency_ns: 0,
                outcome: FetchOutcome::Connect,
            };
            match page {
                Some(text) => {
                    let mut h = DefaultHasher::new();
                    text.hash(&mut h);
                    log.ingest(fetch, t, h.finish(), prometheus::parse(text)?);
                }
                None => log.fail(fetch, "connection refused".to_string()),
            }
        }
        Ok(log)
    }

    /// Successful scrapes.
    pub fn scrapes(&self) -> u64 {
        self.scrape_ns.len() as u64
    }

    /// The scalar series of family `name` (counters, gauges, untyped).
    pub fn scalars<'a>(&'a self, name: &str) -> impl Iterator<Item = (&'a Labels, &'a Track)> {
        self.families
            .get(name)
            .into_iter()
            .flat_map(|f| f.series.iter())
            .filter_map(|(l, s)| match s {
                SeriesLog::Scalar(t) => Some((l, t)),
                SeriesLog::Histogram(_) => None,
            })
    }

    fn last_idx(&self) -> Option<u32> {
        (self.scrape_ns.len() as u32).checked_sub(1)
    }
}

/// The whole run's scrapes.
#[derive(Debug, Clone)]
pub struct ScrapeLog {
    pub clock: Clock,
    pub interval: Duration,
    pub endpoints: Vec<EndpointLog>,
}

/// Latest values for the live `srv` row, summed or averaged across endpoints and series by what
/// each metric is (counts add up, usage fractions average). `None` when no endpoint has the metric.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerSnapshot {
    /// Clock offset of the newest successful scrape.
    pub at_ns: Option<u64>,
    pub scrapes: u64,
    pub failed_scrapes: u64,
    /// `vllm:num_requests_running` (SGLang `sglang:num_running_reqs`, llama.cpp
    /// `llamacpp:requests_processing`, ATOM `atom:num_requests_running`), summed.
    pub running: Option<f64>,
    /// `vllm:num_requests_waiting` (SGLang `sglang:num_queue_reqs`, llama.cpp
    /// `llamacpp:requests_deferred`, ATOM `atom:num_requests_waiting`), summed.
    pub waiting: Option<f64>,
    /// KV usage as a fraction: `vllm:kv_cache_usage_perc` (V0 `vllm:gpu_cache_usage_perc`, SGLang
    /// `sglang:token_usage`, llama.cpp and ATOM `*:kv_cache_usage_ratio`, Dynamo
    /// `dynamo_component_gpu_cache_usage_percent` / 100), averaged across series.
    pub kv_usage: Option<f64>,
    /// `vllm:cpu_cache_usage_perc`, averaged.
    pub cpu_kv_usage: Option<f64>,
    /// Prefix-cache hits over queries since the first scrape (SGLang: `realtime_tokens`
    /// `prefill_cache` over all modes, else `cached_tokens` over `prompt_tokens`; llama.cpp:
    /// `prompt_tokens_cached` over it plus the evaluated `prompt_tokens`; ATOM
    /// `prefix_cache_cached_tokens` over `prompt_tokens`; Dynamo's frontend cached over input
    /// tokens).
    pub prefix_cache_hit_rate: Option<f64>,
    /// `vllm:external_prefix_cache_hits` over `_queries` since the first scrape.
    pub external_cache_hit_rate: Option<f64>,
    /// Prompt and generation tokens counted by the server since the first scrape.
    pub prompt_tokens: Option<f64>,
    pub generation_tokens: Option<f64>,
}

impl ServerSnapshot {
    fn of<'a>(logs: impl Iterator<Item = &'a EndpointLog> + Clone) -> ServerSnapshot {
        let latest = |names: &[&str]| -> Vec<f64> {
            for name in names {
                let v: Vec<f64> = logs
                    .clone()
                    .flat_map(|e| {
                        let idx = e.last_idx();
                        e.scalars(name)
                            .filter_map(move |(_, t)| idx.and_then(|i| t.at(i)))
                    })
                    .collect();
                if !v.is_empty() {
                    return v;
                }
            }
            Vec::new()
        };
        let sum = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>());
        let avg = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        // Increase since the first scrape, summed over series matching `keep`.
        let increase = |name: &str, keep: &dyn Fn(&Labels) -> bool| -> Option<f64> {
            let mut any = false;
            let mut total = 0.0;
            for e in logs.clone() {
                let Some(i) = e.last_idx() else { continue };
                for (l, t) in e.scalars(name) {
                    if !keep(l) {
                        continue;
                    }
                    if let (Some(first), Some(now)) = (t.first(), t.at(i)) {
                        any = true;
                        total += (now - first).max(0.0);
                    }
                }
            }
            any.then_some(total)
        };
        let all = |_: &Labels| true;
        let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
            (Some(a), Some(b)) if b > 0.0 => Some(a / b),
            _ => None,
        };
        let mode = |m: &'static str| move |l: &Labels| l.iter().any(|(k, v)| k == "mode" && v == m);
        let prefix = ratio(
            increase("vllm:prefix_cache_hits", &all),
            increase("vllm:prefix_cache_queries", &all),
        )
        .or_else(|| {
            ratio(
                increase("sglang:realtime_tokens", &mode("prefill_cache")),
                increase("sglang:realtime_tokens", &all),
            )
        })
        .or_else(|| {
            ratio(
                increase("sglang:cached_tokens", &all),
                increase("sglang:prompt_tokens", &all),
            )
        })
        .or_else(|| {
            // llama.cpp counts evaluated prompt tokens apart from cached ones (builds that export
            // the cached counter; on a build without it the row shows `-`).
            let cached = increase("llamacpp:prompt_tokens_cached", &all);
            let evaluated = increase("llamacpp:prompt_tokens", &all);
            ratio(cached, cached.zip(evaluated).map(|(c, e)| c + e))
        })
        .or_else(|| {
            ratio(
                increase("atom:prefix_cache_cached_tokens", &all),
                increase("atom:prompt_tokens", &all),
            )
        })
        .or_else(|| {
            ratio(
                increase("dynamo_frontend_cached_tokens", &all),
                increase("dynamo_frontend_input_sequence_tokens", &all),
            )
        });
        let llama_prompt = increase("llamacpp:prompt_tokens", &all)
            .map(|e| e + increase("llamacpp:prompt_tokens_cached", &all).unwrap_or(0.0));
        ServerSnapshot {
            at_ns: logs
                .clone()
                .filter_map(|e| e.scrape_ns.last().copied())
                .max(),
            scrapes: logs.clone().map(|e| e.scrapes()).sum(),
            failed_scrapes: logs.clone().map(|e| e.failures.total()).sum(),
            running: sum(latest(&[
                "vllm:num_requests_running",
                "sglang:num_running_reqs",
                "llamacpp:requests_processing",
                "atom:num_requests_running",
            ])),
            waiting: sum(latest(&[
                "vllm:num_requests_waiting",
                "sglang:num_queue_reqs",
                "llamacpp:requests_deferred",
                "atom:num_requests_waiting",
            ])),
            kv_usage: avg(latest(&[
                "vllm:kv_cache_usage_perc",
                "vllm:gpu_cache_usage_perc",
                "sglang:token_usage",
                "llamacpp:kv_cache_usage_ratio",
                "atom:kv_cache_usage_ratio",
            ]))
            .or_else(|| {
                // Dynamo reports a percentage.
                avg(latest(&["dynamo_component_gpu_cache_usage_percent"])).map(|p| p / 100.0)
            }),
            cpu_kv_usage: avg(latest(&["vllm:cpu_cache_usage_perc"])),
            prefix_cache_hit_rate: prefix,
            external_cache_hit_rate: ratio(
                increase("vllm:external_prefix_cache_hits", &all),
                increase("vllm:external_prefix_cache_queries", &all),
            ),
            prompt_tokens: increase("vllm:prompt_tokens", &all)
                .or_else(|| increase("sglang:prompt_tokens", &all))
                .or(llama_prompt)
                .or_else(|| increase("atom:prompt_tokens", &all))
                .or_else(|| increase("dynamo_frontend_input_sequence_tokens", &all)),
            generation_tokens: increase("vllm:generation_tokens", &all)
                .or_else(|| increase("sglang:generation_tokens", &all))
                .or_else(|| increase("llamacpp:tokens_predicted", &all))
                .or_else(|| increase("atom:generation_tokens", &all))
                .or_else(|| increase("dynamo_frontend_output_tokens", &all)),
        }
    }
}

impl ScrapeLog {
    /// The latest values (as of the final scrape).
    pub fn snapshot(&self) -> ServerSnapshot {
        ServerSnapshot::of(self.endpoints.iter())
    }

    /// Successful scrapes over all endpoints.
    pub fn scrapes(&self) -> u64 {
        self.endpoints.iter().map(|e| e.scrapes()).sum()
    }

    /// Failed scrapes over all endpoints.
    pub fn failed_scrapes(&self) -> u64 {
        self.endpoints.iter().map(|e| e.failures.total()).sum()
    }
}

type HttpClient =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// A running scraper. Dropping it stops the tasks without the final scrape being collected.
pub struct Scraper {
    clock: Clock,
    interval: Duration,
    logs: Vec<Arc<Mutex<EndpointLog>>>,
    tasks: Vec<JoinHandle<()>>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for Scraper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scraper")
            .field("endpoints", &self.logs.len())
            .field("interval", &self.interval)
            .finish()
    }
}

fn lock(m: &Mutex<EndpointLog>) -> MutexGuard<'_, EndpointLog> {
    // A panic while holding the lock cannot leave a log half-written in a way that matters to a
    // reader (every field is valid at all times), so a poisoned lock is still read.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Scraper {
    /// Start one scraping task per URL on the current tokio runtime; the first scrape is taken at
    /// once. Fails only on an unusable URL.
    pub fn start(cfg: ScrapeConfig, clock: Clock) -> Result<Scraper, ScrapeError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ScrapeError::NoRuntime)?;
        let mut uris = Vec::new();
        for u in &cfg.urls {
            let url = metrics_url(u)?;
            let uri: Uri = url.parse().map_err(|e| ScrapeError::Url {
                url: u.clone(),
                why: format!("{e}"),
            })?;
            uris.push((url, uri));
        }
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_nodelay(true);
        http.set_connect_timeout(Some(cfg.timeout));
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .wrap_connector(http);
        let client: HttpClient = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .build(connector);
        let (stop, stop_rx) = watch::channel(false);
        let mut logs = Vec::new();
        let mut tasks = Vec::new();
        for (url, uri) in uris {
            let log = Arc::new(Mutex::new(EndpointLog::new(url)));
            logs.push(log.clone());
            let ep = Endpoint {
                client: client.clone(),
                uri,
                clock,
                timeout: cfg.timeout,
                max_body: cfg.max_body_bytes,
                log,
            };
            tasks.push(runtime.spawn(ep.run(cfg.interval, stop_rx.clone())));
        }
        Ok(Scraper {
            clock,
            interval: cfg.interval,
            logs,
            tasks,
            stop,
        })
    }

    /// The latest values, for the live view.
    pub fn snapshot(&self) -> ServerSnapshot {
        let guards: Vec<_> = self.logs.iter().map(|l| lock(l)).collect();
        ServerSnapshot::of(guards.iter().map(|g| &**g))
    }

    /// Take a final scrape of every endpoint, stop, and hand over everything seen.
    pub async fn stop(mut self) -> ScrapeLog {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            let _ = t.await;
        }
        let endpoints = self
            .logs
            .drain(..)
            .map(|l| match Arc::try_unwrap(l) {
                Ok(m) => m.into_inner().unwrap_or_else(|p| p.into_inner()),
                Err(l) => lock(&l).clone(),
            })
            .collect();
        ScrapeLog {
            clock: self.clock,
            interval: self.interval,
            endpoints,
        }
    }
}

impl Drop for Scraper {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// One endpoint's scraping task.
struct Endpoint {
    client: HttpClient,
    uri: Uri,
    clock: Clock,
    timeout: Duration,
    max_body: usize,
    log: Arc<Mutex<EndpointLog>>,
}

impl Endpoint {
    async fn run(self, interval: Duration, mut stop: watch::Receiver<bool>) {
        let mut tick = tokio::time::interval(interval);
        // A slow server delays the next scrape instead of causing a burst of catch-up scrapes.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if *stop.borrow() {
                break;
            }
            tokio::select! {
                _ = tick.tick() => {}
                r = stop.changed() => {
                    if r.is_err() { return; }
                    break;
                }
            }
            self.scrape().await;
        }
        // The final scrape: the end state of the run.
        self.scrape().await;
    }

    async fn scrape(&self) {
        let start_ns = self.clock.now_ns();
        let fetch = |outcome| Fetch {
            start_ns,
            latency_ns: self.clock.now_ns().saturating_sub(start_ns),
            outcome,
        };
        let got = tokio::time::timeout(self.timeout, self.get()).await;
        let (t_ns, body) = match got {
            Err(_) => {
                let f = fetch(FetchOutcome::Timeout);
                let msg = format!("no complete response within {:?}", self.timeout);
                lock(&self.log).fail(f, msg);
                return;
            }
            Ok(Err((outcome, msg))) => {
                lock(&self.log).fail(fetch(outcome), msg);
                return;
            }
            Ok(Ok(v)) => v,
        };
        let text = String::from_utf8_lossy(&body);
        let mut h = DefaultHasher::new();
        text.hash(&mut h);
        match prometheus::parse(&text) {
            Ok(families) => lock(&self.log).ingest(
                fetch(FetchOutcome::Ok { changed: true }),
                t_ns,
                h.finish(),
                families,
            ),
            Err(e) => lock(&self.log).fail(
                fetch(FetchOutcome::Parse),
                format!("not Prometheus text: {e}"),
            ),
        }
    }

    /// GET the page: (headers-arrived offset, body) or what went wrong.
    async fn get(&self) -> Result<(u64, Bytes), (FetchOutcome, String)> {
        let req = Request::get(self.uri.clone())
            .header("accept", "text/plain;version=0.0.4;q=1, */*;q=0.1")
            .body(Empty::<Bytes>::new())
            .map_err(|e| {
                (
                    FetchOutcome::Connect,
                    format!("cannot build the request: {e}"),
                )
            })?;
        let resp = self.client.request(req).await.map_err(|e| {
            let kind = if e.is_connect() {
                FetchOutcome::Connect
            } else {
                FetchOutcome::Body
            };
            (kind, error_chain(&e))
        })?;
        let t_ns = self.clock.now_ns();
        let status = resp.status();
        if status != hyper::StatusCode::OK {
            return Err((
                FetchOutcome::Status(status.as_u16()),
                format!("HTTP {status} from {}", self.uri),
            ));
        }
        let body = Limited::new(resp.into_body(), self.max_body)
            .collect()
            .await
            .map_err(|e| (FetchOutcome::Body, format!("reading the body: {e}")))?;
        Ok((t_ns, body.to_bytes()))
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_urls() {
        for (base, want) in [
            ("http://localhost:8000", "http://localhost:8000/metrics"),
            ("http://localhost:8000/", "http://localhost:8000/metrics"),
            ("http://h:1/metrics", "http://h:1/metrics"),
            ("https://h/prefix/", "https://h/prefix/metrics"),
            ("http://h:1/metrics?x=1", "http://h:1/metrics?x=1"),
        ] {
            assert_eq!(metrics_url(base).unwrap(), want, "{base}");
        }
        for bad in ["localhost:8000", "ftp://h/metrics", "http://", "not a url"] {
            let e = metrics_url(bad).unwrap_err().to_string();
            assert!(e.contains("is not usable"), "{bad}: {e}");
        }
    }

    #[test]
    fn intervals() {
        let v = INTERVAL_ENV[1];
        assert_eq!(
            parse_interval(v, "0.333").unwrap(),
            Duration::from_millis(333)
        );
        assert_eq!(parse_interval(v, " 2 ").unwrap(), Duration::from_secs(2));
        for bad in ["0", "-1", "abc", "", "1e9", "NaN"] {
            let e = parse_interval(v, bad).unwrap_err().to_string();
            assert!(e.contains(v) && e.contains("seconds"), "{e}");
        }
    }

    #[test]
    fn tracks_keep_change_points_only() {
        let mut t = Track::default();
        t.push(0, None);
        t.push(1, Some(1.0));
        t.push(2, Some(1.0));
        t.push(3, Some(f64::NAN));
        t.push(4, Some(f64::NAN));
        t.push(5, None);
        t.push(6, Some(2.0));
        assert_eq!(t.points().len(), 4);
        assert_eq!(t.at(0), None);
        assert_eq!(t.at(2), Some(1.0));
        assert!(t.at(4).unwrap().is_nan());
        assert_eq!(t.at(5), None);
        assert_eq!(t.at(100), Some(2.0));
        assert_eq!(t.first(), Some(1.0));
    }

    fn page(running: f64, hits: f64, queries: f64, ttft_fast: f64, ttft_all: f64) -> String {
        format!(
            "# TYPE vllm:num_requests_running gauge\n\
vllm:num_requests_running{{engine=\"0\"}} {running}\n\
vllm:num_requests_running{{engine=\"1\"}} 1\n\
# TYPE vllm:kv_cache_usage_perc gauge\n\
vllm:kv_cache_usage_perc{{engine=\"0\"}} 0.25\n\
vllm:kv_cache_usage_perc{{engine=\"1\"}} 0.75\n\
# TYPE vllm:prefix_cache_hits_total counter\n\
vllm:prefix_cache_hits_total{{engine=\"0\"}} {hits}\n\
# TYPE vllm:prefix_cache_queries_total counter\n\
vllm:prefix_cache_queries_total{{engine=\"0\"}} {queries}\n\
# TYPE vllm:time_to_first_token_seconds histogram\n\
vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"0.1\"}} {ttft_fast}\n\
vllm:time_to_first_token_seconds_bucket{{engine=\"0\",le=\"+Inf\"}} {ttft_all}\n\
vllm:time_to_first_token_seconds_sum{{engine=\"0\"}} 1.5\n\
vllm:time_to_first_token_seconds_count{{engine=\"0\"}} {ttft_all}\n\
# TYPE s summary\n\
s{{quantile=\"0.5\"}} 1\n"
        )
    }

    fn ingest(log: &mut EndpointLog, t: u64, text: &str) {
        let f = Fetch {
            start_ns: t,
            latency_ns: 1,
            outcome: FetchOutcome::Ok { changed: true },
        };
        let mut h = DefaultHasher::new();
        text.hash(&mut h);
        log.ingest(f, t, h.finish(), prometheus::parse(text).unwrap());
    }

    #[test]
    fn llamacpp_pages_fill_the_live_row() {
        let page = |evaluated: f64, cached: f64, predicted: f64| {
            format!(
                "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total {evaluated}\n\
                 # TYPE llamacpp:prompt_tokens_cached_total counter\nllamacpp:prompt_tokens_cached_total {cached}\n\
                 # TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total {predicted}\n\
                 # TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 3\n\
                 # TYPE llamacpp:requests_deferred gauge\nllamacpp:requests_deferred 2\n\
                 # TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.25\n"
            )
        };
        let mut log = EndpointLog::new("http://x/metrics".into());
        ingest(&mut log, 10, &page(100.0, 0.0, 10.0));
        ingest(&mut log, 20, &page(400.0, 900.0, 60.0));
        let snap = ServerSnapshot::of(std::iter::once(&log));
        // 900 cached of 300 evaluated + 900 cached.
        assert_eq!(snap.prefix_cache_hit_rate, Some(0.75));
        assert_eq!((snap.running, snap.waiting), (Some(3.0), Some(2.0)));
        assert_eq!(snap.kv_usage, Some(0.25));
        assert_eq!(snap.prompt_tokens, Some(1200.0));
        assert_eq!(snap.generation_tokens, Some(50.0));
    }

    #[test]
    fn ingest_builds_series_and_snapshot() {
        let mut log = EndpointLog::new("http://x/metrics".into());
        ingest(&mut log, 10, &page(3.0, 100.0, 1000.0, 1.0, 2.0));
        ingest(&mut log, 20, &page(3.0, 100.0, 1000.0, 1.0, 2.0));
        ingest(&mut log, 30, &page(5.0, 400.0, 2000.0, 4.0, 6.0));
        assert_eq!(log.scrape_ns, [10, 20, 30]);
        assert_eq!(
            log.fetches.iter().map(|f| f.outcome).collect::<Vec<_>>(),
            [
                FetchOutcome::Ok { changed: true },
                FetchOutcome::Ok { changed: false },
                FetchOutcome::Ok { changed: true }
            ]
        );
        assert!(!log.families.contains_key("s"), "summaries are not kept");
        let hits = &log.families["vllm:prefix_cache_hits"];
        assert_eq!(hits.kind, MetricType::Counter);
        let key = vec![("engine".to_string(), "0".to_string())];
        let SeriesLog::Histogram(h) =
            &log.families["vllm:time_to_first_token_seconds"].series[&key]
        else {
            panic!("not a histogram")
        };
        assert_eq!(h.buckets.len(), 2);
        assert_eq!(h.buckets[1].le_text, "+Inf");
        assert_eq!(h.buckets[0].track.points().len(), 2);
        assert_eq!(h.count.at(1), Some(2.0));
        // Unchanged values cost nothing.
        let SeriesLog::Scalar(r1) = &log.families["vllm:num_requests_running"].series
            [&vec![("engine".to_string(), "1".to_string())]]
        else {
            panic!()
        };
        assert_eq!(r1.points().len(), 1);

        let snap = ServerSnapshot::of(std::iter::once(&log));
        assert_eq!(snap.running, Some(6.0));
        assert_eq!(snap.kv_usage, Some(0.5));
        assert_eq!(snap.prefix_cache_hit_rate, Some(0.3));
        assert_eq!(snap.waiting, None);
        assert_eq!(snap.scrapes, 3);
        assert_eq!(snap.at_ns, Some(30));

        // A series that disappears reads absent, and the gauge sums only what is there.
        ingest(
            &mut log,
            40,
            "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"1\"} 2\n",
        );
        let snap = ServerSnapshot::of(std::iter::once(&log));
        assert_eq!(snap.running, Some(2.0));
        assert_eq!(snap.prefix_cache_hit_rate, None);
    }

    #[test]
    fn sglang_fallbacks() {
        let mut log = EndpointLog::new("http://x/metrics".into());
        let p = |cache: f64, compute: f64, queue: f64| {
            format!(
                "# TYPE sglang:realtime_tokens_total counter\n\
sglang:realtime_tokens_total{{mode=\"prefill_cache\"}} {cache}\n\
sglang:realtime_tokens_total{{mode=\"prefill_compute\"}} {compute}\n\
# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs {queue}\n\
# TYPE sglang:token_usage gauge\nsglang:token_usage 0.4\n"
            )
        };
        ingest(&mut log, 1, &p(0.0, 0.0, 0.0));
        ingest(&mut log, 2, &p(300.0, 700.0, 4.0));
        let snap = ServerSnapshot::of(std::iter::once(&log));
        assert_eq!(snap.prefix_cache_hit_rate, Some(0.3));
        assert_eq!(snap.waiting, Some(4.0));
        assert_eq!(snap.kv_usage, Some(0.4));
    }

    /// An hour at 3 scrapes/s of an 8-engine vLLM-like page under steady load, where every
    /// counter, gauge, sum and count moves each scrape and half of each histogram's buckets do.
    /// Prints the points kept, their bytes and the ingest cost; run with
    /// `cargo test --release --lib an_hour_of_scrapes -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn an_hour_of_scrapes_stays_bounded() {
        let scrapes = 3 * 3600;
        let mut log = EndpointLog::new("http://x/metrics".into());
        let mut text_bytes = 0usize;
        let started = std::time::Instant::now();
        for i in 0..scrapes {
            let mut p = String::new();
            for kind in ["gauge", "counter"] {
                for m in 0..6 {
                    p.push_str(&format!("# TYPE vllm:{kind}{m} {kind}\n"));
                    for e in 0..8 {
                        p.push_str(&format!(
                            "vllm:{kind}{m}{{engine=\"{e}\",model_name=\"m\"}} {}\n",
                            i * (e + 1)
                        ));
                    }
                }
            }
            for m in 0..6 {
                p.push_str(&format!("# TYPE vllm:h{m}_seconds histogram\n"));
                for e in 0..8 {
                    for b in 0..20 {
                        let v = if b < 10 { i * b } else { 0 };
                        p.push_str(&format!(
                            "vllm:h{m}_seconds_bucket{{engine=\"{e}\",le=\"{b}.0\",model_name=\"m\"}} {v}\n"
                        ));
                    }
                    p.push_str(&format!(
                        "vllm:h{m}_seconds_sum{{engine=\"{e}\",model_name=\"m\"}} {i}.5\n"
                    ));
                    p.push_str(&format!(
                        "vllm:h{m}_seconds_count{{engine=\"{e}\",model_name=\"m\"}} {i}\n"
                    ));
                }
            }
            text_bytes += p.len();
            ingest(&mut log, i as u64, &p);
        }
        let elapsed = started.elapsed();
        let mut points = 0usize;
        for f in log.families.values() {
            for s in f.series.values() {
                points += match s {
                    SeriesLog::Scalar(t) => t.points().len(),
                    SeriesLog::Histogram(h) => {
                        h.sum.points().len()
                            + h.count.points().len()
                            + h.buckets
                                .iter()
                                .map(|b| b.track.points().len())
                                .sum::<usize>()
                    }
                };
            }
        }
        let bytes = points * std::mem::size_of::<Point>()
            + log.scrape_ns.len() * 8
            + log.fetches.len() * std::mem::size_of::<Fetch>();
        println!(
            "{scrapes} scrapes: {points} points, {:.1} MiB kept vs {:.1} MiB of page text; \
             {:.3} ms per scrape (generate + parse + ingest)",
            bytes as f64 / (1 << 20) as f64,
            text_bytes as f64 / (1 << 20) as f64,
            elapsed.as_secs_f64() * 1e3 / scrapes as f64
        );
        assert!(bytes < text_bytes / 4);
    }
}
