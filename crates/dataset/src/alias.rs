//! Named public corpora and their offline resolution from a Hugging Face hub cache.
//!
//! [`ALIASES`] is the one table of names: loading, stats and reports all read corpus names and their
//! facts (hub repository, traces file, published trace count, whether the InferenceX AgentX scenario
//! accepts the name) from here. The names and repositories are aiperf's `--public-dataset` entries
//! (aiperf 0.13.0.dev20261023, `plugin/plugins.yaml`, the `semianalysis_cc_traces_weka*` loaders): every
//! one is a `semianalysisai/` dataset repository whose `train` split is one `traces.jsonl` at the root of
//! the repository, one trace per line, which is what the weka importer reads.
//!
//! Resolution never touches the network (the cache layout is [`super::hub`]'s); a corpus missing from
//! the cache is an error that names the exact command that fetches it. Besides the table, any dataset
//! repository id (`org/name`, aiperf's `--hf-weka-dataset`) resolves the same way (`resolve_repo`).

use std::path::PathBuf;

use super::error::DatasetError;
use super::hub::{self, RepoKind};

/// The traces file every `semianalysisai/cc-traces-weka*` repository publishes (its `train` split).
pub const TRACES_FILE: &str = "traces.jsonl";

/// The current default corpus of the InferenceX AgentX benchmark (full context).
#[cfg(test)]
const DEFAULT: &str = "semianalysis_cc_traces_weka_062126";

/// The only repository the scenario accepts through aiperf's generic `weka_hf` loader
/// (`--hf-weka-dataset`).
#[cfg(test)]
const SCENARIO_HF_REPO: &str = "semianalysisai/cc-traces-weka-062126";

/// A public corpus name and where it lives on the Hugging Face hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alias {
    /// The name users pass (aiperf's `--public-dataset` spelling).
    pub name: &'static str,
    /// The hub dataset repository, `org/name`.
    pub repo: &'static str,
    /// The file inside a snapshot that holds the traces.
    pub file: &'static str,
    /// The number of traces the corpus is published with (a different count means another revision or
    /// a partial download).
    pub traces: u32,
    /// Whether aiperf's `inferencex-agentx-mvp` scenario accepts this name (`require_loader`). The
    /// importer accepts every name either way, as aiperf's loader does.
    pub scenario: bool,
    /// `Some(n)` for the `_256k` corpora: requests with `in + out > n` were dropped at the source
    /// (surviving requests keep their relative timestamps).
    pub(crate) capped_at: Option<u32>,
}

const fn row(
    name: &'static str,
    repo: &'static str,
    traces: u32,
    scenario: bool,
    capped_at: Option<u32>,
) -> Alias {
    Alias {
        name,
        repo,
        file: TRACES_FILE,
        traces,
        scenario,
        capped_at,
    }
}

/// Every known corpus name. Names sharing a repository are listed dated name first, so a lookup by
/// repository finds the date-pinned name: the rolling `…_with_subagents` pair follows the current default
/// (`062126`). `semianalysis_cc_traces_weka` and `…_no_subagents` are the 98-trace no-subagents corpus,
/// which the scenario no longer accepts.
pub const ALIASES: &[Alias] = &[
    row(
        "semianalysis_cc_traces_weka_062126",
        "semianalysisai/cc-traces-weka-062126",
        393,
        true,
        None,
    ),
    row(
        "semianalysis_cc_traces_weka_062126_256k",
        "semianalysisai/cc-traces-weka-062126-256k",
        393,
        true,
        Some(256_000),
    ),
    row(
        "semianalysis_cc_traces_weka_with_subagents",
        "semianalysisai/cc-traces-weka-062126",
        393,
        true,
        None,
    ),
    row(
        "semianalysis_cc_traces_weka_with_subagents_256k",
        "semianalysisai/cc-traces-weka-062126-256k",
        393,
        true,
        Some(256_000),
    ),
    row(
        "semianalysis_cc_traces_weka_061526",
        "semianalysisai/cc-traces-weka-061526",
        233,
        true,
        None,
    ),
    row(
        "semianalysis_cc_traces_weka_061526_256k",
        "semianalysisai/cc-traces-weka-061526-256k",
        232,
        true,
        Some(256_000),
    ),
    row(
        "semianalysis_cc_traces_weka_061326",
        "semianalysisai/cc-traces-weka-061326",
        183,
        true,
        None,
    ),
    row(
        "semianalysis_cc_traces_weka_061326_256k",
        "semianalysisai/cc-traces-weka-061326-256k",
        183,
        true,
        Some(256_000),
    ),
    row(
        "semianalysis_cc_traces_weka_with_subagents_060826",
        "semianalysisai/cc-traces-weka-with-subagents-060826",
        391,
        true,
        None,
    ),
    row(
        "semianalysis_cc_traces_weka_with_subagents_060826_256k",
        "semianalysisai/cc-traces-weka-with-subagents-060826-256k",
        391,
        true,
        Some(256_000),
    ),
    row(
        "semianalysis_cc_traces_weka_with_subagents_060526",
        "semianalysisai/cc-traces-weka-with-subagents-060526",
        336,
        true,
        None,
    ),
    row(
        "semianalysis_cc_traces_weka_with_subagents_060526_256k",
        "semianalysisai/cc-traces-weka-with-subagents-060526-256k",
        336,
        true,
        Some(256_000),
    ),
    row(
        "semianalysis_cc_traces_weka_with_subagents_060226",
        "semianalysisai/cc-traces-weka-with-subagents-060226",
        225,
        true,
        None,
    ),
    row(
        "semianalysis_cc_traces_weka_with_subagents_060226_256k",
        "semianalysisai/cc-traces-weka-with-subagents-060226-256k",
        225,
        true,
        Some(256_000),
    ),
    row(
        "semianalysis_cc_traces_weka",
        "semianalysisai/cc-traces-weka-no-subagents-051826",
        98,
        false,
        None,
    ),
    row(
        "semianalysis_cc_traces_weka_no_subagents",
        "semianalysisai/cc-traces-weka-no-subagents-051826",
        98,
        false,
        None,
    ),
];

/// Looks up a corpus by alias name or by its `org/name` repository (the first name of that repository).
pub fn lookup(spec: &str) -> Option<&'static Alias> {
    ALIASES
        .iter()
        .find(|a| a.name == spec)
        .or_else(|| ALIASES.iter().find(|a| a.repo == spec))
}

/// Comma-separated alias names, for messages.
pub fn known_names() -> String {
    ALIASES
        .iter()
        .map(|a| a.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Hub cache directories in precedence order (see [`hub::hub_dirs`]).
pub fn hub_dirs() -> Vec<PathBuf> {
    hub::hub_dirs()
}

/// The command that fetches `repo` into the hub cache (the current `hf` client's spelling).
pub fn download_command(repo: &str) -> String {
    format!("hf download {repo} --repo-type dataset")
}

/// Resolves `alias` to its traces file in the first hub cache that has it.
pub fn resolve(alias: &Alias) -> Result<PathBuf, DatasetError> {
    resolve_in(&hub::hub_dirs(), alias.name, alias.repo, alias.file)
}

/// Resolves any dataset repository (`org/name`, e.g. a newly published `semianalysisai/cc-traces-weka-*`
/// corpus: aiperf's `--hf-weka-dataset`) to its `traces.jsonl` in the hub cache; a repository of the
/// table resolves as its alias.
pub(crate) fn resolve_repo(repo: &str) -> Result<PathBuf, DatasetError> {
    match lookup(repo) {
        Some(a) => resolve(a),
        None => resolve_in(&hub::hub_dirs(), repo, repo, TRACES_FILE),
    }
}

fn resolve_in(
    dirs: &[PathBuf],
    name: &str,
    repo: &str,
    file: &str,
) -> Result<PathBuf, DatasetError> {
    if let Some(p) = hub::find(dirs, RepoKind::Dataset, repo, file) {
        return Ok(p);
    }
    if let Some(files) = hub::snapshot_files(dirs, RepoKind::Dataset, repo) {
        // Downloaded, but not the file the importer reads (a partial download, or a parquet export).
        let mut found = files.iter().take(8).cloned().collect::<Vec<_>>().join(", ");
        if files.len() > 8 {
            found.push_str(&format!(", … ({} files)", files.len()));
        }
        if found.is_empty() {
            found = "no files".into();
        }
        return Err(DatasetError::MissingTracesFile {
            name: name.to_owned(),
            repo: repo.to_owned(),
            file: file.to_owned(),
            found,
        });
    }
    Err(DatasetError::NotCached {
        name: name.to_owned(),
        repo: repo.to_owned(),
        searched: hub::describe_dirs(dirs),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_tokens::hub::testkit::{put, set_main};

    #[test]
    fn lookup_by_name_and_repo() {
        let a = lookup("semianalysis_cc_traces_weka").unwrap();
        assert_eq!(a.repo, "semianalysisai/cc-traces-weka-no-subagents-051826");
        assert_eq!(lookup(a.repo), Some(a));
        assert!(lookup("nope").is_none());
        // A repository shared by a dated and a rolling name finds the dated one.
        let d = lookup("semianalysisai/cc-traces-weka-062126").unwrap();
        assert_eq!(d.name, DEFAULT);
        let r = lookup("semianalysis_cc_traces_weka_with_subagents_256k").unwrap();
        assert_eq!(r.repo, "semianalysisai/cc-traces-weka-062126-256k");
        assert_eq!(
            lookup(r.repo).unwrap().name,
            "semianalysis_cc_traces_weka_062126_256k"
        );
    }

    #[test]
    fn the_table_is_aiperfs() {
        // Names are unique, every repository is a semianalysisai dataset, and the scenario accepts
        // exactly aiperf's require_loader names.
        let mut names: Vec<_> = ALIASES.iter().map(|a| a.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALIASES.len());
        assert_eq!(ALIASES.len(), 16);
        for a in ALIASES {
            assert!(
                a.repo.starts_with("semianalysisai/cc-traces-weka-"),
                "{a:?}"
            );
            assert!(hub::is_repo_id(a.repo));
            assert_eq!(a.file, TRACES_FILE);
            assert_eq!(
                a.name.ends_with("_256k"),
                a.repo.ends_with("-256k"),
                "{a:?}"
            );
            assert_eq!(a.name.ends_with("_256k"), a.capped_at == Some(256_000));
            assert_eq!(
                a.scenario,
                !a.repo.contains("no-subagents"),
                "{}: only the no-subagents corpus is refused",
                a.name
            );
            assert!(a.name.starts_with("semianalysis_cc_traces_weka"));
        }
        let count = |n: &str| lookup(n).unwrap().traces;
        assert_eq!(count(DEFAULT), 393);
        assert_eq!(count("semianalysis_cc_traces_weka_with_subagents"), 393);
        assert_eq!(
            count("semianalysis_cc_traces_weka_with_subagents_060226"),
            225
        );
        assert_eq!(
            count("semianalysis_cc_traces_weka_with_subagents_060526_256k"),
            336
        );
        assert_eq!(
            count("semianalysis_cc_traces_weka_with_subagents_060826"),
            391
        );
        assert_eq!(count("semianalysis_cc_traces_weka_061326_256k"), 183);
        assert_eq!(count("semianalysis_cc_traces_weka_061526"), 233);
        assert_eq!(count("semianalysis_cc_traces_weka_061526_256k"), 232);
        assert_eq!(count("semianalysis_cc_traces_weka_no_subagents"), 98);
        assert_eq!(lookup(SCENARIO_HF_REPO).unwrap().name, DEFAULT);
        assert!(!lookup("semianalysis_cc_traces_weka").unwrap().scenario);
    }

    #[test]
    fn resolves_the_snapshot_refs_main_names() {
        let hub = tempfile::tempdir().unwrap();
        let h = hub.path();
        let a = lookup(DEFAULT).unwrap();
        let k = RepoKind::Dataset;
        put(h, k, a.repo, "old", "traces.jsonl", "old").unwrap();
        let main = put(h, k, a.repo, "abc123", "traces.jsonl", "abc").unwrap();
        set_main(h, k, a.repo, "abc123").unwrap();
        let dirs = vec![h.to_owned()];
        assert_eq!(resolve_in(&dirs, a.name, a.repo, a.file).unwrap(), main);
        assert_eq!(
            main,
            h.join("datasets--semianalysisai--cc-traces-weka-062126/snapshots/abc123/traces.jsonl")
        );
    }

    #[test]
    fn a_missing_corpus_names_both_download_commands() {
        let hub = tempfile::tempdir().unwrap();
        let dirs = vec![hub.path().to_owned()];
        let a = lookup(DEFAULT).unwrap();
        let e = resolve_in(&dirs, a.name, a.repo, a.file)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("hf download semianalysisai/cc-traces-weka-062126 --repo-type dataset"),
            "{e}"
        );
        assert!(
            e.contains(
                "huggingface-cli download semianalysisai/cc-traces-weka-062126 --repo-type dataset"
            ),
            "{e}"
        );
        assert!(e.contains(&hub.path().display().to_string()), "{e}");
        assert!(e.contains(DEFAULT), "{e}");
    }

    #[test]
    fn a_snapshot_without_traces_jsonl_says_what_it_holds() {
        let hub = tempfile::tempdir().unwrap();
        let dirs = vec![hub.path().to_owned()];
        let repo = "semianalysisai/cc-traces-weka-070126";
        put(
            hub.path(),
            RepoKind::Dataset,
            repo,
            "r",
            "data/train-00000-of-00001.parquet",
            "x",
        )
        .unwrap();
        let e = resolve_in(&dirs, repo, repo, TRACES_FILE)
            .unwrap_err()
            .to_string();
        assert!(e.contains("data/train-00000-of-00001.parquet"), "{e}");
        assert!(
            e.contains(
                "hf download semianalysisai/cc-traces-weka-070126 traces.jsonl --repo-type dataset"
            ),
            "{e}"
        );
        // Once the file is there, an unlisted repository resolves like a named one.
        let p = put(
            hub.path(),
            RepoKind::Dataset,
            repo,
            "r",
            "traces.jsonl",
            "x",
        )
        .unwrap();
        assert_eq!(resolve_in(&dirs, repo, repo, TRACES_FILE).unwrap(), p);
    }
}
