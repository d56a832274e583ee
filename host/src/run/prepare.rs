//! The first stage of a run: the scenario loaded (pinned for a rerun) and resolved against the
//! settings, the token counter, and the dataset opened from the cache.

use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context};
use serde_json::json;

use super::config::{DatasetSource, RunConfig, RunPlan, RunSettings, TreeFlags};
use super::{entropy, load, BUNDLED_CORPUS};
use crate::dataset::chat_template::TemplateCounter;
use crate::dataset::{self, Dataset, OpenOptions, TokenCounter};
use crate::export::manifest::{AppliedSetting, AppliedSettings};
use crate::scenario::types::{Info, Resolved, Value};
use crate::scenario::ReplaySetting;
use crate::scenario::{self, Scenario, ScenarioInstance};

/// What the first stage settles before anything is planned: the scenario (loaded, pinned, resolved),
/// the settings it answered, and the opened dataset.
pub(super) struct Prepared {
    pub sc: Scenario,
    pub info: Info,
    pub resolved: Resolved,
    pub settings: RunSettings,
    /// What the component decided beyond the settings (its world's, before 0.3.0).
    pub decisions: scenario::Decisions,
    /// The assistant text the replay sends (the scenario's decision, or the flags' for 0.1.0),
    /// and where that came from.
    pub mode: (dataset::AssistantMode, &'static str),
    /// Where each resolved setting came from: `flag`, `environment`, `demo`, `scenario`.
    pub sources: std::collections::BTreeMap<String, &'static str>,
    /// The component replays session trees (the 0.2.0 and 0.3.0 worlds).
    pub trees: bool,
    pub not_acted_on: Vec<String>,
    /// `--extra-inputs` plus the scenario's `ignore_eos`.
    pub extra: Vec<(String, serde_json::Value)>,
    pub counter: TokenCounter,
    /// `--apply-chat-template`: the model's chat template and the tokenizer that counts it.
    pub chat_template: Option<TemplateCounter>,
    /// `--use-dynamo-conv-aware-routing` as the bodies carry it.
    pub dynamo: Option<crate::client::DynamoRouting>,
    /// The host's own request-shape settings (name, value, source), the run plan's.
    pub host_settings: Vec<(&'static str, serde_json::Value, &'static str)>,
    pub ds: Dataset,
    pub dataset_key: String,
    /// Where the replay of the corpus parts from agentx-harness 1.0.12's CLI (`run::harness`).
    pub harness_notes: Vec<crate::export::manifest::HarnessNote>,
}

impl Prepared {
    /// The lanes of a closed-loop run (`--concurrency`); none under open-loop arrivals, where no
    /// fixed number of lanes shares the load.
    pub(super) fn closed_loop_lanes(&self) -> Option<u32> {
        self.settings
            .arrivals
            .is_none()
            .then_some(self.settings.concurrency)
    }
}

/// Loads the scenario (by the recorded hash for a rerun), resolves the settings (its refusals as
/// one error, its warnings logged), and opens the dataset. The scenario's instance goes on to the
/// planner and then to the replay, with the configuration as the scenario decided it (what every
/// later stage reads).
pub(super) fn prepare(cfg: &RunConfig) -> anyhow::Result<(Prepared, ScenarioInstance, RunConfig)> {
    let run_plan = &cfg.plan;
    let home = &cfg.home;
    // A rerun of a run that named no scenario takes the recorded component by its hash (the
    // default may have changed since; the built-ins are found by hash too).
    let component = match (&cfg.scenario, &cfg.expect_scenario_sha256) {
        (None, Some(h)) => {
            load(Some(&format!("sha256:{h}")), home).or_else(|_| load(None, home))?
        }
        _ => load(cfg.scenario.as_deref(), home)?,
    };
    if let Some(want) = &cfg.expect_scenario_sha256 {
        if component.hash() != want {
            bail!(
                "the scenario is sha256:{} but the manifest recorded sha256:{want}; pass the recorded component (add it with `agentx-host scenario add FILE`)",
                component.hash()
            );
        }
    }
    let mut inst = component.instantiate()?;
    let info = inst.describe()?;
    if scenario::decides_graph_replays(&info) {
        bail!(
            "the scenario {} {} decides graph-ir replays, not session traces: run it as \
             `agentx-host run --format graph-ir FILE --scenario {}`, or name a session scenario \
             (e.g. --scenario agentx)",
            info.name,
            info.version,
            info.name
        );
    }
    let trees = component.world().trees();
    let mut resolved = resolve(&mut inst, &component, &info, run_plan)?;
    let decisions = match trees {
        true => inst.rules_and_decisions(&resolved.settings)?.1,
        false => scenario::Decisions::of_world(component.world()),
    };
    let profile = run_plan.client.routing.profile.as_ref();
    if let Some((reason, why)) = profile
        .filter(|_| decisions.decides_settings)
        .and_then(super::harness::routing_headers_reason)
    {
        tracing::warn!(
            "--routing-headers {}: {why}, and {} keeps the harness's wire; the run is not a valid submission ({reason})",
            profile.map(ToString::to_string).unwrap_or_default(),
            info.name
        );
        resolved.invalid_reasons.push(reason.to_string());
    }
    if run_plan.server_timing && decisions.decides_settings {
        tracing::warn!(
            "--server-timing: the body asks for nvext.extra_fields, which agentx-harness 1.0.12 never sends, and {} keeps the harness's wire; the run is not a valid submission ({})",
            info.name,
            super::harness::SERVER_TIMING_REASON
        );
        resolved
            .invalid_reasons
            .push(super::harness::SERVER_TIMING_REASON.to_string());
    }
    let mut not_acted_on = TreeFlags::not_acted_on(&run_plan.not_acted_on, trees);
    if let Some(warning) = assistant_not_acted_on(run_plan, &decisions, &info) {
        not_acted_on.push(warning);
    }
    for warning in &not_acted_on {
        tracing::warn!("accepted but not acted on: {warning}");
    }
    let mut settings = RunSettings::of(
        &resolved,
        decisions.decides_settings,
        &super::config::Fallback::of(cfg),
    )?;
    let allows = allows_arrivals(&component, &info, run_plan, decisions.decides_settings)?;
    settings.open_loop(&resolved, allows)?;
    let decides_wire = allows_wire(&component, &info, run_plan, decisions.decides_settings)?;
    settings.agent_wire(&resolved, decides_wire)?;
    allows_early_stop(&component, &info, cfg, settings.duration)?;
    if settings.arrivals.is_some() && cfg.shard.is_some() {
        bail!("--session-arrival-rate is not supported in a sharded run: run the open-loop arrivals in one process");
    }
    let cfg = &settings.apply(cfg, &decisions);
    let run_plan = &cfg.plan;
    let sources = sources(&resolved, run_plan);
    check_open_files(settings.concurrency);
    if resolved.seed_drawn {
        let seed = resolved.seed;
        tracing::info!(
            seed,
            "no --random-seed given; drew one (pass --random-seed {seed} to reproduce)"
        );
    }
    let mut extra = run_plan.extra.clone();
    if let Some(ignore_eos) = settings.ignore_eos {
        if !extra.iter().any(|(k, _)| k == "ignore_eos") {
            extra.push(("ignore_eos".into(), json!(ignore_eos)));
        }
    }
    let counter = token_counter(cfg.tokenizer.as_deref(), run_plan.use_server_token_count)?;
    let chat_template = match run_plan.apply_chat_template {
        true => Some(chat_template(cfg, &counter)?),
        false => None,
    };
    let dataset = open_dataset(cfg)?;
    let dataset_key = hex::encode(dataset.cache_key().0);
    if let Some(want) = &cfg.expect_dataset_key {
        if &dataset_key != want {
            bail!(
                "the dataset {} has digest {dataset_key} but the manifest recorded {want}; the corpus (or --num-dataset-entries) changed",
                dataset.source_path().display()
            );
        }
    }
    let harness_notes = super::harness::notes(&dataset, &info.name)?;
    let effective = cfg.clone();
    let mode_source = match (decisions.assistant_text, effective.plan.mode_given) {
        (Some(_), _) => "scenario",
        (None, true) => "flag",
        (None, false) => "host default",
    };
    let prepared = Prepared {
        sc: component,
        info,
        resolved,
        settings,
        decisions,
        mode: (effective.plan.mode, mode_source),
        sources,
        trees,
        not_acted_on,
        extra,
        counter,
        chat_template,
        dynamo: run_plan.dynamo,
        host_settings: run_plan.host_settings.clone(),
        ds: dataset,
        dataset_key,
        harness_notes,
    };
    Ok((prepared, inst, effective))
}

/// Refuses `--target-precision` under a scenario that locks the duration (a point of its sweep may
/// not stop early), with the scenario's own rule, and a `--min-duration` past the duration.
fn allows_early_stop(
    scenario: &Scenario,
    info: &Info,
    cfg: &RunConfig,
    duration: std::time::Duration,
) -> anyhow::Result<()> {
    let Some(target) = cfg.target_precision.first() else {
        return Ok(());
    };
    let flag = format!(
        "--target-precision {}:{}",
        target.figure.name, target.percent
    );
    if let Some(lock) = info
        .locks
        .iter()
        .find(|l| l.setting == ReplaySetting::BenchmarkDuration.name())
    {
        bail!(
            "the scenario {} {} (sha256:{}) refuses this configuration:\n  {flag}: it locks benchmark-duration ({}); a point may not stop early. Use a scenario without that lock, e.g. --scenario path/to/kvct-v01.wasm",
            info.name,
            info.version,
            &scenario.hash()[..16],
            lock.rule
        );
    }
    if cfg.min_duration > duration {
        bail!(
            "--min-duration {} s is longer than the profiling duration ({} s): {flag} could never stop the run early; lower --min-duration or raise --benchmark-duration",
            cfg.min_duration.as_secs_f64(),
            duration.as_secs_f64()
        );
    }
    Ok(())
}

/// The scenario's own knob of open-loop session arrivals.
pub(crate) const ARRIVAL_KNOB: &str = ReplaySetting::SessionArrivalRate.name();

/// Whether the scenario allows open-loop session arrivals: a session-tree component that decides
/// every setting and lists the `session-arrival-rate` knob (`agentx-open`). A rate given to one
/// that does not is refused with the scenario's own rule of its timing (its `timing-mode` lock).
fn allows_arrivals(
    scenario: &Scenario,
    info: &Info,
    run_plan: &RunPlan,
    decides: bool,
) -> anyhow::Result<bool> {
    let allows = decides && info.knobs.iter().any(|k| k.name == ARRIVAL_KNOB);
    let given = run_plan
        .settings
        .iter()
        .find(|s| s.name == ARRIVAL_KNOB && s.explicit);
    if let (false, Some(s)) = (allows, given) {
        let rate = super::config::value_json(&s.value);
        let why = match info.locks.iter().find(|l| l.setting == "timing-mode") {
            Some(l) => format!("its timing-mode lock: {}", l.rule),
            None => format!("it has no {ARRIVAL_KNOB} knob"),
        };
        bail!(
            "the scenario {} {} (sha256:{}) refuses this configuration:\n  --{ARRIVAL_KNOB} {rate}: the scenario does not allow open-loop session arrivals ({why}); \
             use a scenario that allows them, e.g. --scenario agentx-open",
            info.name,
            info.version,
            &scenario.hash()[..16]
        );
    }
    Ok(allows)
}

/// The scenario's own knob of the agent's wire.
pub(crate) const WIRE_KNOB: &str = ReplaySetting::Wire.name();

/// Whether the scenario decides the agent's wire: a session-tree component that decides every
/// setting and lists the `wire` knob (`agent-wire`). An explicit `--wire tools` or
/// `--reasoning-in-history` given to one that does not is refused, naming the scenario that
/// decides them.
fn allows_wire(
    scenario: &Scenario,
    info: &Info,
    run_plan: &RunPlan,
    decides: bool,
) -> anyhow::Result<bool> {
    let allows = decides && info.knobs.iter().any(|k| k.name == WIRE_KNOB);
    let asked = run_plan.settings.iter().find(|s| {
        s.explicit
            && ((s.name == WIRE_KNOB && s.value != Value::Text("text".into()))
                || s.name == ReplaySetting::ReasoningInHistory.name())
    });
    if let (false, Some(s)) = (allows, asked) {
        bail!(
            "the scenario {} {} (sha256:{}) refuses this configuration:\n  --{} {}: the scenario sends the tools as system text and has no {} knob (its wire is agentx-harness's); \
             use a scenario that decides the agent's wire, e.g. --scenario agent-wire",
            info.name,
            info.version,
            &scenario.hash()[..16],
            s.name,
            super::config::value_json(&s.value).as_str().unwrap_or_default(),
            s.name,
        );
    }
    Ok(allows)
}

/// The assistant-text flag or variable a user gave when the scenario decides otherwise.
fn assistant_not_acted_on(
    run_plan: &RunPlan,
    decisions: &scenario::Decisions,
    info: &Info,
) -> Option<String> {
    let decided = match decisions.assistant_text? {
        scenario::AssistantText::Recorded => dataset::AssistantMode::Recorded,
        scenario::AssistantText::Live => dataset::AssistantMode::Live,
    };
    (run_plan.mode_given && run_plan.mode != decided).then(|| {
        format!(
            "--recorded-assistant / *_DATASET_WEKA_LIVE_ASSISTANT_RESPONSES: the scenario {} decides the assistant text ({decided:?}), as its reference does",
            info.name
        )
    })
}

/// Where each resolved setting came from: the flags and environment as [`RunPlan::sources`] says,
/// and the scenario for what it filled or changed.
fn sources(
    resolved: &Resolved,
    run_plan: &RunPlan,
) -> std::collections::BTreeMap<String, &'static str> {
    resolved
        .settings
        .iter()
        .map(|s| {
            let given = scenario::last_named(&run_plan.settings, &s.name);
            let source = match (
                given,
                run_plan.sources.iter().rev().find(|(n, _)| *n == s.name),
            ) {
                (Some(g), Some((_, src))) if g.value == s.value => *src,
                _ => "scenario",
            };
            (s.name.clone(), source)
        })
        .collect()
}

/// The scenario's answer to the settings: its refusals as one error (with the sweep hint for a
/// list of concurrencies), its warnings logged.
fn resolve(
    inst: &mut ScenarioInstance,
    scenario: &Scenario,
    info: &Info,
    run_plan: &RunPlan,
) -> anyhow::Result<Resolved> {
    let sweep_hint = run_plan
        .concurrency_list
        .as_ref()
        .map(|c| format!("(for one run per concurrency, `agentx-host sweep --concurrency {c}`)"));
    let resolved = resolve_settings(
        inst,
        scenario,
        info,
        &run_plan.settings,
        sweep_hint.as_deref(),
    )?;
    if let Some(c) = &run_plan.concurrency_list {
        bail!(
            "--concurrency {c}: a run has one concurrency; for one run per point use `agentx-host sweep --concurrency {c}`"
        );
    }
    Ok(resolved)
}

/// The scenario's `resolve` of the settings as given: its refusals as one error (each naming its
/// flag, then `hint` when given), its warnings logged.
pub(super) fn resolve_settings(
    inst: &mut ScenarioInstance,
    scenario: &Scenario,
    info: &Info,
    given: &[crate::scenario::types::Setting],
    hint: Option<&str>,
) -> anyhow::Result<Resolved> {
    let resolved = match inst.resolve(given, entropy())? {
        Ok(r) => r,
        Err(violations) => {
            let mut msg = format!(
                "the scenario {} {} (sha256:{}) refuses this configuration:",
                info.name,
                info.version,
                &scenario.hash()[..16]
            );
            for v in &violations {
                msg.push_str(&format!("\n  {}: {}", flag_of(&v.setting), v.message));
            }
            if let Some(hint) = hint {
                msg.push_str(&format!("\n{hint}"));
            }
            bail!(msg);
        }
    };
    log_resolve_warnings(&resolved);
    Ok(resolved)
}

/// One connection per lane (more while trees fan out), plus the process's own files; a dry run
/// says so too, before the run would meet it.
fn check_open_files(conc: u32) {
    let needed = u64::from(conc) * 2 + 256;
    if let Err((soft, hard)) = crate::client::ensure_open_files(needed) {
        tracing::warn!(
            "--concurrency {conc} may need about {needed} open files (connections), but the open-file limit is {soft} (hard limit {hard}); \
             raise it (`ulimit -n {needed}`) or connections will fail with `Too many open files`"
        );
    }
}

/// The token counter of `--tokenizer`: the tokenizer-free word model without one, and also when
/// the named one is not at hand and the server's usage counts the tokens.
fn token_counter(spec: Option<&str>, server_counts: bool) -> anyhow::Result<TokenCounter> {
    let Some(spec) = spec else {
        return Ok(TokenCounter::Words);
    };
    match dataset::tokens::resolve_tokenizer(spec) {
        Ok(src) => {
            tracing::info!("--tokenizer {spec}: {}", src.describe());
            src.counter()
                .map_err(|e| anyhow!("--tokenizer {spec}: {e}"))
        }
        // Token counts come from the server's usage unless --client-token-count: a tokenizer
        // that is not at hand only costs the exact single-token synthesis vocabulary.
        Err(e) if server_counts => {
            tracing::warn!(
                "--tokenizer {spec}: {e}; using the built-in tokenizer-free word model for prompt \
                 synthesis (token counts come from the server's usage)"
            );
            Ok(TokenCounter::Words)
        }
        Err(e) => bail!("--tokenizer {spec}: {e}"),
    }
}

/// The chat template of `--apply-chat-template`: beside the `--tokenizer`'s tokenizer.json, or the
/// `--model`'s in the Hugging Face cache when no tokenizer is named. Every way of not finding it is
/// an error that says where it looked.
fn chat_template(cfg: &RunConfig, counter: &TokenCounter) -> anyhow::Result<TemplateCounter> {
    let (flag, spec) = match (&cfg.tokenizer, &cfg.plan.model) {
        (Some(t), _) => ("--tokenizer", t.as_str()),
        (None, Some(m)) => ("--model", m.as_str()),
        (None, None) => bail!(
            "--apply-chat-template needs the model's tokenizer: pass --tokenizer ORG/NAME (in the Hugging Face cache) or a directory holding its tokenizer.json and tokenizer_config.json"
        ),
    };
    let path = match dataset::tokens::resolve_tokenizer(spec) {
        Ok(dataset::tokens::TokenizerSource::File { path, .. }) => path,
        Ok(_) => bail!(
            "--apply-chat-template needs a Hugging Face tokenizer with a chat template, not {flag} {spec}; pass --tokenizer ORG/NAME or a tokenizer directory"
        ),
        Err(e) => bail!("--apply-chat-template needs the model's tokenizer ({flag} {spec}): {e}"),
    };
    let reuse = (flag == "--tokenizer").then(|| counter.clone());
    let t = TemplateCounter::load(&path, reuse)?;
    tracing::info!(
        "--apply-chat-template: each request's client-side ISL counts the prompt rendered by {}",
        t.template.path().display()
    );
    Ok(t)
}

/// The flag a user sets for the scenario setting `setting` (the settings carry aiperf's names; the
/// dataset loader is chosen by the dataset flags).
pub fn flag_of(setting: &str) -> String {
    match setting {
        "loader" => "the dataset (--public-dataset / --input-file)".to_string(),
        s => format!("--{s}"),
    }
}

/// The scenario's warnings. Under `--unsafe-override` (given, or implied by a demo) the rules the
/// run breaks are expected: one line names them, the scenario's own words go to DEBUG.
fn log_resolve_warnings(resolved: &Resolved) {
    let overridden = resolved
        .invalid_reasons
        .iter()
        .any(|r| r == "unsafe_override");
    if !overridden {
        for w in &resolved.warnings {
            tracing::warn!("{}: {}", flag_of(&w.setting), w.message);
        }
        return;
    }
    let mut names: Vec<String> = resolved
        .warnings
        .iter()
        .map(|w| flag_of(&w.setting))
        .collect();
    names.dedup();
    if names.is_empty() {
        tracing::info!("--unsafe-override: not a valid submission");
    } else {
        tracing::info!(
            "--unsafe-override: outside the scenario's rules for {}; not a valid submission (-v shows the rules)",
            names.join(", ")
        );
    }
    for w in &resolved.warnings {
        tracing::debug!("{}: {}", flag_of(&w.setting), w.message);
    }
}

/// Writes the bundled corpus under the cache directory (once) and returns its path.
pub fn bundled_corpus(home: &Path) -> anyhow::Result<PathBuf> {
    let path = home.join("bundled").join("traces-24.jsonl");
    if std::fs::read(&path).ok().as_deref() != Some(BUNDLED_CORPUS) {
        crate::fsio::Root::create(home)
            .and_then(|h| h.write_atomic("bundled/traces-24.jsonl", BUNDLED_CORPUS))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(path)
}

/// The dataset a run replays, opened (and imported into the cache on first use).
fn open_dataset(cfg: &RunConfig) -> anyhow::Result<Dataset> {
    let opts = OpenOptions {
        num_dataset_entries: cfg.num_dataset_entries,
        max_context_length: cfg.max_context_length,
        max_osl: None,
        cache_dir: Some(
            cfg.dataset_cache_dir
                .clone()
                .unwrap_or_else(|| cfg.home.join(crate::dataset::cache::DATASETS_SUBDIR)),
        ),
        format: cfg.format,
        block_size: cfg.block_size,
        trace_block_size: cfg.trace_block_size,
    };
    Ok(match &cfg.plan.dataset {
        DatasetSource::Bundled => Dataset::open_path(&bundled_corpus(&cfg.home)?, &opts)?,
        DatasetSource::Spec(s) => Dataset::open(s, &opts)?,
        DatasetSource::Cached { key, source } => Dataset::open_cached(key, source.clone(), &opts)?,
    })
}

/// What pins a run's inputs besides its flags: the scenario component's sha256 and the dataset's
/// cache key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputIds {
    /// The scenario component's sha256.
    pub scenario_sha256: String,
    /// The dataset's cache key.
    pub dataset_key: String,
}

/// Loads the scenario and opens the dataset of `cfg` without running anything.
pub fn input_ids(cfg: &RunConfig) -> anyhow::Result<InputIds> {
    let sc = load(cfg.scenario.as_deref(), &cfg.home)?;
    let ds = open_dataset(cfg)?;
    Ok(InputIds {
        scenario_sha256: sc.hash().to_string(),
        dataset_key: hex::encode(ds.cache_key().0),
    })
}

impl Prepared {
    /// Every replay setting's value as the run applies it, by name (the scenario's settings; the
    /// arrivals, the host's own options and the assistant text are added by the caller).
    fn replay_setting_values(&self) -> Vec<(&'static str, serde_json::Value)> {
        let settings = &self.settings;
        let secs = |d: Option<std::time::Duration>| d.map(|d| d.as_secs_f64());
        let inf = |d: Option<std::time::Duration>| match d {
            Some(d) => json!(d.as_secs_f64()),
            None => json!("inf"),
        };
        let (per_lane, by_time) = match settings.pressure {
            Some(crate::replay::sched::Pressure::RequestsPerLane(n)) => (Some(n), None),
            Some(crate::replay::sched::Pressure::Duration(d)) => (None, Some(d.as_secs_f64())),
            None => (None, None),
        };
        let resolved =
            |name: ReplaySetting| self.resolved.setting(name).map(super::config::value_json);
        vec![
            (
                ReplaySetting::Concurrency.name(),
                json!(settings.concurrency),
            ),
            (
                ReplaySetting::BenchmarkDuration.name(),
                json!(settings.duration.as_secs_f64()),
            ),
            (
                ReplaySetting::BenchmarkGracePeriod.name(),
                inf(settings.grace),
            ),
            (ReplaySetting::RandomSeed.name(), json!(self.resolved.seed)),
            (
                ReplaySetting::TrajectoryStartMinRatio.name(),
                json!(settings.min_ratio),
            ),
            (
                ReplaySetting::TrajectoryStartMaxRatio.name(),
                json!(settings.max_ratio),
            ),
            (
                ReplaySetting::CacheBust.name(),
                resolved(ReplaySetting::CacheBust).unwrap_or(json!("none")),
            ),
            (
                ReplaySetting::InterTurnDelayCapSeconds.name(),
                json!(settings.cap),
            ),
            (
                ReplaySetting::UseThinkTimeOnly.name(),
                json!(settings.think_only),
            ),
            (
                ReplaySetting::IgnoreTraceDelays.name(),
                json!(settings.ignore_delays),
            ),
            (ReplaySetting::IgnoreEos.name(), json!(settings.ignore_eos)),
            (
                ReplaySetting::UnsafeOverride.name(),
                json!(settings.unsafe_override),
            ),
            (
                ReplaySetting::ContextOverflowRateLimit.name(),
                json!(settings.rate_limit),
            ),
            (
                ReplaySetting::FailedRequestThreshold.name(),
                json!(settings.failed_request_threshold),
            ),
            (ReplaySetting::WarmupRequestsPerLane.name(), json!(per_lane)),
            (
                ReplaySetting::AgenticCacheWarmupDuration.name(),
                json!(by_time),
            ),
            (
                ReplaySetting::WarmupGracePeriod.name(),
                inf(settings.warmup_grace),
            ),
            (
                ReplaySetting::TraceIdleGapCapSeconds.name(),
                json!(secs(settings.trace_idle_cap)),
            ),
            (
                ReplaySetting::SystemIdleGapCapSeconds.name(),
                resolved(ReplaySetting::SystemIdleGapCapSeconds).unwrap_or(serde_json::Value::Null),
            ),
            (
                ReplaySetting::BurstPhaseStarts.name(),
                json!(settings.burst),
            ),
            (
                ReplaySetting::NumDatasetEntries.name(),
                json!(settings.num_dataset_entries),
            ),
            (
                ReplaySetting::SliceDuration.name(),
                json!(settings.slice_duration),
            ),
            (
                ReplaySetting::UseServerTokenCount.name(),
                json!(settings.use_server_token_count),
            ),
            (
                ReplaySetting::StatsInterval.name(),
                json!(secs(settings.stats_interval).unwrap_or(0.0)),
            ),
            (
                ReplaySetting::HttpTcpUserTimeout.name(),
                json!(settings.tcp_user_timeout.map(|d| d.as_millis() as u64)),
            ),
        ]
    }

    /// Every replay setting as the run applies it, with where it came from: `flag`,
    /// `environment`, `demo`, `scenario` (the component filled or changed it) or `host default`
    /// (a component of an earlier world does not answer it). Shown by `--dry-run --json` and kept
    /// in the manifest.
    pub(super) fn applied_settings(&self) -> AppliedSettings {
        let settings = &self.settings;
        let rows = self.replay_setting_values();

        let mut out = AppliedSettings::new();
        for (name, value) in rows {
            let source = match self.sources.get(name) {
                Some(src) => *src,
                None => "host default",
            };
            out.insert(name.to_string(), AppliedSetting::new(value, source));
        }
        // An open-loop run's arrivals (listed only then, so a closed loop's settings are unchanged).
        if let Some(open_loop) = &settings.arrivals {
            for (name, value) in [
                (
                    ReplaySetting::SessionArrivalRate.name(),
                    json!(open_loop.spec.rate),
                ),
                (
                    ReplaySetting::SessionArrivalPattern.name(),
                    json!(open_loop.spec.pattern.name()),
                ),
                (
                    ReplaySetting::SessionArrivalSmoothness.name(),
                    json!(open_loop.spec.smoothness),
                ),
            ] {
                let source = self.sources.get(name).copied().unwrap_or("scenario");
                out.insert(name.to_string(), AppliedSetting::new(value, source));
            }
        }
        // The agent's wire, under a scenario that decides it (listed only then, so every other
        // scenario's settings are unchanged).
        if let Some(agent_wire) = &settings.agent_wire {
            let kept = if agent_wire.keep_reasoning {
                "keep"
            } else {
                "drop"
            };
            for (name, value) in [
                (ReplaySetting::Wire.name(), json!(agent_wire.wire.name())),
                (ReplaySetting::ReasoningInHistory.name(), json!(kept)),
            ] {
                let source = self.sources.get(name).copied().unwrap_or("scenario");
                out.insert(name.to_string(), AppliedSetting::new(value, source));
            }
        }
        // The host's transport and counting options: the flags', never the scenario's.
        for (name, value, source) in &self.host_settings {
            let value = match (*name, &self.chat_template) {
                ("apply-chat-template", Some(t)) => json!(t.template.path().display().to_string()),
                _ => value.clone(),
            };
            out.insert(name.to_string(), AppliedSetting::new(value, source));
        }
        let assistant_text = match self.mode.0 {
            dataset::AssistantMode::Recorded => "recorded",
            dataset::AssistantMode::Live => "live",
        };
        out.insert(
            "assistant-text".into(),
            AppliedSetting::new(json!(assistant_text), self.mode.1),
        );
        out
    }
}
