//! `agentx-host finalize DIR`: the exports of a run whose process ended before the run did
//! (SIGKILL, the OOM killer, a job's time limit), from the manifest and records it left. The
//! recorded command line is rebuilt as `replay` rebuilds it (scenario by hash, dataset by digest,
//! seed, run id); [`crate::run::finalize()`] does the rest.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::run::{cached_dataset, print_outcome, relocate_inputs, run_config, RecordedRun};
use crate::export::manifest::MANIFEST_FILE;

/// Arguments of `agentx-host finalize`: the directory of a run that did not finish, and why it
/// ended.
#[derive(Debug, Args)]
pub struct FinalizeArgs {
    /// The artifact directory of a run that did not finish (it holds run_manifest.json and
    /// records.jsonl).
    pub(crate) dir: PathBuf,
    /// Why the run ended, recorded in the manifest, the summary and the exports [default: the
    /// run's process ended before the run finished].
    #[arg(long)]
    pub(crate) reason: Option<String>,
}

pub(crate) fn main(args: FinalizeArgs) -> anyhow::Result<ExitCode> {
    let path = args.dir.join(MANIFEST_FILE);
    if !path.is_file() {
        anyhow::bail!(
            "{} has no {MANIFEST_FILE}: not the artifact directory of a run (a run writes it before its first request)",
            args.dir.display()
        );
    }
    let (recorded, mut run_args) = RecordedRun::read(&path)?;
    let dir = std::fs::canonicalize(&args.dir).unwrap_or_else(|_| args.dir.clone());
    relocate_inputs(&mut run_args, &recorded, &dir);
    // The plan is rebuilt, nothing is sent and nothing is written but the exports in `dir`.
    run_args.output_artifact_dir = Some(dir.clone());
    run_args.dry_run = false;
    let mut cfg = run_config(&run_args, recorded.argv.clone())?;
    cached_dataset(&mut cfg, &recorded);
    let outcome = crate::run::finalize(&cfg, &dir, args.reason)?;
    print_outcome(&outcome, false)
}
