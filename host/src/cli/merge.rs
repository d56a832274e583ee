//! `agentx-host merge`: parses the shard directories and the output directory, and prints what the
//! merge wrote.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::HomeArgs;

/// Arguments of `agentx-host merge`: the shard directories of one run and the directory they merge
/// into.
#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shard directories of one sharded run (DIR/shard-0 DIR/shard-1 ...).
    #[arg(required = true, value_name = "SHARD_DIR")]
    pub(crate) dirs: Vec<PathBuf>,
    /// The merged artifact directory (created; its files are replaced).
    #[arg(short, long, value_name = "DIR")]
    pub(crate) output: PathBuf,
    #[command(flatten)]
    pub(crate) home: HomeArgs,
}

/// Runs `agentx-host merge` and prints what the merge wrote: the record count, the clock skew
/// between shards, the submission's validity and the files.
pub(crate) fn main(args: &MergeArgs) -> anyhow::Result<ExitCode> {
    let merged = crate::run::merge::merge(&args.dirs, &args.output, &args.home.dir())?;
    outln!(
        "merged {} shards: {} records into {} in {:.2} s (clock skew between shards {:.3} ms)",
        args.dirs.len(),
        merged.records,
        merged.dir.display(),
        merged.took.as_secs_f64(),
        merged.clock_skew_ns as f64 / 1e6
    );
    if merged.submission_invalid_reasons.is_empty() {
        outln!("submission valid");
    } else {
        for reason in &merged.submission_invalid_reasons {
            outln!("not a valid submission: {reason}");
        }
    }
    for file in &merged.files {
        if let Some(name) = file.file_name() {
            outln!("  {}", name.to_string_lossy());
        }
    }
    Ok(ExitCode::SUCCESS)
}
