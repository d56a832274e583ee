//! `metrics_plots.png`: a 6x2 panel of per-second time series of a run, from its records and the
//! per-series timeslices of its scraped server metrics.
//!
//! `panels` is pure (records and server metrics in, point series out); `render_png` draws them with
//! `plotters` into an RGB buffer and encodes it with `png`. Text uses the DejaVu Sans Mono font bundled
//! in the binary (Bitstream Vera license, `crates/export/assets/DejaVu-LICENSE.txt`), so plots render the same on
//! a machine without any font installed. Warmup records are left out; a panel without data says so.
//! The server panels read each engine's names from the engine table (`metrics::engines`).

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::bmk::{self, ProfileRecord, RecordPhase, ServerMetrics};
use agentx_metrics::engines::{self, HitRate, ENGINES};

/// The file `agentx-host plot` writes into the artifact directory.
pub const PLOT_FILE: &str = "metrics_plots.png";

pub(crate) const FONT: &[u8] = include_bytes!("../assets/DejaVuSansMono.ttf");

/// Errors of making the plot.
#[derive(Debug, thiserror::Error)]
pub enum PlotError {
    /// The run directory could not be read.
    #[error(transparent)]
    Report(#[from] bmk::ReportError),
    /// The plotting library failed; holds its message.
    #[error("cannot draw the plot: {0}")]
    Draw(String),
    /// The PNG could not be written.
    #[error("cannot write {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// One panel: a title, the y unit, and `(seconds since the first send, value)` points.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Panel {
    pub(crate) title: String,
    pub(crate) unit: String,
    pub(crate) points: Vec<(f64, f64)>,
}

/// Per-second bins of the profiling records by end time: `(sums, counts)` per bin.
fn bins(
    records: &[&ProfileRecord],
    origin_ns: u64,
    value_of: impl Fn(&ProfileRecord) -> Option<f64>,
) -> Vec<(f64, f64)> {
    let mut acc: Vec<(f64, f64)> = Vec::new();
    for r in records {
        let (Some(end), Some(value)) = (r.end_ns, value_of(r)) else {
            continue;
        };
        let bin = (end.saturating_sub(origin_ns) / 1_000_000_000) as usize;
        if acc.len() <= bin {
            acc.resize(bin + 1, (0.0, 0.0));
        }
        acc[bin].0 += value;
        acc[bin].1 += 1.0;
    }
    acc
}

fn per_second(acc: &[(f64, f64)]) -> Vec<(f64, f64)> {
    acc.iter()
        .enumerate()
        .map(|(i, (s, _))| (i as f64, *s))
        .collect()
}

fn mean_per_second(acc: &[(f64, f64)]) -> Vec<(f64, f64)> {
    acc.iter()
        .enumerate()
        .filter(|(_, (_, n))| *n > 0.0)
        .map(|(i, (s, n))| (i as f64, s / n))
        .collect()
}

/// A server metric's timeslices aggregated across series by slice index: counters sum `stat`, gauges
/// average it. Time is the slice's start relative to the first slice of the metric.
fn server_series(server: &ServerMetrics, names: &[&str], stat: &str) -> Vec<(f64, f64)> {
    for name in names {
        let Some(metric) = server.metrics.get(*name) else {
            continue;
        };
        let series_count = metric
            .series
            .iter()
            .map(|s| s.timeslices.len())
            .max()
            .unwrap_or(0);
        let start_ns = metric
            .series
            .iter()
            .filter_map(|s| {
                s.timeslices
                    .first()
                    .and_then(|secs| secs.get("start_ns"))
                    .copied()
            })
            .fold(f64::INFINITY, f64::min);
        let mut out = Vec::new();
        for i in 0..series_count {
            let vals: Vec<(f64, Option<f64>)> = metric
                .series
                .iter()
                .filter_map(|s| s.timeslices.get(i))
                .filter_map(|secs| {
                    secs.get(stat)
                        .map(|value| (*value, secs.get("start_ns").copied()))
                })
                .collect();
            if vals.is_empty() {
                continue;
            }
            let sum: f64 = vals.iter().map(|value| value.0).sum();
            let value = match metric.kind {
                bmk::MetricKind::Gauge => sum / vals.len() as f64,
                _ => sum,
            };
            let secs = vals[0]
                .1
                .filter(|_| start_ns.is_finite())
                .map_or(i as f64, |s| (s - start_ns) / 1e9);
            out.push((secs, value));
        }
        if !out.is_empty() {
            return out;
        }
    }
    Vec::new()
}

/// Hit rate per slice from two counters' per-slice increases.
fn server_ratio(server: &ServerMetrics, hits: &str, queries: &str) -> Vec<(f64, f64)> {
    let hits_series = server_series(server, &[hits], "total");
    let queries_series = server_series(server, &[queries], "total");
    hits_series
        .iter()
        .zip(&queries_series)
        .filter(|(_, (_, queries_series))| *queries_series > 0.0)
        .map(|((t, hits_series), (_, queries_series))| (*t, hits_series / queries_series))
        .collect()
}

/// The first engine's hit rate the export has both counters of (a rate by label share has no
/// per-slice split here, and `hits / (hits + rest)` reads as `hits / rest` per slice would not:
/// both are left to the report).
fn server_hit_rate(server: &ServerMetrics) -> Vec<(f64, f64)> {
    ENGINES
        .iter()
        .flat_map(|e| e.hit_rate)
        .filter_map(|h| match *h {
            HitRate::Ratio { hits, of } => Some(server_ratio(server, hits, of)),
            HitRate::Share { .. } | HitRate::OverSum { .. } => None,
        })
        .find(|points| !points.is_empty())
        .unwrap_or_default()
}

/// GPU KV usage as a fraction, from the first engine the export has a usage gauge of.
fn server_kv_usage(server: &ServerMetrics) -> Vec<(f64, f64)> {
    ENGINES
        .iter()
        .map(|e| {
            let mut points = server_series(server, e.kv_usage, "avg");
            if e.kv_usage_percent {
                points.iter_mut().for_each(|(_, v)| *v /= 100.0);
            }
            points
        })
        .find(|points| !points.is_empty())
        .unwrap_or_default()
}

/// The twelve panels, in reading order (left to right, top to bottom).
pub(crate) fn panels(records: &[ProfileRecord], server: Option<&ServerMetrics>) -> Vec<Panel> {
    let prof: Vec<&ProfileRecord> = records
        .iter()
        .filter(|r| r.phase == RecordPhase::Profiling)
        .collect();
    let start_ns = prof.iter().filter_map(|r| r.start_ns).min().unwrap_or(0);
    let ok: Vec<&ProfileRecord> = prof.iter().copied().filter(|r| r.ok()).collect();
    let panel = |title: &str, unit: &str, points: Vec<(f64, f64)>| Panel {
        title: title.into(),
        unit: unit.into(),
        points,
    };
    let empty = ServerMetrics::default();
    let metrics = server.unwrap_or(&empty);
    vec![
        panel(
            "input throughput",
            "tokens/s",
            per_second(&bins(&ok, start_ns, |r| r.isl)),
        ),
        panel(
            "output throughput",
            "tokens/s",
            per_second(&bins(&ok, start_ns, |r| r.osl)),
        ),
        panel(
            "TTFT (mean per second)",
            "ms",
            mean_per_second(&bins(&ok, start_ns, |r| r.ttft_s.map(|x| x * 1e3))),
        ),
        panel(
            "ITL (mean per second)",
            "ms",
            mean_per_second(&bins(&ok, start_ns, |r| r.itl_s.map(|x| x * 1e3))),
        ),
        panel(
            "requests completed",
            "requests/s",
            per_second(&bins(&ok, start_ns, |_| Some(1.0))),
        ),
        panel(
            "errors",
            "requests/s",
            // Every second of the run, so a run without errors draws a line at zero.
            per_second(&bins(&prof, start_ns, |r| {
                Some(if r.ok() { 0.0 } else { 1.0 })
            })),
        ),
        panel(
            "running requests (server)",
            "requests",
            server_series(metrics, &engines::names(|e| e.running), "avg"),
        ),
        panel(
            "waiting requests (server)",
            "requests",
            server_series(metrics, &engines::names(|e| e.waiting), "avg"),
        ),
        panel(
            "GPU KV cache usage (server)",
            "fraction",
            server_kv_usage(metrics),
        ),
        panel(
            "prefix cache hit rate (server)",
            "fraction",
            server_hit_rate(metrics),
        ),
        panel(
            "prompt tokens (server)",
            "tokens/s",
            // The first prompt counter of each engine (llama.cpp's counts evaluated tokens only).
            server_series(
                metrics,
                &ENGINES
                    .iter()
                    .filter_map(|e| e.prompt_tokens.first().copied())
                    .collect::<Vec<_>>(),
                "rate",
            ),
        ),
        panel(
            "generation tokens (server)",
            "tokens/s",
            server_series(
                metrics,
                &ENGINES
                    .iter()
                    .filter_map(|e| e.generation_tokens)
                    .collect::<Vec<_>>(),
                "rate",
            ),
        ),
    ]
}

fn draw_err<E: std::fmt::Debug>(error: E) -> PlotError {
    PlotError::Draw(format!("{error:?}"))
}

/// The band above the panels: what was run, and whether it is a valid submission.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Header {
    pub(crate) title: String,
    /// `Some(true)` valid, `Some(false)` not (with `reasons`), `None` unknown (no run summary).
    pub(crate) valid: Option<bool>,
    pub(crate) reasons: Vec<String>,
}

impl Header {
    /// The header of a run from its summary (scenario, model, concurrency, verdict).
    pub(crate) fn of(artifacts: &bmk::Artifacts) -> Header {
        let Some(summary) = &artifacts.run else {
            return Header {
                title: format!("agentx run: {}", artifacts.dir.display()),
                ..Header::default()
            };
        };
        let scenario = summary
            .scenario
            .as_ref()
            .map(|v| v.name.as_str())
            .filter(|n| !n.is_empty())
            .unwrap_or("?");
        let mut title = format!("agentx run: {scenario}");
        if let Some(model) = &summary.model {
            title.push_str(&format!(", model {model}"));
        }
        if let Some(concurrency) = summary.concurrency {
            title.push_str(&format!(", concurrency {concurrency}"));
        }
        Header {
            title,
            valid: summary.submission_valid,
            reasons: summary.submission_invalid_reasons.clone(),
        }
    }

    fn verdict(&self) -> (String, RGBColor) {
        match self.valid {
            Some(true) => ("valid submission".into(), RGBColor(0, 128, 0)),
            Some(false) => (
                format!("not a valid submission: {}", self.reasons.join(", ")),
                RGBColor(190, 0, 0),
            ),
            None => (
                "validity unknown (no run_summary.json)".into(),
                RGBColor(90, 90, 90),
            ),
        }
    }
}

/// Height of the header band, pixels.
const HEADER_PX: u32 = 56;

/// Draws the header and the panels in a 6x2 grid below it, and returns the PNG bytes.
pub(crate) fn render_png(
    panels: &[Panel],
    header: &Header,
    width: u32,
    height: u32,
) -> Result<Vec<u8>, PlotError> {
    // Registering twice replaces the same bytes; the registry is process-wide.
    plotters::style::register_font("sans-serif", FontStyle::Normal, FONT)
        .map_err(|_| PlotError::Draw("the bundled font does not parse".into()))?;
    let mut buf = vec![0u8; width as usize * height as usize * 3];
    {
        let root = BitMapBackend::with_buffer(&mut buf, (width, height)).into_drawing_area();
        root.fill(&WHITE).map_err(draw_err)?;
        let (top, body) = root.split_vertically(HEADER_PX);
        top.draw(&Text::new(
            header.title.as_str(),
            (12, 6),
            ("sans-serif", 20).into_font().color(&BLACK),
        ))
        .map_err(draw_err)?;
        let (verdict, colour) = header.verdict();
        top.draw(&Text::new(
            verdict,
            (12, 32),
            ("sans-serif", 16).into_font().color(&colour),
        ))
        .map_err(draw_err)?;
        let cells = body.split_evenly((6, 2));
        for (panel, area) in panels.iter().zip(cells.iter()) {
            let xmax = panel.points.iter().map(|p| p.0).fold(1.0f64, f64::max);
            let ymax = panel.points.iter().map(|p| p.1).fold(0.0f64, f64::max);
            let ymax = if ymax > 0.0 { ymax * 1.1 } else { 1.0 };
            let mut chart = ChartBuilder::on(area)
                .caption(&panel.title, ("sans-serif", 16))
                .margin(8)
                .x_label_area_size(28)
                .y_label_area_size(60)
                .build_cartesian_2d(0f64..xmax, 0f64..ymax)
                .map_err(draw_err)?;
            chart
                .configure_mesh()
                .x_desc("s")
                .y_desc(panel.unit.as_str())
                .label_style(("sans-serif", 11))
                .draw()
                .map_err(draw_err)?;
            if panel.points.is_empty() {
                area.draw(&Text::new(
                    "no data",
                    (
                        area.dim_in_pixel().0 as i32 / 2 - 20,
                        area.dim_in_pixel().1 as i32 / 2,
                    ),
                    ("sans-serif", 14)
                        .into_font()
                        .color(&RGBColor(120, 120, 120)),
                ))
                .map_err(draw_err)?;
            } else {
                chart
                    .draw_series(LineSeries::new(panel.points.iter().copied(), &BLUE))
                    .map_err(draw_err)?;
            }
        }
        root.present().map_err(draw_err)?;
    }
    encode_png(&buf, width, height)
}

/// An RGB buffer as a PNG, losslessly: indexed (a palette of the colours it uses) when it uses at
/// most 256, as a chart of a few colours and their antialiased blends does, else RGB with adaptive
/// filters; deflate at its best level either way. The encoder's default (fast deflate, RGB with the
/// `Sub` filter) made the 1600x2456 plot of a 30 s demo 3.3 MB (about 1,600 colours: antialiased
/// text and lines); this makes it 0.27 MB, the same pixels.
fn encode_png(rgb: &[u8], width: u32, height: u32) -> Result<Vec<u8>, PlotError> {
    let mut out = Vec::new();
    let mut enc = png::Encoder::new(&mut out, width, height);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Best);
    let pixels = match palette_of(rgb) {
        Some((palette, indices)) => {
            enc.set_color(png::ColorType::Indexed);
            enc.set_palette(palette);
            enc.set_filter(png::FilterType::NoFilter);
            indices
        }
        None => {
            enc.set_color(png::ColorType::Rgb);
            enc.set_adaptive_filter(png::AdaptiveFilterType::Adaptive);
            rgb.to_vec()
        }
    };
    let mut writer = enc.write_header().map_err(draw_err)?;
    writer.write_image_data(&pixels).map_err(draw_err)?;
    writer.finish().map_err(draw_err)?;
    Ok(out)
}

/// The palette (RGB triples in order of first use) and each pixel's index into it, or `None` when
/// the buffer has more than 256 colours.
fn palette_of(rgb: &[u8]) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut index: std::collections::HashMap<[u8; 3], u8> = std::collections::HashMap::new();
    let mut palette = Vec::new();
    let mut indices = Vec::with_capacity(rgb.len() / 3);
    let mut last: Option<([u8; 3], u8)> = None;
    for px in rgb.chunks_exact(3) {
        let colour = [px[0], px[1], px[2]];
        let palette_index = match last {
            // Runs of one colour (the white background) skip the map.
            Some((l, palette_index)) if l == colour => palette_index,
            _ => match index.get(&colour) {
                Some(palette_index) => *palette_index,
                None => {
                    let palette_index = u8::try_from(index.len()).ok()?;
                    index.insert(colour, palette_index);
                    palette.extend_from_slice(&colour);
                    palette_index
                }
            },
        };
        last = Some((colour, palette_index));
        indices.push(palette_index);
    }
    Some((palette, indices))
}

/// Reads an artifact directory and writes its plot to `out` (default `DIR/metrics_plots.png`).
pub fn plot_dir(dir: &Path, out: Option<&Path>) -> Result<PathBuf, PlotError> {
    let (root, name) = agentx_record::fsio::Root::for_output(dir, out, PLOT_FILE)
        .map_err(|(path, source)| PlotError::Write { path, source })?;
    plot_into(dir, &root, &name)
}

/// Reads the artifact directory `dir` and writes its plot as `name` beneath `out`.
pub(crate) fn plot_into(
    dir: &Path,
    out: &agentx_record::fsio::Root,
    name: &Path,
) -> Result<PathBuf, PlotError> {
    let artifacts = bmk::load_artifacts(dir)?;
    let png = render_png(
        &panels(&artifacts.records, artifacts.server.as_ref()),
        &Header::of(&artifacts),
        1600,
        2400 + HEADER_PX,
    )?;
    out.write_atomic(name, &png)
        .map_err(|source| PlotError::Write {
            path: out.join(name),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn worked() -> Vec<ProfileRecord> {
        let p = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("fixtures/report/run/profile_export.jsonl");
        bmk::parse_profile_export(&std::fs::read_to_string(&p).unwrap(), &p).unwrap()
    }

    #[test]
    fn per_second_series_by_hand() {
        let ps = panels(&worked(), None);
        assert_eq!(ps.len(), 12);
        // First send at 1.0 s; ends at 2.0, 2.3 (bin 1), 3.7 (bin 2), 4.5 (bin 3), 5.1 (bin 4).
        assert_eq!(
            ps[0].points,
            vec![
                (0.0, 0.0),
                (1.0, 220.0),
                (2.0, 180.0),
                (3.0, 200.0),
                (4.0, 240.0)
            ]
        );
        assert_eq!(ps[4].points[1], (1.0, 2.0));
        // The failure ends at 4.3 s and the overflow at 5.05 s; the warmup row counts nowhere.
        assert_eq!(
            ps[5].points,
            vec![(0.0, 0.0), (1.0, 0.0), (2.0, 0.0), (3.0, 1.0), (4.0, 1.0)]
        );
        let ttft = &ps[2].points;
        assert_eq!(ttft[0], (1.0, 31.0));
        assert!(ps[6].points.is_empty());
        // A run without errors draws a line at zero over its seconds, not "no data".
        let clean: Vec<_> = worked()
            .into_iter()
            .filter(bmk::ProfileRecord::ok)
            .collect();
        let e = &panels(&clean, None)[5].points;
        assert!(!e.is_empty() && e.iter().all(|p| p.1 == 0.0), "{e:?}");
    }

    #[test]
    fn the_header_names_the_run_and_its_verdict() {
        let mut a = bmk::load_artifacts(
            &Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../..")).join("fixtures/report/run"),
        )
        .unwrap();
        a.run = Some(bmk::RunSummary {
            scenario: Some(crate::run_summary::ScenarioRef {
                name: "inferencex-agentx-v1".into(),
                ..Default::default()
            }),
            seed: Some(1),
            concurrency: Some(8),
            model: Some("m".into()),
            submission_valid: Some(false),
            submission_invalid_reasons: vec!["unsafe_override".into()],
            ..Default::default()
        });
        let h = Header::of(&a);
        assert_eq!(
            h.title,
            "agentx run: inferencex-agentx-v1, model m, concurrency 8"
        );
        assert_eq!(h.verdict().0, "not a valid submission: unsafe_override");
        a.run = None;
        assert_eq!(Header::of(&a).valid, None);
    }

    #[test]
    fn server_timeslices_sum_counters_and_average_gauges() {
        let doc = serde_json::json!({"metrics": {
            "vllm:num_requests_running": {"type": "gauge", "series": [
                {"stats": {}, "timeslices": [{"start_ns": 0, "avg": 2.0}, {"start_ns": 1e9, "avg": 4.0}]},
                {"stats": {}, "timeslices": [{"start_ns": 0, "avg": 4.0}, {"start_ns": 1e9, "avg": 6.0}]}]},
            "vllm:prefix_cache_hits": {"type": "counter", "series": [
                {"stats": {"total": 1.0}, "timeslices": [{"start_ns": 0, "total": 30.0}]},
                {"stats": {"total": 1.0}, "timeslices": [{"start_ns": 0, "total": 10.0}]}]},
            "vllm:prefix_cache_queries": {"type": "counter", "series": [
                {"stats": {"total": 1.0}, "timeslices": [{"start_ns": 0, "total": 100.0}]},
                {"stats": {"total": 1.0}, "timeslices": [{"start_ns": 0, "total": 60.0}]}]},
        }});
        let m = ServerMetrics::parse(&doc.to_string(), Path::new("s.json")).unwrap();
        let ps = panels(&[], Some(&m));
        assert_eq!(ps[6].points, vec![(0.0, 3.0), (1.0, 5.0)]);
        assert_eq!(ps[9].points, vec![(0.0, 0.25)]);
    }

    fn decoded(png: &[u8]) -> (png::ColorType, Vec<u8>) {
        let mut dec = png::Decoder::new(png);
        dec.set_transformations(png::Transformations::EXPAND);
        let mut r = dec.read_info().unwrap();
        let source = r.info().color_type;
        let mut buf = vec![0; r.output_buffer_size()];
        let info = r.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (source, buf)
    }

    #[test]
    fn the_png_is_lossless_indexed_or_rgb() {
        // Three colours in runs and alone: a palette of three, the same pixels back.
        let (w, h) = (7u32, 5u32);
        let few: Vec<u8> = (0..w * h)
            .flat_map(|i| match i % 5 {
                0 => [0, 0, 255],
                1 | 2 => [255, 255, 255],
                _ => [10, 20, 30],
            })
            .collect();
        let png = encode_png(&few, w, h).unwrap();
        assert_eq!(decoded(&png), (png::ColorType::Indexed, few));
        // 300 colours: RGB.
        let many: Vec<u8> = (0..300u32)
            .flat_map(|i| [(i % 256) as u8, (i / 256) as u8, 7])
            .collect();
        let png = encode_png(&many, 20, 15).unwrap();
        assert_eq!(decoded(&png), (png::ColorType::Rgb, many));
    }

    #[test]
    fn renders_a_png_with_the_bundled_font() {
        let header = Header {
            title: "agentx run: test".into(),
            valid: Some(false),
            reasons: vec!["unsafe_override".into()],
        };
        let png = render_png(&panels(&worked(), None), &header, 800, 1200).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        // Width and height in the IHDR chunk.
        assert_eq!(u32::from_be_bytes(png[16..20].try_into().unwrap()), 800);
        assert_eq!(u32::from_be_bytes(png[20..24].try_into().unwrap()), 1200);
    }
}
