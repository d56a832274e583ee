//! Two sweeps side by side (`sweep --compare`): the per-concurrency figures of each, their point
//! ratios, and the overlay's JSON, CSV, chart and page. The verdicts with intervals are
//! [`crate::compare`]'s.

use super::*;

/// The figures a comparison puts side by side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct Figures {
    /// Total tokens/s, per GPU when the comparison is (see [`Comparison::throughput_per_gpu`]).
    pub(crate) throughput: Option<f64>,
    /// Tokens per second a user sees (`1000 / ITL p50`).
    pub(crate) interactivity: Option<f64>,
    /// Median time to first token, milliseconds.
    pub(crate) ttft_p50_ms: Option<f64>,
    /// 90th-percentile time to first token, milliseconds.
    pub(crate) ttft_p90_ms: Option<f64>,
    /// Median inter-token latency, milliseconds.
    pub(crate) itl_p50_ms: Option<f64>,
    /// 90th-percentile request latency, milliseconds.
    pub(crate) e2e_p90_ms: Option<f64>,
    /// The server's prefix-cache hit rate (0-1), when it exports one.
    pub(crate) server_cache_hit_rate: Option<f64>,
}

impl Figures {
    fn of(point: &Point, per_gpu: bool) -> Figures {
        if !point.done() {
            return Figures::default();
        }
        Figures {
            throughput: finite(throughput(point, per_gpu)),
            interactivity: finite(point.interactivity),
            ttft_p50_ms: finite(point.ttft_ms.p50),
            ttft_p90_ms: finite(point.ttft_ms.p90),
            itl_p50_ms: finite(point.itl_ms.p50),
            e2e_p90_ms: finite(point.e2e_ms.p90),
            server_cache_hit_rate: finite(point.server_cache_hit_rate),
        }
    }

    /// `(name, value)` in the comparison's column order.
    fn fields(&self) -> [(&'static str, Option<f64>); 7] {
        [
            ("throughput", self.throughput),
            ("interactivity", self.interactivity),
            ("ttft_p50_ms", self.ttft_p50_ms),
            ("ttft_p90_ms", self.ttft_p90_ms),
            ("itl_p50_ms", self.itl_p50_ms),
            ("e2e_p90_ms", self.e2e_p90_ms),
            ("server_cache_hit_rate", self.server_cache_hit_rate),
        ]
    }
}

/// `b / a` when both are known and `a` is not zero.
pub(super) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if a != 0.0 => Some(b / a).filter(|r| r.is_finite()),
        _ => None,
    }
}

/// One concurrency both sweeps ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct CompareRow {
    /// The concurrency (lanes).
    pub(crate) concurrency: u32,
    /// How sweep A's point ended.
    pub(crate) status_a: PointStatus,
    /// How sweep B's point ended.
    pub(crate) status_b: PointStatus,
    /// Sweep A's figures.
    pub(crate) a: Figures,
    /// Sweep B's figures.
    pub(crate) b: Figures,
    /// B / A of each figure (none where either is unknown or failed).
    pub(crate) ratio: Figures,
}

/// Two sweeps point by point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Sweep A's label (its directory's name).
    pub(crate) label_a: String,
    /// Sweep B's label.
    pub(crate) label_b: String,
    /// Throughput is per GPU: both sweeps know their GPU count.
    pub(crate) throughput_per_gpu: bool,
    /// One row per concurrency in both, in concurrency order.
    pub(crate) rows: Vec<CompareRow>,
    /// Concurrencies only sweep A ran.
    pub(crate) only_a: Vec<u32>,
    /// Concurrencies only sweep B ran.
    pub(crate) only_b: Vec<u32>,
    /// What the rows leave out, in words.
    pub notes: Vec<String>,
}

/// Compares sweep B with sweep A: one row per concurrency present in both (the last point of a
/// concurrency counts), with the ratios B/A.
pub fn compare(sweep_a: &Sweep, sweep_b: &Sweep, label_a: &str, label_b: &str) -> Comparison {
    let gpu = per_gpu(&[sweep_a, sweep_b]);
    let by_conc = |s: &Sweep| -> BTreeMap<u32, Point> {
        s.points
            .iter()
            .map(|p| (p.concurrency, p.clone()))
            .collect()
    };
    let (points_a, points_b) = (by_conc(sweep_a), by_conc(sweep_b));
    let mut comparison = Comparison {
        label_a: label_a.into(),
        label_b: label_b.into(),
        throughput_per_gpu: gpu,
        rows: Vec::new(),
        only_a: points_a
            .keys()
            .filter(|k| !points_b.contains_key(k))
            .copied()
            .collect(),
        only_b: points_b
            .keys()
            .filter(|k| !points_a.contains_key(k))
            .copied()
            .collect(),
        notes: Vec::new(),
    };
    if !gpu {
        comparison.notes.push(format!(
            "throughput is total tokens/s, not per GPU: {} without --gpus",
            match (sweep_a.inputs.gpus, sweep_b.inputs.gpus) {
                (None, None) => "both sweeps ran".to_owned(),
                (None, _) => format!("{label_a} ran"),
                _ => format!("{label_b} ran"),
            }
        ));
    }
    for (label, only) in [(label_a, &comparison.only_a), (label_b, &comparison.only_b)] {
        for k in only {
            comparison
                .notes
                .push(format!("concurrency {k} only in {label}: not compared"));
        }
    }
    for (k, x) in &points_a {
        let Some(point_b) = points_b.get(k) else {
            continue;
        };
        for (label, p) in [(label_a, x), (label_b, point_b)] {
            if !p.done() {
                comparison.notes.push(format!(
                    "concurrency {k} failed in {label}: {}",
                    p.error.as_deref().unwrap_or("no reason recorded")
                ));
            }
        }
        let (figures_a, figures_b) = (Figures::of(x, gpu), Figures::of(point_b, gpu));
        comparison.rows.push(CompareRow {
            concurrency: *k,
            status_a: x.status,
            status_b: point_b.status,
            ratio: Figures {
                throughput: ratio(figures_a.throughput, figures_b.throughput),
                interactivity: ratio(figures_a.interactivity, figures_b.interactivity),
                ttft_p50_ms: ratio(figures_a.ttft_p50_ms, figures_b.ttft_p50_ms),
                ttft_p90_ms: ratio(figures_a.ttft_p90_ms, figures_b.ttft_p90_ms),
                itl_p50_ms: ratio(figures_a.itl_p50_ms, figures_b.itl_p50_ms),
                e2e_p90_ms: ratio(figures_a.e2e_p90_ms, figures_b.e2e_p90_ms),
                server_cache_hit_rate: ratio(
                    figures_a.server_cache_hit_rate,
                    figures_b.server_cache_hit_rate,
                ),
            },
            a: figures_a,
            b: figures_b,
        });
    }
    comparison
}

impl Comparison {
    /// One row per compared concurrency: each figure of A, of B and the ratio.
    pub fn csv(&self) -> String {
        let mut out = String::from("concurrency,status_a,status_b");
        for (name, _) in Figures::default().fields() {
            let _ = write!(out, ",{name}_a,{name}_b,{name}_ratio");
        }
        out.push('\n');
        let fmt_num = |x: Option<f64>| x.map(|v| format!("{v:.6}")).unwrap_or_default();
        for r in &self.rows {
            let _ = write!(
                out,
                "{},{},{}",
                r.concurrency,
                status(r.status_a),
                status(r.status_b)
            );
            for ((a, b), q) in r.a.fields().iter().zip(r.b.fields()).zip(r.ratio.fields()) {
                let _ = write!(out, ",{},{},{}", fmt_num(a.1), fmt_num(b.1), fmt_num(q.1));
            }
            out.push('\n');
        }
        out
    }
}

/// The page of a comparison: the ratios, the figures of both and the two views overlaid.
pub(crate) fn compare_page(comparison: &Comparison, sweep_a: &Sweep, sweep_b: &Sweep) -> Page {
    let (label_a, label_b) = (comparison.label_a.as_str(), comparison.label_b.as_str());
    let tput = if comparison.throughput_per_gpu {
        "tokens/s/GPU"
    } else {
        "tokens/s"
    };
    let ratio_cell = |v: Option<f64>| v.map_or("-".into(), |r| format!("{r:.3}"));
    let mut ratios = Vec::new();
    let mut values = Vec::new();
    for r in &comparison.rows {
        let mut row = vec![
            r.concurrency.to_string(),
            status(r.status_a).to_owned(),
            status(r.status_b).to_owned(),
        ];
        row.extend(r.ratio.fields().iter().map(|f| ratio_cell(f.1)));
        ratios.push(row);
        values.push(vec![
            r.concurrency.to_string(),
            num(r.a.throughput, 0),
            num(r.b.throughput, 0),
            num(r.a.interactivity, 1),
            num(r.b.interactivity, 1),
            num(r.a.ttft_p90_ms, 1),
            num(r.b.ttft_p90_ms, 1),
            num(r.a.itl_p50_ms, 2),
            num(r.b.itl_p50_ms, 2),
            pct(r.a.server_cache_hit_rate),
            pct(r.b.server_cache_hit_rate),
        ]);
    }
    let mut ratio_header = strs([
        "concurrency",
        "status A",
        "status B",
        "",
        "interactivity",
        "TTFT p50",
        "TTFT p90",
        "ITL p50",
        "E2E p90",
        "server cache hit",
    ]);
    ratio_header[3] = tput.into();
    let mut tables = vec![
        Table::kv(
            "Compared",
            vec![
                ("A", label_a.to_owned()),
                ("B", label_b.to_owned()),
                ("throughput", tput.to_owned()),
            ],
        ),
        Table {
            title: "B / A".into(),
            header: ratio_header,
            rows: ratios,
            links: Vec::new(),
        },
        Table {
            title: "A and B (latencies in ms)".into(),
            header: vec![
                "concurrency".into(),
                format!("{tput} A"),
                format!("{tput} B"),
                "tokens/s/user A".into(),
                "tokens/s/user B".into(),
                "TTFT p90 A".into(),
                "TTFT p90 B".into(),
                "ITL p50 A".into(),
                "ITL p50 B".into(),
                "server cache hit A".into(),
                "server cache hit B".into(),
            ],
            rows: values,
            links: Vec::new(),
        },
    ];
    if !comparison.notes.is_empty() {
        tables.push(Table {
            title: "Notes".into(),
            header: strs(["note"]),
            rows: comparison.notes.iter().map(|n| vec![n.clone()]).collect(),
            links: Vec::new(),
        });
    }
    Page {
        title: format!("agentx sweep comparison: {label_b} / {label_a}"),
        subtitle: format!(
            "A = {label_a} · B = {label_b} · {} concurrencies in common",
            comparison.rows.len()
        ),
        verdict: None,
        tables,
        charts: charts(&[(label_a, sweep_a), (label_b, sweep_b)]),
        charts_heading: Some("Sweeps overlaid".into()),
        gantt: None,
    }
}

/// A directory's label: its name, or its last two components when both names are the same.
pub(super) fn labels(dir_a: &Path, dir_b: &Path) -> (String, String) {
    let abs = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_owned());
    let (dir_a, dir_b) = (abs(dir_a), abs(dir_b));
    let name = |p: &Path, n: usize| {
        let parts: Vec<String> = p
            .components()
            .rev()
            .take(n)
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        parts.into_iter().rev().collect::<Vec<_>>().join("/")
    };
    let (label_a, label_b) = (name(&dir_a, 1), name(&dir_b, 1));
    if label_a != label_b {
        return (label_a, label_b);
    }
    let (la2, lb2) = (name(&dir_a, 2), name(&dir_b, 2));
    if la2 != lb2 {
        (la2, lb2)
    } else {
        (format!("A {label_a}"), format!("B {label_b}"))
    }
}

/// `sweep --compare DIR_A DIR_B`: reads both sweeps and writes `sweep_compare.{json,csv,png,html}`
/// into `out` (created when missing). Labels are the directories' names.
pub fn write_compare(dir_a: &Path, dir_b: &Path, out: &Path) -> Result<Vec<PathBuf>, ViewError> {
    let sweep_a = read_sweep(dir_a)?;
    let sweep_b = read_sweep(dir_b)?;
    let (label_a, label_b) = labels(dir_a, dir_b);
    let comparison = compare(&sweep_a, &sweep_b, &label_a, &label_b);
    if comparison.rows.is_empty() {
        let conc = |s: &Sweep| {
            let mut concurrencies: Vec<u32> = s.points.iter().map(|p| p.concurrency).collect();
            concurrencies.sort_unstable();
            concurrencies.dedup();
            concurrencies
        };
        return Err(ViewError::NoCommonPoints {
            label_a,
            label_b,
            conc_a: conc(&sweep_a),
            conc_b: conc(&sweep_b),
        });
    }
    let out = Root::create(out).map_err(|source| ViewError::Write {
        path: out.to_owned(),
        source,
    })?;
    let json = serde_json::to_string_pretty(&comparison).unwrap_or_default() + "\n";
    let png = render_png(
        &[(&label_a, &sweep_a), (&label_b, &sweep_b)],
        PNG_WIDTH,
        PNG_HEIGHT,
    )?;
    let page = html::render_page(&compare_page(&comparison, &sweep_a, &sweep_b));
    Ok(vec![
        write_file(&out, COMPARE_JSON, json.as_bytes())?,
        write_file(&out, COMPARE_CSV, comparison.csv().as_bytes())?,
        write_file(&out, COMPARE_PNG, &png)?,
        write_file(&out, COMPARE_HTML, page.as_bytes())?,
    ])
}
