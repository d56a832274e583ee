//! [`LogTail`], the log writer that steps aside while the dashboard holds the terminal: it writes
//! each log line through to stderr, holds the lines in memory while a dashboard runs (the last
//! [`HELD_LINES`], counting the ones it had to drop), and writes them out when the dashboard
//! finishes, so nothing logged during the run is lost and nothing is written over the dashboard.

use std::collections::VecDeque;
use std::io::Write;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// How many log lines a dashboard holds for its flush at the end; older ones are dropped and
/// counted.
pub const HELD_LINES: usize = 10_000;

/// A `tracing_subscriber` writer (`MakeWriter`) that passes log lines through to stderr, or holds
/// them while a dashboard draws (see the module's documentation). Clones share one state.
#[derive(Clone)]
pub struct LogTail {
    state: Arc<Mutex<TailState>>,
}

struct TailState {
    /// Where lines go when they are not held (stderr, or a test's buffer).
    sink: Box<dyn Write + Send>,
    /// Whether a dashboard holds the lines.
    holding: bool,
    /// The held lines (without their newline), oldest first, at most `cap`.
    held: VecDeque<String>,
    /// How many lines the bound dropped since the dashboard started.
    dropped: u64,
    /// The most lines held.
    cap: usize,
}

impl std::fmt::Debug for LogTail {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = self.lock();
        formatter
            .debug_struct("LogTail")
            .field("holding", &state.holding)
            .field("held", &state.held.len())
            .field("dropped", &state.dropped)
            .finish_non_exhaustive()
    }
}

impl Default for LogTail {
    fn default() -> LogTail {
        LogTail::new()
    }
}

impl LogTail {
    /// A writer to stderr.
    pub fn new() -> LogTail {
        LogTail::with_sink(Box::new(std::io::stderr()), HELD_LINES)
    }

    /// A writer to `sink` that holds at most `cap` lines.
    pub(crate) fn with_sink(sink: Box<dyn Write + Send>, cap: usize) -> LogTail {
        LogTail {
            state: Arc::new(Mutex::new(TailState {
                sink,
                holding: false,
                held: VecDeque::new(),
                dropped: 0,
                cap: cap.max(1),
            })),
        }
    }

    fn lock(&self) -> MutexGuard<'_, TailState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Lines are held from now on.
    pub(crate) fn hold(&self) {
        self.lock().holding = true;
    }

    /// Lines pass through again; the held ones are written first, after a line saying how many
    /// were dropped, if any.
    pub(crate) fn release(&self) {
        let mut state = self.lock();
        if !state.holding {
            return;
        }
        state.holding = false;
        let held = std::mem::take(&mut state.held);
        let dropped = std::mem::take(&mut state.dropped);
        let mut text = String::new();
        if dropped > 0 {
            text.push_str(&format!(
                "({dropped} earlier log lines were dropped: the dashboard keeps the last {})\n",
                state.cap
            ));
        }
        for line in held {
            text.push_str(&line);
            text.push('\n');
        }
        // A closed stderr loses the lines, as it would have lost them written at once.
        let _ = state.sink.write_all(text.as_bytes());
        let _ = state.sink.flush();
    }

    /// The latest `count` held lines, oldest first, without their terminal escapes.
    pub fn recent(&self, count: usize) -> Vec<String> {
        let state = self.lock();
        let skip = state.held.len().saturating_sub(count);
        state
            .held
            .iter()
            .skip(skip)
            .map(|line| crate::model::plain_text(line))
            .collect()
    }

    /// Takes one formatted event (one or more whole lines).
    fn accept(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut state = self.lock();
        if !state.holding {
            let _ = state.sink.write_all(bytes);
            let _ = state.sink.flush();
            return;
        }
        let text = String::from_utf8_lossy(bytes);
        for line in text.trim_end_matches('\n').split('\n') {
            if state.held.len() == state.cap {
                state.held.pop_front();
                state.dropped += 1;
            }
            state.held.push_back(line.to_string());
        }
    }
}

/// One event's writer: it gathers what the formatter writes and hands it over whole when dropped.
#[derive(Debug)]
pub struct TailWriter {
    tail: LogTail,
    buffer: Vec<u8>,
}

impl Write for TailWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for TailWriter {
    fn drop(&mut self) {
        self.tail.accept(&self.buffer);
    }
}

impl<'writer> tracing_subscriber::fmt::MakeWriter<'writer> for LogTail {
    type Writer = TailWriter;

    fn make_writer(&'writer self) -> TailWriter {
        TailWriter {
            tail: self.clone(),
            buffer: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink the test reads back.
    #[derive(Clone, Default)]
    struct Shared(Arc<Mutex<Vec<u8>>>);

    impl Write for Shared {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Shared {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    #[test]
    fn lines_pass_through_are_held_while_a_dashboard_runs_then_flushed_in_order() {
        let sink = Shared::default();
        let tail = LogTail::with_sink(Box::new(sink.clone()), 100);
        let subscriber = tracing_subscriber::fmt()
            .with_writer(tail.clone())
            .with_ansi(false)
            .without_time()
            .with_target(false)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!("before");
            assert_eq!(sink.text(), " INFO before\n");
            tail.hold();
            tracing::warn!("during one");
            tracing::info!("during two");
            assert_eq!(
                sink.text(),
                " INFO before\n",
                "nothing reaches the terminal"
            );
            assert_eq!(tail.recent(1), [" INFO during two"]);
            assert_eq!(tail.recent(5), [" WARN during one", " INFO during two"]);
            tail.release();
            tracing::info!("after");
        });
        assert_eq!(
            sink.text(),
            " INFO before\n WARN during one\n INFO during two\n INFO after\n"
        );
        assert!(tail.recent(5).is_empty());
    }

    #[test]
    fn the_held_lines_are_bounded_and_the_flush_says_how_many_were_dropped() {
        let sink = Shared::default();
        let tail = LogTail::with_sink(Box::new(sink.clone()), 3);
        tail.hold();
        let mut writer = tracing_subscriber::fmt::MakeWriter::make_writer(&tail);
        writer.write_all(b"one\ntwo\n").unwrap();
        drop(writer);
        for line in ["three\n", "four\n", "five\n"] {
            let mut writer = tracing_subscriber::fmt::MakeWriter::make_writer(&tail);
            writer.write_all(line.as_bytes()).unwrap();
        }
        assert_eq!(sink.text(), "");
        tail.release();
        assert_eq!(
            sink.text(),
            "(2 earlier log lines were dropped: the dashboard keeps the last 3)\nthree\nfour\nfive\n"
        );
        // A second release writes nothing more.
        tail.release();
        assert!(sink.text().ends_with("five\n"));
    }
}
