//! TraceLab subagent links by timing containment (aiperf 0.13's `build_join_index`,
//! `group_children_by_parent`): which session is whose subagent, and counts of how often the rule fired.
//!
//! A window is a spawning tool call (a Claude `Agent`/`Task` call whose `tool_wall_latency_ms` is at
//! least the minimum, from `emitted_at` to `result_at`) or, for a codex session when the codex join is
//! on, the session-level `[earliest spawn_agent emitted_at, latest wait_agent result_at]`. A session
//! whose whole span lies inside a window of another session with the same `(user, project)` is that
//! window's child; among several windows the tightest wins (then the earliest, then the parent id). A
//! child whose parent is itself a child (a grandchild) is not linked: the weka shape nests one level.

use std::collections::HashMap;

use super::Session;
use crate::format::TracelabJoin;

/// Claude's blocking spawning tools.
const CLAUDE_SPAWN_TOOLS: [&str; 2] = ["Agent", "Task"];

/// One recovered parent -> child link.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Spawn {
    pub(crate) parent: String,
    /// The window (POSIX seconds).
    pub(crate) start: f64,
    pub(crate) end: f64,
    pub(crate) duration_ms: i64,
    pub(crate) codex: bool,
}

/// How often the join fired (a containment rate, not an accuracy).
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct JoinStats {
    pub(crate) windows: usize,
    pub(crate) windows_codex: usize,
    pub(crate) windows_matched: usize,
    pub(crate) matched: usize,
    pub(crate) matched_codex: usize,
    pub(crate) ambiguous: usize,
    pub(crate) grandchildren: usize,
}

impl JoinStats {
    pub(crate) fn summary(&self) -> String {
        format!(
            "{} spawn windows ({} claude, {} codex), {} children matched ({} claude, {} codex), \
             {} ambiguous (tightest window kept), {} windows matched no child, {} grandchildren kept \
             as standalone traces",
            self.windows,
            self.windows - self.windows_codex,
            self.windows_codex,
            self.matched,
            self.matched - self.matched_codex,
            self.matched_codex,
            self.ambiguous,
            self.windows - self.windows_matched,
            self.grandchildren
        )
    }
}

/// A window: (start, end, parent index, duration ms, codex).
type Window = (f64, f64, usize, i64, bool);

fn windows_of(parent_index: usize, session: &Session, knobs: &TracelabJoin) -> Vec<Window> {
    let tools = session.rounds.iter().flat_map(|r| r.tools.iter());
    if session.codex {
        if !knobs.codex {
            return Vec::new();
        }
        let spawns = tools
            .clone()
            .filter(|t| t.name == "spawn_agent")
            .filter_map(|t| t.emitted_at);
        let waits = tools
            .filter(|t| t.name == "wait_agent")
            .filter_map(|t| t.result_at);
        let start = spawns.fold(f64::INFINITY, f64::min);
        let end = waits.fold(f64::NEG_INFINITY, f64::max);
        if start.is_finite() && end.is_finite() && end > start {
            return vec![(
                start,
                end,
                parent_index,
                ((end - start) * 1000.0) as i64,
                true,
            )];
        }
        return Vec::new();
    }
    tools
        .filter(|t| CLAUDE_SPAWN_TOOLS.contains(&t.name.as_str()))
        .filter_map(|t| {
            let latency = t.wall_latency_ms?;
            if latency < knobs.min_spawn_ms as f64 {
                return None;
            }
            Some((
                t.emitted_at?,
                t.result_at?,
                parent_index,
                latency as i64,
                false,
            ))
        })
        .collect()
}

/// The links child id -> spawn, in session order, grandchildren left out.
pub(crate) fn build_join_index<'s>(
    sessions: &'s [Session],
    knobs: &TracelabJoin,
) -> (Vec<(&'s str, Spawn)>, JoinStats) {
    let mut stats = JoinStats::default();
    let mut by_ident: HashMap<&str, Vec<Window>> = HashMap::new();
    for (i, s) in sessions.iter().enumerate() {
        if s.span().is_none() {
            continue;
        }
        for w in windows_of(i, s, knobs) {
            stats.windows += 1;
            stats.windows_codex += usize::from(w.4);
            by_ident.entry(s.ident.as_str()).or_default().push(w);
        }
    }
    let mut links: Vec<(&str, Spawn)> = Vec::new();
    let mut hit: Vec<(u64, u64, usize)> = Vec::new();
    for (ci, c) in sessions.iter().enumerate() {
        let Some((cs, ce)) = c.span() else { continue };
        let mut hits: Vec<&Window> = by_ident
            .get(c.ident.as_str())
            .into_iter()
            .flatten()
            .filter(|w| w.2 != ci && cs >= w.0 && ce <= w.1)
            .collect();
        if hits.is_empty() {
            continue;
        }
        hits.sort_by(|a, b| {
            (a.1 - a.0)
                .total_cmp(&(b.1 - b.0))
                .then(a.0.total_cmp(&b.0))
                .then(sessions[a.2].id.cmp(&sessions[b.2].id))
        });
        stats.ambiguous += usize::from(hits.len() > 1);
        let &(start, end, p, duration_ms, codex) = hits[0];
        let key = (start.to_bits(), end.to_bits(), p);
        if !hit.contains(&key) {
            hit.push(key);
        }
        stats.matched += 1;
        stats.matched_codex += usize::from(codex);
        links.push((
            c.id.as_str(),
            Spawn {
                parent: sessions[p].id.clone(),
                start,
                end,
                duration_ms,
                codex,
            },
        ));
    }
    stats.windows_matched = hit.len();
    let children: std::collections::HashSet<&str> = links.iter().map(|(c, _)| *c).collect();
    let before = links.len();
    links.retain(|(_, s)| !children.contains(s.parent.as_str()));
    stats.grandchildren = before - links.len();
    (links, stats)
}
