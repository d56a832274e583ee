//! A llama.cpp server's slot pool, asked of its `GET /props` before the run when the model list
//! says the server is llama.cpp (`owned_by: "llamacpp"`): `total_slots` and each slot's context
//! (`default_generation_settings.n_ctx`). Its `/metrics` carry no KV capacity, so this is the
//! reading the cache model's at-capacity figures use. A server that does not answer, or answers
//! something else, leaves the capacity unknown with the reason; the run goes on.

use std::time::Duration;

use serde_json::Value;

use agentx_metrics::cache_truth::SlotPool;

use super::super::{Client, GetError};

/// Largest `/props` body read (it carries the chat template, a few KiB to a few hundred).
const BODY_LIMIT: usize = 4 << 20;

/// The slot pool `/props` describes, or why there is none (for a warning).
pub async fn read(client: &Client, timeout: Duration) -> Result<SlotPool, String> {
    let url = format!("{}/props", client.base);
    let (status, _headers, body) = match client.get("/props", timeout, BODY_LIMIT).await {
        Ok(answer) => answer,
        Err(GetError::Timeout(limit)) => {
            return Err(format!("{url} gave no answer within {limit:?}"))
        }
        Err(GetError::Connect(why) | GetError::Other(why)) => return Err(format!("{url}: {why}")),
    };
    if !status.is_success() {
        return Err(format!("{url} answered HTTP {status}"));
    }
    parse_props(&String::from_utf8_lossy(&body)).ok_or_else(|| {
        format!("{url} did not name total_slots and default_generation_settings.n_ctx")
    })
}

/// The slot pool of a `/props` body; `None` when it names no positive slot count and context.
pub(crate) fn parse_props(body: &str) -> Option<SlotPool> {
    let props: Value = serde_json::from_str(body).ok()?;
    let slots = props.get("total_slots")?.as_u64().filter(|&n| n > 0)?;
    let slot_context_tokens = props
        .pointer("/default_generation_settings/n_ctx")?
        .as_u64()
        .filter(|&n| n > 0)?;
    Some(SlotPool {
        slots: u32::try_from(slots).ok()?,
        slot_context_tokens,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_props_give_the_slots_and_their_context() {
        let body = r#"{"default_generation_settings":{"params":{},"n_ctx":4096},"total_slots":4,"model_alias":"smollm2","chat_template":"{{ x }}"}"#;
        assert_eq!(
            parse_props(body),
            Some(SlotPool {
                slots: 4,
                slot_context_tokens: 4096
            })
        );
    }

    #[test]
    fn props_without_the_figures_give_none() {
        assert_eq!(
            parse_props(r#"{"total_slots":0,"default_generation_settings":{"n_ctx":4096}}"#),
            None
        );
        assert_eq!(parse_props(r#"{"total_slots":4}"#), None);
        assert_eq!(parse_props("not json"), None);
    }
}
