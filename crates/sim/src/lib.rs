//! The built-in OpenAI-compatible simulated inference server (`agentx-host sim`).
//!
//! It serves `POST /v1/chat/completions` (streaming and not), `GET /v1/models`, `GET /health` and
//! `GET /metrics` over real HTTP/1.1 the way vLLM's OpenAI server does: the same SSE chunk
//! sequence, usage with `prompt_tokens_details.cached_tokens`, vLLM's error bodies and
//! context-length wording, and vLLM's Prometheus metric names (or SGLang's, TensorRT-LLM's or
//! ATOM's: [`MetricNames`]). `POST /v1/messages` is Anthropic's Messages API on the same engines
//! (`anthropic`: its body, events, usage and errors), `POST /v1/responses` the OpenAI Responses
//! API (`responses`: its body and events). Behind the port sit one or more data-parallel engines,
//! each with a prefix cache (chained block hashes, LRU in tokens), a `max_num_seqs` queue and a
//! timing model (see [`Timing`]); faults are injected on demand,
//! deterministically by seed. With [`SimConfig::gpu`] each engine has a simulated GPU whose power
//! follows its running requests, served as dcgm-exporter serves it at `GET /dcgm/metrics` (`gpu`),
//! and [`SimHandle::gpu_energy_joules`] gives each GPU's exact energy.
//!
//! Prompt tokens follow the tokenizer-free model of [`agentx_tokens`]: one token per
//! whitespace-separated word of the messages' text. Generated text is one vocabulary word per
//! token, drawn from a seed and the request's identity, so `ignore_eos` yields exactly
//! `max_tokens` tokens and the usage always matches the text.
//!
//! Library use: [`spawn`] starts a server on the current tokio runtime and returns a
//! [`SimHandle`]; [`SimThread`] starts one on a thread and runtime of its own. The replay engine
//! only ever talks to it through its URL.
//!
//! Which engine a request runs on is the [`Router`]'s choice (`router`): any session header (the
//! default), one session header with its parent, round-robin or least loaded.
//!
//! Non-standard response headers expose what the model decided, for tests and diagnostics
//! (their names in `agentx_protocol::headers`): `x-sim-engine`, `x-sim-prompt-tokens`,
//! `x-sim-cached-tokens`, `x-sim-prefill-ms` (modelled prefill compute, excluding queueing),
//! `x-sim-queue-ms`, `x-sim-admit-seq` (the admission order over every engine) and the truth of
//! each miss, `x-sim-miss-cold`, `x-sim-miss-capacity` and `x-sim-miss-routing` (tokens; with the
//! cached tokens they add up to the prompt tokens). Headers are sent once a request is
//! admitted to an engine, so a queued stream receives its headers when it starts running.
//! `x-agentx-sim-request-received-ns` and `x-agentx-sim-response-start-ns` stamp when the request's
//! last body byte arrived (the kernel's receive timestamp, [`rx_stamp`]) and when its first token is due (a one-shot answer: when it is sent), in
//! unix nanoseconds: their difference is the server's own time to first token, which the client
//! records (`server_ttft_ns`) to separate what it added itself. With `headers_at_first_token` a
//! streamed answer's headers wait for its first token, and the second stamp is when it went out.

#![forbid(unsafe_code)]

mod agent_text;
mod anthropic;
mod cache;
mod config;
mod engine;
mod faults;
mod foreground;
mod gpu;
mod metrics;
mod prep;
mod record;
mod reply;
mod request;
mod response;
mod responses;
mod router;
mod rx_stamp;
mod server;
mod stream;
mod thread;

#[cfg(test)]
mod reply_tests;
#[cfg(test)]
mod truth_tests;

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{
    Eviction, Faults, GpuModel, KeepAliveConfig, MetricNames, ModelTiming, Preset, Replies, Router,
    SimConfig, Timing, DEFAULT_ROUTER_HEADER, DEFAULT_ROUTER_PARENT_HEADER, DEFAULT_TOOL_NAME,
    MAX_GPU_WATTS,
};
pub use foreground::serve_foreground;
pub use server::Received;
pub use thread::SimThread;

/// Why the simulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A configuration value is out of range.
    #[error("invalid simulator setting `{field}`: {why}")]
    Config {
        /// The setting.
        field: &'static str,
        /// What is wrong with its value.
        why: String,
    },
    /// The listening socket could not be opened.
    #[error("cannot listen on {addr}: {source}; pick another --port or stop the process using it")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why it could not be opened.
        #[source]
        source: std::io::Error,
    },
    /// The request log (`--record-requests`) could not be created.
    #[error("cannot create the request log {}: {source}; pick a writable path for --record-requests", path.display())]
    RequestLog {
        /// The file.
        path: std::path::PathBuf,
        /// Why it could not be created.
        #[source]
        source: std::io::Error,
    },
    /// `spawn` was called outside a tokio runtime.
    #[error("the simulator must be started from within a tokio runtime")]
    NoRuntime,
    /// [`SimThread`] could not start its thread or runtime.
    #[error("cannot start the simulator thread: {0}")]
    Thread(String),
}

/// A running simulated server. Dropping it asks the server to stop; [`SimHandle::shutdown`]
/// also waits until it has.
pub struct SimHandle {
    addr: SocketAddr,
    shared: Arc<server::Shared>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for SimHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimHandle")
            .field("addr", &self.addr)
            .finish()
    }
}

impl SimHandle {
    /// The bound address (with the real port when 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The configuration the server runs with.
    pub fn config(&self) -> &SimConfig {
        &self.shared.config
    }

    /// The current `/metrics` text, without an HTTP round trip.
    pub fn metrics_text(&self) -> String {
        self.shared.metrics_text()
    }

    /// Chat completion requests received so far.
    pub fn chat_requests(&self) -> u64 {
        self.shared.chat_requests()
    }

    /// Each engine's GPU's energy so far, in joules, exact (its power integrated at every change
    /// of its running requests; [`SimConfig::gpu`]); empty without simulated GPUs.
    pub fn gpu_energy_joules(&self) -> Vec<f64> {
        self.shared.gpu_energy_joules()
    }

    /// Every chat request's headers and connection, in arrival order (with
    /// `SimConfig::record_headers`; empty otherwise).
    pub fn received(&self) -> Vec<server::Received> {
        self.shared.received()
    }

    /// Stop accepting, let in-flight responses finish (for at most two seconds), and wait.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Start a server for `config` on the current tokio runtime, listening on `config.listen`
/// (127.0.0.1 port 0 by default).
pub fn spawn(config: SimConfig) -> Result<SimHandle, SimError> {
    config.validate()?;
    let runtime = tokio::runtime::Handle::try_current().map_err(|_| SimError::NoRuntime)?;
    let addr = config.listen;
    let bind_err = |source| SimError::Bind { addr, source };
    let listener = {
        let _enter = runtime.enter();
        let socket = if addr.is_ipv4() {
            tokio::net::TcpSocket::new_v4()
        } else {
            tokio::net::TcpSocket::new_v6()
        }
        .map_err(bind_err)?;
        socket.set_reuseaddr(true).map_err(bind_err)?;
        socket.bind(addr).map_err(bind_err)?;
        // A deep backlog so a thousand clients connecting at once are not dropped and retried.
        socket.listen(4096).map_err(bind_err)?
    };
    let local = listener.local_addr().map_err(bind_err)?;
    let request_log = match &config.record_requests {
        Some(path) => {
            Some(
                record::RequestLog::create(path).map_err(|source| SimError::RequestLog {
                    path: path.clone(),
                    source,
                })?,
            )
        }
        None => None,
    };
    let shared = Arc::new(server::Shared::new(config, request_log));
    let (stop, stop_rx) = watch::channel(false);
    let task = runtime.spawn(server::serve(listener, shared.clone(), stop_rx));
    Ok(SimHandle {
        addr: local,
        shared,
        stop,
        task: Some(task),
    })
}
