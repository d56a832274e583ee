//! The Hugging Face hub cache on disk, read offline: which cache directories to search, and where a
//! dataset or model repository's files sit in them.
//!
//! The layout is the one `hf download` (and the legacy `huggingface-cli download`) writes:
//! `<hub>/<datasets|models>--<org>--<name>/snapshots/<revision>/<path>`, with `refs/main` naming the
//! revision the last download of the default branch fetched. Nothing here touches the network; corpus
//! aliases (`agentx_dataset::alias`) and tokenizers ([`crate::resolve_tokenizer`]) both resolve through it.

use std::path::{Path, PathBuf};

/// The kind of a hub repository (the cache keeps them in separate name spaces).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoKind {
    /// A dataset repository (`datasets--org--name`).
    Dataset,
    /// A model repository (`models--org--name`).
    Model,
}

impl RepoKind {
    /// The directory-name prefix of this kind in a hub cache.
    fn prefix(self) -> &'static str {
        match self {
            RepoKind::Dataset => "datasets",
            RepoKind::Model => "models",
        }
    }
}

/// Hub cache directories in precedence order: `HF_HUB_CACHE`, `HUGGINGFACE_HUB_CACHE`, `HF_HOME/hub`,
/// `~/.cache/huggingface/hub`.
pub fn hub_dirs() -> Vec<PathBuf> {
    let env = |name: &str| {
        std::env::var_os(name)
            .filter(|value| !value.is_empty())
            .map(PathBuf::from)
    };
    let mut dirs = Vec::new();
    if let Some(dir) = env("HF_HUB_CACHE") {
        dirs.push(dir);
    }
    if let Some(dir) = env("HUGGINGFACE_HUB_CACHE") {
        dirs.push(dir);
    }
    if let Some(hf_home) = env("HF_HOME") {
        dirs.push(hf_home.join("hub"));
    }
    if let Some(home) = env("HOME") {
        dirs.push(home.join(".cache").join("huggingface").join("hub"));
    }
    dirs.dedup();
    dirs
}

/// The searched directories as one line for error messages.
pub fn describe_dirs(dirs: &[PathBuf]) -> String {
    if dirs.is_empty() {
        "no hub cache directory: HOME, HF_HOME and HF_HUB_CACHE are unset".into()
    } else {
        dirs.iter()
            .map(|dir| dir.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Whether `spec` has the shape of a hub repository id, `org/name` (one slash, both parts non-empty,
/// no whitespace, neither part `.` or `..`).
pub fn is_repo_id(spec: &str) -> bool {
    let mut parts = spec.split('/');
    let (Some(org), Some(name), None) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let valid = |part: &str| {
        !part.is_empty()
            && part != "."
            && part != ".."
            && part
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    };
    valid(org) && valid(name)
}

/// The cache directory of `repo` (`org/name`) in `hub`.
fn repo_dir(hub: &Path, kind: RepoKind, repo: &str) -> PathBuf {
    hub.join(format!("{}--{}", kind.prefix(), repo.replace('/', "--")))
}

/// `file` of `repo` in one hub cache directory: in the snapshot `refs/main` names, else in the most
/// recently modified snapshot that has it.
pub(crate) fn find_in(hub: &Path, kind: RepoKind, repo: &str, file: &str) -> Option<PathBuf> {
    let dir = repo_dir(hub, kind, repo);
    let snapshots = dir.join("snapshots");
    if let Ok(rev) = std::fs::read_to_string(dir.join("refs").join("main")) {
        let path = snapshots.join(rev.trim()).join(file);
        if path.is_file() {
            return Some(path);
        }
    }
    let mut best: Option<(std::time::SystemTime, PathBuf)> = None;
    for entry in std::fs::read_dir(&snapshots).ok()?.flatten() {
        let path = entry.path().join(file);
        if let Ok(meta) = std::fs::metadata(&path) {
            if !meta.is_file() {
                continue;
            }
            let modified = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
            if best.as_ref().is_none_or(|(newest, _)| modified > *newest) {
                best = Some((modified, path));
            }
        }
    }
    best.map(|(_, path)| path)
}

/// `file` of `repo` in the first of `dirs` that has it.
pub fn find(dirs: &[PathBuf], kind: RepoKind, repo: &str, file: &str) -> Option<PathBuf> {
    dirs.iter().find_map(|dir| find_in(dir, kind, repo, file))
}

/// The snapshot directories (sorted) of `repo` in the first of `dirs` that has a `snapshots`
/// directory for it, with that hub directory; `None` when no directory has one.
pub fn snapshots(dirs: &[PathBuf], kind: RepoKind, repo: &str) -> Option<(PathBuf, Vec<PathBuf>)> {
    for hub in dirs {
        let Ok(revs) = std::fs::read_dir(repo_dir(hub, kind, repo).join("snapshots")) else {
            continue;
        };
        let mut found: Vec<PathBuf> = revs
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.is_dir())
            .collect();
        found.sort();
        return Some((hub.clone(), found));
    }
    None
}

/// The files (relative paths, sorted) of the snapshots of `repo` in the first of `dirs` that has any
/// snapshot: what a download fetched when the expected file is missing.
pub fn snapshot_files(dirs: &[PathBuf], kind: RepoKind, repo: &str) -> Option<Vec<String>> {
    for hub in dirs {
        let snapshots = repo_dir(hub, kind, repo).join("snapshots");
        let Ok(revs) = std::fs::read_dir(&snapshots) else {
            continue;
        };
        let mut files = Vec::new();
        for rev in revs.flatten() {
            collect_files(&rev.path(), &rev.path(), &mut files, 0);
        }
        files.sort();
        files.dedup();
        return Some(files);
    }
    None
}

fn collect_files(root: &Path, dir: &Path, out: &mut Vec<String>, depth: usize) {
    if depth > 4 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_files(root, &path, out, depth + 1);
        } else if let Ok(rel) = path.strip_prefix(root) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// Hub cache layouts written by hand, for the tests of this crate and of the dataset's aliases.
pub mod testkit {
    use std::io;
    use std::path::{Path, PathBuf};

    use super::{repo_dir, RepoKind};

    /// Writes `<hub>/<kind>--org--name/snapshots/<rev>/<file>` with `body`; returns its path.
    pub fn put(
        hub: &Path,
        kind: RepoKind,
        repo: &str,
        rev: &str,
        file: &str,
        body: &str,
    ) -> io::Result<PathBuf> {
        let path = repo_dir(hub, kind, repo)
            .join("snapshots")
            .join(rev)
            .join(file);
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, body)?;
        Ok(path)
    }

    /// Points `refs/main` of a repository at `rev`.
    pub fn set_main(hub: &Path, kind: RepoKind, repo: &str, rev: &str) -> io::Result<()> {
        let refs = repo_dir(hub, kind, repo).join("refs");
        std::fs::create_dir_all(&refs)?;
        std::fs::write(refs.join("main"), format!("{rev}\n"))
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::{put, set_main};
    use super::*;

    #[test]
    fn repo_ids_have_one_slash_and_safe_parts() {
        for ok in ["org/name", "Qwen/Qwen3-8B", "a.b/c_d-1.5"] {
            assert!(is_repo_id(ok), "{ok}");
        }
        for bad in ["name", "a/b/c", "/abs", "a/", "../x", "a b/c", "./x", ""] {
            assert!(!is_repo_id(bad), "{bad}");
        }
    }

    #[test]
    fn refs_main_wins_then_the_newest_snapshot() {
        let hub = tempfile::tempdir().unwrap();
        let h = hub.path();
        let k = RepoKind::Model;
        put(h, k, "o/m", "old", "tokenizer.json", "old").unwrap();
        let main = put(h, k, "o/m", "abc", "tokenizer.json", "abc").unwrap();
        set_main(h, k, "o/m", "abc").unwrap();
        assert_eq!(find_in(h, k, "o/m", "tokenizer.json"), Some(main));
        // refs/main naming a snapshot without the file falls back to any snapshot that has it.
        set_main(h, k, "o/m", "gone").unwrap();
        assert!(find_in(h, k, "o/m", "tokenizer.json").is_some());
        // Kinds are separate name spaces.
        assert!(find_in(h, RepoKind::Dataset, "o/m", "tokenizer.json").is_none());
        assert!(find_in(h, k, "o/m", "other.json").is_none());
        assert_eq!(
            repo_dir(h, RepoKind::Dataset, "semianalysisai/x"),
            h.join("datasets--semianalysisai--x")
        );
    }

    #[test]
    fn first_directory_with_the_file_wins_and_snapshot_files_lists_what_is_there() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        let k = RepoKind::Dataset;
        let in_b = put(b.path(), k, "o/d", "r1", "traces.jsonl", "x").unwrap();
        put(a.path(), k, "o/d", "r1", "data/train-00000.parquet", "x").unwrap();
        let dirs = vec![a.path().to_owned(), b.path().to_owned()];
        assert_eq!(find(&dirs, k, "o/d", "traces.jsonl"), Some(in_b));
        assert_eq!(
            snapshot_files(&dirs, k, "o/d").unwrap(),
            vec!["data/train-00000.parquet".to_owned()]
        );
        assert!(snapshot_files(&dirs, k, "o/none").is_none());
        assert!(describe_dirs(&[]).contains("unset"));
    }
}
