//! The terminal the dashboard takes over (stderr): entering the alternate screen with the cursor
//! hidden, and leaving it exactly once, whichever comes first of the dashboard's finish, its drop,
//! or a panic anywhere in the process (a panic hook that restores the screen, then calls the hook
//! that was there before, so the panic's message is printed on the normal screen).
//!
//! The terminal's echo is off while the dashboard draws (its other modes stay: input is still
//! line by line and Ctrl-C still a signal), so a typed key, an Enter that would scroll the screen
//! or Ctrl-C's `^C` is not written over it.
//!
//! Drawing and leaving exclude each other (one lock), so no frame is drawn after the screen was
//! left; the drawing thread marks itself, so a panic inside a frame leaves without that lock.

use std::cell::Cell;
use std::io::{BufWriter, Stderr, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once, PoisonError};

use crossterm::cursor::{Hide, Show};
use crossterm::terminal::{Clear, ClearType, EnterAlternateScreen, LeaveAlternateScreen};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;

/// The terminal the dashboard draws on: stderr, buffered so a frame is one write.
pub(crate) type Screen = Terminal<CrosstermBackend<BufWriter<Stderr>>>;

/// Whether the alternate screen is entered.
static ENTERED: AtomicBool = AtomicBool::new(false);
/// Held while a frame is drawn and while the screen is left.
static DRAWING: Mutex<()> = Mutex::new(());
/// The panic hook is installed once per process.
static HOOK: Once = Once::new();

thread_local! {
    /// Whether this thread holds [`DRAWING`] (a panic inside a frame must not wait for it).
    static IN_FRAME: Cell<bool> = const { Cell::new(false) };
}

/// Takes stderr's terminal: the alternate screen, the cursor hidden, the screen cleared. Raw mode
/// stays off, so Ctrl-C is still a signal.
pub(crate) fn enter() -> std::io::Result<Screen> {
    install_panic_hook();
    let mut terminal = Terminal::new(CrosstermBackend::new(BufWriter::with_capacity(
        1 << 16,
        std::io::stderr(),
    )))?;
    let _drawing = DRAWING.lock().unwrap_or_else(PoisonError::into_inner);
    // Cleared here, not by `Terminal::clear`, which asks the terminal where its cursor is: the
    // answer comes on stdin, and without raw mode it would wait for a newline and be echoed.
    let entered = crossterm::execute!(
        terminal.backend_mut(),
        EnterAlternateScreen,
        Hide,
        Clear(ClearType::All)
    );
    ENTERED.store(true, Ordering::SeqCst);
    echo::off();
    if let Err(error) = entered {
        leave_locked();
        return Err(error);
    }
    Ok(terminal)
}

/// Draws one frame with `draw`, unless the screen was left already; `false` then, or when the
/// terminal refused the frame.
pub(crate) fn draw_frame(
    terminal: &mut Screen,
    draw: impl FnOnce(&mut ratatui::Frame<'_>),
) -> bool {
    let _drawing = DRAWING.lock().unwrap_or_else(PoisonError::into_inner);
    if !ENTERED.load(Ordering::SeqCst) {
        return false;
    }
    IN_FRAME.with(|in_frame| in_frame.set(true));
    let drawn = terminal.draw(draw).is_ok();
    IN_FRAME.with(|in_frame| in_frame.set(false));
    drawn
}

/// Leaves the alternate screen and shows the cursor, once (later calls do nothing).
pub(crate) fn leave() {
    if IN_FRAME.with(Cell::get) {
        leave_locked();
    } else {
        let _drawing = DRAWING.lock().unwrap_or_else(PoisonError::into_inner);
        leave_locked();
    }
}

/// [`leave`], with [`DRAWING`] held by the caller.
fn leave_locked() {
    if ENTERED.swap(false, Ordering::SeqCst) {
        echo::restore();
        let mut stderr = std::io::stderr();
        // Nothing else to do on a terminal that is gone.
        let _ = crossterm::execute!(stderr, LeaveAlternateScreen, Show);
        let _ = stderr.flush();
    }
}

/// The terminal's echo: turned off on entering, the saved modes put back on leaving.
#[cfg(unix)]
mod echo {
    use std::sync::{Mutex, PoisonError};

    use rustix::termios::{tcgetattr, tcsetattr, LocalModes, OptionalActions, Termios};

    /// The modes before [`off`], while they are changed.
    static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

    /// Echo off on stderr's terminal (a terminal that refuses keeps its echo).
    pub(super) fn off() {
        let stderr = std::io::stderr();
        let Ok(saved) = tcgetattr(&stderr) else {
            return;
        };
        let mut quiet = saved.clone();
        quiet.local_modes.remove(LocalModes::ECHO);
        if tcsetattr(&stderr, OptionalActions::Now, &quiet).is_ok() {
            *SAVED.lock().unwrap_or_else(PoisonError::into_inner) = Some(saved);
        }
    }

    /// The modes [`off`] saved, back.
    pub(super) fn restore() {
        let saved = SAVED.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(saved) = saved {
            let _ = tcsetattr(std::io::stderr(), OptionalActions::Now, &saved);
        }
    }
}

/// Elsewhere the echo is left as it is.
#[cfg(not(unix))]
mod echo {
    pub(super) fn off() {}
    pub(super) fn restore() {}
}

fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            leave();
            previous(info);
        }));
    });
}
