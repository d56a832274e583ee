//! Named public corpora and their offline resolution from a Hugging Face hub cache.
//!
//! [`ALIASES`] is the one table of names: loading, stats and reports all read corpus names from here.
//! Resolution never touches the network; a corpus missing from the cache is an error that names the
//! exact command that fetches it.

use std::path::{Path, PathBuf};

use super::error::DatasetError;

/// A public corpus name and where it lives on the Hugging Face hub.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alias {
    /// The name users pass (aiperf's `--public-dataset` spelling).
    pub name: &'static str,
    /// The hub dataset repository, `org/name`.
    pub repo: &'static str,
    /// The file inside a snapshot that holds the traces.
    pub file: &'static str,
}

/// Every known corpus name. `semianalysis_cc_traces_weka` is the stable alias of the dated 949-trace
/// no-subagents corpus the InferenceX agentic benchmark replays.
pub const ALIASES: &[Alias] = &[
    Alias {
        name: "semianalysis_cc_traces_weka",
        repo: "semianalysisai/cc-traces-weka-no-subagents-051226",
        file: "traces.jsonl",
    },
    Alias {
        name: "semianalysis_cc_traces_weka_no_subagents",
        repo: "semianalysisai/cc-traces-weka-no-subagents-051226",
        file: "traces.jsonl",
    },
];

/// Looks up a corpus by alias name or by its `org/name` repository.
pub fn lookup(spec: &str) -> Option<&'static Alias> {
    ALIASES.iter().find(|a| a.name == spec || a.repo == spec)
}

/// Comma-separated alias names, for messages.
pub fn known_names() -> String {
    ALIASES
        .iter()
        .map(|a| a.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Hub cache directories in precedence order: `HF_HUB_CACHE`, `HUGGINGFACE_HUB_CACHE`, `HF_HOME/hub`,
/// `~/.cache/huggingface/hub`.
pub fn hub_dirs() -> Vec<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let mut dirs = Vec::new();
    if let Some(d) = env("HF_HUB_CACHE") {
        dirs.push(d);
    }
    if let Some(d) = env("HUGGINGFACE_HUB_CACHE") {
        dirs.push(d);
    }
    if let Some(d) = env("HF_HOME") {
        dirs.push(d.join("hub"));
    }
    if let Some(h) = env("HOME") {
        dirs.push(h.join(".cache").join("huggingface").join("hub"));
    }
    dirs.dedup();
    dirs
}

/// The traces file of `alias` in one hub cache directory: the snapshot `refs/main` points at, else the
/// most recently modified snapshot that has the file.
fn find_in(hub: &Path, alias: &Alias) -> Option<PathBuf> {
    let repo_dir = hub.join(format!("datasets--{}", alias.repo.replace('/', "--")));
    let snapshots = repo_dir.join("snapshots");
    if let Ok(rev) = std::fs::read_to_string(repo_dir.join("refs").join("main")) {
        let p = snapshots.join(rev.trim()).join(alias.file);
        if p.is_file() {
            return Some(p);
        }
    }
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(&snapshots).ok()?.flatten() {
        let p = entry.path().join(alias.file);
        if let Ok(meta) = std::fs::metadata(&p) {
            let m = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
            if best.as_ref().is_none_or(|(b, _)| m > *b) {
                best = Some((m, p));
            }
        }
    }
    best.map(|(_, p)| p)
}

/// Resolves `alias` to its traces file in the first hub cache that has it.
pub fn resolve(alias: &Alias) -> Result<PathBuf, DatasetError> {
    let dirs = hub_dirs();
    for d in &dirs {
        if let Some(p) = find_in(d, alias) {
            return Ok(p);
        }
    }
    Err(DatasetError::NotCached {
        name: alias.name.to_owned(),
        repo: alias.repo.to_owned(),
        searched: if dirs.is_empty() {
            "no hub cache directory: HOME, HF_HOME and HF_HUB_CACHE are unset".into()
        } else {
            dirs.iter()
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_by_name_and_repo() {
        let a = lookup("semianalysis_cc_traces_weka").unwrap();
        assert_eq!(a.repo, "semianalysisai/cc-traces-weka-no-subagents-051226");
        assert_eq!(lookup(a.repo), Some(a));
        assert!(lookup("nope").is_none());
    }

    #[test]
    fn finds_the_snapshot_refs_main_names() {
        let hub = tempfile::tempdir().unwrap();
        let a = &ALIASES[0];
        let repo = hub
            .path()
            .join("datasets--semianalysisai--cc-traces-weka-no-subagents-051226");
        for rev in ["old", "abc123"] {
            std::fs::create_dir_all(repo.join("snapshots").join(rev)).unwrap();
            std::fs::write(repo.join("snapshots").join(rev).join("traces.jsonl"), rev).unwrap();
        }
        std::fs::create_dir_all(repo.join("refs")).unwrap();
        std::fs::write(repo.join("refs").join("main"), "abc123\n").unwrap();
        assert_eq!(
            find_in(hub.path(), a).unwrap(),
            repo.join("snapshots/abc123/traces.jsonl")
        );
        std::fs::remove_file(repo.join("refs").join("main")).unwrap();
        assert!(find_in(hub.path(), a).is_some());
        assert!(find_in(&hub.path().join("none"), a).is_none());
    }
}
