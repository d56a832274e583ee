//! `agent-wire`: the `agentx` scenario (`policy_harness::agentx`, every rule and lock unchanged)
//! that also decides **how a request carries the agent's tools and reasoning**, through
//! `agentx:scenario@0.3.0`.
//!
//! It reads two settings `agentx` does not know, and answers them with its decision:
//! - `wire`: `tools` (the default) sends real tool schemas in the request and each recorded
//!   tool-using assistant turn as a tool call followed by its tool result, in the shape of the
//!   endpoint's API; `text` sends the tools as system text, as `agentx` does;
//! - `reasoning-in-history`: `drop` (the default) or `keep`; with `keep` the assistant turns
//!   threaded back into the history carry the live reply's reasoning.
//!
//! The host reads the two settings only from a component whose `describe` lists them as knobs;
//! `agentx`, which does not, refuses an explicit one. The logic lives here rather than in
//! `policy-harness` so that `agentx.wasm` keeps its bytes.

use policy::settings::Resolver;
use policy::types::{
    Classification, ErrorResponse, Info, Knob, Marker, Placement, Resolved, Setting, Value,
    Violation,
};
use policy_harness::agentx::Agentx;
use policy_harness::tree::{Tree, TreeParams, TreeStart};
use policy_harness::{DelayParams, Outcome, Rules, ScenarioV3, TreeId, TurnTimes};

pub const NAME: &str = "agent-wire";
pub const VERSION: &str = "0.1.0";

const WIRE: &str = "wire";
const REASONING: &str = "reasoning-in-history";
const WIRES: [&str; 2] = ["text", "tools"];
const REASONINGS: [&str; 2] = ["keep", "drop"];
const DEFAULT_WIRE: &str = "tools";
const DEFAULT_REASONING: &str = "drop";

/// The wire settings as this scenario decides them, or the errors that refuse them.
fn wire(given: Vec<Setting>) -> Result<Vec<Setting>, Vec<Violation>> {
    let mut r = Resolver::new(given);
    let wire = r.text(WIRE, "tools");
    let reasoning = r.text(REASONING, "keep");
    if let Some(w) = &wire {
        if !WIRES.contains(&w.as_str()) {
            r.error(WIRE, format!("--{WIRE} {w} is not a wire; use tools or text"));
        }
    }
    if let Some(k) = &reasoning {
        if !REASONINGS.contains(&k.as_str()) {
            r.error(REASONING, format!("--{REASONING} {k} is neither keep nor drop; pass e.g. --{REASONING} keep"));
        }
    }
    r.set(WIRE, Value::Text(wire.unwrap_or_else(|| DEFAULT_WIRE.to_string())));
    r.set(
        REASONING,
        Value::Text(reasoning.unwrap_or_else(|| DEFAULT_REASONING.to_string())),
    );
    r.finish(0, false, false).map(|res| res.settings)
}

pub fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
    let ours = |s: &Setting| [WIRE, REASONING].contains(&s.name.as_str());
    let (wire_given, rest): (Vec<Setting>, Vec<Setting>) = given.into_iter().partition(ours);
    let decided = wire(wire_given);
    let base = <Agentx as ScenarioV3>::resolve(rest, entropy);
    match (base, decided) {
        (Ok(mut res), Ok(extra)) => {
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

fn knob(name: &str, description: &str, default: &str) -> Knob {
    Knob {
        name: name.to_string(),
        description: description.to_string(),
        default_value: Some(default.to_string()),
    }
}

fn describe() -> Info {
    let mut info = <Agentx as ScenarioV3>::describe();
    info.knobs.extend([
        knob(WIRE, "how the agent's tools travel: tools (schemas in the request, tool calls and results in the history) or text (agentx's system text)", DEFAULT_WIRE),
        knob(REASONING, "whether the history's assistant turns carry the live reply's reasoning: keep or drop", DEFAULT_REASONING),
    ]);
    Info {
        name: NAME.to_string(),
        version: VERSION.to_string(),
        description: format!("{}. The request carries what a real agent sends: tool schemas, tool calls and tool results (--wire tools, the default), and the live reply's reasoning when --reasoning-in-history keep.", info.description),
        knobs: info.knobs,
        locks: info.locks,
    }
}

/// `agentx` with an agent's request wire.
pub struct AgentWire;

impl ScenarioV3 for AgentWire {
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

policy_harness::export_scenario_v3!(crate::AgentWire);
