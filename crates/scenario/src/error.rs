//! Typed failures of loading and calling scenario components.

use std::path::PathBuf;

/// What went wrong with a scenario component. Every variant that concerns a loaded component names
/// its sha256, so a failure in a sweep points at the exact scenario bytes.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("cannot read scenario {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error(
        "scenario {path} does not match its pin: expected sha256:{expected}, found sha256:{actual}; \
         the file changed since it was pinned (rebuild it, or pin the new hash if the change is intended)"
    )]
    DigestMismatch {
        path: PathBuf,
        expected: String,
        actual: String,
    },

    #[error("invalid scenario reference `{reference}`: {reason}")]
    BadReference { reference: String, reason: String },

    #[error("scenario {reference} is not in the store at {store}; add it with `agentx-host scenario add FILE`")]
    NotInStore { reference: String, store: PathBuf },

    #[error("scenario reference `{reference}` is ambiguous, it matches: {}; give more of the hash", candidates.join(", "))]
    Ambiguous {
        reference: String,
        candidates: Vec<String>,
    },

    #[error("{path} is not a WebAssembly file (it does not start with the `\\0asm` magic); give the path of a scenario component (*.wasm)")]
    NotWasm { path: PathBuf },

    #[error("{path} is a core WebAssembly module, not a component; build scenarios as components (see guest-scenarios/build.sh)")]
    CoreModule { path: PathBuf },

    #[error("scenario sha256:{hash} ({path}) failed to compile: {message}")]
    Compile {
        path: PathBuf,
        hash: String,
        message: String,
    },

    #[error(
        "scenario sha256:{hash} imports `{import}`; scenarios must be pure (the host links no WASI, \
         clocks, randomness or I/O): remove the import from the component"
    )]
    Import { hash: String, import: String },

    #[error(
        "scenario sha256:{hash} was built for {found}, this host speaks {expected}; \
         rebuild the scenario against the host's wit/ or use a host of the matching version"
    )]
    Incompatible {
        hash: String,
        found: String,
        expected: String,
    },

    #[error(
        "scenario sha256:{hash} is not an agentx scenario: it exports [{}] but not {expected}",
        exports.join(", ")
    )]
    NotAScenario {
        hash: String,
        exports: Vec<String>,
        expected: String,
    },

    #[error(
        "scenario sha256:{hash} implements {has} ({has_replays}), which has no `{export}`: that call \
         belongs to {wants}; use a scenario of that world (agentx-mvp for single-stream sessions, \
         agentx-v1 for session trees)"
    )]
    WrongWorld {
        hash: String,
        export: &'static str,
        has: &'static str,
        has_replays: &'static str,
        wants: &'static str,
    },

    #[error("scenario sha256:{hash} cannot be instantiated: {message}")]
    Instantiate { hash: String, message: String },

    #[error("scenario sha256:{hash} ran out of fuel in `{export}` ({fuel} units): the scenario loops or does too much work per call")]
    OutOfFuel {
        hash: String,
        export: &'static str,
        fuel: u64,
    },

    #[error("scenario sha256:{hash} exceeded its memory limit of {limit} bytes in `{export}` (asked for {requested} bytes)")]
    MemoryLimit {
        hash: String,
        export: &'static str,
        limit: usize,
        requested: usize,
    },

    #[error(
        "scenario sha256:{hash} ran past its wall-clock deadline of {deadline_ms} ms in `{export}`"
    )]
    Deadline {
        hash: String,
        export: &'static str,
        deadline_ms: u64,
    },

    #[error("scenario sha256:{hash} trapped in `{export}`: {message}")]
    Trap {
        hash: String,
        export: &'static str,
        message: String,
    },

    #[error("scenario sha256:{hash} returned an invalid answer from `{export}`: {message}")]
    Contract {
        hash: String,
        export: &'static str,
        message: String,
    },

    #[error("scenario store {path}: {source}")]
    Store {
        path: PathBuf,
        source: std::io::Error,
    },

    #[error("wasm engine: {0}")]
    Engine(String),
}
