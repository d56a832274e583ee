//! What folding one server-metrics page into the scrape log costs, per page: the built-in simulator's
//! `/metrics` page (a vLLM engine's: 193 lines), its values changed from page to page as a server's
//! counters move.
//!
//! - `parse`: `prometheus::parse_page` alone;
//! - `fold in, every line the last page's`: `EndpointLog::ingest_text` in the steady state, where
//!   the page template gives the values without a parse (`scrape_log::page_template`);
//! - `fold in, parsed in full`: the same pages, each with one comment line added or taken away, so
//!   that no page has the shape of the one before: a full parse, the fold, and the new template.
//!
//! Nothing is asserted; run with `cargo bench --bench scrape`.

use std::time::Instant;

use agentx::metrics::prometheus;
use agentx::metrics::scrape_log::{EndpointLog, Fetch, FetchOutcome};
use agentx::sim::SimConfig;

const PAGES: usize = 2_000;

/// The simulator's page, its `n`th variant: every sample's value is another number.
fn variant(page: &str, n: usize) -> String {
    let mut out = String::with_capacity(page.len() + 64);
    for (index, line) in page.lines().enumerate() {
        match line.rsplit_once(' ') {
            Some((key, _)) if !line.starts_with('#') => {
                out.push_str(key);
                out.push_str(&format!(" {}.0\n", (n * 31 + index) % 977));
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

fn fetch(t_ns: u64) -> Fetch {
    Fetch {
        start_ns: t_ns,
        latency_ns: 1,
        outcome: FetchOutcome::Ok { changed: true },
    }
}

/// Microseconds per page of `ingest_text` over `pages`.
fn fold_in(pages: &[String]) -> f64 {
    let mut log = EndpointLog::new("http://127.0.0.1/metrics".into());
    let started = Instant::now();
    for (n, page) in pages.iter().enumerate() {
        log.ingest_text(fetch(n as u64), n as u64, page)
            .expect("the simulator's page parses");
    }
    started.elapsed().as_secs_f64() * 1e6 / pages.len() as f64
}

fn main() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let sim = {
        let _entered = runtime.enter();
        agentx::sim::spawn(SimConfig::default()).expect("start the simulator")
    };
    let page = sim.metrics_text();
    let same_shape: Vec<String> = (0..PAGES).map(|n| variant(&page, n)).collect();
    let reshaped: Vec<String> = same_shape
        .iter()
        .enumerate()
        .map(|(n, text)| match n % 2 {
            0 => text.clone(),
            _ => format!("# page {n}\n{text}"),
        })
        .collect();

    let started = Instant::now();
    for text in &same_shape {
        std::hint::black_box(prometheus::parse_page(text).expect("parses"));
    }
    let parse_us = started.elapsed().as_secs_f64() * 1e6 / PAGES as f64;
    let by_values_us = fold_in(&same_shape);
    let in_full_us = fold_in(&reshaped);
    println!(
        "scrape: the simulator's page, {} lines, {} bytes; {PAGES} pages each",
        page.lines().count(),
        page.len()
    );
    println!("  parse                                    {parse_us:8.1} µs a page");
    println!("  fold in, every line the last page's      {by_values_us:8.1} µs a page");
    println!("  fold in, parsed in full                  {in_full_us:8.1} µs a page");
    println!(
        "  at 3 scrapes a second: {:.2} ms of CPU a second by values, {:.2} ms parsed in full",
        by_values_us * 3.0 / 1e3,
        in_full_us * 3.0 / 1e3
    );
}
