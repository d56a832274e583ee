//! One session's spans as a weka trace (docs/specs/otel-genai-traces.md#3-building-the-plan): which spans are
//! requests, which agent each belongs to, their order, timing and block ids.
//!
//! - Requests: [`Span::is_request`]; an error span (status 2), a span without both token counts
//!   (and without messages to estimate them from, `len(text) // 4` per message as inference-perf
//!   does, itself a counted warning), and an exact duplicate (same start, end and attributes; the
//!   first by span id is kept) are dropped, each a counted warning. Order: `(start, span_id)`.
//! - Agents: a request belongs to its nearest `invoke_agent` ancestor (the parent walk has a visited
//!   set: a cycle is refused naming its span ids). Requests outside every `invoke_agent` are the root
//!   agent, and the outermost `invoke_agent`s its subagents; without such requests the outermost
//!   `invoke_agent`s together are the root agent and those nested in them its subagents. A request
//!   one level deeper is refused (the weka shape nests one level; nothing is flattened).
//! - Timing: `t` is seconds from the session's first LLM span, `api_time` the span's duration,
//!   `think_time` the start minus the end of the same agent's previous request, clamped at 0.
//! - Block ids (`block_size`-token blocks, whole blocks only, one id space per session): an agent's
//!   first request gets fresh ids; a later one reuses the leading ids of the same agent's previous
//!   request for its shared prefix and gets fresh ids for the rest. With messages on both, the
//!   shared prefix is the longest common message prefix with the previous request's input and
//!   output messages, in tokens `input_tokens · shared characters / input characters` (characters of
//!   the canonical messages), at least the previous request's `input_tokens` when its whole input is
//!   shared, floored to whole blocks. Without messages on either, the previous request's whole
//!   prompt is assumed to be the prefix (an agent's prompt grows by appending), counted as
//!   `assumed_prefix`.
//! - `history=runtime` (docs/specs/otel-genai-traces.md#4-history-semantics) holds for a session when every request records its messages and
//!   each request of an agent begins with the previous one's input and output messages.
//! - A subagent is a `type: "subagent"` entry after the last root request that starts at or before
//!   it (its marker: the earlier of its `invoke_agent` start and its first request); one that no root
//!   request precedes becomes a trace of its own.

use std::collections::{HashMap, HashSet};

use serde_json::{json, Value};

use super::messages::{common_prefix, Msg};
use super::read::{SessionSpans, Span};
use crate::error::{DatasetError, Location};
use crate::tracelab::safe_trace_id;
use crate::warnings::{Warning, WarningKind};

/// What one session contributed (summed into [`super::OtelSummary`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Facts {
    pub(crate) requests: u64,
    pub(crate) subagents: u64,
    pub(crate) with_messages: u64,
    pub(crate) assumed_prefix: u64,
    pub(crate) runtime_ready: bool,
    pub(crate) error_spans: u64,
    pub(crate) duplicate_spans: u64,
    pub(crate) untokenized_spans: u64,
    pub(crate) estimated_tokens: u64,
}

/// A session as weka trace objects: its own, then one per subagent no root request precedes.
#[derive(Debug)]
pub(crate) struct Planned {
    pub(crate) traces: Vec<Value>,
    pub(crate) warnings: Vec<Warning>,
    pub(crate) facts: Facts,
}

/// One agent's requests (span indices in replay order) and, for a subagent, its `invoke_agent` span.
struct Agent {
    invoke: Option<usize>,
    requests: Vec<usize>,
}

struct Session<'a> {
    spans: &'a [Span],
    source: &'a SessionSpans,
    by_id: HashMap<&'a str, usize>,
}

impl<'a> Session<'a> {
    fn new(source: &'a SessionSpans) -> Self {
        let mut by_id = HashMap::new();
        for (i, s) in source.spans.iter().enumerate() {
            by_id.entry(s.span_id.as_str()).or_insert(i);
        }
        Session {
            spans: &source.spans,
            source,
            by_id,
        }
    }

    fn location(&self, span: &Span, field: &str) -> Location {
        Location {
            file: self.source.file.clone(),
            line: span.line,
            trace: Some(self.source.id.clone()),
            field: Some(if span.field.is_empty() {
                field.to_owned()
            } else {
                format!("{}.{field}", span.field)
            }),
            ..Location::default()
        }
    }

    fn err(&self, span: &Span, field: &str, message: String) -> DatasetError {
        DatasetError::Invalid {
            location: self.location(span, field),
            message,
        }
    }

    fn parent(&self, i: usize) -> Option<usize> {
        let parent = self.spans[i].parent.as_deref()?;
        self.by_id.get(parent).copied()
    }

    /// Refuses a `parent_span_id` cycle, naming its span ids.
    fn check_cycles(&self) -> Result<(), DatasetError> {
        let mut state = vec![0u8; self.spans.len()];
        for start in 0..self.spans.len() {
            let mut path: Vec<usize> = Vec::new();
            let mut cur = Some(start);
            while let Some(i) = cur {
                match state[i] {
                    2 => break,
                    1 => {
                        let from = path.iter().position(|&p| p == i).unwrap_or(0);
                        let ids: Vec<&str> = path[from..]
                            .iter()
                            .chain(std::iter::once(&i))
                            .map(|&p| self.spans[p].span_id.as_str())
                            .collect();
                        return Err(self.err(
                            &self.spans[i],
                            "parent_span_id",
                            format!(
                                "span {:?} is its own ancestor (parent chain {}); fix the \
                                 parent_span_id that closes the cycle",
                                self.spans[i].span_id,
                                ids.join(" -> ")
                            ),
                        ));
                    }
                    _ => {
                        state[i] = 1;
                        path.push(i);
                        cur = self.parent(i);
                    }
                }
            }
            for p in path {
                state[p] = 2;
            }
        }
        Ok(())
    }

    /// The nearest `invoke_agent` ancestor of span `i` (itself excluded).
    fn agent_of(&self, i: usize) -> Option<usize> {
        let mut cur = self.parent(i);
        while let Some(p) = cur {
            if self.spans[p].is_agent() {
                return Some(p);
            }
            cur = self.parent(p);
        }
        None
    }

    /// The `invoke_agent` spans above request `i`, nearest first.
    fn agent_chain(&self, i: usize) -> Vec<usize> {
        let mut chain = Vec::new();
        let mut cur = self.agent_of(i);
        while let Some(a) = cur {
            chain.push(a);
            cur = self.agent_of(a);
        }
        chain
    }

    fn warn(&self, warnings: &mut Vec<Warning>, kind: WarningKind, span: &Span, message: &str) {
        warnings.push(Warning {
            kind,
            location: self.location(span, "status"),
            message: format!("span {:?}: {message}", span.span_id),
        });
    }

    /// The requests to replay (module docs), with the dropped ones counted and warned about.
    fn requests(&self, facts: &mut Facts, warnings: &mut Vec<Warning>) -> Vec<usize> {
        let mut kept: Vec<usize> = Vec::new();
        for (i, s) in self.spans.iter().enumerate() {
            if !s.is_request() {
                continue;
            }
            if s.error {
                facts.error_spans += 1;
                self.warn(
                    warnings,
                    WarningKind::ErrorSpan,
                    s,
                    "an LLM span with error status (code 2); dropped",
                );
            } else if s.input_tokens.is_none() || s.output_tokens.is_none() {
                facts.untokenized_spans += 1;
                self.warn(
                    warnings,
                    WarningKind::UntokenizedSpan,
                    s,
                    "an LLM span without gen_ai.usage.input_tokens and output_tokens (and no \
                     messages to estimate them from); dropped",
                );
            } else {
                if s.estimated {
                    facts.estimated_tokens += 1;
                    self.warn(
                        warnings,
                        WarningKind::EstimatedTokens,
                        s,
                        "no gen_ai.usage token counts: estimated from the messages (len(text) // 4 \
                         per message, as inference-perf does)",
                    );
                }
                kept.push(i);
            }
        }
        kept.sort_by(|&a, &b| self.spans[a].span_id.cmp(&self.spans[b].span_id));
        let mut seen: HashSet<[u8; 32]> = HashSet::new();
        kept.retain(|&i| {
            let s = &self.spans[i];
            if seen.insert(s.identity) {
                return true;
            }
            facts.duplicate_spans += 1;
            self.warn(
                warnings,
                WarningKind::DuplicateSpan,
                s,
                "the same start, end and attributes as another span of the session; dropped",
            );
            false
        });
        self.sort(&mut kept);
        kept
    }

    fn sort(&self, requests: &mut [usize]) {
        requests.sort_by(|&a, &b| {
            let (x, y) = (&self.spans[a], &self.spans[b]);
            x.start_ns.cmp(&y.start_ns).then(x.span_id.cmp(&y.span_id))
        });
    }

    /// The root agent and the subagents (module docs); a request nested deeper is refused.
    fn agents(&self, requests: &[usize]) -> Result<(Agent, Vec<Agent>), DatasetError> {
        let chains: Vec<Vec<usize>> = requests.iter().map(|&i| self.agent_chain(i)).collect();
        let root_depth = usize::from(chains.iter().all(|c| !c.is_empty()));
        let mut root = Agent {
            invoke: None,
            requests: Vec::new(),
        };
        let mut subs: Vec<Agent> = Vec::new();
        for (&i, chain) in requests.iter().zip(&chains) {
            let depth = chain.len();
            if depth == root_depth {
                root.requests.push(i);
            } else if depth == root_depth + 1 {
                let invoke = chain[0];
                match subs.iter_mut().find(|a| a.invoke == Some(invoke)) {
                    Some(agent) => agent.requests.push(i),
                    None => subs.push(Agent {
                        invoke: Some(invoke),
                        requests: vec![i],
                    }),
                }
            } else {
                let ids: Vec<&str> = chain
                    .iter()
                    .map(|&a| self.spans[a].span_id.as_str())
                    .collect();
                let span = &self.spans[i];
                return Err(self.err(
                    span,
                    "parent_span_id",
                    format!(
                        "span {:?} runs in a subagent of a subagent (invoke_agent spans {}, \
                         nearest first; line {}): agentx replays subagents one level below the \
                         session's agent and does not flatten deeper ones; export the nested \
                         agent's spans as a trace of their own",
                        span.span_id,
                        ids.join(" <- "),
                        span.line
                    ),
                ));
            }
        }
        for agent in &mut subs {
            self.sort(&mut agent.requests);
        }
        subs.sort_by_key(|a| {
            let marker = self.marker_ns(a);
            (marker, a.invoke.map(|i| self.spans[i].span_id.clone()))
        });
        Ok((root, subs))
    }

    /// A subagent's spawn time: the earlier of its `invoke_agent` start and its first request.
    fn marker_ns(&self, agent: &Agent) -> i64 {
        let first = agent
            .requests
            .first()
            .map_or(i64::MAX, |&i| self.spans[i].start_ns);
        agent
            .invoke
            .map_or(first, |i| self.spans[i].start_ns.min(first))
    }
}

fn secs(ns: i64) -> f64 {
    (ns as f64 / 1e3).round() / 1e6
}

/// Allocates block ids: consecutive from 1, one space per session.
struct Minter(u64);

impl Minter {
    fn take(&mut self, count: u64) -> std::ops::Range<u64> {
        let start = self.0;
        self.0 += count;
        start..start + count
    }
}

/// The prefix `current` shares with `previous` (same agent), in tokens, and whether it was
/// measured from messages (module docs).
fn shared_tokens(previous: &Span, current: &Span) -> (u64, bool) {
    let (prev_in, cur_in) = (
        previous.input_tokens.unwrap_or(0),
        current.input_tokens.unwrap_or(0),
    );
    let (Some(prev), Some(cur)) = (&previous.prompt, &current.prompt) else {
        return (prev_in.min(cur_in), false);
    };
    let context = previous_context(previous);
    let n = common_prefix(&cur.input, &context.unwrap_or_default());
    let shared_chars: u64 = cur.input[..n].iter().map(|m| m.chars).sum();
    let total = cur.input_chars().max(1);
    let mut tokens = (u128::from(cur_in) * u128::from(shared_chars) / u128::from(total)) as u64;
    if n >= prev.input.len() {
        tokens = tokens.max(prev_in);
    }
    (tokens.min(cur_in), true)
}

/// A request's input and output messages (the context the next request of its agent continues).
fn previous_context(span: &Span) -> Option<Vec<Msg>> {
    let prompt = span.prompt.as_ref()?;
    let mut context = prompt.input.clone();
    context.extend(prompt.output.iter().flatten().copied());
    Some(context)
}

/// `history=runtime`'s precondition between two requests of one agent: the current input begins
/// with the previous input and output, and the previous output is recorded.
fn continues(previous: &Span, current: &Span) -> bool {
    let has_output = previous
        .prompt
        .as_ref()
        .and_then(|p| p.output.as_ref())
        .is_some_and(|o| !o.is_empty());
    match (previous_context(previous), &current.prompt) {
        (Some(context), Some(cur)) if has_output => {
            common_prefix(&cur.input, &context) == context.len()
        }
        _ => false,
    }
}

/// The weka requests of one agent, with their block ids minted.
fn agent_requests(
    session: &Session<'_>,
    agent: &Agent,
    block_size: u32,
    origin: i64,
    minter: &mut Minter,
    facts: &mut Facts,
) -> Vec<Value> {
    let block = u64::from(block_size);
    let mut out = Vec::with_capacity(agent.requests.len());
    let mut previous: Option<(&Span, Vec<u64>)> = None;
    for &i in &agent.requests {
        let span = &session.spans[i];
        let input = span.input_tokens.unwrap_or(0);
        let blocks = input / block;
        facts.requests += 1;
        facts.with_messages += u64::from(span.prompt.is_some());
        let mut ids: Vec<u64> = Vec::new();
        let mut think = None;
        if let Some((prev, prev_ids)) = &previous {
            let (tokens, measured) = shared_tokens(prev, span);
            facts.assumed_prefix += u64::from(!measured);
            facts.runtime_ready &= continues(prev, span);
            let reuse = (tokens / block).min(prev_ids.len() as u64).min(blocks);
            ids.extend_from_slice(&prev_ids[..reuse as usize]);
            think = Some(secs((span.start_ns - prev.end_ns).max(0)));
        }
        facts.runtime_ready &= span.prompt.is_some();
        ids.extend(minter.take(blocks - ids.len() as u64));
        let mut request = json!({
            "t": secs(span.start_ns - origin),
            "type": "n",
            "model": span.model.as_deref().unwrap_or("unknown"),
            "in": input,
            "out": span.output_tokens.unwrap_or(0),
            "hash_ids": ids,
            "input_types": ["text"],
            "output_types": ["text"],
            "stop": if span.tool_use { "tool_use" } else { "end_turn" },
            "api_time": secs(span.end_ns - span.start_ns),
        });
        if let Some(think) = think {
            request["think_time"] = json!(think);
        }
        out.push(request);
        previous = Some((span, ids));
    }
    out
}

fn models_of(requests: &[Value], models: &mut Vec<String>) {
    for r in requests {
        if let Some(m) = r["model"].as_str() {
            if !models.iter().any(|x| x == m) {
                models.push(m.to_owned());
            }
        }
    }
}

/// A subagent as a `type: "subagent"` entry (its requests on the session's clock).
fn subagent_entry(
    session: &Session<'_>,
    agent: &Agent,
    requests: Vec<Value>,
    origin: i64,
) -> Value {
    let invoke = agent.invoke.map(|i| &session.spans[i]);
    let label = invoke
        .and_then(|s| s.agent_label.clone())
        .unwrap_or_else(|| "agent".to_owned());
    let span_id = invoke.map_or("", |s| s.span_id.as_str());
    let tool_use_count = session
        .spans
        .iter()
        .enumerate()
        .filter(|(i, s)| {
            s.operation.as_deref() == Some("execute_tool") && session.agent_of(*i) == agent.invoke
        })
        .count();
    let mut models = Vec::new();
    models_of(&requests, &mut models);
    let total: u64 = requests
        .iter()
        .map(|r| r["in"].as_u64().unwrap_or(0) + r["out"].as_u64().unwrap_or(0))
        .sum();
    json!({
        "t": secs((session.marker_ns(agent) - origin).max(0)),
        "type": "subagent",
        "agent_id": safe_trace_id(&format!("{label}-{span_id}")),
        "subagent_type": invoke.and_then(|s| s.agent_name.clone()).unwrap_or_else(|| label.clone()),
        "duration_ms": invoke.map_or(0, |s| (s.end_ns - s.start_ns + 500_000) / 1_000_000),
        "total_tokens": total,
        "tool_use_count": tool_use_count,
        "status": if invoke.is_some_and(|s| s.error) { "error" } else { "completed" },
        "requests": Value::Array(requests),
        "models": models,
        "tool_tokens": 0,
        "system_tokens": 0,
    })
}

fn trace_json(id: String, block_size: u32, requests: Vec<Value>, subagents: u64) -> Value {
    let mut models = Vec::new();
    models_of(&requests, &mut models);
    for entry in requests.iter().filter(|r| r["type"] == "subagent") {
        models_of(
            entry["requests"].as_array().map_or(&[][..], Vec::as_slice),
            &mut models,
        );
    }
    json!({
        "id": Value::String(id),
        "models": models,
        "block_size": block_size,
        "hash_id_scope": "local",
        "tool_tokens": 0,
        "system_tokens": 0,
        "requests": Value::Array(requests),
        "totals": {"subagents": subagents, "source": "otel"},
    })
}

/// Plans one session (module docs); `None` in `traces` when it has no request to replay.
pub(crate) fn plan_session(
    source: &SessionSpans,
    block_size: u32,
) -> Result<Planned, DatasetError> {
    let session = Session::new(source);
    session.check_cycles()?;
    let mut facts = Facts {
        runtime_ready: true,
        ..Facts::default()
    };
    let mut warnings = Vec::new();
    let requests = session.requests(&mut facts, &mut warnings);
    let Some(origin) = requests.iter().map(|&i| session.spans[i].start_ns).min() else {
        facts.runtime_ready = false;
        return Ok(Planned {
            traces: Vec::new(),
            warnings,
            facts,
        });
    };
    let (root, subs) = session.agents(&requests)?;
    let mut minter = Minter(1);
    let root_requests =
        agent_requests(&session, &root, block_size, origin, &mut minter, &mut facts);
    let root_times: Vec<f64> = root_requests
        .iter()
        .map(|r| r["t"].as_f64().unwrap_or(0.0))
        .collect();
    let mut pending: Vec<Vec<Value>> = vec![Vec::new(); root_requests.len()];
    let base_id = safe_trace_id(&source.id);
    let mut orphans = Vec::new();
    for agent in &subs {
        let inner = agent_requests(&session, agent, block_size, origin, &mut minter, &mut facts);
        let entry = subagent_entry(&session, agent, inner, origin);
        facts.subagents += 1;
        let at = entry["t"].as_f64().unwrap_or(0.0);
        match root_times.iter().rposition(|&t| t <= at + 1e-9) {
            Some(anchor) => pending[anchor].push(entry),
            None => {
                let id = format!("{base_id}.{}", entry["agent_id"].as_str().unwrap_or(""));
                let own = entry["requests"].as_array().cloned().unwrap_or_default();
                orphans.push(trace_json(id, block_size, own, 0));
            }
        }
    }
    let subagents = pending.iter().map(|p| p.len() as u64).sum();
    let mut merged = Vec::with_capacity(root_requests.len() + subs.len());
    for (request, entries) in root_requests.into_iter().zip(pending) {
        merged.push(request);
        merged.extend(entries);
    }
    let mut traces = Vec::with_capacity(1 + orphans.len());
    if !merged.is_empty() {
        traces.push(trace_json(base_id, block_size, merged, subagents));
    }
    traces.extend(orphans);
    Ok(Planned {
        traces,
        warnings,
        facts,
    })
}
