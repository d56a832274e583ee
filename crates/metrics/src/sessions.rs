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

/// One session's span: its first intended send and last end as replayed, and the recorded span of
/// the same turns (ms on the trace's clock) when the corpus gave their times.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SessionSpan {
    /// Profiling requests of the session (successful or failed, overflows apart).
    pub requests: u64,
    /// The earliest intended send of those requests.
    pub first_intended_ns: u64,
    /// The latest end of those requests.
    pub last_end_ns: u64,
    /// The first recorded start and last recorded end of the same turns, ms on the trace's clock.
    pub recorded_ms: Option<(f64, f64)>,
}

impl SessionSpan {
    /// Seconds from the first intended send to the last end.
    pub fn replayed_s(&self) -> f64 {
        self.last_end_ns.saturating_sub(self.first_intended_ns) as f64 / 1e9
    }

    /// Replayed over recorded wall time of the same turns; `None` without a recorded span.
    pub fn slowdown(&self) -> Option<f64> {
        let (start, end) = self.recorded_ms?;
        (end > start).then(|| self.replayed_s() * 1000.0 / (end - start))
    }
}

/// Each session's span over the profiling requests that succeeded or failed (context overflows
/// and warmup apart), keyed by [`RequestRecord::session_root`]: the one home of the slowdown rule,
/// which session goodput and the jobs both read.
pub fn spans<'a>(
    records: &'a [RequestRecord],
    recorded: &RecordedTimes,
) -> BTreeMap<&'a str, SessionSpan> {
    let mut per_session: BTreeMap<&str, SessionSpan> = BTreeMap::new();
    for r in records {
        if !matches!(stats::class(r), Class::Valid | Class::Error) {
            continue;
        }
        let span = per_session.entry(r.session_root()).or_insert(SessionSpan {
            requests: 0,
            first_intended_ns: u64::MAX,
            last_end_ns: 0,
            recorded_ms: None,
        });
        span.requests += 1;
        span.first_intended_ns = span.first_intended_ns.min(r.intended_ns);
        span.last_end_ns = span.last_end_ns.max(r.end_ns);
        let turn = recorded
            .get(&r.trace_id)
            .and_then(|turns| turns.get(r.turn as usize));
        if let Some(&(start, end)) = turn {
            span.recorded_ms = Some(match span.recorded_ms {
                Some((first, last)) => (first.min(start), last.max(end)),
                None => (start, end),
            });
        }
    }
    per_session
}

/// The figures over a run's records, `good` judging each request and `share` the share of a
/// session's requests that must be good.
pub fn figures(
    records: &[RequestRecord],
    good: &Goodput,
    share: f64,
    recorded: &RecordedTimes,
) -> SessionFigures {
    let per_session = spans(records, recorded);
    let mut good_requests: HashMap<&str, u64> = HashMap::new();
    for r in records {
        if matches!(stats::class(r), Class::Valid | Class::Error) && good.is_good(r) {
            *good_requests.entry(r.session_root()).or_default() += 1;
        }
    }
    let sessions = per_session.len() as u64;
    let good_sessions = per_session
        .iter()
        .filter(|(root, span)| {
            let good = good_requests.get(*root).copied().unwrap_or(0);
            good as f64 >= share * span.requests as f64 - 1e-9
        })
        .count() as u64;
    let slowdowns: Vec<f64> = per_session
        .values()
        .filter_map(SessionSpan::slowdown)
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
