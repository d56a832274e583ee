//! The server-metrics journal: the scrape log of a run, appended to `server_metrics_journal.jsonl`
//! in the artifact directory as it grows, so a run killed before its end (SIGKILL, the OOM killer, a
//! scheduler's time limit) still leaves what its scraper measured, and [`read_journal`] rebuilds it.
//!
//! This module owns the file's format, the writer's state (what of each [`EndpointLog`] is already in
//! the file) and the reader. The scraper (`client::scrape`) flushes every [`FLUSH_EVERY`] and at its
//! stop, from a blocking thread; a write error is logged once and journaling stops, the run goes on.
//!
//! The format, JSON lines:
//! - line 1, the header: `{"journal":"agentx server metrics","version":1,"interval_ns":…,
//!   "anchor_unix_ns":…,"endpoints":["http://…/metrics",…]}`;
//! - then one line per endpoint and flush with what its log gained since the previous flush:
//!   `{"ep":0,"fetches":[[start_ns,latency_ns,"ok"],…],"scrape_ns":[…],"families":[{"name":…,
//!   "kind":"counter","help":…}],"series":[…],"hash":…,"last_error":…}`. A fetch's outcome is `ok`
//!   (the page changed), `same`, `connect`, `timeout`, `body`, `parse` or `http 503`. A family is
//!   listed when new or when its help text changed. A series is `{"family":…,"labels":[[k,v],…],
//!   "points":[…]}` (scalars) or with `"sum"`, `"count"` and `"buckets":[{"le":"0.5","at":2,
//!   "new":true,"points":[…]}]` (histograms; `at` is the bucket's place in the series' bucket list
//!   after this flush, a bucket a page added between two others is `new` there). A change point is
//!   `[scrape index, value]`, the value `null` from the scrape a series went missing on, `"NaN"`,
//!   `"+Inf"` or `"-Inf"` when not finite. `hash` and `last_error` appear when they changed.
//!   `boundaries` (version 2) lists the boundary scrapes asked for since the previous flush:
//!   `{"at":"profiling_start","asked_ns":…,"attempts":1,"scrape":12}`, or `"error":…` in place
//!   of `scrape` when both attempts failed. The scraper flushes right after each boundary, so a
//!   killed run's journal carries the boundaries it passed and `finalize` uses the same window
//!   edges the run would have. A version 1 journal (no boundaries) reads back without them.
//!
//! Tracks only ever gain change points at their end and buckets are only ever inserted, so each
//! flush writes only what is new. Failure counts are not written: they are the fetches' outcomes
//! counted. A write is whole lines, so a run killed mid-write leaves at most a torn last line, which
//! the reader skips; anything else wrong names the file and line.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use agentx_metrics::prometheus::{self, MetricType};
use agentx_metrics::scrape_log::{
    Boundary, BoundaryScrape, Bucket, EndpointLog, FailureCounts, FamilyLog, Fetch, FetchOutcome,
    HistogramTrack, Labels, Point, ScrapeLog, SeriesLog, Track,
};
use agentx_record::fsio::Root;
use agentx_record::Clock;

/// The journal's file name in the artifact directory.
pub const SCRAPE_JOURNAL: &str = "server_metrics_journal.jsonl";

/// The GPU telemetry scraper's journal (`--gpu-telemetry`), in the same format.
pub const GPU_TELEMETRY_JOURNAL: &str = "gpu_telemetry_journal.jsonl";

/// The format version the header carries; [`read_journal`] reads this one and version 1 (the
/// same lines without boundary scrapes).
pub(crate) const JOURNAL_VERSION: u32 = 2;

/// How often a running scraper appends to its journal. A kill loses at most this much of the scrapes
/// (15 at the default 333 ms interval) of a run that lasts many minutes, while the file gets one line
/// per endpoint per flush: few enough that the line's own keys and the labels of changed series stay
/// a small part of it (about 720 lines an hour), and the flush's cost (one lock per endpoint, one
/// write) is negligible.
pub const FLUSH_EVERY: Duration = Duration::from_secs(5);

const JOURNAL_NAME: &str = "agentx server metrics";

/// Errors of reading a journal back.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The journal's path.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file holds no complete header.
    #[error("{path} is empty or holds only a torn header: the run stopped before its first scrape was journaled; there are no server metrics to rebuild")]
    Empty {
        /// The journal's path.
        path: PathBuf,
    },
    /// The header names a format version this build does not read.
    #[error("{path}:1: journal format version {found}, this build reads versions 1 to {JOURNAL_VERSION}; read it with the agentx-host that wrote it")]
    Version {
        /// The journal's path.
        path: PathBuf,
        /// The version the header names.
        found: u32,
    },
    /// A line is not what the format allows there.
    #[error("{path}:{line}: {what}; a journal is only ever appended to by the run that wrote it, so the file was damaged or edited and its server metrics cannot be rebuilt")]
    Line {
        /// The journal's path.
        path: PathBuf,
        /// The 1-based line number.
        line: usize,
        /// What is wrong with the line.
        what: String,
    },
}

/// The journal file a scraper appends to ([`crate::scrape::ScrapeConfig::journal`]). One
/// scraper per file: clones share the one open file.
#[derive(Debug, Clone)]
pub struct JournalFile {
    file: Arc<File>,
    path: PathBuf,
}

impl JournalFile {
    /// Creates (truncating) [`SCRAPE_JOURNAL`] in `dir`.
    pub fn create(dir: &Root) -> std::io::Result<JournalFile> {
        JournalFile::create_named(dir, SCRAPE_JOURNAL)
    }

    /// Creates (truncating) the journal `name` in `dir` (e.g. [`GPU_TELEMETRY_JOURNAL`]).
    pub fn create_named(dir: &Root, name: &str) -> std::io::Result<JournalFile> {
        Ok(JournalFile {
            file: Arc::new(dir.create_file(name)?),
            path: dir.join(name),
        })
    }

    /// Where the file is, for messages and readers.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A value of a change point: a JSON number, or a string when not finite.
#[derive(Debug, Clone, Copy)]
struct JVal(f64);

impl Serialize for JVal {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            v if v.is_finite() => s.serialize_f64(v),
            v if v.is_nan() => s.serialize_str("NaN"),
            v if v > 0.0 => s.serialize_str("+Inf"),
            _ => s.serialize_str("-Inf"),
        }
    }
}

impl<'de> Deserialize<'de> for JVal {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<JVal, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = JVal;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a number, \"NaN\", \"+Inf\" or \"-Inf\"")
            }
            fn visit_f64<E>(self, v: f64) -> Result<JVal, E> {
                Ok(JVal(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<JVal, E> {
                Ok(JVal(v as f64))
            }
            fn visit_i64<E>(self, v: i64) -> Result<JVal, E> {
                Ok(JVal(v as f64))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<JVal, E> {
                match v {
                    "NaN" => Ok(JVal(f64::NAN)),
                    "+Inf" => Ok(JVal(f64::INFINITY)),
                    "-Inf" => Ok(JVal(f64::NEG_INFINITY)),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// `[scrape index, value or null]`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct JPoint(u32, Option<JVal>);

impl JPoint {
    fn of(point: &Point) -> JPoint {
        JPoint(point.idx, point.present.then_some(JVal(point.value)))
    }

    fn point(self) -> Point {
        match self.1 {
            Some(JVal(value)) => Point {
                idx: self.0,
                value,
                present: true,
            },
            None => Point {
                idx: self.0,
                value: 0.0,
                present: false,
            },
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Header {
    journal: String,
    version: u32,
    interval_ns: u64,
    anchor_unix_ns: u64,
    endpoints: Vec<String>,
}

/// `[start_ns, latency_ns, outcome]`.
#[derive(Debug, Serialize, Deserialize)]
struct FetchRec(u64, u64, String);

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FamilyRec {
    name: String,
    kind: String,
    help: String,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BucketRec {
    le: String,
    at: usize,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    new: bool,
    points: Vec<JPoint>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct SeriesRec {
    family: String,
    labels: Labels,
    /// A scalar's change points.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    points: Option<Vec<JPoint>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    sum: Option<Vec<JPoint>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    count: Option<Vec<JPoint>>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    buckets: Vec<BucketRec>,
}

/// One boundary scrape.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct BoundaryRec {
    at: String,
    asked_ns: u64,
    attempts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scrape: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// What one endpoint's log gained since the previous flush.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Delta {
    ep: usize,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    fetches: Vec<FetchRec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    scrape_ns: Vec<u64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    families: Vec<FamilyRec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    series: Vec<SeriesRec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    hash: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    boundaries: Vec<BoundaryRec>,
}

impl Delta {
    fn is_empty(&self) -> bool {
        self.boundaries.is_empty()
            && self.fetches.is_empty()
            && self.scrape_ns.is_empty()
            && self.families.is_empty()
            && self.series.is_empty()
            && self.hash.is_none()
            && self.last_error.is_none()
    }
}

fn outcome_text(outcome: FetchOutcome) -> String {
    match outcome {
        FetchOutcome::Ok { changed: true } => "ok".into(),
        FetchOutcome::Ok { changed: false } => "same".into(),
        FetchOutcome::Connect => "connect".into(),
        FetchOutcome::Status(s) => format!("http {s}"),
        FetchOutcome::Timeout => "timeout".into(),
        FetchOutcome::Body => "body".into(),
        FetchOutcome::Parse => "parse".into(),
    }
}

fn parse_outcome(text: &str) -> Option<FetchOutcome> {
    Some(match text {
        "ok" => FetchOutcome::Ok { changed: true },
        "same" => FetchOutcome::Ok { changed: false },
        "connect" => FetchOutcome::Connect,
        "timeout" => FetchOutcome::Timeout,
        "body" => FetchOutcome::Body,
        "parse" => FetchOutcome::Parse,
        _ => FetchOutcome::Status(text.strip_prefix("http ")?.parse().ok()?),
    })
}

/// What of one series is in the file: the number of change points of each track, and each bucket's
/// bound (bits) with its count, in bucket order.
enum SeriesCursor {
    Scalar(usize),
    Histogram {
        sum: usize,
        count: usize,
        buckets: Vec<(u64, usize)>,
    },
}

struct FamilyCursor {
    help: String,
    series: BTreeMap<Labels, SeriesCursor>,
}

/// What of one endpoint's log is in the file.
#[derive(Default)]
struct Cursor {
    fetches: usize,
    scrape_ns: usize,
    families: BTreeMap<String, FamilyCursor>,
    hash: Option<u64>,
    last_error: Option<String>,
    boundaries: usize,
}

/// The points of `t` from `*done` on, and `*done` moved to the end.
fn new_points(track: &Track, done: &mut usize) -> Vec<JPoint> {
    let points = track.points();
    let out = points
        .get(*done..)
        .unwrap_or(&[])
        .iter()
        .map(JPoint::of)
        .collect();
    *done = points.len();
    out
}

/// A histogram's new bucket points: buckets are matched with the flushed ones in order (a page can
/// only add buckets), so a bucket inserted between two others is `new` at its place.
fn bucket_delta(histogram: &HistogramTrack, flushed: &mut Vec<(u64, usize)>) -> Vec<BucketRec> {
    let mut out = Vec::new();
    let mut next = Vec::with_capacity(histogram.buckets.len());
    let mut flushed_index = 0;
    for (at, b) in histogram.buckets.iter().enumerate() {
        let bits = b.le.to_bits();
        let (new, mut done) = match flushed.get(flushed_index) {
            Some(&(le, n)) if le == bits => {
                flushed_index += 1;
                (false, n)
            }
            _ => (true, 0),
        };
        let points = new_points(&b.track, &mut done);
        next.push((bits, done));
        if new || !points.is_empty() {
            out.push(BucketRec {
                le: b.le_text.clone(),
                at,
                new,
                points,
            });
        }
    }
    *flushed = next;
    out
}

fn series_delta(
    family: &str,
    labels: &Labels,
    series: &SeriesLog,
    cursor: &mut SeriesCursor,
) -> SeriesRec {
    let mut rec = SeriesRec {
        family: family.to_string(),
        labels: labels.clone(),
        points: None,
        sum: None,
        count: None,
        buckets: Vec::new(),
    };
    let nonempty = |v: Vec<JPoint>| (!v.is_empty()).then_some(v);
    match (series, cursor) {
        (SeriesLog::Scalar(t), SeriesCursor::Scalar(n)) => rec.points = nonempty(new_points(t, n)),
        (
            SeriesLog::Histogram(h),
            SeriesCursor::Histogram {
                sum,
                count,
                buckets,
            },
        ) => {
            rec.sum = nonempty(new_points(&h.sum, sum));
            rec.count = nonempty(new_points(&h.count, count));
            rec.buckets = bucket_delta(h, buckets);
        }
        // A series keeps its family's kind for the log's life.
        _ => {}
    }
    rec
}

/// Drops what of `t` the file holds ([`Track::spill`]) and moves the cursor to what stays; true
/// when points were dropped.
fn spill_track(track: &mut Track, done: &mut usize) -> bool {
    let kept = track.spill(*done);
    let dropped = kept < *done;
    *done = kept;
    dropped
}

fn spill_series(series: &mut SeriesLog, cursor: &mut SeriesCursor) -> bool {
    match (series, cursor) {
        (SeriesLog::Scalar(t), SeriesCursor::Scalar(n)) => spill_track(t, n),
        (
            SeriesLog::Histogram(h),
            SeriesCursor::Histogram {
                sum,
                count,
                buckets,
            },
        ) => {
            let mut dropped = spill_track(&mut h.sum, sum) | spill_track(&mut h.count, count);
            // The flushed buckets in order; a page may have inserted others between them since.
            let mut bucket_index = 0;
            for (bits, done) in buckets.iter_mut() {
                while h
                    .buckets
                    .get(bucket_index)
                    .is_some_and(|b| b.le.to_bits() != *bits)
                {
                    bucket_index += 1;
                }
                let Some(bucket) = h.buckets.get_mut(bucket_index) else {
                    break;
                };
                dropped |= spill_track(&mut bucket.track, done);
                bucket_index += 1;
            }
            dropped
        }
        _ => false,
    }
}

impl Cursor {
    /// Drops from `log` the change points the file holds; true when any were dropped.
    fn spill(&mut self, log: &mut EndpointLog) -> bool {
        let mut dropped = false;
        for (name, fc) in &mut self.families {
            let Some(fam) = log.families.get_mut(name) else {
                continue;
            };
            for (labels, c) in &mut fc.series {
                if let Some(series) = fam.series.get_mut(labels) {
                    dropped |= spill_series(series, c);
                }
            }
        }
        dropped
    }

    /// What `log` gained since the last call, and the cursor moved past it.
    fn delta(&mut self, endpoint_index: usize, log: &EndpointLog) -> Delta {
        let mut delta = Delta {
            ep: endpoint_index,
            ..Delta::default()
        };
        delta.fetches = (log.fetches.get(self.fetches..).unwrap_or(&[]).iter())
            .map(|f| FetchRec(f.start_ns, f.latency_ns, outcome_text(f.outcome)))
            .collect();
        self.fetches = log.fetches.len();
        delta.scrape_ns = log.scrape_ns.get(self.scrape_ns..).unwrap_or(&[]).to_vec();
        self.scrape_ns = log.scrape_ns.len();
        for (name, fam) in &log.families {
            let family_cursor = self.families.entry(name.clone()).or_insert_with(|| {
                delta.families.push(FamilyRec {
                    name: name.clone(),
                    kind: fam.kind.as_str().to_string(),
                    help: fam.help.clone(),
                });
                FamilyCursor {
                    help: fam.help.clone(),
                    series: BTreeMap::new(),
                }
            });
            if family_cursor.help != fam.help {
                family_cursor.help.clone_from(&fam.help);
                delta.families.push(FamilyRec {
                    name: name.clone(),
                    kind: fam.kind.as_str().to_string(),
                    help: fam.help.clone(),
                });
            }
            for (labels, s) in &fam.series {
                let series_cursor =
                    family_cursor
                        .series
                        .entry(labels.clone())
                        .or_insert_with(|| match s {
                            SeriesLog::Scalar(_) => SeriesCursor::Scalar(0),
                            SeriesLog::Histogram(_) => SeriesCursor::Histogram {
                                sum: 0,
                                count: 0,
                                buckets: Vec::new(),
                            },
                        });
                let rec = series_delta(name, labels, s, series_cursor);
                if rec.points.is_some()
                    || rec.sum.is_some()
                    || rec.count.is_some()
                    || !rec.buckets.is_empty()
                {
                    delta.series.push(rec);
                }
            }
        }
        if log.last_hash() != self.hash {
            self.hash = log.last_hash();
            delta.hash = self.hash;
        }
        if log.last_error != self.last_error {
            self.last_error.clone_from(&log.last_error);
            delta.last_error.clone_from(&log.last_error);
        }
        delta.boundaries = (log.boundaries.get(self.boundaries..).unwrap_or(&[]).iter())
            .map(|b| BoundaryRec {
                at: b.boundary.as_str().to_string(),
                asked_ns: b.asked_ns,
                attempts: b.attempts,
                scrape: b.taken.as_ref().ok().copied(),
                error: b.taken.as_ref().err().cloned(),
            })
            .collect();
        self.boundaries = log.boundaries.len();
        delta
    }
}

/// Appends a scrape log to its journal: the header with the first write, then on each flush what
/// every endpoint's log gained.
pub struct JournalWriter {
    out: JournalFile,
    header: Option<Header>,
    cursors: Vec<Cursor>,
    pending: Vec<Delta>,
    stopped: bool,
    /// Change points were dropped from the logs after being written ([`JournalWriter::spill`]).
    spilled: bool,
}

impl std::fmt::Debug for JournalWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JournalWriter")
            .field("path", &self.out.path)
            .field("stopped", &self.stopped)
            .finish()
    }
}

impl JournalWriter {
    /// A writer of the scrapes of `urls` (full `/metrics` URLs, in the log's endpoint order) taken
    /// every `interval` on `clock`.
    pub fn new(
        out: JournalFile,
        clock: &Clock,
        interval: Duration,
        urls: &[String],
    ) -> JournalWriter {
        JournalWriter {
            out,
            header: Some(Header {
                journal: JOURNAL_NAME.to_string(),
                version: JOURNAL_VERSION,
                interval_ns: interval.as_nanos() as u64,
                anchor_unix_ns: clock.anchor_unix_ns(),
                endpoints: urls.to_vec(),
            }),
            cursors: urls.iter().map(|_| Cursor::default()).collect(),
            pending: Vec::new(),
            stopped: false,
            spilled: false,
        }
    }

    /// Takes what endpoint `endpoint_index`'s log gained since the last take, to be written by the
    /// next write. Cheap (no I/O, no formatting): the scraper calls it under the endpoint's lock.
    pub(crate) fn take(&mut self, endpoint_index: usize, log: &EndpointLog) {
        if self.stopped {
            return;
        }
        if let Some(cursor) = self.cursors.get_mut(endpoint_index) {
            let delta = cursor.delta(endpoint_index, log);
            if !delta.is_empty() {
                self.pending.push(delta);
            }
        }
    }

    /// After a write, drops from endpoint `endpoint_index`'s log the change points the file now
    /// holds (each track keeps its first value and its latest: what the live view and the next
    /// scrape read), so a run's memory does not grow with its scrapes; [`read_journal`] gives the
    /// whole log back.
    /// Nothing is dropped while something taken is unwritten, nor once journaling stopped.
    pub(crate) fn spill(&mut self, endpoint_index: usize, log: &mut EndpointLog) {
        if self.stopped || !self.pending.is_empty() {
            return;
        }
        if let Some(cursor) = self.cursors.get_mut(endpoint_index) {
            self.spilled |= cursor.spill(log);
        }
    }

    /// Whether [`JournalWriter::spill`] dropped anything: the whole log is then the file's.
    pub(crate) fn spilled(&self) -> bool {
        self.spilled
    }

    /// Whether a write failed, so that journaling stopped.
    pub(crate) fn stopped(&self) -> bool {
        self.stopped
    }

    /// The journal's path.
    pub(crate) fn path(&self) -> &Path {
        &self.out.path
    }

    /// Writes what was taken as whole lines, in one write (blocking I/O); the bytes written.
    fn write_pending(&mut self) -> std::io::Result<usize> {
        let mut buf = Vec::new();
        if let Some(header_line) = &self.header {
            serde_json::to_writer(&mut buf, header_line).map_err(std::io::Error::other)?;
            buf.push(b'\n');
        }
        for d in self.pending.drain(..) {
            serde_json::to_writer(&mut buf, &d).map_err(std::io::Error::other)?;
            buf.push(b'\n');
        }
        if !buf.is_empty() {
            (&*self.out.file).write_all(&buf)?;
            (&*self.out.file).flush()?;
        }
        self.header = None;
        Ok(buf.len())
    }

    /// [`JournalWriter::write_pending`] in a run, returning the bytes written: the first error is
    /// logged and ends journaling; the run and its exports go on without it.
    pub(crate) fn write_logged(&mut self) -> usize {
        if self.stopped {
            return 0;
        }
        self.write_pending().unwrap_or_else(|e| {
            self.stopped = true;
            self.pending.clear();
            tracing::warn!(
                "cannot append to {}: {e}; the server metrics journal stops here (the run and its \
                 server-metrics export go on; only a run killed before its end would lose them)",
                self.out.path.display()
            );
            0
        })
    }

    /// Appends what each of `logs` (in endpoint order) gained since the previous flush.
    pub fn flush(&mut self, logs: &[EndpointLog]) -> std::io::Result<()> {
        for (i, l) in logs.iter().enumerate() {
            self.take(i, l);
        }
        self.write_pending().map(|_| ())
    }
}

/// A line's JSON, or what is wrong with it.
fn parse_line<T: serde::de::DeserializeOwned>(line: &[u8]) -> Result<T, String> {
    serde_json::from_slice(line).map_err(|e| format!("{e}"))
}

/// The header line: checks the name and the version before the fields.
fn read_header(path: &Path, line: &[u8]) -> Result<Header, JournalError> {
    let bad = |what: String| JournalError::Line {
        path: path.to_owned(),
        line: 1,
        what,
    };
    let header: serde_json::Value = parse_line(line).map_err(bad)?;
    if header.get("journal").and_then(|j| j.as_str()) != Some(JOURNAL_NAME) {
        return Err(bad(format!(
            "not a server-metrics journal header (no \"journal\":\"{JOURNAL_NAME}\")"
        )));
    }
    match header.get("version").and_then(serde_json::Value::as_u64) {
        Some(n) if (1..=u64::from(JOURNAL_VERSION)).contains(&n) => {}
        Some(n) => {
            return Err(JournalError::Version {
                path: path.to_owned(),
                found: n.try_into().unwrap_or(u32::MAX),
            })
        }
        None => return Err(bad("the header has no format version".into())),
    }
    serde_json::from_value(header).map_err(|e| bad(format!("{e}")))
}

/// Reads a journal back into the scrape log it recorded, as of its last complete line. A torn last
/// line (the run was killed while writing it) is left out with a warning; any other bad line is an
/// error naming the file and line.
pub fn read_journal(path: &Path) -> Result<ScrapeLog, JournalError> {
    let bytes = std::fs::read(path).map_err(|source| JournalError::Read {
        path: path.to_owned(),
        source,
    })?;
    // (1-based line number, the line, whether its newline was written)
    let mut lines: Vec<(usize, &[u8], bool)> = Vec::new();
    let mut rest: &[u8] = &bytes;
    let mut line_no = 0;
    while !rest.is_empty() {
        line_no += 1;
        let (line, whole, next) = match rest.iter().position(|b| *b == b'\n') {
            Some(i) => (&rest[..i], true, &rest[i + 1..]),
            None => (rest, false, &[][..]),
        };
        rest = next;
        if !line.iter().all(u8::is_ascii_whitespace) {
            lines.push((line_no, line, whole));
        }
    }
    let torn = |n: usize| {
        tracing::warn!(
            "{}:{n}: the last line is incomplete (the run was killed while writing it) and is left out",
            path.display()
        );
    };
    let Some(&(first_n, first, first_whole)) = lines.first() else {
        return Err(JournalError::Empty {
            path: path.to_owned(),
        });
    };
    let header = match read_header(path, first) {
        Err(_) if lines.len() == 1 && !first_whole => {
            torn(first_n);
            return Err(JournalError::Empty {
                path: path.to_owned(),
            });
        }
        r => r?,
    };
    let mut endpoints: Vec<EndpointLog> = header
        .endpoints
        .iter()
        .map(|u| EndpointLog::new(u.clone()))
        .collect();
    let last = lines.len() - 1;
    for (i, &(n, line, whole)) in lines.iter().enumerate().skip(1) {
        let bad = |what: String| JournalError::Line {
            path: path.to_owned(),
            line: n,
            what,
        };
        let delta: Delta = match parse_line(line) {
            Ok(delta) => delta,
            Err(_) if i == last && !whole => {
                torn(n);
                break;
            }
            Err(e) => return Err(bad(e)),
        };
        let Some(log) = endpoints.get_mut(delta.ep) else {
            return Err(bad(format!(
                "endpoint {} of a journal of {} endpoints",
                delta.ep,
                header.endpoints.len()
            )));
        };
        apply(log, delta).map_err(bad)?;
    }
    Ok(ScrapeLog {
        clock: Clock::from_anchor_unix_ns(header.anchor_unix_ns),
        interval: Duration::from_nanos(header.interval_ns),
        endpoints,
    })
}

fn count_failure(counts: &mut FailureCounts, outcome: FetchOutcome) {
    match outcome {
        FetchOutcome::Connect => counts.connect += 1,
        FetchOutcome::Status(_) => counts.status += 1,
        FetchOutcome::Timeout => counts.timeout += 1,
        FetchOutcome::Body => counts.body += 1,
        FetchOutcome::Parse => counts.parse += 1,
        FetchOutcome::Ok { .. } => {}
    }
}

/// Appends points to a track, each at a scrape the log has.
fn extend(
    track: &mut Track,
    points: Vec<JPoint>,
    scrapes: usize,
    what: &str,
) -> Result<(), String> {
    for p in points {
        if p.0 as usize >= scrapes {
            return Err(format!(
                "{what}: a change point at scrape {} of {scrapes} scrapes",
                p.0
            ));
        }
        track
            .append(p.point())
            .map_err(|e| format!("{what}: {e}"))?;
    }
    Ok(())
}

/// Folds one line's delta into its endpoint's log.
fn apply(log: &mut EndpointLog, delta: Delta) -> Result<(), String> {
    for FetchRec(start_ns, latency_ns, o) in delta.fetches {
        let outcome = parse_outcome(&o).ok_or_else(|| {
            format!(
                "{o:?} is not a fetch outcome (ok, same, connect, timeout, body, parse, http N)"
            )
        })?;
        count_failure(&mut log.failures, outcome);
        log.fetches.push(Fetch {
            start_ns,
            latency_ns,
            outcome,
        });
    }
    log.scrape_ns.extend(delta.scrape_ns);
    for f in delta.families {
        let kind = MetricType::parse(&f.kind)
            .ok_or_else(|| format!("family {}: {:?} is not a metric type", f.name, f.kind))?;
        match log.families.get_mut(&f.name) {
            Some(fam) if fam.kind != kind => {
                return Err(format!(
                    "family {} was a {} and is now a {}",
                    f.name,
                    fam.kind.as_str(),
                    f.kind
                ))
            }
            Some(fam) => fam.help = f.help,
            None => {
                log.families.insert(f.name, FamilyLog::new(kind, f.help));
            }
        }
    }
    let scrapes = log.scrape_ns.len();
    for s in delta.series {
        let labels: Vec<String> = s.labels.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
        let what = format!("series {}{{{}}}", s.family, labels.join(","));
        let Some(fam) = log.families.get_mut(&s.family) else {
            return Err(format!("{what}: no line before declares the family"));
        };
        let histogram = fam.kind == MetricType::Histogram;
        let series = fam.series.entry(s.labels).or_insert_with(|| {
            if histogram {
                SeriesLog::Histogram(HistogramTrack::default())
            } else {
                SeriesLog::Scalar(Track::default())
            }
        });
        match series {
            SeriesLog::Scalar(t) => {
                if s.sum.is_some() || s.count.is_some() || !s.buckets.is_empty() {
                    return Err(format!("{what}: histogram fields in a scalar series"));
                }
                extend(t, s.points.unwrap_or_default(), scrapes, &what)?;
            }
            SeriesLog::Histogram(h) => {
                if s.points.is_some() {
                    return Err(format!("{what}: scalar points in a histogram series"));
                }
                extend(&mut h.sum, s.sum.unwrap_or_default(), scrapes, &what)?;
                extend(&mut h.count, s.count.unwrap_or_default(), scrapes, &what)?;
                for b in s.buckets {
                    apply_bucket(h, b, scrapes, &what)?;
                }
            }
        }
    }
    if delta.hash.is_some() {
        log.set_last_hash(delta.hash);
    }
    if delta.last_error.is_some() {
        log.last_error = delta.last_error;
    }
    for b in delta.boundaries {
        let boundary = Boundary::parse(&b.at).ok_or_else(|| {
            format!(
                "{:?} is not a boundary ({})",
                b.at,
                Boundary::ALL.map(Boundary::as_str).join(", ")
            )
        })?;
        let taken = match (b.scrape, b.error) {
            (Some(i), None) if (i as usize) < scrapes => Ok(i),
            (Some(i), None) => {
                return Err(format!(
                    "the {} boundary names scrape {i} of {scrapes} scrapes",
                    b.at
                ))
            }
            (None, Some(e)) => Err(e),
            _ => {
                return Err(format!(
                    "the {} boundary has neither or both of \"scrape\" and \"error\"",
                    b.at
                ))
            }
        };
        log.boundaries.push(BoundaryScrape {
            boundary,
            asked_ns: b.asked_ns,
            attempts: b.attempts,
            taken,
        });
    }
    Ok(())
}

fn apply_bucket(
    histogram: &mut HistogramTrack,
    bucket: BucketRec,
    scrapes: usize,
    what: &str,
) -> Result<(), String> {
    let what = format!("{what} bucket le={:?}", bucket.le);
    let Some(bound) = prometheus::parse_value(&bucket.le) else {
        return Err(format!("{what}: the bound is not a number"));
    };
    if bucket.new {
        if bucket.at > histogram.buckets.len() {
            return Err(format!(
                "{what}: a new bucket at place {} of {}",
                bucket.at,
                histogram.buckets.len()
            ));
        }
        histogram.buckets.insert(
            bucket.at,
            Bucket {
                le: bound,
                le_text: bucket.le.clone(),
                track: Track::default(),
            },
        );
    }
    match histogram.buckets.get_mut(bucket.at) {
        Some(kept) if kept.le_text == bucket.le => {
            extend(&mut kept.track, bucket.points, scrapes, &what)
        }
        _ => Err(format!("{what}: no such bucket at place {}", bucket.at)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scrape `i` of a server whose counters and histogram grow, whose gauge moves, one of whose
    /// series is missing from scrapes 5-9, and whose histogram gains a bucket at scrape 12.
    fn page(i: u64) -> String {
        let mut p = format!(
            "# TYPE tokens counter\ntokens_total {}\n# TYPE running gauge\nrunning {}\n",
            i * 100,
            i % 7
        );
        if !(5..10).contains(&i) {
            p += &format!("# TYPE waiting gauge\nwaiting{{engine=\"0\"}} {}\n", i % 3);
        }
        p += "# TYPE ttft histogram\n";
        if i >= 12 {
            p += &format!("ttft_bucket{{le=\"0.25\"}} {}\n", i / 2);
        }
        p += &format!(
            "ttft_bucket{{le=\"0.5\"}} {i}\nttft_bucket{{le=\"+Inf\"}} {}\nttft_sum {}\nttft_count {}\n",
            2 * i,
            i as f64 * 0.3,
            2 * i
        );
        p
    }

    /// A log spilled after every flush keeps a few points a series, shows the same snapshot, and
    /// the journal reads back to the log that was never spilled.
    #[test]
    fn a_spilled_log_stays_small_and_its_journal_is_the_whole_log() {
        let dir = tempfile::tempdir().unwrap();
        let root = Root::open(dir.path()).unwrap();
        let url = "http://a/metrics".to_string();
        let clock = Clock::start();
        let mut w = JournalWriter::new(
            JournalFile::create(&root).unwrap(),
            &clock,
            FLUSH_EVERY,
            std::slice::from_ref(&url),
        );
        let (mut spilled, mut whole) = (EndpointLog::new(url.clone()), EndpointLog::new(url));
        for i in 0..40u64 {
            let text = page(i);
            let page = (i != 20).then_some(text.as_str());
            spilled.ingest_page(i * 1_000, page).unwrap();
            whole.ingest_page(i * 1_000, page).unwrap();
            if i % 3 == 2 {
                w.take(0, &spilled);
                assert!(w.write_logged() > 0);
                w.spill(0, &mut spilled);
                assert_eq!(
                    agentx_metrics::scrape_log::ServerSnapshot::of(std::iter::once(&spilled)),
                    agentx_metrics::scrape_log::ServerSnapshot::of(std::iter::once(&whole)),
                    "scrape {i}"
                );
            }
        }
        w.take(0, &spilled);
        w.write_logged();
        w.spill(0, &mut spilled);
        assert!(w.spilled());
        let tracks = |l: &EndpointLog| -> Vec<usize> {
            let mut n = Vec::new();
            for f in l.families.values() {
                for s in f.series.values() {
                    match s {
                        SeriesLog::Scalar(t) => n.push(t.points().len()),
                        SeriesLog::Histogram(h) => {
                            n.push(h.sum.points().len());
                            n.push(h.count.points().len());
                            n.extend(h.buckets.iter().map(|b| b.track.points().len()));
                        }
                    }
                }
            }
            n
        };
        assert!(
            tracks(&spilled).iter().all(|&n| n <= 2),
            "{:?}",
            tracks(&spilled)
        );
        assert!(tracks(&whole).iter().any(|&n| n >= 30));
        let back = read_journal(&dir.path().join(SCRAPE_JOURNAL)).unwrap();
        assert_eq!(back.endpoints, [whole]);
    }

    /// A journal on a full disk: the first write fails, journaling stops, nothing panics.
    #[test]
    fn a_write_error_stops_the_journal_quietly() {
        let Ok(full) = std::fs::OpenOptions::new().write(true).open("/dev/full") else {
            return;
        };
        let out = JournalFile {
            file: Arc::new(full),
            path: PathBuf::from("/dev/full"),
        };
        let url = "http://a/metrics".to_string();
        let mut w = JournalWriter::new(
            out,
            &Clock::start(),
            FLUSH_EVERY,
            std::slice::from_ref(&url),
        );
        let page = "# TYPE x gauge\nx 1\n";
        let log = EndpointLog::from_pages(&url, [(1, Some(page))]).unwrap();
        w.take(0, &log);
        assert_eq!(w.write_logged(), 0);
        assert!(w.stopped && w.pending.is_empty());
        w.take(0, &log);
        assert!(w.pending.is_empty());
        assert_eq!(w.write_logged(), 0);
    }
}
