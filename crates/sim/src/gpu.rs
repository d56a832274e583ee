//! The simulated GPU behind each engine ([`GpuModel`]): a power meter whose power follows the
//! engine's running requests, and its dcgm-exporter page (`GET /dcgm/metrics`).
//!
//! Power is `idle_w + per_running_w × running`, held in integer milliwatts; the meter integrates it
//! exactly, in picojoules (mW × ns), at every change of the running count (an engine's admission
//! and the release of its `Running` guard) and on every read, so the energy a test reads back is
//! the model's, not an estimate. The page speaks dcgm-exporter's names, units and labels (names
//! in `agentx_metrics::gpu`): `DCGM_FI_DEV_POWER_USAGE` (W), `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`
//! (a counter of whole mJ since the server started; left out without `energy_counter`),
//! `DCGM_FI_DEV_GPU_UTIL` (100 while a request runs), `DCGM_FI_DEV_FB_USED` (the engine's KV
//! tokens at [`FB_BYTES_PER_TOKEN`], MiB), `DCGM_FI_DEV_SM_CLOCK` (a constant [`SM_CLOCK_MHZ`]) and
//! `DCGM_FI_DEV_CLOCKS_EVENT_REASONS` (NVML's `gpu_idle` bit while nothing runs), each series
//! labelled `gpu`, `UUID="GPU-agentx-sim-<i>"`, `device="nvidia<i>"`, `modelName="agentx-sim"`
//! and `Hostname`.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Instant;

use super::config::GpuModel;

/// Frame-buffer bytes one KV token takes (a 30B-class model's KV cache in 16 bits).
pub(crate) const FB_BYTES_PER_TOKEN: u64 = 128 << 10;
/// The SM clock the page reports, MHz (an H200's boost clock).
pub(crate) const SM_CLOCK_MHZ: u64 = 1980;
/// The `Hostname` label of every series.
pub(crate) const HOSTNAME: &str = "agentx-sim";
/// Picojoules in a millijoule.
const PJ_PER_MJ: u128 = 1_000_000_000;

/// What the meter holds between two changes.
#[derive(Debug)]
struct State {
    /// When `energy_pj` was last brought up to date.
    since: Instant,
    /// Requests running on the engine now.
    running: u64,
    /// Energy since the meter started, pJ.
    energy_pj: u128,
    /// Energy when the counter was last reset (the counter shows the energy since), pJ.
    counter_base_pj: u128,
}

/// One engine's GPU power meter.
#[derive(Debug)]
pub(crate) struct PowerMeter {
    idle_mw: u64,
    per_running_mw: u64,
    state: Mutex<State>,
}

/// The meter read at one instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    /// Requests running.
    pub running: u64,
    /// Power now, mW.
    pub power_mw: u64,
    /// Energy since the meter started, pJ.
    pub energy_pj: u128,
    /// Energy since the counter's last reset, pJ.
    pub counter_pj: u128,
}

/// Watts to whole milliwatts (validated: finite, 0 to `MAX_GPU_WATTS`).
fn milliwatts(watts: f64) -> u64 {
    (watts * 1000.0).round() as u64
}

impl PowerMeter {
    /// A meter for `model`, idle from `now`.
    pub(crate) fn new(model: &GpuModel, now: Instant) -> PowerMeter {
        PowerMeter {
            idle_mw: milliwatts(model.idle_w),
            per_running_mw: milliwatts(model.per_running_w),
            state: Mutex::new(State {
                since: now,
                running: 0,
                energy_pj: 0,
                counter_base_pj: 0,
            }),
        }
    }

    fn power_mw(&self, running: u64) -> u64 {
        self.idle_mw
            .saturating_add(self.per_running_mw.saturating_mul(running))
    }

    /// Brings the state's energy up to `now` (an earlier `now` adds nothing).
    fn advance(&self, state: &mut State, now: Instant) {
        let elapsed_ns = now.saturating_duration_since(state.since).as_nanos();
        state.energy_pj += u128::from(self.power_mw(state.running)) * elapsed_ns;
        state.since = state.since.max(now);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A request starts running at `now`.
    pub(crate) fn admit(&self, now: Instant) {
        let mut state = self.lock();
        self.advance(&mut state, now);
        state.running += 1;
    }

    /// A request stops running at `now`.
    pub(crate) fn release(&self, now: Instant) {
        let mut state = self.lock();
        self.advance(&mut state, now);
        state.running = state.running.saturating_sub(1);
    }

    /// The meter at `now`.
    pub(crate) fn read(&self, now: Instant) -> Reading {
        let mut state = self.lock();
        self.advance(&mut state, now);
        Reading {
            running: state.running,
            power_mw: self.power_mw(state.running),
            energy_pj: state.energy_pj,
            counter_pj: state.energy_pj - state.counter_base_pj,
        }
    }

    /// The energy counter restarts from 0 at `now` (an exporter or driver restart).
    pub(crate) fn reset_counter(&self, now: Instant) {
        let mut state = self.lock();
        self.advance(&mut state, now);
        state.counter_base_pj = state.energy_pj;
    }
}

/// Joules of picojoules.
pub(crate) fn joules(picojoules: u128) -> f64 {
    picojoules as f64 / 1e12
}

/// One GPU on the page: its meter's reading and its engine's KV tokens.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuView {
    pub reading: Reading,
    pub kv_tokens: u64,
}

/// The dcgm-exporter page of `gpus` (one per engine, in engine order).
pub(crate) fn render(gpus: &[GpuView], energy_counter: bool) -> String {
    let mut out = String::with_capacity(2048);
    let labels = |i: usize| {
        format!(
            "gpu=\"{i}\",UUID=\"GPU-agentx-sim-{i}\",device=\"nvidia{i}\",\
             modelName=\"agentx-sim\",Hostname=\"{HOSTNAME}\""
        )
    };
    let mut family = |name: &str, kind: &str, help: &str, value: &dyn Fn(&GpuView) -> String| {
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        for (i, gpu) in gpus.iter().enumerate() {
            let _ = writeln!(out, "{name}{{{}}} {}", labels(i), value(gpu));
        }
    };
    family(
        "DCGM_FI_DEV_SM_CLOCK",
        "gauge",
        "SM clock frequency (in MHz).",
        &|_| SM_CLOCK_MHZ.to_string(),
    );
    family(
        "DCGM_FI_DEV_GPU_UTIL",
        "gauge",
        "GPU utilization (in %).",
        &|g| if g.reading.running > 0 { "100" } else { "0" }.to_string(),
    );
    family(
        "DCGM_FI_DEV_FB_USED",
        "gauge",
        "Framebuffer memory used (in MiB).",
        &|g| (g.kv_tokens.saturating_mul(FB_BYTES_PER_TOKEN) >> 20).to_string(),
    );
    family(
        "DCGM_FI_DEV_POWER_USAGE",
        "gauge",
        "Power draw (in W).",
        &|g| format!("{:.3}", g.reading.power_mw as f64 / 1000.0),
    );
    if energy_counter {
        family(
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since boot (in mJ).",
            &|g| (g.reading.counter_pj / PJ_PER_MJ).to_string(),
        );
    }
    family(
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "gauge",
        "Current clock event reasons (bitmask of DCGM_CLOCKS_EVENT_REASON_*).",
        &|g| u8::from(g.reading.running == 0).to_string(),
    );
    out
}

#[cfg(test)]
mod tests;
