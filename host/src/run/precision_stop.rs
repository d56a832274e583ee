//! `--target-precision`: while profiling runs, the profiling records so far (fed by the record
//! sink's watcher) are bootstrapped every few seconds after `--min-duration`, with the run's
//! judgments (`precision::run_table`), and once every target figure's interval is within its
//! percentage of the estimate the replay is told to stop (`StopReason::PrecisionReached`): it
//! stops sending and drains like a completed run. The final intervals in `run_summary.json` are
//! the full bootstrap over every record, so they may differ slightly from the check's.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::config::{RunConfig, TargetPrecision};
use crate::metrics::precision;
use crate::record::{Phase, RecordWatcher, RequestRecord};

/// Replicates of each check (the run's own intervals take the full count).
const CHECK_RESAMPLES: usize = 200;

/// The profiling records so far, for the checks.
#[derive(Clone, Default)]
pub(super) struct PrecisionWatch {
    records: Arc<Mutex<Vec<RequestRecord>>>,
}

impl PrecisionWatch {
    /// The record sink's watcher that keeps every profiling record.
    pub(super) fn watcher(&self) -> RecordWatcher {
        let records = self.records.clone();
        Box::new(move |record: &RequestRecord| {
            if record.phase == Phase::Profiling {
                if let Ok(mut kept) = records.lock() {
                    kept.push(record.clone());
                }
            }
        })
    }

    /// Starts the checks on the run's runtime; the receiver is the replay's early stop.
    pub(super) fn start(
        &self,
        cfg: &RunConfig,
        clock: crate::record::Clock,
        seed: u64,
        runtime: &tokio::runtime::Runtime,
    ) -> watch::Receiver<Option<String>> {
        let (tx, rx) = watch::channel(None);
        let check = Check {
            records: self.records.clone(),
            targets: cfg.target_precision.clone(),
            min_duration: cfg.min_duration,
            level: cfg.confidence,
            goodput: cfg.goodput.clone().map(|g| (g, cfg.session_goodput_share)),
            session_slo: cfg.session_slo.clone(),
            seed,
            clock,
        };
        let every = (cfg.min_duration / 5).clamp(Duration::from_secs(1), Duration::from_secs(10));
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                if tx.is_closed() {
                    return;
                }
                if let Some(line) = check.reached() {
                    tracing::info!("{line}");
                    let _ = tx.send(Some(line));
                    return;
                }
            }
        });
        rx
    }
}

/// What one check needs.
struct Check {
    records: Arc<Mutex<Vec<RequestRecord>>>,
    targets: Vec<TargetPrecision>,
    min_duration: Duration,
    level: precision::Level,
    goodput: Option<(crate::metrics::goodput::Goodput, f64)>,
    session_slo: Option<crate::metrics::sessions::SessionSlo>,
    seed: u64,
    clock: crate::record::Clock,
}

impl Check {
    /// The line that says every target is met, once profiling ran `min_duration` and they are.
    fn reached(&self) -> Option<String> {
        let records = self.records.lock().ok()?.clone();
        let first = records.iter().map(|r| r.intended_ns).min()?;
        let elapsed = self.clock.now_ns().saturating_sub(first);
        if elapsed < self.min_duration.as_nanos() as u64 {
            return None;
        }
        let (recorded, shapes) = Default::default();
        let judged = precision::RunJudgments {
            goodput: self.goodput.as_ref().map(|(g, share)| (g, *share)),
            session_slo: self.session_slo.as_ref(),
            recorded: &recorded,
            shapes: &shapes,
            energy_j: None,
        };
        let table = precision::run_table(&records, elapsed, &judged);
        let figures: Vec<precision::Figure> = self.targets.iter().map(|t| *t.figure).collect();
        let intervals = precision::bootstrap(
            &table,
            &figures,
            self.level,
            Some(CHECK_RESAMPLES),
            self.seed,
        );
        let mut met = Vec::new();
        for target in &self.targets {
            let interval = intervals.figures.get(target.figure.name)?;
            let half_width = (interval.hi - interval.lo) / 2.0;
            let percent = 100.0 * half_width / interval.estimate.abs();
            // A NaN (an estimate of 0) is not met either.
            if percent.is_nan() || percent > target.percent {
                return None;
            }
            met.push(format!(
                "{} {:.4} ± {percent:.2} % (target {} %)",
                target.figure.name, interval.estimate, target.percent
            ));
        }
        Some(format!(
            "--target-precision reached after {:.1} s of profiling over {} sessions: {}",
            elapsed as f64 / 1e9,
            intervals.sessions,
            met.join(", ")
        ))
    }
}
