//! Prompt tiling against the reference: [`Tiling::Reference`] lays every turn of the golden corpus out
//! as agentx-harness 1.0.12 does (`fixtures/golden/tiling/reference.json`, made by
//! `bench/golden/gen_tiling.py` from the harness's own `weka_synth_buf.py`): the same messages, with
//! the same roles and the same number of tokens (words) each.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use agentx::dataset::{AssistantMode, Dataset, OpenOptions, PromptSynth, Tiling};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::support::fixture;

/// One turn's prompt: the first letter of each message's role, and its token count.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Layout {
    roles: String,
    tokens: Vec<u64>,
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {:?}", self.roles, self.tokens)
    }
}

struct Golden {
    corpus: PathBuf,
    /// Trace ids with their turns.
    traces: Vec<(String, Vec<Layout>)>,
    /// Per trace, the generator's name for the shape of each turn.
    ops: BTreeMap<String, Vec<String>>,
}

/// Reads the vectors and checks that the corpus is the one they were computed on.
fn golden() -> Golden {
    let dir = fixture("golden").join("tiling");
    let corpus = dir.join("corpus.jsonl");
    let doc: Value = serde_json::from_slice(
        &std::fs::read(dir.join("reference.json")).expect("read reference.json"),
    )
    .expect("reference.json is JSON");
    let want = doc["corpus_sha256"].as_str().expect("corpus_sha256");
    let got = hex::encode(Sha256::digest(
        std::fs::read(&corpus).expect("read corpus.jsonl"),
    ));
    assert_eq!(
        got, want,
        "fixtures/golden/tiling/corpus.jsonl is not the corpus reference.json was computed on; \
         regenerate both with bench/golden/gen_tiling.py"
    );
    let layout = |t: &Value| Layout {
        roles: t["roles"].as_str().expect("roles").to_owned(),
        tokens: t["tokens"]
            .as_array()
            .expect("tokens")
            .iter()
            .map(|n| n.as_u64().expect("token count"))
            .collect(),
    };
    let traces = doc["traces"]
        .as_object()
        .expect("traces")
        .iter()
        .map(|(id, turns)| {
            let turns = turns.as_array().expect("turn list");
            (id.clone(), turns.iter().map(layout).collect())
        })
        .collect();
    let ops = doc["ops"]
        .as_object()
        .expect("ops")
        .iter()
        .map(|(id, o)| {
            let o = o.as_str().expect("ops string");
            (id.clone(), o.split(' ').map(str::to_owned).collect())
        })
        .collect();
    Golden {
        corpus,
        traces,
        ops,
    }
}

#[test]
fn golden_corpus_is_the_one_the_vectors_were_made_on() {
    let g = golden();
    assert!(g.traces.len() >= 50, "{} traces", g.traces.len());
}

#[test]
fn reference_tiling_matches_agentx_harness_on_every_turn() {
    let g = golden();
    let cache = tempfile::tempdir().unwrap();
    let ds = Dataset::open_path(
        &g.corpus,
        &OpenOptions {
            num_dataset_entries: None,
            max_context_length: None,
            max_osl: None,
            cache_dir: Some(cache.path().to_owned()),
            format: None,
            block_size: None,
            trace_block_size: None,
        },
    )
    .expect("open the golden corpus");
    let expected: BTreeMap<&str, &Vec<Layout>> =
        g.traces.iter().map(|(id, t)| (id.as_str(), t)).collect();
    let ids: Vec<&str> = expected.keys().copied().collect();
    let mut got_ids: Vec<&str> = ds.trajectories().map(|t| t.id()).collect();
    got_ids.sort_unstable();
    assert_eq!(
        got_ids, ids,
        "agentx imports other traces than the vectors have"
    );

    let synth = PromptSynth::new(42).with_tiling(Tiling::Reference);
    let (mut turns, mut mismatched_turns) = (0usize, 0usize);
    let mut report = String::new();
    let mut bad_traces = 0usize;
    for traj in ds.trajectories() {
        let id = traj.id();
        let want = expected[id];
        assert_eq!(
            traj.num_turns(),
            want.len(),
            "trace {id}: agentx's importer kept {} of the {} recorded requests (dropped or merged \
             some), so its turns cannot be compared with the reference's",
            traj.num_turns(),
            want.len()
        );
        let ops = &g.ops[id];
        let mut conv = synth
            .conversation(traj, 0, AssistantMode::Recorded)
            .expect("turn 0 exists");
        let mut first_bad = None;
        let mut bad = 0;
        for (k, w) in want.iter().enumerate() {
            if k > 0 {
                conv.advance(None).expect("next turn exists");
            }
            assert_eq!(conv.turn(), k);
            let msgs = conv.messages(None);
            let got = Layout {
                roles: msgs.iter().map(|m| &m.role[..1]).collect(),
                tokens: msgs
                    .iter()
                    .map(|m| m.content.split_whitespace().count() as u64)
                    .collect(),
            };
            turns += 1;
            if &got != w {
                bad += 1;
                if first_bad.is_none() {
                    first_bad = Some((k, got));
                }
            }
        }
        if let Some((k, got)) = first_bad {
            bad_traces += 1;
            mismatched_turns += bad;
            let turn = traj.turn(k).unwrap();
            let prev = k.checked_sub(1).and_then(|p| traj.turn(p));
            let _ = writeln!(
                report,
                "{id} (bs {}, tool {} + system {}): {bad} of {} turns differ; first at turn {k} \
                 ({}; in {}, {} hash ids, lcp {}; previous turn in {}, out {}, {} hash ids)\n  \
                 previous: {}\n  expected: {}\n  got:      {}",
                traj.block_size(),
                traj.tool_tokens(),
                traj.system_tokens(),
                want.len(),
                ops.get(k).map_or("?", String::as_str),
                turn.input_tokens(),
                turn.num_hash_ids(),
                turn.lcp_with_previous(),
                prev.map_or(0, |p| p.input_tokens()),
                prev.map_or(0, |p| p.output_tokens()),
                prev.map_or(0, |p| p.num_hash_ids()),
                k.checked_sub(1)
                    .map_or("-".to_owned(), |p| want[p].to_string()),
                want[k],
                got,
            );
        }
    }
    assert!(turns > 500, "only {turns} turns compared");
    assert!(
        report.is_empty(),
        "Tiling::Reference differs from agentx-harness 1.0.12 on {mismatched_turns} of {turns} \
         turns, in {bad_traces} of {} traces (first differing turn of each shown):\n{report}",
        ds.len()
    );
}
