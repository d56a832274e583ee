//! Dataset: import and cache behaviour, validation errors, alias resolution, views, prompt synthesis
//! and its token accuracy, statistics, and the `dataset` subcommands, on real files and the real binary.

use std::path::{Path, PathBuf};
use std::process::Command;

use agentx::dataset::prompt::push_json_escaped;
use agentx::dataset::stats::{corpus_stats, prefix_stamps, theoretical_hits};
use agentx::dataset::synth::{write_corpus, SynthOptions};
use agentx::dataset::weka::{for_each_trace, SourceFiles};
use agentx::dataset::{
    sendable_starts, AssistantMode, CacheBust, Dataset, OpenOptions, Outcome, Placement,
    PromptSynth, Tiling, TokenCounter,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures")
        .join(name)
}

fn opts(cache: &Path) -> OpenOptions {
    crate::support::open_options(cache)
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_agentx-host"))
}

/// Runs the binary with a private cache; returns (exit code, stdout, stderr).
fn run(args: &[&str], cache: &Path, env: &[(&str, &Path)]) -> (i32, String, String) {
    let mut c = bin();
    c.args(args)
        .env("AGENTX_DATASET_MMAP_CACHE_DIR", cache)
        .env_remove("AIPERF_DATASET_MMAP_CACHE_DIR");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run agentx-host");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn views_match_the_parsed_source() {
    let cache = tempfile::tempdir().unwrap();
    let path = fixture("traces-24.jsonl");
    let ds = Dataset::open_path(&path, &opts(cache.path())).unwrap();
    assert_eq!(ds.len(), 24);
    let mut i = 0;
    for_each_trace(&SourceFiles::Jsonl(path.clone()), None, |t| {
        let v = ds.trajectory(i).unwrap();
        assert_eq!(v.id(), t.id);
        assert_eq!(v.num_turns(), t.requests.len());
        assert_eq!(
            (v.tool_tokens(), v.system_tokens(), v.block_size()),
            (t.tool_tokens, t.system_tokens, t.block_size)
        );
        assert_eq!(v.models().collect::<Vec<_>>(), t.models);
        for (turn, r) in v.turns().zip(&t.requests) {
            assert_eq!(
                turn.hash_ids().to_vec(),
                r.hash_ids,
                "{} turn {}",
                t.id,
                turn.index()
            );
            assert_eq!(
                (turn.input_tokens(), turn.output_tokens()),
                (r.input, r.output)
            );
            assert_eq!(turn.think_time(), r.think_time);
            assert_eq!(turn.t(), r.t);
            assert_eq!(turn.kind(), r.kind);
            assert_eq!(turn.stop(), r.stop);
            assert_eq!(turn.model(), r.model);
            assert_eq!(turn.input_types(), r.input_types.join(","));
        }
        i += 1;
        Ok(())
    })
    .unwrap();
    assert_eq!(ds.find("trace_0003").unwrap().index(), 2);
    assert_eq!(
        ds.total_turns(),
        ds.trajectories().map(|t| t.num_turns()).sum::<usize>()
    );
}

#[test]
fn second_open_hits_and_damaged_entries_are_rebuilt() {
    let cache = tempfile::tempdir().unwrap();
    let path = fixture("traces-24.jsonl");
    let a = Dataset::open_path(&path, &opts(cache.path())).unwrap();
    assert_eq!(a.outcome(), Outcome::Built);
    let entry = a.cache_path().to_owned();
    let turns = a.total_turns();
    drop(a);
    let b = Dataset::open_path(&path, &opts(cache.path())).unwrap();
    assert_eq!(b.outcome(), Outcome::Hit);
    drop(b);
    // Truncated, then foreign, then a flipped body byte: each is detected and rebuilt.
    let bytes = std::fs::read(&entry).unwrap();
    std::fs::write(&entry, &bytes[..bytes.len() / 2]).unwrap();
    let c = Dataset::open_path(&path, &opts(cache.path())).unwrap();
    assert_eq!((c.outcome(), c.total_turns()), (Outcome::Rebuilt, turns));
    drop(c);
    std::fs::write(&entry, b"not a cache entry at all").unwrap();
    assert_eq!(
        Dataset::open_path(&path, &opts(cache.path()))
            .unwrap()
            .outcome(),
        Outcome::Rebuilt
    );
    let mut bad = std::fs::read(&entry).unwrap();
    let n = bad.len();
    bad[n - 100] ^= 0x55;
    std::fs::write(&entry, &bad).unwrap();
    assert_eq!(
        Dataset::open_path(&path, &opts(cache.path()))
            .unwrap()
            .outcome(),
        Outcome::Rebuilt
    );
    // A capped open is a different entry.
    let capped = Dataset::open_path(
        &path,
        &OpenOptions {
            num_dataset_entries: Some(5),
            ..opts(cache.path())
        },
    )
    .unwrap();
    assert_eq!((capped.len(), capped.outcome()), (5, Outcome::Built));
    assert_ne!(capped.cache_path(), entry);
}

#[test]
fn changed_source_gets_a_new_entry() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("traces.jsonl");
    let text = std::fs::read_to_string(fixture("traces-24.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    std::fs::write(&path, lines[..3].join("\n")).unwrap();
    let a = Dataset::open_path(&path, &opts(cache.path())).unwrap();
    assert_eq!(a.len(), 3);
    std::fs::write(&path, lines[..4].join("\n")).unwrap();
    let b = Dataset::open_path(&path, &opts(cache.path())).unwrap();
    assert_eq!((b.len(), b.outcome()), (4, Outcome::Built));
}

#[test]
fn concurrent_importers_build_once() {
    let cache = tempfile::tempdir().unwrap();
    let path = fixture("traces-24.jsonl");
    let children: Vec<_> = (0..4)
        .map(|_| {
            bin()
                .args(["dataset", "import", path.to_str().unwrap()])
                .env("AGENTX_DATASET_MMAP_CACHE_DIR", cache.path())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outs: Vec<String> = children
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().unwrap();
            assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
            String::from_utf8_lossy(&o.stdout).into_owned()
        })
        .collect();
    let built = outs.iter().filter(|o| o.contains("(Built)")).count();
    let hit = outs.iter().filter(|o| o.contains("(Hit)")).count();
    assert_eq!((built, hit), (1, 3), "{outs:?}");
    let entries: Vec<_> = std::fs::read_dir(cache.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            Path::new(n)
                .extension()
                .is_some_and(|ext| ext.eq_ignore_ascii_case("agxd"))
                || n.contains(".tmp.")
        })
        .collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
}

#[test]
fn invalid_traces_are_rejected_with_location() {
    let cache = tempfile::tempdir().unwrap();
    let cases = [
        (
            "unknown-field.jsonl",
            &[
                "unknown-field.jsonl:2",
                "trace \"bad_0002\"",
                "requests[1]",
                "unknown field `colour`",
            ][..],
        ),
        (
            "global-scope.jsonl",
            &["global-scope.jsonl:1", "hash_id_scope", "\"global\""],
        ),
        (
            "duplicate-id.jsonl",
            &[
                "duplicate-id.jsonl:2",
                "duplicate trace id",
                "duplicate-id.jsonl:1",
            ],
        ),
        (
            "wrong-type.jsonl",
            &[
                "wrong-type.jsonl:1",
                "requests[0].out",
                "invalid value",
                "\"two\"",
            ],
        ),
        (
            "truncated.jsonl",
            &["truncated.jsonl:1:", "one complete JSON trace object"],
        ),
    ];
    for (file, needles) in cases {
        let path = fixture("invalid").join(file);
        let (code, _, err) = run(
            &["dataset", "import", path.to_str().unwrap()],
            cache.path(),
            &[],
        );
        assert_eq!(code, 2, "{file}: {err}");
        for n in needles {
            assert!(err.contains(n), "{file}: {n:?} not in {err}");
        }
        assert!(!err.contains("panicked"), "{err}");
    }
}

/// Checks beyond aiperf's are warnings: the corpus imports, `import`/`stats` count them by kind with
/// their first places (also from a warm cache), and `--strict` refuses the corpus naming file:line.
#[test]
fn warnings_are_counted_and_strict_refuses_them() {
    let cache = tempfile::tempdir().unwrap();
    let f = fixture("warn").join("warnings.jsonl");
    let f = f.to_str().unwrap();
    let expected = [
        (
            "coerced_number",
            3,
            "warnings.jsonl:1: trace \"warn_coerced\": requests[0].in:",
        ),
        (
            "zero_input",
            1,
            "warnings.jsonl:1: trace \"warn_coerced\": requests[1].in:",
        ),
        (
            "hash_id_out_of_range",
            1,
            "warnings.jsonl:2: trace \"warn_hash\": requests[1].hash_ids[2]:",
        ),
        (
            "negative_tokens",
            1,
            "warnings.jsonl:2: trace \"warn_hash\": requests[1].out:",
        ),
        (
            "invalid_time",
            2,
            "warnings.jsonl:3: trace \"warn_time\": requests[0].t:",
        ),
        (
            "invalid_duration",
            3,
            "warnings.jsonl:3: trace \"warn_time\": requests[1].think_time:",
        ),
        (
            "decreasing_time",
            1,
            "warnings.jsonl:3: trace \"warn_time\": requests[2].t:",
        ),
        ("empty_id", 1, "warnings.jsonl:4: trace \"\": id:"),
        (
            "short_first_request",
            1,
            "warnings.jsonl:4: trace \"\": requests[0].hash_ids:",
        ),
    ];
    let check = |v: &serde_json::Value| {
        let w = &v["warnings"];
        assert_eq!(w["total"], 14, "{w}");
        assert_eq!(
            w["by_kind"].as_object().unwrap().len(),
            expected.len(),
            "{w}"
        );
        for (kind, count, first) in expected {
            let k = &w["by_kind"][kind];
            assert_eq!(k["count"], count, "{kind}: {w}");
            let places = k["first"].as_array().unwrap();
            assert!(
                places[0].as_str().unwrap().contains(&format!("/{first}")),
                "{kind}: {places:?}"
            );
        }
    };
    // Cold import, then stats from the warm entry: the same report.
    let (code, out, err) = run(&["dataset", "import", f, "--json"], cache.path(), &[]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["traces"].as_u64(), v["outcome"].as_str()),
        (Some(5), Some("Built"))
    );
    check(&v);
    assert!(err.contains("14 import warnings"), "{err}");
    let (code, out, err) = run(&["dataset", "stats", f, "--json"], cache.path(), &[]);
    assert_eq!(code, 0, "{err}");
    check(&serde_json::from_str(&out).unwrap());
    let (code, out, _) = run(&["dataset", "import", f], cache.path(), &[]);
    assert_eq!(code, 0);
    assert!(out.contains("warnings     14"), "{out}");
    assert!(
        out.contains("invalid_duration") && out.contains("warnings.jsonl:3:"),
        "{out}"
    );
    let (code, out, _) = run(&["dataset", "stats", f], cache.path(), &[]);
    assert_eq!(code, 0);
    assert!(
        out.contains("zero_input") && out.contains("warnings.jsonl:1:"),
        "{out}"
    );
    // A turn with `in: 0` and one after out-of-range hash ids still synthesize prompts.
    for (trace, turn) in [("warn_coerced", "1"), ("warn_hash", "1"), ("warn_nan", "1")] {
        let (code, out, err) = run(
            &["dataset", "inspect", f, "--trace", trace, "--turn", turn],
            cache.path(),
            &[],
        );
        assert_eq!(code, 0, "{trace}: {err}");
        assert!(
            serde_json::from_str::<serde_json::Value>(&out).is_ok(),
            "{out}"
        );
    }
    // --strict: an error naming file:line of each kind, from the warm entry and from a cold import.
    let cold = tempfile::tempdir().unwrap();
    for dir in [cache.path(), cold.path()] {
        for cmd in ["import", "stats"] {
            let (code, _, err) = run(&["dataset", cmd, f, "--strict"], dir, &[]);
            assert_eq!(code, 2, "{err}");
            assert!(
                err.contains("--strict") && err.contains("14 warnings"),
                "{err}"
            );
            for (kind, _, first) in expected {
                assert!(err.contains(first) && err.contains(kind), "{kind}: {err}");
            }
        }
    }
    // The library agrees: the views hold the clamped and remapped values.
    let ds = Dataset::open_path(Path::new(f), &opts(cache.path())).unwrap();
    assert_eq!(ds.warnings().total, 14);
    assert!(ds.check_strict().is_err());
    let t = ds.find("warn_hash").unwrap().turn(1).unwrap();
    assert_eq!(t.output_tokens(), 0);
    let ids: Vec<u32> = t.hash_ids().iter().collect();
    assert_eq!((ids[2], ids[4]), (u32::MAX, u32::MAX));
    assert_eq!(ids[3], u32::MAX - 1);
    let t = ds.find("warn_nan").unwrap().turn(1).unwrap();
    assert_eq!((t.t(), t.num_hash_ids()), (0.0, 0));
    // A clean corpus has no warnings and passes --strict.
    let clean = fixture("traces-24.jsonl");
    let (code, out, err) = run(
        &["dataset", "import", clean.to_str().unwrap(), "--strict"],
        cache.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("warnings     0"), "{out}");
}

/// What was refused before but is now only a warning: the adversarial fixtures that aiperf accepts.
#[test]
fn former_errors_that_aiperf_accepts_import_with_warnings() {
    let cache = tempfile::tempdir().unwrap();
    for (file, kind, place) in [
        (
            "time-backwards.jsonl",
            "decreasing_time",
            "time-backwards.jsonl:1: trace \"ok_0001\": requests[2].t",
        ),
        (
            "negative-think.jsonl",
            "invalid_duration",
            "requests[1].think_time",
        ),
        (
            "short-system.jsonl",
            "short_first_request",
            "requests[0].hash_ids",
        ),
    ] {
        let path = fixture("invalid").join(file);
        let p = path.to_str().unwrap();
        let (code, out, err) = run(&["dataset", "stats", p, "--json"], cache.path(), &[]);
        assert_eq!(code, 0, "{file}: {err}");
        let v: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["warnings"]["by_kind"][kind]["count"], 1, "{file}: {out}");
        let (code, _, err) = run(&["dataset", "import", p, "--strict"], cache.path(), &[]);
        assert_eq!(code, 2, "{file}");
        assert!(err.contains(place) && err.contains(kind), "{file}: {err}");
    }
}

#[test]
fn aliases_resolve_from_the_hub_cache_or_name_the_download_command() {
    let cache = tempfile::tempdir().unwrap();
    let hub = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let (code, _, err) = run(
        &["dataset", "import", "semianalysis_cc_traces_weka"],
        cache.path(),
        &[
            ("HF_HUB_CACHE", hub.path()),
            ("HOME", home.path()),
            ("HF_HOME", home.path()),
        ],
    );
    assert_eq!(code, 2);
    assert!(
        err.contains(
            "hf download semianalysisai/cc-traces-weka-no-subagents-051826 --repo-type dataset"
        ),
        "{err}"
    );
    let snap = hub
        .path()
        .join("datasets--semianalysisai--cc-traces-weka-no-subagents-051826/snapshots/0ae681ae");
    std::fs::create_dir_all(&snap).unwrap();
    std::fs::copy(fixture("traces-24.jsonl"), snap.join("traces.jsonl")).unwrap();
    let (code, out, err) = run(
        &["dataset", "import", "semianalysis_cc_traces_weka"],
        cache.path(),
        &[("HF_HUB_CACHE", hub.path()), ("HOME", home.path())],
    );
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("semianalysisai/cc-traces-weka-no-subagents-051826")
            && out.contains("traces       24"),
        "{out}"
    );
    let (code, _, err) = run(&["dataset", "import", "no_such_corpus"], cache.path(), &[]);
    assert_eq!(code, 2);
    assert!(err.contains("semianalysis_cc_traces_weka"), "{err}");
}

#[test]
fn a_directory_of_json_traces_equals_its_jsonl() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(fixture("traces-24.jsonl")).unwrap();
    for (i, line) in text.lines().take(6).enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        std::fs::write(
            dir.path().join(format!("trace_{i:04}.json")),
            serde_json::to_string_pretty(&v).unwrap(),
        )
        .unwrap();
    }
    std::fs::write(dir.path().join("README.md"), "not a trace").unwrap();
    let d = Dataset::open_path(dir.path(), &opts(cache.path())).unwrap();
    let j = Dataset::open_path(&fixture("traces-24.jsonl"), &opts(cache.path())).unwrap();
    assert_eq!(d.len(), 6);
    for (a, b) in d.trajectories().zip(j.trajectories()) {
        assert_eq!(a.id(), b.id());
        for (x, y) in a.turns().zip(b.turns()) {
            assert_eq!(x.hash_ids().to_vec(), y.hash_ids().to_vec());
        }
    }
    // A pretty-printed file reports its own line.
    let bad = dir.path().join("trace_0001.json");
    let t = std::fs::read_to_string(&bad).unwrap().replacen(
        "\"block_size\": 64",
        "\"block_size\": -64",
        1,
    );
    std::fs::write(&bad, t).unwrap();
    let e = Dataset::open_path(dir.path(), &opts(cache.path()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("trace_0001.json:") && e.contains("block_size"),
        "{e}"
    );
}

/// Recorded-mode invariants on every turn of the fixture: exactly `in` words, ends with a user message,
/// turn k's text starts with turn k-1's kept blocks, and the JSON is valid.
#[test]
fn recorded_prompts_have_exact_lengths_and_shared_prefixes() {
    let cache = tempfile::tempdir().unwrap();
    let ds = Dataset::open_path(&fixture("traces-24.jsonl"), &opts(cache.path())).unwrap();
    let synth = PromptSynth::new(42);
    let mut resets = 0;
    for traj in ds.trajectories() {
        let mut conv = synth
            .conversation(traj, 0, AssistantMode::Recorded)
            .unwrap();
        let mut prev_text = String::new();
        loop {
            let k = conv.turn();
            let turn = traj.turn(k).unwrap();
            let msgs = conv.messages(None);
            let text: String = msgs.iter().map(|m| m.content.as_str()).collect();
            assert_eq!(
                TokenCounter::Words.count(&text),
                u64::from(turn.input_tokens()),
                "{} turn {k}",
                traj.id()
            );
            assert_eq!(conv.prompt_words(), u64::from(turn.input_tokens()));
            assert_eq!(msgs.last().unwrap().role, "user", "{} turn {k}", traj.id());
            if k == 0 {
                assert_eq!(msgs[0].role, "system");
                assert_eq!(
                    TokenCounter::Words.count(&msgs[0].content),
                    traj.system_blocks() as u64 * 64
                );
            } else {
                let prev = traj.turn(k - 1).unwrap();
                let keep = turn
                    .lcp_with_previous()
                    .min(prev.input_tokens() as usize / 64)
                    .min(turn.input_tokens() as usize / 64);
                let words: Vec<&str> = prev_text.split(' ').skip(1).take(keep * 64).collect();
                let kept = format!(" {}", words.join(" "));
                assert!(
                    keep == 0 || text.starts_with(&kept),
                    "{} turn {k}: prefix of {keep} blocks differs",
                    traj.id()
                );
                if conv.step_info().reset {
                    resets += 1;
                }
            }
            prev_text = text;
            if conv.is_final() {
                break;
            }
            conv.advance(None).unwrap();
        }
    }
    assert!(resets > 0, "the fixture has non-monotonic cuts");
}

#[test]
fn text_depends_on_seed_and_trace_only() {
    let cache = tempfile::tempdir().unwrap();
    let ds = Dataset::open_path(&fixture("traces-24.jsonl"), &opts(cache.path())).unwrap();
    let body = |seed: u64, i: usize, k: usize| {
        let s = PromptSynth::new(seed);
        let c = s
            .conversation(ds.trajectory(i).unwrap(), k, AssistantMode::Recorded)
            .unwrap();
        let mut out = Vec::new();
        c.write_messages_json(&mut out, None);
        out
    };
    assert_eq!(body(1, 0, 3), body(1, 0, 3));
    assert_ne!(body(1, 0, 3), body(2, 0, 3));
    // Both traces number hash ids from 1, yet their first blocks differ.
    let first_block = |i: usize| {
        let s = PromptSynth::new(1);
        let c = s
            .conversation(ds.trajectory(i).unwrap(), 0, AssistantMode::Recorded)
            .unwrap();
        c.messages(None)[0]
            .content
            .split(' ')
            .take(65)
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_ne!(first_block(0), first_block(1));
    // A session started at turn k has the same messages as one advanced from 0.
    let s = PromptSynth::new(1);
    let traj = ds.trajectory(0).unwrap();
    let mut c = s.conversation(traj, 0, AssistantMode::Recorded).unwrap();
    for _ in 0..5 {
        c.advance(None).unwrap();
    }
    assert_eq!(
        c.messages(None),
        s.conversation(traj, 5, AssistantMode::Recorded)
            .unwrap()
            .messages(None)
    );
}

#[test]
fn cache_bust_markers_are_placed_and_escaped() {
    let cache = tempfile::tempdir().unwrap();
    let ds = Dataset::open_path(&fixture("traces-24.jsonl"), &opts(cache.path())).unwrap();
    let s = PromptSynth::new(7);
    let c = s
        .conversation(ds.trajectory(0).unwrap(), 2, AssistantMode::Recorded)
        .unwrap();
    let plain = c.messages(None);
    let marker = "[rid:0123456789ab]\n\n";
    let m = c.messages(Some(CacheBust {
        placement: Placement::FirstUserPrefix,
        text: marker,
    }));
    let u = plain.iter().position(|m| m.role == "user").unwrap();
    assert_eq!(m[u].content, format!("{marker}{}", plain[u].content));
    let m = c.messages(Some(CacheBust {
        placement: Placement::SystemSuffix,
        text: "\n\n[rid:x]",
    }));
    assert_eq!(m[0].content, format!("{}\n\n[rid:x]", plain[0].content));
    for (i, x) in m.iter().enumerate().skip(1) {
        assert_eq!(x, &plain[i]);
    }
    let mut esc = Vec::new();
    push_json_escaped(&mut esc, "a\"b\\c\n\u{1}");
    assert_eq!(String::from_utf8(esc).unwrap(), "a\\\"b\\\\c\\n\\u0001");
}

#[test]
fn live_mode_threads_replies_and_skips_assistant_segments() {
    let cache = tempfile::tempdir().unwrap();
    let ds = Dataset::open_path(&fixture("traces-24.jsonl"), &opts(cache.path())).unwrap();
    let s = PromptSynth::new(3);
    let traj = ds.trajectories().find(|t| t.num_turns() > 6).unwrap();
    let mut c = s.conversation(traj, 2, AssistantMode::Live).unwrap();
    let m = c.messages(None);
    assert!(m.iter().all(|m| m.role != "assistant"));
    assert_eq!(m.last().unwrap().role, "user");
    let before = m.len();
    let info = c.advance(Some("the \"real\" reply\n")).unwrap();
    let m = c.messages(None);
    assert_eq!(m.last().unwrap().role, "user");
    if !info.reset {
        assert_eq!(m[before].role, "assistant");
        assert_eq!(m[before].content, "the \"real\" reply\n");
        assert_eq!(m.len(), before + 2);
    }
    let flags = sendable_starts(traj, AssistantMode::Live, Tiling::RecordedLength);
    assert!(flags[0]);
    assert_eq!(flags.len(), traj.num_turns());
    // Whole sessions: every request ends with a user message; replies accumulate until a reset
    // rebuilds the history from the trace.
    let mut resets = 0;
    for traj in ds.trajectories() {
        let mut c = s.conversation(traj, 0, AssistantMode::Live).unwrap();
        let mut replies = 0;
        while !c.is_final() {
            let info = c.advance(Some("ok")).unwrap();
            replies = if info.reset { 0 } else { replies + 1 };
            resets += usize::from(info.reset);
            let m = c.messages(None);
            assert_eq!(
                m.last().unwrap().role,
                "user",
                "{} turn {}",
                traj.id(),
                c.turn()
            );
            assert_eq!(m.iter().filter(|m| m.role == "assistant").count(), replies);
        }
    }
    assert!(resets > 0);
}

/// Session-tree streams in live mode keep the recorded history up to their first live reply: a
/// stream started mid-trace, and the history rebuilt after a reset, carry the recorded assistant
/// text and so exactly the turn's recorded prompt length (as aiperf's `DELTAS_WITH_RESPONSES`
/// back-fill, docs/agentx-v1-reference.md P3); a real reply replaces the recorded text of the turn
/// it answers, and a turn with no reply keeps it.
#[test]
fn tree_streams_keep_the_recorded_history_until_their_first_live_reply() {
    let cache = tempfile::tempdir().unwrap();
    let ds = Dataset::open_path(&fixture("traces-24.jsonl"), &opts(cache.path())).unwrap();
    let s = PromptSynth::new(3);
    let (mut started, mut rebuilt, mut replaced, mut kept) = (0, 0, 0, 0);
    for traj in ds.trajectories() {
        for start in 1..traj.num_turns() {
            let recorded = s
                .conversation(traj, start, AssistantMode::Recorded)
                .unwrap();
            let c = s
                .conversation(traj, start, AssistantMode::Live)
                .unwrap()
                .with_recorded_history();
            assert_eq!(
                c.prompt_words(),
                recorded.prompt_words(),
                "{} {start}",
                traj.id()
            );
            assert_eq!(c.messages(None), recorded.messages(None));
            started += 1;
        }
        let mut c = s
            .conversation(traj, 0, AssistantMode::Live)
            .unwrap()
            .with_recorded_history();
        let mut r = s.conversation(traj, 0, AssistantMode::Recorded).unwrap();
        let mut live_replies = 0;
        let recorded_text = |m: &[agentx::dataset::Message]| {
            m.iter()
                .filter(|m| m.role == "assistant" && m.content != "a live reply")
                .count()
        };
        let mut before = 0;
        while !c.is_final() {
            // Every other turn goes unanswered (a failed request): its recorded text stays.
            let reply = c.turn().is_multiple_of(2).then_some("a live reply");
            let info = c.advance(reply).unwrap();
            r.advance(None).unwrap();
            let m = c.messages(None);
            let answered = m.iter().filter(|m| m.content == "a live reply").count();
            if info.reset {
                // Rebuilt from the trace: the recorded history, the live replies dropped.
                assert_eq!(m, r.messages(None), "{} turn {}", traj.id(), c.turn());
                assert_eq!(c.prompt_words(), r.prompt_words());
                assert_eq!(answered, 0);
                live_replies = 0;
                rebuilt += 1;
            } else {
                live_replies += usize::from(reply.is_some());
                assert_eq!(answered, live_replies);
                replaced += usize::from(reply.is_some());
                if reply.is_none() {
                    kept += usize::from(recorded_text(&m) > before);
                }
            }
            before = recorded_text(&m);
            assert_eq!(m.last().unwrap().role, "user");
        }
    }
    assert!(started > 0 && rebuilt > 0 && replaced > 0 && kept > 0);
}

/// A recorded-mode body written a frame at a time is the body written at once, byte for byte and
/// at the length it announced, whatever the frame size, marker placement and escaping, at every
/// turn (tails, cuts and context resets included); live mode and the agent wire keep their pieces.
#[test]
fn messages_written_as_sent_equal_the_messages_written_at_once() {
    let cache = tempfile::tempdir().unwrap();
    let ds = Dataset::open_path(&fixture("traces-24.jsonl"), &opts(cache.path())).unwrap();
    let s = PromptSynth::new(11);
    let markers = [
        (None, ""),
        (Some(Placement::FirstUserPrefix), "[rid:feedfacecafe]\n\n"),
        (Some(Placement::FirstUserSuffix), "\n\"quoted\" \u{1}"),
        (Some(Placement::SystemPrefix), ""),
        (Some(Placement::SystemSuffix), "\n\n[rid:x]"),
    ];
    let mut requests = 0;
    for traj in ds.trajectories().take(6) {
        let mut c = s.conversation(traj, 0, AssistantMode::Recorded).unwrap();
        loop {
            for &(placement, text) in &markers {
                let bust = placement.map(|placement| CacheBust { placement, text });
                let mut whole = Vec::new();
                c.write_messages_json(&mut whole, bust);
                whole.pop(); // the closing `]`
                for budget in [1, 700, 1 << 20] {
                    let mut writer = c.messages_json_writer(bust).expect("recorded chat wire");
                    assert_eq!(writer.remaining(), whole.len() as u64);
                    let mut sent = Vec::new();
                    while writer.remaining() > 0 {
                        let mut frame = Vec::new();
                        writer.write_next(&mut frame, budget);
                        assert!(
                            !frame.is_empty(),
                            "{} turn {}: an empty frame",
                            traj.id(),
                            c.turn()
                        );
                        sent.extend_from_slice(&frame);
                    }
                    assert!(
                        sent == whole,
                        "{} turn {} budget {budget}",
                        traj.id(),
                        c.turn()
                    );
                    requests += 1;
                }
            }
            if c.is_final() {
                break;
            }
            c.advance(None).unwrap();
        }
    }
    assert!(requests > 100);
    let live = s
        .conversation(ds.trajectory(0).unwrap(), 0, AssistantMode::Live)
        .unwrap();
    assert!(live.messages_json_writer(None).is_none());
}

/// Live mode reuses the JSON of the messages already sent; every turn's bytes must equal a fresh
/// synthesis of the same history, whether written into one buffer or handed out as shared pieces
/// (whose number stays bounded however long the session runs).
#[test]
fn live_mode_json_reuse_equals_fresh_synthesis() {
    let cache = tempfile::tempdir().unwrap();
    let ds = Dataset::open_path(&fixture("traces-24.jsonl"), &opts(cache.path())).unwrap();
    let s = PromptSynth::new(5);
    let bust = Some(CacheBust {
        placement: Placement::FirstUserPrefix,
        text: "[rid:feedfacecafe]\n\n",
    });
    let mut max_turns = 0;
    for traj in ds.trajectories().take(8) {
        let reply = |k: usize| format!("reply {k} with \"quotes\"\n and words");
        let mut c = s.conversation(traj, 0, AssistantMode::Live).unwrap();
        let mut k = 0;
        loop {
            let parts = c.messages_json_parts(bust);
            assert!(parts.len() <= 9, "{} pieces at turn {k}", parts.len());
            let mut reused = Vec::new();
            c.write_messages_json(&mut reused, bust);
            let mut joined: Vec<u8> = parts.iter().flat_map(|p| p.iter().copied()).collect();
            joined.push(b']');
            assert!(joined == reused, "{} turn {k}: pieces differ", traj.id());
            max_turns = max_turns.max(k);
            let mut fresh_conv = s.conversation(traj, 0, AssistantMode::Live).unwrap();
            for j in 0..k {
                fresh_conv.advance(Some(&reply(j))).unwrap();
            }
            let mut fresh = Vec::new();
            fresh_conv.write_messages_json(&mut fresh, bust);
            assert!(reused == fresh, "{} turn {k}", traj.id());
            if c.is_final() {
                break;
            }
            c.advance(Some(&reply(k))).unwrap();
            k += 1;
        }
    }
    assert!(max_turns > 9, "no session long enough to merge pieces");
}

/// A hand-made trace whose second turn only adds assistant blocks: not a valid live session start.
#[test]
fn assistant_only_delta_is_not_a_live_start() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    // bs 4; turn 0: 3 blocks (1 system) = 12 tokens, out 8 -> 2 assistant blocks; turn 1 adds exactly
    // those 2 blocks and no tail; turn 2 adds one more block beyond the assistant's.
    let line = r#"{"id":"x","block_size":4,"hash_id_scope":"local","tool_tokens":2,"system_tokens":2,"requests":[
      {"t":0,"type":"n","in":12,"out":8,"hash_ids":[1,2,3]},
      {"t":1,"type":"n","in":20,"out":4,"hash_ids":[1,2,3,4,5]},
      {"t":2,"type":"n","in":30,"out":1,"hash_ids":[1,2,3,4,5,6,7]}]}"#
        .replace('\n', "");
    std::fs::write(&path, line).unwrap();
    let ds = Dataset::open_path(&path, &opts(cache.path())).unwrap();
    let traj = ds.trajectory(0).unwrap();
    assert_eq!(
        sendable_starts(traj, AssistantMode::Live, Tiling::RecordedLength),
        vec![true, false, true]
    );
    assert_eq!(
        sendable_starts(traj, AssistantMode::Recorded, Tiling::RecordedLength),
        vec![true, true, true]
    );
    let s = PromptSynth::new(0);
    // Recorded: turn 1 still ends with a user message (the last assistant block moves into it).
    let c = s.conversation(traj, 1, AssistantMode::Recorded).unwrap();
    let roles: Vec<String> = c.messages(None).into_iter().map(|m| m.role).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert_eq!(c.prompt_words(), 20);
    // Turn 2: in 30 = 7 blocks + 2 tail words; the assistant gets ceil(4/4)=1 block.
    let c = s.conversation(traj, 2, AssistantMode::Recorded).unwrap();
    let m = c.messages(None);
    assert_eq!(
        m.iter().map(|m| m.role.as_str()).collect::<Vec<_>>(),
        ["system", "user", "assistant", "user", "assistant", "user"]
    );
    assert_eq!(TokenCounter::Words.count(&m[5].content), 4 + 2);
}

#[test]
fn theoretical_hit_rates_follow_the_definitions() {
    let cache = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.jsonl");
    let line = r#"{"id":"x","block_size":1,"hash_id_scope":"local","requests":[
      {"t":0,"type":"n","in":3,"out":1,"hash_ids":[1,2,3]},
      {"t":1,"type":"n","in":2,"out":1,"hash_ids":[2,3]},
      {"t":2,"type":"n","in":4,"out":1,"hash_ids":[1,2,3,4]}]}"#
        .replace('\n', "");
    std::fs::write(&path, line).unwrap();
    let ds = Dataset::open_path(&path, &opts(cache.path())).unwrap();
    let h = theoretical_hits(ds.trajectory(0).unwrap(), usize::MAX);
    // set: 0 + 2 + 3 of 9; prefix: 0 + 0 + 3 of 9.
    assert_eq!((h.blocks, h.set_hits, h.prefix_hits), (9, 5, 3));
    let h1 = theoretical_hits(ds.trajectory(0).unwrap(), 1);
    assert_eq!((h1.blocks, h1.set_hits, h1.prefix_hits), (5, 2, 0));
    // aiperf's per-turn stamps: the leading run of already-sent blocks.
    assert_eq!(
        prefix_stamps(ds.trajectory(0).unwrap()),
        [(0, 3), (2, 2), (3, 4)]
    );
    let s = corpus_stats(&ds);
    assert_eq!((s.traces, s.requests, s.non_monotonic_cuts), (1, 3, 2));
}

/// The tokenizer-free model against real BPE vocabularies: total ISL error on synthesized prompts.
#[test]
fn word_model_matches_real_bpe_counts() {
    let cache = tempfile::tempdir().unwrap();
    let ds = Dataset::open_path(&fixture("traces-24.jsonl"), &opts(cache.path())).unwrap();
    let synth = PromptSynth::new(11);
    let bpes = [
        ("cl100k_base", tiktoken_rs::cl100k_base().unwrap()),
        ("o200k_base", tiktoken_rs::o200k_base().unwrap()),
    ];
    for (name, bpe) in &bpes {
        let (mut want, mut got) = (0u64, 0u64);
        for traj in ds.trajectories() {
            for k in [0, traj.num_turns() / 2, traj.num_turns() - 1] {
                let c = synth
                    .conversation(traj, k, AssistantMode::Recorded)
                    .unwrap();
                want += u64::from(traj.turn(k).unwrap().input_tokens());
                got += c
                    .messages(None)
                    .iter()
                    .map(|m| bpe.encode_ordinary(&m.content).len() as u64)
                    .sum::<u64>();
            }
        }
        let err = (got as f64 - want as f64) / want as f64;
        println!(
            "{name}: recorded ISL {want}, BPE count {got}, error {:+.4}%",
            100.0 * err
        );
        assert!(err.abs() < 0.02, "{name}: error {err}");
    }
}

#[test]
fn synth_is_deterministic_and_the_fixture_is_its_output() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.jsonl");
    // The exact command that made fixtures/traces-24.jsonl (see fixtures/README.md).
    let (code, out, err) = run(
        &[
            "dataset",
            "synth",
            "--traces",
            "24",
            "--seed",
            "7",
            "--max-isl",
            "64000",
            "--max-turns",
            "24",
            "-o",
            a.to_str().unwrap(),
        ],
        dir.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("wrote 24 traces"), "{out}");
    assert_eq!(
        std::fs::read(&a).unwrap(),
        std::fs::read(fixture("traces-24.jsonl")).unwrap()
    );
    let b = dir.path().join("b.jsonl");
    write_corpus(
        &SynthOptions {
            traces: 3,
            seed: 8,
            max_isl: None,
            max_turns: Some(10),
            context: None,
            subagents: false,
        },
        &b,
    )
    .unwrap();
    assert_ne!(
        std::fs::read(&b).unwrap()[..200],
        std::fs::read(&a).unwrap()[..200]
    );
}

#[test]
fn synth_subagents_and_its_tree_stats() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("sa.jsonl");
    let args = |out: &Path| {
        vec![
            "dataset".to_owned(),
            "synth".into(),
            "--subagents".into(),
            "--traces".into(),
            "12".into(),
            "--seed".into(),
            "5".into(),
            "--max-turns".into(),
            "40".into(),
            "-o".into(),
            out.to_str().unwrap().into(),
        ]
    };
    let argv = args(&a);
    let (code, out, err) = run(
        &argv.iter().map(String::as_str).collect::<Vec<_>>(),
        dir.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("wrote 12 traces"), "{out}");
    let b = dir.path().join("sa2.jsonl");
    let argv = args(&b);
    let (code, _, err) = run(
        &argv.iter().map(String::as_str).collect::<Vec<_>>(),
        dir.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    let cache = tempfile::tempdir().unwrap();
    let (code, out, err) = run(
        &["dataset", "stats", a.to_str().unwrap(), "--json"],
        cache.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    // The existing keys stay; the trees block is added.
    assert_eq!(v["traces"], 12);
    assert!(v["subagents_ignored"].as_u64().unwrap() > 0);
    assert!(v["theoretical_hit_rate_set"].as_f64().unwrap() > 0.5);
    let t = &v["trees"];
    assert_eq!(t["trees"], 12);
    assert_eq!(t["unbuildable"], 0);
    assert_eq!(t["nested_basis"], "absolute");
    assert_eq!(t["depth"]["max"], 1.0);
    assert!(t["streams_per_tree"]["max"].as_f64().unwrap() >= 3.0);
    assert!(t["overlap"]["max"].as_f64().unwrap() >= 3.0);
    assert!(t["children_per_branch"]["max"].as_f64().unwrap() >= 2.0);
    assert!(t["subagent_streams"].as_u64().unwrap() > 0);
    for k in ["fa", "aux", "reduction", "wg"] {
        assert!(t["flat_chains"][k].is_u64(), "{k}");
    }
    assert!(t["background_branches"].is_u64());
    let (code, out, _) = run(
        &["dataset", "stats", a.to_str().unwrap()],
        cache.path(),
        &[],
    );
    assert_eq!(code, 0);
    for want in [
        "session trees",
        "streams per tree",
        "overlap",
        "flat chains",
        "background",
    ] {
        assert!(out.contains(want), "{want}: {out}");
    }
}

#[test]
fn stats_and_inspect_commands() {
    let cache = tempfile::tempdir().unwrap();
    let f = fixture("traces-24.jsonl");
    let (code, out, err) = run(
        &["dataset", "stats", f.to_str().unwrap(), "--json"],
        cache.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["traces"], 24);
    let rate = v["theoretical_hit_rate_set"].as_f64().unwrap();
    assert!(rate > 0.8 && rate < 1.0, "{rate}");
    assert!(v["isl"]["p50"].as_f64().unwrap() > 0.0);
    // No subagent entries: trees of the root alone but for three flat chains.
    assert_eq!(v["trees"]["trees"], 24);
    assert_eq!(v["trees"]["subagent_streams"], 0);
    assert_eq!(v["trees"]["streams_per_tree"]["p50"], 1.0);
    let (code, out, _) = run(
        &["dataset", "stats", f.to_str().unwrap()],
        cache.path(),
        &[],
    );
    assert_eq!(code, 0);
    assert!(
        out.contains("theoretical hit rate (set)") && out.contains("isl"),
        "{out}"
    );
    let (code, out, _) = run(
        &["dataset", "inspect", f.to_str().unwrap()],
        cache.path(),
        &[],
    );
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 25);
    let (code, out, _) = run(
        &[
            "dataset",
            "inspect",
            f.to_str().unwrap(),
            "--trace",
            "trace_0002",
        ],
        cache.path(),
        &[],
    );
    assert_eq!(code, 0);
    assert!(out.contains("live_start"), "{out}");
    let (code, out, err) = run(
        &[
            "dataset",
            "inspect",
            f.to_str().unwrap(),
            "--index",
            "1",
            "--turn",
            "2",
            "--mode",
            "live",
        ],
        cache.path(),
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let msgs: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(msgs.as_array().unwrap().last().unwrap()["role"], "user");
    let (code, _, err) = run(
        &["dataset", "inspect", f.to_str().unwrap(), "--trace", "nope"],
        cache.path(),
        &[],
    );
    assert_eq!(code, 2);
    assert!(err.contains("--trace \"nope\""), "{err}");
}

/// An exact tokenizer from a tokenizer.json: synthesis keeps only its single-token words.
#[test]
fn hf_tokenizer_counts_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let words = ["the", "and", "for", "this", "that", "with"];
    let vocab: serde_json::Map<String, serde_json::Value> = words
        .iter()
        .enumerate()
        .map(|(i, w)| (w.to_string(), serde_json::json!(i)))
        .collect();
    let tj = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
        "pre_tokenizer": {"type": "WhitespaceSplit"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "<unk>"}
    });
    let path = dir.path().join("tokenizer.json");
    std::fs::write(&path, tj.to_string()).unwrap();
    let counter = TokenCounter::from_file(&path).unwrap();
    // Words outside the vocabulary cannot be encoded, so synthesis keeps exactly these six.
    assert_eq!(counter.vocabulary().unwrap().distinct(), words.len());
    assert_eq!(counter.count(" the and with"), 3);
    let cache = tempfile::tempdir().unwrap();
    let ds = Dataset::open_path(&fixture("traces-24.jsonl"), &opts(cache.path())).unwrap();
    let synth = PromptSynth::for_counter(5, &counter);
    let traj = ds.trajectory(3).unwrap();
    let c = synth
        .conversation(traj, 1, AssistantMode::Recorded)
        .unwrap();
    let n: u64 = c
        .messages(None)
        .iter()
        .map(|m| counter.count(&m.content))
        .sum();
    assert_eq!(n, u64::from(traj.turn(1).unwrap().input_tokens()));
    let e = TokenCounter::from_file(&dir.path().join("missing.json"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("missing.json"), "{e}");
}

/// A dataset directory is read through the directory itself: an entry that is a symlink leading
/// outside it is refused by name, before anything is imported.
#[test]
fn a_symlink_leading_outside_a_dataset_directory_is_refused() {
    let cache = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let lines: Vec<String> = std::fs::read_to_string(fixture("traces-24.jsonl"))
        .unwrap()
        .lines()
        .take(2)
        .map(str::to_owned)
        .collect();
    std::fs::write(dir.path().join("a.json"), &lines[0]).unwrap();
    std::fs::write(outside.path().join("b.json"), &lines[1]).unwrap();
    // Inside the directory the corpus opens.
    assert_eq!(
        Dataset::open_path(dir.path(), &opts(cache.path()))
            .unwrap()
            .len(),
        1
    );
    std::os::unix::fs::symlink(outside.path().join("b.json"), dir.path().join("b.json")).unwrap();
    let e = Dataset::open_path(dir.path(), &opts(cache.path()))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("b.json") && e.contains("is a symlink that leads outside it"),
        "{e}"
    );
}
