//! The start turn `k_i` of a trajectory (docs/specs/replay-rules.md#start-turn).
//!
//! For a trace of `n` turns: `n <= 1` cannot be used; `n == 2` has the single candidate 0; otherwise the
//! candidates are `k_min..=k_max` with `k_min = min(int(min_ratio*n), n-2)` and
//! `k_max = min(int(max_ratio*n), n-2)` (so at least one profiling turn follows). A candidate `k` is kept
//! only when both `k` (sent in warmup as a fresh session) and `k+1` (the first profiling request of a
//! fresh session) are sendable. The pick is `numpy.random.default_rng(s).choice(candidates)` with
//! `s = int.from_bytes(sha256(f"{seed}:{trace_id}")[:8], "big")`, bit-compatible with aiperf.
//!
//! Invariant: no candidate list is materialised; the excluded turns are few (two per unsendable turn),
//! so the pick costs O(|unsendable| log |unsendable|) whatever `n` is.

use alloc::vec::Vec;
use sha2::{Digest, Sha256};

use crate::rng::choice_index;
use crate::types::{StartParams, Trajectory};

/// Python's `int(x)` for the product of a ratio and a turn count: truncation toward zero. Rust's
/// saturating cast agrees for every finite value a ratio in `[0, 1]` can produce.
fn py_int(x: f64) -> i64 {
    x as i64
}

/// The seed numpy's generator gets for one trace: the first 8 bytes of
/// `sha256(f"{seed}:{trace_id}")`, big-endian.
pub fn trace_entropy(seed: u64, trace_id: &str) -> u64 {
    let mut digits = [0u8; 20];
    let text = crate::decimal(seed, &mut digits);
    let mut h = Sha256::new();
    h.update(text);
    h.update(b":");
    h.update(trace_id.as_bytes());
    let d = h.finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&d[..8]);
    u64::from_be_bytes(first)
}

/// The inclusive candidate range before the sendable filter, or `None` when the trace is unusable.
pub fn candidate_range(num_turns: u32, min_ratio: f64, max_ratio: f64) -> Option<(u32, u32)> {
    let n = i64::from(num_turns);
    let (lo, hi) = match n {
        0 | 1 => return None,
        2 => (0, 0),
        _ => {
            let nf = n as f64;
            (
                py_int(min_ratio * nf).min(n - 2),
                py_int(max_ratio * nf).min(n - 2),
            )
        }
    };
    // Negative ratios are refused by `resolve`; here they just clip at turn 0.
    let lo = lo.max(0);
    if hi < lo {
        return None;
    }
    Some((lo as u32, hi as u32))
}

/// The candidates of a trajectory, materialised (for tests and tools; `start_turn` does not need it).
pub fn candidates(t: &Trajectory, min_ratio: f64, max_ratio: f64) -> Vec<u32> {
    match candidate_range(t.num_turns, min_ratio, max_ratio) {
        None => Vec::new(),
        Some((lo, hi)) => (lo..=hi)
            .filter(|&k| !t.unsendable.contains(&k) && !t.unsendable.contains(&(k + 1)))
            .collect(),
    }
}

/// `k_i`, or `None` when the trajectory has no usable start.
pub fn start_turn(p: &StartParams, t: &Trajectory) -> Option<u32> {
    let (lo, hi) = candidate_range(t.num_turns, p.min_ratio, p.max_ratio)?;
    // Turns in lo..=hi excluded because k or k+1 is unsendable, sorted and distinct.
    let mut excluded: Vec<u32> = Vec::new();
    for &u in &t.unsendable {
        for k in [u.checked_sub(1), Some(u)].into_iter().flatten() {
            if (lo..=hi).contains(&k) {
                excluded.push(k);
            }
        }
    }
    excluded.sort_unstable();
    excluded.dedup();
    let total = (hi - lo) as u64 + 1 - excluded.len() as u64;
    if total == 0 {
        return None;
    }
    // total <= num_turns - 1 < 2^32.
    let idx = choice_index(trace_entropy(p.seed, &t.trace_id), total as u32);
    // The idx-th kept turn: skip over excluded turns at or below the running answer.
    let mut k = lo + idx;
    for &e in &excluded {
        if e <= k {
            k += 1;
        } else {
            break;
        }
    }
    Some(k)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    fn traj(n: u32, unsendable: Vec<u32>) -> Trajectory {
        Trajectory {
            trace_id: "trace_0003".to_string(),
            num_turns: n,
            unsendable,
        }
    }

    fn params(seed: u64, lo: f64, hi: f64) -> StartParams {
        StartParams {
            seed,
            min_ratio: lo,
            max_ratio: hi,
        }
    }

    #[test]
    fn short_traces() {
        assert_eq!(start_turn(&params(42, 0.0, 0.7), &traj(0, vec![])), None);
        assert_eq!(start_turn(&params(42, 0.0, 0.7), &traj(1, vec![])), None);
        assert_eq!(start_turn(&params(42, 0.5, 0.7), &traj(2, vec![])), Some(0));
        assert_eq!(start_turn(&params(42, 0.0, 0.7), &traj(2, vec![1])), None);
    }

    #[test]
    fn range_is_clipped_to_leave_a_profiling_turn() {
        assert_eq!(candidate_range(10, 0.25, 0.75), Some((2, 7)));
        assert_eq!(candidate_range(10, 1.0, 1.0), Some((8, 8)));
        assert_eq!(candidate_range(3, 0.0, 0.7), Some((0, 1)));
        assert_eq!(candidate_range(10, 0.8, 0.2), None);
    }

    #[test]
    fn the_pick_matches_the_materialised_candidates() {
        // Whatever gets excluded, start_turn picks candidates[choice_index(.., len)].
        for seed in 0..300u64 {
            let t = traj(40, vec![3, 4, 10, 17, 18, 19, 30, 39]);
            let c = candidates(&t, 0.0, 1.0);
            let want = c[choice_index(trace_entropy(seed, &t.trace_id), c.len() as u32) as usize];
            assert_eq!(start_turn(&params(seed, 0.0, 1.0), &t), Some(want));
        }
    }

    /// `cargo test --release -p policy -- --ignored --nocapture bench_start_turn` prints the native
    /// cost of one start turn (the component adds the call overhead of the wasm engine).
    #[test]
    #[ignore]
    fn bench_start_turn() {
        let ts: Vec<Trajectory> = (0..949u32)
            .map(|i| Trajectory {
                trace_id: alloc::format!("trace_{i:04}"),
                num_turns: 20 + i % 300,
                unsendable: if i % 5 == 0 { vec![3, 9, 10] } else { vec![] },
            })
            .collect();
        let p = params(42, 0.25, 0.75);
        let rounds = 200;
        let t = std::time::Instant::now();
        let mut sum = 0u64;
        for _ in 0..rounds {
            for tr in &ts {
                sum += u64::from(start_turn(&p, tr).unwrap_or(0));
            }
        }
        let per = t.elapsed().as_nanos() as f64 / (rounds * ts.len()) as f64;
        std::println!(
            "start_turn: {per:.0} ns/call native ({} calls, checksum {sum})",
            rounds * ts.len()
        );
    }

    #[test]
    fn everything_unsendable_is_unusable() {
        let t = traj(5, vec![0, 1, 2, 3, 4]);
        assert_eq!(start_turn(&params(1, 0.0, 1.0), &t), None);
    }
}

#[cfg(test)]
mod parts_bench {
    #[test]
    #[ignore]
    fn bench_parts() {
        let n = 200_000u64;
        let t = std::time::Instant::now();
        let mut acc = 0u64;
        for i in 0..n {
            acc ^= super::trace_entropy(i, "trace_0003");
        }
        let a = t.elapsed().as_nanos() as f64 / n as f64;
        let t = std::time::Instant::now();
        for i in 0..n {
            acc ^= u64::from(crate::rng::choice_index(i, 17));
        }
        let b = t.elapsed().as_nanos() as f64 / n as f64;
        std::println!("sha256 part {a:.0} ns, rng part {b:.0} ns ({acc})");
    }
}
