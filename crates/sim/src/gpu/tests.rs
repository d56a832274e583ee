//! The power meter's exact integral, and `GET /dcgm/metrics` over real HTTP read back through the
//! metrics crate's energy report.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use agentx_metrics::energy::{Denominators, EnergyReport, EnergySource};
use agentx_metrics::scrape_log::{Boundary, BoundaryScrape, EndpointLog, ScrapeLog};
use agentx_record::Clock;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};

use super::*;
use crate::{spawn, SimConfig, Timing};

const S: u64 = 1_000_000_000;

fn model(energy_counter: bool) -> GpuModel {
    GpuModel {
        idle_w: 100.0,
        per_running_w: 50.0,
        energy_counter,
    }
}

#[test]
fn the_meter_integrates_power_exactly_at_every_change() {
    let t0 = Instant::now();
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    let meter = PowerMeter::new(&model(true), t0);
    meter.admit(at(1000));
    meter.admit(at(1500));
    meter.release(at(2000));
    let reading = meter.read(at(3000));
    // 100 W for 1 s, 150 W for 0.5 s, 200 W for 0.5 s, 150 W for 1 s.
    let expected_j = 100 + 75 + 100 + 150;
    assert_eq!(reading.energy_pj, expected_j * 1_000_000_000_000);
    assert_eq!((reading.running, reading.power_mw), (1, 150_000));
    assert_eq!(reading.counter_pj, reading.energy_pj);
    meter.reset_counter(at(3000));
    let later = meter.read(at(4000));
    assert_eq!(later.counter_pj, 150 * 1_000_000_000_000);
    assert_eq!(joules(later.energy_pj), 575.0);
    // A read from the past adds nothing.
    assert_eq!(meter.read(at(3500)).energy_pj, later.energy_pj);
}

#[test]
fn the_page_has_dcgm_names_types_and_labels() {
    let view = |running: u64, counter_pj: u128| GpuView {
        reading: Reading {
            running,
            power_mw: 150_500,
            energy_pj: counter_pj,
            counter_pj,
        },
        kv_tokens: 24,
    };
    let page = render(&[view(1, 2_999_999_999_999), view(0, 0)], true);
    let families = agentx_metrics::prometheus::parse(&page).unwrap();
    let family = |name: &str| families.iter().find(|f| f.name == name).unwrap();
    let energy = family("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION");
    assert_eq!(energy.kind, agentx_metrics::prometheus::MetricType::Counter);
    assert_eq!(energy.help, "Total energy consumption since boot (in mJ).");
    // Whole millijoules: 2999.999999999 mJ is served as 2999.
    assert_eq!(energy.samples[0].value, 2999.0);
    let power = &family("DCGM_FI_DEV_POWER_USAGE").samples[0];
    assert_eq!(power.value, 150.5);
    for (key, value) in [
        ("gpu", "0"),
        ("UUID", "GPU-agentx-sim-0"),
        ("device", "nvidia0"),
        ("modelName", "agentx-sim"),
        ("Hostname", HOSTNAME),
    ] {
        assert_eq!(power.label(key), Some(value), "{key}");
    }
    let values =
        |name: &str| -> Vec<f64> { family(name).samples.iter().map(|s| s.value).collect() };
    assert_eq!(values("DCGM_FI_DEV_GPU_UTIL"), vec![100.0, 0.0]);
    assert_eq!(values("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), vec![0.0, 1.0]);
    // 24 tokens at 128 KiB: 3 MiB.
    assert_eq!(values("DCGM_FI_DEV_FB_USED"), vec![3.0, 3.0]);
    assert_eq!(values("DCGM_FI_DEV_SM_CLOCK"), vec![1980.0, 1980.0]);
    let without = render(&[view(0, 5)], false);
    assert!(
        !without.contains("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"),
        "{without}"
    );
}

/// `GET path` on `addr`: the status, the content type and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, Full<Bytes>>(
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    let request = hyper::Request::get(path)
        .header("host", "sim")
        .body(Full::new(Bytes::new()))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        content_type,
        String::from_utf8(body.to_vec()).unwrap(),
    )
}

/// Sends a chat request of `words` prompt words; returns the response once its headers came (the
/// request is admitted then: it runs until the body ends or is dropped).
async fn chat(
    addr: SocketAddr,
    words: usize,
    stream: bool,
) -> hyper::Response<hyper::body::Incoming> {
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake::<_, Full<Bytes>>(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(conn);
    let text = vec!["word"; words].join(" ");
    let body = serde_json::json!({
        "model": "m",
        "max_tokens": 4,
        "stream": stream,
        "messages": [{"role": "user", "content": text}],
    });
    let request = hyper::Request::post("/v1/chat/completions")
        .header("host", "sim")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    assert_eq!(response.status(), 200);
    response
}

/// The energy report of two pages, taken as the window's boundary scrapes one second apart.
fn report_of(first: &str, second: &str) -> EnergyReport {
    let mut endpoint = EndpointLog::from_pages(
        "http://sim/dcgm/metrics",
        [(0, Some(first)), (S, Some(second))],
    )
    .unwrap();
    for (boundary, idx) in [
        (Boundary::ProfilingStart, 0),
        (Boundary::ProfilingComplete, 1),
    ] {
        endpoint.boundaries.push(BoundaryScrape {
            boundary,
            asked_ns: u64::from(idx) * S,
            attempts: 1,
            taken: Ok(idx),
        });
    }
    let log = ScrapeLog {
        clock: Clock::start(),
        interval: Duration::from_secs(1),
        endpoints: vec![endpoint],
    };
    EnergyReport::of(&log, (0, S), Denominators::default())
}

fn gpu_config(engines: u32, energy_counter: bool) -> SimConfig {
    let mut config = SimConfig::max();
    config.engines = engines;
    config.gpu = Some(model(energy_counter));
    config
}

#[tokio::test]
async fn a_running_request_draws_its_power_on_the_page() {
    let mut config = gpu_config(1, true);
    // The first token is far off: the request runs for as long as the test looks.
    config.timing = Timing::Fixed {
        ttft: Duration::from_secs(60),
        itl: Duration::ZERO,
    };
    let sim = spawn(config).unwrap();
    let (status, _, idle) = get(sim.addr(), "/dcgm/metrics").await;
    assert_eq!(status, 200);
    assert!(idle.contains("DCGM_FI_DEV_POWER_USAGE{gpu=\"0\",UUID=\"GPU-agentx-sim-0\",device=\"nvidia0\",modelName=\"agentx-sim\",Hostname=\"agentx-sim\"} 100.000"), "{idle}");
    let running = chat(sim.addr(), 16, true).await;
    let (_, content_type, page) = get(sim.addr(), "/dcgm/metrics").await;
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let families = agentx_metrics::prometheus::parse(&page).unwrap();
    let value = |name: &str| {
        families
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no {name} in {page}"))
            .samples[0]
            .value
    };
    assert_eq!(value("DCGM_FI_DEV_POWER_USAGE"), 150.0);
    assert_eq!(value("DCGM_FI_DEV_GPU_UTIL"), 100.0);
    assert_eq!(value("DCGM_FI_DEV_CLOCKS_EVENT_REASONS"), 0.0);
    // 16 prompt tokens at 128 KiB: 2 MiB.
    assert_eq!(value("DCGM_FI_DEV_FB_USED"), 2.0);
    drop(running);
    // Without simulated GPUs there is no such page.
    let plain = spawn(SimConfig::max()).unwrap();
    assert_eq!(get(plain.addr(), "/dcgm/metrics").await.0, 404);
    assert!(plain.gpu_energy_joules().is_empty());
}

#[tokio::test]
async fn the_energy_of_two_scraped_pages_is_the_meters_joules() {
    let mut config = gpu_config(2, true);
    config.timing = Timing::Fixed {
        ttft: Duration::from_millis(40),
        itl: Duration::from_millis(5),
    };
    let sim = spawn(config).unwrap();
    let total = |joules: Vec<f64>| -> f64 { joules.iter().sum() };
    let before_first = total(sim.gpu_energy_joules());
    let first = get(sim.addr(), "/dcgm/metrics").await.2;
    let after_first = total(sim.gpu_energy_joules());
    for _ in 0..3 {
        let (one, two) = tokio::join!(chat(sim.addr(), 8, false), chat(sim.addr(), 8, false));
        for answer in [one, two] {
            answer.into_body().collect().await.unwrap();
        }
    }
    let before_second = total(sim.gpu_energy_joules());
    let second = get(sim.addr(), "/dcgm/metrics").await.2;
    let after_second = total(sim.gpu_energy_joules());
    let report = report_of(&first, &second);
    assert_eq!(report.source, Some(EnergySource::EnergyCounter));
    assert_eq!(report.gpus, 2);
    assert!(report.power_valid, "{:?}", report.reasons);
    let measured = report.total_gpu_energy_j.unwrap();
    // Each page was rendered between the two reads around it; the counter is whole mJ (1e-3 J).
    let (low, high) = (before_second - after_first, after_second - before_first);
    assert!(
        low - 2e-3 <= measured && measured <= high + 2e-3,
        "{low} <= {measured} <= {high}"
    );
}

#[tokio::test]
async fn a_counter_reset_after_a_page_is_a_partial_report_naming_the_gpu() {
    let mut config = gpu_config(1, true);
    // 1 mJ a microsecond: the counter has moved by the first page.
    config.gpu = Some(GpuModel {
        idle_w: 1000.0,
        ..model(true)
    });
    config.faults.gpu_counter_reset_every = Some(1);
    let sim = spawn(config).unwrap();
    let first = get(sim.addr(), "/dcgm/metrics").await.2;
    let second = get(sim.addr(), "/dcgm/metrics").await.2;
    let report = report_of(&first, &second);
    assert!(report.partial && !report.power_valid);
    assert_eq!(report.total_gpu_energy_j, Some(0.0));
    assert!(
        report.reasons[0].contains("gpu 0 (GPU-agentx-sim-0): the energy counter went back"),
        "{:?}",
        report.reasons
    );
}

#[tokio::test]
async fn without_the_counter_the_power_is_integrated() {
    let sim = spawn(gpu_config(1, false)).unwrap();
    let first = get(sim.addr(), "/dcgm/metrics").await.2;
    let second = get(sim.addr(), "/dcgm/metrics").await.2;
    assert!(!first.contains("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"));
    let report = report_of(&first, &second);
    // Idle at 100 W over the one second between the two pages.
    assert_eq!(report.total_gpu_energy_j, Some(100.0));
    assert_eq!(report.source, Some(EnergySource::PowerIntegration));
    assert!(report.notes.iter().any(|n| n.contains("no energy counter")));
}
