//! `dynamo.request.trace.v1` captures (docs/specs/dynamo-traces.md, section 1) read into a [`Graph`] by
//! Dynamo's lowering rules (section 3, `lower_agentic_mooncake_rows`).
//!
//! - Records: one JSON object per line, bare or in a sink envelope `{"timestamp", "event": {...}}`.
//!   `request_end` rows are requests; `tool_end`/`tool_error` rows are tool intervals; `tool_start`
//!   and `request_payload` rows are skipped. A line that is not a JSON object is skipped, as Dynamo
//!   skips it, with a [`WarningKind::DroppedRecord`] warning; so is a tool event without
//!   `agent_context` or whose end precedes its start (Dynamo drops both silently).
//! - A request starts at `request_received_ms` and ends `total_time_ms` later (else at
//!   `event_time_unix_ms`). Its prompt is `replay.input_length` tokens in `replay.trace_block_size`
//!   blocks, whose rolling hashes become corpus-wide ids in first-seen order (requests sorted by
//!   start, end, id).
//! - Sessions (`agent_context.session_id`): no request has one, each request is a session of its own
//!   (Dynamo's standard mode); every request has one, the agentic mode below; a mix is refused.
//! - Edges: within a session each request waits for the one before (by start, end, id). A child
//!   session (`parent_session_id` in the trace) starts after the Claude tool's `source_request_id`
//!   and is joined by its `consumer_request_id` when a `tool_end` names it in
//!   `claude.child_session_id`; else its first request waits for the parent's latest request that
//!   started no later, and the parent's first request that starts once the child's last-finishing
//!   request ended waits for it. A request's gap is its start minus the latest end it waits for.
//!
//! Refused (the spec's section 6), each naming file:line and the field: an unknown `schema` or `event_type`, a
//! `request_end` without `request` or `replay`, a missing `request_received_ms`, `output_tokens` or
//! `event_time_unix_ms`, a hash count other than ceil(input_length / trace_block_size), a zero or
//! mixed block size, a `--block-size` that differs, inconsistent completion hashes, a duplicate
//! `request_id`, an empty `input_length`, a mix of requests with and without `agent_context`,
//! conflicting `parent_session_id`s, bad Claude metadata (unknown or foreign request ids, an
//! unknown `execution_mode`, two tools naming one child), and a trace without requests.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::{check_block_size, invalid, read_lines, Fields, Graph, Node, Session};
use crate::error::DatasetError;
use crate::format::FormatSpec;
use crate::warnings::WarningKind;

const SCHEMA: &str = "dynamo.request.trace.v1";

/// One `request_end` record.
#[derive(Debug, Clone)]
struct Request {
    id: String,
    line: u64,
    /// `agent_context`: session id and parent session id.
    context: Option<(String, Option<String>)>,
    start_ms: i64,
    end_ms: i64,
    block_size: u32,
    input: u32,
    output: u32,
    hashes: Vec<u64>,
    model: String,
    tool_calls: bool,
}

/// `tool.claude`: Claude Code's exact spawn and join.
#[derive(Debug, Clone)]
struct Claude {
    source: String,
    consumer: Option<String>,
    child: Option<String>,
}

/// One terminal tool event with its session.
#[derive(Debug, Clone)]
struct Tool {
    call_id: String,
    session: String,
    line: u64,
    claude: Option<Claude>,
}

/// The records of a capture.
#[derive(Debug, Default)]
struct Records {
    requests: Vec<Request>,
    tools: Vec<Tool>,
}

/// Reads a capture into its request graph.
pub(crate) fn read(path: &Path, spec: &FormatSpec) -> Result<Graph, DatasetError> {
    let mut graph = Graph {
        path: path.to_owned(),
        ..Graph::default()
    };
    let mut records = Records::default();
    read_lines(path, |line, text| {
        parse_line(&mut graph, &mut records, line, text)
    })?;
    let Some(first) = records.requests.first() else {
        return Err(invalid(
            path,
            0,
            "",
            "no request_end records with replay fields found: a Dynamo request trace needs the \
             frontend's request_end rows (DYN_REQUEST_TRACE=1)",
        ));
    };
    graph.block_size = first.block_size;
    check_block_size(
        spec,
        path,
        first.line,
        "request.replay.trace_block_size",
        first.block_size,
    )?;
    check_uniform(path, &records.requests)?;
    lower(&mut graph, records)?;
    Ok(graph)
}

/// One block size and one mode (all requests with `agent_context`, or none) for the whole capture.
fn check_uniform(path: &Path, requests: &[Request]) -> Result<(), DatasetError> {
    let first = &requests[0];
    if let Some(other) = requests.iter().find(|r| r.block_size != first.block_size) {
        return Err(invalid(
            path,
            other.line,
            "request.replay.trace_block_size",
            format!(
                "mixed replay trace_block_size values are not supported: {} here, {} on line {}; \
                 capture every shard with one KV block size",
                other.block_size, first.block_size, first.line
            ),
        ));
    }
    let with = requests.iter().find(|r| r.context.is_some());
    let without = requests.iter().find(|r| r.context.is_none());
    if let (Some(with), Some(without)) = (with, without) {
        return Err(invalid(
            path,
            without.line,
            "agent_context",
            format!(
                "Dynamo request trace cannot mix requests with and without agent_context (line {} has \
                 one, this line none); capture every request with the session headers, or none",
                with.line
            ),
        ));
    }
    Ok(())
}

/// Parses one line into a request or a tool, or skips it.
fn parse_line(
    graph: &mut Graph,
    records: &mut Records,
    line: u64,
    text: &str,
) -> Result<(), DatasetError> {
    let path = graph.path.clone();
    let Ok(Value::Object(outer)) = serde_json::from_str::<Value>(text) else {
        graph.warn(
            WarningKind::DroppedRecord,
            None,
            line,
            "",
            "not a JSON object; skipped, as Dynamo's loader skips it".into(),
        );
        return Ok(());
    };
    let (obj, prefix) = match outer.get("event") {
        Some(Value::Object(event)) if !outer.contains_key("schema") => (event, "event"),
        _ => (&outer, ""),
    };
    let rec = Fields {
        path: &path,
        line,
        obj,
        prefix,
    };
    let schema = rec.req_str(
        "schema",
        &format!("every record says \"schema\":\"{SCHEMA}\""),
    )?;
    if schema != SCHEMA {
        return Err(rec.err(
            "schema",
            format!(
                "unknown variant {schema:?}: this reader reads {SCHEMA:?} records (Dynamo refuses \
                 other schemas too)"
            ),
        ));
    }
    let event_type = rec.req_str("event_type", "request_end, tool_end, tool_error, ...")?;
    let event_time = rec.req_u64(
        "event_time_unix_ms",
        "the time the event was emitted (unix ms), which every record carries",
    )?;
    let context = agent_context(&rec)?;
    match event_type {
        "request_end" => {
            let request = request(&rec, event_time, context)?;
            if request.output == 0 {
                let session = request.context.as_ref().map(|(s, _)| s.clone());
                graph.warn(
                    WarningKind::HarnessSchema,
                    session.as_deref(),
                    line,
                    "request.output_tokens",
                    "`output_tokens` is 0 (a cancelled stream?); sent as 1 (Dynamo's agent-loadgen and \
                     agentx-harness refuse a request whose output length is below 1)"
                        .into(),
                );
            }
            records.requests.push(request);
        }
        "tool_end" | "tool_error" => {
            if let Some(tool) = tool(graph, &rec, event_time, context)? {
                records.tools.push(tool);
            }
        }
        "tool_start" | "request_payload" => {}
        other => {
            return Err(rec.err(
                "event_type",
                format!(
                    "{other:?}: request trace schema only supports request_end/tool_* and \
                     request_payload events"
                ),
            ))
        }
    }
    Ok(())
}

fn agent_context(rec: &Fields<'_>) -> Result<Option<(String, Option<String>)>, DatasetError> {
    let Some(ctx) = rec.opt_obj("agent_context")? else {
        return Ok(None);
    };
    let prefix = rec.field("agent_context");
    let ctx = rec.nested(ctx, &prefix);
    let session = ctx.req_str("session_id", "agent_context names its session")?;
    let parent = ctx.opt_str("parent_session_id")?;
    Ok(Some((session.to_owned(), parent.map(str::to_owned))))
}

/// A `request_end` record's request.
fn request(
    rec: &Fields<'_>,
    event_time: u64,
    context: Option<(String, Option<String>)>,
) -> Result<Request, DatasetError> {
    let Some(obj) = rec.opt_obj("request")? else {
        return Err(rec.err(
            "request",
            "missing request payload: a request_end record carries its `request`",
        ));
    };
    let prefix = rec.field("request");
    let req = rec.nested(obj, &prefix);
    let id = req.req_str("request_id", "every request needs its request_id")?;
    let output = req.req_u64(
        "output_tokens",
        "request trace is missing output_tokens (the output length replay sends)",
    )?;
    let received = req.req_u64(
        "request_received_ms",
        "request trace is missing request_received_ms (the request's arrival, unix ms)",
    )?;
    let total = match req.opt_f64("total_time_ms")? {
        Some(ms) if ms.is_finite() => ms.round().max(0.0) as i64,
        Some(ms) => {
            return Err(req.err(
                "total_time_ms",
                format!("is {ms}, not a finite number of milliseconds"),
            ))
        }
        None => event_time.saturating_sub(received) as i64,
    };
    let (block_size, input, hashes) = replay(&req, output)?;
    let tool_calls = match req.opt_obj("finish_reason_metadata")? {
        Some(meta) => {
            let meta = req.nested(meta, "request.finish_reason_metadata");
            !meta.array("tool_calls")?.is_empty()
                || meta.opt_str("finish_reason")? == Some("tool_calls")
        }
        None => false,
    };
    let count = |name: &str, v: u64| {
        u32::try_from(v).map_err(|_| req.err(name, format!("{v} tokens is above 2^32-1")))
    };
    let start_ms = i64::try_from(received)
        .map_err(|_| req.err("request_received_ms", "is beyond any clock"))?;
    Ok(Request {
        id: id.to_owned(),
        line: rec.line,
        context,
        start_ms,
        end_ms: start_ms.saturating_add(total),
        block_size,
        input: count("replay.input_length", input)?,
        output: count("output_tokens", output)?,
        hashes,
        model: req.opt_str("model")?.unwrap_or_default().to_owned(),
        tool_calls,
    })
}

/// `request.replay`: block size, input length and the input hashes, checked as Dynamo's
/// `request_entry` checks them.
fn replay(req: &Fields<'_>, output: u64) -> Result<(u32, u64, Vec<u64>), DatasetError> {
    let Some(obj) = req.opt_obj("replay")? else {
        return Err(req.err(
            "replay",
            "missing replay metrics: the request_end record has no `replay` object (captured \
             without a KV block size?); Dynamo cannot replay it either",
        ));
    };
    let replay = req.nested(obj, "request.replay");
    let block = replay.req_u64("trace_block_size", "tokens per replay hash block")?;
    let block = match u32::try_from(block) {
        Ok(b) if b > 0 => b,
        _ => {
            return Err(replay.err(
                "trace_block_size",
                format!("is {block}: give the KV block size, at least 1 and below 2^32"),
            ))
        }
    };
    let input = replay.req_u64("input_length", "the prompt's token count")?;
    if input == 0 {
        return Err(replay.err(
            "input_length",
            "is 0: a request with an empty prompt cannot be replayed; drop the record",
        ));
    }
    let hashes = u64_list(&replay, "input_sequence_hashes")?;
    let want = input.div_ceil(u64::from(block));
    if hashes.len() as u64 != want {
        return Err(replay.err(
            "input_sequence_hashes",
            format!(
                "input_length {input} with trace_block_size {block} requires exactly {want} replay \
                 hashes, got {}",
                hashes.len()
            ),
        ));
    }
    if replay.obj.get("completion_sequence_hashes").is_some() {
        let completion = u64_list(&replay, "completion_sequence_hashes")?;
        let want = (input + output).div_ceil(u64::from(block));
        let whole = (input / u64::from(block)) as usize;
        if completion.len() as u64 != want || completion[..whole] != hashes[..whole] {
            return Err(replay.err(
                "completion_sequence_hashes",
                format!(
                    "must hold ceil((input_length + output_tokens) / trace_block_size) = {want} hashes \
                     whose first {whole} equal input_sequence_hashes; got {} that do not",
                    completion.len()
                ),
            ));
        }
    }
    Ok((block, input, hashes))
}

fn u64_list(fields: &Fields<'_>, name: &str) -> Result<Vec<u64>, DatasetError> {
    if fields.obj.get(name).is_none_or(Value::is_null) {
        return Err(fields.err(name, "missing: the rolling block hashes of the prompt"));
    }
    fields
        .array(name)?
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_u64().ok_or_else(|| {
                fields.err(
                    &format!("{name}[{i}]"),
                    format!("{v} is not a block hash (an integer in 0..=2^64-1)"),
                )
            })
        })
        .collect()
}

/// A terminal tool event; `None` when Dynamo drops it (no session, end before start), warned.
fn tool(
    graph: &mut Graph,
    rec: &Fields<'_>,
    event_time: u64,
    context: Option<(String, Option<String>)>,
) -> Result<Option<Tool>, DatasetError> {
    let Some(obj) = rec.opt_obj("tool")? else {
        return Err(rec.err(
            "tool",
            "missing tool payload: a tool_end or tool_error record carries its `tool`",
        ));
    };
    let prefix = rec.field("tool");
    let fields = rec.nested(obj, &prefix);
    let call_id = fields
        .req_str("tool_call_id", "the tool call's id")?
        .to_owned();
    fields.req_str("tool_class", "the tool's name or class")?;
    let end = fields.opt_u64("ended_at_unix_ms")?.unwrap_or(event_time) as f64;
    let duration = fields.opt_f64("duration_ms")?;
    let start = match (fields.opt_u64("started_at_unix_ms")?, duration) {
        (Some(start), _) => start as f64,
        (None, Some(d)) => end - d,
        (None, None) => end,
    };
    let claude = match fields.opt_obj("claude")? {
        Some(obj) => Some(claude(&fields.nested(obj, "tool.claude"))?),
        None => None,
    };
    let Some((session, _)) = context else {
        graph.warn(
            WarningKind::DroppedRecord,
            None,
            rec.line,
            "agent_context",
            format!(
                "tool {call_id:?} has no agent_context: Dynamo drops it silently, so its wait and \
                 any Claude spawn or join it names are not replayed; send the tool event with the \
                 session's id"
            ),
        );
        return Ok(None);
    };
    if end < start {
        graph.warn(
            WarningKind::DroppedRecord,
            Some(&session),
            rec.line,
            "tool.ended_at_unix_ms",
            format!(
                "tool {call_id:?} ends at {end} ms, before it starts at {start} ms: Dynamo drops it \
                 silently, so its wait and any Claude spawn or join it names are not replayed"
            ),
        );
        return Ok(None);
    }
    Ok(Some(Tool {
        call_id,
        session,
        line: rec.line,
        claude,
    }))
}

fn claude(fields: &Fields<'_>) -> Result<Claude, DatasetError> {
    let mode = fields.req_str("execution_mode", "blocking or background")?;
    // A background tool without a consumer has no join edge; the mode itself changes no edge.
    match mode {
        "blocking" | "background" => {}
        other => {
            return Err(fields.err(
                "execution_mode",
                format!("unsupported execution_mode {other:?}: it is blocking or background"),
            ))
        }
    };
    Ok(Claude {
        source: fields
            .req_str(
                "source_request_id",
                "the request whose tool call spawned the work",
            )?
            .to_owned(),
        consumer: fields.opt_str("consumer_request_id")?.map(str::to_owned),
        child: fields.opt_str("child_session_id")?.map(str::to_owned),
    })
}

/// Sorts the requests, numbers their hashes, groups sessions and adds Dynamo's edges and gaps.
fn lower(graph: &mut Graph, records: Records) -> Result<(), DatasetError> {
    let Records {
        mut requests,
        tools,
    } = records;
    requests.sort_by(|a, b| (a.start_ms, a.end_ms, &a.id).cmp(&(b.start_ms, b.end_ms, &b.id)));
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    for (i, r) in requests.iter().enumerate() {
        if let Some(first) = by_id.insert(&r.id, i) {
            return Err(invalid(
                &graph.path,
                r.line,
                "request.request_id",
                format!(
                    "duplicate request_id {:?} (also on line {}): request ids are unique across all \
                     shards; drop the repeated record",
                    r.id, requests[first].line
                ),
            ));
        }
    }
    let mut mapper: HashMap<u64, u32> = HashMap::new();
    for r in &requests {
        let session = session_of(graph, r)?;
        let mut hash_ids = Vec::with_capacity(r.hashes.len());
        for h in &r.hashes {
            let next = u32::try_from(mapper.len()).map_err(|_| {
                invalid(
                    &graph.path,
                    r.line,
                    "request.replay.input_sequence_hashes",
                    "more than 2^32 distinct blocks in the corpus; split it",
                )
            })?;
            hash_ids.push(*mapper.entry(*h).or_insert(next));
        }
        let node = graph.nodes.len();
        graph.sessions[session].nodes.push(node);
        graph.nodes.push(Node {
            id: r.id.clone(),
            session,
            line: r.line,
            start_ms: r.start_ms as f64,
            end_ms: r.end_ms as f64,
            timed: true,
            input: r.input,
            output: r.output,
            hash_ids,
            model: r.model.clone(),
            after_tool: false,
            wait_for: Vec::new(),
            gap_ms: None,
        });
    }
    add_sequence_edges(graph, &requests);
    add_child_edges(graph, &tools)?;
    graph.topological_order()?;
    let ends: Vec<f64> = graph.nodes.iter().map(|n| n.end_ms).collect();
    for node in &mut graph.nodes {
        if let Some(dep_end) = node.wait_for.iter().map(|&d| ends[d]).reduce(f64::max) {
            node.gap_ms = Some((node.start_ms - dep_end).max(0.0));
        }
    }
    Ok(())
}

/// The session of request `r` (added on first sight), checking its parent agrees.
fn session_of(graph: &mut Graph, r: &Request) -> Result<usize, DatasetError> {
    let (id, parent) = match &r.context {
        Some((id, parent)) => (id.clone(), parent.clone()),
        None => (r.id.clone(), None),
    };
    if let Some(i) = graph.sessions.iter().position(|s| s.id == id) {
        let session = &mut graph.sessions[i];
        match (&session.declared_parent, parent) {
            (Some(a), Some(b)) if *a != b => {
                return Err(invalid(
                    &graph.path,
                    r.line,
                    "agent_context.parent_session_id",
                    format!(
                        "session {id:?} has conflicting parent_session_id values: {a:?} and {b:?}; \
                         a session has one parent"
                    ),
                ))
            }
            (None, Some(b)) => session.declared_parent = Some(b),
            _ => {}
        }
        return Ok(i);
    }
    graph.sessions.push(Session {
        id,
        declared_parent: parent,
        nodes: Vec::new(),
    });
    Ok(graph.sessions.len() - 1)
}

/// Each request waits for the one before in its session; a request after a tool-calling one takes a
/// tool result.
fn add_sequence_edges(graph: &mut Graph, requests: &[Request]) {
    for s in 0..graph.sessions.len() {
        let nodes = graph.sessions[s].nodes.clone();
        for pair in nodes.windows(2) {
            graph.nodes[pair[1]].wait_for.push(pair[0]);
            graph.nodes[pair[1]].after_tool = requests[pair[0]].tool_calls;
        }
    }
}

/// The spawn and join edges of every child session whose parent is in the trace (Claude metadata,
/// else inferred from times), after checking every Claude tool's request ids.
fn add_child_edges(graph: &mut Graph, tools: &[Tool]) -> Result<(), DatasetError> {
    let by_id: HashMap<String, usize> = graph
        .nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.clone(), i))
        .collect();
    let session_index: HashMap<String, usize> = graph
        .sessions
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.clone(), i))
        .collect();
    let mut explicit: HashMap<&str, &Tool> = HashMap::new();
    for tool in tools {
        let Some(claude) = &tool.claude else { continue };
        for (field, id) in [
            ("tool.claude.source_request_id", Some(&claude.source)),
            ("tool.claude.consumer_request_id", claude.consumer.as_ref()),
        ] {
            let Some(id) = id else { continue };
            let Some(&node) = by_id.get(id) else {
                return Err(invalid(
                    &graph.path,
                    tool.line,
                    field,
                    format!(
                        "tool {:?} references unknown request_id {id:?}: no request_end record has \
                         it; fix the id or add the request's record",
                        tool.call_id
                    ),
                ));
            };
            if graph.sessions[graph.nodes[node].session].id != tool.session {
                return Err(invalid(
                    &graph.path,
                    tool.line,
                    field,
                    format!(
                        "tool {:?} request {id:?} belongs to a different session than the tool's \
                         ({:?}); name a request of the tool's own session",
                        tool.call_id, tool.session
                    ),
                ));
            }
        }
        let Some(child) = claude.child.as_deref() else {
            continue;
        };
        if !session_index.contains_key(child) {
            continue; // An external background tool wait, as Dynamo replays it.
        }
        if let Some(first) = explicit.insert(child, tool) {
            return Err(invalid(
                &graph.path,
                tool.line,
                "tool.claude.child_session_id",
                format!(
                    "multiple tool events reference child session {child:?} (also line {}); one tool \
                     spawns a session",
                    first.line
                ),
            ));
        }
    }
    for child in 0..graph.sessions.len() {
        let Some(parent) = graph.sessions[child]
            .declared_parent
            .as_ref()
            .and_then(|p| session_index.get(p))
            .copied()
        else {
            continue;
        };
        let tool = explicit.get(graph.sessions[child].id.as_str()).copied();
        child_edges(graph, child, parent, tool, &by_id)?;
    }
    Ok(())
}

/// The spawn and join edges of session `child` under `parent`.
fn child_edges(
    graph: &mut Graph,
    child: usize,
    parent: usize,
    tool: Option<&Tool>,
    by_id: &HashMap<String, usize>,
) -> Result<(), DatasetError> {
    let kids = graph.sessions[child].nodes.clone();
    let parents = graph.sessions[parent].nodes.clone();
    let first = kids[0];
    let last = *kids
        .iter()
        .max_by(|&&a, &&b| {
            let (x, y) = (&graph.nodes[a], &graph.nodes[b]);
            (x.end_ms, x.start_ms, &x.id)
                .partial_cmp(&(y.end_ms, y.start_ms, &y.id))
                .unwrap_or(std::cmp::Ordering::Equal)
        })
        .expect("a session has a request");
    let (spawn, join) = match tool.and_then(|t| t.claude.as_ref().map(|c| (t, c))) {
        Some((tool, claude)) => {
            let in_parent = |field: &str, id: &str| -> Result<usize, DatasetError> {
                let node = by_id[id];
                if parents.contains(&node) {
                    return Ok(node);
                }
                Err(invalid(
                    &graph.path,
                    tool.line,
                    field,
                    format!(
                        "tool {:?} {field} {id:?} is not in parent session {:?} of child session {:?}",
                        tool.call_id, graph.sessions[parent].id, graph.sessions[child].id
                    ),
                ))
            };
            let spawn = in_parent("tool.claude.source_request_id", &claude.source)?;
            let join = match &claude.consumer {
                Some(id) => Some(in_parent("tool.claude.consumer_request_id", id)?),
                None => None,
            };
            (Some(spawn), join)
        }
        None => {
            let (child_start, child_end) = (graph.nodes[first].start_ms, graph.nodes[last].end_ms);
            let spawn = parents
                .iter()
                .copied()
                .filter(|&p| graph.nodes[p].start_ms <= child_start)
                .max_by(|&a, &b| graph.nodes[a].start_ms.total_cmp(&graph.nodes[b].start_ms));
            let join = parents
                .iter()
                .copied()
                .find(|&p| graph.nodes[p].start_ms >= child_end);
            (spawn, join)
        }
    };
    if let Some(spawn) = spawn {
        if !graph.nodes[first].wait_for.contains(&spawn) {
            graph.nodes[first].wait_for.push(spawn);
        }
    }
    if let Some(join) = join {
        if !graph.nodes[join].wait_for.contains(&last) {
            graph.nodes[join].wait_for.push(last);
        }
    }
    Ok(())
}
