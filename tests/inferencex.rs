//! agentx as a drop-in for the command InferenceX runs today: the routing headers a router keys
//! sessions on, the connection reuse strategies, and InferenceX's own command line. The real binary
//! against the built-in simulator, which records the headers and connection of every request.

use std::collections::{HashMap, HashSet};

use agentx::sim::{Received, SimConfig};

use crate::support::{fixture, Run, Sim};

fn recording_sim() -> Sim {
    let mut cfg = SimConfig::max();
    cfg.record_headers = true;
    Sim::start(cfg)
}

/// A short replay of the fixture corpus against `url` with `extra` flags and `env`.
fn replay(url: &str, extra: &[&str], env: &[(&str, &str)]) -> Run {
    let corpus = fixture("traces-24.jsonl");
    let mut args = vec![
        "run",
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
        "3",
        "--benchmark-duration",
        "2",
        "--benchmark-grace-period",
        "10",
        "--stats-interval",
        "0",
    ];
    args.extend_from_slice(extra);
    let r = Run::exec(tempfile::tempdir().unwrap(), &args, env);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    r
}

/// The requests of each correlation id, by the header that carried it.
fn by_session<'a>(got: &'a [Received], header: &str) -> HashMap<&'a str, Vec<&'a Received>> {
    let mut m: HashMap<&str, Vec<&Received>> = HashMap::new();
    for r in got {
        let corr = r.header(header).expect("every request carries its session");
        m.entry(corr).or_default().push(r);
    }
    m
}

#[test]
fn session_affinity_is_on_by_default_and_the_correlation_id_is_the_records() {
    let sim = recording_sim();
    let r = replay(&sim.url(), &[], &[]);
    let got = sim.received();
    let recs = r.records();
    assert_eq!(got.len(), recs.len(), "one record per request received");
    let corrs: HashSet<&str> = recs.iter().map(|x| x.correlation_id.as_str()).collect();
    for g in &got {
        let corr = g.header("x-correlation-id").unwrap();
        assert!(corrs.contains(corr), "{corr} is a recorded session");
        assert_eq!(g.header("x-session-affinity"), Some(corr));
        for off in [
            "x-session-id",
            "x-smg-routing-key",
            "x-dynamo-session-id",
            "x-dynamo-parent-session-id",
        ] {
            assert_eq!(g.header(off), None, "{off} is off by default");
        }
        assert_eq!(
            g.headers
                .iter()
                .filter(|(k, _)| k == "x-session-affinity")
                .count(),
            1
        );
    }
    // The lines operators grep a run's log for.
    let log = r.stderr();
    for line in [
        "Phase warmup started | target: 3 requests",
        "Phase warmup complete: 3 returned, 3 ok",
        "Phase profiling started | profiling_index=0 | target: 2.0s duration",
        "Phase profiling complete | completed=",
        "replay_rc=0",
    ] {
        assert!(log.contains(line), "no {line:?} in\n{log}");
    }
    let m = r.json("run_manifest.json");
    assert_eq!(m["http"]["session_headers"][0], "X-Session-Affinity");
    assert_eq!(m["http"]["tcp_user_timeout_ms"], 30000);
}

#[test]
fn environment_switches_turn_each_routing_header_on_or_off() {
    let sim = recording_sim();
    replay(
        &sim.url(),
        &["--session-header", "X-Trace-Session"],
        &[
            ("AGENTX_HTTP_X_SESSION_AFFINITY_FROM_CORRELATION_ID", "0"),
            ("AIPERF_HTTP_X_SESSION_ID_FROM_CORRELATION_ID", "1"),
            ("AIPERF_HTTP_X_SMG_ROUTING_KEY_FROM_CORRELATION_ID", "true"),
            ("AIPERF_HTTP_X_DYNAMO_SESSION_ID_FROM_CORRELATION_ID", "1"),
            ("AIPERF_HTTP_TCP_USER_TIMEOUT", "900000"),
        ],
    );
    let got = sim.received();
    assert!(!got.is_empty());
    for g in &got {
        assert_eq!(
            g.header("x-correlation-id"),
            None,
            "renamed by --session-header"
        );
        let corr = g.header("x-trace-session").unwrap();
        assert_eq!(g.header("x-session-affinity"), None);
        assert_eq!(g.header("x-session-id"), Some(corr));
        assert_eq!(g.header("x-smg-routing-key"), Some(corr));
        assert_eq!(g.header("x-dynamo-session-id"), Some(corr));
        // Single-stream sessions are roots: no parent.
        assert_eq!(g.header("x-dynamo-parent-session-id"), None);
    }
}

#[test]
fn bad_switches_and_timeouts_are_refused_with_the_variable_named() {
    let sim = recording_sim();
    let corpus = fixture("traces-24.jsonl");
    let base = [
        "run",
        "--url",
        &sim.url(),
        "--model",
        "agentx-sim",
        "--input-file",
        corpus.to_str().unwrap(),
        "--dry-run",
    ]
    .map(str::to_owned);
    let args: Vec<&str> = base.iter().map(String::as_str).collect();
    for (env, want) in [
        (
            ("AIPERF_HTTP_X_SESSION_ID_FROM_CORRELATION_ID", "maybe"),
            "AIPERF_HTTP_X_SESSION_ID_FROM_CORRELATION_ID=\"maybe\" is not a boolean",
        ),
        (
            ("AIPERF_HTTP_TCP_USER_TIMEOUT", "0"),
            "AIPERF_HTTP_TCP_USER_TIMEOUT=\"0\" is not a number of milliseconds",
        ),
    ] {
        let r = Run::exec(tempfile::tempdir().unwrap(), &args, &[env]);
        assert_eq!(r.code(), 2, "{}", r.stderr());
        assert!(r.stderr().contains(want), "{}", r.stderr());
    }
    let mut bad = args.clone();
    bad.extend(["--connection-reuse-strategy", "always"]);
    let r = Run::exec(tempfile::tempdir().unwrap(), &bad, &[]);
    assert_eq!(r.code(), 2);
    assert!(
        r.stderr()
            .contains("use pooled, never or sticky-user-sessions"),
        "{}",
        r.stderr()
    );
    assert_eq!(sim.requests(), 0, "nothing sent");
}

#[test]
fn connection_reuse_strategies_pooled_never_and_sticky() {
    // never: a new connection for every request.
    let sim = recording_sim();
    replay(&sim.url(), &["--connection-reuse-strategy", "never"], &[]);
    let got = sim.received();
    let conns: HashSet<u64> = got.iter().map(|g| g.conn).collect();
    assert_eq!(conns.len(), got.len(), "never reuses a connection");

    // sticky: each session on one connection, and no connection serves two sessions.
    let sim = recording_sim();
    replay(
        &sim.url(),
        &["--connection-reuse-strategy", "sticky-user-sessions"],
        &[],
    );
    let got = sim.received();
    let sessions = by_session(&got, "x-correlation-id");
    let mut owner: HashMap<u64, &str> = HashMap::new();
    let mut multi_turn = 0;
    for (corr, reqs) in &sessions {
        let conns: HashSet<u64> = reqs.iter().map(|g| g.conn).collect();
        assert_eq!(conns.len(), 1, "session {corr} used connections {conns:?}");
        let c = *conns.iter().next().unwrap();
        assert_eq!(
            *owner.entry(c).or_insert(corr),
            *corr,
            "connection {c} shared"
        );
        multi_turn += usize::from(reqs.len() > 1);
    }
    assert!(multi_turn > 0, "some session sent several turns");

    // pooled: connections are reused across sessions.
    let sim = recording_sim();
    replay(&sim.url(), &[], &[]);
    let got = sim.received();
    let conns: HashSet<u64> = got.iter().map(|g| g.conn).collect();
    assert!(
        conns.len() < got.len() / 2,
        "{} connections for {} requests",
        conns.len(),
        got.len()
    );
}
