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
    Some(interpolated(sorted.len(), p, |index| sorted[index]))
}

/// The linear-interpolation percentile `p` of `len` sorted values, `at(i)` the `i`th.
fn interpolated(len: usize, p: f64, at: impl Fn(usize) -> f64) -> f64 {
    let rank = (len - 1) as f64 * p / 100.0;
    let below = rank.floor() as usize;
    let above = rank.ceil() as usize;
    let low = at(below);
    low + (at(above) - low) * (rank - below as f64)
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
    let squares = values.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>();
    deviation_of(squares, values.len(), deviation)
}

/// The standard deviation of `count` values whose squared distances from their mean sum to
/// `squares`.
fn deviation_of(squares: f64, count: usize, deviation: Deviation) -> f64 {
    match deviation {
        Deviation::Population => (squares / count as f64).sqrt(),
        Deviation::Sample if count > 1 => (squares / (count as f64 - 1.0)).sqrt(),
        Deviation::Sample => 0.0,
    }
}

/// A non-empty sample, sorted ascending (`f64::total_cmp`).
#[derive(Debug, Clone, PartialEq)]
pub struct Sorted(Vec<f64>);

impl Sorted {
    /// Sorts `values` in place (no copy); `None` for no values.
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

    /// The sample's figures, with the `percentiles` asked for.
    pub fn figures(&self, percentiles: &[f64]) -> Figures {
        // One sum for the sum, the mean and the deviation (`mean` divides the same sum).
        let sum = self.sum();
        let mean = sum / self.len() as f64;
        Figures {
            len: self.len(),
            min: self.min(),
            max: self.max(),
            sum,
            mean,
            std_population: std(&self.0, mean, Deviation::Population),
            percentiles: percentiles
                .iter()
                .map(|&p| (p, self.percentile(p)))
                .collect(),
        }
    }
}

/// Nanoseconds in milliseconds, as every figure in milliseconds is computed from them.
fn nanos_as_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

/// A sample's figures: what [`Sorted::figures`] reads off a sorted sample, and what
/// [`nanos_in_passes`] gives, to the same bits, for nanosecond counts without a sorted copy.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// How many values.
    pub len: usize,
    /// The smallest.
    pub min: f64,
    /// The largest.
    pub max: f64,
    /// The sum, in ascending order.
    pub sum: f64,
    /// The mean, summed in ascending order.
    pub mean: f64,
    /// The population standard deviation, its squares summed in ascending order.
    pub std_population: f64,
    /// Each percentile asked for, with its value.
    pub percentiles: Vec<(f64, f64)>,
}

impl Figures {
    /// The value of percentile `p`, when it was asked for.
    pub fn percentile(&self, p: f64) -> Option<f64> {
        let found = self.percentiles.iter().find(|(asked, _)| *asked == p);
        found.map(|(_, value)| *value)
    }
}

/// The figures of the nanosecond counts `source()` yields, read in milliseconds, at the
/// `percentiles` asked for. A long run's inter-chunk latencies run to tens of millions of values:
/// sorting a copy of them took as much memory again as the records they come from. Here the values
/// are walked in ascending order in groups of at most about `budget` (one bucket of 65,536 ns can
/// exceed it), each group gathered by a pass over the source and sorted, so the sums run in the
/// same order as [`Sorted`]'s and every figure is the same to the bit. Twice the groups' passes,
/// and one more for their sizes; `None` when the source yields nothing.
pub fn nanos_in_passes<I, F>(source: F, budget: usize, percentiles: &[f64]) -> Option<Figures>
where
    F: Fn() -> I,
    I: Iterator<Item = u64>,
{
    let walk = AscendingWalk::new(&source, budget)?;
    let len = walk.len;
    let ranks: std::collections::BTreeSet<usize> = percentiles
        .iter()
        .flat_map(|&p| {
            let rank = (len - 1) as f64 * p / 100.0;
            [rank.floor() as usize, rank.ceil() as usize]
        })
        .chain([0, len - 1])
        .collect();
    let mut at_rank = std::collections::BTreeMap::new();
    // The fold starts where `Iterator::sum` starts, so the sums equal `Sorted`'s.
    let mut sum = std::iter::empty::<f64>().sum::<f64>();
    walk.each(&source, |index, value| {
        sum += value;
        if ranks.contains(&index) {
            at_rank.insert(index, value);
        }
    });
    let mean = sum / len as f64;
    let mut squares = std::iter::empty::<f64>().sum::<f64>();
    walk.each(&source, |_, value| {
        squares += (value - mean) * (value - mean);
    });
    // Every rank is walked when the source yields the same values at each call, as it must.
    let at = |index: usize| at_rank.get(&index).copied().unwrap_or(f64::NAN);
    Some(Figures {
        len,
        min: at(0),
        max: at(len - 1),
        sum,
        mean,
        std_population: deviation_of(squares, len, Deviation::Population),
        percentiles: percentiles
            .iter()
            .map(|&p| (p, interpolated(len, p, at)))
            .collect(),
    })
}

/// The buckets of 65,536 ns a value under 2^32 ns falls in.
const BUCKET_BITS: u32 = 16;

/// How [`nanos_in_passes`] walks a source in ascending order: groups of whole buckets, and the
/// values of 2^32 ns or more (few: gaps over 4.29 s) kept sorted apart, after every group.
struct AscendingWalk {
    /// Each group's first and last bucket.
    groups: Vec<(u64, u64)>,
    long: Vec<u64>,
    len: usize,
}

impl AscendingWalk {
    fn new<I: Iterator<Item = u64>>(
        source: &impl Fn() -> I,
        budget: usize,
    ) -> Option<AscendingWalk> {
        let mut counts = vec![0usize; 1 << (u32::BITS - BUCKET_BITS)];
        let mut long = Vec::new();
        for value in source() {
            match u32::try_from(value) {
                Ok(short) => counts[(short >> BUCKET_BITS) as usize] += 1,
                Err(_) => long.push(value),
            }
        }
        long.sort_unstable();
        let len = counts.iter().sum::<usize>() + long.len();
        if len == 0 {
            return None;
        }
        let mut groups = Vec::new();
        let mut open: Option<(u64, u64, usize)> = None;
        for (bucket, &count) in counts.iter().enumerate().filter(|(_, count)| **count > 0) {
            let bucket = bucket as u64;
            open = match open {
                Some((first, _, held)) if held + count <= budget.max(1) => {
                    Some((first, bucket, held + count))
                }
                Some((first, last, _)) => {
                    groups.push((first, last));
                    Some((bucket, bucket, count))
                }
                None => Some((bucket, bucket, count)),
            };
        }
        groups.extend(open.map(|(first, last, _)| (first, last)));
        Some(AscendingWalk { groups, long, len })
    }

    /// Calls `each` with every value's index and milliseconds, in ascending order.
    fn each<I: Iterator<Item = u64>>(
        &self,
        source: &impl Fn() -> I,
        mut each: impl FnMut(usize, f64),
    ) {
        let mut index = 0;
        let mut group_values: Vec<u32> = Vec::new();
        for &(first, last) in &self.groups {
            group_values.clear();
            group_values.extend(source().filter_map(|value| {
                let short = u32::try_from(value).ok()?;
                let bucket = u64::from(short >> BUCKET_BITS);
                (first..=last).contains(&bucket).then_some(short)
            }));
            group_values.sort_unstable();
            for &value in &group_values {
                each(index, nanos_as_ms(u64::from(value)));
                index += 1;
            }
        }
        for &value in &self.long {
            each(index, nanos_as_ms(value));
            index += 1;
        }
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

    /// Nanoseconds walked in passes give, to the bit, the figures of their milliseconds sorted
    /// as floats: over and under 2^32 ns, ties, one value, groups of one bucket over the budget,
    /// budgets from one value to all.
    #[test]
    fn nanos_in_passes_are_the_sorted_figures_of_their_milliseconds() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(11);
        let asked = [0.0, 1.0, 5.0, 33.3, 50.0, 90.0, 99.0, 100.0];
        assert!(nanos_in_passes(std::iter::empty, 4, &asked).is_none());
        for size in [1usize, 2, 3, 10, 1000] {
            let nanos: Vec<u64> = (0..size)
                .map(|_| match rng.random_range(0..5) {
                    0 => u64::from(u32::MAX) + rng.random_range(0..10_000_000_000),
                    1 => 10_000_000,
                    2 => 10_000_000 + rng.random_range(0..1_000),
                    _ => rng.random_range(0..100_000_000),
                })
                .collect();
            let plain = Sorted::new(nanos.iter().map(|&ns| ns as f64 / 1e6).collect()).unwrap();
            for budget in [1, 7, 100, usize::MAX] {
                let walked = nanos_in_passes(|| nanos.iter().copied(), budget, &asked).unwrap();
                let bits = |f: &Figures| {
                    let mut all = vec![f.min, f.max, f.sum, f.mean, f.std_population];
                    all.extend(f.percentiles.iter().map(|(_, value)| *value));
                    (f.len, all.iter().map(|v| v.to_bits()).collect::<Vec<_>>())
                };
                let expected = plain.figures(&asked);
                assert_eq!(
                    bits(&walked),
                    bits(&expected),
                    "size {size}, budget {budget}"
                );
                assert_eq!(walked.len, size);
            }
        }
    }
}
