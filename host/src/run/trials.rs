//! `run --trials N`: the same point run N times, each a complete run in `trial_<i>/` with the seed
//! plus `i` (or the one seed with `--same-seed`, so the trials differ by the server only), then
//! `trials.json`: each headline figure's spread between the trials and the Student-t interval of
//! its mean, and the session bootstrap over every trial's sessions pooled. An interrupt stops after
//! the current trial; the finished ones stay and are summarised.

use std::path::{Path, PathBuf};

use anyhow::Context;

use super::config::RunConfig;
use super::{draw_seed, execute, Cancel, RunOutcome};
use crate::export::trials::{Trial, TrialsSummary, SCHEMA};
use crate::metrics::precision::{self, Level};
use crate::scenario::types::Value;
use crate::scenario::ReplaySetting;

/// What `--trials` asks.
#[derive(Debug, Clone, Copy)]
pub struct TrialsConfig {
    /// How many trials.
    pub count: u32,
    /// Every trial with the base seed.
    pub same_seed: bool,
}

/// The trials' outcome: where they are, what they made, and each trial's own outcome.
pub struct TrialsOutcome {
    /// The trials' directory (`trials.json` and `trial_<i>/`).
    pub dir: PathBuf,
    /// What `trials.json` holds.
    pub summary: TrialsSummary,
    /// 0 when every trial completed (and was valid as asked), else the first other code.
    pub code: u8,
}

/// Runs the trials of `base` into `dir`.
pub fn run_trials(
    base: &RunConfig,
    trials: TrialsConfig,
    dir: &Path,
    cancel: &Cancel,
) -> anyhow::Result<TrialsOutcome> {
    let root = crate::fsio::Root::create(dir)
        .with_context(|| format!("cannot create the trials' directory {}", dir.display()))?;
    let base_seed = super::sweep::given_seed(base).unwrap_or_else(draw_seed);
    let mut rows = Vec::new();
    let mut code = 0u8;
    for index in 0..trials.count {
        if cancel.interrupts() > 0 {
            tracing::warn!(
                "interrupted: trials {index} to {} not run",
                trials.count - 1
            );
            code = code.max(1);
            break;
        }
        let seed = if trials.same_seed {
            base_seed
        } else {
            base_seed.wrapping_add(u64::from(index))
        };
        let rel = format!("trial_{index}");
        tracing::info!(
            "trial {index} of {} (seed {seed}) into {}",
            trials.count,
            dir.join(&rel).display()
        );
        let run = trial_config(base, &dir.join(&rel), seed);
        let row = match execute(&run, cancel) {
            Ok(outcome) => trial_row(index, seed, rel, &outcome),
            Err(e) => Trial {
                index,
                seed,
                dir: rel,
                stop: None,
                code: 2,
                error: Some(format!("{e:#}")),
            },
        };
        if code == 0 {
            code = row.code;
        }
        rows.push(row);
    }
    let summary = summarise(base, dir, rows, trials.same_seed)?;
    summary.write(&root).with_context(|| {
        format!(
            "cannot write {}",
            dir.join(crate::export::trials::TRIALS_JSON).display()
        )
    })?;
    Ok(TrialsOutcome {
        dir: dir.to_owned(),
        summary,
        code,
    })
}

/// Trial `dir`'s run: the base run with its own directory, seed and run id, and a command line
/// that replays it alone.
fn trial_config(base: &RunConfig, dir: &Path, seed: u64) -> RunConfig {
    let mut run = base.clone();
    crate::scenario::set_explicit(
        &mut run.plan.settings,
        ReplaySetting::RandomSeed,
        Value::Integer(seed as i64),
    );
    run.output = super::artifact_dir::OutputDir::Given(dir.to_owned());
    run.run_id = None;
    run.argv = trial_argv(&base.argv, dir, seed);
    run
}

/// The `run` command line of one trial: the trials' own without `--trials`, `--same-seed`, the
/// directory and the seed, then the trial's directory and seed.
fn trial_argv(argv: &[String], dir: &Path, seed: u64) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = argv.iter().peekable();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value)),
            _ => (arg.as_str(), None),
        };
        match flag {
            "--same-seed" => {}
            "--trials"
            | "--num-profile-runs"
            | "--output-artifact-dir"
            | "--artifact-dir"
            | "--random-seed" => {
                if inline.is_none() {
                    args.next();
                }
            }
            _ => out.push(arg.clone()),
        }
    }
    out.extend([
        "--output-artifact-dir".to_string(),
        dir.display().to_string(),
        "--random-seed".to_string(),
        seed.to_string(),
    ]);
    out
}

fn trial_row(index: u32, seed: u64, dir: String, outcome: &RunOutcome) -> Trial {
    Trial {
        index,
        seed,
        dir,
        stop: outcome
            .replay
            .as_ref()
            .map(|replay| replay.stop.as_str().to_string()),
        code: outcome.code,
        error: None,
    }
}

/// A completed trial's figures' estimates, from its `run_summary.json`.
fn trial_estimates(dir: &Path) -> anyhow::Result<std::collections::BTreeMap<String, f64>> {
    let summary = crate::export::run_summary::RunSummary::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("{}: {e}", dir.display()))?;
    Ok(summary
        .summary
        .intervals
        .as_ref()
        .map(|intervals| {
            intervals
                .figures
                .iter()
                .map(|(name, interval)| (name.clone(), interval.estimate))
                .collect()
        })
        .unwrap_or_default())
}

/// `trials.json` of the trials run: the spread of each figure over the completed trials and the
/// pooled intervals (their sessions together over the sum of their windows, so a rate is the
/// trials' mean rate, judged as `compare` judges pooled runs).
fn summarise(
    base: &RunConfig,
    dir: &Path,
    trials: Vec<Trial>,
    same_seed: bool,
) -> anyhow::Result<TrialsSummary> {
    let level: Level = base.confidence;
    let mut finished = Vec::new();
    let mut estimates = Vec::new();
    for trial in trials.iter().filter(|t| t.stop.is_some()) {
        let trial_dir = dir.join(&trial.dir);
        match trial_estimates(&trial_dir) {
            Ok(read) => {
                estimates.push(read);
                finished.push(trial_dir);
            }
            Err(e) => tracing::warn!("trial {} is left out of the summary: {e:#}", trial.index),
        }
    }
    let mut between = std::collections::BTreeMap::new();
    for figure in &precision::FIGURES {
        let values: Vec<f64> = estimates
            .iter()
            .filter_map(|trial| trial.get(figure.name).copied())
            .collect();
        if let Some(spread) = precision::between_trials(&values, level) {
            between.insert(figure.name.to_string(), spread);
        }
    }
    let pooled = match finished.is_empty() {
        true => None,
        false => match super::compare::pooled_table(&finished) {
            Ok(table) => {
                let seed = trials.first().map_or(0, |t| t.seed);
                Some(precision::bootstrap(
                    &table,
                    &precision::FIGURES,
                    level,
                    None,
                    seed,
                ))
            }
            Err(e) => {
                tracing::warn!("the trials' pooled intervals are left out: {e:#}");
                None
            }
        },
    };
    Ok(TrialsSummary {
        schema: SCHEMA.to_string(),
        same_seed,
        level: level.get(),
        trials,
        between,
        pooled,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trials_command_line_names_its_own_directory_and_seed() {
        let argv: Vec<String> = [
            "run",
            "--trials",
            "3",
            "--same-seed",
            "--random-seed=7",
            "--output-artifact-dir",
            "out",
            "--concurrency",
            "2",
        ]
        .map(String::from)
        .to_vec();
        let got = trial_argv(&argv, Path::new("out/trial_1"), 8);
        assert_eq!(
            got,
            [
                "run",
                "--concurrency",
                "2",
                "--output-artifact-dir",
                "out/trial_1",
                "--random-seed",
                "8"
            ]
        );
    }
}
