//! A run's session table with every judgment the run made: good requests and sessions
//! (`--goodput`, `--session-goodput-share`), sessions meeting `--session-slo`, whole jobs with
//! their wall time, and the window's energy. The run, `trials` and `compare` build it alike, so an
//! interval means the same wherever it is printed.

use std::collections::HashSet;

use agentx_record::RequestRecord;

use super::table::{Judgments, SessionTable};
use crate::goodput::Goodput;
use crate::jobs::{self, JobClass, JobShapes};
use crate::sessions::{self, RecordedTimes, SessionSlo};

/// What a run judged its records by.
#[derive(Clone, Copy)]
pub struct RunJudgments<'a> {
    /// `--goodput` and `--session-goodput-share`.
    pub goodput: Option<(&'a Goodput, f64)>,
    /// `--session-slo`.
    pub session_slo: Option<&'a SessionSlo>,
    /// The corpus's recorded turn times (the slowdown's baseline).
    pub recorded: &'a RecordedTimes,
    /// The corpus's trees (what a whole job runs).
    pub shapes: &'a JobShapes,
    /// The GPUs' energy over the window, joules.
    pub energy_j: Option<f64>,
}

/// The session table of a run's records over its profiling window of `window_ns`, with every
/// judgment the run made.
pub fn run_table(
    records: &[RequestRecord],
    window_ns: u64,
    judged: &RunJudgments<'_>,
) -> SessionTable {
    let good_sessions: Option<HashSet<&str>> = judged
        .goodput
        .map(|(goodput, share)| sessions::good_session_roots(records, goodput, share));
    let meeting: Option<HashSet<&str>> = judged
        .session_slo
        .map(|slo| slo.meeting(records, judged.recorded));
    let classes = jobs::classify(records, judged.shapes);
    let spans = sessions::spans(records, judged.recorded);
    let job_wall = |root: &str| {
        (classes.get(root) == Some(&JobClass::Ok))
            .then(|| spans.get(root).map(sessions::SessionSpan::replayed_s))
            .flatten()
    };
    let mut judgments = Judgments::default().jobs(job_wall);
    if let Some((goodput, _)) = judged.goodput {
        judgments = judgments.goodput(goodput);
    }
    if let Some(good) = &good_sessions {
        judgments = judgments.good_sessions(|root| good.contains(root));
    }
    if let Some(meeting) = &meeting {
        judgments = judgments.sessions_meeting_slo(|root| meeting.contains(root));
    }
    if let Some(joules) = judged.energy_j {
        judgments = judgments.energy_j(joules);
    }
    SessionTable::judged(records, window_ns, &judgments)
}
