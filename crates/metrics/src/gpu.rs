//! The one GPU table: the GPU telemetry exporters the host reads by their Prometheus metric names,
//! each name's quantity and unit, the scale to the report's units (J, W, %, MiB, MHz), the label
//! keys that say which GPU a series is, and the clock throttle reasons of NVML's bitmask. The GPU
//! twin of [`super::engines`]; [`super::energy`] reads a scrape log through it.
//!
//! Exporters:
//! - NVIDIA's dcgm-exporter (default port 9400): the names of its default collector list
//!   (NVIDIA/dcgm-exporter `etc/default-counters.csv`): `DCGM_FI_DEV_POWER_USAGE` ("Power draw (in
//!   W)"), `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION` (a counter, "Total energy consumption since boot
//!   (in mJ)"), `DCGM_FI_DEV_GPU_UTIL` (%), `DCGM_FI_DEV_FB_USED` (MiB), `DCGM_FI_DEV_SM_CLOCK`
//!   (MHz), and `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` (field 112, named
//!   `DCGM_FI_DEV_CLOCK_THROTTLE_REASONS` before DCGM 3.3; not in the default list, the operator
//!   adds it). Labels: `gpu`, `UUID`, `pci_bus_id`, `device`, `modelName`, `Hostname`.
//! - AMD's Device Metrics Exporter (default `http://localhost:5000/metrics`, names from
//!   ROCm/device-metrics-exporter `docs/configuration/metricslist.md`): package power
//!   (`gpu_package_power` on MI3xx, `gpu_average_package_power` on MI2xx, else `gpu_power_usage`,
//!   W), `gpu_energy_consumed` (accumulated µJ, served as a gauge), `gpu_gfx_activity` (%),
//!   `gpu_used_vram` (MB, which aiperf converts to GB by 1/1024, i.e. as MiB; read as MiB here),
//!   `gpu_clock{clock_type="system"}` (MHz; older releases write `GPU_CLOCK_TYPE_SYSTEM`; the
//!   lowest `clock_index` of the type is the one read). Labels: `gpu_id`, `serial_number`,
//!   `card_model`, `hostname`. Its throttle analogue (`gpu_violation_*` residencies) is not read:
//!   there is no bitmask to share out.
//!
//! An energy name is an accumulator by its name, not by its `# TYPE` line (AMD serves its
//! accumulator as a gauge): [`is_accumulator`].
//!
//! A new exporter: its rows in [`GPU_METRICS`] (in the order a quantity's names are tried) and,
//! when it labels GPUs with other keys, those keys in [`UUID_KEYS`], [`HOST_KEYS`],
//! [`INDEX_KEYS`] or [`MODEL_KEYS`].

use crate::scrape_log::Labels;

/// Who makes the exporter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Vendor {
    /// NVIDIA's dcgm-exporter.
    Nvidia,
    /// AMD's Device Metrics Exporter.
    Amd,
}

impl Vendor {
    /// The lower-case name aiperf's `platform` field uses (`nvidia`, `amd`).
    pub fn name(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
        }
    }
}

/// What a GPU metric measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Quantity {
    /// Board power now (W).
    Power,
    /// Energy used since boot (J after scaling): an accumulator.
    Energy,
    /// Busy share of the last sample period (%).
    Utilization,
    /// Frame-buffer memory in use (MiB after scaling).
    MemoryUsed,
    /// Streaming-multiprocessor (graphics) clock (MHz).
    SmClock,
    /// Why the clocks are held down: NVML's bitmask ([`THROTTLE_REASONS`]).
    Throttle,
}

/// The unit an exporter writes a metric in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Watts.
    Watts,
    /// Millijoules (DCGM's energy counter).
    Millijoules,
    /// Microjoules (AMD's energy accumulator).
    Microjoules,
    /// Percent.
    Percent,
    /// Mebibytes.
    Mebibytes,
    /// AMD's "MB", which aiperf reads as 1/1024 GB: mebibytes.
    Megabytes,
    /// Megahertz.
    Megahertz,
    /// A bitmask (no scale).
    Bitmask,
}

impl Unit {
    /// Its symbol, as a report writes it.
    pub fn symbol(self) -> &'static str {
        match self {
            Unit::Watts => "W",
            Unit::Millijoules => "mJ",
            Unit::Microjoules => "uJ",
            Unit::Percent => "%",
            Unit::Mebibytes => "MiB",
            Unit::Megabytes => "MB",
            Unit::Megahertz => "MHz",
            Unit::Bitmask => "bitmask",
        }
    }

    /// The factor to the report's unit of the quantity: J for energy, W, %, MiB, MHz.
    pub fn scale(self) -> f64 {
        match self {
            Unit::Millijoules => 1e-3,
            Unit::Microjoules => 1e-6,
            Unit::Watts
            | Unit::Percent
            | Unit::Mebibytes
            | Unit::Megabytes
            | Unit::Megahertz
            | Unit::Bitmask => 1.0,
        }
    }
}

/// One GPU metric an exporter serves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuMetric {
    /// The family name on the page (as a Prometheus parser names it).
    pub name: &'static str,
    /// The exporter that serves it.
    pub vendor: Vendor,
    /// What it measures.
    pub quantity: Quantity,
    /// The unit it is written in.
    pub unit: Unit,
    /// Only the series whose label `.0` has one of the values `.1` measure the quantity (AMD's
    /// `gpu_clock` carries every clock, told apart by `clock_type`).
    pub only: Option<(&'static str, &'static [&'static str])>,
    /// The `telemetry_data` field aiperf's GPU-telemetry export names it by, when it has one.
    pub aiperf_field: Option<&'static str>,
}

impl GpuMetric {
    /// Whether the series with `labels` measures the quantity (see [`GpuMetric::only`]).
    pub fn accepts(&self, labels: &Labels) -> bool {
        match self.only {
            None => true,
            Some((key, values)) => label(labels, &[key]).is_some_and(|v| values.contains(&v)),
        }
    }

    /// A value as served, in the report's unit of the quantity ([`Unit::scale`]).
    pub fn to_report_unit(&self, value: f64) -> f64 {
        value * self.unit.scale()
    }
}

const fn row(
    name: &'static str,
    vendor: Vendor,
    quantity: Quantity,
    unit: Unit,
    aiperf_field: Option<&'static str>,
) -> GpuMetric {
    GpuMetric {
        name,
        vendor,
        quantity,
        unit,
        only: None,
        aiperf_field,
    }
}

/// Every GPU metric the host reads, a quantity's names in the order they are tried for one GPU
/// (AMD's package power before its power usage, as aiperf prefers them).
pub const GPU_METRICS: [GpuMetric; 13] = [
    row(
        "DCGM_FI_DEV_POWER_USAGE",
        Vendor::Nvidia,
        Quantity::Power,
        Unit::Watts,
        Some("nvidia_power_usage"),
    ),
    row(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        Vendor::Nvidia,
        Quantity::Energy,
        Unit::Millijoules,
        Some("nvidia_energy_consumption"),
    ),
    row(
        "DCGM_FI_DEV_GPU_UTIL",
        Vendor::Nvidia,
        Quantity::Utilization,
        Unit::Percent,
        Some("nvidia_gpu_utilization"),
    ),
    row(
        "DCGM_FI_DEV_FB_USED",
        Vendor::Nvidia,
        Quantity::MemoryUsed,
        Unit::Mebibytes,
        Some("nvidia_memory_used"),
    ),
    row(
        "DCGM_FI_DEV_SM_CLOCK",
        Vendor::Nvidia,
        Quantity::SmClock,
        Unit::Megahertz,
        None,
    ),
    row(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        Vendor::Nvidia,
        Quantity::Throttle,
        Unit::Bitmask,
        None,
    ),
    row(
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",
        Vendor::Nvidia,
        Quantity::Throttle,
        Unit::Bitmask,
        None,
    ),
    row(
        "gpu_package_power",
        Vendor::Amd,
        Quantity::Power,
        Unit::Watts,
        Some("amd_power"),
    ),
    row(
        "gpu_average_package_power",
        Vendor::Amd,
        Quantity::Power,
        Unit::Watts,
        Some("amd_power"),
    ),
    row(
        "gpu_power_usage",
        Vendor::Amd,
        Quantity::Power,
        Unit::Watts,
        Some("amd_power"),
    ),
    row(
        "gpu_energy_consumed",
        Vendor::Amd,
        Quantity::Energy,
        Unit::Microjoules,
        Some("amd_energy_consumption"),
    ),
    row(
        "gpu_gfx_activity",
        Vendor::Amd,
        Quantity::Utilization,
        Unit::Percent,
        Some("amd_gfx_activity"),
    ),
    row(
        "gpu_used_vram",
        Vendor::Amd,
        Quantity::MemoryUsed,
        Unit::Megabytes,
        Some("amd_memory_used"),
    ),
];

/// AMD's system clock: `gpu_clock` series of the system clock type (both spellings).
pub const AMD_SYSTEM_CLOCK: GpuMetric = GpuMetric {
    name: "gpu_clock",
    vendor: Vendor::Amd,
    quantity: Quantity::SmClock,
    unit: Unit::Megahertz,
    only: Some(("clock_type", &["system", "GPU_CLOCK_TYPE_SYSTEM"])),
    aiperf_field: None,
};

/// The label AMD numbers the clocks of one type by; the lowest is read.
pub const CLOCK_INDEX_KEY: &str = "clock_index";

/// Every metric of the table, [`AMD_SYSTEM_CLOCK`] included, in the order they are tried.
pub fn all() -> impl Iterator<Item = &'static GpuMetric> {
    GPU_METRICS.iter().chain(std::iter::once(&AMD_SYSTEM_CLOCK))
}

/// The row of the metric named `name`.
pub fn metric(name: &str) -> Option<&'static GpuMetric> {
    all().find(|m| m.name == name)
}

/// The place of `metric` among the names of its quantity (0 is tried first).
pub fn rank(metric: &GpuMetric) -> usize {
    all()
        .filter(|m| m.quantity == metric.quantity)
        .position(|m| m.name == metric.name)
        .unwrap_or(usize::MAX)
}

/// Whether `name` is an energy accumulator (read as a counter whatever its `# TYPE` line says).
pub fn is_accumulator(name: &str) -> bool {
    metric(name).is_some_and(|m| m.quantity == Quantity::Energy)
}

/// Label keys whose value is a GPU's own identity (NVIDIA's UUID, AMD's serial number).
pub const UUID_KEYS: [&str; 2] = ["UUID", "serial_number"];
/// Label keys naming the host a GPU is in.
pub const HOST_KEYS: [&str; 2] = ["Hostname", "hostname"];
/// Label keys numbering a GPU on its host.
pub const INDEX_KEYS: [&str; 2] = ["gpu", "gpu_id"];
/// Label keys naming a GPU's model.
pub const MODEL_KEYS: [&str; 2] = ["modelName", "card_model"];

/// The value of the first of `keys` that `labels` has.
fn label<'a>(labels: &'a Labels, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|key| {
        labels
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    })
}

/// Which GPU a series is, from its labels.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuIdentity {
    /// What tells it from every other GPU: its UUID (or serial number), else `host:index`, else
    /// its index.
    pub key: String,
    /// Its UUID or serial number.
    pub uuid: Option<String>,
    /// The host it is in.
    pub hostname: Option<String>,
    /// Its number on the host.
    pub index: Option<String>,
    /// Its model.
    pub model: Option<String>,
}

impl GpuIdentity {
    /// How a note names it: `gpu 0 (GPU-…)`, `gpu 0`, or its key.
    pub fn display(&self) -> String {
        match (&self.index, &self.uuid) {
            (Some(index), Some(uuid)) => format!("gpu {index} ({uuid})"),
            (Some(index), None) => format!("gpu {index}"),
            (None, _) => format!("gpu {}", self.key),
        }
    }
}

/// The GPU a series with `labels` is about; `None` when they name none (no UUID, serial number or
/// GPU number).
pub fn identity(labels: &Labels) -> Option<GpuIdentity> {
    let owned = |keys: &[&str]| label(labels, keys).map(str::to_string);
    let uuid = owned(&UUID_KEYS).filter(|u| !u.is_empty());
    let hostname = owned(&HOST_KEYS);
    let index = owned(&INDEX_KEYS);
    let key = match (&uuid, &hostname, &index) {
        (Some(uuid), _, _) => uuid.clone(),
        (None, Some(host), Some(index)) => format!("{host}:{index}"),
        (None, None, Some(index)) => index.clone(),
        (None, _, None) => return None,
    };
    Some(GpuIdentity {
        key,
        uuid,
        hostname,
        index,
        model: owned(&MODEL_KEYS),
    })
}

/// NVML's clock throttle (since DCGM 3.3 "clocks event") reasons, by bit
/// (<https://docs.nvidia.com/deploy/nvml-api/group__nvmlClocksThrottleReasons.html>).
pub const THROTTLE_REASONS: [(u64, &str); 9] = [
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The name of a bit [`THROTTLE_REASONS`] does not know.
pub const OTHER_THROTTLE_REASON: &str = "other";

/// The reasons set in `mask`, in bit order; bits the table does not know read
/// [`OTHER_THROTTLE_REASON`] (once). A value that is not a whole non-negative number sets none.
pub fn throttle_reasons(mask: f64) -> Vec<&'static str> {
    if !(mask.is_finite() && mask >= 0.0 && mask.fract() == 0.0 && mask < 2f64.powi(63)) {
        return Vec::new();
    }
    let bits = mask as u64;
    let mut reasons: Vec<&'static str> = THROTTLE_REASONS
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| *name)
        .collect();
    let known = THROTTLE_REASONS.iter().fold(0, |all, (bit, _)| all | bit);
    if bits & !known != 0 {
        reasons.push(OTHER_THROTTLE_REASON);
    }
    reasons
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        let mut labels: Labels = pairs
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        labels.sort();
        labels
    }

    #[test]
    fn energy_names_are_accumulators_whatever_their_type_and_scale_to_joules() {
        assert!(is_accumulator("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"));
        assert!(is_accumulator("gpu_energy_consumed"));
        assert!(!is_accumulator("DCGM_FI_DEV_POWER_USAGE"));
        let dcgm = metric("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION").unwrap();
        assert_eq!(dcgm.to_report_unit(2500.0), 2.5);
        let amd = metric("gpu_energy_consumed").unwrap();
        assert_eq!(amd.to_report_unit(2_500_000.0), 2.5);
        assert_eq!(metric("gpu_used_vram").unwrap().unit.symbol(), "MB");
    }

    #[test]
    fn amd_package_power_is_tried_before_power_usage() {
        let power = |name| rank(metric(name).unwrap());
        assert!(power("gpu_package_power") < power("gpu_average_package_power"));
        assert!(power("gpu_average_package_power") < power("gpu_power_usage"));
        assert_eq!(power("DCGM_FI_DEV_POWER_USAGE"), 0);
    }

    #[test]
    fn only_the_system_clock_is_the_sm_clock() {
        let clock = metric("gpu_clock").unwrap();
        assert_eq!(clock.quantity, Quantity::SmClock);
        for kind in ["system", "GPU_CLOCK_TYPE_SYSTEM"] {
            assert!(clock.accepts(&labels(&[("clock_type", kind), ("gpu_id", "0")])));
        }
        assert!(!clock.accepts(&labels(&[("clock_type", "memory")])));
        assert!(!clock.accepts(&labels(&[("gpu_id", "0")])));
    }

    #[test]
    fn a_gpu_is_its_uuid_else_its_host_and_number() {
        let nvidia = identity(&labels(&[
            ("gpu", "3"),
            ("UUID", "GPU-abc"),
            ("Hostname", "node1"),
            ("modelName", "NVIDIA H200"),
        ]))
        .unwrap();
        assert_eq!(nvidia.key, "GPU-abc");
        assert_eq!(nvidia.model.as_deref(), Some("NVIDIA H200"));
        assert_eq!(nvidia.display(), "gpu 3 (GPU-abc)");
        let amd = identity(&labels(&[("gpu_id", "1"), ("hostname", "node2")])).unwrap();
        assert_eq!(amd.key, "node2:1");
        assert_eq!(amd.display(), "gpu 1");
        assert_eq!(
            identity(&labels(&[("serial_number", "S123"), ("gpu_id", "1")]))
                .unwrap()
                .key,
            "S123"
        );
        assert_eq!(identity(&labels(&[("gpu", "0")])).unwrap().key, "0");
        assert_eq!(identity(&labels(&[("Hostname", "node1")])), None);
    }

    #[test]
    fn throttle_bits_name_their_reasons() {
        assert_eq!(throttle_reasons(0.0), Vec::<&str>::new());
        assert_eq!(throttle_reasons(1.0), vec!["gpu_idle"]);
        assert_eq!(
            throttle_reasons(f64::from(0x4 | 0x40 | 0x1000)),
            vec!["sw_power_cap", "hw_thermal_slowdown", "other"]
        );
        assert_eq!(throttle_reasons(f64::NAN), Vec::<&str>::new());
        assert_eq!(throttle_reasons(-1.0), Vec::<&str>::new());
    }
}
