//! A command run under a pseudo-terminal ([`PtyChild`]), as a person runs it in a terminal: the
//! pty is its controlling terminal and its stdin, stdout and stderr (`setsid` and `TIOCSCTTY`,
//! done by portable-pty), so a `0x03` written to the pty is a SIGINT to its foreground process
//! group, and everything it prints, escape codes included, is read back. For the dashboard's
//! tests (the root's tests/dashboard.rs, with the `testkit` feature).

use std::io::{Read, Write};
use std::process::Command;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use portable_pty::{native_pty_system, Child, CommandBuilder, MasterPty, PtySize};

pub use portable_pty::ExitStatus;

/// A child process on a pseudo-terminal, its output read by a thread as it comes.
pub struct PtyChild {
    child: Box<dyn Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    output: Arc<Mutex<Vec<u8>>>,
    /// Says the reader saw the end of the output (every copy of the pty's other side closed).
    read_all: mpsc::Receiver<()>,
    /// Kept open while the child runs: closing it hangs the child's terminal up.
    _master: Box<dyn MasterPty + Send>,
}

impl std::fmt::Debug for PtyChild {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("PtyChild")
            .field("child", &self.child)
            .finish_non_exhaustive()
    }
}

fn pty_error(error: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(format!("pseudo-terminal: {error}"))
}

impl PtyChild {
    /// Starts `command` (its program, arguments, working directory and the environment changes
    /// it names, over this process's environment) on a new pseudo-terminal of `rows` x `columns`.
    pub fn spawn(command: &Command, rows: u16, columns: u16) -> std::io::Result<PtyChild> {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows,
                cols: columns,
                pixel_width: 0,
                pixel_height: 0,
            })
            .map_err(pty_error)?;
        let mut builder = CommandBuilder::new(command.get_program());
        builder.args(command.get_args());
        for (key, value) in command.get_envs() {
            match value {
                Some(value) => builder.env(key, value),
                None => builder.env_remove(key),
            }
        }
        // portable-pty starts a command without a directory in $HOME: name this one's.
        let directory = match command.get_current_dir() {
            Some(directory) => directory.to_path_buf(),
            None => std::env::current_dir()?,
        };
        builder.cwd(directory);
        let child = pair.slave.spawn_command(builder).map_err(pty_error)?;
        // Only the child holds the terminal's side now, so the reader ends when the child does.
        drop(pair.slave);
        let mut reader = pair.master.try_clone_reader().map_err(pty_error)?;
        let writer = pair.master.take_writer().map_err(pty_error)?;
        let output = Arc::new(Mutex::new(Vec::new()));
        let (done, read_all) = mpsc::channel();
        let sink = Arc::clone(&output);
        std::thread::spawn(move || {
            let mut buffer = [0u8; 8192];
            // Linux answers EIO once the child's side is closed: the end, as 0 is.
            while let Ok(read @ 1..) = reader.read(&mut buffer) {
                sink.lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .extend_from_slice(&buffer[..read]);
            }
            let _ = done.send(());
        });
        Ok(PtyChild {
            child,
            writer,
            output,
            read_all,
            _master: pair.master,
        })
    }

    /// Everything the child printed so far, bytes as they came.
    pub fn output(&self) -> Vec<u8> {
        self.output
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// [`PtyChild::output`] as text (invalid UTF-8 replaced).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.output()).into_owned()
    }

    /// Waits until the output holds each of `needles`, at most `within`; `false` on the timeout
    /// or when the child ended first.
    pub fn wait_for(&mut self, needles: &[&str], within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            let text = self.text();
            if needles.iter().all(|needle| text.contains(needle)) {
                return true;
            }
            if Instant::now() >= deadline || self.has_exited() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the child has exited.
    pub fn has_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    /// Writes `bytes` to the terminal, as typed.
    pub fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(bytes)?;
        self.writer.flush()
    }

    /// Types Ctrl-C (`0x03`): the terminal sends SIGINT to the child's foreground process group.
    pub fn interrupt(&mut self) -> std::io::Result<()> {
        self.write(&[0x03])
    }

    /// Waits for the child to exit, at most `within`, and for the last of its output; `None`
    /// when it did not exit in time (it is killed then).
    pub fn wait(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                // The output ends when the child's side closes, a moment after the exit.
                let _ = self
                    .read_all
                    .recv_timeout(deadline.saturating_duration_since(Instant::now()));
                return Some(status);
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for PtyChild {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
