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
pub struct Sorted(Values);

/// How a [`Sorted`] holds its values.
#[derive(Debug, Clone, PartialEq)]
enum Values {
    /// The values themselves.
    Floats(Vec<f64>),
    /// Nanosecond counts, read as milliseconds (`ns as f64 / 1e6`): those under `u32::MAX` at 4
    /// bytes each, then the rest (every one of which is larger).
    NanosAsMs { short: Vec<u32>, long: Vec<u64> },
}

/// A sample of nanosecond counts, collected at 4 bytes a value under 4.29 s: a long run's
/// inter-chunk latencies run to tens of millions of values ([`Sorted::of_nanos_as_ms`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Nanos {
    short: Vec<u32>,
    long: Vec<u64>,
}

impl Nanos {
    /// Room for `count` values under 4.29 s.
    pub fn with_capacity(count: usize) -> Nanos {
        Nanos {
            short: Vec::with_capacity(count),
            long: Vec::new(),
        }
    }

    /// One more value.
    pub fn push(&mut self, ns: u64) {
        match u32::try_from(ns) {
            Ok(short) if short != u32::MAX => self.short.push(short),
            _ => self.long.push(ns),
        }
    }

    /// How many values there are.
    pub fn len(&self) -> usize {
        self.short.len() + self.long.len()
    }

    /// True when there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Nanoseconds in milliseconds, as every figure in milliseconds is computed from them.
fn nanos_as_ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}

impl Sorted {
    /// Sorts `values` in place (no copy); `None` for no values.
    pub fn new(mut values: Vec<f64>) -> Option<Sorted> {
        if values.is_empty() {
            return None;
        }
        values.sort_unstable_by(f64::total_cmp);
        Some(Sorted(Values::Floats(values)))
    }

    /// The sample of `nanos` in milliseconds (`ns as f64 / 1e6`), sorted in place: the same
    /// figures as [`Sorted::new`] of the milliseconds, at half the memory or less; `None` for no
    /// values.
    pub fn of_nanos_as_ms(nanos: Nanos) -> Option<Sorted> {
        let Nanos {
            mut short,
            mut long,
        } = nanos;
        if short.is_empty() && long.is_empty() {
            return None;
        }
        // The conversion to milliseconds keeps the order, so sorting the counts sorts the values.
        short.sort_unstable();
        long.sort_unstable();
        Some(Sorted(Values::NanosAsMs { short, long }))
    }

    /// The value at `index` of the ascending order.
    fn at(&self, index: usize) -> f64 {
        match &self.0 {
            Values::Floats(values) => values[index],
            Values::NanosAsMs { short, long } => match short.get(index) {
                Some(&ns) => nanos_as_ms(u64::from(ns)),
                None => nanos_as_ms(long[index - short.len()]),
            },
        }
    }

    /// The values, in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = f64> + '_ {
        let (floats, short, long) = match &self.0 {
            Values::Floats(values) => (values.as_slice(), &[][..], &[][..]),
            Values::NanosAsMs { short, long } => (&[][..], short.as_slice(), long.as_slice()),
        };
        let nanos = short
            .iter()
            .map(|&ns| u64::from(ns))
            .chain(long.iter().copied());
        floats.iter().copied().chain(nanos.map(nanos_as_ms))
    }

    /// How many values there are (at least one).
    pub fn len(&self) -> usize {
        match &self.0 {
            Values::Floats(values) => values.len(),
            Values::NanosAsMs { short, long } => short.len() + long.len(),
        }
    }

    /// Never true: a `Sorted` holds at least one value.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The smallest value.
    pub fn min(&self) -> f64 {
        self.at(0)
    }

    /// The largest value.
    pub fn max(&self) -> f64 {
        self.at(self.len() - 1)
    }

    /// The sum, in ascending order.
    pub fn sum(&self) -> f64 {
        self.iter().sum()
    }

    /// The mean, summed in ascending order.
    pub fn mean(&self) -> f64 {
        self.sum() / self.len() as f64
    }

    /// The standard deviation, of the population or of a sample as `deviation` says.
    pub fn std(&self, deviation: Deviation) -> f64 {
        let mean = self.mean();
        let squares = self.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>();
        deviation_of(squares, self.len(), deviation)
    }

    /// The linear-interpolation percentile (`p` in 0..=100), as [`percentile`].
    pub fn percentile(&self, p: f64) -> f64 {
        interpolated(self.len(), p, |index| self.at(index))
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
        assert_eq!(s.iter().collect::<Vec<_>>(), [1.0, 2.0, 3.0, 4.0]);
        assert_eq!((s.min(), s.max(), s.sum(), s.len()), (1.0, 4.0, 10.0, 4));
        assert_eq!(s.percentile(50.0), 2.5);
        assert_eq!(s.std(Deviation::Population), 1.25f64.sqrt());
    }

    /// Nanoseconds held as counts give, to the bit, the figures of their milliseconds held as
    /// floats: over and under `u32::MAX`, ties, one value.
    #[test]
    fn nanos_as_ms_are_the_floats_of_their_milliseconds() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::ChaCha8Rng::seed_from_u64(11);
        assert!(Sorted::of_nanos_as_ms(Nanos::default()).is_none());
        for size in [1usize, 2, 3, 10, 1000] {
            let mut nanos = Nanos::with_capacity(size);
            let mut floats = Vec::new();
            for _ in 0..size {
                let ns = match rng.random_range(0..4) {
                    0 => u64::from(u32::MAX) + rng.random_range(0..10_000_000_000),
                    1 => 10_000_000,
                    _ => rng.random_range(0..100_000_000),
                };
                nanos.push(ns);
                floats.push(ns as f64 / 1e6);
            }
            assert_eq!(nanos.len(), size);
            let (compact, plain) = (
                Sorted::of_nanos_as_ms(nanos).unwrap(),
                Sorted::new(floats).unwrap(),
            );
            assert!(compact.iter().eq(plain.iter()));
            let figures = |s: &Sorted| {
                let mut all = vec![s.min(), s.max(), s.sum(), s.mean(), s.len() as f64];
                all.push(s.std(Deviation::Population));
                all.push(s.std(Deviation::Sample));
                all.extend([0.0, 1.0, 33.3, 50.0, 90.0, 99.0, 100.0].map(|p| s.percentile(p)));
                all.into_iter().map(f64::to_bits).collect::<Vec<_>>()
            };
            assert_eq!(figures(&compact), figures(&plain), "size {size}");
        }
    }
}
