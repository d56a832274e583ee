//! Two runs compared, figure by figure: the ratio B/A, its interval from independent session
//! bootstraps of A and B (replicate `b` of each drawn as [`super::bootstrap()`] draws it, B's
//! streams salted apart from A's), and a verdict that reads the figure's direction.
//!
//! The intervals hold together: each is at the Bonferroni level `1 − (1 − L)/k` over the `k`
//! figures both runs have, so "no difference shown" on every figure is a statement about the
//! family at level `L` (two runs that differ only by their seed show no difference on any figure
//! in 1 − L of such pairs, not in (1 − L)^k).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::bootstrap::{default_resamples, percentile_interval, replicates, SEED_SALT};
use super::table::SessionTable;
use super::{Direction, Figure, Level};

/// Salts B's streams apart from A's (A's are those of a bootstrap of A alone with the same seed).
const B_SALT: u64 = 0x0b0b_5a17_c0de_0b0b;

/// Which way B moved from A, where the interval of the ratio excludes 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// A time, shorter in B.
    Faster,
    /// A time, longer in B.
    Slower,
    /// Any other figure, larger in B.
    Higher,
    /// Any other figure, smaller in B.
    Lower,
    /// The interval of the ratio holds 1.
    NoDifferenceShown,
}

/// One figure of two runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct FigureComparison {
    /// The figure over run A.
    pub a: f64,
    /// The figure over run B.
    pub b: f64,
    /// B / A.
    pub ratio: f64,
    /// The lower end of the ratio's interval at the family level.
    pub lo: f64,
    /// The upper end of the ratio's interval at the family level.
    pub hi: f64,
    /// Which way B moved.
    pub change: Change,
    /// Whether B is better by the figure's direction (absent when no difference is shown).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub better: Option<bool>,
    /// In words: "B faster by 12 % (9 %-15 %)", "no difference shown".
    pub verdict: String,
}

/// Two runs' figures compared.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Comparison {
    /// The level the family of intervals holds at.
    pub level: f64,
    /// Each interval's own level, `1 − (1 − level)/k`.
    pub family_level: f64,
    /// Bootstrap replicates of each run.
    pub resamples: u64,
    /// The seed of the replicates' streams.
    pub seed: u64,
    /// Each figure both runs have, by name.
    pub figures: BTreeMap<String, FigureComparison>,
}

/// The ratios B/A of `figures` between the runs of tables `table_a` and `table_b`, their intervals
/// holding together at `level`, from `resamples` replicates of each run (`None`: the
/// [`default_resamples`] of the larger run) seeded from `seed`. A figure either table cannot give,
/// or that is 0 in A, is left out (and not counted in the family).
pub fn ratio(
    table_a: &SessionTable,
    table_b: &SessionTable,
    figures: &[Figure],
    level: Level,
    resamples: Option<usize>,
    seed: u64,
) -> Comparison {
    let resamples =
        resamples.unwrap_or_else(|| default_resamples(table_a.requests().max(table_b.requests())));
    let compared: Vec<(Figure, f64, f64)> = figures
        .iter()
        .filter_map(|figure| {
            let (in_a, in_b) = (table_a.estimate(figure)?, table_b.estimate(figure)?);
            (in_a != 0.0).then_some((*figure, in_a, in_b))
        })
        .collect();
    let family_level = level.bonferroni(compared.len());
    let measured: Vec<Figure> = compared.iter().map(|(figure, ..)| *figure).collect();
    let replicates_a = replicates(table_a, &measured, resamples, seed ^ SEED_SALT);
    let replicates_b = replicates(table_b, &measured, resamples, seed ^ SEED_SALT ^ B_SALT);
    let mut compared_figures = BTreeMap::new();
    for (((figure, in_a, in_b), of_a), of_b) in compared.iter().zip(replicates_a).zip(replicates_b)
    {
        let ratios: Vec<Option<f64>> = of_a
            .iter()
            .zip(&of_b)
            .map(|(&in_a, &in_b)| Some(in_b? / in_a?).filter(|ratio| ratio.is_finite()))
            .collect();
        let Some((lo, hi)) = percentile_interval(&ratios, family_level) else {
            continue;
        };
        let ratio = in_b / in_a;
        let (change, better, verdict) = verdict(figure, ratio, lo, hi);
        let comparison = FigureComparison {
            a: *in_a,
            b: *in_b,
            ratio,
            lo,
            hi,
            change,
            better,
            verdict,
        };
        compared_figures.insert(figure.name.to_owned(), comparison);
    }
    Comparison {
        level: level.get(),
        family_level: family_level.get(),
        resamples: resamples as u64,
        seed,
        figures: compared_figures,
    }
}

/// The change, whether B is better, and the verdict in words, of a ratio B/A and its interval.
pub fn verdict(figure: &Figure, ratio: f64, low: f64, high: f64) -> (Change, Option<bool>, String) {
    if low <= 1.0 && high >= 1.0 {
        return (
            Change::NoDifferenceShown,
            None,
            "no difference shown".to_owned(),
        );
    }
    let increased = low > 1.0;
    let change = match (figure.measure.is_time(), increased) {
        (true, true) => Change::Slower,
        (true, false) => Change::Faster,
        (false, true) => Change::Higher,
        (false, false) => Change::Lower,
    };
    let better = increased == (figure.direction == Direction::HigherIsBetter);
    let word = match change {
        Change::Faster => "faster",
        Change::Slower => "slower",
        Change::Higher => "higher",
        Change::Lower | Change::NoDifferenceShown => "lower",
    };
    let (by, from, to) = if increased {
        (ratio - 1.0, low - 1.0, high - 1.0)
    } else {
        (1.0 - ratio, 1.0 - high, 1.0 - low)
    };
    let [by, from, to] = [by, from, to].map(|share| share * 100.0);
    // Whole percents when the smallest is 5 % or more, tenths below.
    let decimals = usize::from(from < 5.0);
    let text = format!("B {word} by {by:.decimals$} % ({from:.decimals$} %-{to:.decimals$} %)");
    (change, Some(better), text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::precision::{Judgments, FIGURES};
    use agentx_record::testkit::{in_stream, rec};
    use agentx_record::RequestRecord;

    fn figure(name: &str) -> Figure {
        *Figure::parse(name).unwrap()
    }

    #[test]
    fn verdicts_read_the_figures_direction() {
        let latency = figure("latency_p90");
        let (change, better, text) = verdict(&latency, 0.88, 0.85, 0.91);
        assert_eq!((change, better), (Change::Faster, Some(true)));
        assert_eq!(text, "B faster by 12 % (9 %-15 %)");
        let (change, better, text) = verdict(&latency, 1.03, 1.01, 1.05);
        assert_eq!((change, better), (Change::Slower, Some(false)));
        assert_eq!(text, "B slower by 3.0 % (1.0 %-5.0 %)");
        let throughput = figure("output_token_throughput");
        let (change, better, text) = verdict(&throughput, 1.25, 1.2, 1.3);
        assert_eq!((change, better), (Change::Higher, Some(true)));
        assert_eq!(text, "B higher by 25 % (20 %-30 %)");
        let (change, better, _) = verdict(&throughput, 0.9, 0.8, 0.95);
        assert_eq!((change, better), (Change::Lower, Some(false)));
        let energy = figure("joules_per_job");
        let (change, better, text) = verdict(&energy, 0.5, 0.4, 0.6);
        assert_eq!((change, better), (Change::Lower, Some(true)));
        assert_eq!(text, "B lower by 50 % (40 %-60 %)");
        let (change, better, text) = verdict(&latency, 0.97, 0.93, 1.0);
        assert_eq!(
            (change, better, text.as_str()),
            (Change::NoDifferenceShown, None, "no difference shown")
        );
    }

    /// 60 sessions of 6 requests; request `j` of session `s` with TTFT and latency growing with a
    /// per-session level and `j`, scaled by `speed` (times divided by it); output tokens × `tokens`.
    fn run(speed: f64, tokens: u64, shift: u64) -> Vec<RequestRecord> {
        let mut records = Vec::new();
        for session in 0..60u64 {
            for turn in 0..6u64 {
                let base = 40 + (session * 37 + shift) % 50 + turn * 7;
                let ttft = (base as f64 / speed).round() as u64;
                let latency = (3.0 * base as f64 / speed).round() as u64;
                let record = rec(turn * 5000, &[ttft, latency], 1000, 20 * tokens);
                records.push(in_stream(record, &format!("s{session}"), turn as u32));
            }
        }
        records
    }

    #[test]
    fn a_faster_run_is_shown_faster_and_the_same_run_shows_no_difference() {
        let window = 30_000_000_000;
        let a = SessionTable::of(&run(1.0, 1, 0), window);
        let b = SessionTable::of(&run(1.25, 2, 0), window);
        let names = [
            "ttft_p50",
            "ttft_p90",
            "latency_p90",
            "output_token_throughput",
        ];
        let wanted: Vec<Figure> = names.iter().map(|name| figure(name)).collect();
        let compared = ratio(&a, &b, &wanted, Level::DEFAULT, Some(400), 11);
        assert!((compared.family_level - (1.0 - 0.05 / 4.0)).abs() < 1e-12);
        assert_eq!((compared.resamples, compared.seed), (400, 11));
        let ttft = &compared.figures["ttft_p50"];
        assert_eq!((ttft.change, ttft.better), (Change::Faster, Some(true)));
        assert!(ttft.lo < 0.8 && 0.8 < ttft.hi && ttft.hi < 1.0, "{ttft:?}");
        assert!((ttft.ratio - 0.8).abs() < 0.02, "{ttft:?}");
        assert!(ttft.verdict.starts_with("B faster by "), "{}", ttft.verdict);
        let tokens = &compared.figures["output_token_throughput"];
        assert_eq!((tokens.ratio, tokens.lo, tokens.hi), (2.0, 2.0, 2.0));
        assert_eq!(tokens.verdict, "B higher by 100 % (100 %-100 %)");

        // The same workload drawn again (a shifted per-session level): no difference.
        let again = SessionTable::of(&run(1.0, 1, 13), window);
        let same = ratio(&a, &again, &wanted, Level::DEFAULT, Some(400), 11);
        for (name, compared) in &same.figures {
            assert_eq!(
                compared.change,
                Change::NoDifferenceShown,
                "{name}: {compared:?}"
            );
        }
        assert_eq!(same.figures.len(), 4);
    }

    #[test]
    fn figures_a_run_lacks_are_left_out_of_the_family() {
        let window = 30_000_000_000;
        let a = SessionTable::judged(&run(1.0, 1, 0), window, &Judgments::default().energy_j(5e4));
        let b = SessionTable::of(&run(1.0, 1, 0), window);
        let compared = ratio(&a, &b, &FIGURES, Level::DEFAULT, Some(50), 1);
        // TTFT (3), ITL (2), latency, three throughputs: no cache hit (no cached tokens), no
        // goodput, session or job figure, no energy in B.
        assert_eq!(compared.figures.len(), 9);
        assert!((compared.family_level - (1.0 - 0.05 / 9.0)).abs() < 1e-12);
        assert!(!compared.figures.contains_key("joules_per_output_token"));
    }
}
