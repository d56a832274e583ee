//! The cache preflight against the built-in simulator: the probe itself (the library call, one
//! server configuration per verdict), and the run around it (on by default off a reference's wire,
//! off under the reference scenarios, the manifest's `cache_preflight`, `--require-cache` stopping
//! a run before anything is written).

use agentx::client::preflight::cache::{self, CacheProbe, CacheVerdict, ProbeSpec};
use agentx::client::{Client, RequestBody};
use agentx::sim::{MetricNames, Router, SimConfig};
use serde_json::Value;

use crate::support::{corpus_args, fixture, fixture_args, Run, Sim};

/// The probe against `sim` with the body `body` and the extra inputs `extra`, as a run sends it.
fn probe(sim: &Sim, body: &RequestBody, extra: &[(String, Value)]) -> CacheProbe {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _entered = rt.enter();
    let client = Client::new(&crate::support::chat_client_config(&sim.url())).unwrap();
    let spec = ProbeSpec {
        body,
        extra,
        correlation_id: "run1-preflight",
        nonce: "n0nce",
        read_metrics: true,
        timeout: std::time::Duration::from_secs(60),
    };
    rt.block_on(cache::probe(&client, &spec))
}

/// The body a run sends (streamed, usage asked for), with `extra`.
fn run_body(extra: &[(String, Value)]) -> RequestBody {
    RequestBody::new("agentx-sim", true, true, extra)
}

/// The simulator's hit on a prompt of `tokens` it has seen whole: the full blocks before the last
/// token (its cache never covers the last one).
fn full_blocks_before_last(tokens: u64, block_size: u32) -> u64 {
    (tokens - 1) / u64::from(block_size) * u64::from(block_size)
}

#[test]
fn the_default_simulator_answers_the_repeat_from_its_cache() {
    let cfg = SimConfig::max();
    let block_size = cfg.block_size;
    let sim = Sim::start(cfg);
    let got = probe(&sim, &run_body(&[]), &[]);
    assert_eq!(got.verdict, CacheVerdict::Works, "{got:?}");
    assert_eq!(got.claim.prefix_caching, Some(true));
    assert_eq!(got.claim.engines, Some(1));
    assert_eq!(got.turns.len(), 4);
    let (first, second) = (&got.turns[0], &got.turns[1]);
    // The word model: the simulator counts the words the probe counted.
    for turn in &got.turns {
        assert_eq!(turn.prompt_tokens, Some(turn.prompt_words), "{turn:?}");
    }
    assert_eq!(
        first.prompt_words,
        cache::SYSTEM_WORDS as u64 + 7,
        "the system block and the user line"
    );
    // The nonce makes the first sending cold; its second turn reuses the first turn's full
    // blocks; the repeat hits everything but the last partial block.
    assert_eq!(first.cached_tokens, Some(0));
    assert_eq!(
        second.cached_tokens,
        Some(first.prompt_words / u64::from(block_size) * u64::from(block_size))
    );
    for repeat in &got.turns[2..] {
        assert_eq!(
            repeat.cached_tokens,
            Some(full_blocks_before_last(repeat.prompt_words, block_size)),
            "{repeat:?}"
        );
    }
    let cached: u64 = got.turns[2..].iter().filter_map(|t| t.cached_tokens).sum();
    let prompt: u64 = got.turns[2..].iter().map(|t| t.prompt_words).sum();
    assert_eq!(got.repeat_hit_rate, Some(cached as f64 / prompt as f64));
    assert!(
        got.finding
            .contains(&format!("{cached} of {prompt} prompt tokens cached")),
        "{}",
        got.finding
    );
}

#[test]
fn a_simulator_without_a_cache_is_found_off_whether_it_says_so_or_not() {
    // vLLM's names: cache_config_info says enable_prefix_caching="False".
    let sim = Sim::start(SimConfig {
        cache_capacity_tokens: 0,
        ..SimConfig::max()
    });
    let got = probe(&sim, &run_body(&[]), &[]);
    assert_eq!(got.verdict, CacheVerdict::CachingOff, "{got:?}");
    assert_eq!(got.claim.prefix_caching, Some(false));
    assert!(got.finding.contains("enable_prefix_caching=\"False\""));
    assert!(got.turns.iter().all(|t| t.cached_tokens == Some(0)));
    // SGLang's names say nothing of the cache: 0 hits, and the causes say what to look at.
    let sim = Sim::start(SimConfig {
        cache_capacity_tokens: 0,
        metric_names: MetricNames::Sglang,
        ..SimConfig::max()
    });
    let got = probe(&sim, &run_body(&[]), &[]);
    assert_eq!(got.verdict, CacheVerdict::NoHitWhileClaimed, "{got:?}");
    assert_eq!(got.claim.prefix_caching, None);
    assert!(got.finding.contains("says nothing"), "{}", got.finding);
    assert!(
        got.causes
            .iter()
            .any(|c| c.contains("--disable-radix-cache")),
        "{:?}",
        got.causes
    );
}

#[test]
fn cache_prompt_false_in_the_extra_inputs_is_named_first() {
    let sim = Sim::start(SimConfig {
        cache_capacity_tokens: 0,
        metric_names: MetricNames::Sglang,
        ..SimConfig::max()
    });
    let extra = vec![("cache_prompt".to_string(), Value::Bool(false))];
    let got = probe(&sim, &run_body(&extra), &extra);
    assert_eq!(got.verdict, CacheVerdict::NoHitWhileClaimed, "{got:?}");
    assert!(
        got.causes[0].contains("cache_prompt: false"),
        "{:?}",
        got.causes
    );
    assert_eq!(
        got.fix.as_deref(),
        Some("drop cache_prompt:false from --extra-inputs")
    );
}

#[test]
fn responses_without_usage_name_the_server_flags() {
    let sim = Sim::start(SimConfig::max());
    // Without `stream_options.include_usage` the simulator sends no usage, as a server without
    // the flag (or a proxy that strips it) does.
    let body = RequestBody::new("agentx-sim", true, false, &[]);
    let got = probe(&sim, &body, &[]);
    assert_eq!(got.verdict, CacheVerdict::NoUsageField, "{got:?}");
    assert!(got
        .turns
        .iter()
        .all(|t| !t.usage && t.cached_tokens.is_none()));
    let fix = got.fix.unwrap();
    assert!(
        fix.contains("vLLM --enable-prompt-tokens-details")
            && fix.contains("SGLang --enable-cache-report"),
        "{fix}"
    );
    assert_eq!(got.repeat_hit_rate, None);
}

#[test]
fn engines_behind_round_robin_miss_and_the_cause_says_so() {
    let sim = Sim::start(SimConfig {
        engines: 4,
        router: Router::RoundRobin,
        ..SimConfig::max()
    });
    let got = probe(&sim, &run_body(&[]), &[]);
    assert_eq!(got.verdict, CacheVerdict::NoHitWhileClaimed, "{got:?}");
    assert_eq!(got.claim.engines, Some(4));
    assert!(got.causes[0].starts_with("4 engines"), "{:?}", got.causes);
    assert!(got.finding.contains("reports prefix caching on"));
}

#[test]
fn an_unreachable_server_is_inconclusive_with_why() {
    let sim = Sim::start(SimConfig::max());
    let url = sim.url();
    drop(sim);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _entered = rt.enter();
    let client = Client::new(&crate::support::chat_client_config(&url)).unwrap();
    let body = run_body(&[]);
    let spec = ProbeSpec {
        body: &body,
        extra: &[],
        correlation_id: "run1-preflight",
        nonce: "n0nce",
        read_metrics: true,
        timeout: std::time::Duration::from_secs(60),
    };
    let got = rt.block_on(cache::probe(&client, &spec));
    assert_eq!(got.verdict, CacheVerdict::Inconclusive, "{got:?}");
    assert_eq!(got.turns.len(), 1, "the first failure ends the probe");
    assert!(got
        .finding
        .starts_with("pass 1 turn 1 of the probe failed: "));
    assert!(got.claim.note.unwrap().starts_with("GET /metrics failed"));
}

// ---- the run around it ----

/// A simulator that keeps every request's headers, with `cache_tokens` of cache.
fn recording(cache_tokens: u64) -> Sim {
    Sim::start(SimConfig {
        record_headers: true,
        cache_capacity_tokens: cache_tokens,
        ..SimConfig::max()
    })
}

/// A 2 s run of 2 lanes against `url`: `scenario` on the fixture corpus, then `extra`.
fn short_run(url: &str, scenario: Option<&str>, extra: &[&str]) -> Run {
    let mut args = match scenario {
        Some(scenario) => corpus_args("run", Some(scenario), &fixture("traces-24.jsonl"), url),
        None => fixture_args("run", url),
    };
    args.extend(["--concurrency", "2", "--benchmark-duration", "2"].map(String::from));
    args.extend(extra.iter().map(ToString::to_string));
    Run::exec(tempfile::tempdir().unwrap(), &args, &[])
}

/// The correlation ids of the requests `sim` received, in order.
fn received_sessions(sim: &Sim) -> Vec<String> {
    sim.received()
        .iter()
        .map(|r| r.header("x-correlation-id").unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_scenario_off_the_reference_wire_probes_first_and_the_manifest_keeps_the_verdict() {
    let sim = recording(SimConfig::max().cache_capacity_tokens);
    let kvct = crate::scenario::dist("kvct-v01.wasm");
    let r = short_run(&sim.url(), Some(kvct.to_str().unwrap()), &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let manifest = r.json("run_manifest.json");
    let probe = &manifest["cache_preflight"];
    assert_eq!(probe["verdict"], "works", "{probe}");
    assert_eq!(probe["turns"].as_array().unwrap().len(), 4);
    assert!(probe["repeat_hit_rate"].as_f64().unwrap() > 0.9, "{probe}");
    assert!(
        r.stderr().contains("cache preflight: works: "),
        "{}",
        r.stderr()
    );
    crate::support::assert_artifacts_match_schemas(&r.artifacts());
    // The probe went first, on a session of its own, and left no record.
    let run_id = manifest["run_id"].as_str().unwrap();
    let sessions = received_sessions(&sim);
    let probe_session = format!("{run_id}-preflight");
    assert!(
        sessions[..4].iter().all(|s| *s == probe_session),
        "{sessions:?}"
    );
    assert!(sessions[4..].iter().all(|s| *s != probe_session));
    let records = r.records();
    assert_eq!(records.len(), sessions.len() - 4);
    assert!(records
        .iter()
        .all(|rec| rec.correlation_id != probe_session));
}

#[test]
fn a_reference_scenario_sends_no_probe_unless_asked() {
    // agentx-mvp is InferenceX's scenario (inferencex-agentx-mvp): its wire stays the reference's.
    let sim = recording(SimConfig::max().cache_capacity_tokens);
    let r = short_run(&sim.url(), None, &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    assert!(r.json("run_manifest.json").get("cache_preflight").is_none());
    let sessions = received_sessions(&sim);
    assert!(!sessions.iter().any(|s| s.ends_with("-preflight")));
    assert_eq!(r.records().len(), sessions.len());
}

#[test]
fn a_cache_found_off_is_a_warning_and_under_require_cache_stops_the_run_with_nothing_written() {
    let sim = recording(0);
    let r = short_run(&sim.url(), None, &["--cache-preflight"]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    let probe = &r.json("run_manifest.json")["cache_preflight"];
    assert_eq!(probe["verdict"], "caching_off", "{probe}");
    assert_eq!(probe["claim"]["prefix_caching"], false);
    crate::support::assert_artifacts_match_schemas(&r.artifacts());
    let warning = r
        .stderr()
        .lines()
        .find(|l| l.contains("cache preflight: caching_off: "))
        .map(str::to_string);
    let warning = warning.unwrap_or_else(|| panic!("a warning line: {}", r.stderr()));
    assert!(warning.contains("WARN"), "{warning}");
    assert!(
        warning.contains("--require-cache would stop it"),
        "{warning}"
    );

    let sim = recording(0);
    let r = short_run(&sim.url(), None, &["--require-cache"]);
    assert_ne!(r.code(), 0, "{}", r.stderr());
    let err = r.stderr();
    assert!(err.contains("caching_off"), "{err}");
    assert!(err.contains("enable_prefix_caching=\"False\""), "{err}");
    assert!(
        err.contains("run without --require-cache to proceed anyway"),
        "{err}"
    );
    assert!(
        !r.dir.path().join("artifacts").exists(),
        "no run directory is written"
    );
    // Only the probe reached the server.
    let sessions = received_sessions(&sim);
    assert_eq!(sessions.len(), 4, "{sessions:?}");
    assert!(sessions.iter().all(|s| s.ends_with("-preflight")));
}

#[test]
fn the_preflight_flags_conflict_as_they_should() {
    let sim = recording(0);
    let r = short_run(
        &sim.url(),
        None,
        &["--no-cache-preflight", "--require-cache"],
    );
    assert_eq!(r.code(), 2, "{}", r.stderr());
    assert!(
        r.stderr().contains("--no-cache-preflight"),
        "{}",
        r.stderr()
    );
    assert!(sim.received().is_empty());
}
