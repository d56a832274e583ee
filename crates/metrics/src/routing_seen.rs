//! Where each session's turns landed ([`RoutingSeen`]): from the worker each response named
//! (`RequestRecord.server.worker`: the simulator's engine, Dynamo's decode worker and rank), how
//! many workers served the profiling requests, how many sessions stayed on one worker, and how
//! often a session's next turn went to another. A routing A/B (session affinity on and off) then
//! says where its cache gain came from. A session is a whole tree in a tree replay (its root
//! stream's correlation id), a stream otherwise.

use std::collections::{BTreeMap, BTreeSet};

use agentx_record::{Phase, RequestRecord};
use serde::{Deserialize, Serialize};

/// The workers the sessions' turns landed on, over the profiling requests that named one.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RoutingSeen {
    /// Distinct workers that served them.
    pub workers: u64,
    /// Sessions with at least one such request.
    pub sessions: u64,
    /// Sessions whose every such request went to one worker.
    pub sessions_on_one_worker: u64,
    /// Times a session's request went to another worker than its previous one (in send order).
    pub worker_switches: u64,
    /// Requests that named a worker.
    pub requests: u64,
}

impl RoutingSeen {
    /// The routing of `records`' profiling requests; `None` when none named a worker.
    pub fn of(records: &[RequestRecord]) -> Option<RoutingSeen> {
        let mut by_session: BTreeMap<&str, Vec<(u64, &str)>> = BTreeMap::new();
        for rec in records.iter().filter(|rec| rec.phase == Phase::Profiling) {
            let Some(worker) = rec.server.as_ref().and_then(|side| side.worker.as_deref()) else {
                continue;
            };
            let session = rec.session_root();
            by_session
                .entry(session)
                .or_default()
                .push((rec.send_ns, worker));
        }
        if by_session.is_empty() {
            return None;
        }
        let mut seen = RoutingSeen::default();
        let mut workers = BTreeSet::new();
        for turns in by_session.values_mut() {
            turns.sort_by_key(|&(send_ns, _)| send_ns);
            seen.sessions += 1;
            seen.requests += turns.len() as u64;
            let switches = turns
                .windows(2)
                .filter(|pair| pair[0].1 != pair[1].1)
                .count() as u64;
            seen.worker_switches += switches;
            let first = turns[0].1;
            if turns.iter().all(|&(_, worker)| worker == first) {
                seen.sessions_on_one_worker += 1;
            }
            workers.extend(turns.iter().map(|&(_, worker)| worker));
        }
        seen.workers = workers.len() as u64;
        Some(seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agentx_record::{testkit, ServerSide};

    fn on(worker: &str, stream: &str, root: &str, send_ms: u64) -> RequestRecord {
        let mut rec = testkit::in_tree(
            testkit::in_stream(testkit::rec(send_ms, &[10], 100, 1), stream, 0),
            root,
            (stream != root).then_some(root),
        );
        rec.server = Some(ServerSide {
            worker: Some(worker.to_string()),
            ..ServerSide::default()
        });
        rec
    }

    #[test]
    fn a_tree_is_one_session_and_switches_count_in_send_order() {
        let records = vec![
            // Tree a: root and child on worker 0, then the root moves to 1 and back (2 switches,
            // whatever the order the records were written in).
            on("1", "a", "a", 300),
            on("0", "a", "a", 100),
            on("0", "a-child", "a", 200),
            on("0", "a", "a", 400),
            // Tree b stays on worker 2.
            on("2", "b", "b", 150),
            on("2", "b-child", "b", 250),
        ];
        let mut warm = on("3", "c", "c", 50);
        warm.phase = Phase::Warmup;
        let mut unnamed = testkit::rec(500, &[10], 100, 1);
        unnamed.server = None;
        let all: Vec<RequestRecord> = records.into_iter().chain([warm, unnamed]).collect();
        assert_eq!(
            RoutingSeen::of(&all),
            Some(RoutingSeen {
                workers: 3,
                sessions: 2,
                sessions_on_one_worker: 1,
                worker_switches: 2,
                requests: 6,
            })
        );
        assert_eq!(RoutingSeen::of(&all[6..]), None);
    }
}
