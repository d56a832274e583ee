//! The scenario engine against real components: the bundled guests, numpy's golden vectors, and
//! adversarial components written as WAT in `fixtures/wat/`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use agentx::scenario::types::*;
use agentx::scenario::{Limits, Scenario, ScenarioEngine, ScenarioError};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub(crate) fn dist(name: &str) -> PathBuf {
    root().join("guest-scenarios/dist").join(name)
}

fn engine() -> ScenarioEngine {
    ScenarioEngine::new(Limits::default(), None).unwrap()
}

pub(crate) fn load(name: &str) -> Scenario {
    engine().load(&dist(name), None).unwrap()
}

/// Compile a WAT fixture to a component file in `dir`.
fn wat_fixture(dir: &Path, name: &str) -> PathBuf {
    let src = root().join("fixtures/wat").join(name);
    let bytes = wat::parse_file(&src).unwrap_or_else(|e| panic!("{}: {e}", src.display()));
    let out = dir.join(name.replace(".wat", ".wasm"));
    std::fs::write(&out, bytes).unwrap();
    out
}

fn sums() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(dist("SHA256SUMS")).unwrap();
    text.lines()
        .filter_map(|l| l.split_once(char::is_whitespace))
        .map(|(h, f)| (h.to_string(), f.trim().trim_start_matches('*').to_string()))
        .collect()
}

#[test]
fn bundled_components_match_sha256sums() {
    let sums = sums();
    assert!(sums.len() >= 2, "SHA256SUMS lists both components");
    for (hash, file) in sums {
        let sc = load(&file);
        assert_eq!(sc.hash(), hash, "{file}");
        // Pinned loads accept the right hash.
        engine().load(&dist(&file), Some(&hash)).unwrap();
    }
}

#[test]
fn describe_names_the_scenarios() {
    let info = load("agentx-mvp.wasm")
        .instantiate()
        .unwrap()
        .describe()
        .unwrap();
    assert_eq!(info.name, "inferencex-agentx-mvp");
    let locked: Vec<&str> = info.locks.iter().map(|l| l.setting.as_str()).collect();
    for s in [
        "timing-mode",
        "ignore-eos",
        "use-think-time-only",
        "synthesis-max-isl",
        "loader",
        "benchmark-duration",
        "inter-turn-delay-cap-seconds",
        "cache-bust",
        "concurrency",
    ] {
        assert!(locked.contains(&s), "agentx-mvp locks {s}: {locked:?}");
    }
    let kvct = load("kvct-v01.wasm")
        .instantiate()
        .unwrap()
        .describe()
        .unwrap();
    assert_ne!(kvct.name, info.name);
}

fn setting(name: &str, value: Value, explicit: bool) -> Setting {
    Setting {
        name: name.into(),
        value,
        explicit,
    }
}

fn get<'a>(r: &'a Resolved, name: &str) -> &'a Value {
    &r.settings
        .iter()
        .find(|s| s.name == name)
        .unwrap_or_else(|| panic!("resolved settings lack {name}"))
        .value
}

#[test]
fn resolve_applies_locks_and_draws_a_seed() {
    let mut i = load("agentx-mvp.wasm").instantiate().unwrap();
    let given = vec![
        setting("concurrency", Value::Integers(vec![8]), true),
        setting("benchmark-duration", Value::Number(1800.0), true),
        setting("loader", Value::Text("weka_trace".into()), true),
    ];
    let r = i.resolve(&given, 0xFFFF_FFFF_FFFF_FFFF).unwrap().unwrap();
    assert!(r.seed_drawn);
    assert_eq!(r.seed, 0x7FFF_FFFF_FFFF_FFFF, "63 bits of the entropy");
    assert!(r.invalid_reasons.is_empty());
    assert_eq!(get(&r, "ignore-eos"), &Value::Flag(true));
    assert_eq!(get(&r, "use-think-time-only"), &Value::Flag(true));
    assert_eq!(
        get(&r, "cache-bust"),
        &Value::Text("first_turn_prefix".into())
    );
    assert_eq!(
        get(&r, "inter-turn-delay-cap-seconds"),
        &Value::Number(60.0)
    );

    let given = vec![
        setting("concurrency", Value::Integers(vec![8, 16]), true),
        setting("benchmark-duration", Value::Number(600.0), true),
        setting("ignore-eos", Value::Flag(false), true),
        setting("inter-turn-delay-cap-seconds", Value::Number(30.0), true),
        setting("cache-bust", Value::Text("system_prefix".into()), true),
        setting("synthesis-max-isl", Value::Integer(4096), true),
        setting("request-rate", Value::Number(2.0), true),
        setting("random-seed", Value::Integer(42), true),
    ];
    let violations = i.resolve(&given, 1).unwrap().unwrap_err();
    let names: Vec<&str> = violations.iter().map(|v| v.setting.as_str()).collect();
    for s in [
        "concurrency",
        "benchmark-duration",
        "ignore-eos",
        "inter-turn-delay-cap-seconds",
        "cache-bust",
        "synthesis-max-isl",
        "request-rate",
    ] {
        assert!(names.contains(&s), "violation for {s} in {names:?}");
    }

    let mut overridden = given.clone();
    overridden.push(setting("unsafe-override", Value::Flag(true), true));
    let r = i.resolve(&overridden, 1).unwrap().unwrap();
    assert_eq!(r.seed, 42);
    assert!(!r.seed_drawn);
    assert_eq!(r.warnings.len(), violations.len());
    assert_eq!(r.invalid_reasons, vec!["unsafe_override".to_string()]);
}

/// One numpy vector: `[seed, trace_id, num_turns, min_ratio, max_ratio, unsendable, start_turn]`.
type GoldenVector = (u64, String, u32, f64, f64, Vec<u32>, Option<u32>);

/// `fixtures/golden/start_turn_vectors.json`, written by numpy (guest-scenarios/golden/).
#[derive(serde::Deserialize)]
struct Golden {
    start_turn: Vec<GoldenVector>,
}

#[test]
fn start_turns_match_numpy_golden_vectors() {
    let path = root().join("fixtures/golden/start_turn_vectors.json");
    let golden: Golden = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert!(
        golden.start_turn.len() >= 500,
        "{} vectors",
        golden.start_turn.len()
    );
    let mut i = load("agentx-mvp.wasm").instantiate().unwrap();
    let mut mismatches = Vec::new();
    for (seed, trace_id, n, min_ratio, max_ratio, unsendable, expected) in &golden.start_turn {
        let params = StartParams {
            seed: *seed,
            min_ratio: *min_ratio,
            max_ratio: *max_ratio,
        };
        let t = Trajectory {
            trace_id: trace_id.clone(),
            num_turns: *n,
            unsendable: unsendable.clone(),
        };
        let got = i.start_turn(params, &t).unwrap();
        if got != *expected {
            mismatches.push(format!(
                "seed={seed} id={trace_id:?} n={n} ratios={min_ratio}/{max_ratio}: numpy {expected:?}, component {got:?}"
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} mismatches, first: {:#?}",
        mismatches.len(),
        golden.start_turn.len(),
        &mismatches[..mismatches.len().min(5)]
    );
}

#[test]
fn plan_starts_agrees_with_start_turn() {
    let mut i = load("agentx-mvp.wasm").instantiate().unwrap();
    let params = StartParams {
        seed: 42,
        min_ratio: 0.25,
        max_ratio: 0.75,
    };
    let ts: Vec<Trajectory> = (0..200u32)
        .map(|j| Trajectory {
            trace_id: format!("trace_{j:04}"),
            num_turns: j % 60,
            unsendable: vec![j % 5],
        })
        .collect();
    let batch = i.plan_starts(params, &ts).unwrap();
    for (t, b) in ts.iter().zip(&batch) {
        assert_eq!(*b, i.start_turn(params, t).unwrap(), "{}", t.trace_id);
    }
}

#[test]
fn same_host_different_components_different_plans() {
    let params = StartParams {
        seed: 42,
        min_ratio: 0.0,
        max_ratio: 0.7,
    };
    let ts: Vec<Trajectory> = (0..64u32)
        .map(|j| Trajectory {
            trace_id: format!("trace_{j:04}"),
            num_turns: 40 + j,
            unsendable: vec![],
        })
        .collect();
    let session = SessionId {
        run_id: "run".into(),
        recycle_pass: 0,
        lane: 3,
        trace_id: "trace_0003".into(),
    };
    let mut mvp = load("agentx-mvp.wasm").instantiate().unwrap();
    let mut kvct = load("kvct-v01.wasm").instantiate().unwrap();
    let a = mvp.plan_starts(params, &ts).unwrap();
    let b = kvct.plan_starts(params, &ts).unwrap();
    let ma = mvp
        .cache_bust(Placement::FirstTurnPrefix, &session)
        .unwrap();
    let mb = kvct
        .cache_bust(Placement::FirstTurnPrefix, &session)
        .unwrap();
    assert!(
        a != b || ma.text != mb.text,
        "the two scenarios must plan differently"
    );
    assert_ne!(ma.text, mb.text);
    assert!(ma.text.starts_with("[rid:"), "{:?}", ma.text);
}

#[test]
fn cache_bust_marker_is_sha256_of_the_session() {
    use sha2::{Digest, Sha256};
    let mut i = load("agentx-mvp.wasm").instantiate().unwrap();
    let s = SessionId {
        run_id: "0f7c2a4e-1d2b-4c3a-9e8f-123456789abc".into(),
        recycle_pass: 2,
        lane: 11,
        trace_id: "会话🙂".into(),
    };
    let hex = hex::encode(Sha256::digest(format!(
        "{}:{}:{}:{}",
        s.run_id, s.recycle_pass, s.lane, s.trace_id
    )));
    let m = i.cache_bust(Placement::FirstTurnPrefix, &s).unwrap();
    assert_eq!(m.text, format!("[rid:{}]\n\n", &hex[..12]));
    assert_eq!(m.placement, Placement::FirstTurnPrefix);
    let m = i.cache_bust(Placement::SystemSuffix, &s).unwrap();
    assert_eq!(m.text, format!("\n\n[rid:{}]", &hex[..12]));
    assert_eq!(m.placement, Placement::SystemSuffix);
    let m = i.cache_bust(Placement::None, &s).unwrap();
    assert_eq!((m.text.as_str(), m.placement), ("", Placement::None));
}

#[test]
fn turn_delay_and_validity() {
    let mut instance = load("agentx-mvp.wasm").instantiate().unwrap();
    let params = DelayParams {
        think_time_only: true,
        cap_seconds: Some(60.0),
    };
    let d = |instance: &mut agentx::scenario::ScenarioInstance, think, gap| {
        instance
            .turn_delay(
                params,
                TurnTiming {
                    think_time: think,
                    timestamp_gap: gap,
                },
            )
            .unwrap()
    };
    assert_eq!(d(&mut instance, Some(12.0), Some(19.0)), 12.0);
    assert_eq!(d(&mut instance, None, Some(19.0)), 19.0);
    assert_eq!(d(&mut instance, Some(600.0), None), 60.0);
    assert_eq!(d(&mut instance, None, None), 0.0);

    let o = |overflows, cancelled, unsafe_override| Outcome {
        total_responses: 1000,
        context_overflows: overflows,
        failed: 0,
        cancelled,
        unsafe_override,
        overflow_rate_limit: 0.01,
    };
    assert!(
        instance.validity(o(10, false, false)).unwrap().is_empty(),
        "1% is not over 1%"
    );
    assert_eq!(
        instance.validity(o(11, false, false)).unwrap(),
        vec!["context_overflow_rate_exceeded".to_string()]
    );
    let r = instance.validity(o(0, true, true)).unwrap();
    assert!(r.contains(&"run_cancelled".to_string()), "{r:?}");
    assert!(r.contains(&"unsafe_override".to_string()), "{r:?}");
    let empty = Outcome {
        total_responses: 0,
        ..o(0, false, false)
    };
    assert!(instance.validity(empty).unwrap().is_empty());
}

#[test]
fn classify_error_on_real_server_bodies() {
    let mut i = load("agentx-mvp.wasm").instantiate().unwrap();
    let overflow = [
        // vLLM
        (
            400,
            r#"{"object":"error","message":"This model's maximum context length is 32768 tokens. However, you requested 33000 tokens (32000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#,
        ),
        // llama.cpp server
        (
            400,
            r#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error","n_prompt_tokens":5000,"n_ctx":4096}}"#,
        ),
        // OpenAI
        (
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
        ),
        // Anthropic-style wording behind a proxy
        (
            400,
            r#"{"error":"prompt is too long: 210000 tokens > 200000 maximum"}"#,
        ),
    ];
    for (status, body) in overflow {
        let c = i
            .classify_error(
                &ErrorResponse {
                    status,
                    body_excerpt: body.into(),
                },
                None,
            )
            .unwrap();
        assert_eq!(c.class, ErrorClass::ContextOverflow, "{body}");
        assert!(c.matched.is_some());
    }
    let other = ErrorResponse {
        status: 500,
        body_excerpt: r#"{"error":{"message":"internal server error","type":"InternalServerError","code":500}}"#.into(),
    };
    assert_eq!(
        i.classify_error(&other, None).unwrap().class,
        ErrorClass::Other
    );
    // An empty phrase list disables detection.
    let vllm = ErrorResponse {
        status: 400,
        body_excerpt: overflow[0].1.into(),
    };
    assert_eq!(
        i.classify_error(&vllm, Some(&[])).unwrap().class,
        ErrorClass::Other
    );
}

// ---------------------------------------------------------------- bad components

#[test]
fn endless_loop_runs_out_of_fuel() {
    let dir = tempfile::tempdir().unwrap();
    let path = wat_fixture(dir.path(), "endless-loop.wat");
    let sc = engine().load(&path, None).unwrap();
    let mut i = sc.instantiate().unwrap();
    let err = i.describe().unwrap_err();
    assert!(
        matches!(
            err,
            ScenarioError::OutOfFuel {
                export: "describe",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains(sc.hash()), "{err}");
    // The instance is replaced after the trap; the next call fails the same way, cleanly.
    assert!(matches!(
        i.describe().unwrap_err(),
        ScenarioError::OutOfFuel { .. }
    ));
}

#[test]
fn endless_loop_hits_the_deadline_when_fuel_is_plenty() {
    let dir = tempfile::tempdir().unwrap();
    let path = wat_fixture(dir.path(), "endless-loop.wat");
    let limits = Limits {
        fuel_per_call: u64::MAX / 2,
        deadline: Duration::from_millis(200),
        ..Limits::default()
    };
    let sc = ScenarioEngine::new(limits, None)
        .unwrap()
        .load(&path, None)
        .unwrap();
    let err = sc.instantiate().unwrap().describe().unwrap_err();
    assert!(
        matches!(
            err,
            ScenarioError::Deadline {
                export: "describe",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn memory_hog_hits_the_memory_limit() {
    let dir = tempfile::tempdir().unwrap();
    let path = wat_fixture(dir.path(), "memory-hog.wat");
    let sc = engine().load(&path, None).unwrap();
    let err = sc.instantiate().unwrap().describe().unwrap_err();
    assert!(
        matches!(
            err,
            ScenarioError::MemoryLimit {
                export: "describe",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn an_import_is_refused_at_load() {
    let dir = tempfile::tempdir().unwrap();
    let path = wat_fixture(dir.path(), "wasi-clock-import.wat");
    let err = engine().load(&path, None).unwrap_err();
    assert!(matches!(err, ScenarioError::Import { .. }), "{err}");
    assert!(err.to_string().contains("wasi:clocks/wall-clock"), "{err}");
}

#[test]
fn another_wit_version_is_incompatible() {
    let dir = tempfile::tempdir().unwrap();
    let path = wat_fixture(dir.path(), "wit-0.9.0.wat");
    let err = engine().load(&path, None).unwrap_err();
    assert!(matches!(err, ScenarioError::Incompatible { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("built for agentx:scenario@0.9.0")
            && msg.contains("agentx:scenario@0.1.0, @0.2.0 or @0.3.0"),
        "{msg}"
    );
    // A 0.2.0 component without the whole interface names what it lacks.
    let path = wat_fixture(dir.path(), "wit-0.2.0.wat");
    let err = engine().load(&path, None).unwrap_err();
    assert!(matches!(err, ScenarioError::Incompatible { .. }), "{err}");
    assert!(
        err.to_string().contains("does not have export `rules`"),
        "{err}"
    );
}

#[test]
fn a_flipped_byte_fails_the_pin() {
    let dir = tempfile::tempdir().unwrap();
    let good = std::fs::read(dist("agentx-mvp.wasm")).unwrap();
    let pin = agentx::scenario::sha256_hex(&good);
    let mut bad = good.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x01;
    let path = dir.path().join("flipped.wasm");
    std::fs::write(&path, &bad).unwrap();
    let err = engine().load(&path, Some(&pin)).unwrap_err();
    let actual = agentx::scenario::sha256_hex(&bad);
    assert!(matches!(err, ScenarioError::DigestMismatch { .. }), "{err}");
    let msg = err.to_string();
    assert!(msg.contains(&pin) && msg.contains(&actual), "{msg}");
}

#[test]
fn not_wasm_core_modules_and_truncation_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = engine();
    let text = dir.path().join("notes.wasm");
    std::fs::write(&text, "this is not wasm").unwrap();
    assert!(matches!(
        e.load(&text, None).unwrap_err(),
        ScenarioError::NotWasm { .. }
    ));
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, wat::parse_str("(module)").unwrap()).unwrap();
    assert!(matches!(
        e.load(&core, None).unwrap_err(),
        ScenarioError::CoreModule { .. }
    ));
    let good = std::fs::read(dist("agentx-mvp.wasm")).unwrap();
    let cut = dir.path().join("cut.wasm");
    std::fs::write(&cut, &good[..good.len() / 3]).unwrap();
    assert!(matches!(
        e.load(&cut, None).unwrap_err(),
        ScenarioError::Compile { .. }
    ));
    assert!(matches!(
        e.load(&dir.path().join("missing.wasm"), None).unwrap_err(),
        ScenarioError::Read { .. }
    ));
}

#[test]
fn compiled_artifacts_are_cached_by_hash_and_version() {
    let home = tempfile::tempdir().unwrap();
    let e = ScenarioEngine::new(Limits::default(), Some(home.path())).unwrap();
    let a = e.load(&dist("agentx-mvp.wasm"), None).unwrap();
    let cached: Vec<_> = walk(home.path())
        .into_iter()
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    let p = cached[0].to_string_lossy().to_string();
    assert!(p.contains(a.hash()) && p.contains("wasmtime-48.0.8"), "{p}");
    // A corrupted artifact is detected and replaced.
    std::fs::write(&cached[0], b"garbage").unwrap();
    let b = e.load(&dist("agentx-mvp.wasm"), None).unwrap();
    assert_eq!(
        b.instantiate().unwrap().describe().unwrap().name,
        "inferencex-agentx-mvp"
    );
    assert!(std::fs::metadata(&cached[0]).unwrap().len() > 1000);
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
