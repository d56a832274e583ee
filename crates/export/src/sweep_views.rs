//! The views of a concurrency sweep, drawn from its `sweep.json` ([`Sweep`]): `sweep_pareto.png`
//! and `report.html` in the sweep's directory ([`write_views`], after every point), and
//! `sweep --compare DIR_A DIR_B`: the B/A ratios of two sweeps point by point ([`compare`]) written as
//! `sweep_compare.{json,csv,png,html}` ([`write_compare`]).
//!
//! The PNG has two panels: throughput (per GPU when the sweep knows its GPU count) against
//! interactivity, one labelled point per concurrency and the Pareto frontier (`sweep::pareto`) as a
//! line through its points; and TTFT p90 against concurrency on a log2 axis. Failed points are left
//! out of both, and a caption says which. It is drawn with `plotters` and the font bundled for
//! [`super::plot`], so it renders the same without any font installed. The pages are
//! `html::render_page` pages with the same two views as interactive charts. This module reads the
//! numbers the sweep's points carry and computes only the ratios of a comparison.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use agentx_record::fsio::Root;

use plotters::prelude::*;
use serde::Serialize;

use super::html::{self, num, pct, Chart, ChartSeries, ChartStyle, Page, Table};
use super::sweep::{self, Point, PointStatus, Sweep, SweepError};

mod compare;

pub use compare::*;

/// The sweep's Pareto view, in its directory.
pub(crate) const PARETO_PNG: &str = "sweep_pareto.png";
/// The sweep's page, in its directory.
pub(crate) const REPORT_HTML: &str = html::HTML_FILE;
/// The files of `sweep --compare`, in its output directory.
pub(crate) const COMPARE_JSON: &str = "sweep_compare.json";
pub(crate) const COMPARE_CSV: &str = "sweep_compare.csv";
/// The comparison's chart.
pub(crate) const COMPARE_PNG: &str = "sweep_compare.png";
/// The comparison's page.
pub const COMPARE_HTML: &str = "sweep_compare.html";

/// The PNGs' size in pixels.
pub(crate) const PNG_WIDTH: u32 = 1600;
pub(crate) const PNG_HEIGHT: u32 = 720;

/// Series colours, the first ones of the HTML charts'.
const COLORS: [RGBColor; 4] = [
    RGBColor(0x09, 0x69, 0xda),
    RGBColor(0xcf, 0x22, 0x2e),
    RGBColor(0x1a, 0x7f, 0x37),
    RGBColor(0x82, 0x50, 0xdf),
];

/// Errors of the sweep's views and of a comparison.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    /// The directory holds no `sweep.json`; holds the directory.
    #[error(
        "not a sweep directory: {} (no sweep.json); pass the --output-artifact-dir of an `agentx-host sweep`",
        .0.display()
    )]
    NotASweep(PathBuf),
    /// `sweep.json` could not be read.
    #[error(transparent)]
    Sweep(#[from] SweepError),
    /// Two compared sweeps share no concurrency.
    #[error(
        "the sweeps have no concurrency in common: {label_a} ran {conc_a:?}, {label_b} ran {conc_b:?}"
    )]
    NoCommonPoints {
        /// Sweep A's label.
        label_a: String,
        /// Sweep B's label.
        label_b: String,
        /// The concurrencies sweep A ran.
        conc_a: Vec<u32>,
        /// The concurrencies sweep B ran.
        conc_b: Vec<u32>,
    },
    /// A chart could not be drawn.
    #[error("cannot draw {what}: {message}")]
    Draw {
        /// The chart.
        what: &'static str,
        /// The plotting library's message.
        message: String,
    },
    /// A file could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Reads `dir/sweep.json`; a directory without one is [`ViewError::NotASweep`].
pub fn read_sweep(dir: &Path) -> Result<Sweep, ViewError> {
    Sweep::read(dir)?.ok_or_else(|| ViewError::NotASweep(dir.to_owned()))
}

/// Whether throughput is shown per GPU: every sweep knows its GPU count.
fn per_gpu(sweeps: &[&Sweep]) -> bool {
    !sweeps.is_empty() && sweeps.iter().all(|s| s.inputs.gpus.is_some())
}

fn throughput(point: &Point, per_gpu: bool) -> Option<f64> {
    if per_gpu {
        point.total_token_throughput_per_gpu
    } else {
        point.total_token_throughput
    }
}

fn throughput_label(per_gpu: bool) -> &'static str {
    if per_gpu {
        "total tokens/s per GPU"
    } else {
        "total tokens/s"
    }
}

const INTERACTIVITY_LABEL: &str = "interactivity (tokens/s/user)";

fn finite(value: Option<f64>) -> Option<f64> {
    value.filter(|x| x.is_finite())
}

/// What the views draw of one sweep: the points that did not fail, by concurrency.
#[derive(Debug, Clone, Default, PartialEq)]
struct Views {
    /// `(interactivity, throughput, concurrency)` of every drawable point.
    pareto: Vec<(f64, f64, u32)>,
    /// The frontier's points in interactivity order.
    frontier: Vec<(f64, f64)>,
    /// `(concurrency, TTFT p90 ms)` in concurrency order.
    ttft_p90: Vec<(u32, f64)>,
    /// Concurrencies of failed points.
    failed: Vec<u32>,
}

fn views(sweep: &Sweep, per_gpu: bool) -> Views {
    let mut out = Views::default();
    let mut pts: Vec<&Point> = sweep.points.iter().collect();
    pts.sort_by_key(|p| p.concurrency);
    for p in &pts {
        if !p.done() {
            out.failed.push(p.concurrency);
            continue;
        }
        if let (Some(x), Some(y)) = (finite(p.interactivity), finite(throughput(p, per_gpu))) {
            out.pareto.push((x, y, p.concurrency));
        }
        if let Some(ttft) = finite(p.ttft_ms.p90) {
            out.ttft_p90.push((p.concurrency, ttft));
        }
    }
    // The frontier of the drawn axes: `pareto` takes per-GPU throughput when a point has it.
    let drawable: Vec<Point> = sweep
        .points
        .iter()
        .filter(|p| p.done())
        .map(|p| {
            let mut adjusted = p.clone();
            adjusted.total_token_throughput = finite(throughput(p, per_gpu));
            adjusted.total_token_throughput_per_gpu = None;
            adjusted.interactivity = finite(p.interactivity);
            adjusted
        })
        .collect();
    out.frontier = sweep::pareto(&drawable)
        .into_iter()
        .filter_map(|i| {
            Some((
                drawable[i].interactivity?,
                drawable[i].total_token_throughput?,
            ))
        })
        .collect();
    out
}

fn draw_err<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> ViewError {
    move |e| ViewError::Draw {
        what,
        message: format!("{e:?}"),
    }
}

/// Draws the two panels of one or more labelled sweeps (one colour each, a legend when more than
/// one) and returns the PNG bytes.
pub(crate) fn render_png(
    sweeps: &[(&str, &Sweep)],
    width: u32,
    height: u32,
) -> Result<Vec<u8>, ViewError> {
    let plot_err = draw_err::<Box<dyn std::error::Error>>("the sweep plot");
    plotters::style::register_font("sans-serif", FontStyle::Normal, super::plot::FONT).map_err(
        |_| ViewError::Draw {
            what: "the sweep plot",
            message: "the bundled font does not parse".into(),
        },
    )?;
    let all: Vec<&Sweep> = sweeps.iter().map(|(_, s)| *s).collect();
    let gpu = per_gpu(&all);
    let all_views: Vec<(&str, Views)> = sweeps.iter().map(|(l, s)| (*l, views(s, gpu))).collect();

    let mut buf = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| plot_err(Box::new(x)))?;
        let (top, body) = root.split_vertically(40);
        top.draw(&Text::new(
            caption(&all_views),
            (12, 12),
            ("sans-serif", 16).into_font().color(&BLACK),
        ))
        .map_err(|x| plot_err(Box::new(x)))?;
        let panels = body.split_evenly((1, 2));
        // (a) throughput against interactivity, with the frontier.
        draw_frontier(&panels[0], &all_views, gpu)?;
        // (b) TTFT p90 against concurrency, log2 x.
        draw_ttft(&panels[1], &all_views)?;
        root.present().map_err(|x| plot_err(Box::new(x)))?;
    }
    encode_png(&buf, width, height)
}

/// The line above the panels: how many points each sweep shows, and the failed ones.
fn caption(labelled_views: &[(&str, Views)]) -> String {
    let mut caption = String::new();
    for (label, v) in labelled_views {
        let point_count = v.pareto.len().max(v.ttft_p90.len());
        let total = point_count + v.failed.len();
        if !caption.is_empty() {
            caption.push_str("; ");
        }
        if !label.is_empty() {
            let _ = write!(caption, "{label}: ");
        }
        let _ = write!(caption, "{point_count} of {total} points");
        if !v.failed.is_empty() {
            let failed_list: Vec<String> = v.failed.iter().map(|c| format!("c={c}")).collect();
            let _ = write!(caption, " (failed, not shown: {})", failed_list.join(", "));
        }
    }
    caption
}

type Area<'b> = DrawingArea<BitMapBackend<'b>, plotters::coord::Shift>;

/// Throughput against interactivity, with each sweep's frontier.
fn draw_frontier(
    area: &Area<'_>,
    labelled_views: &[(&str, Views)],
    gpu: bool,
) -> Result<(), ViewError> {
    let plot_err = draw_err::<Box<dyn std::error::Error>>("the sweep plot");
    let legend = labelled_views.len() > 1;
    let xmax = labelled_views
        .iter()
        .flat_map(|(_, v)| v.pareto.iter().map(|p| p.0))
        .fold(0.0f64, f64::max);
    let ymax = labelled_views
        .iter()
        .flat_map(|(_, v)| v.pareto.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let xmax = if xmax > 0.0 { xmax * 1.15 } else { 1.0 };
    let ymax = if ymax > 0.0 { ymax * 1.15 } else { 1.0 };
    let ylabel = throughput_label(gpu);
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{ylabel} vs interactivity"), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(0f64..xmax, 0f64..ymax)
        .map_err(|x| plot_err(Box::new(x)))?;
    chart
        .configure_mesh()
        .x_desc(INTERACTIVITY_LABEL)
        .y_desc(ylabel)
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|x| plot_err(Box::new(x)))?;
    for (i, (label, v)) in labelled_views.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let frontier = chart
            .draw_series(LineSeries::new(
                v.frontier.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|x| plot_err(Box::new(x)))?;
        if legend {
            frontier.label(label.to_string()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
            });
        }
        chart
            .draw_series(v.pareto.iter().map(|&(x, y, c)| {
                EmptyElement::at((x, y))
                    + Circle::new((0, 0), 5, color.filled())
                    + Text::new(
                        format!("c={c}"),
                        (7, -16),
                        ("sans-serif", 13).into_font().color(&color),
                    )
            }))
            .map_err(|x| plot_err(Box::new(x)))?;
    }
    if legend {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|x| plot_err(Box::new(x)))?;
    }
    if labelled_views.iter().all(|(_, v)| v.pareto.is_empty()) {
        no_data(area).map_err(|x| plot_err(Box::new(x)))?;
    }
    Ok(())
}

/// TTFT p90 against concurrency (log2 x).
fn draw_ttft(area: &Area<'_>, labelled_views: &[(&str, Views)]) -> Result<(), ViewError> {
    let plot_err = draw_err::<Box<dyn std::error::Error>>("the sweep plot");
    let legend = labelled_views.len() > 1;
    let concurrencies: Vec<f64> = labelled_views
        .iter()
        .flat_map(|(_, v)| v.ttft_p90.iter().map(|p| f64::from(p.0.max(1)).log2()))
        .collect();
    let x_min = concurrencies.iter().copied().fold(f64::INFINITY, f64::min);
    let x_max = concurrencies
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    let (x_min, x_max) = if x_min.is_finite() {
        (x_min - 0.5, x_max + 0.5)
    } else {
        (-0.5, 0.5)
    };
    let tmax = labelled_views
        .iter()
        .flat_map(|(_, v)| v.ttft_p90.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let tmax = if tmax > 0.0 { tmax * 1.15 } else { 1.0 };
    let mut chart = ChartBuilder::on(area)
        .caption("TTFT p90 vs concurrency", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(44)
        .y_label_area_size(80)
        .build_cartesian_2d(x_min..x_max, 0f64..tmax)
        .map_err(|x| plot_err(Box::new(x)))?;
    let pow2 = |x: &f64| {
        if (x - x.round()).abs() < 1e-9 && *x >= 0.0 {
            format!("{}", 2f64.powi(x.round() as i32))
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .x_desc("concurrency (log2)")
        .y_desc("TTFT p90 (ms)")
        .x_labels(((x_max - x_min).ceil() as usize + 1).max(2))
        .x_label_formatter(&pow2)
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|x| plot_err(Box::new(x)))?;
    for (i, (label, v)) in labelled_views.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points: Vec<(f64, f64)> = v
            .ttft_p90
            .iter()
            .map(|&(c, t)| (f64::from(c.max(1)).log2(), t))
            .collect();
        let line = chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|x| plot_err(Box::new(x)))?;
        if legend {
            line.label(label.to_string()).legend(move |(x, y)| {
                Rectangle::new([(x, y - 5), (x + 14, y + 5)], color.filled())
            });
        }
        chart
            .draw_series(
                points
                    .iter()
                    .map(|&(x, y)| Circle::new((x, y), 5, color.filled())),
            )
            .map_err(|x| plot_err(Box::new(x)))?;
    }
    if legend {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()
            .map_err(|x| plot_err(Box::new(x)))?;
    }
    if labelled_views.iter().all(|(_, v)| v.ttft_p90.is_empty()) {
        no_data(area).map_err(|x| plot_err(Box::new(x)))?;
    }
    Ok(())
}

/// The RGB buffer as PNG bytes.
fn encode_png(buf: &[u8], width: u32, height: u32) -> Result<Vec<u8>, ViewError> {
    let plot_err = draw_err::<Box<dyn std::error::Error>>("the sweep plot");
    let mut png_bytes = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut png_bytes, width, height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().map_err(|x| plot_err(Box::new(x)))?;
        writer
            .write_image_data(buf)
            .map_err(|x| plot_err(Box::new(x)))?;
    }
    Ok(png_bytes)
}

fn no_data<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
) -> Result<(), DrawingAreaErrorKind<DB::ErrorType>> {
    let (width, height) = area.dim_in_pixel();
    area.draw(&Text::new(
        "no completed points",
        (width as i32 / 2 - 80, height as i32 / 2),
        ("sans-serif", 16).into_font().color(&RED),
    ))
}

fn status(point_status: PointStatus) -> &'static str {
    match point_status {
        PointStatus::Completed => "completed",
        PointStatus::Resumed => "resumed",
        PointStatus::Failed => "failed",
    }
}

fn strs<const N: usize>(strings: [&str; N]) -> Vec<String> {
    strings.map(str::to_owned).to_vec()
}

/// The two interactive views of one or more labelled sweeps: the Pareto view (points and frontier
/// per sweep) and TTFT p90 against concurrency.
fn charts(sweeps: &[(&str, &Sweep)]) -> Vec<Chart> {
    let all: Vec<&Sweep> = sweeps.iter().map(|(_, s)| *s).collect();
    let gpu = per_gpu(&all);
    let one = sweeps.len() == 1;
    let name = |label: &str, what: &str| {
        if one {
            what.to_owned()
        } else {
            format!("{label} {what}")
        }
    };
    let mut pareto = Vec::new();
    let mut ttft = Vec::new();
    // The job view where some point counted jobs (files from before jobs were counted have none).
    let has_jobs = sweeps
        .iter()
        .any(|(_, s)| s.points.iter().any(|p| p.jobs_per_hour_per_user.is_some()));
    for (label, s) in sweeps {
        let chart_views = views(s, gpu);
        pareto.push(ChartSeries {
            label: name(label, "points"),
            points: chart_views.pareto.iter().map(|p| (p.0, p.1)).collect(),
            style: None,
        });
        pareto.push(ChartSeries {
            label: name(label, "Pareto frontier"),
            points: chart_views.frontier.clone(),
            style: Some(ChartStyle::Lines),
        });
        ttft.push(ChartSeries {
            label: name(label, "TTFT p90 (ms)"),
            points: chart_views
                .ttft_p90
                .iter()
                .map(|&(c, t)| (f64::from(c.max(1)), t))
                .collect(),
            style: None,
        });
    }
    vec![
        Chart {
            title: format!("{} vs interactivity", throughput_label(gpu)),
            x_label: INTERACTIVITY_LABEL.into(),
            y_label: throughput_label(gpu).into(),
            style: ChartStyle::Points,
            series: pareto,
            group: None,
            x_log2: false,
        },
        Chart {
            title: "TTFT p90 vs concurrency".into(),
            x_label: "concurrency (log2)".into(),
            y_label: "TTFT p90 (ms)".into(),
            style: ChartStyle::Lines,
            series: ttft,
            group: None,
            x_log2: true,
        },
    ]
    .into_iter()
    .chain(has_jobs.then(|| jobs_chart(sweeps, gpu, &name)))
    .collect()
}

/// The job view: whole jobs per hour per GPU (or in all) against jobs per hour per user, one
/// point per concurrency and the frontier (`sweep::jobs_pareto`), beside the token view.
fn jobs_chart(sweeps: &[(&str, &Sweep)], gpu: bool, name: &dyn Fn(&str, &str) -> String) -> Chart {
    let y_label = if gpu { "jobs/h per GPU" } else { "jobs/h" };
    let mut series = Vec::new();
    for (label, sweep) in sweeps {
        let done: Vec<Point> = sweep.points.iter().filter(|p| p.done()).cloned().collect();
        let coords = |p: &Point| -> Option<(f64, f64)> {
            let y = if gpu {
                p.jobs_per_hour_per_gpu
            } else {
                p.jobs_per_hour
            };
            Some((finite(p.jobs_per_hour_per_user)?, finite(y)?))
        };
        series.push(ChartSeries {
            label: name(label, "points"),
            points: done.iter().filter_map(coords).collect(),
            style: None,
        });
        series.push(ChartSeries {
            label: name(label, "Pareto frontier"),
            points: sweep::jobs_pareto(&done)
                .into_iter()
                .filter_map(|i| coords(&done[i]))
                .collect(),
            style: Some(ChartStyle::Lines),
        });
    }
    Chart {
        title: format!("{y_label} vs jobs/h per user"),
        x_label: "jobs/h per user (3,600 s / mean job wall time)".into(),
        y_label: y_label.into(),
        style: ChartStyle::Points,
        series,
        group: None,
        x_log2: false,
    }
}

/// The page of a sweep: what was swept, one row per point (with a link to the point's own
/// `report.html` where `dir` has it) and the two views.
pub(crate) fn sweep_page(sweep: &Sweep, dir: &Path) -> Page {
    let gpu = per_gpu(&[sweep]);
    let inputs = &sweep.inputs;
    let conc: Vec<String> = inputs.concurrency.iter().map(u32::to_string).collect();
    let what = Table::kv(
        "Sweep",
        vec![
            ("concurrency", conc.join(", ")),
            ("seed", inputs.seed.to_string()),
            ("GPUs", inputs.gpus.map_or("-".into(), |g| g.to_string())),
            ("scenario sha256", inputs.scenario_sha256.clone()),
            ("dataset digest", inputs.dataset_key.clone()),
            ("result filename", inputs.result_filename.clone()),
            ("command", inputs.argv.join(" ")),
        ],
    );
    let mut pts: Vec<&Point> = sweep.points.iter().collect();
    pts.sort_by_key(|p| p.concurrency);
    let tput = if gpu { "tokens/s/GPU" } else { "tokens/s" };
    let mut rows = Vec::new();
    let mut links = Vec::new();
    for p in &pts {
        let report = format!("{}/{}", p.dir, html::HTML_FILE);
        let has_report = !p.dir.is_empty() && dir.join(&p.dir).join(html::HTML_FILE).is_file();
        let valid = match (p.done(), p.valid) {
            (false, _) => "-".to_owned(),
            (true, true) => "valid".to_owned(),
            (true, false) if p.invalid_reasons.is_empty() => "not valid".to_owned(),
            (true, false) => format!("not valid: {}", p.invalid_reasons.join("; ")),
        };
        rows.push(vec![
            p.concurrency.to_string(),
            status(p.status).to_owned(),
            p.requests_ok.to_string(),
            p.requests_failed.to_string(),
            p.context_overflows.to_string(),
            num(throughput(p, gpu), 0),
            num(p.ttft_ms.p50, 1),
            num(p.ttft_ms.p90, 1),
            num(p.ttft_ms.p99, 1),
            num(p.itl_ms.p50, 2),
            num(p.itl_ms.p90, 2),
            num(p.itl_ms.p99, 2),
            num(p.e2e_ms.p50, 0),
            num(p.e2e_ms.p90, 0),
            num(p.e2e_ms.p99, 0),
            num(p.interactivity, 1),
            pct(p.server_cache_hit_rate),
            valid,
            if has_report {
                report.clone()
            } else {
                "-".into()
            },
        ]);
        // The concurrency and the last column link to the point's page.
        let mut row_links = vec![None; rows[rows.len() - 1].len()];
        if has_report {
            row_links[0] = Some(report.clone());
            if let Some(last) = row_links.last_mut() {
                *last = Some(report);
            }
        }
        links.push(row_links);
    }
    let mut header = strs([
        "concurrency",
        "status",
        "ok",
        "failed",
        "overflow",
        "",
        "TTFT p50",
        "TTFT p90",
        "TTFT p99",
        "ITL p50",
        "ITL p90",
        "ITL p99",
        "E2E p50",
        "E2E p90",
        "E2E p99",
        "tokens/s/user",
        "server cache hit",
        "validity",
        "report",
    ]);
    header[5] = tput.into();
    let points = Table {
        title: "Points (latencies in ms)".into(),
        header,
        rows,
        links,
    };
    let mut tables = vec![what, points];
    if let Some(slo) = &sweep.slo {
        tables.push(slo_table(slo));
    }
    let failed: Vec<Vec<String>> = pts
        .iter()
        .filter(|p| !p.done())
        .map(|p| {
            vec![
                p.concurrency.to_string(),
                p.error.clone().unwrap_or_default(),
            ]
        })
        .collect();
    if !failed.is_empty() {
        tables.push(Table {
            title: "Failed points (not charted)".into(),
            header: strs(["concurrency", "error"]),
            rows: failed,
            links: Vec::new(),
        });
    }
    let done = pts.iter().filter(|p| p.done()).count();
    Page {
        title: "agentx sweep".into(),
        subtitle: format!(
            "{done} of {} points done · concurrency {} · seed {}",
            pts.len(),
            conc.join(", "),
            inputs.seed
        ),
        verdict: None,
        tables,
        charts: charts(&[("", sweep)]),
        charts_heading: Some("Throughput, interactivity and latency by concurrency".into()),
        gantt: None,
    }
}

/// `--slo`: each point's verdict and figures, titled with the `--find-max` answer.
fn slo_table(report: &crate::sweep::SloReport) -> Table {
    let names: Vec<String> = report
        .points
        .first()
        .map(|p| p.figures.keys().cloned().collect())
        .unwrap_or_default();
    let mut header = vec!["concurrency".to_string(), "meets the SLO".to_string()];
    header.extend(names.iter().cloned());
    let rows = report
        .points
        .iter()
        .map(|p| {
            let mut row = vec![
                p.concurrency.to_string(),
                if p.meets { "yes" } else { "no" }.to_string(),
            ];
            row.extend(
                names
                    .iter()
                    .map(|n| num(p.figures.get(n).copied().flatten(), 2)),
            );
            row
        })
        .collect();
    let answer = report
        .find_max
        .as_ref()
        .map_or(String::new(), find_max_title);
    Table {
        title: format!("SLO {}{answer}", report.slo),
        header,
        rows,
        links: Vec::new(),
    }
}

/// The `--find-max` answer as the SLO table's title says it: the most concurrent agents, what
/// bound them, the jobs there and the most goodput.
fn find_max_title(found: &crate::sweep::FindMaxAnswer) -> String {
    let mut title = match (found.max_concurrency, found.bracketed) {
        (Some(n), true) => format!(
            ": max concurrent agents {n} ({} does not meet it, bound by {}; resolution {} lanes)",
            found.first_failing.map_or("-".into(), |x| x.to_string()),
            found.bound_by_text(),
            found.resolution
        ),
        (Some(n), false) => format!(": every point met it, up to {n}; the maximum may lie above"),
        (None, _) => ": not even the first point meets it".to_string(),
    };
    if let Some(jobs) = found.jobs_per_hour {
        title.push_str(&format!("; {jobs:.1} jobs/h there"));
    }
    if let Some(agents) = found.agents_per_gpu {
        title.push_str(&format!(", {agents:.2} agents per GPU"));
    }
    if let Some(best) = &found.max_goodput {
        title.push_str(&format!(
            "; the most goodput among the points that meet it: {:.2} requests/s at {}",
            best.goodput, best.concurrency
        ));
    }
    title
}

fn write_file(dir: &Root, name: &str, data: &[u8]) -> Result<PathBuf, ViewError> {
    dir.write_atomic(name, data)
        .map_err(|source| ViewError::Write {
            path: dir.join(name),
            source,
        })
}

/// Writes `sweep_pareto.png` and `report.html` into the sweep's directory; a failure is a warning
/// (the points and `sweep.json` stand). Returns the files written.
pub fn write_views(dir: &Root, sweep: &Sweep) -> Vec<PathBuf> {
    let mut out = Vec::new();
    match render_png(&[("", sweep)], PNG_WIDTH, PNG_HEIGHT)
        .and_then(|png| write_file(dir, PARETO_PNG, &png))
    {
        Ok(p) => out.push(p),
        Err(e) => tracing::warn!("no {PARETO_PNG}: {e}"),
    }
    let page = html::render_page(&sweep_page(sweep, dir.path()));
    match write_file(dir, REPORT_HTML, page.as_bytes()) {
        Ok(p) => out.push(p),
        Err(e) => tracing::warn!("no sweep {REPORT_HTML}: {e}"),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sweep::{SweepInputs, Tail, SCHEMA};

    /// A completed point: interactivity, throughput per GPU (8 GPUs), TTFT p50/p90, ITL p50,
    /// E2E p90 and the server cache hit rate.
    fn pt(
        c: u32,
        intvty: f64,
        per_gpu: f64,
        ttft: (f64, f64),
        itl: f64,
        e2e: f64,
        hit: f64,
    ) -> Point {
        let mut p = Point::failed(c, format!("conc_{c}"), String::new());
        p.status = PointStatus::Completed;
        p.error = None;
        p.requests_ok = 10 * u64::from(c);
        p.interactivity = Some(intvty);
        p.total_token_throughput_per_gpu = Some(per_gpu);
        p.total_token_throughput = Some(per_gpu * 8.0);
        p.ttft_ms = Tail {
            p50: Some(ttft.0),
            p90: Some(ttft.1),
            p99: Some(ttft.1 * 2.0),
        };
        p.itl_ms = Tail {
            p50: Some(itl),
            p90: Some(itl * 1.5),
            p99: Some(itl * 2.0),
        };
        p.e2e_ms = Tail {
            p50: Some(e2e / 2.0),
            p90: Some(e2e),
            p99: Some(e2e * 1.5),
        };
        p.server_cache_hit_rate = Some(hit);
        // Jobs on the token view's scale: per user as interactivity, per GPU a tenth.
        p.jobs_per_hour_per_user = Some(intvty);
        p.jobs_per_hour_per_gpu = Some(per_gpu / 10.0);
        p.jobs_per_hour = Some(per_gpu * 0.8);
        p.valid = true;
        p
    }

    fn sweep(points: Vec<Point>, gpus: Option<u32>) -> Sweep {
        Sweep {
            schema: SCHEMA.into(),
            inputs: SweepInputs {
                argv: vec!["sweep".into(), "--concurrency".into(), "1,4,16,64".into()],
                concurrency: points.iter().map(|p| p.concurrency).collect(),
                seed: 42,
                scenario_sha256: "ab".repeat(32),
                dataset_key: "cd".repeat(32),
                gpus,
                result_filename: "agentx".into(),
            },
            points,
            slo: None,
        }
    }

    /// Four points, conc 16 failed; conc 4 is dominated by none, conc 1/4/64 form the frontier.
    fn sweep_a() -> Sweep {
        sweep(
            vec![
                pt(1, 100.0, 10.0, (50.0, 80.0), 10.0, 1000.0, 0.5),
                pt(4, 80.0, 40.0, (60.0, 100.0), 12.5, 1200.0, 0.6),
                Point::failed(16, "conc_16".into(), "server refused".into()),
                pt(64, 20.0, 150.0, (400.0, 900.0), 50.0, 5000.0, 0.8),
            ],
            Some(8),
        )
    }

    /// Conc 1 and 16 in common with A (16 failed there), 128 only here; 64 only in A.
    fn sweep_b() -> Sweep {
        sweep(
            vec![
                pt(1, 90.0, 15.0, (60.0, 120.0), 11.1, 900.0, 0.6),
                pt(4, 70.0, 30.0, (66.0, 110.0), 14.0, 1500.0, 0.0),
                pt(16, 50.0, 90.0, (150.0, 300.0), 20.0, 2500.0, 0.7),
                pt(128, 10.0, 200.0, (900.0, 2000.0), 100.0, 9000.0, 0.9),
            ],
            Some(8),
        )
    }

    fn decode(png_bytes: &[u8]) -> (u32, u32, Vec<u8>) {
        let dec = png::Decoder::new(png_bytes);
        let mut r = dec.read_info().unwrap();
        let mut buf = vec![0; r.output_buffer_size()];
        let info = r.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    /// Pixels close to a series colour.
    fn painted(rgb: &[u8], c: RGBColor) -> usize {
        rgb.chunks(3)
            .filter(|p| {
                u32::from(p[0].abs_diff(c.0))
                    + u32::from(p[1].abs_diff(c.1))
                    + u32::from(p[2].abs_diff(c.2))
                    < 40
            })
            .count()
    }

    #[test]
    fn views_leave_failed_points_out_and_draw_the_frontier() {
        let v = views(&sweep_a(), true);
        assert_eq!(v.failed, vec![16]);
        assert_eq!(
            v.pareto,
            vec![(100.0, 10.0, 1), (80.0, 40.0, 4), (20.0, 150.0, 64)]
        );
        assert_eq!(v.frontier, vec![(20.0, 150.0), (80.0, 40.0), (100.0, 10.0)]);
        assert_eq!(v.ttft_p90, vec![(1, 80.0), (4, 100.0), (64, 900.0)]);
        // Without GPUs the total throughput is drawn.
        let v = views(&sweep_a(), false);
        assert_eq!(v.pareto[0], (100.0, 80.0, 1));
    }

    #[test]
    fn the_pareto_png_decodes_at_its_size_and_is_drawn() {
        let png_bytes = render_png(&[("", &sweep_a())], PNG_WIDTH, PNG_HEIGHT).unwrap();
        let (w, h, rgb) = decode(&png_bytes);
        assert_eq!((w, h), (PNG_WIDTH, PNG_HEIGHT));
        let not_white = rgb.chunks(3).filter(|p| p != &[255, 255, 255]).count();
        assert!(not_white > 10_000, "{not_white} pixels drawn");
        assert!(painted(&rgb, COLORS[0]) > 200, "the points and lines");
        assert_eq!(painted(&rgb, COLORS[1]), 0, "one sweep, one colour");
        // A sweep with no completed point still renders (saying so).
        let none = sweep(vec![Point::failed(1, "conc_1".into(), "x".into())], None);
        let (w, _, _) = decode(&render_png(&[("", &none)], 400, 300).unwrap());
        assert_eq!(w, 400);
    }

    #[test]
    fn the_compare_png_overlays_both_sweeps_in_two_colours() {
        let (a, b) = (sweep_a(), sweep_b());
        let png_bytes = render_png(&[("a", &a), ("b", &b)], 1200, 600).unwrap();
        let (w, h, rgb) = decode(&png_bytes);
        assert_eq!((w, h), (1200, 600));
        assert!(painted(&rgb, COLORS[0]) > 200);
        assert!(painted(&rgb, COLORS[1]) > 200);
    }

    /// The JSON document of charts in a rendered page.
    fn chart_doc(h: &str) -> serde_json::Value {
        let start = h.find("id=\"agentx-data\">").unwrap() + "id=\"agentx-data\">".len();
        let end = start + h[start..].find("</script>").unwrap();
        serde_json::from_str(&h[start..end]).unwrap()
    }

    #[test]
    fn the_sweep_page_has_every_point_links_and_the_frontier() {
        let dir = tempfile::tempdir().unwrap();
        for c in [1, 4, 64] {
            let d = dir.path().join(format!("conc_{c}"));
            std::fs::create_dir(&d).unwrap();
            std::fs::write(d.join("report.html"), "<html></html>").unwrap();
        }
        let s = sweep_a();
        let files = write_views(&Root::open(dir.path()).unwrap(), &s);
        assert_eq!(
            files,
            vec![dir.path().join(PARETO_PNG), dir.path().join(REPORT_HTML)]
        );
        let h = std::fs::read_to_string(dir.path().join(REPORT_HTML)).unwrap();
        assert!(!h.contains("<script src") && !h.contains("<link"));
        let page = sweep_page(&s, dir.path());
        let points = &page.tables[1];
        assert_eq!(points.rows.len(), 4);
        for (row, c) in points.rows.iter().zip([1, 4, 16, 64]) {
            assert_eq!(row[0], c.to_string());
        }
        assert_eq!(points.header[5], "tokens/s/GPU");
        assert_eq!(points.rows[0][5], "10");
        assert_eq!(points.rows[2][1], "failed");
        assert_eq!(points.rows[3][16], "80.0%");
        for c in [1, 4, 64] {
            assert!(
                h.contains(&format!("<a href=\"conc_{c}/report.html\">")),
                "no link to conc_{c}"
            );
        }
        assert!(
            !h.contains("conc_16/report.html"),
            "the failed point has none"
        );
        assert!(h.contains("server refused"));
        let doc = chart_doc(&h);
        let charts = doc["charts"].as_array().unwrap();
        assert_eq!(charts.len(), 3);
        assert_eq!(charts[2]["title"], "jobs/h per GPU vs jobs/h per user");
        assert_eq!(
            charts[2]["series"][1]["x"],
            serde_json::json!([20, 80, 100])
        );
        assert_eq!(charts[2]["series"][1]["y"], serde_json::json!([15, 4, 1]));
        assert_eq!(charts[0]["style"], "points");
        assert_eq!(charts[0]["series"][0]["label"], "points");
        assert_eq!(charts[0]["series"][1]["label"], "Pareto frontier");
        assert_eq!(
            charts[0]["series"][1]["style"], "lines",
            "the frontier is a line"
        );
        assert_eq!(charts[1]["xlog2"], true);
        assert_eq!(
            charts[0]["series"][1]["x"],
            serde_json::json!([20, 80, 100])
        );
        assert_eq!(
            charts[0]["series"][1]["y"],
            serde_json::json!([150, 40, 10])
        );
        assert_eq!(charts[1]["series"][0]["x"], serde_json::json!([1, 4, 64]));
        assert_eq!(
            charts[1]["series"][0]["y"],
            serde_json::json!([80, 100, 900])
        );
        let (w, h, _) = decode(&std::fs::read(dir.path().join(PARETO_PNG)).unwrap());
        assert_eq!((w, h), (PNG_WIDTH, PNG_HEIGHT));
    }

    #[test]
    fn write_views_warns_and_goes_on_when_it_cannot_write() {
        let dir = tempfile::tempdir().unwrap();
        // Directories where the files should be.
        std::fs::create_dir_all(dir.path().join(PARETO_PNG).join("x")).unwrap();
        std::fs::create_dir_all(dir.path().join(REPORT_HTML).join("x")).unwrap();
        let root = Root::open(dir.path()).unwrap();
        assert!(write_views(&root, &sweep_a()).is_empty());
    }

    #[test]
    fn compare_ratios_by_hand() {
        let c = compare(&sweep_a(), &sweep_b(), "a", "b");
        assert!(c.throughput_per_gpu);
        assert_eq!(c.only_a, vec![64]);
        assert_eq!(c.only_b, vec![128]);
        assert_eq!(
            c.rows.iter().map(|r| r.concurrency).collect::<Vec<_>>(),
            vec![1, 4, 16]
        );
        let close = |x: Option<f64>, want: f64| {
            let x = x.unwrap();
            assert!((x - want).abs() < 1e-9, "{x} != {want}");
        };
        // conc 1: B/A of 15/10 tokens/s/GPU, 90/100 tokens/s/user, TTFT 60/50 and 120/80 ms,
        // ITL 11.1/10 ms, E2E p90 900/1000 ms, cache hit 0.6/0.5.
        let r = &c.rows[0].ratio;
        close(r.throughput, 1.5);
        close(r.interactivity, 0.9);
        close(r.ttft_p50_ms, 1.2);
        close(r.ttft_p90_ms, 1.5);
        close(r.itl_p50_ms, 1.11);
        close(r.e2e_p90_ms, 0.9);
        close(r.server_cache_hit_rate, 1.2);
        // conc 4: 30/40, 70/80, 66/60, 110/100, 14/12.5, 1500/1200, 0.0/0.6.
        let r = &c.rows[1].ratio;
        close(r.throughput, 0.75);
        close(r.interactivity, 0.875);
        close(r.ttft_p50_ms, 1.1);
        close(r.ttft_p90_ms, 1.1);
        close(r.itl_p50_ms, 1.12);
        close(r.e2e_p90_ms, 1.25);
        close(r.server_cache_hit_rate, 0.0);
        // conc 16 failed in A: no ratios, a note.
        assert_eq!(c.rows[2].status_a, PointStatus::Failed);
        assert_eq!(c.rows[2].ratio, Figures::default());
        close(c.rows[2].b.throughput, 90.0);
        for want in [
            "concurrency 64 only in a: not compared",
            "concurrency 128 only in b: not compared",
            "concurrency 16 failed in a: server refused",
        ] {
            assert!(c.notes.iter().any(|n| n == want), "{:?}", c.notes);
        }
        // Without GPUs on one side, total throughput: 120/80.
        let mut a = sweep_a();
        a.inputs.gpus = None;
        let c = compare(&a, &sweep_b(), "a", "b");
        assert!(!c.throughput_per_gpu);
        close(c.rows[0].ratio.throughput, 1.5);
        close(c.rows[0].a.throughput, 80.0);
        assert!(c.notes[0].contains("not per GPU"), "{:?}", c.notes);
        // A zero in A has no ratio.
        assert_eq!(ratio(Some(0.0), Some(1.0)), None);
    }

    #[test]
    fn write_compare_writes_four_files() {
        let root = tempfile::tempdir().unwrap();
        let (da, db) = (root.path().join("before"), root.path().join("after"));
        for (d, s) in [(&da, sweep_a()), (&db, sweep_b())] {
            s.write(&Root::create(d).unwrap()).unwrap();
        }
        let out = root.path().join("cmp");
        let files = write_compare(&da, &db, &out).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            vec![COMPARE_JSON, COMPARE_CSV, COMPARE_PNG, COMPARE_HTML]
        );
        let json: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join(COMPARE_JSON)).unwrap()).unwrap();
        assert_eq!(json["label_a"], "before");
        assert_eq!(json["label_b"], "after");
        assert_eq!(json["rows"][0]["ratio"]["throughput"], 1.5);
        let csv = std::fs::read_to_string(out.join(COMPARE_CSV)).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 4);
        assert!(lines[0].starts_with(
            "concurrency,status_a,status_b,throughput_a,throughput_b,throughput_ratio,"
        ));
        assert!(
            lines[1].starts_with("1,completed,completed,10.000000,15.000000,1.500000,"),
            "{}",
            lines[1]
        );
        assert!(
            lines[3].starts_with("16,failed,completed,,90.000000,,"),
            "{}",
            lines[3]
        );
        let h = std::fs::read_to_string(out.join(COMPARE_HTML)).unwrap();
        let doc = chart_doc(&h);
        let labels: Vec<&str> = doc["charts"][0]["series"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["label"].as_str().unwrap())
            .collect();
        assert_eq!(
            labels,
            vec![
                "before points",
                "before Pareto frontier",
                "after points",
                "after Pareto frontier"
            ]
        );
        assert!(h.contains("concurrency 128 only in after"));
        let (w, h, _) = decode(&std::fs::read(out.join(COMPARE_PNG)).unwrap());
        assert_eq!((w, h), (PNG_WIDTH, PNG_HEIGHT));
    }

    #[test]
    fn write_compare_errors_say_what_is_wrong() {
        let root = tempfile::tempdir().unwrap();
        let (da, db) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir(&da).unwrap();
        std::fs::create_dir(&db).unwrap();
        sweep_a().write(&Root::open(&da).unwrap()).unwrap();
        let e = write_compare(&da, &db, &root.path().join("out"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("not a sweep directory: "), "{e}");
        assert!(
            e.ends_with(
                "b (no sweep.json); pass the --output-artifact-dir of an `agentx-host sweep`"
            ),
            "{e}"
        );
        sweep(vec![pt(2, 1.0, 1.0, (1.0, 1.0), 1.0, 1.0, 0.0)], Some(8))
            .write(&Root::open(&db).unwrap())
            .unwrap();
        let e = write_compare(&da, &db, &root.path().join("out"))
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "the sweeps have no concurrency in common: a ran [1, 4, 16, 64], b ran [2]"
        );
        assert!(!root.path().join("out").exists(), "nothing written");
    }

    #[test]
    fn labels_are_directory_names_told_apart() {
        let root = tempfile::tempdir().unwrap();
        let (x, y) = (root.path().join("x/sweep"), root.path().join("y/sweep"));
        std::fs::create_dir_all(&x).unwrap();
        std::fs::create_dir_all(&y).unwrap();
        assert_eq!(labels(&x, &y), ("x/sweep".into(), "y/sweep".into()));
        assert_eq!(
            labels(&x, &root.path().join("x")),
            ("sweep".into(), "x".into())
        );
    }
}
