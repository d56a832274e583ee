//! Stated precision: how far a run's headline figures could move under another draw of the same
//! workload (confidence intervals), the spread between repeated trials, and whether two runs differ.
//! No I/O and no clocks: every random draw comes from a ChaCha8 stream seeded by the caller, so the
//! same records and seed give the same intervals.
//!
//! - **The headline figures** ([`FIGURES`]): each [`Figure`] has the name `--target-precision`
//!   accepts ([`Figure::parse`]), a [`Direction`] (which way is better, for [`compare`]), a unit,
//!   and its [`Measure`]: a percentile or mean of the requests' values, a column's total per second
//!   or per hour of the window, a ratio of two totals, or the window's energy over a total.
//! - **The session table** ([`SessionTable`]): built once from the records, profiling phase only.
//!   One row per session (`RequestRecord::session_root`: a single-stream session or a whole tree)
//!   with its totals ([`Column`]: successful and failed requests, tokens, cached tokens, good
//!   requests, and the per-session judgments the caller supplies in [`Judgments`]); and per
//!   request sample ([`Sample`]: TTFT, ITL, request latency, the values `Summary::of` reports) all
//!   values sorted together, each with its session's index.
//! - **The session bootstrap** ([`bootstrap()`]): replicate `b` draws as many sessions as the run
//!   had, with replacement, from `ChaCha8Rng::seed_from_u64(seed ^ SALT ^ b)`, and recomputes
//!   every figure with each session weighted by how often it was drawn. A percentile is the
//!   numpy-linear percentile (`dist::percentile`) of the expanded sample, found by one walk over
//!   the sorted values (no sort per replicate); a rate divides by the *fixed* window (the window is
//!   the design, not a sample); an energy figure keeps the energy fixed and resamples its
//!   denominator, so its interval covers workload sampling, not meter error. The interval is the
//!   percentile interval of the replicates ([`Intervals`]). Sessions, not requests, are resampled
//!   because a session's requests share prompt prefixes, cache state and the server's load of the
//!   moment: with intra-session correlation ρ and m requests a session, resampling requests
//!   understates the variance by the design effect 1 + (m − 1)ρ ([`SessionTable::per_request`]
//!   builds the request-level table that shows it).
//! - **Between trials** ([`between_trials`]): mean ± t(k − 1) · sd / √k over k trials' figures,
//!   with Student's t quantile from [`student::quantile`].
//! - **Two runs** ([`compare::ratio`]): per figure the ratio B/A from independent session
//!   bootstraps of both, its interval at the Bonferroni family level, and a verdict.

use serde::{Deserialize, Serialize};

use crate::stats::{self, MetricDef};

mod bootstrap;
pub mod compare;
mod run;
pub mod student;
mod table;

#[cfg(test)]
mod coverage_tests;

pub use bootstrap::{
    bootstrap, default_resamples, Interval, Intervals, DEFAULT_RESAMPLES, MIN_RESAMPLES,
};
pub use run::{run_table, RunJudgments};
pub use student::{between_trials, BetweenTrials};
pub use table::{Judgments, SessionTable, Unit};

/// Which way a figure is better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// A time, an energy per unit of work: smaller is better.
    LowerIsBetter,
    /// A throughput, a hit rate, a share that met an objective: larger is better.
    HigherIsBetter,
}

/// A per-request sample whose percentiles and mean are figures: the values, in ms, that `Summary`
/// reports as `ttft_ms`, `itl_ms` and `latency_ms` (aiperf's `time_to_first_token`,
/// `inter_token_latency` and `request_latency` of each successful profiling request).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    /// Time to first token.
    Ttft,
    /// Each request's mean inter-token latency.
    Itl,
    /// Request latency.
    Latency,
}

impl Sample {
    /// Every sample, in the table's order.
    pub const ALL: [Sample; 3] = [Sample::Ttft, Sample::Itl, Sample::Latency];

    /// The per-request metric whose value (`stats::record_values`) the sample holds.
    pub(crate) fn metric(self) -> MetricDef {
        match self {
            Sample::Ttft => stats::TIME_TO_FIRST_TOKEN,
            Sample::Itl => stats::INTER_TOKEN_LATENCY,
            Sample::Latency => stats::REQUEST_LATENCY,
        }
    }
}

/// A per-session total of the session table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Column {
    /// 1 for every session (so a share of sessions is a ratio of totals).
    Sessions,
    /// Successful profiling requests.
    Ok,
    /// Failed profiling requests (cancellations and context overflows apart, as in `Summary`).
    Failed,
    /// Prompt tokens of the successful requests.
    InputTokens,
    /// Output tokens of the successful requests.
    OutputTokens,
    /// Prompt plus output tokens of the successful requests.
    TotalTokens,
    /// Cached prompt tokens of the successful requests (known only when every response said).
    CachedTokens,
    /// Successful requests the goodput judgment found good.
    GoodRequests,
    /// 1 when the caller judged the session good (`--goodput`'s session share).
    GoodSessions,
    /// 1 when the caller judged the session to meet `--session-slo`.
    SessionsMeetingSlo,
    /// 1 when the caller credits the session as a whole job.
    Jobs,
    /// The credited job's wall time, seconds.
    JobWallSeconds,
}

impl Column {
    /// How many columns a table row has (the last variant's place + 1).
    pub(crate) const COUNT: usize = Column::JobWallSeconds as usize + 1;

    /// The column's place in a table row.
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// How a figure is computed from the (weighted) session table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Measure {
    /// The linear-interpolation percentile (`0..=100`) of a sample.
    Percentile(Sample, f64),
    /// The mean of a sample.
    Mean(Sample),
    /// A column's total per `per_s` seconds of the window (1: per second, 3600: per hour).
    Rate {
        /// The counted column.
        column: Column,
        /// Seconds the rate is per.
        per_s: f64,
    },
    /// `scale × numerator total / denominator total`.
    Ratio {
        /// The numerator's column.
        numerator: Column,
        /// The denominator's column.
        denominator: Column,
        /// The factor applied.
        scale: f64,
    },
    /// The window's energy (joules, fixed) over a column's total.
    EnergyPer(Column),
}

impl Measure {
    /// Whether the figure is a time (a percentile or mean of a latency sample): its change reads
    /// "faster"/"slower" rather than "higher"/"lower".
    pub fn is_time(self) -> bool {
        matches!(self, Measure::Percentile(..) | Measure::Mean(_))
    }
}

/// A headline figure: its name, which way is better, its unit, and how it is computed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figure {
    /// The name `--target-precision` and the intervals use.
    pub name: &'static str,
    /// Which way is better.
    pub direction: Direction,
    /// The unit of its value.
    pub unit: &'static str,
    /// How it is computed.
    pub measure: Measure,
}

const fn percentile_figure(name: &'static str, sample: Sample, percent: f64) -> Figure {
    Figure {
        name,
        direction: Direction::LowerIsBetter,
        unit: "ms",
        measure: Measure::Percentile(sample, percent),
    }
}

const fn rate_figure(name: &'static str, unit: &'static str, column: Column, per_s: f64) -> Figure {
    Figure {
        name,
        direction: Direction::HigherIsBetter,
        unit,
        measure: Measure::Rate { column, per_s },
    }
}

const fn share_figure(name: &'static str, numerator: Column, denominator: Column) -> Figure {
    Figure {
        name,
        direction: Direction::HigherIsBetter,
        unit: "ratio",
        measure: Measure::Ratio {
            numerator,
            denominator,
            scale: 1.0,
        },
    }
}

const fn energy_figure(name: &'static str, unit: &'static str, column: Column) -> Figure {
    Figure {
        name,
        direction: Direction::LowerIsBetter,
        unit,
        measure: Measure::EnergyPer(column),
    }
}

/// The headline figures: the one registry `--target-precision`, the intervals and `compare` read.
pub const FIGURES: [Figure; 18] = [
    percentile_figure("ttft_p50", Sample::Ttft, 50.0),
    percentile_figure("ttft_p90", Sample::Ttft, 90.0),
    percentile_figure("ttft_p99", Sample::Ttft, 99.0),
    percentile_figure("itl_p50", Sample::Itl, 50.0),
    percentile_figure("itl_p90", Sample::Itl, 90.0),
    percentile_figure("latency_p90", Sample::Latency, 90.0),
    rate_figure("request_throughput", "requests/s", Column::Ok, 1.0),
    rate_figure(
        "output_token_throughput",
        "tokens/s",
        Column::OutputTokens,
        1.0,
    ),
    rate_figure(
        "total_token_throughput",
        "tokens/s",
        Column::TotalTokens,
        1.0,
    ),
    share_figure("cache_hit", Column::CachedTokens, Column::InputTokens),
    rate_figure("goodput", "requests/s", Column::GoodRequests, 1.0),
    share_figure(
        "good_session_fraction",
        Column::GoodSessions,
        Column::Sessions,
    ),
    share_figure(
        "sessions_meeting_slo",
        Column::SessionsMeetingSlo,
        Column::Sessions,
    ),
    rate_figure("jobs_per_hour", "jobs/h", Column::Jobs, 3600.0),
    Figure {
        name: "jobs_per_hour_per_user",
        direction: Direction::HigherIsBetter,
        unit: "jobs/h",
        measure: Measure::Ratio {
            numerator: Column::Jobs,
            denominator: Column::JobWallSeconds,
            scale: 3600.0,
        },
    },
    energy_figure("joules_per_output_token", "J/token", Column::OutputTokens),
    energy_figure("joules_per_total_token", "J/token", Column::TotalTokens),
    energy_figure("joules_per_job", "J/job", Column::Jobs),
];

impl Figure {
    /// The headline figure named `name`; the error lists the names.
    pub fn parse(name: &str) -> Result<&'static Figure, String> {
        FIGURES
            .iter()
            .find(|figure| figure.name == name.trim())
            .ok_or_else(|| {
                let names: Vec<&str> = FIGURES.iter().map(|figure| figure.name).collect();
                format!(
                    "{name:?} is not a headline figure; name one of {}",
                    names.join(", ")
                )
            })
    }
}

/// A confidence level in (0, 1), e.g. 0.95.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Level(f64);

impl Level {
    /// 95 %, the default.
    pub const DEFAULT: Level = Level(0.95);

    /// `level` when it is in (0, 1); the error says what is wrong and gives an example.
    pub fn new(level: f64) -> Result<Level, String> {
        if level > 0.0 && level < 1.0 {
            Ok(Level(level))
        } else {
            Err(format!("{level} is not in (0, 1), e.g. 0.95"))
        }
    }

    /// The level, in (0, 1).
    pub fn get(self) -> f64 {
        self.0
    }

    /// The level of each of `family` intervals that together hold at this level (Bonferroni:
    /// `1 − (1 − level) / family`); the level itself for a family of one or none.
    #[must_use]
    pub fn bonferroni(self, family: usize) -> Level {
        Level(1.0 - (1.0 - self.0) / family.max(1) as f64)
    }

    /// The two percentiles (0..=100) of the replicates that bound a two-sided interval.
    pub(crate) fn tails_percent(self) -> (f64, f64) {
        let alpha = 1.0 - self.0;
        (100.0 * alpha / 2.0, 100.0 * (1.0 - alpha / 2.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_parse_by_name_and_an_unknown_name_lists_them() {
        let figure = Figure::parse("itl_p90").unwrap();
        assert_eq!(figure.measure, Measure::Percentile(Sample::Itl, 90.0));
        assert_eq!(figure.direction, Direction::LowerIsBetter);
        let jobs = Figure::parse(" jobs_per_hour ").unwrap();
        assert_eq!(
            (jobs.direction, jobs.unit),
            (Direction::HigherIsBetter, "jobs/h")
        );
        let error = Figure::parse("ttft_p91").unwrap_err();
        assert!(
            error.starts_with("\"ttft_p91\" is not a headline figure"),
            "{error}"
        );
        for figure in &FIGURES {
            assert!(error.contains(figure.name), "{error}");
        }
        let mut names: Vec<&str> = FIGURES.iter().map(|figure| figure.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), FIGURES.len(), "figure names are unique");
    }

    #[test]
    fn a_level_is_in_the_open_unit_interval() {
        assert_eq!(Level::new(0.9).unwrap().get(), 0.9);
        for bad in [0.0, 1.0, 1.5, -0.1, f64::NAN] {
            let error = Level::new(bad).unwrap_err();
            assert!(error.ends_with("is not in (0, 1), e.g. 0.95"), "{error}");
        }
        // 5 % over 5 figures: each at 99 %.
        let family = Level::DEFAULT.bonferroni(5).get();
        assert!((family - 0.99).abs() < 1e-12);
        assert_eq!(Level::DEFAULT.bonferroni(0), Level::DEFAULT);
        let (low, high) = Level::new(0.9).unwrap().tails_percent();
        assert!((low - 5.0).abs() < 1e-9 && (high - 95.0).abs() < 1e-9);
    }
}
