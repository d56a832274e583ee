//! The one distribution kernel: percentiles, mean and standard deviation of a sample. Every
//! distribution a run reports (the summary, aiperf's exports, `bmk_agentic` in both layouts, the
//! server-metrics gauges, the live block, dataset statistics) is computed here.
//!
//! Conventions, named where they differ:
//! - percentiles interpolate linearly between the two nearest ranks (`k = (n-1)·p/100`, numpy's
//!   default, InferenceX's `percentile` and its web app's `quantile`, `queries/agentic-shared.ts`);
//! - the mean is the sum over the values in the order given, divided by their count;
//! - the standard deviation is a [`Deviation`]: [`Deviation::Population`] (`ddof = 0`, aiperf's
//!   inference metrics and InferenceX's `statistics.pstdev`) or [`Deviation::Sample`] (`ddof = 1`,
//!   aiperf's server-metrics gauges, 0 for a single value).

/// Linear-interpolation percentile of sorted data (`k = (n-1)·p/100`, numpy's default and InferenceX's
/// `percentile`). `p` in 0..=100; `None` on empty data.
pub fn percentile(sorted: &[f64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (sorted.len() - 1) as f64 * p / 100.0;
    let below = rank.floor() as usize;
    let above = rank.ceil() as usize;
    Some(sorted[below] + (sorted[above] - sorted[below]) * (rank - below as f64))
}

/// [`percentile`] of the sorted data written as runs of equal values, `(value, count)` in
/// ascending order of value: the same number as `percentile` of the runs written out one value per
/// count, without writing them out. `None` when the runs hold no value.
pub fn percentile_of_runs(runs: &[(f64, u64)], p: f64) -> Option<f64> {
    let total: u64 = runs.iter().map(|run| run.1).sum();
    if total == 0 {
        return None;
    }
    let rank = (total - 1) as f64 * p / 100.0;
    let below = rank.floor() as u64;
    let above = rank.ceil() as u64;
    // The value at 0-based position `index` of the written-out data.
    let at = |index: u64| {
        let mut seen = 0;
        for &(value, count) in runs {
            seen += count;
            if index < seen {
                return value;
            }
        }
        runs[runs.len() - 1].0
    };
    let (low, high) = (at(below), at(above));
    Some(low + (high - low) * (rank - below as f64))
}

/// Which standard deviation a figure reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deviation {
    /// `ddof = 0`: aiperf computes inference metrics with `np.std(..., ddof=0)` and InferenceX's
    /// post-processor uses `statistics.pstdev`.
    Population,
    /// `ddof = 1` (0 for a single value): aiperf's server-metrics gauge statistics.
    Sample,
}

/// The mean of `values`, summed in the order given; NaN for no values.
pub fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// The standard deviation of `values` around their `mean`.
pub fn std(values: &[f64], mean: f64, deviation: Deviation) -> f64 {
    let count = values.len() as f64;
    let squares = values.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>();
    match deviation {
        Deviation::Population => (squares / count).sqrt(),
        Deviation::Sample if values.len() > 1 => (squares / (count - 1.0)).sqrt(),
        Deviation::Sample => 0.0,
    }
}

/// A non-empty sample, sorted ascending (`f64::total_cmp`).
#[derive(Debug, Clone, PartialEq)]
pub struct Sorted(Vec<f64>);

impl Sorted {
    /// Sorts `values` in place (no copy: a long run's flattened inter-chunk latencies run to
    /// millions of values); `None` for no values.
    pub fn new(mut values: Vec<f64>) -> Option<Sorted> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable_by(f64::total_cmp);
        Some(Sorted(values))
    }

    /// The values, in ascending order.
    pub fn values(&self) -> &[f64] {
        &self.0
    }

    /// How many values there are (at least one).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Never true: a `Sorted` holds at least one value.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The smallest value.
    pub fn min(&self) -> f64 {
        self.0[0]
    }

    /// The largest value.
    pub fn max(&self) -> f64 {
        self.0[self.0.len() - 1]
    }

    /// The sum, in ascending order.
    pub fn sum(&self) -> f64 {
        self.0.iter().sum()
    }

    /// The mean, summed in ascending order.
    pub fn mean(&self) -> f64 {
        mean(&self.0)
    }

    /// The standard deviation, of the population or of a sample as `deviation` says.
    pub fn std(&self, deviation: Deviation) -> f64 {
        std(&self.0, self.mean(), deviation)
    }

    /// The linear-interpolation percentile (`p` in 0..=100).
    pub fn percentile(&self, p: f64) -> f64 {
        percentile(&self.0, p).unwrap_or(f64::NAN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs give what the values written out give, at every percentile and for every split of
    /// equal values into runs.
    #[test]
    fn percentile_of_runs_is_percentile_of_the_values() {
        let runs = [(0.5, 3), (1.0, 1), (2.5, 4), (2.5, 2), (9.0, 1)];
        let mut values: Vec<f64> = runs
            .iter()
            .flat_map(|&(value, count)| std::iter::repeat_n(value, count as usize))
            .collect();
        values.sort_by(f64::total_cmp);
        for p in [0.0, 1.0, 25.0, 50.0, 62.5, 90.0, 99.0, 100.0] {
            assert_eq!(percentile_of_runs(&runs, p), percentile(&values, p), "p{p}");
        }
        assert_eq!(percentile_of_runs(&[], 50.0), None);
        assert_eq!(percentile_of_runs(&[(3.0, 0)], 50.0), None);
    }

    #[test]
    fn percentile_interpolates_like_numpy() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 50.0), Some(2.5));
        assert_eq!(percentile(&v, 0.0), Some(1.0));
        assert_eq!(percentile(&v, 100.0), Some(4.0));
        assert!((percentile(&v, 90.0).unwrap() - 3.7).abs() < 1e-12);
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
    }

    #[test]
    fn deviations_follow_numpy_ddof() {
        let v = [1.0, 2.0, 3.0, 4.0];
        let m = mean(&v);
        assert_eq!(m, 2.5);
        assert_eq!(std(&v, m, Deviation::Population), 1.25f64.sqrt());
        assert_eq!(std(&v, m, Deviation::Sample), (5.0f64 / 3.0).sqrt());
        assert_eq!(std(&[3.0], 3.0, Deviation::Sample), 0.0);
    }

    #[test]
    fn sorted_sample() {
        assert!(Sorted::new(vec![]).is_none());
        let s = Sorted::new(vec![4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(s.values(), &[1.0, 2.0, 3.0, 4.0]);
        assert_eq!((s.min(), s.max(), s.sum(), s.len()), (1.0, 4.0, 10.0, 4));
        assert_eq!(s.percentile(50.0), 2.5);
        assert_eq!(s.std(Deviation::Population), 1.25f64.sqrt());
    }
}
