//! The machinery of `resolve`, shared by the scenarios: typed reads of the given settings, the
//! effective configuration being built, and the three kinds of finding.
//!
//! - A **lock violation** breaks one of the scenario's rules (e.g. `--benchmark-duration 600` under a
//!   900 s floor). `--unsafe-override` downgrades it to a warning; the user's value then stays in
//!   effect, which is what overriding means.
//! - An **error** is a value that cannot be used at all (wrong type, NaN, a ratio above 1). It is never
//!   downgraded.
//! - A **notice** is a warning that does not block (e.g. a replaced overflow phrase list).
//!
//! Invariants: every finding is collected, none stops the others; the effective settings keep the
//! order of the given ones, with the scenario's own knobs appended when the user gave none; a name the
//! scenario does not know passes through untouched; messages are lower-case, name the flag as
//! `--<name> <value>`, and say how to fix it.

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::types::{Resolved, Setting, Value, Violation};

/// `secrets.randbits(63)`'s range: a drawn seed is the host's entropy with the top bit cleared.
pub const SEED_MASK: u64 = (1 << 63) - 1;

/// A value as it appears in a message: `600`, `0.25`, `true`, `8,16,32`, `first_turn_prefix`.
pub fn render(v: &Value) -> String {
    match v {
        Value::Absent => "(unset)".to_string(),
        Value::Flag(b) => b.to_string(),
        Value::Integer(i) => i.to_string(),
        Value::Number(x) => format!("{x}"),
        Value::Text(t) => t.clone(),
        Value::Integers(xs) => xs
            .iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join(","),
        Value::Texts(xs) => xs.join(","),
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Absent => "nothing",
        Value::Flag(_) => "a flag",
        Value::Integer(_) => "an integer",
        Value::Number(_) => "a number",
        Value::Text(_) => "a text",
        Value::Integers(_) => "a list of integers",
        Value::Texts(_) => "a list of texts",
    }
}

pub struct Resolver {
    out: Vec<Setting>,
    locks: Vec<Violation>,
    errors: Vec<Violation>,
    notices: Vec<Violation>,
}

impl Resolver {
    pub fn new(given: Vec<Setting>) -> Resolver {
        Resolver {
            out: given,
            locks: Vec::new(),
            errors: Vec::new(),
            notices: Vec::new(),
        }
    }

    /// The setting as given (the last one when a name repeats, as a later flag overrides an earlier).
    pub fn get(&self, name: &str) -> Option<&Setting> {
        self.out.iter().rev().find(|s| s.name == name)
    }

    /// The names of the settings present, in order (a repeated name once per occurrence).
    pub fn names(&self) -> Vec<String> {
        self.out
            .iter()
            .filter(|s| s.value != Value::Absent)
            .map(|s| s.name.clone())
            .collect()
    }

    /// The value when it is present (not `absent`), with whether the user set it.
    pub fn present(&self, name: &str) -> Option<(&Value, bool)> {
        self.get(name)
            .filter(|s| s.value != Value::Absent)
            .map(|s| (&s.value, s.explicit))
    }

    /// The value when the user set it explicitly and it is present.
    pub fn explicit(&self, name: &str) -> Option<&Value> {
        self.present(name).filter(|(_, e)| *e).map(|(v, _)| v)
    }

    /// Put the effective value: replaces the given setting (keeping its `explicit`) or appends one.
    pub fn set(&mut self, name: &str, value: Value) {
        let explicit = self
            .get(name)
            .is_some_and(|s| s.explicit && s.value != Value::Absent);
        let setting = Setting {
            name: name.to_string(),
            value,
            explicit,
        };
        match self.out.iter().position(|s| s.name == name) {
            Some(first) => {
                self.out[first] = setting;
                let mut i = 0;
                self.out.retain(|s| {
                    let keep = i == first || s.name != name;
                    i += 1;
                    keep
                });
            }
            None => self.out.push(setting),
        }
    }

    /// Keep the given value, or put `value` when there is none.
    pub fn default(&mut self, name: &str, value: Value) {
        if self.present(name).is_none() {
            self.set(name, value);
        }
    }

    pub fn lock(&mut self, setting: &str, message: String) {
        self.locks.push(Violation {
            setting: setting.to_string(),
            message,
        });
    }

    pub fn error(&mut self, setting: &str, message: String) {
        self.errors.push(Violation {
            setting: setting.to_string(),
            message,
        });
    }

    pub fn notice(&mut self, setting: &str, message: String) {
        self.notices.push(Violation {
            setting: setting.to_string(),
            message,
        });
    }

    fn wrong_type(&mut self, name: &str, want: &str, v: &Value, example: &str) {
        let msg = format!(
            "--{name} expects {want}, got {} `{}`; pass e.g. --{name} {example}",
            kind(v),
            render(v)
        );
        self.error(name, msg);
    }

    /// A number (an integer is accepted as one). Reports a type error and answers `None` otherwise.
    pub fn number(&mut self, name: &str, example: &str) -> Option<f64> {
        let v = self.present(name)?.0.clone();
        match v {
            Value::Number(x) => Some(x),
            Value::Integer(i) => Some(i as f64),
            other => {
                self.wrong_type(name, "a number", &other, example);
                None
            }
        }
    }

    pub fn integer(&mut self, name: &str, example: &str) -> Option<i64> {
        let v = self.present(name)?.0.clone();
        match v {
            Value::Integer(i) => Some(i),
            Value::Number(x) if (-9.0e15..9.0e15).contains(&x) && (x as i64) as f64 == x => {
                Some(x as i64)
            }
            other => {
                self.wrong_type(name, "an integer", &other, example);
                None
            }
        }
    }

    pub fn flag(&mut self, name: &str) -> Option<bool> {
        let v = self.present(name)?.0.clone();
        match v {
            Value::Flag(b) => Some(b),
            other => {
                self.wrong_type(name, "a flag (true or false)", &other, "true");
                None
            }
        }
    }

    pub fn text(&mut self, name: &str, example: &str) -> Option<String> {
        let v = self.present(name)?.0.clone();
        match v {
            Value::Text(t) => Some(t),
            other => {
                self.wrong_type(name, "a text", &other, example);
                None
            }
        }
    }

    /// One or more integers (a single integer is a list of one).
    pub fn integers(&mut self, name: &str, example: &str) -> Option<Vec<i64>> {
        let v = self.present(name)?.0.clone();
        match v {
            Value::Integers(xs) => Some(xs),
            Value::Integer(i) => Some(alloc::vec![i]),
            other => {
                self.wrong_type(name, "integers", &other, example);
                None
            }
        }
    }

    /// One or more texts (a single text is a list of one).
    pub fn texts(&mut self, name: &str, example: &str) -> Option<Vec<String>> {
        let v = self.present(name)?.0.clone();
        match v {
            Value::Texts(xs) => Some(xs),
            Value::Text(t) => Some(alloc::vec![t]),
            other => {
                self.wrong_type(name, "texts", &other, example);
                None
            }
        }
    }

    /// The run's seed: `random-seed` when given (0 ..= 2^63-1), else drawn from `entropy`.
    /// Writes the effective `random-seed` and answers `(seed, drawn)`.
    pub fn seed(&mut self, entropy: u64) -> (u64, bool) {
        match self.integer("random-seed", "42") {
            Some(s) if s >= 0 => {
                self.set("random-seed", Value::Integer(s));
                (s as u64, false)
            }
            Some(s) => {
                self.error(
                    "random-seed",
                    format!("--random-seed {s} is negative; pass a seed from 0 to 9223372036854775807, or leave it unset to draw one"),
                );
                (0, false)
            }
            None => {
                let seed = entropy & SEED_MASK;
                self.set("random-seed", Value::Integer(seed as i64));
                (seed, true)
            }
        }
    }

    /// `trajectory-start-min-ratio` / `-max-ratio` with the scenario's defaults: finite, within [0, 1],
    /// min <= max. Writes both effective values.
    pub fn start_ratios(&mut self, default_min: f64, default_max: f64) -> (f64, f64) {
        const MIN: &str = "trajectory-start-min-ratio";
        const MAX: &str = "trajectory-start-max-ratio";
        let lo = self.number(MIN, "0.25").unwrap_or(default_min);
        let hi = self.number(MAX, "0.75").unwrap_or(default_max);
        let mut ok = true;
        for (name, x) in [(MIN, lo), (MAX, hi)] {
            if !(0.0..=1.0).contains(&x) {
                self.error(name, format!("--{name} {x} is outside 0..1; pass a fraction of the trace's turns, e.g. --{name} {}", if name == MIN { "0.25" } else { "0.75" }));
                ok = false;
            }
        }
        if ok && lo > hi {
            self.error(MIN, format!("--{MIN} {lo} is above --{MAX} {hi}; the start range would be empty: swap them or lower --{MIN}"));
        }
        self.set(MIN, Value::Number(lo));
        self.set(MAX, Value::Number(hi));
        (lo, hi)
    }

    /// The overflow phrase list (`context-overflow-substrings`); `default` is the scenario's own, or
    /// `None` when the scenario's rule is not a plain list (the effective value then stays absent and
    /// the host passes no phrases to `classify-error`).
    pub fn overflow_phrases(&mut self, default: Option<&[&str]>) {
        const NAME: &str = "context-overflow-substrings";
        if let Some(list) = self.texts(NAME, "\"context length\"") {
            if list.iter().any(|p| p.trim().is_empty()) {
                self.error(NAME, format!("--{NAME} contains an empty phrase, which would match every error; remove it (an empty list disables detection)"));
            }
            if self.explicit(NAME).is_some() {
                let msg = if list.is_empty() {
                    format!("--{NAME} is empty: context overflows will not be detected, counted or cut short")
                } else {
                    format!("--{NAME} replaces the scenario's overflow phrases; overflows the new list misses count as ordinary failures")
                };
                self.notice(NAME, msg);
            }
            self.set(NAME, Value::Texts(list));
        } else if let Some(d) = default {
            self.set(
                NAME,
                Value::Texts(d.iter().map(|s| s.to_string()).collect()),
            );
        }
    }

    /// `context-overflow-rate-limit`, a fraction in [0, 1] (default 0.01).
    pub fn overflow_rate_limit(&mut self, default: f64) -> f64 {
        const NAME: &str = "context-overflow-rate-limit";
        let limit = self.number(NAME, "0.01").unwrap_or(default);
        if !(0.0..=1.0).contains(&limit) {
            self.error(
                NAME,
                format!("--{NAME} {limit} is outside 0..1; pass a fraction, e.g. --{NAME} 0.01"),
            );
        } else if self.explicit(NAME).is_some() && limit != default {
            self.notice(NAME, format!("--{NAME} {limit} differs from the scenario's {default}: validity is judged against the new limit"));
        }
        self.set(NAME, Value::Number(limit));
        limit
    }

    /// Finish: errors (plus lock violations unless overridden) fail the call; otherwise lock violations
    /// become warnings under `unsafe_override`, which also marks the run invalid.
    pub fn finish(
        self,
        seed: u64,
        seed_drawn: bool,
        unsafe_override: bool,
    ) -> Result<Resolved, Vec<Violation>> {
        let Resolver {
            out,
            locks,
            mut errors,
            notices,
        } = self;
        if !errors.is_empty() {
            if !unsafe_override {
                errors.extend(locks);
            }
            return Err(errors);
        }
        if !locks.is_empty() && !unsafe_override {
            return Err(locks);
        }
        let mut warnings = locks;
        warnings.extend(notices);
        Ok(Resolved {
            settings: out,
            seed,
            seed_drawn,
            warnings,
            invalid_reasons: if unsafe_override {
                alloc::vec!["unsafe_override".to_string()]
            } else {
                Vec::new()
            },
        })
    }
}
