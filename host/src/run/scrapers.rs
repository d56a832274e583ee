//! The run's Prometheus scrapers: the server's `/metrics` (and `--server-metrics`'s) and the GPU
//! telemetry exporters (`--gpu-telemetry`), each with its own journal, both on the run's clock and
//! both taking a boundary scrape at every phase edge, so the window's counters (tokens, cache,
//! energy) are read at the same instants. In a sharded run only shard 0 scrapes: the servers and
//! GPUs are the same for all.

use std::sync::Arc;

use anyhow::Context;

use super::config::RunConfig;
use crate::client::scrape::{Boundaries, ScrapeConfig, Scraper};
use crate::client::scrape_journal::{JournalFile, GPU_TELEMETRY_JOURNAL, SCRAPE_JOURNAL};
use crate::metrics::scrape_log::{Boundary, ScrapeLog};

/// The scrapers a run started (either may be off).
pub(super) struct Scrapers {
    /// The server's metrics (off with `--no-server-metrics`).
    pub(super) server: Option<Arc<Scraper>>,
    /// The GPU exporters (only with `--gpu-telemetry`).
    pub(super) gpu: Option<Arc<Scraper>>,
}

/// What the scrapers read, once stopped.
pub(super) struct Scraped {
    pub(super) server: Option<ScrapeLog>,
    pub(super) gpu: Option<ScrapeLog>,
}

/// Both scrapers' boundary scrapes, taken together.
#[derive(Clone)]
pub(super) struct AllBoundaries {
    server: Option<Boundaries>,
    gpu: Option<Boundaries>,
}

impl AllBoundaries {
    /// Takes `at` on both scrapers at once.
    pub(super) async fn take(&self, at: Boundary) {
        let server = async {
            if let Some(boundaries) = &self.server {
                boundaries.take(at).await;
            }
        };
        let gpu = async {
            if let Some(boundaries) = &self.gpu {
                boundaries.take(at).await;
            }
        };
        tokio::join!(server, gpu);
    }
}

impl Scrapers {
    /// Starts the scrapers the run asks for, from the start of warmup to after the end.
    pub(super) fn start(
        cfg: &RunConfig,
        runtime: &tokio::runtime::Runtime,
        url: &str,
        dir: &super::run_dir::RunDir,
    ) -> anyhow::Result<Scrapers> {
        if cfg.shard.as_ref().is_some_and(|s| s.index != 0) {
            return Ok(Scrapers {
                server: None,
                gpu: None,
            });
        }
        let server = if cfg.no_server_metrics {
            None
        } else {
            let mut urls = vec![crate::client::scrape::metrics_url(url)?];
            for extra in &cfg.server_metrics {
                urls.push(
                    crate::client::scrape::metrics_url(extra)
                        .with_context(|| format!("--server-metrics {extra}"))?,
                );
            }
            Some(start_one(
                runtime,
                dir,
                urls,
                cfg.plan.scrape_interval,
                SCRAPE_JOURNAL,
                "server metrics",
            )?)
        };
        let gpu = if cfg.gpu_telemetry.is_empty() {
            None
        } else {
            let urls = cfg.gpu_telemetry.clone();
            let interval = cfg.plan.gpu_scrape_interval;
            Some(start_one(
                runtime,
                dir,
                urls,
                interval,
                GPU_TELEMETRY_JOURNAL,
                "GPU telemetry",
            )?)
        };
        Ok(Scrapers { server, gpu })
    }

    /// Both scrapers' boundary scrapes; `None` when neither runs.
    pub(super) fn boundaries(&self) -> Option<AllBoundaries> {
        let all = AllBoundaries {
            server: self.server.as_ref().map(|scraper| scraper.boundaries()),
            gpu: self.gpu.as_ref().map(|scraper| scraper.boundaries()),
        };
        (all.server.is_some() || all.gpu.is_some()).then_some(all)
    }

    /// Takes the boundary scrape `at` on both, now.
    pub(super) async fn boundary(&self, at: Boundary) {
        if let Some(boundaries) = self.boundaries() {
            boundaries.take(at).await;
        }
    }

    /// Stops both after their final scrapes; a scraper still shared elsewhere is not read (said
    /// why).
    pub(super) async fn stop(self) -> Scraped {
        Scraped {
            server: stop_one(self.server, "server metrics").await,
            gpu: stop_one(self.gpu, "GPU telemetry").await,
        }
    }
}

/// Starts one scraper over `urls`, journaled to `journal` in the run's directory (a run goes on
/// without its journal, said why).
fn start_one(
    runtime: &tokio::runtime::Runtime,
    dir: &super::run_dir::RunDir,
    urls: Vec<String>,
    interval: Option<std::time::Duration>,
    journal: &str,
    what: &str,
) -> anyhow::Result<Arc<Scraper>> {
    let mut scrape_cfg = ScrapeConfig::new(urls);
    if let Some(interval) = interval {
        scrape_cfg.interval = interval;
    }
    match JournalFile::create_named(&dir.art, journal) {
        Ok(file) => scrape_cfg.journal = Some(file),
        Err(e) => tracing::warn!(
            "cannot create {}: {e}; a run killed before its end will lose its {what}",
            dir.art.join(journal).display()
        ),
    }
    let _guard = runtime.enter();
    Ok(Arc::new(Scraper::start(scrape_cfg, dir.clock)?))
}

async fn stop_one(scraper: Option<Arc<Scraper>>, what: &str) -> Option<ScrapeLog> {
    match scraper.map(Arc::try_unwrap) {
        Some(Ok(scraper)) => Some(scraper.stop().await),
        Some(Err(_)) => {
            tracing::warn!("the {what} scraper is still shared; its metrics are not exported");
            None
        }
        None => None,
    }
}
