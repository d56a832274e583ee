//! Weka trace parsing, the content-addressed mmap cache, zero-copy views and prompt synthesis.
//!
//! The replay engine's entry points:
//! - [`Dataset::open`] resolves a corpus (a `traces.jsonl`, a directory of `*.json` traces, or a name from
//!   [`alias::ALIASES`] found in the Hugging Face hub cache), imports it into the cache on first use, and
//!   maps the entry. [`Dataset::trajectories`] iterates [`Trajectory`]s in dataset order; each has
//!   [`Turn`]s with token counts, timing, stop reason and hash ids ([`HashIds`], slices of the map).
//! - [`PromptSynth::conversation`] starts a session of a trajectory at a turn and
//!   [`Conversation::write_messages_json`] appends that turn's chat `messages` to a request body;
//!   [`Conversation::advance`] moves to the next turn (threading in the live reply in live mode).
//!   [`sendable_starts`] says which turns can start a session.
//!
//! Views and conversations borrow the [`Dataset`] and the [`PromptSynth`]. A run keeps both for its whole
//! life, so a replay that moves conversations into spawned tasks can leak them once (`Box::leak`) to
//! borrow them as `'static`.
//!
//! Import warnings (what aiperf accepts beyond this importer's checks, [`warnings`]) never fail an open;
//! they are logged as one line and kept in the entry ([`Dataset::warnings`], [`Dataset::check_strict`]).
//!
//! Invariants: an opened dataset is immutable and fully validated; prompts depend only on (trace, hash
//! ids, seed, vocabulary); nothing here knows about HTTP or time.

pub mod alias;
pub mod cache;
pub mod cmd;
pub mod error;
pub mod hub;
mod mmap;
pub mod prompt;
pub mod source;
pub mod stats;
pub mod synth;
pub mod text;
pub mod tokens;
mod view;
pub mod warnings;
pub mod weka;

use std::path::{Path, PathBuf};
use std::time::Instant;

pub use cache::{CacheKey, Outcome};
pub use error::{DatasetError, Location};
pub use prompt::{
    sendable_starts, AssistantMode, CacheBust, Conversation, Message, Placement, PromptSynth, Role,
    StepInfo,
};
pub use tokens::TokenCounter;
pub use view::{Dataset, HashIds, Trajectory, Turn};
pub use weka::RequestKind;

/// Options of [`Dataset::open`].
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Use only the first N traces (`--num-dataset-entries`); `None` uses all.
    pub num_dataset_entries: Option<usize>,
    /// The cache directory; `None` uses [`cache::default_dir`].
    pub cache_dir: Option<PathBuf>,
}

/// A corpus specification resolved to local files.
#[derive(Debug, Clone)]
pub struct ResolvedSource {
    pub files: weka::SourceFiles,
    pub alias: Option<&'static alias::Alias>,
}

/// Resolves a path, a corpus name of [`alias::ALIASES`] or a hub dataset repository id (`org/name`) to
/// local files (no network).
pub fn resolve(spec: &str) -> Result<ResolvedSource, DatasetError> {
    let path = Path::new(spec);
    if path.exists() {
        return Ok(ResolvedSource {
            files: weka::SourceFiles::from_path(path)?,
            alias: None,
        });
    }
    if let Some(a) = alias::lookup(spec) {
        let file = alias::resolve(a)?;
        return Ok(ResolvedSource {
            files: weka::SourceFiles::Jsonl(file),
            alias: Some(a),
        });
    }
    // Any other hub dataset repository (aiperf's `--hf-weka-dataset org/name`); a name ending like a
    // traces file is a mistyped path, not a repository.
    if hub::is_repo_id(spec) && !spec.ends_with(".jsonl") && !spec.ends_with(".json") {
        let file = alias::resolve_repo(spec)?;
        return Ok(ResolvedSource {
            files: weka::SourceFiles::Jsonl(file),
            alias: None,
        });
    }
    Err(DatasetError::UnknownSource {
        spec: spec.to_owned(),
        known: alias::known_names(),
    })
}

/// Parses and validates a whole source into a cache entry's bytes.
fn build(
    files: &weka::SourceFiles,
    limit: Option<usize>,
    key: &CacheKey,
) -> Result<Vec<u8>, DatasetError> {
    let started = Instant::now();
    let mut b = cache::Builder::default();
    let mut requests = 0usize;
    let mut subagents = 0u64;
    weka::for_each_trace(files, limit, |t| {
        requests += t.requests.len();
        subagents += u64::from(t.subagents);
        b.add(&t).map_err(|reason| DatasetError::Invalid {
            location: Location {
                trace: Some(t.id.clone()),
                ..t.location.clone()
            },
            message: reason,
        })
    })?;
    if let Some(n) = limit {
        tracing::info!(
            traces = b.traces(),
            cap = n,
            "dataset capped by --num-dataset-entries"
        );
    }
    if subagents > 0 {
        tracing::info!(
            subagents,
            "subagent entries parsed and ignored (the replay uses top-level requests only)"
        );
    }
    tracing::info!(
        source = %files.path().display(),
        traces = b.traces(),
        requests,
        warnings = b.warnings().total,
        secs = started.elapsed().as_secs_f64(),
        "dataset imported"
    );
    Ok(b.finish(key))
}

impl Dataset {
    /// The warnings of the import that built this dataset's cache entry (counts by kind, first places),
    /// read from the last string of the entry (validated when the entry was opened).
    pub fn warnings(&self) -> warnings::WarningReport {
        let n = self.entry.layout.n_strings as u32;
        serde_json::from_str(self.string(n.saturating_sub(1))).unwrap_or_default()
    }

    /// `--strict`: an error naming the first place of each warning kind when the corpus has warnings.
    pub fn check_strict(&self) -> Result<(), DatasetError> {
        self.warnings().strict(&self.source)
    }

    /// Opens a corpus: resolves `spec`, imports it into the cache if needed, and maps the entry.
    pub fn open(spec: &str, opts: &OpenOptions) -> Result<Dataset, DatasetError> {
        let src = resolve(spec)?;
        Self::open_resolved(src, opts)
    }

    /// Opens a corpus at a local path.
    pub fn open_path(path: &Path, opts: &OpenOptions) -> Result<Dataset, DatasetError> {
        Self::open_resolved(
            ResolvedSource {
                files: weka::SourceFiles::from_path(path)?,
                alias: None,
            },
            opts,
        )
    }

    /// Opens an already resolved source.
    pub fn open_resolved(src: ResolvedSource, opts: &OpenOptions) -> Result<Dataset, DatasetError> {
        if opts.num_dataset_entries == Some(0) {
            return Err(DatasetError::Argument(
                "--num-dataset-entries must be at least 1".into(),
            ));
        }
        let store = cache::Store::new(opts.cache_dir.clone().unwrap_or_else(cache::default_dir));
        let (digest, hashed) = source::digest_cached(store.dir(), &src.files)?;
        let key = CacheKey::derive(&digest, opts.num_dataset_entries);
        tracing::debug!(key = %key.short_hex(), hashed, "dataset cache key");
        let (entry, outcome) =
            store.get_or_build(&key, || build(&src.files, opts.num_dataset_entries, &key))?;
        let ds = Dataset {
            entry,
            source: src.files.path().to_owned(),
            alias: src.alias,
            outcome,
        };
        let w = ds.warnings();
        if !w.is_empty() {
            tracing::warn!(
                source = %ds.source.display(),
                "dataset has {} import warnings ({}); `agentx-host dataset stats` lists where, --strict refuses them",
                w.total,
                w.summary()
            );
        }
        Ok(ds)
    }
}
