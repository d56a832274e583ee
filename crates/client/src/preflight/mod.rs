//! The pre-flight check: one `GET /v1/models` before anything of the run is sent, so that a wrong
//! URL, a missing API key or a wrong `--model` surfaces in a second, not after warmup.
//!
//! What the answer tells: the served model names (`data[].id`) and, where the server reports one,
//! the context length (vLLM's and SGLang's `max_model_len`, llama.cpp's `meta.n_ctx` per slot, or
//! `context_length` / `max_context_length`). The request goes through the replay's own pool, so a
//! `Keep-Alive` header on the answer already sets the pool's idle timeout.
//!
//! Fatal ([`PreflightError`]): no connection (refused, DNS, TLS, unreachable), 401/403, a model that
//! the server does not serve. Not fatal (a [`Preflight`] with a note): a 404 or another status, a
//! body that is not the OpenAI model list, no answer within the time limit; the run goes on without
//! the model and length checks.
//!
//! The cache preflight ([`cache`]) is a second, optional check: the same two-turn conversation sent
//! twice, to see whether the server's prefix cache answers the repeat.

pub mod cache;
pub mod slots;

use std::time::Duration;

use serde_json::Value;

use super::{Client, GetError};

/// Largest `/v1/models` body read.
const BODY_LIMIT: usize = 1 << 20;

/// What the server said.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Preflight {
    /// Served model names, in the server's order.
    pub models: Vec<String>,
    /// The served model's context length, where the server reports one.
    pub max_model_len: Option<u64>,
    /// Why the checks were partly skipped (a status, a body, a timeout), for a warning.
    pub note: Option<String>,
    /// The model entry says llama.cpp serves it (`owned_by: "llamacpp"`): its slots are in `/props`
    /// ([`slots`]).
    pub llama_cpp: bool,
}

/// Why the run cannot start.
#[derive(Debug, thiserror::Error)]
pub enum PreflightError {
    /// No answer: the connection failed or timed out.
    #[error("cannot reach the server at {url}: {why}; check --url (and that the server is up), or pass --skip-preflight")]
    Unreachable {
        /// The URL asked.
        url: String,
        /// What went wrong.
        why: String,
    },
    /// The server refused the key.
    #[error("the server at {url} refused the request with HTTP {status}: {body}; set the API key in the variable named by --api-key-env (default AGENTX_API_KEY)")]
    Unauthorized {
        /// The URL asked.
        url: String,
        /// The HTTP status (401 or 403).
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// The model list is not where `--url` points.
    #[error("{url} answered HTTP 404: the path of --url leads nowhere on this server; pass the server's base URL (e.g. --url http://HOST:PORT), or --skip-preflight if it serves no model list")]
    NotFound {
        /// The URL asked.
        url: String,
    },
    /// The server lists models, but not `--model`.
    #[error("the server at {url} does not serve the model `{model}`: it serves {served}; pass --model {first}")]
    WrongModel {
        /// The URL asked.
        url: String,
        /// The model asked for.
        model: String,
        /// The models served, comma-separated.
        served: String,
        /// The first model served, suggested in its place.
        first: String,
    },
}

/// Asks the server for its models and checks `model` against them.
pub async fn check(
    client: &Client,
    model: &str,
    timeout: Duration,
) -> Result<Preflight, PreflightError> {
    let url = format!("{}/v1/models", client.base);
    let (status, _headers, body) = match client.get("/v1/models", timeout, BODY_LIMIT).await {
        Ok(r) => r,
        Err(GetError::Connect(why)) => return Err(PreflightError::Unreachable { url, why }),
        Err(GetError::Timeout(t)) => {
            return Ok(Preflight {
                note: Some(format!(
                    "{url} gave no answer within {t:?}; the model and context checks are skipped"
                )),
                ..Preflight::default()
            })
        }
        Err(GetError::Other(why)) => {
            // A connection that opened and then broke: a TLS mismatch (https against plain HTTP),
            // a proxy, or a server that is not HTTP. None of those will serve the run.
            return Err(PreflightError::Unreachable { url, why });
        }
    };
    let text = String::from_utf8_lossy(&body);
    if status.as_u16() == 401 || status.as_u16() == 403 {
        return Err(PreflightError::Unauthorized {
            url,
            status: status.as_u16(),
            body: super::excerpt(text.trim(), 300).to_owned(),
        });
    }
    if status.as_u16() == 404 && client.has_path() {
        // A base URL with a path that leads nowhere: every request of the run would 404 too.
        return Err(PreflightError::NotFound { url });
    }
    if !status.is_success() {
        return Ok(Preflight {
            note: Some(format!(
                "{url} answered HTTP {status}; the model and context checks are skipped"
            )),
            ..Preflight::default()
        });
    }
    let Some(mut listed) = parse_models(&text, model) else {
        return Ok(Preflight {
            note: Some(format!(
                "{url} did not answer with an OpenAI model list; the model and context checks are skipped"
            )),
            ..Preflight::default()
        });
    };
    if !listed.models.is_empty() && !listed.models.iter().any(|m| m == model) {
        return Err(PreflightError::WrongModel {
            url,
            model: model.to_owned(),
            served: listed
                .models
                .iter()
                .map(|m| format!("`{m}`"))
                .collect::<Vec<_>>()
                .join(", "),
            first: listed.models[0].clone(),
        });
    }
    if listed.models.is_empty() {
        listed.note = Some(format!("{url} lists no models; the model check is skipped"));
    }
    Ok(listed)
}

/// Why the model could not be discovered: each says to pass `--model`.
#[derive(Debug, thiserror::Error)]
pub enum DiscoverError {
    /// No answer: the connection failed or timed out.
    #[error("no --model given and {url} could not be asked which models it serves ({why}); pass --model NAME")]
    Unreachable {
        /// The URL asked.
        url: String,
        /// What went wrong.
        why: String,
    },
    /// A status other than 200 (a redirect included).
    #[error("no --model given and {url} answered HTTP {status}{location}; model discovery follows no redirect and needs the model list: pass --model NAME")]
    Status {
        /// The URL asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// ` (a redirect to LOCATION)` for a redirect, else empty.
        location: String,
    },
    /// The answer is larger than the limit.
    #[error("no --model given and {url} answered with more than {limit} bytes; pass --model NAME")]
    Oversized {
        /// The URL asked.
        url: String,
        /// The size limit, bytes.
        limit: usize,
    },
    /// The answer is not an OpenAI model list.
    #[error(
        "no --model given and {url} did not answer with an OpenAI model list; pass --model NAME"
    )]
    NotAList {
        /// The URL asked.
        url: String,
    },
    /// The list is empty.
    #[error("no --model given and {url} serves no model; pass --model NAME")]
    None {
        /// The URL asked.
        url: String,
    },
    /// The list names more than one model.
    #[error("no --model given and {url} serves several models ({served}); pass --model with one of them")]
    Several {
        /// The URL asked.
        url: String,
        /// The models served, comma-separated.
        served: String,
    },
}

/// The single model the server serves, for a run without `--model` (agentx-harness 1.0.14's
/// discovery): one `GET /v1/models`; no model, several, a redirect, an error status or an answer
/// over the size limit is an error that lists what the server serves and says to pass `--model`.
pub async fn discover(client: &Client, timeout: Duration) -> Result<String, DiscoverError> {
    let url = format!("{}/v1/models", client.base);
    let (status, headers, body) = match client.get("/v1/models", timeout, BODY_LIMIT + 1).await {
        Ok(r) => r,
        Err(e) => {
            let why = match e {
                GetError::Connect(w) | GetError::Other(w) => w,
                GetError::Timeout(t) => format!("no answer within {t:?}"),
            };
            return Err(DiscoverError::Unreachable { url, why });
        }
    };
    if !status.is_success() {
        let location = headers
            .get(hyper::header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(|l| format!(" (a redirect to {l})"))
            .unwrap_or_default();
        return Err(DiscoverError::Status {
            url,
            status: status.as_u16(),
            location,
        });
    }
    if body.len() > BODY_LIMIT {
        return Err(DiscoverError::Oversized {
            url,
            limit: BODY_LIMIT,
        });
    }
    let text = String::from_utf8_lossy(&body);
    let Some(listed) = parse_models(&text, "") else {
        return Err(DiscoverError::NotAList { url });
    };
    match listed.models.as_slice() {
        [] => Err(DiscoverError::None { url }),
        [one] => Ok(one.clone()),
        many => Err(DiscoverError::Several {
            url,
            served: many
                .iter()
                .map(|m| format!("`{m}`"))
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// The model names and the context length of `model` (or of the only model) from an OpenAI model
/// list; `None` when the body is not one.
pub(crate) fn parse_models(body: &str, model: &str) -> Option<Preflight> {
    let parsed: Value = serde_json::from_str(body).ok()?;
    let data = parsed.get("data")?.as_array()?;
    let models: Vec<String> = data
        .iter()
        .filter_map(|m| m.get("id")?.as_str().map(str::to_owned))
        .collect();
    let entry = data
        .iter()
        .find(|m| m.get("id").and_then(Value::as_str) == Some(model))
        .or(if data.len() == 1 { data.first() } else { None });
    let max_model_len = entry.and_then(context_length);
    let llama_cpp = entry
        .and_then(|m| m.get("owned_by"))
        .and_then(Value::as_str)
        == Some("llamacpp");
    Some(Preflight {
        models,
        max_model_len,
        note: None,
        llama_cpp,
    })
}

/// The context length a model entry reports, under the names servers use for it.
fn context_length(model: &Value) -> Option<u64> {
    let num = |entry: Option<&Value>| -> Option<u64> {
        let value = entry?;
        value
            .as_u64()
            .or_else(|| value.as_f64().filter(|f| *f >= 1.0).map(|f| f as u64))
    };
    num(model.get("max_model_len"))
        .or_else(|| num(model.pointer("/meta/n_ctx")))
        .or_else(|| num(model.get("context_length")))
        .or_else(|| num(model.get("max_context_length")))
        .filter(|&n| n > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vllm_model_list() {
        let b = r#"{"object":"list","data":[{"id":"Qwen/Qwen3-32B","object":"model","max_model_len":131072}]}"#;
        let p = parse_models(b, "Qwen/Qwen3-32B").unwrap();
        assert_eq!(p.models, vec!["Qwen/Qwen3-32B"]);
        assert_eq!(p.max_model_len, Some(131072));
    }

    #[test]
    fn llama_cpp_model_list_reports_the_slot_context() {
        let b = r#"{"object":"list","data":[{"id":"smollm2","object":"model","owned_by":"llamacpp","meta":{"n_ctx_train":8192,"n_ctx":4096}}]}"#;
        let p = parse_models(b, "other").unwrap();
        assert_eq!(p.models, vec!["smollm2"]);
        assert_eq!(p.max_model_len, Some(4096));
        assert!(p.llama_cpp);
    }

    #[test]
    fn several_models_take_the_named_one() {
        let b = r#"{"data":[{"id":"a","max_model_len":1000},{"id":"b","max_model_len":2000}]}"#;
        assert_eq!(parse_models(b, "b").unwrap().max_model_len, Some(2000));
        assert_eq!(parse_models(b, "c").unwrap().max_model_len, None);
    }

    #[test]
    fn not_a_model_list() {
        assert_eq!(parse_models("<html>", "m"), None);
        assert_eq!(parse_models(r#"{"models":[]}"#, "m"), None);
        let p = parse_models(r#"{"data":[{"id":"m","max_model_len":"x"}]}"#, "m").unwrap();
        assert_eq!(p.max_model_len, None);
    }
}
