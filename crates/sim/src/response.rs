//! What every chunk of a response names, in either API's shape: its identity ([`Ident`]) and the
//! usage numbers reported at its end ([`Usage`]).

use bytes::BytesMut;

/// The identity of a response, shared by all its chunks.
#[derive(Debug, Clone)]
pub(crate) struct Ident {
    /// `chatcmpl-...`, already a JSON string literal body (escaped, without quotes).
    pub(crate) id_json: String,
    /// The model name as a JSON string literal body.
    pub(crate) model_json: String,
    /// Unix seconds.
    pub created: u64,
}

impl Ident {
    /// Build from raw strings, escaping them for JSON once.
    pub(crate) fn new(id: &str, model: &str, created: u64) -> Ident {
        let esc = |s: &str| {
            let quoted = serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into());
            quoted[1..quoted.len() - 1].to_string()
        };
        Ident {
            id_json: esc(id),
            model_json: esc(model),
            created,
        }
    }
}

/// Usage numbers reported at the end of a response.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    /// The reasoning tokens among `completion_tokens`.
    pub reasoning_tokens: u64,
}

impl Usage {
    pub(super) fn write_json(&self, out: &mut BytesMut) {
        use std::fmt::Write as _;
        let mut json = String::with_capacity(128);
        let _ = write!(
            json,
            r#"{{"prompt_tokens":{},"total_tokens":{},"completion_tokens":{},"prompt_tokens_details":{{"cached_tokens":{}}}"#,
            self.prompt_tokens,
            self.prompt_tokens + self.completion_tokens,
            self.completion_tokens,
            self.cached_tokens
        );
        if self.reasoning_tokens > 0 {
            let _ = write!(
                json,
                r#","completion_tokens_details":{{"reasoning_tokens":{}}}"#,
                self.reasoning_tokens
            );
        }
        json.push('}');
        out.extend_from_slice(json.as_bytes());
    }
}
