//! The agent's wire (`--wire tools`, `--reasoning-in-history keep`, decided by the `agent-wire`
//! scenario): the same words as the text wire, in the shapes a real agent sends them, written as
//! chat messages (the Messages and Responses bodies are converted from them by agentx-protocol).
//!
//! - Tool schemas: the first `tool_tokens` words of the system message (the recorded tool text)
//!   become the descriptions of `ceil(tool_tokens / TOOL_WORDS)` functions `tool_0..`, in order
//!   ([`Conversation::tools_json`]); the system message keeps the rest of its words.
//! - Tool turns: an assistant message answering turn `k` whose recorded `stop` is `tool_use` (or
//!   whose `output_types` lists `tool_use`) and that a user message follows is a tool call
//!   (`id` `call_k`, function `tool_{k mod n}`, its words the string of `{"input": ...}` in
//!   `arguments`), and that user message is the call's result (`role: "tool"`, `tool_call_id`). A
//!   trace without tool tokens has no schemas and no calls; a live reply stays a text message.
//! - Reasoning kept: the assistant message answering turn `k` carries the reasoning of the live
//!   reply to turn `k` (`reasoning_content`), when it had some.
//!
//! So every word of the text wire is sent once, in the same order once the tools are read first
//! (as chat templates render them, at the top of the prompt): the word count of a request is the
//! text wire's, plus the kept reasoning, and the block chains are the same.

use bytes::Bytes;

use super::{push_json_escaped, CacheBust, Conversation, MsgRef, Placement, Role};

/// How a request carries the agent's tools (`--wire`, the scenario's decision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Wire {
    /// The tools as system text (the `agentx` scenario's wire, agentx-harness's).
    #[default]
    Text,
    /// Tool schemas in the request, tool calls and their results in the history.
    Tools,
}

impl Wire {
    /// The wire `--wire` names.
    pub fn parse(name: &str) -> Option<Wire> {
        match name {
            "text" => Some(Wire::Text),
            "tools" => Some(Wire::Tools),
            _ => None,
        }
    }

    /// The name `--wire` takes.
    pub fn name(self) -> &'static str {
        match self {
            Wire::Text => "text",
            Wire::Tools => "tools",
        }
    }
}

/// Words of one tool's description at most.
pub const TOOL_WORDS: usize = 1024;

/// How one message goes on the agent's wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// As on the text wire.
    Plain,
    /// The system message without the tool words.
    System,
    /// An assistant tool call answering this turn.
    Call(u32),
    /// The result of the call answering this turn.
    Result(u32),
}

impl Conversation {
    /// The same conversation on `wire`, the live replies' reasoning kept in the history when
    /// `keep_reasoning` ([`Conversation::keep_reasoning`]).
    #[must_use]
    pub fn with_wire(mut self, wire: Wire, keep_reasoning: bool) -> Self {
        self.wire = wire;
        self.keeps_reasoning = keep_reasoning;
        self.gen += 1;
        self
    }

    /// The wire the messages are written for.
    pub fn wire(&self) -> Wire {
        self.wire
    }

    /// Keeps `reasoning`, the live reply's reasoning to the current turn, for the assistant
    /// message that answers it (only when the conversation keeps reasoning; call it before
    /// [`Conversation::advance`]).
    pub fn keep_reasoning(&mut self, reasoning: &str) {
        if !self.keeps_reasoning || reasoning.is_empty() {
            return;
        }
        let mut escaped = Vec::with_capacity(reasoning.len() + 16);
        push_json_escaped(&mut escaped, reasoning);
        let turn = self.turn() as u32;
        self.reasoning.retain(|(t, _, _)| *t != turn);
        self.reasoning.push((
            turn,
            String::from_utf8(escaped).expect("escaping keeps UTF-8"),
            reasoning.split_whitespace().count() as u64,
        ));
    }

    /// Whether the messages are written by [`Conversation::write_agent_messages_from`].
    pub(super) fn agent_wire(&self) -> bool {
        self.wire == Wire::Tools || self.keeps_reasoning
    }

    /// The number of tool words and of tools of the trace on this wire.
    fn tool_count(&self) -> (usize, usize) {
        if self.wire != Wire::Tools {
            return (0, 0);
        }
        let words = self.st.traj().tool_tokens() as usize;
        (words, words.div_ceil(TOOL_WORDS))
    }

    /// The chat `tools` array (`[{"type":"function","function":{name,description,parameters}}]`)
    /// of the trace's recorded tool text, or `None` on the text wire or without tool tokens.
    pub fn tools_json(&self) -> Option<Bytes> {
        let (_, tools) = self.tool_count();
        if tools == 0 {
            return None;
        }
        self.tools_cache
            .get_or_init(|| {
                let text = self.system_text()?;
                let (words, _) = self.tool_count();
                let mut out = Vec::with_capacity(text.len() + tools * 160);
                out.push(b'[');
                let mut rest = &text[..word_offset(&text, words)];
                for index in 0..tools {
                    let cut = word_offset(rest, TOOL_WORDS);
                    if index > 0 {
                        out.push(b',');
                    }
                    out.extend_from_slice(br#"{"type":"function","function":{"name":"tool_"#);
                    out.extend_from_slice(index.to_string().as_bytes());
                    out.extend_from_slice(br#"","description":""#);
                    out.extend_from_slice(&rest[..cut]);
                    out.extend_from_slice(
                        br#"","parameters":{"type":"object","properties":{"input":{"type":"string"}},"required":["input"]}}}"#,
                    );
                    rest = &rest[cut..];
                }
                out.push(b']');
                Some(Bytes::from(out))
            })
            .clone()
    }

    /// The text of the system message (the recorded tools and system prompt), if there is one.
    fn system_text(&self) -> Option<Vec<u8>> {
        let mut text = None;
        self.for_each_msg(|role, message| {
            if role == Role::System && text.is_none() {
                let mut out = Vec::new();
                self.write_content(&mut out, message);
                text = Some(out);
            }
        });
        text
    }

    /// How each message goes on this wire, in order.
    fn shapes(&self) -> Vec<Shape> {
        let (_, tools) = self.tool_count();
        let mut roles = Vec::new();
        self.for_each_msg(|role, message| {
            let turn = match message {
                MsgRef::Blocks(seg) => Some(seg.turn),
                MsgRef::Text(..) => None,
            };
            roles.push((role, turn));
        });
        let traj = self.st.traj();
        let uses_tool = |turn: u32| {
            traj.turn(turn as usize).is_some_and(|t| {
                t.stop() == "tool_use" || t.output_types().split(',').any(|k| k == "tool_use")
            })
        };
        let mut shapes = vec![Shape::Plain; roles.len()];
        let mut seen_system = false;
        for (index, &(role, turn)) in roles.iter().enumerate() {
            match (role, turn) {
                (Role::System, _) if tools > 0 && !seen_system => {
                    seen_system = true;
                    shapes[index] = Shape::System;
                }
                (Role::Assistant, Some(turn))
                    if tools > 0
                        && uses_tool(turn)
                        && roles.get(index + 1).is_some_and(|(r, _)| *r == Role::User) =>
                {
                    shapes[index] = Shape::Call(turn);
                    shapes[index + 1] = Shape::Result(turn);
                }
                _ => {}
            }
        }
        shapes
    }

    /// The reasoning kept for the assistant message answering `turn`.
    fn reasoning_of(&self, turn: Option<u32>) -> Option<&str> {
        let turn = turn?;
        self.reasoning
            .iter()
            .find(|(t, _, _)| *t == turn)
            .map(|(_, text, _)| text.as_str())
    }

    /// The words of the reasoning the history carries (the assistant messages' kept reasoning).
    pub(super) fn reasoning_words(&self) -> u64 {
        if self.reasoning.is_empty() {
            return 0;
        }
        let mut words = 0;
        self.for_each_msg(|role, message| {
            let turn = match message {
                MsgRef::Blocks(seg) if role == Role::Assistant => seg.turn,
                MsgRef::Text(_, _, Some(turn)) => turn,
                _ => return,
            };
            words += self
                .reasoning
                .iter()
                .find(|(t, _, _)| *t == turn)
                .map_or(0, |(_, _, w)| *w);
        });
        words
    }

    /// Appends messages `from..` on the agent's wire (with the `[` or `,` before each), without the
    /// closing `]`: the text wire's writer with the shapes of the module docs.
    pub(super) fn write_agent_messages_from(
        &self,
        out: &mut Vec<u8>,
        bust: Option<CacheBust<'_>>,
        from: usize,
    ) {
        let target = bust.and_then(|marker| {
            self.bust_target(marker.placement)
                .map(|msg_idx| (msg_idx, marker))
        });
        let shapes = self.shapes();
        let (tool_words, tools) = self.tool_count();
        if from == 0 {
            out.push(b'[');
        }
        let mut msg_idx = 0;
        self.for_each_msg(|role, message| {
            let index = msg_idx;
            msg_idx += 1;
            if index < from {
                return;
            }
            if index > 0 {
                out.push(b',');
            }
            let answered = match message {
                MsgRef::Blocks(seg) if role == Role::Assistant => Some(seg.turn),
                MsgRef::Text(_, _, turn) => turn,
                MsgRef::Blocks(_) => None,
            };
            let reasoning = self.reasoning_of(answered);
            let mark = target.filter(|(t, _)| *t == index).map(|(_, m)| m);
            match shapes[index] {
                Shape::Call(turn) => {
                    out.extend_from_slice(br#"{"role":"assistant","content":null"#);
                    write_reasoning(out, reasoning);
                    out.extend_from_slice(br#","tool_calls":[{"id":"call_"#);
                    out.extend_from_slice(turn.to_string().as_bytes());
                    out.extend_from_slice(br#"","type":"function","function":{"name":"tool_"#);
                    out.extend_from_slice((turn as usize % tools).to_string().as_bytes());
                    out.extend_from_slice(br#"","arguments":"{\"input\":\""#);
                    self.write_content(out, message);
                    out.extend_from_slice(br#"\"}"}}]}"#);
                }
                Shape::Result(turn) => {
                    out.extend_from_slice(br#"{"role":"tool","tool_call_id":"call_"#);
                    out.extend_from_slice(turn.to_string().as_bytes());
                    out.extend_from_slice(br#"","content":""#);
                    self.write_marked(out, message, mark, None);
                    out.extend_from_slice(b"\"}");
                }
                Shape::System => {
                    out.extend_from_slice(br#"{"role":"system","content":""#);
                    self.write_marked(out, message, mark, Some(tool_words));
                    out.extend_from_slice(b"\"}");
                }
                Shape::Plain => {
                    out.extend_from_slice(b"{\"role\":\"");
                    out.extend_from_slice(role.as_str().as_bytes());
                    out.extend_from_slice(b"\",\"content\":\"");
                    self.write_marked(out, message, mark, None);
                    out.push(b'"');
                    write_reasoning(out, reasoning.filter(|_| role == Role::Assistant));
                    out.push(b'}');
                }
            }
        });
    }

    /// A message's content with the marker where it goes; `skip` words of it left out (the tool
    /// words of the system message).
    fn write_marked(
        &self,
        out: &mut Vec<u8>,
        message: MsgRef<'_>,
        mark: Option<CacheBust<'_>>,
        skip: Option<usize>,
    ) {
        let prefix = mark.filter(|marker| {
            matches!(
                marker.placement,
                Placement::SystemPrefix | Placement::FirstUserPrefix
            )
        });
        if let Some(marker) = prefix {
            push_json_escaped(out, marker.text);
        }
        match skip {
            Some(words) => {
                let mut text = Vec::new();
                self.write_content(&mut text, message);
                out.extend_from_slice(&text[word_offset(&text, words)..]);
            }
            None => self.write_content(out, message),
        }
        if let Some(marker) = mark.filter(|marker| prefix.is_none() && !marker.text.is_empty()) {
            push_json_escaped(out, marker.text);
        }
    }
}

/// `,"reasoning_content":"..."` when there is reasoning.
fn write_reasoning(out: &mut Vec<u8>, reasoning: Option<&str>) {
    if let Some(text) = reasoning {
        out.extend_from_slice(br#","reasoning_content":""#);
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
    }
}

/// The byte offset in synthesized `text` (each word after a space) where word `words` starts, or
/// its end when it has no more words.
fn word_offset(text: &[u8], words: usize) -> usize {
    let mut seen = 0;
    for (offset, &byte) in text.iter().enumerate() {
        if byte == b' ' && offset > 0 && text[offset - 1] != b' ' {
            seen += 1;
            if seen == words {
                return offset;
            }
        }
    }
    if words == 0 {
        0
    } else {
        text.len()
    }
}
