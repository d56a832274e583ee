//! Reading a workload file into records (docs/specs/agent-graph-ir.md#1-file-layout): JSONL records
//! with a `kind` discriminator (`graph` at most once, before every trace; `trace` or none; anything
//! else refused), or one JSON document `{graph, traces}`. YAML is not read: a file that is neither
//! `.jsonl` nor `.json` is refused with the command that converts it.

use std::collections::HashMap;
use std::path::Path;

use serde_json::Value;

use super::decode;
use super::ir::{GraphRecord, Place, Workload, VERSION};
use crate::error::{DatasetError, Location};

/// How to convert a YAML workload, for the refusal.
const CONVERT: &str = "convert it to JSON first: one document with \
     `python3 -c 'import json,sys,yaml; json.dump(yaml.safe_load(open(sys.argv[1])), sys.stdout)' W.yaml > W.json`, \
     multi-document YAML with `python3 -c 'import json,sys,yaml; [print(json.dumps(d)) for d in yaml.safe_load_all(open(sys.argv[1]))]' W.yaml > W.jsonl`";

/// Reads and decodes the workload at `path`.
pub(crate) fn workload(path: &Path) -> Result<Workload, DatasetError> {
    let extension = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    let jsonl = match extension.as_deref() {
        Some("jsonl") => true,
        Some("json") => false,
        _ => {
            return Err(DatasetError::Argument(format!(
                "{}: a graph IR workload is read as JSONL records (.jsonl) or one JSON document \
                 {{\"graph\": ..., \"traces\": [...]}} (.json); YAML is not read: {CONVERT}",
                path.display()
            )))
        }
    };
    let bytes = std::fs::read(path).map_err(|e| DatasetError::io("read", path, e))?;
    if bytes.starts_with(&[0x1f, 0x8b]) {
        return Err(crate::format::gzipped(path));
    }
    let text = String::from_utf8(bytes).map_err(|e| DatasetError::Invalid {
        location: Location {
            file: path.to_owned(),
            ..Location::default()
        },
        message: format!("not UTF-8 text ({e}); a graph IR workload is JSON text"),
    })?;
    let workload = if jsonl {
        records(path, &text)?
    } else {
        document(path, &text)?
    };
    if workload.traces.is_empty() {
        return Err(DatasetError::Invalid {
            location: Location {
                file: path.to_owned(),
                ..Location::default()
            },
            message: "the workload has no trace records; add at least one trace {\"id\": ...} \
                      (its initial_state seeds the graph's channels)"
                .into(),
        });
    }
    unique_trace_ids(&workload)?;
    Ok(workload)
}

/// The default graph of a workload without a graph record.
fn default_graph(path: &Path) -> GraphRecord {
    GraphRecord {
        version: VERSION.into(),
        place: Place {
            file: path.to_owned(),
            line: 0,
        },
        ..GraphRecord::default()
    }
}

/// The error of text that is not JSON, located at line:column. A non-finite number (`Infinity`,
/// `NaN`, as Python writes them, or one out of range) is named as such: delays must be finite.
fn syntax_error(
    path: &Path,
    line_base: u64,
    text: &str,
    error: &serde_json::Error,
) -> DatasetError {
    let line = line_base + error.line() as u64 - u64::from(line_base > 0);
    let row = text
        .lines()
        .nth(error.line().saturating_sub(1))
        .unwrap_or("");
    let at = row
        .char_indices()
        .nth(error.column().saturating_sub(1))
        .map_or("", |(i, _)| &row[i..]);
    let non_finite = ["Infinity", "-Infinity", "NaN"]
        .iter()
        .find(|word| at.starts_with(**word))
        .map(|word| (*word).to_owned())
        .or_else(|| {
            error
                .to_string()
                .contains("out of range")
                .then(|| "a number out of range".into())
        });
    let (field, message) = match non_finite {
        Some(word) => {
            let before = &row[..row.len() - at.len()];
            let field = before.rfind("\":").and_then(|end| {
                before[..end]
                    .rfind('"')
                    .map(|start| before[start + 1..end].to_owned())
            });
            let name = field.clone().unwrap_or_else(|| "a value".into());
            (
                field,
                format!(
                    "invalid JSON: {word} is not a finite number; {name} must be finite (aiperf: \
                     `must be finite, got inf`, rule-57): give a finite number of microseconds or drop the field"
                ),
            )
        }
        None => {
            let plain = error.to_string();
            let plain = plain
                .rfind(" at line ")
                .map_or(plain.as_str(), |i| &plain[..i])
                .to_owned();
            (None, format!("invalid JSON: {plain}"))
        }
    };
    DatasetError::Invalid {
        location: Location {
            file: path.to_owned(),
            line,
            column: error.column() as u64,
            field,
            ..Location::default()
        },
        message,
    }
}

/// JSONL: one record per non-blank line.
fn records(path: &Path, text: &str) -> Result<Workload, DatasetError> {
    let mut graph: Option<GraphRecord> = None;
    let mut workload = Workload {
        path: path.to_owned(),
        ..Workload::default()
    };
    for (number, line) in (1u64..).zip(text.lines()) {
        if line.trim().is_empty() {
            continue;
        }
        let place = Place {
            file: path.to_owned(),
            line: number,
        };
        let value: Value =
            serde_json::from_str(line).map_err(|e| syntax_error(path, number, line, &e))?;
        let Value::Object(mut fields) = value else {
            return Err(DatasetError::Invalid {
                location: place.at("."),
                message: "record must be a JSON object; each line is one {\"kind\": \"graph\"|\"trace\", ...} record".into(),
            });
        };
        let kind = fields.remove("kind");
        let body = Value::Object(fields);
        match kind.as_ref().map(|k| k.as_str().ok_or(k)) {
            Some(Ok("graph")) => {
                let refusal = if graph.is_some() {
                    Some("more than one 'kind: graph' record (rule-20); a workload has one graph: merge them or split the file")
                } else if !workload.traces.is_empty() {
                    Some("graph record must precede trace records (rule-19); move the graph record to the first line")
                } else {
                    None
                };
                if let Some(message) = refusal {
                    return Err(DatasetError::Invalid {
                        location: place.at("kind"),
                        message: message.into(),
                    });
                }
                graph = Some(decode::graph(&body, &place)?);
            }
            None | Some(Ok("trace")) => {
                let index = workload.traces.len();
                workload.traces.push(decode::trace(&body, index, &place)?);
            }
            Some(other) => {
                let shown = match other {
                    Ok(name) => format!("'{name}'"),
                    Err(value) => value.to_string(),
                };
                return Err(DatasetError::Invalid {
                    location: place.at("kind"),
                    message: format!(
                        "unknown kind {shown}; a record is kind \"graph\" or \"trace\" (the retired \
                         'mix' and 'subgraph' records are not read)"
                    ),
                });
            }
        }
    }
    workload.graph = graph.unwrap_or_else(|| default_graph(path));
    Ok(workload)
}

/// One JSON document `{graph, traces}`.
fn document(path: &Path, text: &str) -> Result<Workload, DatasetError> {
    let value: Value = serde_json::from_str(text).map_err(|e| syntax_error(path, 0, text, &e))?;
    let place = Place {
        file: path.to_owned(),
        line: 0,
    };
    let Value::Object(fields) = value else {
        return Err(DatasetError::Invalid {
            location: place.at("."),
            message: "top-level JSON must be a mapping {\"graph\": ..., \"traces\": [...]}".into(),
        });
    };
    if fields.contains_key("kind") {
        return Err(DatasetError::Invalid {
            location: place.at("kind"),
            message: "a .json workload is one {\"graph\", \"traces\"} document; records with a \
                      'kind' are JSONL: write one record per line in a .jsonl file"
                .into(),
        });
    }
    if let Some(unknown) = fields.keys().find(|k| *k != "graph" && *k != "traces") {
        return Err(DatasetError::Invalid {
            location: place.at(unknown.as_str()),
            message: format!(
                "unknown top-level key '{unknown}'; a single-document graph workload may only \
                 contain ['graph', 'traces']: remove it"
            ),
        });
    }
    if fields.is_empty() {
        return Err(DatasetError::Invalid {
            location: place.at("."),
            message: "top-level mapping contains none of ['graph', 'traces']; write {\"graph\": ..., \"traces\": [...]}".into(),
        });
    }
    let graph = match fields.get("graph") {
        None | Some(Value::Null) => default_graph(path),
        Some(value @ Value::Object(_)) => decode::graph(value, &place)?,
        Some(_) => {
            return Err(DatasetError::Invalid {
                location: place.at("graph"),
                message: "'graph' must be a mapping".into(),
            })
        }
    };
    let mut workload = Workload {
        path: path.to_owned(),
        graph,
        traces: Vec::new(),
    };
    match fields.get("traces") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (index, item) in items.iter().enumerate() {
                workload.traces.push(decode::trace(item, index, &place)?);
            }
        }
        Some(_) => {
            return Err(DatasetError::Invalid {
                location: place.at("traces"),
                message: "'traces' must be a list of trace mappings".into(),
            })
        }
    }
    Ok(workload)
}

/// Refuses two traces with one id, naming both places.
fn unique_trace_ids(workload: &Workload) -> Result<(), DatasetError> {
    let mut seen: HashMap<&str, &super::ir::TraceRecord> = HashMap::new();
    for trace in &workload.traces {
        if let Some(first) = seen.insert(trace.id.as_str(), trace) {
            let mut location = trace.place.at(trace.path("id"));
            location.trace = Some(trace.id.clone());
            return Err(DatasetError::Invalid {
                location,
                message: format!(
                    "duplicate trace id (first at {}); trace ids must be unique",
                    first.place.at(first.path("id"))
                ),
            });
        }
    }
    Ok(())
}
