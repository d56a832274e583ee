//! Cost of the scenario engine: compile, instantiate, each export call, and planning a full corpus.
//!
//! `cargo bench --bench scenario [-- COMPONENT.wasm]` prints figures; it asserts nothing.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use agentx::scenario::types::*;
use agentx::scenario::{Limits, Scenario, ScenarioEngine, ScenarioInstance};

fn per_call(iters: u32, mut f: impl FnMut()) -> Duration {
    for _ in 0..iters.min(100) {
        f();
    }
    let t = Instant::now();
    for _ in 0..iters {
        f();
    }
    t.elapsed() / iters
}

/// Loading the component: compiled from scratch, then from a warm artifact cache.
fn load(engine: &ScenarioEngine, path: &Path) -> anyhow::Result<Scenario> {
    let t = Instant::now();
    let sc = engine.load(path, None)?;
    let compile = t.elapsed();
    println!(
        "component        {} ({} bytes, sha256:{})",
        path.display(),
        sc.size(),
        sc.hash()
    );
    println!(
        "load+compile     {:>10.2} ms (no artifact cache)",
        compile.as_secs_f64() * 1e3
    );

    let cache = tempfile::tempdir()?;
    let cached_engine = ScenarioEngine::new(Limits::default(), Some(cache.path()))?;
    cached_engine.load(path, None)?;
    let t = Instant::now();
    cached_engine.load(path, None)?;
    println!(
        "load (cached)    {:>10.2} ms (compiled artifact from the cache)",
        t.elapsed().as_secs_f64() * 1e3
    );
    Ok(sc)
}

/// The calls about settings: describe and resolve.
fn settings_calls(i: &mut ScenarioInstance) {
    let d = per_call(2_000, || {
        black_box(i.describe().unwrap());
    });
    println!("describe         {:>10.0} ns/call", d.as_nanos());

    let given = vec![
        Setting {
            name: "concurrency".into(),
            value: Value::Integers(vec![64]),
            explicit: true,
        },
        Setting {
            name: "benchmark-duration".into(),
            value: Value::Number(1800.0),
            explicit: true,
        },
        Setting {
            name: "random-seed".into(),
            value: Value::Integer(42),
            explicit: true,
        },
        Setting {
            name: "loader".into(),
            value: Value::Text("semianalysis_cc_traces_weka".into()),
            explicit: true,
        },
    ];
    let d = per_call(2_000, || {
        black_box(i.resolve(&given, 7).unwrap().unwrap());
    });
    println!("resolve          {:>10.0} ns/call", d.as_nanos());
}

/// The calls a replay makes per session or request: start-turn, cache-bust, classify-error,
/// turn-delay, and validity at the end.
fn replay_calls(i: &mut ScenarioInstance, params: StartParams) {
    let traj = Trajectory {
        trace_id: "trace_0003".into(),
        num_turns: 143,
        unsendable: vec![],
    };
    let d = per_call(20_000, || {
        black_box(i.start_turn(params, &traj).unwrap());
    });
    println!(
        "start-turn       {:>10.0} ns/call   (target < 2000)",
        d.as_nanos()
    );

    let session = SessionId {
        run_id: "4b1c0d2e-run".into(),
        recycle_pass: 3,
        lane: 17,
        trace_id: "trace_0003".into(),
    };
    let d = per_call(20_000, || {
        black_box(i.cache_bust(Placement::FirstTurnPrefix, &session).unwrap());
    });
    println!("cache-bust       {:>10.0} ns/call", d.as_nanos());

    let err = ErrorResponse {
        status: 400,
        body_excerpt: r#"{"object":"error","message":"This model's maximum context length is 131072 tokens. However, you requested 140000 tokens in the messages, Please reduce the length of the messages.","type":"BadRequestError","param":null,"code":400}"#.into(),
    };
    let d = per_call(20_000, || {
        black_box(i.classify_error(&err, None).unwrap());
    });
    println!("classify-error   {:>10.0} ns/call", d.as_nanos());

    let dp = DelayParams {
        think_time_only: true,
        cap_seconds: Some(60.0),
    };
    let tt = TurnTiming {
        think_time: Some(12.0),
        timestamp_gap: Some(19.0),
    };
    let d = per_call(20_000, || {
        black_box(i.turn_delay(dp, tt).unwrap());
    });
    println!("turn-delay       {:>10.0} ns/call", d.as_nanos());

    let outcome = Outcome {
        total_responses: 10_000,
        context_overflows: 12,
        failed: 3,
        cancelled: false,
        unsafe_override: false,
        overflow_rate_limit: 0.01,
    };
    let d = per_call(20_000, || {
        black_box(i.validity(outcome).unwrap());
    });
    println!("validity         {:>10.0} ns/call", d.as_nanos());
}

/// Planning a full corpus: one batch call against a start-turn call per trajectory.
fn plan_corpus(i: &mut ScenarioInstance, params: StartParams) {
    // 949 trajectories shaped like the published corpus (~143 requests per trace on average).
    let corpus: Vec<Trajectory> = (0..949u32)
        .map(|j| Trajectory {
            trace_id: format!("trace_{j:04}"),
            num_turns: 2 + (j.wrapping_mul(2_654_435_761) % 400),
            unsendable: if j % 7 == 0 { vec![3, 4, 5] } else { vec![] },
        })
        .collect();
    let runs = 20;
    let t = Instant::now();
    for _ in 0..runs {
        black_box(i.plan_starts(params, &corpus).unwrap());
    }
    let batch = t.elapsed() / runs;
    let t = Instant::now();
    for _ in 0..runs {
        for tr in &corpus {
            black_box(i.start_turn(params, tr).unwrap());
        }
    }
    let single = t.elapsed() / runs;
    println!(
        "plan 949 (batch) {:>10.3} ms   (target < 10)",
        batch.as_secs_f64() * 1e3
    );
    println!("plan 949 (calls) {:>10.3} ms", single.as_secs_f64() * 1e3);
}

fn main() -> anyhow::Result<()> {
    let path: PathBuf = std::env::args()
        .skip(1)
        .find(|a| {
            Path::new(a)
                .extension()
                .is_some_and(|ext| ext.eq_ignore_ascii_case("wasm"))
        })
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("guest-scenarios/dist/agentx-mvp.wasm")
        });
    let engine = ScenarioEngine::new(Limits::default(), None)?;
    let sc = load(&engine, &path)?;

    let inst = per_call(200, || {
        black_box(sc.instantiate().unwrap());
    });
    println!("instantiate      {:>10.0} ns", inst.as_nanos());

    let mut i = sc.instantiate()?;
    settings_calls(&mut i);
    let params = StartParams {
        seed: 42,
        min_ratio: 0.25,
        max_ratio: 0.75,
    };
    replay_calls(&mut i, params);
    plan_corpus(&mut i, params);
    Ok(())
}
