//! What a running replay shows on stderr: a progress bar on a terminal, and every
//! `--stats-interval` the realtime block of aiperf (docs/specs/aiperf-metrics.md#realtime-block):
//! request rate, token throughput, TTFT/ITL/E2E and interactivity percentiles, ISL/OSL percentiles,
//! and a `srv` row from the scraped server metrics.
//! Without a terminal the block goes to the log and there is no bar.
//!
//! It owns no data: the replay hands it each finished profiling record (`Live::record`) and the
//! latest server row; the block is rendered from those only. The percentiles come from streaming
//! histograms (`Quantiles`: three significant digits, so a shown value is within 0.1 % of the
//! exact one), whose size depends on the range of the values and not on their number: a run of
//! hours keeps the same few hundred KiB, and a block costs the same at its end as at its start. The
//! exports compute exact percentiles from the records.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use hdrhistogram::Histogram;

use agentx_metrics::live::LiveRun;
pub use agentx_metrics::live::SrvRow;
use agentx_metrics::Outcome;
use agentx_record::{Phase, RequestRecord};

/// One figure's distribution: values scaled by `scale` to integers (times in microseconds, tokens
/// as they are, rates in thousandths) in a histogram of three significant digits.
#[derive(Debug)]
struct Quantiles {
    h: Histogram<u64>,
    scale: f64,
}

impl Quantiles {
    fn new(scale: f64) -> Quantiles {
        Quantiles {
            // Auto-resizing: the buckets cover the values seen, a few KiB per decade.
            h: Histogram::new(3).expect("3 significant digits is a valid precision"),
            scale,
        }
    }

    fn push(&mut self, value: f64) {
        if value.is_finite() && value >= 0.0 {
            let scaled = (value * self.scale).round() as u64;
            // The histogram grows to take the value; past what it can (none here) the value is
            // counted at its top instead of dropped.
            if self.h.record(scaled).is_err() {
                self.h.saturating_record(scaled);
            }
        }
    }

    /// The value at percentile `percentile` (0-100), `None` before the first value.
    fn at(&self, percentile: f64) -> Option<f64> {
        (!self.h.is_empty())
            .then(|| self.h.value_at_quantile(percentile / 100.0) as f64 / self.scale)
    }
}

#[derive(Debug)]
struct Samples {
    ttft_ms: Quantiles,
    itl_ms: Quantiles,
    e2e_ms: Quantiles,
    intvty: Quantiles,
    isl: Quantiles,
    osl: Quantiles,
    done: u64,
    ok: u64,
    err: u64,
    tokens_in: u64,
    tokens_out: u64,
    /// `done` and the elapsed time at the previous block, for the interval rate.
    last_done: u64,
    last_secs: f64,
}

impl Default for Samples {
    fn default() -> Samples {
        Samples {
            ttft_ms: Quantiles::new(1e3),
            itl_ms: Quantiles::new(1e3),
            e2e_ms: Quantiles::new(1e3),
            intvty: Quantiles::new(1e3),
            isl: Quantiles::new(1.0),
            osl: Quantiles::new(1.0),
            done: 0,
            ok: 0,
            err: 0,
            tokens_in: 0,
            tokens_out: 0,
            last_done: 0,
            last_secs: 0.0,
        }
    }
}

/// The profiling phase so far.
#[derive(Debug, Default)]
pub(crate) struct Live {
    s: Mutex<Samples>,
}

fn ms(millis: f64) -> String {
    if millis < 1.0 {
        "<1ms".to_string()
    } else if millis >= 10_000.0 {
        format!("{:.1}s", millis / 1000.0)
    } else {
        format!("{millis:.0}ms")
    }
}

fn pcts(quantiles: &Quantiles, percentiles: &[f64], fmt: impl Fn(f64) -> String) -> String {
    percentiles
        .iter()
        .map(|&p| {
            let value = quantiles.at(p).map(&fmt).unwrap_or_else(|| "-".into());
            format!("p{}={value}", p as u32)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn pct(percent: Option<f64>) -> String {
    percent
        .map(|v| format!("{v:.1}%"))
        .unwrap_or_else(|| "-".into())
}

fn num(value: Option<f64>) -> String {
    value
        .map(|v| format!("{v:.0}"))
        .unwrap_or_else(|| "-".into())
}

impl Live {
    /// Adds a finished request (warmup records are ignored).
    pub(crate) fn record(&self, record: &RequestRecord) {
        if record.phase != Phase::Profiling {
            return;
        }
        let mut stats = self.s.lock().expect("live stats lock");
        stats.done += 1;
        match Outcome::of(record) {
            Outcome::Ok => {}
            Outcome::ContextOverflow => return,
            Outcome::Failed | Outcome::Cancelled => {
                stats.err += 1;
                return;
            }
        }
        stats.ok += 1;
        stats.tokens_in += record.isl;
        stats.tokens_out += record.osl;
        if let Some(ttft_ns) = record.ttft_ns() {
            stats.ttft_ms.push(ttft_ns as f64 / 1e6);
        }
        if let Some(itl_ns) = record.itl_ns() {
            stats.itl_ms.push(itl_ns / 1e6);
            if itl_ns > 0.0 {
                stats.intvty.push(1e9 / itl_ns);
            }
        }
        if let Some(latency_ns) = record.latency_ns() {
            stats.e2e_ms.push(latency_ns as f64 / 1e6);
        }
        stats.isl.push(record.isl as f64);
        stats.osl.push(record.osl as f64);
    }

    /// The realtime block at `elapsed` into the phase.
    pub(crate) fn block(&self, elapsed: Duration, phase: &str, srv: Option<&SrvRow>) -> String {
        let mut guard = self.s.lock().expect("live stats lock");
        let stats = &mut *guard;
        let secs = elapsed.as_secs_f64().max(1e-9);
        let since_last = (secs - stats.last_secs).max(1e-9);
        let rps = (stats.done - stats.last_done) as f64 / since_last;
        stats.last_done = stats.done;
        stats.last_secs = secs;
        let total = elapsed.as_secs();
        let tok = |v: f64| format!("{v:.0}");
        let mut out = format!(
            "[realtime {:02}:{:02} {phase}] rps={rps:.2} (avg {:.2}) tput_in={:.0}/s tput_out={:.0}/s done={} ok={} err={}\n",
            total / 60,
            total % 60,
            stats.done as f64 / secs,
            stats.tokens_in as f64 / secs,
            stats.tokens_out as f64 / secs,
            stats.done,
            stats.ok,
            stats.err
        );
        let percentiles = [50.0, 75.0, 95.0, 99.0];
        out.push_str(&format!(
            "ttft {}   itl {}   e2e {}\n",
            pcts(&stats.ttft_ms, &percentiles, ms),
            pcts(&stats.itl_ms, &[50.0, 75.0, 99.0], ms),
            pcts(&stats.e2e_ms, &[50.0, 75.0, 99.0], ms)
        ));
        out.push_str(&format!(
            "intvty {} tok/s/user (percentiles of per-request 1/itl)\n",
            pcts(&stats.intvty, &[50.0, 75.0, 90.0], |v| format!("{v:.1}"))
        ));
        let quantiles = [50.0, 75.0, 90.0, 99.0];
        out.push_str(&format!(
            "isl {} (tokens)   osl {} (tokens)   tot in={} out={}",
            pcts(&stats.isl, &quantiles, tok),
            pcts(&stats.osl, &quantiles, tok),
            stats.tokens_in,
            stats.tokens_out
        ));
        if let Some(server) = srv {
            out.push_str(&format!(
                "\nsrv  prefix_cache_hit={} ext_cache_hit={} kv_usage={} queue={}r/{}w tput_in_srv={}/s tput_out_srv={}/s",
                pct(server.prefix_cache_hit),
                pct(server.ext_cache_hit),
                pct(server.kv_usage),
                num(server.running),
                num(server.waiting),
                num(server.tput_in),
                num(server.tput_out)
            ));
        }
        out
    }
}

/// A progress bar on a terminal; nothing otherwise. The stage and its progress are told to the
/// run's [`LiveRun`] too, for the views that are not the bar.
pub(crate) struct Progress {
    bar: Option<ProgressBar>,
    live: Arc<LiveRun>,
}

impl Progress {
    /// `enabled`: stderr is a terminal.
    pub(crate) fn new(enabled: bool, live: Arc<LiveRun>) -> Progress {
        let bar = enabled.then(|| {
            let progress_bar =
                ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(4));
            progress_bar.set_style(
                ProgressStyle::with_template("{spinner} {prefix:>9} [{bar:30}] {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar())
                    .progress_chars("=> "),
            );
            progress_bar.enable_steady_tick(Duration::from_millis(250));
            progress_bar
        });
        Progress { bar, live }
    }

    /// Starts a phase of `len` steps (seconds of profiling, or warmup requests).
    pub(crate) fn phase(&self, name: &str, len: u64) {
        self.live.set_stage(name, len);
        if let Some(bar) = &self.bar {
            bar.set_prefix(name.to_string());
            bar.set_length(len);
            bar.set_position(0);
        }
    }

    /// Names a stage with no length of its own (the drain, the end): the bar keeps its place.
    pub(crate) fn stage(&self, name: &str) {
        self.live.set_stage(name, 0);
    }

    /// Updates the bar: position and the counts line.
    pub(crate) fn update(&self, pos: u64, msg: String) {
        self.live.set_progress(pos, &msg);
        if let Some(bar) = &self.bar {
            bar.set_position(pos);
            bar.set_message(msg);
        }
    }

    /// Prints a block above the bar, or logs it when there is no bar.
    pub(crate) fn block(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => {
                for line in text.lines() {
                    tracing::info!("{line}");
                }
            }
        }
    }

    /// Clears the bar at the end of the replay.
    pub(crate) fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::{TokenSource, Usage};

    fn rec(ttft_ms: u64, chunks: u64, itl_ms: u64, ok: bool) -> RequestRecord {
        let send = 1_000_000;
        let first = ttft_ms * 1_000_000;
        RequestRecord {
            reply: agentx_record::ReplyStats::default(),
            request_id: "r".into(),
            correlation_id: "c".into(),
            session_num: 0,
            phase: Phase::Profiling,
            lane: 0,
            trace_id: "t".into(),
            turn: 1,
            num_turns: 3,
            recycle_pass: 0,
            intended_ns: send,
            send_ns: send,
            first_byte_ns: Some(send),
            first_token_ns: Some(send + first),
            chunk_offsets_ns: (0..chunks)
                .map(|i| first + i * itl_ms * 1_000_000)
                .collect(),
            end_ns: send + first + chunks * itl_ms * 1_000_000,
            isl: 1000,
            osl: chunks,
            token_source: TokenSource::Server,
            usage: Usage::default(),
            max_tokens: chunks as u32,
            finish_reason: None,
            cancelled: false,
            context_overflow: false,
            error: (!ok).then(|| agentx_record::RecordError {
                code: 500,
                kind: "http_error".into(),
                message: "x".into(),
            }),
            retry: None,
            server_ttft_ns: None,
            tree: None,
            server: None,
            prompt_blocks: None,
        }
    }

    #[test]
    fn block_has_every_row_and_dashes_for_missing_values() {
        let live = Live::default();
        let empty = live.block(Duration::from_secs(5), "profiling", None);
        assert!(empty.contains("ttft p50=- p75=- p95=- p99=-"), "{empty}");
        live.record(&rec(100, 11, 10, true));
        live.record(&rec(200, 11, 10, true));
        live.record(&rec(300, 11, 10, true));
        live.record(&rec(0, 0, 0, false));
        let b = live.block(
            Duration::from_secs(90),
            "profiling",
            Some(&SrvRow {
                prefix_cache_hit: Some(68.25),
                running: Some(24.0),
                waiting: Some(0.0),
                ..SrvRow::default()
            }),
        );
        assert!(b.starts_with("[realtime 01:30 profiling]"), "{b}");
        assert!(b.contains("done=4 ok=3 err=1"), "{b}");
        assert!(b.contains("ttft p50=200ms"), "{b}");
        assert!(b.contains("itl p50=10ms"), "{b}");
        assert!(b.contains("intvty p50=100.0"), "{b}");
        assert!(b.contains("isl p50=1000"), "{b}");
        assert!(
            b.contains("srv  prefix_cache_hit=68.2% ext_cache_hit=- kv_usage=- queue=24r/0w"),
            "{b}"
        );
        assert_eq!(ms(0.4), "<1ms");
    }

    #[test]
    fn streaming_percentiles_stay_within_a_thousandth_of_the_exact_ones() {
        let mut q = Quantiles::new(1e3);
        // A spread of four decades, as TTFTs from a cache hit to a long prefill.
        let mut exact: Vec<f64> = (0..200_000u64)
            .map(|i| 0.5 * 1.0001f64.powi((i * 7919 % 92_000) as i32))
            .collect();
        for &v in &exact {
            q.push(v);
        }
        exact.sort_unstable_by(f64::total_cmp);
        for p in [50.0, 90.0, 99.0, 99.9] {
            let want = exact[((p / 100.0) * exact.len() as f64).ceil() as usize - 1];
            let got = q.at(p).expect("values were pushed");
            assert!(
                (got - want).abs() <= want * 1e-3 + 1e-3,
                "p{p}: {got} against {want}"
            );
        }
        assert_eq!(q.h.len(), 200_000);
    }
}
