//! Meeting the others before a run: the shards of a sharded run at the rendezvous, and the server
//! (the built-in simulator or `--url`) through the client, its pre-flight check and its cache
//! preflight; the scraper of the server's metrics and the realtime block's `srv` row.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Context};

use super::config::{value_json, RunConfig};
use super::plan::Mode;
use super::prepare::Prepared;
use super::{host_name, rendezvous, runtime, RunCtx};
use crate::client::preflight::cache::{CacheProbe, CacheVerdict, ProbeSpec};
use crate::client::{Client, ClientConfig};
use crate::dataset::Dataset;
use crate::export::manifest::CachePreflight;
use crate::replay::{self, Plan};
use crate::scenario::ReplaySetting;

/// A shard's membership of its run: the member (for the manifest, the ready barrier, the link and
/// the end) and, on shard 0, the coordinator.
pub(super) struct ShardMember {
    pub member: rendezvous::Member,
    pub coordinator: Option<rendezvous::Coordinator>,
}

/// A joined shard, with the runtime the rendezvous ran on (the run goes on on it).
pub(super) struct Joined {
    pub rt: tokio::runtime::Runtime,
    pub shard: ShardMember,
}

/// A sharded run meets the other shards before planning: they must agree on what pins the plan,
/// and shard 0's run id and seed become everyone's. `None` for a run in one process or a dry run.
pub(super) fn join_shards(cfg: &RunConfig, prepared: &Prepared) -> anyhow::Result<Option<Joined>> {
    let (Some(shard_cfg), false) = (&cfg.shard, cfg.dry_run) else {
        return Ok(None);
    };
    let conc = prepared.settings.concurrency;
    if conc < shard_cfg.count {
        bail!(
            "{} shards for --concurrency {conc}: every shard needs at least one lane; use at most {conc} shards",
            shard_cfg.count
        );
    }
    let runtime = runtime()?;
    let hello = rendezvous::Hello {
        index: shard_cfg.index,
        count: shard_cfg.count,
        run_id: cfg.run_id.clone(),
        seed: prepared.resolved.seed,
        seed_drawn: prepared.resolved.seed_drawn,
        scenario_sha256: prepared.sc.hash().to_string(),
        dataset_key: prepared.dataset_key.clone(),
        concurrency: conc,
        settings: prepared
            .resolved
            .settings
            .iter()
            .filter(|s| s.name != ReplaySetting::RandomSeed.name())
            .map(|s| (s.name.clone(), value_json(&s.value)))
            .collect(),
        failed_request_threshold: cfg.failed_request_threshold,
        host: host_name(),
    };
    let (member, coordinator) = runtime.block_on(async {
        if shard_cfg.index == 0 {
            let addr = rendezvous::listen_addr(
                &shard_cfg.coordinator,
                shard_cfg.bind.as_deref(),
                shard_cfg.port,
                shard_cfg.timeout,
            )
            .await?;
            let mut coordinator = rendezvous::Coordinator::start(
                addr,
                hello.clone(),
                shard_cfg.auth.clone(),
                shard_cfg.timeout,
            )
            .await?;
            tracing::info!(
                shard = shard_cfg.index,
                shards = shard_cfg.count,
                coordinator = %coordinator.addr(),
                source = shard_cfg.source,
                "rendezvous: joining"
            );
            let member = coordinator
                .join_own(&hello, &shard_cfg.auth, shard_cfg.timeout)
                .await?;
            anyhow::Ok((member, Some(coordinator)))
        } else {
            tracing::info!(
                shard = shard_cfg.index,
                shards = shard_cfg.count,
                coordinator = %shard_cfg.coordinator,
                source = shard_cfg.source,
                secret = shard_cfg.auth.source,
                "rendezvous: joining"
            );
            let member = rendezvous::Member::join(
                &shard_cfg.coordinator,
                &hello,
                &shard_cfg.auth,
                shard_cfg.timeout,
            )
            .await?;
            Ok((member, None))
        }
    })?;
    tracing::info!(
        run_id = %member.run_id,
        seed = member.seed,
        clock_offset_ms = member.clock_offset_ns as f64 / 1e6,
        rtt_ms = member.clock_rtt_ns as f64 / 1e6,
        joined_s = member.joined_in.as_secs_f64(),
        "rendezvous: joined"
    );
    Ok(Some(Joined {
        rt: runtime,
        shard: ShardMember {
            member,
            coordinator,
        },
    }))
}

/// The server a run talks to: the built-in simulator (without `--url`) or the named one, the
/// client, and the model every request names.
pub(super) struct Connected {
    pub sim: Option<crate::sim::SimThread>,
    /// Words per block of the prompt chains: `--kv-block-size`, else the built-in simulator's.
    pub chain_block_size: u32,
    pub ccfg: ClientConfig,
    pub model: String,
    /// `--metrics-listen`'s socket, bound before anything was sent; served once the run's live
    /// counts exist.
    pub metrics_listener: Option<std::net::TcpListener>,
    /// What the cache preflight found, for the manifest (`None`: it did not run).
    pub cache_preflight: Option<CachePreflight>,
    /// A llama.cpp server's slots, for the cache model's capacity (`None`: not llama.cpp, or its
    /// `/props` did not say).
    pub server_slots: Option<crate::metrics::cache_truth::SlotPool>,
}

/// Starts the simulator when there is no `--url`, builds the client and runs the pre-flight check:
/// the last checks before the artifact directory is touched. The client goes on to the replay.
pub(super) fn connect(
    ctx: RunCtx<'_>,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<(Connected, Client)> {
    let RunCtx {
        cfg,
        prepared,
        planned,
    } = ctx;
    if let Some(endpoint) = &cfg.otlp_endpoint {
        // Refused here, before the directory opens and before any request.
        crate::telemetry::otlp::traces_url(endpoint)?;
    }
    // Bound here, so a port in use is refused before the simulator starts or any request goes.
    let metrics_listener = cfg
        .metrics_listen
        .map(|addr| {
            let shard = cfg.shard.as_ref().map(|shard_cfg| shard_cfg.index);
            crate::telemetry::prom::bind(crate::telemetry::prom::shard_addr(addr, shard))
        })
        .transpose()?;
    let run_plan = &cfg.plan;
    let sim = if run_plan.demo {
        let preset: crate::sim::Preset = cfg
            .sim_preset
            .parse()
            .map_err(|e| anyhow!("--sim-preset {}: {e}", cfg.sim_preset))?;
        Some(
            crate::sim::SimThread::start(crate::sim::SimConfig::preset(preset))
                .context("cannot start the built-in simulator")?,
        )
    } else {
        None
    };
    let mut ccfg = run_plan.client.clone();
    if let Some(sim) = &sim {
        ccfg.url = sim.url();
        tracing::info!(url = %ccfg.url, preset = %cfg.sim_preset, "built-in simulator started");
    }
    let client = {
        let _g = runtime.enter();
        Client::new(&ccfg)?
    };
    let model = match (&sim, &run_plan.model) {
        (_, Some(model)) => model.clone(),
        (Some(sim), None) => sim.model().to_owned(),
        (None, None) if prepared.decisions.discover_model => {
            let timeout = ccfg.connect_timeout.min(PREFLIGHT_TIMEOUT);
            let model = runtime.block_on(crate::client::preflight::discover(&client, timeout))?;
            tracing::info!("no --model given: the server serves one model, `{model}`; using it");
            model
        }
        (None, None) => bail!(
            "--model is required with --url: the model name the server serves, e.g. --model meta-llama/Llama-3.1-8B-Instruct (the scenario {} does not discover it)",
            prepared.info.name
        ),
    };
    let mut server_slots = None;
    if !cfg.skip_preflight {
        let timeout = ccfg.connect_timeout.min(PREFLIGHT_TIMEOUT);
        let checked = runtime.block_on(crate::client::preflight::check(&client, &model, timeout));
        // Nothing was sent and nothing written: an earlier run in the directory stays as it was.
        let pre = checked.map_err(|e| anyhow!(e))?;
        match &planned.mode {
            Mode::Streams(plan) => report_preflight(&pre, plan, &prepared.ds, &model),
            Mode::Trees(_) => {
                if let Some(note) = &pre.note {
                    tracing::warn!("pre-flight: {note}");
                }
            }
        }
        if pre.llama_cpp {
            server_slots = read_slots(&client, runtime, timeout);
        }
    }
    let cache_preflight = cache_preflight(ctx, runtime, &client, &model)?;
    Ok((
        Connected {
            chain_block_size: chain_block_size(run_plan.kv_block_size, sim.as_ref()),
            sim,
            ccfg,
            model,
            metrics_listener,
            cache_preflight,
            server_slots,
        },
        client,
    ))
}

/// The longest one request of the cache preflight (and its `/metrics` read) may take.
const CACHE_PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// The cache preflight (`client::preflight::cache`), when it is on: the scenario's default
/// ([`super::harness::wire_follows_reference`]: off under a reference's wire) unless
/// `--cache-preflight`, `--no-cache-preflight` or `--require-cache` says otherwise. It runs before
/// the artifact directory opens and before the scraper starts, so its requests fall outside every
/// counter window, and it writes no record; in a sharded run only shard 0 sends it (another
/// shard's could land in the warmup window shard 0's scraper already measures). A verdict other
/// than `works` is a warning, and under `--require-cache` an error that stops the run.
fn cache_preflight(
    ctx: RunCtx<'_>,
    runtime: &tokio::runtime::Runtime,
    client: &Client,
    model: &str,
) -> anyhow::Result<Option<CachePreflight>> {
    let RunCtx {
        cfg,
        prepared,
        planned,
    } = ctx;
    let reference = super::harness::wire_follows_reference(
        &prepared.info.name,
        prepared.decisions.decides_settings,
    );
    if !cfg.cache_preflight.unwrap_or(!reference)
        || cfg.shard.as_ref().is_some_and(|s| s.index != 0)
    {
        return Ok(None);
    }
    let correlation_id = format!("{}-preflight", planned.run_id);
    let nonce = super::fresh_id();
    let body = super::request_body(model, prepared, &cfg.plan);
    let spec = ProbeSpec {
        body: &body,
        extra: &prepared.extra,
        correlation_id: &correlation_id,
        nonce: &nonce[..16],
        read_metrics: !cfg.no_server_metrics,
        timeout: CACHE_PROBE_TIMEOUT,
    };
    let probe = runtime.block_on(crate::client::preflight::cache::probe(client, &spec));
    let said = describe_probe(&probe);
    if probe.verdict == CacheVerdict::Works {
        tracing::info!("cache preflight: {said}");
    } else if cfg.require_cache {
        // Nothing was written: the directory opens after this.
        bail!(
            "cache preflight: {said}\n--require-cache stops a run whose prefix cache does not \
             work or does not count its hits: fix the server, or run without --require-cache to \
             proceed anyway (the verdict is then kept in the manifest)"
        );
    } else {
        tracing::warn!("cache preflight: {said} (the run goes on; --require-cache would stop it)");
    }
    Ok(Some(manifest_row(probe)))
}

/// The probe's verdict, finding, likely causes and fix, as one message.
fn describe_probe(probe: &CacheProbe) -> String {
    let mut said = format!("{}: {}", probe.verdict.as_str(), probe.finding);
    if !probe.causes.is_empty() {
        said.push_str("; likely cause: ");
        said.push_str(&probe.causes.join("; or "));
    }
    if let Some(fix) = &probe.fix {
        said.push_str("; fix: ");
        said.push_str(fix);
    }
    said
}

/// The probe as the manifest keeps it.
fn manifest_row(probe: CacheProbe) -> CachePreflight {
    use crate::export::manifest::{CacheClaim, CacheProbeTurn, CacheVerdict as Verdict};
    CachePreflight {
        verdict: match probe.verdict {
            CacheVerdict::Works => Verdict::Works,
            CacheVerdict::NoUsageField => Verdict::NoUsageField,
            CacheVerdict::NoHitWhileClaimed => Verdict::NoHitWhileClaimed,
            CacheVerdict::CachingOff => Verdict::CachingOff,
            CacheVerdict::Inconclusive => Verdict::Inconclusive,
        },
        finding: probe.finding,
        causes: probe.causes,
        fix: probe.fix,
        repeat_hit_rate: probe.repeat_hit_rate,
        claim: CacheClaim {
            prefix_caching: probe.claim.prefix_caching,
            engines: probe.claim.engines,
            block_size: probe.claim.block_size,
            note: probe.claim.note,
        },
        turns: probe
            .turns
            .into_iter()
            .map(|t| CacheProbeTurn {
                pass: t.pass,
                turn: t.turn,
                prompt_words: t.prompt_words,
                prompt_tokens: t.prompt_tokens,
                cached_tokens: t.cached_tokens,
                usage: t.usage,
                error: t.error,
            })
            .collect(),
    }
}

/// The replay's boundary hook: takes the boundary scrapes `only` names and ignores the others
/// (a sharded run's coordinator takes the global edges).
pub(super) fn boundary_hook(
    boundaries: super::scrapers::AllBoundaries,
    only: &'static [crate::metrics::scrape_log::Boundary],
) -> replay::BoundaryHook {
    Arc::new(move |at| {
        let boundaries = boundaries.clone();
        Box::pin(async move {
            if only.contains(&at) {
                boundaries.take(at).await;
            }
        })
    })
}

/// The realtime block's `srv` row from the scraper's latest snapshot: cache hit rates, KV usage,
/// queue, and the server's token throughput over the last interval.
pub(super) fn srv_row(scraper: Arc<crate::client::scrape::Scraper>) -> replay::SrvRowFn {
    // The counts and time of the scrape the last rate was taken at, and that rate.
    type Last = ((f64, f64, u64), (Option<f64>, Option<f64>));
    let previous = std::sync::Mutex::new(None::<Last>);
    Arc::new(move || {
        let snap = scraper.snapshot();
        let at = snap.at_ns?;
        let (prompt, generated) = (snap.prompt_tokens, snap.generation_tokens);
        let mut last = previous.lock().ok()?;
        // Over the last interval; the first row, over the time since the first scrape (the
        // counts are increases since it). No scrape since the last row (rows more often than
        // scrapes): the last rate stands.
        let since = last
            .map(|(counts, _)| counts)
            .or(snap.first_ns.map(|first| (0.0, 0.0, first)));
        let (tput_in, tput_out) = match (since, prompt, generated) {
            (Some((prompt0, generated0, t0)), Some(prompt1), Some(generated1)) if at > t0 => {
                let secs = (at - t0) as f64 / 1e9;
                (
                    Some((prompt1 - prompt0) / secs),
                    Some((generated1 - generated0) / secs),
                )
            }
            (Some((_, _, t0)), Some(_), Some(_)) if at == t0 => {
                last.map_or((None, None), |(_, rate)| rate)
            }
            _ => (None, None),
        };
        if let (Some(prompt1), Some(generated1)) = (prompt, generated) {
            *last = Some(((prompt1, generated1, at), (tput_in, tput_out)));
        }
        Some(crate::ui::SrvRow {
            prefix_cache_hit: snap.prefix_cache_hit_rate.map(|r| r * 100.0),
            ext_cache_hit: snap.external_cache_hit_rate.map(|r| r * 100.0),
            kv_usage: snap.kv_usage.map(|r| r * 100.0),
            running: snap.running,
            waiting: snap.waiting,
            tput_in,
            tput_out,
        })
    })
}

/// A llama.cpp server's slot pool from its `/props` (`client::preflight::slots`); a server that
/// does not say is warned about, and the cache model's at-capacity figures go without a capacity.
fn read_slots(
    client: &Client,
    runtime: &tokio::runtime::Runtime,
    timeout: Duration,
) -> Option<crate::metrics::cache_truth::SlotPool> {
    match runtime.block_on(crate::client::preflight::slots::read(client, timeout)) {
        Ok(pool) => {
            tracing::info!(
                "pre-flight: llama.cpp serves {} slots of {} tokens of context",
                pool.slots,
                pool.slot_context_tokens
            );
            Some(pool)
        }
        Err(why) => {
            tracing::warn!("pre-flight: the server is llama.cpp and its slots are unknown ({why}); the cache model has no capacity unless --kv-capacity-tokens gives one");
            None
        }
    }
}

/// The longest the pre-flight `GET /v1/models` may take (a server that does not answer in that time
/// is warned about, not refused).
const PREFLIGHT_TIMEOUT: Duration = Duration::from_secs(10);

/// Words per block of the prompt chains: `--kv-block-size`, else the built-in simulator's block
/// size (so its cache is predicted exactly), else vLLM's default of 16 (which coarsens exactly to
/// any multiple of it).
fn chain_block_size(flag: Option<u32>, sim: Option<&crate::sim::SimThread>) -> u32 {
    const VLLM_DEFAULT_BLOCK_SIZE: u32 = 16;
    flag.or_else(|| sim.map(crate::sim::SimThread::block_size))
        .unwrap_or(VLLM_DEFAULT_BLOCK_SIZE)
}

/// Logs what the pre-flight check found: the served model, its context length, and how much of the
/// plan will overflow it.
fn report_preflight(
    preflight: &crate::client::preflight::Preflight,
    plan: &Plan,
    ds: &Dataset,
    model: &str,
) {
    if let Some(note) = &preflight.note {
        tracing::warn!("pre-flight: {note}");
    }
    let Some(len) = preflight.max_model_len else {
        if preflight.note.is_none() {
            tracing::info!("pre-flight: the server serves `{model}` and reports no context length");
        }
        return;
    };
    let over = plan.over_context(ds, len);
    let line = format!(
        "pre-flight: the server serves `{model}` with a context of {len} tokens; \
         {} of {} lanes start above it and {} of {} traces grow past it (prompt plus max_tokens, recorded counts)",
        over.lanes,
        plan.lanes.len(),
        over.traces,
        over.pool
    );
    if over.lanes > 0 || over.traces > 0 {
        tracing::warn!(
            "{line}: those requests will end as context overflows (counted, not failures; \
             they count towards the scenario's overflow rate limit)"
        );
    } else {
        tracing::info!("{line}");
    }
}
