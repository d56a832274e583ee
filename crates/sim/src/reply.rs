//! The shape of a streamed reply beside its text ([`ReplyPlan`]): how many of its output tokens are
//! reasoning, and the tool call that ends it, decided per request from [`Replies`] and the fault
//! seed, so a rerun with the same requests makes the same calls.
//!
//! A reply's output tokens are laid out in order: the reasoning (`[0, reasoning)`), the content,
//! then the tool call's argument pieces (`[total - pieces, total)`), each piece one token. The
//! total is what it was without them (`max_tokens` with `ignore_eos`, else the drawn natural
//! length) plus the reasoning, cut at `max_tokens`: the reasoning comes first, so a small limit
//! cuts the content and the tool call before it.

use rand::rngs::ChaCha8Rng;
use rand::{RngExt, SeedableRng};

use super::config::{Faults, Replies};

/// The pieces a tool call's arguments are streamed in (fewer when the reply has fewer tokens left).
pub(crate) const ARGUMENT_PIECES: u64 = 4;

/// Mixed into the fault seed, so the tool-call draws are a stream of their own and no fault
/// decision moves when a tool-call rate changes.
const TOOL_CALL_SALT: u64 = 0x7f4a_7c15_9e37_79b9;

/// How a reply's output tokens divide.
#[derive(Debug, Default)]
pub(crate) struct ReplyPlan {
    /// Reasoning tokens, streamed first.
    pub reasoning: u64,
    /// The tool call that ends the reply, if it makes one.
    pub tool: Option<ToolCall>,
}

/// The one tool call of a reply.
#[derive(Debug)]
pub(crate) struct ToolCall {
    /// The tool's name, as a JSON string literal body (escaped, without quotes).
    pub name_json: String,
    /// The arguments' text in its pieces, each escaped as a JSON string literal body.
    pub pieces: Vec<String>,
    /// The arguments' whole text (not valid JSON when `--malformed-tool-call-rate` cut it).
    pub arguments: String,
}

impl ReplyPlan {
    /// The plan of a reply of `total` output tokens (`reasoning` of them reasoning, already cut at
    /// the total); the request named `tool_name` as its first tool.
    pub(crate) fn of(
        (replies, faults): (&Replies, &Faults),
        key: u64,
        (total, reasoning): (u64, u64),
        tool_name: Option<&str>,
    ) -> ReplyPlan {
        let mut rng = ChaCha8Rng::seed_from_u64(faults.seed ^ key ^ TOOL_CALL_SALT);
        // Always draw every number, so one rate never moves another's decisions.
        let [u_call, u_malformed]: [f64; 2] = rng.random();
        let (module, line) = (rng.random_range(1..100u32), rng.random_range(1..2000u32));
        let room = total.saturating_sub(reasoning);
        let tool = (u_call < replies.tool_call_rate && room > 0).then(|| {
            let malformed = u_malformed < faults.malformed_tool_call_rate;
            let mut arguments = format!(r#"{{"path":"src/module_{module}.rs","line":{line}}}"#);
            if malformed {
                // The object never closes: a reader's parse fails.
                arguments.pop();
            }
            let name = tool_name.unwrap_or(super::config::DEFAULT_TOOL_NAME);
            ToolCall {
                name_json: json_body(name),
                pieces: split(&arguments, room.min(ARGUMENT_PIECES))
                    .map(json_body)
                    .collect(),
                arguments,
            }
        });
        ReplyPlan { reasoning, tool }
    }

    /// The tokens the tool call's pieces take (0 without one).
    pub(crate) fn tool_tokens(&self) -> u64 {
        self.tool
            .as_ref()
            .map_or(0, |tool| tool.pieces.len() as u64)
    }
}

/// `text` escaped as the body of a JSON string literal.
fn json_body(text: &str) -> String {
    let quoted = serde_json::to_string(text).unwrap_or_else(|_| "\"\"".into());
    quoted[1..quoted.len() - 1].to_owned()
}

/// `text` (ASCII) in `parts` pieces of nearly equal length.
fn split(text: &str, parts: u64) -> impl Iterator<Item = &str> {
    let parts = parts.max(1) as usize;
    let len = text.len();
    (0..parts).map(move |i| &text[len * i / parts..len * (i + 1) / parts])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replies(rate: f64) -> Replies {
        Replies {
            reasoning_tokens: 0,
            tool_call_rate: rate,
        }
    }

    #[test]
    fn a_tool_call_streams_its_arguments_in_pieces_that_join_to_json() {
        let faults = Faults::default();
        let plan = ReplyPlan::of((&replies(1.0), &faults), 7, (20, 5), Some("Bash"));
        let tool = plan.tool.as_ref().expect("rate 1 calls a tool");
        assert_eq!(tool.name_json, "Bash");
        assert_eq!(plan.tool_tokens(), ARGUMENT_PIECES);
        let joined: String = tool
            .pieces
            .iter()
            .map(|p| p.replace("\\\"", "\""))
            .collect();
        assert_eq!(joined, tool.arguments);
        let parsed: serde_json::Value = serde_json::from_str(&tool.arguments).unwrap();
        assert!(parsed["path"].as_str().unwrap().starts_with("src/module_"));
        // Deterministic by seed and request.
        let again = ReplyPlan::of((&replies(1.0), &faults), 7, (20, 5), Some("Bash"));
        assert_eq!(again.tool.unwrap().arguments, tool.arguments);
    }

    #[test]
    fn malformed_arguments_do_not_parse_and_a_full_reply_has_no_room_for_a_call() {
        let faults = Faults {
            malformed_tool_call_rate: 1.0,
            ..Faults::default()
        };
        let plan = ReplyPlan::of((&replies(1.0), &faults), 3, (2, 0), None);
        let tool = plan.tool.as_ref().unwrap();
        assert_eq!(tool.name_json, crate::DEFAULT_TOOL_NAME);
        assert_eq!(plan.tool_tokens(), 2);
        assert!(serde_json::from_str::<serde_json::Value>(&tool.arguments).is_err());
        // All the reply's tokens are reasoning: no call.
        let full = ReplyPlan::of((&replies(1.0), &faults), 3, (8, 8), None);
        assert!(full.tool.is_none());
        assert!(ReplyPlan::of((&replies(0.0), &faults), 3, (8, 0), None)
            .tool
            .is_none());
    }
}
