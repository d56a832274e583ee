//! A component of world `agentx:scenario@0.3.0` decides the whole replay: `probe-v3` (a test
//! component whose every replay setting and rule differs from agentx-v1's and from the host's flag
//! defaults) run against the simulator with nothing but a URL and a corpus, and checked from the
//! records, the manifest, the exports and what the simulator received; the default `agentx`
//! scenario's preset and its sources in the dry run; an earlier world's component now sees the
//! flags the host used to apply behind its back.

use serde_json::Value;

use agentx::record::Phase;
use agentx::sim::{SimConfig, Timing};

use crate::support::{fixture, Run, Sim};

fn probe() -> &'static str {
    let p = crate::scenario::dist("probe-v3.wasm");
    Box::leak(p.to_str().unwrap().to_string().into_boxed_str())
}

fn sim() -> Sim {
    let mut cfg = SimConfig::max();
    cfg.timing = Timing::Fixed {
        ttft: std::time::Duration::from_millis(20),
        itl: std::time::Duration::from_millis(1),
    };
    cfg.record_headers = true;
    Sim::start(cfg)
}

fn setting<'a>(settings: &'a Value, name: &str) -> (&'a Value, &'a str) {
    let s = &settings[name];
    (&s["value"], s["source"].as_str().unwrap_or("?"))
}

#[test]
fn a_v3_component_decides_every_replay_setting_and_rule() {
    let sim = sim();
    let corpus = fixture("traces-subagents-8.jsonl");
    let url = sim.url();
    let args = [
        "run",
        probe(),
        "--url",
        url.as_str(),
        "--input-file",
        corpus.to_str().unwrap(),
    ];
    // A process: the test reads the run's log lines.
    let r = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    // No --model: the component discovers the simulator's one model.
    assert!(
        r.stderr().contains("serves one model, `agentx-sim`"),
        "{}",
        r.stderr()
    );

    let m = r.json("run_manifest.json");
    let s = &m["replay_settings"];
    for (name, want) in [
        ("benchmark-duration", serde_json::json!(6.0)),
        ("benchmark-grace-period", serde_json::json!(2.0)),
        ("warmup-requests-per-lane", serde_json::json!(3)),
        ("warmup-grace-period", serde_json::json!(120.0)),
        ("trace-idle-gap-cap-seconds", serde_json::json!(0.5)),
        ("burst-phase-starts", serde_json::json!(true)),
        ("num-dataset-entries", serde_json::json!(6)),
        ("slice-duration", serde_json::json!(2.0)),
        ("use-server-token-count", serde_json::json!(false)),
        ("failed-request-threshold", serde_json::json!(0.9)),
        ("concurrency", serde_json::json!(2)),
    ] {
        assert_eq!(setting(s, name), (&want, "scenario"), "{name}: {s}");
    }
    assert_eq!(m["concurrency"], 2);
    assert_eq!(m["dataset"]["traces"], 6, "{}", m["dataset"]);
    assert_eq!(m["assistant_mode"], "live");
    assert_eq!(m["benchmark_duration_s"], 6.0);
    assert_eq!(m["slice_duration"], 2.0);
    let headers = m["http"]["session_headers"].as_array().unwrap();
    assert!(
        !headers.iter().any(|h| h == "X-Session-Affinity"),
        "{headers:?}"
    );

    let recs = r.records();
    let warm: Vec<_> = recs.iter().filter(|x| x.phase == Phase::Warmup).collect();
    assert!(
        warm.len() >= 2 + 2 * 3,
        "primers and 3 per lane: {}",
        warm.len()
    );
    assert!(warm.iter().all(|x| x.max_tokens == 2), "2-token warmup");
    assert!(
        recs.iter()
            .all(|x| x.token_source == agentx::record::TokenSource::Client),
        "client token counts"
    );
    // Burst: the primers (the first warmup request of each lane) are due at the same instant.
    let mut first = std::collections::BTreeMap::<u32, u64>::default();
    for x in &warm {
        let e = first.entry(x.lane).or_insert(x.intended_ns);
        *e = (*e).min(x.intended_ns);
    }
    let due: Vec<u64> = first.values().copied().collect();
    assert!(
        due.iter().max().unwrap() - due.iter().min().unwrap() < 50_000_000,
        "primers fired at once: {due:?}"
    );

    // What the simulator received: no affinity header on any request.
    let got = sim.received();
    assert!(!got.is_empty());
    assert!(
        got.iter()
            .all(|x| !x.headers.iter().any(|(k, _)| k == "x-session-affinity")),
        "no X-Session-Affinity"
    );

    // The warmup rows carry the component's phase name.
    let rows = std::fs::read_to_string(r.artifacts().join("profile_export.jsonl")).unwrap();
    let warm_row = rows
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["metadata"]["phase_kind"] == "warmup")
        .expect("a warmup row");
    assert_eq!(
        warm_row["metadata"]["phase_name"], "probe.warmup",
        "{warm_row}"
    );

    let agg = r.json("profile_export_aiperf.json");
    let cov = &agg["metadata"]["metric_duration_coverage"][0];
    assert_eq!(cov["required_ratio"], 0.5, "{cov}");
    assert!(cov["streaming_content_ratio"].is_number(), "{cov}");
    assert!(r
        .artifacts()
        .join("profile_export_aiperf_timeslices.json")
        .is_file());
}

#[test]
fn flags_still_win_and_say_so_and_the_component_refuses_shared_trees() {
    let corpus = fixture("traces-subagents-8.jsonl");
    let args = [
        "run",
        probe(),
        "--url",
        "http://127.0.0.1:9",
        "--input-file",
        corpus.to_str().unwrap(),
        "--warmup-requests-per-lane",
        "1",
        "--dry-run",
        "--json",
    ];
    let r = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let plan: Value = serde_json::from_str(&r.stdout()).unwrap();
    let s = &plan["settings"];
    assert_eq!(
        setting(s, "warmup-requests-per-lane"),
        (&serde_json::json!(1), "flag")
    );
    assert_eq!(setting(s, "benchmark-duration").1, "scenario");
    assert_eq!(plan["scenario"]["world"], "agentx:scenario@0.3.0");
    assert_eq!(plan["rules"]["warmup_spread"], false);
    assert_eq!(plan["rules"]["trace_idle_cap_seconds"], 0.5);
    assert_eq!(plan["rules"]["assistant_text"], "live");

    // allow-wrap off: more lanes than trees is refused, naming both.
    let args = [
        "run",
        probe(),
        "--url",
        "http://127.0.0.1:9",
        "--input-file",
        corpus.to_str().unwrap(),
        "--concurrency",
        "9",
        "--dry-run",
    ];
    let r = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
    assert_ne!(r.code(), 0);
    assert!(
        r.stderr().contains("--concurrency 9") && r.stderr().contains("allow-wrap false"),
        "{}",
        r.stderr()
    );
}

#[test]
fn the_default_is_agentx_with_its_preset_and_environment_defaults() {
    let args = ["run", "--dry-run", "--json"];
    let r = Run::in_process(
        tempfile::tempdir().unwrap(),
        &args,
        &[("AIPERF_HTTP_TCP_USER_TIMEOUT", "60000")],
    );
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let plan: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(plan["scenario"]["name"], "agentx");
    let s = &plan["settings"];
    for (name, want, source) in [
        ("random-seed", serde_json::json!(42), "scenario"),
        (
            "trajectory-start-min-ratio",
            serde_json::json!(0.25),
            "scenario",
        ),
        (
            "trajectory-start-max-ratio",
            serde_json::json!(0.75),
            "scenario",
        ),
        (
            "failed-request-threshold",
            serde_json::json!(0.1),
            "scenario",
        ),
        (
            "warmup-requests-per-lane",
            serde_json::json!(10),
            "scenario",
        ),
        ("warmup-grace-period", serde_json::json!(1800.0), "scenario"),
        (
            "trace-idle-gap-cap-seconds",
            serde_json::json!(300.0),
            "scenario",
        ),
        (
            "use-server-token-count",
            serde_json::json!(true),
            "scenario",
        ),
        ("benchmark-duration", serde_json::json!(30.0), "demo"),
        (
            "http-tcp-user-timeout",
            serde_json::json!(60000),
            "environment",
        ),
    ] {
        assert_eq!(setting(s, name), (&want, source), "{name}: {s}");
    }
    assert_eq!(plan["rules"]["session_affinity_header"], false);
    assert_eq!(plan["rules"]["assistant_text"], "recorded");
    // The harness's spelling and the alias name the same component.
    for name in ["inferencex-agentx", "agentx"] {
        let r = Run::in_process(
            tempfile::tempdir().unwrap(),
            &["run", "--scenario", name, "--dry-run", "--json"],
            &[],
        );
        assert_eq!(r.code(), 0, "{}", r.stderr());
        let p: Value = serde_json::from_str(&r.stdout()).unwrap();
        assert_eq!(p["scenario"]["sha256"], plan["scenario"]["sha256"]);
    }
}

#[test]
fn an_earlier_world_sees_the_flags_the_host_applies() {
    // agentx-v1 (0.2.0) reads the trace idle cap and burst from its settings: the host now hands
    // them over, so its rules say what the replay does.
    let corpus = fixture("traces-subagents-8.jsonl");
    let v1 = crate::scenario::dist("agentx-v1.wasm");
    let args = [
        "run",
        v1.to_str().unwrap(),
        "--url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--input-file",
        corpus.to_str().unwrap(),
        "--concurrency",
        "2",
        "--unsafe-override",
        "--trace-idle-gap-cap-seconds",
        "7",
        "--burst-phase-starts",
        "--dry-run",
        "--json",
    ];
    let r = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let plan: Value = serde_json::from_str(&r.stdout()).unwrap();
    assert_eq!(
        plan["rules"]["trace_idle_cap_seconds"], 7.0,
        "{}",
        plan["rules"]
    );
    assert_eq!(plan["rules"]["warmup_spread"], false);
    let s = &plan["settings"];
    assert_eq!(
        setting(s, "trace-idle-gap-cap-seconds"),
        (&serde_json::json!(7.0), "flag")
    );
    // What agentx-v1 does not answer keeps the host's default, and says so.
    assert_eq!(setting(s, "failed-request-threshold").1, "host default");
    // A server without the model list: agentx-v1 does not discover a model.
    let args = [
        "run",
        v1.to_str().unwrap(),
        "--url",
        "http://127.0.0.1:9",
        "--input-file",
        corpus.to_str().unwrap(),
        "--concurrency",
        "2",
        "--unsafe-override",
    ];
    let r = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
    assert_ne!(r.code(), 0);
    assert!(r.stderr().contains("--model is required"), "{}", r.stderr());
}

/// A one-answer HTTP server: every request gets `status` with `body` (and `extra` headers).
fn canned(status: &'static str, extra: &'static str, body: &'static str) -> String {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut c in l.incoming().flatten() {
            let mut buf = [0u8; 4096];
            let _ = c.read(&mut buf);
            let _ = write!(
                c,
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://127.0.0.1:{port}")
}

#[test]
fn model_discovery_refuses_what_is_not_one_model_and_says_to_pass_model() {
    let corpus = fixture("traces-subagents-8.jsonl");
    for (url, want) in [
        (
            canned(
                "200 OK",
                "",
                r#"{"object":"list","data":[{"id":"a"},{"id":"b"}]}"#,
            ),
            "serves several models (`a`, `b`)",
        ),
        (
            canned("200 OK", "", r#"{"object":"list","data":[]}"#),
            "serves no model",
        ),
        (
            canned("302 Found", "location: http://elsewhere/v1/models\r\n", ""),
            "a redirect to http://elsewhere/v1/models",
        ),
    ] {
        let args = [
            "run",
            "--url",
            url.as_str(),
            "--input-file",
            corpus.to_str().unwrap(),
            "--concurrency",
            "2",
            "--unsafe-override",
        ];
        let r = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
        assert_ne!(r.code(), 0);
        let err = r.stderr();
        assert!(
            err.contains(want) && err.contains("--model"),
            "{want}: {err}"
        );
        assert!(!r.dir.path().join("artifacts").exists(), "nothing written");
    }
}
