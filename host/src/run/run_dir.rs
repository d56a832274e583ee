//! A run's artifact directory once it is open ([`RunDir`]): where the process writes, the run's
//! clock, and the manifest, written before the first request and rewritten as the run learns more.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use super::config::{value_json, RunConfig};
use super::plan::Planned;
use super::prepare::Prepared;
use super::{artifact_dir, host_name, rendezvous, shard_dir_name, RunCtx, MANIFEST_FILE};
use crate::dataset::AssistantMode;
use crate::export::manifest::{
    self, DatasetId, HttpInfo, Manifest, ScenarioId, SettingRow, ShardInfo, WarningRow,
};
use crate::fsio::Root;
use crate::metrics::live::LiveRun;
use crate::record::{Clock, RecordSink};
use crate::scenario;

/// A run's artifact directory once it is open: the run's clock and the manifest (rewritten as the
/// run learns more).
pub(super) struct RunDir {
    /// The run's directory (`out` or, for a shard, its parent).
    pub run_dir: PathBuf,
    /// Where this process writes.
    pub out: PathBuf,
    pub art: Root,
    pub clock: Clock,
    pub manifest: Manifest,
    /// The manifest's rewrite when profiling begins, off the scheduler's thread.
    noting: std::sync::Arc<std::sync::Mutex<Option<std::thread::JoinHandle<()>>>>,
    /// The OTLP export (`--otlp-endpoint`), fed by the record sink; finished after the sink closes.
    pub otlp: Option<crate::telemetry::otlp::Exporter>,
    /// What the run knows about itself while it goes: the replay counts sends and stages, the
    /// record sink adds each completed request (`--metrics-listen` and the dashboard read it).
    pub live: Arc<LiveRun>,
    /// `--target-precision`'s profiling records so far (fed by the record sink).
    pub precision: Option<super::precision_stop::PrecisionWatch>,
}

/// What the run learnt of the server before its first request, for the manifest.
pub(super) struct ServerFacts<'a> {
    /// The model every request names.
    pub model: &'a str,
    /// What the cache preflight found (`None`: it did not run).
    pub cache_preflight: Option<&'a manifest::CachePreflight>,
    /// A llama.cpp server's slots (`None`: not llama.cpp, or `/props` did not say).
    pub server_slots: Option<crate::metrics::cache_truth::SlotPool>,
}

impl RunDir {
    /// Opens the directory (only now that every check passed), starts the record sink (returned
    /// beside it) and the clock, and writes the manifest before the first request, with what the
    /// cache preflight found.
    pub(super) fn open(
        ctx: RunCtx<'_>,
        server: &ServerFacts<'_>,
        member: Option<&rendezvous::Member>,
        runtime: &tokio::runtime::Handle,
    ) -> anyhow::Result<(RunDir, RecordSink)> {
        let RunCtx {
            cfg,
            prepared,
            planned,
        } = ctx;
        let run_dir = cfg
            .output
            .resolve(&prepared.info.name, &planned.run_id, cfg.shard.is_some());
        let out = match &cfg.shard {
            Some(sh) => run_dir.join(shard_dir_name(sh.index)),
            None => run_dir.clone(),
        };
        let art = artifact_dir::open(&cfg.output, &run_dir, &out, cfg.overwrite)?;
        let clock = Clock::start();
        let otlp = otlp_export(ctx, server.model, clock.anchor_unix_ns(), runtime)?;
        let live = Arc::new(LiveRun::new(&planned.own_lane_ids()));
        let counted = live.clone();
        let mut watchers: Vec<crate::record::RecordWatcher> =
            vec![Box::new(move |rec: &crate::record::RequestRecord| {
                counted.absorb(rec);
            })];
        watchers.extend(otlp.iter().map(crate::telemetry::otlp::Exporter::watcher));
        let precision =
            (!cfg.target_precision.is_empty()).then(super::precision_stop::PrecisionWatch::default);
        watchers.extend(
            precision
                .iter()
                .map(super::precision_stop::PrecisionWatch::watcher),
        );
        let sink = RecordSink::create_watched(&art, watchers)?;
        let mut manifest = manifest_of(cfg, prepared, planned, clock.anchor_unix_ns());
        manifest.model = Some(server.model.to_string());
        manifest.cache_preflight = server.cache_preflight.cloned();
        manifest.server_slots = server.server_slots;
        if let (Some(sh), Some(m)) = (&cfg.shard, member) {
            manifest.shard = Some(ShardInfo {
                index: sh.index,
                count: sh.count,
                source: sh.source.to_string(),
                coordinator: sh.coordinator.clone(),
                host: host_name(),
                lanes: planned.own_lane_ids(),
                pool: planned.pool_len(),
                clock_offset_ns: m.clock_offset_ns,
                clock_rtt_ns: m.clock_rtt_ns as i64,
                rendezvous_s: m.joined_in.as_secs_f64(),
                rendezvous: None,
            });
            // What the merge's exports follow that the records do not say.
            manifest.shard_exports = Some(shard_exports(prepared, planned));
        }
        let d = RunDir {
            run_dir,
            out,
            art,
            clock,
            manifest,
            noting: std::sync::Arc::default(),
            otlp,
            live,
            precision,
        };
        d.write_manifest()?;
        Ok((d, sink))
    }

    /// An artifact directory a run left (a run finished afterwards by [`super::finalize`]), with
    /// its manifest as read and the run's clock rebuilt from the recorded start.
    pub(super) fn reopen(dir: &std::path::Path, manifest: Manifest) -> anyhow::Result<RunDir> {
        let art = Root::open(dir).with_context(|| format!("cannot open {}", dir.display()))?;
        Ok(RunDir {
            run_dir: dir.to_path_buf(),
            out: dir.to_path_buf(),
            art,
            clock: Clock::from_anchor_unix_ns(manifest.started_unix_ns),
            manifest,
            noting: std::sync::Arc::default(),
            otlp: None,
            live: Arc::default(),
            precision: None,
        })
    }

    /// What the replay calls when profiling begins: the manifest is rewritten with the start
    /// (from a thread of its own: the scheduler does not wait on the disk), so a run killed later
    /// keeps its profiling window. [`RunDir::profiling_noted`] waits for the write.
    pub(super) fn on_profiling(&self) -> Box<dyn FnOnce(u64) + Send> {
        let mut m = self.manifest.clone();
        let out = self.out.clone();
        let noting = self.noting.clone();
        Box::new(move |ns| {
            m.profiling_started_ns = Some(ns);
            let write = move || {
                let r = Root::open(&out)
                    .and_then(|r| r.write_atomic(MANIFEST_FILE, m.to_json_pretty().as_bytes()));
                if let Err(e) = r {
                    tracing::warn!(
                        "cannot note the start of profiling in {}: {e}",
                        out.join(MANIFEST_FILE).display()
                    );
                }
            };
            match std::thread::Builder::new()
                .name("agentx-manifest".into())
                .spawn(write)
            {
                Ok(h) => {
                    *noting
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(h);
                }
                Err(e) => tracing::warn!("cannot note the start of profiling: {e}"),
            }
        })
    }

    /// Waits until the manifest's profiling rewrite is on disk (before the run's own last write).
    pub(super) fn profiling_noted(&self) {
        let h = self
            .noting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(h) = h {
            let _ = h.join();
        }
    }

    /// Writes the manifest as it stands (atomically: readers see the old or the new one).
    pub(super) fn write_manifest(&self) -> anyhow::Result<()> {
        self.art
            .write_atomic(MANIFEST_FILE, self.manifest.to_json_pretty().as_bytes())
            .with_context(|| format!("cannot write {}", self.out.join(MANIFEST_FILE).display()))?;
        Ok(())
    }
}

/// The OTLP export of `--otlp-endpoint`, started on `runtime` (its URL was checked before the
/// directory opened).
fn otlp_export(
    ctx: RunCtx<'_>,
    model: &str,
    anchor_unix_ns: u64,
    runtime: &tokio::runtime::Handle,
) -> anyhow::Result<Option<crate::telemetry::otlp::Exporter>> {
    let Some(endpoint) = &ctx.cfg.otlp_endpoint else {
        return Ok(None);
    };
    let config = crate::telemetry::otlp::OtlpConfig {
        endpoint: endpoint.clone(),
        model: model.to_string(),
        anchor_unix_ns,
        run_id: ctx.planned.run_id.clone(),
        scenario: format!("{} {}", ctx.prepared.info.name, ctx.prepared.info.version),
        shard: ctx.cfg.shard.as_ref().map(|shard_cfg| shard_cfg.index),
    };
    Ok(Some(crate::telemetry::otlp::Exporter::start(
        config, runtime,
    )?))
}

/// The scenario's rules for the exports, kept in a shard's manifest so that `merge` writes the
/// exports this run would have written in one process: the coverage rule and the warmup's phase
/// name.
fn shard_exports(prepared: &Prepared, planned: &Planned) -> manifest::ShardExports {
    manifest::ShardExports {
        coverage_required_ratio: planned.coverage_required_ratio(),
        coverage_content: prepared.decisions.decides_settings,
        warmup_phase_name: prepared.decisions.warmup_phase_name.clone(),
    }
}

pub(super) fn assistant_mode(mode: AssistantMode) -> &'static str {
    match mode {
        AssistantMode::Live => "live",
        AssistantMode::Recorded => "recorded",
    }
}

/// The manifest of a run about to start: every input that pins it.
fn manifest_of(
    cfg: &RunConfig,
    prepared: &Prepared,
    planned: &Planned,
    started_unix: u64,
) -> Manifest {
    let run_plan = &cfg.plan;
    let resolved = &prepared.resolved;
    let lanes = planned.own_lane_plans();
    let (resolved_settings, warnings) = resolved_rows(resolved);
    Manifest {
        argv: cfg.argv.clone(),
        cwd: cfg.cwd.clone(),
        replay_of: cfg.replay_of.as_ref().map(|r| manifest::ReplayOf {
            run_id: r.run_id.clone(),
            manifest: r.manifest.clone(),
        }),
        run_id: planned.run_id.clone(),
        seed: planned.seed,
        seed_drawn: resolved.seed_drawn,
        scenario: scenario_id(prepared),
        dataset: dataset_id(prepared, cfg.num_dataset_entries),
        resolved_settings,
        replay_settings: Some(prepared.applied_settings()),
        warnings,
        not_acted_on: prepared.not_acted_on.clone(),
        resolve_invalid_reasons: resolved.invalid_reasons.clone(),
        slice_duration: cfg.slice_duration,
        goodput: cfg
            .goodput
            .as_ref()
            .map(agentx_metrics::goodput::Goodput::spec),
        session_goodput_share: cfg.goodput.as_ref().map(|_| cfg.session_goodput_share),
        gpus: cfg.gpus,
        confidence: Some(cfg.confidence.get()),
        session_slo: cfg.session_slo.as_ref().map(|slo| slo.spec().to_string()),
        http: Some(HttpInfo {
            correlation_header: run_plan.client.routing.correlation.as_str().to_string(),
            session_headers: run_plan.client.routing.sent_names(),
            routing_profile: run_plan
                .client
                .routing
                .profile
                .as_ref()
                .map(std::string::ToString::to_string),
            connection_reuse_strategy: run_plan.client.reuse.as_str().to_string(),
            tcp_user_timeout_ms: run_plan
                .client
                .tcp_user_timeout
                .map(|d| d.as_millis() as u64),
            trace_context: run_plan.client.trace_context,
        }),
        cache_preflight: None,
        server_slots: None,
        concurrency: prepared.settings.concurrency,
        benchmark_duration_s: prepared.settings.duration.as_secs_f64(),
        assistant_mode: assistant_mode(run_plan.mode).to_string(),
        url: run_plan
            .url
            .clone()
            .unwrap_or_else(|| format!("builtin-simulator:{}", cfg.sim_preset)),
        lanes,
        host_version: env!("CARGO_PKG_VERSION").to_string(),
        wasmtime_version: scenario::WASMTIME_VERSION.to_string(),
        started_unix_ns: started_unix,
        ended_unix_ns: None,
        shard: None,
        trees: None,
        profiling_started_ns: None,
        profiling_ns: None,
        stop: None,
        finalized: None,
        model: None,
        server: None,
        shard_exports: None,
        shards: None,
        clock_skew_ns: None,
        merged_unix_ns: None,
        otlp: None,
        extra: serde_json::Map::default(),
    }
}

/// What the scenario resolved, as the manifest lists it: every setting, and its warnings.
pub(super) fn resolved_rows(
    resolved: &crate::scenario::types::Resolved,
) -> (Vec<SettingRow>, Vec<WarningRow>) {
    let settings = resolved
        .settings
        .iter()
        .map(|s| SettingRow {
            name: s.name.clone(),
            value: value_json(&s.value),
            explicit: s.explicit,
        })
        .collect();
    let warnings = resolved
        .warnings
        .iter()
        .map(|w| WarningRow {
            setting: w.setting.clone(),
            message: w.message.clone(),
        })
        .collect();
    (settings, warnings)
}

/// The scenario as the manifest and the run summary name it.
pub(super) fn scenario_id(prepared: &Prepared) -> ScenarioId {
    ScenarioId {
        name: prepared.info.name.clone(),
        version: prepared.info.version.clone(),
        sha256: prepared.sc.hash().to_string(),
        source: prepared.sc.path().to_owned(),
    }
}

/// The dataset as the manifest and the run summary name it (`num_dataset_entries` when given).
pub(super) fn dataset_id(prepared: &Prepared, entries: Option<usize>) -> DatasetId {
    DatasetId {
        source: prepared.ds.source_path().to_owned(),
        alias: prepared.ds.alias().map(|x| x.name.to_string()),
        cache_key: Some(prepared.dataset_key.clone()),
        traces: prepared.ds.len(),
        num_dataset_entries: entries,
        trace_block_size: prepared.ds.corpus_format().trace_block_size,
        harness_notes: prepared.harness_notes.clone(),
    }
}
