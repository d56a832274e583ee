//! Corpus parsing (weka, Mooncake, TraceLab, NVIDIA Dynamo, OTel GenAI traces: [`format`](mod@format)), the content-addressed mmap cache, zero-copy views and prompt synthesis.
//!
//! The replay engine's entry points:
//! - [`Dataset::open`] resolves a corpus (in any [`format::Format`]: weka, Mooncake, TraceLab, Dynamo or OTel, detected
//!   or named; a `traces.jsonl`, a directory of `*.json` traces, a name from
//!   [`alias::ALIASES`] or a dataset repository id found in the Hugging Face hub cache, [`hub`]), selects
//!   traces ([`select`]: `--max-context-length`, `--num-dataset-entries`), imports them into the cache on
//!   first use, and maps the entry. [`Dataset::trajectories`] iterates [`Trajectory`]s in dataset
//!   order; each has [`Turn`]s with token counts, timing, stop reason and hash ids ([`HashIds`], slices
//!   of the map).
//! - [`PromptSynth::conversation`] starts a session of a trajectory at a turn and
//!   [`Conversation::write_messages_json`] appends that turn's chat `messages` to a request body;
//!   [`Conversation::advance`] moves to the next turn (threading in the live reply in live mode).
//!   [`sendable_starts`] says which turns can start a session.
//! - [`tokens::resolve_tokenizer`] resolves a `--tokenizer` value (path, `builtin`, cached model id) and
//!   [`tokens::TokenizerSource::counter`] loads the [`TokenCounter`];
//!   [`chat_template::ChatTemplate::beside`] reads the model's chat template next to that
//!   `tokenizer.json` (`--apply-chat-template`).
//!
//! Views borrow the [`Dataset`]. A [`Conversation`] owns what it reads: a clone of the dataset (a
//! handle on the shared mapping) and of the [`PromptSynth`] (its vocabulary is shared), so a replay
//! moves conversations into spawned tasks, and what a run opened is freed when its last task ends.
//!
//! An aiperf Agent Graph IR workload is not a corpus of session traces: [`graph_ir::load`] reads,
//! validates and lowers it into a [`graph_ir::GraphCorpus`] outside the cache.
//!
//! Import warnings (what aiperf accepts beyond this importer's checks, [`warnings`]) never fail an open;
//! they are logged as one line and kept in the entry ([`Dataset::warnings`], [`Dataset::check_strict`]).
//!
//! Invariants: an opened dataset is immutable and fully validated; prompts depend only on (trace, hash
//! ids, seed, vocabulary), and block text of a corpus whose hash ids are global (Mooncake) on (hash id,
//! seed, vocabulary) alone; nothing here knows about HTTP or time.

pub mod achievable;
pub mod alias;
pub(crate) mod any_format;
pub mod cache;
pub mod chat_template;
pub mod dynamo;
pub mod error;
pub mod format;
pub mod graph_ir;
mod mmap;
pub mod mooncake;
pub mod otel;
pub mod prompt;
pub mod select;
pub mod source;
pub mod stats;
pub mod synth;
pub mod tracelab;
pub mod tree;
mod view;
pub mod warnings;
pub mod weka;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

pub use agentx_tokens as tokens;
pub use agentx_tokens::{hub, text};
pub use cache::{CacheKey, Outcome};
pub use error::{DatasetError, Location};
pub use prompt::{
    sendable_starts, AssistantMode, CacheBust, Conversation, Message, MessagesWriter, Placement,
    PromptChain, PromptError, PromptSynth, Role, StepInfo, Tiling, Wire,
};
pub use tokens::TokenCounter;
pub use view::{Dataset, HashIds, Trajectory, Turn};
pub use weka::RequestKind;

pub use agentx_record::NO_OUTPUT_LIMIT;

/// Options of [`Dataset::open`].
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// Use only the first N traces (`--num-dataset-entries`); `None` uses all. With
    /// `max_context_length`, the first N traces that fit ([`select`]).
    pub num_dataset_entries: Option<usize>,
    /// Drop traces whose peak context exceeds this many tokens (`--max-context-length`; [`select`]).
    /// [`Dataset::selection`] says how many were dropped.
    pub max_context_length: Option<u64>,
    /// The output cap (max_tokens) of top-level requests, which the peak context of
    /// `max_context_length` is computed with (aiperf's `--synthesis-max-osl`); `None` is unbounded.
    pub max_osl: Option<u32>,
    /// The cache directory; `None` uses `cache::default_dir`.
    pub cache_dir: Option<PathBuf>,
    /// The corpus format (`--format`); `None` detects it from the source ([`format::detect`]).
    pub format: Option<format::Format>,
    /// Tokens per hash block of a Mooncake or TraceLab corpus (`--block-size`); `None` is the
    /// format's default.
    pub block_size: Option<u32>,
    /// Every weka trace laid out in this many tokens per block, whatever it declares
    /// (`--trace-block-size`); `None` honours each trace's `block_size`.
    pub trace_block_size: Option<u32>,
}

/// A corpus specification resolved to local files.
#[derive(Debug, Clone)]
pub(crate) struct ResolvedSource {
    pub files: weka::SourceFiles,
    pub alias: Option<&'static alias::Alias>,
}

/// Resolves a path, a corpus name of [`alias::ALIASES`] or a hub dataset repository id (`org/name`) to
/// local files (no network).
pub(crate) fn resolve(spec: &str) -> Result<ResolvedSource, DatasetError> {
    let path = Path::new(spec);
    if path.exists() {
        return Ok(ResolvedSource {
            files: weka::SourceFiles::from_path(path)?,
            alias: None,
        });
    }
    if let Some(alias_entry) = alias::lookup(spec) {
        let file = alias::resolve(alias_entry)?;
        return Ok(ResolvedSource {
            files: weka::SourceFiles::Jsonl(file),
            alias: Some(alias_entry),
        });
    }
    // Any other hub dataset repository (aiperf's `--hf-weka-dataset org/name`); a name ending like a
    // traces file is a mistyped path, not a repository.
    let traces_file = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("jsonl") || ext.eq_ignore_ascii_case("json"));
    if hub::is_repo_id(spec) && !traces_file {
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

/// Parses and validates a whole source in format `spec` into a cache entry's bytes, selecting traces
/// by `sel`.
fn build(
    files: &weka::SourceFiles,
    sel: &select::Selection,
    key: &CacheKey,
    spec: &format::FormatSpec,
) -> Result<Vec<u8>, DatasetError> {
    let started = Instant::now();
    let mut builder = cache::Builder::default();
    if *spec != format::FormatSpec::WEKA {
        builder.set_corpus(*spec);
    }
    let mut requests = 0usize;
    let mut subagents = 0u64;
    let limit = sel.num_dataset_entries;
    let mut add = |t: weka::ParsedTrace, builder: &mut cache::Builder| {
        requests += t.requests.len();
        subagents += u64::from(t.subagents);
        builder.add(&t).map_err(|reason| DatasetError::Invalid {
            location: Location {
                trace: Some(t.id.clone()),
                ..t.location.clone()
            },
            message: reason,
        })
    };
    if let Some(max) = sel.max_context_length {
        let mut selector = select::Selector::new(*sel);
        any_format::scan(spec, files, |t| {
            if selector.offer(&t) {
                add(t, &mut builder)?;
            }
            Ok(if selector.full() {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            })
        })?;
        let report = selector.into_report();
        if report.kept == 0 {
            return Err(DatasetError::EmptySelection {
                dataset: files.path().display().to_string(),
                max_context_length: max,
                scanned: report.scanned,
                smallest_peak: report.smallest_peak,
            });
        }
        tracing::info!(
            scanned = report.scanned,
            dropped = report.dropped,
            kept = report.kept,
            max_context_length = max,
            num_dataset_entries = limit,
            smallest_peak = report.smallest_peak,
            largest_peak = report.largest_peak,
            "traces selected by --max-context-length (filter, then cap)"
        );
        builder.set_selection(report);
    } else {
        let mut delivered = 0usize;
        any_format::scan(spec, files, |t| {
            add(t, &mut builder)?;
            delivered += 1;
            Ok(if limit.is_some_and(|l| delivered >= l) {
                std::ops::ControlFlow::Break(())
            } else {
                std::ops::ControlFlow::Continue(())
            })
        })?;
    }
    if let Some(cap) = limit {
        tracing::info!(
            traces = builder.traces(),
            cap = cap,
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
        format = %spec.format,
        traces = builder.traces(),
        requests,
        warnings = builder.warnings().total,
        secs = started.elapsed().as_secs_f64(),
        "dataset imported"
    );
    Ok(builder.finish(key))
}

impl Dataset {
    /// The warnings of the import that built this dataset's cache entry (counts by kind, first places),
    /// read from the last string of the entry (validated when the entry was opened).
    pub fn warnings(&self) -> warnings::WarningReport {
        let num_strings = self.entry.layout.n_strings as u32;
        serde_json::from_str(self.string(num_strings.saturating_sub(1))).unwrap_or_default()
    }

    /// The counts of the `--max-context-length` selection that built this dataset's entry (scanned,
    /// dropped, kept, smallest and largest peak context); `None` when no context limit was set.
    pub fn selection(&self) -> Option<select::SelectionReport> {
        let num_strings = self.entry.layout.n_strings as u32;
        serde_json::from_str::<cache::ImportReport>(self.string(num_strings.saturating_sub(1)))
            .ok()
            .and_then(|r| r.selection)
    }

    /// The format this dataset's corpus was read as, with its options (weka for an entry that does not
    /// say).
    pub fn corpus_format(&self) -> format::FormatSpec {
        let num_strings = self.entry.layout.n_strings as u32;
        serde_json::from_str::<cache::ImportReport>(self.string(num_strings.saturating_sub(1)))
            .ok()
            .and_then(|r| r.corpus)
            .unwrap_or(format::FormatSpec::WEKA)
    }

    /// Whether the corpus's hash ids are global (Mooncake traces): equal ids are equal text in every
    /// trace ([`Trajectory::global_hash_ids`]).
    pub fn global_hash_ids(&self) -> bool {
        self.trajectory(0).is_some_and(|t| t.global_hash_ids())
    }

    /// `--strict`: an error naming the first place of each warning kind when the corpus has warnings.
    pub fn check_strict(&self) -> Result<(), DatasetError> {
        self.warnings().strict(&self.source)
    }

    /// Opens a corpus: resolves `spec`, imports it into the cache if needed, and maps the entry.
    pub fn open(spec: &str, opts: &OpenOptions) -> Result<Dataset, DatasetError> {
        let src = resolve(spec)?;
        Self::open_resolved(&src, opts)
    }

    /// Opens a corpus at a local path.
    pub fn open_path(path: &Path, opts: &OpenOptions) -> Result<Dataset, DatasetError> {
        Self::open_resolved(
            &ResolvedSource {
                files: weka::SourceFiles::from_path(path)?,
                alias: None,
            },
            opts,
        )
    }

    /// Opens the cache entry of digest `key` (hex) when its source is no longer at hand: a rerun of
    /// a recorded run whose corpus moved. `source` is the recorded path, for messages.
    pub fn open_cached(
        key: &str,
        source: PathBuf,
        opts: &OpenOptions,
    ) -> Result<Dataset, DatasetError> {
        let store = cache::Store::new(opts.cache_dir.clone().unwrap_or_else(cache::default_dir));
        let gone = |reason: String| DatasetError::Cache {
            path: source.clone(),
            reason,
        };
        let bytes = hex::decode(key)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .ok_or_else(|| {
                gone(format!(
                    "the recorded dataset digest {key:?} is not 64 hex digits"
                ))
            })?;
        let key = CacheKey(bytes);
        let entry = store.get(&key)?.ok_or_else(|| {
            gone(format!(
                "the corpus is not at this path and the cache {} has no entry of digest {}; pass the corpus again with --dataset PATH",
                store.dir().display(),
                key.short_hex()
            ))
        })?;
        Ok(Dataset {
            entry: Arc::new(entry),
            source: source.into(),
            alias: None,
            outcome: cache::Outcome::Hit,
        })
    }

    /// Opens an already resolved source.
    pub(crate) fn open_resolved(
        src: &ResolvedSource,
        opts: &OpenOptions,
    ) -> Result<Dataset, DatasetError> {
        if opts.num_dataset_entries == Some(0) {
            return Err(DatasetError::Argument(
                "--num-dataset-entries must be at least 1".into(),
            ));
        }
        let store = cache::Store::new(opts.cache_dir.clone().unwrap_or_else(cache::default_dir));
        let format = match opts.format {
            Some(f) => f,
            None => format::detect(&src.files)?,
        };
        let spec = format::FormatSpec::resolve(format, opts.block_size)?
            .with_trace_block_size(opts.trace_block_size)?;
        let (digest, hashed) = source::digest_cached(&store, &src.files)?;
        let sel = select::Selection {
            num_dataset_entries: opts.num_dataset_entries,
            max_context_length: opts.max_context_length,
            max_osl: opts.max_osl,
        };
        let key = CacheKey::derive_selection(&spec.keyed_digest(&digest), &sel);
        tracing::debug!(key = %key.short_hex(), hashed, %format, "dataset cache key");
        let (entry, outcome) = store.get_or_build(&key, || build(&src.files, &sel, &key, &spec))?;
        let dataset = Dataset {
            entry: Arc::new(entry),
            source: src.files.path().into(),
            alias: src.alias,
            outcome,
        };
        if let Some(alias_entry) = dataset.alias {
            let selected = sel.num_dataset_entries.is_some() || sel.max_context_length.is_some();
            if !selected && dataset.len() != alias_entry.traces as usize {
                tracing::warn!(
                    corpus = alias_entry.name,
                    traces = dataset.len(),
                    published = alias_entry.traces,
                    source = %dataset.source.display(),
                    "the cached corpus has a different number of traces than {} was published with \
                     (another revision, or an incomplete download)",
                    alias_entry.repo
                );
            }
        }
        let report = dataset.warnings();
        if !report.is_empty() {
            tracing::warn!(
                source = %dataset.source.display(),
                "dataset has {} import warnings ({}); `agentx-host dataset stats` lists where, --strict refuses them",
                report.total,
                report.summary()
            );
        }
        Ok(dataset)
    }
}
