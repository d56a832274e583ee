//! Service-level objectives over a whole run, as `sweep --slo` judges each point: a run-level
//! figure of `profile_export_aiperf.json` against a bound. A record metric names its statistic as a
//! suffix (`time_to_first_token_p90`, `inter_token_latency_avg`; `avg` when none is given); a
//! run-level metric is named as is (`request_throughput`, `goodput`, `good_request_fraction`,
//! `e2e_normalized_interactivity_p90`). Throughputs, goodput and fractions are met at or above
//! their bound, every other figure at or below; a figure the run does not have is not met.

use serde_json::Value;

use crate::goodput;
use crate::stats::{self, MetricDef, STAT_KEYS};

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

/// One objective: a figure (`tag`, and the statistic for a record metric) and its bound.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RunSlo {
    /// As given, e.g. `time_to_first_token_p90`.
    pub name: String,
    /// The tag of the figure's metric in `profile_export_aiperf.json`.
    pub tag: &'static str,
    /// `avg`, `p90`, ...: the key of the figure in the metric's block.
    pub stat: &'static str,
    /// The bound, in the figure's unit.
    pub bound: f64,
    pub(crate) larger_is_better: bool,
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
            let (metric, stat) = resolve(name).ok_or_else(|| {
                let run: Vec<&str> = RUN_METRICS.iter().map(|m| m.tag).collect();
                format!(
                    "--slo {pair:?}: {name:?} is not a figure of a run; name a per-request metric with a statistic (METRIC_{{{}}}, e.g. time_to_first_token_p90) or one of {}",
                    STAT_KEYS.join(","),
                    run.join(", ")
                )
            })?;
            if slos.iter().any(|s| s.tag == metric.tag && s.stat == stat) {
                return Err(format!("--slo names {name} twice"));
            }
            slos.push(RunSlo {
                name: name.to_string(),
                tag: metric.tag,
                stat,
                bound,
                larger_is_better: goodput::larger_is_better(metric.unit),
            });
        }
        Ok(SloSet { slos })
    }

    /// The goodput objectives `--slo` needs the runs to measure, if it names a goodput figure.
    pub fn needs_goodput(&self) -> bool {
        self.slos.iter().any(|s| {
            [
                goodput::GOOD_REQUEST_COUNT,
                goodput::GOODPUT,
                goodput::GOOD_REQUEST_FRACTION,
            ]
            .iter()
            .any(|g| g.tag == s.tag)
        })
    }

    /// Judges a run by its `profile_export_aiperf.json` (`None`: the run left none).
    pub fn judge(&self, aggregate: Option<&Value>) -> Judged {
        let mut figures = std::collections::BTreeMap::new();
        let mut meets = true;
        for slo in &self.slos {
            let figure = aggregate
                .and_then(|a| a.get(slo.tag))
                .and_then(|b| b.get(slo.stat))
                .and_then(Value::as_f64);
            meets &= match figure {
                Some(figure) if slo.larger_is_better => figure >= slo.bound,
                Some(figure) => figure <= slo.bound,
                None => false,
            };
            figures.insert(slo.name.clone(), figure);
        }
        let goodput = aggregate
            .and_then(|a| a.get(goodput::GOODPUT.tag))
            .and_then(|b| b.get("avg"))
            .and_then(Value::as_f64);
        Judged {
            meets,
            figures,
            goodput,
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
            .map(|x| (x.tag, x.stat, x.larger_is_better))
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
        assert!(s.needs_goodput());
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
        let j = s.judge(Some(&agg));
        assert!(j.meets);
        assert_eq!(j.figures["time_to_first_token_p90"], Some(1800.0));
        let slow = json!({
            "time_to_first_token": {"unit": "ms", "p90": 2100.0},
            "request_throughput": {"unit": "requests/sec", "avg": 6.5},
        });
        assert!(!s.judge(Some(&slow)).meets);
        let few = json!({
            "time_to_first_token": {"unit": "ms", "p90": 100.0},
            "request_throughput": {"unit": "requests/sec", "avg": 4.0},
        });
        assert!(!s.judge(Some(&few)).meets);
        let none = s.judge(None);
        assert!(!none.meets);
        assert_eq!(none.figures["request_throughput"], None);
    }
}
