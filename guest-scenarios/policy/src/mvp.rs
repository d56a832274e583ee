//! `inferencex-agentx-mvp`: the scenario of InferenceX's agentic-coding benchmark as aiperf defined
//! it in the PR era (docs/specs/replay-rules.md#scenario-locks), with aiperf's start-turn rule,
//! `[rid:…]` marker, overflow phrases (plus wordings aiperf's list misses) and validity rule.
//!
//! Locks (each explicit conflicting value is a violation; unset ones get the locked value):
//! agentic-replay timing (no `--request-rate`, `--arrival-pattern`, `--user-centric-rate`,
//! `--request-rate-ramp-duration`, `--fixed-schedule*`); `ignore-eos` on; `use-think-time-only` on and no
//! `--ignore-trace-delays`; no `--synthesis-max-isl`; loader `semianalysis_cc_traces_weka` or
//! `weka_trace`; `benchmark-duration` >= 900 s; `inter-turn-delay-cap-seconds` 60; `cache-bust`
//! `first_turn_prefix`; one `concurrency` value. `--num-dataset-entries` is not locked (aiperf did not).

use alloc::format;
use alloc::string::{String, ToString};
use alloc::vec::Vec;

use crate::settings::Resolver;
use crate::types::{
    Classification, DelayParams, ErrorResponse, Info, Knob, Lock, Marker, Outcome, Placement,
    Resolved, SessionId, Setting, StartParams, Trajectory, TurnTiming, Value, Violation,
};
use crate::{classify, delay, marker, start, validity, Scenario};

pub const NAME: &str = "inferencex-agentx-mvp";
pub const VERSION: &str = "0.1.0";

pub const ALLOWED_LOADERS: [&str; 2] = ["semianalysis_cc_traces_weka", "weka_trace"];
pub const MIN_DURATION_S: f64 = 900.0;
pub const DELAY_CAP_S: f64 = 60.0;
pub const START_MIN_RATIO: f64 = 0.0;
pub const START_MAX_RATIO: f64 = 0.7;

/// aiperf's four phrases, then what the servers it misses answer when a prompt does not fit:
/// - llama.cpp (`tools/server`, 400): error type `exceed_context_size_error`, message
///   "request (N tokens) exceeds the available context size (M tokens), try increasing it";
/// - TGI (router validation, 422, `{"error": "...", "error_type": "validation"}`): "Input validation
///   error: `inputs` tokens + `max_new_tokens` must be <= N. Given: ..." and "`inputs` must have less
///   than N tokens. Given: M";
/// - vLLM's input processor (token-id prompts): "The decoder prompt (length N) is longer than the
///   maximum model length of M."
///
/// Already covered by aiperf's four: vLLM's serving check ("This model's maximum context length is N
/// tokens. ...") and SGLang's tokenizer manager ("The input (N tokens) is longer than the model's
/// context length (M tokens)." and "Requested token count exceeds the model's maximum context length
/// of M tokens. ..."). The tests hold a full error body of each.
pub const OVERFLOW_PHRASES: [&str; 9] = [
    "context length",
    "maximum context",
    "context_length_exceeded",
    "prompt is too long",
    "exceed_context_size_error",
    "exceeds the available context size",
    "`inputs` tokens + `max_new_tokens` must be <=",
    "`inputs` must have less than",
    "longer than the maximum model length",
];

pub struct Mvp;

fn knob(name: &str, description: &str, default: Option<&str>) -> Knob {
    Knob {
        name: name.to_string(),
        description: description.to_string(),
        default_value: default.map(|d| d.to_string()),
    }
}

fn lock(setting: &str, rule: &str) -> Lock {
    Lock {
        setting: setting.to_string(),
        rule: rule.to_string(),
    }
}

/// Options that pick another timing mode than the scenario's agentic replay.
const OTHER_TIMING: [&str; 4] = [
    "request-rate",
    "arrival-pattern",
    "user-centric-rate",
    "request-rate-ramp-duration",
];

fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
    let mut r = Resolver::new(given);

    // Timing: only the scenario selects agentic replay; any other timing option conflicts with it.
    let mut others: Vec<String> = OTHER_TIMING.iter().map(|s| s.to_string()).collect();
    for name in r.names() {
        if name.starts_with("fixed-schedule") && !others.contains(&name) {
            others.push(name);
        }
    }
    for name in &others {
        if let Some(v) = r.explicit(name).cloned() {
            if v != Value::Flag(false) {
                r.lock(name, format!("--{name} {} conflicts with the scenario's timing: it replays agentic sessions (timing mode agentic_replay); remove --{name}", crate::settings::render(&v)));
            }
        }
    }
    match r.text("timing-mode", "agentic_replay") {
        Some(t) if t != "agentic_replay" && r.explicit("timing-mode").is_some() => {
            r.lock("timing-mode", format!("--timing-mode {t} conflicts with the scenario, which replays agentic sessions; remove --timing-mode (the scenario sets agentic_replay)"));
        }
        _ => r.set("timing-mode", Value::Text("agentic_replay".to_string())),
    }

    match r.flag("ignore-eos") {
        Some(false) if r.explicit("ignore-eos").is_some() => r.lock("ignore-eos", "--ignore-eos false is not allowed: the scenario generates each turn's recorded output length; remove --ignore-eos false".to_string()),
        _ => r.set("ignore-eos", Value::Flag(true)),
    }
    match r.flag("use-think-time-only") {
        Some(false) if r.explicit("use-think-time-only").is_some() => r.lock("use-think-time-only", "--use-think-time-only false is not allowed: the scenario waits each turn's recorded think time; remove --use-think-time-only false".to_string()),
        _ => r.set("use-think-time-only", Value::Flag(true)),
    }
    match r.flag("ignore-trace-delays") {
        Some(true) if r.explicit("ignore-trace-delays").is_some() => r.lock("ignore-trace-delays", "--ignore-trace-delays is not allowed: the scenario replays the recorded think times (capped at 60 s); remove --ignore-trace-delays".to_string()),
        _ => r.set("ignore-trace-delays", Value::Flag(false)),
    }
    match r.explicit("synthesis-max-isl").cloned() {
        Some(v) => r.lock("synthesis-max-isl", format!("--synthesis-max-isl {} would drop long requests, and the scenario forbids input truncation; remove --synthesis-max-isl", crate::settings::render(&v))),
        None => r.set("synthesis-max-isl", Value::Absent),
    }

    match r.text("loader", "semianalysis_cc_traces_weka") {
        Some(l) if ALLOWED_LOADERS.contains(&l.as_str()) => {}
        Some(l) => r.lock("loader", format!("--loader {l} is not allowed: the scenario replays weka traces; use --loader semianalysis_cc_traces_weka (the public corpus) or --loader weka_trace (local trace files)")),
        None => {
            if r.present("loader").is_none() {
                r.lock("loader", "no dataset loader given: the scenario replays weka traces; use --loader semianalysis_cc_traces_weka (the public corpus) or --loader weka_trace (local trace files)".to_string());
            }
        }
    }

    match r.number("benchmark-duration", "1800") {
        Some(d) if !(d.is_finite() && d > 0.0) => r.error("benchmark-duration", format!("--benchmark-duration {d} is not a positive number of seconds; pass e.g. --benchmark-duration 1800")),
        Some(d) if d < MIN_DURATION_S => r.lock("benchmark-duration", format!("--benchmark-duration {d} is below the scenario's minimum of 900 s; pass --benchmark-duration 900 or more (InferenceX uses 1800), or add --unsafe-override to run anyway as an invalid submission")),
        Some(_) => {}
        None => {
            if r.present("benchmark-duration").is_none() {
                r.lock("benchmark-duration", "--benchmark-duration is required: the scenario's runs last at least 900 s; pass e.g. --benchmark-duration 1800".to_string());
            }
        }
    }

    match r.number("inter-turn-delay-cap-seconds", "60") {
        Some(c) if c != DELAY_CAP_S && r.explicit("inter-turn-delay-cap-seconds").is_some() => r.lock("inter-turn-delay-cap-seconds", format!("--inter-turn-delay-cap-seconds {c} differs from the scenario's fixed cap of 60 s; remove --inter-turn-delay-cap-seconds or set it to 60")),
        _ => r.set("inter-turn-delay-cap-seconds", Value::Number(DELAY_CAP_S)),
    }

    match r.text("cache-bust", "first_turn_prefix") {
        Some(t) if Placement::parse(&t).is_none() => r.error("cache-bust", format!("--cache-bust {t} is not a cache-bust target; use one of none, system_prefix, system_suffix, first_turn_prefix, first_turn_suffix")),
        Some(t) if t != "first_turn_prefix" && r.explicit("cache-bust").is_some() => r.lock("cache-bust", format!("--cache-bust {t} differs from the scenario's first_turn_prefix (the marker goes after the shared system prompt); remove --cache-bust or set it to first_turn_prefix")),
        _ => r.set("cache-bust", Value::Text("first_turn_prefix".to_string())),
    }

    concurrency(&mut r, true);
    let (seed, drawn) = r.seed(entropy);
    let unsafe_override = r.flag("unsafe-override").unwrap_or(false);
    r.set("unsafe-override", Value::Flag(unsafe_override));
    r.start_ratios(START_MIN_RATIO, START_MAX_RATIO);
    r.overflow_phrases(Some(&OVERFLOW_PHRASES));
    r.overflow_rate_limit(validity::DEFAULT_OVERFLOW_RATE_LIMIT);
    r.finish(seed, drawn, unsafe_override)
}

/// `concurrency`: required, positive; `single` makes a sweep a lock violation.
pub(crate) fn concurrency(r: &mut Resolver, single: bool) {
    match r.integers("concurrency", "16") {
        None => {
            if r.present("concurrency").is_none() {
                r.error("concurrency", "--concurrency is required: the number of lanes (concurrent sessions), e.g. --concurrency 16".to_string());
            }
        }
        Some(list) => {
            let shown = list
                .iter()
                .map(|x| x.to_string())
                .collect::<Vec<_>>()
                .join(",");
            if list.is_empty() || list.iter().any(|&c| c <= 0) {
                r.error("concurrency", format!("--concurrency {shown} is not a positive number of lanes; pass e.g. --concurrency 16"));
            } else if single && list.len() > 1 {
                r.lock("concurrency", format!("--concurrency {shown} is a sweep; the scenario measures one concurrency per run: start one run per value, e.g. --concurrency {}", list[0]));
            }
            r.set("concurrency", Value::Integers(list));
        }
    }
}

impl Scenario for Mvp {
    fn describe() -> Info {
        Info {
            name: NAME.to_string(),
            version: VERSION.to_string(),
            description: "InferenceX agentic-coding benchmark: replay recorded Claude Code sessions as aiperf's PR-era agentx scenario does".to_string(),
            knobs: alloc::vec![
                knob("timing-mode", "how requests are scheduled; the scenario sets agentic_replay", Some("agentic_replay")),
                knob("ignore-eos", "generate each turn's recorded output length", Some("true")),
                knob("use-think-time-only", "wait the recorded think time between turns (the start gap when missing)", Some("true")),
                knob("ignore-trace-delays", "send turns without the recorded delays", Some("false")),
                knob("synthesis-max-isl", "drop requests above this input length", None),
                knob("loader", "dataset loader: semianalysis_cc_traces_weka or weka_trace", None),
                knob("benchmark-duration", "profiling time in seconds (at least 900)", None),
                knob("inter-turn-delay-cap-seconds", "upper bound of one inter-turn delay, seconds", Some("60")),
                knob("cache-bust", "where the per-session [rid:...] marker goes", Some("first_turn_prefix")),
                knob("concurrency", "number of lanes (concurrent sessions); one value", None),
                knob("random-seed", "seed of the start turns; drawn from the host's entropy when unset", None),
                knob("unsafe-override", "turn violations into warnings; the run is then not a valid submission", Some("false")),
                knob("trajectory-start-min-ratio", "lowest start turn as a fraction of the trace's turns", Some("0")),
                knob("trajectory-start-max-ratio", "highest start turn as a fraction of the trace's turns", Some("0.7")),
                knob("context-overflow-substrings", "phrases that mark an error as a context overflow", Some(&OVERFLOW_PHRASES.join(","))),
                knob("context-overflow-rate-limit", "largest overflow fraction of a valid submission", Some("0.01")),
            ],
            locks: alloc::vec![
                lock("timing-mode", "agentic_replay; --request-rate, --arrival-pattern, --user-centric-rate, --request-rate-ramp-duration and --fixed-schedule* are refused"),
                lock("ignore-eos", "true; an explicit false is refused"),
                lock("use-think-time-only", "true; an explicit false is refused, and so is --ignore-trace-delays"),
                lock("synthesis-max-isl", "unset: no input truncation"),
                lock("loader", "semianalysis_cc_traces_weka or weka_trace"),
                lock("benchmark-duration", "at least 900 s"),
                lock("inter-turn-delay-cap-seconds", "60; another explicit value is refused"),
                lock("cache-bust", "first_turn_prefix; another explicit value is refused"),
                lock("concurrency", "a single value; a sweep is refused"),
            ],
        }
    }

    fn resolve(given: Vec<Setting>, entropy: u64) -> Result<Resolved, Vec<Violation>> {
        resolve(given, entropy)
    }

    fn start_turn(params: &StartParams, trajectory: &Trajectory) -> Option<u32> {
        start::start_turn(params, trajectory)
    }

    fn cache_bust(target: Placement, session: &SessionId) -> Marker {
        marker::rid_marker(target, session)
    }

    fn classify_error(response: &ErrorResponse, phrases: Option<&[String]>) -> Classification {
        match phrases {
            Some(list) => classify::classify_phrases(response, list),
            None => classify::classify_phrases(response, &OVERFLOW_PHRASES),
        }
    }

    fn turn_delay(params: &DelayParams, timing: &TurnTiming) -> f64 {
        delay::turn_delay(params, timing)
    }

    fn validity(outcome: &Outcome) -> Vec<String> {
        validity::reasons(outcome, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::ErrorClass;
    use alloc::vec;

    fn classify(status: u16, body: &str) -> Classification {
        Mvp::classify_error(
            &ErrorResponse {
                status,
                body_excerpt: body.to_string(),
            },
            None,
        )
    }

    fn overflow(status: u16, body: &str) -> String {
        let c = classify(status, body);
        assert_eq!(c.class, ErrorClass::ContextOverflow, "{body}");
        c.matched.unwrap()
    }

    #[test]
    fn vllm_overflow_bodies() {
        let body = r#"{"object":"error","message":"This model's maximum context length is 131072 tokens. However, you requested 132000 tokens (131000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;
        assert_eq!(overflow(400, body), "context length");
        let body = r#"{"error":{"message":"'max_tokens' or 'max_completion_tokens' is too large: 8000. This model's maximum context length is 4096 tokens and your request has 2778 input tokens (8000 > 4096 - 2778). None","type":"BadRequestError","param":null,"code":400}}"#;
        assert_eq!(overflow(400, body), "context length");
        let body = r#"{"error":{"message":"The decoder prompt (length 140012) is longer than the maximum model length of 131072. Make sure that `max_model_len` is no smaller than the number of text tokens.","type":"BadRequestError","param":null,"code":400}}"#;
        assert_eq!(overflow(400, body), "longer than the maximum model length");
    }

    #[test]
    fn sglang_overflow_bodies() {
        let body = r#"{"object":"error","message":"The input (140013 tokens) is longer than the model's context length (131072 tokens).","type":"BadRequestError","param":null,"code":400}"#;
        assert_eq!(overflow(400, body), "context length");
        let body = r#"{"object":"error","message":"Requested token count exceeds the model's maximum context length of 131072 tokens. You requested a total of 132072 tokens: 131000 tokens from the input messages and 1072 tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.","type":"BadRequestError","param":null,"code":400}"#;
        assert_eq!(overflow(400, body), "context length");
    }

    #[test]
    fn llama_cpp_overflow_body() {
        let body = r#"{"error":{"code":400,"message":"request (13392 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":13392,"n_ctx":8192}}"#;
        assert_eq!(overflow(400, body), "exceed_context_size_error");
        // aiperf's own four phrases miss it
        let aiperf = [
            "context length",
            "maximum context",
            "context_length_exceeded",
            "prompt is too long",
        ];
        let r = ErrorResponse {
            status: 400,
            body_excerpt: body.to_string(),
        };
        assert_eq!(
            classify::classify_phrases(&r, &aiperf).class,
            ErrorClass::Other
        );
        // the message alone (e.g. an excerpt cut before the type) still matches
        assert_eq!(
            overflow(
                400,
                r#"{"error":{"code":400,"message":"request (13392 tokens) exceeds the available context size (8192 tokens), try"#
            ),
            "exceeds the available context size"
        );
    }

    #[test]
    fn tgi_overflow_bodies() {
        let body = r#"{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` tokens and 200 `max_new_tokens`","error_type":"validation"}"#;
        assert_eq!(
            overflow(422, body),
            "`inputs` tokens + `max_new_tokens` must be <="
        );
        let body = r#"{"error":"Input validation error: `inputs` must have less than 4095 tokens. Given: 5000","error_type":"validation"}"#;
        assert_eq!(overflow(422, body), "`inputs` must have less than");
        // another TGI validation error is not an overflow
        let body = r#"{"error":"Input validation error: `top_p` must be > 0.0 and < 1.0","error_type":"validation"}"#;
        assert_eq!(classify(422, body).class, ErrorClass::Other);
    }

    #[test]
    fn openai_code_and_escaped_messages() {
        let body = r#"{"error":{"message":"This model's maximum context length is 128000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        assert_eq!(overflow(400, body), "context length");
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 215000 tokens > 200000 maximum"}}"#;
        assert_eq!(overflow(400, body), "prompt is too long");
        // case-insensitive; the status is not consulted (a 500 and an in-stream error count too)
        assert_eq!(
            overflow(500, "MAXIMUM CONTEXT LENGTH exceeded"),
            "context length"
        );
        assert_eq!(
            overflow(
                200,
                "data: {\"error\": {\"message\": \"maximum context length\"}}"
            ),
            "context length"
        );
    }

    #[test]
    fn ordinary_failures_are_other() {
        for (status, body) in [
            (
                500,
                r#"{"object":"error","message":"CUDA out of memory","type":"InternalServerError","param":null,"code":500}"#,
            ),
            (
                429,
                r#"{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}"#,
            ),
            (0, "connection reset by peer"),
            (503, ""),
        ] {
            assert_eq!(classify(status, body), classify::other());
        }
    }

    #[test]
    fn phrase_override() {
        let r = ErrorResponse {
            status: 400,
            body_excerpt: "This model's maximum context length is 8192 tokens".to_string(),
        };
        assert_eq!(Mvp::classify_error(&r, Some(&[])).class, ErrorClass::Other);
        let mine = vec!["MODEL'S MAXIMUM".to_string()];
        assert_eq!(
            Mvp::classify_error(&r, Some(&mine)).matched.as_deref(),
            Some("MODEL'S MAXIMUM")
        );
    }
}
