//! `sweep --find-max`: the search for the highest concurrency whose run meets the SLO. It brackets
//! over the ladder the sweep was given (`--concurrency`, in order) until a point fails, then bisects
//! between the highest point that met the SLO and the lowest that did not, until they are at most
//! the resolution apart: `--find-max-resolution` lanes, by default a tenth of the passing point
//! (at least 1). The search is a function of the points' verdicts, so a resumed sweep retraces it
//! and runs only the points it lacks. A point that did not complete does not meet the SLO.

use std::collections::BTreeMap;

/// What the search does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Run this concurrency.
    Run(u32),
    /// Done: the highest concurrency that met the SLO (`None`: not even the first), and whether a
    /// failing point above it bounds it (false when every point of the ladder met the SLO).
    Done {
        /// The highest concurrency that met the SLO.
        answer: Option<u32>,
        /// A failing point above the answer bounds it.
        bracketed: bool,
    },
}

/// The search: its ladder and resolution.
#[derive(Debug, Clone, PartialEq)]
pub struct FindMax {
    /// The concurrencies to try, increasing (the sweep's list).
    pub ladder: Vec<u32>,
    /// Lanes; `None`: a tenth of the passing point, at least 1.
    pub resolution: Option<u32>,
}

impl FindMax {
    /// The resolution at the passing point `low`.
    pub fn resolution_at(&self, low: u32) -> u32 {
        self.resolution.unwrap_or((low / 10).max(1))
    }

    /// The next step, given the verdicts so far (concurrency to whether it met the SLO).
    pub fn next(&self, verdicts: &BTreeMap<u32, bool>) -> Step {
        // Bracketing: the ladder in order until a point fails.
        let mut low: Option<u32> = None;
        let mut high: Option<u32> = None;
        for &n in &self.ladder {
            match verdicts.get(&n) {
                None => return Step::Run(n),
                Some(true) => low = Some(n),
                Some(false) => {
                    high = Some(n);
                    break;
                }
            }
        }
        let Some(mut high) = high else {
            return Step::Done {
                answer: low,
                bracketed: false,
            };
        };
        let Some(mut low) = low else {
            return Step::Done {
                answer: None,
                bracketed: true,
            };
        };
        // Bisection between the two, narrowed by every verdict already at hand.
        loop {
            for (&n, &met) in verdicts.range(low + 1..high) {
                if met {
                    low = low.max(n);
                } else {
                    high = high.min(n);
                    break;
                }
            }
            if high - low <= self.resolution_at(low) {
                return Step::Done {
                    answer: Some(low),
                    bracketed: true,
                };
            }
            let mid = low + (high - low) / 2;
            match verdicts.get(&mid) {
                None => return Step::Run(mid),
                Some(true) => low = mid,
                Some(false) => high = mid,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the search against a server that meets the SLO up to `limit` lanes; returns the points
    /// run, in order, and the result.
    fn search(f: &FindMax, limit: u32) -> (Vec<u32>, Step) {
        let mut verdicts = BTreeMap::new();
        let mut ran = Vec::new();
        loop {
            match f.next(&verdicts) {
                Step::Run(n) => {
                    assert!(!verdicts.contains_key(&n), "{n} twice");
                    ran.push(n);
                    verdicts.insert(n, n <= limit);
                }
                done @ Step::Done { .. } => return (ran, done),
            }
        }
    }

    #[test]
    fn brackets_then_bisects_to_the_resolution() {
        let f = FindMax {
            ladder: vec![1, 4, 16, 64, 256],
            resolution: None,
        };
        let (ran, done) = search(&f, 100);
        assert_eq!(ran, [1, 4, 16, 64, 256, 160, 112, 88, 100, 106]);
        assert_eq!(
            done,
            Step::Done {
                answer: Some(100),
                bracketed: true
            }
        );
        // A coarser resolution stops sooner, never above the limit.
        let f = FindMax {
            resolution: Some(32),
            ..f
        };
        let (ran, done) = search(&f, 100);
        assert_eq!(ran, [1, 4, 16, 64, 256, 160, 112, 88]);
        assert_eq!(
            done,
            Step::Done {
                answer: Some(88),
                bracketed: true
            }
        );
    }

    #[test]
    fn the_ends_of_the_ladder() {
        let f = FindMax {
            ladder: vec![2, 8],
            resolution: None,
        };
        let (ran, done) = search(&f, 1);
        assert_eq!(ran, [2]);
        assert_eq!(
            done,
            Step::Done {
                answer: None,
                bracketed: true
            }
        );
        let (ran, done) = search(&f, 50);
        assert_eq!(ran, [2, 8]);
        assert_eq!(
            done,
            Step::Done {
                answer: Some(8),
                bracketed: false
            }
        );
        // Adjacent points are already at the resolution.
        let (ran, done) = search(&f, 5);
        assert_eq!(ran, [2, 8, 5, 6]);
        assert_eq!(
            done,
            Step::Done {
                answer: Some(5),
                bracketed: true
            }
        );
    }

    #[test]
    fn a_resumed_search_retraces_its_verdicts() {
        let f = FindMax {
            ladder: vec![1, 4, 16, 64, 256],
            resolution: None,
        };
        let (ran, _) = search(&f, 100);
        // Half the points known: the search asks only for the rest, in the same order.
        let mut verdicts: BTreeMap<u32, bool> = ran[..6].iter().map(|&n| (n, n <= 100)).collect();
        let mut rest = Vec::new();
        while let Step::Run(n) = f.next(&verdicts) {
            rest.push(n);
            verdicts.insert(n, n <= 100);
        }
        assert_eq!(rest, ran[6..]);
    }
}
