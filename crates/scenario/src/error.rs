//! Typed failures of loading and calling scenario components.

use std::path::PathBuf;

/// What went wrong with a scenario component. Every variant that concerns a loaded component names
/// its sha256, so a failure in a sweep points at the exact scenario bytes.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// The component file could not be read.
    #[error("cannot read scenario {path}: {source}")]
    Read {
        /// The file given.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },

    /// The file's sha256 is not the one it was pinned to.
    #[error(
        "scenario {path} does not match its pin: expected sha256:{expected}, found sha256:{actual}; \
         the file changed since it was pinned (rebuild it, or pin the new hash if the change is intended)"
    )]
    DigestMismatch {
        /// The file given.
        path: PathBuf,
        /// The pinned sha256 (lowercase hex).
        expected: String,
        /// The sha256 of the bytes read (lowercase hex).
        actual: String,
    },

    /// A scenario reference that is none of a path, a pinned path, a hash or a name.
    #[error("invalid scenario reference `{reference}`: {reason}")]
    BadReference {
        /// The reference as given.
        reference: String,
        /// What is wrong with it.
        reason: String,
    },

    /// A name or hash reference the store holds no entry for.
    #[error("scenario {reference} is not in the store at {store}; add it with `agentx-host scenario add FILE`")]
    NotInStore {
        /// The reference: a name, or `sha256:<prefix>`.
        reference: String,
        /// The store directory searched.
        store: PathBuf,
    },

    /// A hash prefix that matches more than one store entry.
    #[error("scenario reference `{reference}` is ambiguous, it matches: {}; give more of the hash", candidates.join(", "))]
    Ambiguous {
        /// The reference, `sha256:<prefix>`.
        reference: String,
        /// Each matching entry as `sha256:<hash> (<name>)`.
        candidates: Vec<String>,
    },

    /// A file that does not start with the WebAssembly magic.
    #[error("{path} is not a WebAssembly file (it does not start with the `\\0asm` magic); give the path of a scenario component (*.wasm)")]
    NotWasm {
        /// The file given.
        path: PathBuf,
    },

    /// A core WebAssembly module where a component is required.
    #[error("{path} is a core WebAssembly module, not a component; build scenarios as components (see guest-scenarios/build.sh)")]
    CoreModule {
        /// The file given.
        path: PathBuf,
    },

    /// wasmtime could not compile the component.
    #[error("scenario sha256:{hash} ({path}) failed to compile: {message}")]
    Compile {
        /// Where the component came from (a file, or `builtin:<name>`).
        path: PathBuf,
        /// The component's sha256 (lowercase hex).
        hash: String,
        /// wasmtime's error and its causes, on one line.
        message: String,
    },

    /// A component that imports something (the host links no import at all).
    #[error(
        "scenario sha256:{hash} imports `{import}`; scenarios must be pure (the host links no WASI, \
         clocks, randomness or I/O): remove the import from the component"
    )]
    Import {
        /// The component's sha256 (lowercase hex).
        hash: String,
        /// The name of the component's first import.
        import: String,
    },

    /// A component of a WIT version this host does not speak, or whose exports do not match the
    /// world it names.
    #[error(
        "scenario sha256:{hash} was built for {found}, this host speaks {expected}; \
         rebuild the scenario against the host's wit/ or use a host of the matching version"
    )]
    Incompatible {
        /// The component's sha256 (lowercase hex).
        hash: String,
        /// What the component implements, or why its exports do not fit.
        found: String,
        /// The world or versions this host speaks.
        expected: String,
    },

    /// A component that exports no `agentx:scenario/policy` interface.
    #[error(
        "scenario sha256:{hash} is not an agentx scenario: it exports [{}] but not {expected}",
        exports.join(", ")
    )]
    NotAScenario {
        /// The component's sha256 (lowercase hex).
        hash: String,
        /// The names of the component's exports.
        exports: Vec<String>,
        /// The interfaces looked for.
        expected: String,
    },

    /// A call the component's world does not have.
    #[error(
        "scenario sha256:{hash} implements {has} ({has_replays}), which has no `{export}`: that call \
         belongs to {wants}; use a scenario of that world (agentx-mvp for single-stream sessions, \
         agentx-v1 for session trees)"
    )]
    WrongWorld {
        /// The component's sha256 (lowercase hex).
        hash: String,
        /// The WIT export called (`describe`, `start-tree` ...).
        export: &'static str,
        /// The component's world, `agentx:scenario@<version>`.
        has: &'static str,
        /// What that world replays, in words.
        has_replays: &'static str,
        /// A world that has the call.
        wants: &'static str,
    },

    /// The component could not be instantiated.
    #[error("scenario sha256:{hash} cannot be instantiated: {message}")]
    Instantiate {
        /// The component's sha256 (lowercase hex).
        hash: String,
        /// wasmtime's error and its causes, on one line.
        message: String,
    },

    /// A call that used up its fuel budget.
    #[error("scenario sha256:{hash} ran out of fuel in `{export}` ({fuel} units): the scenario loops or does too much work per call")]
    OutOfFuel {
        /// The component's sha256 (lowercase hex).
        hash: String,
        /// The WIT export called (`describe`, `start-tree` ...).
        export: &'static str,
        /// The fuel granted to each call.
        fuel: u64,
    },

    /// A call that tried to grow linear memory past the limit.
    #[error("scenario sha256:{hash} exceeded its memory limit of {limit} bytes in `{export}` (asked for {requested} bytes)")]
    MemoryLimit {
        /// The component's sha256 (lowercase hex).
        hash: String,
        /// The WIT export called (`describe`, `start-tree` ...).
        export: &'static str,
        /// The largest linear memory allowed, in bytes.
        limit: usize,
        /// The size the growth asked for, in bytes.
        requested: usize,
    },

    /// A call that ran past its wall-clock deadline.
    #[error(
        "scenario sha256:{hash} ran past its wall-clock deadline of {deadline_ms} ms in `{export}`"
    )]
    Deadline {
        /// The component's sha256 (lowercase hex).
        hash: String,
        /// The WIT export called (`describe`, `start-tree` ...).
        export: &'static str,
        /// The wall-clock deadline of each call, in milliseconds.
        deadline_ms: u64,
    },

    /// A call that trapped.
    #[error("scenario sha256:{hash} trapped in `{export}`: {message}")]
    Trap {
        /// The component's sha256 (lowercase hex).
        hash: String,
        /// The WIT export called (`describe`, `start-tree` ...).
        export: &'static str,
        /// wasmtime's error and its causes, on one line.
        message: String,
    },

    /// A call whose answer the host's checks (`check`) refused.
    #[error("scenario sha256:{hash} returned an invalid answer from `{export}`: {message}")]
    Contract {
        /// The component's sha256 (lowercase hex).
        hash: String,
        /// The WIT export called (`describe`, `start-tree` ...).
        export: &'static str,
        /// What is wrong with the answer.
        message: String,
    },

    /// The scenario store could not be read or written.
    #[error("scenario store {path}: {source}")]
    Store {
        /// The store directory.
        path: PathBuf,
        /// The operating system's error.
        source: std::io::Error,
    },

    /// wasmtime could not be configured, or its epoch thread not started (the message says which).
    #[error("wasm engine: {0}")]
    Engine(String),
}
