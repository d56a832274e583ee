//! The wasm engine: loading scenario components by hash, their sandbox, and calls into the guest.
//!
//! A scenario is identified by the sha256 of its bytes. [`ScenarioEngine::load`] reads the file once,
//! hashes that buffer, checks an optional pin, and compiles from the same buffer (or reuses a compiled
//! artifact cached under the same hash and this wasmtime version), so the hash a run reports is the
//! hash of the code that ran. The sandbox: no imports are linked at all (a component importing
//! anything, WASI included, is refused at load), every call gets a fresh fuel budget (deterministic),
//! linear memory is capped, and an epoch deadline is the wall-clock backstop. NaNs are canonicalized
//! so floating point results do not depend on the host CPU. Every failure becomes a typed
//! [`ScenarioError`] naming the component hash and the export.
//!
//! This is the only module that names `wasmtime`.

pub mod builtin;
pub mod check;
mod error;
mod store;

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{Component, Linker};
use wasmtime::{Config, Engine, ResourceLimiter, Store, Trap};

mod decisions;
mod setting_names;
mod shared;
mod world2;
mod world3;

pub use decisions::{AssistantText, Decisions, PromptTiling, TreeCoverage};
pub use setting_names::{ReplaySetting, REPLAY_SETTINGS};

pub use error::ScenarioError;
pub(crate) use store::ScenarioRef;
pub use store::{ScenarioStore, StoredScenario};

mod bindings {
    wasmtime::component::bindgen!({
        world: "scenario",
        path: "../../wit",
        additional_derives: [PartialEq],
    });
}

/// The guest-facing types of the `agentx:scenario` WIT package.
pub mod types {
    pub use super::bindings::exports::agentx::scenario::policy::{
        Classification, DelayParams, ErrorClass, ErrorResponse, Info, Knob, Lock, Marker, Outcome,
        Placement, Resolved, SessionId, Setting, StartParams, Trajectory, TurnTiming, Value,
        Violation,
    };
}

/// The guest-facing types of `agentx:scenario@0.2.0` (session trees) that 0.1.0 has not.
pub use world2::types as types_v2;

use types::*;

/// The WIT package this host speaks.
pub const WIT_PACKAGE: &str = "agentx:scenario";
/// The version of the WIT package of single-stream scenarios (`agentx-mvp`, `kvct-v01`).
const WIT_VERSION: &str = "0.1.0";
/// The version of the WIT package of session-tree scenarios (`agentx-v1`).
const WIT_VERSION_V2: &str = "0.2.0";
/// The version of the WIT package of scenarios that decide the whole replay (`agentx`).
const WIT_VERSION_V3: &str = "0.3.0";
/// The interface a 0.1.0 scenario exports.
const POLICY_EXPORT: &str = "agentx:scenario/policy@0.1.0";
/// The interface a 0.2.0 scenario exports.
const POLICY_EXPORT_V2: &str = "agentx:scenario/policy@0.2.0";
/// The interface a 0.3.0 scenario exports.
const POLICY_EXPORT_V3: &str = "agentx:scenario/policy@0.3.0";

/// The world a scenario component implements.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum World {
    /// `agentx:scenario@0.1.0`: single-stream sessions, a start turn per trace.
    V0_1,
    /// `agentx:scenario@0.2.0`: session trees, a start instant per lane.
    V0_2,
    /// `agentx:scenario@0.3.0`: session trees, every replay setting decided by the component.
    V0_3,
}

impl World {
    /// `agentx:scenario@<version>`.
    pub fn as_str(self) -> &'static str {
        match self {
            World::V0_1 => "agentx:scenario@0.1.0",
            World::V0_2 => "agentx:scenario@0.2.0",
            World::V0_3 => "agentx:scenario@0.3.0",
        }
    }

    /// The WIT version alone.
    pub fn version(self) -> &'static str {
        match self {
            World::V0_1 => WIT_VERSION,
            World::V0_2 => WIT_VERSION_V2,
            World::V0_3 => WIT_VERSION_V3,
        }
    }

    /// What a scenario of this world replays, in words.
    pub fn replays(self) -> &'static str {
        match self {
            World::V0_1 => "single-stream sessions",
            World::V0_2 | World::V0_3 => "session trees",
        }
    }

    /// A scenario of this world replays session trees.
    pub fn trees(self) -> bool {
        self != World::V0_1
    }
}

/// The instantiable component of either world.
enum Pre {
    V1(bindings::ScenarioPre<StoreState>),
    V2(world2::bindings::ScenarioPre<StoreState>),
    V3(world3::bindings::ScenarioPre<StoreState>),
}

/// A live instance's exports, of either world.
enum Bound {
    V1(bindings::Scenario),
    V2(world2::bindings::Scenario),
    V3(world3::bindings::Scenario),
}
/// The wasmtime release compiled into this host (part of the compiled-artifact cache key).
pub const WASMTIME_VERSION: &str = "48.0.8";

/// Sandbox limits applied to every scenario call.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Fuel (roughly, wasm instructions) granted to each call.
    pub fuel_per_call: u64,
    /// Largest linear memory a scenario may grow to, in bytes.
    pub memory_bytes: usize,
    /// Wall-clock backstop per call.
    pub deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            fuel_per_call: 500_000_000,
            memory_bytes: 64 << 20,
            deadline: Duration::from_secs(5),
        }
    }
}

/// How often the epoch advances; the deadline is counted in these ticks.
const EPOCH_TICK: Duration = Duration::from_millis(50);

/// A configured wasmtime engine with its sandbox limits and the compiled-artifact cache.
#[derive(Clone)]
pub struct ScenarioEngine {
    engine: Engine,
    limits: Limits,
    compiled_dir: Option<agentx_record::fsio::LazyRoot>,
    _ticker: Arc<EpochTicker>,
}

impl std::fmt::Debug for ScenarioEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScenarioEngine")
            .field("limits", &self.limits)
            .field("compiled_dir", &self.compiled_dir)
            .finish()
    }
}

/// Advances the engine's epoch from a background thread until dropped.
struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

impl ScenarioEngine {
    /// An engine with the given limits. `cache_home` is the agentx cache directory; compiled
    /// artifacts go under `compiled/wasmtime-<version>/<engine config hash>/` in it. `None`
    /// disables the artifact cache (every load compiles).
    pub fn new(limits: Limits, cache_home: Option<&Path>) -> Result<Self, ScenarioError> {
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .consume_fuel(true)
            .epoch_interruption(true)
            .cranelift_nan_canonicalization(true)
            .max_wasm_stack(1 << 20);
        let engine = Engine::new(&config).map_err(|e| ScenarioError::Engine(e.to_string()))?;

        let stop = Arc::new(AtomicBool::new(false));
        {
            let engine = engine.clone();
            let stop = stop.clone();
            std::thread::Builder::new()
                .name("agentx-epoch".into())
                .spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::thread::sleep(EPOCH_TICK);
                        engine.increment_epoch();
                    }
                })
                .map_err(|e| ScenarioError::Engine(format!("cannot start epoch thread: {e}")))?;
        }

        let compiled_dir = cache_home.map(|home| {
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            engine.precompile_compatibility_hash().hash(&mut hasher);
            agentx_record::fsio::LazyRoot::new(
                home.join("compiled")
                    .join(format!("wasmtime-{WASMTIME_VERSION}"))
                    .join(format!("{:016x}", hasher.finish())),
            )
        });
        Ok(ScenarioEngine {
            engine,
            limits,
            compiled_dir,
            _ticker: Arc::new(EpochTicker { stop }),
        })
    }

    /// Load a scenario component from a file, checking `pin` (a sha256 hex digest) when given.
    pub fn load(&self, path: &Path, pin: Option<&str>) -> Result<Scenario, ScenarioError> {
        let bytes = std::fs::read(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        self.load_bytes(path, &bytes, pin)
    }

    /// Load a scenario from bytes already read (`origin` names them in messages).
    pub fn load_bytes(
        &self,
        origin: &Path,
        bytes: &[u8],
        pin: Option<&str>,
    ) -> Result<Scenario, ScenarioError> {
        let hash = sha256_hex(bytes);
        if let Some(pin) = pin {
            let expected = pin.trim_start_matches("sha256:").to_ascii_lowercase();
            if expected != hash {
                return Err(ScenarioError::DigestMismatch {
                    path: origin.to_path_buf(),
                    expected,
                    actual: hash,
                });
            }
        }
        check_magic(origin, bytes)?;
        let component = self.compile(origin, &hash, bytes)?;

        let component_type = component.component_type();
        if let Some((import, _)) = component_type.imports(&self.engine).next() {
            return Err(ScenarioError::Import {
                hash,
                import: import.to_string(),
            });
        }
        let exports: Vec<String> = component_type
            .exports(&self.engine)
            .map(|(name, _)| name.to_string())
            .collect();
        let world = if exports.iter().any(|e| e == POLICY_EXPORT) {
            World::V0_1
        } else if exports.iter().any(|e| e == POLICY_EXPORT_V2) {
            World::V0_2
        } else if exports.iter().any(|e| e == POLICY_EXPORT_V3) {
            World::V0_3
        } else {
            let prefix = "agentx:scenario/policy@";
            if let Some(found) = exports.iter().find(|e| e.starts_with(prefix)) {
                return Err(ScenarioError::Incompatible {
                    hash,
                    found: format!("{WIT_PACKAGE}@{}", &found[prefix.len()..]),
                    expected: format!(
                        "{WIT_PACKAGE}@{WIT_VERSION}, @{WIT_VERSION_V2} or @{WIT_VERSION_V3}"
                    ),
                });
            }
            return Err(ScenarioError::NotAScenario {
                hash,
                exports,
                expected: format!("{POLICY_EXPORT}, {POLICY_EXPORT_V2} or {POLICY_EXPORT_V3}"),
            });
        };

        let linker: Linker<StoreState> = Linker::new(&self.engine);
        let incompatible = |error: wasmtime::Error| ScenarioError::Incompatible {
            hash: hash.clone(),
            found: format!("an incompatible {} ({})", world.as_str(), chain(&error)),
            expected: world.as_str().to_string(),
        };
        let instance_pre = linker.instantiate_pre(&component).map_err(incompatible)?;
        let pre = match world {
            World::V0_1 => Pre::V1(bindings::ScenarioPre::new(instance_pre).map_err(incompatible)?),
            World::V0_2 => {
                Pre::V2(world2::bindings::ScenarioPre::new(instance_pre).map_err(incompatible)?)
            }
            World::V0_3 => {
                Pre::V3(world3::bindings::ScenarioPre::new(instance_pre).map_err(incompatible)?)
            }
        };
        Ok(Scenario {
            inner: Arc::new(Loaded {
                engine: self.clone(),
                hash,
                size: bytes.len(),
                path: origin.to_path_buf(),
                world,
                pre,
            }),
        })
    }

    #[allow(unsafe_code)] // Loading a compiled component skips wasmtime's validation (SAFETY below).
    fn compile(&self, origin: &Path, hash: &str, bytes: &[u8]) -> Result<Component, ScenarioError> {
        let cached = self
            .compiled_dir
            .as_ref()
            .map(|dir| (dir, format!("{hash}.cwasm")));
        if let Some(file) = cached
            .as_ref()
            .map(|(dir, name)| dir.path().join(name))
            .filter(|f| f.is_file())
        {
            // SAFETY: the file was written by `Component::serialize` of this wasmtime version and
            // engine configuration (both are part of its path), atomically renamed into place, and
            // is keyed by the sha256 of the source bytes; wasmtime checks its header and version and
            // rejects anything else, in which case the component is compiled again below.
            match unsafe { Component::deserialize_file(&self.engine, &file) } {
                Ok(component) => return Ok(component),
                Err(error) => tracing::warn!(
                    "compiled scenario cache entry {} is unusable ({error}); recompiling",
                    file.display()
                ),
            }
        }
        let component =
            Component::new(&self.engine, bytes).map_err(|error| ScenarioError::Compile {
                path: origin.to_path_buf(),
                hash: hash.to_string(),
                message: chain(&error),
            })?;
        if let Some((dir, name)) = cached {
            if let Err(error) = component
                .serialize()
                .map_err(|e| std::io::Error::other(e.to_string()))
                .and_then(|data| dir.get()?.write_atomic(&name, &data))
            {
                tracing::warn!(
                    "cannot cache compiled scenario at {}: {error}",
                    dir.path().join(&name).display()
                );
            }
        }
        Ok(component)
    }
}

fn check_magic(origin: &Path, bytes: &[u8]) -> Result<(), ScenarioError> {
    if bytes.len() < 8 || &bytes[..4] != b"\0asm" {
        return Err(ScenarioError::NotWasm {
            path: origin.to_path_buf(),
        });
    }
    // Core modules carry version 1 layer 0; components a different version with layer 1.
    if bytes[4..8] == [1, 0, 0, 0] {
        return Err(ScenarioError::CoreModule {
            path: origin.to_path_buf(),
        });
    }
    Ok(())
}

/// The lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// An error and its causes on one line.
fn chain(error: &wasmtime::Error) -> String {
    format!("{error:#}")
}

struct Loaded {
    engine: ScenarioEngine,
    hash: String,
    size: usize,
    path: PathBuf,
    world: World,
    pre: Pre,
}

/// A compiled, validated scenario component. Cheap to clone and shareable across threads; each
/// user makes its own [`ScenarioInstance`].
#[derive(Clone)]
pub struct Scenario {
    inner: Arc<Loaded>,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("hash", &self.inner.hash)
            .field("path", &self.inner.path)
            .finish()
    }
}

impl Scenario {
    /// The sha256 (lowercase hex) of the component bytes.
    pub fn hash(&self) -> &str {
        &self.inner.hash
    }

    /// Size of the component in bytes.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// Where the component was loaded from.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The world the component implements.
    pub fn world(&self) -> World {
        self.inner.world
    }

    /// A fresh instance in its own sandboxed store.
    pub fn instantiate(&self) -> Result<ScenarioInstance, ScenarioError> {
        let (store, bindings) = self.new_store()?;
        Ok(ScenarioInstance {
            scenario: self.clone(),
            store,
            bindings,
            poisoned: false,
        })
    }

    fn new_store(&self) -> Result<(Store<StoreState>, Bound), ScenarioError> {
        let limits = self.inner.engine.limits;
        let mut store = Store::new(
            &self.inner.engine.engine,
            StoreState {
                limiter: MemoryLimiter {
                    max_memory: limits.memory_bytes,
                    refused: None,
                },
            },
        );
        store.limiter(|s| &mut s.limiter);
        arm(&mut store, limits)?;
        let bound = match &self.inner.pre {
            Pre::V1(pre) => pre.instantiate(&mut store).map(Bound::V1),
            Pre::V2(pre) => pre.instantiate(&mut store).map(Bound::V2),
            Pre::V3(pre) => pre.instantiate(&mut store).map(Bound::V3),
        };
        match bound {
            Ok(bound) => Ok((store, bound)),
            Err(error) => Err(self.call_error("instantiate", &store, error)),
        }
    }

    fn call_error(
        &self,
        export: &'static str,
        store: &Store<StoreState>,
        error: wasmtime::Error,
    ) -> ScenarioError {
        let hash = self.inner.hash.clone();
        let limits = self.inner.engine.limits;
        if let Some(requested) = store.data().limiter.refused {
            return ScenarioError::MemoryLimit {
                hash,
                export,
                limit: limits.memory_bytes,
                requested,
            };
        }
        match error.downcast_ref::<Trap>() {
            Some(Trap::OutOfFuel) => ScenarioError::OutOfFuel {
                hash,
                export,
                fuel: limits.fuel_per_call,
            },
            Some(Trap::Interrupt) => ScenarioError::Deadline {
                hash,
                export,
                deadline_ms: limits.deadline.as_millis() as u64,
            },
            _ => ScenarioError::Trap {
                hash,
                export,
                message: chain(&error),
            },
        }
    }
}

fn arm(store: &mut Store<StoreState>, limits: Limits) -> Result<(), ScenarioError> {
    store
        .set_fuel(limits.fuel_per_call)
        .map_err(|e| ScenarioError::Engine(e.to_string()))?;
    let ticks = (limits.deadline.as_millis() / EPOCH_TICK.as_millis()).max(1) as u64;
    store.set_epoch_deadline(ticks);
    store.epoch_deadline_trap();
    store.data_mut().limiter.refused = None;
    Ok(())
}

struct StoreState {
    limiter: MemoryLimiter,
}

/// Caps linear memory and remembers a refused growth, so the trap that follows is reported as
/// the memory limit it really is.
struct MemoryLimiter {
    max_memory: usize,
    refused: Option<usize>,
}

impl ResourceLimiter for MemoryLimiter {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.max_memory {
            self.refused = Some(desired);
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 100_000)
    }
}

/// One live instance of a scenario. Not shareable across threads; make one per thread.
/// After a trap the instance is replaced by a fresh one before the next call, since a trapped
/// component instance may not be entered again.
pub struct ScenarioInstance {
    scenario: Scenario,
    store: Store<StoreState>,
    bindings: Bound,
    poisoned: bool,
}

/// One call into the guest, on a component of world `$world` (`V1` or `V2`); a component of the
/// other world gets [`ScenarioError::WrongWorld`].
macro_rules! guest_call {
    ($self:ident, $export:literal, $world:ident |$policy:ident, $store:ident| $body:expr) => {{
        $self.prepare()?;
        let $policy = match &$self.bindings {
            Bound::$world(b) => b.agentx_scenario_policy(),
            #[allow(unreachable_patterns)]
            _ => return Err($self.wrong_world($export)),
        };
        let $store = &mut $self.store;
        match $body {
            Ok(answer) => Ok(answer),
            Err(error) => {
                $self.poisoned = true;
                Err($self.scenario.call_error($export, &$self.store, error))
            }
        }
    }};
}

impl ScenarioInstance {
    fn prepare(&mut self) -> Result<(), ScenarioError> {
        if self.poisoned {
            let (store, bindings) = self.scenario.new_store()?;
            self.store = store;
            self.bindings = bindings;
            self.poisoned = false;
        }
        arm(&mut self.store, self.scenario.inner.engine.limits)
    }

    /// Name, version, description, knobs and locks.
    pub fn describe(&mut self) -> Result<Info, ScenarioError> {
        if matches!(self.bindings, Bound::V3(_)) {
            return guest_call!(self, "describe", V3 | p, s | p.call_describe(s))
                .map(world3::info_back);
        }
        if matches!(self.bindings, Bound::V2(_)) {
            return guest_call!(self, "describe", V2 | p, s | p.call_describe(s))
                .map(world2::info_back);
        }
        guest_call!(self, "describe", V1 | p, s | p.call_describe(s))
    }

    /// Apply the scenario's locks to the configuration as given.
    pub fn resolve(
        &mut self,
        given: &[Setting],
        entropy: u64,
    ) -> Result<Result<Resolved, Vec<Violation>>, ScenarioError> {
        if matches!(self.bindings, Bound::V3(_)) {
            let given = world3::settings(given);
            return guest_call!(
                self,
                "resolve",
                V3 | p,
                s | p.call_resolve(s, &given, entropy)
            )
            .map(world3::resolved_back);
        }
        if matches!(self.bindings, Bound::V2(_)) {
            let given = world2::settings(given);
            return guest_call!(
                self,
                "resolve",
                V2 | p,
                s | p.call_resolve(s, &given, entropy)
            )
            .map(world2::resolved_back);
        }
        guest_call!(
            self,
            "resolve",
            V1 | p,
            s | p.call_resolve(s, given, entropy)
        )
    }

    /// The start turn of one trajectory.
    pub fn start_turn(
        &mut self,
        params: StartParams,
        trajectory: &Trajectory,
    ) -> Result<Option<u32>, ScenarioError> {
        let num_turns = trajectory.num_turns;
        let start = guest_call!(
            self,
            "start-turn",
            V1 | p,
            s | p.call_start_turn(s, params, trajectory)
        )?;
        check::start_turn(start, num_turns).map_err(|m| self.contract("start-turn", m))?;
        Ok(start)
    }

    /// Start turns of many trajectories in one call.
    pub fn plan_starts(
        &mut self,
        params: StartParams,
        trajectories: &[Trajectory],
    ) -> Result<Vec<Option<u32>>, ScenarioError> {
        let starts = guest_call!(
            self,
            "plan-starts",
            V1 | p,
            s | p.call_plan_starts(s, params, trajectories)
        )?;
        check::plan_starts(&starts, trajectories).map_err(|m| self.contract("plan-starts", m))?;
        Ok(starts)
    }

    /// A guest answer that [`check`] refused.
    fn contract(&self, export: &'static str, message: String) -> ScenarioError {
        ScenarioError::Contract {
            hash: self.scenario.hash().to_string(),
            export,
            message,
        }
    }

    /// The cache-bust marker of a session.
    pub fn cache_bust(
        &mut self,
        target: Placement,
        session: &SessionId,
    ) -> Result<Marker, ScenarioError> {
        guest_call!(
            self,
            "cache-bust",
            V1 | p,
            s | p.call_cache_bust(s, target, session)
        )
    }

    /// Classify a failed response.
    pub fn classify_error(
        &mut self,
        response: &ErrorResponse,
        phrases: Option<&[String]>,
    ) -> Result<Classification, ScenarioError> {
        if matches!(self.bindings, Bound::V3(_)) {
            let response = world3::error_response(response);
            return guest_call!(
                self,
                "classify-error",
                V3 | p,
                s | p.call_classify_error(s, &response, phrases)
            )
            .map(world3::classification_back);
        }
        if matches!(self.bindings, Bound::V2(_)) {
            let response = world2::error_response(response);
            return guest_call!(
                self,
                "classify-error",
                V2 | p,
                s | p.call_classify_error(s, &response, phrases)
            )
            .map(world2::classification_back);
        }
        guest_call!(
            self,
            "classify-error",
            V1 | p,
            s | p.call_classify_error(s, response, phrases)
        )
    }

    /// The delay before a turn, in seconds.
    pub fn turn_delay(
        &mut self,
        params: DelayParams,
        timing: TurnTiming,
    ) -> Result<f64, ScenarioError> {
        let delay_s = guest_call!(
            self,
            "turn-delay",
            V1 | p,
            s | p.call_turn_delay(s, params, timing)
        )?;
        check::turn_delay(delay_s).map_err(|m| self.contract("turn-delay", m))
    }

    /// Reasons the run is not a valid submission.
    pub fn validity(&mut self, outcome: Outcome) -> Result<Vec<String>, ScenarioError> {
        guest_call!(self, "validity", V1 | p, s | p.call_validity(s, outcome))
    }

    /// The error of a call the component's world does not have.
    fn wrong_world(&self, export: &'static str) -> ScenarioError {
        let has = self.scenario.world();
        let wants = match has {
            World::V0_1 => World::V0_2,
            World::V0_2 | World::V0_3 => World::V0_1,
        };
        ScenarioError::WrongWorld {
            hash: self.scenario.hash().to_string(),
            export,
            has: has.as_str(),
            has_replays: has.replays(),
            wants: wants.as_str(),
        }
    }

    // ---- agentx:scenario@0.2.0 (session trees) ----

    /// The mechanism's parameters for a resolved configuration (session trees).
    pub fn rules(&mut self, resolved: &[Setting]) -> Result<types_v2::ReplayRules, ScenarioError> {
        self.rules_and_decisions(resolved).map(|(rules, _)| rules)
    }

    /// The rules with the decisions of [`Decisions`]: a 0.3.0 component's own, an earlier
    /// world's as [`Decisions::of_world`] says.
    pub fn rules_and_decisions(
        &mut self,
        resolved: &[Setting],
    ) -> Result<(types_v2::ReplayRules, Decisions), ScenarioError> {
        if matches!(self.bindings, Bound::V3(_)) {
            let settings = world3::settings(resolved);
            return guest_call!(self, "rules", V3 | p, s | p.call_rules(s, &settings))
                .map(world3::rules_back);
        }
        let settings = world2::settings(resolved);
        let rules = guest_call!(self, "rules", V2 | p, s | p.call_rules(s, &settings))?;
        Ok((rules, Decisions::of_world(self.scenario.world())))
    }

    /// Where lane `lane` starts in `tree` (0.2.0); `None` when the tree cannot start a lane. The
    /// answer is checked: stream indices in range, next turns within their streams, warm turn
    /// `next - 1`, finite non-negative offsets and leads.
    pub fn start_tree(
        &mut self,
        params: types_v2::TreeParams,
        lane: u32,
        tree: &types_v2::Tree,
    ) -> Result<Option<types_v2::TreeStart>, ScenarioError> {
        let start = if matches!(self.bindings, Bound::V3(_)) {
            let (params, tree3) = (world3::params(params), world3::tree(tree));
            guest_call!(
                self,
                "start-tree",
                V3 | p,
                s | p.call_start_tree(s, params, lane, &tree3)
            )?
            .map(world3::tree_start_back)
        } else {
            guest_call!(
                self,
                "start-tree",
                V2 | p,
                s | p.call_start_tree(s, params, lane, tree)
            )?
        };
        if let Some(chosen) = &start {
            check::tree_start(chosen, tree).map_err(|m| self.contract("start-tree", m))?;
        }
        Ok(start)
    }

    /// The cache-bust marker of a tree (0.2.0).
    pub fn cache_bust_tree(
        &mut self,
        target: Placement,
        tree: &types_v2::TreeId,
    ) -> Result<Marker, ScenarioError> {
        if matches!(self.bindings, Bound::V3(_)) {
            let (target, tree) = (world3::placement(target), world3::tree_id(tree));
            return guest_call!(
                self,
                "cache-bust",
                V3 | p,
                s | p.call_cache_bust(s, target, &tree)
            )
            .map(world3::marker_back);
        }
        let target = world2::placement(target);
        guest_call!(
            self,
            "cache-bust",
            V2 | p,
            s | p.call_cache_bust(s, target, tree)
        )
        .map(world2::marker_back)
    }

    /// The end-to-start delay of a turn, in milliseconds (0.2.0).
    pub fn tree_turn_delay(
        &mut self,
        params: types_v2::DelayParams,
        times: types_v2::TurnTimes,
    ) -> Result<f64, ScenarioError> {
        let delay_ms = if matches!(self.bindings, Bound::V3(_)) {
            let (params, times) = world3::delay(params, times);
            guest_call!(
                self,
                "turn-delay",
                V3 | p,
                s | p.call_turn_delay(s, params, times)
            )?
        } else {
            guest_call!(
                self,
                "turn-delay",
                V2 | p,
                s | p.call_turn_delay(s, params, times)
            )?
        };
        check::tree_turn_delay(delay_ms).map_err(|m| self.contract("turn-delay", m))
    }

    /// Reasons a session-tree run is not a valid submission, given the profiling phase's
    /// coverage (a 0.2.0 component sees the TTFT and ITL shares only).
    pub fn tree_validity(
        &mut self,
        outcome: types::Outcome,
        coverage: TreeCoverage,
    ) -> Result<Vec<String>, ScenarioError> {
        if matches!(self.bindings, Bound::V3(_)) {
            let outcome = world3::outcome(outcome, coverage);
            return guest_call!(self, "validity", V3 | p, s | p.call_validity(s, outcome));
        }
        let outcome = world2::outcome(outcome, coverage);
        guest_call!(self, "validity", V2 | p, s | p.call_validity(s, outcome))
    }
}
