//! A stream's turns: the per-turn fields from its source requests, the prefix-cache stamps and the
//! replay-barrier predecessors.

use super::*;

pub(super) fn turns_of(reqs: &[Src<'_>], max_osl: Option<u32>) -> Vec<TreeTurn> {
    reqs.iter()
        .enumerate()
        .map(|(k, r)| {
            let prev = k.checked_sub(1).map(|j| &reqs[j]);
            let delay = prev.map(|p| end_to_start_delay(p, r));
            let think = prev.map(|p| match r.req.recorded_think_time {
                Some(tt) => (1000.0 * tt).max(0.0),
                None => end_to_start_delay(p, r),
            });
            let out = max_osl.map_or(r.req.output, |m| r.req.output.min(m));
            TreeTurn {
                ts_ms: 1000.0 * r.t,
                delay_ms: delay,
                delay_ms_think_time_only: think,
                api_time_ms: r
                    .req
                    .recorded_api_time
                    .filter(|a| a.is_finite())
                    .map(|a| a.max(0.0) * 1000.0),
                max_tokens: if r.req.no_output_limit {
                    crate::NO_OUTPUT_LIMIT
                } else {
                    out.max(1)
                },
                prefix_hit_blocks: 0,
                prefix_total_blocks: r.req.hash_ids.len() as u32,
                source_outer_idx: r.outer,
                source_inner_idx: r.inner,
                input_kind: input_kind(r.req, prev.map(|p| p.req)),
                spawns: Vec::new(),
                joins: Vec::new(),
                replay_predecessors: Vec::new(),
            }
        })
        .collect()
}

/// One seen-set per trace, walked in `(t, outer index, chain, k)` order (root and flat turns key
/// `(t, outer, 0, 0)`); `hit` = leading hash ids already seen.
pub(super) fn stamp_prefixes(
    streams: &mut [Stream],
    stream_reqs: &[Vec<Src<'_>>],
    stream_entry: &[Option<(usize, usize)>],
) {
    let mut keys: Vec<(f64, u32, usize, usize, usize, usize)> = Vec::new();
    for (st, reqs) in stream_reqs.iter().enumerate() {
        for (k, r) in reqs.iter().enumerate() {
            let key = match stream_entry[st] {
                Some((_, ci)) => (r.t, r.outer, ci, k),
                None => (r.t, r.outer, 0, 0),
            };
            keys.push((key.0, key.1, key.2, key.3, st, k));
        }
    }
    keys.sort_by(|a, b| {
        chain::fcmp(a.0, b.0)
            .then(a.1.cmp(&b.1))
            .then(a.2.cmp(&b.2))
            .then(a.3.cmp(&b.3))
    });
    let mut seen: std::collections::HashSet<u32, std::hash::BuildHasherDefault<IdHasher>> =
        std::collections::HashSet::default();
    for &(_, _, _, _, st, k) in &keys {
        let h = &stream_reqs[st][k].req.hash_ids;
        let hit = h.iter().take_while(|id| seen.contains(*id)).count();
        // The leading `hit` ids are in the set already.
        seen.extend(h[hit..].iter().copied());
        streams[st].turns[k].prefix_hit_blocks = hit as u32;
    }
}

/// A hasher for hash ids (u32 block ids, not attacker-chosen): one multiply instead of SipHash,
/// which made stamping a long-context corpus the bulk of building its trees.
#[derive(Default)]
pub(super) struct IdHasher(u64);

impl std::hash::Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(5) ^ u64::from(b)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u32(&mut self, i: u32) {
        self.0 = (u64::from(i) ^ self.0.rotate_left(5)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Replay-barrier predecessors (aiperf's `infer_cross_stream_predecessors`, per scope): for a turn
/// starting at `s`, on every other stream of its scope the latest interval `[start, start + api]`
/// with `start < s` and `end <= s` (by `(end, start, key)`), minus picks that ended before another
/// pick started; sorted by (conversation id, turn).
pub(super) fn install_predecessors(streams: &mut [Stream]) {
    let n = streams.len();
    // (stream, turn, start, end) per stream.
    let intervals: Vec<Vec<(f64, f64)>> = streams
        .iter()
        .map(|s| {
            s.turns
                .iter()
                .map(|t| (t.ts_ms, t.ts_ms + t.api_time_ms.unwrap_or(0.0)))
                .collect()
        })
        .collect();
    let key_cmp = |a: (usize, usize), b: (usize, usize)| {
        streams[a.0].id.cmp(&streams[b.0].id).then(a.1.cmp(&b.1))
    };
    let mut all: Vec<Vec<Vec<(usize, usize)>>> = Vec::with_capacity(n);
    for st in 0..n {
        let mut per_turn = Vec::with_capacity(intervals[st].len());
        for &(s, _) in &intervals[st] {
            let mut frontier: Vec<(usize, usize, f64, f64)> = Vec::new();
            for other in 0..n {
                if other == st || streams[other].replay_scope != streams[st].replay_scope {
                    continue;
                }
                let mut best: Option<(usize, f64, f64)> = None;
                for (k, &(a, e)) in intervals[other].iter().enumerate() {
                    if !(a < s && e <= s) {
                        continue;
                    }
                    let better = match best {
                        None => true,
                        Some((bk, ba, be)) => chain::fcmp(e, be)
                            .then(chain::fcmp(a, ba))
                            .then(key_cmp((other, k), (other, bk)))
                            .is_gt(),
                    };
                    if better {
                        best = Some((k, a, e));
                    }
                }
                if let Some((k, a, e)) = best {
                    frontier.push((other, k, a, e));
                }
            }
            let mut preds: Vec<(usize, usize)> = frontier
                .iter()
                .enumerate()
                .filter(|&(i, c)| {
                    !frontier
                        .iter()
                        .enumerate()
                        .any(|(j, l)| j != i && c.2 < l.2 && c.3 <= l.2)
                })
                .map(|(_, c)| (c.0, c.1))
                .collect();
            preds.sort_by(|&a, &b| key_cmp(a, b));
            per_turn.push(preds);
        }
        all.push(per_turn);
    }
    for (st, per_turn) in all.into_iter().enumerate() {
        for (k, preds) in per_turn.into_iter().enumerate() {
            streams[st].turns[k].replay_predecessors = preds;
        }
    }
}
