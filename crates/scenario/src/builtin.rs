//! The components built into the host (the default scenario and the others selectable by name or
//! hash), and the one loader of a scenario reference: a path, the store, or a built-in.

use std::path::Path;

use super::{Scenario, ScenarioEngine, ScenarioRef, ScenarioStore};

/// The agentx component built into the host: the default scenario (agentx-harness's
/// `--scenario agentx`: AgentX v1.0 session trees under the harness's preset, world 0.3.0).
pub const BUILTIN_SCENARIO: &[u8] = include_bytes!("../../../guest-scenarios/dist/agentx.wasm");
/// The agentx-v1 component built into the host (aiperf 0.13's AgentX v1.0 session trees).
pub const BUILTIN_V1: &[u8] = include_bytes!("../../../guest-scenarios/dist/agentx-v1.wasm");
/// The agentx-mvp component built into the host (the seed-era single-stream scenario), selectable by
/// name (`agentx-mvp`, `inferencex-agentx-mvp`) or hash.
pub const BUILTIN_MVP: &[u8] = include_bytes!("../../../guest-scenarios/dist/agentx-mvp.wasm");

/// The agentx-open component built into the host: agentx that also allows open-loop session
/// arrivals (`--session-arrival-rate`), world 0.3.0.
pub const BUILTIN_OPEN: &[u8] = include_bytes!("../../../guest-scenarios/dist/agentx-open.wasm");

/// The agent-wire component built into the host: agentx that also decides the request's wire
/// (`--wire`, `--reasoning-in-history`), world 0.3.0.
pub const BUILTIN_AGENT_WIRE: &[u8] =
    include_bytes!("../../../guest-scenarios/dist/agent-wire.wasm");

/// The graph-ir component built into the host: the scenario of an aiperf Agent Graph IR replay
/// (`run --format graph-ir FILE`: admission, stop conditions, the pacing flags it refuses), world
/// 0.3.0.
pub const BUILTIN_GRAPH_IR: &[u8] = include_bytes!("../../../guest-scenarios/dist/graph-ir.wasm");

/// The components built into the host: file stem, the other names it answers to, bytes. The first
/// is the default.
const BUILTINS: [(&str, &[&str], &[u8]); 6] = [
    ("agentx", &["inferencex-agentx"], BUILTIN_SCENARIO),
    ("agentx-v1", &["inferencex-agentx-v1"], BUILTIN_V1),
    ("agentx-mvp", &["inferencex-agentx-mvp"], BUILTIN_MVP),
    ("agentx-open", &["agentx-open"], BUILTIN_OPEN),
    ("agent-wire", &["agent-wire"], BUILTIN_AGENT_WIRE),
    ("graph-ir", &["graph-ir"], BUILTIN_GRAPH_IR),
];

/// Whether `name` names a built-in component (its file stem or scenario name).
pub fn is_builtin_name(name: &str) -> bool {
    builtin(&ScenarioRef::Name(name.to_string())).is_some()
}

/// The built-in component a name or hash reference means, if any.
fn builtin(reference: &ScenarioRef) -> Option<(&'static str, &'static [u8])> {
    use sha2::{Digest, Sha256};
    BUILTINS
        .iter()
        .find(|(stem, names, bytes)| match reference {
            ScenarioRef::Name(name) => name == stem || names.contains(&name.as_str()),
            ScenarioRef::Hash(prefix) => {
                hex::encode(Sha256::digest(bytes)).starts_with(prefix.as_str())
            }
            ScenarioRef::File { .. } => false,
        })
        .map(|(stem, _, bytes)| (*stem, *bytes))
}

/// A built-in component as `scenario list` shows it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BuiltinInfo {
    /// The name `run` takes (the file stem).
    pub name: &'static str,
    /// The first other name it answers to (the scenario's alias).
    pub alias: &'static str,
    /// The sha256 of the component bytes, lowercase hex.
    pub sha256: String,
    /// The component's size, in bytes.
    pub size: u64,
    /// The component `run` replays without a scenario.
    pub default: bool,
}

/// The built-in components, the default first.
pub fn list() -> Vec<BuiltinInfo> {
    use sha2::{Digest, Sha256};
    BUILTINS
        .iter()
        .enumerate()
        .map(|(i, (stem, alias, bytes))| BuiltinInfo {
            name: stem,
            alias: alias[0],
            sha256: hex::encode(Sha256::digest(bytes)),
            size: bytes.len() as u64,
            default: i == 0,
        })
        .collect()
}

/// The names of the built-ins, for messages: `agentx (default), agentx-v1, agentx-mvp, agentx-open`.
fn names() -> String {
    BUILTINS
        .iter()
        .enumerate()
        .map(|(i, (stem, _, _))| {
            if i == 0 {
                format!("{stem} (default)")
            } else {
                stem.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Loads a scenario reference (a path, the store, or a built-in by name or hash), or the built-in
/// default (agentx) when none is given.
pub fn load(scenario: Option<&str>, home: &Path) -> anyhow::Result<Scenario> {
    match scenario {
        Some(given) => {
            let reference = ScenarioRef::parse(given)?;
            let store = ScenarioStore::new(home);
            let engine = ScenarioEngine::new(super::Limits::default(), Some(home))?;
            match store.locate(&reference) {
                Ok((path, pin)) => Ok(engine.load(&path, pin.as_deref())?),
                // A name or hash the store does not hold may be a built-in component.
                Err(super::ScenarioError::NotInStore {
                    reference: shown,
                    store,
                }) => match builtin(&reference) {
                    Some((stem, bytes)) => {
                        let source = format!("builtin:{stem}");
                        Ok(engine.load_bytes(Path::new(&source), bytes, None)?)
                    }
                    None => anyhow::bail!(
                        "scenario {shown} is neither built in ({}) nor in the store at {}; \
                         `agentx-host scenario list` shows both, `agentx-host scenario add FILE` adds one",
                        names(),
                        store.display()
                    ),
                },
                Err(error) => Err(error.into()),
            }
        }
        None => {
            let engine = ScenarioEngine::new(super::Limits::default(), Some(home))?;
            Ok(engine.load_bytes(Path::new("builtin:agentx"), BUILTIN_SCENARIO, None)?)
        }
    }
}
