//! A corpus's session trees in the content-addressed dataset cache: one `.agxd` entry per (dataset,
//! tree options), built once from the source and mapped on every later open.
//!
//! The entry is an ordinary dataset entry ([`super::super::cache`]) with one trajectory per stream:
//! the trees in dataset order, each tree's streams in tree order, each stream's source requests in
//! replay order. A stream's trajectory id is its tree's trace id, so prompt text (keyed by trajectory
//! id) of equal hash ids is equal across a tree's streams. The topology (the [`SessionTree`]s) is the
//! `TreeTopology` of the entry's import report, checksummed with the entry. On reading, the topology
//! must agree with the trajectories (trees, trace ids, streams, turn counts, every index in range);
//! an entry that does not is rebuilt like a damaged one, never read.
//!
//! The key: sha256 over a domain string of its own, `TREE_FORMAT_VERSION`, the dataset's
//! [`CacheKey`] (which covers the source digest, the selection and the dataset format version), the
//! nested-timestamp basis as asked (`auto` is a function of the dataset's content), the output cap
//! and the chain options.

use std::time::Instant;

use sha2::{Digest, Sha256};

use super::{build, NestedBasis, SessionTree, Stream, TreeOptions, TreeTopology};
use crate::any_format;
use crate::cache::{self, CacheKey, Entry, Outcome, Store};
use crate::weka::{ParsedRequest, ParsedTrace, SourceFiles};
use crate::{Dataset, DatasetError, Location, Trajectory};

/// Bump on any change of what a tree entry stores (the topology's fields, the streams' trajectories).
pub(crate) const TREE_FORMAT_VERSION: u32 = 1;

/// Options of [`TreeCorpus::open`].
#[derive(Debug, Clone, Default)]
pub struct TreeOpen {
    /// `None`: infer per corpus (NestedBasis::infer), as aiperf's `auto`.
    pub basis: Option<NestedBasis>,
    /// `--synthesis-max-osl` (caps root and flat turns' max_tokens).
    pub max_osl: Option<u32>,
    /// The cache directory (None: cache::default_dir()).
    pub cache_dir: Option<std::path::PathBuf>,
}

/// A corpus's session trees, kept in the dataset cache.
#[derive(Debug)]
pub struct TreeCorpus {
    /// One trajectory per stream: trees in corpus order, each tree's streams in tree order. A stream's
    /// trajectory id is its BASE trace id (the tree's trace id, not the `::sa:` conversation id), so
    /// prompt text of equal hash ids is equal across a tree's streams (text is keyed by trajectory id).
    /// Each turn holds the stream's source request (input, output, hash ids, model, t = ts_ms/1000, api/think/ttft) in replay order;
    /// tool/system tokens of the trajectory = the stream's init_tool_tokens/init_system_tokens; block size = the trace's.
    pub streams: crate::Dataset,
    /// One tree per trace, in dataset order.
    pub trees: Vec<SessionTree>,
    /// Index in `streams` of each tree's stream 0 (tree i's stream s is `first_stream[i] + s`).
    pub first_stream: Vec<u32>,
    basis: NestedBasis,
}

impl TreeCorpus {
    /// The trees of the traces of `ds` (the already-opened, selected dataset: keep exactly the traces
    /// `ds` holds, in its order), from the cache or built from `ds.source_path()` and stored.
    pub fn open(ds: &crate::Dataset, opts: &TreeOpen) -> Result<TreeCorpus, DatasetError> {
        let started = Instant::now();
        let store = Store::new(opts.cache_dir.clone().unwrap_or_else(cache::default_dir));
        let tree_opts = TreeOptions {
            // Replaced by the inferred basis under `auto` before anything is built.
            basis: opts.basis.unwrap_or(NestedBasis::Absolute),
            max_osl: opts.max_osl,
            ..TreeOptions::default()
        };
        let key = tree_key(&ds.cache_key(), opts.basis, &tree_opts);
        let check = |entry: Entry| read(entry, ds);
        let ((mut streams, topology), outcome) = store
            .get_or_build_checked(&key, check, || build_entry(ds, opts.basis, tree_opts, &key))?;
        streams.outcome = outcome;
        let first_stream = first_streams(&topology.trees);
        tracing::info!(
            outcome = ?outcome,
            trees = topology.trees.len(),
            streams = streams.len(),
            basis = ?topology.basis,
            entry = %streams.cache_path().display(),
            secs = started.elapsed().as_secs_f64(),
            "{}",
            match outcome {
                Outcome::Hit => "session trees mapped from the cache",
                Outcome::Built | Outcome::Rebuilt => "session trees built and cached",
            }
        );
        Ok(TreeCorpus {
            streams,
            trees: topology.trees,
            first_stream,
            basis: topology.basis,
        })
    }

    /// The trajectory of stream `stream` of tree `tree`.
    ///
    /// # Panics
    /// When the tree or the stream does not exist.
    pub fn stream(&self, tree: usize, stream: usize) -> crate::Trajectory<'_> {
        assert!(
            stream < self.trees[tree].streams.len(),
            "tree {tree} has {} streams, not {}",
            self.trees[tree].streams.len(),
            stream + 1
        );
        self.streams
            .trajectory(self.first_stream[tree] as usize + stream)
            .expect("validated when the entry was opened")
    }

    /// Whether the entry was found or built by this open.
    pub fn outcome(&self) -> crate::Outcome {
        self.streams.outcome()
    }

    /// The nested-timestamp basis the trees were built with (the inferred one when none was asked).
    pub fn basis(&self) -> NestedBasis {
        self.basis
    }
}

fn first_streams(trees: &[SessionTree]) -> Vec<u32> {
    let mut next = 0u32;
    trees
        .iter()
        .map(|t| {
            let first = next;
            next += t.streams.len() as u32;
            first
        })
        .collect()
}

/// The key of the trees of dataset `base` built with `opts` (`basis`: as asked, `None` for `auto`).
fn tree_key(base: &CacheKey, basis: Option<NestedBasis>, opts: &TreeOptions) -> CacheKey {
    let mut hasher = Sha256::new();
    hasher.update(b"agentx session trees\0");
    hasher.update(TREE_FORMAT_VERSION.to_le_bytes());
    hasher.update(b"\0dataset\0");
    hasher.update(base.0);
    hasher.update(b"\0basis\0");
    hasher.update(match basis {
        None => "auto",
        Some(NestedBasis::Absolute) => "absolute",
        Some(NestedBasis::Relative) => "relative",
    });
    hasher.update(b"\0max_osl\0");
    match opts.max_osl {
        Some(o) => hasher.update(u64::from(o).to_le_bytes()),
        None => hasher.update(b"none"),
    }
    hasher.update(b"\0split_chains\0");
    hasher.update([u8::from(opts.split_chains)]);
    hasher.update(b"\0chains\0");
    hasher.update(serde_json::to_vec(&opts.chains).expect("chain parameters serialize"));
    CacheKey(hasher.finalize().into())
}

fn invalid(trace: &ParsedTrace, message: String) -> DatasetError {
    DatasetError::Invalid {
        location: Location {
            trace: Some(trace.id.clone()),
            ..trace.location.clone()
        },
        message,
    }
}

/// Reads the traces of `ds` from its source (in dataset order), builds their trees and serializes the
/// entry.
fn build_entry(
    ds: &Dataset,
    basis: Option<NestedBasis>,
    mut opts: TreeOptions,
    key: &CacheKey,
) -> Result<Vec<u8>, DatasetError> {
    let started = Instant::now();
    let want: std::collections::HashMap<&str, usize> =
        ds.trajectories().map(|t| (t.id(), t.index())).collect();
    let mut slots: Vec<Option<ParsedTrace>> = vec![None; ds.len()];
    let mut found = 0usize;
    let spec = ds.corpus_format();
    any_format::scan(&spec, &SourceFiles::from_path(ds.source_path())?, |t| {
        if let Some(&slot) = want.get(t.id.as_str()) {
            let traj = ds.trajectory(slot).expect("an index of the dataset");
            if traj.num_turns() != t.requests.len() {
                return Err(invalid(
                    &t,
                    format!(
                        "{} requests, but the opened dataset holds {} for this trace: {} changed since \
                         it was opened",
                        t.requests.len(),
                        traj.num_turns(),
                        ds.source_path().display()
                    ),
                ));
            }
            slots[slot] = Some(t);
            found += 1;
        }
        Ok(if found == slots.len() {
            std::ops::ControlFlow::Break(())
        } else {
            std::ops::ControlFlow::Continue(())
        })
    })?;
    let mut traces = Vec::with_capacity(slots.len());
    for (slot, t) in slots.into_iter().enumerate() {
        match t {
            Some(t) => traces.push(t),
            None => {
                let base_id = ds
                    .trajectory(slot)
                    .map(|t| t.id().to_owned())
                    .unwrap_or_default();
                return Err(DatasetError::Cache {
                    path: ds.source_path().to_owned(),
                    reason: format!(
                        "trace {base_id:?} of the opened dataset is no longer in its source (changed since \
                         it was opened)"
                    ),
                });
            }
        }
    }
    let parsed = started.elapsed();
    opts.basis = basis.unwrap_or_else(|| NestedBasis::infer(&traces));
    let trees: Vec<SessionTree> = traces
        .iter()
        .map(|t| build(t, &opts))
        .collect::<Result<_, _>>()?;
    let built = started.elapsed().checked_sub(parsed).unwrap();
    let mut builder = cache::Builder::default();
    builder.set_global_hash_ids(ds.global_hash_ids());
    for (t, tree) in traces.iter().zip(&trees) {
        for (s, stream) in tree.streams.iter().enumerate() {
            let stream_parsed = stream_trace(t, stream, s == 0).map_err(|m| invalid(t, m))?;
            builder.add(&stream_parsed).map_err(|m| invalid(t, m))?;
        }
    }
    let streams = builder.traces();
    drop(traces);
    builder.set_trees(TreeTopology {
        basis: opts.basis,
        trees,
    });
    let bytes = builder.finish(key);
    tracing::info!(
        source = %ds.source_path().display(),
        traces = ds.len(),
        streams,
        basis = ?opts.basis,
        parse_secs = parsed.as_secs_f64(),
        build_secs = built.as_secs_f64(),
        secs = started.elapsed().as_secs_f64(),
        bytes = bytes.len(),
        "session trees built"
    );
    Ok(bytes)
}

/// The trajectory of one stream: its turns' source requests in replay order, each starting at the
/// turn's root-clock time; the trace's warnings go with its root stream only.
fn stream_trace(trace: &ParsedTrace, stream: &Stream, root: bool) -> Result<ParsedTrace, String> {
    let mut requests = Vec::with_capacity(stream.turns.len());
    for (k, turn) in stream.turns.iter().enumerate() {
        let req = source_request(trace, turn.source_outer_idx, turn.source_inner_idx)
            .ok_or_else(|| {
                format!(
                    "turn {k} of stream {} names requests[{}]{} as its source, which the trace does not hold",
                    stream.id,
                    turn.source_outer_idx,
                    turn.source_inner_idx
                        .map_or(String::new(), |i| format!(".requests[{i}]"))
                )
            })?;
        requests.push(ParsedRequest {
            t: turn.ts_ms / 1000.0,
            ..req.clone()
        });
    }
    Ok(ParsedTrace {
        id: trace.id.clone(),
        models: trace.models.clone(),
        block_size: trace.block_size,
        tool_tokens: stream.init_tool_tokens,
        system_tokens: stream.init_system_tokens,
        requests,
        subagents: 0,
        subagent_peak: 0,
        subagent_entries: Vec::new(),
        location: trace.location.clone(),
        warnings: if root {
            trace.warnings.clone()
        } else {
            Vec::new()
        },
        explicit_sessions: trace.explicit_sessions,
    })
}

/// The request at outer index `outer` (a top-level request), or the one at inner index `inner` of
/// the subagent entry at `outer`. Both lists are in index order.
fn source_request(trace: &ParsedTrace, outer: u32, inner: Option<u32>) -> Option<&ParsedRequest> {
    fn find(reqs: &[ParsedRequest], index: u32) -> Option<&ParsedRequest> {
        reqs.binary_search_by_key(&index, |r| r.index)
            .ok()
            .map(|p| &reqs[p])
    }
    match inner {
        None => find(&trace.requests, outer),
        Some(i) => {
            let s = trace
                .subagent_entries
                .binary_search_by_key(&outer, |s| s.index)
                .ok()?;
            find(&trace.subagent_entries[s].requests, i)
        }
    }
}

/// Reads a mapped tree entry of dataset `ds`: its topology, checked against its trajectories and
/// `ds`. Any disagreement makes the entry invalid.
fn read(entry: Entry, ds: &Dataset) -> Result<(Dataset, TreeTopology), String> {
    let streams = Dataset {
        entry: std::sync::Arc::new(entry),
        source: ds.source.clone(),
        alias: ds.alias,
        outcome: Outcome::Hit,
    };
    let num_strings = streams.entry.layout.n_strings as u32;
    let report: cache::ImportReport =
        serde_json::from_str(streams.string(num_strings.saturating_sub(1)))
            .map_err(|e| format!("session-tree topology unreadable: {e}"))?;
    let topology = report
        .trees
        .ok_or("a dataset entry, not one of session trees")?;
    check(&topology.trees, &streams, ds)?;
    Ok((streams, topology))
}

/// The topology agrees with the trajectories and with the dataset, and every index it holds is in
/// range.
fn check(trees: &[SessionTree], streams: &Dataset, ds: &Dataset) -> Result<(), String> {
    if trees.len() != ds.len() {
        return Err(format!(
            "{} trees for a dataset of {} traces",
            trees.len(),
            ds.len()
        ));
    }
    let total: usize = trees.iter().map(|t| t.streams.len()).sum();
    if total != streams.len() {
        return Err(format!(
            "{total} streams in the topology, {} trajectories in the entry",
            streams.len()
        ));
    }
    let mut trajs = streams.trajectories();
    for (i, (tree, trace)) in trees.iter().zip(ds.trajectories()).enumerate() {
        if tree.trace_id != trace.id() {
            return Err(format!(
                "tree {i} is of trace {:?}, the dataset's trace {i} is {:?}",
                tree.trace_id,
                trace.id()
            ));
        }
        check_tree(tree).map_err(|m| format!("tree {i} ({}): {m}", tree.trace_id))?;
        for (s, stream) in tree.streams.iter().enumerate() {
            let traj: Trajectory<'_> = trajs.next().expect("as many trajectories as streams");
            if traj.id() != tree.trace_id || traj.num_turns() != stream.turns.len() {
                return Err(format!(
                    "stream {s} of tree {i} ({}) has {} turns, its trajectory {:?} has {}",
                    tree.trace_id,
                    stream.turns.len(),
                    traj.id(),
                    traj.num_turns()
                ));
            }
        }
    }
    Ok(())
}

/// Every stream, turn and branch index a tree holds points into it.
fn check_tree(tree: &SessionTree) -> Result<(), String> {
    let num_streams = tree.streams.len();
    let turns = |s: usize| tree.streams.get(s).map_or(0, |s| s.turns.len());
    let turn_ok = |(s, k): (usize, usize)| k < turns(s);
    if num_streams == 0 {
        return Err("no streams".into());
    }
    for (bi, b) in tree.branches.iter().enumerate() {
        if b.children.iter().any(|&c| c == 0 || c >= num_streams)
            || !turn_ok((0, b.spawn_turn))
            || b.join_turn.is_some_and(|j| !turn_ok((0, j)))
        {
            return Err(format!("branch {bi} points outside the tree"));
        }
    }
    for (si, s) in tree.streams.iter().enumerate() {
        let bad = s.parent.is_some_and(|p| p >= num_streams)
            || s.branch.is_some_and(|b| b >= tree.branches.len())
            || s.fork_source.is_some_and(|f| !turn_ok(f))
            || s.turns.iter().any(|x| {
                x.spawns
                    .iter()
                    .chain(&x.joins)
                    .any(|&b| b >= tree.branches.len())
                    || x.replay_predecessors.iter().any(|&p| !turn_ok(p))
            });
        if bad {
            return Err(format!("stream {si} ({}) points outside the tree", s.id));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::weka::for_each_trace;
    use crate::OpenOptions;

    fn fixture(name: &str) -> PathBuf {
        Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("fixtures")
            .join(name)
    }

    fn open_ds(path: &Path, cache: &Path) -> Dataset {
        Dataset::open_path(
            path,
            &OpenOptions {
                cache_dir: Some(cache.to_owned()),
                ..OpenOptions::default()
            },
        )
        .unwrap()
    }

    fn open(ds: &Dataset, cache: &Path) -> TreeCorpus {
        TreeCorpus::open(
            ds,
            &TreeOpen {
                cache_dir: Some(cache.to_owned()),
                ..TreeOpen::default()
            },
        )
        .unwrap()
    }

    /// The traces of a fixture and their trees, built directly.
    fn direct(path: &Path) -> (Vec<ParsedTrace>, Vec<SessionTree>) {
        let mut traces = Vec::new();
        for_each_trace(&SourceFiles::Jsonl(path.to_owned()), None, |t| {
            traces.push(t);
            Ok(())
        })
        .unwrap();
        let opts = TreeOptions {
            basis: NestedBasis::infer(&traces),
            ..TreeOptions::default()
        };
        let trees = traces.iter().map(|t| build(t, &opts).unwrap()).collect();
        (traces, trees)
    }

    /// Every stream's trajectory holds its turns' source requests.
    fn assert_streams_hold_sources(c: &TreeCorpus, traces: &[ParsedTrace]) {
        assert_eq!(
            c.streams.len(),
            c.trees.iter().map(|t| t.streams.len()).sum::<usize>()
        );
        for (i, (tree, trace)) in c.trees.iter().zip(traces).enumerate() {
            for (s, stream) in tree.streams.iter().enumerate() {
                let traj = c.stream(i, s);
                assert_eq!(traj.id(), trace.id);
                assert_eq!(traj.num_turns(), stream.turns.len(), "{}", stream.id);
                assert_eq!(traj.block_size(), trace.block_size);
                assert_eq!(traj.tool_tokens(), stream.init_tool_tokens);
                assert_eq!(traj.system_tokens(), stream.init_system_tokens);
                for (turn, tt) in traj.turns().zip(&stream.turns) {
                    let src =
                        source_request(trace, tt.source_outer_idx, tt.source_inner_idx).unwrap();
                    let what = format!("{} turn {}", stream.id, turn.index());
                    assert_eq!(turn.input_tokens(), src.input, "{what}");
                    assert_eq!(turn.output_tokens(), src.output, "{what}");
                    assert_eq!(turn.hash_ids().to_vec(), src.hash_ids, "{what}");
                    assert_eq!(turn.model(), src.model, "{what}");
                    assert_eq!(turn.t(), tt.ts_ms / 1000.0, "{what}");
                    assert_eq!(turn.api_time(), src.api_time, "{what}");
                }
            }
        }
    }

    #[test]
    fn second_open_hits_and_holds_what_the_builder_gives() {
        let cache = tempfile::tempdir().unwrap();
        for name in ["traces-subagents-8.jsonl", "traces-24.jsonl"] {
            let path = fixture(name);
            let ds = open_ds(&path, cache.path());
            let (traces, want) = direct(&path);
            let a = open(&ds, cache.path());
            assert_eq!(a.outcome(), Outcome::Built, "{name}");
            assert_eq!(a.trees, want, "{name}");
            assert_streams_hold_sources(&a, &traces);
            let entry = a.streams.cache_path().to_owned();
            drop(a);
            let b = open(&ds, cache.path());
            assert_eq!(b.outcome(), Outcome::Hit, "{name}");
            assert_eq!(b.streams.cache_path(), entry);
            assert_eq!(b.trees, want, "{name}");
            assert_eq!(b.basis(), NestedBasis::infer(&traces));
            assert_eq!(b.first_stream[0], 0);
            assert_streams_hold_sources(&b, &traces);
            // An explicit basis or an output cap is another entry.
            let capped = TreeCorpus::open(
                &ds,
                &TreeOpen {
                    max_osl: Some(7),
                    cache_dir: Some(cache.path().to_owned()),
                    ..TreeOpen::default()
                },
            )
            .unwrap();
            assert_eq!(capped.outcome(), Outcome::Built);
            assert_ne!(capped.streams.cache_path(), entry);
            assert!(capped.trees[0].streams[0]
                .turns
                .iter()
                .all(|t| t.max_tokens <= 7));
        }
    }

    #[test]
    fn subagents_without_requests_keep_an_empty_trajectory() {
        let cache = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        let trace = serde_json::json!({
            "id": "e1", "block_size": 64, "hash_id_scope": "local",
            "requests": [
                {"t": 0.0, "type": "s", "model": "m", "in": 100, "out": 10, "hash_ids": [1, 2]},
                {"t": 1.0, "type": "subagent", "agent_id": "a", "requests": []},
                {"t": 2.0, "type": "s", "model": "m", "in": 120, "out": 10, "hash_ids": [1, 2, 3]}
            ]
        });
        std::fs::write(&path, format!("{trace}\n")).unwrap();
        let ds = open_ds(&path, cache.path());
        let c = open(&ds, cache.path());
        let tree = &c.trees[0];
        assert_eq!(tree.counts.empty_subagents, 1);
        assert_eq!(tree.streams.len(), 2);
        assert_eq!(c.stream(0, 0).num_turns(), 2);
        assert_eq!(c.stream(0, 1).num_turns(), 0);
        assert_eq!(open(&ds, cache.path()).outcome(), Outcome::Hit);
    }

    #[test]
    fn damaged_and_old_entries_are_rebuilt_not_read() {
        let cache = tempfile::tempdir().unwrap();
        let path = fixture("traces-subagents-8.jsonl");
        let ds = open_ds(&path, cache.path());
        let (_, want) = direct(&path);
        let a = open(&ds, cache.path());
        let entry = a.streams.cache_path().to_owned();
        drop(a);
        let good = std::fs::read(&entry).unwrap();
        // A flipped byte in the topology (the last string), then in a turn record.
        let turns_off = cache::rd_u64(&good, 88) as usize;
        for at in [good.len() - 10, turns_off + 2 * cache::TURN_REC + 32] {
            let mut bad = good.clone();
            bad[at] ^= 0x20;
            std::fs::write(&entry, &bad).unwrap();
            let c = open(&ds, cache.path());
            assert_eq!(c.outcome(), Outcome::Rebuilt, "byte {at}");
            assert_eq!(c.trees, want);
        }
        // An entry of the previous format version (its header otherwise consistent).
        let mut old = good.clone();
        old[8..12].copy_from_slice(&(cache::FORMAT_VERSION - 1).to_le_bytes());
        let hc = cache::checksum(&old[..120]);
        old[120..128].copy_from_slice(&hc.to_le_bytes());
        std::fs::write(&entry, &old).unwrap();
        let c = open(&ds, cache.path());
        assert_eq!(c.outcome(), Outcome::Rebuilt);
        assert_eq!(c.trees, want);
        drop(c);
        assert_eq!(std::fs::read(&entry).unwrap(), good);
    }

    #[test]
    fn a_topology_that_disagrees_with_its_trajectories_is_rebuilt() {
        let cache = tempfile::tempdir().unwrap();
        let path = fixture("traces-subagents-8.jsonl");
        let ds = open_ds(&path, cache.path());
        let a = open(&ds, cache.path());
        let key = a.streams.cache_key();
        let want = a.trees.clone();
        let entry = a.streams.cache_path().to_owned();
        // A valid entry (checksums and all) whose topology lacks a stream of tree 0.
        let mut topology = TreeTopology {
            basis: a.basis(),
            trees: a.trees.clone(),
        };
        let mut b = cache::Builder::default();
        for i in 0..a.trees.len() {
            for s in 0..a.trees[i].streams.len() {
                let t = a.stream(i, s);
                b.add(&ParsedTrace {
                    id: t.id().to_owned(),
                    models: Vec::new(),
                    block_size: t.block_size(),
                    tool_tokens: 0,
                    system_tokens: 0,
                    requests: Vec::new(),
                    subagents: 0,
                    subagent_peak: 0,
                    subagent_entries: Vec::new(),
                    location: Location::default(),
                    warnings: Vec::new(),
                    explicit_sessions: false,
                })
                .unwrap();
            }
        }
        drop(a);
        let tree = topology
            .trees
            .iter_mut()
            .find(|t| t.streams.len() > 1)
            .unwrap();
        tree.streams.pop();
        b.set_trees(topology);
        std::fs::write(&entry, b.finish(&key)).unwrap();
        let c = open(&ds, cache.path());
        assert_eq!(c.outcome(), Outcome::Rebuilt);
        assert_eq!(c.trees, want);
    }
}
