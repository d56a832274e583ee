//! Strict decoding of graph and trace records from JSON values, as aiperf's `decode.py` and msgspec
//! do
//! (docs/specs/agent-graph-ir.md#81-parse-and-decode-errors-graphparseerror-in-parserpy-graphdecodeerror-in-decodepy):
//! unknown fields are refused everywhere except `graph.provenance` (folded into `extra`); a node's
//! kind is `node_type` or the legacy `kind`, and only `llm` is known; `messages` is an alias of
//! `prompt` (not both); `dispatch_overrides` was renamed `extra_body`; an edge's `edge_type` may
//! only be `static` and `branches` is refused; counts are `>= 1` or `"all"`; delays are finite and
//! `>= 0`; `max_tokens >= 1`.
//!
//! Every error is a [`DatasetError::Invalid`] whose location is the record's file and line and the
//! JSON path of the field (`graph.nodes.plan.max_tokens`, `graph.edges[a->b].min_start_delay_us`,
//! `traces[0].initial_state`), and whose message says what to write instead.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::ir::{
    ChannelSpec, ChannelType, Content, ContentItem, Count, Edge, Expected, GraphRecord, LlmNode,
    Place, PromptItem, Provenance, Reducer, Requirement, TraceRecord, VERSION,
};
use crate::error::DatasetError;

/// The fields of each record, for unknown-field errors.
const GRAPH_FIELDS: [&str; 6] = ["version", "provenance", "system", "state", "nodes", "edges"];
const PROVENANCE_FIELDS: [&str; 4] = ["source", "tool", "captured_at", "notes"];
const CHANNEL_FIELDS: [&str; 2] = ["type", "reducer"];
const NODE_FIELDS: [&str; 18] = [
    "node_type",
    "metadata",
    "min_start_delay_us",
    "arrival_offset_us",
    "recorded_start_unix_ms",
    "inputs",
    "prompt",
    "messages",
    "output",
    "streaming",
    "model",
    "max_tokens",
    "raw_tools",
    "extra_headers",
    "expected",
    "extra_body",
    "theoretical_prefix_cache_hit_blocks",
    "theoretical_prefix_cache_total_blocks",
];
const EDGE_FIELDS: [&str; 7] = [
    "source",
    "target",
    "edge_type",
    "delay_after_predecessor_us",
    "delay_after_predecessor_start_us",
    "delay_after_predecessor_first_token_us",
    "min_start_delay_us",
];
const REQUIREMENT_FIELDS: [&str; 2] = ["channel", "count"];
const EXPECTED_FIELDS: [&str; 4] = [
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_creation_tokens",
];
const MESSAGE_FIELDS: [&str; 2] = ["role", "content"];
const TRACE_FIELDS: [&str; 6] = [
    "id",
    "tags",
    "graph_ref",
    "messages",
    "initial_state",
    "replay_outputs",
];
/// The node kinds aiperf knows (`NodeKind` at the specified commit).
const NODE_KINDS: [&str; 1] = ["llm"];

/// A JSON object being decoded: its fields, its JSON path and the record's place.
struct Object<'a> {
    fields: &'a Map<String, Value>,
    path: String,
    place: &'a Place,
}

/// The JSON type of a value, as messages name it.
fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The edit distance of two short names, for "did you mean".
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (above + 1)
                .min(row[j] + 1)
                .min(diagonal + usize::from(ca != *cb));
            diagonal = above;
        }
    }
    row[b.len()]
}

/// `; did you mean 'x'?` when a known name is close to `name`.
fn suggestion(name: &str, known: &[&str]) -> String {
    known
        .iter()
        .map(|k| (distance(name, k), *k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| format!(" (did you mean '{k}'?)"))
        .unwrap_or_default()
}

impl<'a> Object<'a> {
    /// `value` as an object named `what` at `path`.
    fn of(
        value: &'a Value,
        path: String,
        place: &'a Place,
        what: &str,
    ) -> Result<Self, DatasetError> {
        match value {
            Value::Object(fields) => Ok(Object {
                fields,
                path,
                place,
            }),
            other => Err(DatasetError::Invalid {
                location: place.at(path),
                message: format!("{what} must be a mapping, got {}", type_name(other)),
            }),
        }
    }

    fn child(&self, field: &str) -> String {
        format!("{}.{field}", self.path)
    }

    fn error(&self, field: Option<&str>, message: String) -> DatasetError {
        DatasetError::Invalid {
            location: self
                .place
                .at(field.map_or_else(|| self.path.clone(), |f| self.child(f))),
            message,
        }
    }

    /// Refuses a field outside `known` (and outside `also`, the keys the caller handles itself).
    fn deny_unknown(&self, what: &str, known: &[&str], also: &[&str]) -> Result<(), DatasetError> {
        for name in self.fields.keys() {
            if known.contains(&name.as_str()) || also.contains(&name.as_str()) {
                continue;
            }
            return Err(self.error(
                Some(name),
                format!(
                    "{what} has an unknown field '{name}'{}; its fields are {}: remove it or fix its spelling",
                    suggestion(name, known),
                    known.join(", ")
                ),
            ));
        }
        Ok(())
    }

    /// A field's value; `None` when absent or null.
    fn get(&self, field: &str) -> Option<&'a Value> {
        self.fields.get(field).filter(|v| !v.is_null())
    }

    fn string(&self, field: &str) -> Result<Option<String>, DatasetError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(other) => Err(self.error(
                Some(field),
                format!("must be a string, got {}", type_name(other)),
            )),
        }
    }

    fn required_string(&self, field: &str, what: &str) -> Result<String, DatasetError> {
        self.string(field)?.ok_or_else(|| {
            self.error(
                Some(field),
                format!("{what} has no '{field}'; it is required: add it"),
            )
        })
    }

    fn boolean(&self, field: &str) -> Result<Option<bool>, DatasetError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.error(
                Some(field),
                format!("must be true or false, got {}", type_name(other)),
            )),
        }
    }

    /// A delay in microseconds: a finite number >= 0.
    fn delay(&self, field: &str) -> Result<Option<f64>, DatasetError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Number(n)) => match n.as_f64() {
                Some(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
                Some(v) if !v.is_finite() => Err(self.error(
                    Some(field),
                    format!("{field} must be finite, got {v} (rule-57); give a finite number of microseconds or drop it"),
                )),
                _ => Err(self.error(
                    Some(field),
                    format!("{field} must be >= 0 microseconds, got {n}; give a delay of 0 or more, or drop it"),
                )),
            },
            Some(other) => Err(self.error(
                Some(field),
                format!("{field} must be a number of microseconds, got {}", type_name(other)),
            )),
        }
    }

    /// A whole number >= `min`.
    fn integer(&self, field: &str, min: u64) -> Result<Option<u64>, DatasetError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Number(n)) if n.as_u64().is_some_and(|v| v >= min) => Ok(n.as_u64()),
            Some(other) => Err(self.error(
                Some(field),
                format!("{field} must be a whole number >= {min}, got {other}"),
            )),
        }
    }

    fn mapping(&self, field: &str) -> Result<Option<&'a Map<String, Value>>, DatasetError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(map)),
            Some(other) => Err(self.error(
                Some(field),
                format!("must be a mapping, got {}", type_name(other)),
            )),
        }
    }

    fn list(&self, field: &str) -> Result<Option<&'a Vec<Value>>, DatasetError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(other) => Err(self.error(
                Some(field),
                format!("must be a list, got {}", type_name(other)),
            )),
        }
    }
}

/// Decodes the graph record `value` read at `place`.
pub(crate) fn graph(value: &Value, place: &Place) -> Result<GraphRecord, DatasetError> {
    let object = Object::of(value, "graph".into(), place, "the graph record")?;
    object.deny_unknown("the graph record", &GRAPH_FIELDS, &[])?;
    let mut record = GraphRecord {
        version: object.string("version")?.unwrap_or_else(|| VERSION.into()),
        provenance: provenance(&object)?,
        system: object.string("system")?,
        place: place.clone(),
        ..GraphRecord::default()
    };
    if let Some(state) = object.mapping("state")? {
        for (name, spec) in state {
            let path = format!("graph.state.{name}");
            record
                .state
                .insert(name.clone(), channel(spec, path, place)?);
        }
    }
    if let Some(nodes) = object.mapping("nodes")? {
        for (id, spec) in nodes {
            record.nodes.insert(id.clone(), node(spec, id, place)?);
        }
    }
    if let Some(edges) = object.list("edges")? {
        for (i, spec) in edges.iter().enumerate() {
            record.edges.push(edge(spec, i, place)?);
        }
    }
    Ok(record)
}

/// `graph.provenance`, unknown keys folded into `extra`.
fn provenance(graph: &Object<'_>) -> Result<Provenance, DatasetError> {
    let mut out = Provenance::default();
    let Some(value) = graph.get("provenance") else {
        return Ok(out);
    };
    let object = Object::of(value, graph.child("provenance"), graph.place, "provenance")?;
    if let Some(source) = object.string("source")? {
        out.source = source;
    }
    if let Some(tool) = object.string("tool")? {
        out.tool = tool;
    }
    out.captured_at = object.string("captured_at")?;
    out.notes = object.string("notes")?;
    match object.get("extra") {
        None => {}
        Some(Value::Object(extra)) => out.extra.clone_from(extra),
        Some(other) => {
            return Err(object.error(
                Some("extra"),
                format!(
                    "must be a mapping of vendor keys, got {}; write extra as {{\"key\": value}}",
                    type_name(other)
                ),
            ))
        }
    }
    for (key, value) in object.fields {
        if !PROVENANCE_FIELDS.contains(&key.as_str()) && key != "extra" {
            out.extra.insert(key.clone(), value.clone());
        }
    }
    Ok(out)
}

/// A channel declaration.
fn channel(value: &Value, path: String, place: &Place) -> Result<ChannelSpec, DatasetError> {
    let object = Object::of(value, path, place, "a channel")?;
    object.deny_unknown("a channel", &CHANNEL_FIELDS, &[])?;
    let kind = match object.string("type")?.as_deref() {
        None | Some("text") => ChannelType::Text,
        Some("messages") => ChannelType::Messages,
        Some(other) => {
            return Err(object.error(
                Some("type"),
                format!("unknown channel type '{other}'; use text or messages"),
            ))
        }
    };
    let reducer = match object.string("reducer")?.as_deref() {
        None | Some("overwrite") => Reducer::Overwrite,
        Some("add_messages") => Reducer::AddMessages,
        Some(other) => {
            return Err(object.error(
                Some("reducer"),
                format!(
                    "unknown reducer '{other}'; use overwrite or add_messages (there is no reducer named 'add')"
                ),
            ))
        }
    };
    Ok(ChannelSpec { kind, reducer })
}

/// The node kind named by `node_type` or the legacy `kind`; refuses any but `llm`.
fn node_kind(object: &Object<'_>) -> Result<(), DatasetError> {
    let node_type = object.get("node_type");
    let legacy = object.get("kind");
    let (field, value) = match (node_type, legacy) {
        (Some(v), _) => ("node_type", v),
        (None, Some(v)) => ("kind", v),
        (None, None) => return Ok(()),
    };
    match value.as_str() {
        Some(kind) if NODE_KINDS.contains(&kind) => Ok(()),
        _ => {
            let shown = value
                .as_str()
                .map_or_else(|| value.to_string(), |s| format!("'{s}'"));
            Err(object.error(
                Some(field),
                format!(
                    "unknown node {field} {shown}; expected one of ['llm'] (schema 2.0 has only llm \
                     nodes: a tool or router node cannot be replayed); make the node an llm node or \
                     remove it"
                ),
            ))
        }
    }
}

/// A node.
fn node(value: &Value, id: &str, place: &Place) -> Result<LlmNode, DatasetError> {
    let path = format!("graph.nodes.{id}");
    let object = Object::of(value, path, place, "a node")?;
    node_kind(&object)?;
    if object.fields.contains_key("dispatch_overrides") {
        return Err(object.error(
            Some("dispatch_overrides"),
            "'dispatch_overrides' was renamed 'extra_body'; model, streaming, max_tokens and \
             raw_tools are node fields of their own: rename the field"
                .into(),
        ));
    }
    if object.fields.contains_key("prompt") && object.fields.contains_key("messages") {
        return Err(object.error(
            None,
            "node sets both 'prompt' and 'messages'; 'messages' is an alias for 'prompt': keep exactly one".into(),
        ));
    }
    object.deny_unknown("a node", &NODE_FIELDS, &["kind"])?;
    let prompt_field = if object.fields.contains_key("messages") {
        "messages"
    } else {
        "prompt"
    };
    let expected = match object.get("expected") {
        None => None,
        Some(v) => Some(expected_tokens(v, object.child("expected"), place)?),
    };
    let Some(prompt_items) = object.list(prompt_field)? else {
        let message = if expected.is_some_and(|e| e.input_tokens.is_some()) {
            "node has no prompt; synth-token fabrication is not supported on the native lowering \
             path: write the prompt's messages (expected.input_tokens is a prediction only)"
        } else {
            "node has no 'prompt'; it is required: give the node's messages, e.g. \
             [{\"role\": \"user\", \"content\": \"...\"}]"
        };
        return Err(object.error(None, message.into()));
    };
    let mut node = LlmNode {
        metadata: object.mapping("metadata")?.cloned().unwrap_or_default(),
        min_start_delay_us: object.delay("min_start_delay_us")?,
        arrival_offset_us: object.integer("arrival_offset_us", 0)?,
        recorded_start_unix_ms: object.integer("recorded_start_unix_ms", 0)?,
        output: object.required_string("output", "a node")?,
        streaming: object.boolean("streaming")?.unwrap_or(true),
        model: object.string("model")?,
        max_tokens: object
            .integer("max_tokens", 1)?
            .map(|v| u32::try_from(v).unwrap_or(u32::MAX)),
        raw_tools: object.list("raw_tools")?.cloned(),
        expected,
        extra_body: object.mapping("extra_body")?.cloned(),
        theoretical_prefix_cache_hit_blocks: object
            .integer("theoretical_prefix_cache_hit_blocks", 0)?,
        theoretical_prefix_cache_total_blocks: object
            .integer("theoretical_prefix_cache_total_blocks", 0)?,
        ..LlmNode::default()
    };
    if let Some(headers) = object.mapping("extra_headers")? {
        let mut out = BTreeMap::new();
        for (name, value) in headers {
            let Some(text) = value.as_str() else {
                return Err(object.error(
                    Some(&format!("extra_headers.{name}")),
                    format!("a header value must be a string, got {}", type_name(value)),
                ));
            };
            out.insert(name.clone(), text.to_owned());
        }
        node.extra_headers = Some(out);
    }
    if let Some(inputs) = object.list("inputs")? {
        for (i, value) in inputs.iter().enumerate() {
            node.inputs.push(requirement(
                value,
                format!("{}.inputs[{i}]", object.path),
                place,
            )?);
        }
    }
    let prompt_path = object.child(prompt_field);
    for (i, item) in prompt_items.iter().enumerate() {
        node.prompt
            .push(prompt_item(item, format!("{prompt_path}[{i}]"), place)?);
    }
    Ok(node)
}

/// `expected`.
fn expected_tokens(value: &Value, path: String, place: &Place) -> Result<Expected, DatasetError> {
    let object = Object::of(value, path, place, "expected")?;
    object.deny_unknown("expected", &EXPECTED_FIELDS, &[])?;
    Ok(Expected {
        input_tokens: object.integer("input_tokens", 0)?,
        output_tokens: object.integer("output_tokens", 0)?,
        cache_read_tokens: object.integer("cache_read_tokens", 0)?,
        cache_creation_tokens: object.integer("cache_creation_tokens", 0)?,
    })
}

/// One `inputs` entry.
fn requirement(value: &Value, path: String, place: &Place) -> Result<Requirement, DatasetError> {
    let object = Object::of(value, path, place, "an inputs entry")?;
    object.deny_unknown("an inputs entry", &REQUIREMENT_FIELDS, &[])?;
    let channel = object.required_string("channel", "an inputs entry")?;
    let count = match object.get("count") {
        None => Count::Writes(1),
        Some(Value::String(s)) if s == "all" => Count::All,
        Some(Value::Number(n)) if n.as_u64().is_some_and(|v| v >= 1) => {
            Count::Writes(u32::try_from(n.as_u64().unwrap_or(1)).unwrap_or(u32::MAX))
        }
        Some(other) => {
            return Err(object.error(
                Some("count"),
                format!(
                    "count must be a whole number >= 1 or \"all\", got {other}; count: 1 waits for \
                     the first write"
                ),
            ))
        }
    };
    Ok(Requirement { channel, count })
}

/// A channel name of a `@name` reference: `None` for a literal (no `@`), the unescaped literal for
/// `@@`.
fn reference(text: &str) -> Result<Option<&str>, String> {
    match text.strip_prefix('@') {
        None => Ok(None),
        Some(rest) if rest.starts_with('@') => Err(rest.to_owned()),
        Some(name) => Ok(Some(name)),
    }
}

/// One prompt item: a message or a top-level `"@channel"` splice.
fn prompt_item(value: &Value, path: String, place: &Place) -> Result<PromptItem, DatasetError> {
    if let Value::String(text) = value {
        return match reference(text) {
            Ok(Some(name)) if !name.is_empty() => Ok(PromptItem::Splice(name.to_owned())),
            _ => Err(DatasetError::Invalid {
                location: place.at(path),
                message: format!(
                    "a top-level prompt string must be a \"@channel\" splice of a messages channel, got {text:?}; \
                     wrap literal text in a message {{\"role\": \"user\", \"content\": ...}}"
                ),
            }),
        };
    }
    let object = Object::of(
        value,
        path,
        place,
        "a prompt item (a message or \"@channel\")",
    )?;
    object.deny_unknown("a prompt message", &MESSAGE_FIELDS, &[])?;
    let role = object.required_string("role", "a prompt message")?;
    let content = match object.get("content") {
        Some(Value::String(text)) => Content::Text(text.clone()),
        Some(Value::Array(parts)) => {
            let mut items = Vec::with_capacity(parts.len());
            for (i, part) in parts.iter().enumerate() {
                let Value::String(text) = part else {
                    return Err(object.error(
                        Some(&format!("content[{i}]")),
                        format!("a content part must be a string, got {}", type_name(part)),
                    ));
                };
                items.push(match reference(text) {
                    Ok(None) => ContentItem::Text(text.clone()),
                    Ok(Some("")) => {
                        return Err(object.error(
                            Some(&format!("content[{i}]")),
                            "'@' names no channel; write '@name', or '@@' for a literal '@'".into(),
                        ))
                    }
                    Ok(Some(name)) => ContentItem::Channel(name.to_owned()),
                    Err(literal) => ContentItem::Text(literal),
                });
            }
            Content::Parts(items)
        }
        Some(other) => {
            return Err(object.error(
                Some("content"),
                format!(
                    "content must be a string or a list of strings, got {}",
                    type_name(other)
                ),
            ))
        }
        None => {
            return Err(object.error(
                Some("content"),
                "a prompt message has no 'content'; it is required: add it".into(),
            ))
        }
    };
    Ok(PromptItem::Message { role, content })
}

/// An edge (`index` places it until its endpoints are known).
fn edge(value: &Value, index: usize, place: &Place) -> Result<Edge, DatasetError> {
    let object = Object::of(value, format!("graph.edges[{index}]"), place, "an edge")?;
    if object.fields.contains_key("branches") {
        return Err(object.error(
            Some("branches"),
            "an edge with 'branches' (the retired conditional edge) is not supported; write one \
             static edge {source, target} per branch"
                .into(),
        ));
    }
    let source = object.required_string("source", "an edge")?;
    let target = object.required_string("target", "an edge")?;
    // From here on the edge is named by its endpoints, as aiperf names it.
    let object = Object {
        path: format!("graph.edges[{source}->{target}]"),
        ..object
    };
    object.deny_unknown("an edge", &EDGE_FIELDS, &[])?;
    if let Some(kind) = object.string("edge_type")? {
        if kind != "static" {
            return Err(object.error(
                Some("edge_type"),
                format!("unknown edge_type '{kind}'; only static edges exist: write \"static\" or drop it"),
            ));
        }
    }
    Ok(Edge {
        delay_after_predecessor_us: object.delay("delay_after_predecessor_us")?,
        delay_after_predecessor_start_us: object.delay("delay_after_predecessor_start_us")?,
        delay_after_predecessor_first_token_us: object
            .delay("delay_after_predecessor_first_token_us")?,
        min_start_delay_us: object.delay("min_start_delay_us")?,
        source,
        target,
        injected: false,
    })
}

/// Decodes the trace record `value`, the `index`-th of the workload, read at `place`.
pub(crate) fn trace(
    value: &Value,
    index: usize,
    place: &Place,
) -> Result<TraceRecord, DatasetError> {
    let object = Object::of(value, format!("traces[{index}]"), place, "a trace record")?;
    object.deny_unknown("a trace record", &TRACE_FIELDS, &[])?;
    let id = object.required_string("id", "a trace record")?;
    let mut record = TraceRecord {
        id,
        graph_ref: object.string("graph_ref")?,
        place: place.clone(),
        index,
        ..TraceRecord::default()
    };
    if let Some(tags) = object.list("tags")? {
        for (i, tag) in tags.iter().enumerate() {
            let Value::String(tag) = tag else {
                return Err(object.error(
                    Some(&format!("tags[{i}]")),
                    format!("a tag must be a string, got {}", type_name(tag)),
                ));
            };
            record.tags.push(tag.clone());
        }
    }
    if let Some(messages) = object.list("messages")? {
        if let Some(i) = messages.iter().position(|m| !m.is_object()) {
            return Err(object.error(
                Some(&format!("messages[{i}]")),
                "a message must be a mapping {\"role\": ..., \"content\": ...}".into(),
            ));
        }
        record.messages = Some(messages.clone());
    }
    if let Some(state) = object.mapping("initial_state")? {
        record.initial_state = state.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    }
    if let Some(outputs) = object.mapping("replay_outputs")? {
        for (node, writes) in outputs {
            let Value::Object(writes) = writes else {
                return Err(object.error(
                    Some(&format!("replay_outputs.{node}")),
                    format!(
                        "must be a mapping of channel to value, got {}",
                        type_name(writes)
                    ),
                ));
            };
            let writes = writes.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            record.replay_outputs.insert(node.clone(), writes);
        }
    }
    Ok(record)
}
