//! A run as a library call: [`execute`] takes a [`RunConfig`] (what `agentx-host run`'s flags and
//! environment resolve to) and runs it as a sequence of stages, each in its own module:
//! [`prepare`] (scenario, settings, dataset), [`connect`] (the shards' rendezvous, the server and
//! its pre-flight, the metrics scraper), [`plan`] (lanes and session trees), then the replay, and
//! [`outputs`] (the artifact directory, the manifest, the verdict, the summary and the exports). It
//! returns a [`RunOutcome`] with the artifact paths, the summary and the exit code; a [`Cancel`]
//! handle stops it as Ctrl-C would. The CLI, sweeps ([`sweep`]) and tests call it; it prints nothing
//! but logs.

pub mod artifact_dir;
pub mod compare;
pub mod config;
pub mod connect;
pub mod fidelity;
pub mod finalize;
pub mod find_max;
pub mod graph;
pub mod harness;
pub mod merge;
pub mod outputs;
pub mod plan;
mod plan_hit;
mod precision_stop;
pub mod prepare;
pub mod rendezvous;
pub mod run_dir;
mod scrapers;
pub mod server_cmd;
pub mod shard;
pub mod sweep;
pub mod trials;

use anyhow::Context;

pub use crate::export::manifest::MANIFEST_FILE;
pub use config::{
    positive_secs, Cancel, DatasetSource, DryRun, ReplayOf, RunConfig, RunOutcome, RunPlan,
    RunSettings, TreeFlags, MAX_SECS,
};
pub use finalize::finalize;
pub use prepare::{bundled_corpus, flag_of, input_ids, InputIds};

use crate::client::{Client, RequestBody};
use crate::metrics::scrape_log::Boundary;
use crate::replay::{self, ReplayConfig, ReplayInputs};
use crate::scenario;
use connect::Connected;
use plan::{Mode, Planned};
use prepare::Prepared;

pub use crate::scenario::builtin::{is_builtin_name, load, BUILTIN_MVP, BUILTIN_SCENARIO};

/// The corpus replayed when no dataset is named (24 synthetic traces, `fixtures/traces-24.jsonl`).
pub const BUNDLED_CORPUS: &[u8] = include_bytes!("../../../fixtures/traces-24.jsonl");

/// Lanes of a demo run (no `--url`) unless given.
pub const DEMO_CONCURRENCY: i64 = 4;

/// Profiling seconds of a demo run unless given.
pub const DEMO_DURATION_S: f64 = 30.0;

/// A fresh id: 128 bits from the OS-seeded thread generator, as 32 hex digits.
pub(crate) fn fresh_id() -> String {
    use rand::RngExt;
    format!("{:032x}", rand::rng().random::<u128>())
}

/// The entropy the scenario draws a seed from when `--random-seed` is unset.
pub(crate) fn entropy() -> u64 {
    use rand::RngExt;
    rand::rng().random()
}

/// A seed drawn for a run that was given none (a sweep draws one for all its points).
pub fn draw_seed() -> u64 {
    entropy() & (i64::MAX as u64)
}

/// The name of shard `index`'s directory under a sharded run's `--output-artifact-dir`.
pub fn shard_dir_name(index: u32) -> String {
    format!("shard-{index}")
}

/// A multi-thread runtime with every driver.
pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// This machine's host name, for messages and manifests.
pub(crate) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "unknown".into())
}

/// Ctrl-C and SIGTERM: each one bumps the counter (first: drain; second: cancel in-flight).
pub(crate) async fn forward_signals(cancel: Cancel) {
    #[cfg(unix)]
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    loop {
        #[cfg(unix)]
        let got = match term.as_mut() {
            Some(t) => tokio::select! {
                r = tokio::signal::ctrl_c() => r.is_ok(),
                r = t.recv() => r.is_some(),
            },
            None => tokio::signal::ctrl_c().await.is_ok(),
        };
        #[cfg(not(unix))]
        let got = tokio::signal::ctrl_c().await.is_ok();
        if !got {
            return;
        }
        if cancel.interrupts() == 0 {
            tracing::warn!("interrupt: no new turns start; in-flight requests drain (interrupt again to cancel them)");
        }
        cancel.interrupt();
    }
}

/// Runs `cfg` to its outcome, as a sequence of stages: prepare (scenario, settings, dataset), join
/// the other shards, plan, connect (simulator, client, pre-flight), open the artifact directory,
/// replay, finish (verdict, summary, exports, merge). Nothing is written before the directory opens,
/// and it opens only when every check passed.
pub fn execute(cfg: &RunConfig, cancel: &Cancel) -> anyhow::Result<RunOutcome> {
    if !cfg.dry_run {
        // Refused before anything loads; checked again before the directory is touched.
        let sub = cfg.shard.as_ref().map(|sh| shard_dir_name(sh.index));
        cfg.output.check(sub.as_deref(), cfg.overwrite)?;
    }
    // From here on the configuration is what the scenario decided.
    let (prepared, mut inst, cfg) = prepare::prepare(cfg)?;
    let joined = connect::join_shards(&cfg, &prepared)?;
    let (seed, run_id) = match &joined {
        Some(j) => (j.shard.member.seed, Some(j.shard.member.run_id.clone())),
        None => (prepared.resolved.seed, cfg.run_id.clone()),
    };
    let planned = match plan::plan(&cfg, &prepared, &mut inst, seed, run_id)? {
        plan::Planning::Dry(outcome) => return Ok(outcome),
        plan::Planning::Replay(planned) => planned,
    };
    let (runtime, shard) = match joined {
        Some(j) => (j.rt, Some(j.shard)),
        None => (runtime()?, None),
    };
    let ctx = RunCtx {
        cfg: &cfg,
        prepared: &prepared,
        planned: &planned,
    };
    let (mut conn, client) = connect::connect(ctx, &runtime)?;
    let (dir, sink) = run_dir::RunDir::open(
        ctx,
        &run_dir::ServerFacts {
            model: &conn.model,
            cache_preflight: conn.cache_preflight.as_ref(),
            server_slots: conn.server_slots,
        },
        shard.as_ref().map(|s| &s.member),
        runtime.handle(),
    )?;
    let metrics = serve_metrics(&cfg, conn.metrics_listener.take(), &dir, runtime.handle())?;
    let stage = ReplayStage {
        ctx,
        rt: &runtime,
        conn: &conn,
        dir: &dir,
        sink: &sink,
    };
    let replayed = stage.run(inst, client, shard, cancel)?;
    // An interrupt from here on (while the outputs are written, or after) ends the linger.
    let interrupts_at_end = cancel.interrupts();
    drop(conn.sim.take());
    let outcome = outputs::finish(ctx, &runtime, &conn, (dir, sink), replayed);
    if let Some(server) = metrics {
        linger(&cfg, server, (cancel, interrupts_at_end), &runtime);
    }
    outcome
}

/// The run's body builder: the model, the extra inputs, the token field, Dynamo's `nvext` and the
/// endpoint's shape (the replay's and the cache preflight's requests are written by the same one).
fn request_body(model: &str, prepared: &Prepared, run_plan: &RunPlan) -> RequestBody {
    RequestBody::new(model, true, true, &prepared.extra)
        .with_max_completion_tokens(prepared.trees && !run_plan.legacy_max_tokens)
        .with_dynamo(prepared.dynamo, &prepared.extra)
        .with_endpoint_type(run_plan.client.api)
}

/// Serves `--metrics-listen`'s socket from the run's live counts, from now until the run ends.
fn serve_metrics(
    cfg: &RunConfig,
    listener: Option<std::net::TcpListener>,
    dir: &run_dir::RunDir,
    runtime: &tokio::runtime::Handle,
) -> anyhow::Result<Option<crate::telemetry::prom::MetricsServer>> {
    let Some(listener) = listener else {
        return Ok(None);
    };
    let shard = cfg.shard.as_ref().map(|shard_cfg| shard_cfg.index);
    let server =
        crate::telemetry::prom::MetricsServer::start(listener, dir.live.clone(), shard, runtime)
            .context("cannot serve --metrics-listen")?;
    tracing::info!("agentx metrics at http://{}/metrics", server.addr());
    Ok(Some(server))
}

/// Keeps the metrics endpoint up for `--metrics-linger` after the outputs are written, so a
/// Prometheus takes the final values. An interrupt after the replay ended (the count
/// `interrupts_at_end`) ends the wait.
fn linger(
    cfg: &RunConfig,
    server: crate::telemetry::prom::MetricsServer,
    (cancel, interrupts_at_end): (&Cancel, u32),
    runtime: &tokio::runtime::Runtime,
) {
    if cfg.metrics_linger.is_zero() {
        return;
    }
    tracing::info!(
        "serving the final metrics at http://{}/metrics for {:.0}s (--metrics-linger)",
        server.addr(),
        cfg.metrics_linger.as_secs_f64()
    );
    let mut interrupts = cancel.subscribe();
    runtime.block_on(async {
        tokio::select! {
            () = tokio::time::sleep(cfg.metrics_linger) => {}
            _ = interrupts.wait_for(|count| *count > interrupts_at_end) => {}
        }
    });
    server.stop();
}

/// What every stage after planning reads: the configuration the scenario decided, what the first
/// stage prepared (scenario, settings, dataset) and the plan. A run's own process and
/// `agentx-host finalize` (which rebuilds them from the manifest) hand the same to the last stage.
#[derive(Clone, Copy)]
pub(super) struct RunCtx<'a> {
    cfg: &'a RunConfig,
    prepared: &'a Prepared,
    planned: &'a Planned,
}

/// The boundary scrapes a sharded run's coordinator takes: the phase edges every shard shares.
const GLOBAL_EDGES: [Boundary; 2] = [Boundary::ProfilingStart, Boundary::ProfilingComplete];

/// What the replay stage reads beyond the run's context: the runtime, the server it connected to,
/// and the artifact directory with its record sink.
struct ReplayStage<'a> {
    ctx: RunCtx<'a>,
    rt: &'a tokio::runtime::Runtime,
    conn: &'a Connected,
    dir: &'a run_dir::RunDir,
    sink: &'a crate::record::RecordSink,
}

impl ReplayStage<'_> {
    /// Replays the plan (a sharded run: when every shard is ready) with the scraper running, under
    /// the signals that interrupt it.
    fn run(
        &self,
        inst: scenario::ScenarioInstance,
        client: Client,
        shard: Option<connect::ShardMember>,
        cancel: &Cancel,
    ) -> anyhow::Result<outputs::Replayed> {
        let RunCtx {
            cfg,
            prepared,
            planned,
        } = self.ctx;
        let rt = self.rt;
        let run_plan = &cfg.plan;
        let settings = &prepared.settings;
        let replay_cfg = self.replay_config();
        tracing::info!(
            scenario = %format!("{} {} sha256:{}", prepared.info.name, prepared.info.version, prepared.sc.hash()),
            run_id = %planned.run_id,
            seed = planned.seed,
            concurrency = settings.concurrency,
            duration_s = settings.duration.as_secs_f64(),
            url = %client.uri(),
            model = %self.conn.model,
            mode = ?run_plan.mode,
            "replay starting"
        );
        let scrapers = scrapers::Scrapers::start(cfg, rt, &self.conn.ccfg.url, self.dir)?;
        let boundaries = scrapers.boundaries();
        let sharded = shard.is_some();
        // A sharded run: say this shard is ready, and start warmup when every shard is. Shard 0's
        // scraper (the only one) takes the boundary scrapes at the global phase edges: warmup's
        // start before it says ready (no shard sends before every shard is ready), profiling's
        // start and completion from the coordinator (when every shard's warmup drained, before
        // any shard profiles; when every shard drained).
        let (link, finish, coordinator) = match shard {
            Some(mut m) => {
                let shard_cfg = cfg
                    .shard
                    .as_ref()
                    .expect("a shard member only when sharded");
                if let Some(boundaries) = &boundaries {
                    rt.block_on(boundaries.take(Boundary::WarmupStart));
                    if let Some(coordinator) = &m.coordinator {
                        coordinator.take_boundaries(connect::boundary_hook(
                            boundaries.clone(),
                            &GLOBAL_EDGES,
                        ));
                    }
                }
                let start_at = rt.block_on(m.member.ready(shard_cfg.timeout))?;
                rt.block_on(common_start(start_at));
                let (link, fin) = {
                    let _g = rt.enter();
                    m.member.link(shard_cfg.index, shard_cfg.count)
                };
                (Some(link), Some(fin), m.coordinator)
            }
            None => (None, None, None),
        };
        // The boundaries this process's replay takes itself.
        let own: &'static [Boundary] = if sharded {
            &[Boundary::PressureStart, Boundary::ProfilingEnd]
        } else {
            &Boundary::ALL
        };
        let replay_boundaries =
            boundaries.map(|boundaries| connect::boundary_hook(boundaries, own));
        let srv_row = scrapers.server.clone().map(connect::srv_row);
        let dashboard = self.dashboard(srv_row.clone());
        let inputs = ReplayInputs {
            dataset: prepared.ds.clone(),
            synth: planned.synth.clone(),
            counter: prepared.counter.clone(),
            client: Box::new(client),
            body: request_body(&self.conn.model, prepared, run_plan),
            scenario: inst,
            records: self.sink.sender(),
            clock: self.dir.clock,
            interrupt: cancel.subscribe(),
            progress: cfg.progress && dashboard.is_none(),
            srv_row,
            live: self.dir.live.clone(),
            on_profiling: Some(self.dir.on_profiling()),
            boundary: replay_boundaries,
            shard: link,
            early_stop: self
                .dir
                .precision
                .as_ref()
                .map(|watch| watch.start(cfg, self.dir.clock, planned.seed, rt)),
        };
        let (outcome, tree_counts, scraped) = rt.block_on(async {
            if cfg.signals {
                tokio::spawn(forward_signals(cancel.clone()));
            }
            let (outcome, counts) = match &planned.mode {
                Mode::Trees(tp) => {
                    let tree_outcome =
                        replay::sched::run(replay_cfg, tp.sched_plan(&run_plan.tree_flags), inputs)
                            .await;
                    (tree_outcome.replay, Some(tree_outcome.counts))
                }
                Mode::Streams(plan) => (replay::run(replay_cfg, plan.clone(), inputs).await, None),
            };
            // Before the scraper stops: the dashboard's server figures hold it.
            if let Some(dashboard) = dashboard {
                dashboard.finish();
            }
            drained(cfg, finish.as_ref(), coordinator.as_ref(), &scrapers).await;
            // The final scrape comes after profiling ended, so counters capture the end state.
            (outcome, counts, scrapers.stop().await)
        });
        self.dir.profiling_noted();
        Ok(outputs::Replayed {
            outcome,
            tree_counts,
            scrape_log: scraped.server,
            gpu_log: scraped.gpu,
            finish,
            coordinator,
        })
    }
}

impl ReplayStage<'_> {
    /// The replay's settings, as the scenario decided them.
    fn replay_config(&self) -> ReplayConfig {
        let RunCtx {
            cfg,
            prepared,
            planned,
        } = self.ctx;
        let run_plan = &cfg.plan;
        let settings = &prepared.settings;
        ReplayConfig {
            duration: settings.duration,
            grace: settings.grace,
            warmup_grace: settings.warmup_grace,
            failed_request_threshold: settings.failed_request_threshold,
            placement: settings.placement,
            mode: run_plan.mode,
            use_server_token_count: settings.use_server_token_count,
            overflow_phrases: run_plan.overflow_phrases_env.clone(),
            run_id: planned.run_id.clone(),
            stats_interval: settings.stats_interval,
            trace_idle_cap: settings.trace_idle_cap,
            timer_thread: true,
            warmup_progress_interval: run_plan.warmup_progress_interval,
            chat_template: prepared.chat_template.clone(),
            prompt_chain_block_size: Some(self.conn.chain_block_size),
            wire: settings
                .agent_wire
                .map_or(crate::dataset::Wire::Text, |w| w.wire),
            keep_reasoning: settings.agent_wire.is_some_and(|w| w.keep_reasoning),
        }
    }

    /// `--ui dashboard` on a terminal: the live dashboard, drawn from the run's live counts and
    /// `server`'s figures until it is finished (`None`: the progress bar or lines instead).
    fn dashboard(&self, server: Option<replay::SrvRowFn>) -> Option<crate::dashboard::Dashboard> {
        let log = self.ctx.cfg.dashboard.clone()?;
        let title = format!(
            "run {} · {} {} · {}",
            self.ctx.planned.run_id,
            self.ctx.prepared.info.name,
            self.ctx.prepared.info.version,
            self.conn.ccfg.url
        );
        let source = crate::dashboard::DashboardSource {
            live: self.dir.live.clone(),
            server,
            title,
            log,
        };
        match crate::dashboard::Dashboard::start(source) {
            Ok(dashboard) => dashboard,
            Err(error) => {
                tracing::warn!("cannot draw the dashboard ({error}); showing progress instead");
                None
            }
        }
    }
}

/// A sharded run: this shard's replay drained (told to the coordinator); shard 0 waits for every
/// shard's drain and the coordinator's profiling_complete boundary scrape before it stops scraping
/// (after the rendezvous timeout, at least 600 s, it takes that scrape itself and says so).
async fn drained(
    cfg: &RunConfig,
    finish: Option<&rendezvous::Finish>,
    coordinator: Option<&rendezvous::Coordinator>,
    scrapers: &scrapers::Scrapers,
) {
    if let Some(finish) = finish {
        finish.drained();
    }
    let (Some(coordinator), Some(shard_cfg)) = (coordinator, cfg.shard.as_ref()) else {
        return;
    };
    let wait = shard_cfg.timeout.max(std::time::Duration::from_secs(600));
    if !coordinator.profiling_complete(wait).await {
        tracing::warn!(
            "not every shard drained within {} s; the profiling_complete boundary scrape is \
             taken now",
            wait.as_secs()
        );
        scrapers.boundary(Boundary::ProfilingComplete).await;
    }
}

/// Waits until `at` (ns since the epoch on this host's wall clock): the warmup's common start the
/// rendezvous named, so every shard's first requests (the session-tree primers on one t*
/// timeline) leave together. A start already past begins at once.
async fn common_start(start_at: Option<u64>) {
    let Some(start_at) = start_at else { return };
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let wait = std::time::Duration::from_nanos(start_at.saturating_sub(now));
    tracing::debug!(
        wait_ms = wait.as_secs_f64() * 1e3,
        "rendezvous: warmup starts at the common instant"
    );
    tokio::time::sleep(wait).await;
}
