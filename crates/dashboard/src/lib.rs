//! The live dashboard of a run (`agentx-host run --ui dashboard`): a terminal UI in place of the
//! progress bar, redrawn every [`REDRAW`] from the run's [`LiveRun`] and the server's latest
//! figures. It shows the run's title, the stage and its progress, sparklines of output token
//! throughput, TTFT and ITL (the mean of the requests completed in each second), the requests by
//! phase (sent, in flight, ok, failed, cancelled, context overflows), the lanes busy and idle, the
//! active sessions and the mean send lag, the server's cache hits, KV usage, queue and token rates,
//! the latest errors and the latest log lines. docs/guide/observability.md#the-live-dashboard says
//! where each figure comes from.
//!
//! It owns no data: [`model::Model`] turns snapshots into what is shown (plain functions, tested
//! without a terminal), `view` lays it out with ratatui, `screen` holds the terminal.
//!
//! **The terminal.** [`Dashboard::start`] draws on stderr, and only when stderr is a terminal: on
//! anything else it returns `None` and writes nothing, so a log file or a pipe never gets an escape
//! code (the caller keeps its progress lines). It uses the alternate screen with the cursor hidden
//! and leaves the terminal out of raw mode: Ctrl-C stays a SIGINT, delivered to the run's own
//! signal handling, which drains the run as it does without a dashboard; the caller then calls
//! [`Dashboard::finish`]. The screen is restored on finish, on drop, and on a panic (a panic hook
//! restores it, then calls the hook that was installed before).
//!
//! **The log.** Log lines written while the dashboard draws would scroll it away, so the log goes
//! through a [`LogTail`]: it writes to stderr until a dashboard starts, then holds the lines (the
//! dashboard shows the latest in its log pane), and when the dashboard finishes it writes every
//! held line to stderr (the last [`log_tail::HELD_LINES`], saying how many earlier ones were
//! dropped) and passes lines through again. The caller installs it as the log writer once, at
//! start-up, and hands a clone to the dashboard:
//!
//! ```no_run
//! use std::sync::Arc;
//! use agentx_dashboard::{Dashboard, DashboardSource, LogTail};
//! use agentx_metrics::live::LiveRun;
//!
//! let log = LogTail::new();
//! let _ = tracing_subscriber::fmt()
//!     .with_writer(log.clone())
//!     .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
//!     .try_init();
//! // ... later, when the run's LiveRun exists:
//! let live = Arc::new(LiveRun::new(&[0, 1, 2, 3]));
//! let dashboard = Dashboard::start(DashboardSource {
//!     live: Arc::clone(&live),
//!     server: None,
//!     title: "run 3f2a · agentx · http://127.0.0.1:8000".to_string(),
//!     log: log.clone(),
//! })
//! .unwrap_or(None); // None: stderr is not a terminal; show the progress lines instead
//! // ... the run ...
//! if let Some(dashboard) = dashboard {
//!     dashboard.finish(); // the screen restored, the held log lines written
//! }
//! ```
//!
//! Text written to stderr directly (not through the log) while the dashboard draws lands on the
//! alternate screen and is lost when it is left: the caller routes its messages through the log,
//! or prints them after [`Dashboard::finish`].

#![forbid(unsafe_code)]

pub mod log_tail;
pub mod model;
mod screen;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod view;

use std::io::IsTerminal;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use agentx_metrics::live::{LiveRun, SrvRow};

pub use log_tail::LogTail;
pub use model::Model;
pub use view::{draw, HEADER};

/// The time between two frames.
pub const REDRAW: Duration = Duration::from_millis(250);

/// How many of the latest log lines the log pane is given (it shows the ones that fit).
const LOG_PANE_LINES: usize = 64;

/// The server's latest figures, asked once a frame; it must answer at once (a cached row, not a
/// scrape), `None` before the first scrape.
pub type ServerFigures = Arc<dyn Fn() -> Option<SrvRow> + Send + Sync>;

/// What a dashboard reads.
#[derive(Clone)]
pub struct DashboardSource {
    /// The run's live counts.
    pub live: Arc<LiveRun>,
    /// The server's latest figures; `None` when the run scrapes no server metrics (the pane says
    /// so).
    pub server: Option<ServerFigures>,
    /// The title line: the run id, the scenario and the URL.
    pub title: String,
    /// The log writer the process logs through (held while the dashboard draws).
    pub log: LogTail,
}

impl std::fmt::Debug for DashboardSource {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("DashboardSource")
            .field("server", &self.server.is_some())
            .field("title", &self.title)
            .field("log", &self.log)
            .finish_non_exhaustive()
    }
}

/// A running dashboard: a thread drawing on stderr's terminal until [`Dashboard::finish`] (or
/// drop).
#[derive(Debug)]
pub struct Dashboard {
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    log: LogTail,
}

impl Dashboard {
    /// Takes stderr's terminal and starts drawing; `Ok(None)` when stderr is not a terminal (or
    /// `TERM` is `dumb`), having written nothing. An error when the terminal cannot be set up (it
    /// is left as it was).
    pub fn start(source: DashboardSource) -> std::io::Result<Option<Dashboard>> {
        let dumb = std::env::var_os("TERM").is_some_and(|term| term == "dumb");
        if !std::io::stderr().is_terminal() || dumb {
            return Ok(None);
        }
        let terminal = screen::enter()?;
        source.log.hold();
        let log = source.log.clone();
        let (stop, stopped) = mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("agentx-dashboard".to_string())
            .spawn(move || redraw(terminal, &source, &stopped));
        match spawned {
            Ok(thread) => Ok(Some(Dashboard {
                stop: Some(stop),
                thread: Some(thread),
                log,
            })),
            Err(error) => {
                screen::leave();
                log.release();
                Err(error)
            }
        }
    }

    /// Stops drawing, restores the terminal (the normal screen, the cursor shown) and writes the
    /// log lines held while it drew.
    pub fn finish(mut self) {
        self.shut();
    }

    fn shut(&mut self) {
        // Dropping the sender wakes the thread at once.
        self.stop.take();
        if let Some(thread) = self.thread.take() {
            // A thread that panicked has restored the screen in the panic hook.
            let _ = thread.join();
        }
        screen::leave();
        self.log.release();
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.shut();
    }
}

/// The drawing thread: a frame now and every [`REDRAW`], until `stopped` says so or the terminal
/// is gone.
fn redraw(mut terminal: screen::Screen, source: &DashboardSource, stopped: &mpsc::Receiver<()>) {
    let started = Instant::now();
    let mut model = Model::new(source.server.is_some());
    loop {
        let server = source.server.as_ref().and_then(|figures| figures());
        model.update(source.live.snapshot(), server, started.elapsed());
        let log = source.log.recent(LOG_PANE_LINES);
        if !screen::draw_frame(&mut terminal, |frame| {
            view::draw(frame, &model, &source.title, &log);
        }) {
            return;
        }
        match stopped.recv_timeout(REDRAW) {
            Err(RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

#[cfg(test)]
mod tests;
