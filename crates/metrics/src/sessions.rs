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

/// The sessions (by root) whose share of good requests reached `share`: the one home of the good
/// session rule.
pub fn good_session_roots<'a>(
    records: &'a [RequestRecord],
    good: &Goodput,
    share: f64,
) -> std::collections::HashSet<&'a str> {
    let mut counts: HashMap<&str, (u64, u64)> = HashMap::new();
    for r in records {
        if matches!(stats::class(r), Class::Valid | Class::Error) {
            let (requests, good_requests) = counts.entry(r.session_root()).or_default();
            *requests += 1;
            *good_requests += u64::from(good.is_good(r));
        }
    }
    counts
        .into_iter()
        .filter(|(_, (requests, good_requests))| {
            *good_requests as f64 >= share * *requests as f64 - 1e-9
        })
        .map(|(root, _)| root)
        .collect()
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
    let sessions = per_session.len() as u64;
    let good_sessions = good_session_roots(records, good, share).len() as u64;
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

/// `--session-slo`: what a session meeting its objectives is, judged on its own requests (an
/// AgentPerf-style tier is `ttft_p90` plus `output_speed`). The percentiles are stated, not implied:
/// `ttft_p90:MS` bounds the p90 of the session's times to first token; `e2e_interactivity:TOK_S`
/// bounds from below aiperf's E2E-normalized interactivity p90 over the session's requests;
/// `output_speed:TOK_S` bounds from below the median of its requests' output speed (aiperf's
/// `output_token_throughput_per_user`); `slowdown:X` bounds its replayed over recorded wall time.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionSlo {
    spec: String,
    objectives: Vec<(SessionObjective, f64)>,
}

/// One figure a session is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionObjective {
    TtftP90,
    E2eInteractivity,
    OutputSpeed,
    Slowdown,
}

const SESSION_OBJECTIVES: [(&str, SessionObjective); 4] = [
    ("ttft_p90", SessionObjective::TtftP90),
    ("e2e_interactivity", SessionObjective::E2eInteractivity),
    ("output_speed", SessionObjective::OutputSpeed),
    ("slowdown", SessionObjective::Slowdown),
];

/// What the sessions of a run made of `--session-slo`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct SessionSloFigures {
    /// The objectives as given.
    pub spec: String,
    /// Sessions with at least one profiling request.
    pub sessions: u64,
    /// Sessions that met every objective (a session without the figure an objective names, e.g.
    /// no successful request, does not).
    pub meeting: u64,
    /// `meeting / sessions`: the `sessions_meeting_slo` figure `--slo` may bound.
    pub meeting_fraction: f64,
}

impl SessionSlo {
    /// Parses `name:bound` pairs (spaces or commas between them); an error names the pair and the
    /// figures a session objective may name.
    pub fn parse(text: &str) -> Result<SessionSlo, String> {
        let example = "\"ttft_p90:2000 output_speed:20\"";
        let mut objectives: Vec<(SessionObjective, f64)> = Vec::new();
        for (pair, name, bound) in crate::goodput::bound_pairs(text, "--session-slo", example)? {
            let Some(&(_, objective)) = SESSION_OBJECTIVES.iter().find(|(n, _)| *n == name) else {
                let names: Vec<&str> = SESSION_OBJECTIVES.iter().map(|(n, _)| *n).collect();
                return Err(format!(
                    "--session-slo {pair:?}: {name:?} is not a session figure; name one of {}",
                    names.join(", ")
                ));
            };
            if objectives.iter().any(|(o, _)| *o == objective) {
                return Err(format!("--session-slo names {name} twice"));
            }
            objectives.push((objective, bound));
        }
        Ok(SessionSlo {
            spec: text.trim().to_string(),
            objectives,
        })
    }

    /// The objectives as given.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// Judges every session of the records (the sessions [`spans`] finds).
    pub fn judge(&self, records: &[RequestRecord], recorded: &RecordedTimes) -> SessionSloFigures {
        let sessions = spans(records, recorded).len() as u64;
        let meeting = self.meeting(records, recorded).len() as u64;
        SessionSloFigures {
            spec: self.spec.clone(),
            sessions,
            meeting,
            meeting_fraction: if sessions > 0 {
                meeting as f64 / sessions as f64
            } else {
                0.0
            },
        }
    }

    /// The sessions (by root) that met every objective.
    pub fn meeting<'a>(
        &self,
        records: &'a [RequestRecord],
        recorded: &RecordedTimes,
    ) -> std::collections::HashSet<&'a str> {
        let per_session = spans(records, recorded);
        let mut by_session: HashMap<&str, Vec<&RequestRecord>> = HashMap::new();
        for r in records {
            if stats::class(r) == Class::Valid {
                by_session.entry(r.session_root()).or_default().push(r);
            }
        }
        per_session
            .iter()
            .filter(|(root, span)| {
                let valid = by_session.get(*root).map_or(&[][..], Vec::as_slice);
                self.objectives.iter().all(|&(objective, bound)| {
                    session_figure(objective, valid, span).is_some_and(|figure| match objective {
                        SessionObjective::TtftP90 | SessionObjective::Slowdown => figure <= bound,
                        SessionObjective::E2eInteractivity | SessionObjective::OutputSpeed => {
                            figure >= bound
                        }
                    })
                })
            })
            .map(|(root, _)| *root)
            .collect()
    }
}

/// One session's figure for `objective`, from its successful requests and its span.
fn session_figure(
    objective: SessionObjective,
    valid: &[&RequestRecord],
    span: &SessionSpan,
) -> Option<f64> {
    match objective {
        SessionObjective::TtftP90 => {
            let ttfts: Vec<f64> = valid
                .iter()
                .filter_map(|r| r.ttft_ns())
                .map(|ns| ns as f64 / 1e6)
                .collect();
            Dist::of(ttfts).map(|dist| dist.p90)
        }
        SessionObjective::E2eInteractivity => {
            stats::e2e_normalized_interactivity(valid.iter().copied())
                .into_iter()
                .find(|(metric, _)| metric.tag == stats::E2E_NORMALIZED_INTERACTIVITY_P90.tag)
                .and_then(|(_, value)| value.as_f64())
        }
        SessionObjective::OutputSpeed => {
            let speeds: Vec<f64> = valid
                .iter()
                .filter_map(|r| {
                    stats::record_scalar_values(r)
                        .into_iter()
                        .find(|(metric, _)| {
                            metric.tag == stats::OUTPUT_TOKEN_THROUGHPUT_PER_USER.tag
                        })
                        .and_then(|(_, value)| value.as_f64())
                })
                .collect();
            Dist::of(speeds).map(|dist| dist.p50)
        }
        SessionObjective::Slowdown => span.slowdown(),
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

    #[test]
    fn a_session_meets_its_objectives_on_its_own_requests() {
        // Session a: TTFTs 100 and 200 ms, one token every 10 ms (100 tokens/s). Session b: TTFTs
        // 100 and 900 ms, one token every 50 ms (20 tokens/s).
        let records = vec![
            in_session(rec(0, &[100, 110, 120], 10, 3), "a", 0),
            in_session(rec(1000, &[200, 210, 220], 10, 3), "a", 1),
            in_session(rec(0, &[100, 150, 200], 10, 3), "b", 0),
            in_session(rec(1000, &[900, 950, 1000], 10, 3), "b", 1),
        ];
        let none = RecordedTimes::new();
        let judge = |spec: &str| SessionSlo::parse(spec).unwrap().judge(&records, &none);
        // The p90 of a's TTFTs is 190 ms; of b's, 820 ms.
        assert_eq!(judge("ttft_p90:500").meeting, 1);
        assert_eq!(judge("ttft_p90:1000").meeting, 2);
        assert_eq!(judge("output_speed:50").meeting, 1);
        assert_eq!(judge("output_speed:15 ttft_p90:1000").meeting_fraction, 1.0);
        // No recorded span: no slowdown, so no session meets a slowdown bound.
        assert_eq!(judge("slowdown:100").meeting, 0);
        let error = SessionSlo::parse("ttft_p90:1 ttft_p90:2").unwrap_err();
        assert!(error.contains("twice"), "{error}");
        let error = SessionSlo::parse("tpot:5").unwrap_err();
        assert!(
            error.contains("name one of ttft_p90, e2e_interactivity"),
            "{error}"
        );
    }
}
