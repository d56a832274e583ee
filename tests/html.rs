//! `report.html` in a real browser: a short run against the built-in simulator writes it, headless
//! Chromium loads it from disk (no network), and the page's self-check (written into
//! `<pre id="agentx-selfcheck">` once the charts are drawn) says how many charts were drawn, with how
//! many data points and painted pixels each, and which errors reached `window.onerror` or
//! `console.error`. Skipped, with the reason printed, where no Chromium is installed. A sweep's
//! `report.html` and `sweep_compare.html`, from hand-made `sweep.json`s, are checked the same way.

use agentx::export::sweep::{Point, PointStatus, Sweep, SweepInputs, Tail, SCHEMA};
use agentx::export::sweep_views;
use agentx::fsio::Root;
use agentx::sim::SimConfig;
use serde_json::Value;

use crate::support::{chromium, fixture_args, headless, Run, Sim};

/// A short replay of the fixture corpus against the simulator.
fn short_run() -> Run {
    let cfg = SimConfig::max();
    let sim = Sim::start(cfg);
    let mut args = fixture_args("run", &sim.url());
    args.extend(["--concurrency", "3", "--benchmark-duration", "3"].map(String::from));
    let r = Run::in_process(tempfile::tempdir().unwrap(), &args, &[]);
    assert_eq!(r.code(), 0, "{}", r.stderr());
    r
}

/// The JSON the page's self-check wrote into the dumped DOM.
fn selfcheck(dom: &str) -> Value {
    let open = "<pre id=\"agentx-selfcheck\">";
    let start = dom.find(open).expect("the page has its self-check element") + open.len();
    let end = start + dom[start..].find("</pre>").unwrap();
    let text = dom[start..end]
        .replace("&quot;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&");
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("the self-check did not run ({e}); element text {text:?}"))
}

#[test]
fn every_run_writes_a_self_contained_report_html() {
    let r = short_run();
    let page = r.artifacts().join("report.html");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(r.stdout().contains("  report.html"), "{}", r.stdout());
    let s = r.summary();
    for want in [
        s["scenario"]["name"].as_str().unwrap(),
        s["scenario"]["sha256"].as_str().unwrap(),
        s["dataset"]["cache_key"].as_str().unwrap(),
        "not a valid submission",
        "unsafe_override",
    ] {
        assert!(html.contains(want), "no {want:?} in report.html");
    }
    assert!(!html.contains("<script src") && !html.contains("<link"));

    // `plot DIR --html FILE` writes the same page elsewhere from the same files.
    let elsewhere = r.dir.path().join("elsewhere.html");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_agentx-host"))
        .args(["plot", r.artifacts().to_str().unwrap(), "--html"])
        .arg(&elsewhere)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let again = std::fs::read_to_string(&elsewhere).unwrap();
    assert!(again == html, "the same page from the same files");
}

#[test]
fn report_html_draws_every_chart_in_headless_chromium_without_errors() {
    let Some(browser) = chromium() else {
        eprintln!(
            "skipped: no chromium, chromium-browser or google-chrome on PATH (apt-get install chromium)"
        );
        return;
    };
    let r = short_run();
    let page = r.artifacts().join("report.html");
    let profile = r.dir.path().join("chromium-profile");
    let o = headless(&browser, &profile, &page, &["--dump-dom"]);
    let dom = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{} failed: {}",
        browser.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let check = selfcheck(&dom);
    assert_eq!(check["errors"], serde_json::json!([]), "{check}");
    // The twelve time series and the cache truth's two charts by turn index.
    assert_eq!(check["charts"], 14, "{check}");
    assert_eq!(check["expected"], 14, "{check}");
    let titles = check["titles"].as_array().unwrap();
    let points = check["points"].as_array().unwrap();
    let drawn = check["drawn"].as_array().unwrap();
    for i in 0..14 {
        let title = titles[i].as_str().unwrap();
        let n = points[i].as_u64().unwrap();
        // The simulator serves vLLM's metrics, so the server panels have data too; the errors
        // panel draws a line at zero when no request failed, never "no data".
        assert!(n > 0, "chart {title:?} has no data points: {check}");
        assert!(
            drawn[i].as_u64().unwrap() > 0,
            "chart {title:?} painted nothing: {check}"
        );
    }
    assert!(titles.iter().any(|t| t == "TTFT (mean per second)"));
    assert!(titles
        .iter()
        .any(|t| t == "Cache hit by turn: achievable against measured"));
}

/// A hand-made sweep of four points (conc 16 failed), its per-GPU throughput falling in
/// interactivity as concurrency grows, and a second one shifted, for a comparison.
fn sweep(scale: f64, conc: &[u32], failed: Option<u32>) -> Sweep {
    let points = conc
        .iter()
        .map(|&c| {
            let mut p = Point::failed(c, format!("conc_{c}"), "server refused".into());
            if Some(c) == failed {
                return p;
            }
            let c = f64::from(c);
            p.status = PointStatus::Completed;
            p.error = None;
            p.requests_ok = 100;
            p.interactivity = Some(scale * 120.0 / (1.0 + c.log2()));
            p.total_token_throughput = Some(scale * 80.0 * c.sqrt());
            p.total_token_throughput_per_gpu = Some(scale * 10.0 * c.sqrt());
            let ttft = |q: f64| Some(q * (40.0 + 5.0 * c) / scale);
            p.ttft_ms = Tail {
                p50: ttft(1.0),
                p90: ttft(1.6),
                p99: ttft(2.5),
            };
            p.itl_ms.p50 = p.interactivity.map(|i| 1000.0 / i);
            p.server_cache_hit_rate = Some(0.5);
            p.valid = true;
            p
        })
        .collect();
    Sweep {
        schema: SCHEMA.into(),
        inputs: SweepInputs {
            argv: vec!["sweep".into()],
            concurrency: conc.to_vec(),
            seed: 42,
            scenario_sha256: "ab".repeat(32),
            dataset_key: "cd".repeat(32),
            gpus: Some(8),
            result_filename: "agentx".into(),
        },
        points,
        slo: None,
    }
}

/// Both charts of a sweep page drew their points with no error.
fn assert_drawn(check: &Value, n_points: &[u64]) {
    assert_eq!(check["errors"], serde_json::json!([]), "{check}");
    assert_eq!(check["charts"], 2, "{check}");
    assert_eq!(check["expected"], 2, "{check}");
    for (i, want) in n_points.iter().enumerate() {
        assert_eq!(check["points"][i].as_u64(), Some(*want), "{check}");
        assert!(
            check["drawn"][i].as_u64().unwrap() > 0,
            "chart {i} painted nothing: {check}"
        );
    }
}

#[test]
fn sweep_report_html_draws_both_views_in_headless_chromium() {
    let Some(browser) = chromium() else {
        eprintln!(
            "skipped: no chromium, chromium-browser or google-chrome on PATH (apt-get install chromium)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (da, db) = (dir.path().join("base"), dir.path().join("tuned"));
    let (ra, rb) = (Root::create(&da).unwrap(), Root::create(&db).unwrap());
    let a = sweep(1.0, &[1, 4, 16, 64], Some(16));
    let b = sweep(1.25, &[1, 4, 16, 64], None);
    a.write(&ra).unwrap();
    b.write(&rb).unwrap();
    let files = sweep_views::write_views(&ra, &a);
    assert_eq!(files.len(), 2, "{files:?}");
    let profile = dir.path().join("chromium-profile");

    let o = headless(&browser, &profile, &da.join("report.html"), &["--dump-dom"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dom = String::from_utf8_lossy(&o.stdout);
    // Pareto view: 3 points plus a 3-point frontier; TTFT p90: 3 points.
    assert_drawn(&selfcheck(&dom), &[6, 3]);
    assert!(dom.contains("server refused"));

    let out = dir.path().join("compare");
    sweep_views::write_compare(&da, &db, &out).unwrap();
    let o = headless(
        &browser,
        &profile,
        &out.join(sweep_views::COMPARE_HTML),
        &["--dump-dom"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dom = String::from_utf8_lossy(&o.stdout);
    // A: 3 points and frontier, B: 4 and 4; TTFT p90: 3 + 4.
    assert_drawn(&selfcheck(&dom), &[14, 7]);
    assert!(dom.contains("concurrency 16 failed in base"));
}

/// A session tree three deep (root -> a -> b -> c) as records: each stream's requests, the root's
/// last after its subagents, failures and cached tokens among them.
fn three_deep_tree() -> Vec<agentx::record::RequestRecord> {
    use agentx::record::testkit::{failed, in_tree, rec};
    let request = |stream: &str, parent: Option<&str>, send_ms: u64, ok: bool| {
        let mut record = if ok {
            rec(send_ms, &[40, 90], 2_000, 2)
        } else {
            failed(send_ms, 2_000)
        };
        record.correlation_id = stream.into();
        record.request_id = format!("{stream}-{send_ms}");
        record.trace_id = format!("tree::{stream}");
        record.usage.cached_tokens = Some(1_500);
        in_tree(record, "root", parent)
    };
    vec![
        request("root", None, 0, true),
        request("a", Some("root"), 200, true),
        request("b", Some("a"), 400, true),
        request("c", Some("b"), 600, false),
        request("b", Some("a"), 800, true),
        request("a", Some("root"), 1_000, true),
        request("root", None, 1_200, true),
    ]
}

#[test]
fn the_session_tree_gantt_draws_a_tree_three_deep_in_headless_chromium() {
    let Some(browser) = chromium() else {
        eprintln!("skipped: no chromium on PATH (apt-get install chromium)");
        return;
    };
    let r = short_run();
    let dir = r.artifacts();
    // The run's own sessions stay; the tree three deep is the longest, so the chart opens on it.
    let mut text = std::fs::read_to_string(dir.join("records.jsonl")).unwrap();
    let tree = three_deep_tree();
    for record in &tree {
        let mut record = record.clone();
        record.send_ns += 1_000_000_000;
        record.end_ns += 1_000_000_000;
        record.intended_ns = record.send_ns;
        record.first_token_ns = record.first_token_ns.map(|t| t + 1_000_000_000);
        record.first_byte_ns = record.first_byte_ns.map(|t| t + 1_000_000_000);
        // Stretched to outlast every session of the run.
        record.end_ns += 60_000_000_000 * u64::from(record.correlation_id == "root");
        text.push_str(&serde_json::to_string(&record).unwrap());
        text.push('\n');
    }
    std::fs::write(dir.join("records.jsonl"), text).unwrap();
    let page = r.dir.path().join("tree.html");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_agentx-host"))
        .args(["plot", dir.to_str().unwrap(), "--html"])
        .arg(&page)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(html.contains("Session tree") && html.contains("\"depth\":3"));

    let profile = r.dir.path().join("chromium-profile");
    let o = headless(&browser, &profile, &page, &["--dump-dom"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let check = selfcheck(&String::from_utf8_lossy(&o.stdout));
    assert_eq!(check["errors"], serde_json::json!([]), "{check}");
    let gantt = &check["gantt"];
    assert!(gantt["trees"].as_u64().unwrap() >= 2, "{check}");
    assert_eq!(gantt["rows"], 4, "{check}");
    assert_eq!(gantt["bars"], tree.len(), "{check}");
    assert!(gantt["drawn"].as_u64().unwrap() > 0, "{check}");
}
