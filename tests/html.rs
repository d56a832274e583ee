//! `report.html` in a real browser: a short run against the built-in simulator writes it, headless
//! Chromium loads it from disk (no network), and the page's self-check (written into
//! `<pre id="agentx-selfcheck">` once the charts are drawn) says how many charts were drawn, with how
//! many data points and painted pixels each, and which errors reached `window.onerror` or
//! `console.error`. Skipped, with the reason printed, where no Chromium is installed.

use agentx::sim::SimConfig;
use serde_json::Value;

use crate::support::{chromium, fixture, headless, Run, Sim};

/// A short replay of the fixture corpus against the simulator.
fn short_run() -> Run {
    let cfg = SimConfig::max();
    let sim = Sim::start(cfg);
    let corpus = fixture("traces-24.jsonl");
    let url = sim.url();
    let args = [
        "run",
        "--url",
        &url,
        "--model",
        "agentx-sim",
        "--input-file",
        corpus.to_str().unwrap(),
        "--random-seed",
        "42",
        "--unsafe-override",
        "--concurrency",
        "3",
        "--benchmark-duration",
        "3",
        "--benchmark-grace-period",
        "10",
        "--stats-interval",
        "0",
    ];
    let r = Run::exec(tempfile::tempdir().unwrap(), &args, &[]);
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
    assert_eq!(check["charts"], 12, "{check}");
    assert_eq!(check["expected"], 12, "{check}");
    let titles = check["titles"].as_array().unwrap();
    let points = check["points"].as_array().unwrap();
    let drawn = check["drawn"].as_array().unwrap();
    let s = r.summary();
    let failed = s["summary"]["requests_failed"].as_u64().unwrap()
        + s["summary"]["context_overflows"].as_u64().unwrap();
    for i in 0..12 {
        let title = titles[i].as_str().unwrap();
        let n = points[i].as_u64().unwrap();
        // The simulator serves vLLM's metrics, so the server panels have data too; the errors
        // panel has points only when a request failed (it then says "no data").
        if title == "errors" && failed == 0 {
            assert_eq!(n, 0, "{check}");
            continue;
        }
        assert!(n > 0, "chart {title:?} has no data points: {check}");
        assert!(
            drawn[i].as_u64().unwrap() > 0,
            "chart {title:?} painted nothing: {check}"
        );
    }
    assert!(titles.iter().any(|t| t == "TTFT (mean per second)"));
}
