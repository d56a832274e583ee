//! The cache preflight: does the server's prefix cache answer a repeated conversation, and does
//! the server say so in its responses?
//!
//! One two-turn conversation is sent twice through the run's own client (its extra inputs, its
//! routing headers, one correlation id of its own): turn 1 is a system block of [`SYSTEM_WORDS`]
//! words and a user line, turn 2 is turn 1 with a recorded assistant reply and a second user line.
//! A nonce opens the system block and the user lines, so that no earlier run's cache can answer
//! the first pass: the first pass is cold, the second pass repeats text the server has just seen.
//! The verdict ([`judge`]) reads the second pass's `usage.prompt_tokens_details.cached_tokens`,
//! with what the server's `/metrics` claims of its cache (vLLM's `cache_config_info`, read once
//! before the probe, [`claim_of`]):
//! - a claim of prefix caching off: [`CacheVerdict::CachingOff`];
//! - a request that failed or timed out: [`CacheVerdict::Inconclusive`], with why;
//! - no usage, or usage without cached tokens: [`CacheVerdict::NoUsageField`], naming the server
//!   flags that turn the field on;
//! - no cached token at all: [`CacheVerdict::NoHitWhileClaimed`], with the likely causes;
//! - cached tokens: [`CacheVerdict::Works`], with the figures.
//!
//! The probe writes no records: its requests are not the run's. Every figure it saw stays in the
//! result ([`CacheProbe::turns`]).

use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::sync::watch;

use agentx_protocol::{RequestBody, RequestIds, StreamTurn};

use crate::{Client, GetError};

/// Words of the probe's system block (the word model's tokens), the nonce included: long enough to
/// fill many cache blocks of any common size, short enough for a small context.
pub const SYSTEM_WORDS: usize = 1_100;

/// Output tokens each probe request asks for.
const PROBE_MAX_TOKENS: u32 = 16;

/// vLLM's cache configuration gauge: one sample per engine, the configuration in its labels.
pub const CACHE_CONFIG_INFO: &str = "vllm:cache_config_info";

/// Largest `/metrics` page read for the claim.
const METRICS_LIMIT: usize = 16 << 20;

/// The server flags that put `prompt_tokens_details.cached_tokens` into `usage`.
pub const USAGE_FLAGS: &str = "vLLM --enable-prompt-tokens-details, SGLang --enable-cache-report";

/// What the probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CacheVerdict {
    /// The repeat was answered from the cache, and the responses say so.
    Works,
    /// The responses carry no cached-token count (no `usage`, or no `prompt_tokens_details`).
    NoUsageField,
    /// The responses count cached tokens, and counted none, while the server claims prefix
    /// caching or says nothing of it.
    NoHitWhileClaimed,
    /// The server says its prefix caching is off.
    CachingOff,
    /// A probe request failed or timed out: nothing can be said.
    Inconclusive,
}

impl CacheVerdict {
    /// The verdict as the manifest writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheVerdict::Works => "works",
            CacheVerdict::NoUsageField => "no_usage_field",
            CacheVerdict::NoHitWhileClaimed => "no_hit_while_claimed",
            CacheVerdict::CachingOff => "caching_off",
            CacheVerdict::Inconclusive => "inconclusive",
        }
    }
}

/// What the server's `/metrics` says of its prefix cache, read once before the probe.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerClaim {
    /// `cache_config_info{enable_prefix_caching}`: on, off, or `None` when the server says nothing.
    pub prefix_caching: Option<bool>,
    /// The distinct `engine` labels of `cache_config_info`: the data-parallel engines behind the
    /// port, each with a cache of its own.
    pub engines: Option<u32>,
    /// `cache_config_info{block_size}`: tokens per cache block.
    pub block_size: Option<u64>,
    /// Why nothing was read, or what was missing.
    pub note: Option<String>,
}

/// One request of the probe and what its response said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProbeTurn {
    /// 1: the first sending of the conversation; 2: the repeat.
    pub pass: u8,
    /// 1 or 2: the turn of the conversation.
    pub turn: u8,
    /// The prompt's words (the word model's count).
    pub prompt_words: u64,
    /// `usage.prompt_tokens`.
    pub prompt_tokens: Option<u64>,
    /// `usage.prompt_tokens_details.cached_tokens` (Anthropic's `cache_read_input_tokens`).
    pub cached_tokens: Option<u64>,
    /// The response carried a `usage` object.
    pub usage: bool,
    /// Why the request failed.
    pub error: Option<String>,
}

impl ProbeTurn {
    /// The prompt's tokens: the server's count, else the word model's.
    pub fn prompt(&self) -> u64 {
        self.prompt_tokens.unwrap_or(self.prompt_words)
    }
}

/// The probe's result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheProbe {
    /// What it found.
    pub verdict: CacheVerdict,
    /// What was found, in one sentence with the figures.
    pub finding: String,
    /// The likely causes when the verdict is not `works`, the likeliest first.
    pub causes: Vec<String>,
    /// What to change, where one change fixes it.
    pub fix: Option<String>,
    /// The repeat's cached tokens over its prompt tokens (`None`: no usage, or a failure).
    pub repeat_hit_rate: Option<f64>,
    /// What the server's `/metrics` said of its cache.
    pub claim: ServerClaim,
    /// The requests sent, in order.
    pub turns: Vec<ProbeTurn>,
}

/// What the probe sends with, all of it the run's own.
#[derive(Debug, Clone, Copy)]
pub struct ProbeSpec<'a> {
    /// The run's body builder (model, extra inputs, token field, Dynamo's `nvext`).
    pub body: &'a RequestBody,
    /// The run's extra inputs, for the causes (`cache_prompt: false`).
    pub extra: &'a [(String, Value)],
    /// The probe's correlation id (`<run_id>-preflight`).
    pub correlation_id: &'a str,
    /// A fresh word that makes the conversation unlike anything the server saw before.
    pub nonce: &'a str,
    /// Read `/metrics` for the server's claim (off under `--no-server-metrics`).
    pub read_metrics: bool,
    /// The longest one probe request (and the `/metrics` read) may take.
    pub timeout: Duration,
}

/// Sends the conversation twice and judges the repeat. A request that fails ends the probe
/// (the rest would fail the same way): the verdict is then inconclusive.
pub async fn probe(client: &Client, spec: &ProbeSpec<'_>) -> CacheProbe {
    let claim = if spec.read_metrics {
        read_claim(client, spec.timeout).await
    } else {
        ServerClaim {
            note: Some("/metrics not read (--no-server-metrics)".to_string()),
            ..ServerClaim::default()
        }
    };
    let conversation = Conversation::new(spec.nonce);
    let mut turns = Vec::with_capacity(4);
    'passes: for pass in 1..=2u8 {
        for turn in 1..=2u8 {
            let sent = send_turn(client, spec, &conversation, pass, turn).await;
            let failed = sent.error.is_some();
            turns.push(sent);
            if failed {
                break 'passes;
            }
        }
    }
    let judged = judge(&claim, &turns, spec.extra);
    CacheProbe {
        verdict: judged.verdict,
        finding: judged.finding,
        causes: judged.causes,
        fix: judged.fix,
        repeat_hit_rate: judged.repeat_hit_rate,
        claim,
        turns,
    }
}

/// The probe's conversation: the messages of turn 1 and of turn 2 (each the messages array
/// without its closing `]`, as the body builder takes it) and their words.
struct Conversation {
    messages: [Bytes; 2],
    words: [u64; 2],
}

impl Conversation {
    fn new(nonce: &str) -> Conversation {
        let system = system_block(nonce);
        let user_1 = format!("Probe {nonce}: reply with one short sentence.");
        let assistant = "Understood. I will follow every rule above.";
        let user_2 = format!("Probe {nonce}, second question: which rule comes first?");
        let first = [
            json!({"role": "system", "content": system}),
            json!({"role": "user", "content": user_1}),
        ];
        let second = [
            json!({"role": "assistant", "content": assistant}),
            json!({"role": "user", "content": user_2}),
        ];
        let open_array = |messages: &[Value]| {
            let mut text = serde_json::to_vec(messages).expect("JSON values serialize");
            text.pop(); // the closing `]`
            text
        };
        let turn_1 = open_array(&first);
        let turn_2 = open_array(&[&first[..], &second[..]].concat());
        let words = |texts: &[&str]| {
            texts
                .iter()
                .map(|text| text.split_ascii_whitespace().count() as u64)
                .sum::<u64>()
        };
        let words_1 = words(&[&system, &user_1]);
        Conversation {
            messages: [Bytes::from(turn_1), Bytes::from(turn_2)],
            words: [words_1, words_1 + words(&[assistant, &user_2])],
        }
    }
}

/// [`SYSTEM_WORDS`] words of numbered rules, opened by the nonce.
fn system_block(nonce: &str) -> String {
    const VERBS: [&str; 8] = [
        "reads", "checks", "records", "compares", "keeps", "names", "writes", "counts",
    ];
    const NOUNS: [&str; 12] = [
        "file", "request", "record", "header", "figure", "table", "result", "prompt", "session",
        "answer", "limit", "block",
    ];
    const MANNERS: [&str; 6] = [
        "carefully",
        "once",
        "in order",
        "exactly",
        "again",
        "plainly",
    ];
    let mut words: Vec<String> = vec!["Probe".to_string(), format!("{nonce}.")];
    let mut rule = 0usize;
    while words.len() < SYSTEM_WORDS {
        rule += 1;
        let sentence = format!(
            "Rule {rule}: the assistant {} the {} {} before it {} the {}.",
            VERBS[rule % VERBS.len()],
            NOUNS[(rule * 5) % NOUNS.len()],
            MANNERS[(rule * 7) % MANNERS.len()],
            VERBS[(rule * 3 + 1) % VERBS.len()],
            NOUNS[(rule * 7 + 2) % NOUNS.len()],
        );
        words.extend(sentence.split_ascii_whitespace().map(str::to_string));
    }
    words.truncate(SYSTEM_WORDS);
    words.join(" ")
}

/// Sends one turn of one pass and reads what its response said.
async fn send_turn(
    client: &Client,
    spec: &ProbeSpec<'_>,
    conversation: &Conversation,
    pass: u8,
    turn: u8,
) -> ProbeTurn {
    let index = usize::from(turn - 1);
    let last = turn == 2;
    let body = spec.body.build_for(
        PROBE_MAX_TOKENS,
        vec![conversation.messages[index].clone()],
        StreamTurn {
            correlation_id: spec.correlation_id,
            parent_correlation_id: None,
            last,
        },
    );
    let request_id = format!("{}-p{pass}t{turn}", spec.correlation_id);
    let ids = RequestIds {
        request_id: &request_id,
        correlation_id: spec.correlation_id,
        parent_correlation_id: None,
        root_correlation_id: None,
        last,
        on_first_token: None,
    };
    // Nothing cancels the probe but its own time limit.
    let (_keep, mut never) = watch::channel(false);
    let mut sent = ProbeTurn {
        pass,
        turn,
        prompt_words: conversation.words[index],
        prompt_tokens: None,
        cached_tokens: None,
        usage: false,
        error: None,
    };
    let Ok(exchange) =
        tokio::time::timeout(spec.timeout, client.send(body, ids, false, &mut never)).await
    else {
        client.end_session(spec.correlation_id);
        sent.error = Some(format!("no complete response within {:?}", spec.timeout));
        return sent;
    };
    if let Some(failure) = exchange.failure {
        sent.error = Some(failure.message);
        return sent;
    }
    if let Some(usage) = exchange.usage {
        sent.usage = true;
        sent.prompt_tokens = usage.prompt_tokens;
        sent.cached_tokens = usage.cached_tokens;
    }
    sent
}

/// One `GET /metrics` for the server's claim; a failure is a note, not an error.
async fn read_claim(client: &Client, timeout: Duration) -> ServerClaim {
    let noted = |note: String| ServerClaim {
        note: Some(note),
        ..ServerClaim::default()
    };
    match client.get("/metrics", timeout, METRICS_LIMIT).await {
        Ok((status, _, body)) if status.is_success() => claim_of(&String::from_utf8_lossy(&body)),
        Ok((status, _, _)) => noted(format!("GET /metrics answered HTTP {status}")),
        Err(GetError::Timeout(limit)) => noted(format!("GET /metrics: no answer within {limit:?}")),
        Err(GetError::Connect(why) | GetError::Other(why)) => {
            noted(format!("GET /metrics failed: {why}"))
        }
    }
}

/// The claim of a `/metrics` page: vLLM's `cache_config_info` (`enable_prefix_caching` `True` or
/// `False` on any engine, the engines, the block size). A page without it claims nothing.
pub fn claim_of(page: &str) -> ServerClaim {
    let families = match agentx_metrics::prometheus::parse(page) {
        Ok(families) => families,
        Err(e) => {
            return ServerClaim {
                note: Some(format!("/metrics is not Prometheus text ({e})")),
                ..ServerClaim::default()
            }
        }
    };
    let Some(info) = families.iter().find(|f| f.name == CACHE_CONFIG_INFO) else {
        return ServerClaim {
            note: Some(format!("/metrics has no {CACHE_CONFIG_INFO}")),
            ..ServerClaim::default()
        };
    };
    let flags: Vec<&str> = info
        .samples
        .iter()
        .filter_map(|s| s.label("enable_prefix_caching"))
        .collect();
    let prefix_caching = match flags.as_slice() {
        [] => None,
        some => Some(some.iter().any(|flag| flag.eq_ignore_ascii_case("true"))),
    };
    let mut engines: Vec<&str> = info
        .samples
        .iter()
        .filter_map(|s| s.label("engine"))
        .collect();
    engines.sort_unstable();
    engines.dedup();
    ServerClaim {
        prefix_caching,
        engines: (!engines.is_empty()).then_some(engines.len() as u32),
        block_size: info
            .samples
            .iter()
            .find_map(|s| s.label("block_size")?.parse().ok()),
        note: prefix_caching
            .is_none()
            .then(|| format!("{CACHE_CONFIG_INFO} has no enable_prefix_caching label")),
    }
}

/// The verdict and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// The verdict.
    pub verdict: CacheVerdict,
    /// What was found, with the figures.
    pub finding: String,
    /// The likely causes, the likeliest first.
    pub causes: Vec<String>,
    /// What to change.
    pub fix: Option<String>,
    /// The repeat's cached over prompt tokens.
    pub repeat_hit_rate: Option<f64>,
}

/// The verdict of the probe's requests (`turns`, in the order sent), with the server's `claim` and
/// the run's `extra` inputs for the causes.
pub fn judge(claim: &ServerClaim, turns: &[ProbeTurn], extra: &[(String, Value)]) -> Judged {
    let judged = |verdict, finding: String, causes: Vec<String>, fix: Option<String>| Judged {
        verdict,
        finding,
        causes,
        fix,
        repeat_hit_rate: None,
    };
    if claim.prefix_caching == Some(false) {
        return judged(
            CacheVerdict::CachingOff,
            format!("the server reports prefix caching off ({CACHE_CONFIG_INFO}{{enable_prefix_caching=\"False\"}})"),
            vec!["vLLM was started with --no-enable-prefix-caching".to_string()],
            Some("start vLLM with --enable-prefix-caching".to_string()),
        );
    }
    if let Some(failed) = turns.iter().find(|t| t.error.is_some()) {
        return judged(
            CacheVerdict::Inconclusive,
            format!(
                "pass {} turn {} of the probe failed: {}",
                failed.pass,
                failed.turn,
                failed.error.as_deref().unwrap_or_default()
            ),
            Vec::new(),
            None,
        );
    }
    let repeat: Vec<&ProbeTurn> = turns.iter().filter(|t| t.pass == 2).collect();
    if repeat.len() != 2 {
        return judged(
            CacheVerdict::Inconclusive,
            format!("the probe sent {} of its 4 requests", turns.len()),
            Vec::new(),
            None,
        );
    }
    if let Some(bare) = repeat.iter().find(|t| t.cached_tokens.is_none()) {
        let what = if bare.usage {
            "usage without prompt_tokens_details.cached_tokens"
        } else {
            "no usage"
        };
        return judged(
            CacheVerdict::NoUsageField,
            format!("the server's responses carry {what}: cached tokens cannot be counted"),
            vec![
                "the server does not report cached tokens unless started with the flag".to_string(),
                "a proxy between agentx and the server drops usage".to_string(),
            ],
            Some(format!("start the server with {USAGE_FLAGS}")),
        );
    }
    let cached: u64 = repeat.iter().filter_map(|t| t.cached_tokens).sum();
    let prompt: u64 = repeat.iter().map(|t| t.prompt()).sum();
    let figures = repeat
        .iter()
        .map(|t| {
            format!(
                "turn {}: {} of {}",
                t.turn,
                t.cached_tokens.unwrap_or(0),
                t.prompt()
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    let rate = (prompt > 0).then(|| cached as f64 / prompt as f64);
    if cached == 0 {
        let claimed = match claim.prefix_caching {
            Some(true) => "while the server reports prefix caching on",
            _ => "and the server says nothing of its prefix cache",
        };
        let (causes, fix) = likely_causes(claim, &repeat, extra);
        return Judged {
            repeat_hit_rate: rate,
            ..judged(
                CacheVerdict::NoHitWhileClaimed,
                format!("the repeated conversation got 0 cached tokens ({figures}) {claimed}"),
                causes,
                fix,
            )
        };
    }
    Judged {
        repeat_hit_rate: rate,
        ..judged(
            CacheVerdict::Works,
            format!(
                "the repeated conversation was answered from the cache: {cached} of {prompt} prompt tokens cached ({figures})"
            ),
            Vec::new(),
            None,
        )
    }
}

/// Why a repeat got no cached token, the likeliest first, and the fix of the likeliest.
fn likely_causes(
    claim: &ServerClaim,
    repeat: &[&ProbeTurn],
    extra: &[(String, Value)],
) -> (Vec<String>, Option<String>) {
    let mut causes = Vec::new();
    let mut fix = None;
    if extra
        .iter()
        .any(|(key, value)| key == "cache_prompt" && *value == Value::Bool(false))
    {
        causes.push(
            "--extra-inputs sends cache_prompt: false, which turns llama.cpp's prompt cache off for every request"
                .to_string(),
        );
        fix = Some("drop cache_prompt:false from --extra-inputs".to_string());
    }
    if let Some(engines) = claim.engines.filter(|&n| n > 1) {
        causes.push(format!(
            "{engines} engines (data-parallel ranks, each with its own cache) serve behind one port: a repeat routed round-robin lands on another engine's cache"
        ));
        fix.get_or_insert_with(|| {
            "route each session to one engine (a session header the router keys on: --routing-headers)"
                .to_string()
        });
    }
    let shortest = repeat.iter().map(|t| t.prompt()).min().unwrap_or(0);
    if let Some(block) = claim.block_size.filter(|&b| b > shortest) {
        causes.push(format!(
            "the server's cache block of {block} tokens is larger than the probe's prompt of {shortest} tokens: no block fills"
        ));
    }
    if claim.prefix_caching.is_none() {
        causes.push(
            "prefix caching is off on a server that does not say so (vLLM --no-enable-prefix-caching, SGLang --disable-radix-cache)"
                .to_string(),
        );
    }
    causes.push(
        "a proxy between agentx and the server rewrites usage (cached_tokens zeroed)".to_string(),
    );
    (causes, fix)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(pass: u8, turn: u8, prompt: u64, cached: Option<u64>) -> ProbeTurn {
        ProbeTurn {
            pass,
            turn,
            prompt_words: prompt,
            prompt_tokens: Some(prompt),
            cached_tokens: cached,
            usage: true,
            error: None,
        }
    }

    /// Four requests: pass 1 cold then a turn-1 prefix hit, pass 2 as given.
    fn probe_of(repeat: [Option<u64>; 2]) -> Vec<ProbeTurn> {
        vec![
            turn(1, 1, 1108, Some(0)),
            turn(1, 2, 1125, Some(1104)),
            turn(2, 1, 1108, repeat[0]),
            turn(2, 2, 1125, repeat[1]),
        ]
    }

    fn claim(prefix_caching: Option<bool>, engines: Option<u32>) -> ServerClaim {
        ServerClaim {
            prefix_caching,
            engines,
            block_size: Some(16),
            note: None,
        }
    }

    #[test]
    fn hits_on_the_repeat_work_with_the_figures() {
        let judged = judge(
            &claim(Some(true), Some(1)),
            &probe_of([Some(1104), Some(1120)]),
            &[],
        );
        assert_eq!(judged.verdict, CacheVerdict::Works);
        assert_eq!(judged.repeat_hit_rate, Some(2224.0 / 2233.0));
        assert!(
            judged.finding.contains(
                "2224 of 2233 prompt tokens cached (turn 1: 1104 of 1108, turn 2: 1120 of 1125)"
            ),
            "{}",
            judged.finding
        );
        assert!(judged.causes.is_empty() && judged.fix.is_none());
    }

    #[test]
    fn a_claim_of_caching_off_wins() {
        let judged = judge(
            &claim(Some(false), Some(1)),
            &probe_of([Some(0), Some(0)]),
            &[],
        );
        assert_eq!(judged.verdict, CacheVerdict::CachingOff);
        assert!(judged.finding.contains("enable_prefix_caching=\"False\""));
    }

    #[test]
    fn no_usage_names_both_server_flags() {
        let mut turns = probe_of([None, None]);
        for t in &mut turns {
            t.usage = false;
            t.prompt_tokens = None;
            t.cached_tokens = None;
        }
        let judged = judge(&claim(None, None), &turns, &[]);
        assert_eq!(judged.verdict, CacheVerdict::NoUsageField);
        assert!(judged.finding.contains("no usage"), "{}", judged.finding);
        let fix = judged.fix.unwrap();
        assert!(
            fix.contains("--enable-prompt-tokens-details") && fix.contains("--enable-cache-report")
        );
        // Usage present without the details: the same verdict, said differently.
        let judged = judge(&claim(None, None), &probe_of([Some(5), None]), &[]);
        assert_eq!(judged.verdict, CacheVerdict::NoUsageField);
        assert!(judged.finding.contains("without prompt_tokens_details"));
    }

    #[test]
    fn zero_hits_with_cache_prompt_false_name_it_first() {
        let extra = vec![("cache_prompt".to_string(), Value::Bool(false))];
        let judged = judge(&claim(None, None), &probe_of([Some(0), Some(0)]), &extra);
        assert_eq!(judged.verdict, CacheVerdict::NoHitWhileClaimed);
        assert_eq!(judged.repeat_hit_rate, Some(0.0));
        assert!(
            judged.causes[0].contains("cache_prompt: false"),
            "{:?}",
            judged.causes
        );
        assert_eq!(
            judged.fix.as_deref(),
            Some("drop cache_prompt:false from --extra-inputs")
        );
        assert!(
            judged.finding.contains("says nothing"),
            "{}",
            judged.finding
        );
        // `cache_prompt: true` is no cause.
        let extra = vec![("cache_prompt".to_string(), Value::Bool(true))];
        let judged = judge(
            &claim(Some(true), Some(1)),
            &probe_of([Some(0), Some(0)]),
            &extra,
        );
        assert!(judged.causes.iter().all(|c| !c.contains("cache_prompt")));
        assert!(judged.finding.contains("reports prefix caching on"));
        assert!(judged.causes.last().unwrap().contains("proxy"));
    }

    #[test]
    fn zero_hits_behind_several_engines_or_large_blocks_say_so() {
        let judged = judge(
            &claim(Some(true), Some(4)),
            &probe_of([Some(0), Some(0)]),
            &[],
        );
        assert_eq!(judged.verdict, CacheVerdict::NoHitWhileClaimed);
        assert!(
            judged.causes[0].starts_with("4 engines"),
            "{:?}",
            judged.causes
        );
        assert!(judged.fix.unwrap().contains("--routing-headers"));
        let big = ServerClaim {
            block_size: Some(2048),
            ..claim(Some(true), Some(1))
        };
        let judged = judge(&big, &probe_of([Some(0), Some(0)]), &[]);
        assert!(
            judged.causes[0]
                .contains("block of 2048 tokens is larger than the probe's prompt of 1108"),
            "{:?}",
            judged.causes
        );
    }

    #[test]
    fn a_failed_request_is_inconclusive_with_why() {
        let mut turns = probe_of([Some(0), Some(0)]);
        turns.truncate(3);
        turns[2].error = Some("no complete response within 60s".to_string());
        let judged = judge(&claim(Some(true), Some(1)), &turns, &[]);
        assert_eq!(judged.verdict, CacheVerdict::Inconclusive);
        assert_eq!(
            judged.finding,
            "pass 2 turn 1 of the probe failed: no complete response within 60s"
        );
        assert_eq!(judged.repeat_hit_rate, None);
    }

    #[test]
    fn the_claim_reads_vllms_cache_config() {
        let page = "# TYPE vllm:cache_config_info gauge\n\
            vllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"True\",engine=\"0\"} 1.0\n\
            vllm:cache_config_info{block_size=\"16\",enable_prefix_caching=\"True\",engine=\"1\"} 1.0\n";
        assert_eq!(
            claim_of(page),
            ServerClaim {
                prefix_caching: Some(true),
                engines: Some(2),
                block_size: Some(16),
                note: None,
            }
        );
        let off = page.replace("True", "False");
        assert_eq!(claim_of(&off).prefix_caching, Some(false));
        let other = claim_of(
            "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 5\n",
        );
        assert_eq!(other.prefix_caching, None);
        assert_eq!(
            other.note.as_deref(),
            Some("/metrics has no vllm:cache_config_info")
        );
        assert!(claim_of("{not prometheus")
            .note
            .unwrap()
            .contains("not Prometheus text"));
    }

    #[test]
    fn the_conversation_is_as_long_as_it_says_and_opens_with_the_nonce() {
        let conversation = Conversation::new("n0nce");
        let system = system_block("n0nce");
        assert_eq!(system.split_ascii_whitespace().count(), SYSTEM_WORDS);
        assert!(system.starts_with("Probe n0nce. Rule 1: the assistant"));
        // Turn 2 repeats turn 1's messages as its prefix.
        assert!(conversation.messages[1].starts_with(&conversation.messages[0]));
        let parsed: Vec<Value> =
            serde_json::from_slice(&[&conversation.messages[1][..], b"]"].concat()).unwrap();
        let roles: Vec<&str> = parsed.iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "user"]);
        let words: u64 = parsed
            .iter()
            .map(|m| {
                m["content"]
                    .as_str()
                    .unwrap()
                    .split_ascii_whitespace()
                    .count() as u64
            })
            .sum();
        assert_eq!(conversation.words[1], words);
        assert_eq!(conversation.words[0], SYSTEM_WORDS as u64 + 7);
    }

    #[test]
    fn verdicts_serialize_in_snake_case() {
        for verdict in [
            CacheVerdict::Works,
            CacheVerdict::NoUsageField,
            CacheVerdict::NoHitWhileClaimed,
            CacheVerdict::CachingOff,
            CacheVerdict::Inconclusive,
        ] {
            assert_eq!(
                serde_json::to_value(verdict).unwrap(),
                Value::String(verdict.as_str().to_string())
            );
        }
    }
}
