//! Dynamo's Agentic Mooncake (docs/specs/dynamo-traces.md, section 4) read into a [`Graph`]: v1 rows (`wait_for`, `delay`,
//! `tool_wait_ms`), or v2 rows after a `{"schema":"dynamo.agentic_mooncake","version":2,...}` header
//! (`dependencies`, `not_before_ms`). The header line tells the versions apart.
//!
//! - A row is a Mooncake row (`input_length`/`input_tokens`, `output_length`/`output_tokens`,
//!   `hash_ids` of `block_size` tokens: v2's header's, else `--block-size`, 512 by default) with a
//!   unique `request_id`; its session is `session_id` (a v1 row without one is a session of its
//!   own); a session's rows are in file order.
//! - No duration is recorded, so a request is placed on the corpus clock as if it took no time: a row
//!   without dependencies starts at `timestamp` (v1) or `not_before_ms` (v2); a v1 row with
//!   `wait_for` at the latest of them plus `delay + tool_wait_ms`; a v2 row at the latest of its
//!   dependencies plus each one's `delay_ms`, and not before `not_before_ms`.
//!
//! Refused, naming file:line and the field: a row that is not a JSON object, a missing or duplicate
//! `request_id`, a v1 row without dependencies or `timestamp`, a negative or non-finite `delay`,
//! `tool_wait_ms` or `delay_ms`, a dependency on the row itself or on an unknown id, a cycle, an
//! unknown `request_kind`, `trigger` or `relation`, a `dispatch` trigger or a `replay_barrier`
//! relation (the session-tree replay starts a request on its predecessors' completion only), v2 rows
//! without the header or a header after rows, a header version other than 2 or a `hash_id_scope`
//! other than `local`, a `--block-size` other than the header's, and literal prompts.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::{check_block_size, invalid, read_lines, Fields, Graph, Node, Session};
use crate::error::DatasetError;
use crate::format::FormatSpec;
use crate::warnings::WarningKind;

/// The v2 header's `schema`.
const SCHEMA: &str = "dynamo.agentic_mooncake";
/// Keys that only a v2 row has.
const V2_KEYS: [&str; 3] = ["dependencies", "not_before_ms", "play_id"];

/// One dependency of a row.
#[derive(Debug, Clone)]
struct Dep {
    id: String,
    /// The field that names it (`wait_for[0]`, `dependencies[1].request_id`).
    field: String,
    delay_ms: f64,
}

/// One validated row.
#[derive(Debug, Clone)]
struct Row {
    id: String,
    session: String,
    line: u64,
    model: String,
    input: u32,
    output: u32,
    hash_ids: Vec<u32>,
    after_tool: bool,
    deps: Vec<Dep>,
    /// `timestamp` of a v1 row without dependencies, or `not_before_ms` (v2).
    ready_ms: Option<f64>,
    /// v1's `delay + tool_wait_ms`, after the latest dependency.
    gap_ms: f64,
}

/// What the file holds so far.
#[derive(Debug, Default)]
struct File {
    /// v2's header: (line, block size).
    header: Option<(u64, u32)>,
    rows: Vec<Row>,
}

/// Reads an Agentic Mooncake file into its request graph.
pub(crate) fn read(path: &Path, spec: &FormatSpec) -> Result<Graph, DatasetError> {
    let mut graph = Graph {
        path: path.to_owned(),
        ..Graph::default()
    };
    let mut file = File::default();
    read_lines(path, |line, text| {
        parse_line(&mut graph, &mut file, spec, line, text)
    })?;
    if file.rows.is_empty() {
        return Err(DatasetError::Empty {
            path: path.to_owned(),
        });
    }
    graph.block_size = block_size(&file, spec);
    build(&mut graph, &file.rows)?;
    Ok(graph)
}

fn block_size(file: &File, spec: &FormatSpec) -> u32 {
    match file.header {
        Some((_, b)) => b,
        None => spec.block_size(),
    }
}

fn parse_line(
    graph: &mut Graph,
    file: &mut File,
    spec: &FormatSpec,
    line: u64,
    text: &str,
) -> Result<(), DatasetError> {
    let path = graph.path.clone();
    let Ok(Value::Object(obj)) = serde_json::from_str::<Value>(text) else {
        return Err(invalid(
            &path,
            line,
            "",
            "not a JSON object; an Agentic Mooncake file is one row object per line",
        ));
    };
    let fields = Fields {
        path: &path,
        line,
        obj: &obj,
        prefix: "",
    };
    if obj.contains_key("schema") {
        return header(file, spec, &fields);
    }
    let v2 = file.header.is_some();
    if let Some(key) = V2_KEYS
        .iter()
        .find(|k| obj.contains_key(**k))
        .filter(|_| !v2)
    {
        return Err(fields.err(
            key,
            format!(
                "a v2 row (it has `{key}`) without the v2 header: the first line of the file must be \
                 {{\"schema\":\"{SCHEMA}\",\"version\":2,\"block_size\":B,...}}"
            ),
        ));
    }
    let block = block_size(file, spec);
    let row = row(graph, &fields, block, v2)?;
    file.rows.push(row);
    Ok(())
}

/// The v2 header line.
fn header(file: &mut File, spec: &FormatSpec, fields: &Fields<'_>) -> Result<(), DatasetError> {
    let schema = fields.req_str("schema", SCHEMA)?;
    if schema != SCHEMA {
        return Err(fields.err(
            "schema",
            format!("unknown schema {schema:?}: an Agentic Mooncake header says {SCHEMA:?}"),
        ));
    }
    if let Some(row) = file.rows.first() {
        return Err(fields.err(
            "schema",
            format!(
                "a header after rows (the first row is line {}): the v2 header is the first line",
                row.line
            ),
        ));
    }
    if let Some((first, _)) = file.header {
        return Err(fields.err(
            "schema",
            format!("a second header (the first is line {first})"),
        ));
    }
    let version = fields.req_u64("version", "2")?;
    if version != 2 {
        return Err(fields.err(
            "version",
            format!("version {version}: this reader reads Agentic Mooncake v2 (and v1, which has no header)"),
        ));
    }
    let block = fields.req_u64("block_size", "tokens per hash id")?;
    let block = u32::try_from(block)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| fields.err("block_size", format!("is {block}: give 1..=2^32-1 tokens")))?;
    if let Some(scope) = fields.opt_str("hash_id_scope")? {
        if scope != "local" {
            return Err(fields.err(
                "hash_id_scope",
                format!("{scope:?}: only \"local\" (one id space for the file) is defined"),
            ));
        }
    }
    check_block_size(spec, fields.path, fields.line, "block_size", block)?;
    file.header = Some((fields.line, block));
    Ok(())
}

/// One row, v1 or v2.
fn row(graph: &mut Graph, fields: &Fields<'_>, block: u32, v2: bool) -> Result<Row, DatasetError> {
    for mode in ["text_input", "messages", "payload"] {
        if fields.obj.get(mode).is_some_and(|v| !v.is_null()) {
            return Err(fields.err(
                mode,
                format!(
                    "`{mode}` carries a literal prompt, which agentx cannot replay (it synthesizes \
                     prompts from token counts and hash ids); give `input_length` and `hash_ids`"
                ),
            ));
        }
    }
    let id = fields.req_str(
        "request_id",
        "every Agentic Mooncake row has its request_id",
    )?;
    let session = if v2 {
        for name in ["play_id", "model"] {
            fields.req_str(
                name,
                "a v2 row names its request_id, play_id, session_id and model",
            )?;
        }
        fields.req_str("session_id", "a v2 row names its session")?
    } else {
        fields.opt_str("session_id")?.unwrap_or(id)
    };
    let (input, output) = lengths(graph, fields, session)?;
    let hash_ids = hash_ids(fields, input, block)?;
    if let Some(kind) = fields.opt_str("request_kind")? {
        if !matches!(kind, "foreground" | "agent" | "background_agent") {
            return Err(fields.err(
                "request_kind",
                format!("unknown request_kind {kind:?}: foreground, agent or background_agent"),
            ));
        }
    }
    let (deps, ready_ms, gap_ms) = if v2 {
        (dependencies(fields)?, fields.opt_f64("not_before_ms")?, 0.0)
    } else {
        let delay = match fields.opt_millis("delay")? {
            Some(d) => d,
            None => fields.opt_millis("delay_ms")?.unwrap_or(0.0),
        };
        let tool_wait = fields.opt_millis("tool_wait_ms")?.unwrap_or(0.0);
        let deps = wait_for(fields)?;
        // A row that waits is dispatched after its dependencies; its timestamp is not a floor.
        let ready = match fields.opt_f64("timestamp")? {
            Some(t) => Some(t),
            None => fields.opt_f64("created_time")?,
        }
        .filter(|_| deps.is_empty());
        (deps, ready, delay + tool_wait)
    };
    if let Some(dep) = deps.iter().find(|d| d.id == id) {
        return Err(fields.err(
            &dep.field,
            format!("request {id:?} waits for itself; drop the dependency"),
        ));
    }
    match ready_ms {
        Some(t) if !t.is_finite() || t < 0.0 => {
            let name = if v2 { "not_before_ms" } else { "timestamp" };
            return Err(fields.err(name, format!("is {t}: give a finite time >= 0 (ms)")));
        }
        None if deps.is_empty() => {
            let name = if v2 { "not_before_ms" } else { "timestamp" };
            return Err(fields.err(
                name,
                "missing: a row that waits for nothing starts at its recorded time; give it",
            ));
        }
        _ => {}
    }
    let after_tool = !fields.array("tool_events")?.is_empty()
        || fields.opt_f64("tool_wait_ms")?.is_some_and(|w| w > 0.0);
    Ok(Row {
        id: id.to_owned(),
        session: session.to_owned(),
        line: fields.line,
        model: fields.opt_str("model")?.unwrap_or_default().to_owned(),
        input,
        output,
        hash_ids,
        after_tool,
        deps,
        ready_ms,
        gap_ms,
    })
}

/// `input_length` and `output_length` (or their `_tokens` aliases).
fn lengths(
    graph: &mut Graph,
    fields: &Fields<'_>,
    session: &str,
) -> Result<(u32, u32), DatasetError> {
    let either = |a: &str, b: &str| -> Result<(Option<u64>, String), DatasetError> {
        match fields.opt_u64(a)? {
            Some(v) => Ok((Some(v), a.to_owned())),
            None => Ok((fields.opt_u64(b)?, a.to_owned())),
        }
    };
    let (input, name) = either("input_length", "input_tokens")?;
    let input = match input {
        Some(n) if n > 0 && n <= u64::from(u32::MAX) => n as u32,
        Some(n) => return Err(fields.err(&name, format!("must be in 1..=2^32-1 tokens, got {n}"))),
        None => return Err(fields.err(&name, "missing: every request needs its input token count")),
    };
    let (output, name) = either("output_length", "output_tokens")?;
    let output = match output {
        Some(n) => u32::try_from(n)
            .map_err(|_| fields.err(&name, format!("{n} tokens is above 2^32-1")))?,
        None => {
            return Err(fields.err(&name, "missing: every request needs its output token count"))
        }
    };
    if output == 0 {
        graph.warn(
            WarningKind::HarnessSchema,
            Some(session),
            fields.line,
            &name,
            "`output_length` is 0; sent as 1 (agentx-harness refuses a turn whose max_tokens is \
             below 1); give it at least 1"
                .into(),
        );
    }
    Ok((input, output))
}

fn hash_ids(fields: &Fields<'_>, input: u32, block: u32) -> Result<Vec<u32>, DatasetError> {
    let ids = crate::mooncake::hash_id_values(fields.array("hash_ids")?)
        .map_err(|(field, message)| fields.err(&field, message))?;
    let reach = u64::from(input).div_ceil(u64::from(block));
    if ids.len() as u64 > reach {
        return Err(fields.err(
            "hash_ids",
            format!(
                "{} hash ids of {block} tokens, but input_length {input} fills only {reach} blocks; \
                 is the block size right? (the v2 header's block_size, else --block-size, 512 by \
                 default)",
                ids.len()
            ),
        ));
    }
    Ok(ids)
}

/// v1's `wait_for`.
fn wait_for(fields: &Fields<'_>) -> Result<Vec<Dep>, DatasetError> {
    Ok(fields
        .strings("wait_for")?
        .into_iter()
        .enumerate()
        .map(|(i, id)| Dep {
            id: id.to_owned(),
            field: format!("wait_for[{i}]"),
            delay_ms: 0.0,
        })
        .collect())
}

/// v2's `dependencies`.
fn dependencies(fields: &Fields<'_>) -> Result<Vec<Dep>, DatasetError> {
    let mut out = Vec::new();
    for (i, value) in fields.array("dependencies")?.iter().enumerate() {
        let name = format!("dependencies[{i}]");
        let Value::Object(obj) = value else {
            return Err(fields.err(&name, format!("must be an object, got {value}")));
        };
        let dep = fields.nested(obj, &name);
        let id = dep.req_str("request_id", "the request this one waits for")?;
        match dep.req_str("trigger", "completion")? {
            "completion" => {}
            "dispatch" => {
                return Err(dep.err(
                    "trigger",
                    "\"dispatch\": the session-tree replay starts a request on its predecessors' \
                     completion only, so a dependency on a dispatch cannot be replayed; use \
                     \"completion\"",
                ))
            }
            other => {
                return Err(dep.err(
                    "trigger",
                    format!("unknown trigger {other:?}: dispatch or completion"),
                ))
            }
        }
        match dep.req_str("relation", "sequence, spawn or join")? {
            "sequence" | "spawn" | "join" => {}
            "replay_barrier" => {
                return Err(dep.err(
                    "relation",
                    "\"replay_barrier\" cannot be replayed by the session-tree model (its barriers are \
                     inferred per subagent from recorded times, not named); drop the dependency",
                ))
            }
            other => {
                return Err(dep.err(
                    "relation",
                    format!("unknown relation {other:?}: sequence, spawn, join or replay_barrier"),
                ))
            }
        }
        let Some(delay_ms) = dep.opt_millis("delay_ms")? else {
            return Err(dep.err("delay_ms", "missing: the wait after the dependency (ms)"));
        };
        out.push(Dep {
            id: id.to_owned(),
            field: format!("{name}.request_id"),
            delay_ms,
        });
    }
    Ok(out)
}

/// Nodes in file order, sessions in first-row order, edges resolved, times placed.
fn build(graph: &mut Graph, rows: &[Row]) -> Result<(), DatasetError> {
    let mut by_id: HashMap<&str, usize> = HashMap::new();
    for (i, row) in rows.iter().enumerate() {
        if let Some(first) = by_id.insert(&row.id, i) {
            return Err(invalid(
                &graph.path,
                row.line,
                "request_id",
                format!(
                    "duplicate request_id {:?} (also on line {}); request ids are unique",
                    row.id, rows[first].line
                ),
            ));
        }
    }
    let mut sessions: HashMap<&str, usize> = HashMap::new();
    for (i, row) in rows.iter().enumerate() {
        let session = *sessions.entry(&row.session).or_insert_with(|| {
            graph.sessions.push(Session {
                id: row.session.clone(),
                declared_parent: None,
                nodes: Vec::new(),
            });
            graph.sessions.len() - 1
        });
        graph.sessions[session].nodes.push(i);
        let mut wait_for = Vec::with_capacity(row.deps.len());
        for dep in &row.deps {
            let Some(&d) = by_id.get(dep.id.as_str()) else {
                return Err(invalid(
                    &graph.path,
                    row.line,
                    &dep.field,
                    format!(
                        "request {:?} depends on unknown request {:?}: no row has that request_id",
                        row.id, dep.id
                    ),
                ));
            };
            wait_for.push(d);
        }
        graph.nodes.push(Node {
            id: row.id.clone(),
            session,
            line: row.line,
            start_ms: 0.0,
            end_ms: 0.0,
            timed: false,
            input: row.input,
            output: row.output,
            hash_ids: row.hash_ids.clone(),
            model: row.model.clone(),
            after_tool: row.after_tool,
            wait_for,
            gap_ms: None,
        });
    }
    for i in graph.topological_order()? {
        let row = &rows[i];
        let deps = &graph.nodes[i].wait_for;
        let start = if deps.is_empty() {
            row.ready_ms.unwrap_or(0.0)
        } else {
            let latest = deps
                .iter()
                .map(|&d| graph.nodes[d].end_ms)
                .fold(f64::NEG_INFINITY, f64::max);
            let fired = deps
                .iter()
                .zip(&row.deps)
                .map(|(&d, dep)| graph.nodes[d].end_ms + dep.delay_ms)
                .fold(f64::NEG_INFINITY, f64::max);
            let start = (fired + row.gap_ms).max(row.ready_ms.unwrap_or(f64::NEG_INFINITY));
            graph.nodes[i].gap_ms = Some(start - latest);
            start
        };
        graph.nodes[i].start_ms = start;
        graph.nodes[i].end_ms = start;
    }
    Ok(())
}
