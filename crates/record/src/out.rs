//! Printing that never panics: `outln!`/`out!` for stdout and `errln!` for stderr. A closed pipe
//! (`agentx-host dataset inspect … | head -1`) ends that stream's output quietly; the command goes on
//! to its end (nothing measured is lost) and exits with its own code. [`stdout_closed`] lets a long
//! listing stop early.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether stdout's reader went away (a closed pipe): later output to it is dropped.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(Ordering::Relaxed)
}

fn write(mut w: impl Write, closed: &AtomicBool, args: std::fmt::Arguments<'_>, newline: bool) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    let result = w
        .write_fmt(args)
        .and_then(|()| if newline { w.write_all(b"\n") } else { Ok(()) })
        .and_then(|()| w.flush());
    if result.is_err() {
        // A closed pipe, a full disk or a revoked terminal: nothing more can reach the reader.
        closed.store(true, Ordering::Relaxed);
    }
}

/// Writes to stdout (the body of `out!` and `outln!`).
pub fn stdout(args: std::fmt::Arguments<'_>, newline: bool) {
    write(std::io::stdout().lock(), &STDOUT_CLOSED, args, newline);
}

/// Writes to stderr (the body of `errln!`).
pub fn stderr(args: std::fmt::Arguments<'_>, newline: bool) {
    write(std::io::stderr().lock(), &STDERR_CLOSED, args, newline);
}

/// `println!` that ends quietly on a closed pipe.
#[macro_export]
macro_rules! outln {
    () => { $crate::out::stdout(format_args!(""), true) };
    ($($t:tt)*) => { $crate::out::stdout(format_args!($($t)*), true) };
}

/// `print!` that ends quietly on a closed pipe.
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::out::stdout(format_args!($($t)*), false) };
}

/// `eprintln!` that ends quietly on a closed pipe.
#[macro_export]
macro_rules! errln {
    () => { $crate::out::stderr(format_args!(""), true) };
    ($($t:tt)*) => { $crate::out::stderr(format_args!($($t)*), true) };
}
