//! Open-loop session arrivals: the arrival process (its pattern, its seeded draws) and the
//! schedule that meters session starts, with the rule for a replay that falls behind.
//!
//! - **Patterns**, as aiperf names and draws them: `poisson` (exponential inter-arrival times of
//!   mean 1/rate), `constant` (exactly 1/rate), `gamma` (shape = the smoothness, scale
//!   1/(rate × smoothness), so the mean stays 1/rate: 1 is poisson, below is burstier, above
//!   smoother).
//! - **Reproducible**: the draws come from a ChaCha8 stream seeded with the run's seed, so the same
//!   seed gives the same arrival times. The first arrival is at the start of profiling; arrival
//!   `k` is at the sum of the first `k` draws (kept in f64 seconds, so `constant` does not drift).
//! - **Behind schedule, reset rather than burst**: an arrival fires late only while it is at most
//!   one mean inter-arrival (1/rate) late; an older one is skipped and counted. So a replay that
//!   stalled fires only the arrivals of the last inter-arrival and goes on from the schedule's
//!   next one, never a burst of the missed ones. (The mean, not the drawn gap: poisson draws gaps
//!   far shorter than the timer's resolution, and those arrivals are not late.)
//!
//! What an arrival starts, and the ceiling on sessions in flight, is the scheduler's
//! ([`super::sched`]); this module knows instants and counts only.

use std::time::{Duration, Instant};

use rand::rngs::ChaCha8Rng;
use rand::SeedableRng;
use rand_distr::{Distribution, Exp, Gamma};

/// Salts the run's seed for the arrival stream (so it shares no draws with another stream of the
/// same seed).
const SEED_SALT: u64 = 0xa771_7a15_5e55_1045;

/// The arrival process of an open-loop run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Exponential inter-arrival times of mean 1/rate.
    Poisson,
    /// Exactly 1/rate between arrivals.
    Constant,
    /// Gamma inter-arrival times of shape `smoothness` and mean 1/rate.
    Gamma,
}

impl Pattern {
    /// `poisson`, `constant` or `gamma` (any case, surrounding space ignored).
    pub fn parse(text: &str) -> Option<Pattern> {
        match text.trim().to_ascii_lowercase().as_str() {
            "poisson" => Some(Pattern::Poisson),
            "constant" => Some(Pattern::Constant),
            "gamma" => Some(Pattern::Gamma),
            _ => None,
        }
    }

    /// The pattern's name as `parse` reads it and the summary writes it.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Poisson => "poisson",
            Pattern::Constant => "constant",
            Pattern::Gamma => "gamma",
        }
    }
}

/// What the scenario resolved: sessions per second, the pattern, the gamma shape; and the seed of
/// the draws.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArrivalSpec {
    /// Sessions started per second (positive, finite).
    pub rate: f64,
    /// How the inter-arrival times are drawn.
    pub pattern: Pattern,
    /// The gamma shape (`gamma` only).
    pub smoothness: Option<f64>,
    /// The run's seed; the arrival draws use it salted, so equal seeds give equal arrival times.
    pub seed: u64,
}

impl ArrivalSpec {
    /// A checked spec: a positive finite rate, a smoothness with `gamma` only (1 when absent),
    /// positive and finite. Errors name the setting.
    pub fn new(
        rate: f64,
        pattern: Pattern,
        smoothness: Option<f64>,
        seed: u64,
    ) -> anyhow::Result<ArrivalSpec> {
        if !(rate.is_finite() && rate > 0.0) {
            anyhow::bail!("--session-arrival-rate {rate} is not a positive number of sessions per second; pass e.g. --session-arrival-rate 0.5");
        }
        let smoothness = match (pattern, smoothness) {
            (Pattern::Gamma, given) => {
                let shape = given.unwrap_or(1.0);
                if !(shape.is_finite() && shape > 0.0) {
                    anyhow::bail!("--session-arrival-smoothness {shape} is not a positive gamma shape; pass e.g. --session-arrival-smoothness 1.5");
                }
                Some(shape)
            }
            (_, Some(s)) => anyhow::bail!("--session-arrival-smoothness {s} applies to gamma arrivals only; add --session-arrival-pattern gamma or remove --session-arrival-smoothness"),
            (_, None) => None,
        };
        Ok(ArrivalSpec {
            rate,
            pattern,
            smoothness,
            seed,
        })
    }

    /// The coefficient of variation of the inter-arrival times: 1 for poisson, 0 for constant,
    /// 1/sqrt(shape) for gamma.
    pub fn expected_cv(&self) -> f64 {
        match self.pattern {
            Pattern::Poisson => 1.0,
            Pattern::Constant => 0.0,
            Pattern::Gamma => 1.0 / self.smoothness.unwrap_or(1.0).sqrt(),
        }
    }

    /// The first `count` arrival offsets from the start, seconds (what the schedule fires on time).
    pub fn offsets(&self, count: usize) -> Vec<f64> {
        let mut process = Process::new(self);
        let mut next_offset = 0.0;
        (0..count)
            .map(|_| {
                let this = next_offset;
                next_offset += process.gap_s();
                this
            })
            .collect()
    }

    /// As JSON for the dry run, the manifest and the summary.
    pub fn json(&self) -> serde_json::Value {
        serde_json::json!({
            "rate_per_s": self.rate,
            "pattern": self.pattern.name(),
            "smoothness": self.smoothness,
            "expected_cv": self.expected_cv(),
        })
    }
}

/// The seeded inter-arrival draws.
pub(crate) struct Process {
    rng: ChaCha8Rng,
    draw: Draw,
}

enum Draw {
    Constant(f64),
    Exp(Exp<f64>),
    Gamma(Gamma<f64>),
}

impl Process {
    pub(crate) fn new(spec: &ArrivalSpec) -> Process {
        let rate = spec.rate;
        let draw = match spec.pattern {
            Pattern::Constant => Draw::Constant(1.0 / rate),
            Pattern::Poisson => match Exp::new(rate) {
                Ok(e) => Draw::Exp(e),
                Err(_) => Draw::Constant(1.0 / rate),
            },
            Pattern::Gamma => {
                let shape = spec.smoothness.unwrap_or(1.0);
                match Gamma::new(shape, 1.0 / (rate * shape)) {
                    Ok(g) => Draw::Gamma(g),
                    Err(_) => Draw::Constant(1.0 / rate),
                }
            }
        };
        Process {
            rng: ChaCha8Rng::seed_from_u64(spec.seed ^ SEED_SALT),
            draw,
        }
    }

    /// The next inter-arrival time, seconds (finite and non-negative).
    pub(crate) fn gap_s(&mut self) -> f64 {
        let gap = match &self.draw {
            Draw::Constant(gap) => *gap,
            Draw::Exp(e) => e.sample(&mut self.rng),
            Draw::Gamma(d) => d.sample(&mut self.rng),
        };
        if gap.is_finite() {
            gap.max(0.0)
        } else {
            0.0
        }
    }
}

/// What is due now: an arrival to start, and the arrivals skipped before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Due {
    /// The arrival to start, by its ordinal in the schedule (skipped ones counted): unique per
    /// run. `None` when every due arrival was too late.
    pub(crate) ordinal: Option<u64>,
    /// Arrivals skipped because they were more than one mean inter-arrival late.
    pub(crate) skipped: u64,
}

/// The schedule from the start of profiling.
pub(crate) struct Schedule {
    start: Instant,
    process: Process,
    /// The lateness past which an arrival is skipped: one mean inter-arrival.
    mean_gap: Duration,
    /// The next arrival's offset from `start`, seconds, and its ordinal.
    next_s: f64,
    ordinal: u64,
}

impl Schedule {
    /// The first arrival is at `start`.
    pub(crate) fn new(spec: &ArrivalSpec, start: Instant) -> Schedule {
        Schedule {
            start,
            process: Process::new(spec),
            mean_gap: Duration::from_secs_f64((1.0 / spec.rate).min(1e9)),
            next_s: 0.0,
            ordinal: 0,
        }
    }

    fn instant(&self, offset_s: f64) -> Instant {
        self.start + Duration::from_secs_f64(offset_s.clamp(0.0, 1e9))
    }

    /// When the next arrival is due.
    pub(crate) fn next_at(&self) -> Instant {
        self.instant(self.next_s)
    }

    /// The next arrival due at `now`, if any: arrivals more than one mean inter-arrival late are
    /// skipped on the way (see the module's rule). Call again until `None`: one arrival per call.
    pub(crate) fn due(&mut self, now: Instant) -> Option<Due> {
        let mut skipped = 0;
        while self.next_at() <= now {
            let due_at = self.next_at();
            let ordinal = self.ordinal;
            self.ordinal += 1;
            self.next_s += self.process.gap_s();
            if now.saturating_duration_since(due_at) <= self.mean_gap {
                return Some(Due {
                    ordinal: Some(ordinal),
                    skipped,
                });
            }
            skipped += 1;
        }
        (skipped > 0).then_some(Due {
            ordinal: None,
            skipped,
        })
    }
}

pub use agentx_metrics::tree_counts::ArrivalCounts;

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(pattern: Pattern, smoothness: Option<f64>) -> ArrivalSpec {
        ArrivalSpec::new(2.0, pattern, smoothness, 42).unwrap()
    }

    #[test]
    fn bad_specs_name_the_flag() {
        for (rate, p, s, want) in [
            (0.0, Pattern::Poisson, None, "--session-arrival-rate 0"),
            (
                f64::NAN,
                Pattern::Poisson,
                None,
                "--session-arrival-rate NaN",
            ),
            (-1.0, Pattern::Constant, None, "--session-arrival-rate -1"),
            (
                1.0,
                Pattern::Poisson,
                Some(2.0),
                "applies to gamma arrivals only",
            ),
            (
                1.0,
                Pattern::Gamma,
                Some(0.0),
                "--session-arrival-smoothness 0",
            ),
            (
                1.0,
                Pattern::Gamma,
                Some(f64::INFINITY),
                "--session-arrival-smoothness inf",
            ),
        ] {
            let e = ArrivalSpec::new(rate, p, s, 1).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        assert_eq!(Pattern::parse(" Gamma "), Some(Pattern::Gamma));
        assert_eq!(Pattern::parse("bursty"), None);
        assert_eq!(spec(Pattern::Gamma, None).smoothness, Some(1.0));
    }

    #[test]
    fn same_seed_same_arrivals() {
        for p in [Pattern::Poisson, Pattern::Gamma] {
            let a = spec(p, None).offsets(50);
            assert_eq!(a, spec(p, None).offsets(50));
            let mut other = spec(p, None);
            other.seed = 43;
            assert_ne!(a, other.offsets(50));
        }
        let c = spec(Pattern::Constant, None).offsets(5);
        assert_eq!(c, vec![0.0, 0.5, 1.0, 1.5, 2.0]);
    }

    /// Mean and coefficient of variation of 20,000 draws: within 3 % of 1/rate, and of the
    /// pattern's CV (gamma shape 4: 0.5).
    #[test]
    fn draws_have_the_patterns_moments() {
        for (p, s) in [
            (Pattern::Poisson, None),
            (Pattern::Constant, None),
            (Pattern::Gamma, Some(4.0)),
            (Pattern::Gamma, Some(0.5)),
        ] {
            let sp = spec(p, s);
            let mut pr = Process::new(&sp);
            let g: Vec<f64> = (0..20_000).map(|_| pr.gap_s()).collect();
            let mean = g.iter().sum::<f64>() / g.len() as f64;
            let var = g.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / g.len() as f64;
            let cv = var.sqrt() / mean;
            assert!((mean - 0.5).abs() < 0.015, "{p:?}: mean {mean}");
            assert!(
                (cv - sp.expected_cv()).abs() < 0.03 * sp.expected_cv().max(1.0),
                "{p:?}: cv {cv}"
            );
        }
    }

    #[test]
    fn a_late_schedule_skips_rather_than_bursts() {
        let t0 = Instant::now();
        let ms = |x: u64| t0 + Duration::from_millis(x);
        // Constant at 2/s: arrivals at 0, 500, 1000, 1500, 2000, ...
        let mut s = Schedule::new(&spec(Pattern::Constant, None), t0);
        let due = |o: u64, skipped: u64| {
            Some(Due {
                ordinal: Some(o),
                skipped,
            })
        };
        assert_eq!(s.due(ms(0)), due(0, 0));
        assert_eq!(s.due(ms(0)), None);
        assert_eq!(s.next_at(), ms(500));
        // 300 ms late (less than one inter-arrival): fired late, the schedule kept.
        assert_eq!(s.due(ms(800)), due(1, 0));
        assert_eq!(s.next_at(), ms(1000));
        // At 2600 the arrivals of 1000, 1500, 2000 and 2500 are due: 2500 fires, three skipped.
        assert_eq!(s.due(ms(2600)), due(5, 3));
        assert_eq!(s.due(ms(2600)), None);
        assert_eq!(s.next_at(), ms(3000));
        // Exactly one inter-arrival late still fires.
        assert_eq!(s.due(ms(3500)), due(6, 0));
        assert_eq!(s.next_at(), ms(3500));
        assert_eq!(s.due(ms(3500)), due(7, 0));
    }

    /// Gamma arrivals of shape 0.2 cluster: gaps far below the mean are not lateness, and a
    /// stall skips exactly the arrivals more than one mean inter-arrival (500 ms) old.
    #[test]
    fn clustered_arrivals_fire_and_a_stall_skips_only_the_stale() {
        let sp = spec(Pattern::Gamma, Some(0.2));
        let offsets = sp.offsets(400);
        let t0 = Instant::now();
        let at = |s: f64| t0 + Duration::from_secs_f64(s);
        // On time: every arrival fires at its instant, none skipped.
        let mut s = Schedule::new(&sp, t0);
        for (k, &o) in offsets.iter().enumerate() {
            assert_eq!(
                s.due(at(o)),
                Some(Due {
                    ordinal: Some(k as u64),
                    skipped: 0
                })
            );
        }
        // Stalled until 60 s: those due before 59.5 s are skipped, the rest fire.
        let mut s = Schedule::new(&sp, t0);
        let now = at(60.0);
        let (mut fired, mut skipped) = (0, 0);
        while let Some(d) = s.due(now) {
            skipped += d.skipped;
            fired += u64::from(d.ordinal.is_some());
        }
        let due: Vec<f64> = offsets.iter().copied().filter(|&o| o <= 60.0).collect();
        let fresh = due.iter().filter(|&&o| o >= 59.5).count() as u64;
        assert_eq!((fired, skipped), (fresh, due.len() as u64 - fresh));
    }
}
