//! Flags and environment into a [`RunPlan`]: the settings handed to the scenario (each with its
//! source), the client's configuration, the graces and intervals; every value checked where it is
//! given, each error naming the flag or variable and how to fix it.

use crate::scenario::ReplaySetting;
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail};

use super::run_args::RunArgs;
use crate::client::session_control::DEFAULT_SESSION_TIMEOUT_S;
use crate::client::{ClientConfig, DynamoRouting, EndpointType, RoutingHeaders};
use crate::dataset::{self, AssistantMode};
use crate::run::{positive_secs, DatasetSource, RunPlan, MAX_SECS};
use crate::run::{DEMO_CONCURRENCY, DEMO_DURATION_S};
use crate::scenario::types::{Setting, Value};

/// An environment variable under its agentx name or its aiperf name: `(name, value)`.
fn env_var(suffix: &str) -> Option<(String, String)> {
    for prefix in ["AGENTX_", "AIPERF_"] {
        let name = format!("{prefix}{suffix}");
        if let Some(value) = super::in_process::env_var(&name) {
            if !value.trim().is_empty() {
                return Some((name, value));
            }
        }
    }
    None
}

fn env_bool(suffix: &str) -> anyhow::Result<Option<bool>> {
    match env_var(suffix) {
        None => Ok(None),
        Some((name, value)) => match value.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Some(true)),
            "0" | "false" | "no" | "off" => Ok(Some(false)),
            _ => bail!("{name}={value:?} is not a boolean; use 1 or 0"),
        },
    }
}

/// `TCP_USER_TIMEOUT` when `AGENTX_HTTP_TCP_USER_TIMEOUT` / `AIPERF_HTTP_TCP_USER_TIMEOUT` is unset
/// (aiperf's default): unacknowledged data for 30 s drops a dead connection.
const DEFAULT_TCP_USER_TIMEOUT_MS: u64 = 30_000;

/// The profiling grace when neither the flag nor the scenario gives one (aiperf's flag default).
const DEFAULT_GRACE_S: u64 = 30;

/// The environment a scenario may default, as the settings it sees: `(setting, variable after the
/// AGENTX_/AIPERF_ prefix)`.
const ENV_SETTINGS: [(ReplaySetting, &str); 4] = [
    (ReplaySetting::HttpTcpUserTimeout, "HTTP_TCP_USER_TIMEOUT"),
    (
        ReplaySetting::UiRealtimeMetricsEnabled,
        "UI_REALTIME_METRICS_ENABLED",
    ),
    (
        ReplaySetting::DatasetConfigurationTimeout,
        "DATASET_CONFIGURATION_TIMEOUT",
    ),
    (
        ReplaySetting::ServiceProfileConfigureTimeout,
        "SERVICE_PROFILE_CONFIGURE_TIMEOUT",
    ),
];

/// A grace as the scenario sees it: the seconds, or the text `inf`.
fn seconds_value(parsed: Option<Duration>, given: &str) -> Value {
    match parsed {
        Some(duration) => Value::Number(duration.as_secs_f64()),
        None => Value::Text(given.trim().to_ascii_lowercase()),
    }
}

/// The session headers: `--session-header`, and `--routing-headers` or else the
/// `*_HTTP_X_*_FROM_CORRELATION_ID` switches (which a profile replaces, with a warning when set).
fn routing_headers(args: &RunArgs) -> anyhow::Result<RoutingHeaders> {
    let mut headers = RoutingHeaders::default();
    if let Some(header) = args.session_header.as_deref() {
        headers.correlation = hyper::header::HeaderName::from_bytes(header.trim().as_bytes()).map_err(|_| {
            anyhow!("--session-header {header:?} is not a valid HTTP header name; pass e.g. --session-header X-Session-ID")
        })?;
    }
    for (switch, _) in crate::client::routing::SWITCHES {
        if let Some(enabled) = env_bool(&format!("HTTP_{switch}"))? {
            if let Some(profile) = &args.routing_headers {
                tracing::warn!(
                    "HTTP_{switch} is set but --routing-headers {profile} decides the session headers; the switch is ignored"
                );
                continue;
            }
            headers.set(switch, enabled);
        }
    }
    headers.profile.clone_from(&args.routing_headers);
    Ok(headers)
}

/// What `--server-timing` asks each response for: Dynamo's worker ids and timing.
pub(crate) const SERVER_TIMING_FIELDS: [&str; 2] = ["worker_id", "timing"];

/// `extra` with `--server-timing`'s `nvext.extra_fields` merged in (added to an `nvext` object the
/// user gave, or as one of its own); an `nvext` that is not an object, or whose `extra_fields` is
/// not a list, is an error naming both flags.
fn with_server_timing(
    mut extra: Vec<(String, serde_json::Value)>,
    enabled: bool,
) -> anyhow::Result<Vec<(String, serde_json::Value)>> {
    use serde_json::{json, Value};
    if !enabled {
        return Ok(extra);
    }
    match extra.iter_mut().find(|(key, _)| key == "nvext") {
        Some((_, Value::Object(nvext))) => {
            let fields = nvext.entry("extra_fields").or_insert_with(|| json!([]));
            let Some(list) = fields.as_array_mut() else {
                bail!("--extra-inputs nvext.extra_fields is {fields}, not a list, and --server-timing adds {SERVER_TIMING_FIELDS:?} to it; pass a list, e.g. nvext:{{\"extra_fields\":[]}}");
            };
            for field in SERVER_TIMING_FIELDS {
                if !list.iter().any(|value| value == field) {
                    list.push(json!(field));
                }
            }
        }
        Some((_, other)) => bail!(
            "--extra-inputs nvext:{other} is not a JSON object, and --server-timing writes nvext.extra_fields into it; pass nvext as an object, e.g. nvext:{{\"annotations\":[]}}"
        ),
        None => extra.push(("nvext".into(), json!({ "extra_fields": SERVER_TIMING_FIELDS }))),
    }
    Ok(extra)
}

/// The flags of aiperf's command line that this host accepts but does not act on with a 0.1.0
/// (single-stream) scenario, each named with why; they are logged as warnings and recorded in the
/// manifest.
fn not_acted_on(args: &RunArgs) -> Vec<String> {
    const TREES: &str = "it only has meaning for session-tree scenarios; a single-stream scenario";
    let mut notes = Vec::new();
    if let Some(requests) = args.warmup_requests_per_lane {
        notes.push(format!(
            "--warmup-requests-per-lane {requests}: {TREES} sends one warmup request per lane"
        ));
    }
    if args.agentic_cache_warmup_duration.is_some() {
        notes.push(format!(
            "--agentic-cache-warmup-duration: {TREES} has no cache-pressure stage"
        ));
    }
    if args.system_idle_gap_cap_seconds.is_some() {
        notes.push(format!(
            "--system-idle-gap-cap-seconds: {TREES} waits each recorded delay (see --trace-idle-gap-cap-seconds)"
        ));
    }
    if args.burst_phase_starts {
        notes.push(format!(
            "--burst-phase-starts: {TREES} starts every lane at the start of profiling already"
        ));
    }
    if let Some(basis) = &args.weka_nested_timestamp_basis {
        notes.push(format!(
            "--weka-nested-timestamp-basis {basis}: {TREES} does not replay subagent entries"
        ));
    }
    if args.dynamo_session_timeout_seconds.is_some() && !args.use_dynamo_conv_aware_routing {
        notes.push("--dynamo-session-timeout-seconds: it is the lease of --use-dynamo-conv-aware-routing, which is off".to_string());
    }
    if args.tokenizer_trust_remote_code {
        notes.push("--tokenizer-trust-remote-code: agentx loads tokenizer.json files only and never runs a tokenizer's code".to_string());
    }
    notes
}

fn parse_grace(flag: &str, given: &str) -> anyhow::Result<Option<Duration>> {
    let trimmed = given.trim();
    if trimmed.eq_ignore_ascii_case("inf") || trimmed.eq_ignore_ascii_case("infinity") {
        return Ok(None);
    }
    match trimmed.parse::<f64>() {
        Ok(seconds) if (0.0..=MAX_SECS).contains(&seconds) => {
            Ok(Some(Duration::from_secs_f64(seconds)))
        }
        _ => bail!("{flag} {given:?} is not a number of seconds or `inf`; pass e.g. {flag} 30"),
    }
}

impl RunPlan {
    /// Merges flags and environment into the settings the scenario resolves, checking each value
    /// where it is given.
    pub(crate) fn resolve(args: &RunArgs) -> anyhow::Result<RunPlan> {
        let demo = args.url.is_none();
        let (dataset, loader) = dataset_of(args, demo)?;
        let extra = super::extra_inputs::extra_inputs(&args.extra_inputs, &args.endpoint_type)?;
        let mut given = given(args, demo, &dataset, loader, &extra)?;
        let extra = with_server_timing(extra, args.server_timing)?;
        let (grace, warmup_grace) = graces(args, &mut given)?;
        let trace_idle_cap = args
            .trace_idle_gap_cap_seconds
            .map(|cap| positive_secs("--trace-idle-gap-cap-seconds", cap))
            .transpose()?;
        if let Some(basis) = &args.weka_nested_timestamp_basis {
            if !matches!(basis.as_str(), "auto" | "absolute" | "relative") {
                bail!("--weka-nested-timestamp-basis {basis:?} is not auto, absolute or relative");
            }
        }
        if let Some(duration) = args.agentic_cache_warmup_duration {
            positive_secs("--agentic-cache-warmup-duration", duration)?;
        }
        if let Some(cap) = args.system_idle_gap_cap_seconds {
            positive_secs("--system-idle-gap-cap-seconds", cap)?;
        }
        let not_acted_on = not_acted_on(args);
        let (mut client, url) = client_config(args)?;
        if let Some(threshold) = args.failed_request_threshold {
            if !(0.0..=1.0).contains(&threshold) {
                bail!("--failed-request-threshold {threshold} is outside 0..1; pass a fraction, e.g. 0.05");
            }
        }
        let live_env = env_bool("DATASET_WEKA_LIVE_ASSISTANT_RESPONSES")?;
        let mode_given = args.recorded_assistant || live_env.is_some();
        let live = match live_env {
            Some(live) => live && !args.recorded_assistant,
            None => !args.recorded_assistant,
        };
        let (stats_interval, warmup_progress_interval, scrape_interval) = intervals(args)?;
        let dynamo = dynamo_routing(args, &mut client.routing)?;
        if let Some((_, nvext)) = extra.iter().find(|(key, _)| key == "nvext") {
            if dynamo.is_some() && !nvext.is_object() {
                bail!("--extra-inputs nvext:{nvext} is not a JSON object, and --use-dynamo-conv-aware-routing writes nvext.session_control into it; pass nvext as an object, e.g. nvext:{{\"annotations\":[]}}");
            }
        }
        for note in runner_env_notes(args) {
            tracing::warn!("{note}");
        }
        let host_settings = host_settings(args, dynamo);
        Ok(RunPlan {
            host_settings,
            dynamo,
            server_timing: args.server_timing,
            kv_block_size: args.kv_block_size,
            kv_capacity_tokens: args.kv_capacity_tokens,
            apply_chat_template: args.apply_chat_template,
            scrape_interval,
            gpu_scrape_interval: env_var("GPU_COLLECTION_INTERVAL")
                .map(|(name, value)| crate::client::scrape::parse_interval(&name, &value))
                .transpose()?,
            session_affinity_env: env_bool("HTTP_X_SESSION_AFFINITY_FROM_CORRELATION_ID")?,
            trace_context: args.trace_context,
            sources: given.sources,
            required_metric_prefix: env_var("REQUIRED_SERVER_METRIC_PREFIX"),
            warmup_progress_interval,
            trace_idle_cap,
            not_acted_on,
            tree_flags: crate::run::TreeFlags {
                burst: args.burst_phase_starts,
                pressure: match (
                    args.warmup_requests_per_lane,
                    args.agentic_cache_warmup_duration,
                ) {
                    (Some(requests), _) => {
                        Some(crate::replay::sched::Pressure::RequestsPerLane(requests))
                    }
                    (None, Some(duration)) => Some(crate::replay::sched::Pressure::Duration(
                        Duration::from_secs_f64(duration),
                    )),
                    (None, None) => None,
                },
                arrivals: None,
            },
            demo,
            concurrency_list: given.concurrency_list,
            url,
            model: args.model.clone(),
            dataset,
            loader,
            settings: given.settings,
            extra,
            grace,
            warmup_grace,
            mode: if live {
                AssistantMode::Live
            } else {
                AssistantMode::Recorded
            },
            mode_given,
            legacy_max_tokens: args.use_legacy_max_tokens,
            use_server_token_count: !args.client_token_count,
            overflow_phrases_env: given.overflow_phrases_env,
            client,
            stats_interval,
        })
    }
}

/// The settings handed to the scenario, with where each came from, and what the CLI learned on
/// the way.
#[derive(Default)]
struct Given {
    demo: bool,
    settings: Vec<Setting>,
    sources: Vec<(String, &'static str)>,
    concurrency_list: Option<String>,
    overflow_phrases_env: Option<Vec<String>>,
}

impl Given {
    /// A setting: explicit ones are the user's (a flag, or the variables that set the overflow
    /// rule), the others a demo's.
    fn put(&mut self, name: ReplaySetting, value: Value, explicit: bool) {
        let source = match (explicit, name) {
            (false, _) => "demo",
            (
                true,
                ReplaySetting::ContextOverflowSubstrings | ReplaySetting::ContextOverflowRateLimit,
            ) => "environment",
            (true, _) => "flag",
        };
        if explicit || self.demo {
            self.sources.push((name.name().to_string(), source));
        }
        self.settings.push(Setting {
            name: name.name().to_string(),
            value,
            explicit,
        });
    }
}

/// `--endpoint-type`, checked, and against the flags its API cannot honour.
fn endpoint_type(args: &RunArgs) -> anyhow::Result<EndpointType> {
    let api = EndpointType::parse(&args.endpoint_type).ok_or_else(|| {
        anyhow!(
            "--endpoint-type {} is not supported; use one of: {}",
            args.endpoint_type,
            EndpointType::NAMES
        )
    })?;
    if api == EndpointType::Responses && args.use_legacy_max_tokens {
        bail!(
            "--use-legacy-max-tokens sends the output limit as chat's `max_tokens`, which the \
             Responses API does not have: --endpoint-type responses always sends it as \
             `max_output_tokens`; remove the flag"
        );
    }
    Ok(api)
}

/// `--custom-dataset-type`'s format (aiperf's loader names); `None`: detected from the corpus.
pub(super) fn corpus_format(args: &RunArgs) -> anyhow::Result<Option<dataset::format::Format>> {
    let Some(loader) = &args.custom_dataset_type else {
        return Ok(None);
    };
    if loader == "graph-ir" {
        return Err(super::dataset::graph_ir::not_replayable("this command").into());
    }
    let by_name = || {
        dataset::format::Format::ALL
            .into_iter()
            .find(|format| format.as_str() == loader)
    };
    match dataset::format::Format::of_aiperf_loader(loader).or_else(by_name) {
        Some(format) => Ok(Some(format)),
        None => bail!(
            "--custom-dataset-type {loader} is not supported; use one of {}",
            dataset::format::Format::ALL
                .map(agentx_dataset::format::Format::aiperf_loader)
                .join(", ")
        ),
    }
}

/// The endpoint and dataset flags checked, and the dataset with the loader name the scenario sees.
fn dataset_of(args: &RunArgs, demo: bool) -> anyhow::Result<(DatasetSource, &'static str)> {
    endpoint_type(args)?;
    let format = corpus_format(args)?;
    if format.is_some() && args.input_file.is_none() && args.dataset.is_none() {
        bail!("--custom-dataset-type names the format of --input-file (or --dataset); give one");
    }
    if args.isl_block_size == Some(0) {
        bail!("--isl-block-size 0: give the tokens per hash block, e.g. --isl-block-size 512");
    }
    // --trace-block-size is checked where it is applied (dataset::format::FormatSpec).
    let (dataset, loader) = match (&args.dataset, &args.public_dataset, &args.input_file) {
        (Some(spec), _, _) => {
            let public = dataset::alias::lookup(spec).is_some() && !Path::new(spec).exists();
            (
                DatasetSource::Spec(spec.clone()),
                if public {
                    "semianalysis_cc_traces_weka"
                } else {
                    "weka_trace"
                },
            )
        }
        (None, Some(name), _) => {
            if dataset::alias::lookup(name).is_none() {
                bail!(
                    "--public-dataset {name} is not a known corpus; known names: {}",
                    dataset::alias::known_names()
                );
            }
            (DatasetSource::Spec(name.clone()), "semianalysis_cc_traces_weka")
        }
        (None, None, Some(file)) => (
            DatasetSource::Spec(file.display().to_string()),
            format.map_or("weka_trace", |format| format.aiperf_loader()),
        ),
        (None, None, None) if demo => (DatasetSource::Bundled, "weka_trace"),
        (None, None, None) => bail!(
            "no dataset: pass --public-dataset semianalysis_cc_traces_weka_062126 (InferenceX's current corpus), --input-file traces.jsonl --custom-dataset-type weka_trace, or --dataset PATH|NAME"
        ),
    };

    Ok((dataset, loader))
}

/// `--concurrency`'s points (one, or a sweep's list), each a number of `what`; `example` in the
/// refusal.
pub(crate) fn concurrency_points(text: &str, what: &str, example: u32) -> anyhow::Result<Vec<i64>> {
    text.split(',')
        .map(|x| x.trim().parse::<i64>())
        .collect::<Result<Vec<i64>, _>>()
        .map_err(|_| {
            anyhow!("--concurrency {text:?} is not a number of {what}; pass e.g. --concurrency {example}")
        })
}

/// `--random-seed` as the scenario takes it (0 to 2^63-1).
pub(crate) fn seed_value(seed: u64) -> anyhow::Result<Value> {
    i64::try_from(seed).map(Value::Integer).map_err(|_| {
        anyhow!(
            "--random-seed {seed} is too large; pass a seed from 0 to {}",
            i64::MAX
        )
    })
}

/// The core settings of the run (lanes, duration, seed, start ratios, dataset, the locked
/// options, the overflow rule's variables).
fn given(
    args: &RunArgs,
    demo: bool,
    dataset: &DatasetSource,
    loader: &'static str,
    extra: &[(String, serde_json::Value)],
) -> anyhow::Result<Given> {
    let mut collected = Given {
        demo,
        ..Given::default()
    };
    let mut put =
        |name: ReplaySetting, value: Value, explicit: bool| collected.put(name, value, explicit);
    let mut concurrency_list = None;
    match &args.concurrency {
        Some(text) => {
            let list = concurrency_points(text, "lanes", 16)?;
            if list.len() > 1 {
                concurrency_list = Some(text.clone());
            }
            put(ReplaySetting::Concurrency, Value::Integers(list), true);
        }
        None if demo => put(
            ReplaySetting::Concurrency,
            Value::Integers(vec![DEMO_CONCURRENCY]),
            false,
        ),
        None => {}
    }
    match args.benchmark_duration {
        Some(seconds) => put(
            ReplaySetting::BenchmarkDuration,
            Value::Number(seconds),
            true,
        ),
        None if demo => put(
            ReplaySetting::BenchmarkDuration,
            Value::Number(DEMO_DURATION_S),
            false,
        ),
        None => {}
    }
    if let Some(seed) = args.random_seed {
        put(ReplaySetting::RandomSeed, seed_value(seed)?, true);
    }
    let unsafe_override = args.unsafe_override || demo;
    put(
        ReplaySetting::UnsafeOverride,
        Value::Flag(unsafe_override),
        args.unsafe_override,
    );
    number_flags(args, &mut put);
    put(ReplaySetting::Loader, Value::Text(loader.to_string()), true);
    // The corpus by name, for scenarios that allow some public corpora and not others.
    if let DatasetSource::Spec(spec) = dataset {
        if let Some(alias) = dataset::alias::lookup(spec).filter(|_| loader != "weka_trace") {
            put(
                ReplaySetting::PublicDataset,
                Value::Text(alias.name.to_string()),
                true,
            );
        }
    }
    if let Some(target) = &args.cache_bust {
        put(ReplaySetting::CacheBust, Value::Text(target.clone()), true);
    }
    if let Some(only) = args.use_think_time_only {
        put(ReplaySetting::UseThinkTimeOnly, Value::Flag(only), true);
    }
    if args.ignore_trace_delays {
        put(ReplaySetting::IgnoreTraceDelays, Value::Flag(true), true);
    }
    if let Some(max_isl) = args.synthesis_max_isl {
        put(
            ReplaySetting::SynthesisMaxIsl,
            Value::Integer(max_isl),
            true,
        );
    }
    if let Some(pattern) = &args.arrival_pattern {
        put(
            ReplaySetting::ArrivalPattern,
            Value::Text(pattern.clone()),
            true,
        );
    }
    if args.fixed_schedule {
        put(ReplaySetting::FixedSchedule, Value::Flag(true), true);
    }
    arrival_settings(args, &mut put)?;
    wire_settings(args, &mut put)?;
    refuse_graph_flags(args)?;
    if let Some((_, value)) = extra.iter().find(|(key, _)| key == "ignore_eos") {
        match value.as_bool() {
            Some(flag) => put(ReplaySetting::IgnoreEos, Value::Flag(flag), true),
            None => bail!("--extra-inputs ignore_eos:{value} is not true or false"),
        }
    }
    let overflow_phrases_env = overflow_env(&mut put)?;

    collected.concurrency_list = concurrency_list;
    collected.overflow_phrases_env = overflow_phrases_env;
    Ok(collected)
}

/// The flags that are a number when given, each handed to the scenario under its setting.
fn number_flags(args: &RunArgs, put: &mut impl FnMut(ReplaySetting, Value, bool)) {
    let given = [
        (
            ReplaySetting::TrajectoryStartMinRatio,
            args.trajectory_start_min_ratio,
        ),
        (
            ReplaySetting::TrajectoryStartMaxRatio,
            args.trajectory_start_max_ratio,
        ),
        (
            ReplaySetting::InterTurnDelayCapSeconds,
            args.inter_turn_delay_cap_seconds,
        ),
        (
            ReplaySetting::SystemIdleGapCapSeconds,
            args.system_idle_gap_cap_seconds,
        ),
        (ReplaySetting::RequestRate, args.request_rate),
        (ReplaySetting::UserCentricRate, args.user_centric_rate),
        (
            ReplaySetting::RequestRateRampDuration,
            args.request_rate_ramp_duration,
        ),
    ];
    for (setting, value) in given {
        if let Some(number) = value {
            put(setting, Value::Number(number), true);
        }
    }
}

/// The context-overflow rule's variables (`AGENTX_CONTEXT_OVERFLOW_SUBSTRINGS`, `..._RATE_LIMIT`),
/// handed to the scenario; returns the phrases when the variable set them.
pub(crate) fn overflow_env(
    put: &mut impl FnMut(ReplaySetting, Value, bool),
) -> anyhow::Result<Option<Vec<String>>> {
    let mut phrases = None;
    if let Some((name, value)) = env_var("AGENTX_CONTEXT_OVERFLOW_SUBSTRINGS") {
        let list: Vec<String> = match serde_json::from_str::<Vec<String>>(&value) {
            Ok(parsed) => parsed,
            Err(_) => value
                .split(',')
                .map(|phrase| phrase.trim().to_string())
                .filter(|phrase| !phrase.is_empty())
                .collect(),
        };
        tracing::info!("{name} sets the context-overflow phrases");
        put(
            ReplaySetting::ContextOverflowSubstrings,
            Value::Texts(list.clone()),
            true,
        );
        phrases = Some(list);
    }
    if let Some((name, value)) = env_var("AGENTX_CONTEXT_OVERFLOW_RATE_LIMIT") {
        let limit: f64 = value
            .trim()
            .parse()
            .map_err(|_| anyhow!("{name}={value:?} is not a fraction; use e.g. 0.01"))?;
        put(
            ReplaySetting::ContextOverflowRateLimit,
            Value::Number(limit),
            true,
        );
    }
    Ok(phrases)
}

/// The open-loop session arrival flags, checked where they are given (the scenario decides whether
/// it allows them, and their defaults).
fn arrival_settings(
    args: &RunArgs,
    put: &mut impl FnMut(ReplaySetting, Value, bool),
) -> anyhow::Result<()> {
    use crate::replay::arrivals::Pattern;
    if let Some(rate) = args.session_arrival_rate {
        if !(rate.is_finite() && rate > 0.0) {
            bail!("--session-arrival-rate {rate} is not a positive number of sessions per second; pass e.g. --session-arrival-rate 0.5");
        }
        put(ReplaySetting::SessionArrivalRate, Value::Number(rate), true);
    }
    if let Some(given) = &args.session_arrival_pattern {
        let Some(pattern) = Pattern::parse(given) else {
            bail!("--session-arrival-pattern {given:?} is not an arrival pattern; use poisson, constant or gamma");
        };
        if args.session_arrival_rate.is_none() {
            bail!("--session-arrival-pattern {given} needs --session-arrival-rate: pass e.g. --session-arrival-rate 0.5");
        }
        put(
            ReplaySetting::SessionArrivalPattern,
            Value::Text(pattern.name().to_string()),
            true,
        );
    }
    if let Some(shape) = args.session_arrival_smoothness {
        let gamma = args
            .session_arrival_pattern
            .as_deref()
            .and_then(Pattern::parse)
            == Some(Pattern::Gamma);
        if !gamma {
            bail!("--session-arrival-smoothness {shape} applies to gamma arrivals only; add --session-arrival-pattern gamma or remove --session-arrival-smoothness");
        }
        if !(shape.is_finite() && shape > 0.0) {
            bail!("--session-arrival-smoothness {shape} is not a positive gamma shape; pass e.g. --session-arrival-smoothness 1.5 (1 is poisson)");
        }
        put(
            ReplaySetting::SessionArrivalSmoothness,
            Value::Number(shape),
            true,
        );
    }
    Ok(())
}

/// The flags only a graph-ir replay reads: a session-trace run refuses them rather than ignore them.
fn refuse_graph_flags(args: &RunArgs) -> anyhow::Result<()> {
    let given: Vec<&str> = [
        ("--request-count", args.request_count.is_some()),
        ("--open-loop-replay", args.open_loop_replay),
        ("--no-open-loop-replay", args.no_open_loop_replay),
        ("--replay-speedup", args.replay_speedup.is_some()),
    ]
    .into_iter()
    .filter_map(|(flag, set)| set.then_some(flag))
    .collect();
    if given.is_empty() {
        return Ok(());
    }
    bail!(
        "{}: only a graph-ir replay (`agentx-host run --format graph-ir FILE`) reads it; a \
         session-trace run stops at --benchmark-duration and its scenario paces it",
        given.join(", ")
    )
}

/// The agent's wire flags, checked where they are given (the scenario decides whether it allows
/// them, and their defaults).
fn wire_settings(
    args: &RunArgs,
    put: &mut impl FnMut(ReplaySetting, Value, bool),
) -> anyhow::Result<()> {
    if let Some(wire) = &args.wire {
        if crate::dataset::Wire::parse(wire).is_none() {
            bail!("--wire {wire:?} is not a wire; use tools or text");
        }
        put(ReplaySetting::Wire, Value::Text(wire.clone()), true);
    }
    if let Some(kept) = &args.reasoning_in_history {
        if !matches!(kept.as_str(), "keep" | "drop") {
            bail!("--reasoning-in-history {kept:?} is neither keep nor drop; pass e.g. --reasoning-in-history keep");
        }
        put(
            ReplaySetting::ReasoningInHistory,
            Value::Text(kept.clone()),
            true,
        );
    }
    Ok(())
}

/// The graces (as the flags say them, for a scenario that does not decide them) and the settings
/// of the warmup, the threshold, the idle cap, burst, entries, slices, counts, the stats interval
/// and the environment a scenario may default.
fn graces(
    args: &RunArgs,
    collected: &mut Given,
) -> anyhow::Result<(Option<Duration>, Option<Duration>)> {
    let grace = match &args.benchmark_grace_period {
        Some(text) => parse_grace("--benchmark-grace-period", text)?,
        None => Some(Duration::from_secs(DEFAULT_GRACE_S)),
    };
    let warmup_given = args
        .agentic_warmup_grace_period
        .as_ref()
        .map(|text| ("--agentic-warmup-grace-period", text))
        .or(args
            .warmup_grace_period
            .as_ref()
            .map(|text| ("--warmup-grace-period", text)));
    let warmup_grace = match (warmup_given, args.agentic_cache_warmup_duration) {
        (Some((flag, text)), _) => parse_grace(flag, text)?,
        // With a cache-pressure stage of D seconds and no warmup grace given, aiperf's default:
        // the profiling grace, or min(D, 300 s) if longer.
        (None, Some(pressure)) => {
            grace.map(|grace| grace.max(Duration::from_secs_f64(pressure.clamp(0.0, 300.0))))
        }
        (None, None) => None,
    };
    if let Some(given) = &args.benchmark_grace_period {
        collected.put(
            ReplaySetting::BenchmarkGracePeriod,
            seconds_value(grace, given),
            true,
        );
    }
    if let Some((_, given)) = warmup_given {
        collected.put(
            ReplaySetting::WarmupGracePeriod,
            seconds_value(warmup_grace, given),
            true,
        );
    }
    if let Some(threshold) = args.failed_request_threshold {
        collected.put(
            ReplaySetting::FailedRequestThreshold,
            Value::Number(threshold),
            true,
        );
    }
    if let Some(requests) = args.warmup_requests_per_lane {
        collected.put(
            ReplaySetting::WarmupRequestsPerLane,
            Value::Integer(requests.min(i64::MAX as u64) as i64),
            true,
        );
    }
    if let Some(duration) = args.agentic_cache_warmup_duration {
        collected.put(
            ReplaySetting::AgenticCacheWarmupDuration,
            Value::Number(duration),
            true,
        );
    }
    if let Some(cap) = args.trace_idle_gap_cap_seconds {
        collected.put(
            ReplaySetting::TraceIdleGapCapSeconds,
            Value::Number(cap),
            true,
        );
    }
    if args.burst_phase_starts {
        collected.put(ReplaySetting::BurstPhaseStarts, Value::Flag(true), true);
    }
    if let Some(entries) = args.num_dataset_entries {
        collected.put(
            ReplaySetting::NumDatasetEntries,
            Value::Integer(entries.min(i64::MAX as usize) as i64),
            true,
        );
    }
    if let Some(width) = args.slice_duration {
        collected.put(ReplaySetting::SliceDuration, Value::Number(width), true);
    }
    if args.use_server_token_count || args.client_token_count {
        collected.put(
            ReplaySetting::UseServerTokenCount,
            Value::Flag(!args.client_token_count),
            true,
        );
    }
    if let Some(seconds) = args.stats_interval {
        collected.put(ReplaySetting::StatsInterval, Value::Number(seconds), true);
    }
    for (setting, suffix) in ENV_SETTINGS {
        if let Some((name, text)) = env_var(suffix) {
            let lower = text.trim().to_ascii_lowercase();
            let value = match (setting.name().ends_with("-enabled"), lower.as_str()) {
                (true, "true" | "1" | "yes" | "on") => Value::Flag(true),
                (true, "false" | "0" | "no" | "off") => Value::Flag(false),
                (true, _) => bail!("{name}={text:?} is not a boolean; use 1 or 0"),
                (false, _) => Value::Number(lower.parse().map_err(|_| {
                    anyhow!("{name}={text:?} is not a number; use e.g. {name}=1800")
                })?),
            };
            collected.settings.push(Setting {
                name: setting.to_string(),
                value,
                explicit: true,
            });
            collected.sources.push((setting.to_string(), "environment"));
        }
    }
    Ok((grace, warmup_grace))
}

/// The client's configuration: routing headers, TCP user timeout, keep-alive, API key, the base
/// URL as understood, timeouts, reuse; and that URL.
pub(crate) fn client_config(args: &RunArgs) -> anyhow::Result<(ClientConfig, Option<String>)> {
    let routing = routing_headers(args)?;
    let tcp_user_timeout = match env_var("HTTP_TCP_USER_TIMEOUT") {
        None => Some(Duration::from_millis(DEFAULT_TCP_USER_TIMEOUT_MS)),
        Some((name, value)) => match value.trim().parse::<u64>() {
            Ok(ms) if (1..=1_000_000).contains(&ms) => Some(Duration::from_millis(ms)),
            _ => bail!(
                "{name}={value:?} is not a number of milliseconds from 1 to 1000000; use e.g. {name}=900000"
            ),
        },
    };
    let keepalive = match (
        args.http_keepalive_timeout,
        env_var("HTTP_KEEPALIVE_TIMEOUT"),
    ) {
        (Some(seconds), _) => positive_secs("--http-keepalive-timeout", seconds)?,
        (None, Some((name, value))) => {
            let seconds: f64 = value
                .trim()
                .parse()
                .map_err(|_| anyhow!("{name}={value:?} is not a number of seconds"))?;
            positive_secs(&name, seconds)?
        }
        (None, None) => Duration::from_secs(300),
    };
    let api_key = super::in_process::env_var(&args.api_key_env).filter(|key| !key.is_empty());
    let api = endpoint_type(args)?;
    let endpoint = args
        .endpoint
        .clone()
        .unwrap_or_else(|| api.default_path().to_string());
    let url = match &args.url {
        Some(given) => {
            let base = crate::client::base_url(given, &endpoint)?;
            if let Some(note) = &base.note {
                tracing::info!("{note}");
            }
            Some(base.url)
        }
        None => None,
    };
    let client = ClientConfig {
        url: url.clone().unwrap_or_default(),
        endpoint,
        api,
        api_key,
        idle_timeout: keepalive,
        connect_timeout: positive_secs("--connect-timeout-seconds", args.connect_timeout_seconds)?,
        request_timeout: positive_secs("--request-timeout-seconds", args.request_timeout_seconds)?,
        http2: args.http2,
        routing,
        reuse: args.connection_reuse_strategy,
        tcp_user_timeout,
        // Decided with the scenario (RunSettings::apply): off on the harness's wire.
        trace_context: false,
    };
    Ok((client, url))
}

/// `--use-dynamo-conv-aware-routing` with its lease, carried in the body; or, with
/// `*_DYNAMO_SESSION_TRANSPORT=headers`, as the `X-Dynamo-Session-ID` headers (no body change).
fn dynamo_routing(
    args: &RunArgs,
    routing: &mut RoutingHeaders,
) -> anyhow::Result<Option<DynamoRouting>> {
    let timeout_s = match &args.dynamo_session_timeout_seconds {
        None => DEFAULT_SESSION_TIMEOUT_S,
        Some(text) => match text.trim().parse::<u64>() {
            Ok(seconds) if seconds > 0 => seconds,
            _ => bail!(
                "--dynamo-session-timeout-seconds {text:?} is not a positive whole number of seconds; pass e.g. --dynamo-session-timeout-seconds 3600"
            ),
        },
    };
    if !args.use_dynamo_conv_aware_routing {
        return Ok(None);
    }
    match env_var("DYNAMO_SESSION_TRANSPORT") {
        None => Ok(Some(DynamoRouting { timeout_s })),
        Some((_, value)) if value.trim().eq_ignore_ascii_case("body") => {
            Ok(Some(DynamoRouting { timeout_s }))
        }
        Some((name, value)) if value.trim().eq_ignore_ascii_case("headers") => {
            tracing::info!(
                "{name}=headers: Dynamo sessions go as X-Dynamo-Session-ID / X-Dynamo-Parent-Session-ID headers, request bodies carry no nvext.session_control"
            );
            if let Some(profile) = &routing.profile {
                bail!(
                    "{name}=headers and --routing-headers {profile} both decide the session headers; drop one (--routing-headers dynamo sends Dynamo's headers)"
                );
            }
            routing.dynamo_session_id = true;
            Ok(None)
        }
        Some((name, value)) => {
            bail!(
                "{name}={value:?} is neither `body` nor `headers`; use {name}=headers or unset it"
            )
        }
    }
}

/// The host's own request-shape settings as the applied settings show them, each `(name, value,
/// source)`: Dynamo's routing (`body`, `headers` or off), its lease, `--apply-chat-template` (the
/// template file replaces `true` once it is found) and, when given, `--routing-headers`.
fn host_settings(
    args: &RunArgs,
    dynamo: Option<DynamoRouting>,
) -> Vec<(&'static str, serde_json::Value, &'static str)> {
    use serde_json::json;
    let source = |given: bool| if given { "flag" } else { "host default" };
    let enabled = args.use_dynamo_conv_aware_routing;
    let transport = match (enabled, dynamo.is_some()) {
        (false, _) => json!(false),
        (true, true) => json!("body"),
        (true, false) => json!("headers"),
    };
    let lease = dynamo.map(|d| d.timeout_s);
    let mut settings = vec![
        ("use-dynamo-conv-aware-routing", transport, source(enabled)),
        (
            "dynamo-session-timeout-seconds",
            json!(lease),
            source(lease.is_some() && args.dynamo_session_timeout_seconds.is_some()),
        ),
        (
            "apply-chat-template",
            json!(args.apply_chat_template),
            source(args.apply_chat_template),
        ),
    ];
    // Listed only when given, so a run without them shows the settings it always did.
    if let Some(profile) = &args.routing_headers {
        settings.push(("routing-headers", json!(profile.to_string()), "flag"));
    }
    if args.server_timing {
        settings.push(("server-timing", json!(true), "flag"));
    }
    if let Some(tokens) = args.kv_block_size {
        settings.push(("kv-block-size", json!(tokens), "flag"));
    }
    if let Some(tokens) = args.kv_capacity_tokens {
        settings.push(("kv-capacity-tokens", json!(tokens), "flag"));
    }
    settings
}

/// Variables InferenceX's runner (`infx.bench agentic`) reads to build its command line; the client
/// it launches (agentx-harness, and agentx in its place) does not read them, so a flag the runner
/// derives from one decides. Each pair: the variable, the flag it becomes.
const RUNNER_VARIABLES: [(&str, &str); 13] = [
    ("AIPERF_MAX_CONTEXT_LENGTH", "--max-context-length"),
    ("AIPERF_SERVER_METRICS_URLS", "--server-metrics"),
    (
        "AIPERF_LIVE_FAILED_REQUEST_THRESHOLD",
        "--failed-request-threshold",
    ),
    (
        "AIPERF_WARMUP_REQUESTS_PER_LANE",
        "--warmup-requests-per-lane",
    ),
    (
        "AIPERF_TRACE_IDLE_GAP_CAP_SECONDS",
        "--trace-idle-gap-cap-seconds",
    ),
    ("AGENTIC_WARMUP_GRACE_PERIOD", "--warmup-grace-period"),
    ("AIPERF_BENCHMARK_GRACE_PERIOD", "--benchmark-grace-period"),
    (
        "AIPERF_DYNAMO_SESSION_TIMEOUT_SECONDS",
        "--dynamo-session-timeout-seconds",
    ),
    (
        "AIPERF_USE_DYNAMO_CONV_AWARE_ROUTING",
        "--use-dynamo-conv-aware-routing",
    ),
    ("AIPERF_APPLY_CHAT_TEMPLATE", "--apply-chat-template"),
    ("AIPERF_EXTRA_INPUTS", "--extra-inputs"),
    ("AIPERF_UNSAFE_OVERRIDE", "--unsafe-override"),
    (
        "AIPERF_EXPERIMENTAL_FAST",
        "--benchmark-duration 1200 --warmup-requests-per-lane 1",
    ),
];

/// What the run says of a runner variable that is set: nothing when its flag says the same (the
/// runner made the line), a warning when the flag is absent or says otherwise, since the variable
/// is not read (as by the harness). The Dynamo pair is passed for `FRAMEWORK=dynamo-*` only, so
/// its variables (always set by the runner) disagree only when the flag is on and they say off.
fn runner_env_notes(args: &RunArgs) -> Vec<String> {
    let mut notes = Vec::new();
    for (var, flag) in RUNNER_VARIABLES {
        let Some(value) = super::in_process::env_var(var) else {
            continue;
        };
        let value = value.trim();
        if value.is_empty() {
            continue;
        }
        let truthy = matches!(
            value.to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        );
        let same_number = |flag_value: Option<f64>| {
            flag_value.is_some_and(|given| value.parse::<f64>().ok() == Some(given))
        };
        let agrees = match flag {
            "--max-context-length" => same_number(args.max_context_length.map(|x| x as f64)),
            "--server-metrics" => {
                let given: Vec<&str> = args.server_metrics.iter().map(|u| u.trim()).collect();
                let set: Vec<&str> = value
                    .split(',')
                    .map(str::trim)
                    .filter(|u| !u.is_empty())
                    .collect();
                !given.is_empty() && set.iter().all(|u| given.contains(u))
            }
            "--failed-request-threshold" => same_number(args.failed_request_threshold),
            "--warmup-requests-per-lane" => {
                same_number(args.warmup_requests_per_lane.map(|x| x as f64))
            }
            "--trace-idle-gap-cap-seconds" => same_number(args.trace_idle_gap_cap_seconds),
            "--warmup-grace-period" => {
                args.warmup_grace_period.as_deref().map(str::trim) == Some(value)
            }
            "--benchmark-grace-period" => {
                args.benchmark_grace_period.as_deref().map(str::trim) == Some(value)
            }
            "--dynamo-session-timeout-seconds" => {
                !args.use_dynamo_conv_aware_routing
                    || args
                        .dynamo_session_timeout_seconds
                        .as_deref()
                        .map(str::trim)
                        == Some(value)
            }
            "--use-dynamo-conv-aware-routing" => !args.use_dynamo_conv_aware_routing || truthy,
            // The runner splits the variable on whitespace, one word per value.
            "--extra-inputs" => value
                .split_whitespace()
                .eq(args.extra_inputs.iter().map(|w| w.trim())),
            // The runner also adds it for a duration under 900 s, whatever the variable says.
            "--unsafe-override" => !truthy || args.unsafe_override,
            "--benchmark-duration 1200 --warmup-requests-per-lane 1" => {
                value != "1"
                    || (args.benchmark_duration == Some(1200.0)
                        && args.warmup_requests_per_lane == Some(1))
            }
            _ => truthy == args.apply_chat_template,
        };
        if !agrees {
            notes.push(format!(
                "{var}={value} is InferenceX's runner's variable, which it turns into {flag}; agentx, like agentx-harness, does not read it: the flags of this command line decide"
            ));
        }
    }
    notes
}

/// The stats interval, the warmup heartbeat and the server-metrics scrape interval.
#[allow(clippy::type_complexity)]
fn intervals(
    args: &RunArgs,
) -> anyhow::Result<(Option<Duration>, Option<Duration>, Option<Duration>)> {
    let stats_interval = match args.stats_interval {
        Some(0.0) => None,
        Some(seconds) => Some(positive_secs("--stats-interval", seconds)?),
        None if super::in_process::stderr_is_terminal() => Some(Duration::from_secs(5)),
        None => Some(Duration::from_secs(30)),
    };
    let warmup_progress_interval = match env_var("SERVICE_WARMUP_PROGRESS_LOG_INTERVAL") {
        None => Some(Duration::from_secs(30)),
        Some((name, value)) => match value.trim().parse::<f64>() {
            Ok(0.0) => None,
            Ok(seconds) => Some(positive_secs(&name, seconds)?),
            Err(_) => {
                bail!("{name}={value:?} is not a number of seconds (0 turns the heartbeat off)")
            }
        },
    };
    let scrape_interval = env_var("SERVER_METRICS_COLLECTION_INTERVAL")
        .map(|(name, value)| crate::client::scrape::parse_interval(&name, &value))
        .transpose()?;
    Ok((stats_interval, warmup_progress_interval, scrape_interval))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolved(extra: &[&str]) -> anyhow::Result<RunPlan> {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            run: RunArgs,
        }
        let mut argv = vec![
            "run",
            "--url",
            "http://127.0.0.1:9",
            "--public-dataset",
            "semianalysis_cc_traces_weka_062126",
        ];
        argv.extend(extra);
        RunPlan::resolve(&Cli::try_parse_from(argv)?.run)
    }

    #[test]
    fn server_timing_asks_for_dynamos_fields_beside_what_nvext_holds() {
        use serde_json::json;
        let nvext = |plan: &RunPlan| {
            plan.extra
                .iter()
                .find(|(key, _)| key == "nvext")
                .map(|(_, value)| value.clone())
        };
        assert_eq!(nvext(&resolved(&[]).unwrap()), None);
        assert_eq!(
            nvext(&resolved(&["--server-timing"]).unwrap()),
            Some(json!({"extra_fields": ["worker_id", "timing"]}))
        );
        let merged = resolved(&[
            "--server-timing",
            "--extra-inputs",
            r#"nvext:{"annotations":["a"],"extra_fields":["timing"]}"#,
        ])
        .unwrap();
        assert_eq!(
            nvext(&merged),
            Some(json!({"annotations": ["a"], "extra_fields": ["timing", "worker_id"]}))
        );
        let error = resolved(&["--server-timing", "--extra-inputs", "nvext:1"])
            .unwrap_err()
            .to_string();
        assert!(
            error.contains("--server-timing writes nvext.extra_fields"),
            "{error}"
        );
    }

    #[test]
    fn dynamo_routing_is_checked_where_it_is_given() {
        let on = ["--use-dynamo-conv-aware-routing"];
        assert_eq!(
            resolved(&on).unwrap().dynamo,
            Some(DynamoRouting {
                timeout_s: DEFAULT_SESSION_TIMEOUT_S
            })
        );
        let p = resolved(&[on[0], "--dynamo-session-timeout-seconds", "3600"]).unwrap();
        assert_eq!(p.dynamo, Some(DynamoRouting { timeout_s: 3600 }));
        assert_eq!(resolved(&[]).unwrap().dynamo, None);
        for (args, want) in [
            (
                vec![on[0], "--dynamo-session-timeout-seconds", "1.5"],
                "--dynamo-session-timeout-seconds \"1.5\" is not a positive whole number",
            ),
            (
                vec![on[0], "--extra-inputs", "nvext:1"],
                "--extra-inputs nvext:1 is not a JSON object",
            ),
        ] {
            let e = resolved(&args).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        // Without the routing the lease is named as not acted on.
        let p = resolved(&["--dynamo-session-timeout-seconds", "60"]).unwrap();
        assert!(p
            .not_acted_on
            .iter()
            .any(|w| w.starts_with("--dynamo-session-timeout-seconds")));
    }

    #[test]
    fn graces_are_seconds_or_inf() {
        assert_eq!(parse_grace("--g", "inf").unwrap(), None);
        assert_eq!(parse_grace("--g", "0").unwrap(), Some(Duration::ZERO));
        for v in ["1e300", "1e19", "-1", "NaN"] {
            assert!(parse_grace("--g", v).is_err(), "{v}");
        }
    }
}
