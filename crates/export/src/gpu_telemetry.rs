//! The GPU telemetry exports, in aiperf's files and names so its dashboards read them:
//! `gpu_telemetry_export.jsonl` (one line per GPU per scrape: the GPU's identity, the endpoint and
//! `telemetry_data` in aiperf's fields and units: power W, energy MJ, utilisation %, memory GB) and
//! the energy metrics of `profile_export_aiperf.json` (`nvidia_total_gpu_energy` J,
//! `nvidia_energy_per_output_token` mJ/token, ... and their `amd_` twins) from the window's
//! [`EnergyReport`]. SM clocks and throttle reasons, which aiperf does not carry, stay in
//! `run_summary.json`.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::{json, Map, Value as Json};

use agentx_metrics::energy::EnergyReport;
use agentx_metrics::gpu::{self, Quantity, Vendor};
use agentx_metrics::scrape_log::{EndpointLog, ScrapeLog};
use agentx_record::fsio::Root;

/// aiperf's per-scrape GPU telemetry file.
pub const JSONL_FILE: &str = "gpu_telemetry_export.jsonl";

/// MiB in aiperf's GB (its `nvidia_memory_used`: MiB × 1.048576e-3).
const GB_PER_MIB: f64 = 1.048_576e-3;

/// One GPU's lines of one endpoint: its identity's labels and, per scrape, its fields.
struct GpuLines {
    identity: gpu::GpuIdentity,
    labels: BTreeMap<String, String>,
    vendor: Vendor,
    fields: BTreeMap<u32, Map<String, Json>>,
}

/// `telemetry_data`'s value of `metric` for a reading in the exporter's unit.
fn aiperf_value(metric: &gpu::GpuMetric, value: f64) -> f64 {
    let reported = metric.to_report_unit(value);
    match metric.quantity {
        // J to aiperf's MJ.
        Quantity::Energy => reported * 1e-6,
        Quantity::MemoryUsed => reported * GB_PER_MIB,
        _ => reported,
    }
}

/// Every GPU of one endpoint with its fields per scrape.
fn endpoint_gpus(endpoint: &EndpointLog) -> BTreeMap<String, GpuLines> {
    let mut gpus: BTreeMap<String, GpuLines> = BTreeMap::new();
    for metric in gpu::all() {
        let Some(field) = metric.aiperf_field else {
            continue;
        };
        for (labels, track) in endpoint.scalars(metric.name) {
            if !metric.accepts(labels) {
                continue;
            }
            let Some(identity) = gpu::identity(labels) else {
                continue;
            };
            let lines = gpus
                .entry(identity.key.clone())
                .or_insert_with(|| GpuLines {
                    labels: labels.iter().cloned().collect(),
                    identity,
                    vendor: metric.vendor,
                    fields: BTreeMap::new(),
                });
            for idx in 0..endpoint.scrape_ns.len() as u32 {
                if let Some(value) = track.at(idx) {
                    let fields = lines.fields.entry(idx).or_default();
                    // The first name of a quantity wins (AMD's package power before power usage).
                    fields
                        .entry(field)
                        .or_insert_with(|| json!(aiperf_value(metric, value)));
                }
            }
        }
    }
    gpus
}

/// The lines of `gpu_telemetry_export.jsonl`: per endpoint, GPU and successful scrape, with the
/// wall-clock time of the scrape (`anchor_unix_ns` plus its offset on the run's clock).
pub fn jsonl(log: &ScrapeLog, anchor_unix_ns: u64) -> String {
    let mut out = String::new();
    for endpoint in &log.endpoints {
        let gpus = endpoint_gpus(endpoint);
        let mut lines: Vec<(u32, &GpuLines)> = gpus
            .values()
            .flat_map(|gpu| gpu.fields.keys().map(move |idx| (*idx, gpu)))
            .collect();
        lines.sort_by_key(|(idx, gpu)| (*idx, gpu.identity.key.clone()));
        for (idx, gpu) in lines {
            let label = |keys: &[&str]| keys.iter().find_map(|k| gpu.labels.get(*k)).cloned();
            let line = json!({
                "timestamp_ns": anchor_unix_ns + endpoint.scrape_ns[idx as usize],
                "telemetry_source_url": endpoint.url,
                "gpu_index": gpu.identity.index.as_deref().and_then(|i| i.parse::<u64>().ok()).unwrap_or(0),
                "gpu_uuid": gpu.identity.uuid.clone().unwrap_or_else(|| gpu.identity.key.clone()),
                "gpu_model_name": gpu.identity.model.clone().unwrap_or_default(),
                "pci_bus_id": label(&["pci_bus_id"]),
                "device": label(&["device"]),
                "hostname": gpu.identity.hostname,
                "namespace": label(&["namespace"]),
                "pod_name": label(&["pod"]),
                "platform": gpu.vendor.name(),
                "telemetry_data": gpu.fields[&idx],
            });
            out.push_str(&line.to_string());
            out.push('\n');
        }
    }
    out
}

/// aiperf's unit of a `telemetry_data` field.
fn field_unit(metric: &gpu::GpuMetric) -> &'static str {
    match metric.quantity {
        Quantity::Power => "W",
        Quantity::Energy => "MJ",
        Quantity::Utilization => "%",
        Quantity::MemoryUsed => "GB",
        Quantity::SmClock => "MHz",
        Quantity::Throttle => "",
    }
}

/// One field's statistics over the window's scrapes, as aiperf's `JsonMetricResult`: a counter's
/// increase (`avg`), else the mean, range, population deviation and percentiles of the samples.
fn field_stats(metric: &gpu::GpuMetric, mut values: Vec<f64>) -> Option<Json> {
    let (&first, &last) = (values.first()?, values.last()?);
    let unit = field_unit(metric);
    if metric.quantity == Quantity::Energy {
        return Some(json!({"unit": unit, "avg": (last - first).max(0.0), "count": values.len()}));
    }
    values.sort_unstable_by(f64::total_cmp);
    let mean = agentx_record::dist::mean(&values);
    let mut block = json!({
        "unit": unit,
        "avg": mean,
        "min": values[0],
        "max": values[values.len() - 1],
        "std": agentx_record::dist::std(&values, mean, agentx_record::dist::Deviation::Population),
        "count": values.len(),
    });
    for p in [1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0] {
        block[format!("p{p:.0}")] = json!(agentx_record::dist::percentile(&values, p));
    }
    Some(block)
}

/// `profile_export_aiperf.json`'s `telemetry_data`, as aiperf writes it: the endpoints configured
/// and read, the window's wall-clock edges, and per endpoint (`host:port`) and GPU (`gpu_<index>`)
/// each field's statistics over the scrapes inside the window `(start, end)` on the run's clock.
pub fn telemetry_data(log: &ScrapeLog, (start, end): (u64, u64), anchor_unix_ns: u64) -> Json {
    let display = |url: &str| {
        let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
        rest.strip_suffix("/metrics").unwrap_or(rest).to_string()
    };
    let wall = |ns: u64| {
        chrono::DateTime::from_timestamp_nanos((anchor_unix_ns + ns) as i64)
            .naive_utc()
            .format("%Y-%m-%dT%H:%M:%S%.6f")
            .to_string()
    };
    let mut endpoints = Map::new();
    for endpoint in &log.endpoints {
        let mut gpus = Map::new();
        for lines in endpoint_gpus(endpoint).values() {
            let mut metrics = Map::new();
            for metric in gpu::all() {
                let Some(field) = metric.aiperf_field else {
                    continue;
                };
                if metrics.contains_key(field) {
                    continue;
                }
                let values: Vec<f64> = lines
                    .fields
                    .iter()
                    .filter(|(idx, _)| {
                        let at = endpoint.scrape_ns[**idx as usize];
                        (start..=end).contains(&at)
                    })
                    .filter_map(|(_, fields)| fields.get(field)?.as_f64())
                    .collect();
                if lines.vendor == metric.vendor {
                    if let Some(block) = field_stats(metric, values) {
                        metrics.insert(field.to_string(), block);
                    }
                }
            }
            let index = lines.identity.index.clone().unwrap_or_default();
            gpus.insert(
                format!("gpu_{index}"),
                json!({
                    "gpu_index": index.parse::<u64>().unwrap_or(0),
                    "gpu_name": lines.identity.model.clone().unwrap_or_default(),
                    "gpu_uuid": lines.identity.uuid.clone().unwrap_or_else(|| lines.identity.key.clone()),
                    "platform": lines.vendor.name(),
                    "hostname": lines.identity.hostname,
                    "metrics": metrics,
                }),
            );
        }
        endpoints.insert(display(&endpoint.url), json!({ "gpus": gpus }));
    }
    let configured: Vec<String> = log.endpoints.iter().map(|e| display(&e.url)).collect();
    let successful: Vec<String> = log
        .endpoints
        .iter()
        .filter(|e| !e.scrape_ns.is_empty())
        .map(|e| display(&e.url))
        .collect();
    json!({
        "summary": {
            "endpoints_configured": configured,
            "endpoints_successful": successful,
            "start_time": wall(start),
            "end_time": wall(end),
        },
        "endpoints": endpoints,
    })
}

/// What `profile_export_aiperf.json` carries of the GPUs: the window's energy, their platform (the
/// metric names' prefix) and `telemetry_data`.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuWindow {
    /// The window's energy.
    pub energy: EnergyReport,
    /// The GPUs' platform.
    pub vendor: Vendor,
    /// aiperf's `telemetry_data` block.
    pub telemetry_data: Json,
}

impl GpuWindow {
    /// The GPU side of the window `(start, end)` on the run's clock (`anchor_unix_ns` its start).
    pub fn of(
        log: &ScrapeLog,
        window: (u64, u64),
        anchor_unix_ns: u64,
        energy: EnergyReport,
    ) -> GpuWindow {
        GpuWindow {
            energy,
            vendor: platform(log),
            telemetry_data: telemetry_data(log, window, anchor_unix_ns),
        }
    }
}

/// Writes `gpu_telemetry_export.jsonl` into the run's directory.
pub fn write_jsonl(art: &Root, log: &ScrapeLog, anchor_unix_ns: u64) -> std::io::Result<PathBuf> {
    art.write_atomic(JSONL_FILE, jsonl(log, anchor_unix_ns).as_bytes())
}

/// The vendor of the GPUs the log read (`nvidia` when it read none it knows).
pub fn platform(log: &ScrapeLog) -> Vendor {
    log.endpoints
        .iter()
        .flat_map(|endpoint| endpoint.families.keys())
        .find_map(|name| gpu::metric(name).map(|metric| metric.vendor))
        .unwrap_or(Vendor::Nvidia)
}

/// aiperf's energy metrics of the window, `(tag, unit, value)`, prefixed with the platform's name
/// (`nvidia_`, `amd_`); only those the report has.
pub fn aggregate_metrics(
    energy: &EnergyReport,
    vendor: Vendor,
) -> Vec<(String, &'static str, f64)> {
    let prefix = vendor.name();
    let per_output_mj = energy.joules_per_output_token.map(|j| j * 1e3);
    let per_total_mj = energy.joules_per_total_token.map(|j| j * 1e3);
    let output_per_joule = energy
        .joules_per_output_token
        .filter(|j| *j > 0.0)
        .map(|j| 1.0 / j);
    [
        ("total_gpu_energy", "J", energy.total_gpu_energy_j),
        ("average_gpu_power", "W", energy.avg_total_gpu_power_w),
        ("total_gpu_power", "W", energy.avg_total_gpu_power_w),
        ("energy_per_output_token", "mJ/token", per_output_mj),
        ("energy_per_total_token", "mJ/token", per_total_mj),
        (
            "energy_per_request",
            "joules/request",
            energy.joules_per_successful_query,
        ),
        ("output_tokens_per_joule", "tokens/J", output_per_joule),
    ]
    .into_iter()
    .filter_map(|(name, unit, value)| Some((format!("{prefix}_{name}"), unit, value?)))
    .filter(|(_, _, value)| value.is_finite())
    .collect()
}
