//! Hand-computed stability blocks: a run shorter than one window, two windows with a request past
//! the last one, a run long enough to converge, and the checkpoint rule on its own.

use super::*;

const S: u64 = 1_000_000_000;

fn sample(second: u64, root: &str, ttft: f64, e2el: f64, itl: f64) -> Sample<'_> {
    Sample {
        at_ns: Some(1_000 * S + second * S),
        root,
        ttft_s: Some(ttft),
        e2el_s: Some(e2el),
        itl_s: Some(itl),
    }
}

#[track_caller]
fn close(got: f64, want: f64) {
    assert!((got - want).abs() < 1e-9, "got {got}, want {want}");
}

#[track_caller]
fn range_is(s: &Stability, metric: &str, p: &str, min: f64, max: f64) {
    let r = s.observed_ranges[metric][p].expect("a range");
    close(r.min, min);
    close(r.max, max);
}

fn all_null(c: &Convergence) -> bool {
    c.metrics
        .values()
        .all(|per_p| per_p.len() == 2 && per_p.values().all(Option::is_none))
}

#[test]
fn a_run_shorter_than_one_window_has_no_window_and_no_verdict() {
    let v = [
        sample(0, "a", 0.1, 1.0, 0.02),
        sample(10, "a", 0.2, 2.0, 0.04),
    ];
    let s = stability(&v, Some(500.0));
    // floor(500 / 600) = 0 windows expected, so none observed; 1 checkpoint (300 s), which has no
    // 1200 s of later checkpoints to confirm it.
    assert_eq!(s.window_seconds, 600.0);
    assert_eq!(s.expected_window_count, 0);
    assert_eq!(s.observed_window_count, 0);
    assert_eq!(s.min_window_requests, 0);
    assert!(s.observed_ranges.is_empty());
    assert_eq!(s.root_trajectory_count, 1);
    close(s.root_trajectory_kish_effective_count, 1.0);
    close(s.root_trajectory_largest_share, 1.0);
    assert_eq!(s.convergence.horizon_seconds, 300.0);
    assert!(all_null(&s.convergence));
    // Exactly one window: observed, but one window gives no range.
    let s = stability(&v, Some(600.0));
    assert_eq!((s.expected_window_count, s.observed_window_count), (1, 1));
    assert_eq!(s.min_window_requests, 2);
    assert!(s.observed_ranges.is_empty());
    // No duration: nothing expected, no checkpoints.
    let s = stability(&v, None);
    assert_eq!(s.expected_window_count, 0);
    assert_eq!(s.convergence.horizon_seconds, 0.0);
    assert!(all_null(&s.convergence));
    // No requests at all.
    let s = stability(&[], Some(3600.0));
    assert_eq!((s.expected_window_count, s.observed_window_count), (6, 0));
    assert_eq!(s.root_trajectory_count, 0);
    assert_eq!(s.root_trajectory_kish_effective_count, 0.0);
    assert_eq!(s.root_trajectory_largest_share, 0.0);
}

#[test]
fn two_windows_give_ranges_and_late_requests_sit_in_no_window() {
    let mut v = vec![
        sample(0, "a", 0.1, 1.0, 0.02),
        sample(10, "a", 0.2, 2.0, 0.04),
        sample(610, "b", 0.3, 3.0, 0.05),
        sample(620, "b", 0.4, 4.0, 0.10),
        // Window 2 of a run that expects 2: left out of the windows, counted as a trajectory.
        sample(1300, "c", 9.0, 9.0, 9.0),
    ];
    // A request with no clock at all: a trajectory, in no window.
    v.push(Sample {
        at_ns: None,
        ..sample(0, "", 9.0, 9.0, 9.0)
    });
    let s = stability(&v, Some(1200.0));
    assert_eq!((s.expected_window_count, s.observed_window_count), (2, 2));
    assert_eq!(s.min_window_requests, 2);
    // Roots a: 2, b: 2, c: 1, unknown: 1 → n = 6, Σc² = 4 + 4 + 1 + 1 = 10: 36/10; largest 2/6.
    assert_eq!(s.root_trajectory_count, 4);
    close(s.root_trajectory_kish_effective_count, 3.6);
    close(s.root_trajectory_largest_share, 2.0 / 6.0);
    // Window 0 TTFT {0.1, 0.2}: p75 = 0.1 + 0.75·0.1 = 0.175, p90 = 0.19; window 1 {0.3, 0.4}:
    // 0.375 and 0.39.
    range_is(&s, "ttft", "p75", 0.175, 0.375);
    range_is(&s, "ttft", "p90", 0.19, 0.39);
    // E2EL {1, 2} and {3, 4}: p75 1.75 and 3.75, p90 1.9 and 3.9.
    range_is(&s, "e2el", "p75", 1.75, 3.75);
    range_is(&s, "e2el", "p90", 1.9, 3.9);
    // ITL {0.02, 0.04}: p90 0.038; {0.05, 0.10}: p90 0.095. Interactivity inverts each window's
    // figure, so the slow window is the minimum.
    range_is(&s, "intvty", "p90", 1.0 / 0.095, 1.0 / 0.038);
    range_is(&s, "intvty", "p75", 1.0 / 0.0875, 1.0 / 0.035);
    // 1200 s: checkpoints 300..1200, none with 1200 s after it.
    assert_eq!(s.convergence.horizon_seconds, 1200.0);
    assert!(all_null(&s.convergence));
}

#[test]
fn a_steady_run_converges_at_its_first_confirmed_checkpoint() {
    // One request every 100 s for 1800 s; TTFT constant, E2EL constant until 1500 s and then much
    // slower, ITL constant.
    let v: Vec<Sample<'_>> = (0..18)
        .map(|i| {
            let e2el = if i < 15 { 1.0 } else { 10.0 };
            sample(i * 100, "a", 0.1, e2el, 0.02)
        })
        .collect();
    let s = stability(&v, Some(1800.0));
    assert_eq!(s.convergence.horizon_seconds, 1800.0);
    assert_eq!((s.expected_window_count, s.observed_window_count), (3, 3));
    assert_eq!(s.min_window_requests, 6);
    // TTFT: the same at every checkpoint; 300 s is the earliest with 1500 >= 1200 s after it, and
    // 3 requests (0, 100, 200 s) came before it.
    let ttft = s.convergence.metrics["ttft"]["p90"].expect("converged");
    assert_eq!(
        ttft,
        Converged {
            time_seconds: 300.0,
            requests: 3,
            min: 0.1,
            max: 0.1,
            max_relative_deviation: 0.0
        }
    );
    let intvty = s.convergence.metrics["intvty"]["p75"].expect("converged");
    close(intvty.min, 50.0);
    assert_eq!(intvty.time_seconds, 300.0);
    // E2EL: the final (1800 s) cumulative set holds 15 requests of 1 s and 3 of 10 s: p90 at
    // k = 17·0.9 = 15.3 is 10 s, while every checkpoint up to 1500 s has p90 1 s, so only the
    // last checkpoints agree with the final value and none of them has 1200 s after it.
    assert_eq!(s.convergence.metrics["e2el"]["p90"], None);
    // p75 at k = 12.75 is still 1 s at the end: converged at 300 s like TTFT.
    assert_eq!(
        s.convergence.metrics["e2el"]["p75"].map(|c| c.time_seconds),
        Some(300.0)
    );
}

fn series(values: &[f64]) -> Vec<Checkpoint> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| Checkpoint {
            seconds: (i + 1) as f64 * 300.0,
            requests: (i + 1) as u64 * 10,
            value: *v,
        })
        .collect()
}

#[test]
fn the_checkpoint_rule_takes_a_symmetric_five_percent_band_and_1200_seconds() {
    // Exactly 5 % above or below the final value, in log ratio, still qualifies.
    for edge in [105.0, 100.0 / 1.05] {
        let c = settled(&series(&[edge, 100.0, 100.0, 100.0, 100.0])).expect("converged");
        assert_eq!((c.time_seconds, c.requests), (300.0, 10));
        close(c.max_relative_deviation, (edge / 100.0 - 1.0).abs());
    }
    // 80 at 300 s is out of the band; 600 s has only 900 s after it.
    assert_eq!(settled(&series(&[80.0, 100.0, 100.0, 100.0, 100.0])), None);
    // A late excursion (106 at 1500 s) leaves the band for every earlier start.
    assert_eq!(
        settled(&series(&[100.0, 100.0, 100.0, 100.0, 106.0, 100.0])),
        None
    );
    // A latency series and its reciprocal settle at the same checkpoint.
    let lat = [0.08, 0.105, 0.102, 0.101, 0.1, 0.1];
    let a = settled(&series(&lat)).expect("latency converges");
    let b = settled(&series(&lat.map(|x| 1.0 / x))).expect("interactivity converges");
    assert_eq!((a.time_seconds, b.time_seconds), (600.0, 600.0));
    close(b.min, 1.0 / a.max);
    close(b.max, 1.0 / a.min);
    assert_eq!(settled(&[]), None);
}
