//! What a run's server-metrics scrapes leave behind, kept as compact per-series time series: the
//! [`ScrapeLog`] of every endpoint (scrape times, failures by kind, and for each metric family and
//! label set a [`Track`] of change points or a [`HistogramTrack`]), the scrapes taken at the run's
//! phase boundaries ([`Boundary`], [`BoundaryScrape`]), and the [`ServerSnapshot`] of the latest
//! values for the live view. The scraper (`client::scrape`) fills these; the exports and reports
//! read them. Where a window's edges fall on an endpoint's scrapes is [`window`]. No I/O here.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use crate::engines::{names, HitRate, ENGINES};
use crate::prometheus::{self, MetricType};
use agentx_record::Clock;

pub mod page_template;
pub mod window;

use page_template::{Kept, PageTemplate, Role, Slot};

/// One value of a [`Track`] from a scrape index on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// Index into [`EndpointLog::scrape_ns`].
    pub idx: u32,
    /// The value from this scrape on (0 when not `present`).
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
    /// Records the value at scrape `idx` (`None`: the series was absent from the page), keeping only
    /// changes.
    pub fn push(&mut self, idx: u32, value: Option<f64>) {
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
        let through = self.points.partition_point(|p| p.idx <= idx);
        let point = self.points.get(through.checked_sub(1)?)?;
        point.present.then_some(point.value)
    }

    /// The change points, in scrape order.
    pub fn points(&self) -> &[Point] {
        &self.points
    }

    /// The first value seen.
    pub fn first(&self) -> Option<f64> {
        self.points.iter().find(|p| p.present).map(|p| p.value)
    }

    /// Drops the first `flushed` points, which a journal holds, except the first present one (a
    /// snapshot's "since the first scrape") and the last of them (the value now, which the next
    /// scrape is compared with); returns how many of the `flushed` points stay. A spilled track
    /// answers [`Track::first`] and [`Track::at`] from its last flushed point on; the journal
    /// has the rest.
    pub fn spill(&mut self, flushed: usize) -> usize {
        let flushed = flushed.min(self.points.len());
        if flushed < 3 {
            return flushed;
        }
        let first = self.points[..flushed].iter().position(|p| p.present);
        let mut index = 0;
        self.points.retain(|_| {
            let keep = index >= flushed - 1 || Some(index) == first;
            index += 1;
            keep
        });
        match first {
            Some(f) if f < flushed - 1 => 2,
            _ => 1,
        }
    }

    /// Appends a change point read back from a journal, as [`Track::push`] recorded it: points
    /// keep scrape order (several at one index only if a page repeated the series).
    pub fn append(&mut self, point: Point) -> Result<(), String> {
        if let Some(last) = self.points.last() {
            if point.idx < last.idx {
                return Err(format!(
                    "a change point at scrape {} comes after one at scrape {}",
                    point.idx, last.idx
                ));
            }
        }
        self.points.push(point);
        Ok(())
    }
}

/// One `le` bucket of a histogram series (cumulative counts, as served).
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    /// The upper bound, parsed (`+Inf` is infinity).
    pub le: f64,
    /// The bound as the server wrote it (`0.5`, `1.0`, `+Inf`), for export keys.
    pub le_text: String,
    /// The bucket's cumulative count over the scrapes.
    pub track: Track,
}

/// A histogram series: its buckets in increasing `le`, `_sum` and `_count`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HistogramTrack {
    /// The `le` buckets, in increasing bound.
    pub buckets: Vec<Bucket>,
    /// The `_sum` series.
    pub sum: Track,
    /// The `_count` series.
    pub count: Track,
}

/// The values of one series (one label set of one family on one endpoint).
#[derive(Debug, Clone, PartialEq)]
pub enum SeriesLog {
    /// Counters, gauges and untyped metrics.
    Scalar(Track),
    /// Histograms: their buckets, `_sum` and `_count`.
    Histogram(HistogramTrack),
}

/// Labels of a series, sorted by name (`le` removed from histogram buckets).
pub type Labels = Vec<(String, String)>;

/// Whether `labels` (a sample's, as written) name the series `key` (sorted, without a histogram's
/// `le`): the same pairs, in any order.
fn same_series(key: &Labels, labels: &[(String, String)], histogram: bool) -> bool {
    let mut count = 0;
    for pair in labels {
        if histogram && pair.0 == "le" {
            continue;
        }
        if key.binary_search(pair).is_err() {
            return false;
        }
        count += 1;
    }
    count == key.len()
}

/// The bucket of histogram series `h` that bucket sample `s` counts (added, in order of its
/// bound, when the series has none with that bound yet); `None` for a sample without a numeric
/// `le`.
fn bucket_role(h: &mut HistogramTrack, s: &prometheus::Sample) -> Option<Role> {
    let le_text = s.label("le")?;
    let bound = prometheus::parse_value(le_text)?;
    let index = match h.buckets.iter().position(|b| b.le == bound) {
        Some(index) => index,
        None => {
            let index = h.buckets.partition_point(|b| b.le < bound);
            let bucket = Bucket {
                le: bound,
                le_text: le_text.to_string(),
                track: Track::default(),
            };
            h.buckets.insert(index, bucket);
            index
        }
    };
    let le_bits = h.buckets[index].le.to_bits();
    Some(Role::Bucket { index, le_bits })
}

/// Records `value` at scrape `idx` in `series`, in the place `role` names.
fn fold(series: &mut SeriesLog, role: Role, idx: u32, value: f64) {
    match (series, role) {
        (SeriesLog::Scalar(track), Role::Value) => track.push(idx, Some(value)),
        (SeriesLog::Histogram(h), Role::Sum) => h.sum.push(idx, Some(value)),
        (SeriesLog::Histogram(h), Role::Count) => h.count.push(idx, Some(value)),
        (SeriesLog::Histogram(h), Role::Bucket { index, .. }) => {
            if let Some(bucket) = h.buckets.get_mut(index) {
                bucket.track.push(idx, Some(value));
            }
        }
        _ => {}
    }
}

/// One metric family as seen on one endpoint.
#[derive(Debug, Clone)]
pub struct FamilyLog {
    /// The type its `# TYPE` line declared.
    pub kind: MetricType,
    /// The `# HELP` text, empty without one.
    pub help: String,
    /// Its series by label set.
    pub series: BTreeMap<Labels, SeriesLog>,
    /// The scrape that last carried each series (to mark the ones that disappear). Bookkeeping of
    /// one `ingest`: only an entry equal to the scrape being ingested counts, so a log without it
    /// (read back from a journal) ingests the next page exactly as the original would.
    seen: BTreeMap<Labels, u32>,
}

impl FamilyLog {
    /// A family with no series yet.
    pub fn new(kind: MetricType, help: String) -> FamilyLog {
        FamilyLog {
            kind,
            help,
            series: BTreeMap::new(),
            seen: BTreeMap::new(),
        }
    }
}

/// Equal when the type, help and series are (`FamilyLog::seen` is an ingest's bookkeeping).
impl PartialEq for FamilyLog {
    fn eq(&self, other: &FamilyLog) -> bool {
        self.kind == other.kind && self.help == other.help && self.series == other.series
    }
}

/// What became of one fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchOutcome {
    /// Parsed; `changed` when the page differed from the previous successful one.
    Ok {
        /// The page differed from the previous successful one.
        changed: bool,
    },
    /// The connection could not be made.
    Connect,
    /// The server answered with this non-success HTTP status.
    Status(u16),
    /// No complete response within the scrape timeout.
    Timeout,
    /// The body broke off or was too large.
    Body,
    /// The body is not Prometheus exposition text.
    Parse,
}

/// One fetch of an endpoint.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fetch {
    /// Clock offset when the request was sent.
    pub start_ns: u64,
    /// Send to the end of the body (or the failure).
    pub latency_ns: u64,
    /// What became of it.
    pub outcome: FetchOutcome,
}

/// Failed fetches by kind.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    serde::Serialize,
    serde::Deserialize,
    schemars::JsonSchema,
)]
#[serde(default)]
pub struct FailureCounts {
    /// Connections that could not be made.
    pub connect: u64,
    /// Non-success HTTP statuses.
    pub status: u64,
    /// Fetches without a complete response in time.
    pub timeout: u64,
    /// Bodies that broke off or were too large.
    pub body: u64,
    /// Pages that did not parse.
    pub parse: u64,
}

impl FailureCounts {
    /// Failed fetches of every kind.
    pub fn total(&self) -> u64 {
        self.connect + self.status + self.timeout + self.body + self.parse
    }
}

/// A phase boundary of a run, where the scraper takes a scrape of every endpoint and tags it (as
/// agentx-harness 1.0.12 tags its phase-boundary scrapes): the profiling window's counters run
/// from the [`Boundary::ProfilingStart`] scrape to the [`Boundary::ProfilingComplete`] one, by
/// scrape index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Boundary {
    /// Before the first warmup request.
    WarmupStart,
    /// The warmup's cache-pressure stage begins (the primers returned).
    PressureStart,
    /// The warmup drained; no profiling request was sent yet.
    ProfilingStart,
    /// Sending stopped (the benchmark duration, or an early stop); requests may be in flight.
    ProfilingEnd,
    /// Every profiling request returned or was cancelled at the end of the grace period.
    ProfilingComplete,
}

impl Boundary {
    /// Every boundary, in the order a run passes them.
    pub const ALL: [Boundary; 5] = [
        Boundary::WarmupStart,
        Boundary::PressureStart,
        Boundary::ProfilingStart,
        Boundary::ProfilingEnd,
        Boundary::ProfilingComplete,
    ];

    /// Its name in the export and the journal.
    pub fn as_str(self) -> &'static str {
        match self {
            Boundary::WarmupStart => "warmup_start",
            Boundary::PressureStart => "cache_pressure_start",
            Boundary::ProfilingStart => "profiling_start",
            Boundary::ProfilingEnd => "profiling_end",
            Boundary::ProfilingComplete => "profiling_complete",
        }
    }

    /// The boundary [`Boundary::as_str`] names.
    pub fn parse(name: &str) -> Option<Boundary> {
        Boundary::ALL.into_iter().find(|b| b.as_str() == name)
    }

    /// The phase its scrape belongs to, as aiperf tags a boundary scrape with its own phase.
    pub fn phase(self) -> &'static str {
        match self {
            Boundary::WarmupStart | Boundary::PressureStart => "warmup",
            _ => "profiling",
        }
    }
}

/// A boundary scrape of one endpoint: the scrape it took, or why there is none (after a retry).
#[derive(Debug, Clone, PartialEq)]
pub struct BoundaryScrape {
    /// The boundary it was taken at.
    pub boundary: Boundary,
    /// Clock offset when the run asked for it.
    pub asked_ns: u64,
    /// Fetches it took (a failed or timed-out one is retried once).
    pub attempts: u32,
    /// The index into [`EndpointLog::scrape_ns`] of its scrape, or what went wrong.
    pub taken: Result<u32, String>,
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
    /// Failed fetches by kind.
    pub failures: FailureCounts,
    /// What the latest failure was, for the log and the export.
    pub last_error: Option<String>,
    /// The boundary scrapes, in the order they were asked for.
    pub boundaries: Vec<BoundaryScrape>,
    last_hash: Option<u64>,
    /// The last fully parsed page's shape (see [`page_template`]).
    template: Kept,
}

impl EndpointLog {
    /// An empty log of the endpoint at `url` (the full `/metrics` URL).
    pub fn new(url: String) -> EndpointLog {
        EndpointLog {
            url,
            fetches: Vec::new(),
            scrape_ns: Vec::new(),
            families: BTreeMap::new(),
            failures: FailureCounts::default(),
            last_error: None,
            boundaries: Vec::new(),
            last_hash: None,
            template: Kept::default(),
        }
    }

    /// The latest scrape taken at `boundary`, if any was asked for.
    pub fn boundary(&self, boundary: Boundary) -> Option<&BoundaryScrape> {
        self.boundaries
            .iter()
            .rev()
            .find(|x| x.boundary == boundary)
    }

    /// Counts a failed fetch and keeps `message` as the latest error (warned the first time, logged at
    /// debug after).
    pub fn fail(&mut self, fetch: Fetch, message: String) {
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

    /// Fold one page's text, fetched at `t_ns`, into the series: only its values when every line
    /// but the values is the last page's (see [`page_template`]), else parsed in full.
    pub fn ingest_text(
        &mut self,
        fetch: Fetch,
        t_ns: u64,
        text: &str,
    ) -> Result<(), prometheus::ParseError> {
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        let hash = hasher.finish();
        if let Some(template) = self.template.0.take() {
            let values = template.values(text);
            if let Some(values) = values.filter(|_| self.fits(&template)) {
                let idx = self.begin_scrape(fetch, t_ns, hash);
                self.fold_values(&template, &values, idx);
                self.mark_absent(idx);
                self.template.0 = Some(template);
                return Ok(());
            }
        }
        let page = prometheus::parse_page(text)?;
        let slots = self.fold_families(fetch, t_ns, hash, &page.families);
        self.template.0 = PageTemplate::new(text, &page, &slots);
        Ok(())
    }

    /// Counts a successful fetch and its scrape time; the scrape's index.
    fn begin_scrape(&mut self, mut fetch: Fetch, t_ns: u64, hash: u64) -> u32 {
        let changed = self.last_hash != Some(hash);
        self.last_hash = Some(hash);
        fetch.outcome = FetchOutcome::Ok { changed };
        self.fetches.push(fetch);
        self.scrape_ns.push(t_ns);
        self.scrape_ns.len() as u32 - 1
    }

    /// Folds a page's families in, creating the families, series and buckets it brings; where each
    /// sample's value went (`[family][sample]`, `None` for the ones left out).
    fn fold_families(
        &mut self,
        fetch: Fetch,
        t_ns: u64,
        hash: u64,
        families: &[prometheus::Family],
    ) -> Vec<Vec<Option<Slot>>> {
        let idx = self.begin_scrape(fetch, t_ns, hash);
        let mut slots = Vec::with_capacity(families.len());
        for f in families {
            let mut family_slots = vec![None; f.samples.len()];
            if f.kind == MetricType::Summary || f.name.ends_with("_created") {
                slots.push(family_slots);
                continue;
            }
            let fam = self
                .families
                .entry(f.name.clone())
                .or_insert_with(|| FamilyLog::new(f.kind, f.help.clone()));
            if fam.kind != f.kind {
                // A family that changed type (a restarted server of another version) keeps its
                // first type; its new samples are not comparable with the old ones.
                slots.push(family_slots);
                continue;
            }
            if fam.help.is_empty() && !f.help.is_empty() {
                fam.help.clone_from(&f.help);
            }
            // The series of the sample before: a histogram's buckets, sum and count follow each
            // other with the same labels, so their key is made (and looked up) once per series.
            let mut current: Option<Labels> = None;
            for (s, slot) in f.samples.iter().zip(&mut family_slots) {
                let role = f.role(s);
                let histogram = fam.kind == MetricType::Histogram;
                if role == "_created" || (!histogram && !matches!(role, "" | "_total")) {
                    continue;
                }
                let key = match current.take() {
                    Some(key) if same_series(&key, &s.labels, histogram) => key,
                    _ => {
                        let mut labels: Labels = s
                            .labels
                            .iter()
                            .filter(|(k, _)| !(histogram && k == "le"))
                            .cloned()
                            .collect();
                        labels.sort();
                        fam.seen.insert(labels.clone(), idx);
                        fam.series.entry(labels.clone()).or_insert_with(|| {
                            if histogram {
                                SeriesLog::Histogram(HistogramTrack::default())
                            } else {
                                SeriesLog::Scalar(Track::default())
                            }
                        });
                        labels
                    }
                };
                let Some(series) = fam.series.get_mut(&key) else {
                    continue;
                };
                let role = match (&mut *series, role) {
                    (SeriesLog::Scalar(_), _) => Some(Role::Value),
                    (SeriesLog::Histogram(_), "_sum") => Some(Role::Sum),
                    (SeriesLog::Histogram(_), "_count") => Some(Role::Count),
                    (SeriesLog::Histogram(h), "_bucket") => bucket_role(h, s),
                    (SeriesLog::Histogram(_), _) => None,
                };
                if let Some(role) = role {
                    fold(series, role, idx, s.value);
                    *slot = Some(Slot {
                        family: f.name.clone(),
                        labels: key.clone(),
                        role,
                    });
                }
                current = Some(key);
            }
            slots.push(family_slots);
        }
        self.mark_absent(idx);
        slots
    }

    /// Whether every series and bucket `template`'s values go to is in the log as it was when the
    /// template was made.
    fn fits(&self, template: &PageTemplate) -> bool {
        template.groups.iter().all(|group| {
            let series = self
                .families
                .get(&group.family)
                .and_then(|fam| fam.series.get(&group.labels));
            group.roles.iter().all(|role| match (series, role) {
                (Some(SeriesLog::Scalar(_)), Role::Value) => true,
                (Some(SeriesLog::Histogram(_)), Role::Sum | Role::Count) => true,
                (Some(SeriesLog::Histogram(h)), Role::Bucket { index, le_bits }) => {
                    h.buckets.get(*index).map(|b| b.le.to_bits()) == Some(*le_bits)
                }
                _ => false,
            })
        })
    }

    /// Folds in `values`, one per role of `template`'s groups in order, at scrape `idx`. Each
    /// group takes its own values first, so one the log lacks leaves the others' in place.
    fn fold_values(&mut self, template: &PageTemplate, values: &[f64], idx: u32) {
        let mut values = values;
        for group in &template.groups {
            let (group_values, rest) = values.split_at(group.roles.len().min(values.len()));
            values = rest;
            let Some(fam) = self.families.get_mut(&group.family) else {
                continue;
            };
            match fam.seen.get_mut(&group.labels) {
                Some(seen) => *seen = idx,
                None => {
                    fam.seen.insert(group.labels.clone(), idx);
                }
            }
            let Some(series) = fam.series.get_mut(&group.labels) else {
                continue;
            };
            for (role, value) in group.roles.iter().zip(group_values) {
                fold(series, *role, idx, *value);
            }
        }
    }

    /// Series missing from scrape `idx`'s page are absent from this scrape on.
    fn mark_absent(&mut self, idx: u32) {
        for fam in self.families.values_mut() {
            for (labels, series) in &mut fam.series {
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
            log.ingest_page(t, page)?;
        }
        Ok(log)
    }

    /// One page of [`EndpointLog::from_pages`] folded in.
    pub fn ingest_page(
        &mut self,
        scrape_ns: u64,
        page: Option<&str>,
    ) -> Result<(), prometheus::ParseError> {
        let fetch = Fetch {
            start_ns: scrape_ns,
            latency_ns: 0,
            outcome: FetchOutcome::Connect,
        };
        match page {
            Some(text) => self.ingest_text(fetch, scrape_ns, text)?,
            None => self.fail(fetch, "connection refused".to_string()),
        }
        Ok(())
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

    pub(crate) fn last_idx(&self) -> Option<u32> {
        (self.scrape_ns.len() as u32).checked_sub(1)
    }

    /// The hash of the latest parsed page (whether the next one `changed`).
    pub fn last_hash(&self) -> Option<u64> {
        self.last_hash
    }

    /// Sets the hash of the latest parsed page (a log read back from a journal restores it).
    pub fn set_last_hash(&mut self, hash: Option<u64>) {
        self.last_hash = hash;
    }
}

/// The whole run's scrapes.
#[derive(Debug, Clone)]
pub struct ScrapeLog {
    /// The run's clock the offsets are on.
    pub clock: Clock,
    /// The time between two scrapes of an endpoint.
    pub interval: Duration,
    /// One log per scraped endpoint, in the order given.
    pub endpoints: Vec<EndpointLog>,
}

/// Latest values for the live `srv` row and the sweep's idle wait, read by the engine table
/// ([`ENGINES`]) and summed or averaged across endpoints and series by what each metric is (counts
/// add up, usage fractions average). `None` when no endpoint has the metric.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ServerSnapshot {
    /// Clock offset of the newest successful scrape.
    pub at_ns: Option<u64>,
    /// Clock offset of the first scrape (the counts below are increases since it).
    pub first_ns: Option<u64>,
    /// Successful scrapes, over every endpoint.
    pub scrapes: u64,
    /// Failed fetches, over every endpoint.
    pub failed_scrapes: u64,
    /// Requests running, summed (each engine's names: [`ENGINES`]).
    pub running: Option<f64>,
    /// Requests waiting, summed.
    pub waiting: Option<f64>,
    /// GPU KV usage as a fraction, averaged across series.
    pub kv_usage: Option<f64>,
    /// CPU KV usage as a fraction, averaged.
    pub(crate) cpu_kv_usage: Option<f64>,
    /// Prefix-cache hit rate since the first scrape (the engine's [`HitRate`]s, the first computable).
    pub prefix_cache_hit_rate: Option<f64>,
    /// The external (offload) tier's hit rate since the first scrape.
    pub external_cache_hit_rate: Option<f64>,
    /// Prompt and generation tokens counted by the server since the first scrape.
    pub prompt_tokens: Option<f64>,
    /// Generated tokens counted by the server since the first scrape.
    pub generation_tokens: Option<f64>,
}

impl ServerSnapshot {
    /// The snapshot of the latest scrapes of `logs`.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "an iterator is taken by value, as adaptors take it; it is cloned once per metric"
    )]
    pub fn of<'a>(logs: impl Iterator<Item = &'a EndpointLog> + Clone) -> ServerSnapshot {
        let latest = |names: &[&str]| -> Vec<f64> {
            for name in names {
                let values: Vec<f64> = logs
                    .clone()
                    .flat_map(|e| {
                        let idx = e.last_idx();
                        e.scalars(name)
                            .filter_map(move |(_, t)| idx.and_then(|i| t.at(i)))
                    })
                    .collect();
                if !values.is_empty() {
                    return values;
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
                let Some(last) = e.last_idx() else { continue };
                for (l, t) in e.scalars(name) {
                    if !keep(l) {
                        continue;
                    }
                    if let (Some(first), Some(now)) = (t.first(), t.at(last)) {
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
        let rate = |h: &HitRate| match *h {
            HitRate::Ratio { hits, of } => ratio(increase(hits, &all), increase(of, &all)),
            HitRate::Share {
                metric,
                label,
                value,
            } => {
                let share = |l: &Labels| l.iter().any(|(k, v)| k == label && v == value);
                ratio(increase(metric, &share), increase(metric, &all))
            }
            HitRate::OverSum { hits, rest } => {
                let (hits_increase, rest_increase) = (increase(hits, &all), increase(rest, &all));
                ratio(
                    hits_increase,
                    hits_increase
                        .zip(rest_increase)
                        .map(|(hits_increase, rest_increase)| hits_increase + rest_increase),
                )
            }
        };
        let prefix = ENGINES.iter().flat_map(|e| e.hit_rate).find_map(&rate);
        let external = ENGINES
            .iter()
            .flat_map(|e| e.external_hit_rate)
            .find_map(&rate);
        let kv_usage = ENGINES.iter().find_map(|e| {
            let usage = latest(e.kv_usage);
            // An engine reporting a percentage is scaled to a fraction.
            avg(usage).map(|u| if e.kv_usage_percent { u / 100.0 } else { u })
        });
        let prompt_tokens = ENGINES.iter().find_map(|e| {
            let (first, rest) = e.prompt_tokens.split_first()?;
            let mut total = increase(first, &all)?;
            for name in rest {
                total += increase(name, &all).unwrap_or(0.0);
            }
            Some(total)
        });
        let generation_tokens = ENGINES
            .iter()
            .filter_map(|e| e.generation_tokens)
            .find_map(|name| increase(name, &all));
        ServerSnapshot {
            at_ns: logs
                .clone()
                .filter_map(|e| e.scrape_ns.last().copied())
                .max(),
            first_ns: logs
                .clone()
                .filter_map(|e| e.scrape_ns.first().copied())
                .min(),
            scrapes: logs.clone().map(EndpointLog::scrapes).sum(),
            failed_scrapes: logs.clone().map(|e| e.failures.total()).sum(),
            running: sum(latest(&names(|e| e.running))),
            waiting: sum(latest(&names(|e| e.waiting))),
            kv_usage,
            cpu_kv_usage: avg(latest(&names(|e| e.cpu_kv_usage))),
            prefix_cache_hit_rate: prefix,
            external_cache_hit_rate: external,
            prompt_tokens,
            generation_tokens,
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
        self.endpoints.iter().map(EndpointLog::scrapes).sum()
    }

    /// Failed scrapes over all endpoints.
    pub fn failed_scrapes(&self) -> u64 {
        self.endpoints.iter().map(|e| e.failures.total()).sum()
    }
}
