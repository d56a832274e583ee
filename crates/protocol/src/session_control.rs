//! Dynamo's conversation-aware routing (`--use-dynamo-conv-aware-routing`): the
//! `nvext.session_control` object a request body carries so that Dynamo's router keeps a session on
//! one worker.
//!
//! The lifecycle is agentx-harness's (its inference client, the `bind` transport):
//!
//! - every request but a session's final turn carries
//!   `{"session_id": S, "action": "bind", "timeout": T}`. A bind is idempotent and restarts the
//!   router's inactivity lease of `T` seconds (`--dynamo-session-timeout-seconds`), so the binding
//!   outlives long prefills and capped think times without the client tracking which sessions are
//!   bound (a stream that starts mid-trace, or a run's warmup turn, binds on its first request all
//!   the same);
//! - the final turn of a root stream carries `{"session_id": S, "action": "close"}`;
//! - `S` is the stream's correlation id (`X-Correlation-ID`); a child stream of a session tree (a
//!   subagent) binds to its parent's id, so its requests go to the worker that holds the parent's
//!   context, and never closes it: the parent's binding outlives the child, and a child that outlives
//!   its parent's final turn binds the id again.
//!
//! A session that ends early (the run's duration, an overflow, a recycled lane) sends no close: the
//! lease expires after `T` seconds, as with the harness. Values from `--extra-inputs nvext:{...}` are
//! kept; `session_control` is written over them.
//!
//! With `AGENTX_DYNAMO_SESSION_TRANSPORT=headers` (or the `AIPERF_` name) the CLI sends the session
//! as `X-Dynamo-Session-ID` / `X-Dynamo-Parent-Session-ID` headers instead ([`super::RoutingHeaders`])
//! and the body is left as it is.

use serde_json::{json, Map, Value};

/// The router inactivity lease when `--dynamo-session-timeout-seconds` is not given (Dynamo's and
/// the harness's default).
pub const DEFAULT_SESSION_TIMEOUT_S: u64 = 300;

/// `--use-dynamo-conv-aware-routing` with its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DynamoRouting {
    /// Seconds of inactivity after which the router drops a binding.
    pub timeout_s: u64,
}

/// What a request's `session_control` is made from: its stream's ids and whether it is the
/// stream's final turn.
#[derive(Debug, Clone, Copy)]
pub struct StreamTurn<'a> {
    /// The stream's own correlation id.
    pub correlation_id: &'a str,
    /// The parent stream's correlation id (child streams of a session tree).
    pub parent_correlation_id: Option<&'a str>,
    /// The stream's final turn.
    pub last: bool,
}

impl DynamoRouting {
    /// The `session_control` object of one request.
    pub fn session_control(&self, turn: StreamTurn<'_>) -> Value {
        let session_id = turn.parent_correlation_id.unwrap_or(turn.correlation_id);
        let closes = turn.last && turn.parent_correlation_id.is_none();
        if closes {
            json!({"session_id": session_id, "action": "close"})
        } else {
            json!({"session_id": session_id, "action": "bind", "timeout": self.timeout_s})
        }
    }

    /// `,"nvext":{...}` for one request: `base` (the `nvext` of `--extra-inputs`, if any) with
    /// `session_control` set.
    pub(crate) fn write_nvext(
        &self,
        out: &mut Vec<u8>,
        base: &Map<String, Value>,
        turn: StreamTurn,
    ) {
        let mut nvext = base.clone();
        let mut control = match nvext.remove("session_control") {
            Some(Value::Object(existing)) => existing,
            _ => Map::new(),
        };
        if let Value::Object(turn_control) = self.session_control(turn) {
            control.extend(turn_control);
        }
        nvext.insert("session_control".into(), Value::Object(control));
        out.extend_from_slice(b",\"nvext\":");
        serde_json::to_writer(out, &nvext).expect("a JSON map serializes");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(corr: &str, parent: Option<&str>, last: bool) -> Value {
        DynamoRouting { timeout_s: 3600 }.session_control(StreamTurn {
            correlation_id: corr,
            parent_correlation_id: parent,
            last,
        })
    }

    #[test]
    fn roots_bind_until_their_final_turn_closes() {
        assert_eq!(
            turn("a-s1", None, false),
            json!({"session_id": "a-s1", "action": "bind", "timeout": 3600})
        );
        assert_eq!(
            turn("a-s1", None, true),
            json!({"session_id": "a-s1", "action": "close"})
        );
    }

    #[test]
    fn children_bind_to_their_parent_and_never_close_it() {
        for last in [false, true] {
            assert_eq!(
                turn("a-s1::sa:x", Some("a-s1"), last),
                json!({"session_id": "a-s1", "action": "bind", "timeout": 3600})
            );
        }
    }

    #[test]
    fn a_body_carries_one_nvext_with_the_extra_inputs_kept() {
        use crate::RequestBody;
        let extra = vec![
            ("temperature".to_string(), json!(0.6)),
            ("nvext".to_string(), json!({"annotations": ["a"]})),
        ];
        let body = RequestBody::new("m", true, true, &extra)
            .with_dynamo(Some(DynamoRouting { timeout_s: 7 }), &extra);
        let msgs = vec![bytes::Bytes::from_static(
            br#"[{"role":"user","content":"hi"}"#,
        )];
        let t = StreamTurn {
            correlation_id: "r-s1",
            parent_correlation_id: None,
            last: false,
        };
        let raw = body.build_for(3, msgs.clone(), t).to_vec();
        let text = String::from_utf8(raw.clone()).unwrap();
        assert_eq!(text.matches("\"nvext\"").count(), 1, "{text}");
        let v: Value = serde_json::from_slice(&raw).unwrap();
        assert_eq!(v["temperature"], 0.6);
        assert_eq!(
            v["nvext"],
            json!({"annotations": ["a"], "session_control": {"session_id": "r-s1", "action": "bind", "timeout": 7}})
        );
        // Off: the extra inputs' nvext goes as given, with no session_control.
        let plain = RequestBody::new("m", true, true, &extra);
        let v: Value = serde_json::from_slice(&plain.build_for(3, msgs, t).to_vec()).unwrap();
        assert_eq!(v["nvext"], json!({"annotations": ["a"]}));
    }

    #[test]
    fn an_extra_inputs_nvext_is_kept() {
        let base: Map<String, Value> =
            serde_json::from_value(json!({"trace": "keep", "session_control": {"x": 1}})).unwrap();
        let mut out = Vec::new();
        let t = StreamTurn {
            correlation_id: "c",
            parent_correlation_id: None,
            last: true,
        };
        DynamoRouting { timeout_s: 5 }.write_nvext(&mut out, &base, t);
        let v: Value = serde_json::from_slice(&out[b",\"nvext\":".len()..]).unwrap();
        assert_eq!(
            v,
            json!({"trace": "keep", "session_control": {"x": 1, "session_id": "c", "action": "close"}})
        );
    }
}
