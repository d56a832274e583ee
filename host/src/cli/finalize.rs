//! `agentx-host finalize DIR`: the exports of a run whose process ended before the run did
//! (SIGKILL, the OOM killer, a job's time limit), from the manifest and records it left. The
//! recorded command line is rebuilt as `replay` rebuilds it (scenario by hash, dataset by digest,
//! seed, run id); [`crate::run::finalize`] does the rest.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::run::{cached_dataset, print_outcome, relocate_inputs, run_config, RecordedRun};
use crate::export::manifest::MANIFEST_FILE;

#[derive(Debug, Args)]
pub struct FinalizeArgs {
    /// The artifact directory of a run that did not finish (it holds run_manifest.json and
    /// records.jsonl).
    pub dir: PathBuf,
    /// Why the run ended, recorded in the manifest, the summary and the exports [default: the
    /// run's process ended before the run finished].
    #[arg(long)]
    pub reason: Option<String>,
}

pub fn main(a: FinalizeArgs) -> anyhow::Result<ExitCode> {
    let path = a.dir.join(MANIFEST_FILE);
    if !path.is_file() {
        anyhow::bail!(
            "{} has no {MANIFEST_FILE}: not the artifact directory of a run (a run writes it before its first request)",
            a.dir.display()
        );
    }
    let (recorded, mut ra) = RecordedRun::read(&path)?;
    let dir = std::fs::canonicalize(&a.dir).unwrap_or_else(|_| a.dir.clone());
    relocate_inputs(&mut ra, &recorded, &dir);
    // The plan is rebuilt, nothing is sent and nothing is written but the exports in `dir`.
    ra.output_artifact_dir = Some(dir.clone());
    ra.dry_run = false;
    let mut cfg = run_config(&ra, recorded.argv.clone())?;
    cached_dataset(&mut cfg, &recorded);
    let out = crate::run::finalize(&cfg, &dir, a.reason)?;
    print_outcome(&out, false)
}
