//! `agentx-host merge`: parses the shard directories and the output directory, and prints what the
//! merge wrote.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::HomeArgs;

#[derive(Debug, Args)]
pub struct MergeArgs {
    /// The shard directories of one sharded run (DIR/shard-0 DIR/shard-1 ...).
    #[arg(required = true, value_name = "SHARD_DIR")]
    pub dirs: Vec<PathBuf>,
    /// The merged artifact directory (created; its files are replaced).
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,
    #[command(flatten)]
    pub home: HomeArgs,
}

pub fn main(a: MergeArgs) -> anyhow::Result<ExitCode> {
    let m = crate::run::merge::merge(&a.dirs, &a.output, &a.home.dir())?;
    outln!(
        "merged {} shards: {} records into {} in {:.2} s (clock skew between shards {:.3} ms)",
        a.dirs.len(),
        m.records,
        m.dir.display(),
        m.took.as_secs_f64(),
        m.clock_skew_ns as f64 / 1e6
    );
    if m.submission_invalid_reasons.is_empty() {
        outln!("submission valid");
    } else {
        for r in &m.submission_invalid_reasons {
            outln!("not a valid submission: {r}");
        }
    }
    for f in &m.files {
        if let Some(name) = f.file_name() {
            outln!("  {}", name.to_string_lossy());
        }
    }
    Ok(ExitCode::SUCCESS)
}
