//! GPU telemetry and energy end to end: a session-tree run with `--gpu-telemetry` against the
//! simulator's DCGM-style endpoint, whose power is 100 W idle plus 50 W per running request. The
//! window's energy is checked against what the simulator's model gives for the same window
//! (independent of the exporter: idle power over the window's seconds plus the running power over
//! every profiling request's time on the server), and the joules per token and job against the
//! summary's own denominators; a run without the energy counter integrates the power and says so;
//! a counter reset marks the reading partial, never summed across the reset.

use agentx::sim::{GpuModel, SimConfig, Timing};
use serde_json::Value;

use crate::support::{tree_run_args, Run, Sim};

const IDLE_W: f64 = 100.0;
const PER_RUNNING_W: f64 = 50.0;

fn gpu_sim(energy_counter: bool, reset_every: Option<u32>) -> Sim {
    let mut cfg = SimConfig::max();
    cfg.timing = Timing::Fixed {
        ttft: std::time::Duration::from_millis(60),
        itl: std::time::Duration::from_millis(2),
    };
    cfg.gpu = Some(GpuModel {
        idle_w: IDLE_W,
        per_running_w: PER_RUNNING_W,
        energy_counter,
    });
    cfg.faults.gpu_counter_reset_every = reset_every;
    Sim::start(cfg)
}

fn run_with_telemetry(sim: &Sim) -> Run {
    let telemetry = format!("{}/dcgm", sim.url());
    let args = tree_run_args(&sim.url(), &["--gpu-telemetry", &telemetry, "--gpus", "1"]);
    let env = [("AGENTX_GPU_COLLECTION_INTERVAL", "0.05")];
    Run::exec(tempfile::tempdir().unwrap(), &args, &env)
}

/// The model's joules over the report's window: idle power over its seconds, plus the running
/// power over each profiling request's time from send to end.
fn modelled_joules(run: &Run, energy: &Value) -> f64 {
    let seconds = energy["endpoints"][0]["seconds"].as_f64().unwrap();
    let busy_s: f64 = run
        .records()
        .iter()
        .filter(|r| r.phase == agentx::record::Phase::Profiling)
        .map(|r| (r.end_ns - r.send_ns) as f64 / 1e9)
        .sum();
    IDLE_W * seconds + PER_RUNNING_W * busy_s
}

#[test]
fn the_windows_energy_is_the_simulators_and_each_joule_figure_divides_it() {
    let sim = gpu_sim(true, None);
    let run = run_with_telemetry(&sim);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let summary = run.summary();
    let energy = &summary["summary"]["energy"];
    assert_eq!(energy["source"], "energy_counter", "{energy}");
    assert_eq!(energy["gpus"], 1);
    assert_eq!(energy["power_valid"], true, "{energy}");
    let total = energy["total_gpu_energy_j"].as_f64().unwrap();
    let modelled = modelled_joules(&run, energy);
    assert!(
        (total / modelled - 1.0).abs() < 0.01,
        "measured {total} J, the model gives {modelled} J"
    );
    // Each figure divides the one total by the summary's own count.
    let figures = &summary["summary"];
    let per = |key: &str, count: &str| {
        let value = energy[key].as_f64().unwrap();
        let count = figures[count].as_f64().unwrap();
        assert!(
            (value * count / total - 1.0).abs() < 1e-9,
            "{key}: {energy}"
        );
    };
    per("joules_per_output_token", "output_tokens");
    per("joules_per_input_token", "input_tokens");
    per("joules_per_successful_query", "requests_ok");
    if figures["jobs"]["ok"].as_u64().unwrap() > 0 {
        let per_job = energy["joules_per_job"].as_f64().unwrap();
        let jobs = figures["jobs"]["ok"].as_f64().unwrap();
        assert!((per_job * jobs / total - 1.0).abs() < 1e-9, "{energy}");
    }
    // aiperf's files and names.
    let lines =
        std::fs::read_to_string(run.artifacts().join("gpu_telemetry_export.jsonl")).unwrap();
    let first: Value = serde_json::from_str(lines.lines().next().unwrap()).unwrap();
    assert_eq!(first["gpu_uuid"], "GPU-agentx-sim-0", "{first}");
    assert_eq!(first["platform"], "nvidia");
    assert!(
        first["telemetry_data"]["nvidia_power_usage"]
            .as_f64()
            .unwrap()
            >= IDLE_W
    );
    assert!(
        first["telemetry_data"]["nvidia_energy_consumption"].is_number(),
        "{first}"
    );
    let aggregate = run.json("profile_export_aiperf.json");
    assert_eq!(aggregate["nvidia_total_gpu_energy"]["unit"], "J");
    assert!(
        (aggregate["nvidia_total_gpu_energy"]["avg"]
            .as_f64()
            .unwrap()
            - total)
            .abs()
            < 1e-6
    );
    let per_token_mj = aggregate["nvidia_energy_per_output_token"]["avg"]
        .as_f64()
        .unwrap();
    let per_token_j = energy["joules_per_output_token"].as_f64().unwrap();
    assert!((per_token_mj - 1e3 * per_token_j).abs() < 1e-9 * per_token_mj.max(1.0));
    let telemetry = &aggregate["telemetry_data"];
    let endpoint = format!("{}/dcgm", sim.url().trim_start_matches("http://"));
    let gpu = &telemetry["endpoints"][&endpoint]["gpus"]["gpu_0"];
    assert_eq!(gpu["gpu_uuid"], "GPU-agentx-sim-0", "{telemetry}");
    let power = &gpu["metrics"]["nvidia_power_usage"];
    assert_eq!(power["unit"], "W");
    assert!(power["min"].as_f64().unwrap() >= IDLE_W, "{power}");
    let energy_mj = gpu["metrics"]["nvidia_energy_consumption"]["avg"]
        .as_f64()
        .unwrap();
    assert!(
        (energy_mj * 1e6 / total - 1.0).abs() < 0.05,
        "{energy_mj} MJ against {total} J"
    );
    assert!(run.stdout().contains("energy        "), "{}", run.stdout());
}

#[test]
fn without_the_energy_counter_the_power_is_integrated_and_said_so() {
    let sim = gpu_sim(false, None);
    let run = run_with_telemetry(&sim);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let energy = &run.summary()["summary"]["energy"];
    assert_eq!(energy["source"], "power_integration", "{energy}");
    let notes = energy["notes"].to_string();
    assert!(notes.contains("no energy counter"), "{energy}");
    let total = energy["total_gpu_energy_j"].as_f64().unwrap();
    let modelled = modelled_joules(&run, energy);
    // Power sampled every 50 ms steps with each request: the trapezoid is within 5 %.
    assert!(
        (total / modelled - 1.0).abs() < 0.05,
        "integrated {total} J, the model gives {modelled} J"
    );
}

#[test]
fn a_counter_reset_marks_the_energy_partial_and_is_never_summed_across() {
    // Every 40 pages (2 s at 50 ms): at least once in the window of about 4 s.
    let sim = gpu_sim(true, Some(40));
    let run = run_with_telemetry(&sim);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let energy = &run.summary()["summary"]["energy"];
    assert_eq!(energy["partial"], true, "{energy}");
    assert_eq!(energy["power_valid"], false, "{energy}");
    let reasons = energy["reasons"].to_string();
    assert!(reasons.contains("GPU-agentx-sim-0"), "{energy}");
    let total = energy["total_gpu_energy_j"].as_f64().unwrap();
    assert!(
        total >= 0.0 && total <= modelled_joules(&run, energy) * 1.01,
        "{energy}"
    );
}

#[test]
fn no_gpu_telemetry_wins_and_an_unreachable_exporter_is_partial() {
    let sim = gpu_sim(true, None);
    let telemetry = format!("{}/dcgm", sim.url());
    let args = tree_run_args(
        &sim.url(),
        &["--gpu-telemetry", &telemetry, "--no-gpu-telemetry"],
    );
    let run = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    assert!(
        run.stderr().contains("--no-gpu-telemetry wins"),
        "{}",
        run.stderr()
    );
    assert!(run.summary()["summary"]["energy"].is_null());
    assert!(!run.artifacts().join("gpu_telemetry_journal.jsonl").exists());

    let args = tree_run_args(
        &sim.url(),
        &["--gpu-telemetry", "http://127.0.0.1:9/metrics"],
    );
    let run = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(run.code(), 0, "{}", run.stderr());
    let energy = &run.summary()["summary"]["energy"];
    assert_eq!(energy["partial"], true, "{energy}");
    assert!(
        energy["reasons"].to_string().contains("unreachable"),
        "{energy}"
    );

    let args = tree_run_args(&sim.url(), &["--gpu-telemetry", "pynvml"]);
    let run = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(run.code(), 2);
    assert!(
        run.stderr().contains("give the exporter's URL"),
        "{}",
        run.stderr()
    );
}
