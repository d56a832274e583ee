//! The OTel GenAI format end to end: the three OTel fixtures (inference-perf's public flat trace, an
//! OTLP JSONL trace with a subagent, flattened session rows) imported and summarized by `dataset
//! import` and `stats`, bad input named by file:line and field, the session tree built from the
//! spans, replays against the simulator whose records match the spans, and no message text in the
//! dataset cache.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use agentx::dataset::format::Format;
use agentx::dataset::tree::corpus::{TreeCorpus, TreeOpen};
use agentx::dataset::tree::StreamKind;
use agentx::dataset::{Dataset, OpenOptions};
use agentx::record::Phase;
use agentx::sim::SimConfig;
use serde_json::Value;

use crate::support::{agentx_command, fixture, Run, Sim};

const SAMPLE: &str = "inference-perf_simple_chain.otel.json";
const OTLP: &str = "otel-agents.otlp.jsonl";
const FLAT: &str = "otel-sessions.flat.jsonl";
const OTLP_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

/// `agentx-host ARGS` with a private home; (exit code, stdout, stderr).
fn host(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = agentx_command(dir, &[]).args(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn open(name: &str, cache: &Path) -> Dataset {
    Dataset::open_path(
        &fixture(name),
        &OpenOptions {
            cache_dir: Some(cache.to_owned()),
            ..OpenOptions::default()
        },
    )
    .unwrap()
}

fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    match &span["attributes"] {
        Value::Object(map) => map.get(key),
        Value::Array(kvs) => kvs.iter().find(|kv| kv["key"] == key).map(|kv| {
            let v = &kv["value"];
            v.get("stringValue")
                .or_else(|| v.get("intValue"))
                .unwrap_or(v)
        }),
        _ => None,
    }
}

fn count(value: Option<&Value>) -> Option<u64> {
    value.and_then(|v| v.as_u64().or_else(|| v.as_str()?.parse().ok()))
}

/// inference-perf's estimate of a JSON-encoded message list: `len(content) // 4` per message.
fn estimate(value: Option<&Value>) -> u64 {
    let list: Vec<Value> =
        serde_json::from_str(value.and_then(Value::as_str).unwrap_or("[]")).unwrap();
    list.iter()
        .map(|m| m["content"].as_str().unwrap_or("").chars().count() as u64 / 4)
        .sum()
}

/// The (input, output) tokens of every LLM span a replay should send, read from the fixture's
/// spans: `chat` spans that are not errors, each span id once; counts as recorded, else estimated.
fn span_lengths(name: &str) -> Vec<(u64, u64)> {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    let records: Vec<Value> = match serde_json::from_str::<Value>(&text) {
        Ok(one) => vec![one],
        Err(_) => text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect(),
    };
    let mut spans: Vec<Value> = Vec::new();
    for record in &records {
        if let Some(batches) = record["resourceSpans"].as_array() {
            for scope in batches
                .iter()
                .flat_map(|b| b["scopeSpans"].as_array().unwrap())
            {
                spans.extend(scope["spans"].as_array().unwrap().iter().cloned());
            }
        } else {
            spans.extend(record["spans"].as_array().unwrap().iter().cloned());
        }
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for span in &spans {
        let id = span
            .get("spanId")
            .or(span.get("span_id"))
            .unwrap()
            .to_string();
        let chat = attribute(span, "gen_ai.operation.name").and_then(Value::as_str) == Some("chat");
        if !chat || span["status"]["code"] == 2 || !seen.insert(id) {
            continue;
        }
        let input = count(attribute(span, "gen_ai.usage.input_tokens"))
            .or(count(attribute(span, "gen_ai.usage.prompt_tokens")));
        let output = count(attribute(span, "gen_ai.usage.output_tokens"))
            .or(count(attribute(span, "gen_ai.usage.completion_tokens")));
        let input = input.unwrap_or_else(|| estimate(attribute(span, "gen_ai.input.messages")));
        let output = output.unwrap_or_else(|| {
            attribute(span, "gen_ai.output.text")
                .and_then(Value::as_str)
                .map_or(0, |t| t.chars().count() as u64 / 4)
        });
        out.push((input, output));
    }
    out.sort_unstable();
    out
}

/// The token limit of every turn of a dataset's session trees, by (trace, outer index, inner index).
fn tree_turns(ds: &Dataset, cache: &Path) -> BTreeMap<(String, u32, Option<u32>), u64> {
    let trees = TreeCorpus::open(
        ds,
        &TreeOpen {
            cache_dir: Some(cache.to_owned()),
            ..TreeOpen::default()
        },
    )
    .unwrap();
    let mut out = BTreeMap::new();
    for tree in &trees.trees {
        for turn in tree.streams.iter().flat_map(|s| &s.turns) {
            let key = (
                tree.trace_id.clone(),
                turn.source_outer_idx,
                turn.source_inner_idx,
            );
            out.insert(key, u64::from(turn.max_tokens));
        }
    }
    out
}

#[test]
fn each_fixture_imports_and_stats_print_its_hit_rate_and_history() {
    let dir = tempfile::tempdir().unwrap();
    // (fixture, traces, requests, subagents, sessions meeting history=runtime's precondition)
    for (name, traces, requests, subagents, runtime) in
        [(SAMPLE, 1, 3, 0, 1), (OTLP, 2, 7, 1, 1), (FLAT, 2, 5, 0, 1)]
    {
        let path = fixture(name);
        let p = path.to_str().unwrap();
        for args in [
            vec!["dataset", "import", p],
            vec!["dataset", "import", p, "--format", "otel"],
        ] {
            let (code, out, err) = host(dir.path(), &args);
            assert_eq!(code, 0, "{name}: {err}");
            assert!(out.contains("format       otel (block size 64"), "{out}");
            assert!(
                out.contains(&format!("traces       {traces}\n")),
                "{name}: {out}"
            );
        }
        let (code, out, err) = host(dir.path(), &["dataset", "stats", p, "--format", "otel"]);
        assert_eq!(code, 0, "{name}: {err}");
        assert!(out.contains("theoretical hit rate (lcp)"), "{out}");
        assert!(
            out.contains(&format!(
                "otel history=runtime        {runtime} of {traces}"
            )),
            "{name}: {out}"
        );
        let (code, out, err) = host(dir.path(), &["dataset", "stats", p, "--json"]);
        assert_eq!(code, 0, "{name}: {err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["format"]["format"], "otel");
        assert_eq!(v["otel"]["requests"], requests, "{name}: {}", v["otel"]);
        assert_eq!(v["otel"]["subagents"], subagents, "{name}");
        assert_eq!(v["otel"]["history_runtime_sessions"], runtime, "{name}");
        assert!(v["theoretical_hit_rate_prefix"].as_f64().is_some(), "{v}");
    }
    // The OTLP fixture's dropped spans are counted warnings; its shared prefixes give hits.
    let (_, out, _) = host(
        dir.path(),
        &[
            "dataset",
            "stats",
            fixture(OTLP).to_str().unwrap(),
            "--json",
        ],
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["warnings"]["by_kind"]["error_span"]["count"], 1, "{v}");
    assert_eq!(
        v["warnings"]["by_kind"]["duplicate_span"]["count"], 1,
        "{v}"
    );
    assert_eq!(
        v["otel"]["assumed_prefix"], 1,
        "trace B records no messages"
    );
    assert!(
        v["theoretical_hit_rate_prefix"].as_f64().unwrap() > 0.3,
        "{v}"
    );
    // The sample records no token counts: estimated, with a warning each.
    let (_, out, _) = host(
        dir.path(),
        &[
            "dataset",
            "stats",
            fixture(SAMPLE).to_str().unwrap(),
            "--json",
        ],
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        v["warnings"]["by_kind"]["estimated_tokens"]["count"], 3,
        "{v}"
    );
}

#[test]
fn bad_input_is_refused_naming_file_line_and_field() {
    let dir = tempfile::tempdir().unwrap();
    let otlp = std::fs::read_to_string(fixture(OTLP)).unwrap();
    let flat = std::fs::read_to_string(fixture(FLAT)).unwrap();
    let write = |name: &str, text: String| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let second = |text: &str, from: &str, to: &str| {
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        assert!(lines[1].contains(from), "{from}");
        lines[1] = lines[1].replacen(from, to, 1);
        lines.join("\n") + "\n"
    };
    let cases = [
        (
            write("status.jsonl", second(&otlp, "\"status\":{\"code\":1}", "\"status\":{\"code\":7}")),
            "status.jsonl:2: resourceSpans[0].scopeSpans[0].spans[0].status.code: span \"c3c3c3c3c3c3c3c3\": status code 7 is outside 0..=2",
        ),
        (
            write("kind.jsonl", second(&otlp, "\"kind\":3", "\"kind\":12")),
            "kind.jsonl:2: resourceSpans[0].scopeSpans[0].spans[0].kind: span \"c3c3c3c3c3c3c3c3\": kind 12 is not an OTLP span kind",
        ),
        (
            write("time.jsonl", second(&flat, "2026-02-25T12:00:00.700000", "2026-02-25T11:59:59.000000")),
            "time.jsonl:2: trace \"7c3f0a1e5b2d4c6e8f9a0b1c2d3e4f50\": spans[0].end_time: span \"s2-0001\" ends 1000 ms before it starts",
        ),
        (
            write("tokens.jsonl", second(&flat, "\"gen_ai.usage.input_tokens\":300", "\"gen_ai.usage.input_tokens\":\"300\"")),
            "tokens.jsonl:2: trace \"7c3f0a1e5b2d4c6e8f9a0b1c2d3e4f50\": spans[0].attributes: span \"s2-0001\": gen_ai.usage.input_tokens: \"300\" is not a token count",
        ),
    ];
    for (path, want) in cases {
        let (code, out, err) = host(dir.path(), &["dataset", "import", path.to_str().unwrap()]);
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains(want), "{want:?} not in {err}");
    }
    // --strict refuses the fixture's dropped spans, naming each kind's first place.
    let (code, _, err) = host(
        dir.path(),
        &[
            "dataset",
            "import",
            fixture(OTLP).to_str().unwrap(),
            "--strict",
        ],
    );
    assert_eq!(code, 2);
    assert!(err.contains("otel-agents.otlp.jsonl:2: trace \"4bf92f3577b34da6a3ce929d0e0e4736\": resourceSpans[0].scopeSpans[0].spans[3].status: span \"dededededededede\""), "{err}");
}

/// The OTLP fixture's trace A: the coder's three requests (its error span dropped, the retried
/// duplicate dropped) and the researcher subagent's two, spawned by the coder's first request and
/// joined by its second, which starts after the subagent's last request ended.
#[test]
fn the_session_tree_follows_the_spans() {
    let cache = tempfile::tempdir().unwrap();
    let ds = open(OTLP, cache.path());
    assert_eq!(ds.corpus_format().format, Format::Otel);
    let ids: Vec<&str> = ds.trajectories().map(|t| t.id()).collect();
    assert_eq!(ids, [OTLP_TRACE, "0af7651916cd43dd8448eb211c80319c"]);
    let a = ds.find(OTLP_TRACE).unwrap();
    assert_eq!((a.num_turns(), a.subagents()), (3, 1));
    // c4 continues c1 (1200 tokens: 18 blocks), c5 continues c4 (1600 tokens: 25 blocks).
    let lcp: Vec<usize> = (1..3)
        .map(|k| a.turn(k).unwrap().lcp_with_previous())
        .collect();
    assert_eq!(lcp, [18, 25]);
    assert_eq!(a.turn(1).unwrap().think_time(), Some(2.3));

    let trees = TreeCorpus::open(
        &ds,
        &TreeOpen {
            cache_dir: Some(cache.path().to_owned()),
            ..TreeOpen::default()
        },
    )
    .unwrap();
    assert_eq!(trees.trees.len(), 2);
    let tree = &trees.trees[0];
    assert_eq!(tree.trace_id, OTLP_TRACE);
    assert_eq!(tree.streams.len(), 2, "{:?}", tree.streams);
    let (root, sub) = (&tree.streams[0], &tree.streams[1]);
    let shape = |s: &agentx::dataset::tree::Stream| -> Vec<(f64, u32)> {
        s.turns
            .iter()
            .map(|t| (t.ts_ms.round(), t.max_tokens))
            .collect()
    };
    // On the clock of the first LLM span (c1 at 0.1 s).
    assert_eq!(shape(root), [(0.0, 80), (3300.0, 90), (6400.0, 40)]);
    assert_eq!(shape(sub), [(1200.0, 50), (2000.0, 60)]);
    assert_eq!((root.kind, root.parent), (StreamKind::Main, None));
    assert_eq!(
        (sub.kind, sub.parent, sub.depth),
        (StreamKind::Subagent, Some(0), 1)
    );
    assert_eq!(
        sub.id,
        format!("{OTLP_TRACE}::sa:researcher-b2b2b2b2b2b2b2b2")
    );
    assert_eq!(tree.branches.len(), 1);
    let branch = &tree.branches[0];
    assert_eq!(branch.children, [1]);
    assert_eq!((branch.spawn_turn, branch.join_turn), (0, Some(1)));
    assert_eq!(root.turns[0].spawns, [0]);
    assert_eq!(root.turns[1].joins, [0]);
    // Trace B: one stream of two requests.
    assert_eq!(trees.trees[1].streams.len(), 1);
    assert_eq!(trees.trees[1].streams[0].turns.len(), 2);
}

/// `run` of agentx-v1 (session trees, recorded assistant text, prompts of the recorded length) on
/// `name` against the simulator, think gaps capped at 10 ms.
fn replay(name: &str, url: &str) -> Run {
    let v1 = crate::scenario::dist("agentx-v1.wasm");
    let corpus = fixture(name);
    let args = [
        "run",
        v1.to_str().unwrap(),
        "--url",
        url,
        "--model",
        "agentx-sim",
        "--input-file",
        corpus.to_str().unwrap(),
        "--random-seed",
        "42",
        "--unsafe-override",
        "--concurrency",
        "2",
        "--benchmark-duration",
        "4",
        "--benchmark-grace-period",
        "30",
        "--trace-idle-gap-cap-seconds",
        "0.01",
        "--stats-interval",
        "0",
    ];
    Run::in_process(tempfile::tempdir().unwrap(), &args, &[])
}

#[test]
fn each_fixture_replays_against_the_simulator_and_the_records_match_the_spans() {
    let sim = Sim::start(SimConfig::max());
    for name in [SAMPLE, OTLP, FLAT] {
        let cache = tempfile::tempdir().unwrap();
        let ds = open(name, cache.path());
        let turns = tree_turns(&ds, cache.path());
        let spans = span_lengths(name);
        // The trees hold one turn per kept span, with its output as the token limit.
        let mut limits: Vec<u64> = turns.values().copied().collect();
        let mut want: Vec<u64> = spans.iter().map(|s| s.1.max(1)).collect();
        limits.sort_unstable();
        want.sort_unstable();
        assert_eq!(limits, want, "{name}: the trees' turns are the spans");
        let r = replay(name, &sim.url());
        assert_eq!(r.code(), 0, "{name}: {}", r.stderr());
        let recs = r.records();
        assert!(recs.iter().any(|x| x.phase == Phase::Profiling), "{name}");
        assert!(recs.iter().all(|x| x.error.is_none()), "{name}: {recs:?}");
        let mut replayed: BTreeSet<(String, u32, Option<u32>)> = BTreeSet::new();
        let mut marker = None;
        for x in &recs {
            let tree = x.tree.as_ref().expect("tree fields");
            let key = (
                tree.source_trace_id.clone(),
                tree.source_outer_idx.expect("outer index"),
                tree.source_inner_idx,
            );
            let max_tokens = turns[&key];
            // Every request is one of the spans: its prompt the span's input (plus the marker's
            // constant tokens), its token limit the span's output.
            let prompt = x.usage.prompt_tokens.expect("server count");
            let input = spans
                .iter()
                .map(|s| s.0)
                .filter(|&i| prompt >= i && prompt - i <= 4)
                .max()
                .unwrap_or_else(|| panic!("{name}: no span of {prompt} prompt tokens: {spans:?}"));
            let m = *marker.get_or_insert(prompt - input);
            assert_eq!(prompt - input, m, "{name}: {x:?}");
            if x.phase == Phase::Profiling {
                assert_eq!(u64::from(x.max_tokens), max_tokens, "{name}");
                assert!(
                    spans
                        .iter()
                        .any(|s| (s.0, s.1.max(1)) == (input, max_tokens)),
                    "{name}"
                );
            }
            replayed.insert(key);
        }
        assert_eq!(
            replayed.len(),
            spans.len(),
            "{name}: every span is replayed"
        );
    }
}

#[test]
fn no_message_text_reaches_the_dataset_cache() {
    let cache = tempfile::tempdir().unwrap();
    for name in [SAMPLE, OTLP, FLAT] {
        let ds = open(name, cache.path());
        TreeCorpus::open(
            &ds,
            &TreeOpen {
                cache_dir: Some(cache.path().to_owned()),
                ..TreeOpen::default()
            },
        )
        .unwrap();
    }
    let mut files = 0;
    let mut stack = vec![cache.path().to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            files += 1;
            let bytes = std::fs::read(&path).unwrap();
            let text = String::from_utf8_lossy(&bytes);
            for phrase in [
                "capital of France",
                "Eiffel",
                "parse_header",
                "magic bytes",
                "careful coding agent",
                "waterproof",
                "Storm Shell",
                "payment gateway",
            ] {
                assert!(!text.contains(phrase), "{phrase:?} in {}", path.display());
            }
        }
    }
    assert!(
        files >= 6,
        "three dataset and three tree entries, got {files} files"
    );
}
