//! Within-run stability of an AgentX run (docs/specs/inferencex-rows.md#stability, InferenceX's
//! `request_metrics.stability`): how evenly the run covered its time and its root trajectories, how
//! far the tail latencies drift between fixed windows, and from which checkpoint on the cumulative
//! tail settled.
//!
//! It owns the rules of that block and nothing else:
//! - the clock of a request is when its credit was issued, else when it started; requests with
//!   neither count for the trajectories but sit in no window;
//! - windows are 600 s, tumbling from the earliest timestamp; a run of D seconds expects
//!   `floor(D / 600)` windows and requests past the last expected window are left out of them;
//! - a request's root trajectory is its source trace id, else its conversation id, else `unknown`;
//!   the Kish effective count is `n² / Σ countᵢ²` over the per-root request counts, `n` their sum;
//! - `observed_ranges` (the min and max across windows of each window's p75 and p90 of TTFT, E2EL
//!   and interactivity) needs at least two observed windows, else it is empty; interactivity is
//!   `1 / (the window's pXX of ITL)`, so the slowest window gives the minimum;
//! - convergence: cumulative percentiles at every 300 s checkpoint up to `floor(D / 300)·300`; a
//!   metric converged at the earliest checkpoint that has at least 1200 s of later checkpoints after
//!   it and from which on every value is within 5 % of the final one in log ratio
//!   (`|ln(v / final)| <= ln 1.05`), so a latency and its reciprocal settle together; `null` when no
//!   checkpoint qualifies.
//!
//! Latencies are seconds, only positive ones count, and percentiles are [`super::dist`]'s.

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::dist::percentile;

/// Width of a window (s).
pub(crate) const WINDOW_SECONDS: f64 = 600.0;
/// Spacing of the convergence checkpoints (s).
pub(crate) const CHECKPOINT_SECONDS: f64 = 300.0;
/// The band a converged series stays in, as a ratio to its final value.
pub(crate) const TOLERANCE_RATIO: f64 = 0.05;
/// How long a converged series must be confirmed by later checkpoints (s).
pub(crate) const MIN_CONFIRMATION_SECONDS: f64 = 1200.0;
/// The percentiles the block reports.
const PERCENTILES: [(u8, &str); 2] = [(75, "p75"), (90, "p90")];
/// Slack for a value exactly on the tolerance boundary (floating-point `ln`).
const BOUNDARY_EPSILON: f64 = 1e-12;

/// What the block reads of one successful profiling request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample<'a> {
    /// `credit_issued_ns`, else `request_start_ns`.
    pub at_ns: Option<u64>,
    /// `source_trace_id`, else the conversation id; empty when neither is known.
    pub root: &'a str,
    /// Time to first token, seconds.
    pub ttft_s: Option<f64>,
    /// End-to-end latency, seconds.
    pub e2el_s: Option<f64>,
    /// Full-response inter-token latency, seconds per token.
    pub itl_s: Option<f64>,
}

/// The three tracked metrics, in report order, and how each is read from a sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Metric {
    Ttft,
    E2el,
    Intvty,
}

impl Metric {
    const ALL: [Metric; 3] = [Metric::Ttft, Metric::E2el, Metric::Intvty];

    fn key(self) -> &'static str {
        match self {
            Metric::Ttft => "ttft",
            Metric::E2el => "e2el",
            Metric::Intvty => "intvty",
        }
    }

    /// The latency the metric's percentiles are taken of (ITL for interactivity), when positive.
    fn latency(self, sample: &Sample<'_>) -> Option<f64> {
        match self {
            Metric::Ttft => sample.ttft_s,
            Metric::E2el => sample.e2el_s,
            Metric::Intvty => sample.itl_s,
        }
        .filter(|v| v.is_finite() && *v > 0.0)
    }

    /// The reported figure of a latency percentile.
    fn figure(self, latency_pct: f64) -> Option<f64> {
        match self {
            Metric::Intvty if latency_pct > 0.0 => Some(1.0 / latency_pct),
            Metric::Intvty => None,
            _ => Some(latency_pct),
        }
    }
}

/// The smallest and largest of a per-window figure.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Range {
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
}

/// Where a cumulative percentile settled.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Converged {
    /// The earliest qualifying checkpoint (s from the first request).
    pub(crate) time_seconds: f64,
    /// Requests with the metric up to that checkpoint.
    pub requests: u64,
    /// The smallest and largest value from that checkpoint on.
    pub min: f64,
    /// The largest value from that checkpoint on.
    pub max: f64,
    /// The largest `|value / final - 1|` from that checkpoint on.
    pub(crate) max_relative_deviation: f64,
}

/// Per metric (`ttft`, `e2el`, `intvty`), per percentile (`p75`, `p90`).
pub type PerMetric<T> = BTreeMap<&'static str, BTreeMap<&'static str, Option<T>>>;

/// The convergence verdicts and the rule's parameters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Convergence {
    pub(crate) checkpoint_seconds: f64,
    pub(crate) tolerance_ratio: f64,
    pub(crate) min_confirmation_seconds: f64,
    /// The last checkpoint: the duration rounded down to whole checkpoints.
    pub(crate) horizon_seconds: f64,
    /// Where each metric's p75 and p90 settled (`None`: not within the horizon).
    pub metrics: PerMetric<Converged>,
}

/// `request_metrics.stability`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stability {
    /// The length of a window, seconds.
    pub window_seconds: f64,
    /// Whole windows in the configured duration.
    pub expected_window_count: u64,
    pub(crate) observed_window_count: u64,
    pub(crate) min_window_requests: u64,
    /// Distinct root trajectories among the requests.
    pub root_trajectory_count: u64,
    /// Their Kish effective count, `n² / Σ count²` (0 with no requests).
    pub root_trajectory_kish_effective_count: f64,
    pub(crate) root_trajectory_largest_share: f64,
    /// Empty with fewer than two observed windows.
    pub observed_ranges: PerMetric<Range>,
    /// The cumulative percentiles' convergence.
    pub convergence: Convergence,
}

/// The stability block of `samples` for a run of `duration_s` seconds (the configured benchmark
/// duration; `None` or non-positive: no windows and no checkpoints).
pub fn stability(samples: &[Sample<'_>], duration_s: Option<f64>) -> Stability {
    let duration = duration_s.filter(|d| d.is_finite() && *d > 0.0);
    let expected = duration.map_or(0, |d| (d / WINDOW_SECONDS).floor() as u64);
    let horizon = duration.map_or(0.0, |d| {
        (d / CHECKPOINT_SECONDS).floor() * CHECKPOINT_SECONDS
    });

    let mut timed: Vec<(u64, &Sample<'_>)> = samples
        .iter()
        .filter_map(|s| s.at_ns.map(|t| (t, s)))
        .collect();
    timed.sort_by_key(|(t, _)| *t);
    let origin = timed.first().map(|(t, _)| *t);

    let mut windows: BTreeMap<u64, Vec<&Sample<'_>>> = BTreeMap::new();
    if let Some(origin) = origin.filter(|_| expected > 0) {
        for (t, s) in &timed {
            let window = ((t - origin) as f64 / (WINDOW_SECONDS * 1e9)).floor() as u64;
            if window < expected {
                windows.entry(window).or_default().push(s);
            }
        }
    }
    let (count, kish, largest) = trajectories(samples);
    Stability {
        window_seconds: WINDOW_SECONDS,
        expected_window_count: expected,
        observed_window_count: windows.len() as u64,
        min_window_requests: windows.values().map(|w| w.len() as u64).min().unwrap_or(0),
        root_trajectory_count: count,
        root_trajectory_kish_effective_count: kish,
        root_trajectory_largest_share: largest,
        observed_ranges: if windows.len() >= 2 {
            ranges(&windows)
        } else {
            BTreeMap::new()
        },
        convergence: Convergence {
            checkpoint_seconds: CHECKPOINT_SECONDS,
            tolerance_ratio: TOLERANCE_RATIO,
            min_confirmation_seconds: MIN_CONFIRMATION_SECONDS,
            horizon_seconds: horizon,
            metrics: convergence(&timed, origin, horizon),
        },
    }
}

/// The number of root trajectories, their Kish effective count and the largest one's share of the
/// requests (0 and 0 for no requests).
fn trajectories(samples: &[Sample<'_>]) -> (u64, f64, f64) {
    let mut counts: HashMap<&str, u64> = HashMap::new();
    for s in samples {
        let root = if s.root.is_empty() { "unknown" } else { s.root };
        *counts.entry(root).or_default() += 1;
    }
    let total = samples.len() as f64;
    let squares: f64 = counts.values().map(|c| (*c as f64) * (*c as f64)).sum();
    let kish = if squares > 0.0 {
        total * total / squares
    } else {
        0.0
    };
    let largest = counts.values().max().map_or(0.0, |m| *m as f64 / total);
    (counts.len() as u64, kish, largest)
}

/// The percentile `p` of `values` (sorted here).
fn pct(values: &mut [f64], p: u8) -> Option<f64> {
    values.sort_unstable_by(f64::total_cmp);
    percentile(values, f64::from(p))
}

/// Each metric's per-window p75 and p90, reduced to their min and max across windows.
fn ranges(windows: &BTreeMap<u64, Vec<&Sample<'_>>>) -> PerMetric<Range> {
    let mut out = PerMetric::new();
    for m in Metric::ALL {
        let mut per_p: BTreeMap<&'static str, Option<Range>> = BTreeMap::new();
        for (p, key) in PERCENTILES {
            let figures: Vec<f64> = windows
                .values()
                .filter_map(|w| {
                    let mut latencies: Vec<f64> = w.iter().filter_map(|s| m.latency(s)).collect();
                    pct(&mut latencies, p).and_then(|x| m.figure(x))
                })
                .collect();
            let range = figures.iter().copied().reduce(f64::min).map(|min| Range {
                min,
                max: figures.iter().copied().fold(f64::MIN, f64::max),
            });
            per_p.insert(key, range);
        }
        out.insert(m.key(), per_p);
    }
    out
}

/// One checkpoint of a cumulative series.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Checkpoint {
    seconds: f64,
    requests: u64,
    value: f64,
}

/// The cumulative p75 and p90 of each metric at every checkpoint up to `horizon`, and where each
/// settled.
fn convergence(
    timed: &[(u64, &Sample<'_>)],
    origin: Option<u64>,
    horizon: f64,
) -> PerMetric<Converged> {
    let mut series: BTreeMap<(Metric, &'static str), Vec<Checkpoint>> = BTreeMap::new();
    if let Some(origin) = origin {
        let mut values: BTreeMap<Metric, Vec<f64>> = BTreeMap::new();
        let mut cursor = 0;
        let checkpoints = (horizon / CHECKPOINT_SECONDS).floor() as u64;
        for k in 1..=checkpoints {
            let seconds = k as f64 * CHECKPOINT_SECONDS;
            let cutoff = origin as f64 + seconds * 1e9;
            while cursor < timed.len() && (timed[cursor].0 as f64) < cutoff {
                for m in Metric::ALL {
                    if let Some(latency) = m.latency(timed[cursor].1) {
                        values.entry(m).or_default().push(latency);
                    }
                }
                cursor += 1;
            }
            for (m, v) in &mut values {
                for (p, key) in PERCENTILES {
                    let requests = v.len() as u64;
                    if let Some(value) = pct(v, p).and_then(|x| m.figure(x)) {
                        series.entry((*m, key)).or_default().push(Checkpoint {
                            seconds,
                            requests,
                            value,
                        });
                    }
                }
            }
        }
    }
    let mut out = PerMetric::new();
    for m in Metric::ALL {
        let per_p = PERCENTILES
            .iter()
            .map(|(_, key)| (*key, series.get(&(m, *key)).and_then(|s| settled(s))))
            .collect();
        out.insert(m.key(), per_p);
    }
    out
}

/// The earliest checkpoint with at least [`MIN_CONFIRMATION_SECONDS`] of later checkpoints from
/// which every value stays within [`TOLERANCE_RATIO`] of the final value in log ratio.
fn settled(series: &[Checkpoint]) -> Option<Converged> {
    let last = series.last()?;
    let (end, fin) = (last.seconds, last.value);
    if !fin.is_finite() || fin <= 0.0 {
        return None;
    }
    let band = TOLERANCE_RATIO.ln_1p() + BOUNDARY_EPSILON;
    for (i, c) in series.iter().enumerate() {
        if end - c.seconds < MIN_CONFIRMATION_SECONDS {
            continue;
        }
        let rest = &series[i..];
        let inside = |x: &Checkpoint| {
            x.value.is_finite() && x.value > 0.0 && (x.value / fin).ln().abs() <= band
        };
        if !rest.iter().all(inside) {
            continue;
        }
        let vals = rest.iter().map(|x| x.value);
        return Some(Converged {
            time_seconds: c.seconds,
            requests: c.requests,
            min: vals.clone().fold(f64::INFINITY, f64::min),
            max: vals.clone().fold(f64::NEG_INFINITY, f64::max),
            max_relative_deviation: vals.map(|v| (v / fin - 1.0).abs()).fold(0.0, f64::max),
        });
    }
    None
}

#[cfg(test)]
mod tests;
