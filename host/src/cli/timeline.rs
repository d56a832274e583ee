//! `agentx-host timeline RUN_DIR [-o trace.json]`: a run as Chrome/Perfetto trace events
//! ([`crate::export::timeline`]), from its records, its manifest and its server-metrics journal. A run
//! from an older agentx or a killed run exports what exists and says what is missing.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;

use crate::client::scrape_journal::{read_journal, SCRAPE_JOURNAL};
use crate::export::timeline::{write_timeline, TimelineCounts, TIMELINE_FILE};
use crate::metrics::scrape_log::ScrapeLog;

/// Arguments of `agentx-host timeline`: the run's directory and where the trace goes.
#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// The run's artifact directory (it holds records.jsonl, and run_manifest.json and
    /// server_metrics_journal.jsonl when the run wrote them).
    pub dir: PathBuf,
    /// Where the trace goes; `-` for stdout [default: RUN_DIR/trace.json].
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// Writes the trace and says what it holds (and what the directory lacked).
pub fn main(args: &TimelineArgs) -> anyhow::Result<ExitCode> {
    if !args.dir.is_dir() {
        anyhow::bail!(
            "{} is not a directory: name a run's artifact directory (it holds records.jsonl)",
            args.dir.display()
        );
    }
    let journal = journal_of(&args.dir);
    let counts = match args.output.as_deref() {
        Some(path) if path == Path::new("-") => {
            write_timeline(&args.dir, journal.as_ref(), std::io::stdout().lock())?
        }
        given => {
            let path = given.map_or_else(|| args.dir.join(TIMELINE_FILE), Path::to_path_buf);
            let file = std::fs::File::create(&path)
                .with_context(|| format!("cannot create {}", path.display()))?;
            let counts = write_timeline(&args.dir, journal.as_ref(), file)
                .with_context(|| format!("writing {}", path.display()))?;
            errln!("{}: {}", path.display(), summary(&counts));
            counts
        }
    };
    for missing in &counts.missing {
        tracing::warn!("timeline: {missing}");
    }
    Ok(ExitCode::SUCCESS)
}

/// The run's server metrics as its journal holds them, when it has one that reads.
pub(crate) fn journal_of(dir: &Path) -> Option<ScrapeLog> {
    let path = dir.join(SCRAPE_JOURNAL);
    if !path.is_file() {
        return None;
    }
    match read_journal(&path) {
        Ok(log) => Some(log),
        Err(e) => {
            tracing::warn!("timeline: {e}; the trace has no server counters");
            None
        }
    }
}

/// What a written trace holds, in one line.
pub(crate) fn summary(counts: &TimelineCounts) -> String {
    format!(
        "{} requests, {} slices, {} flows, {} counter samples, {} phase edges \
         (open it at ui.perfetto.dev or chrome://tracing)",
        counts.requests, counts.slices, counts.flows, counts.counter_samples, counts.instants
    )
}
