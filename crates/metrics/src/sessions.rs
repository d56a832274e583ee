//! Sessions as a user of an agent meets them, with `--goodput`: a session (a single-stream
//! session, or a whole tree with its subagents in a tree replay) is good when at least the stated
//! share of its profiling requests are good (`--session-goodput-share`, every request by default);
//! and its slowdown is the wall time the replay took for its turns (first intended send to last
//! end) over the time the recorded trace took for the same turns (first recorded start to the last
//! turn's recorded end). A slowdown near 1 is a server as fast as the one recorded; the think
//! times between turns are replayed, so they count on both sides.

use std::collections::{BTreeMap, HashMap};

use crate::goodput::Goodput;
use crate::stats::{self, Class};
use crate::Dist;
use agentx_record::RequestRecord;

/// Each stream's recorded turns (by the records' `trace_id`): start and end, ms on the trace's
/// clock.
pub type RecordedTimes = HashMap<String, Vec<(f64, f64)>>;

/// What the sessions of a run made of `--goodput`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SessionFigures {
    /// Sessions with at least one profiling request.
    pub sessions: u64,
    /// Sessions whose share of good requests reached `share`.
    pub good_sessions: u64,
    pub(crate) good_session_fraction: f64,
    /// The share of a session's requests that must be good.
    pub share: f64,
    /// Replayed over recorded wall time, over the sessions whose recorded span is known.
    pub slowdown: Option<Dist>,
}

#[derive(Default)]
struct Acc {
    requests: u64,
    good: u64,
    first_ns: u64,
    last_ns: u64,
    recorded: Option<(f64, f64)>,
}

/// The figures over a run's records, `good` judging each request and `share` the share of a
/// session's requests that must be good.
pub fn figures(
    records: &[RequestRecord],
    good: &Goodput,
    share: f64,
    recorded: &RecordedTimes,
) -> SessionFigures {
    let mut per_session: BTreeMap<&str, Acc> = BTreeMap::new();
    for r in records {
        if !matches!(stats::class(r), Class::Valid | Class::Error) {
            continue;
        }
        let session = per_session.entry(r.session_root()).or_insert_with(|| Acc {
            first_ns: u64::MAX,
            ..Acc::default()
        });
        session.requests += 1;
        session.good += u64::from(good.is_good(r));
        session.first_ns = session.first_ns.min(r.intended_ns);
        session.last_ns = session.last_ns.max(r.end_ns);
        let turn = recorded
            .get(&r.trace_id)
            .and_then(|turns| turns.get(r.turn as usize));
        if let Some(&(start, end)) = turn {
            session.recorded = Some(match session.recorded {
                Some((s0, e0)) => (s0.min(start), e0.max(end)),
                None => (start, end),
            });
        }
    }
    let sessions = per_session.len() as u64;
    let good_sessions = per_session
        .values()
        .filter(|a| a.good as f64 >= share * a.requests as f64 - 1e-9)
        .count() as u64;
    let slowdowns: Vec<f64> = per_session
        .values()
        .filter_map(|a| {
            let (start, end) = a.recorded?;
            let replayed_ms = a.last_ns.saturating_sub(a.first_ns) as f64 / 1e6;
            (end > start).then(|| replayed_ms / (end - start))
        })
        .collect();
    SessionFigures {
        sessions,
        good_sessions,
        good_session_fraction: if sessions > 0 {
            good_sessions as f64 / sessions as f64
        } else {
            0.0
        },
        share,
        slowdown: Dist::of(slowdowns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::testkit::rec;
    use agentx_record::TreeInfo;

    fn in_session(mut r: RequestRecord, session: &str, turn: u32) -> RequestRecord {
        r.correlation_id = session.into();
        r.trace_id = format!("trace-{session}");
        r.turn = turn;
        r
    }

    #[test]
    fn a_session_is_good_by_the_share_of_its_good_requests() {
        let g = Goodput::parse("ttft:500").unwrap();
        // Session a: both good. Session b: one of two good.
        let records = vec![
            in_session(rec(0, &[100], 10, 1), "a", 0),
            in_session(rec(1000, &[100], 10, 1), "a", 1),
            in_session(rec(0, &[100], 10, 1), "b", 0),
            in_session(rec(1000, &[900], 10, 1), "b", 1),
        ];
        let none = RecordedTimes::new();
        let f = figures(&records, &g, 1.0, &none);
        assert_eq!((f.sessions, f.good_sessions), (2, 1));
        assert_eq!(f.good_session_fraction, 0.5);
        assert_eq!(f.slowdown, None);
        assert_eq!(figures(&records, &g, 0.5, &none).good_sessions, 2);
    }

    #[test]
    fn slowdown_is_replayed_over_recorded_time_of_the_same_turns() {
        let g = Goodput::parse("ttft:500").unwrap();
        // Replayed: intended 0 ms to the end of turn 1 at 1000 + 100 + 1 ms.
        let records = vec![
            in_session(rec(0, &[100], 10, 1), "a", 0),
            in_session(rec(1000, &[100], 10, 1), "a", 1),
        ];
        // Recorded: turn 0 at 0-50 ms, turn 1 at 500-550 ms (turn 2 not replayed).
        let recorded = RecordedTimes::from([(
            "trace-a".to_string(),
            vec![(0.0, 50.0), (500.0, 550.0), (900.0, 2000.0)],
        )]);
        let f = figures(&records, &g, 1.0, &recorded);
        let d = f.slowdown.unwrap();
        assert_eq!(d.count, 1);
        assert!((d.p50 - 1101.0 / 550.0).abs() < 1e-9, "{d:?}");
    }

    #[test]
    fn a_tree_is_one_session() {
        let g = Goodput::parse("ttft:500").unwrap();
        let mut child = in_session(rec(100, &[900], 10, 1), "child", 0);
        let mut root = in_session(rec(0, &[100], 10, 1), "root", 0);
        for (r, depth) in [(&mut root, 0), (&mut child, 1)] {
            r.tree = Some(TreeInfo {
                agent_depth: depth,
                root_correlation_id: "root".into(),
                parent_correlation_id: None,
                source_trace_id: "t".into(),
                prefix_hit_blocks: 0,
                prefix_total_blocks: 0,
                source_outer_idx: None,
                source_inner_idx: None,
            });
        }
        let f = figures(&[root, child], &g, 1.0, &RecordedTimes::new());
        assert_eq!((f.sessions, f.good_sessions), (1, 0));
    }
}
