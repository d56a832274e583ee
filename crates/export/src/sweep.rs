//! A concurrency sweep's summary: `sweep.json` (its inputs and one row per point) and `sweep.csv`
//! (the same rows), read back for `--resume` and `sweep --compare`. The rows are taken from each
//! point's run outcome and nested report; this module only shapes, writes and reads them.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::manifest::ServerInfo;

/// `sweep.json` in the sweep's directory.
pub const SWEEP_JSON: &str = "sweep.json";
/// `sweep.csv` in the sweep's directory.
pub(crate) const SWEEP_CSV: &str = "sweep.csv";
/// The schema tag of `sweep.json`.
pub const SCHEMA: &str = "agentx-sweep/1";

/// What makes two sweeps (or a sweep and its resume) the same experiment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepInputs {
    /// The `sweep` command line without `--resume` (and without the program name).
    pub argv: Vec<String>,
    /// The concurrency points asked for, in the order given.
    pub concurrency: Vec<u32>,
    /// The random seed every point shares.
    pub seed: u64,
    /// sha256 (hex) of the scenario component.
    pub scenario_sha256: String,
    /// The dataset's cache key (digest of the corpus and selection).
    pub dataset_key: String,
    /// GPUs behind the server, for the per-GPU throughput (`--gpus`).
    pub gpus: Option<u32>,
    /// `<result-filename>_conc<N>.json`: InferenceX's name for each point's report.
    pub result_filename: String,
}

/// p50/p90/p99 of one latency, milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Tail {
    /// The median; `None` when the point has no such latency.
    pub p50: Option<f64>,
    /// The 90th percentile; `None` when the point has none.
    pub p90: Option<f64>,
    /// The 99th percentile; `None` when the point has none.
    pub p99: Option<f64>,
}

/// How a point ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PointStatus {
    /// Ran to its end (valid or not: see `valid`).
    Completed,
    /// Finished in an earlier invocation; kept by `--resume`.
    Resumed,
    /// Did not complete: `error` says why.
    Failed,
}

/// One concurrency point.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// The point's concurrency (lanes).
    pub concurrency: u32,
    /// The point's run directory, relative to the sweep's (`conc_<N>`).
    pub dir: String,
    /// How the point ended.
    pub status: PointStatus,
    /// Why the point failed; `None` unless it did.
    pub error: Option<String>,
    /// The run's `benchmark_id`; `None` when the run did not start.
    pub run_id: Option<String>,
    /// Profiling requests that succeeded.
    pub requests_ok: u64,
    /// Profiling requests that failed.
    pub requests_failed: u64,
    /// Requests the server refused for exceeding its context window.
    pub context_overflows: u64,
    /// Input plus output tokens per second over the profiling phase.
    pub total_token_throughput: Option<f64>,
    /// Output tokens per second over the profiling phase.
    pub output_token_throughput: Option<f64>,
    /// The throughputs divided by `gpus`.
    pub total_token_throughput_per_gpu: Option<f64>,
    /// The output throughput divided by `gpus`.
    pub output_token_throughput_per_gpu: Option<f64>,
    /// Time to first token, milliseconds.
    pub ttft_ms: Tail,
    /// Inter-token latency, milliseconds.
    pub itl_ms: Tail,
    /// Request latency end to end, milliseconds.
    pub e2e_ms: Tail,
    /// Tokens per second a user sees: `1000 / ITL p50 (ms)`.
    pub interactivity: Option<f64>,
    /// The server's prefix-cache hit rate (0-1) from its metrics, when it exports one.
    pub server_cache_hit_rate: Option<f64>,
    /// The run met the submission rules.
    pub valid: bool,
    /// Why it did not; empty when valid.
    pub invalid_reasons: Vec<String>,
    /// The point's InferenceX report, relative to the sweep's directory.
    pub report: Option<String>,
    /// Whole jobs (traces replayed inside the window, every request ok); `None` for files written
    /// before jobs were counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_ok: Option<u64>,
    /// Partial jobs: begun before the window or cut by its end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_partial: Option<u64>,
    /// Whole jobs per hour of the profiling window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_per_hour: Option<f64>,
    /// `jobs_per_hour` over `--gpus`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_per_hour_per_gpu: Option<f64>,
    /// 3,600 s over the mean job wall time: jobs per hour a user sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_per_hour_per_user: Option<f64>,
    /// The server started for the point (`--server-cmd`): command, port, readiness and exit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<ServerInfo>,
}

impl Point {
    /// A point that did not complete.
    pub fn failed(concurrency: u32, dir: String, error: String) -> Point {
        Point {
            concurrency,
            dir,
            status: PointStatus::Failed,
            error: Some(error),
            run_id: None,
            requests_ok: 0,
            requests_failed: 0,
            context_overflows: 0,
            total_token_throughput: None,
            output_token_throughput: None,
            total_token_throughput_per_gpu: None,
            output_token_throughput_per_gpu: None,
            ttft_ms: Tail::default(),
            itl_ms: Tail::default(),
            e2e_ms: Tail::default(),
            interactivity: None,
            server_cache_hit_rate: None,
            valid: false,
            invalid_reasons: Vec::new(),
            report: None,
            jobs_ok: None,
            jobs_partial: None,
            jobs_per_hour: None,
            jobs_per_hour_per_gpu: None,
            jobs_per_hour_per_user: None,
            server: None,
        }
    }

    /// Completed now or in an earlier invocation.
    pub fn done(&self) -> bool {
        self.status != PointStatus::Failed
    }
}

/// `sweep.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sweep {
    /// The schema tag, [`SCHEMA`].
    pub schema: String,
    /// What the sweep was run with.
    pub inputs: SweepInputs,
    /// In increasing concurrency.
    pub points: Vec<Point>,
    /// `--slo`: each point's verdict, and the `--find-max` answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slo: Option<SloReport>,
}

/// What `--slo` made of the sweep's points.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloReport {
    /// The objectives as given.
    pub slo: String,
    /// Each point's verdict and figures, in increasing concurrency.
    pub points: Vec<SloPoint>,
    /// `--find-max`: the search's answer (absent until it is done).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub find_max: Option<FindMaxAnswer>,
}

/// One point's verdict under `--slo`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SloPoint {
    /// The point's concurrency (lanes).
    pub concurrency: u32,
    /// Completed and met every objective.
    pub meets: bool,
    /// Each objective's figure (`null`: the run has none).
    pub figures: std::collections::BTreeMap<String, Option<f64>>,
    /// The run's goodput, when it measured one (`--goodput`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub goodput: Option<f64>,
    /// The objectives the point missed (a point that did not complete misses none by name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missed: Vec<String>,
}

/// The `--find-max` answer and how it was reached.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindMaxAnswer {
    /// The highest concurrency that met the SLO (`null`: not even the ladder's first point).
    pub max_concurrency: Option<u32>,
    /// Whether a failing point bounds the answer (false: every point of the ladder met the SLO,
    /// so the maximum may lie above it).
    pub bracketed: bool,
    /// The lowest failing concurrency above the answer, when bracketed.
    pub first_failing: Option<u32>,
    /// How far apart the answer and the first failing point may be when the search stops (lanes).
    pub resolution: u32,
    /// The points in the order the search ran them.
    pub order: Vec<u32>,
    /// Of the points that met the SLO, the one with the most goodput (runs with `--goodput`): with
    /// `good_request_fraction:F` among the objectives, aiperf's `max-goodput-under-slo` answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_goodput: Option<GoodputPeak>,
    /// The objectives the first failing point missed: what bound the answer.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bound_by: Vec<String>,
    /// Whole jobs per hour at the answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jobs_per_hour: Option<f64>,
    /// The answer's concurrent agents per GPU (`--gpus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents_per_gpu: Option<f64>,
}

impl FindMaxAnswer {
    /// The objectives that bound the answer, as a list for a line (`-` for none).
    pub fn bound_by_text(&self) -> String {
        if self.bound_by.is_empty() {
            "-".to_string()
        } else {
            self.bound_by.join(", ")
        }
    }
}

/// The passing point with the most goodput.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoodputPeak {
    /// The point's concurrency (lanes).
    pub concurrency: u32,
    /// Good requests per second.
    pub goodput: f64,
}

impl SloReport {
    /// The passing point with the most goodput (the lower concurrency on a tie), if any measured it.
    pub fn max_goodput(&self) -> Option<GoodputPeak> {
        self.points
            .iter()
            .filter(|p| p.meets)
            .filter_map(|p| p.goodput.map(|g| (p.concurrency, g)))
            .fold(
                None::<GoodputPeak>,
                |best, (concurrency, goodput)| match best {
                    Some(b) if b.goodput >= goodput => Some(b),
                    _ => Some(GoodputPeak {
                        concurrency,
                        goodput,
                    }),
                },
            )
    }
}

/// Errors of reading or writing a sweep's summary.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// `sweep.json` exists but could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `sweep.json` is not a sweep summary of this schema.
    #[error("{path} is not a sweep summary ({SCHEMA}): {message}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// A summary file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

impl Sweep {
    /// Reads `dir/sweep.json`; `Ok(None)` when there is none.
    pub fn read(dir: &Path) -> Result<Option<Sweep>, SweepError> {
        let path = dir.join(SWEEP_JSON);
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(SweepError::Read { path, source }),
        };
        let sweep: Sweep = serde_json::from_str(&text).map_err(|e| SweepError::Parse {
            path: path.clone(),
            message: e.to_string(),
        })?;
        if sweep.schema != SCHEMA {
            return Err(SweepError::Parse {
                path,
                message: format!("schema {:?}", sweep.schema),
            });
        }
        Ok(Some(sweep))
    }

    /// Writes `sweep.json` and `sweep.csv` into `dir` (each replaced atomically).
    pub fn write(&self, dir: &agentx_record::fsio::Root) -> Result<Vec<PathBuf>, SweepError> {
        let mut out = Vec::new();
        for (name, data) in [
            (
                SWEEP_JSON,
                serde_json::to_string_pretty(self).unwrap_or_default() + "\n",
            ),
            (SWEEP_CSV, self.csv()),
        ] {
            out.push(dir.write_atomic(name, data.as_bytes()).map_err(|source| {
                SweepError::Write {
                    path: dir.join(name),
                    source,
                }
            })?);
        }
        Ok(out)
    }

    /// One row per point.
    pub(crate) fn csv(&self) -> String {
        let mut out = String::from(
            "concurrency,status,requests_ok,requests_failed,context_overflows,\
             total_token_throughput,output_token_throughput,total_token_throughput_per_gpu,\
             output_token_throughput_per_gpu,ttft_p50_ms,ttft_p90_ms,ttft_p99_ms,itl_p50_ms,\
             itl_p90_ms,itl_p99_ms,e2e_p50_ms,e2e_p90_ms,e2e_p99_ms,interactivity,\
             server_cache_hit_rate,valid,invalid_reasons,error,jobs_ok,jobs_partial,jobs_per_hour,\
             jobs_per_hour_per_gpu,jobs_per_hour_per_user\n",
        );
        let fmt_num = |x: Option<f64>| x.map(|v| format!("{v:.6}")).unwrap_or_default();
        let quote = |s: &str| {
            if s.contains([',', '"', '\n']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.to_string()
            }
        };
        for p in &self.points {
            let status = match p.status {
                PointStatus::Completed => "completed",
                PointStatus::Resumed => "resumed",
                PointStatus::Failed => "failed",
            };
            let row = [
                p.concurrency.to_string(),
                status.to_string(),
                p.requests_ok.to_string(),
                p.requests_failed.to_string(),
                p.context_overflows.to_string(),
                fmt_num(p.total_token_throughput),
                fmt_num(p.output_token_throughput),
                fmt_num(p.total_token_throughput_per_gpu),
                fmt_num(p.output_token_throughput_per_gpu),
                fmt_num(p.ttft_ms.p50),
                fmt_num(p.ttft_ms.p90),
                fmt_num(p.ttft_ms.p99),
                fmt_num(p.itl_ms.p50),
                fmt_num(p.itl_ms.p90),
                fmt_num(p.itl_ms.p99),
                fmt_num(p.e2e_ms.p50),
                fmt_num(p.e2e_ms.p90),
                fmt_num(p.e2e_ms.p99),
                fmt_num(p.interactivity),
                fmt_num(p.server_cache_hit_rate),
                p.valid.to_string(),
                quote(&p.invalid_reasons.join(";")),
                quote(p.error.as_deref().unwrap_or("")),
                p.jobs_ok.map(|n| n.to_string()).unwrap_or_default(),
                p.jobs_partial.map(|n| n.to_string()).unwrap_or_default(),
                fmt_num(p.jobs_per_hour),
                fmt_num(p.jobs_per_hour_per_gpu),
                fmt_num(p.jobs_per_hour_per_user),
            ];
            out.push_str(&row.join(","));
            out.push('\n');
        }
        out
    }
}

/// Indices of the points on the Pareto frontier of (interactivity, throughput per GPU, or total
/// throughput without GPUs): no other point is at least as good on both and better on one. Sorted by
/// interactivity.
pub(crate) fn pareto(points: &[Point]) -> Vec<usize> {
    pareto_by(points, |p| {
        let y = p
            .total_token_throughput_per_gpu
            .or(p.total_token_throughput)?;
        Some((p.interactivity?, y))
    })
}

/// Indices of the points on the Pareto frontier of jobs per hour per user against jobs per hour
/// per GPU (or in all without GPUs), sorted by jobs per hour per user.
pub(crate) fn jobs_pareto(points: &[Point]) -> Vec<usize> {
    pareto_by(points, |p| {
        Some((
            p.jobs_per_hour_per_user?,
            p.jobs_per_hour_per_gpu.or(p.jobs_per_hour)?,
        ))
    })
}

/// Indices of the points no other point dominates on `coords` (both higher is better), sorted by
/// the first coordinate.
fn pareto_by(points: &[Point], coords: impl Fn(&Point) -> Option<(f64, f64)>) -> Vec<usize> {
    let mut front: Vec<usize> = (0..points.len())
        .filter(|&i| {
            let Some((x, y)) = coords(&points[i]) else {
                return false;
            };
            !points.iter().enumerate().any(|(j, q)| {
                j != i && coords(q).is_some_and(|(qx, qy)| qx >= x && qy >= y && (qx > x || qy > y))
            })
        })
        .collect();
    front.sort_by(|&a, &b| {
        let (x_a, _) = coords(&points[a]).unwrap_or_default();
        let (x_b, _) = coords(&points[b]).unwrap_or_default();
        x_a.total_cmp(&x_b)
    });
    front
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(c: u32, intvty: f64, tput: f64) -> Point {
        let mut p = Point::failed(c, format!("conc_{c}"), String::new());
        p.status = PointStatus::Completed;
        p.error = None;
        p.interactivity = Some(intvty);
        p.total_token_throughput = Some(tput);
        p
    }

    #[test]
    fn pareto_keeps_the_undominated_points_in_interactivity_order() {
        // conc 1: fast for a user, little throughput; 64: the opposite; 16 is dominated by 4.
        let pts = vec![
            pt(1, 100.0, 10.0),
            pt(4, 80.0, 50.0),
            pt(16, 70.0, 40.0),
            pt(64, 20.0, 200.0),
        ];
        assert_eq!(pareto(&pts), vec![3, 1, 0]);
    }

    #[test]
    fn csv_and_json_round_trip() {
        let s = Sweep {
            schema: SCHEMA.into(),
            inputs: SweepInputs {
                argv: vec!["sweep".into(), "--concurrency".into(), "1,4".into()],
                concurrency: vec![1, 4],
                seed: 42,
                scenario_sha256: "ab".into(),
                dataset_key: "cd".into(),
                gpus: Some(8),
                result_filename: "agentx".into(),
            },
            points: vec![
                pt(1, 100.0, 10.0),
                Point::failed(4, "conc_4".into(), "refused, \"x\"".into()),
            ],
            slo: None,
        };
        let dir = tempfile::tempdir().unwrap();
        s.write(&agentx_record::fsio::Root::open(dir.path()).unwrap())
            .unwrap();
        assert_eq!(Sweep::read(dir.path()).unwrap(), Some(s.clone()));
        let csv = std::fs::read_to_string(dir.path().join(SWEEP_CSV)).unwrap();
        let rows: Vec<&str> = csv.lines().collect();
        assert_eq!(rows.len(), 3);
        assert!(rows[1].starts_with("1,completed,0,0,0,10.000000,"));
        assert!(
            rows[2].ends_with("\"refused, \"\"x\"\"\",,,,,"),
            "{}",
            rows[2]
        );
        assert!(Sweep::read(&dir.path().join("none")).unwrap().is_none());
    }
}
