//! The session table: a run's profiling records reduced once to what every bootstrap replicate
//! needs (per-unit totals and the request samples sorted with their unit's index), and each figure
//! evaluated with the units weighted by how often a replicate drew them.

use std::collections::BTreeMap;

use super::{Column, Figure, Measure, Sample};
use crate::goodput::Goodput;
use crate::stats::{self, Class, Value};
use crate::Outcome;
use agentx_record::RequestRecord;

/// What a table's rows are: the unit a bootstrap resamples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// A session (`RequestRecord::session_root`): the right unit.
    Session,
    /// A single request: ignores the correlation within a session (to show what that costs).
    Request,
}

/// What the caller judged, beyond what the records say: whether a request was good
/// (`--goodput`), whether a session was good or met `--session-slo`, whether it is a whole job
/// (and its wall time), and the window's energy. A figure that needs a judgment the caller did not
/// give is not computed.
#[derive(Default)]
pub struct Judgments<'a> {
    good_request: Option<RequestJudge<'a>>,
    good_session: Option<SessionJudge<'a>>,
    meets_session_slo: Option<SessionJudge<'a>>,
    job_wall_s: Option<JobWall<'a>>,
    energy_j: Option<f64>,
}

/// Whether a request was good.
type RequestJudge<'a> = Box<dyn Fn(&RequestRecord) -> bool + 'a>;
/// Whether a session (by its root) was good, or met its objective.
type SessionJudge<'a> = Box<dyn Fn(&str) -> bool + 'a>;
/// A session's (by its root) wall time as a whole job, seconds.
type JobWall<'a> = Box<dyn Fn(&str) -> Option<f64> + 'a>;

impl<'a> Judgments<'a> {
    /// Whether each successful request was good.
    #[must_use]
    pub fn good_requests(mut self, judge: impl Fn(&RequestRecord) -> bool + 'a) -> Self {
        self.good_request = Some(Box::new(judge));
        self
    }

    /// Good requests by `--goodput`'s objectives.
    #[must_use]
    pub fn goodput(self, goodput: &'a Goodput) -> Self {
        self.good_requests(|record| goodput.is_good(record))
    }

    /// Whether each session (by its root) was good.
    #[must_use]
    pub fn good_sessions(mut self, judge: impl Fn(&str) -> bool + 'a) -> Self {
        self.good_session = Some(Box::new(judge));
        self
    }

    /// Whether each session (by its root) met `--session-slo`.
    #[must_use]
    pub fn sessions_meeting_slo(mut self, judge: impl Fn(&str) -> bool + 'a) -> Self {
        self.meets_session_slo = Some(Box::new(judge));
        self
    }

    /// Each session (by its root) credited as a whole job, with the job's wall time in seconds;
    /// `None` for a session that is not one.
    #[must_use]
    pub fn jobs(mut self, wall_s: impl Fn(&str) -> Option<f64> + 'a) -> Self {
        self.job_wall_s = Some(Box::new(wall_s));
        self
    }

    /// The energy the GPUs took over the window, joules.
    #[must_use]
    pub fn energy_j(mut self, joules: f64) -> Self {
        self.energy_j = Some(joules);
        self
    }
}

/// One request sample: every value of the table, ascending, with its unit's index, and each
/// unit's count and sum of values.
#[derive(Debug, Clone, Default, PartialEq)]
struct SampleValues {
    sorted: Vec<(f64, u32)>,
    count: Vec<u32>,
    sum: Vec<f64>,
}

/// A run's profiling records by unit (session, or request), ready to bootstrap.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionTable {
    unit: Unit,
    window_s: f64,
    keys: Vec<String>,
    rows: Vec<[f64; Column::COUNT]>,
    known: [bool; Column::COUNT],
    samples: [SampleValues; 3],
    requests: usize,
    energy_j: Option<f64>,
}

impl SessionTable {
    /// The table of `records` by session over a profiling window of `window_ns`, without
    /// judgments (the figures that need one are not computed).
    pub fn of(records: &[RequestRecord], window_ns: u64) -> SessionTable {
        SessionTable::judged(records, window_ns, &Judgments::default())
    }

    /// The table of `records` by session, with the caller's judgments.
    pub fn judged(
        records: &[RequestRecord],
        window_ns: u64,
        judgments: &Judgments<'_>,
    ) -> SessionTable {
        SessionTable::build(records, window_ns, Unit::Session, judgments)
    }

    /// The table of `records` with each request a unit of its own: a bootstrap over it resamples
    /// requests, the estimate is the same, the interval too narrow when sessions are correlated.
    /// The per-session judgments do not apply to it.
    pub fn per_request(
        records: &[RequestRecord],
        window_ns: u64,
        judgments: &Judgments<'_>,
    ) -> SessionTable {
        SessionTable::build(records, window_ns, Unit::Request, judgments)
    }

    fn build(
        records: &[RequestRecord],
        window_ns: u64,
        unit: Unit,
        judgments: &Judgments<'_>,
    ) -> SessionTable {
        // The profiling records that count in a session (sessions::figures' selection): successful
        // or failed, warmup and context overflows apart.
        let measured: Vec<&RequestRecord> = records
            .iter()
            .filter(|record| matches!(stats::class(record), Class::Valid | Class::Error))
            .collect();
        let (keys, unit_of) = unit_keys(&measured, unit);
        let mut table = SessionTable {
            unit,
            window_s: window_ns as f64 / 1e9,
            rows: vec![[0.0; Column::COUNT]; keys.len()],
            keys,
            known: [true; Column::COUNT],
            samples: std::array::from_fn(|_| SampleValues::default()),
            requests: measured.len(),
            energy_j: judgments.energy_j,
        };
        for (record, &row) in measured.iter().zip(&unit_of) {
            table.add_request(record, row, judgments);
        }
        table.known[Column::GoodRequests.index()] = judgments.good_request.is_some();
        table.add_session_judgments(judgments);
        for sample in &mut table.samples {
            sample.sorted.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
        }
        table
    }

    /// Adds one measured request to row `row`.
    fn add_request(&mut self, record: &RequestRecord, row: u32, judgments: &Judgments<'_>) {
        let cells = &mut self.rows[row as usize];
        cells[Column::Sessions.index()] = 1.0;
        if Outcome::of(record) == Outcome::Failed {
            cells[Column::Failed.index()] += 1.0;
        }
        if stats::class(record) != Class::Valid {
            return;
        }
        cells[Column::Ok.index()] += 1.0;
        cells[Column::InputTokens.index()] += record.isl as f64;
        cells[Column::OutputTokens.index()] += record.osl as f64;
        cells[Column::TotalTokens.index()] += (record.isl + record.osl) as f64;
        match record.usage.cached_tokens {
            Some(cached) => cells[Column::CachedTokens.index()] += cached as f64,
            None => self.known[Column::CachedTokens.index()] = false,
        }
        if let Some(judge) = &judgments.good_request {
            cells[Column::GoodRequests.index()] += f64::from(u8::from(judge(record)));
        }
        let units = self.keys.len();
        let values = stats::record_scalar_values(record);
        for (sample, store) in Sample::ALL.iter().zip(&mut self.samples) {
            let tag = sample.metric().tag;
            let value = values.iter().find_map(|(metric, value)| match value {
                Value::Float(value) if metric.tag == tag => Some(*value),
                _ => None,
            });
            if let Some(value) = value {
                if store.count.is_empty() {
                    store.count = vec![0; units];
                    store.sum = vec![0.0; units];
                }
                store.sorted.push((value, row));
                store.count[row as usize] += 1;
                store.sum[row as usize] += value;
            }
        }
    }

    /// The columns the caller judges per session (not known for a table of requests).
    fn add_session_judgments(&mut self, judgments: &Judgments<'_>) {
        let by_session = self.unit == Unit::Session;
        let flags = [
            (Column::GoodSessions, &judgments.good_session),
            (Column::SessionsMeetingSlo, &judgments.meets_session_slo),
        ];
        for (column, judge) in flags {
            self.known[column.index()] = by_session && judge.is_some();
            if let (true, Some(judge)) = (by_session, judge) {
                for (cells, key) in self.rows.iter_mut().zip(&self.keys) {
                    cells[column.index()] = f64::from(u8::from(judge(key)));
                }
            }
        }
        let jobs_known = by_session && judgments.job_wall_s.is_some();
        self.known[Column::Jobs.index()] = jobs_known;
        self.known[Column::JobWallSeconds.index()] = jobs_known;
        if let (true, Some(wall_s)) = (by_session, &judgments.job_wall_s) {
            for (cells, key) in self.rows.iter_mut().zip(&self.keys) {
                if let Some(wall_s) = wall_s(key) {
                    cells[Column::Jobs.index()] = 1.0;
                    cells[Column::JobWallSeconds.index()] = wall_s;
                }
            }
        }
    }

    /// What the rows are.
    pub fn unit(&self) -> Unit {
        self.unit
    }

    /// How many rows (sessions, or requests) the table has.
    pub fn units(&self) -> usize {
        self.keys.len()
    }

    /// Each row's key: the session's root, or the request's id.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// The measured requests (successful or failed, in the profiling phase).
    pub fn requests(&self) -> usize {
        self.requests
    }

    /// The profiling window the rates divide by, seconds.
    pub fn window_s(&self) -> f64 {
        self.window_s
    }

    /// A column's total over the table (`None` when the caller did not judge it).
    pub fn total(&self, column: Column) -> Option<f64> {
        let ones = vec![1; self.units()];
        self.known[column.index()].then(|| self.weighted_total(column, &ones))
    }

    /// The figure over the whole table; `None` when the table cannot give it (a judgment or the
    /// energy not given, no value in its sample, a zero denominator).
    pub fn estimate(&self, figure: &Figure) -> Option<f64> {
        self.value(figure.measure, &vec![1; self.units()])
    }

    /// The measure with row `i` counted `weights[i]` times (`weights.len() == self.units()`).
    pub(crate) fn value(&self, measure: Measure, weights: &[u32]) -> Option<f64> {
        let known = |column: Column| self.known[column.index()];
        let finite = |value: f64| value.is_finite().then_some(value);
        match measure {
            Measure::Percentile(sample, percent) => {
                self.weighted_percentile(sample, percent, weights)
            }
            Measure::Mean(sample) => {
                let values = &self.samples[sample as usize];
                let (mut count, mut sum) = (0.0, 0.0);
                let per_unit = values.count.iter().zip(&values.sum).zip(weights);
                for ((&unit_count, &unit_sum), &weight) in per_unit {
                    count += f64::from(weight) * f64::from(unit_count);
                    sum += f64::from(weight) * unit_sum;
                }
                (count > 0.0).then(|| sum / count)
            }
            Measure::Rate { column, per_s } => (known(column) && self.window_s > 0.0)
                .then(|| self.weighted_total(column, weights) * per_s / self.window_s),
            Measure::Ratio {
                numerator,
                denominator,
                scale,
            } => {
                if !known(numerator) || !known(denominator) {
                    return None;
                }
                let over = self.weighted_total(denominator, weights);
                finite(scale * self.weighted_total(numerator, weights) / over)
            }
            Measure::EnergyPer(column) => {
                let energy = self.energy_j.filter(|_| known(column))?;
                finite(energy / self.weighted_total(column, weights))
            }
        }
    }

    fn weighted_total(&self, column: Column, weights: &[u32]) -> f64 {
        let mut total = 0.0;
        for (cells, &weight) in self.rows.iter().zip(weights) {
            total += f64::from(weight) * cells[column.index()];
        }
        total
    }

    /// The linear-interpolation percentile (`dist::percentile`: rank `(n − 1)·p/100` between the
    /// two nearest values) of the sample expanded by the weights, by one walk over the sorted
    /// values from the nearer end: the value at expanded position `j` is the first whose running
    /// weight exceeds `j`.
    fn weighted_percentile(&self, sample: Sample, percent: f64, weights: &[u32]) -> Option<f64> {
        let values = &self.samples[sample as usize];
        let mut expanded = 0u64;
        for (&count, &weight) in values.count.iter().zip(weights) {
            expanded += u64::from(count) * u64::from(weight);
        }
        if expanded == 0 {
            return None;
        }
        let rank = (expanded - 1) as f64 * percent / 100.0;
        let (below, above) = (rank.floor() as u64, rank.ceil() as u64);
        let (lower, upper) = if percent <= 50.0 {
            values_at(values.sorted.iter(), weights, below, above)?
        } else {
            // From the top, position `j` is `expanded − 1 − j`: `above` comes first.
            let from_top = |position: u64| expanded - 1 - position;
            let (upper, lower) = values_at(
                values.sorted.iter().rev(),
                weights,
                from_top(above),
                from_top(below),
            )?;
            (lower, upper)
        };
        Some(lower + (upper - lower) * (rank - below as f64))
    }
}

/// The values at walk positions `first <= second` of `sorted` expanded by the weights.
fn values_at<'a>(
    sorted: impl Iterator<Item = &'a (f64, u32)>,
    weights: &[u32],
    first: u64,
    second: u64,
) -> Option<(f64, f64)> {
    let mut seen = 0u64;
    let mut first_value = None;
    for &(value, row) in sorted {
        seen += u64::from(weights[row as usize]);
        if first_value.is_none() && seen > first {
            first_value = Some(value);
        }
        if seen > second {
            return Some((first_value?, value));
        }
    }
    None
}

/// Each row's key and each record's row: sessions in their roots' order (so the table does not
/// depend on the order the records were written in), requests in the records' order.
fn unit_keys(measured: &[&RequestRecord], unit: Unit) -> (Vec<String>, Vec<u32>) {
    match unit {
        Unit::Request => (
            measured
                .iter()
                .map(|record| record.request_id.clone())
                .collect(),
            (0..measured.len() as u32).collect(),
        ),
        Unit::Session => {
            let mut rows: BTreeMap<&str, u32> = measured
                .iter()
                .map(|record| (record.session_root(), 0))
                .collect();
            for (row, slot) in rows.values_mut().enumerate() {
                *slot = row as u32;
            }
            let unit_of = measured
                .iter()
                .map(|record| rows[record.session_root()])
                .collect();
            (rows.keys().map(|&key| key.to_owned()).collect(), unit_of)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dist;
    use crate::precision::FIGURES;
    use crate::Summary;
    use agentx_record::testkit::{failed, in_stream, rec};
    use agentx_record::Phase;

    fn figure(name: &str) -> &'static Figure {
        Figure::parse(name).unwrap()
    }

    /// Three sessions: a (two requests), b (one request and a failure), c (one request), plus a
    /// warmup record, a context overflow and a cancellation that count in no row.
    fn three_sessions() -> Vec<RequestRecord> {
        let mut a0 = in_stream(rec(0, &[100, 140], 1000, 5), "a", 0);
        a0.usage.cached_tokens = Some(600);
        let mut a1 = in_stream(rec(500, &[40, 60], 2000, 3), "a", 1);
        a1.usage.cached_tokens = Some(1800);
        let mut b0 = in_stream(rec(100, &[300, 380], 500, 9), "b", 0);
        b0.usage.cached_tokens = Some(0);
        let b1 = in_stream(failed(900, 700), "b", 1);
        let mut c0 = in_stream(rec(200, &[20], 100, 1), "c", 0);
        c0.usage.cached_tokens = Some(100);
        let mut warm = in_stream(rec(0, &[5, 6], 50, 2), "a", 0);
        warm.phase = Phase::Warmup;
        let mut overflow = in_stream(failed(50, 9000), "c", 1);
        overflow.context_overflow = true;
        let mut cancelled = in_stream(rec(600, &[10, 20], 40, 2), "c", 2);
        cancelled.cancelled = true;
        vec![c0, b1, a0, warm, b0, overflow, a1, cancelled]
    }

    #[test]
    fn a_table_of_three_sessions_holds_their_totals() {
        let records = three_sessions();
        let table = SessionTable::of(&records, 4_000_000_000);
        assert_eq!(table.keys(), ["a", "b", "c"]);
        assert_eq!((table.unit(), table.units()), (Unit::Session, 3));
        // a0, a1, b0, b1, c0 and the cancellation (counted in neither ok nor failed).
        assert_eq!(table.requests(), 6);
        assert_eq!(table.total(Column::Ok), Some(4.0));
        assert_eq!(table.total(Column::Failed), Some(1.0));
        assert_eq!(table.total(Column::InputTokens), Some(3600.0));
        assert_eq!(table.total(Column::OutputTokens), Some(18.0));
        assert_eq!(table.total(Column::CachedTokens), Some(2500.0));
        assert_eq!(table.total(Column::GoodRequests), None);
        // Rates over the fixed 4 s window; the cache hit as cached over input tokens.
        let estimate = |name: &str| table.estimate(figure(name));
        assert_eq!(estimate("request_throughput"), Some(1.0));
        assert_eq!(estimate("output_token_throughput"), Some(4.5));
        assert_eq!(estimate("total_token_throughput"), Some(904.5));
        assert_eq!(estimate("cache_hit"), Some(2500.0 / 3600.0));
        for unjudged in ["goodput", "good_session_fraction", "jobs_per_hour"] {
            assert_eq!(estimate(unjudged), None, "{unjudged}");
        }
        assert_eq!(estimate("joules_per_output_token"), None);
        // TTFTs 100, 40, 300, 20 ms: the same percentiles as the summary's.
        let summary = Summary::of(&records);
        let ttft = summary.ttft_ms.unwrap();
        assert_eq!(estimate("ttft_p50"), Some(ttft.p50));
        assert_eq!(estimate("ttft_p90"), Some(ttft.p90));
        assert_eq!(estimate("ttft_p50"), Some(70.0));
        assert_eq!(
            estimate("latency_p90"),
            Some(summary.latency_ms.unwrap().p90)
        );
        assert_eq!(estimate("itl_p50"), Some(summary.itl_ms.unwrap().p50));
        // a's ITLs 10 and 10, b's 10: c's one-token answer has none.
        assert_eq!(
            table.value(Measure::Mean(Sample::Itl), &[0, 1, 5]),
            Some(10.0)
        );
        assert_eq!(table.value(Measure::Mean(Sample::Itl), &[0, 0, 3]), None);
    }

    #[test]
    fn weights_count_a_session_as_often_as_it_was_drawn() {
        let records = three_sessions();
        let table = SessionTable::of(&records, 2_000_000_000);
        let rate = |weights: &[u32]| table.value(figure("request_throughput").measure, weights);
        // a twice (2 requests each), c once: 5 requests over 2 s.
        assert_eq!(rate(&[2, 0, 1]), Some(2.5));
        // TTFT sample a, a, c, c, c = 100, 40, 100, 40, 20, 20, 20 -> sorted 20 20 20 40 40 100
        // 100; p50 is the 4th value.
        let ttft_p50 = table.value(Measure::Percentile(Sample::Ttft, 50.0), &[2, 0, 3]);
        assert_eq!(ttft_p50, Some(40.0));
        let cache = table.value(figure("cache_hit").measure, &[0, 2, 1]);
        assert_eq!(cache, Some(100.0 / 1100.0));
        assert_eq!(table.value(figure("cache_hit").measure, &[0, 0, 0]), None);
    }

    #[test]
    fn the_weighted_walk_equals_numpy_on_the_expanded_sample() {
        // Values with ties and a unit without values (the third).
        let mut records = Vec::new();
        let latencies: [(&str, &[u64]); 4] = [
            ("s0", &[5, 17, 17, 40]),
            ("s1", &[3, 17, 90]),
            ("s2", &[]),
            ("s3", &[8]),
        ];
        for (session, values) in latencies {
            for (turn, &latency) in values.iter().enumerate() {
                records.push(in_stream(
                    rec(0, &[1, latency], 10, 2),
                    session,
                    turn as u32,
                ));
            }
            if values.is_empty() {
                records.push(in_stream(failed(0, 10), session, 0));
            }
        }
        let table = SessionTable::of(&records, 1_000_000_000);
        for weights in [
            [1, 1, 1, 1],
            [0, 3, 2, 1],
            [2, 0, 0, 5],
            [0, 0, 4, 1],
            [7, 1, 0, 0],
        ] {
            let mut expanded = Vec::new();
            for ((_, values), &weight) in latencies.iter().zip(&weights) {
                for _ in 0..weight {
                    expanded.extend(values.iter().map(|&latency| latency as f64));
                }
            }
            expanded.sort_unstable_by(f64::total_cmp);
            for percent in [0.0, 10.0, 33.3, 50.0, 90.0, 99.0, 100.0] {
                let walked = table.value(Measure::Percentile(Sample::Latency, percent), &weights);
                assert_eq!(
                    walked,
                    dist::percentile(&expanded, percent),
                    "{weights:?} p{percent}"
                );
            }
            let mean = table
                .value(Measure::Mean(Sample::Latency), &weights)
                .unwrap();
            assert!((mean - dist::mean(&expanded)).abs() < 1e-12, "{weights:?}");
        }
        assert_eq!(
            table.value(Measure::Percentile(Sample::Latency, 90.0), &[0, 0, 3, 0]),
            None
        );
    }

    #[test]
    fn judgments_give_goodput_session_shares_jobs_and_energy() {
        let records = three_sessions();
        let goodput = Goodput::parse("ttft:150").unwrap();
        let judgments = Judgments::default()
            .goodput(&goodput)
            .good_sessions(|root| root != "b")
            .sessions_meeting_slo(|root| root == "c")
            .jobs(|root| (root == "a").then_some(1.5))
            .energy_j(900.0);
        let table = SessionTable::judged(&records, 2_000_000_000, &judgments);
        let estimate = |name: &str| table.estimate(figure(name)).unwrap();
        // Good: a0 (100 ms), a1 (40 ms), c0 (20 ms); b0 (300 ms) is not.
        assert_eq!(table.total(Column::GoodRequests), Some(3.0));
        assert_eq!(estimate("goodput"), 1.5);
        assert_eq!(estimate("good_session_fraction"), 2.0 / 3.0);
        assert_eq!(estimate("sessions_meeting_slo"), 1.0 / 3.0);
        assert_eq!(estimate("jobs_per_hour"), 1800.0);
        assert_eq!(estimate("jobs_per_hour_per_user"), 2400.0);
        assert_eq!(estimate("joules_per_output_token"), 50.0);
        assert_eq!(estimate("joules_per_total_token"), 900.0 / 3618.0);
        assert_eq!(estimate("joules_per_job"), 900.0);
        // Every registered figure is computed from a fully judged table.
        assert!(FIGURES
            .iter()
            .all(|figure| table.estimate(figure).is_some()));
    }

    #[test]
    fn a_table_of_requests_has_a_row_per_request_and_no_session_judgments() {
        let records = three_sessions();
        let judgments = Judgments::default().good_sessions(|_| true);
        let table = SessionTable::per_request(&records, 4_000_000_000, &judgments);
        assert_eq!((table.unit(), table.units()), (Unit::Request, 6));
        assert_eq!(table.total(Column::Sessions), Some(6.0));
        assert_eq!(table.total(Column::GoodSessions), None);
        let by_session = SessionTable::of(&records, 4_000_000_000);
        for name in ["ttft_p90", "request_throughput", "cache_hit"] {
            assert_eq!(
                table.estimate(figure(name)),
                by_session.estimate(figure(name))
            );
        }
        let empty = SessionTable::of(&[], 4_000_000_000);
        assert_eq!(empty.units(), 0);
        assert_eq!(empty.estimate(figure("ttft_p50")), None);
        assert_eq!(empty.estimate(figure("request_throughput")), Some(0.0));
    }
}
