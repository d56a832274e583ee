//! Student's t quantile (no crate of the workspace has one) and the between-trial interval built
//! on it: mean ± t(1 − α/2, k − 1) · sd / √k over the k trials' values of a figure.
//!
//! The quantile is exact to rounding for 1000 degrees of freedom or fewer: one and two have closed
//! forms; otherwise the two-sided probability `A(t | ν)` of Abramowitz & Stegun 26.7.3/26.7.4, a
//! finite trigonometric series in `θ = atan(t / √ν)` for integer `ν`, is inverted by bisection on
//! `θ`. Above 1000 the Cornish-Fisher expansion in `1/ν` (A&S 26.7.5, four terms) on the normal
//! quantile (Acklam's rational approximation, relative error below 1.2·10⁻⁹) is within 10⁻⁹.

use serde::{Deserialize, Serialize};

use super::Level;
use crate::dist;

/// Above this many degrees of freedom the quantile comes from the Cornish-Fisher expansion.
const SERIES_MAX_DF: u32 = 1000;

/// The `p` quantile of Student's t distribution with `df` degrees of freedom; NaN when `p` is not
/// in (0, 1) or `df` is 0.
pub fn quantile(p: f64, df: u32) -> f64 {
    if !(p > 0.0 && p < 1.0) || df == 0 {
        return f64::NAN;
    }
    if p < 0.5 {
        return -quantile(1.0 - p, df);
    }
    if p == 0.5 {
        return 0.0;
    }
    let nu = f64::from(df);
    match df {
        1 => (std::f64::consts::PI * (p - 0.5)).tan(),
        2 => (2.0 * p - 1.0) / (2.0 * p * (1.0 - p)).sqrt(),
        3..=SERIES_MAX_DF => nu.sqrt() * angle_of_two_sided(2.0 * p - 1.0, df).tan(),
        _ => cornish_fisher(normal_quantile(p), nu),
    }
}

/// The `θ` in `[0, π/2)` whose two-sided probability `A(√ν·tan θ | ν)` is `probability`, by
/// bisection (`A` rises with `θ`) down to adjacent doubles, or 2⁻¹⁰⁰ of the start.
fn angle_of_two_sided(probability: f64, df: u32) -> f64 {
    let (mut low, mut high) = (0.0f64, std::f64::consts::FRAC_PI_2);
    for _ in 0..100 {
        let middle = 0.5 * (low + high);
        if middle <= low || middle >= high {
            break;
        }
        if two_sided_probability(middle, df) < probability {
            low = middle;
        } else {
            high = middle;
        }
    }
    0.5 * (low + high)
}

/// `A(t | ν) = P(|T| ≤ t)` at `θ = atan(t / √ν)`, for integer `ν ≥ 3` (A&S 26.7.3 for odd `ν`,
/// 26.7.4 for even).
fn two_sided_probability(theta: f64, df: u32) -> f64 {
    let (sin, cos) = theta.sin_cos();
    let cos_squared = cos * cos;
    if df % 2 == 1 {
        // (2/π)(θ + sin θ (cos θ + (2/3) cos³ θ + ... + (2·4···(ν−3))/(1·3···(ν−2)) cos^(ν−2) θ))
        let mut term = cos;
        let mut series = term;
        for k in 1..(df - 1) / 2 {
            term *= cos_squared * f64::from(2 * k) / f64::from(2 * k + 1);
            series += term;
        }
        std::f64::consts::FRAC_2_PI * (theta + sin * series)
    } else {
        // sin θ (1 + (1/2) cos² θ + (1·3)/(2·4) cos⁴ θ + ... + (1·3···(ν−3))/(2·4···(ν−2)) cos^(ν−2) θ)
        let mut term = 1.0;
        let mut series = term;
        for k in 1..df / 2 {
            term *= cos_squared * f64::from(2 * k - 1) / f64::from(2 * k);
            series += term;
        }
        sin * series
    }
}

/// The t quantile at normal quantile `z` by the Cornish-Fisher expansion to `1/ν⁴` (A&S 26.7.5).
fn cornish_fisher(z: f64, nu: f64) -> f64 {
    let z2 = z * z;
    let g1 = (z2 + 1.0) * z / 4.0;
    let g2 = ((5.0 * z2 + 16.0) * z2 + 3.0) * z / 96.0;
    let g3 = (((3.0 * z2 + 19.0) * z2 + 17.0) * z2 - 15.0) * z / 384.0;
    let g4 = ((((79.0 * z2 + 776.0) * z2 + 1482.0) * z2 - 1920.0) * z2 - 945.0) * z / 92160.0;
    z + (g1 + (g2 + (g3 + g4 / nu) / nu) / nu) / nu
}

/// The `p` quantile of the standard normal distribution (Acklam's rational approximation,
/// relative error below 1.2·10⁻⁹); NaN when `p` is not in (0, 1).
pub fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW_TAIL: f64 = 0.024_25;
    let polynomial = |coefficients: &[f64], x: f64| {
        coefficients
            .iter()
            .fold(0.0, |sum, coefficient| sum * x + coefficient)
    };
    let tail = |q: f64| polynomial(&C, q) / (polynomial(&D, q) * q + 1.0);
    if !(p > 0.0 && p < 1.0) {
        f64::NAN
    } else if p < LOW_TAIL {
        tail((-2.0 * p.ln()).sqrt())
    } else if p <= 1.0 - LOW_TAIL {
        let q = p - 0.5;
        let r = q * q;
        polynomial(&A, r) * q / (polynomial(&B, r) * r + 1.0)
    } else {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    }
}

/// A figure over k trials: their mean, sample deviation, range, and the Student-t interval of the
/// mean.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct BetweenTrials {
    /// How many trials gave the figure.
    pub trials: u64,
    /// The mean over the trials.
    pub mean: f64,
    /// The sample standard deviation (`ddof = 1`; 0 for one trial).
    pub sd: f64,
    /// The smallest trial's value.
    pub min: f64,
    /// The largest trial's value.
    pub max: f64,
    /// `mean − t(1 − α/2, k − 1) · sd / √k` (absent for one trial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lo: Option<f64>,
    /// `mean + t(1 − α/2, k − 1) · sd / √k` (absent for one trial).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hi: Option<f64>,
}

/// The spread of a figure's `values`, one a trial, and the interval of their mean at `level`;
/// `None` for no values.
pub fn between_trials(values: &[f64], level: Level) -> Option<BetweenTrials> {
    let (&first, rest) = values.split_first()?;
    let (min, max) = rest.iter().fold((first, first), |(min, max), &value| {
        (min.min(value), max.max(value))
    });
    let mean = dist::mean(values);
    let sd = dist::std(values, mean, dist::Deviation::Sample);
    let trials = values.len() as u32;
    let half_width = (trials >= 2).then(|| {
        let t = quantile(1.0 - (1.0 - level.get()) / 2.0, trials - 1);
        t * sd / f64::from(trials).sqrt()
    });
    Some(BetweenTrials {
        trials: u64::from(trials),
        mean,
        sd,
        min,
        max,
        lo: half_width.map(|half| mean - half),
        hi: half_width.map(|half| mean + half),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Student t quantiles as the tables print them (e.g. NIST/SEMATECH e-Handbook of Statistical
    /// Methods, 1.3.6.7.2), to six decimals: (p, df, t).
    const TABLE: [(f64, u32, f64); 30] = [
        (0.9, 1, 3.077_684),
        (0.95, 1, 6.313_752),
        (0.975, 1, 12.706_205),
        (0.995, 1, 63.656_741),
        (0.9995, 1, 636.619_249),
        (0.9, 2, 1.885_618),
        (0.975, 2, 4.302_653),
        (0.9995, 2, 31.599_055),
        (0.9, 3, 1.637_744),
        (0.975, 3, 3.182_446),
        (0.995, 3, 5.840_909),
        (0.9995, 3, 12.923_979),
        (0.95, 4, 2.131_847),
        (0.995, 4, 4.604_095),
        (0.9, 5, 1.475_884),
        (0.975, 5, 2.570_582),
        (0.9995, 5, 6.868_827),
        (0.975, 7, 2.364_624),
        (0.95, 10, 1.812_461),
        (0.975, 10, 2.228_139),
        (0.9995, 10, 4.586_894),
        (0.975, 30, 2.042_272),
        (0.995, 30, 2.749_996),
        (0.975, 120, 1.979_930),
        (0.9995, 120, 3.373_454),
        (0.975, 1000, 1.962_339),
        (0.975, 1001, 1.962_337),
        (0.995, 1001, 2.580_750),
        (0.9995, 5000, 3.292_474),
        (0.975, 100_000, 1.959_988),
    ];

    #[test]
    fn quantiles_match_the_tables() {
        for (p, df, tabulated) in TABLE {
            let computed = quantile(p, df);
            assert!(
                (computed - tabulated).abs() < 1e-3,
                "t({p}, {df}) = {computed}, table {tabulated}"
            );
            // To the table's six decimals, in fact.
            assert!(
                (computed - tabulated).abs() < 1.5e-6,
                "t({p}, {df}) = {computed}, table {tabulated}"
            );
            assert!((quantile(1.0 - p, df) + computed).abs() < 1e-9 * computed);
        }
        assert_eq!(quantile(0.5, 7), 0.0);
        for (p, df) in [(0.0, 3), (1.0, 3), (-0.5, 3), (0.975, 0), (f64::NAN, 3)] {
            assert!(quantile(p, df).is_nan(), "t({p}, {df})");
        }
    }

    #[test]
    fn normal_quantiles_match_the_tables() {
        for (p, z) in [
            (0.9, 1.281_551_565_5),
            (0.975, 1.959_963_984_5),
            (0.995, 2.575_829_303_5),
            (0.001, -3.090_232_306_2),
            (1e-9, -5.997_807_015_0),
        ] {
            assert!((normal_quantile(p) - z).abs() < 1e-8 * z.abs(), "z({p})");
        }
        assert!(normal_quantile(1.0).is_nan());
    }

    #[test]
    fn between_trials_is_the_mean_plus_minus_t_standard_errors() {
        // Mean 12, squared deviations 4 + 0 + 4 + 16 + 16 = 40, sd sqrt(40 / 4) = sqrt(10);
        // t(0.975, 4) = 2.776445.
        let spread = between_trials(&[10.0, 12.0, 14.0, 8.0, 16.0], Level::DEFAULT).unwrap();
        assert_eq!(
            (spread.trials, spread.mean, spread.min, spread.max),
            (5, 12.0, 8.0, 16.0)
        );
        assert!((spread.sd - 10f64.sqrt()).abs() < 1e-12);
        let half = 2.776_445 * 10f64.sqrt() / 5f64.sqrt();
        assert!((spread.lo.unwrap() - (12.0 - half)).abs() < 1e-5);
        assert!((spread.hi.unwrap() - (12.0 + half)).abs() < 1e-5);
        let one = between_trials(&[3.0], Level::DEFAULT).unwrap();
        assert_eq!((one.mean, one.sd, one.lo, one.hi), (3.0, 0.0, None, None));
        assert_eq!(between_trials(&[], Level::DEFAULT), None);
    }
}
