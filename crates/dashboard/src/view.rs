//! The drawing: one frame of the dashboard from a [`Model`] and the latest log lines. It lays out
//! what the model says and computes nothing of its own.
//!
//! ```text
//! ┌ agentx live ─────────────────────────────────────────────── elapsed 1m23s ┐
//! │ run 3f2a… · agentx · http://127.0.0.1:8000                                 │
//! │██████████████████ profiling 23/60  412 done, 3 failed ░░░░░░░░░░░░░░░░░░░░░│
//! └────────────────────────────────────────────────────────────────────────────┘
//! ┌ output 1234 tok/s ─────┐┌ TTFT 45.2 ms ──────────┐┌ ITL 5.1 ms ────────────┐
//! │ ▃▅▆▇█▇▆▇█▇▆▅▆▇         ││ ▂▂▃▂▂▃▅▇▃▂▂             ││ ▅▅▅▆▅▅▅▅▅▆▅            │
//! └────────────────────────┘└────────────────────────┘└────────────────────────┘
//! ┌ requests ──────────────────────────────┐┌ server ───────────────────────┐
//! │ phase      sent infl  ok fail canc ovfl ││ prefix cache hit  42.3 %     │
//! │ ...                                     ││ ...                          │
//! └─────────────────────────────────────────┘└──────────────────────────────┘
//! ┌ errors ───────────────────────┐┌ log ─────────────────────────────────────┐
//! ```

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Gauge, Paragraph, Row, Sparkline, Table};
use ratatui::Frame;

use crate::model::{Model, Sample};

/// The dashboard's own name, the header's title (what a test waits for to know it is up).
pub const HEADER: &str = "agentx live";

/// Rows of the header, the counts and the server pane.
const HEADER_ROWS: u16 = 4;
const COUNTS_ROWS: u16 = 7;

/// Draws the whole dashboard into `frame`: `title` is the run's line (id, scenario, url) and `log`
/// the latest log lines, oldest first.
pub fn draw(frame: &mut Frame<'_>, model: &Model, title: &str, log: &[String]) {
    let [header, sparks, middle, bottom] = Layout::vertical([
        Constraint::Length(HEADER_ROWS),
        Constraint::Fill(1),
        Constraint::Length(COUNTS_ROWS),
        Constraint::Fill(1),
    ])
    .areas(frame.area());
    draw_header(frame, header, model, title);
    draw_sparklines(frame, sparks, model);
    let [counts, server] =
        Layout::horizontal([Constraint::Fill(3), Constraint::Fill(2)]).areas(middle);
    draw_counts(frame, counts, model);
    draw_server(frame, server, model);
    let [errors, logs] =
        Layout::horizontal([Constraint::Fill(1), Constraint::Fill(1)]).areas(bottom);
    draw_errors(frame, errors, model);
    draw_log(frame, logs, log);
}

fn title_style() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

fn draw_header(frame: &mut Frame<'_>, area: Rect, model: &Model, title: &str) {
    let block = Block::bordered()
        .title(Line::from(format!(" {HEADER} ")).style(title_style()))
        .title_top(Line::from(format!(" elapsed {} ", model.elapsed_text())).right_aligned());
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [title_row, gauge_row] =
        Layout::vertical([Constraint::Length(1), Constraint::Length(1)]).areas(inner);
    frame.render_widget(Paragraph::new(title), title_row);
    let gauge = Gauge::default()
        .ratio(model.stage_ratio())
        .label(model.stage_label())
        .gauge_style(Style::default().fg(Color::Cyan).bg(Color::Black));
    frame.render_widget(gauge, gauge_row);
}

/// The last `width` values of one sparkline, scaled to integers (`None`: no value that interval).
fn series(model: &Model, width: u16, value: SampleValue) -> Vec<Option<u64>> {
    let history = model.history();
    let skip = history.len().saturating_sub(usize::from(width));
    history
        .iter()
        .skip(skip)
        .map(|sample| value(sample).map(|scaled| scaled.round().max(0.0) as u64))
        .collect()
}

/// One sparkline's value of a sample, scaled for its bars (`None`: no value that interval).
type SampleValue = fn(&Sample) -> Option<f64>;

fn draw_sparklines(frame: &mut Frame<'_>, area: Rect, model: &Model) {
    let areas: [Rect; 3] = Layout::horizontal([Constraint::Fill(1); 3]).areas(area);
    // TTFT and ITL in microseconds: the bars are scaled to the largest value shown.
    let panes: [(String, Color, SampleValue); 3] = [
        (model.throughput_title(), Color::Green, |sample| {
            Some(sample.output_tokens_per_s)
        }),
        (model.ttft_title(), Color::Yellow, |sample| {
            sample.ttft_s.map(|seconds| seconds * 1e6)
        }),
        (model.itl_title(), Color::Magenta, |sample| {
            sample.itl_s.map(|seconds| seconds * 1e6)
        }),
    ];
    for (pane_area, (title, colour, value)) in areas.into_iter().zip(panes) {
        let block = Block::bordered().title(Line::from(format!(" {title} ")).style(title_style()));
        let width = block.inner(pane_area).width;
        let sparkline = Sparkline::default()
            .block(block)
            .data(series(model, width, value))
            .style(Style::default().fg(colour));
        frame.render_widget(sparkline, pane_area);
    }
}

fn draw_counts(frame: &mut Frame<'_>, area: Rect, model: &Model) {
    let block = Block::bordered().title(Line::from(" requests ").style(title_style()));
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [table_area, lanes_area, sessions_area] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Length(1),
        Constraint::Length(1),
    ])
    .areas(inner);
    let number = |value: u64| Cell::from(Line::from(value.to_string()).right_aligned());
    let heading = |text: &'static str| Cell::from(Line::from(text).right_aligned());
    let rows = model.phase_rows().map(|row| {
        let failed_style = if row.failed > 0 {
            Style::default().fg(Color::Red)
        } else {
            Style::default()
        };
        Row::new([
            Cell::from(row.phase),
            number(row.sent),
            number(row.in_flight),
            number(row.ok),
            number(row.failed).style(failed_style),
            number(row.cancelled),
            number(row.overflows),
        ])
    });
    let header = Row::new([
        Cell::from("phase"),
        heading("sent"),
        heading("infl"),
        heading("ok"),
        heading("fail"),
        heading("canc"),
        heading("ovfl"),
    ])
    .style(Style::default().add_modifier(Modifier::DIM));
    let widths = [
        Constraint::Length(9),
        Constraint::Fill(1),
        Constraint::Fill(1),
        Constraint::Fill(1),
        Constraint::Fill(1),
        Constraint::Fill(1),
        Constraint::Fill(1),
    ];
    frame.render_widget(Table::new(rows, widths).header(header), table_area);
    let (busy, lanes) = model.lanes();
    let ratio = if lanes == 0 {
        0.0
    } else {
        busy as f64 / lanes as f64
    };
    let lanes_gauge = Gauge::default()
        .ratio(ratio)
        .label(model.lanes_label())
        .gauge_style(Style::default().fg(Color::Blue).bg(Color::Black));
    frame.render_widget(lanes_gauge, lanes_area);
    frame.render_widget(Paragraph::new(model.sessions_label()), sessions_area);
}

fn draw_server(frame: &mut Frame<'_>, area: Rect, model: &Model) {
    let block = Block::bordered().title(Line::from(" server ").style(title_style()));
    let lines: Vec<Line<'_>> = model
        .server_lines()
        .into_iter()
        .map(|(name, value)| {
            Line::from(vec![
                Span::styled(
                    format!("{name:<17} "),
                    Style::default().add_modifier(Modifier::DIM),
                ),
                Span::raw(value),
            ])
        })
        .collect();
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_errors(frame: &mut Frame<'_>, area: Rect, model: &Model) {
    let errors = model.error_lines();
    let block = Block::bordered().title(Line::from(" errors ").style(title_style()));
    let lines: Vec<Line<'_>> = if errors.is_empty() {
        vec![Line::from("none").style(Style::default().add_modifier(Modifier::DIM))]
    } else {
        errors
            .into_iter()
            .map(|error| Line::from(error).style(Style::default().fg(Color::Red)))
            .collect()
    };
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn draw_log(frame: &mut Frame<'_>, area: Rect, log: &[String]) {
    let block = Block::bordered().title(Line::from(" log ").style(title_style()));
    let rows = usize::from(block.inner(area).height);
    let skip = log.len().saturating_sub(rows);
    let lines: Vec<Line<'_>> = log[skip..]
        .iter()
        .map(|line| Line::from(line.as_str()))
        .collect();
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use agentx_metrics::live::{LiveRun, RecentError, SrvRow};
    use agentx_record::Phase;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    /// The screen's rows as text.
    fn screen(model: &Model, log: &[String], width: u16, height: u16) -> Vec<String> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
        terminal
            .draw(|frame| draw(frame, model, "run 1234 · agentx · http://sim", log))
            .unwrap();
        let buffer = terminal.backend().buffer().clone();
        (0..height)
            .map(|row| {
                (0..width)
                    .map(|column| buffer[(column, row)].symbol().to_string())
                    .collect()
            })
            .collect()
    }

    fn row_with<'a>(rows: &'a [String], text: &str) -> &'a str {
        rows.iter()
            .find(|row| row.contains(text))
            .unwrap_or_else(|| panic!("no row has {text:?}:\n{}", rows.join("\n")))
    }

    /// A model from a real [`LiveRun`]: 4 lanes, 2 busy, the profiling stage a quarter done, one
    /// failure.
    fn model(server: Option<SrvRow>, has_server: bool) -> Model {
        let live = LiveRun::new(&[0, 1, 2, 3]);
        let _first = live.begin_request(Phase::Profiling, 0);
        let _second = live.begin_request(Phase::Profiling, 2);
        drop(live.begin_request(Phase::Warmup, 1));
        live.set_stage("profiling", 60);
        live.set_progress(15, "17 done");
        let mut snapshot = live.snapshot();
        snapshot.recent_errors.push(RecentError {
            end_ns: 3_000_000_000,
            phase: Phase::Profiling,
            code: 503,
            message: "http: overloaded".to_string(),
        });
        let mut model = Model::new(has_server);
        model.update(snapshot.clone(), server.clone(), Duration::ZERO);
        snapshot.totals[1].ok = 17;
        snapshot.totals[1].output_tokens = 4_000;
        model.update(snapshot, server, Duration::from_secs(2));
        model
    }

    #[test]
    fn an_80_by_24_screen_shows_every_pane() {
        let server = SrvRow {
            prefix_cache_hit: Some(61.5),
            running: Some(2.0),
            waiting: Some(0.0),
            ..SrvRow::default()
        };
        let log = vec![" INFO the replay started".to_string()];
        let rows = screen(&model(Some(server), true), &log, 80, 24);
        let text = rows.join("\n");
        assert!(rows[0].contains(HEADER), "{text}");
        assert!(rows[0].contains("elapsed 0m02s"), "{text}");
        assert!(row_with(&rows, "run 1234").contains("http://sim"));
        assert!(row_with(&rows, "profiling 15/60").contains("17 done"));
        assert!(text.contains("output 2000 tok/s"), "{text}");
        assert!(text.contains("TTFT -"), "{text}");
        // The profiling row: 2 sent, 2 in flight, 17 ok.
        let profiling = row_with(&rows, "profiling  ");
        let numbers: Vec<&str> = profiling
            .split(['│', ' '])
            .filter(|word| word.parse::<u64>().is_ok())
            .collect();
        assert_eq!(numbers[..3], ["2", "2", "17"], "{profiling}");
        assert!(text.contains("lanes 2 busy  2 idle  of 4"), "{text}");
        assert!(row_with(&rows, "prefix cache hit").contains("61.5 %"));
        assert!(row_with(&rows, "ext cache hit").contains(" - "));
        assert!(row_with(&rows, "KV usage").contains(" - "));
        assert!(row_with(&rows, "running / waiting").contains("2 / 0"));
        assert!(
            text.contains("3.0s profiling 503 http: overloaded"),
            "{text}"
        );
        assert!(text.contains("INFO the replay started"), "{text}");
    }

    #[test]
    fn without_a_server_source_the_pane_says_so_and_a_larger_screen_uses_the_room() {
        let log: Vec<String> = (0..40).map(|index| format!("line {index}")).collect();
        let rows = screen(&model(None, false), &log, 160, 48);
        let text = rows.join("\n");
        assert!(text.contains("no server metrics"), "{text}");
        assert!(!text.contains("prefix cache hit"), "{text}");
        // The log pane shows the latest lines that fit: the last one, and more than at 24 rows.
        assert!(text.contains("line 39"), "{text}");
        let shown = (0..40)
            .filter(|index| text.contains(&format!("line {index} ")))
            .count();
        assert!(shown > 6, "{shown} log lines shown:\n{text}");
        assert!(!text.contains("line 0 "), "{text}");
    }
}
