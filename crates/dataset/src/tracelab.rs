//! The TraceLab format: one LLM round per JSONL line (the uw-syfi agentic-coding corpus), read as
//! aiperf 0.13's `tracelab` loader reads it, into weka-shaped [`ParsedTrace`]s with subagent entries,
//! which the session-tree builder replays.
//!
//! - Rows group into sessions by `session_id`, in the order of their first row; a row that is not an
//!   object or has no `session_id` is skipped, as aiperf skips it.
//! - A round's submission time is its latest input event (`user_message`, `tool_result`) or, without
//!   one, its earliest output event (`text`, `reasoning`, `tool_call`); its `api_time` the span to the
//!   last output event. Rounds without a dated event are dropped; the rest are ordered by submission
//!   time, then `round_index`.
//! - Block ids (`synthesize_hash_ids`): TraceLab has no content hashes; each round keeps the first
//!   `prefix_tokens / block_size` ids of the round before and mints fresh ids for the rest of its
//!   `input_tokens_total / block_size` whole blocks. One id space spans a session and the subagents
//!   nested in it (hash ids stay per trace).
//! - Subagent links (`join`): a session whose whole span lies inside a spawning tool call's window
//!   (Claude `Agent`/`Task` calls of at least `AIPERF_DATASET_TRACELAB_MIN_SPAWN_MS`; codex sessions'
//!   `[first spawn_agent, last wait_agent result]` unless `AIPERF_DATASET_TRACELAB_CODEX_SUBAGENT_JOIN`
//!   is false) of another session of the same `user` and `project` is that call's subagent; the
//!   tightest window wins. A child nests one level deep; a grandchild, and a child no parent request
//!   precedes, stay traces of their own. `AIPERF_DATASET_TRACELAB_SUBAGENT_JOIN=false` keeps every
//!   session flat.
//! - Each root session becomes one weka trace (ids made safe: runs of characters outside
//!   `[A-Za-z0-9._-]` become `_`, at most 150 characters), built as weka JSON and parsed by
//!   [`super::weka::parse_trace`], so every later stage reads it as it reads a weka trace.
//!
//! Errors name file:line and the field: a line that is not JSON, a timestamp that is not ISO-8601, a
//! token count that is not a number, two sessions whose safe ids collide. A gzip-compressed file is
//! refused with the command that decompresses it.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::ops::ControlFlow;
use std::path::Path;

use serde_json::{json, Map, Value};

use super::error::{DatasetError, Location};
use super::format::{FormatSpec, TracelabJoin};
use super::weka::{parse_trace, ParsedTrace};

pub(crate) mod join;

const INPUT_EVENTS: [&str; 2] = ["user_message", "tool_result"];
const OUTPUT_EVENTS: [&str; 3] = ["text", "reasoning", "tool_call"];
/// A child request earlier than its spawn marker by more than this is a broken join (seconds).
const TIMESTAMP_EPSILON: f64 = 1e-6;

/// One tool call of a round.
#[derive(Debug, Clone)]
pub(crate) struct Tool {
    pub(crate) name: String,
    pub(crate) emitted_at: Option<f64>,
    pub(crate) result_at: Option<f64>,
    pub(crate) wall_latency_ms: Option<f64>,
}

/// One validated row (an LLM round).
#[derive(Debug, Clone)]
pub(crate) struct Round {
    pub(crate) round_index: i64,
    pub(crate) input_total: u64,
    pub(crate) prefix: u64,
    /// `output_tokens` plus `reasoning_output_tokens`.
    pub(crate) output: u64,
    pub(crate) model: String,
    pub(crate) tool_result_first: bool,
    pub(crate) emitted_tool_call: bool,
    /// Submission time and api time (module docs); `None` without a dated event.
    pub(crate) submitted: Option<f64>,
    pub(crate) api_time: Option<f64>,
    /// Every dated event and tool time of the round.
    pub(crate) stamps: Vec<f64>,
    pub(crate) tools: Vec<Tool>,
}

/// One session: its rounds in file order and what the join compares.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) id: String,
    pub(crate) line: u64,
    /// `(user, project)` of the first row, as JSON text.
    pub(crate) ident: String,
    pub(crate) codex: bool,
    pub(crate) rounds: Vec<Round>,
}

impl Session {
    /// The wall-clock extent of the session over every event and tool time.
    pub(crate) fn span(&self) -> Option<(f64, f64)> {
        let all = self.rounds.iter().flat_map(|r| r.stamps.iter().copied());
        all.fold(None, |acc, x| match acc {
            None => Some((x, x)),
            Some((a, b)) => Some((a.min(x), b.max(x))),
        })
    }
}

/// ISO-8601 to POSIX seconds; a time without an offset is UTC.
fn parse_ts(text: &str) -> Option<f64> {
    if let Ok(parsed) = chrono::DateTime::parse_from_rfc3339(text.trim()) {
        return Some(parsed.timestamp_micros() as f64 / 1e6);
    }
    for f in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%d %H:%M:%S%.f"] {
        if let Ok(parsed) = chrono::NaiveDateTime::parse_from_str(text.trim(), f) {
            return Some(parsed.and_utc().timestamp_micros() as f64 / 1e6);
        }
    }
    None
}

/// Field readers of one row, errors located at file:line and field.
struct Row<'a> {
    path: &'a Path,
    line: u64,
    obj: &'a Map<String, Value>,
}

impl Row<'_> {
    fn err(&self, field: String, message: String) -> DatasetError {
        DatasetError::Invalid {
            location: Location {
                file: self.path.to_owned(),
                line: self.line,
                field: Some(field),
                ..Location::default()
            },
            message,
        }
    }

    /// A token count as aiperf reads it (`int(value or 0)`): a number (floored), a numeric string, or
    /// 0 when absent or null; negative reads as 0.
    fn count(&self, field: &str) -> Result<u64, DatasetError> {
        let value = match self.obj.get(field) {
            None | Some(Value::Null | Value::Bool(false)) => return Ok(0),
            Some(Value::Number(n)) => n.as_f64(),
            Some(Value::String(s)) => s.trim().parse::<i64>().ok().map(|v| v as f64),
            Some(_) => None,
        };
        match value {
            Some(value) if value.is_finite() => Ok(value.max(0.0).trunc() as u64),
            _ => Err(self.err(
                field.to_owned(),
                format!(
                    "must be a token count (a whole number), got {}",
                    self.obj[field]
                ),
            )),
        }
    }

    fn time(&self, field: String, value: Option<&Value>) -> Result<Option<f64>, DatasetError> {
        match value {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if s.is_empty() => Ok(None),
            Some(Value::String(s)) => parse_ts(s).map(Some).ok_or_else(|| {
                self.err(
                    field,
                    format!("{s:?} is not an ISO-8601 time (e.g. 2025-06-01T12:00:00.123Z)"),
                )
            }),
            Some(value) => Err(self.err(
                field,
                format!("must be an ISO-8601 time string, got {value}"),
            )),
        }
    }

    fn round(&self) -> Result<Round, DatasetError> {
        let (mut ins, mut outs, mut stamps) = (Vec::new(), Vec::new(), Vec::new());
        let mut emitted_tool_call = false;
        let events = self.obj.get("timing_events").and_then(Value::as_array);
        for (i, e) in events.into_iter().flatten().enumerate() {
            let kind = e.get("event_type").and_then(Value::as_str).unwrap_or("");
            emitted_tool_call |= kind == "tool_call";
            let Some(stamp) =
                self.time(format!("timing_events[{i}].timestamp"), e.get("timestamp"))?
            else {
                continue;
            };
            stamps.push(stamp);
            if INPUT_EVENTS.contains(&kind) {
                ins.push(stamp);
            } else if OUTPUT_EVENTS.contains(&kind) {
                outs.push(stamp);
            }
        }
        let mut tools = Vec::new();
        let list = self.obj.get("tools").and_then(Value::as_array);
        for (i, stamp) in list.into_iter().flatten().enumerate() {
            let emitted_at =
                self.time(format!("tools[{i}].emitted_at"), stamp.get("emitted_at"))?;
            let result_at = self.time(format!("tools[{i}].result_at"), stamp.get("result_at"))?;
            stamps.extend(emitted_at.into_iter().chain(result_at));
            tools.push(Tool {
                name: stamp
                    .get("tool_name")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                emitted_at,
                result_at,
                wall_latency_ms: stamp.get("tool_wall_latency_ms").and_then(Value::as_f64),
            });
        }
        let max = |v: &[f64]| {
            v.iter()
                .copied()
                .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.max(x))))
        };
        let min = |v: &[f64]| {
            v.iter()
                .copied()
                .fold(None, |a: Option<f64>, x| Some(a.map_or(x, |a| a.min(x))))
        };
        let submitted = max(&ins).or_else(|| min(&outs));
        let api_time = match (submitted, max(&outs)) {
            (Some(s), Some(o)) => Some((o - s).max(0.0)),
            _ => None,
        };
        let reasoning = self.count("reasoning_output_tokens")?;
        Ok(Round {
            round_index: self
                .obj
                .get("round_index")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            input_total: self.count("input_tokens_total")?,
            prefix: self.count("prefix_tokens")?,
            output: self.count("output_tokens")? + reasoning,
            model: match self.obj.get("model").and_then(Value::as_str) {
                Some(m) if !m.is_empty() => m.to_owned(),
                _ => "unknown".to_owned(),
            },
            tool_result_first: self
                .obj
                .get("first_input_event_type")
                .and_then(Value::as_str)
                == Some("tool_result"),
            emitted_tool_call,
            submitted,
            api_time,
            stamps,
            tools,
        })
    }
}

/// Reads the rows of `path` into sessions, in the order of their first row.
fn read_sessions(path: &Path) -> Result<Vec<Session>, DatasetError> {
    let file = File::open(path).map_err(|e| DatasetError::io("open", path, e))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    if reader
        .fill_buf()
        .map_err(|e| DatasetError::io("read", path, e))?
        .starts_with(&[0x1f, 0x8b])
    {
        return Err(super::format::gzipped(path));
    }
    let mut sessions: Vec<Session> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    let (mut text, mut line) = (String::new(), 0u64);
    loop {
        text.clear();
        let bytes_read = reader
            .read_line(&mut text)
            .map_err(|e| DatasetError::io("read", path, e))?;
        if bytes_read == 0 {
            break;
        }
        line += 1;
        if text.trim().is_empty() {
            continue;
        }
        let value: Value =
            serde_json::from_str(text.trim()).map_err(|e| DatasetError::Invalid {
                location: Location {
                    file: path.to_owned(),
                    line,
                    ..Location::default()
                },
                message: format!("not JSON ({e}); a TraceLab corpus is one JSON object per line"),
            })?;
        let Value::Object(obj) = value else { continue };
        let sid = match obj.get("session_id").and_then(Value::as_str) {
            Some(s) if !s.is_empty() => s.to_owned(),
            _ => continue,
        };
        let round = Row {
            path,
            line,
            obj: &obj,
        }
        .round()?;
        let slot = *by_id.entry(sid.clone()).or_insert_with(|| {
            let ident = json!([obj.get("user"), obj.get("project")]).to_string();
            sessions.push(Session {
                id: sid,
                line,
                ident,
                codex: obj.get("provider").and_then(Value::as_str) == Some("codex"),
                rounds: Vec::new(),
            });
            sessions.len() - 1
        });
        sessions[slot].rounds.push(round);
    }
    Ok(sessions)
}

/// The rounds of a session in replay order: dated ones only, by submission time then `round_index`
/// (file order among ties).
fn order_rounds(rounds: &[Round]) -> Vec<&Round> {
    let mut timed: Vec<&Round> = rounds.iter().filter(|r| r.submitted.is_some()).collect();
    timed.sort_by(|a, b| {
        let (a_at, b_at) = (a.submitted.unwrap_or(0.0), b.submitted.unwrap_or(0.0));
        a_at.total_cmp(&b_at)
            .then(a.round_index.cmp(&b.round_index))
    });
    timed
}

/// Allocates block ids: consecutive from 1, one space per trace (a session and its subagents).
#[derive(Debug)]
pub(crate) struct Minter(u64);

impl Default for Minter {
    fn default() -> Self {
        Minter(1)
    }
}

impl Minter {
    fn take(&mut self, count: u64) -> impl Iterator<Item = u64> {
        let start = self.0;
        self.0 += count;
        start..start + count
    }
}

/// The block ids of each round (module docs): `input / bs` whole blocks, of which the first
/// `min(prefix / bs, previous round's blocks)` are the previous round's.
pub(crate) fn synthesize_hash_ids(
    rounds: &[&Round],
    block_size: u32,
    minter: &mut Minter,
) -> Vec<Vec<u64>> {
    let block = u64::from(block_size);
    let mut prev: Vec<u64> = Vec::new();
    let mut out = Vec::with_capacity(rounds.len());
    for r in rounds {
        let total = r.input_total;
        let prefix = r.prefix.min(total);
        let blocks = total / block;
        let reuse = (prefix / block).min(prev.len() as u64).min(blocks);
        let mut ids: Vec<u64> = prev[..reuse as usize].to_vec();
        ids.extend(minter.take(blocks - reuse));
        out.push(ids.clone());
        prev = ids;
    }
    out
}

fn round6(value: f64) -> f64 {
    (value * 1e6).round() / 1e6
}

/// Rounds as weka `type: "n"` requests with times relative to `origin`; also the models they name.
fn requests(
    rounds: &[&Round],
    chains: Vec<Vec<u64>>,
    origin: f64,
    models: &mut Vec<String>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(rounds.len());
    let mut prev_end: Option<f64> = None;
    for (r, ids) in rounds.iter().zip(chains) {
        if !models.contains(&r.model) {
            models.push(r.model.clone());
        }
        let start = r.submitted.unwrap_or(origin) - origin;
        let mut req = json!({
            "t": round6(start),
            "type": "n",
            "model": r.model,
            "in": r.input_total.max(1),
            "out": r.output.max(1),
            "hash_ids": ids,
            "input_types": [if r.tool_result_first { "tool_result" } else { "text" }],
            "output_types": ["text"],
            "stop": if r.emitted_tool_call { "tool_use" } else { "end_turn" },
        });
        if let Some(api) = r.api_time {
            req["api_time"] = json!(round6(api));
        }
        if let Some(prev) = prev_end {
            req["think_time"] = json!(round6((start - prev).max(0.0)));
        }
        out.push(req);
        prev_end = Some(start + r.api_time.unwrap_or(0.0));
    }
    out
}

/// Runs of characters outside `[A-Za-z0-9._-]` become `_`; at most 150 characters.
pub(crate) fn safe_trace_id(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    let mut in_run = false;
    for c in id.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            out.push(c);
            in_run = false;
        } else if !in_run {
            out.push('_');
            in_run = true;
        }
    }
    out.truncate(150);
    out
}

/// One matched child as a `type: "subagent"` entry on the parent's clock; `None` without dated rounds.
fn subagent_entry(
    spawn: &join::Spawn,
    child: &Session,
    block_size: u32,
    minter: &mut Minter,
    origin: f64,
) -> Result<Option<Value>, String> {
    let timed = order_rounds(&child.rounds);
    if timed.is_empty() {
        return Ok(None);
    }
    let chains = synthesize_hash_ids(&timed, block_size, minter);
    let mut models = Vec::new();
    let mut inner = requests(&timed, chains, origin, &mut models);
    let entry_t = spawn.start - origin;
    for r in &mut inner {
        let start = r["t"].as_f64().unwrap_or(entry_t);
        if start + TIMESTAMP_EPSILON < entry_t {
            return Err(format!(
                "subagent session {:?} (line {}) has a request at {start} s, before its spawn marker at \
                 {entry_t} s; set AIPERF_DATASET_TRACELAB_SUBAGENT_JOIN=false to keep sessions flat",
                child.id, child.line
            ));
        }
        if start < entry_t {
            r["t"] = json!(entry_t);
        }
    }
    if let Some(first) = inner.first_mut().and_then(Value::as_object_mut) {
        first.remove("think_time");
    }
    let end = timed
        .iter()
        .map(|r| r.submitted.unwrap_or(0.0) + r.api_time.unwrap_or(0.0))
        .fold(f64::MIN, f64::max);
    let total: u64 = inner
        .iter()
        .map(|r| r["in"].as_u64().unwrap_or(0) + r["out"].as_u64().unwrap_or(0))
        .sum();
    Ok(Some(json!({
        "t": round6(entry_t),
        "type": "subagent",
        "agent_id": safe_trace_id(&child.id),
        "subagent_type": models.first().cloned().unwrap_or_else(|| "unknown".into()),
        "duration_ms": spawn.duration_ms,
        "total_tokens": total,
        "tool_use_count": child.rounds.iter().map(|r| r.tools.len()).sum::<usize>(),
        "status": if end <= spawn.end { "completed" } else { "incomplete" },
        "requests": inner,
        "models": models,
        "tool_tokens": 0,
        "system_tokens": 0,
    })))
}

/// One session and its matched children as a weka trace object; `None` without dated rounds. The ids
/// of the children placed under a parent request go into `placed`.
fn build_trace(
    session: &Session,
    block_size: u32,
    children: &[(join::Spawn, &Session)],
    placed: &mut HashSet<String>,
) -> Result<Option<Value>, String> {
    let timed = order_rounds(&session.rounds);
    let Some(first) = timed.first() else {
        return Ok(None);
    };
    let origin = first.submitted.unwrap_or(0.0);
    let mut minter = Minter::default();
    let chains = synthesize_hash_ids(&timed, block_size, &mut minter);
    let mut models = Vec::new();
    let reqs = requests(&timed, chains, origin, &mut models);
    let times: Vec<f64> = reqs
        .iter()
        .map(|r| r["t"].as_f64().unwrap_or(0.0))
        .collect();
    let mut pending: Vec<Vec<Value>> = vec![Vec::new(); reqs.len()];
    let mut n_subagents = 0u32;
    for (spawn, child) in children {
        let Some(entry) = subagent_entry(spawn, child, block_size, &mut minter, origin)? else {
            continue;
        };
        let entry_start = entry["t"].as_f64().unwrap_or(0.0);
        let Some(anchor) = times.iter().rposition(|&rt| rt <= entry_start) else {
            continue;
        };
        placed.insert(child.id.clone());
        for model in entry["models"].as_array().into_iter().flatten() {
            if let Some(model) = model
                .as_str()
                .filter(|model| !models.iter().any(|x| x == model))
            {
                models.push(model.to_owned());
            }
        }
        pending[anchor].push(entry);
        n_subagents += 1;
    }
    let (rounds, input, output) = (
        reqs.len(),
        reqs.iter()
            .map(|r| r["in"].as_u64().unwrap_or(0))
            .sum::<u64>(),
        reqs.iter()
            .map(|r| r["out"].as_u64().unwrap_or(0))
            .sum::<u64>(),
    );
    let mut merged = Vec::with_capacity(reqs.len() + n_subagents as usize);
    for (req, mut entries) in reqs.into_iter().zip(pending) {
        merged.push(req);
        entries.sort_by(|a, b| {
            let (a_start, b_start) = (
                a["t"].as_f64().unwrap_or(0.0),
                b["t"].as_f64().unwrap_or(0.0),
            );
            a_start.total_cmp(&b_start)
        });
        merged.extend(entries);
    }
    Ok(Some(json!({
        "id": safe_trace_id(&session.id),
        "models": models,
        "block_size": block_size,
        "hash_id_scope": "local",
        "tool_tokens": 0,
        "system_tokens": 0,
        "requests": merged,
        "totals": {"rounds": rounds, "subagents": n_subagents, "input_tokens": input,
                   "output_tokens": output, "source": "tracelab"},
    })))
}

/// Reads a TraceLab file and hands each trace (root sessions in order, then children that failed to
/// nest) to `on_trace` until it answers `Break`.
pub(crate) fn scan(
    path: &Path,
    spec: &FormatSpec,
    mut on_trace: impl FnMut(ParsedTrace) -> Result<ControlFlow<()>, DatasetError>,
) -> Result<usize, DatasetError> {
    let block_size = spec.block_size();
    let knobs = spec.tracelab.unwrap_or_default();
    let sessions = read_sessions(path)?;
    if sessions.is_empty() {
        return Err(DatasetError::Empty {
            path: path.to_owned(),
        });
    }
    let children = children_of(&sessions, &knobs);
    let nested: HashSet<&str> = children
        .values()
        .flatten()
        .map(|(_, c)| c.id.as_str())
        .collect();
    let mut placed: HashSet<String> = HashSet::new();
    let mut order: Vec<(&Session, &[(join::Spawn, &Session)])> = Vec::new();
    let mut blobs: Vec<(Value, &Session)> = Vec::new();
    let convert = |s: &Session, kids: &[(join::Spawn, &Session)], placed: &mut HashSet<String>| {
        build_trace(s, block_size, kids, placed).map_err(|message| DatasetError::Invalid {
            location: Location {
                file: path.to_owned(),
                line: s.line,
                trace: Some(s.id.clone()),
                ..Location::default()
            },
            message,
        })
    };
    for s in sessions.iter().filter(|s| !nested.contains(s.id.as_str())) {
        let kids = children.get(s.id.as_str()).map_or(&[][..], Vec::as_slice);
        order.push((s, kids));
    }
    for (s, kids) in order {
        if let Some(built) = convert(s, kids, &mut placed)? {
            blobs.push((built, s));
        }
    }
    let fallback: Vec<&Session> = sessions
        .iter()
        .filter(|s| nested.contains(s.id.as_str()) && !placed.contains(&s.id))
        .collect();
    if !fallback.is_empty() {
        tracing::warn!(
            sessions = fallback.len(),
            "tracelab: subagent sessions that failed to nest are kept as traces of their own"
        );
    }
    for s in fallback {
        if let Some(built) = convert(s, &[], &mut placed)? {
            blobs.push((built, s));
        }
    }
    deliver(path, blobs, &mut on_trace)
}

/// The children each parent session nests (parents by id, children in session order).
fn children_of<'s>(
    sessions: &'s [Session],
    knobs: &TracelabJoin,
) -> HashMap<&'s str, Vec<(join::Spawn, &'s Session)>> {
    let mut out: HashMap<&str, Vec<(join::Spawn, &Session)>> = HashMap::new();
    if !knobs.subagents {
        return out;
    }
    let (links, stats) = join::build_join_index(sessions, knobs);
    tracing::info!("tracelab subagent join: {}", stats.summary());
    let by_id: HashMap<&str, &Session> = sessions.iter().map(|s| (s.id.as_str(), s)).collect();
    for (child, spawn) in links {
        let (Some(parent), Some(child_session)) =
            (by_id.get(spawn.parent.as_str()), by_id.get(child))
        else {
            continue;
        };
        out.entry(parent.id.as_str())
            .or_default()
            .push((spawn, child_session));
    }
    out
}

/// Parses each built trace as weka and hands it on, refusing two sessions whose safe ids collide.
fn deliver(
    path: &Path,
    blobs: Vec<(Value, &Session)>,
    on_trace: &mut impl FnMut(ParsedTrace) -> Result<ControlFlow<()>, DatasetError>,
) -> Result<usize, DatasetError> {
    let mut seen: HashMap<String, &Session> = HashMap::new();
    let mut delivered = 0usize;
    for (blob, s) in blobs {
        let trace_id = blob["id"].as_str().unwrap_or_default().to_owned();
        let base = Location {
            file: path.to_owned(),
            line: s.line,
            ..Location::default()
        };
        if let Some(first) = seen.get(&trace_id) {
            return Err(DatasetError::Invalid {
                location: Location {
                    trace: Some(s.id.clone()),
                    field: Some("session_id".into()),
                    ..base
                },
                message: format!(
                    "its trace id {trace_id:?} collides with session {:?} (line {}): ids keep only \
                     [A-Za-z0-9._-]; make the session ids differ in those characters",
                    first.id, first.line
                ),
            });
        }
        seen.insert(trace_id, s);
        delivered += 1;
        if on_trace(parse_trace(&blob.to_string(), &base)?)?.is_break() {
            break;
        }
    }
    Ok(delivered)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(input: u64, prefix: u64, at: f64, tools: Vec<Tool>) -> Round {
        Round {
            round_index: 0,
            input_total: input,
            prefix,
            output: 1,
            model: "m".into(),
            tool_result_first: false,
            emitted_tool_call: false,
            submitted: Some(at),
            api_time: Some(1.0),
            stamps: vec![at, at + 1.0],
            tools,
        }
    }

    fn session(id: &str, ident: &str, rounds: Vec<Round>) -> Session {
        Session {
            id: id.into(),
            line: 1,
            ident: ident.into(),
            codex: false,
            rounds,
        }
    }

    fn agent(at: f64, until: f64) -> Tool {
        Tool {
            name: "Agent".into(),
            emitted_at: Some(at),
            result_at: Some(until),
            wall_latency_ms: Some((until - at) * 1000.0),
        }
    }

    #[test]
    fn block_ids_keep_the_recorded_prefix_and_mint_the_rest() {
        let rs = [
            round(130, 0, 0.0, vec![]),
            round(200, 130, 1.0, vec![]),
            round(100, 40, 2.0, vec![]),
        ];
        let refs: Vec<&Round> = rs.iter().collect();
        let ids = synthesize_hash_ids(&refs, 64, &mut Minter::default());
        assert_eq!(ids, [vec![1, 2], vec![1, 2, 3], vec![4]]);
    }

    #[test]
    fn the_tightest_window_wins_and_grandchildren_stay_flat() {
        let sessions = [
            session("p", "u", vec![round(64, 0, 0.0, vec![agent(10.0, 100.0)])]),
            session("q", "u", vec![round(64, 0, 15.0, vec![agent(20.0, 60.0)])]),
            session("c", "u", vec![round(64, 0, 30.0, vec![])]),
            session("other-user", "v", vec![round(64, 0, 30.0, vec![])]),
        ];
        let (links, stats) = join::build_join_index(&sessions, &TracelabJoin::default());
        // q lies in p's window and c in both: c goes to q (tighter); q is p's child, so c, a
        // grandchild, is left out.
        assert_eq!(links.len(), 1);
        assert_eq!((links[0].0, links[0].1.parent.as_str()), ("q", "p"));
        assert_eq!(
            (stats.matched, stats.ambiguous, stats.grandchildren),
            (2, 1, 1)
        );
        // Windows shorter than the minimum spawn are not windows.
        let strict = TracelabJoin {
            min_spawn_ms: 100_000,
            ..TracelabJoin::default()
        };
        assert!(join::build_join_index(&sessions, &strict).0.is_empty());
    }

    #[test]
    fn unsafe_ids_and_iso_times() {
        assert_eq!(safe_trace_id("claude:ab/c d"), "claude_ab_c_d");
        assert_eq!(safe_trace_id(&"x".repeat(200)).len(), 150);
        assert_eq!(parse_ts("1970-01-01T00:00:01.5Z"), Some(1.5));
        assert_eq!(parse_ts("1970-01-01T00:00:02"), Some(2.0));
        assert_eq!(parse_ts("1970-01-01T01:00:00+01:00"), Some(0.0));
        assert_eq!(parse_ts("yesterday"), None);
    }
}
