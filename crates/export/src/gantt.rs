//! The session trees the report page draws as a Gantt chart: a few trees of the run picked for what
//! a reader asks first (the longest, the one that waited most for first tokens, the most branched,
//! the deepest) and the earliest others, each with its streams (the root and its subagents, with
//! their parents and depths) and its requests (send, first token, end, prompt and cached tokens,
//! outcome), times in milliseconds from the tree's first send.
//!
//! A tree is the set of streams that share a root (`tree.root_correlation_id`); a single-stream
//! session is a tree of one stream. The records are read a line at a time; a torn last line is left
//! out.

use std::collections::HashMap;
use std::path::Path;

use serde_json::{json, Value};

use agentx_record::outcome::Outcome;
use agentx_record::{scan_records, RequestRecord};

/// Trees a page carries at most (about 10 KiB each for a tree of a hundred requests).
const MAX_TREES: usize = 24;

/// One request as the chart draws it.
struct Bar {
    stream: usize,
    send_ns: u64,
    first_token_ns: Option<u64>,
    end_ns: u64,
    isl: u64,
    cached: Option<u64>,
    outcome: Outcome,
}

/// One tree of the run.
#[derive(Default)]
struct Tree {
    /// Streams by correlation id, in first-seen order, with their parent's id and trace.
    streams: Vec<(String, Option<String>, String)>,
    index: HashMap<String, usize>,
    bars: Vec<Bar>,
}

impl Tree {
    fn add(&mut self, record: &RequestRecord) {
        let stream = match self.index.get(&record.correlation_id) {
            Some(&at) => at,
            None => {
                let parent = record
                    .tree
                    .as_ref()
                    .and_then(|tree| tree.parent_correlation_id.clone());
                self.streams.push((
                    record.correlation_id.clone(),
                    parent,
                    record.trace_id.clone(),
                ));
                self.index
                    .insert(record.correlation_id.clone(), self.streams.len() - 1);
                self.streams.len() - 1
            }
        };
        self.bars.push(Bar {
            stream,
            send_ns: record.send_ns,
            first_token_ns: record.first_token_ns,
            end_ns: record.end_ns,
            isl: record.isl,
            cached: record.usage.cached_tokens,
            outcome: Outcome::of(record),
        });
    }

    fn start_ns(&self) -> u64 {
        self.bars.iter().map(|bar| bar.send_ns).min().unwrap_or(0)
    }

    fn wall_ns(&self) -> u64 {
        let end = self.bars.iter().map(|bar| bar.end_ns).max().unwrap_or(0);
        end.saturating_sub(self.start_ns())
    }

    /// Time spent waiting for first tokens, over every request.
    fn waiting_ns(&self) -> u64 {
        self.bars
            .iter()
            .map(|bar| {
                bar.first_token_ns
                    .unwrap_or(bar.end_ns)
                    .saturating_sub(bar.send_ns)
            })
            .sum()
    }

    /// Each stream's parent index (`None` for a root, or a parent not in the records) and depth.
    fn parents_and_depths(&self) -> Vec<(Option<usize>, u32)> {
        let parents: Vec<Option<usize>> = self
            .streams
            .iter()
            .map(|(_, parent, _)| parent.as_ref().and_then(|id| self.index.get(id).copied()))
            .collect();
        (0..parents.len())
            .map(|at| {
                let (mut depth, mut walk) = (0u32, parents[at]);
                // Bounded by the stream count: a malformed cycle cannot loop.
                while let Some(up) = walk.filter(|_| depth < parents.len() as u32) {
                    depth += 1;
                    walk = parents[up];
                }
                (parents[at], depth)
            })
            .collect()
    }

    fn json(&self, root: &str, reason: &str) -> Value {
        let start = self.start_ns();
        let ms = |ns: u64| (ns.saturating_sub(start) as f64 / 1e5).round() / 10.0;
        let links = self.parents_and_depths();
        let streams: Vec<Value> = self
            .streams
            .iter()
            .zip(&links)
            .map(|((id, _, trace), (parent, depth))| {
                json!({"id": id, "trace": trace, "parent": parent, "depth": depth})
            })
            .collect();
        let requests: Vec<Value> = self
            .bars
            .iter()
            .map(|bar| {
                let outcome = match bar.outcome {
                    Outcome::Ok => 0,
                    Outcome::Failed => 1,
                    Outcome::Cancelled => 2,
                    Outcome::ContextOverflow => 3,
                };
                json!([
                    bar.stream,
                    ms(bar.send_ns),
                    bar.first_token_ns.map(ms),
                    ms(bar.end_ns),
                    bar.isl,
                    bar.cached,
                    outcome
                ])
            })
            .collect();
        json!({
            "id": root,
            "reason": reason,
            "start_s": (start as f64 / 1e6).round() / 1e3,
            "wall_s": (self.wall_ns() as f64 / 1e6).round() / 1e3,
            "depth": links.iter().map(|(_, depth)| *depth).max().unwrap_or(0),
            "streams": streams,
            "requests": requests,
        })
    }
}

/// The trees the page draws, from `records.jsonl` at `path`: `None` when there is none to read.
pub(crate) fn session_trees(path: &Path) -> Option<Value> {
    let mut trees: Vec<(String, Tree)> = Vec::new();
    let mut by_root: HashMap<String, usize> = HashMap::new();
    let read = scan_records(path, true, |record| {
        let root = record.session_root().to_owned();
        let at = *by_root.entry(root.clone()).or_insert_with(|| {
            trees.push((root, Tree::default()));
            trees.len() - 1
        });
        trees[at].1.add(&record);
    });
    if read.is_err() || trees.is_empty() {
        return None;
    }
    // The picks, each once, then the earliest trees.
    let mut picked: Vec<(usize, &str)> = Vec::new();
    let mut pick = |at: Option<usize>, reason: &'static str| {
        if let Some(at) = at.filter(|at| !picked.iter().any(|(p, _)| p == at)) {
            picked.push((at, reason));
        }
    };
    let best = |key: &dyn Fn(&Tree) -> u64| {
        (0..trees.len()).max_by_key(|&at| (key(&trees[at].1), std::cmp::Reverse(at)))
    };
    pick(best(&Tree::wall_ns), "the longest");
    pick(
        best(&Tree::waiting_ns),
        "the most time waiting for first tokens",
    );
    pick(
        best(&|tree: &Tree| tree.streams.len() as u64),
        "the most streams",
    );
    pick(
        best(&|tree: &Tree| {
            u64::from(
                tree.parents_and_depths()
                    .iter()
                    .map(|(_, d)| *d)
                    .max()
                    .unwrap_or(0),
            )
        }),
        "the deepest",
    );
    let mut earliest: Vec<usize> = (0..trees.len()).collect();
    earliest.sort_by_key(|&at| trees[at].1.start_ns());
    for at in earliest.into_iter().take(MAX_TREES) {
        pick(Some(at), "by start");
    }
    picked.truncate(MAX_TREES);
    let chosen: Vec<Value> = picked
        .iter()
        .map(|&(at, reason)| trees[at].1.json(&trees[at].0, reason))
        .collect();
    Some(json!({"trees": chosen, "of": trees.len()}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::testkit::{in_tree, rec};
    use agentx_record::RECORDS_FILE;

    /// A request of stream `stream` under `parent` in the tree of `root`.
    fn request(stream: &str, parent: Option<&str>, root: &str, send_ms: u64) -> RequestRecord {
        let mut record = rec(send_ms, &[5, 9], 100, 2);
        record.correlation_id = stream.into();
        record.request_id = format!("{stream}-{send_ms}");
        record.usage.cached_tokens = Some(40);
        in_tree(record, root, parent)
    }

    #[test]
    fn trees_are_grouped_by_root_with_parents_depths_and_picks() {
        let dir = tempfile::tempdir().unwrap();
        // A tree three deep (root -> a -> b -> c) and a lone session.
        let records = [
            request("root", None, "root", 0),
            request("a", Some("root"), "root", 20),
            request("b", Some("a"), "root", 40),
            request("c", Some("b"), "root", 60),
            request("root", None, "root", 100),
            request("lone", None, "lone", 5),
        ];
        let text: String = records
            .iter()
            .map(|r| serde_json::to_string(r).unwrap() + "\n")
            .collect();
        std::fs::write(dir.path().join(RECORDS_FILE), text + "{\"torn").unwrap();
        let trees = session_trees(&dir.path().join(RECORDS_FILE)).unwrap();
        assert_eq!(trees["of"], 2);
        let first = &trees["trees"][0];
        assert_eq!(first["id"], "root");
        assert_eq!(first["reason"], "the longest");
        assert_eq!(first["depth"], 3);
        let streams = first["streams"].as_array().unwrap();
        let depths: Vec<u64> = streams
            .iter()
            .map(|s| s["depth"].as_u64().unwrap())
            .collect();
        assert_eq!(depths, [0, 1, 2, 3]);
        assert_eq!(streams[3]["parent"], 2);
        assert!(streams[0]["parent"].is_null());
        // Five requests, times from the tree's first send: b sent at 40 ms, first token at +5 ms.
        let requests = first["requests"].as_array().unwrap();
        assert_eq!(requests.len(), 5);
        assert_eq!(requests[2], json!([2, 40.0, 45.0, 50.0, 100, 40, 0]));
        // The lone session is a tree of one stream, still on the page.
        assert_eq!(trees["trees"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn no_records_no_trees() {
        let dir = tempfile::tempdir().unwrap();
        assert!(session_trees(&dir.path().join(RECORDS_FILE)).is_none());
    }
}
