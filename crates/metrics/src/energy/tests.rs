//! The energy of hand-built exporter pages, against joules computed by hand.

use std::time::Duration;

use super::*;
use crate::scrape_log::{Boundary, BoundaryScrape};
use agentx_record::Clock;

const S: u64 = 1_000_000_000;
const MS: u64 = 1_000_000;
const DCGM: &str = "http://node1:9400/metrics";

/// One GPU's values on a DCGM page.
#[derive(Debug, Clone, Copy, Default)]
struct Dcgm {
    gpu: u32,
    power_w: f64,
    energy_mj: Option<u64>,
    util: f64,
    fb_mib: f64,
    sm_mhz: f64,
    reasons: u64,
}

/// A dcgm-exporter page with `gpus`, with its HELP and TYPE lines.
fn dcgm_page(gpus: &[Dcgm]) -> String {
    let mut page = String::new();
    let family =
        |page: &mut String, name: &str, kind: &str, value: &dyn Fn(&Dcgm) -> Option<f64>| {
            let values: Vec<(u32, f64)> = gpus
                .iter()
                .filter_map(|g| value(g).map(|v| (g.gpu, v)))
                .collect();
            if values.is_empty() {
                return;
            }
            page.push_str(&format!(
                "# HELP {name} a DCGM field.\n# TYPE {name} {kind}\n"
            ));
            for (gpu, v) in values {
                page.push_str(&format!(
                    "{name}{{gpu=\"{gpu}\",UUID=\"GPU-{gpu}\",device=\"nvidia{gpu}\",\
                 modelName=\"NVIDIA H200\",Hostname=\"node1\"}} {v}\n"
                ));
            }
        };
    family(&mut page, "DCGM_FI_DEV_POWER_USAGE", "gauge", &|g| {
        Some(g.power_w)
    });
    family(
        &mut page,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        &|g| g.energy_mj.map(|e| e as f64),
    );
    family(&mut page, "DCGM_FI_DEV_GPU_UTIL", "gauge", &|g| {
        Some(g.util)
    });
    family(&mut page, "DCGM_FI_DEV_FB_USED", "gauge", &|g| {
        Some(g.fb_mib)
    });
    family(&mut page, "DCGM_FI_DEV_SM_CLOCK", "gauge", &|g| {
        Some(g.sm_mhz)
    });
    family(
        &mut page,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "gauge",
        &|g| Some(g.reasons as f64),
    );
    page
}

/// An endpoint log of `pages` scraped at `times`.
fn endpoint(url: &str, times: &[u64], pages: &[Option<String>]) -> EndpointLog {
    EndpointLog::from_pages(
        url,
        times
            .iter()
            .copied()
            .zip(pages.iter().map(Option::as_deref)),
    )
    .unwrap()
}

/// Tags scrapes `from` and `to` of `e` as its profiling boundary scrapes.
fn boundaries(e: &mut EndpointLog, from: u32, to: u32) {
    for (boundary, idx) in [
        (Boundary::ProfilingStart, from),
        (Boundary::ProfilingComplete, to),
    ] {
        e.boundaries.push(BoundaryScrape {
            boundary,
            asked_ns: e.scrape_ns[idx as usize],
            attempts: 1,
            taken: Ok(idx),
        });
    }
}

fn log(endpoints: Vec<EndpointLog>) -> ScrapeLog {
    ScrapeLog {
        clock: Clock::start(),
        interval: Duration::from_secs(1),
        endpoints,
    }
}

fn denominators() -> Denominators {
    Denominators {
        requests_ok: 10,
        input_tokens: 3000,
        output_tokens: 1000,
        jobs_ok: Some(2),
        lanes: Some(4),
        expected_gpus: None,
    }
}

/// One GPU at `power_w`, its counter at `energy_mj`.
fn gpu0(power_w: f64, energy_mj: Option<u64>) -> Dcgm {
    Dcgm {
        power_w,
        energy_mj,
        ..Dcgm::default()
    }
}

#[test]
fn the_counter_delta_between_the_boundary_scrapes_is_the_energy() {
    // Scrapes every second; the boundary scrapes are the 2nd and the 5th: 1_000_000 mJ apart.
    let counter = [
        5_000_000, 5_250_000, 5_700_000, 6_000_000, 6_250_000, 6_900_000,
    ];
    let pages: Vec<Option<String>> = counter
        .iter()
        .map(|mj| Some(dcgm_page(&[gpu0(300.0, Some(*mj))])))
        .collect();
    let times: Vec<u64> = (0..6).map(|i| i * S).collect();
    let mut e = endpoint(DCGM, &times, &pages);
    boundaries(&mut e, 1, 4);
    // The replay's window is a little inside the boundary scrapes; the scrapes decide.
    let report = EnergyReport::of(
        &log(vec![e]),
        (S + 10 * MS, 4 * S - 10 * MS),
        denominators(),
    );
    assert_eq!(report.total_gpu_energy_j, Some(1000.0));
    assert_eq!(report.source, Some(EnergySource::EnergyCounter));
    assert!(report.power_valid && !report.partial, "{report:?}");
    assert_eq!(report.gpus, 1);
    let endpoint = &report.endpoints[0];
    assert_eq!(endpoint.edges, "boundary_scrapes");
    assert_eq!(endpoint.seconds, 3.0);
    assert_eq!(endpoint.scrapes, 4);
    let g = &endpoint.gpus[0];
    assert_eq!(
        (g.id.as_str(), g.index.as_deref(), g.hostname.as_deref()),
        ("GPU-0", Some("0"), Some("node1"))
    );
    assert_eq!(g.model.as_deref(), Some("NVIDIA H200"));
    assert_eq!((g.samples, g.covered, g.max_gap_s), (4, 1.0, Some(1.0)));
    // 1000 J over the 3 s between the boundary scrapes.
    let power = 1000.0 / 3.0;
    assert_eq!(report.avg_total_gpu_power_w, Some(power));
    assert_eq!(report.avg_power_w, Some(power));
    assert_eq!(report.joules_per_successful_query, Some(100.0));
    assert_eq!(report.joules_per_input_token, Some(1000.0 / 3000.0));
    assert_eq!(report.joules_per_output_token, Some(1.0));
    assert_eq!(report.joules_per_total_token, Some(0.25));
    assert_eq!(report.joules_per_job, Some(500.0));
    assert_eq!(report.agents_per_mw, Some(4.0 / (power / 1e6)));
    // The counter changed at every scrape: the exporter updates at least every second.
    assert_eq!(report.exporter_update_s, Some(1.0));
}

#[test]
fn amd_microjoules_scale_to_joules_and_the_system_clock_is_read() {
    let page = |uj: u64, package_w: f64| {
        let labels = "gpu_id=\"0\",serial_number=\"S-7\",card_model=\"MI300X\",hostname=\"node2\"";
        format!(
            "# TYPE gpu_energy_consumed gauge\ngpu_energy_consumed{{{labels}}} {uj}\n\
             # TYPE gpu_package_power gauge\ngpu_package_power{{{labels}}} {package_w}\n\
             # TYPE gpu_power_usage gauge\ngpu_power_usage{{{labels}}} 1\n\
             # TYPE gpu_gfx_activity gauge\ngpu_gfx_activity{{{labels}}} 50\n\
             # TYPE gpu_used_vram gauge\ngpu_used_vram{{{labels}}} 2048\n\
             # TYPE gpu_clock gauge\n\
             gpu_clock{{{labels},clock_type=\"system\",clock_index=\"1\"}} 900\n\
             gpu_clock{{{labels},clock_type=\"system\",clock_index=\"0\"}} 2100\n\
             gpu_clock{{{labels},clock_type=\"memory\",clock_index=\"0\"}} 1300\n"
        )
    };
    let pages = vec![
        Some(page(7_000_000, 700.0)),
        Some(page(7_000_000 + 2_500_000_000, 750.0)),
    ];
    let mut e = endpoint("http://node2:5000/metrics", &[0, 5 * S], &pages);
    boundaries(&mut e, 0, 1);
    let report = EnergyReport::of(&log(vec![e]), (0, 5 * S), denominators());
    // 2.5e9 uJ = 2500 J.
    assert_eq!(report.total_gpu_energy_j, Some(2500.0));
    assert_eq!(report.source, Some(EnergySource::EnergyCounter));
    let g = &report.endpoints[0].gpus[0];
    assert_eq!(g.id, "S-7");
    assert_eq!(g.model.as_deref(), Some("MI300X"));
    assert_eq!(g.util_avg, Some(50.0));
    assert_eq!(g.mem_used_mib_max, Some(2048.0));
    // The system clock of the lowest index, not the memory clock nor index 1.
    assert_eq!(
        g.sm_clock_mhz,
        Some(ClockFigures {
            avg: 2100.0,
            min: 2100.0
        })
    );
}

#[test]
fn a_reset_counter_sums_its_monotone_stretches_and_is_partial() {
    // 1000 mJ a second; the exporter restarts between scrapes 2 and 3 (3000 -> 50 mJ).
    let counter = [1000, 2000, 3000, 50, 1050];
    let pages: Vec<Option<String>> = counter
        .iter()
        .map(|mj| Some(dcgm_page(&[gpu0(100.0, Some(*mj))])))
        .collect();
    let times: Vec<u64> = (0..5).map(|i| i * S).collect();
    let mut e = endpoint(DCGM, &times, &pages);
    boundaries(&mut e, 0, 4);
    let report = EnergyReport::of(&log(vec![e]), (0, 4 * S), denominators());
    // 1000 + 1000 before the reset, 1000 after: the second between scrapes 2 and 3 is missing.
    assert_eq!(report.total_gpu_energy_j, Some(3.0));
    assert!(report.partial && !report.power_valid);
    assert_eq!(report.reasons.len(), 1, "{:?}", report.reasons);
    let reason = &report.reasons[0];
    for part in [
        DCGM,
        "gpu 0 (GPU-0)",
        "from 3000 mJ to 50 mJ",
        "scrapes 2 and 3",
    ] {
        assert!(reason.contains(part), "{part} in {reason}");
    }
}

#[test]
fn without_a_counter_power_is_integrated_by_trapezoids_interpolated_at_the_edges() {
    let power = [100.0, 200.0, 200.0, 100.0];
    let pages: Vec<Option<String>> = power
        .iter()
        .map(|w| Some(dcgm_page(&[gpu0(*w, None)])))
        .collect();
    let times: Vec<u64> = (0..4).map(|i| i * S).collect();
    // No boundary scrapes: the window's edges at 0.5 s and 2.5 s are interpolated (150 W there).
    let e = endpoint(DCGM, &times, &pages);
    let report = EnergyReport::of(&log(vec![e]), (S / 2, 5 * S / 2), denominators());
    // (150 + 200) / 2 * 0.5 + 200 * 1 + (200 + 150) / 2 * 0.5 = 375 J.
    assert_eq!(report.total_gpu_energy_j, Some(375.0));
    assert_eq!(report.source, Some(EnergySource::PowerIntegration));
    assert_eq!(report.avg_total_gpu_power_w, Some(375.0 / 2.0));
    assert!(
        report.power_valid && !report.partial,
        "{:?}",
        report.reasons
    );
    assert_eq!(report.endpoints[0].edges, "interpolated");
    assert!(
        report
            .notes
            .iter()
            .any(|n| n
                .contains("no energy counter: integrated DCGM_FI_DEV_POWER_USAGE over 4 samples")),
        "{:?}",
        report.notes
    );
    assert!(report.notes.iter().any(|n| n.contains("interpolated")));
    assert_eq!(report.exporter_update_s, None);
}

#[test]
fn a_power_gap_over_three_seconds_is_invalid_and_one_sample_is_not_enough() {
    let pages: Vec<Option<String>> = [300.0, 300.0, 300.0]
        .iter()
        .map(|w| Some(dcgm_page(&[gpu0(*w, None)])))
        .collect();
    let e = endpoint(DCGM, &[0, 4 * S, 8 * S], &pages);
    let report = EnergyReport::of(&log(vec![e]), (S, 7 * S), denominators());
    assert_eq!(report.total_gpu_energy_j, Some(1800.0));
    assert!(!report.power_valid && !report.partial);
    assert!(
        report.reasons[0].contains("4.000 s between two power samples"),
        "{:?}",
        report.reasons
    );

    let e = endpoint(DCGM, &[2 * S], &[Some(dcgm_page(&[gpu0(300.0, None)]))]);
    let report = EnergyReport::of(&log(vec![e]), (S, 7 * S), denominators());
    assert_eq!(report.total_gpu_energy_j, None);
    assert!(report.partial && !report.power_valid);
    assert!(
        report.reasons[0].contains("1 power sample(s)"),
        "{:?}",
        report.reasons
    );
}

#[test]
fn a_gpu_gone_mid_window_is_partial_with_the_share_it_covered() {
    let times: Vec<u64> = (0..5).map(|i| i * S).collect();
    let pages: Vec<Option<String>> = (0..5u64)
        .map(|i| {
            let mut gpus = vec![gpu0(100.0, Some(i * 100_000))];
            if i <= 2 {
                gpus.push(Dcgm {
                    gpu: 1,
                    power_w: 100.0,
                    energy_mj: Some(i * 200_000),
                    ..Dcgm::default()
                });
            }
            Some(dcgm_page(&gpus))
        })
        .collect();
    let mut e = endpoint(DCGM, &times, &pages);
    boundaries(&mut e, 0, 4);
    let report = EnergyReport::of(&log(vec![e]), (0, 4 * S), denominators());
    // GPU 0: 400 J; GPU 1: 400 J over the first half only.
    assert_eq!(report.total_gpu_energy_j, Some(800.0));
    assert!(report.partial);
    let g1 = &report.endpoints[0].gpus[1];
    assert_eq!((g1.id.as_str(), g1.covered), ("GPU-1", 0.5));
    assert_eq!(report.reasons.len(), 1, "{:?}", report.reasons);
    assert!(report.reasons[0].contains("gpu 1 (GPU-1): its samples cover 50.0 %"));
}

#[test]
fn an_endpoint_whose_fetches_all_failed_is_unreachable() {
    let dead = endpoint(
        "http://node9:9400/metrics",
        &[0, S, 2 * S],
        &[None, None, None],
    );
    let pages: Vec<Option<String>> = [0, 200_000, 400_000]
        .iter()
        .map(|mj| Some(dcgm_page(&[gpu0(200.0, Some(*mj))])))
        .collect();
    let mut alive = endpoint(DCGM, &[0, S, 2 * S], &pages);
    boundaries(&mut alive, 0, 2);
    let report = EnergyReport::of(&log(vec![dead, alive]), (0, 2 * S), denominators());
    assert_eq!(report.total_gpu_energy_j, Some(400.0));
    assert!(report.partial && !report.power_valid);
    assert_eq!(
        report.reasons,
        vec![
            "http://node9:9400/metrics unreachable: 3 connect, 0 timeout failures (the last: \
             connection refused)"
                .to_string()
        ]
    );
    assert_eq!(report.endpoints[0].failures.connect, 3);
    assert!(report.endpoints[0].gpus.is_empty());
}

#[test]
fn two_endpoints_scraped_at_other_times_are_each_interpolated_at_the_edges() {
    // Node A at 100 W scraped on whole seconds, node B at 200 W half a second later; the counters
    // grow linearly, so the interpolated increase over 1.2 s .. 2.7 s is exact.
    let counter = |gpu: u32, watts: u64, t: u64| {
        Some(dcgm_page(&[Dcgm {
            gpu,
            ..gpu0(watts as f64, Some(watts * t / MS))
        }]))
    };
    let a_times: Vec<u64> = (0..4).map(|i| i * S).collect();
    let b_times: Vec<u64> = (0..4).map(|i| i * S + S / 2).collect();
    let a_pages: Vec<Option<String>> = a_times.iter().map(|t| counter(0, 100, *t)).collect();
    let b_pages: Vec<Option<String>> = b_times.iter().map(|t| counter(1, 200, *t)).collect();
    let a = endpoint("http://a:9400/metrics", &a_times, &a_pages);
    let b = endpoint("http://b:9400/metrics", &b_times, &b_pages);
    let window = (1200 * MS, 2700 * MS);
    let report = EnergyReport::of(&log(vec![a, b]), window, denominators());
    let energy: Vec<f64> = report
        .endpoints
        .iter()
        .map(|e| e.gpus[0].energy_j.unwrap())
        .collect();
    let close = |x: f64, y: f64| (x - y).abs() < 1e-9 * y;
    assert!(
        close(energy[0], 150.0) && close(energy[1], 300.0),
        "{energy:?}"
    );
    assert!(close(report.total_gpu_energy_j.unwrap(), 450.0));
    assert!(close(report.avg_total_gpu_power_w.unwrap(), 300.0));
    assert!(close(report.avg_power_w.unwrap(), 150.0));
    // A: the scrapes at 1, 2 and 3 s; B: at 0.5 (before the start), 1.5, 2.5 and 3.5 s.
    let samples: Vec<u64> = report.endpoints.iter().map(|e| e.gpus[0].samples).collect();
    assert_eq!(samples, vec![3, 4]);
    assert!(
        report.power_valid && !report.partial,
        "{:?}",
        report.reasons
    );
    assert_eq!(report.gpus, 2);
}

#[test]
fn another_gpu_count_than_expected_is_invalid_but_not_partial() {
    let pages: Vec<Option<String>> = [0, 100_000]
        .iter()
        .map(|mj| Some(dcgm_page(&[gpu0(100.0, Some(*mj))])))
        .collect();
    let mut e = endpoint(DCGM, &[0, S], &pages);
    boundaries(&mut e, 0, 1);
    let expected = Denominators {
        expected_gpus: Some(8),
        ..denominators()
    };
    let report = EnergyReport::of(&log(vec![e]), (0, S), expected);
    assert_eq!(report.total_gpu_energy_j, Some(100.0));
    assert!(!report.power_valid && !report.partial);
    assert!(report.reasons[0].starts_with("expected_gpu_count_mismatch: 8 GPUs expected"));
}

#[test]
fn utilisation_memory_clock_and_throttle_shares_come_from_the_window_scrapes() {
    let gpu = |util: f64, fb: f64, mhz: f64, reasons: u64, mj: u64| Dcgm {
        power_w: 100.0,
        energy_mj: Some(mj),
        util,
        fb_mib: fb,
        sm_mhz: mhz,
        reasons,
        ..Dcgm::default()
    };
    let pages = vec![
        Some(dcgm_page(&[gpu(0.0, 10.0, 1980.0, 0x1, 0)])),
        Some(dcgm_page(&[gpu(100.0, 500.0, 1700.0, 0x4, 1000)])),
        Some(dcgm_page(&[gpu(50.0, 300.0, 1800.0, 0x4 | 0x40, 2000)])),
        // After the window: not counted.
        Some(dcgm_page(&[gpu(0.0, 9000.0, 100.0, 0x8, 3000)])),
    ];
    let times: Vec<u64> = (0..4).map(|i| i * S).collect();
    let mut e = endpoint(DCGM, &times, &pages);
    boundaries(&mut e, 0, 2);
    let report = EnergyReport::of(&log(vec![e]), (0, 2 * S), denominators());
    let g = &report.endpoints[0].gpus[0];
    assert_eq!(g.util_avg, Some(50.0));
    assert_eq!(g.mem_used_mib_max, Some(500.0));
    assert_eq!(
        g.sm_clock_mhz,
        Some(ClockFigures {
            avg: (1980.0 + 1700.0 + 1800.0) / 3.0,
            min: 1700.0
        })
    );
    let shares: Vec<(&str, f64)> = g.throttle.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    assert_eq!(
        shares,
        vec![
            ("gpu_idle", 1.0 / 3.0),
            ("hw_thermal_slowdown", 1.0 / 3.0),
            ("sw_power_cap", 2.0 / 3.0)
        ]
    );
}

#[test]
fn an_empty_window_or_a_page_without_gpus_measures_nothing() {
    let pages = vec![Some(dcgm_page(&[gpu0(100.0, Some(0))]))];
    let report = EnergyReport::of(
        &log(vec![endpoint(DCGM, &[0], &pages)]),
        (S, S),
        denominators(),
    );
    assert!(report.partial && !report.power_valid && report.total_gpu_energy_j.is_none());
    assert!(report.reasons[0].contains("window is empty"));

    let vllm = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n";
    let e = endpoint(
        "http://vllm:8000/metrics",
        &[0, S],
        &[Some(vllm.into()), Some(vllm.into())],
    );
    let report = EnergyReport::of(&log(vec![e]), (0, S), denominators());
    assert!(report.partial && report.total_gpu_energy_j.is_none());
    assert!(
        report.reasons[0].contains("no GPU metric on its page"),
        "{:?}",
        report.reasons
    );
}
