//! The captured corpus from the journal: `traces.jsonl` in the weka format (one trace per session,
//! its root stream's requests at the top level and each subagent stream as a `subagent` entry at
//! its first request's time, nested under its parent), `capture_manifest.json` (what was captured,
//! how, the corpus's sha256, the broken exchanges), and with `--keep-text` the text beside it in
//! `capture_text.jsonl`. Block ids are numbered per trace in first-seen order, so equal prefixes
//! share ids as in the public corpora; no text reaches `traces.jsonl`.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

use crate::journal::CapturedRequest;

/// The corpus file's name.
pub const CORPUS_FILE: &str = "traces.jsonl";
/// The manifest's file name.
pub const MANIFEST_FILE: &str = "capture_manifest.json";
/// The kept text's file name (`--keep-text`).
pub const TEXT_FILE: &str = "capture_text.jsonl";
/// The manifest's schema.
pub const SCHEMA: &str = "agentx.capture.v1";

/// What a capture was and holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CaptureManifest {
    /// [`SCHEMA`].
    pub schema: String,
    /// The upstream's scheme, host and port (no path, no credentials).
    pub upstream: String,
    /// Tokens per hash block.
    pub block_size: u32,
    /// What counted and keyed the tokens (`words` or the tokenizer's path).
    pub tokenizer: String,
    /// Whether text was kept (in [`TEXT_FILE`], never in the corpus).
    pub keep_text: bool,
    /// Requests recorded (broken ones included).
    pub requests: usize,
    /// Traces (sessions) in the corpus.
    pub traces: usize,
    /// Streams (a session's root and its subagents).
    pub streams: usize,
    /// Requests in the corpus.
    pub corpus_requests: usize,
    /// How many requests each way of knowing the session identified (`header:<profile>`,
    /// `structure`).
    pub identified_by: BTreeMap<String, usize>,
    /// The exchanges that broke, left out of the corpus.
    pub broken: Vec<BrokenExchange>,
    /// The sha256 of [`CORPUS_FILE`], hex.
    pub corpus_sha256: String,
    /// A torn last journal line (a killed capture) left out.
    pub torn_lines: usize,
}

/// An exchange that did not finish.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BrokenExchange {
    /// The trace it would belong to.
    pub trace: String,
    /// Seconds from the trace's start.
    pub t: f64,
    /// The HTTP status (0: none).
    pub status: u16,
    /// Why.
    pub reason: String,
}

/// What the corpus is built with.
pub struct CorpusOptions<'a> {
    /// Tokens per block.
    pub block_size: u32,
    /// The upstream, as the manifest names it.
    pub upstream: &'a str,
    /// The tokenizer, as the manifest names it.
    pub tokenizer: &'a str,
    /// `--keep-text`.
    pub keep_text: bool,
}

/// One stream of a session, its requests in time order.
struct Stream<'a> {
    name: &'a str,
    parent: Option<&'a str>,
    requests: Vec<&'a CapturedRequest>,
}

/// Writes the corpus, the manifest and (kept) the text of `requests` into `dir`.
pub fn write(
    dir: &Path,
    requests: &[CapturedRequest],
    torn_lines: usize,
    options: &CorpusOptions<'_>,
) -> std::io::Result<CaptureManifest> {
    let mut sessions: Vec<(&str, Vec<&CapturedRequest>)> = Vec::new();
    for request in requests {
        match sessions.iter_mut().find(|(root, _)| *root == request.root) {
            Some((_, members)) => members.push(request),
            None => sessions.push((&request.root, vec![request])),
        }
    }
    let mut corpus = Vec::new();
    let mut text_lines = Vec::new();
    let mut broken = Vec::new();
    let mut streams_total = 0;
    let mut corpus_requests = 0;
    for (index, (_, members)) in sessions.iter().enumerate() {
        let trace_id = format!("capture_{:04}", index + 1);
        let start = members
            .iter()
            .map(|request| request.arrived_s)
            .fold(f64::INFINITY, f64::min);
        for request in members.iter().filter(|request| request.broken.is_some()) {
            broken.push(BrokenExchange {
                trace: trace_id.clone(),
                t: round_ms(request.arrived_s - start),
                status: request.status,
                reason: request.broken.clone().unwrap_or_default(),
            });
        }
        let finished: Vec<&CapturedRequest> = members
            .iter()
            .copied()
            .filter(|request| request.broken.is_none())
            .collect();
        if finished.is_empty() {
            continue;
        }
        let streams = streams_of(&finished);
        streams_total += streams.len();
        corpus_requests += finished.len();
        let mut ids = HashMap::new();
        let trace = trace_json(&trace_id, &streams, start, options.block_size, &mut ids);
        corpus.extend_from_slice(trace.to_string().as_bytes());
        corpus.push(b'\n');
        if options.keep_text {
            for request in &finished {
                if let Some(text) = &request.text {
                    let line = json!({"trace": trace_id, "stream": request.stream,
                        "t": round_ms(request.arrived_s - start), "request": text.request,
                        "reply": text.reply});
                    text_lines.extend_from_slice(line.to_string().as_bytes());
                    text_lines.push(b'\n');
                }
            }
        }
    }
    std::fs::write(dir.join(CORPUS_FILE), &corpus)?;
    if options.keep_text {
        std::fs::write(dir.join(TEXT_FILE), &text_lines)?;
    }
    let mut identified_by = BTreeMap::new();
    for request in requests {
        *identified_by.entry(request.identity.clone()).or_insert(0) += 1;
    }
    let manifest = CaptureManifest {
        schema: SCHEMA.into(),
        upstream: options.upstream.into(),
        block_size: options.block_size,
        tokenizer: options.tokenizer.into(),
        keep_text: options.keep_text,
        requests: requests.len(),
        traces: corpus.iter().filter(|&&byte| byte == b'\n').count(),
        streams: streams_total,
        corpus_requests,
        identified_by,
        broken,
        corpus_sha256: hex::encode(Sha256::digest(&corpus)),
        torn_lines,
    };
    let mut text = serde_json::to_vec_pretty(&manifest)?;
    text.push(b'\n');
    std::fs::write(dir.join(MANIFEST_FILE), text)?;
    Ok(manifest)
}

/// A session's streams: the root's first (the stream named like the session, else the first
/// seen), then the others in order of their first request.
fn streams_of<'a>(requests: &[&'a CapturedRequest]) -> Vec<Stream<'a>> {
    let mut streams: Vec<Stream<'a>> = Vec::new();
    for request in requests {
        match streams.iter_mut().find(|s| s.name == request.stream) {
            Some(stream) => stream.requests.push(request),
            None => streams.push(Stream {
                name: &request.stream,
                parent: request.parent.as_deref(),
                requests: vec![request],
            }),
        }
    }
    for stream in &mut streams {
        stream
            .requests
            .sort_by(|a, b| a.arrived_s.total_cmp(&b.arrived_s));
    }
    if let Some(root) = streams
        .iter()
        .position(|s| s.name == requests[0].root.as_str())
    {
        let root = streams.remove(root);
        streams.insert(0, root);
    }
    streams
}

fn round_ms(seconds: f64) -> f64 {
    (seconds * 1000.0).round() / 1000.0
}

/// A stream's requests (and its children's subagent entries) as weka entries.
fn entries(
    streams: &[Stream<'_>],
    index: usize,
    start: f64,
    block_size: u32,
    ids: &mut HashMap<u64, u64>,
) -> Vec<Value> {
    let stream = &streams[index];
    let mut listed: Vec<(f64, Value)> = Vec::new();
    let mut previous_end: Option<f64> = None;
    for request in &stream.requests {
        // No more blocks than the prompt's counted tokens fill (the server's count may be below
        // the capture's rendering of the prompt).
        let full_blocks = (request.input_tokens / u64::from(block_size.max(1))) as usize;
        let hash_ids: Vec<u64> = request
            .blocks
            .iter()
            .take(full_blocks)
            .map(|block| {
                let next = ids.len() as u64 + 1;
                *ids.entry(*block).or_insert(next)
            })
            .collect();
        let mut entry = json!({
            "t": round_ms(request.arrived_s - start),
            "type": if request.streaming { "s" } else { "n" },
            "model": request.model,
            "in": request.input_tokens,
            "out": request.output_tokens,
            "hash_ids": hash_ids,
            "input_types": request.input_types,
            "output_types": request.output_types,
            "stop": request.stop,
            "api_time": round_ms(request.end_s - request.sent_s),
            "think_time": round_ms(previous_end.map_or(0.0, |end| (request.arrived_s - end).max(0.0))),
        });
        if let (true, Some(first)) = (request.streaming, request.first_token_s) {
            entry["ttft"] = json!(round_ms(first - request.sent_s));
        }
        previous_end = Some(request.end_s);
        listed.push((request.arrived_s, entry));
    }
    for (child_index, child) in streams.iter().enumerate() {
        if child_index == index || child.parent != Some(stream.name) {
            continue;
        }
        let first = child.requests[0];
        let last_end = child
            .requests
            .iter()
            .map(|request| request.end_s)
            .fold(first.arrived_s, f64::max);
        let models: Vec<&str> = distinct(child.requests.iter().map(|r| r.model.as_str()));
        let entry = json!({
            "t": round_ms(first.arrived_s - start),
            "type": "subagent",
            "agent_id": format!("agent_{child_index:03}"),
            "subagent_type": "captured",
            "duration_ms": ((last_end - first.arrived_s) * 1000.0).round(),
            "total_tokens": child.requests.iter().map(|r| r.input_tokens + r.output_tokens).sum::<u64>(),
            "tool_use_count": child.requests.iter().filter(|r| r.stop == "tool_use").count(),
            "status": "completed",
            "models": models,
            "tool_tokens": first.tool_tokens,
            "system_tokens": first.system_tokens,
            "requests": entries(streams, child_index, start, block_size, ids),
        });
        listed.push((first.arrived_s, entry));
    }
    listed.sort_by(|a, b| a.0.total_cmp(&b.0));
    listed.into_iter().map(|(_, entry)| entry).collect()
}

fn distinct<'a>(names: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut seen = Vec::new();
    for name in names {
        if !seen.contains(&name) {
            seen.push(name);
        }
    }
    seen
}

/// A session as one weka trace. Streams whose parent is no stream of the session hang under
/// the root.
fn trace_json(
    trace_id: &str,
    streams: &[Stream<'_>],
    start: f64,
    block_size: u32,
    ids: &mut HashMap<u64, u64>,
) -> Value {
    let names: Vec<&str> = streams.iter().map(|s| s.name).collect();
    let root_name = streams[0].name;
    let adopted: Vec<Stream<'_>> = streams
        .iter()
        .map(|s| Stream {
            name: s.name,
            parent: match s.parent {
                Some(parent) if names.contains(&parent) && parent != s.name => Some(parent),
                _ if s.name == root_name => None,
                _ => Some(root_name),
            },
            requests: s.requests.clone(),
        })
        .collect();
    let first = adopted[0].requests[0];
    let models = distinct(
        adopted
            .iter()
            .flat_map(|s| s.requests.iter().map(|r| r.model.as_str())),
    );
    json!({
        "id": trace_id,
        "models": models,
        "block_size": block_size,
        "hash_id_scope": "local",
        "tool_tokens": first.tool_tokens,
        "system_tokens": first.system_tokens,
        "requests": entries(&adopted, 0, start, block_size, ids),
    })
}
