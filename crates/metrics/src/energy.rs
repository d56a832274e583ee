//! The GPU energy of a run's profiling window, from the GPU exporters' scrape log ([`ScrapeLog`]
//! of the `--gpu-telemetry` URLs, names in [`crate::gpu`]), under InferenceX's names
//! (SemiAnalysisAI/InferenceX `infx/results/power/single_node.py` `integrate_power`,
//! `common.py` `_derived_metrics`): [`EnergyReport`].
//!
//! Window edges, per endpoint: its `profiling_start` and `profiling_complete` boundary scrapes
//! ([`crate::scrape_log::window`], the rule the server-metrics export reads too); an edge without
//! its boundary scrape is the replay's window edge, each series interpolated linearly there
//! between the periodic scrapes around it (InferenceX's rule), and a note says so.
//!
//! Per GPU (a series' GPU is [`gpu::identity`]: its UUID or serial number, else host and number):
//! 1. with an energy accumulator, the energy is its increase between the edges, scaled from mJ
//!    (DCGM) or µJ (AMD) to J. A value lower than the one before is a reset (an exporter or
//!    driver restart): nothing is ever subtracted across it, the increases of the monotone
//!    stretches are summed, and the report is partial with a reason naming the endpoint, the GPU
//!    and the scrapes;
//! 2. without one, power is integrated by trapezoids over the scrapes (`source:
//!    power_integration`, with a note), interpolated at the edges; InferenceX's rules make it
//!    invalid: fewer than two samples, a window the samples do not bracket, or an in-window gap
//!    over [`MAX_SAMPLE_GAP_S`];
//! 3. a GPU seen for part of the window only (it came or went) is partial, with the share of the
//!    window it covered; an endpoint without a successful scrape in the window is partial
//!    ("unreachable", with its failure counts).
//!
//! `partial` means some GPU's energy is missing for part of the window; `power_valid` (the nested
//! row's) that no reason at all was found, a sampling gap and a GPU count other than expected
//! included. Each GPU also gets its utilisation, memory, SM clock and throttle reasons over the
//! window's scrapes, and the exporter's update period is estimated from the energy counters'
//! change points (a dcgm-exporter collects every 30 s unless run with `-c`, so an edge value may be
//! that stale). No I/O and no clocks.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::gpu::{self, GpuIdentity, GpuMetric, Quantity};
use crate::scrape_log::window::{self, Phase};
use crate::scrape_log::{EndpointLog, FailureCounts, Labels, ScrapeLog, Track};

/// InferenceX's largest gap between two power samples in the window
/// (`_DEFAULT_MAX_SAMPLE_GAP_S`), in seconds.
pub const MAX_SAMPLE_GAP_S: f64 = 3.0;

/// What the energy is divided by: the run's successful profiling requests and their tokens, and
/// what the host knows of jobs, lanes and GPUs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Denominators {
    /// Successful profiling requests.
    pub requests_ok: u64,
    /// Their prompt tokens.
    pub input_tokens: u64,
    /// Their output tokens.
    pub output_tokens: u64,
    /// Whole jobs that succeeded, when jobs are counted.
    pub jobs_ok: Option<u64>,
    /// Concurrent lanes (agents), for a closed loop.
    pub lanes: Option<u64>,
    /// GPUs the deployment has (`--gpus`); another count seen makes the power invalid.
    pub expected_gpus: Option<u64>,
}

/// Where a GPU's energy came from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum EnergySource {
    /// The increase of an energy accumulator.
    EnergyCounter,
    /// Power integrated over the scrapes.
    PowerIntegration,
    /// Some GPUs one way, some the other (the report only).
    Mixed,
}

/// A clock's mean and lowest value over the window's scrapes.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ClockFigures {
    /// Mean, MHz.
    pub avg: f64,
    /// Lowest, MHz.
    pub min: f64,
}

/// One GPU over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct GpuEnergy {
    /// Its identity: UUID or serial number, else `host:number`, else its number.
    pub id: String,
    /// Its number on the host (`gpu`, `gpu_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<String>,
    /// Its host (`Hostname`, `hostname`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Its model (`modelName`, `card_model`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Samples of the series its energy came from, the ones around the edges included.
    pub samples: u64,
    /// Joules over the window (over the part it covered, when partial); absent when none could
    /// be measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// Where `energy_j` came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<EnergySource>,
    /// The share of the window its samples span (1 when they bracket it).
    pub covered: f64,
    /// The longest time between two of those samples in the window, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_gap_s: Option<f64>,
    /// The exporter's update period, estimated from the energy counter's change points, seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub update_s: Option<f64>,
    /// Mean utilisation over the window's scrapes, %.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub util_avg: Option<f64>,
    /// Most memory used at a scrape in the window, MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mem_used_mib_max: Option<f64>,
    /// The SM clock over the window's scrapes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<ClockFigures>,
    /// Each throttle reason seen: the share of the window's scrapes that had it set.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub throttle: BTreeMap<String, f64>,
}

/// One exporter endpoint over the window.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct EndpointEnergy {
    /// The `/metrics` URL.
    pub url: String,
    /// Successful scrapes between its window edges, both included.
    pub scrapes: u64,
    /// Failed fetches over the run, by kind.
    pub failures: FailureCounts,
    /// `boundary_scrapes` when both edges are its boundary scrapes, `interpolated` otherwise.
    pub edges: String,
    /// Seconds between its edges.
    pub seconds: f64,
    /// Its GPUs, by identity.
    pub gpus: Vec<GpuEnergy>,
}

/// The GPU energy of the profiling window and what it costs per request, token, job and agent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct EnergyReport {
    /// Where the energy came from: `energy_counter`, `power_integration` or `mixed`; absent when
    /// no GPU's energy was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<EnergySource>,
    /// The replay's profiling window, seconds.
    pub window_s: f64,
    /// GPUs whose energy was measured.
    pub gpus: u64,
    /// Joules over every GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total_gpu_energy_j: Option<f64>,
    /// Every GPU's mean power, summed: each endpoint's energy over the seconds between its edges.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg_total_gpu_power_w: Option<f64>,
    /// `avg_total_gpu_power_w` per GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub avg_power_w: Option<f64>,
    /// Joules per successful profiling request.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub joules_per_successful_query: Option<f64>,
    /// Joules per prompt token of the successful requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub joules_per_input_token: Option<f64>,
    /// Joules per output token of the successful requests.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub joules_per_output_token: Option<f64>,
    /// Joules per prompt and output token.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub joules_per_total_token: Option<f64>,
    /// Joules per whole successful job (partial jobs' energy is charged to the whole ones).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub joules_per_job: Option<f64>,
    /// Lanes per megawatt of GPU power (AgentPerf's agents per MW, GPU power only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agents_per_mw: Option<f64>,
    /// No reason below: InferenceX would publish the power figures.
    pub power_valid: bool,
    /// Some GPU's energy is missing for part of the window.
    pub partial: bool,
    /// Why the figures are partial or invalid, naming the endpoint and GPU.
    pub reasons: Vec<String>,
    /// How the figures were measured where it is not the default (edges interpolated, power
    /// integrated, a stale exporter).
    pub notes: Vec<String>,
    /// The slowest exporter's update period, estimated from its energy counters' change points,
    /// seconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exporter_update_s: Option<f64>,
    /// Each endpoint and its GPUs.
    pub endpoints: Vec<EndpointEnergy>,
}

/// One sample of a series: its scrape index, time (clock offset) and value as served.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    idx: u32,
    t: u64,
    value: f64,
}

/// What an endpoint's measurement adds to the report.
#[derive(Debug, Default)]
struct Findings {
    reasons: Vec<String>,
    notes: Vec<String>,
    /// A GPU's energy is missing for part of the window.
    partial: bool,
}

impl Findings {
    fn missing(&mut self, reason: String) {
        self.partial = true;
        self.reasons.push(reason);
    }
}

/// Seconds of a clock-offset difference.
fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

impl EnergyReport {
    /// The energy of `log`'s GPUs over the profiling `window` (clock offsets, ns), divided by
    /// `denominators`.
    pub fn of(log: &ScrapeLog, window: (u64, u64), denominators: Denominators) -> EnergyReport {
        let mut report = EnergyReport {
            window_s: secs(window.1.saturating_sub(window.0)),
            ..EnergyReport::default()
        };
        let mut findings = Findings::default();
        if window.1 <= window.0 {
            findings.missing(format!(
                "the profiling window is empty ({} ns to {} ns): no energy is measured",
                window.0, window.1
            ));
        } else {
            let mut seen_uuids: BTreeMap<String, String> = BTreeMap::new();
            for e in &log.endpoints {
                let endpoint = measure_endpoint(e, window, &mut seen_uuids, &mut findings);
                report.endpoints.push(endpoint);
            }
        }
        report.conclude(findings, denominators);
        report
    }

    /// The report-wide figures from the endpoints', and the count and staleness checks.
    fn conclude(&mut self, mut findings: Findings, denominators: Denominators) {
        let mut total = 0.0;
        let mut power = 0.0;
        let mut sources = BTreeSet::new();
        let mut observed = 0u64;
        for endpoint in &self.endpoints {
            observed += endpoint.gpus.len() as u64;
            for g in &endpoint.gpus {
                let (Some(joules), Some(source)) = (g.energy_j, g.source) else {
                    continue;
                };
                self.gpus += 1;
                total += joules;
                sources.insert(source);
                if endpoint.seconds > 0.0 {
                    power += joules / endpoint.seconds;
                }
            }
            self.exporter_update_s = endpoint
                .gpus
                .iter()
                .filter_map(|g| g.update_s)
                .chain(self.exporter_update_s)
                .reduce(f64::max);
        }
        if let Some(expected) = denominators.expected_gpus {
            if observed != expected {
                findings.reasons.push(format!(
                    "expected_gpu_count_mismatch: {expected} GPUs expected (--gpus), {observed} \
                     seen on the telemetry endpoints"
                ));
            }
        }
        if let Some(update) = self.exporter_update_s {
            if update > 0.01 * self.window_s {
                findings.notes.push(format!(
                    "the exporter updates its values about every {update:.3} s, {:.1} % of the \
                     {:.3} s window: a value read at an edge may be that old (run dcgm-exporter \
                     with -c 1000)",
                    100.0 * update / self.window_s,
                    self.window_s
                ));
            }
        }
        self.source = match sources.len() {
            0 => None,
            1 => sources.first().copied(),
            _ => Some(EnergySource::Mixed),
        };
        if self.gpus > 0 {
            self.total_gpu_energy_j = Some(total);
            self.avg_total_gpu_power_w = Some(power);
            self.avg_power_w = Some(power / self.gpus as f64);
            let per = |n: u64| (n > 0).then(|| total / n as f64);
            self.joules_per_successful_query = per(denominators.requests_ok);
            self.joules_per_input_token = per(denominators.input_tokens);
            self.joules_per_output_token = per(denominators.output_tokens);
            self.joules_per_total_token =
                per(denominators.input_tokens + denominators.output_tokens);
            self.joules_per_job = denominators.jobs_ok.and_then(per);
            self.agents_per_mw = denominators
                .lanes
                .filter(|_| power > 0.0)
                .map(|lanes| lanes as f64 / (power / 1e6));
        } else if !self.endpoints.is_empty() && findings.reasons.is_empty() {
            findings.missing("no GPU's energy could be measured".to_string());
        }
        self.partial = findings.partial;
        self.power_valid = findings.reasons.is_empty() && self.gpus > 0;
        self.reasons = findings.reasons;
        self.notes = findings.notes;
    }
}

/// The time of the boundary scrape `index` of `log`.
fn scrape_time(log: &EndpointLog, index: u32) -> u64 {
    log.scrape_ns[index as usize]
}

/// `C connect, T timeout failures` (and the other kinds when there were any), with the last error.
fn failure_text(log: &EndpointLog) -> String {
    let f = &log.failures;
    let mut text = format!("{} connect, {} timeout", f.connect, f.timeout);
    for (n, kind) in [
        (f.status, "HTTP status"),
        (f.body, "body"),
        (f.parse, "parse"),
    ] {
        if n > 0 {
            let _ = write!(text, ", {n} {kind}");
        }
    }
    text.push_str(" failures");
    if let Some(last) = &log.last_error {
        let _ = write!(text, " (the last: {last})");
    }
    text
}

/// One endpoint over the window: its edges, its GPUs' series and their energy.
fn measure_endpoint(
    log: &EndpointLog,
    window: (u64, u64),
    seen_uuids: &mut BTreeMap<String, String>,
    findings: &mut Findings,
) -> EndpointEnergy {
    let mut endpoint = EndpointEnergy {
        url: log.url.clone(),
        failures: log.failures,
        edges: "interpolated".to_string(),
        seconds: secs(window.1 - window.0),
        ..EndpointEnergy::default()
    };
    let edges = window::edges(log, &Phase::profiling(window), &|ns| {
        format!("{:.3} s", secs(ns))
    });
    let Some(edges) = edges else {
        findings.missing(format!("{} unreachable: {}", log.url, failure_text(log)));
        return endpoint;
    };
    let start = if edges.from_boundary {
        scrape_time(log, edges.span.from)
    } else {
        window.0
    };
    let end = if edges.to_boundary {
        scrape_time(log, edges.span.to)
    } else {
        window.1
    };
    let (start, end) = if end > start { (start, end) } else { window };
    let reach = (start.min(window.0), end.max(window.1));
    if !log
        .scrape_ns
        .iter()
        .any(|t| (reach.0..=reach.1).contains(t))
    {
        findings.missing(format!(
            "{} unreachable: no successful scrape in the window; {}",
            log.url,
            failure_text(log)
        ));
        return endpoint;
    }
    if edges.exact {
        endpoint.edges = "boundary_scrapes".to_string();
    } else {
        findings.notes.push(format!(
            "{}: {} not a boundary scrape: the values there are interpolated between the periodic \
             scrapes around the replay's window edge",
            log.url,
            match (edges.from_boundary, edges.to_boundary) {
                (false, false) => "neither window edge is",
                (false, true) => "the window's start is",
                _ => "the window's end is",
            }
        ));
    }
    endpoint.seconds = secs(end - start);
    endpoint.scrapes = log
        .scrape_ns
        .iter()
        .filter(|t| (start..=end).contains(*t))
        .count() as u64;
    let by_gpu = gpu_series(log);
    if by_gpu.is_empty() {
        findings.missing(format!(
            "{}: no GPU metric on its page (such as DCGM_FI_DEV_POWER_USAGE or \
             gpu_package_power): give a dcgm-exporter or AMD Device Metrics Exporter URL",
            log.url
        ));
    }
    for (identity, series) in by_gpu {
        if let Some(uuid) = &identity.uuid {
            if let Some(first) = seen_uuids.get(uuid) {
                findings.notes.push(format!(
                    "{} {}: also on {first}, counted once (from there)",
                    log.url,
                    identity.display()
                ));
                continue;
            }
            seen_uuids.insert(uuid.clone(), log.url.clone());
        }
        let measured = measure_gpu(log, &identity, &series, (start, end), findings);
        endpoint.gpus.push(measured);
    }
    endpoint
}

/// Every GPU's series on `log`, one per quantity: the quantity's first name in the table that the
/// GPU has (of AMD's clocks, the lowest `clock_index`).
fn gpu_series(log: &EndpointLog) -> BTreeMap<GpuIdentity, BTreeMap<Quantity, Chosen<'_>>> {
    let mut by_gpu: BTreeMap<GpuIdentity, BTreeMap<Quantity, Chosen<'_>>> = BTreeMap::new();
    for name in log.families.keys() {
        let Some(metric) = gpu::metric(name) else {
            continue;
        };
        for (labels, track) in log.scalars(name) {
            if !metric.accepts(labels) {
                continue;
            }
            let Some(identity) = gpu::identity(labels) else {
                continue;
            };
            let candidate = Chosen {
                metric,
                order: (gpu::rank(metric), clock_index(labels)),
                track,
            };
            let quantities = by_gpu.entry(identity).or_default();
            match quantities.get(&metric.quantity) {
                Some(held) if held.order <= candidate.order => {}
                _ => {
                    quantities.insert(metric.quantity, candidate);
                }
            }
        }
    }
    by_gpu
}

/// The series chosen for one quantity of one GPU.
#[derive(Debug, Clone, Copy)]
struct Chosen<'a> {
    metric: &'static GpuMetric,
    /// Its name's place among the quantity's, then its clock index: the lowest wins.
    order: (usize, u64),
    track: &'a Track,
}

/// A series' `clock_index` (0 without one).
fn clock_index(labels: &Labels) -> u64 {
    labels
        .iter()
        .find(|(k, _)| k == gpu::CLOCK_INDEX_KEY)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// The finite values of `track` at each of `log`'s scrapes.
fn samples(log: &EndpointLog, track: &Track) -> Vec<Sample> {
    (0..log.scrape_ns.len() as u32)
        .filter_map(|idx| {
            let value = track.at(idx).filter(|v| v.is_finite())?;
            Some(Sample {
                idx,
                t: log.scrape_ns[idx as usize],
                value,
            })
        })
        .collect()
}

/// The samples that matter for `(start, end)`: those inside, and the last before and the first
/// after it.
fn relevant(all: &[Sample], (start, end): (u64, u64)) -> &[Sample] {
    let first = all.partition_point(|s| s.t <= start).saturating_sub(1);
    let past = (all.partition_point(|s| s.t < end) + 1).min(all.len());
    &all[first.min(past)..past]
}

/// The value of the segment from `a` to `b` at `t` (within it).
fn at(a: &Sample, b: &Sample, t: u64) -> f64 {
    if b.t == a.t {
        return b.value;
    }
    a.value + (b.value - a.value) * (t - a.t) as f64 / (b.t - a.t) as f64
}

/// The share of `(start, end)` the samples span.
fn covered(samples: &[Sample], (start, end): (u64, u64)) -> f64 {
    let (Some(first), Some(last)) = (samples.first(), samples.last()) else {
        return 0.0;
    };
    let (from, to) = (first.t.max(start), last.t.min(end));
    if to <= from {
        return 0.0;
    }
    (to - from) as f64 / (end - start) as f64
}

/// The longest time between consecutive samples, seconds (`None` for fewer than two).
fn max_gap(samples: &[Sample]) -> Option<f64> {
    samples
        .windows(2)
        .map(|pair| secs(pair[1].t - pair[0].t))
        .reduce(f64::max)
}

/// A reset of an accumulator: it went back from `from` (scrape `i`) to `to` (scrape `j`).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Reset {
    i: u32,
    j: u32,
    from: f64,
    to: f64,
}

/// An accumulator's increase over `(start, end)`, in its own unit: the sum of each segment's
/// increase over its overlap with the window (linear within a segment, exact when the edges are
/// scrapes). A segment that goes down is a reset and adds nothing.
fn accumulated(samples: &[Sample], (start, end): (u64, u64)) -> (f64, Vec<Reset>) {
    let mut total = 0.0;
    let mut resets = Vec::new();
    for pair in samples.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let (lo, hi) = (a.t.max(start), b.t.min(end));
        if hi <= lo {
            continue;
        }
        if b.value < a.value {
            resets.push(Reset {
                i: a.idx,
                j: b.idx,
                from: a.value,
                to: b.value,
            });
            continue;
        }
        total += at(a, b, hi) - at(a, b, lo);
    }
    (total, resets)
}

/// Power integrated by trapezoids over `(start, end)`, in W·s, interpolated at the edges.
fn integrated(samples: &[Sample], (start, end): (u64, u64)) -> f64 {
    let mut joules = 0.0;
    for pair in samples.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        let (lo, hi) = (a.t.max(start), b.t.min(end));
        if hi <= lo {
            continue;
        }
        joules += (at(a, b, lo) + at(a, b, hi)) / 2.0 * secs(hi - lo);
    }
    joules
}

/// The median time between an accumulator's changes inside `(start, end)`, seconds: how often
/// the exporter updates it. `None` with fewer than two changes.
fn update_period(log: &EndpointLog, track: &Track, (start, end): (u64, u64)) -> Option<f64> {
    let times: Vec<u64> = track
        .points()
        .iter()
        .filter(|p| p.present)
        .map(|p| log.scrape_ns[p.idx as usize])
        .filter(|t| (start..=end).contains(t))
        .collect();
    let gaps: Vec<f64> = times.windows(2).map(|w| secs(w[1] - w[0])).collect();
    crate::dist::Sorted::new(gaps).map(|sorted| sorted.percentile(50.0))
}

/// One GPU over `(start, end)`: its energy (accumulator or power) and the other figures.
fn measure_gpu(
    log: &EndpointLog,
    identity: &GpuIdentity,
    series: &BTreeMap<Quantity, Chosen<'_>>,
    (start, end): (u64, u64),
    findings: &mut Findings,
) -> GpuEnergy {
    let span = (start, end);
    let name = format!("{} {}", log.url, identity.display());
    let mut g = GpuEnergy {
        id: identity.key.clone(),
        index: identity.index.clone(),
        hostname: identity.hostname.clone(),
        model: identity.model.clone(),
        ..GpuEnergy::default()
    };
    let of = |quantity: Quantity| series.get(&quantity).map(|c| (c, samples(log, c.track)));
    let counter = of(Quantity::Energy).filter(|(_, all)| relevant(all, span).len() >= 2);
    if let Some((chosen, all)) = counter {
        let used = relevant(&all, span);
        let (increase, resets) = accumulated(used, span);
        for reset in resets {
            let unit = chosen.metric.unit.symbol();
            findings.missing(format!(
                "{name}: the energy counter went back from {} {unit} to {} {unit} between scrapes \
                 {} and {} (exporter or driver restart); the energy between them is missing",
                reset.from, reset.to, reset.i, reset.j
            ));
        }
        g.energy_j = Some(chosen.metric.to_report_unit(increase));
        g.source = Some(EnergySource::EnergyCounter);
        g.samples = used.len() as u64;
        g.covered = covered(used, span);
        g.max_gap_s = max_gap(used);
        g.update_s = update_period(log, chosen.track, span);
    } else if let Some((chosen, all)) = of(Quantity::Power) {
        let used = relevant(&all, span);
        g.samples = used.len() as u64;
        g.covered = covered(used, span);
        g.max_gap_s = max_gap(used);
        if used.len() < 2 {
            findings.missing(format!(
                "{name}: {} power sample(s) around the window: at least 2 are needed to \
                 integrate {}",
                used.len(),
                chosen.metric.name
            ));
        } else {
            g.energy_j = Some(chosen.metric.to_report_unit(integrated(used, span)));
            g.source = Some(EnergySource::PowerIntegration);
            findings.notes.push(format!(
                "{name}: no energy counter: integrated {} over {} samples",
                chosen.metric.name,
                used.len()
            ));
            if let Some(gap) = g.max_gap_s.filter(|gap| *gap > MAX_SAMPLE_GAP_S) {
                findings.reasons.push(format!(
                    "{name}: {gap:.3} s between two power samples in the window, over \
                     InferenceX's {MAX_SAMPLE_GAP_S} s: scrape the exporter more often"
                ));
            }
        }
    } else {
        findings.missing(format!(
            "{name}: neither an energy counter nor a power gauge on the page"
        ));
    }
    if g.energy_j.is_some() && g.covered < 1.0 {
        findings.missing(format!(
            "{name}: its samples cover {:.1} % of the window (the GPU came or went, or the \
             samples do not bracket the window); the energy outside them is missing",
            100.0 * g.covered
        ));
    }
    others(log, series, span, &mut g);
    g
}

/// Utilisation, memory, SM clock and throttle reasons over the scrapes between the edges.
fn others(
    log: &EndpointLog,
    series: &BTreeMap<Quantity, Chosen<'_>>,
    (start, end): (u64, u64),
    gpu_energy: &mut GpuEnergy,
) {
    let inside = |quantity: Quantity| -> Vec<f64> {
        series.get(&quantity).map_or_else(Vec::new, |chosen| {
            samples(log, chosen.track)
                .into_iter()
                .filter(|s| (start..=end).contains(&s.t))
                .map(|s| chosen.metric.to_report_unit(s.value))
                .collect()
        })
    };
    let util = inside(Quantity::Utilization);
    gpu_energy.util_avg = (!util.is_empty()).then(|| crate::dist::mean(&util));
    gpu_energy.mem_used_mib_max = inside(Quantity::MemoryUsed).into_iter().reduce(f64::max);
    let clock = inside(Quantity::SmClock);
    gpu_energy.sm_clock_mhz = clock
        .iter()
        .copied()
        .reduce(f64::min)
        .map(|min| ClockFigures {
            avg: crate::dist::mean(&clock),
            min,
        });
    let masks = inside(Quantity::Throttle);
    for mask in &masks {
        for reason in gpu::throttle_reasons(*mask) {
            *gpu_energy.throttle.entry(reason.to_string()).or_insert(0.0) += 1.0;
        }
    }
    for share in gpu_energy.throttle.values_mut() {
        *share /= masks.len() as f64;
    }
}

#[cfg(test)]
mod tests;
