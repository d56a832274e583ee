//! Jobs: one trace (a root stream with its whole subagent tree, or a single-stream session)
//! replayed from its first turn to its last inside the profiling window. A session that began
//! before the window (a lane's first trace, started at t* part-way through, or a tree recycled in
//! the cache-pressure stage) or that the window's end cut is a partial job, counted apart and never
//! as a job; a stream a context overflow ended is a job ended early. From the whole ones: jobs per
//! hour of the window, per GPU and per lane, and per user (TensorRT-LLM's job-level interactivity:
//! 3,600 s over the mean job wall time). A job's wall time and slowdown are its session's
//! ([`crate::sessions::spans`], the one home of that rule).
//!
//! Counting whole jobs only biases jobs per hour low by up to about two partial jobs per lane per
//! window (one started before it, one cut by its end); the per-user figure, a ratio of wall times,
//! has no such edge.

use std::collections::{BTreeMap, HashMap};

use agentx_record::{Phase, RequestRecord};

use crate::Outcome;

use crate::sessions::{self, RecordedTimes};
use crate::Dist;

/// Each corpus trace's streams that replay requests (by the trace's id, a tree record's
/// `source_trace_id`): the stream's id (the records' `trace_id`) and its turn count. A trace not in
/// the map (a single-stream session, or a merge without its dataset) is judged by the streams its
/// records show, each by its records' `num_turns`.
pub type JobShapes = HashMap<String, Vec<(String, u32)>>;

/// How one session of the run ended, as a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobClass {
    /// Every stream ran from its first turn to its last in the profiling window, and every
    /// request succeeded.
    Ok,
    /// Every stream ran through, but some request failed (errors do not end a stream).
    WithErrors,
    /// Begun before the profiling window: warmup requests, or a stream first seen after turn 0.
    PartialStart,
    /// Cut by the run's end: a cancelled request, or turns (or whole streams) never sent.
    PartialEnd,
    /// A context overflow ended a stream before its last turn.
    EndedEarly,
}

/// What the jobs of a run made.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
pub struct JobFigures {
    /// Whole jobs whose every request succeeded: the jobs of every rate below.
    pub ok: u64,
    /// Whole jobs with at least one failed request (not in `ok`).
    pub with_errors: u64,
    /// Sessions begun before the profiling window (a lane's first trace at t*, a tree recycled in
    /// the cache-pressure stage).
    pub partial_start: u64,
    /// Sessions the end of the run cut.
    pub partial_end: u64,
    /// Sessions a context overflow ended before their last turn.
    pub ended_early: u64,
    /// Seconds of the profiling window the rates divide by.
    pub window_s: f64,
    /// `ok` jobs per hour of the window.
    pub jobs_per_hour: f64,
    /// `jobs_per_hour` over `--gpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_per_hour_per_gpu: Option<f64>,
    /// `jobs_per_hour` over the concurrent lanes (closed loop only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_per_hour_per_lane: Option<f64>,
    /// 3,600 s over the mean wall time of the `ok` jobs: what one user running jobs back to back
    /// would finish per hour (TensorRT-LLM's job-level interactivity), free of the window's edges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_per_hour_per_user: Option<f64>,
    /// Seconds from each `ok` job's first intended send to its last end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_s: Option<Dist>,
    /// Each `ok` job's wall time over the recorded wall time of the same turns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown: Option<Dist>,
}

/// What the rates divide by.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobDenominators {
    /// The profiling window, ns on the run's clock.
    pub window_ns: (u64, u64),
    /// Concurrent lanes (`None` for an open loop).
    pub lanes: Option<u32>,
    /// `--gpus`.
    pub gpus: Option<u32>,
}

/// Each session of the run with a profiling request (by [`RequestRecord::session_root`]) and how
/// it ended as a job; a session wholly in warmup is no part of the window and is left out.
pub fn classify<'a>(
    records: &'a [RequestRecord],
    shapes: &JobShapes,
) -> BTreeMap<&'a str, JobClass> {
    let mut sessions: BTreeMap<&str, Vec<&RequestRecord>> = BTreeMap::new();
    for record in records {
        sessions
            .entry(record.session_root())
            .or_default()
            .push(record);
    }
    sessions
        .into_iter()
        .filter(|(_, session)| session.iter().any(|r| r.phase == Phase::Profiling))
        .map(|(root, session)| (root, class_of(&session, shapes)))
        .collect()
}

/// The rule for one session's records.
fn class_of(session: &[&RequestRecord], shapes: &JobShapes) -> JobClass {
    // Per stream: the first and last turn sent, and whether a context overflow came before its
    // last turn.
    let mut streams: HashMap<&str, StreamSeen> = HashMap::new();
    for record in session {
        let seen = streams.entry(&record.trace_id).or_insert(StreamSeen {
            first_turn: u32::MAX,
            last_turn: 0,
            num_turns: record.num_turns,
            overflowed_early: false,
        });
        seen.first_turn = seen.first_turn.min(record.turn);
        seen.last_turn = seen.last_turn.max(record.turn);
        seen.overflowed_early |= record.context_overflow && record.turn + 1 < record.num_turns;
    }
    let began_before = session.iter().any(|record| record.phase == Phase::Warmup)
        || streams.values().any(|seen| seen.first_turn > 0);
    if began_before {
        return JobClass::PartialStart;
    }
    if session.iter().any(|record| record.cancelled) {
        return JobClass::PartialEnd;
    }
    if streams.values().any(|seen| seen.overflowed_early) {
        return JobClass::EndedEarly;
    }
    let expected = session[0]
        .tree
        .as_ref()
        .and_then(|tree| shapes.get(&tree.source_trace_id));
    let ran_through = match expected {
        Some(expected) => expected.iter().all(|(stream, turns)| {
            streams
                .get(stream.as_str())
                .is_some_and(|seen| seen.last_turn + 1 >= *turns)
        }),
        None => streams
            .values()
            .all(|seen| seen.last_turn + 1 >= seen.num_turns),
    };
    if !ran_through {
        JobClass::PartialEnd
    } else if session.iter().all(|record| Outcome::of(record).is_ok()) {
        JobClass::Ok
    } else {
        JobClass::WithErrors
    }
}

struct StreamSeen {
    first_turn: u32,
    last_turn: u32,
    num_turns: u32,
    overflowed_early: bool,
}

/// The jobs of a run's records; `None` when the run has no profiling window or no session.
pub fn figures(
    records: &[RequestRecord],
    shapes: &JobShapes,
    recorded: &RecordedTimes,
    per: JobDenominators,
) -> Option<JobFigures> {
    let (start_ns, end_ns) = per.window_ns;
    let window_s = end_ns.saturating_sub(start_ns) as f64 / 1e9;
    let classes = classify(records, shapes);
    if window_s <= 0.0 || classes.is_empty() {
        return None;
    }
    let count = |class: JobClass| classes.values().filter(|c| **c == class).count() as u64;
    let spans = sessions::spans(records, recorded);
    let ok_spans: Vec<&sessions::SessionSpan> = classes
        .iter()
        .filter(|(_, class)| **class == JobClass::Ok)
        .filter_map(|(root, _)| spans.get(root))
        .collect();
    let walls: Vec<f64> = ok_spans.iter().map(|span| span.replayed_s()).collect();
    let ok = count(JobClass::Ok);
    let jobs_per_hour = 3600.0 * ok as f64 / window_s;
    let mean_wall = (!walls.is_empty()).then(|| walls.iter().sum::<f64>() / walls.len() as f64);
    Some(JobFigures {
        ok,
        with_errors: count(JobClass::WithErrors),
        partial_start: count(JobClass::PartialStart),
        partial_end: count(JobClass::PartialEnd),
        ended_early: count(JobClass::EndedEarly),
        window_s,
        jobs_per_hour,
        jobs_per_hour_per_gpu: per.gpus.map(|gpus| jobs_per_hour / f64::from(gpus.max(1))),
        jobs_per_hour_per_lane: per
            .lanes
            .filter(|lanes| *lanes > 0)
            .map(|lanes| jobs_per_hour / f64::from(lanes)),
        jobs_per_hour_per_user: mean_wall
            .filter(|wall| *wall > 0.0)
            .map(|wall| 3600.0 / wall),
        slowdown: Dist::of(ok_spans.iter().filter_map(|span| span.slowdown()).collect()),
        wall_s: Dist::of(walls),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::testkit::{failed, in_stream, in_tree, rec};

    /// Turn `turn` of stream `stream` (of `turns`) in the tree of trace `trace` rooted at `root`,
    /// sent at `send_ms`.
    fn turn(
        trace: &str,
        root: &str,
        stream: &str,
        turn: u32,
        turns: u32,
        send_ms: u64,
    ) -> RequestRecord {
        let mut record = in_stream(rec(send_ms, &[10, 20], 100, 2), stream, turn);
        record.trace_id = format!("{trace}/{stream}");
        record.num_turns = turns;
        let parent = (stream != root).then_some(root);
        let mut record = in_tree(record, root, parent);
        record.tree.as_mut().unwrap().source_trace_id = trace.into();
        record
    }

    /// Trace `t` has a root of 3 turns and one child of 2.
    fn shapes() -> JobShapes {
        JobShapes::from([(
            "t".to_string(),
            vec![("t/root".to_string(), 3), ("t/child".to_string(), 2)],
        )])
    }

    /// The whole tree `root` of trace `t`, from `at_ms` on (root turns 0-2, child turns 0-1).
    fn whole(root: &str, at_ms: u64) -> Vec<RequestRecord> {
        let mut records: Vec<RequestRecord> = (0..3)
            .map(|n| turn("t", root, root, n, 3, at_ms + 100 * u64::from(n)))
            .collect();
        for record in &mut records {
            record.trace_id = "t/root".into();
        }
        let child = format!("{root}-c");
        for n in 0..2 {
            let mut record = turn("t", root, &child, n, 2, at_ms + 50 + 100 * u64::from(n));
            record.trace_id = "t/child".into();
            records.push(record);
        }
        records
    }

    #[test]
    fn each_way_a_tree_ends_is_counted_in_its_class() {
        let mut records = Vec::new();
        // Two whole trees of one trace on one lane: two jobs.
        records.extend(whole("a", 0));
        records.extend(whole("b", 1000));
        // Begun at t*: a warmup primer, the root from turn 1.
        let mut late = whole("c", 2000);
        late.retain(|r| r.turn >= 1 || r.trace_id == "t/child");
        late[0].phase = Phase::Warmup;
        records.extend(late);
        // The child's last turn cancelled by the run's end.
        let mut cut = whole("d", 3000);
        cut.last_mut().unwrap().cancelled = true;
        records.extend(cut);
        // The child never sent a request.
        let mut childless = whole("e", 4000);
        childless.retain(|r| r.trace_id == "t/root");
        records.extend(childless);
        // The root overflowed at turn 1 of 3.
        let mut overflowed = whole("f", 5000);
        overflowed.retain(|r| !(r.trace_id == "t/root" && r.turn == 2));
        overflowed[1].context_overflow = true;
        records.extend(overflowed);
        // A failed request mid-tree: whole, with errors.
        let mut errored = whole("g", 6000);
        let (turn1, trace) = (errored[1].turn, errored[1].trace_id.clone());
        let mut failure = failed(6100, 100);
        failure.correlation_id = errored[1].correlation_id.clone();
        failure.tree = errored[1].tree.clone();
        failure.turn = turn1;
        failure.num_turns = 3;
        failure.trace_id = trace;
        errored[1] = failure;
        records.extend(errored);

        let classes = classify(&records, &shapes());
        let expected = [
            ("a", JobClass::Ok),
            ("b", JobClass::Ok),
            ("c", JobClass::PartialStart),
            ("d", JobClass::PartialEnd),
            ("e", JobClass::PartialEnd),
            ("f", JobClass::EndedEarly),
            ("g", JobClass::WithErrors),
        ];
        assert_eq!(classes.into_iter().collect::<Vec<_>>(), expected);

        let per = JobDenominators {
            window_ns: (0, 7_200_000_000),
            lanes: Some(2),
            gpus: Some(4),
        };
        let jobs = figures(&records, &shapes(), &RecordedTimes::new(), per).unwrap();
        assert_eq!((jobs.ok, jobs.with_errors, jobs.partial_start), (2, 1, 1));
        assert_eq!((jobs.partial_end, jobs.ended_early), (2, 1));
        // 2 jobs in 7.2 s: 1,000 an hour, 250 per GPU, 500 per lane.
        assert!((jobs.jobs_per_hour - 1000.0).abs() < 1e-9);
        assert_eq!(jobs.jobs_per_hour_per_gpu, Some(250.0));
        assert_eq!(jobs.jobs_per_hour_per_lane, Some(500.0));
        // Each whole tree: intended 0 ms to the root's last end at 200 + 20 + 1 ms.
        let wall = jobs.wall_s.unwrap();
        assert_eq!(wall.count, 2);
        assert!((wall.p50 - 0.221).abs() < 1e-9, "{wall:?}");
        assert!((jobs.jobs_per_hour_per_user.unwrap() - 3600.0 / 0.221).abs() < 1e-6);
    }

    #[test]
    fn a_single_stream_session_is_judged_by_its_own_turn_count() {
        let stream = |corr: &str, turns: &[u32]| -> Vec<RequestRecord> {
            turns
                .iter()
                .map(|&n| in_stream(rec(u64::from(n) * 100, &[10], 10, 1), corr, n))
                .collect()
        };
        // rec's num_turns is 3: s1 whole, s2 from turn 1, s3 cut after turn 1.
        let mut records = stream("s1", &[0, 1, 2]);
        records.extend(stream("s2", &[1, 2]));
        records.extend(stream("s3", &[0, 1]));
        let classes = classify(&records, &JobShapes::new());
        assert_eq!(classes["s1"], JobClass::Ok);
        assert_eq!(classes["s2"], JobClass::PartialStart);
        assert_eq!(classes["s3"], JobClass::PartialEnd);
    }

    #[test]
    fn a_run_without_a_window_has_no_job_figures() {
        let records = vec![rec(0, &[1], 1, 1)];
        let per = JobDenominators::default();
        assert_eq!(
            figures(&records, &JobShapes::new(), &RecordedTimes::new(), per),
            None
        );
    }
}
