//! The weka trace format: parsing and validation of `traces.jsonl` files and directories of `*.json`
//! traces into [`ParsedTrace`]s.
//!
//! Everything aiperf's weka loader accepts imports. Errors are what cannot be replayed or what aiperf
//! refuses too: malformed JSON, unknown fields, missing required fields (`id`, `block_size`,
//! `hash_id_scope`, `requests`; `t`, `in`, `out` of a request; `t`, `requests` of a subagent), wrong
//! types, `hash_id_scope` other than `"local"`, `block_size` outside 1..=2^32-1, token counts above
//! 2^32-1, `ttft` on a normal request, and duplicate trace ids. Numbers are read as pydantic's lax mode
//! reads them (integral floats, numeric strings and booleans). Checks that go beyond aiperf's become
//! [`Warning`]s carried by the trace (see [`WarningKind`]): the value is clamped, remapped or dropped so
//! the trace replays. After conversion: hash ids fit in 32 bits, finite `t`, durations finite and
//! non-negative (top-level `t`; nested ones keep a non-finite `t` as NaN). Subagent entries are parsed
//! with the same rules and kept ([`ParsedSubagent`]): the flat replay ignores them, the session-tree
//! builder ([`super::tree`]) uses them.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::{DatasetError, Location};
use super::warnings::{Warning, WarningKind};

mod raw;
use raw::*;

/// Recorded transport of a request (`type` `"n"` or `"s"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// A plain request (`"n"`).
    Normal,
    /// A streamed request (`"s"`).
    Streaming,
}

impl RequestKind {
    /// The weka `type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            RequestKind::Normal => "n",
            RequestKind::Streaming => "s",
        }
    }
}

/// One validated request of a trace (top-level, or nested in a subagent entry).
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRequest {
    /// Position in the `requests` list that holds it: the outer index (subagent entries counted) for a
    /// top-level request, the inner index for a request nested in a subagent entry.
    pub index: u32,
    /// Start, seconds since the trace's clock origin (the root clock for a nested request, unless the corpus is read with the relative basis).
    pub t: f64,
    /// Recorded transport.
    pub kind: RequestKind,
    /// The model the request went to.
    pub model: String,
    /// Input (prompt) tokens.
    pub input: u32,
    /// Output tokens (0 when not recorded, see `no_output_limit`).
    pub output: u32,
    /// The request records no output length (a Mooncake row without `output_length`): `output` is 0
    /// and the request is sent without a token limit, as agentx-harness sends it.
    pub(crate) no_output_limit: bool,
    /// The prompt's hash-block ids, in prompt order.
    pub hash_ids: Vec<u32>,
    /// Content types of the new input (`text`, `tool_result`, ...).
    pub input_types: Vec<String>,
    /// Content types of the reply (`text`, `tool_use`, ...).
    pub output_types: Vec<String>,
    /// The reply's stop reason (`end_turn`, `tool_use`, ...).
    pub stop: String,
    /// Seconds from send to the last token; `None` when missing, negative or not finite.
    pub api_time: Option<f64>,
    /// Seconds between the previous reply and this request; `None` when not recorded or invalid.
    pub think_time: Option<f64>,
    /// Seconds to the first token; `None` when not recorded.
    pub ttft: Option<f64>,
    /// `api_time` as recorded (negative or non-finite values kept; `api_time` drops them): aiperf's
    /// end-to-start delay uses a negative value as is.
    pub(crate) recorded_api_time: Option<f64>,
    /// `think_time` as recorded (negative or non-finite values kept).
    pub(crate) recorded_think_time: Option<f64>,
}

/// One validated `type: "subagent"` entry with its nested requests.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedSubagent {
    /// Outer index of the entry in the trace's `requests`.
    pub index: u32,
    /// The spawn marker's `t` (seconds, root clock).
    pub t: f64,
    /// `agent_id`; aiperf requires it, this parser does not (the replay of top-level requests never
    /// needs it).
    pub agent_id: Option<String>,
    /// `duration_ms` as recorded (negative or non-finite values kept).
    pub duration_ms: Option<f64>,
    /// Tool-definition tokens of the subagent's prompt prefix.
    pub tool_tokens: u32,
    /// System-prompt tokens of the subagent's prompt prefix.
    pub system_tokens: u32,
    /// The nested requests in file order (`index` = inner index); their `t` is as recorded (a
    /// non-finite `t` is NaN, with an [`WarningKind::InvalidTime`] warning).
    pub requests: Vec<ParsedRequest>,
    /// Which top-level request waits for the subagent (inferred from times for weka and TraceLab; a
    /// Dynamo trace names it).
    pub(crate) join: SubagentJoin,
}

/// Which top-level request of its trace waits for a subagent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SubagentJoin {
    /// The first top-level request after the entry that starts once the subagent ended (aiperf's
    /// rule, the session-tree builder's).
    Inferred,
    /// None: the subagent runs in the background.
    Background,
    /// The top-level request at this outer index.
    At(u32),
}

/// One validated trace: top-level requests, and the subagent entries (which the flat replay ignores).
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedTrace {
    /// The trace's `id`.
    pub id: String,
    /// The models the trace declares, in file order.
    pub models: Vec<String>,
    /// Tokens per hash block.
    pub block_size: u32,
    /// Tool-definition tokens of the root prompt prefix.
    pub tool_tokens: u32,
    /// System-prompt tokens of the root prompt prefix.
    pub system_tokens: u32,
    /// The top-level requests in file order (subagent entries excluded).
    pub requests: Vec<ParsedRequest>,
    /// Number of subagent entries.
    pub subagents: u32,
    /// The largest `in + max(1, out)` over the requests nested in subagent entries (0 without any): the
    /// context those requests ask for, which trace selection by peak context counts (subagent requests
    /// are never capped by an output limit).
    pub(crate) subagent_peak: u64,
    /// The subagent entries in file order.
    pub subagent_entries: Vec<ParsedSubagent>,
    /// Where the trace starts in its source.
    pub location: Location,
    /// What the trace does beyond this importer's checks that aiperf accepts.
    pub warnings: Vec<Warning>,
    /// The trace's streams are given (a Dynamo session is one stream, its subagents are named
    /// sessions): the session-tree builder splits no chains off it.
    pub(crate) explicit_sessions: bool,
}

/// The files of a local corpus, in the order their traces are read.
#[derive(Debug, Clone, PartialEq)]
pub enum SourceFiles {
    /// One trace per line.
    Jsonl(PathBuf),
    /// One trace per `*.json` file, read in file-name order.
    Dir {
        /// The directory.
        dir: PathBuf,
        /// Its `*.json` files, sorted by name.
        files: Vec<PathBuf>,
    },
}

impl SourceFiles {
    /// Classifies a path: a directory lists its `*.json` files (sorted); anything else is JSONL.
    pub fn from_path(path: &Path) -> Result<Self, DatasetError> {
        let meta = std::fs::metadata(path).map_err(|e| DatasetError::io("read", path, e))?;
        if !meta.is_dir() {
            return Ok(SourceFiles::Jsonl(path.to_owned()));
        }
        // The directory is opened as a capability: its entries are opened through it, so a
        // symlink that leads outside the directory cannot be followed and is refused by name.
        let dir = cap_std::fs::Dir::open_ambient_dir(path, cap_std::ambient_authority())
            .map_err(|e| DatasetError::io("open", path, e))?;
        let mut files = Vec::new();
        for entry in dir
            .entries()
            .map_err(|e| DatasetError::io("list", path, e))?
        {
            let entry = entry.map_err(|e| DatasetError::io("list", path, e))?;
            let name = entry.file_name();
            let file_path = path.join(&name);
            if file_path.extension().is_none_or(|x| x != "json") {
                continue;
            }
            match dir.metadata(&name) {
                Ok(m) if m.is_file() => files.push(file_path),
                Ok(_) => {}
                Err(e) => {
                    let link = std::fs::symlink_metadata(&file_path)
                        .is_ok_and(|m| m.file_type().is_symlink());
                    if link {
                        let target = std::fs::read_link(&file_path).unwrap_or_default();
                        return Err(DatasetError::SymlinkOutside {
                            entry: file_path,
                            dir: path.to_owned(),
                            target,
                        });
                    }
                    return Err(DatasetError::io("stat", &file_path, e));
                }
            }
        }
        files.sort();
        if files.is_empty() {
            return Err(DatasetError::Empty {
                path: path.to_owned(),
            });
        }
        Ok(SourceFiles::Dir {
            dir: path.to_owned(),
            files,
        })
    }

    /// The path a user named.
    pub fn path(&self) -> &Path {
        match self {
            SourceFiles::Jsonl(p) => p,
            SourceFiles::Dir { dir, .. } => dir,
        }
    }
}

/// Context for building errors and warnings about one trace.
struct Ctx<'a> {
    base: &'a Location,
    trace: &'a str,
    warnings: RefCell<Vec<Warning>>,
}

impl Ctx<'_> {
    fn located(&self, field: String) -> Location {
        let mut location = self.base.clone();
        location.trace = Some(self.trace.to_owned());
        location.field = Some(field);
        location
    }

    fn err(&self, field: String, message: impl Into<String>) -> DatasetError {
        DatasetError::Invalid {
            location: self.located(field),
            message: message.into(),
        }
    }

    fn warn(&self, kind: WarningKind, field: String, message: impl Into<String>) {
        self.warnings.borrow_mut().push(Warning {
            kind,
            location: self.located(field),
            message: message.into(),
        });
    }

    /// Warns when a number was read through a lax coercion.
    fn coerced(&self, path: &str, name: &str, coerced: bool) {
        if coerced {
            self.warn(
                WarningKind::CoercedNumber,
                join(path, name),
                format!("`{name}` is not a plain JSON number (a string, a boolean or an integral float); read as its value"),
            );
        }
    }

    /// A token count: negative reads as 0 (a warning); above 2^32-1 cannot be replayed.
    fn count(&self, path: &str, name: &str, value: Int) -> Result<u32, DatasetError> {
        self.coerced(path, name, value.coerced);
        if value.v < 0 {
            self.warn(
                WarningKind::NegativeTokens,
                join(path, name),
                format!("`{name}` is {}, a negative token count; read as 0", value.v),
            );
            return Ok(0);
        }
        u32::try_from(value.v).map_err(|_| {
            self.err(
                join(path, name),
                format!("{} tokens is above 2^32-1 and cannot be replayed", value.v),
            )
        })
    }

    /// A duration in seconds: negative or not finite is dropped (a warning).
    fn duration(&self, path: &str, name: &str, value: Option<Float>) -> Option<f64> {
        let value = value?;
        self.coerced(path, name, value.coerced);
        if value.v.is_finite() && value.v >= 0.0 {
            return Some(value.v);
        }
        self.warn(
            WarningKind::InvalidDuration,
            join(path, name),
            format!(
                "`{name}` is {}, not a finite number >= 0 (seconds); dropped",
                value.v
            ),
        );
        None
    }

    /// A field agentx-harness's weka schema requires that `what` lacks.
    fn harness_requires(&self, path: &str, name: &str, what: &str) {
        self.warn(
            WarningKind::HarnessSchema,
            join(path, name),
            format!(
                "missing field `{name}`, which agentx-harness's weka schema requires on {what} (it \
                 refuses the trace); add it"
            ),
        );
    }

    /// A start time `t`: returns NaN for a non-finite value (the caller substitutes the previous `t`).
    fn time(&self, path: &str, value: Float) -> f64 {
        self.coerced(path, "t", value.coerced);
        if !value.v.is_finite() {
            self.warn(
                WarningKind::InvalidTime,
                join(path, "t"),
                format!(
                    "`t` is {}, not finite; read as the previous request's start",
                    value.v
                ),
            );
            return f64::NAN;
        }
        if value.v < 0.0 {
            self.warn(
                WarningKind::InvalidTime,
                join(path, "t"),
                format!("`t` is {}, before the trace's start", value.v),
            );
        }
        value.v
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_owned()
    } else {
        format!("{path}.{name}")
    }
}

fn required<T>(
    ctx: &Ctx<'_>,
    path: &str,
    name: &str,
    value: Option<T>,
    kind: &str,
) -> Result<T, DatasetError> {
    value.ok_or_else(|| {
        ctx.err(
            format!("{path}.{name}"),
            format!("missing field `{name}`, required on a request of type {kind:?}"),
        )
    })
}

/// Hash ids outside 0..=2^32-1 of one request: (position, value).
type WideIds = Vec<(u32, i128)>;

/// Validates one n/s entry (top-level or nested in a subagent) and converts it. A non-finite `t` is
/// returned as NaN; out-of-range hash ids hold placeholders and are returned to be remapped.
fn convert_request(
    ctx: &Ctx<'_>,
    path: &str,
    index: usize,
    entry: RawEntry,
) -> Result<(ParsedRequest, WideIds), DatasetError> {
    let kind = match entry.kind.as_str() {
        "n" => RequestKind::Normal,
        "s" => RequestKind::Streaming,
        other => unreachable!("caller dispatches on type, got {other}"),
    };
    if let Some(field) = entry.subagent_fields().next() {
        return Err(ctx.err(
            format!("{path}.{field}"),
            format!("field `{field}` belongs to subagent entries and is not allowed on a request of type {:?}", entry.kind),
        ));
    }
    if kind == RequestKind::Normal && entry.ttft.is_some() {
        return Err(ctx.err(
            format!("{path}.ttft"),
            "`ttft` is only recorded on streaming requests (type \"s\")",
        ));
    }
    if entry.model.is_none() {
        ctx.harness_requires(path, "model", "a request");
    }
    let start = ctx.time(path, required(ctx, path, "t", entry.t, &entry.kind)?);
    let raw_in = required(ctx, path, "in", entry.input, &entry.kind)?;
    let input = ctx.count(path, "in", raw_in)?;
    if raw_in.v == 0 {
        ctx.warn(
            WarningKind::ZeroInput,
            join(path, "in"),
            "`in` is 0: the request is replayed with its hash-id blocks only",
        );
    }
    let output = ctx.count(
        path,
        "out",
        required(ctx, path, "out", entry.output, &entry.kind)?,
    )?;
    let hash_ids = entry.hash_ids.unwrap_or_default();
    ctx.coerced(path, "hash_ids", hash_ids.coerced);
    if let Some(&(position, id_value)) = hash_ids.wide.first() {
        let more = match hash_ids.wide.len() - 1 {
            0 => String::new(),
            n => format!(" (and {n} more in this request)"),
        };
        ctx.warn(
            WarningKind::HashIdOutOfRange,
            format!("{path}.hash_ids[{position}]"),
            format!("hash id {id_value} is outside 0..=2^32-1{more}; remapped to a free 32-bit id of this trace"),
        );
    }
    let recorded_think_time = entry.think_time.map(|id_value| id_value.v);
    let recorded_api_time = entry.api_time.map(|id_value| id_value.v);
    let think_time = ctx.duration(path, "think_time", entry.think_time);
    let api_time = ctx.duration(path, "api_time", entry.api_time);
    let ttft = ctx.duration(path, "ttft", entry.ttft);
    Ok((
        ParsedRequest {
            index: index as u32,
            t: start,
            kind,
            model: entry.model.unwrap_or_default(),
            input,
            output,
            no_output_limit: false,
            hash_ids: hash_ids.ids,
            input_types: entry.input_types.unwrap_or_default(),
            output_types: entry.output_types.unwrap_or_default(),
            stop: entry.stop.unwrap_or_default(),
            api_time,
            think_time,
            ttft,
            recorded_api_time,
            recorded_think_time,
        },
        hash_ids.wide,
    ))
}

fn bad_type(ctx: &Ctx<'_>, path: &str, kind: &str, allowed: &str) -> DatasetError {
    ctx.err(
        format!("{path}.type"),
        format!("type {kind:?} is not one of {allowed}"),
    )
}

/// A validated subagent entry, the peak context of its requests (`in + max(1, out)`), and the
/// out-of-range hash ids of its requests (inner position, ids) to remap with the trace's.
struct CheckedSubagent {
    entry: ParsedSubagent,
    peak: u64,
    wide: Vec<(usize, WideIds)>,
}

/// A subagent's declared token count: read as aiperf's integer, clamped into 0..=2^32-1 (only the
/// session-tree builder uses it, to size a turn-0 system segment).
fn clamp_count(value: Option<Int>) -> u32 {
    value.map_or(0, |v| u32::try_from(v.v.max(0)).unwrap_or(u32::MAX))
}

/// Validates a subagent entry (its nested requests included).
fn check_subagent(
    ctx: &Ctx<'_>,
    path: &str,
    index: usize,
    entry: RawEntry,
) -> Result<CheckedSubagent, DatasetError> {
    if let Some(field) = entry.request_fields().next() {
        return Err(ctx.err(
            format!("{path}.{field}"),
            format!("field `{field}` belongs to requests and is not allowed on a subagent entry"),
        ));
    }
    let start = entry.t.ok_or_else(|| {
        ctx.err(
            format!("{path}.t"),
            "missing field `t`, required on a subagent entry",
        )
    })?;
    let marker_t = ctx.time(path, start);
    for (name, present) in [
        ("subagent_type", entry.subagent_type.is_some()),
        ("status", entry.status.is_some()),
        ("models", entry.models.is_some()),
    ] {
        if !present {
            ctx.harness_requires(path, name, "a subagent entry");
        }
    }
    if let Some(duration) = entry
        .duration_ms
        .filter(|duration| duration.v.is_finite() && duration.v.fract() != 0.0)
    {
        ctx.warn(
            WarningKind::HarnessSchema,
            join(path, "duration_ms"),
            format!(
                "`duration_ms` is {}, not a whole number of milliseconds, which agentx-harness's weka \
                 schema refuses (it refuses the trace); round it",
                duration.v
            ),
        );
    }
    let duration_ms = entry.duration_ms.map(|v| v.v);
    ctx.duration(path, "duration_ms", entry.duration_ms);
    for (name, v) in [
        ("total_tokens", entry.total_tokens),
        ("tool_use_count", entry.tool_use_count),
        ("tool_tokens", entry.tool_tokens),
        ("system_tokens", entry.system_tokens),
    ] {
        ctx.coerced(path, name, v.is_some_and(|v| v.coerced));
    }
    let inner = entry.requests.ok_or_else(|| {
        ctx.err(
            format!("{path}.requests"),
            "missing field `requests`, required on a subagent entry",
        )
    })?;
    let mut peak = 0u64;
    let mut requests = Vec::with_capacity(inner.len());
    let mut wide = Vec::new();
    for (j, request) in inner.into_iter().enumerate() {
        let req_path = format!("{path}.requests[{j}]");
        match request.kind.as_str() {
            "n" | "s" => {
                let (request, warning) = convert_request(ctx, &req_path, j, request)?;
                peak = peak.max(u64::from(request.input) + u64::from(request.output.max(1)));
                if !warning.is_empty() {
                    wide.push((requests.len(), warning));
                }
                requests.push(request);
            }
            other => {
                return Err(bad_type(
                    ctx,
                    &req_path,
                    other,
                    "\"n\", \"s\" (subagents do not nest)",
                ))
            }
        }
    }
    Ok(CheckedSubagent {
        entry: ParsedSubagent {
            index: index as u32,
            t: marker_t,
            agent_id: entry.agent_id,
            duration_ms,
            tool_tokens: clamp_count(entry.tool_tokens),
            system_tokens: clamp_count(entry.system_tokens),
            requests,
            join: SubagentJoin::Inferred,
        },
        peak,
        wide,
    })
}

/// Replaces the placeholders of out-of-range hash ids with ids no in-range id of the trace uses,
/// counting down from 2^32-1, one per distinct value: equal ids stay equal, different ones different.
/// `requests` are all requests of the trace (top-level first, then nested ones); `wide` indexes them.
fn remap_wide(mut requests: Vec<&mut ParsedRequest>, wide: &[(usize, WideIds)]) {
    let mut used: HashSet<u32> = HashSet::new();
    for (i, r) in requests.iter().enumerate() {
        let wide_ids = wide
            .iter()
            .find(|(k, _)| *k == i)
            .map(|(_, wide_ids)| wide_ids);
        for (j, &new_id) in r.hash_ids.iter().enumerate() {
            if !wide_ids.is_some_and(|wide_ids| wide_ids.iter().any(|&(p, _)| p as usize == j)) {
                used.insert(new_id);
            }
        }
    }
    let mut map: HashMap<i128, u32> = HashMap::new();
    let mut next = u32::MAX;
    for (i, wide_ids) in wide {
        for &(p, v) in wide_ids {
            let new_id = *map.entry(v).or_insert_with(|| {
                while used.contains(&next) {
                    next = next.wrapping_sub(1);
                }
                used.insert(next);
                next
            });
            requests[*i].hash_ids[p as usize] = new_id;
        }
    }
}

fn convert_trace(raw: RawTrace, base: &Location) -> Result<ParsedTrace, DatasetError> {
    let ctx = Ctx {
        base,
        trace: &raw.id,
        warnings: RefCell::new(Vec::new()),
    };
    if raw.id.is_empty() {
        ctx.warn(
            WarningKind::EmptyId,
            "id".into(),
            "`id` is the empty string",
        );
    }
    if raw.models.is_none() {
        ctx.harness_requires("", "models", "a trace");
    }
    if raw.hash_id_scope != "local" {
        return Err(ctx.err(
            "hash_id_scope".into(),
            format!(
                "{:?} is not supported; only \"local\" (hash ids numbered per trace) can be replayed",
                raw.hash_id_scope
            ),
        ));
    }
    ctx.coerced("", "block_size", raw.block_size.coerced);
    let block_size = u32::try_from(raw.block_size.v)
        .ok()
        .filter(|&b| b > 0)
        .ok_or_else(|| {
            ctx.err(
                "block_size".into(),
                format!(
                    "must be in 1..=2^32-1 (tokens per hash block, 64 in public corpora), got {}",
                    raw.block_size.v
                ),
            )
        })?;
    let zero = Int {
        v: 0,
        coerced: false,
    };
    let tool_tokens = ctx.count("", "tool_tokens", raw.tool_tokens.unwrap_or(zero))?;
    let system_tokens = ctx.count("", "system_tokens", raw.system_tokens.unwrap_or(zero))?;
    let mut requests = Vec::with_capacity(raw.requests.len());
    let mut wide: Vec<(usize, WideIds)> = Vec::new();
    let mut subagents = 0u32;
    let mut subagent_peak = 0u64;
    let mut subagent_entries: Vec<ParsedSubagent> = Vec::new();
    let mut inner_wide: Vec<(usize, usize, WideIds)> = Vec::new();
    let mut last_t: Option<f64> = None;
    for (i, e) in raw.requests.into_iter().enumerate() {
        let path = format!("requests[{i}]");
        match e.kind.as_str() {
            "n" | "s" => {
                let (mut request, warning) = convert_request(&ctx, &path, i, e)?;
                if request.t.is_nan() {
                    request.t = last_t.unwrap_or(0.0);
                } else if let Some(last) = last_t.filter(|&l| request.t < l) {
                    ctx.warn(
                        WarningKind::DecreasingTime,
                        format!("{path}.t"),
                        format!(
                            "request start times decrease: {} after {last}; replayed without a wait",
                            request.t
                        ),
                    );
                }
                last_t = Some(request.t);
                if !warning.is_empty() {
                    wide.push((requests.len(), warning));
                }
                requests.push(request);
            }
            "subagent" => {
                let checked = check_subagent(&ctx, &path, i, e)?;
                subagent_peak = subagent_peak.max(checked.peak);
                for (j, warning) in checked.wide {
                    inner_wide.push((subagent_entries.len(), j, warning));
                }
                subagent_entries.push(checked.entry);
                subagents += 1;
            }
            other => return Err(bad_type(&ctx, &path, other, "\"n\", \"s\", \"subagent\"")),
        }
    }
    if !wide.is_empty() || !inner_wide.is_empty() {
        // Nested requests follow the top-level ones in the list remapped (hash ids are per trace).
        let mut offsets = Vec::with_capacity(subagent_entries.len());
        let mut count = requests.len();
        for s in &subagent_entries {
            offsets.push(count);
            count += s.requests.len();
        }
        for (s, j, warning) in inner_wide {
            wide.push((offsets[s] + j, warning));
        }
        let all: Vec<&mut ParsedRequest> = requests
            .iter_mut()
            .chain(
                subagent_entries
                    .iter_mut()
                    .flat_map(|s| s.requests.iter_mut()),
            )
            .collect();
        remap_wide(all, &wide);
    }
    let warnings = ctx.warnings.into_inner();
    let mut trace = ParsedTrace {
        id: raw.id,
        models: raw.models.unwrap_or_default(),
        block_size,
        tool_tokens,
        system_tokens,
        requests,
        subagents,
        subagent_peak,
        subagent_entries,
        location: base.clone(),
        warnings,
        explicit_sessions: false,
    };
    for short in short_prefixes(&trace, block_size) {
        let warning = Warning {
            kind: WarningKind::ShortFirstRequest,
            location: short.location(&trace),
            message: format!(
                "{}; the system message is cut to the request's blocks (agentx-harness refuses the trace)",
                short.describe()
            ),
        };
        trace.warnings.push(warning);
    }
    Ok(trace)
}

/// A stream's first request whose hash ids are fewer than the blocks of its tools+system prefix: what
/// agentx-harness refuses ("turn-0 system prefix requires N hash blocks but only M were recorded",
/// `dataset/loader/weka_synth_buf.py` `init_turn_0`).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ShortPrefix {
    /// The request's path in the trace (`requests[0].hash_ids`, `requests[3].requests[0].hash_ids`).
    pub field: String,
    /// tool_tokens + system_tokens of the trace or subagent entry.
    pub prefix_tokens: u64,
    pub block_size: u32,
    /// ceil(prefix_tokens / block_size).
    pub blocks: u64,
    /// The hash ids the request records.
    pub recorded: u64,
}

impl ShortPrefix {
    /// Where it is: the trace's location with the field.
    pub(crate) fn location(&self, trace: &ParsedTrace) -> Location {
        Location {
            trace: Some(trace.id.clone()),
            field: Some(self.field.clone()),
            ..trace.location.clone()
        }
    }

    /// What is short, in the harness's terms.
    pub(crate) fn describe(&self) -> String {
        format!(
            "the tools+system prefix ({} tokens) needs {} hash blocks of {} tokens, but only {} were \
             recorded",
            self.prefix_tokens, self.blocks, self.block_size, self.recorded
        )
    }

    /// The smallest block size at which the recorded hash ids hold the prefix (`None`: none does,
    /// the request records no hash id).
    pub(crate) fn smallest_fitting_block_size(&self) -> Option<u64> {
        (self.recorded > 0).then(|| self.prefix_tokens.div_ceil(self.recorded).max(1))
    }
}

/// The first requests of `trace`'s streams that the harness lays out with a tools+system prefix, laid
/// out in `block_size`-token blocks, whose hash ids cannot hold that prefix: the first top-level
/// request (the trace's tool/system tokens) and the first request of every subagent entry listed after
/// a top-level request (the entry's own; an entry before any is never replayed).
pub(crate) fn short_prefixes(trace: &ParsedTrace, block_size: u32) -> Vec<ShortPrefix> {
    let check = |field: String, tool: u32, system: u32, first: &ParsedRequest| {
        let prefix_tokens = u64::from(tool) + u64::from(system);
        let blocks = prefix_tokens.div_ceil(u64::from(block_size));
        let recorded = first.hash_ids.len() as u64;
        (blocks > recorded).then_some(ShortPrefix {
            field,
            prefix_tokens,
            block_size,
            blocks,
            recorded,
        })
    };
    let mut out = Vec::new();
    let Some(first) = trace.requests.first() else {
        return out;
    };
    out.extend(check(
        format!("requests[{}].hash_ids", first.index),
        trace.tool_tokens,
        trace.system_tokens,
        first,
    ));
    for s in trace
        .subagent_entries
        .iter()
        .filter(|s| s.index > first.index)
    {
        if let Some(first) = s.requests.first() {
            out.extend(check(
                format!("requests[{}].requests[{}].hash_ids", s.index, first.index),
                s.tool_tokens,
                s.system_tokens,
                first,
            ));
        }
    }
    out
}

/// `trace` laid out in `block_size`-token blocks whatever it declares (`--trace-block-size`): an error
/// naming the trace when a stream's first request records too few hash ids for its tools+system
/// prefix at that size, as the harness refuses it.
pub(crate) fn relayout(
    mut trace: ParsedTrace,
    block_size: u32,
) -> Result<ParsedTrace, DatasetError> {
    if let Some(short) = short_prefixes(&trace, block_size).into_iter().next() {
        let fix = match short.smallest_fitting_block_size() {
            Some(n) => format!("give a --trace-block-size of at least {n}, or drop the flag"),
            None => "drop the flag (the request records no hash id, so no block size holds the \
                     prefix)"
                .to_owned(),
        };
        return Err(DatasetError::Invalid {
            location: short.location(&trace),
            message: format!(
                "--trace-block-size {block_size}: {}, so agentx-harness would refuse this trace; \
                 {fix}",
                short.describe()
            ),
        });
    }
    trace.block_size = block_size;
    // The warnings of the declared layout no longer apply.
    trace
        .warnings
        .retain(|w| w.kind != WarningKind::ShortFirstRequest);
    Ok(trace)
}

/// Strips serde_json's " at line L column C" suffix; the location is reported separately.
fn serde_message(error: &serde_json::Error) -> String {
    let text = error.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_owned(),
        None => text,
    }
}

/// Best effort: the `id` of a trace that failed to parse, for the error message.
fn sniff_id(text: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct IdOnly {
        id: String,
    }
    serde_json::from_str::<IdOnly>(text).ok().map(|x| x.id)
}

/// Builds the located error of a trace that failed to parse.
fn parse_error(text: &str, base: &Location, plain: serde_json::Error) -> DatasetError {
    let deserializer = &mut serde_json::Deserializer::from_str(text);
    let (path, inner) = match serde_path_to_error::deserialize::<_, RawTrace>(deserializer) {
        Err(e) => (e.path().to_string(), e.into_inner()),
        // The object itself parsed: the error is text after it.
        Ok(_) => (".".to_owned(), plain),
    };
    let mut location = base.clone();
    // JSONL lines are one line each: keep the file line and report the column; a pretty-printed *.json
    // file reports serde's own line.
    if inner.line() > 1 || base.line == 0 {
        location.line = base.line.max(1) + inner.line() as u64 - 1;
    }
    location.column = inner.column() as u64;
    location.trace = sniff_id(text);
    location.field = (path != ".").then_some(path);
    let hint = if inner.is_syntax() || inner.is_eof() {
        "; each line of a traces.jsonl must be one complete JSON trace object"
    } else {
        ""
    };
    DatasetError::Invalid {
        location,
        message: format!("{}{hint}", serde_message(&inner)),
    }
}

/// Parses and validates one trace object from `text`; `base` locates `text` in its file (line of the
/// first character, 1-based).
pub fn parse_trace(text: &str, base: &Location) -> Result<ParsedTrace, DatasetError> {
    // The fast path parses without tracking paths; only a failing trace is parsed again with
    // serde_path_to_error to say which field broke.
    let raw: RawTrace = match serde_json::from_str(text) {
        Ok(r) => r,
        Err(plain) => return Err(parse_error(text, base, plain)),
    };
    convert_trace(raw, base)
}

/// Reads traces in source order and hands each to `on_trace`; stops after `limit` traces if given.
/// Returns the number of traces read. Duplicate trace ids are an error naming both places.
pub fn for_each_trace(
    source: &SourceFiles,
    limit: Option<usize>,
    mut on_trace: impl FnMut(ParsedTrace) -> Result<(), DatasetError>,
) -> Result<usize, DatasetError> {
    if limit == Some(0) {
        return Ok(0);
    }
    let mut delivered = 0usize;
    scan_traces(source, |t| {
        on_trace(t)?;
        delivered += 1;
        Ok(if limit.is_some_and(|l| delivered >= l) {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    })
}

/// Reads traces in source order and hands each to `on_trace` until it answers `Break` (nothing
/// after that trace is read). Returns the number of traces read. Duplicate trace ids are an error
/// naming both places; a source without any trace is [`DatasetError::Empty`].
pub(crate) fn scan_traces(
    source: &SourceFiles,
    mut on_trace: impl FnMut(ParsedTrace) -> Result<ControlFlow<()>, DatasetError>,
) -> Result<usize, DatasetError> {
    let mut seen: HashMap<String, Location> = HashMap::new();
    let mut count = 0usize;
    let mut done = false;
    let mut deliver = |trace: ParsedTrace, count: &mut usize| -> Result<bool, DatasetError> {
        if let Some(first) = seen.get(&trace.id) {
            let mut location = trace.location.clone();
            location.trace = Some(trace.id.clone());
            location.field = Some("id".into());
            return Err(DatasetError::Invalid {
                location,
                message: format!(
                    "duplicate trace id (first at {}:{}); trace ids must be unique",
                    first.file.display(),
                    first.line
                ),
            });
        }
        seen.insert(trace.id.clone(), trace.location.clone());
        *count += 1;
        Ok(on_trace(trace)?.is_break())
    };
    match source {
        SourceFiles::Jsonl(path) => {
            let file = File::open(path).map_err(|e| DatasetError::io("open", path, e))?;
            let mut reader = BufReader::with_capacity(1 << 20, file);
            let mut line = String::new();
            let mut lineno = 0u64;
            while !done {
                line.clear();
                let bytes_read = reader
                    .read_line(&mut line)
                    .map_err(|e| DatasetError::io("read", path, e))?;
                if bytes_read == 0 {
                    break;
                }
                lineno += 1;
                let text = line.trim();
                if text.is_empty() {
                    continue;
                }
                let base = Location {
                    file: path.clone(),
                    line: lineno,
                    ..Location::default()
                };
                let trace = parse_trace(text, &base)?;
                done = deliver(trace, &mut count)?;
            }
            if count == 0 {
                return Err(DatasetError::Empty { path: path.clone() });
            }
        }
        SourceFiles::Dir { files, .. } => {
            let mut buf = String::new();
            for path in files {
                if done {
                    break;
                }
                buf.clear();
                File::open(path)
                    .and_then(|mut f| f.read_to_string(&mut buf))
                    .map_err(|e| DatasetError::io("read", path, e))?;
                let base = Location {
                    file: path.clone(),
                    line: 1,
                    ..Location::default()
                };
                let trace = parse_trace(&buf, &base)?;
                done = deliver(trace, &mut count)?;
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc() -> Location {
        Location {
            file: "x.jsonl".into(),
            line: 3,
            ..Location::default()
        }
    }

    const OK: &str = r#"{"id":"a","models":["m"],"block_size":4,"hash_id_scope":"local","tool_tokens":3,"system_tokens":2,
      "requests":[{"t":0,"type":"n","model":"m","in":9,"out":2,"hash_ids":[1,2],"think_time":null},
                  {"t":1.5,"type":"subagent","agent_id":"agent_001","subagent_type":"Explore","status":"completed","models":["m"],
                   "requests":[{"t":0,"type":"s","model":"m","in":3,"out":1,"hash_ids":[7],"ttft":0.1}]},
                  {"t":2,"type":"s","model":"m","in":12,"out":0,"hash_ids":[1,2,3],"ttft":0.2,"stop":"end_turn"}],
      "totals":{"subagent_count":1}}"#;

    #[test]
    fn parses_requests_and_counts_subagents() {
        let t = parse_trace(&OK.replace('\n', ""), &loc()).unwrap();
        assert_eq!(t.id, "a");
        assert_eq!(t.requests.len(), 2);
        assert_eq!(t.subagents, 1);
        assert_eq!(t.requests[1].kind, RequestKind::Streaming);
        assert_eq!(t.requests[1].hash_ids, vec![1, 2, 3]);
        assert_eq!(t.requests[0].think_time, None);
    }

    fn err_of(text: &str) -> String {
        parse_trace(&text.replace('\n', ""), &loc())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn errors_name_field_and_trace() {
        let e = err_of(&OK.replace("\"out\":2", "\"out\":2,\"bogus\":1"));
        assert!(
            e.contains("x.jsonl:3")
                && e.contains("trace \"a\"")
                && e.contains("requests[0]")
                && e.contains("bogus"),
            "{e}"
        );
        let e = err_of(&OK.replace("\"local\"", "\"global\""));
        assert!(
            e.contains("hash_id_scope") && e.contains("\"global\""),
            "{e}"
        );
        let e = err_of(&OK.replace("\"in\":12", "\"in\":[12]"));
        assert!(
            e.contains("requests[2].in") && e.contains("invalid type"),
            "{e}"
        );
        let e = err_of(&OK.replace("\"in\":12", "\"in\":12.5"));
        assert!(e.contains("requests[2].in") && e.contains("integer"), "{e}");
        let e = err_of(&OK.replace("\"in\":12", "\"in\":\"12x\""));
        assert!(e.contains("requests[2].in") && e.contains("integer"), "{e}");
        let e = err_of(&OK.replace("\"in\":12,", ""));
        assert!(e.contains("requests[2].in") && e.contains("missing"), "{e}");
        let e = err_of(&OK.replace("\"in\":12", "\"in\":4294967296"));
        assert!(e.contains("requests[2].in") && e.contains("2^32-1"), "{e}");
        let e = err_of(&OK.replace("\"block_size\":4", "\"block_size\":0"));
        assert!(e.contains("block_size"), "{e}");
        let e = err_of(&OK.replace("\"type\":\"n\"", "\"type\":\"x\""));
        assert!(e.contains("requests[0].type"), "{e}");
        let e = err_of(&OK.replace("\"think_time\":null", "\"ttft\":0.1"));
        assert!(e.contains("requests[0].ttft"), "{e}");
        let e = err_of(&OK.replace("\"ttft\":0.1", "\"ttft\":0.1,\"agent_id\":\"x\""));
        assert!(e.contains("requests[1].requests[0].agent_id"), "{e}");
        let e = err_of(&OK[..40]);
        assert!(e.contains("x.jsonl:3:"), "{e}");
    }

    fn warned(text: &str) -> ParsedTrace {
        parse_trace(&text.replace('\n', ""), &loc()).unwrap()
    }

    fn kinds(t: &ParsedTrace) -> Vec<&'static str> {
        t.warnings.iter().map(|w| w.kind.as_str()).collect()
    }

    #[test]
    fn aiperf_accepted_values_warn_and_replay() {
        assert!(warned(OK).warnings.is_empty());
        let t = warned(&OK.replace("{\"t\":0,\"type\":\"n\"", "{\"t\":3,\"type\":\"n\""));
        assert_eq!(kinds(&t), ["decreasing_time"]);
        assert!(t.warnings[0]
            .to_string()
            .starts_with("x.jsonl:3: trace \"a\": requests[2].t:"));
        let t = warned(&OK.replace("\"think_time\":null", "\"think_time\":-1"));
        assert_eq!(kinds(&t), ["invalid_duration"]);
        assert_eq!(t.requests[0].think_time, None);
        let t = warned(&OK.replace("\"hash_ids\":[1,2]", "\"hash_ids\":[1]"));
        assert_eq!(kinds(&t), ["short_first_request"]);
        let t = warned(&OK.replace("\"in\":9", "\"in\":0"));
        assert_eq!(kinds(&t), ["zero_input"]);
        assert_eq!(t.requests[0].input, 0);
        let t = warned(&OK.replace("\"out\":2", "\"out\":-2"));
        assert_eq!(kinds(&t), ["negative_tokens"]);
        assert_eq!(t.requests[0].output, 0);
        let t = warned(
            &OK.replace("\"in\":9", "\"in\":\" 9 \"")
                .replace("\"out\":2", "\"out\":2.0"),
        );
        assert_eq!(kinds(&t), ["coerced_number", "coerced_number"]);
        assert_eq!((t.requests[0].input, t.requests[0].output), (9, 2));
        let t = warned(&OK.replace("\"id\":\"a\"", "\"id\":\"\""));
        assert_eq!(kinds(&t), ["empty_id"]);
        let t = warned(&OK.replace("{\"t\":2,", "{\"t\":\"nan\","));
        assert_eq!(kinds(&t), ["coerced_number", "invalid_time"]);
        assert_eq!(t.requests[1].t, 0.0);
        // Missing optional fields (hash_ids, model) and a request after a subagent entry.
        let t = warned(&OK.replace(",\"hash_ids\":[1,2,3]", ""));
        assert!(t.requests[1].hash_ids.is_empty() && t.warnings.is_empty());
    }

    #[test]
    fn out_of_range_hash_ids_are_remapped_keeping_equality() {
        let t = warned(&OK.replace(
            "\"hash_ids\":[1,2,3]",
            "\"hash_ids\":[1,2,-1,4294967296,4294967295,4294967296]",
        ));
        assert_eq!(kinds(&t), ["hash_id_out_of_range"]);
        assert!(t.warnings[0].location.field.as_deref() == Some("requests[2].hash_ids[2]"));
        let ids = &t.requests[1].hash_ids;
        assert_eq!(&ids[..2], &[1, 2]);
        assert_eq!(ids[4], u32::MAX);
        assert_eq!(ids[3], ids[5]);
        let distinct: HashSet<u32> = ids.iter().copied().collect();
        assert_eq!(distinct.len(), 5, "{ids:?}");
    }

    #[test]
    fn what_the_harness_schema_requires_is_a_warning_naming_the_field() {
        let t = warned(
            &OK.replace("\"models\":[\"m\"],\"block_size\"", "\"block_size\"")
                .replace("\"status\":\"completed\",", "\"duration_ms\":1.5,")
                .replace(
                    "{\"t\":2,\"type\":\"s\",\"model\":\"m\",",
                    "{\"t\":2,\"type\":\"s\",",
                ),
        );
        let fields: Vec<&str> = t
            .warnings
            .iter()
            .filter(|w| w.kind == WarningKind::HarnessSchema)
            .map(|w| w.location.field.as_deref().unwrap())
            .collect();
        assert_eq!(
            fields,
            [
                "models",
                "requests[1].status",
                "requests[1].duration_ms",
                "requests[2].model"
            ]
        );
        assert!(
            t.warnings[0].message.contains("add it"),
            "{}",
            t.warnings[0]
        );
        assert!(WarningKind::HarnessSchema.harness_refuses());
    }

    #[test]
    fn a_short_prefix_is_found_in_the_first_request_of_every_stream() {
        // 5 prefix tokens in blocks of 4: 2 blocks, which requests[0]'s 2 ids hold; a subagent of
        // 9 prefix tokens (3 blocks) whose first request records 1 id does not.
        let text = OK.replace(
            "\"models\":[\"m\"],\n                   \"requests\"",
            "\"models\":[\"m\"],\"tool_tokens\":4,\"system_tokens\":5,\"requests\"",
        );
        let t = warned(&text);
        let short = short_prefixes(&t, 4);
        assert_eq!(short.len(), 1, "{short:?}");
        assert_eq!(short[0].field, "requests[1].requests[0].hash_ids");
        assert_eq!((short[0].blocks, short[0].recorded), (3, 1));
        assert_eq!(kinds(&t), ["short_first_request"]);
        // At 9 tokens a block both fit; at 2 the root's 5 tokens need 3 blocks.
        assert!(short_prefixes(&t, 9).is_empty());
        assert_eq!(short_prefixes(&t, 2).len(), 2);
        let e = relayout(t.clone(), 2).unwrap_err().to_string();
        assert!(
            e.contains("x.jsonl:3: trace \"a\": requests[0].hash_ids")
                && e.contains("--trace-block-size 2")
                && e.contains("at least 3"),
            "{e}"
        );
        let laid = relayout(t, 9).unwrap();
        assert_eq!(laid.block_size, 9);
        assert!(laid.warnings.is_empty(), "{:?}", laid.warnings);
    }

    #[test]
    fn lax_numbers_read_like_pydantic() {
        for (s, v) in [
            (" 12 ", 12),
            ("1_000", 1000),
            ("12.0", 12),
            ("+3", 3),
            ("-3", -3),
        ] {
            assert_eq!(parse_int_str(s), Some(v), "{s:?}");
        }
        for s in ["12.5", "1e3", "0x10", "", "_1", "1__0", "1.", "--1"] {
            assert_eq!(parse_int_str(s), None, "{s:?}");
        }
    }
}
