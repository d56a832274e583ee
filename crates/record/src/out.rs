//! Printing that never panics: `outln!`/`out!` for stdout and `errln!` for stderr. A closed pipe
//! (`agentx-host dataset inspect … | head -1`) ends that stream's output quietly; the command goes on
//! to its end (nothing measured is lost) and exits with its own code. [`stdout_closed`] lets a long
//! listing stop early. [`capture`] keeps what one thread prints in buffers (a command run inside
//! another program, such as a test).

use std::cell::RefCell;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);
static STDERR_CLOSED: AtomicBool = AtomicBool::new(false);

/// Whether stdout's reader went away (a closed pipe): later output to it is dropped.
/// Never while this thread's output is captured (see [`capture`]).
pub fn stdout_closed() -> bool {
    let capturing = CAPTURED.with(|captured| captured.borrow().is_some());
    !capturing && STDOUT_CLOSED.load(Ordering::Relaxed)
}

fn write(
    mut writer: impl Write,
    closed: &AtomicBool,
    args: std::fmt::Arguments<'_>,
    newline: bool,
) {
    if closed.load(Ordering::Relaxed) {
        return;
    }
    let result = writer
        .write_fmt(args)
        .and_then(|()| {
            if newline {
                writer.write_all(b"\n")
            } else {
                Ok(())
            }
        })
        .and_then(|()| writer.flush());
    if result.is_err() {
        // A closed pipe, a full disk or a revoked terminal: nothing more can reach the reader.
        closed.store(true, Ordering::Relaxed);
    }
}

/// Which of a capture's two buffers a write goes to.
#[derive(Clone, Copy)]
enum Stream {
    Out,
    Err,
}

/// What this thread printed since [`capture`] began: `(stdout, stderr)`.
type Captured = (Vec<u8>, Vec<u8>);

thread_local! {
    static CAPTURED: RefCell<Option<Captured>> = const { RefCell::new(None) };
}

/// Appends to this thread's capture, if one is under way; `false` when none is.
fn write_captured(stream: Stream, args: std::fmt::Arguments<'_>, newline: bool) -> bool {
    CAPTURED.with(|captured| {
        let mut captured = captured.borrow_mut();
        let Some((out, err)) = captured.as_mut() else {
            return false;
        };
        let buffer = match stream {
            Stream::Out => out,
            Stream::Err => err,
        };
        // Writing to a vector cannot fail.
        let _ = buffer.write_fmt(args);
        if newline {
            buffer.push(b'\n');
        }
        true
    })
}

/// Runs `body` with what `outln!`, `out!` and `errln!` print on this thread kept in two buffers in
/// place of the process's stdout and stderr, and returns them with `body`'s result:
/// `(result, stdout, stderr)`. Other threads print as before; a capture inside a capture is the
/// inner one's.
pub fn capture<R>(body: impl FnOnce() -> R) -> (R, Vec<u8>, Vec<u8>) {
    /// Puts back the capture that was under way when this one began, also when `body` panics.
    struct Restore(Option<Captured>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            CAPTURED.with(|captured| *captured.borrow_mut() = outer);
        }
    }
    let outer = CAPTURED.with(|captured| captured.replace(Some((Vec::new(), Vec::new()))));
    let restore = Restore(outer);
    let result = body();
    let (out, err) = CAPTURED
        .with(|captured| captured.borrow_mut().take())
        .unwrap_or_default();
    drop(restore);
    (result, out, err)
}

/// Writes to stdout (the body of `out!` and `outln!`).
pub fn stdout(args: std::fmt::Arguments<'_>, newline: bool) {
    if !write_captured(Stream::Out, args, newline) {
        write(std::io::stdout().lock(), &STDOUT_CLOSED, args, newline);
    }
}

/// Writes to stderr (the body of `errln!`).
pub fn stderr(args: std::fmt::Arguments<'_>, newline: bool) {
    if !write_captured(Stream::Err, args, newline) {
        write(std::io::stderr().lock(), &STDERR_CLOSED, args, newline);
    }
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

#[cfg(test)]
mod tests {
    use super::capture;

    #[test]
    fn a_capture_holds_this_threads_output_and_not_another_threads() {
        let (answer, out, err) = capture(|| {
            crate::outln!("table {}", 1);
            crate::out!("no newline");
            crate::errln!("warning");
            let (inner, inner_out, _) = capture(|| {
                crate::outln!("inner");
                7
            });
            assert_eq!((inner, inner_out), (7, b"inner\n".to_vec()));
            std::thread::spawn(|| {
                let ((), other, _) = capture(|| crate::outln!("other thread"));
                assert_eq!(other, b"other thread\n");
            })
            .join()
            .unwrap();
            42
        });
        assert_eq!(answer, 42);
        assert_eq!(String::from_utf8(out).unwrap(), "table 1\nno newline");
        assert_eq!(String::from_utf8(err).unwrap(), "warning\n");
    }
}
