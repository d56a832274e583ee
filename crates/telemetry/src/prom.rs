//! agentx's own Prometheus endpoint (`--metrics-listen`): the run's live counts
//! ([`agentx_metrics::live::LiveRun`]) and the process's CPU and memory, in the OpenMetrics text
//! format, at `GET /metrics` on the address the run binds before it sends anything
//! ([`bind`]). A Prometheus that scrapes both agentx and the server sees client and server on one
//! dashboard. Each series is rendered from one snapshot at scrape time, so the series of one
//! scrape agree with each other; the replay's hot path never waits on a scrape.
//!
//! The series, their labels and stability are in [`SERIES`] (and the guide's table, which a test
//! keeps equal to it). A series tagged stable keeps its name, type, unit and labels across
//! releases; an experimental one may change. The tag opens each series' `# HELP` line, as
//! Kubernetes components tag theirs.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use agentx_metrics::live::{Buckets, LiveRun, LiveSnapshot, PhaseTotals};
use agentx_record::Phase;

/// How long a series keeps its meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stability {
    /// Name, type, unit and labels are kept across releases.
    Stable,
    /// May change or go in a later release.
    Experimental,
}

impl Stability {
    fn tag(self) -> &'static str {
        match self {
            Stability::Stable => "[STABLE]",
            Stability::Experimental => "[EXPERIMENTAL]",
        }
    }
}

/// One series of the endpoint, as a scrape names it.
#[derive(Debug, Clone, Copy)]
pub struct Series {
    /// The family's name, as its `# TYPE` line gives it: a counter's samples add `_total`, a
    /// histogram's `_bucket`, `_sum` and `_count`.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: &'static str,
    /// Its labels beyond `shard` (which every series of a sharded run carries).
    pub labels: &'static str,
    /// How long it keeps its meaning.
    pub stability: Stability,
    /// What it counts.
    pub help: &'static str,
}

const fn series(
    name: &'static str,
    kind: &'static str,
    labels: &'static str,
    stability: Stability,
    help: &'static str,
) -> Series {
    Series {
        name,
        kind,
        labels,
        stability,
        help,
    }
}

use Stability::{Experimental, Stable};

/// Every series the endpoint serves, in the order it serves them.
pub const SERIES: &[Series] = &[
    series("agentx_requests_sent", "counter", "phase", Stable,
        "Requests sent, by phase (warmup, profiling)."),
    series("agentx_requests_in_flight", "gauge", "phase", Stable,
        "Requests sent that have not returned, by phase."),
    series("agentx_requests_completed", "counter", "phase, outcome", Stable,
        "Requests that returned or were cancelled, by phase and outcome (ok, failed, cancelled, context_overflow: the run summary's rule); at the end the profiling counts equal run_summary.json's requests_ok, requests_failed, cancelled and context_overflows."),
    series("agentx_input_tokens", "counter", "phase", Stable,
        "Prompt tokens of the successful requests, by phase (the summary's input_tokens)."),
    series("agentx_output_tokens", "counter", "phase", Stable,
        "Output tokens of the successful requests, by phase (the summary's output_tokens)."),
    series("agentx_cached_tokens", "counter", "phase", Stable,
        "Cached prompt tokens the successful responses reported (usage), by phase."),
    series("agentx_time_to_first_token_seconds", "histogram", "phase", Stable,
        "Time to first token of the successful requests, from the send (aiperf's clock), by phase; vLLM's bucket bounds."),
    series("agentx_inter_token_latency_seconds", "histogram", "phase", Stable,
        "Each successful request's mean inter-token latency, by phase; vLLM's bucket bounds."),
    series("agentx_request_latency_seconds", "histogram", "phase", Stable,
        "Latency of the successful requests, send to last content chunk, by phase; vLLM's bucket bounds."),
    series("agentx_send_lag_seconds", "histogram", "phase", Stable,
        "Send lag of the successful requests (actual send minus the schedule's), observed when each returns, by phase."),
    series("agentx_lanes", "gauge", "", Stable,
        "Lanes this process replays."),
    series("agentx_lanes_busy", "gauge", "", Stable,
        "Lanes with at least one request in flight (the rest are in a think gap or idle)."),
    series("agentx_sessions_active", "gauge", "", Stable,
        "Sessions under way: single streams, or whole session trees on their lanes."),
    series("agentx_stage", "gauge", "stage", Experimental,
        "1 for the replay's current stage (warmup, profiling, draining, done)."),
    series("agentx_stage_progress_ratio", "gauge", "", Experimental,
        "How far the current stage went, 0 to 1 (seconds of profiling, or warmup requests returned)."),
    series("process_cpu_seconds", "counter", "", Stable,
        "CPU time of the agentx process, user and system (the client's own cost)."),
    series("process_resident_memory_bytes", "gauge", "", Stable,
        "Resident memory of the agentx process."),
];

/// Why the endpoint could not listen.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// Another process holds the address.
    #[error(
        "--metrics-listen {addr}: the address is in use (another process listens there); pick a free port, or port 0 for any"
    )]
    InUse {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// Any other refusal.
    #[error("--metrics-listen {addr}: cannot listen there: {source}")]
    Other {
        /// The address asked for.
        addr: SocketAddr,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

/// The address a shard listens on: the flag's port plus the shard's index (port 0 stays 0: each
/// shard takes a free port of its own).
pub fn shard_addr(addr: SocketAddr, shard: Option<u32>) -> SocketAddr {
    let mut shifted = addr;
    if let (Some(index), port) = (shard, addr.port()) {
        if port != 0 {
            shifted.set_port(port.saturating_add(u16::try_from(index).unwrap_or(u16::MAX)));
        }
    }
    shifted
}

/// Binds the endpoint's address now (a port in use is refused before the run sends anything); the
/// listener is served later by [`MetricsServer::start`].
pub fn bind(addr: SocketAddr) -> Result<std::net::TcpListener, BindError> {
    let listener = std::net::TcpListener::bind(addr).map_err(|source| match source.kind() {
        std::io::ErrorKind::AddrInUse => BindError::InUse { addr },
        _ => BindError::Other { addr, source },
    })?;
    listener
        .set_nonblocking(true)
        .map_err(|source| BindError::Other { addr, source })?;
    Ok(listener)
}

/// The endpoint, serving until dropped or [`MetricsServer::stop`]ped.
#[derive(Debug)]
pub struct MetricsServer {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl MetricsServer {
    /// Serves `listener` on `runtime`: `GET /metrics` renders `live` (with a `shard` label on every
    /// series when `shard` is given); any other path is a 404.
    pub fn start(
        listener: std::net::TcpListener,
        live: Arc<LiveRun>,
        shard: Option<u32>,
        runtime: &tokio::runtime::Handle,
    ) -> std::io::Result<MetricsServer> {
        let addr = listener.local_addr()?;
        let listener = {
            let _entered = runtime.enter();
            tokio::net::TcpListener::from_std(listener)?
        };
        let exposition = Arc::new(Exposition { live, shard });
        let task = runtime.spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let exposition = exposition.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(
                        move |request: hyper::Request<hyper::body::Incoming>| {
                            let response = exposition.respond(request.uri().path());
                            async move { Ok::<_, std::convert::Infallible>(response) }
                        },
                    );
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        Ok(MetricsServer { addr, task })
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops listening.
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a scrape renders.
#[derive(Debug)]
struct Exposition {
    live: Arc<LiveRun>,
    shard: Option<u32>,
}

/// OpenMetrics 1.0's content type.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Exposition {
    fn respond(&self, path: &str) -> hyper::Response<Full<Bytes>> {
        let (status, content_type, body) = if path == "/metrics" {
            match render(&self.live.snapshot(), self.shard, &ProcessFigures::read()) {
                Ok(text) => (200, CONTENT_TYPE, text),
                Err(error) => (500, "text/plain", format!("cannot render: {error}\n")),
            }
        } else {
            (
                404,
                "text/plain",
                "agentx serves /metrics only\n".to_string(),
            )
        };
        let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
        if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
            response
                .headers_mut()
                .insert(hyper::header::CONTENT_TYPE, value);
        }
        response
    }
}

/// The process's own cost, read from `/proc/self` (`None` elsewhere).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ProcessFigures {
    /// User and system CPU seconds.
    pub cpu_seconds: Option<f64>,
    /// Resident memory, bytes.
    pub resident_bytes: Option<u64>,
}

/// `/proc`'s clock ticks per second (USER_HZ, 100 on every Linux architecture's ABI).
const USER_HZ: f64 = 100.0;

impl ProcessFigures {
    /// The figures now.
    pub fn read() -> ProcessFigures {
        let cpu_seconds = std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|stat| cpu_ticks(&stat))
            .map(|ticks| ticks as f64 / USER_HZ);
        let resident_bytes = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
                let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
                Some(kib * 1024)
            });
        ProcessFigures {
            cpu_seconds,
            resident_bytes,
        }
    }
}

/// utime + stime of a `/proc/<pid>/stat` line (fields 14 and 15; the command name in field 2 may
/// hold spaces and parentheses, so fields are counted after its last `)`).
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// The exposition of one snapshot: every series of [`SERIES`], OpenMetrics text.
pub fn render(
    snapshot: &LiveSnapshot,
    shard: Option<u32>,
    process: &ProcessFigures,
) -> Result<String, std::fmt::Error> {
    let labels = shard.map(|index| (Cow::Borrowed("shard"), Cow::Owned(index.to_string())));
    let mut registry = Registry::with_labels(labels.into_iter());
    registry.register_collector(Box::new(SnapshotCollector {
        snapshot: snapshot.clone(),
        process: *process,
    }));
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry)?;
    Ok(text)
}

/// One snapshot, as a collector the registry encodes.
#[derive(Debug)]
struct SnapshotCollector {
    snapshot: LiveSnapshot,
    process: ProcessFigures,
}

const PHASES: [Phase; 2] = [Phase::Warmup, Phase::Profiling];

/// The `# HELP` text of the series `name` (its stability tag first).
fn help(name: &str) -> String {
    SERIES
        .iter()
        .find(|series| series.name == name)
        .map(|series| format!("{} {}", series.stability.tag(), series.help))
        .unwrap_or_default()
}

type Labels<'a> = [(&'static str, &'a str)];

impl SnapshotCollector {
    fn counter_by_phase(
        encoder: &mut DescriptorEncoder,
        name: &'static str,
        value: impl Fn(usize) -> u64,
    ) -> Result<(), std::fmt::Error> {
        let mut metric = encoder.encode_descriptor(name, &help(name), None, MetricType::Counter)?;
        for (index, phase) in PHASES.iter().enumerate() {
            let labels: &Labels = &[("phase", phase.as_str())];
            ConstCounter::new(value(index)).encode(metric.encode_family(&labels)?)?;
        }
        Ok(())
    }

    fn histogram_by_phase(
        encoder: &mut DescriptorEncoder,
        name: &'static str,
        buckets_of: impl Fn(&PhaseTotals) -> &Buckets,
        totals: &[PhaseTotals; 2],
    ) -> Result<(), std::fmt::Error> {
        let full = format!("{name}_seconds");
        let mut metric = encoder.encode_descriptor(
            name,
            &help(&full),
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for (index, phase) in PHASES.iter().enumerate() {
            let labels: &Labels = &[("phase", phase.as_str())];
            let buckets = buckets_of(&totals[index]);
            metric
                .encode_family(&labels)?
                .encode_histogram::<prometheus_client::encoding::NoLabelSet>(
                    buckets.sum,
                    buckets.count,
                    &buckets.cumulative(),
                    None,
                )?;
        }
        Ok(())
    }

    fn gauge<N>(
        encoder: &mut DescriptorEncoder,
        name: &'static str,
        unit: Option<&Unit>,
        value: N,
    ) -> Result<(), std::fmt::Error>
    where
        ConstGauge<N>: EncodeMetric,
    {
        let full = match unit {
            Some(Unit::Bytes) => format!("{name}_bytes"),
            _ => name.to_string(),
        };
        let metric = encoder.encode_descriptor(name, &help(&full), unit, MetricType::Gauge)?;
        ConstGauge::new(value).encode(metric)
    }

    fn requests(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = &self.snapshot;
        Self::counter_by_phase(encoder, "agentx_requests_sent", |index| {
            snapshot.sent[index]
        })?;
        let mut in_flight = encoder.encode_descriptor(
            "agentx_requests_in_flight",
            &help("agentx_requests_in_flight"),
            None,
            MetricType::Gauge,
        )?;
        for (index, phase) in PHASES.iter().enumerate() {
            let labels: &Labels = &[("phase", phase.as_str())];
            ConstGauge::new(snapshot.in_flight[index] as i64)
                .encode(in_flight.encode_family(&labels)?)?;
        }
        let mut completed = encoder.encode_descriptor(
            "agentx_requests_completed",
            &help("agentx_requests_completed"),
            None,
            MetricType::Counter,
        )?;
        for (index, phase) in PHASES.iter().enumerate() {
            let totals = &snapshot.totals[index];
            for (outcome, count) in [
                ("ok", totals.ok),
                ("failed", totals.failed),
                ("cancelled", totals.cancelled),
                ("context_overflow", totals.context_overflows),
            ] {
                let labels: &Labels = &[("phase", phase.as_str()), ("outcome", outcome)];
                ConstCounter::new(count).encode(completed.encode_family(&labels)?)?;
            }
        }
        let totals = &snapshot.totals;
        Self::counter_by_phase(encoder, "agentx_input_tokens", |index| {
            totals[index].input_tokens
        })?;
        Self::counter_by_phase(encoder, "agentx_output_tokens", |index| {
            totals[index].output_tokens
        })?;
        Self::counter_by_phase(encoder, "agentx_cached_tokens", |index| {
            totals[index].cached_tokens
        })?;
        Self::histogram_by_phase(encoder, "agentx_time_to_first_token", |t| &t.ttft_s, totals)?;
        Self::histogram_by_phase(encoder, "agentx_inter_token_latency", |t| &t.itl_s, totals)?;
        Self::histogram_by_phase(encoder, "agentx_request_latency", |t| &t.latency_s, totals)?;
        Self::histogram_by_phase(encoder, "agentx_send_lag", |t| &t.send_lag_s, totals)
    }

    fn lanes_and_stage(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let snapshot = &self.snapshot;
        Self::gauge(encoder, "agentx_lanes", None, snapshot.lanes as f64)?;
        Self::gauge(
            encoder,
            "agentx_lanes_busy",
            None,
            snapshot.lanes_busy as f64,
        )?;
        Self::gauge(
            encoder,
            "agentx_sessions_active",
            None,
            snapshot.sessions_active as f64,
        )?;
        let stage = &snapshot.stage;
        if !stage.name.is_empty() {
            let mut metric = encoder.encode_descriptor(
                "agentx_stage",
                &help("agentx_stage"),
                None,
                MetricType::Gauge,
            )?;
            let labels: &Labels = &[("stage", stage.name.as_str())];
            ConstGauge::new(1i64).encode(metric.encode_family(&labels)?)?;
        }
        let progress = if stage.length == 0 {
            0.0
        } else {
            (stage.position as f64 / stage.length as f64).min(1.0)
        };
        Self::gauge(encoder, "agentx_stage_progress_ratio", None, progress)
    }

    fn process(&self, encoder: &mut DescriptorEncoder) -> Result<(), std::fmt::Error> {
        if let Some(seconds) = self.process.cpu_seconds {
            let metric = encoder.encode_descriptor(
                "process_cpu_seconds",
                &help("process_cpu_seconds"),
                None,
                MetricType::Counter,
            )?;
            ConstCounter::new(seconds).encode(metric)?;
        }
        if let Some(bytes) = self.process.resident_bytes {
            Self::gauge(
                encoder,
                "process_resident_memory",
                Some(&Unit::Bytes),
                i64::try_from(bytes).unwrap_or(i64::MAX),
            )?;
        }
        Ok(())
    }
}

impl prometheus_client::collector::Collector for SnapshotCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        self.requests(&mut encoder)?;
        self.lanes_and_stage(&mut encoder)?;
        self.process(&mut encoder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::testkit;

    fn sample() -> LiveSnapshot {
        let live = LiveRun::new(&[0, 1, 2]);
        let _in_flight = live.begin_request(Phase::Profiling, 1);
        live.set_stage("profiling", 30);
        live.set_progress(15, "");
        let mut warm = testkit::rec(0, &[10, 20], 500, 2);
        warm.phase = Phase::Warmup;
        live.absorb(&warm);
        live.absorb(&testkit::rec(100, &[50, 60, 70], 1000, 3));
        live.absorb(&testkit::failed(200, 900));
        live.snapshot()
    }

    /// `(name with labels, value)` of each sample line.
    fn samples(text: &str) -> Vec<(String, f64)> {
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .filter_map(|line| {
                let (name, value) = line.rsplit_once(' ')?;
                Some((name.to_string(), value.parse().ok()?))
            })
            .collect()
    }

    fn value(text: &str, name: &str) -> Option<f64> {
        samples(text)
            .into_iter()
            .find(|(sample, _)| sample == name)
            .map(|(_, value)| value)
    }

    #[test]
    fn every_listed_series_is_served_with_its_stability_and_the_values_of_the_snapshot() {
        let process = ProcessFigures {
            cpu_seconds: Some(1.5),
            resident_bytes: Some(4096),
        };
        let text = render(&sample(), None, &process).unwrap();
        for series in SERIES {
            assert!(
                text.contains(&format!(
                    "# HELP {} {}",
                    series.name,
                    series.stability.tag()
                )),
                "{} missing:\n{text}",
                series.name
            );
            assert!(
                text.contains(&format!("# TYPE {} {}", series.name, series.kind)),
                "{}",
                series.name
            );
        }
        assert_eq!(
            value(&text, r#"agentx_requests_sent_total{phase="profiling"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(&text, r#"agentx_requests_in_flight{phase="profiling"}"#),
            Some(1.0)
        );
        assert_eq!(
            value(
                &text,
                r#"agentx_requests_completed_total{phase="profiling",outcome="failed"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            value(&text, r#"agentx_input_tokens_total{phase="profiling"}"#),
            Some(1000.0)
        );
        assert_eq!(
            value(&text, r#"agentx_input_tokens_total{phase="warmup"}"#),
            Some(500.0)
        );
        assert_eq!(
            value(
                &text,
                r#"agentx_time_to_first_token_seconds_count{phase="profiling"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &text,
                r#"agentx_time_to_first_token_seconds_bucket{le="0.06",phase="profiling"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            value(
                &text,
                r#"agentx_time_to_first_token_seconds_bucket{le="0.04",phase="profiling"}"#
            ),
            Some(0.0)
        );
        assert_eq!(value(&text, "agentx_lanes_busy"), Some(1.0));
        assert_eq!(
            value(&text, r#"agentx_stage{stage="profiling"}"#),
            Some(1.0)
        );
        assert_eq!(value(&text, "agentx_stage_progress_ratio"), Some(0.5));
        assert_eq!(value(&text, "process_cpu_seconds_total"), Some(1.5));
        assert_eq!(value(&text, "process_resident_memory_bytes"), Some(4096.0));
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn a_shard_labels_every_sample_and_listens_on_its_own_port() {
        let text = render(&sample(), Some(3), &ProcessFigures::default()).unwrap();
        for (name, _) in samples(&text) {
            assert!(name.contains(r#"shard="3""#), "{name}");
        }
        let addr: SocketAddr = "127.0.0.1:9400".parse().unwrap();
        assert_eq!(shard_addr(addr, Some(3)).port(), 9403);
        assert_eq!(shard_addr(addr, None).port(), 9400);
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        assert_eq!(shard_addr(any, Some(3)).port(), 0);
    }

    #[test]
    fn a_port_in_use_is_refused_with_the_flag_and_the_fix() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let error = bind(addr).unwrap_err().to_string();
        assert!(
            error.contains(&format!("--metrics-listen {addr}")),
            "{error}"
        );
        assert!(
            error.contains("in use") && error.contains("port 0"),
            "{error}"
        );
    }

    #[test]
    fn the_cpu_ticks_are_read_past_a_command_name_with_spaces() {
        let stat = "4242 (agentx (x) y) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0";
        assert_eq!(cpu_ticks(stat), Some(300));
        assert!(ProcessFigures::read().cpu_seconds.is_some());
    }
}
