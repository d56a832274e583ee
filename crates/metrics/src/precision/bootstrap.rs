//! The bootstrap over a session table: replicate `b` weights every unit by how often `n` uniform
//! draws with replacement (from `ChaCha8Rng::seed_from_u64(seed ^ SEED_SALT ^ b)`) picked it,
//! every figure is recomputed with those weights, and a figure's interval is the percentile
//! interval of its replicates.

use std::collections::BTreeMap;

use rand::rngs::ChaCha8Rng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::table::{SessionTable, Unit};
use super::{Figure, Level};
use crate::dist;

/// Salts the caller's seed for the bootstrap streams, so they share no draws with another stream
/// of the same seed (the arrivals, the simulator's text).
pub(crate) const SEED_SALT: u64 = 0xb007_57a9_5e55_1075;

/// Replicates when the run is small enough: 1000.
pub const DEFAULT_RESAMPLES: usize = 1000;
/// The fewest replicates the default lowers to: 200.
pub const MIN_RESAMPLES: usize = 200;
/// Replicates × requests the default keeps within.
const WORK_BUDGET: usize = 200_000_000;
/// Fewer units than this and the intervals carry a warning.
const FEW_UNITS: usize = 30;

/// The default number of replicates for a table of `requests` requests: 1000, lowered to keep
/// replicates × requests within 2·10⁸ (a replicate walks every request once), never below 200.
pub fn default_resamples(requests: usize) -> usize {
    (WORK_BUDGET / requests.max(1)).clamp(MIN_RESAMPLES, DEFAULT_RESAMPLES)
}

/// One figure's estimate and interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Interval {
    /// The figure over the whole run.
    pub estimate: f64,
    /// The interval's lower end.
    pub lo: f64,
    /// The interval's upper end.
    pub hi: f64,
}

/// The intervals of a run's headline figures, as `run_summary.json` holds them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Intervals {
    /// `session_bootstrap_percentile` (or `request_bootstrap_percentile` over a table of requests).
    pub method: String,
    /// The confidence level, in (0, 1).
    pub level: f64,
    /// Bootstrap replicates drawn.
    pub resamples: u64,
    /// The seed of the replicates' streams.
    pub seed: u64,
    /// Units resampled: the sessions (or the requests).
    pub sessions: u64,
    /// Set when there are too few sessions for the intervals to say much (they are still given,
    /// never narrowed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
    /// Each figure the run has, by name.
    pub figures: BTreeMap<String, Interval>,
}

/// The intervals of `figures` over `table` at `level`: `resamples` replicates (`None`: the
/// [`default_resamples`] of the table's requests) seeded from `seed`. A figure the table cannot
/// give ([`SessionTable::estimate`] is `None`) is left out; a replicate in which a figure is
/// undefined (no value drawn, a zero denominator) is left out of that figure's interval.
pub fn bootstrap(
    table: &SessionTable,
    figures: &[Figure],
    level: Level,
    resamples: Option<usize>,
    seed: u64,
) -> Intervals {
    let resamples = resamples.unwrap_or_else(|| default_resamples(table.requests()));
    let (computed, estimates): (Vec<Figure>, Vec<f64>) = figures
        .iter()
        .filter_map(|figure| Some((*figure, table.estimate(figure)?)))
        .unzip();
    let replicated = replicates(table, &computed, resamples, seed ^ SEED_SALT);
    let intervals = computed
        .iter()
        .zip(estimates)
        .zip(replicated)
        .filter_map(|((figure, estimate), values)| {
            let (lo, hi) = percentile_interval(&values, level)?;
            Some((figure.name.to_owned(), Interval { estimate, lo, hi }))
        })
        .collect();
    let (method, unit_name) = match table.unit() {
        Unit::Session => ("session_bootstrap_percentile", "sessions"),
        Unit::Request => ("request_bootstrap_percentile", "requests"),
    };
    let units = table.units();
    Intervals {
        method: method.to_owned(),
        level: level.get(),
        resamples: resamples as u64,
        seed,
        sessions: units as u64,
        warning: (units < FEW_UNITS).then(|| {
            format!("{units} {unit_name}: the intervals are wide ({FEW_UNITS} or more recommended)")
        }),
        figures: intervals,
    }
}

/// Each figure's value in each of `resamples` replicates (`[figure][replicate]`), replicate `b`
/// drawn from `ChaCha8Rng::seed_from_u64(stream_seed ^ b)`.
pub(crate) fn replicates(
    table: &SessionTable,
    figures: &[Figure],
    resamples: usize,
    stream_seed: u64,
) -> Vec<Vec<Option<f64>>> {
    let mut values = vec![Vec::with_capacity(resamples); figures.len()];
    let mut weights = vec![0u32; table.units()];
    for replicate in 0..resamples {
        draw_weights(&mut weights, stream_seed ^ replicate as u64);
        for (figure, figure_values) in figures.iter().zip(&mut values) {
            figure_values.push(table.value(figure.measure, &weights));
        }
    }
    values
}

/// How often each of `weights.len()` units is picked by as many uniform draws with replacement.
/// A draw takes the next `b` bits of the stream, `b` the fewest that hold every unit's index, and
/// is redrawn when they name no unit (bitmask rejection: exact, and under `2b` bits a draw, where
/// a 32-bit draw of its own would take 32; the stream is most of a replicate's cost in a debug
/// build).
fn draw_weights(weights: &mut [u32], seed: u64) {
    weights.fill(0);
    let units = weights.len();
    if units <= 1 {
        weights.fill(1);
        return;
    }
    let bits = u64::BITS - ((units - 1) as u64).leading_zeros();
    let mask = (1u64 << bits) - 1;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut drawn = 0;
    while drawn < units {
        let mut word = rng.next_u64();
        for _ in 0..u64::BITS / bits {
            let index = (word & mask) as usize;
            word >>= bits;
            if index < units {
                weights[index] += 1;
                drawn += 1;
                if drawn == units {
                    break;
                }
            }
        }
    }
}

/// The two-sided percentile interval at `level` of the defined replicates (`None` when none is).
pub(crate) fn percentile_interval(replicates: &[Option<f64>], level: Level) -> Option<(f64, f64)> {
    let sorted = dist::Sorted::new(replicates.iter().flatten().copied().collect())?;
    let (low, high) = level.tails_percent();
    Some((sorted.percentile(low), sorted.percentile(high)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::{Column, Figure, Judgments, FIGURES};
    use agentx_record::testkit::{in_stream, rec};
    use agentx_record::RequestRecord;

    /// `sessions` sessions, session `s` with `s % 5 + 1` requests of TTFT `10 + s` ms.
    fn sessions(sessions: u32) -> Vec<RequestRecord> {
        let mut records = Vec::new();
        for session in 0..sessions {
            for turn in 0..=session % 5 {
                let ttft = 10 + u64::from(session);
                let record = rec(u64::from(turn) * 1000, &[ttft, ttft + 30], 100, 4);
                records.push(in_stream(record, &format!("s{session:03}"), turn));
            }
        }
        records
    }

    fn figures(names: &[&str]) -> Vec<Figure> {
        names
            .iter()
            .map(|name| *Figure::parse(name).unwrap())
            .collect()
    }

    #[test]
    fn a_replicate_draws_as_many_units_as_there_are_each_equally_likely() {
        for units in [0, 1, 2, 5, 100, 129] {
            let mut weights = vec![0; units];
            draw_weights(&mut weights, 9);
            assert_eq!(weights.iter().sum::<u32>() as usize, units);
        }
        // 5 units take 3 bits a draw (6 and 7 redrawn): over 20 000 replicates each unit is
        // drawn 20 000 times give or take sqrt(20 000 × 0.8) = 126.
        let mut totals = [0u32; 5];
        let mut weights = [0u32; 5];
        for replicate in 0..20_000 {
            draw_weights(&mut weights, 4 ^ replicate);
            for (total, weight) in totals.iter_mut().zip(weights) {
                *total += weight;
            }
        }
        assert!(
            totals.iter().all(|&total| total.abs_diff(20_000) < 500),
            "{totals:?}"
        );
    }

    #[test]
    fn the_default_replicates_keep_the_work_bounded() {
        assert_eq!(default_resamples(0), 1000);
        assert_eq!(default_resamples(200_000), 1000);
        assert_eq!(default_resamples(400_000), 500);
        assert_eq!(default_resamples(10_000_000), 200);
    }

    #[test]
    fn intervals_are_seeded_and_hold_the_estimate() {
        let records = sessions(60);
        let table = SessionTable::of(&records, 10_000_000_000);
        let wanted = figures(&["ttft_p50", "ttft_p90", "request_throughput", "goodput"]);
        let intervals = bootstrap(&table, &wanted, Level::DEFAULT, Some(300), 7);
        assert_eq!(intervals.method, "session_bootstrap_percentile");
        assert_eq!(
            (intervals.level, intervals.resamples, intervals.seed),
            (0.95, 300, 7)
        );
        assert_eq!(
            (intervals.sessions, intervals.warning.as_deref()),
            (60, None)
        );
        // No goodput judgment: no goodput interval.
        let names: Vec<&str> = intervals.figures.keys().map(String::as_str).collect();
        assert_eq!(names, ["request_throughput", "ttft_p50", "ttft_p90"]);
        for (name, interval) in &intervals.figures {
            let figure = Figure::parse(name).unwrap();
            assert_eq!(Some(interval.estimate), table.estimate(figure));
            assert!(
                interval.lo < interval.estimate && interval.estimate < interval.hi,
                "{name}: {interval:?}"
            );
        }
        assert_eq!(
            bootstrap(&table, &wanted, Level::DEFAULT, Some(300), 7),
            intervals
        );
        assert_ne!(
            bootstrap(&table, &wanted, Level::DEFAULT, Some(300), 8),
            intervals
        );
        let narrower = bootstrap(&table, &wanted, Level::new(0.5).unwrap(), Some(300), 7);
        let width = |intervals: &Intervals| {
            let interval = intervals.figures["ttft_p90"];
            interval.hi - interval.lo
        };
        assert!(width(&narrower) < width(&intervals));
        // A default count of replicates for a small run.
        let default = bootstrap(&table, &wanted, Level::DEFAULT, None, 7);
        assert_eq!(default.resamples, 1000);
    }

    #[test]
    fn identical_sessions_give_an_interval_of_one_point() {
        let records: Vec<RequestRecord> = (0..40)
            .map(|session| in_stream(rec(0, &[25, 45], 100, 3), &format!("s{session}"), 0))
            .collect();
        let table = SessionTable::of(&records, 1_000_000_000);
        let intervals = bootstrap(&table, &FIGURES, Level::DEFAULT, Some(50), 1);
        let ttft = intervals.figures["ttft_p99"];
        assert_eq!((ttft.estimate, ttft.lo, ttft.hi), (25.0, 25.0, 25.0));
        let rate = intervals.figures["request_throughput"];
        assert_eq!((rate.estimate, rate.lo, rate.hi), (40.0, 40.0, 40.0));
    }

    #[test]
    fn the_replicates_spread_as_a_multinomial_draw_of_sessions() {
        // A session total's bootstrap variance is n × the population variance of the sessions'
        // values: requests per session 1..=5 in turn over 100 sessions (variance 2).
        let table = SessionTable::of(&sessions(100), 1_000_000_000);
        let rate = figures(&["request_throughput"]);
        let values: Vec<f64> = replicates(&table, &rate, 2000, 3)[0]
            .iter()
            .map(|value| value.unwrap())
            .collect();
        let mean = dist::mean(&values);
        let sd = dist::std(&values, mean, dist::Deviation::Sample);
        let total = table.total(Column::Ok).unwrap();
        assert!((mean - total).abs() < 1.5, "{mean} vs {total}");
        let expected_sd = (100.0f64 * 2.0).sqrt();
        assert!(
            (sd / expected_sd - 1.0).abs() < 0.08,
            "{sd} vs {expected_sd}"
        );
    }

    #[test]
    fn few_sessions_still_get_intervals_with_a_warning() {
        let table = SessionTable::of(&sessions(4), 1_000_000_000);
        let intervals = bootstrap(
            &table,
            &figures(&["ttft_p50"]),
            Level::DEFAULT,
            Some(100),
            1,
        );
        assert_eq!(
            intervals.warning.as_deref(),
            Some("4 sessions: the intervals are wide (30 or more recommended)")
        );
        assert!(intervals.figures.contains_key("ttft_p50"));
        let requests =
            SessionTable::per_request(&sessions(4), 1_000_000_000, &Judgments::default());
        let by_request = bootstrap(
            &requests,
            &figures(&["ttft_p50"]),
            Level::DEFAULT,
            Some(100),
            1,
        );
        assert_eq!(by_request.method, "request_bootstrap_percentile");
        assert_eq!(
            by_request.warning.as_deref(),
            Some("10 requests: the intervals are wide (30 or more recommended)")
        );
        let empty = bootstrap(
            &SessionTable::of(&[], 1),
            &FIGURES,
            Level::DEFAULT,
            Some(10),
            1,
        );
        assert_eq!(empty.sessions, 0);
        assert!(empty
            .figures
            .keys()
            .all(|name| name.ends_with("throughput")));
    }
}
