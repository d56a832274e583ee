//! What the dashboard shows, as plain data: the latest [`LiveSnapshot`] and server row, and the
//! history of the sparklines, one [`Sample`] per [`SAMPLE_INTERVAL`], each derived from the delta
//! between two snapshots (tokens over time, histogram sums over counts). The text of every figure is
//! made here too, so the drawing (`view`) only lays it out, and everything here is tested without a
//! terminal.

use std::collections::VecDeque;
use std::time::Duration;

use agentx_metrics::live::{Buckets, LiveSnapshot, SrvRow};
use agentx_record::Phase;

/// How many samples each sparkline keeps (two minutes at one a second).
pub const HISTORY: usize = 120;

/// The time between two samples of the sparklines.
pub const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// How many samples back the TTFT and ITL titles look for the latest interval that completed a
/// request.
pub const TITLE_WINDOW: usize = 10;

/// One interval of the sparklines: what completed between two snapshots.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// Output tokens per second of the requests completed in the interval (warmup and profiling).
    pub output_tokens_per_s: f64,
    /// Mean time to first token of the successful requests completed in the interval, seconds;
    /// `None` when none completed.
    pub ttft_s: Option<f64>,
    /// Mean of the per-request inter-token latencies completed in the interval, seconds; `None`
    /// when none completed.
    pub itl_s: Option<f64>,
}

/// The dashboard's state: updated from each snapshot, sampled every [`SAMPLE_INTERVAL`].
#[derive(Debug, Clone)]
pub struct Model {
    /// The latest snapshot (`None` before the first).
    latest: Option<LiveSnapshot>,
    /// The latest server figures (`None` without a server source, or before its first scrape).
    server: Option<SrvRow>,
    /// Whether the run has a server source at all.
    has_server: bool,
    /// The snapshot the last sample was taken at, and when.
    sampled: Option<(Duration, Counters)>,
    /// The samples, oldest first, at most [`HISTORY`].
    history: VecDeque<Sample>,
    /// Time since the dashboard started, at the latest update.
    elapsed: Duration,
}

/// The cumulative figures a sample is the delta of.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct Counters {
    output_tokens: u64,
    ttft_sum: f64,
    ttft_count: u64,
    itl_sum: f64,
    itl_count: u64,
}

impl Counters {
    fn of(snapshot: &LiveSnapshot) -> Counters {
        let mut counters = Counters::default();
        for totals in &snapshot.totals {
            counters.output_tokens += totals.output_tokens;
            counters.ttft_sum += totals.ttft_s.sum;
            counters.ttft_count += totals.ttft_s.count;
            counters.itl_sum += totals.itl_s.sum;
            counters.itl_count += totals.itl_s.count;
        }
        counters
    }
}

/// The mean of the values added between two (sum, count) readings of a histogram.
fn interval_mean(sum: f64, count: u64, before_sum: f64, before_count: u64) -> Option<f64> {
    let added = count.checked_sub(before_count).filter(|&added| added > 0)?;
    Some((sum - before_sum) / added as f64)
}

impl Sample {
    /// The interval from `before` to `now`, `seconds` long.
    fn between(before: Counters, now: Counters, seconds: f64) -> Sample {
        let tokens = now.output_tokens.saturating_sub(before.output_tokens);
        Sample {
            output_tokens_per_s: if seconds > 0.0 {
                tokens as f64 / seconds
            } else {
                0.0
            },
            ttft_s: interval_mean(
                now.ttft_sum,
                now.ttft_count,
                before.ttft_sum,
                before.ttft_count,
            ),
            itl_s: interval_mean(now.itl_sum, now.itl_count, before.itl_sum, before.itl_count),
        }
    }
}

/// The phases in the order of the snapshot's per-phase arrays.
const PHASES: [Phase; 2] = [Phase::Warmup, Phase::Profiling];

/// One phase's row of the counts table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PhaseRow {
    /// `warmup` or `profiling`.
    pub phase: &'static str,
    /// Requests sent.
    pub sent: u64,
    /// Requests in flight.
    pub in_flight: u64,
    /// Requests that ended well.
    pub ok: u64,
    /// Requests that failed.
    pub failed: u64,
    /// Requests cancelled.
    pub cancelled: u64,
    /// Context overflows.
    pub overflows: u64,
}

impl Model {
    /// A dashboard with nothing seen yet; `has_server` says whether server figures will come.
    pub fn new(has_server: bool) -> Model {
        Model {
            latest: None,
            server: None,
            has_server,
            sampled: None,
            history: VecDeque::with_capacity(HISTORY),
            elapsed: Duration::ZERO,
        }
    }

    /// Takes the snapshot and server row of the moment `elapsed` after the start. The first
    /// snapshot is the base of the first sample; after it, a sample is added each time
    /// [`SAMPLE_INTERVAL`] or more passed since the last one.
    pub fn update(&mut self, snapshot: LiveSnapshot, server: Option<SrvRow>, elapsed: Duration) {
        let counters = Counters::of(&snapshot);
        match self.sampled {
            None => self.sampled = Some((elapsed, counters)),
            Some((at, before)) => {
                let since = elapsed.saturating_sub(at);
                if since >= SAMPLE_INTERVAL {
                    if self.history.len() == HISTORY {
                        self.history.pop_front();
                    }
                    self.history
                        .push_back(Sample::between(before, counters, since.as_secs_f64()));
                    self.sampled = Some((elapsed, counters));
                }
            }
        }
        self.latest = Some(snapshot);
        self.server = server;
        self.elapsed = elapsed;
    }

    /// The samples, oldest first.
    pub fn history(&self) -> &VecDeque<Sample> {
        &self.history
    }

    /// The latest snapshot, `None` before the first.
    pub fn latest(&self) -> Option<&LiveSnapshot> {
        self.latest.as_ref()
    }

    /// Time since the dashboard started.
    pub fn elapsed(&self) -> Duration {
        self.elapsed
    }

    /// The stage's name, or `starting` before the replay named one.
    pub fn stage_name(&self) -> &str {
        match &self.latest {
            Some(snapshot) if !snapshot.stage.name.is_empty() => &snapshot.stage.name,
            _ => "starting",
        }
    }

    /// How far the stage went, 0 to 1.
    pub fn stage_ratio(&self) -> f64 {
        self.latest.as_ref().map_or(0.0, |snapshot| {
            let stage = &snapshot.stage;
            if stage.length == 0 {
                0.0
            } else {
                (stage.position as f64 / stage.length as f64).clamp(0.0, 1.0)
            }
        })
    }

    /// The stage gauge's label: `profiling 12/60  <message>` (a stage without steps, such as the
    /// drain, by its name alone).
    pub fn stage_label(&self) -> String {
        let Some(snapshot) = &self.latest else {
            return "starting".to_string();
        };
        let stage = &snapshot.stage;
        if stage.length == 0 {
            return self.stage_name().to_string();
        }
        let mut label = format!("{} {}/{}", self.stage_name(), stage.position, stage.length);
        if !stage.message.is_empty() {
            label.push_str("  ");
            label.push_str(&stage.message);
        }
        label
    }

    /// The counts of each phase, warmup first.
    pub fn phase_rows(&self) -> [PhaseRow; 2] {
        [0, 1].map(|index| {
            let phase = PHASES[index].as_str();
            let Some(snapshot) = &self.latest else {
                return PhaseRow {
                    phase,
                    ..PhaseRow::default()
                };
            };
            let totals = &snapshot.totals[index];
            PhaseRow {
                phase,
                sent: snapshot.sent[index],
                in_flight: snapshot.in_flight[index],
                ok: totals.ok,
                failed: totals.failed,
                cancelled: totals.cancelled,
                overflows: totals.context_overflows,
            }
        })
    }

    /// `(busy, lanes)`.
    pub fn lanes(&self) -> (u64, u64) {
        self.latest.as_ref().map_or((0, 0), |snapshot| {
            (snapshot.lanes_busy.min(snapshot.lanes), snapshot.lanes)
        })
    }

    /// The lanes line: `lanes 12 busy  4 idle  of 16`.
    pub fn lanes_label(&self) -> String {
        let (busy, lanes) = self.lanes();
        format!("lanes {busy} busy  {} idle  of {lanes}", lanes - busy)
    }

    /// The sessions and send lag line: `sessions 8  send lag 0.12 ms`.
    pub fn sessions_label(&self) -> String {
        let sessions = self
            .latest
            .as_ref()
            .map_or(0, |snapshot| snapshot.sessions_active);
        let lag = self.latest.as_ref().and_then(|snapshot| {
            merged_mean(snapshot.totals.iter().map(|totals| &totals.send_lag_s))
        });
        format!("sessions {sessions}  send lag {}", seconds_text(lag))
    }

    /// The server pane's lines, `-` for each figure the server did not give; one line saying so
    /// when the run has no server source.
    pub fn server_lines(&self) -> Vec<(&'static str, String)> {
        if !self.has_server {
            return vec![("no server metrics", String::new())];
        }
        let row = self.server.clone().unwrap_or_default();
        let count =
            |value: Option<f64>| value.map_or_else(|| "-".to_string(), |v| format!("{v:.0}"));
        vec![
            ("prefix cache hit", percent_text(row.prefix_cache_hit)),
            ("ext cache hit", percent_text(row.ext_cache_hit)),
            ("KV usage", percent_text(row.kv_usage)),
            (
                "running / waiting",
                format!("{} / {}", count(row.running), count(row.waiting)),
            ),
            (
                "tput in / out",
                format!("{} / {} tok/s", count(row.tput_in), count(row.tput_out)),
            ),
        ]
    }

    /// The latest errors, newest first: `12.3s profiling 500 http: boom`.
    pub fn error_lines(&self) -> Vec<String> {
        self.latest.as_ref().map_or_else(Vec::new, |snapshot| {
            snapshot
                .recent_errors
                .iter()
                .rev()
                .map(|error| {
                    let code = if error.code == 0 {
                        "-".to_string()
                    } else {
                        error.code.to_string()
                    };
                    format!(
                        "{:.1}s {} {code} {}",
                        error.end_ns as f64 / 1e9,
                        error.phase.as_str(),
                        error.message
                    )
                })
                .collect()
        })
    }

    /// The throughput sparkline's title: `output 1234 tok/s`.
    pub fn throughput_title(&self) -> String {
        let current = self.history.back().map(|sample| sample.output_tokens_per_s);
        match current {
            Some(rate) => format!("output {rate:.0} tok/s"),
            None => "output - tok/s".to_string(),
        }
    }

    /// The latest interval mean of `pick` among the last [`TITLE_WINDOW`] samples: at a low
    /// rate many seconds complete nothing, and the title keeps the last mean rather than
    /// blinking; after a longer silence it says `-`.
    fn latest_mean(&self, pick: fn(&Sample) -> Option<f64>) -> Option<f64> {
        self.history.iter().rev().take(TITLE_WINDOW).find_map(pick)
    }

    /// The TTFT sparkline's title: `TTFT 45.2 ms`, the latest interval's mean.
    pub fn ttft_title(&self) -> String {
        format!(
            "TTFT {}",
            seconds_text(self.latest_mean(|sample| sample.ttft_s))
        )
    }

    /// The ITL sparkline's title: `ITL 5.1 ms`, the latest interval's mean.
    pub fn itl_title(&self) -> String {
        format!(
            "ITL {}",
            seconds_text(self.latest_mean(|sample| sample.itl_s))
        )
    }

    /// The elapsed time as `1m23s`.
    pub fn elapsed_text(&self) -> String {
        let seconds = self.elapsed.as_secs();
        if seconds >= 3600 {
            format!(
                "{}h{:02}m{:02}s",
                seconds / 3600,
                seconds / 60 % 60,
                seconds % 60
            )
        } else {
            format!("{}m{:02}s", seconds / 60, seconds % 60)
        }
    }
}

/// The mean over several histograms at once, `None` before the first value.
fn merged_mean<'a>(histograms: impl Iterator<Item = &'a Buckets>) -> Option<f64> {
    let (sum, count) = histograms.fold((0.0, 0u64), |(sum, count), histogram| {
        (sum + histogram.sum, count + histogram.count)
    });
    (count > 0).then(|| sum / count as f64)
}

/// A duration in seconds as the unit that reads best: `850 us`, `45.2 ms`, `1.25 s`; `-` for none.
pub fn seconds_text(value: Option<f64>) -> String {
    match value {
        None => "-".to_string(),
        Some(seconds) if seconds < 1e-3 => format!("{:.0} us", seconds * 1e6),
        Some(seconds) if seconds < 1.0 => format!("{:.1} ms", seconds * 1e3),
        Some(seconds) => format!("{seconds:.2} s"),
    }
}

/// A percentage, `-` for none.
pub fn percent_text(value: Option<f64>) -> String {
    value.map_or_else(|| "-".to_string(), |percent| format!("{percent:.1} %"))
}

/// `line` without its terminal escape sequences (the log's colours) and control characters.
pub fn plain_text(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(character) = chars.next() {
        if character == '\u{1b}' {
            // CSI: ESC [ parameters... final byte in @..~; any other escape: drop ESC and the next.
            if chars.peek() == Some(&'[') {
                chars.next();
                for next in chars.by_ref() {
                    if ('@'..='~').contains(&next) {
                        break;
                    }
                }
            } else {
                chars.next();
            }
        } else if character == '\t' {
            out.push(' ');
        } else if !character.is_control() {
            out.push(character);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_metrics::live::{PhaseTotals, RecentError, StageProgress};

    /// A snapshot whose phases completed `ok` requests of `tokens` output tokens in all, with TTFT
    /// and ITL histograms holding `ttfts` and `itls`.
    fn snapshot(totals: [(u64, u64, &[f64], &[f64]); 2]) -> LiveSnapshot {
        let totals = totals.map(|(ok, tokens, ttfts, itls)| {
            let mut phase = PhaseTotals {
                ok,
                output_tokens: tokens,
                ..PhaseTotals::default()
            };
            for &value in ttfts {
                phase.ttft_s.observe(value);
            }
            for &value in itls {
                phase.itl_s.observe(value);
            }
            phase
        });
        LiveSnapshot {
            lanes: 4,
            lanes_busy: 3,
            sessions_active: 2,
            sent: [5, 7],
            in_flight: [0, 3],
            totals,
            stage: StageProgress {
                name: "profiling".to_string(),
                length: 60,
                position: 15,
                message: "12 done".to_string(),
            },
            recent_errors: Vec::new(),
        }
    }

    #[test]
    fn a_sample_is_the_delta_of_tokens_over_time_and_of_sums_over_counts() {
        let mut model = Model::new(true);
        model.update(
            snapshot([(2, 100, &[0.1, 0.3], &[0.01]), (0, 0, &[], &[])]),
            None,
            Duration::ZERO,
        );
        assert!(model.history().is_empty(), "the first snapshot is the base");
        // Half a second later: no sample yet.
        model.update(
            snapshot([(2, 100, &[0.1, 0.3], &[0.01]), (1, 50, &[0.5], &[])]),
            None,
            Duration::from_millis(500),
        );
        assert!(model.history().is_empty());
        // Two seconds after the base: 300 more tokens (warmup 100 -> 150, profiling 0 -> 250),
        // two more TTFTs (0.5 and 0.9: mean 0.7), one more ITL (0.03).
        model.update(
            snapshot([
                (3, 150, &[0.1, 0.3], &[0.01, 0.03]),
                (2, 250, &[0.5, 0.9], &[]),
            ]),
            None,
            Duration::from_secs(2),
        );
        let sample = *model.history().back().unwrap();
        assert_eq!(sample.output_tokens_per_s, 150.0);
        assert!((sample.ttft_s.unwrap() - 0.7).abs() < 1e-12);
        assert!((sample.itl_s.unwrap() - 0.03).abs() < 1e-12);
        assert_eq!(model.throughput_title(), "output 150 tok/s");
        assert_eq!(model.ttft_title(), "TTFT 700.0 ms");
        assert_eq!(model.itl_title(), "ITL 30.0 ms");
        // An interval in which nothing completed: no tokens, and no TTFT or ITL (not zero).
        model.update(
            snapshot([
                (3, 150, &[0.1, 0.3], &[0.01, 0.03]),
                (2, 250, &[0.5, 0.9], &[]),
            ]),
            None,
            Duration::from_secs(3),
        );
        let sample = *model.history().back().unwrap();
        assert_eq!(
            sample,
            Sample {
                output_tokens_per_s: 0.0,
                ttft_s: None,
                itl_s: None
            }
        );
        // The titles keep the latest mean through quiet seconds, up to TITLE_WINDOW of them.
        assert_eq!(model.ttft_title(), "TTFT 700.0 ms");
        assert_eq!(model.history().len(), 2);
        for second in 4..(2 + TITLE_WINDOW as u64) {
            model.update(
                snapshot([
                    (3, 150, &[0.1, 0.3], &[0.01, 0.03]),
                    (2, 250, &[0.5, 0.9], &[]),
                ]),
                None,
                Duration::from_secs(second),
            );
        }
        assert_eq!(model.itl_title(), "ITL 30.0 ms");
        model.update(
            snapshot([
                (3, 150, &[0.1, 0.3], &[0.01, 0.03]),
                (2, 250, &[0.5, 0.9], &[]),
            ]),
            None,
            Duration::from_secs(2 + TITLE_WINDOW as u64),
        );
        assert_eq!(
            (model.ttft_title().as_str(), model.itl_title().as_str()),
            ("TTFT -", "ITL -")
        );
    }

    #[test]
    fn the_history_keeps_the_latest_samples_only() {
        let mut model = Model::new(false);
        for second in 0..=(HISTORY as u64 + 10) {
            let tokens = second * second;
            model.update(
                snapshot([(0, 0, &[], &[]), (second, tokens, &[], &[])]),
                None,
                Duration::from_secs(second),
            );
        }
        assert_eq!(model.history().len(), HISTORY);
        // The last sample is the last second's tokens: n^2 - (n-1)^2 = 2n - 1.
        let last = HISTORY as f64 + 10.0;
        assert_eq!(
            model.history().back().unwrap().output_tokens_per_s,
            2.0 * last - 1.0
        );
        assert_eq!(
            model.history().front().unwrap().output_tokens_per_s,
            2.0 * 11.0 - 1.0
        );
    }

    #[test]
    fn counts_lanes_stage_and_errors_read_from_the_latest_snapshot() {
        let mut model = Model::new(false);
        assert_eq!(model.stage_name(), "starting");
        let mut latest = snapshot([(4, 0, &[], &[]), (9, 0, &[], &[])]);
        latest.totals[1].failed = 2;
        latest.totals[1].cancelled = 1;
        latest.totals[1].context_overflows = 3;
        latest.totals[1].send_lag_s.observe(0.000_2);
        latest.totals[0].send_lag_s.observe(0.000_4);
        latest.recent_errors = vec![
            RecentError {
                end_ns: 1_500_000_000,
                phase: Phase::Warmup,
                code: 0,
                message: "connect: refused".to_string(),
            },
            RecentError {
                end_ns: 12_340_000_000,
                phase: Phase::Profiling,
                code: 500,
                message: "http: boom".to_string(),
            },
        ];
        model.update(latest, None, Duration::from_secs(83));
        let [warmup, profiling] = model.phase_rows();
        assert_eq!((warmup.phase, warmup.sent, warmup.ok), ("warmup", 5, 4));
        assert_eq!(
            profiling,
            PhaseRow {
                phase: "profiling",
                sent: 7,
                in_flight: 3,
                ok: 9,
                failed: 2,
                cancelled: 1,
                overflows: 3
            }
        );
        assert_eq!(model.lanes_label(), "lanes 3 busy  1 idle  of 4");
        assert_eq!(model.sessions_label(), "sessions 2  send lag 300 us");
        assert_eq!(model.stage_label(), "profiling 15/60  12 done");
        assert_eq!(model.stage_ratio(), 0.25);
        assert_eq!(model.elapsed_text(), "1m23s");
        assert_eq!(
            model.error_lines(),
            [
                "12.3s profiling 500 http: boom",
                "1.5s warmup - connect: refused"
            ]
        );
        assert_eq!(model.server_lines(), [("no server metrics", String::new())]);
        // A stage without steps (the drain) is named alone, its gauge empty.
        let mut draining = snapshot([(4, 0, &[], &[]), (9, 0, &[], &[])]);
        draining.stage = StageProgress {
            name: "draining".to_string(),
            ..StageProgress::default()
        };
        model.update(draining, None, Duration::from_secs(84));
        assert_eq!(
            (model.stage_label().as_str(), model.stage_ratio()),
            ("draining", 0.0)
        );
    }

    #[test]
    fn missing_server_figures_are_dashes() {
        let mut model = Model::new(true);
        let row = SrvRow {
            prefix_cache_hit: Some(42.26),
            kv_usage: Some(7.0),
            running: Some(3.0),
            tput_out: Some(1234.4),
            ..SrvRow::default()
        };
        model.update(
            snapshot([(0, 0, &[], &[]), (0, 0, &[], &[])]),
            Some(row),
            Duration::ZERO,
        );
        let lines: Vec<String> = model
            .server_lines()
            .into_iter()
            .map(|(name, value)| format!("{name} {value}"))
            .collect();
        assert_eq!(
            lines,
            [
                "prefix cache hit 42.3 %",
                "ext cache hit -",
                "KV usage 7.0 %",
                "running / waiting 3 / -",
                "tput in / out - / 1234 tok/s"
            ]
        );
    }

    #[test]
    fn plain_text_drops_colours_and_control_characters() {
        assert_eq!(
            plain_text("\u{1b}[2m2026\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m run\tstarted\r"),
            "2026  INFO run started"
        );
        assert_eq!(seconds_text(Some(2.5)), "2.50 s");
        assert_eq!(percent_text(None), "-");
    }
}
