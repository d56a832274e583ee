//! `run_summary.json`: the one type of a run's summary, written by the run when it ends (and by the
//! merge of a sharded run) and read by the merge, the report, the plot and the HTML page. Every
//! field is typed; a summary of an older version reads with the fields it lacks at their defaults
//! (`None` where a reader must tell "absent" apart), and fields this version does not know are kept
//! as they are. An error names the file and the field.

use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use agentx_metrics::tree_counts::ArrivalCounts;

use super::manifest::{DatasetId, ScenarioId};
use agentx_metrics::Summary;

/// The file name of a run's summary.
pub const RUN_SUMMARY: &str = "run_summary.json";

/// A run's summary: how it ended, what it ran, its verdict and its headline figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunSummary {
    /// The run's id.
    #[serde(default)]
    pub run_id: Option<String>,
    /// Why the run stopped (`completed`, `duration`, `failed-request-threshold`, …).
    #[serde(default)]
    pub stop: Option<String>,
    /// What the stop said, if anything.
    #[serde(default)]
    pub message: Option<String>,
    /// The scenario component the run loaded.
    #[serde(default)]
    pub scenario: Option<ScenarioRef>,
    /// The corpus the run replayed.
    #[serde(default)]
    pub dataset: Option<DatasetId>,
    /// The seed of the plan.
    #[serde(default)]
    pub seed: Option<u64>,
    /// The seed was drawn, not given.
    #[serde(default)]
    pub seed_drawn: bool,
    /// Lanes.
    #[serde(default)]
    pub concurrency: Option<u64>,
    /// Profiling time (s).
    #[serde(default)]
    pub benchmark_duration_s: Option<f64>,
    /// `recorded` or `live`: whose assistant text the history carries.
    #[serde(default)]
    pub assistant_mode: Option<String>,
    /// The server (`builtin-simulator` for a demo run).
    #[serde(default)]
    pub url: Option<String>,
    /// The model the requests named.
    #[serde(default)]
    pub model: Option<String>,
    /// When the run's clock started (Unix ns).
    #[serde(default)]
    pub started_unix_ns: Option<u64>,
    /// Whether the scenario judged the run a valid submission.
    #[serde(default)]
    pub submission_valid: Option<bool>,
    /// Why it is not one (empty for a valid submission).
    #[serde(default)]
    pub submission_invalid_reasons: Vec<String>,
    /// Records written to `records.jsonl`.
    #[serde(default)]
    pub records: Option<u64>,
    /// The figures of the records: counts, distributions, throughput, goodput.
    #[serde(default)]
    pub summary: Summary,
    /// The version of agentx-host that ran.
    #[serde(default)]
    pub host_version: Option<String>,
    /// The version of wasmtime that ran the scenario.
    #[serde(default)]
    pub wasmtime_version: Option<String>,
    /// The number of shards of a merged run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<u32>,
    /// How the server-metrics export found its profiling window (absent without server metrics).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_metrics_window: Option<ServerMetricsWindow>,
    /// The headers that carried each session to the router, and the routing profile (the
    /// manifest's `http`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<crate::manifest::HttpInfo>,
    /// An open-loop run's session arrivals (absent for a closed loop).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arrivals: Option<ArrivalsSummary>,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

/// An open-loop run's arrivals: the process the scenario resolved, the ceiling, what came of the
/// arrivals, and the offered and admitted rates over the arrival window (profiling up to the
/// duration).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ArrivalsSummary {
    /// Sessions per second.
    pub rate_per_s: f64,
    /// `poisson`, `constant` or `gamma`.
    pub pattern: String,
    /// The gamma process's shape, when given.
    pub smoothness: Option<f64>,
    /// The coefficient of variation of the inter-arrival times the pattern implies.
    pub expected_cv: f64,
    /// The most sessions in flight at once (`--concurrency`).
    pub ceiling: u32,
    /// Offered, admitted, rejected over the ceiling, skipped behind schedule.
    #[serde(flatten)]
    pub counts: ArrivalCounts,
    /// Offered arrivals per second of the arrival window (`None` for an empty window).
    pub offered_rate_per_s: Option<f64>,
    /// Admitted arrivals per second of the arrival window.
    pub admitted_rate_per_s: Option<f64>,
}

/// The server-metrics profiling window's edges, as `server_metrics_export.json` found them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ServerMetricsWindow {
    /// `boundary_scrapes` when every endpoint's window ran from its profiling_start boundary
    /// scrape to its profiling_complete one, else `not_all_boundary_scrapes`.
    pub edges: String,
    /// Each boundary scrape that failed twice: `URL boundary: why`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing_boundary_scrapes: Vec<String>,
    /// The edges that are periodic scrapes, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The scenario component a run loaded, as its summary names it: the manifest's [`ScenarioId`], every
/// field of which an older summary may lack (an absent one stays absent when written back).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ScenarioRef {
    /// The component's name.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// Its version.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub version: String,
    /// The sha256 of its bytes, hex.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub sha256: String,
    /// Where it was loaded from (a path, or `builtin:<name>`).
    #[serde(default, skip_serializing_if = "is_empty_path")]
    pub source: PathBuf,
    /// Fields this version does not know.
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

fn is_empty_path(path: &Path) -> bool {
    path.as_os_str().is_empty()
}

impl From<ScenarioId> for ScenarioRef {
    fn from(scenario: ScenarioId) -> ScenarioRef {
        ScenarioRef {
            name: scenario.name,
            version: scenario.version,
            sha256: scenario.sha256,
            source: scenario.source,
            extra: serde_json::Map::default(),
        }
    }
}

/// A summary that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum RunSummaryError {
    /// The file could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The summary's path.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// The file is not a run summary (the error names the field).
    #[error("{} is not a run summary: {source}", path.display())]
    Parse {
        /// The summary's path.
        path: PathBuf,
        /// What is wrong, and where.
        source: serde_path_to_error::Error<serde_json::Error>,
    },
}

impl RunSummary {
    /// Reads the text of a summary; `path` names it in errors (with the field that is wrong).
    pub fn parse(text: &str, path: &Path) -> Result<RunSummary, RunSummaryError> {
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|source| RunSummaryError::Parse {
            path: path.to_owned(),
            source,
        })
    }

    /// Reads `dir/run_summary.json`.
    pub fn read_dir(dir: &Path) -> Result<RunSummary, RunSummaryError> {
        let path = dir.join(RUN_SUMMARY);
        let text = std::fs::read_to_string(&path).map_err(|source| RunSummaryError::Read {
            path: path.clone(),
            source,
        })?;
        RunSummary::parse(&text, &path)
    }

    /// The summary as the file holds it (keys in order, as every JSON document of a run).
    pub fn to_json_pretty(&self) -> String {
        let doc = serde_json::to_value(self).expect("a run summary always serializes");
        serde_json::to_string_pretty(&doc).expect("a JSON value always serializes")
    }

    /// The dataset's alias, when the run named one.
    pub fn dataset_alias(&self) -> Option<&str> {
        self.dataset.as_ref()?.alias.as_deref()
    }

    /// The dataset's source path as written, when known.
    pub fn dataset_source(&self) -> Option<&str> {
        let s = self.dataset.as_ref()?.source.to_str()?;
        (!s.is_empty()).then_some(s)
    }

    /// Why the run stopped; an older summary without one completed.
    pub fn stop_or_completed(&self) -> &str {
        self.stop.as_deref().unwrap_or("completed")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OLD: &str = r#"{"run_id": "fixture", "stop": "duration",
        "scenario": {"name": "agentx-mvp", "version": "0.1.0"},
        "dataset": {"source": "t.jsonl", "alias": null, "cache_key": "x", "traces": 2},
        "seed": 42, "concurrency": 2, "model": "m", "submission_valid": true,
        "submission_invalid_reasons": [], "summary": {"requests_ok": 5, "context_overflows": 1},
        "future_field": [1]}"#;

    #[test]
    fn an_older_summary_reads_with_defaults_and_keeps_what_it_does_not_type() {
        let s = RunSummary::parse(OLD, Path::new("s.json")).unwrap();
        assert_eq!(s.seed, Some(42));
        assert_eq!(s.summary.requests_ok, 5);
        assert_eq!(s.summary.context_overflows, 1);
        assert_eq!(s.summary.requests_failed, 0);
        assert_eq!(s.message, None);
        assert_eq!(s.dataset_source(), Some("t.jsonl"));
        assert_eq!(s.dataset_alias(), None);
        let back: Value = serde_json::from_str(&s.to_json_pretty()).unwrap();
        assert_eq!(back["future_field"][0], 1);
        assert!(back.get("shards").is_none());
        assert!(back["scenario"].get("source").is_none());
        let again = RunSummary::parse(&s.to_json_pretty(), Path::new("s.json")).unwrap();
        assert_eq!(again, s);
    }

    #[test]
    fn a_wrong_field_is_named_with_its_path() {
        let bad = OLD.replace("\"requests_ok\": 5", "\"requests_ok\": \"five\"");
        let e = RunSummary::parse(&bad, Path::new("s.json"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("s.json") && e.contains("summary.requests_ok"),
            "{e}"
        );
    }
}
