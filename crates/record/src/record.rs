//! `RequestRecord`, the one fact type of a run, and the sink that streams records to disk.
//!
//! Every request the replay sends (warmup and profiling, succeeded, failed or cancelled) becomes exactly
//! one record. The sink appends each record to `records.jsonl` as one JSON line the moment it is handed
//! over and writes it through to the OS (no user-space buffering across records), so a crash or a kill
//! loses at most the requests still in flight. Everything later (statistics, exports, reports) reads
//! these records; nothing measured lives anywhere else.
//!
//! Times: `*_ns` fields are nanoseconds on the run's one monotonic clock, as offsets from the run's
//! anchor (`Clock`); the anchor's wall-clock time is kept so offsets convert to Unix time for labels.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::ChunkOffsets;

/// The monotonic clock, read through tokio: the system's clock in a run (no extra work), the
/// paused virtual clock in tests that pause tokio's time, so records of a replay under test carry
/// virtual offsets.
#[inline]
fn now() -> Instant {
    tokio::time::Instant::now().into_std()
}

/// The run's clock: one monotonic anchor and the wall-clock time it was taken at.
/// The run's one monotonic clock: an anchor instant and its wall-clock time, so that offsets
/// from it (every record's `*_ns`) convert to Unix time.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    anchor: Instant,
    anchor_unix_ns: u64,
}

impl Clock {
    /// A clock anchored now.
    pub fn start() -> Clock {
        let anchor_unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        Clock {
            anchor: now(),
            anchor_unix_ns,
        }
    }

    /// The clock of a run read back from its files: offsets convert to Unix time from the recorded
    /// anchor; the monotonic anchor is now (only a live run reads it).
    pub fn from_anchor_unix_ns(anchor_unix_ns: u64) -> Clock {
        Clock {
            anchor: now(),
            anchor_unix_ns,
        }
    }

    /// Nanoseconds since the anchor.
    #[inline]
    pub fn now_ns(&self) -> u64 {
        now().saturating_duration_since(self.anchor).as_nanos() as u64
    }

    /// Nanoseconds from the anchor to `instant` (0 for instants before it).
    #[inline]
    pub fn ns_of(&self, instant: Instant) -> u64 {
        instant.saturating_duration_since(self.anchor).as_nanos() as u64
    }

    /// Unix time (ns) of the anchor.
    pub fn anchor_unix_ns(&self) -> u64 {
        self.anchor_unix_ns
    }

    /// Unix time (ns) of an offset.
    pub fn unix_ns(&self, ns: u64) -> u64 {
        self.anchor_unix_ns + ns
    }
}

/// The phase a request belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Before the profiling window (aiperf's warmup phase).
    Warmup,
    /// Inside the profiling window.
    Profiling,
}

impl Phase {
    /// The phase's name in the records and the exports.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Warmup => "warmup",
            Phase::Profiling => "profiling",
        }
    }
}

/// Token usage as the server reported it (the final `usage` chunk).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// The prompt's tokens as the server counted them.
    pub prompt_tokens: Option<u64>,
    /// The reply's tokens as the server counted them.
    pub completion_tokens: Option<u64>,
    /// `prompt_tokens_details.cached_tokens`.
    pub cached_tokens: Option<u64>,
    /// The reasoning tokens among `completion_tokens` (chat's
    /// `completion_tokens_details.reasoning_tokens`, the Responses API's
    /// `output_tokens_details.reasoning_tokens`); absent when the server did not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
}

/// What went wrong with a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordError {
    /// The HTTP status, or 0 when the failure came before (or instead of) one.
    pub code: u16,
    /// A short class: `http_error`, `connect`, `timeout`, `reset`, `malformed_sse`, `stream_error`,
    /// `cancelled`, `context_overflow`.
    #[serde(rename = "type")]
    pub kind: String,
    /// What happened, with the server's message when it sent one.
    pub message: String,
}

/// One request, from the decision to send it to the end of its response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// `X-Request-ID`, unique per request.
    pub request_id: String,
    /// `X-Correlation-ID`, constant within a session.
    pub correlation_id: String,
    /// Sessions started so far in the run when this one started (0-based).
    pub session_num: u64,
    /// The phase the request was sent in.
    pub phase: Phase,
    /// The lane (one of `--concurrency`) that sent it.
    pub lane: u32,
    /// The trace the session replays.
    pub trace_id: String,
    /// The turn of the trace this request is (0-based).
    pub turn: u32,
    /// The turns the trace has.
    pub num_turns: u32,
    /// Sessions of this trace minted before this one in the phase.
    pub recycle_pass: u32,
    /// When the request was due (previous end plus think time, or the phase start).
    pub intended_ns: u64,
    /// When the request bytes were handed to the connection.
    pub send_ns: u64,
    /// Response headers received.
    pub first_byte_ns: Option<u64>,
    /// The first non-empty content (or reasoning) chunk.
    pub first_token_ns: Option<u64>,
    /// Each non-empty content chunk's arrival, as offsets from `send_ns`.
    pub chunk_offsets_ns: ChunkOffsets,
    /// The response ended (last byte read) or the request was given up.
    pub end_ns: u64,
    /// Tokens of the prompt: the server's count, or the client's when server counts are off or absent.
    pub isl: u64,
    /// Tokens of the reply: the server's count, or the client's.
    pub osl: u64,
    /// Where `isl`/`osl` came from: `server` or `client`.
    pub token_source: TokenSource,
    /// What the response's `usage` said (absent counts stay `None`).
    pub usage: Usage,
    /// The recorded output length of the turn (`max_tokens`); 4294967295 (`dataset::NO_OUTPUT_LIMIT`)
    /// for a request sent without a token limit.
    pub max_tokens: u32,
    /// The stop reason as the server wrote it.
    pub finish_reason: Option<String>,
    /// True when the request was cut off by the end of the run (grace expired, threshold, interrupt).
    pub cancelled: bool,
    /// True when the scenario classified the error as a context overflow.
    pub context_overflow: bool,
    /// What went wrong, when something did.
    pub error: Option<RecordError>,
    /// Set when the request was sent a second time (a reused connection failed before any response
    /// byte), with the first attempt's error; absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<String>,
    /// The server's own time from the request's last body byte to the start of its response (its
    /// first token), when the server stamps it in its headers (the built-in simulator does); absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_ttft_ns: Option<u64>,
    /// Where a request of a session tree sits in its tree; absent for single-stream sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tree: Option<TreeInfo>,
    /// What the server said about the request beyond its answer: the worker it ran on, its own
    /// queue, prefill and TTFT, its cache truth (the built-in simulator's `x-sim-*` headers,
    /// Dynamo's `nvext` worker and timing); absent when it said nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerSide>,
    /// The prompt's blocks as sent (its chain, by pointer to the earlier request that first sent
    /// its shared prefix): what the cache model replays; absent in records from before it, and
    /// when the run hashed no chains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_blocks: Option<PromptBlocks>,
    /// What the reply held beside its text: the first non-reasoning output, the reasoning tokens,
    /// the tool calls; absent when the reply had none of them (and in records from before it).
    #[serde(default, skip_serializing_if = "ReplyStats::is_empty")]
    pub reply: ReplyStats,
}

/// The reasoning and tool calls of a reply ([`RequestRecord::reply`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplyStats {
    /// The first non-reasoning output (a content or tool-call delta) arrived, on the run clock;
    /// absent when the reply had none. Equal to [`RequestRecord::first_token_ns`] for a reply
    /// without reasoning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_output_ns: Option<u64>,
    /// The reply's reasoning tokens: the server's usage when it gave them, else the client's
    /// count of the reasoning text; absent when there was no reasoning at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_tokens: Option<u64>,
    /// Tool calls the reply made.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_calls: u32,
    /// Tool calls whose arguments were not valid JSON at the end of the stream.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tool_call_parse_failures: u32,
}

fn is_zero(count: &u32) -> bool {
    *count == 0
}

impl ReplyStats {
    /// Nothing to say (no output, reasoning or tool call).
    pub fn is_empty(&self) -> bool {
        *self == ReplyStats::default()
    }
}

/// A prompt's block chain, kept small: its first `shared` blocks are those of the request `from`
/// (which sent them first; chained hashes make a shared block a shared prefix), the rest are its
/// own. Following `from` gives every block's identity without the hashes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PromptBlocks {
    /// Words per block of the chain (the unit the client counts prompts in).
    pub block_size: u32,
    /// The prompt's full blocks.
    pub blocks: u32,
    /// The prompt's words, the partial last block included (to convert into the server's tokens).
    pub words: u64,
    /// The leading blocks some earlier request sent first.
    pub shared: u32,
    /// The request that first sent block `shared - 1` (absent when `shared` is 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// With the cache-bust marker masked (as if every session wrote the same marker): the leading
    /// blocks some earlier request sent first. Blocks past `shared` and before this are ones only
    /// the marker kept from hitting. Absent when the prompt carries no marker.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared_unmarked: Option<u32>,
}

/// The server's own account of a request (every figure absent when it did not give it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSide {
    /// The worker (engine, data-parallel rank) that ran the request: the simulator's engine
    /// (`"3"`), Dynamo's decode worker and rank (`"7587890/0"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<String>,
    /// The worker that ran the prefill, when it differs in kind (Dynamo's disaggregated prefill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_worker: Option<String>,
    /// Time the request waited before its prefill began (the simulator's queue, Dynamo's
    /// `prefill_wait_time_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_ns: Option<u64>,
    /// Prefill compute (the simulator's modelled prefill, Dynamo's `prefill_time_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_ns: Option<u64>,
    /// The server's time to first token, when it reports one in its body (Dynamo's `ttft_ms`; the
    /// simulator's header stamps are [`RequestRecord::server_ttft_ns`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft_ns: Option<u64>,
    /// The server's whole time for the request (Dynamo's `total_time_ms`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_ns: Option<u64>,
    /// The router's predicted cache hit, 0 to 1 (Dynamo's `kv_hit_rate`: overlap blocks over the
    /// prompt's blocks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_hit: Option<f64>,
    /// The request's place in the order the server admitted requests (the simulator's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admit_seq: Option<u64>,
    /// Why each missed prompt token missed, as the server knows it (the simulator's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truth: Option<MissTruth>,
}

/// The server's split of a request's missed prompt tokens (they add up to the prompt tokens less
/// the cached ones).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MissTruth {
    /// Never cached anywhere (and the partial last block and last token, which no hit covers).
    pub cold: u64,
    /// Cached once and evicted for capacity.
    pub capacity: u64,
    /// Held by another worker at admission: routed elsewhere.
    pub routing: u64,
}

/// The tree fields of a session-tree request (aiperf's `agent_depth`, `parent_correlation_id`,
/// `root_correlation_id`, `source_trace_id`, `source_outer_idx`, `source_inner_idx` and the
/// theoretical prefix-cache stamp).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeInfo {
    /// 0 for the root stream, 1 for a child.
    pub agent_depth: u8,
    /// The root stream's correlation id (a child's parent).
    pub root_correlation_id: String,
    /// The parent stream's correlation id (children only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_correlation_id: Option<String>,
    /// The trace the tree replays (`trace_id` is the stream's conversation id).
    pub source_trace_id: String,
    /// Leading hash blocks the trace had sent before this request, of all its blocks.
    pub prefix_hit_blocks: u32,
    /// All the hash blocks of this request's prompt.
    pub prefix_total_blocks: u32,
    /// Where the request sits in the trace: the top-level request's index, and for a subagent's
    /// request its index within that entry. Records written before these fields existed read as
    /// `None`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_outer_idx: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// For a subagent's request, its index within its top-level entry.
    pub source_inner_idx: Option<u32>,
}

/// Where token counts came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TokenSource {
    /// The server's `usage`.
    Server,
    /// The client's own count (the tokenizer or the word model).
    Client,
}

impl RequestRecord {
    /// The correlation id of the session the request belongs to: its tree's root stream, or its
    /// own stream (a single-stream session is the root of its own tree). The one rule every
    /// per-session view (session goodput, the Gantt, OTLP traces, routing) groups by.
    pub fn session_root(&self) -> &str {
        self.tree
            .as_ref()
            .map_or(&self.correlation_id, |tree| &tree.root_correlation_id)
    }

    /// Time to first output token as aiperf measures it (`time_to_first_output_token`): from the
    /// request's start to the first non-reasoning output (content or a tool-call delta).
    pub fn ttfo_ns(&self) -> Option<u64> {
        self.reply
            .first_output_ns
            .map(|t| t.saturating_sub(self.send_ns))
    }

    /// Time to first token as aiperf measures it (`time_to_first_token`): from the request's start
    /// (`request_start_ns`, before a connection is taken) to the first non-empty chunk, reasoning
    /// included.
    pub fn ttft_ns(&self) -> Option<u64> {
        self.first_token_ns.map(|t| t.saturating_sub(self.send_ns))
    }

    /// Time to first token from when the request was due (`credit_issued_ns`): what a user of an
    /// open schedule waited, send lag included (no coordinated omission). Exported as
    /// `scheduled_time_to_first_token`.
    pub fn scheduled_ttft_ns(&self) -> Option<u64> {
        Some(self.ttft_ns()? + self.send_lag_ns())
    }

    /// The server's own time to first token: its header stamps ([`RequestRecord::server_ttft_ns`],
    /// the built-in simulator's) or the figure its body reported ([`ServerSide::ttft_ns`], Dynamo's).
    pub fn server_ttft(&self) -> Option<u64> {
        self.server_ttft_ns
            .or_else(|| self.server.as_ref()?.ttft_ns)
    }

    /// What the client added to the time to first token: [`RequestRecord::scheduled_ttft_ns`]
    /// (send lag included) less the server's own time to first token, when the server gave it.
    pub fn client_ttft_ns(&self) -> Option<u64> {
        Some(
            self.scheduled_ttft_ns()?
                .saturating_sub(self.server_ttft()?),
        )
    }

    /// End-to-end latency as aiperf measures it (`request_latency`): from the request's start to
    /// its last content chunk.
    pub fn latency_ns(&self) -> Option<u64> {
        self.chunk_offsets_ns.last()
    }

    /// End-to-end latency to the last content chunk from when the request was due (exported as
    /// `scheduled_request_latency`).
    pub fn scheduled_latency_ns(&self) -> Option<u64> {
        Some(self.latency_ns()? + self.send_lag_ns())
    }

    /// Inter-token latency: decode time over `osl - 1` tokens (needs two or more).
    pub fn itl_ns(&self) -> Option<f64> {
        let (ttft, lat) = (self.ttft_ns()?, self.latency_ns()?);
        (self.osl >= 2).then(|| (lat - ttft) as f64 / (self.osl - 1) as f64)
    }

    /// From the first content chunk to the end of the response (aiperf's `full_decode_duration`:
    /// through the explicit end of the request, so the usage chunk and `[DONE]` count).
    pub fn full_decode_ns(&self) -> Option<u64> {
        self.first_token_ns.map(|t| self.end_ns.saturating_sub(t))
    }

    /// Full-response inter-token latency: [`RequestRecord::full_decode_ns`] over `osl - 1` tokens.
    pub fn full_response_itl_ns(&self) -> Option<f64> {
        let decode_ns = self.full_decode_ns()?;
        (self.osl >= 2).then(|| decode_ns as f64 / (self.osl - 1) as f64)
    }

    /// Lag between the intended and the actual send.
    pub fn send_lag_ns(&self) -> u64 {
        self.send_ns.saturating_sub(self.intended_ns)
    }
}

/// Errors of the record sink.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot create {path}: {source}; check that the directory is writable (--output-artifact-dir)")]
    /// The record file could not be created.
    Create {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    #[error("cannot write {path}: {source}")]
    /// A record could not be written.
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

/// The file name of the record stream in the artifact directory.
pub const RECORDS_FILE: &str = "records.jsonl";

/// How much nicer the records writer thread is than the process (a tenth of a busy core's share).
pub const RECORDS_NICE: i32 = 10;

/// Something that sees each record as it is written (the OTLP export, a live `/metrics`): called on
/// the writer thread right after the record's line is written, so it must not block.
pub type RecordWatcher = Box<dyn FnMut(&RequestRecord) + Send>;

/// Streams records to `records.jsonl` from a writer thread, so the async tasks never block on disk.
pub struct RecordSink {
    tx: Option<mpsc::Sender<RequestRecord>>,
    thread: Option<JoinHandle<Result<u64, SinkError>>>,
    path: PathBuf,
}

impl RecordSink {
    /// Creates (truncating) `records.jsonl` in the artifact directory.
    pub fn create(dir: &crate::fsio::Root) -> Result<RecordSink, SinkError> {
        RecordSink::create_watched(dir, Vec::new())
    }

    /// [`RecordSink::create`], with `watchers` shown each record after it is written (in order).
    /// The writer thread runs at nice +[`RECORDS_NICE`]: a runtime thread it shares a core with runs
    /// first.
    pub fn create_watched(
        dir: &crate::fsio::Root,
        mut watchers: Vec<RecordWatcher>,
    ) -> Result<RecordSink, SinkError> {
        let path = dir.join(RECORDS_FILE);
        let file = dir
            .create_file(RECORDS_FILE)
            .map_err(|source| SinkError::Create {
                path: path.clone(),
                source,
            })?;
        let (tx, rx) = mpsc::channel::<RequestRecord>();
        let thread_path = path.clone();
        let thread = std::thread::Builder::new()
            .name("agentx-records".into())
            .spawn(move || {
                // Serializing a burst of records took the client's one core for 5.8 ms at a time
                // at the runtime's priority (`perf sched`), while requests came due.
                // A refusal leaves the writer at the runtime's priority; the records are the same.
                let _refused = crate::priority::lower_current_thread(RECORDS_NICE);
                let mut writer = BufWriter::with_capacity(1 << 16, file);
                let mut written = 0u64;
                let err = |source| SinkError::Write {
                    path: thread_path.clone(),
                    source,
                };
                let mut put = |writer: &mut BufWriter<File>, rec: &RequestRecord| {
                    serde_json::to_writer(&mut *writer, rec).map_err(std::io::Error::from)?;
                    written += 1;
                    writer.write_all(b"\n")?;
                    for watcher in &mut watchers {
                        watcher(rec);
                    }
                    Ok(())
                };
                while let Ok(rec) = rx.recv() {
                    put(&mut writer, &rec).map_err(err)?;
                    // Write through once nothing else is queued: a burst costs one syscall, and a
                    // record never waits in user space for the next one.
                    while let Ok(more) = rx.try_recv() {
                        put(&mut writer, &more).map_err(err)?;
                    }
                    writer.flush().map_err(err)?;
                }
                writer.flush().map_err(err)?;
                writer.get_ref().sync_data().map_err(err)?;
                Ok(written)
            })
            .map_err(|source| SinkError::Create {
                path: path.clone(),
                source,
            })?;
        Ok(RecordSink {
            tx: Some(tx),
            thread: Some(thread),
            path,
        })
    }

    /// A handle for producers.
    pub fn sender(&self) -> RecordSender {
        RecordSender {
            tx: self.tx.clone().expect("sink open"),
        }
    }

    /// The file the records go to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits until every record sent so far is on disk; returns how many were written.
    pub fn close(mut self) -> Result<u64, SinkError> {
        self.tx.take();
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(SinkError::Write {
                path: self.path.clone(),
                source: std::io::Error::other("the record writer thread panicked"),
            }),
            None => Ok(0),
        }
    }
}

impl Drop for RecordSink {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A cloneable producer handle of a [`RecordSink`].
#[derive(Clone)]
pub struct RecordSender {
    tx: mpsc::Sender<RequestRecord>,
}

impl RecordSender {
    /// Hands a record to the writer. Never blocks.
    pub fn send(&self, rec: RequestRecord) {
        // The writer only goes away after every sender is dropped or on a write error, which
        // `close` reports.
        let _ = self.tx.send(rec);
    }
}

/// Reads a `records.jsonl` back (for the exports, reports and tests), naming the line of a bad
/// record. The file is read a line at a time: a long run's records file runs to gigabytes.
pub fn read_records(path: &Path) -> Result<Vec<RequestRecord>, String> {
    let mut records = Vec::new();
    scan_records(path, false, |r| records.push(r))?;
    Ok(records)
}

/// A last line that a kill cut off: no newline and not a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    /// 1-based.
    pub line: usize,
    /// Where the line starts: the length of the file's whole records.
    pub offset: u64,
    /// The length of the torn line in bytes.
    pub bytes: usize,
}

/// Hands each record of `path` to `each`, in file order, reading a line at a time. A bad line is an
/// error naming `file:line`, except, when `torn_tail` allows it, a last line without its newline that
/// does not parse (a kill mid-write): that one is returned instead.
pub fn scan_records(
    path: &Path,
    torn_tail: bool,
    mut each: impl FnMut(RequestRecord),
) -> Result<Option<TornLine>, String> {
    use std::io::BufRead;
    let location = |line: usize| format!("{}:{line}", path.display());
    let file = File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, file);
    let mut buf = String::new();
    let (mut line, mut offset) = (0usize, 0u64);
    loop {
        buf.clear();
        let read = reader
            .read_line(&mut buf)
            .map_err(|e| format!("{}: {e}", location(line + 1)))?;
        if read == 0 {
            return Ok(None);
        }
        line += 1;
        let text = buf.trim_end_matches(['\n', '\r']);
        if !text.trim().is_empty() {
            match serde_json::from_str(text) {
                Ok(r) => each(r),
                Err(_) if torn_tail && !buf.ends_with('\n') => {
                    return Ok(Some(TornLine {
                        line,
                        offset,
                        bytes: read,
                    }))
                }
                Err(e) => return Err(format!("{}: {e}", location(line))),
            }
        }
        offset += read as u64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::rec;

    fn file_of(lines: &[String], tail: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(RECORDS_FILE);
        let mut text = String::new();
        for line in lines {
            text.push_str(line);
            text.push('\n');
        }
        text.push_str(tail);
        std::fs::write(&path, text).unwrap();
        (dir, path)
    }

    #[test]
    fn records_are_read_a_line_at_a_time_and_a_bad_line_is_named() {
        let lines: Vec<String> = (0..3)
            .map(|i| serde_json::to_string(&rec(i * 100, &[10, 20], 5, 2)).unwrap())
            .collect();
        let (_d, path) = file_of(&lines, "");
        let back = read_records(&path).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[2].send_ns, rec(200, &[10, 20], 5, 2).send_ns);

        let mut bad = lines.clone();
        bad.insert(1, "{\"request_id\":".into());
        let (_d, path) = file_of(&bad, "");
        let e = read_records(&path).unwrap_err();
        assert!(e.contains(&format!("{}:2:", path.display())), "{e}");
    }

    #[test]
    fn a_torn_last_line_is_returned_where_it_begins_only_when_allowed() {
        let lines: Vec<String> = (0..2)
            .map(|i| serde_json::to_string(&rec(i * 100, &[10], 5, 1)).unwrap())
            .collect();
        let whole: u64 = lines.iter().map(|l| l.len() as u64 + 1).sum();
        let (_d, path) = file_of(&lines, "{\"request_id\":\"cut");
        let mut n = 0;
        let torn = scan_records(&path, true, |_| n += 1).unwrap().unwrap();
        assert_eq!(n, 2);
        assert_eq!(
            torn,
            TornLine {
                line: 3,
                offset: whole,
                bytes: 18
            }
        );
        let e = scan_records(&path, false, |_| {}).unwrap_err();
        assert!(e.contains(":3:"), "{e}");
        // A bad line that ends with its newline is not torn: the writer finished it.
        let (_d, path) = file_of(&[lines[0].clone(), "{\"x\":".into()], "");
        assert!(scan_records(&path, true, |_| {}).is_err());
    }

    #[test]
    fn watchers_see_every_record_in_the_order_written() {
        let dir = tempfile::tempdir().unwrap();
        let root = crate::fsio::Root::open(dir.path()).unwrap();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = seen.clone();
        let watcher: RecordWatcher = Box::new(move |record: &RequestRecord| {
            kept.lock().unwrap().push(record.request_id.clone());
        });
        let sink = RecordSink::create_watched(&root, vec![watcher]).unwrap();
        let sender = sink.sender();
        for send_ms in [5, 1, 9] {
            sender.send(crate::testkit::rec(send_ms, &[1], 10, 1));
        }
        drop(sender);
        assert_eq!(sink.close().unwrap(), 3);
        assert_eq!(*seen.lock().unwrap(), ["req-5", "req-1", "req-9"]);
        assert_eq!(
            read_records(&dir.path().join(RECORDS_FILE)).unwrap().len(),
            3
        );
    }
}
