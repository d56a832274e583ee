//! The bootstrap's coverage on synthetic runs whose truth is known: S = 100 sessions of m = 8
//! requests, the log of request `j` of session `s` is `a_s + e_sj` with `a ~ N(0, sb²)` and
//! `e ~ N(0, sw²)`, so every request's log value is `N(0, sb² + sw²)`: the population's p90 is
//! `exp(z₀.₉ √(sb² + sw²))` and its mean `exp((sb² + sw²)/2)`. Over 400 seeded draws per `sb` the
//! session bootstrap's 95 % intervals must hold the truth in 92 % to 98 % of draws, and the
//! request-level bootstrap must fall below 90 % when sessions are correlated (sb = 0.8).
//!
//! The test renders its table and compares it with the one in docs/guide/precision.md (between
//! the `<!-- coverage-table -->` markers), so the guide shows what the test measured;
//! `AGENTX_BLESS=1 cargo test -p agentx-metrics coverage` rewrites it. The draws are seeded, so the
//! table is fixed.

use std::path::PathBuf;

use rand::rngs::ChaCha8Rng;
use rand::SeedableRng;
use rand_distr::{Distribution, StandardNormal};

use super::student::normal_quantile;
use super::{bootstrap, Direction, Figure, Judgments, Level, Measure, Sample, SessionTable};
use agentx_record::testkit::{in_stream, rec};
use agentx_record::RequestRecord;

const DRAWS: u64 = 400;
const SESSIONS: u32 = 100;
const PER_SESSION: u32 = 8;
const RESAMPLES: usize = 200;
const WITHIN_SD: f64 = 0.3;
const BETWEEN_SDS: [f64; 3] = [0.0, 0.5, 0.8];
/// The synthetic runs' window (the rates are not tested here).
const WINDOW_NS: u64 = 60_000_000_000;
/// Salts the synthetic runs' streams apart from the bootstrap's.
const DATA_SEED: u64 = 0xc07e_7a6e_da7a_5eed;
const MARKER: &str = "<!-- coverage-table -->";
const BLESS: &str = "AGENTX_BLESS=1 cargo test -p agentx-metrics coverage";

/// The latency's p90 (a headline figure) and its mean.
const FIGURES: [Figure; 2] = [
    Figure {
        name: "latency_p90",
        direction: Direction::LowerIsBetter,
        unit: "ms",
        measure: Measure::Percentile(Sample::Latency, 90.0),
    },
    Figure {
        name: "latency_mean",
        direction: Direction::LowerIsBetter,
        unit: "ms",
        measure: Measure::Mean(Sample::Latency),
    },
];

/// Draws in which the interval held the truth: `[table][figure]`, tables by session then by
/// request, figures as [`FIGURES`].
type Covered = [[u32; 2]; 2];

fn standard_normal(rng: &mut ChaCha8Rng) -> f64 {
    StandardNormal.sample(rng)
}

/// One synthetic run: latencies `exp(a_s + e_sj)` seconds.
fn synthetic_run(between_sd: f64, rng: &mut ChaCha8Rng) -> Vec<RequestRecord> {
    let mut records = Vec::with_capacity((SESSIONS * PER_SESSION) as usize);
    for session in 0..SESSIONS {
        let level = between_sd * standard_normal(rng);
        for turn in 0..PER_SESSION {
            let noise = WITHIN_SD * standard_normal(rng);
            let mut record = rec(0, &[], 100, 1);
            record.chunk_offsets_ns = vec![(1e9 * (level + noise).exp()).round() as u64].into();
            records.push(in_stream(record, &format!("s{session:03}"), turn));
        }
    }
    records
}

/// How many of the draws' intervals held the truth, at between-session deviation `between_sd`.
fn coverage(between_sd: f64, row: u64) -> Covered {
    let total_sd = between_sd.hypot(WITHIN_SD);
    let truth_ms = [
        1000.0 * (normal_quantile(0.9) * total_sd).exp(),
        1000.0 * (total_sd * total_sd / 2.0).exp(),
    ];
    let mut covered: Covered = [[0; 2]; 2];
    for draw in 0..DRAWS {
        let mut rng = ChaCha8Rng::seed_from_u64(DATA_SEED ^ (row << 32) ^ draw);
        let records = synthetic_run(between_sd, &mut rng);
        let tables = [
            SessionTable::of(&records, WINDOW_NS),
            SessionTable::per_request(&records, WINDOW_NS, &Judgments::default()),
        ];
        for (table, held) in tables.iter().zip(&mut covered) {
            let intervals = bootstrap(table, &FIGURES, Level::DEFAULT, Some(RESAMPLES), draw);
            for ((figure, truth), held) in FIGURES.iter().zip(truth_ms).zip(held.iter_mut()) {
                let interval = intervals.figures[figure.name];
                *held += u32::from(interval.lo <= truth && truth <= interval.hi);
            }
        }
    }
    covered
}

fn share(held: u32) -> f64 {
    f64::from(held) / DRAWS as f64
}

/// The guide's table: one row per between-session deviation.
fn render(rows: &[(f64, Covered)]) -> String {
    let mut table = String::from(
        "| sb | ρ (log scale) | design effect 1 + (m − 1)ρ | session bootstrap: p90 | session bootstrap: mean | request bootstrap: p90 | request bootstrap: mean |\n\
         |---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for (between_sd, covered) in rows {
        let correlation =
            between_sd * between_sd / (between_sd * between_sd + WITHIN_SD * WITHIN_SD);
        let design_effect = 1.0 + f64::from(PER_SESSION - 1) * correlation;
        let cells: Vec<String> = covered
            .iter()
            .flatten()
            .map(|&held| format!("{:.2} %", 100.0 * share(held)))
            .collect();
        table += &format!(
            "| {between_sd:.1} | {correlation:.2} | {design_effect:.2} | {} |\n",
            cells.join(" | ")
        );
    }
    table
}

/// `guide` with the block between its two markers replaced by `table`; `None` without exactly two.
fn with_table(guide: &str, table: &str) -> Option<String> {
    let parts: Vec<&str> = guide.split(MARKER).collect();
    let [before, _, after] = parts[..] else {
        return None;
    };
    Some(format!("{before}{MARKER}\n{table}{MARKER}{after}"))
}

#[test]
fn coverage_of_the_session_bootstrap_and_the_guides_table() {
    let rows: Vec<(f64, Covered)> = std::thread::scope(|scope| {
        let workers: Vec<_> = BETWEEN_SDS
            .iter()
            .zip(0u64..)
            .map(|(&between_sd, row)| scope.spawn(move || (between_sd, coverage(between_sd, row))))
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().unwrap())
            .collect()
    });
    let table = render(&rows);
    for (between_sd, [by_session, by_request]) in &rows {
        for (figure, &held) in FIGURES.iter().zip(by_session) {
            let covered = share(held);
            assert!(
                (0.92..=0.98).contains(&covered),
                "sb {between_sd}: the session bootstrap's {} interval held the truth in {covered} of the draws\n{table}",
                figure.name
            );
        }
        if *between_sd == 0.8 {
            for (figure, &held) in FIGURES.iter().zip(by_request) {
                let covered = share(held);
                assert!(
                    covered < 0.90,
                    "sb {between_sd}: the request bootstrap's {} interval held the truth in {covered} of the draws\n{table}",
                    figure.name
                );
            }
        }
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/guide/precision.md");
    let guide = std::fs::read_to_string(&path).expect("docs/guide/precision.md is readable");
    let blessed = with_table(&guide, &table).unwrap_or_else(|| {
        panic!("docs/guide/precision.md has no block between two {MARKER} markers")
    });
    if std::env::var_os("AGENTX_BLESS").is_some() {
        std::fs::write(&path, blessed).expect("docs/guide/precision.md is writable");
        return;
    }
    assert!(
        guide == blessed,
        "docs/guide/precision.md's coverage table is not the test's; regenerate it with `{BLESS}`:\n{table}"
    );
}

#[test]
fn the_table_goes_between_the_markers() {
    let guide = format!("# G\n\n{MARKER}\nold\n{MARKER}\n\nafter\n");
    assert_eq!(
        with_table(&guide, "| new |\n").unwrap(),
        format!("# G\n\n{MARKER}\n| new |\n{MARKER}\n\nafter\n")
    );
    assert_eq!(with_table("no markers", "x"), None);
    assert_eq!(with_table(&format!("{MARKER}{MARKER}{MARKER}"), "x"), None);
}
