//! Two sweeps side by side (`agentx-host compare`): the per-concurrency figures of each, their ratios,
//! and the comparison's JSON, CSV, chart and page.

use super::*;

/// The figures a comparison puts side by side.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Figures {
    /// Total tokens/s, per GPU when the comparison is (see [`Comparison::throughput_per_gpu`]).
    pub throughput: Option<f64>,
    pub interactivity: Option<f64>,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p90_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub e2e_p90_ms: Option<f64>,
    pub server_cache_hit_rate: Option<f64>,
}

impl Figures {
    fn of(p: &Point, per_gpu: bool) -> Figures {
        if !p.done() {
            return Figures::default();
        }
        Figures {
            throughput: finite(throughput(p, per_gpu)),
            interactivity: finite(p.interactivity),
            ttft_p50_ms: finite(p.ttft_ms.p50),
            ttft_p90_ms: finite(p.ttft_ms.p90),
            itl_p50_ms: finite(p.itl_ms.p50),
            e2e_p90_ms: finite(p.e2e_ms.p90),
            server_cache_hit_rate: finite(p.server_cache_hit_rate),
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
pub struct CompareRow {
    pub concurrency: u32,
    pub status_a: PointStatus,
    pub status_b: PointStatus,
    pub a: Figures,
    pub b: Figures,
    /// B / A of each figure (none where either is unknown or failed).
    pub ratio: Figures,
}

/// Two sweeps point by point.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub label_a: String,
    pub label_b: String,
    /// Throughput is per GPU: both sweeps know their GPU count.
    pub throughput_per_gpu: bool,
    /// One row per concurrency in both, in concurrency order.
    pub rows: Vec<CompareRow>,
    /// Concurrencies only one sweep ran.
    pub only_a: Vec<u32>,
    pub only_b: Vec<u32>,
    /// What the rows leave out, in words.
    pub notes: Vec<String>,
}

/// Compares sweep B with sweep A: one row per concurrency present in both (the last point of a
/// concurrency counts), with the ratios B/A.
pub fn compare(a: &Sweep, b: &Sweep, label_a: &str, label_b: &str) -> Comparison {
    let gpu = per_gpu(&[a, b]);
    let by_conc = |s: &Sweep| -> BTreeMap<u32, Point> {
        s.points
            .iter()
            .map(|p| (p.concurrency, p.clone()))
            .collect()
    };
    let (pa, pb) = (by_conc(a), by_conc(b));
    let mut c = Comparison {
        label_a: label_a.into(),
        label_b: label_b.into(),
        throughput_per_gpu: gpu,
        rows: Vec::new(),
        only_a: pa.keys().filter(|k| !pb.contains_key(k)).copied().collect(),
        only_b: pb.keys().filter(|k| !pa.contains_key(k)).copied().collect(),
        notes: Vec::new(),
    };
    if !gpu {
        c.notes.push(format!(
            "throughput is total tokens/s, not per GPU: {} without --gpus",
            match (a.inputs.gpus, b.inputs.gpus) {
                (None, None) => "both sweeps ran".to_owned(),
                (None, _) => format!("{label_a} ran"),
                _ => format!("{label_b} ran"),
            }
        ));
    }
    for (label, only) in [(label_a, &c.only_a), (label_b, &c.only_b)] {
        for k in only {
            c.notes
                .push(format!("concurrency {k} only in {label}: not compared"));
        }
    }
    for (k, x) in &pa {
        let Some(y) = pb.get(k) else { continue };
        for (label, p) in [(label_a, x), (label_b, y)] {
            if !p.done() {
                c.notes.push(format!(
                    "concurrency {k} failed in {label}: {}",
                    p.error.as_deref().unwrap_or("no reason recorded")
                ));
            }
        }
        let (fa, fb) = (Figures::of(x, gpu), Figures::of(y, gpu));
        c.rows.push(CompareRow {
            concurrency: *k,
            status_a: x.status,
            status_b: y.status,
            ratio: Figures {
                throughput: ratio(fa.throughput, fb.throughput),
                interactivity: ratio(fa.interactivity, fb.interactivity),
                ttft_p50_ms: ratio(fa.ttft_p50_ms, fb.ttft_p50_ms),
                ttft_p90_ms: ratio(fa.ttft_p90_ms, fb.ttft_p90_ms),
                itl_p50_ms: ratio(fa.itl_p50_ms, fb.itl_p50_ms),
                e2e_p90_ms: ratio(fa.e2e_p90_ms, fb.e2e_p90_ms),
                server_cache_hit_rate: ratio(fa.server_cache_hit_rate, fb.server_cache_hit_rate),
            },
            a: fa,
            b: fb,
        });
    }
    c
}

impl Comparison {
    /// One row per compared concurrency: each figure of A, of B and the ratio.
    pub fn csv(&self) -> String {
        let mut out = String::from("concurrency,status_a,status_b");
        for (name, _) in Figures::default().fields() {
            let _ = write!(out, ",{name}_a,{name}_b,{name}_ratio");
        }
        out.push('\n');
        let f = |x: Option<f64>| x.map(|v| format!("{v:.6}")).unwrap_or_default();
        for r in &self.rows {
            let _ = write!(
                out,
                "{},{},{}",
                r.concurrency,
                status(r.status_a),
                status(r.status_b)
            );
            for ((a, b), q) in r.a.fields().iter().zip(r.b.fields()).zip(r.ratio.fields()) {
                let _ = write!(out, ",{},{},{}", f(a.1), f(b.1), f(q.1));
            }
            out.push('\n');
        }
        out
    }
}

/// The page of a comparison: the ratios, the figures of both and the two views overlaid.
pub fn compare_page(c: &Comparison, a: &Sweep, b: &Sweep) -> Page {
    let (la, lb) = (c.label_a.as_str(), c.label_b.as_str());
    let tput = if c.throughput_per_gpu {
        "tokens/s/GPU"
    } else {
        "tokens/s"
    };
    let ratio_cell = |v: Option<f64>| v.map_or("-".into(), |r| format!("{r:.3}"));
    let mut ratios = Vec::new();
    let mut values = Vec::new();
    for r in &c.rows {
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
                ("A", la.to_owned()),
                ("B", lb.to_owned()),
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
    if !c.notes.is_empty() {
        tables.push(Table {
            title: "Notes".into(),
            header: strs(["note"]),
            rows: c.notes.iter().map(|n| vec![n.clone()]).collect(),
            links: Vec::new(),
        });
    }
    Page {
        title: format!("agentx sweep comparison: {lb} / {la}"),
        subtitle: format!(
            "A = {la} · B = {lb} · {} concurrencies in common",
            c.rows.len()
        ),
        verdict: None,
        tables,
        charts: charts(&[(la, a), (lb, b)]),
        charts_heading: Some("Sweeps overlaid".into()),
    }
}

/// A directory's label: its name, or its last two components when both names are the same.
pub(super) fn labels(a: &Path, b: &Path) -> (String, String) {
    let abs = |p: &Path| p.canonicalize().unwrap_or_else(|_| p.to_owned());
    let (a, b) = (abs(a), abs(b));
    let name = |p: &Path, n: usize| {
        let parts: Vec<String> = p
            .components()
            .rev()
            .take(n)
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        parts.into_iter().rev().collect::<Vec<_>>().join("/")
    };
    let (la, lb) = (name(&a, 1), name(&b, 1));
    if la != lb {
        return (la, lb);
    }
    let (la2, lb2) = (name(&a, 2), name(&b, 2));
    if la2 != lb2 {
        (la2, lb2)
    } else {
        (format!("A {la}"), format!("B {lb}"))
    }
}

/// `sweep --compare DIR_A DIR_B`: reads both sweeps and writes `sweep_compare.{json,csv,png,html}`
/// into `out` (created when missing). Labels are the directories' names.
pub fn write_compare(dir_a: &Path, dir_b: &Path, out: &Path) -> Result<Vec<PathBuf>, ViewError> {
    let a = read_sweep(dir_a)?;
    let b = read_sweep(dir_b)?;
    let (la, lb) = labels(dir_a, dir_b);
    let c = compare(&a, &b, &la, &lb);
    if c.rows.is_empty() {
        let conc = |s: &Sweep| {
            let mut v: Vec<u32> = s.points.iter().map(|p| p.concurrency).collect();
            v.sort_unstable();
            v.dedup();
            v
        };
        return Err(ViewError::NoCommonPoints {
            label_a: la,
            label_b: lb,
            conc_a: conc(&a),
            conc_b: conc(&b),
        });
    }
    let out = Root::create(out).map_err(|source| ViewError::Write {
        path: out.to_owned(),
        source,
    })?;
    let json = serde_json::to_string_pretty(&c).unwrap_or_default() + "\n";
    let png = render_png(&[(&la, &a), (&lb, &b)], PNG_WIDTH, PNG_HEIGHT)?;
    let page = html::render_page(&compare_page(&c, &a, &b));
    Ok(vec![
        write_file(&out, COMPARE_JSON, json.as_bytes())?,
        write_file(&out, COMPARE_CSV, c.csv().as_bytes())?,
        write_file(&out, COMPARE_PNG, &png)?,
        write_file(&out, COMPARE_HTML, page.as_bytes())?,
    ])
}
