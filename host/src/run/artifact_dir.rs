//! Where a run writes, and the guard that keeps an earlier run's files.
//!
//! Without `--output-artifact-dir` every run gets a directory of its own,
//! `artifacts/<scenario>-<UTC time>-<run id>`, and `artifacts/latest` is pointed at it once the run
//! starts writing: runs never overwrite each other. A directory the user names is used as given, but
//! one that already holds a run's artifacts is refused unless `--overwrite`, which removes that
//! run's files first (so no stale summary, export or page is left beside the new run's).
//!
//! The directory is touched only when everything that can fail before a request is sent (scenario,
//! settings, dataset, plan, simulator, pre-flight) has passed: a failed start leaves an earlier run
//! byte-identical.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};

use crate::fsio::Root;

/// The parent of the per-run default directories.
pub const DEFAULT_PARENT: &str = "artifacts";
pub use crate::fsio::LATEST_LINK;

/// The files a run writes at the top of its directory (and `report`/`plot` add): a directory that
/// holds one of the first three holds a run; `--overwrite` removes all of them.
pub const RUN_FILES: &[&str] = &[
    crate::run::MANIFEST_FILE,
    crate::record::RECORDS_FILE,
    crate::export::bmk::RUN_SUMMARY,
    crate::export::aiperf::PROFILE_EXPORT_JSONL,
    crate::export::aiperf::PROFILE_EXPORT_JSON,
    crate::export::aiperf::PROFILE_EXPORT_CSV,
    crate::export::aiperf::TIMESLICES_JSON,
    crate::export::aiperf::TIMESLICES_CSV,
    crate::export::server_metrics::JSON_FILE,
    crate::export::server_metrics::CSV_FILE,
    crate::client::scrape_journal::SCRAPE_JOURNAL,
    crate::client::scrape_journal::GPU_TELEMETRY_JOURNAL,
    crate::export::plot::PLOT_FILE,
    crate::export::html::HTML_FILE,
];

/// Where a run's artifacts go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputDir {
    /// `--output-artifact-dir DIR`: exactly this directory.
    Given(PathBuf),
    /// No flag: a fresh directory under `parent`, and `parent/latest` pointing at it.
    Fresh {
        /// The directory the fresh one goes under (`artifacts/` by default).
        parent: PathBuf,
    },
}

impl Default for OutputDir {
    fn default() -> Self {
        OutputDir::Fresh {
            parent: PathBuf::from(DEFAULT_PARENT),
        }
    }
}

impl OutputDir {
    /// The flag's value, or the per-run default.
    pub fn from_flag(dir: Option<PathBuf>) -> OutputDir {
        dir.map_or_else(OutputDir::default, OutputDir::Given)
    }

    /// Refuses a named directory that holds another run, unless `overwrite`. Cheap: called before
    /// the scenario and dataset load, and again just before the directory is written.
    /// `sub` is a shard's subdirectory.
    pub fn check(&self, sub: Option<&str>, overwrite: bool) -> anyhow::Result<()> {
        match (self, sub) {
            (OutputDir::Given(d), None) => check_dir(d, overwrite),
            (OutputDir::Given(d), Some(s)) => check_dir(&d.join(s), overwrite),
            (OutputDir::Fresh { .. }, _) => Ok(()),
        }
    }

    /// The directory of this run: the named one, or `<parent>/<scenario>-<UTC time>-<run id>`
    /// (`<scenario>-<run id>` in a sharded run, whose shards must agree on it without a clock).
    pub fn resolve(&self, scenario: &str, run_id: &str, sharded: bool) -> PathBuf {
        match self {
            OutputDir::Given(d) => d.clone(),
            OutputDir::Fresh { parent } => {
                let id = &run_id[..run_id.len().min(8)];
                let name = if sharded {
                    format!("{}-{id}", safe_name(scenario))
                } else {
                    let at = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
                    format!("{}-{at}-{id}", safe_name(scenario))
                };
                parent.join(name)
            }
        }
    }

    /// The parent whose `latest` link names this run, for a fresh directory.
    pub fn latest_parent(&self) -> Option<&Path> {
        match self {
            OutputDir::Fresh { parent } => Some(parent),
            OutputDir::Given(_) => None,
        }
    }
}

/// A scenario name as a directory name: letters, digits, `.`, `_` and `-`; anything else a `_`.
fn safe_name(name: &str) -> String {
    let n: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if n.is_empty() || n.starts_with('.') {
        format!("run{n}")
    } else {
        n
    }
}

/// The run artifact `dir` holds (a manifest, records or a summary), if any.
pub fn holds_run(dir: &Path) -> Option<&'static str> {
    RUN_FILES[..3]
        .iter()
        .copied()
        .find(|f| dir.join(f).symlink_metadata().is_ok())
}

fn check_dir(dir: &Path, overwrite: bool) -> anyhow::Result<()> {
    if dir.exists() && !dir.is_dir() {
        bail!(
            "--output-artifact-dir {} is a file, not a directory; name a directory",
            dir.display()
        );
    }
    if let (Some(f), false) = (holds_run(dir), overwrite) {
        bail!(
            "--output-artifact-dir {} holds another run ({f}); pass --overwrite to replace it, name \
             another directory, or leave the flag out for a fresh artifacts/<scenario>-<time>-<id>",
            dir.display()
        );
    }
    Ok(())
}

/// Opens the directory `dir` of a run (`run_dir`, or a shard's subdirectory of it) for writing:
/// checks it again, removes an earlier run's files under `overwrite`, creates it, and points
/// `latest` at a fresh `run_dir`.
pub fn open(out: &OutputDir, run_dir: &Path, dir: &Path, overwrite: bool) -> anyhow::Result<Root> {
    check_dir(dir, overwrite)?;
    let art = Root::create(dir).with_context(|| {
        format!(
            "cannot create the artifact directory {} (--output-artifact-dir)",
            dir.display()
        )
    })?;
    if overwrite && holds_run(dir).is_some() {
        for f in RUN_FILES {
            art.remove_file_if_present(f)
                .with_context(|| format!("--overwrite: cannot remove {}", dir.join(f).display()))?;
        }
        tracing::info!(
            "--overwrite: removed the earlier run's files in {}",
            dir.display()
        );
    }
    if let (Some(parent), Some(name)) = (out.latest_parent(), run_dir.file_name()) {
        link_latest(parent, name.as_ref());
    }
    Ok(art)
}

/// Points `<parent>/latest` at `name`; a failure costs only the link, never the run.
pub fn link_latest(parent: &Path, name: &Path) {
    #[cfg(unix)]
    {
        let r = Root::open(parent).and_then(|p| p.replace_symlink(name, LATEST_LINK));
        if let Err(e) = r {
            tracing::warn!(
                "cannot point {} at {}: {e}",
                parent.join(LATEST_LINK).display(),
                name.display()
            );
        }
    }
    #[cfg(not(unix))]
    let _ = (parent, name);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fresh_names_are_safe_and_carry_the_run_id() {
        let out = OutputDir::default();
        let d = out.resolve("agentx v1/../x", "0123456789abcdef", false);
        let name = d.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.starts_with("agentx_v1_.._x-"), "{name}");
        assert!(name.ends_with("-01234567"), "{name}");
        assert_eq!(d.parent().unwrap(), Path::new("artifacts"));
        assert_eq!(
            out.resolve("agentx-v1", "abc", true),
            Path::new("artifacts/agentx-v1-abc")
        );
        assert_eq!(safe_name(".hidden"), "run.hidden");
    }

    #[test]
    fn a_named_directory_with_a_run_is_refused_without_overwrite() {
        let t = tempfile::tempdir().unwrap();
        let out = OutputDir::Given(t.path().to_owned());
        out.check(None, false).unwrap();
        std::fs::write(t.path().join(crate::record::RECORDS_FILE), b"").unwrap();
        let e = out.check(None, false).unwrap_err().to_string();
        assert!(
            e.contains("--overwrite") && e.contains("records.jsonl"),
            "{e}"
        );
        out.check(None, true).unwrap();
        out.check(Some("shard-0"), false).unwrap();
    }

    #[test]
    fn readers_find_the_latest_run_or_list_the_candidates() {
        let find = |d: &Path| crate::export::bmk::locate_file(d, crate::run::MANIFEST_FILE);
        let t = tempfile::tempdir().unwrap();
        for r in ["a", "b"] {
            std::fs::create_dir(t.path().join(r)).unwrap();
            std::fs::write(t.path().join(r).join(crate::run::MANIFEST_FILE), b"{}").unwrap();
        }
        let e = find(t.path()).unwrap_err().to_string();
        assert!(
            e.contains("holds several runs") && e.contains("/a") && e.contains("/b"),
            "{e}"
        );
        link_latest(t.path(), Path::new("b"));
        assert_eq!(find(t.path()).unwrap(), t.path().join(LATEST_LINK));
        link_latest(t.path(), Path::new("a"));
        let l = std::fs::read_link(t.path().join(LATEST_LINK)).unwrap();
        assert_eq!(l, Path::new("a"));
    }
}
