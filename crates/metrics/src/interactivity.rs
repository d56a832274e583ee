//! The full-response interactivity InferenceX publishes for an AgentX run, computed the way its
//! web app recomputes it from `profile_export.jsonl` (`packages/db/src/etl/full-response-interactivity.ts`
//! in SemiAnalysisAI/InferenceX-app), so a user sees the published numbers before publishing.
//!
//! The sample: one full-response inter-token latency per successful profiling request with at
//! least two output tokens, `(end - first token) / (OSL - 1)` in seconds per token
//! ([`RequestRecord::full_response_itl_ns`], aiperf's `full_response_inter_token_latency`), positive
//! ones only. What is published of it:
//!
//! - the ITL's mean, p50, p75, p90, p95, p99, p99.9 and population standard deviation;
//! - the interactivity (tokens/s/user) of each: `1 / (the ITL statistic)`, so `p90` is
//!   `1 / p90(ITL)`, the slow tail, and `mean` is `1 / mean(ITL)`, the reciprocal of the mean, not
//!   the mean of the reciprocals the row's `intvty.mean` is;
//! - the interactivity's standard deviation: the population deviation of the per-request `1 / ITL`.
//!
//! Percentiles are [`dist::percentile`]'s: the app's `quantile` is the same linear interpolation
//! between the two nearest ranks at `(n - 1)·q` (numpy's default).

use serde::{Deserialize, Serialize};

use super::dist::{self, Deviation, Sorted};
use super::Outcome;
use agentx_record::{Phase, RequestRecord};

/// The statistics InferenceX publishes of one distribution (`{stat}_itl`, `{stat}_intvty`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct PublishedStats {
    /// The mean.
    pub mean: f64,
    /// The median.
    pub p50: f64,
    /// The 75th percentile.
    pub p75: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// The 95th percentile.
    pub p95: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The 99.9th percentile (`p99.9` in JSON).
    #[serde(rename = "p99.9")]
    pub p99_9: f64,
    /// The population standard deviation.
    pub std: f64,
}

/// The full-response figures of a run as InferenceX's app publishes them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct FullResponseInteractivity {
    /// Requests in the sample.
    pub requests: u64,
    /// Full-response inter-token latency, seconds per token.
    pub itl_s: PublishedStats,
    /// Interactivity, tokens/s/user: each statistic `1 / (the ITL's)`; `std` over `1 / ITL`.
    pub tokens_per_s_per_user: PublishedStats,
}

/// Where a statistic sits in [`PublishedStats`].
type Field = fn(&mut PublishedStats) -> &mut f64;

/// The percentiles published, with their place in [`PublishedStats`].
const PERCENTILES: [(f64, Field); 6] = [
    (50.0, |s| &mut s.p50),
    (75.0, |s| &mut s.p75),
    (90.0, |s| &mut s.p90),
    (95.0, |s| &mut s.p95),
    (99.0, |s| &mut s.p99),
    (99.9, |s| &mut s.p99_9),
];

impl FullResponseInteractivity {
    /// The figures of `records`' successful profiling requests; `None` when none has a positive
    /// full-response ITL (a run whose outputs are all one token).
    pub fn of<'a, I>(records: I) -> Option<FullResponseInteractivity>
    where
        I: IntoIterator<Item = &'a RequestRecord>,
    {
        let samples: Vec<f64> = records
            .into_iter()
            .filter(|r| r.phase == Phase::Profiling && Outcome::of(r) == Outcome::Ok)
            .filter_map(RequestRecord::full_response_itl_ns)
            .map(|ns| ns / 1e9)
            .filter(|s| s.is_finite() && *s > 0.0)
            .collect();
        FullResponseInteractivity::of_itl(samples)
    }

    /// The figures of full-response ITL samples in seconds per token (all positive).
    pub(crate) fn of_itl(samples: Vec<f64>) -> Option<FullResponseInteractivity> {
        let requests = samples.len() as u64;
        let reciprocals: Vec<f64> = samples.iter().map(|s| 1.0 / s).collect();
        let itl = Sorted::new(samples)?;
        let mut itl_s = PublishedStats {
            mean: itl.mean(),
            std: itl.std(Deviation::Population),
            ..PublishedStats::default()
        };
        let mut intvty = PublishedStats {
            mean: 1.0 / itl_s.mean,
            std: dist::std(
                &reciprocals,
                dist::mean(&reciprocals),
                Deviation::Population,
            ),
            ..PublishedStats::default()
        };
        for (p, field) in PERCENTILES {
            let value = itl.percentile(p);
            *field(&mut itl_s) = value;
            *field(&mut intvty) = 1.0 / value;
        }
        Some(FullResponseInteractivity {
            requests,
            itl_s,
            tokens_per_s_per_user: intvty,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_are_the_reciprocals_of_the_itl_and_std_is_over_reciprocals() {
        let f = FullResponseInteractivity::of_itl(vec![0.04, 0.01, 0.02, 0.05]).unwrap();
        assert_eq!(f.requests, 4);
        assert!((f.itl_s.mean - 0.03).abs() < 1e-15);
        // (n - 1)·0.9 = 2.7: 0.04 + 0.7·(0.05 - 0.04).
        assert!((f.itl_s.p90 - 0.047).abs() < 1e-15);
        assert!((f.tokens_per_s_per_user.p90 - 1.0 / 0.047).abs() < 1e-9);
        assert!((f.tokens_per_s_per_user.mean - 1.0 / 0.03).abs() < 1e-9);
        // 1/ITL = 25, 100, 50, 20: mean 48.75, population variance 4018.75 / 4.
        assert!((f.tokens_per_s_per_user.std - 1004.6875f64.sqrt()).abs() < 1e-9);
        // (n - 1)·0.999 = 2.997.
        assert!((f.itl_s.p99_9 - (0.04 + 0.997 * 0.01)).abs() < 1e-15);
        let one = FullResponseInteractivity::of_itl(vec![0.02]).unwrap();
        assert_eq!((one.itl_s.std, one.tokens_per_s_per_user.std), (0.0, 0.0));
        assert_eq!(one.tokens_per_s_per_user.p99_9, 50.0);
        assert!(FullResponseInteractivity::of_itl(vec![]).is_none());
    }

    #[test]
    fn p99_9_is_written_under_the_published_name() {
        let f = FullResponseInteractivity::of_itl(vec![0.02, 0.03]).unwrap();
        let v = serde_json::to_value(f).unwrap();
        assert!(v["itl_s"]["p99.9"].is_number(), "{v}");
        assert!(v["tokens_per_s_per_user"]["p99.9"].is_number(), "{v}");
    }
}
