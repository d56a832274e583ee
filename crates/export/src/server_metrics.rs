//! `server_metrics_export.json` and `.csv`: the scraped `/metrics` of a run, aggregated over the
//! profiling window in aiperf's schema (aiperf `docs/server-metrics/server-metrics-json-schema.md`).
//!
//! Per metric (counters named without `_total`), per series (endpoint URL and labels):
//! - counters: `total` (the increase from the window's first scrape to its last; a series first
//!   seen inside the window counts from 0) and `rate = total / duration`, plus
//!   `rate_avg/min/max/std` over the scrape-to-scrape rates when the counter moved. A counter that
//!   went backwards (a server restart) or went missing inside the window gets `total` and `rate`
//!   `null` and a `note` naming the scrapes: no negative or mixed increase is published;
//! - gauges and untyped (`unknown`) metrics: `avg, min, max, std` (sample, ddof 1) and `p1..p99`
//!   (linear interpolation) of the values scraped inside the window;
//! - histograms: `count`, `sum`, `avg`, `count_rate`, `sum_rate`, `p*_estimate` interpolated
//!   linearly inside the buckets of the window's bucket deltas (the standard Prometheus estimate,
//!   not aiperf's polynomial one), and per-bucket delta `buckets` (the counters' rule for resets).
//!
//! Window edges, by scrape index: the profiling window runs from the `profiling_start` boundary
//! scrape (taken after the warmup drained, before the first profiling request) to the
//! `profiling_complete` one (after the last profiling request returned), as agentx-harness 1.0.12
//! selects its window by phase-tagged scrapes; `warmup_metrics` from `warmup_start` to
//! `profiling_start`. Times never decide an edge, so a warmup that ends on the same millisecond as
//! profiling begins is still on the right side. An edge whose boundary scrape is missing (failed
//! twice, a log without boundaries, a run killed before it) falls back to the periodic scrapes
//! around the replay's window (the last at or before its start, the first at or after its end) and
//! `summary.profiling_window.notes` says so (the rule's home is
//! `agentx_metrics::scrape_log::window`). The rate divides by the time between the two edge
//! scrapes. `summary.boundary_scrapes` lists every boundary scrape (phase-tagged, as aiperf tags
//! them) and `summary.phase_time_ranges` each phase's range; the CSV repeats both as `#` lines.
//! Timestamps (`*_ns`) are Unix nanoseconds;
//! `start_time`/`end_time` are UTC without an offset, as aiperf writes them. Each endpoint's fetch
//! counts, failures included, are in `summary.endpoint_info`. Both files are replaced atomically.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::{json, Value};

use agentx_metrics::percentile;
use agentx_metrics::prometheus::MetricType;
use agentx_metrics::scrape_log::window::{span, Edges, Phase, Span};
use agentx_metrics::scrape_log::{
    window, Boundary, EndpointLog, FailureCounts, Fetch, FetchOutcome, HistogramTrack, ScrapeLog,
    SeriesLog, Track,
};
use agentx_metrics::stats::PERCENTILES;
use agentx_record::dist::{self, Deviation};

/// The JSON file name in the artifact directory.
pub const JSON_FILE: &str = "server_metrics_export.json";
/// The CSV file name in the artifact directory.
pub const CSV_FILE: &str = "server_metrics_export.csv";

/// Errors of writing the export.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// An export file could not be written.
    #[error("cannot write {path}: {source}; check that the artifact directory is writable")]
    Write {
        /// The file being written.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The profiling window given ends before it starts.
    #[error("the profiling window ends ({end_ns} ns) before it starts ({start_ns} ns)")]
    Window {
        /// The window's start, in host-clock nanoseconds.
        start_ns: u64,
        /// The window's end, in host-clock nanoseconds.
        end_ns: u64,
    },
}

/// Run identity for the top-level fields.
#[derive(Debug, Clone, Default)]
pub struct ExportMeta {
    /// The run's unique id; `None` leaves it out.
    pub benchmark_id: Option<String>,
    /// The resolved configuration (`input_config`); `{}` when `Null`.
    pub input_config: Value,
}

/// An object whose keys keep the order they were added in.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Ordered(Vec<(String, Value)>);

impl Ordered {
    fn put(&mut self, key: &str, value: impl Into<Value>) {
        self.0.push((key.to_string(), value.into()));
    }

    /// The value of `key`.
    pub(crate) fn get(&self, key: &str) -> Option<&Value> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }
}

impl Serialize for Ordered {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            map.serialize_entry(k, v)?;
        }
        map.end()
    }
}

/// A number for JSON: integral values as integers (counts read `19`, not `19.0`), non-finite
/// values as `null`.
fn num(value: f64) -> Value {
    if !value.is_finite() {
        Value::Null
    } else if value.fract() == 0.0 && value.abs() < 9.0e15 {
        json!(value as i64)
    } else {
        json!(value)
    }
}

/// One aggregated series.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SeriesStats {
    pub(crate) endpoint_url: String,
    pub(crate) labels: BTreeMap<String, String>,
    pub(crate) stats: Ordered,
    /// Histograms only: bucket bound (as served) to delta count, in increasing bound.
    pub(crate) buckets: Option<Ordered>,
    /// Counters and gauges: one entry per second of the window (`start_ns` as a window offset, a
    /// gauge's `avg`, a counter's `total` and `rate`), for time-series plots.
    pub(crate) timeslices: Vec<Ordered>,
    /// Why a counter's or histogram's increase is not published, or how it was counted.
    pub(crate) note: Option<String>,
}

/// Width of the per-series time slices.
pub(crate) const SLICE_NS: u64 = 1_000_000_000;
/// More slices than this (a window over a day) are not written per series.
const MAX_SERIES_SLICES: u64 = 86_400;

/// Per-second slices of one counter or gauge series over `window`.
fn series_slices(
    kind: MetricType,
    track: &Track,
    endpoint: &EndpointCtx<'_>,
    window: (u64, u64),
) -> Vec<Ordered> {
    let (start, end) = window;
    if end <= start || (end - start) / SLICE_NS > MAX_SERIES_SLICES {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut slice_start = start;
    while slice_start < end {
        let slice_end = (slice_start + SLICE_NS).min(end);
        let stats = span(endpoint.e, (slice_start, slice_end)).and_then(|s| match kind {
            MetricType::Counter => {
                counter_stats(track, endpoint, &s).map(|(slice_json, _)| slice_json)
            }
            _ => gauge_stats(track, &s),
        });
        let mut slice_json = Ordered::default();
        slice_json.put("start_ns", slice_start - start);
        slice_json.put("end_ns", slice_end - start);
        if let Some(slice_stats) = stats {
            for k in ["avg", "total", "rate"] {
                if let Some(value) = slice_stats.get(k) {
                    slice_json.put(k, value.clone());
                }
            }
        }
        out.push(slice_json);
        slice_start = slice_end;
    }
    out
}

/// One aggregated metric family.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MetricStats {
    pub(crate) kind: MetricType,
    pub(crate) description: String,
    pub(crate) unit: Option<String>,
    pub(crate) series: Vec<SeriesStats>,
}

/// An endpoint's log with the clock that dates its scrapes (for the notes).
struct EndpointCtx<'a> {
    e: &'a EndpointLog,
    clock: agentx_record::Clock,
}

impl EndpointCtx<'_> {
    /// The time of scrape `scrape_index`, as the export writes times.
    fn at(&self, scrape_index: u32) -> String {
        iso_utc(self.clock.unix_ns(self.e.scrape_ns[scrape_index as usize]))
    }
}

/// The edges of `phase` on endpoint `endpoint_log` ([`window::edges`]), its notes dating scrapes as
/// the export writes times.
fn edges(endpoint_log: &EndpointLog, log: &ScrapeLog, phase: &Phase) -> Option<Edges> {
    window::edges(endpoint_log, phase, &|ns| iso_utc(log.clock.unix_ns(ns)))
}

/// Mean and sample deviation, over the values in scrape order (aiperf's gauge statistics).
fn mean_std(values: &[f64]) -> (f64, f64) {
    let mean = dist::mean(values);
    (mean, dist::std(values, mean, Deviation::Sample))
}

fn gauge_stats(track: &Track, span: &Span) -> Option<Ordered> {
    let mut values: Vec<f64> = span.inside.clone().filter_map(|i| track.at(i)).collect();
    if values.is_empty() {
        // No scrape fell inside the window: the end state stands for it.
        values.extend(track.at(span.to));
    }
    values.retain(|x| !x.is_nan());
    if values.is_empty() {
        return None;
    }
    let (mean, std) = mean_std(&values);
    values.sort_unstable_by(f64::total_cmp);
    let mut stats = Ordered::default();
    stats.put("avg", num(mean));
    stats.put("min", num(values[0]));
    stats.put("max", num(values[values.len() - 1]));
    stats.put("std", num(std));
    for (k, p) in PERCENTILES {
        stats.put(k, num(percentile(&values, p).unwrap_or(f64::NAN)));
    }
    Some(stats)
}

/// Why a counter's increase over a span is not published: it went backwards (a server restart)
/// or went missing between two of the span's scrapes.
fn broken_counter(endpoint: &EndpointCtx<'_>, values: &[(u32, Option<f64>)]) -> Option<String> {
    let time_of = |i: u32| endpoint.at(i);
    let mut prev: Option<(u32, f64)> = None;
    for &(i, value) in values {
        match (prev, value) {
            (Some((pi, pv)), Some(value)) if value < pv => {
                return Some(format!(
                    "went backwards from {pv} (scrape at {}) to {value} (scrape at {}): a server \
                     restart? Its increase over the window is not published",
                    time_of(pi),
                    time_of(i)
                ))
            }
            (Some((pi, _)), None) => {
                return Some(format!(
                    "went missing between the scrapes at {} and {}: its increase over the window \
                     is not published",
                    time_of(pi),
                    time_of(i)
                ))
            }
            _ => {}
        }
        if let Some(value) = value {
            prev = Some((i, value));
        }
    }
    None
}

/// A counter's `total` (its increase from the span's first scrape to its last) and rates. A series
/// first seen inside the span counts from 0 (a counter is born at 0). A counter that went
/// backwards or went missing inside the span gets `total` and `rate` `null` and the note of why:
/// no negative or mixed increase is ever published.
fn counter_stats(
    track: &Track,
    endpoint: &EndpointCtx<'_>,
    span: &Span,
) -> Option<(Ordered, Option<String>)> {
    let values: Vec<(u32, Option<f64>)> = (span.from..=span.to).map(|i| (i, track.at(i))).collect();
    let first_present = values.iter().position(|(_, v)| v.is_some())?;
    let mut stats = Ordered::default();
    if let Some(why) = broken_counter(endpoint, &values[first_present..]) {
        stats.put("total", Value::Null);
        stats.put("rate", Value::Null);
        return Some((stats, Some(why)));
    }
    let born = first_present > 0;
    let base = if born {
        0.0
    } else {
        values[0].1.unwrap_or(0.0)
    };
    let last = values.iter().rev().find_map(|(_, v)| *v).unwrap_or(base);
    let total = last - base;
    let mut rates = Vec::new();
    let mut prev: Option<(u64, f64)> = None;
    for &(i, value) in &values[first_present..] {
        let Some(value) = value else { continue };
        let now = endpoint.e.scrape_ns[i as usize];
        if let Some((prev_ns, prev_value)) = prev {
            if now > prev_ns {
                rates.push((value - prev_value) / ((now - prev_ns) as f64 / 1e9));
            }
        }
        prev = Some((now, value));
    }
    stats.put("total", num(total));
    stats.put(
        "rate",
        num(if span.secs > 0.0 {
            total / span.secs
        } else {
            0.0
        }),
    );
    if total > 0.0 && !rates.is_empty() {
        let (mean, std) = mean_std(&rates);
        stats.put("rate_avg", num(mean));
        stats.put(
            "rate_min",
            num(rates.iter().copied().fold(f64::INFINITY, f64::min)),
        );
        stats.put(
            "rate_max",
            num(rates.iter().copied().fold(f64::NEG_INFINITY, f64::max)),
        );
        stats.put("rate_std", num(std));
    }
    let note = born.then(|| {
        format!(
            "first seen at the scrape at {}, inside the window: counted from 0",
            endpoint.at(values[first_present].0)
        )
    });
    Some((stats, note))
}

/// Estimate quantile `q` (0..=1) from cumulative bucket counts, interpolating linearly inside the
/// bucket that holds it (from 0 below the first bound when that is positive). A quantile in the
/// `+Inf` bucket reads as the highest finite bound.
pub(crate) fn bucket_quantile(bounds: &[f64], cumulative: &[f64], q: f64) -> Option<f64> {
    let total = *cumulative.last()?;
    if total <= 0.0 || bounds.len() != cumulative.len() {
        return None;
    }
    let rank = q * total;
    let bucket = cumulative.iter().position(|&c| c >= rank)?;
    if bounds[bucket].is_infinite() {
        return bounds.iter().rev().find(|b| b.is_finite()).copied();
    }
    let (lower, below) = if bucket == 0 {
        (if bounds[0] > 0.0 { 0.0 } else { bounds[0] }, 0.0)
    } else {
        (bounds[bucket - 1], cumulative[bucket - 1])
    };
    let inside = cumulative[bucket] - below;
    if inside <= 0.0 {
        return Some(bounds[bucket]);
    }
    Some(lower + (bounds[bucket] - lower) * (rank - below) / inside)
}

/// A histogram's increase over the span: `count`, `sum`, their rates, the mean and the percentile
/// estimates of the bucket deltas, and the delta of each bucket. One that went backwards or went
/// missing inside the span gets `count` `null`, no buckets and the note of why (as a counter).
fn histogram_stats(
    histogram: &HistogramTrack,
    endpoint: &EndpointCtx<'_>,
    span: &Span,
) -> Option<(Ordered, Option<Ordered>, Option<String>)> {
    let values: Vec<(u32, Option<f64>)> = (span.from..=span.to)
        .map(|i| (i, histogram.count.at(i)))
        .collect();
    let first_present = values.iter().position(|(_, quantile)| quantile.is_some())?;
    let tracks = std::iter::once(&histogram.count)
        .chain(std::iter::once(&histogram.sum))
        .chain(histogram.buckets.iter().map(|b| &b.track));
    for t in tracks {
        let quantile: Vec<(u32, Option<f64>)> = (span.from + first_present as u32..=span.to)
            .map(|i| (i, t.at(i)))
            .collect();
        if let Some(why) = broken_counter(endpoint, &quantile) {
            let mut stats = Ordered::default();
            stats.put("count", Value::Null);
            return Some((stats, None, Some(why)));
        }
    }
    // A histogram first seen inside the span counts from 0.
    let born = first_present > 0;
    let delta = |t: &Track| {
        let base = if born { None } else { t.at(span.from) };
        t.at(span.to).unwrap_or(0.0) - base.unwrap_or(0.0)
    };
    let count = delta(&histogram.count);
    let sum = delta(&histogram.sum);
    let deltas: Vec<f64> = histogram.buckets.iter().map(|b| delta(&b.track)).collect();
    let mut buckets = Ordered::default();
    for (b, d) in histogram.buckets.iter().zip(&deltas) {
        buckets.put(&b.le_text, num(*d));
    }
    let note = born.then(|| {
        format!(
            "first seen at the scrape at {}, inside the window: counted from 0",
            endpoint.at(values[first_present].0)
        )
    });
    let mut stats = Ordered::default();
    stats.put("count", num(count));
    if count <= 0.0 {
        return Some((stats, Some(buckets), note));
    }
    let secs = span.secs;
    stats.put(
        "count_rate",
        num(if secs > 0.0 { count / secs } else { 0.0 }),
    );
    stats.put("sum", num(sum));
    stats.put("sum_rate", num(if secs > 0.0 { sum / secs } else { 0.0 }));
    stats.put("avg", num(sum / count));
    let bounds: Vec<f64> = histogram.buckets.iter().map(|b| b.le).collect();
    for (k, p) in PERCENTILES {
        let quantile = bucket_quantile(&bounds, &deltas, p / 100.0).unwrap_or(f64::NAN);
        stats.put(&format!("{k}_estimate"), num(quantile));
    }
    Some((stats, Some(buckets), note))
}

/// The unit aiperf infers from a metric name (and HELP text).
pub(crate) fn infer_unit(name: &str, kind: MetricType, help: &str) -> Option<&'static str> {
    let lowered = help.to_ascii_lowercase();
    if lowered.contains("1 means 100 percent") {
        return Some("ratio");
    }
    for (needle, unit) in [
        ("in milliseconds", "milliseconds"),
        ("in seconds", "seconds"),
        ("in bytes", "bytes"),
        ("number of cached tokens", "tokens"),
        ("number of queried tokens", "tokens"),
        (" tokens", "tokens"),
    ] {
        if lowered.contains(needle) && !name.ends_with("_count") {
            return Some(unit);
        }
    }
    let base = name.rsplit(':').next().unwrap_or(name);
    if base == "request_success" {
        return Some("requests");
    }
    const SUFFIXES: &[(&str, &str)] = &[
        ("_seconds", "seconds"),
        ("_milliseconds", "milliseconds"),
        ("_ms", "milliseconds"),
        ("_nanoseconds", "nanoseconds"),
        ("_ns", "nanoseconds"),
        ("_bytes", "bytes"),
        ("_kilobytes", "kilobytes"),
        ("_megabytes", "megabytes"),
        ("_gigabytes", "gigabytes"),
        ("_tokens", "tokens"),
        ("_requests", "requests"),
        ("_reqs", "requests"),
        ("_errors", "errors"),
        ("_error_count", "errors"),
        ("_blocks", "blocks"),
        ("_block_count", "blocks"),
        ("_gb_s", "gb/s"),
        ("_ratio", "ratio"),
        ("_percent", "percent"),
        ("_perc", "percent"),
        ("_celsius", "celsius"),
        ("_joules", "joule"),
        ("_watts", "watt"),
        ("_count", "count"),
    ];
    SUFFIXES
        .iter()
        .find(|(s, _)| base.ends_with(s))
        .map(|(_, u)| *u)
        .or((kind == MetricType::Counter).then_some("count"))
}

/// One phase aggregated: every metric's series, and what the export says about its edges.
#[derive(Debug, Clone, Default)]
pub(crate) struct Aggregate {
    pub(crate) metrics: BTreeMap<String, MetricStats>,
    /// Every endpoint's window ran from its start boundary scrape to its end boundary scrape.
    pub(crate) exact: bool,
    /// The earliest start edge and the latest end edge over the endpoints (clock offsets of the
    /// scrapes), `None` when no endpoint had a scrape.
    pub(crate) range: Option<(u64, u64)>,
    /// The edges that are not boundary scrapes, and the series whose increase is not published.
    pub(crate) notes: Vec<String>,
}

/// Aggregate every endpoint's series over `phase`, from its boundary scrapes ([`edges`]).
pub(crate) fn aggregate_phase(log: &ScrapeLog, phase: &Phase) -> Aggregate {
    let mut agg = Aggregate {
        exact: true,
        ..Aggregate::default()
    };
    for e in &log.endpoints {
        let Some(edges) = edges(e, log, phase) else {
            continue;
        };
        let ep = EndpointCtx {
            e,
            clock: log.clock,
        };
        let span = &edges.span;
        agg.exact &= edges.exact;
        agg.notes.extend(edges.notes);
        let range = (
            e.scrape_ns[span.from as usize],
            e.scrape_ns[span.to as usize],
        );
        agg.range = Some(match agg.range {
            Some((a, b)) => (a.min(range.0), b.max(range.1)),
            None => range,
        });
        // Per-second slices run over the span's scrapes when its edges are boundary scrapes.
        let slice_window = if edges.exact { range } else { phase.window };
        for (name, fam) in &e.families {
            for (labels, series) in &fam.series {
                let slices = match series {
                    SeriesLog::Scalar(t) => series_slices(fam.kind, t, &ep, slice_window),
                    SeriesLog::Histogram(_) => Vec::new(),
                };
                let got = match (fam.kind, series) {
                    (MetricType::Counter, SeriesLog::Scalar(t)) => {
                        counter_stats(t, &ep, span).map(|(o, note)| (o, None, note))
                    }
                    (MetricType::Gauge | MetricType::Untyped, SeriesLog::Scalar(t)) => {
                        gauge_stats(t, span).map(|o| (o, None, None))
                    }
                    (MetricType::Histogram, SeriesLog::Histogram(h)) => {
                        histogram_stats(h, &ep, span)
                    }
                    _ => None,
                };
                let Some((stats, buckets, note)) = got else {
                    continue;
                };
                let metric = agg
                    .metrics
                    .entry(name.clone())
                    .or_insert_with(|| MetricStats {
                        kind: fam.kind,
                        description: fam.help.clone(),
                        unit: infer_unit(name, fam.kind, &fam.help).map(str::to_string),
                        series: Vec::new(),
                    });
                if metric.kind != fam.kind {
                    // The same name with another type on another endpoint: not comparable.
                    continue;
                }
                if let Some(note_text) = &note {
                    let label_list: Vec<String> =
                        labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
                    agg.notes.push(format!(
                        "{}: {name}{{{}}} {note_text}",
                        e.url,
                        label_list.join(",")
                    ));
                }
                metric.series.push(SeriesStats {
                    endpoint_url: e.url.clone(),
                    labels: labels.iter().cloned().collect(),
                    stats,
                    buckets,
                    timeslices: slices,
                    note,
                });
            }
        }
    }
    agg
}

/// `YYYY-MM-DDTHH:MM:SS.ffffff` (UTC) of Unix nanoseconds.
pub(crate) fn iso_utc(unix_ns: u64) -> String {
    // aiperf writes this file's times without the zone suffix its aggregate file carries.
    let mut time = super::aiperf::iso_utc(unix_ns);
    time.pop();
    time
}

fn endpoint_info(endpoint_log: &EndpointLog, log: &ScrapeLog, window: (u64, u64)) -> Ordered {
    let unix = |ns: u64| log.clock.unix_ns(ns);
    let ok: Vec<&Fetch> = endpoint_log
        .fetches
        .iter()
        .filter(|f| matches!(f.outcome, FetchOutcome::Ok { .. }))
        .collect();
    let updates: Vec<u64> = endpoint_log
        .fetches
        .iter()
        .filter_map(|f| match f.outcome {
            FetchOutcome::Ok { changed: true } => Some(f.start_ns),
            _ => None,
        })
        .collect();
    let mut info = Ordered::default();
    info.put("total_fetches", endpoint_log.fetches.len() as u64);
    info.put(
        "first_fetch_ns",
        endpoint_log.fetches.first().map(|f| unix(f.start_ns)),
    );
    info.put(
        "last_fetch_ns",
        endpoint_log.fetches.last().map(|f| unix(f.start_ns)),
    );
    info.put(
        "avg_fetch_latency_ms",
        (!ok.is_empty())
            .then(|| ok.iter().map(|f| f.latency_ns as f64).sum::<f64>() / ok.len() as f64 / 1e6),
    );
    info.put("unique_updates", updates.len() as u64);
    info.put("first_update_ns", updates.first().map(|&t| unix(t)));
    info.put("last_update_ns", updates.last().map(|&t| unix(t)));
    let dur = match (updates.first(), updates.last()) {
        (Some(a), Some(b)) => (b - a) as f64 / 1e9,
        _ => 0.0,
    };
    info.put("duration_seconds", dur);
    let mut gaps: Vec<f64> = updates
        .windows(2)
        .map(|w| (w[1] - w[0]) as f64 / 1e6)
        .collect();
    info.put(
        "avg_update_interval_ms",
        (!gaps.is_empty()).then(|| gaps.iter().sum::<f64>() / gaps.len() as f64),
    );
    gaps.sort_unstable_by(f64::total_cmp);
    info.put(
        "median_update_interval_ms",
        if gaps.len() >= 2 {
            percentile(&gaps, 50.0)
        } else {
            None
        },
    );
    let in_window = |f: &&Fetch| f.start_ns >= window.0 && f.start_ns <= window.1;
    info.put("successful_fetches", ok.len() as u64);
    info.put("failed_fetches", endpoint_log.failures.total());
    info.put(
        "fetches_in_window",
        endpoint_log.fetches.iter().filter(in_window).count() as u64,
    );
    info.put(
        "failed_fetches_in_window",
        endpoint_log
            .fetches
            .iter()
            .filter(in_window)
            .filter(|f| !matches!(f.outcome, FetchOutcome::Ok { .. }))
            .count() as u64,
    );
    let FailureCounts {
        connect,
        status,
        timeout,
        body,
        parse,
    } = endpoint_log.failures;
    info.put(
        "failures",
        json!({"connect": connect, "status": status, "timeout": timeout, "body": body, "parse": parse}),
    );
    info.put("last_error", endpoint_log.last_error.clone());
    info
}

/// The metrics of one phase as the JSON file keys them: by name, each with its series.
fn metrics_json(metrics: &BTreeMap<String, MetricStats>) -> Value {
    let mut metric_blocks = Ordered::default();
    for (name, m) in metrics {
        let series: Vec<Value> = m
            .series
            .iter()
            .map(|s| {
                let mut series_json = Ordered::default();
                series_json.put("endpoint_url", s.endpoint_url.clone());
                series_json.put(
                    "labels",
                    if s.labels.is_empty() {
                        Value::Null
                    } else {
                        json!(s.labels)
                    },
                );
                series_json.put("stats", serde_json::to_value(&s.stats).unwrap_or_default());
                if let Some(buckets) = &s.buckets {
                    series_json.put("buckets", serde_json::to_value(buckets).unwrap_or_default());
                }
                if !s.timeslices.is_empty() {
                    series_json.put(
                        "timeslices",
                        serde_json::to_value(&s.timeslices).unwrap_or_default(),
                    );
                }
                if let Some(note) = &s.note {
                    series_json.put("note", note.clone());
                }
                serde_json::to_value(series_json).unwrap_or_default()
            })
            .collect();
        let mut series_json = Ordered::default();
        series_json.put("type", m.kind.as_str());
        series_json.put("description", m.description.clone());
        series_json.put("unit", m.unit.clone());
        series_json.put("series", series);
        metric_blocks.put(name, serde_json::to_value(series_json).unwrap_or_default());
    }
    serde_json::to_value(metric_blocks).unwrap_or_default()
}

/// The warmup aggregated from its boundary scrapes (warmup start to profiling start), when some
/// endpoint took both.
fn warmup(log: &ScrapeLog) -> Option<Aggregate> {
    let both = |e: &EndpointLog| {
        [Boundary::WarmupStart, Boundary::ProfilingStart]
            .iter()
            .all(|b| e.boundary(*b).is_some_and(|x| x.taken.is_ok()))
    };
    if !log.endpoints.iter().any(both) {
        return None;
    }
    let phase = Phase {
        name: "warmup",
        start: Boundary::WarmupStart,
        end: Boundary::ProfilingStart,
        window: (0, 0),
    };
    let mut only = log.clone();
    only.endpoints.retain(both);
    Some(aggregate_phase(&only, &phase))
}

/// aiperf's `phase_time_ranges`: each phase's aggregation window in Unix nanoseconds (the scrapes
/// that bound it).
fn phase_time_ranges(log: &ScrapeLog, prof: &Aggregate, warm: Option<&Aggregate>) -> Value {
    let mut ranges = Ordered::default();
    let range = |r: (u64, u64)| json!({"start_ns": log.clock.unix_ns(r.0), "end_ns": log.clock.unix_ns(r.1)});
    if let Some(r) = prof.range.filter(|r| r.0 < r.1) {
        ranges.put("profiling", range(r));
    }
    if let Some(r) = warm.and_then(|w| w.range).filter(|r| r.0 < r.1) {
        ranges.put("warmup", range(r));
    }
    serde_json::to_value(ranges).unwrap_or_default()
}

/// Every endpoint's boundary scrapes: the boundary, the phase it is tagged with, and its scrape's
/// time or why it is missing.
fn boundary_scrapes(log: &ScrapeLog) -> Value {
    let mut scrapes = Ordered::default();
    for e in &log.endpoints {
        let list: Vec<Value> = e
            .boundaries
            .iter()
            .map(|b| {
                let mut scrape = Ordered::default();
                scrape.put("boundary", b.boundary.as_str());
                scrape.put("phase", b.boundary.phase());
                match &b.taken {
                    Ok(i) => {
                        let unix_ns = log.clock.unix_ns(e.scrape_ns[*i as usize]);
                        scrape.put("time", iso_utc(unix_ns));
                        scrape.put("timestamp_ns", unix_ns);
                    }
                    Err(why) => scrape.put("missing", why.clone()),
                }
                scrape.put("attempts", b.attempts);
                serde_json::to_value(scrape).unwrap_or_default()
            })
            .collect();
        scrapes.put(&e.url, list);
    }
    serde_json::to_value(scrapes).unwrap_or_default()
}

/// How the profiling window's edges were found, for `run_summary.json`: the missing boundary scrapes
/// and the edges that fell back to periodic scrapes.
pub fn window_summary(
    log: &ScrapeLog,
    window: (u64, u64),
) -> crate::run_summary::ServerMetricsWindow {
    let phase = Phase::profiling(window);
    let mut exact = true;
    let mut notes = Vec::new();
    for e in &log.endpoints {
        if let Some(phase_edges) = edges(e, log, &phase) {
            exact &= phase_edges.exact;
            notes.extend(phase_edges.notes);
        }
    }
    let missing = log
        .endpoints
        .iter()
        .flat_map(|e| {
            e.boundaries.iter().filter_map(move |b| {
                let why = b.taken.as_ref().err()?;
                Some(format!("{} {}: {why}", e.url, b.boundary.as_str()))
            })
        })
        .collect();
    crate::run_summary::ServerMetricsWindow {
        edges: if exact {
            "boundary_scrapes"
        } else {
            "not_all_boundary_scrapes"
        }
        .to_string(),
        missing_boundary_scrapes: missing,
        notes,
    }
}

/// How the profiling window's edges were found, and the notes on edges and series.
fn window_json(prof: &Aggregate) -> Value {
    json!({
        "edges": if prof.exact { "boundary_scrapes" } else { "not_all_boundary_scrapes" },
        "notes": prof.notes,
    })
}

/// The `server_metrics_export.json` document.
pub fn to_json(log: &ScrapeLog, window: (u64, u64), meta: &ExportMeta) -> Value {
    let prof = aggregate_phase(log, &Phase::profiling(window));
    let warm = warmup(log);
    let configured: Vec<&str> = log.endpoints.iter().map(|e| e.url.as_str()).collect();
    let successful: Vec<&str> = log
        .endpoints
        .iter()
        .filter(|e| e.scrapes() > 0)
        .map(|e| e.url.as_str())
        .collect();
    let mut info = Ordered::default();
    for e in &log.endpoints {
        info.put(
            &e.url,
            serde_json::to_value(endpoint_info(e, log, window)).unwrap_or_default(),
        );
    }
    let mut summary = Ordered::default();
    summary.put("endpoints_configured", json!(configured));
    summary.put("endpoints_successful", json!(successful));
    summary.put("start_time", iso_utc(log.clock.unix_ns(window.0)));
    summary.put("end_time", iso_utc(log.clock.unix_ns(window.1)));
    summary.put("scrape_interval_ms", log.interval.as_secs_f64() * 1e3);
    summary.put(
        "total_fetches",
        log.endpoints
            .iter()
            .map(|e| e.fetches.len() as u64)
            .sum::<u64>(),
    );
    summary.put("failed_fetches", log.failed_scrapes());
    summary.put(
        "endpoint_info",
        serde_json::to_value(info).unwrap_or_default(),
    );
    summary.put(
        "phase_time_ranges",
        phase_time_ranges(log, &prof, warm.as_ref()),
    );
    summary.put("boundary_scrapes", boundary_scrapes(log));
    summary.put("profiling_window", window_json(&prof));
    let mut top = Ordered::default();
    top.put("schema_version", "1.0");
    top.put("aiperf_version", Value::Null);
    top.put("agentx_version", env!("CARGO_PKG_VERSION"));
    top.put("benchmark_id", meta.benchmark_id.clone());
    top.put("summary", serde_json::to_value(summary).unwrap_or_default());
    top.put("metrics", metrics_json(&prof.metrics));
    if let Some(warm_aggregate) = warm.filter(|warm_aggregate| !warm_aggregate.metrics.is_empty()) {
        top.put("warmup_metrics", metrics_json(&warm_aggregate.metrics));
    }
    top.put(
        "input_config",
        if meta.input_config.is_null() {
            json!({})
        } else {
            meta.input_config.clone()
        },
    );
    serde_json::to_value(top).unwrap_or_default()
}

fn csv_field(out: &mut String, field: &str) {
    if field.contains([',', '"', '\n', '\r']) {
        out.push('"');
        out.push_str(&field.replace('"', "\"\""));
        out.push('"');
    } else {
        out.push_str(field);
    }
}

fn csv_row(out: &mut String, fields: &[String]) {
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        csv_field(out, f);
    }
    out.push('\n');
}

/// A value as aiperf's CSV writes it: integers plain, other numbers with 4 decimals, nothing
/// for missing values.
fn csv_num(value: Option<&Value>) -> String {
    match value {
        Some(Value::Number(n)) => match (n.as_i64(), n.as_f64()) {
            (Some(i), _) => i.to_string(),
            (None, Some(f)) => format!("{f:.4}"),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

/// `host:port[/path]` of an endpoint URL, as aiperf's CSV shows endpoints.
fn endpoint_display(url: &str) -> String {
    let rest = url.split_once("://").map(|(_, r)| r).unwrap_or(url);
    rest.strip_suffix("/metrics").unwrap_or(rest).to_string()
}

/// The CSV's `#` lines: the file, the scrapes, where the profiling window's edges come from, every
/// boundary scrape (or why it is missing) and the notes.
fn csv_header(log: &ScrapeLog, prof: &Aggregate, meta: &ExportMeta) -> String {
    let mut out = String::new();
    out.push_str("# agentx server metrics export (CSV, aiperf layout)\n");
    out.push_str("# schema_version: 1.0\n");
    if let Some(benchmark_id) = &meta.benchmark_id {
        out.push_str(&format!("# benchmark_id: {benchmark_id}\n"));
    }
    out.push_str(&format!(
        "# scrapes: {} failed: {}\n",
        log.scrapes(),
        log.failed_scrapes()
    ));
    out.push_str(&format!(
        "# profiling window edges: {}\n",
        if prof.exact {
            "the profiling_start and profiling_complete boundary scrapes"
        } else {
            "not all boundary scrapes (see the notes)"
        }
    ));
    for e in &log.endpoints {
        for b in &e.boundaries {
            let what = match &b.taken {
                Ok(i) => iso_utc(log.clock.unix_ns(e.scrape_ns[*i as usize])),
                Err(why) => format!("missing ({why})"),
            };
            let line = format!(
                "# boundary {} {} ({}): {what}",
                endpoint_display(&e.url),
                b.boundary.as_str(),
                b.boundary.phase()
            );
            out.push_str(&line.replace('\n', " "));
            out.push('\n');
        }
    }
    for n in &prof.notes {
        out.push_str(&format!("# note: {}\n", n.replace('\n', " ")));
    }
    out.push_str("#\n");
    out
}

/// The `server_metrics_export.csv` text: sections for gauges, counters, histograms and unknown
/// metrics (labels as columns), then `_info` gauges as key/value rows; sections are separated by
/// a blank line.
pub fn to_csv(log: &ScrapeLog, window: (u64, u64), meta: &ExportMeta) -> String {
    let prof = aggregate_phase(log, &Phase::profiling(window));
    let mut out = csv_header(log, &prof, meta);
    let metrics = prof.metrics;
    let sections: [(MetricType, &[&str]); 4] = [
        (
            MetricType::Gauge,
            &[
                "avg", "min", "max", "std", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95",
                "p99",
            ],
        ),
        (
            MetricType::Counter,
            &[
                "total", "rate", "rate_avg", "rate_min", "rate_max", "rate_std",
            ],
        ),
        (
            MetricType::Histogram,
            &[
                "count",
                "count_rate",
                "sum",
                "sum_rate",
                "avg",
                "p1_estimate",
                "p5_estimate",
                "p10_estimate",
                "p25_estimate",
                "p50_estimate",
                "p75_estimate",
                "p90_estimate",
                "p95_estimate",
                "p99_estimate",
            ],
        ),
        (
            MetricType::Untyped,
            &[
                "avg", "min", "max", "std", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95",
                "p99",
            ],
        ),
    ];
    let is_info =
        |name: &str, m: &MetricStats| m.kind == MetricType::Gauge && name.ends_with("_info");
    let mut first = true;
    for (kind, stat_keys) in sections {
        let rows: Vec<(&String, &MetricStats, &SeriesStats)> = metrics
            .iter()
            .filter(|(n, m)| m.kind == kind && !is_info(n, m))
            .flat_map(|(n, m)| m.series.iter().map(move |s| (n, m, s)))
            .collect();
        if rows.is_empty() {
            continue;
        }
        if !first {
            out.push('\n');
        }
        first = false;
        let label_cols: BTreeSet<&str> = rows
            .iter()
            .flat_map(|(_, _, s)| s.labels.keys().map(String::as_str))
            .collect();
        let mut header: Vec<String> = ["Endpoint", "Type", "Metric", "Unit"]
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        header.extend(stat_keys.iter().map(std::string::ToString::to_string));
        header.extend(label_cols.iter().map(std::string::ToString::to_string));
        header.push("Description".into());
        if kind == MetricType::Histogram {
            header.push("buckets".into());
        }
        csv_row(&mut out, &header);
        for (name, m, s) in rows {
            let mut row = vec![
                endpoint_display(&s.endpoint_url),
                kind.as_str().to_string(),
                name.clone(),
                m.unit.clone().unwrap_or_default(),
            ];
            row.extend(stat_keys.iter().map(|k| csv_num(s.stats.get(k))));
            row.extend(
                label_cols
                    .iter()
                    .map(|k| s.labels.get(*k).cloned().unwrap_or_default()),
            );
            row.push(m.description.clone());
            if kind == MetricType::Histogram {
                row.push(s.buckets.as_ref().map_or_else(String::new, |b| {
                    b.0.iter()
                        .map(|(k, v)| format!("{k}={}", csv_num(Some(v))))
                        .collect::<Vec<_>>()
                        .join(";")
                }));
            }
            csv_row(&mut out, &row);
        }
    }
    let info: Vec<(&String, &MetricStats)> =
        metrics.iter().filter(|(n, m)| is_info(n, m)).collect();
    if !info.is_empty() {
        if !first {
            out.push('\n');
        }
        csv_row(
            &mut out,
            &["Endpoint", "Metric", "Key", "Value", "Description"].map(String::from),
        );
        for (name, m) in info {
            for s in &m.series {
                for (k, v) in &s.labels {
                    csv_row(
                        &mut out,
                        &[
                            endpoint_display(&s.endpoint_url),
                            name.clone(),
                            k.clone(),
                            v.clone(),
                            m.description.clone(),
                        ],
                    );
                }
            }
        }
    }
    out
}

/// Write both files into `dir` for the profiling window `(start_ns, end_ns)` (clock offsets).
pub fn write(
    dir: &agentx_record::fsio::Root,
    log: &ScrapeLog,
    window: (u64, u64),
) -> Result<Vec<PathBuf>, ExportError> {
    write_with(dir, log, window, &ExportMeta::default())
}

/// [`write`] with the run's identity and configuration.
pub(crate) fn write_with(
    dir: &agentx_record::fsio::Root,
    log: &ScrapeLog,
    window: (u64, u64),
    meta: &ExportMeta,
) -> Result<Vec<PathBuf>, ExportError> {
    if window.1 < window.0 {
        return Err(ExportError::Window {
            start_ns: window.0,
            end_ns: window.1,
        });
    }
    let json_path = dir.join(JSON_FILE);
    let mut text = serde_json::to_vec_pretty(&to_json(log, window, meta)).unwrap_or_default();
    text.push(b'\n');
    dir.write_atomic(JSON_FILE, &text)
        .map_err(|source| ExportError::Write {
            path: json_path.clone(),
            source,
        })?;
    let csv_path = dir.join(CSV_FILE);
    dir.write_atomic(CSV_FILE, to_csv(log, window, meta).as_bytes())
        .map_err(|source| ExportError::Write {
            path: csv_path.clone(),
            source,
        })?;
    Ok(vec![json_path, csv_path])
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::Clock;
    use std::time::Duration;

    const MS: u64 = 1_000_000;

    fn page(running: f64, hits: f64, b1: f64, b2: f64, inf: f64, sum: f64) -> String {
        format!(
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
# TYPE vllm:num_requests_running gauge\n\
vllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} {running}\n\
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.\n\
# TYPE vllm:prefix_cache_hits_total counter\n\
vllm:prefix_cache_hits_total{{engine=\"0\",model_name=\"m\"}} {hits}\n\
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.\n\
# TYPE vllm:e2e_request_latency_seconds histogram\n\
vllm:e2e_request_latency_seconds_bucket{{engine=\"0\",le=\"1.0\",model_name=\"m\"}} {b1}\n\
vllm:e2e_request_latency_seconds_bucket{{engine=\"0\",le=\"2.0\",model_name=\"m\"}} {b2}\n\
vllm:e2e_request_latency_seconds_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"m\"}} {inf}\n\
vllm:e2e_request_latency_seconds_count{{engine=\"0\",model_name=\"m\"}} {inf}\n\
vllm:e2e_request_latency_seconds_sum{{engine=\"0\",model_name=\"m\"}} {sum}\n\
# TYPE vllm:cache_config_info gauge\n\
vllm:cache_config_info{{block_size=\"16\",engine=\"0\"}} 1.0\n"
        )
    }

    /// Scrapes every 100 ms from t=0 to t=1000 ms; the window is [250, 750] ms.
    fn log() -> ScrapeLog {
        let pages: Vec<(u64, Option<String>)> = (0..=10u64)
            .map(|i| {
                let t = i * 100 * MS;
                if i == 5 {
                    return (t, None);
                }
                // Hits: 100 before the window, +10 per scrape from i=3 on; a restart at i=7.
                let hits = match i {
                    0..=2 => 100.0,
                    3..=6 => 100.0 + 10.0 * (i - 2) as f64,
                    _ => 5.0 * (i - 6) as f64,
                };
                // Latency histogram: 2 observations before, then one per scrape in (0,1] then (1,2].
                let n = i.saturating_sub(2) as f64;
                let fast = 2.0 + (n.min(2.0));
                let all = 2.0 + n;
                let sum = 1.0 + 0.5 * n.min(2.0) + 1.5 * (n - 2.0).max(0.0);
                (t, Some(page(i as f64, hits, fast, all, all, sum)))
            })
            .collect();
        let e = EndpointLog::from_pages(
            "http://localhost:8000/metrics",
            pages.iter().map(|(t, p)| (*t, p.as_deref())),
        )
        .unwrap();
        ScrapeLog {
            clock: Clock::start(),
            interval: Duration::from_millis(100),
            endpoints: vec![e],
        }
    }

    const WINDOW: (u64, u64) = (250 * MS, 750 * MS);

    fn series<'a>(j: &'a Value, name: &str) -> &'a Value {
        &j["metrics"][name]["series"][0]
    }

    #[test]
    fn counters_and_gauges_have_per_second_slices() {
        // 3 s of scrapes every 100 ms: the counter grows 10 per scrape, the gauge reads the second.
        let pages: Vec<(u64, Option<String>)> = (0..=30u64)
            .map(|i| {
                let g = (i / 10) as f64;
                (
                    i * 100 * MS,
                    Some(page(g, 10.0 * i as f64, 0.0, 0.0, 0.0, 0.0)),
                )
            })
            .collect();
        let e = EndpointLog::from_pages(
            "http://localhost:8000/metrics",
            pages.iter().map(|(t, p)| (*t, p.as_deref())),
        )
        .unwrap();
        let log = ScrapeLog {
            clock: Clock::start(),
            interval: Duration::from_millis(100),
            endpoints: vec![e],
        };
        let j = to_json(&log, (0, 3000 * MS), &ExportMeta::default());
        let hits = series(&j, "vllm:prefix_cache_hits");
        let slices = hits["timeslices"].as_array().unwrap();
        assert_eq!(slices.len(), 3);
        let total: f64 = slices.iter().map(|s| s["total"].as_f64().unwrap()).sum();
        assert_eq!(total, hits["stats"]["total"].as_f64().unwrap());
        assert_eq!(slices[1]["start_ns"], json!(1_000_000_000u64));
        let run = series(&j, "vllm:num_requests_running");
        let avgs: Vec<f64> = run["timeslices"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["avg"].as_f64().unwrap())
            .collect();
        assert!(avgs[0] < avgs[1] && avgs[1] < avgs[2], "{avgs:?}");
        assert!(series(&j, "vllm:e2e_request_latency_seconds")
            .get("timeslices")
            .is_none());
    }

    #[test]
    fn counters_gauges_and_histograms_over_the_window() {
        let j = to_json(&log(), WINDOW, &ExportMeta::default());
        // The reference is the scrape at 200 ms, the end the one at 800 ms (the one at 500 failed).
        let hits = series(&j, "vllm:prefix_cache_hits");
        assert_eq!(j["metrics"]["vllm:prefix_cache_hits"]["type"], "counter");
        assert_eq!(j["metrics"]["vllm:prefix_cache_hits"]["unit"], "tokens");
        assert_eq!(hits["labels"], json!({"engine": "0", "model_name": "m"}));
        assert_eq!(hits["endpoint_url"], "http://localhost:8000/metrics");
        // 100 -> 140 (i=6), then 5 (i=7): the counter went backwards (a restart), so its increase
        // over the window is not published, and the note names the two scrapes.
        assert_eq!(hits["stats"], json!({"total": null, "rate": null}));
        let note = hits["note"].as_str().unwrap();
        assert!(
            note.contains("went backwards from 140 (scrape at ")
                && note.contains(") to 5 (scrape at "),
            "{note}"
        );
        let notes = &j["summary"]["profiling_window"]["notes"];
        assert!(
            notes
                .as_array()
                .unwrap()
                .iter()
                .any(|n| n.as_str().unwrap().contains(
                    "vllm:prefix_cache_hits{engine=\"0\",model_name=\"m\"} went backwards"
                )),
            "{notes}"
        );
        // A log without boundary scrapes: the periodic scrapes are the edges, and it says so.
        assert_eq!(
            j["summary"]["profiling_window"]["edges"],
            "not_all_boundary_scrapes"
        );
        assert!(notes[0].as_str().unwrap().contains("no boundary scrapes"));

        // Gauges: scrapes at 300, 400, 600, 700 ms read 3, 4, 6, 7.
        let run = &series(&j, "vllm:num_requests_running")["stats"];
        assert_eq!(run["avg"], json!(5));
        assert_eq!(run["min"], json!(3));
        assert_eq!(run["max"], json!(7));
        assert_eq!(run["p50"], json!(5));
        let std = ((4.0 + 1.0 + 1.0 + 4.0) / 3.0f64).sqrt();
        assert!((run["std"].as_f64().unwrap() - std).abs() < 1e-12);

        // Histogram: from i=2 (2 obs, sum 1) to i=8 (8 obs): 6 new, 2 in (0,1], 4 in (1,2].
        let h = series(&j, "vllm:e2e_request_latency_seconds");
        assert_eq!(
            j["metrics"]["vllm:e2e_request_latency_seconds"]["unit"],
            "seconds"
        );
        let st = &h["stats"];
        assert_eq!(st["count"], json!(6));
        assert_eq!(st["sum"], json!(7));
        assert!((st["avg"].as_f64().unwrap() - 7.0 / 6.0).abs() < 1e-12);
        assert!((st["count_rate"].as_f64().unwrap() - 10.0).abs() < 1e-9);
        // p50: rank 3 of 6 lies in (1, 2] one quarter in.
        assert!((st["p50_estimate"].as_f64().unwrap() - 1.25).abs() < 1e-12);
        let keys: Vec<&String> = h["buckets"].as_object().unwrap().keys().collect();
        assert_eq!(keys.len(), 3);
        assert_eq!(h["buckets"]["1.0"], json!(2));
        assert_eq!(h["buckets"]["2.0"], json!(6));
        assert_eq!(h["buckets"]["+Inf"], json!(6));

        let info = &j["summary"]["endpoint_info"]["http://localhost:8000/metrics"];
        assert_eq!(info["total_fetches"], json!(11));
        assert_eq!(info["successful_fetches"], json!(10));
        assert_eq!(info["failed_fetches"], json!(1));
        assert_eq!(info["failed_fetches_in_window"], json!(1));
        assert_eq!(info["failures"]["connect"], json!(1));
        assert_eq!(j["summary"]["failed_fetches"], json!(1));
        assert_eq!(j["schema_version"], "1.0");
        assert_eq!(
            j["summary"]["endpoints_successful"],
            json!(["http://localhost:8000/metrics"])
        );
    }

    #[test]
    fn idle_counters_and_empty_histograms_have_the_short_forms() {
        let text = page(0.0, 7.0, 0.0, 0.0, 0.0, 0.0);
        let e = EndpointLog::from_pages(
            "http://h:1/metrics",
            [(0, Some(text.as_str())), (MS, Some(text.as_str()))],
        )
        .unwrap();
        let log = ScrapeLog {
            clock: Clock::start(),
            interval: Duration::from_millis(1),
            endpoints: vec![e],
        };
        let j = to_json(&log, (0, MS), &ExportMeta::default());
        assert_eq!(
            series(&j, "vllm:prefix_cache_hits")["stats"],
            json!({"total": 0, "rate": 0})
        );
        let h = series(&j, "vllm:e2e_request_latency_seconds");
        assert_eq!(h["stats"], json!({"count": 0}));
        assert_eq!(h["buckets"]["+Inf"], json!(0));
    }

    #[test]
    fn quantiles_from_buckets() {
        let b = [0.1, 0.5, f64::INFINITY];
        assert_eq!(bucket_quantile(&b, &[0.0, 0.0, 0.0], 0.5), None);
        assert!((bucket_quantile(&b, &[10.0, 10.0, 10.0], 0.5).unwrap() - 0.05).abs() < 1e-12);
        assert!((bucket_quantile(&b, &[0.0, 4.0, 4.0], 0.25).unwrap() - 0.2).abs() < 1e-12);
        assert_eq!(bucket_quantile(&b, &[0.0, 1.0, 10.0], 0.99), Some(0.5));
    }

    #[test]
    fn units_and_times() {
        assert_eq!(
            infer_unit(
                "vllm:kv_cache_usage_perc",
                MetricType::Gauge,
                "KV-cache usage. 1 means 100 percent usage."
            ),
            Some("ratio")
        );
        assert_eq!(
            infer_unit("vllm:request_success", MetricType::Counter, ""),
            Some("requests")
        );
        assert_eq!(
            infer_unit("vllm:num_preemptions", MetricType::Counter, ""),
            Some("count")
        );
        assert_eq!(
            infer_unit("sglang:cached_tokens", MetricType::Counter, ""),
            Some("tokens")
        );
        assert_eq!(
            infer_unit("vllm:num_requests_running", MetricType::Gauge, ""),
            None
        );
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00.000000");
        assert_eq!(
            iso_utc(1_765_529_006_843_416_914),
            "2025-12-12T08:43:26.843416"
        );
        assert_eq!(
            iso_utc(951_782_400_000_000_000),
            "2000-02-29T00:00:00.000000"
        );
    }

    #[test]
    fn csv_sections_and_files() {
        let log = log();
        let csv = to_csv(&log, WINDOW, &ExportMeta::default());
        let sections: Vec<&str> = csv.split("\n\n").collect();
        assert_eq!(sections.len(), 4, "{csv}");
        assert!(sections[0].contains(
            "Endpoint,Type,Metric,Unit,avg,min,max,std,p1,p5,p10,p25,p50,p75,p90,p95,p99,engine,model_name,Description"
        ), "{csv}");
        assert!(sections[0].contains("localhost:8000,gauge,vllm:num_requests_running,,5,3,7,"));
        assert!(sections[1].starts_with(
            "Endpoint,Type,Metric,Unit,total,rate,rate_avg,rate_min,rate_max,rate_std,engine,model_name,Description"
        ));
        assert!(sections[1].contains("localhost:8000,counter,vllm:prefix_cache_hits,tokens,,,"));
        assert!(sections[0].contains("# note: http://localhost:8000/metrics: no boundary scrapes"));
        assert!(sections[2].contains(",Description,buckets\n"));
        assert!(sections[2].contains("1.0=2;2.0=6;+Inf=6"));
        assert_eq!(
            sections[3].trim_end(),
            "Endpoint,Metric,Key,Value,Description\n\
localhost:8000,vllm:cache_config_info,block_size,16,\n\
localhost:8000,vllm:cache_config_info,engine,0,"
        );

        let dir = tempfile::tempdir().unwrap();
        let root = agentx_record::fsio::Root::open(dir.path()).unwrap();
        let files = write(&root, &log, WINDOW).unwrap();
        assert_eq!(files.len(), 2);
        let back: Value =
            serde_json::from_slice(&std::fs::read(dir.path().join(JSON_FILE)).unwrap()).unwrap();
        assert_eq!(
            series(&back, "vllm:prefix_cache_hits")["stats"]["total"],
            Value::Null
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join(CSV_FILE)).unwrap(),
            csv
        );

        let e = write(&root, &log, (2, 1)).unwrap_err().to_string();
        assert!(e.contains("ends"), "{e}");
        // A directory where the file should be.
        std::fs::remove_file(dir.path().join(JSON_FILE)).unwrap();
        std::fs::create_dir_all(dir.path().join(JSON_FILE).join("x")).unwrap();
        let e = write(&root, &log, WINDOW).unwrap_err().to_string();
        assert!(e.contains("server_metrics_export.json"), "{e}");
    }

    /// A counter with its page, at clock offset `t`.
    fn counter_page(tokens: f64) -> String {
        format!("# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{engine=\"0\"}} {tokens}\n")
    }

    fn taken(b: Boundary, idx: u32) -> agentx_metrics::scrape_log::BoundaryScrape {
        agentx_metrics::scrape_log::BoundaryScrape {
            boundary: b,
            asked_ns: 0,
            attempts: 1,
            taken: Ok(idx),
        }
    }

    /// Warmup ends, the profiling-start boundary scrape is taken and profiling begins on one
    /// timestamp, after a periodic scrape on that same timestamp that missed the warmup's last
    /// tokens: the window runs from the boundary scrape by index, so exactly profiling's tokens count.
    #[test]
    fn boundary_scrapes_are_the_edges_by_index_on_one_timestamp() {
        // Scrape 0: warmup start (0 tokens). 1: periodic at 5 ms, 300 warmup tokens. 2: the
        // profiling_start boundary at 5 ms too, after the warmup's last 20 tokens. 3: periodic at
        // 9 ms. 4: profiling_complete at 9 ms, after profiling's 1000 tokens. 5: periodic after.
        let pages = [
            (0, counter_page(0.0)),
            (5 * MS, counter_page(300.0)),
            (5 * MS, counter_page(320.0)),
            (9 * MS, counter_page(1000.0)),
            (9 * MS, counter_page(1320.0)),
            (12 * MS, counter_page(1320.0)),
        ];
        let mut e = EndpointLog::from_pages(
            "http://h:1/metrics",
            pages.iter().map(|(t, p)| (*t, Some(p.as_str()))),
        )
        .unwrap();
        e.boundaries = vec![
            taken(Boundary::WarmupStart, 0),
            taken(Boundary::ProfilingStart, 2),
            taken(Boundary::ProfilingComplete, 4),
        ];
        let mut log = ScrapeLog {
            clock: Clock::start(),
            interval: Duration::from_millis(333),
            endpoints: vec![e],
        };
        let window = (5 * MS, 8 * MS);
        let j = to_json(&log, window, &ExportMeta::default());
        let st = &series(&j, "vllm:prompt_tokens")["stats"];
        assert_eq!(st["total"], json!(1000));
        assert_eq!(
            j["summary"]["profiling_window"]["edges"],
            "boundary_scrapes"
        );
        assert_eq!(
            j["warmup_metrics"]["vllm:prompt_tokens"]["series"][0]["stats"]["total"],
            json!(320)
        );
        let b = &j["summary"]["boundary_scrapes"]["http://h:1/metrics"];
        assert_eq!(b[1]["boundary"], "profiling_start");
        assert_eq!(b[1]["phase"], "profiling");
        assert_eq!(b[0]["phase"], "warmup");
        let ranges = &j["summary"]["phase_time_ranges"];
        let unix = |ns: u64| json!(log.clock.unix_ns(ns));
        assert_eq!(ranges["profiling"]["start_ns"], unix(5 * MS));
        assert_eq!(ranges["profiling"]["end_ns"], unix(9 * MS));
        assert_eq!(ranges["warmup"]["end_ns"], unix(5 * MS));

        // Without the boundaries, the periodic scrapes on those timestamps decide, wrongly.
        log.endpoints[0].boundaries.clear();
        let j = to_json(&log, window, &ExportMeta::default());
        assert_eq!(
            series(&j, "vllm:prompt_tokens")["stats"]["total"],
            json!(700)
        );

        // A failed profiling_complete boundary: the end falls back to the periodic scrape at or
        // after the window's end (the first at 9 ms), and the export and summary say so.
        let e = &mut log.endpoints[0];
        e.boundaries = vec![
            taken(Boundary::ProfilingStart, 2),
            agentx_metrics::scrape_log::BoundaryScrape {
                taken: Err("no complete response within 5s".into()),
                attempts: 2,
                ..taken(Boundary::ProfilingComplete, 0)
            },
        ];
        let j = to_json(&log, window, &ExportMeta::default());
        assert_eq!(
            series(&j, "vllm:prompt_tokens")["stats"]["total"],
            json!(680)
        );
        let notes = j["summary"]["profiling_window"]["notes"].to_string();
        assert!(
            notes.contains("the profiling_complete boundary scrape failed twice (no complete response within 5s)"),
            "{notes}"
        );
        assert_eq!(
            j["summary"]["boundary_scrapes"]["http://h:1/metrics"][1]["missing"],
            "no complete response within 5s"
        );
        let w = window_summary(&log, window);
        assert_eq!(w.edges, "not_all_boundary_scrapes");
        assert_eq!(
            w.missing_boundary_scrapes,
            ["http://h:1/metrics profiling_complete: no complete response within 5s"]
        );
        let csv = to_csv(&log, window, &ExportMeta::default());
        assert!(
            csv.contains("# boundary h:1 profiling_complete (profiling): missing (no complete response within 5s)\n"),
            "{csv}"
        );
    }

    /// A counter that goes missing inside the window, and one first seen inside it.
    #[test]
    fn a_counter_that_vanishes_is_not_published_and_one_born_counts_from_zero() {
        let page = |a: Option<f64>, b: Option<f64>| {
            let mut p = String::from("# TYPE a counter\n# TYPE b counter\n");
            if let Some(a) = a {
                p += &format!("a_total {a}\n");
            }
            if let Some(b) = b {
                p += &format!("b_total {b}\n");
            }
            p
        };
        let pages = [
            (0, page(Some(10.0), None)),
            (MS, page(Some(20.0), Some(7.0))),
            (2 * MS, page(None, Some(8.0))),
            (3 * MS, page(Some(40.0), Some(9.0))),
        ];
        let mut e = EndpointLog::from_pages(
            "http://h:1/metrics",
            pages.iter().map(|(t, p)| (*t, Some(p.as_str()))),
        )
        .unwrap();
        e.boundaries = vec![
            taken(Boundary::ProfilingStart, 0),
            taken(Boundary::ProfilingComplete, 3),
        ];
        let log = ScrapeLog {
            clock: Clock::start(),
            interval: Duration::from_millis(1),
            endpoints: vec![e],
        };
        let j = to_json(&log, (0, 3 * MS), &ExportMeta::default());
        let a = series(&j, "a");
        assert_eq!(a["stats"], json!({"total": null, "rate": null}));
        let note = a["note"].as_str().unwrap();
        assert!(
            note.contains("went missing between the scrapes at"),
            "{note}"
        );
        let b = series(&j, "b");
        assert_eq!(b["stats"]["total"], json!(9));
        assert!(b["note"].as_str().unwrap().contains("counted from 0"));
    }
}
