//! `agentx-host compare A B`: parses the two directories and the options, prints a line per
//! figure (or the JSON) and where the comparison was written. The work is
//! [`crate::run::compare`]'s.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;

use crate::metrics::precision::Level;

/// Arguments of `agentx-host compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Run A: a run's, a `--trials` point's or a sweep's --output-artifact-dir.
    #[arg(value_name = "A")]
    pub(crate) a: PathBuf,
    /// Run B, of the same kind as A; each figure is compared as B / A.
    #[arg(value_name = "B")]
    pub(crate) b: PathBuf,
    /// The level the verdicts hold at together: each figure's interval is at
    /// 1 − (1 − LEVEL)/k over the k figures compared (Bonferroni) [default: A's --confidence,
    /// else 0.95].
    #[arg(long, visible_alias = "confidence-level", value_name = "LEVEL", value_parser = confidence_level)]
    pub(crate) confidence: Option<Level>,
    /// Where compare.json and compare.html go (with two sweeps, also their overlaid views,
    /// sweep_compare.*) [default: a fresh artifacts/compare-<UTC time>-<id>].
    #[arg(short = 'o', long, alias = "artifact-dir", value_name = "DIR")]
    pub(crate) output_artifact_dir: Option<PathBuf>,
    /// Print compare.json instead of a line per figure.
    #[arg(long)]
    pub(crate) json: bool,
}

/// `--confidence`: a level in (0, 1).
fn confidence_level(text: &str) -> Result<Level, String> {
    let level: f64 = text
        .trim()
        .parse()
        .map_err(|_| format!("{text:?} is not a number; give a level in (0, 1), e.g. 0.95"))?;
    Level::new(level)
}

/// Runs `agentx-host compare`: a line per figure ("ttft_p90: B faster by 12 % (9 %-15 %)"), or
/// the JSON with `--json`, then the files written.
pub(crate) fn main(args: &CompareArgs) -> anyhow::Result<ExitCode> {
    let report = crate::run::compare::compare(&args.a, &args.b, args.confidence)?;
    let out = args.output_artifact_dir.clone().unwrap_or_else(|| {
        let id = format!("{:016x}", rand::RngExt::random::<u64>(&mut rand::rng()));
        crate::run::artifact_dir::OutputDir::default().resolve("compare", &id, false)
    });
    let mut written = write(&report, &out)?;
    if report.kind == crate::export::compare::Kind::Sweep {
        // Two sweeps are also drawn overlaid, as `sweep --compare` draws them.
        written.extend(crate::export::sweep_views::write_compare(
            &args.a, &args.b, &out,
        )?);
    }
    if args.json {
        out!("{}", report.to_json_pretty());
    } else {
        for line in report.lines() {
            outln!("{line}");
        }
        for note in &report.notes {
            outln!("note: {note}");
        }
    }
    errln!("compare       {}", out.display());
    for file in &written {
        if let Some(name) = file.file_name() {
            errln!("  {}", name.to_string_lossy());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Writes the comparison's files into `out`.
pub(crate) fn write(
    report: &crate::export::compare::CompareReport,
    out: &Path,
) -> anyhow::Result<Vec<PathBuf>> {
    report.write(out).map_err(|e| {
        anyhow::anyhow!(
            "cannot write the comparison into {}: {e}; pass another -o/--output-artifact-dir",
            out.display()
        )
    })
}
