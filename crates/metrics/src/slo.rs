//! Service-level objectives over a whole run, as `sweep --slo` judges each point: a run-level
//! figure of `profile_export_aiperf.json` against a bound. A record metric names its statistic as a
//! suffix (`time_to_first_token_p90`, `inter_token_latency_avg`; `avg` when none is given); a
//! run-level metric is named as is (`request_throughput`, `goodput`, `good_request_fraction`,
//! `e2e_normalized_interactivity_p90`). The figures of `run_summary.json` that no aiperf file has are
//! named too: `sessions_meeting_slo` (the share of sessions meeting `--session-slo`),
//! `good_session_fraction` (`--goodput`), `jobs_per_hour` (and `_per_gpu`, `_per_user`) and
//! `job_slowdown_p50`/`_p90`/`_p99`. Throughputs, goodput, rates and fractions are met at or above
//! their bound, every other figure at or below; a figure the run does not have is not met.

use serde_json::Value;

use crate::stats::{self, MetricDef, STAT_KEYS};
use crate::{goodput, Summary};

/// The run-level figures an objective may name as they are.
const RUN_METRICS: [MetricDef; 11] = [
    stats::REQUEST_THROUGHPUT,
    stats::OUTPUT_TOKEN_THROUGHPUT,
    stats::TOTAL_TOKEN_THROUGHPUT,
    stats::INPUT_TOKEN_THROUGHPUT,
    stats::ERROR_REQUEST_COUNT,
    stats::CONTEXT_OVERFLOW_COUNT,
    stats::E2E_NORMALIZED_INTERACTIVITY_P75,
    stats::E2E_NORMALIZED_INTERACTIVITY_P90,
    goodput::GOOD_REQUEST_COUNT,
    goodput::GOODPUT,
    goodput::GOOD_REQUEST_FRACTION,
];

/// A figure of `run_summary.json` an objective may name: its name, whether more is better, what
/// the run must have measured, and how to read it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SummaryFigure {
    name: &'static str,
    larger_is_better: bool,
    /// The flag the runs need for the figure to exist (`None`: every run has it).
    needs: Option<&'static str>,
    read: fn(&Summary) -> Option<f64>,
}

impl PartialEq for SummaryFigure {
    fn eq(&self, other: &SummaryFigure) -> bool {
        self.name == other.name
    }
}

const SUMMARY_FIGURES: [SummaryFigure; 8] = [
    SummaryFigure {
        name: "sessions_meeting_slo",
        larger_is_better: true,
        needs: Some("--session-slo"),
        read: |s| s.session_slo.as_ref().map(|f| f.meeting_fraction),
    },
    SummaryFigure {
        name: "good_session_fraction",
        larger_is_better: true,
        needs: Some("--goodput"),
        read: |s| s.sessions.as_ref().map(|f| f.good_session_fraction),
    },
    SummaryFigure {
        name: "jobs_per_hour",
        larger_is_better: true,
        needs: None,
        read: |s| s.jobs.as_ref().map(|j| j.jobs_per_hour),
    },
    SummaryFigure {
        name: "jobs_per_hour_per_gpu",
        larger_is_better: true,
        needs: Some("--gpus"),
        read: |s| s.jobs.as_ref().and_then(|j| j.jobs_per_hour_per_gpu),
    },
    SummaryFigure {
        name: "jobs_per_hour_per_user",
        larger_is_better: true,
        needs: None,
        read: |s| s.jobs.as_ref().and_then(|j| j.jobs_per_hour_per_user),
    },
    SummaryFigure {
        name: "job_slowdown_p50",
        larger_is_better: false,
        needs: None,
        read: |s| {
            s.jobs
                .as_ref()
                .and_then(|j| j.slowdown.as_ref())
                .map(|d| d.p50)
        },
    },
    SummaryFigure {
        name: "job_slowdown_p90",
        larger_is_better: false,
        needs: None,
        read: |s| {
            s.jobs
                .as_ref()
                .and_then(|j| j.slowdown.as_ref())
                .map(|d| d.p90)
        },
    },
    SummaryFigure {
        name: "job_slowdown_p99",
        larger_is_better: false,
        needs: None,
        read: |s| {
            s.jobs
                .as_ref()
                .and_then(|j| j.slowdown.as_ref())
                .map(|d| d.p99)
        },
    },
];

/// Where an objective's figure is read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Source {
    /// `profile_export_aiperf.json`: the metric's tag and the statistic's key (`avg`, `p90`, ...).
    Aggregate {
        tag: &'static str,
        stat: &'static str,
    },
    /// `run_summary.json`'s summary.
    Summary(SummaryFigure),
}

/// One objective: a figure and its bound.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunSlo {
    /// As given, e.g. `time_to_first_token_p90`.
    pub name: String,
    pub source: Source,
    /// The bound, in the figure's unit.
    pub bound: f64,
    pub(crate) larger_is_better: bool,
}

impl RunSlo {
    /// The flag a run needs for this objective's figure to exist.
    fn needs(&self) -> Option<&'static str> {
        let goodput_tags = [
            goodput::GOOD_REQUEST_COUNT.tag,
            goodput::GOODPUT.tag,
            goodput::GOOD_REQUEST_FRACTION.tag,
        ];
        match &self.source {
            Source::Aggregate { tag, .. } => goodput_tags.contains(tag).then_some("--goodput"),
            Source::Summary(figure) => figure.needs,
        }
    }
}

/// The objectives of `--slo`, in the order given.
#[derive(Debug, Clone, PartialEq)]
pub struct SloSet {
    pub(crate) slos: Vec<RunSlo>,
}

/// What one run made of the objectives.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Judged {
    /// Whether every objective was met (a missing figure fails its objective).
    pub meets: bool,
    /// Each objective's figure (`None`: the run has none), by name.
    pub figures: std::collections::BTreeMap<String, Option<f64>>,
    /// The run's goodput (good requests per second), when it measured one (`--goodput`), whether
    /// or not an objective names it: which passing point has the most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<f64>,
    /// The objectives the run missed, by name, in the order given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missed: Vec<String>,
}

/// `name` as a run-level metric, or a record metric with a statistic suffix.
fn resolve(name: &str) -> Option<(MetricDef, &'static str)> {
    if let Some(metric) = RUN_METRICS.iter().find(|metric| metric.tag == name) {
        return Some((*metric, "avg"));
    }
    let record = |tag: &str| {
        stats::RECORD_METRICS
            .iter()
            .find(|m| m.tag == tag && m.tag != stats::ERROR_ISL.tag)
            .copied()
    };
    if let Some(metric) = record(name) {
        return Some((metric, "avg"));
    }
    STAT_KEYS.iter().find_map(|k| {
        let tag = name.strip_suffix(k)?.strip_suffix('_')?;
        record(tag).map(|m| (m, *k))
    })
}

impl SloSet {
    /// Parses `name:bound` pairs separated by spaces (commas too); errors name the pair and, for
    /// an unknown figure, how figures are named.
    pub fn parse(text: &str) -> Result<SloSet, String> {
        let mut slos: Vec<RunSlo> = Vec::new();
        let example = "\"time_to_first_token_p90:2000 inter_token_latency_p90:50\"";
        for (pair, name, bound) in goodput::bound_pairs(text, "--slo", example)? {
            let (source, larger_is_better) = if let Some(figure) =
                SUMMARY_FIGURES.iter().find(|f| f.name == name)
            {
                (Source::Summary(*figure), figure.larger_is_better)
            } else {
                let (metric, stat) = resolve(name).ok_or_else(|| {
                    let run: Vec<&str> = RUN_METRICS
                        .iter()
                        .map(|m| m.tag)
                        .chain(SUMMARY_FIGURES.iter().map(|f| f.name))
                        .collect();
                    format!(
                        "--slo {pair:?}: {name:?} is not a figure of a run; name a per-request metric with a statistic (METRIC_{{{}}}, e.g. time_to_first_token_p90) or one of {}",
                        STAT_KEYS.join(","),
                        run.join(", ")
                    )
                })?;
                let source = Source::Aggregate {
                    tag: metric.tag,
                    stat,
                };
                (source, goodput::larger_is_better(metric.unit))
            };
            if slos.iter().any(|s| s.source == source) {
                return Err(format!("--slo names {name} twice"));
            }
            slos.push(RunSlo {
                name: name.to_string(),
                source,
                bound,
                larger_is_better,
            });
        }
        Ok(SloSet { slos })
    }

    /// The flags the runs need for the figures the objectives name (`--goodput`, `--session-slo`,
    /// `--gpus`), each once.
    pub fn needs(&self) -> impl Iterator<Item = &'static str> + '_ {
        let mut seen = Vec::new();
        self.slos.iter().filter_map(move |slo| {
            let flag = slo.needs()?;
            (!seen.contains(&flag)).then(|| {
                seen.push(flag);
                flag
            })
        })
    }

    /// The objectives, as given, whose figure needs `flag`.
    pub fn naming(&self, flag: &str) -> Vec<&str> {
        self.slos
            .iter()
            .filter(|slo| slo.needs() == Some(flag))
            .map(|slo| slo.name.as_str())
            .collect()
    }

    /// Judges a run by its `profile_export_aiperf.json` and its summary (`None`: the run left
    /// none).
    pub fn judge(&self, aggregate: Option<&Value>, summary: Option<&Summary>) -> Judged {
        let mut figures = std::collections::BTreeMap::new();
        let mut missed = Vec::new();
        for slo in &self.slos {
            let figure = match &slo.source {
                Source::Aggregate { tag, stat } => aggregate
                    .and_then(|a| a.get(*tag))
                    .and_then(|b| b.get(*stat))
                    .and_then(Value::as_f64),
                Source::Summary(figure) => summary.and_then(figure.read),
            };
            let met = match figure {
                Some(figure) if slo.larger_is_better => figure >= slo.bound,
                Some(figure) => figure <= slo.bound,
                None => false,
            };
            if !met {
                missed.push(slo.name.clone());
            }
            figures.insert(slo.name.clone(), figure);
        }
        let goodput = aggregate
            .and_then(|a| a.get(goodput::GOODPUT.tag))
            .and_then(|b| b.get("avg"))
            .and_then(Value::as_f64);
        Judged {
            meets: missed.is_empty(),
            figures,
            goodput,
            missed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn figures_are_named_with_their_statistic() {
        let s = SloSet::parse(
            "time_to_first_token_p90:2000 inter_token_latency:50 e2e_normalized_interactivity_p90:20 good_request_fraction:0.9",
        )
        .unwrap();
        let got: Vec<(&str, &str, bool)> = s
            .slos
            .iter()
            .map(|x| match x.source {
                Source::Aggregate { tag, stat } => (tag, stat, x.larger_is_better),
                Source::Summary(figure) => (figure.name, "", x.larger_is_better),
            })
            .collect();
        assert_eq!(
            got,
            [
                ("time_to_first_token", "p90", false),
                ("inter_token_latency", "avg", false),
                ("e2e_normalized_interactivity_p90", "avg", true),
                ("good_request_fraction", "avg", true),
            ]
        );
        assert_eq!(s.needs().collect::<Vec<_>>(), ["--goodput"]);
        let e = SloSet::parse("ttft_p90:5").unwrap_err();
        assert!(
            e.contains("not a figure of a run") && e.contains("request_throughput"),
            "{e}"
        );
        assert!(SloSet::parse("time_to_first_token_p91:5").is_err());
        assert!(SloSet::parse("request_throughput")
            .unwrap_err()
            .contains("NAME:BOUND"));
        assert!(SloSet::parse("").unwrap_err().contains("empty"));
        assert!(SloSet::parse("request_latency_p99:1 request_latency_p99:2")
            .unwrap_err()
            .contains("twice"));
    }

    #[test]
    fn a_run_meets_every_bound_or_none() {
        let s = SloSet::parse("time_to_first_token_p90:2000 request_throughput:5").unwrap();
        let agg = json!({
            "time_to_first_token": {"unit": "ms", "avg": 900.0, "p90": 1800.0},
            "request_throughput": {"unit": "requests/sec", "avg": 6.5},
        });
        let j = s.judge(Some(&agg), None);
        assert!(j.meets);
        assert_eq!(j.figures["time_to_first_token_p90"], Some(1800.0));
        let slow = json!({
            "time_to_first_token": {"unit": "ms", "p90": 2100.0},
            "request_throughput": {"unit": "requests/sec", "avg": 6.5},
        });
        assert!(!s.judge(Some(&slow), None).meets);
        let few = json!({
            "time_to_first_token": {"unit": "ms", "p90": 100.0},
            "request_throughput": {"unit": "requests/sec", "avg": 4.0},
        });
        assert!(!s.judge(Some(&few), None).meets);
        let none = s.judge(None, None);
        assert!(!none.meets);
        assert_eq!(none.figures["request_throughput"], None);
    }
}
