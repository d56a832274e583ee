//! What a process keeps for the runs it makes. A replay's request tasks borrow the dataset, the
//! prompt synthesizer and the session trees for `'static`, so they live for the rest of the
//! process; they are kept here once per distinct input (a dataset by its cache key and source,
//! a synthesizer by its settings, a tree corpus by its dataset and nesting basis), so the points
//! of a sweep and the runs of a long-lived process share them instead of each run leaving a copy
//! behind. What a process keeps is bounded by the distinct inputs it was given, not by its runs.

use std::path::PathBuf;
use std::sync::Mutex;

use crate::dataset::prompt::PromptSynth;
use crate::dataset::tree::corpus::TreeCorpus;
use crate::dataset::tree::NestedBasis;
use crate::dataset::{CacheKey, Dataset};

/// What was kept, each with what identifies it.
type Kept<K, T> = Mutex<Vec<(K, &'static T)>>;

static DATASETS: Kept<(CacheKey, PathBuf, Option<&'static str>), Dataset> = Mutex::new(Vec::new());
static SYNTHS: Kept<PromptSynth, PromptSynth> = Mutex::new(Vec::new());
static CORPORA: Kept<(CacheKey, Option<NestedBasis>), TreeCorpus> = Mutex::new(Vec::new());

/// The value kept under `id`, or the one `make` gives, kept from now on.
fn keep<K: PartialEq, T, E>(
    kept: &Kept<K, T>,
    id: K,
    make: impl FnOnce() -> Result<T, E>,
) -> Result<&'static T, E> {
    let mut kept = kept
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, k)) = kept.iter().find(|(k, _)| *k == id) {
        return Ok(k);
    }
    let v: &'static T = Box::leak(Box::new(make()?));
    kept.push((id, v));
    Ok(v)
}

/// The kept dataset with `ds`'s content (its cache key) and source, or `ds` kept from now on.
pub(super) fn dataset(ds: Dataset) -> &'static Dataset {
    let id = (
        ds.cache_key(),
        ds.source_path().to_owned(),
        ds.alias().map(|a| a.name),
    );
    keep(&DATASETS, id, || Ok::<_, std::convert::Infallible>(ds)).unwrap_or_else(|e| match e {})
}

/// The kept synthesizer equal to `synth`, or `synth` kept from now on.
pub(super) fn synth(synth: PromptSynth) -> &'static PromptSynth {
    keep(&SYNTHS, synth.clone(), || {
        Ok::<_, std::convert::Infallible>(synth)
    })
    .unwrap_or_else(|e| match e {})
}

/// The kept session trees of the dataset `key` under `basis`, opened by `open` the first time.
pub(super) fn corpus(
    key: CacheKey,
    basis: Option<NestedBasis>,
    open: impl FnOnce() -> anyhow::Result<TreeCorpus>,
) -> anyhow::Result<&'static TreeCorpus> {
    keep(&CORPORA, (key, basis), open)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dataset::prompt::Tiling;

    #[test]
    fn equal_synthesizers_are_kept_once() {
        let a = synth(PromptSynth::new(4242));
        let b = synth(PromptSynth::new(4242));
        assert!(std::ptr::eq(a, b));
        let c = synth(PromptSynth::new(4242).with_tiling(Tiling::Reference));
        assert!(!std::ptr::eq(a, c));
        assert!(!std::ptr::eq(a, synth(PromptSynth::new(4243))));
    }
}
