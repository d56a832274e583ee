//! Result files of a run, written from its records and scraped server metrics: the aiperf-compatible
//! exports, the InferenceX `bmk_agentic` JSON, CSV, plots, the HTML report and the run manifest. It formats what
//! `metrics` computes and computes nothing of its own.

#![forbid(unsafe_code)]

pub mod aiperf;
pub mod bmk;
pub mod compare;
mod gantt;
pub mod gpu_telemetry;
pub mod html;
pub mod manifest;
pub mod plot;
pub mod run_summary;
pub mod server_metrics;
pub mod sweep;
pub mod sweep_views;
pub mod timeline;
pub mod trials;

use std::path::PathBuf;

/// The exports of a finished run, or of a merge of shards, beside its records: the aiperf files,
/// the server metrics (from the scrape log when there is one), the plot and report.html. Each
/// failure is logged and none loses the records; returns the files written and whether an export
/// the pipelines read could not be written.
pub fn write_run_exports(
    art: &agentx_record::fsio::Root,
    records: &[agentx_record::RequestRecord],
    info: &self::aiperf::RunInfo,
    slice_duration: Option<f64>,
    server: Option<(
        &agentx_metrics::scrape_log::ScrapeLog,
        &self::server_metrics::ExportMeta,
    )>,
) -> (Vec<PathBuf>, bool) {
    let mut files = Vec::new();
    let mut failed = false;
    match self::aiperf::write_all(art, records, info, slice_duration) {
        Ok(written) => files.extend(written),
        Err(error) => {
            failed = true;
            tracing::error!("{error}");
        }
    }
    if let Some((log, meta)) = server {
        let window = (info.profiling_start_ns, info.profiling_end_ns);
        match self::server_metrics::write_with(art, log, window, meta) {
            Ok(written) => files.extend(written),
            Err(error) => {
                failed = true;
                tracing::error!("{error}");
            }
        }
    }
    if !records.is_empty() {
        match self::plot::plot_into(art.path(), art, self::plot::PLOT_FILE.as_ref()) {
            Ok(plot) => files.push(plot),
            Err(error) => tracing::warn!("no plot: {error}"),
        }
        files.extend(self::html::write_after_run(art));
    }
    (files, failed)
}

/// The JSON Schemas of a run's two typed artifacts (`run_manifest.json`, `run_summary.json`),
/// derived from their types, each with the file name it is committed under in `schemas/`.
pub fn artifact_schemas() -> [(&'static str, serde_json::Value); 2] {
    [
        (
            "run_manifest.schema.json",
            schemars::schema_for!(manifest::Manifest).to_value(),
        ),
        (
            "run_summary.schema.json",
            schemars::schema_for!(run_summary::RunSummary).to_value(),
        ),
    ]
}

#[cfg(test)]
mod schema_tests {
    use std::path::Path;

    /// The committed schemas are the ones the types give; `AGENTX_BLESS=1` rewrites them.
    #[test]
    fn the_committed_schemas_are_the_types_schemas() {
        let dir = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../../schemas"));
        for (name, schema) in super::artifact_schemas() {
            let path = dir.join(name);
            let text = serde_json::to_string_pretty(&schema).expect("a schema serializes") + "\n";
            if std::env::var_os("AGENTX_BLESS").is_some() {
                std::fs::write(&path, &text).expect("schemas/ is writable");
                continue;
            }
            let committed = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                committed == text,
                "schemas/{name} is not what the types give; regenerate it with \
                 `AGENTX_BLESS=1 cargo test -p agentx-export schema_tests`"
            );
        }
    }
}
