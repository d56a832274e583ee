//! `agentx-open`: the `agentx` scenario (`policy_harness::agentx`, every rule and lock unchanged)
//! that also allows **open-loop session arrivals**, through `agentx:scenario@0.3.0`.
//!
//! It reads three settings `agentx` does not know, and answers them with its decision:
//! - `session-arrival-rate`: sessions per second, a positive finite number; absent (the default)
//!   keeps `agentx`'s closed loop of lanes;
//! - `session-arrival-pattern`: `poisson` (the default with a rate), `constant` or `gamma`, as
//!   aiperf names its arrival patterns;
//! - `session-arrival-smoothness`: the gamma shape (aiperf's `--arrival-smoothness`), `gamma` only,
//!   1.0 by default (1.0 is poisson, below is burstier, above smoother).
//!
//! With a rate, each arrival replays a whole tree from root turn 0, so there is no warmup to prime
//! a t\*: the cache-pressure warmup (`warmup-requests-per-lane`, `agentic-cache-warmup-duration`)
//! resolves to absent, and an explicit one is an error. The host reads the three settings only
//! from a component whose `describe` lists them as knobs; `agentx`, which does not, keeps its
//! `timing-mode` lock.
//!
//! The logic lives here rather than in `policy-harness` so that `agentx.wasm` keeps its bytes.

use policy::settings::Resolver;
use policy::types::{
    Classification, ErrorResponse, Info, Knob, Lock, Marker, Placement, Resolved, Setting, Value,
    Violation,
};
use policy_harness::agentx::Agentx;
use policy_harness::tree::{Tree, TreeParams, TreeStart};
use policy_harness::{DelayParams, Outcome, Rules, ScenarioV3, TreeId, TurnTimes};

pub const NAME: &str = "agentx-open";
pub const VERSION: &str = "0.1.0";

const RATE: &str = "session-arrival-rate";
const PATTERN: &str = "session-arrival-pattern";
const SMOOTHNESS: &str = "session-arrival-smoothness";
const PATTERNS: [&str; 3] = ["poisson", "constant", "gamma"];
const WARMUPS: [&str; 2] = ["warmup-requests-per-lane", "agentic-cache-warmup-duration"];

/// The arrival settings as this scenario decides them, or the errors that refuse them. `warmup`
/// holds what the user gave of the warmup settings (explicit ones).
fn arrivals(given: Vec<Setting>, warmup: &[String]) -> Result<Vec<Setting>, Vec<Violation>> {
    let mut r = Resolver::new(given);
    let rate = r.number(RATE, "0.5");
    let pattern = r.text(PATTERN, "poisson");
    let smoothness = r.number(SMOOTHNESS, "1.5");
    if let Some(x) = rate {
        if !(x.is_finite() && x > 0.0) {
            r.error(RATE, format!("--{RATE} {x} is not a positive number of sessions per second; pass e.g. --{RATE} 0.5"));
        }
    }
    if let Some(p) = &pattern {
        if !PATTERNS.contains(&p.as_str()) {
            r.error(PATTERN, format!("--{PATTERN} {p} is not an arrival pattern; use poisson, constant or gamma"));
        } else if rate.is_none() {
            r.error(PATTERN, format!("--{PATTERN} {p} needs --{RATE}: the pattern shapes the arrivals of an open-loop run; pass e.g. --{RATE} 0.5"));
        }
    }
    if let Some(s) = smoothness {
        if pattern.as_deref() != Some("gamma") {
            r.error(SMOOTHNESS, format!("--{SMOOTHNESS} {s} applies to gamma arrivals only; add --{PATTERN} gamma or remove --{SMOOTHNESS}"));
        } else if !(s.is_finite() && s > 0.0) {
            r.error(SMOOTHNESS, format!("--{SMOOTHNESS} {s} is not a positive gamma shape; pass e.g. --{SMOOTHNESS} 1.5 (1 is poisson)"));
        }
    }
    if rate.is_some() {
        for w in warmup {
            r.error(w, format!("--{w} does not apply to open-loop arrivals: each arrival replays its tree from turn 0, with no warmup; remove --{w} or --{RATE}"));
        }
    }
    let pattern = rate.map(|_| pattern.unwrap_or_else(|| "poisson".to_string()));
    let gamma = pattern.as_deref() == Some("gamma");
    r.set(RATE, rate.map_or(Value::Absent, Value::Number));
    r.set(PATTERN, pattern.map_or(Value::Absent, Value::Text));
    r.set(
        SMOOTHNESS,
        match (gamma, smoothness) {
            (true, s) => Value::Number(s.unwrap_or(1.0)),
            (false, _) => Value::Absent,
        },
    );
    r.finish(0, false, false).map(|res| res.settings)
}

pub fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
    let ours = |s: &Setting| [RATE, PATTERN, SMOOTHNESS].contains(&s.name.as_str());
    let warmup: Vec<String> = given
        .iter()
        .filter(|s| s.explicit && s.value != Value::Absent && WARMUPS.contains(&s.name.as_str()))
        .map(|s| s.name.clone())
        .collect();
    let (arrival, rest): (Vec<Setting>, Vec<Setting>) = given.into_iter().partition(ours);
    let open = arrival.iter().any(|s| s.name == RATE && s.value != Value::Absent);
    let decided = arrivals(arrival, &warmup);
    let base = <Agentx as ScenarioV3>::resolve(rest, entropy);
    match (base, decided) {
        (Ok(mut res), Ok(extra)) => {
            if open {
                for s in res.settings.iter_mut().filter(|s| WARMUPS.contains(&s.name.as_str())) {
                    s.value = Value::Absent;
                }
            }
            res.settings.extend(extra);
            Ok(res)
        }
        (Err(mut a), Err(b)) => {
            a.extend(b);
            Err(a)
        }
        (Err(a), Ok(_)) | (Ok(_), Err(a)) => Err(a),
    }
}

fn knob(name: &str, description: &str, default: Option<&str>) -> Knob {
    Knob {
        name: name.to_string(),
        description: description.to_string(),
        default_value: default.map(|d| d.to_string()),
    }
}

fn describe() -> Info {
    let mut info = <Agentx as ScenarioV3>::describe();
    info.knobs.extend([
        knob(RATE, "open-loop session arrivals per second (absent: agentx's closed loop of lanes)", None),
        knob(PATTERN, "arrival process: poisson, constant or gamma", Some("poisson")),
        knob(SMOOTHNESS, "gamma shape of the inter-arrival times (1 is poisson)", Some("1.0")),
    ]);
    for l in info.locks.iter_mut().filter(|l| l.setting == "timing-mode") {
        *l = Lock {
            setting: "timing-mode".to_string(),
            rule: "agentic_replay, or open-loop session arrivals (--session-arrival-rate); aiperf's other timing options are refused".to_string(),
        };
    }
    Info {
        name: NAME.to_string(),
        version: VERSION.to_string(),
        description: format!("{}. With --session-arrival-rate, sessions arrive open-loop (poisson, constant or gamma), each a whole tree from turn 0, --concurrency its ceiling.", info.description),
        knobs: info.knobs,
        locks: info.locks,
    }
}

/// `agentx` with open-loop session arrivals.
pub struct AgentxOpen;

impl ScenarioV3 for AgentxOpen {
    fn describe() -> Info {
        describe()
    }

    fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
        resolve(given, entropy)
    }

    fn rules(resolved: &[Setting]) -> Rules {
        <Agentx as ScenarioV3>::rules(resolved)
    }

    fn start_tree(params: &TreeParams, lane: u32, tree: &Tree) -> Option<TreeStart> {
        <Agentx as ScenarioV3>::start_tree(params, lane, tree)
    }

    fn cache_bust(target: Placement, tree: &TreeId) -> Marker {
        <Agentx as ScenarioV3>::cache_bust(target, tree)
    }

    fn classify_error(response: &ErrorResponse, phrases: Option<&[String]>) -> Classification {
        <Agentx as ScenarioV3>::classify_error(response, phrases)
    }

    fn turn_delay(params: &DelayParams, times: &TurnTimes) -> f64 {
        <Agentx as ScenarioV3>::turn_delay(params, times)
    }

    fn validity(outcome: &Outcome) -> Vec<String> {
        <Agentx as ScenarioV3>::validity(outcome)
    }
}

policy_harness::export_scenario_v3!(crate::AgentxOpen);
