//! The single-stream replay on tokio's paused clock with a scripted transport (140 ms a request):
//! the warmup request, profiling resuming at the start turn + 1, the scenario's delays, the recycle,
//! and the stop at the duration, at exact virtual instants.

use super::testkit::{self, ms, req, trace, Harness, Reply, Scripted};
use super::*;
use agentx_record::Phase;

/// One lane on trace `a` from turn 0: the warmup request at 0 ms, profiling from its end (140 ms)
/// with turn 1 at once and turn 2 after its 0.5 s delay. The finished trace goes to the tail of the
/// recycle queue (`a b a`); its head, `a`, no longer runs, so the lane starts it again at once with
/// the next recycle pass. The duration (1 s of profiling) ends during that session's 1 s delay.
#[tokio::test(start_paused = true)]
async fn a_lane_replays_its_delays_and_recycles_at_the_end_of_its_trace() {
    let dir = testkit::kept_dir();
    let traces = [
        trace("a", vec![req(0.0, 0.1), req(1.0, 0.1), req(2.0, 0.1)]),
        trace("b", vec![req(0.0, 0.1), req(1.0, 0.1), req(2.0, 0.1)]),
    ];
    let ds = testkit::open(&dir, &testkit::corpus_file(&dir, &traces));
    let plan = Plan {
        lanes: vec![Lane {
            lane: 0,
            trace: 0,
            trace_id: "a".into(),
            turns: 3,
            start_turn: 0,
            marker: "m0".into(),
        }],
        pool: vec![0, 1],
        delays: vec![vec![0.0, 1.0, 0.5], vec![0.0, 1.0, 0.0]],
        wrapped: false,
    };
    let sc = testkit::scenario(agentx_scenario::builtin::BUILTIN_MVP, "builtin:agentx-mvp");
    let (h, inputs) = Harness::inputs(ds, sc, Scripted::new(|_| Reply::ok()));
    let out = run(testkit::config(1.0), plan, inputs).await;
    let live = h.live.snapshot();
    assert_eq!(
        (live.stage.name.as_str(), live.sessions_active),
        ("done", 0)
    );
    let recs = h.records();
    let got: Vec<(Phase, &str, u32, u32, f64, f64, f64)> = recs
        .iter()
        .map(|r| {
            (
                r.phase,
                r.trace_id.as_str(),
                r.turn,
                r.recycle_pass,
                ms(r.intended_ns),
                ms(r.send_ns),
                ms(r.end_ns),
            )
        })
        .collect();
    let (w, p) = (Phase::Warmup, Phase::Profiling);
    assert_eq!(
        got,
        [
            (w, "a", 0, 0, 0.0, 0.0, 140.0),
            (p, "a", 1, 0, 140.0, 140.0, 280.0),
            (p, "a", 2, 0, 780.0, 780.0, 920.0),
            (p, "a", 0, 1, 920.0, 920.0, 1060.0),
        ]
    );
    // Warmup and the first profiling session share the lane's marker; each session has its own id.
    assert_ne!(recs[0].correlation_id, recs[1].correlation_id);
    assert_eq!(recs[1].correlation_id, recs[2].correlation_id);
    assert_ne!(recs[2].correlation_id, recs[3].correlation_id);
    assert_eq!(out.stop, StopReason::Completed);
    assert_eq!(out.profiling_ns, Some((140_000_000, 1_140_000_000)));
    let t = &out.tally;
    assert_eq!(
        (t.warmup_requests, t.requests, t.ok, t.sessions),
        (1, 3, 3, 2)
    );
}

#[test]
fn the_warmup_eta_extrapolates_the_observed_rate_and_respects_its_floor() {
    use super::eta_field;
    assert_eq!(eta_field(0, 10, 5.0, 0.0), "eta=?");
    // 4 of 10 in 8 s: 6 more at 2 s each.
    assert_eq!(eta_field(4, 10, 8.0, 0.0), "eta=12.0s");
    // Primers still spread 20 s ahead cannot return sooner.
    assert_eq!(eta_field(4, 10, 8.0, 20.0), "eta=20.0s");
    assert_eq!(eta_field(10, 10, 8.0, 0.0), "eta=0.0s");
}
