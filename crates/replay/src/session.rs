//! A session's identity while it runs ([`Session`]): its lane, trace and recycle pass, the scenario's
//! cache-bust marker text, and the correlation id its requests carry.

use std::sync::atomic::Ordering;

use super::Shared;
use agentx_scenario::types::SessionId;

/// The marker text of a session.
pub(super) fn marker(sh: &Shared, lane: u32, trace_id: &str, recycle_pass: u32) -> String {
    let sid = SessionId {
        run_id: sh.cfg.run_id.clone(),
        recycle_pass,
        lane,
        trace_id: trace_id.to_owned(),
    };
    match sh
        .scenario
        .lock()
        .expect("scenario lock")
        .cache_bust(sh.cfg.placement, &sid)
    {
        Ok(m) => m.text,
        Err(e) => {
            tracing::error!("{e}; this session goes without a cache-bust marker");
            String::new()
        }
    }
}

/// One session's identity while it runs.
#[derive(Clone)]
pub(super) struct Session {
    pub(super) lane: u32,
    pub(super) trace: usize,
    pub(super) recycle_pass: u32,
    pub(super) marker: String,
    pub(super) correlation_id: String,
    pub(super) session_num: u64,
    /// A stream of a session tree: its place in the tree (the record's prefix stamp is per turn).
    pub(super) tree: Option<agentx_record::TreeInfo>,
}

impl Session {
    pub(super) fn new(
        sh: &Shared,
        lane: u32,
        trace: usize,
        recycle_pass: u32,
        marker: String,
    ) -> Session {
        let session_num =
            sh.session_seq.fetch_add(1, Ordering::Relaxed) * sh.stride.1 + sh.stride.0;
        Session {
            lane,
            trace,
            recycle_pass,
            marker,
            correlation_id: format!("{}-s{session_num}", sh.run_short),
            session_num,
            tree: None,
        }
    }
}
