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
        let k = format!("{prefix}{suffix}");
        if let Some(v) = super::in_process::env_var(&k) {
            if !v.trim().is_empty() {
                return Some((k, v));
            }
        }
    }
    None
}

fn env_bool(suffix: &str) -> anyhow::Result<Option<bool>> {
    match env_var(suffix) {
        None => Ok(None),
        Some((k, v)) => match v.trim().to_ascii_lowercase().as_str() {
            "1" | "true" | "yes" | "on" => Ok(Some(true)),
            "0" | "false" | "no" | "off" => Ok(Some(false)),
            _ => bail!("{k}={v:?} is not a boolean; use 1 or 0"),
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
        Some(d) => Value::Number(d.as_secs_f64()),
        None => Value::Text(given.trim().to_ascii_lowercase()),
    }
}

/// The session headers: `--session-header` and the `*_HTTP_X_*_FROM_CORRELATION_ID` switches.
fn routing_headers(session_header: Option<&str>) -> anyhow::Result<RoutingHeaders> {
    let mut r = RoutingHeaders::default();
    if let Some(h) = session_header {
        r.correlation = hyper::header::HeaderName::from_bytes(h.trim().as_bytes()).map_err(|_| {
            anyhow!("--session-header {h:?} is not a valid HTTP header name; pass e.g. --session-header X-Session-ID")
        })?;
    }
    for (switch, _) in crate::client::routing::SWITCHES {
        if let Some(on) = env_bool(&format!("HTTP_{switch}"))? {
            r.set(switch, on);
        }
    }
    Ok(r)
}

/// The flags of aiperf's command line that this host accepts but does not act on with a 0.1.0
/// (single-stream) scenario, each named with why; they are logged as warnings and recorded in the
/// manifest.
fn not_acted_on(a: &RunArgs) -> Vec<String> {
    const TREES: &str = "it only has meaning for session-tree scenarios; a single-stream scenario";
    let mut v = Vec::new();
    if let Some(n) = a.warmup_requests_per_lane {
        v.push(format!(
            "--warmup-requests-per-lane {n}: {TREES} sends one warmup request per lane"
        ));
    }
    if a.agentic_cache_warmup_duration.is_some() {
        v.push(format!(
            "--agentic-cache-warmup-duration: {TREES} has no cache-pressure stage"
        ));
    }
    if a.system_idle_gap_cap_seconds.is_some() {
        v.push(format!(
            "--system-idle-gap-cap-seconds: {TREES} waits each recorded delay (see --trace-idle-gap-cap-seconds)"
        ));
    }
    if a.burst_phase_starts {
        v.push(format!(
            "--burst-phase-starts: {TREES} starts every lane at the start of profiling already"
        ));
    }
    if let Some(b) = &a.weka_nested_timestamp_basis {
        v.push(format!(
            "--weka-nested-timestamp-basis {b}: {TREES} does not replay subagent entries"
        ));
    }
    if a.dynamo_session_timeout_seconds.is_some() && !a.use_dynamo_conv_aware_routing {
        v.push("--dynamo-session-timeout-seconds: it is the lease of --use-dynamo-conv-aware-routing, which is off".to_string());
    }
    if a.no_gpu_telemetry {
        v.push("--no-gpu-telemetry: agentx collects no GPU telemetry".to_string());
    }
    if a.tokenizer_trust_remote_code {
        v.push("--tokenizer-trust-remote-code: agentx loads tokenizer.json files only and never runs a tokenizer's code".to_string());
    }
    v
}

fn parse_grace(flag: &str, v: &str) -> anyhow::Result<Option<Duration>> {
    let t = v.trim();
    if t.eq_ignore_ascii_case("inf") || t.eq_ignore_ascii_case("infinity") {
        return Ok(None);
    }
    match t.parse::<f64>() {
        Ok(x) if (0.0..=MAX_SECS).contains(&x) => Ok(Some(Duration::from_secs_f64(x))),
        _ => bail!("{flag} {v:?} is not a number of seconds or `inf`; pass e.g. {flag} 30"),
    }
}

impl RunPlan {
    /// Merges flags and environment into the settings the scenario resolves, checking each value
    /// where it is given.
    pub fn resolve(a: &RunArgs) -> anyhow::Result<RunPlan> {
        let demo = a.url.is_none();
        let (dataset, loader) = dataset_of(a, demo)?;
        let extra = super::extra_inputs::extra_inputs(&a.extra_inputs, &a.endpoint_type)?;
        let mut g = given(a, demo, &dataset, loader, &extra)?;
        let (grace, warmup_grace) = graces(a, &mut g)?;
        let trace_idle_cap = a
            .trace_idle_gap_cap_seconds
            .map(|c| positive_secs("--trace-idle-gap-cap-seconds", c))
            .transpose()?;
        if let Some(b) = &a.weka_nested_timestamp_basis {
            if !matches!(b.as_str(), "auto" | "absolute" | "relative") {
                bail!("--weka-nested-timestamp-basis {b:?} is not auto, absolute or relative");
            }
        }
        if let Some(d) = a.agentic_cache_warmup_duration {
            positive_secs("--agentic-cache-warmup-duration", d)?;
        }
        if let Some(c) = a.system_idle_gap_cap_seconds {
            positive_secs("--system-idle-gap-cap-seconds", c)?;
        }
        let not_acted_on = not_acted_on(a);
        let (mut client, url) = client_config(a)?;
        if let Some(f) = a.failed_request_threshold {
            if !(0.0..=1.0).contains(&f) {
                bail!("--failed-request-threshold {f} is outside 0..1; pass a fraction, e.g. 0.05");
            }
        }
        let live_env = env_bool("DATASET_WEKA_LIVE_ASSISTANT_RESPONSES")?;
        let mode_given = a.recorded_assistant || live_env.is_some();
        let live = match live_env {
            Some(b) => b && !a.recorded_assistant,
            None => !a.recorded_assistant,
        };
        let (stats_interval, warmup_progress_interval, scrape_interval) = intervals(a)?;
        let dynamo = dynamo_routing(a, &mut client.routing)?;
        if let Some((_, v)) = extra.iter().find(|(k, _)| k == "nvext") {
            if dynamo.is_some() && !v.is_object() {
                bail!("--extra-inputs nvext:{v} is not a JSON object, and --use-dynamo-conv-aware-routing writes nvext.session_control into it; pass nvext as an object, e.g. nvext:{{\"annotations\":[]}}");
            }
        }
        for note in runner_env_notes(a) {
            tracing::warn!("{note}");
        }
        let host_settings = host_settings(a, dynamo);
        Ok(RunPlan {
            host_settings,
            dynamo,
            apply_chat_template: a.apply_chat_template,
            scrape_interval,
            session_affinity_env: env_bool("HTTP_X_SESSION_AFFINITY_FROM_CORRELATION_ID")?,
            sources: g.sources,
            required_metric_prefix: env_var("REQUIRED_SERVER_METRIC_PREFIX"),
            warmup_progress_interval,
            trace_idle_cap,
            not_acted_on,
            tree_flags: crate::run::TreeFlags {
                burst: a.burst_phase_starts,
                pressure: match (a.warmup_requests_per_lane, a.agentic_cache_warmup_duration) {
                    (Some(n), _) => Some(crate::replay::sched::Pressure::RequestsPerLane(n)),
                    (None, Some(d)) => Some(crate::replay::sched::Pressure::Duration(
                        Duration::from_secs_f64(d),
                    )),
                    (None, None) => None,
                },
                arrivals: None,
            },
            demo,
            concurrency_list: g.concurrency_list,
            url,
            model: a.model.clone(),
            dataset,
            loader,
            settings: g.settings,
            extra,
            grace,
            warmup_grace,
            mode: if live {
                AssistantMode::Live
            } else {
                AssistantMode::Recorded
            },
            mode_given,
            legacy_max_tokens: a.use_legacy_max_tokens,
            use_server_token_count: !a.client_token_count,
            overflow_phrases_env: g.overflow_phrases_env,
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

/// `--endpoint-type`, checked.
fn endpoint_type(a: &RunArgs) -> anyhow::Result<EndpointType> {
    EndpointType::parse(&a.endpoint_type).ok_or_else(|| {
        anyhow!(
            "--endpoint-type {} is not supported; use one of: {}",
            a.endpoint_type,
            EndpointType::NAMES
        )
    })
}

/// `--custom-dataset-type`'s format (aiperf's loader names); `None`: detected from the corpus.
pub(super) fn corpus_format(a: &RunArgs) -> anyhow::Result<Option<dataset::format::Format>> {
    let Some(t) = &a.custom_dataset_type else {
        return Ok(None);
    };
    match dataset::format::Format::of_aiperf_loader(t) {
        Some(f) => Ok(Some(f)),
        None => bail!(
            "--custom-dataset-type {t} is not supported; use one of {}",
            dataset::format::Format::ALL
                .map(agentx_dataset::format::Format::aiperf_loader)
                .join(", ")
        ),
    }
}

/// The endpoint and dataset flags checked, and the dataset with the loader name the scenario sees.
fn dataset_of(a: &RunArgs, demo: bool) -> anyhow::Result<(DatasetSource, &'static str)> {
    endpoint_type(a)?;
    let format = corpus_format(a)?;
    if format.is_some() && a.input_file.is_none() && a.dataset.is_none() {
        bail!("--custom-dataset-type names the format of --input-file (or --dataset); give one");
    }
    if a.isl_block_size == Some(0) {
        bail!("--isl-block-size 0: give the tokens per hash block, e.g. --isl-block-size 512");
    }
    // --trace-block-size is checked where it is applied (dataset::format::FormatSpec).
    let (dataset, loader) = match (&a.dataset, &a.public_dataset, &a.input_file) {
        (Some(d), _, _) => {
            let public = dataset::alias::lookup(d).is_some() && !Path::new(d).exists();
            (
                DatasetSource::Spec(d.clone()),
                if public {
                    "semianalysis_cc_traces_weka"
                } else {
                    "weka_trace"
                },
            )
        }
        (None, Some(p), _) => {
            if dataset::alias::lookup(p).is_none() {
                bail!(
                    "--public-dataset {p} is not a known corpus; known names: {}",
                    dataset::alias::known_names()
                );
            }
            (DatasetSource::Spec(p.clone()), "semianalysis_cc_traces_weka")
        }
        (None, None, Some(f)) => (
            DatasetSource::Spec(f.display().to_string()),
            format.map_or("weka_trace", |f| f.aiperf_loader()),
        ),
        (None, None, None) if demo => (DatasetSource::Bundled, "weka_trace"),
        (None, None, None) => bail!(
            "no dataset: pass --public-dataset semianalysis_cc_traces_weka_062126 (InferenceX's current corpus), --input-file traces.jsonl --custom-dataset-type weka_trace, or --dataset PATH|NAME"
        ),
    };

    Ok((dataset, loader))
}

/// The core settings of the run (lanes, duration, seed, start ratios, dataset, the locked
/// options, the overflow rule's variables).
fn given(
    a: &RunArgs,
    demo: bool,
    dataset: &DatasetSource,
    loader: &'static str,
    extra: &[(String, serde_json::Value)],
) -> anyhow::Result<Given> {
    let mut g = Given {
        demo,
        ..Given::default()
    };
    let mut put = |name: ReplaySetting, value: Value, explicit: bool| g.put(name, value, explicit);
    let mut concurrency_list = None;
    match &a.concurrency {
        Some(c) => {
            let list: Result<Vec<i64>, _> = c.split(',').map(|x| x.trim().parse::<i64>()).collect();
            let list = list.map_err(|_| {
                anyhow!("--concurrency {c:?} is not a number of lanes; pass e.g. --concurrency 16")
            })?;
            if list.len() > 1 {
                concurrency_list = Some(c.clone());
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
    match a.benchmark_duration {
        Some(d) => put(ReplaySetting::BenchmarkDuration, Value::Number(d), true),
        None if demo => put(
            ReplaySetting::BenchmarkDuration,
            Value::Number(DEMO_DURATION_S),
            false,
        ),
        None => {}
    }
    if let Some(seed) = a.random_seed {
        if seed > i64::MAX as u64 {
            bail!(
                "--random-seed {seed} is too large; pass a seed from 0 to {}",
                i64::MAX
            );
        }
        put(ReplaySetting::RandomSeed, Value::Integer(seed as i64), true);
    }
    let unsafe_override = a.unsafe_override || demo;
    put(
        ReplaySetting::UnsafeOverride,
        Value::Flag(unsafe_override),
        a.unsafe_override,
    );
    number_flags(a, &mut put);
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
    if let Some(t) = &a.cache_bust {
        put(ReplaySetting::CacheBust, Value::Text(t.clone()), true);
    }
    if let Some(b) = a.use_think_time_only {
        put(ReplaySetting::UseThinkTimeOnly, Value::Flag(b), true);
    }
    if a.ignore_trace_delays {
        put(ReplaySetting::IgnoreTraceDelays, Value::Flag(true), true);
    }
    if let Some(x) = a.synthesis_max_isl {
        put(ReplaySetting::SynthesisMaxIsl, Value::Integer(x), true);
    }
    if let Some(x) = &a.arrival_pattern {
        put(ReplaySetting::ArrivalPattern, Value::Text(x.clone()), true);
    }
    if a.fixed_schedule {
        put(ReplaySetting::FixedSchedule, Value::Flag(true), true);
    }
    arrival_settings(a, &mut put)?;
    if let Some((_, v)) = extra.iter().find(|(k, _)| k == "ignore_eos") {
        match v.as_bool() {
            Some(b) => put(ReplaySetting::IgnoreEos, Value::Flag(b), true),
            None => bail!("--extra-inputs ignore_eos:{v} is not true or false"),
        }
    }
    let overflow_phrases_env = overflow_env(&mut put)?;

    g.concurrency_list = concurrency_list;
    g.overflow_phrases_env = overflow_phrases_env;
    Ok(g)
}

/// The flags that are a number when given, each handed to the scenario under its setting.
fn number_flags(a: &RunArgs, put: &mut impl FnMut(ReplaySetting, Value, bool)) {
    let given = [
        (
            ReplaySetting::TrajectoryStartMinRatio,
            a.trajectory_start_min_ratio,
        ),
        (
            ReplaySetting::TrajectoryStartMaxRatio,
            a.trajectory_start_max_ratio,
        ),
        (
            ReplaySetting::InterTurnDelayCapSeconds,
            a.inter_turn_delay_cap_seconds,
        ),
        (
            ReplaySetting::SystemIdleGapCapSeconds,
            a.system_idle_gap_cap_seconds,
        ),
        (ReplaySetting::RequestRate, a.request_rate),
        (ReplaySetting::UserCentricRate, a.user_centric_rate),
        (
            ReplaySetting::RequestRateRampDuration,
            a.request_rate_ramp_duration,
        ),
    ];
    for (setting, value) in given {
        if let Some(x) = value {
            put(setting, Value::Number(x), true);
        }
    }
}

/// The context-overflow rule's variables (`AGENTX_CONTEXT_OVERFLOW_SUBSTRINGS`, `..._RATE_LIMIT`),
/// handed to the scenario; returns the phrases when the variable set them.
fn overflow_env(
    put: &mut impl FnMut(ReplaySetting, Value, bool),
) -> anyhow::Result<Option<Vec<String>>> {
    let mut phrases = None;
    if let Some((k, v)) = env_var("AGENTX_CONTEXT_OVERFLOW_SUBSTRINGS") {
        let list: Vec<String> = match serde_json::from_str::<Vec<String>>(&v) {
            Ok(l) => l,
            Err(_) => v
                .split(',')
                .map(|p| p.trim().to_string())
                .filter(|p| !p.is_empty())
                .collect(),
        };
        tracing::info!("{k} sets the context-overflow phrases");
        put(
            ReplaySetting::ContextOverflowSubstrings,
            Value::Texts(list.clone()),
            true,
        );
        phrases = Some(list);
    }
    if let Some((k, v)) = env_var("AGENTX_CONTEXT_OVERFLOW_RATE_LIMIT") {
        let x: f64 = v
            .trim()
            .parse()
            .map_err(|_| anyhow!("{k}={v:?} is not a fraction; use e.g. 0.01"))?;
        put(
            ReplaySetting::ContextOverflowRateLimit,
            Value::Number(x),
            true,
        );
    }
    Ok(phrases)
}

/// The open-loop session arrival flags, checked where they are given (the scenario decides whether
/// it allows them, and their defaults).
fn arrival_settings(
    a: &RunArgs,
    put: &mut impl FnMut(ReplaySetting, Value, bool),
) -> anyhow::Result<()> {
    use crate::replay::arrivals::Pattern;
    if let Some(r) = a.session_arrival_rate {
        if !(r.is_finite() && r > 0.0) {
            bail!("--session-arrival-rate {r} is not a positive number of sessions per second; pass e.g. --session-arrival-rate 0.5");
        }
        put(ReplaySetting::SessionArrivalRate, Value::Number(r), true);
    }
    if let Some(p) = &a.session_arrival_pattern {
        let Some(pattern) = Pattern::parse(p) else {
            bail!("--session-arrival-pattern {p:?} is not an arrival pattern; use poisson, constant or gamma");
        };
        if a.session_arrival_rate.is_none() {
            bail!("--session-arrival-pattern {p} needs --session-arrival-rate: pass e.g. --session-arrival-rate 0.5");
        }
        put(
            ReplaySetting::SessionArrivalPattern,
            Value::Text(pattern.name().to_string()),
            true,
        );
    }
    if let Some(s) = a.session_arrival_smoothness {
        let gamma = a
            .session_arrival_pattern
            .as_deref()
            .and_then(Pattern::parse)
            == Some(Pattern::Gamma);
        if !gamma {
            bail!("--session-arrival-smoothness {s} applies to gamma arrivals only; add --session-arrival-pattern gamma or remove --session-arrival-smoothness");
        }
        if !(s.is_finite() && s > 0.0) {
            bail!("--session-arrival-smoothness {s} is not a positive gamma shape; pass e.g. --session-arrival-smoothness 1.5 (1 is poisson)");
        }
        put(
            ReplaySetting::SessionArrivalSmoothness,
            Value::Number(s),
            true,
        );
    }
    Ok(())
}

/// The graces (as the flags say them, for a scenario that does not decide them) and the settings
/// of the warmup, the threshold, the idle cap, burst, entries, slices, counts, the stats interval
/// and the environment a scenario may default.
fn graces(a: &RunArgs, g: &mut Given) -> anyhow::Result<(Option<Duration>, Option<Duration>)> {
    let grace = match &a.benchmark_grace_period {
        Some(g) => parse_grace("--benchmark-grace-period", g)?,
        None => Some(Duration::from_secs(DEFAULT_GRACE_S)),
    };
    let warmup_given = a
        .agentic_warmup_grace_period
        .as_ref()
        .map(|g| ("--agentic-warmup-grace-period", g))
        .or(a
            .warmup_grace_period
            .as_ref()
            .map(|g| ("--warmup-grace-period", g)));
    let warmup_grace = match (warmup_given, a.agentic_cache_warmup_duration) {
        (Some((flag, g)), _) => parse_grace(flag, g)?,
        // With a cache-pressure stage of D seconds and no warmup grace given, aiperf's default:
        // the profiling grace, or min(D, 300 s) if longer.
        (None, Some(d)) => grace.map(|g| g.max(Duration::from_secs_f64(d.clamp(0.0, 300.0)))),
        (None, None) => None,
    };
    if let Some(given) = &a.benchmark_grace_period {
        g.put(
            ReplaySetting::BenchmarkGracePeriod,
            seconds_value(grace, given),
            true,
        );
    }
    if let Some((_, given)) = warmup_given {
        g.put(
            ReplaySetting::WarmupGracePeriod,
            seconds_value(warmup_grace, given),
            true,
        );
    }
    if let Some(f) = a.failed_request_threshold {
        g.put(
            ReplaySetting::FailedRequestThreshold,
            Value::Number(f),
            true,
        );
    }
    if let Some(n) = a.warmup_requests_per_lane {
        g.put(
            ReplaySetting::WarmupRequestsPerLane,
            Value::Integer(n.min(i64::MAX as u64) as i64),
            true,
        );
    }
    if let Some(d) = a.agentic_cache_warmup_duration {
        g.put(
            ReplaySetting::AgenticCacheWarmupDuration,
            Value::Number(d),
            true,
        );
    }
    if let Some(c) = a.trace_idle_gap_cap_seconds {
        g.put(
            ReplaySetting::TraceIdleGapCapSeconds,
            Value::Number(c),
            true,
        );
    }
    if a.burst_phase_starts {
        g.put(ReplaySetting::BurstPhaseStarts, Value::Flag(true), true);
    }
    if let Some(n) = a.num_dataset_entries {
        g.put(
            ReplaySetting::NumDatasetEntries,
            Value::Integer(n.min(i64::MAX as usize) as i64),
            true,
        );
    }
    if let Some(x) = a.slice_duration {
        g.put(ReplaySetting::SliceDuration, Value::Number(x), true);
    }
    if a.use_server_token_count || a.client_token_count {
        g.put(
            ReplaySetting::UseServerTokenCount,
            Value::Flag(!a.client_token_count),
            true,
        );
    }
    if let Some(x) = a.stats_interval {
        g.put(ReplaySetting::StatsInterval, Value::Number(x), true);
    }
    for (setting, suffix) in ENV_SETTINGS {
        if let Some((k, v)) = env_var(suffix) {
            let t = v.trim().to_ascii_lowercase();
            let value = match (setting.name().ends_with("-enabled"), t.as_str()) {
                (true, "true" | "1" | "yes" | "on") => Value::Flag(true),
                (true, "false" | "0" | "no" | "off") => Value::Flag(false),
                (true, _) => bail!("{k}={v:?} is not a boolean; use 1 or 0"),
                (false, _) => Value::Number(
                    t.parse()
                        .map_err(|_| anyhow!("{k}={v:?} is not a number; use e.g. {k}=1800"))?,
                ),
            };
            g.settings.push(Setting {
                name: setting.to_string(),
                value,
                explicit: true,
            });
            g.sources.push((setting.to_string(), "environment"));
        }
    }
    Ok((grace, warmup_grace))
}

/// The client's configuration: routing headers, TCP user timeout, keep-alive, API key, the base
/// URL as understood, timeouts, reuse; and that URL.
fn client_config(a: &RunArgs) -> anyhow::Result<(ClientConfig, Option<String>)> {
    let routing = routing_headers(a.session_header.as_deref())?;
    let tcp_user_timeout = match env_var("HTTP_TCP_USER_TIMEOUT") {
        None => Some(Duration::from_millis(DEFAULT_TCP_USER_TIMEOUT_MS)),
        Some((k, v)) => match v.trim().parse::<u64>() {
            Ok(ms) if (1..=1_000_000).contains(&ms) => Some(Duration::from_millis(ms)),
            _ => bail!(
                "{k}={v:?} is not a number of milliseconds from 1 to 1000000; use e.g. {k}=900000"
            ),
        },
    };
    let keepalive = match (a.http_keepalive_timeout, env_var("HTTP_KEEPALIVE_TIMEOUT")) {
        (Some(x), _) => positive_secs("--http-keepalive-timeout", x)?,
        (None, Some((k, v))) => {
            let x: f64 = v
                .trim()
                .parse()
                .map_err(|_| anyhow!("{k}={v:?} is not a number of seconds"))?;
            positive_secs(&k, x)?
        }
        (None, None) => Duration::from_secs(300),
    };
    let api_key = super::in_process::env_var(&a.api_key_env).filter(|k| !k.is_empty());
    let api = endpoint_type(a)?;
    let endpoint = a
        .endpoint
        .clone()
        .unwrap_or_else(|| api.default_path().to_string());
    let url = match &a.url {
        Some(u) => {
            let b = crate::client::base_url(u, &endpoint)?;
            if let Some(n) = &b.note {
                tracing::info!("{n}");
            }
            Some(b.url)
        }
        None => None,
    };
    let client = ClientConfig {
        url: url.clone().unwrap_or_default(),
        endpoint,
        api,
        api_key,
        idle_timeout: keepalive,
        connect_timeout: positive_secs("--connect-timeout-seconds", a.connect_timeout_seconds)?,
        request_timeout: positive_secs("--request-timeout-seconds", a.request_timeout_seconds)?,
        http2: a.http2,
        routing,
        reuse: a.connection_reuse_strategy,
        tcp_user_timeout,
    };
    Ok((client, url))
}

/// `--use-dynamo-conv-aware-routing` with its lease, carried in the body; or, with
/// `*_DYNAMO_SESSION_TRANSPORT=headers`, as the `X-Dynamo-Session-ID` headers (no body change).
fn dynamo_routing(
    a: &RunArgs,
    routing: &mut RoutingHeaders,
) -> anyhow::Result<Option<DynamoRouting>> {
    let timeout_s = match &a.dynamo_session_timeout_seconds {
        None => DEFAULT_SESSION_TIMEOUT_S,
        Some(t) => match t.trim().parse::<u64>() {
            Ok(s) if s > 0 => s,
            _ => bail!(
                "--dynamo-session-timeout-seconds {t:?} is not a positive whole number of seconds; pass e.g. --dynamo-session-timeout-seconds 3600"
            ),
        },
    };
    if !a.use_dynamo_conv_aware_routing {
        return Ok(None);
    }
    match env_var("DYNAMO_SESSION_TRANSPORT") {
        None => Ok(Some(DynamoRouting { timeout_s })),
        Some((_, v)) if v.trim().eq_ignore_ascii_case("body") => {
            Ok(Some(DynamoRouting { timeout_s }))
        }
        Some((k, v)) if v.trim().eq_ignore_ascii_case("headers") => {
            tracing::info!(
                "{k}=headers: Dynamo sessions go as X-Dynamo-Session-ID / X-Dynamo-Parent-Session-ID headers, request bodies carry no nvext.session_control"
            );
            routing.dynamo_session_id = true;
            Ok(None)
        }
        Some((k, v)) => {
            bail!("{k}={v:?} is neither `body` nor `headers`; use {k}=headers or unset it")
        }
    }
}

/// The host's own request-shape settings as the applied settings show them, each `(name, value,
/// source)`: Dynamo's routing (`body`, `headers` or off), its lease and `--apply-chat-template`
/// (the template file replaces `true` once it is found).
fn host_settings(
    a: &RunArgs,
    dynamo: Option<DynamoRouting>,
) -> Vec<(&'static str, serde_json::Value, &'static str)> {
    use serde_json::json;
    let src = |given: bool| if given { "flag" } else { "host default" };
    let on = a.use_dynamo_conv_aware_routing;
    let transport = match (on, dynamo.is_some()) {
        (false, _) => json!(false),
        (true, true) => json!("body"),
        (true, false) => json!("headers"),
    };
    let lease = dynamo.map(|d| d.timeout_s);
    vec![
        ("use-dynamo-conv-aware-routing", transport, src(on)),
        (
            "dynamo-session-timeout-seconds",
            json!(lease),
            src(lease.is_some() && a.dynamo_session_timeout_seconds.is_some()),
        ),
        (
            "apply-chat-template",
            json!(a.apply_chat_template),
            src(a.apply_chat_template),
        ),
    ]
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
fn runner_env_notes(a: &RunArgs) -> Vec<String> {
    let mut notes = Vec::new();
    for (var, flag) in RUNNER_VARIABLES {
        let Some(v) = super::in_process::env_var(var) else {
            continue;
        };
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        let truthy = matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "yes" | "on");
        let num = |x: Option<f64>| x.is_some_and(|x| v.parse::<f64>().ok() == Some(x));
        let agrees = match flag {
            "--max-context-length" => num(a.max_context_length.map(|x| x as f64)),
            "--server-metrics" => {
                let given: Vec<&str> = a.server_metrics.iter().map(|u| u.trim()).collect();
                let set: Vec<&str> = v
                    .split(',')
                    .map(str::trim)
                    .filter(|u| !u.is_empty())
                    .collect();
                !given.is_empty() && set.iter().all(|u| given.contains(u))
            }
            "--failed-request-threshold" => num(a.failed_request_threshold),
            "--warmup-requests-per-lane" => num(a.warmup_requests_per_lane.map(|x| x as f64)),
            "--trace-idle-gap-cap-seconds" => num(a.trace_idle_gap_cap_seconds),
            "--warmup-grace-period" => a.warmup_grace_period.as_deref().map(str::trim) == Some(v),
            "--benchmark-grace-period" => {
                a.benchmark_grace_period.as_deref().map(str::trim) == Some(v)
            }
            "--dynamo-session-timeout-seconds" => {
                !a.use_dynamo_conv_aware_routing
                    || a.dynamo_session_timeout_seconds.as_deref().map(str::trim) == Some(v)
            }
            "--use-dynamo-conv-aware-routing" => !a.use_dynamo_conv_aware_routing || truthy,
            // The runner splits the variable on whitespace, one word per value.
            "--extra-inputs" => v
                .split_whitespace()
                .eq(a.extra_inputs.iter().map(|w| w.trim())),
            // The runner also adds it for a duration under 900 s, whatever the variable says.
            "--unsafe-override" => !truthy || a.unsafe_override,
            "--benchmark-duration 1200 --warmup-requests-per-lane 1" => {
                v != "1"
                    || (a.benchmark_duration == Some(1200.0)
                        && a.warmup_requests_per_lane == Some(1))
            }
            _ => truthy == a.apply_chat_template,
        };
        if !agrees {
            notes.push(format!(
                "{var}={v} is InferenceX's runner's variable, which it turns into {flag}; agentx, like agentx-harness, does not read it: the flags of this command line decide"
            ));
        }
    }
    notes
}

/// The stats interval, the warmup heartbeat and the server-metrics scrape interval.
#[allow(clippy::type_complexity)]
fn intervals(
    a: &RunArgs,
) -> anyhow::Result<(Option<Duration>, Option<Duration>, Option<Duration>)> {
    let stats_interval = match a.stats_interval {
        Some(0.0) => None,
        Some(x) => Some(positive_secs("--stats-interval", x)?),
        None if super::in_process::stderr_is_terminal() => Some(Duration::from_secs(5)),
        None => Some(Duration::from_secs(30)),
    };
    let warmup_progress_interval = match env_var("SERVICE_WARMUP_PROGRESS_LOG_INTERVAL") {
        None => Some(Duration::from_secs(30)),
        Some((k, v)) => match v.trim().parse::<f64>() {
            Ok(0.0) => None,
            Ok(x) => Some(positive_secs(&k, x)?),
            Err(_) => bail!("{k}={v:?} is not a number of seconds (0 turns the heartbeat off)"),
        },
    };
    let scrape_interval = env_var("SERVER_METRICS_COLLECTION_INTERVAL")
        .map(|(k, v)| crate::client::scrape::parse_interval(&k, &v))
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
