//! Goodput: whether a request met every service-level objective of `--goodput`, and the run's
//! figures from that, as aiperf defines them (`good_request_count`: successful profiling requests
//! meeting every bound; `goodput`: those per second of the benchmark duration;
//! `good_request_fraction`: those over the successful and failed requests together, so a server
//! that drops requests does not look good by its survivors).
//!
//! An objective names a per-request metric by aiperf's tag in its display unit (`ms` for latencies,
//! `tokens/sec/user` for throughput per user, `tokens` for lengths): `time_to_first_token:2000
//! inter_token_latency:50`. vLLM's benchmark spellings `ttft`, `tpot` and `e2el` are accepted for
//! `time_to_first_token`, `inter_token_latency` and `request_latency`. A throughput per user is met
//! at or above its bound, every other metric at or below; a request without the metric (a
//! one-token answer has no inter-token latency) does not meet it.

use crate::stats::{self, MetricDef, Value};
use agentx_record::RequestRecord;

/// vLLM's `--goodput` names and the aiperf tags they stand for.
const ALIASES: [(&str, &str); 3] = [
    ("ttft", "time_to_first_token"),
    ("tpot", "inter_token_latency"),
    ("e2el", "request_latency"),
];

/// One bound: a per-request metric and its threshold in the metric's display unit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Slo {
    /// The per-request metric the bound applies to.
    pub metric: MetricDef,
    /// The bound, in the metric's display unit (ms for latencies).
    pub threshold: f64,
    /// Met at or above the threshold (a throughput), not at or below.
    pub(crate) larger_is_better: bool,
}

/// The objectives of `--goodput`, in the order given.
#[derive(Debug, Clone, PartialEq)]
pub struct Goodput {
    pub(crate) slos: Vec<Slo>,
}

/// What the objectives made of a run's profiling requests.
#[derive(
    Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
pub struct GoodputFigures {
    /// Profiling requests that met every objective.
    pub good_request_count: u64,
    /// Good requests per second of the benchmark duration.
    pub goodput: f64,
    /// Good requests over successful plus failed ones (0 when there were none).
    pub good_request_fraction: f64,
}

/// aiperf's three goodput metrics (tags, headers and units as its exports write them).
pub(crate) const GOOD_REQUEST_COUNT: MetricDef = MetricDef {
    tag: "good_request_count",
    header: "Good Request Count",
    unit: "requests",
};
pub(crate) const GOODPUT: MetricDef = MetricDef {
    tag: "goodput",
    header: "Goodput",
    unit: "requests/sec",
};
pub(crate) const GOOD_REQUEST_FRACTION: MetricDef = MetricDef {
    tag: "good_request_fraction",
    header: "GoodRequestFraction",
    unit: "ratio",
};

impl GoodputFigures {
    /// The figures as aggregate metrics of the exports (a count as a float, as aiperf writes its
    /// counts).
    pub fn values(&self) -> [(MetricDef, Value); 3] {
        [
            (
                GOOD_REQUEST_COUNT,
                Value::Float(self.good_request_count as f64),
            ),
            (GOODPUT, Value::Float(self.goodput)),
            (
                GOOD_REQUEST_FRACTION,
                Value::Float(self.good_request_fraction),
            ),
        ]
    }
}

/// Whether a figure in `unit` is met at or above its bound: a throughput or a ratio.
pub(crate) fn larger_is_better(unit: &str) -> bool {
    unit.contains("/sec") || unit == "ratio"
}

/// The `NAME:BOUND` pairs of `flag` (`--goodput`, `--slo`), separated by spaces or commas: each
/// as written, its name and its bound. Errors name the pair; an empty list shows `example`.
pub(crate) fn bound_pairs<'t>(
    text: &'t str,
    flag: &str,
    example: &str,
) -> Result<Vec<(&'t str, &'t str, f64)>, String> {
    let mut out = Vec::new();
    for pair in text.split([' ', ',']).filter(|p| !p.trim().is_empty()) {
        let (name, value) = pair
            .split_once(':')
            .ok_or_else(|| format!("{flag} {pair:?}: expected NAME:BOUND, e.g. {example}"))?;
        let bound = value
            .trim()
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| format!("{flag} {pair:?}: {value:?} is not a number"))?;
        out.push((pair, name.trim(), bound));
    }
    if out.is_empty() {
        return Err(format!(
            "{flag} is empty: give NAME:BOUND pairs, e.g. {example}"
        ));
    }
    Ok(out)
}

/// The metrics an objective may name: every per-request scalar metric.
fn boundable() -> impl Iterator<Item = MetricDef> {
    stats::RECORD_METRICS
        .into_iter()
        .filter(|m| m.tag != stats::ERROR_ISL.tag && m.tag != stats::INTER_CHUNK_LATENCY.tag)
}

impl Goodput {
    /// Parses `tag:value` pairs separated by spaces (commas too). Errors name the pair and, for an
    /// unknown metric, list the known ones.
    pub fn parse(text: &str) -> Result<Goodput, String> {
        let mut slos: Vec<Slo> = Vec::new();
        let example = "\"time_to_first_token:2000 inter_token_latency:50\"";
        for (pair, name, threshold) in bound_pairs(text, "--goodput", example)? {
            let tag = ALIASES
                .iter()
                .find(|(a, _)| *a == name)
                .map_or(name, |(_, t)| *t);
            let metric = boundable().find(|m| m.tag == tag).ok_or_else(|| {
                let known: Vec<&str> = boundable().map(|m| m.tag).collect();
                format!(
                    "--goodput {pair:?}: {name:?} is not a per-request metric; known: {} (and vLLM's ttft, tpot, e2el)",
                    known.join(", ")
                )
            })?;
            if threshold < 0.0 {
                return Err(format!(
                    "--goodput {pair:?}: {threshold} is not a non-negative number of {}",
                    metric.unit
                ));
            }
            if slos.iter().any(|s| s.metric.tag == metric.tag) {
                return Err(format!("--goodput names {} twice", metric.tag));
            }
            slos.push(Slo {
                metric,
                threshold,
                larger_is_better: larger_is_better(metric.unit),
            });
        }
        Ok(Goodput { slos })
    }

    /// The objectives as `--goodput` takes them, with aiperf's tags.
    pub fn spec(&self) -> String {
        let pairs: Vec<String> = self
            .slos
            .iter()
            .map(|s| format!("{}:{}", s.metric.tag, s.threshold))
            .collect();
        pairs.join(" ")
    }

    /// Whether `record` succeeded and met every objective.
    pub(crate) fn is_good(&self, record: &RequestRecord) -> bool {
        if stats::class(record) != stats::Class::Valid {
            return false;
        }
        let values = stats::record_scalar_values(record);
        self.slos.iter().all(|slo| {
            let figure = values.iter().find_map(|(m, figure)| match figure {
                _ if m.tag != slo.metric.tag => None,
                Value::Int(i) => Some(*i as f64),
                Value::Float(f) => Some(*f),
                Value::List(_) => None,
            });
            match figure {
                Some(figure) if slo.larger_is_better => figure >= slo.threshold,
                Some(figure) => figure <= slo.threshold,
                None => false,
            }
        })
    }

    /// The figures of a run: over its profiling records and its benchmark duration (the one the
    /// aiperf export writes).
    pub fn of_run(&self, records: &[RequestRecord]) -> GoodputFigures {
        let duration_s = stats::Aggregate::of(records.iter()).duration_s;
        self.figures(records, duration_s.unwrap_or(0.0))
    }

    /// The figures over a run's profiling records (warmup and overflows are left out, as in every
    /// profiling figure) and its benchmark duration.
    pub fn figures<'a>(
        &self,
        records: impl IntoIterator<Item = &'a RequestRecord>,
        duration_s: f64,
    ) -> GoodputFigures {
        let (mut good, mut attempted) = (0u64, 0u64);
        for r in records {
            match stats::class(r) {
                stats::Class::Valid => {
                    attempted += 1;
                    good += u64::from(self.is_good(r));
                }
                stats::Class::Error => attempted += 1,
                stats::Class::Warmup | stats::Class::ContextOverflow => {}
            }
        }
        GoodputFigures {
            good_request_count: good,
            goodput: if duration_s > 0.0 {
                good as f64 / duration_s
            } else {
                0.0
            },
            good_request_fraction: if attempted > 0 {
                good as f64 / attempted as f64
            } else {
                0.0
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::testkit::rec;
    use agentx_record::{Phase, RecordError};

    #[test]
    fn parses_aiperf_tags_and_vllm_aliases() {
        let g = Goodput::parse("ttft:2000 tpot:50,e2el:60000 output_token_throughput_per_user:20")
            .unwrap();
        let tags: Vec<&str> = g.slos.iter().map(|s| s.metric.tag).collect();
        assert_eq!(
            tags,
            [
                "time_to_first_token",
                "inter_token_latency",
                "request_latency",
                "output_token_throughput_per_user"
            ]
        );
        assert!(g.slos[3].larger_is_better && !g.slos[0].larger_is_better);
        assert_eq!(
            g.spec(),
            "time_to_first_token:2000 inter_token_latency:50 request_latency:60000 output_token_throughput_per_user:20"
        );
        assert_eq!(Goodput::parse(&g.spec()).unwrap(), g);
    }

    #[test]
    fn bad_objectives_say_what_is_wrong() {
        let e = Goodput::parse("time_to_frist_token:5").unwrap_err();
        assert!(
            e.contains("known: input_sequence_length, time_to_first_token"),
            "{e}"
        );
        assert!(Goodput::parse("ttft").unwrap_err().contains("NAME:BOUND"));
        assert!(Goodput::parse("ttft:-1")
            .unwrap_err()
            .contains("non-negative number of ms"));
        assert!(Goodput::parse("ttft:1 time_to_first_token:2")
            .unwrap_err()
            .contains("twice"));
        assert!(Goodput::parse("  ").unwrap_err().contains("empty"));
        assert!(Goodput::parse("inter_chunk_latency:5").is_err());
    }

    #[test]
    fn a_request_is_good_when_it_meets_every_bound() {
        // TTFT 100 ms; chunks 100 ms apart: ITL 100 ms over 4 tokens.
        let fast = rec(0, &[100, 200, 300, 400], 10, 4);
        let slow = rec(10, &[900, 1000, 1100, 1200], 10, 4);
        let g = Goodput::parse("time_to_first_token:500 inter_token_latency:100").unwrap();
        assert!(g.is_good(&fast));
        assert!(!g.is_good(&slow));
        // No inter-token latency for a one-token answer: the bound is not met.
        assert!(!g.is_good(&rec(20, &[50], 10, 1)));
        // Larger is better for a throughput per user (10 tokens/s here).
        assert!(Goodput::parse("output_token_throughput_per_user:10")
            .unwrap()
            .is_good(&fast));
        assert!(!Goodput::parse("output_token_throughput_per_user:11")
            .unwrap()
            .is_good(&fast));
    }

    #[test]
    fn figures_count_successes_over_attempts_in_profiling() {
        let g = Goodput::parse("ttft:500").unwrap();
        let mut failed = rec(30, &[], 10, 0);
        failed.error = Some(RecordError {
            code: 500,
            kind: "http_error".into(),
            message: "500".into(),
        });
        let mut warm = rec(40, &[10], 10, 1);
        warm.phase = Phase::Warmup;
        let mut overflow = rec(50, &[], 10, 0);
        overflow.context_overflow = true;
        let records = [
            rec(0, &[100, 200], 10, 2),
            rec(10, &[900, 1000], 10, 2),
            failed,
            warm,
            overflow,
        ];
        let f = g.figures(records.iter(), 2.0);
        assert_eq!(f.good_request_count, 1);
        assert_eq!(f.goodput, 0.5);
        assert!((f.good_request_fraction - 1.0 / 3.0).abs() < 1e-12);
        assert_eq!(g.figures([].iter(), 0.0).goodput, 0.0);
    }
}
