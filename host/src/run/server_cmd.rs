//! A server started for one sweep point (`sweep --server-cmd`): the command template and its
//! placeholders, a free local port, the process (`sh -c CMD` in a process group of its own, its
//! stdout and stderr in a log file), the wait until `/v1/models` answers 200, and the stop of the
//! whole group (SIGTERM, then SIGKILL after a grace period).
//!
//! Invariants: a [`Server`] always ends its group. [`Server::stop`] does it and says how; a
//! `Server` dropped without a stop (an early return, a panic) sends SIGKILL to the group. Only a
//! SIGKILL of agentx itself leaves a server running; its pid (the leader of its group) is the
//! log's line from agentx, written when it started.

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rustix::process::{kill_process_group, test_kill_process_group, Pid, Signal};

use super::Cancel;
use crate::client::{Client, ClientConfig};
use crate::export::manifest::{ServerEnd, ServerExit, ServerInfo};

/// The log of a started server's stdout and stderr, in the point's directory.
pub const LOG_FILE: &str = "server.log";

/// How long a server's group has to end after SIGTERM before it gets SIGKILL.
pub const STOP_GRACE: Duration = Duration::from_secs(30);

/// Lines of the log shown when a server fails to start.
const TAIL_LINES: usize = 20;

/// `sweep --server-cmd`: how each point's server is started and reached.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    /// The command; `{port}` and `{conc}` are filled per point.
    pub command: Template,
    /// The URL a point targets; `{port}` is filled per point.
    pub url: Template,
    /// `--server-ready-timeout`.
    pub ready_timeout: Duration,
}

/// The target without `--url`.
pub const DEFAULT_URL: &str = "http://127.0.0.1:{port}";

impl ServerSpec {
    /// Reads `--server-cmd` and `--url` (default [`DEFAULT_URL`]): a URL on the picked port needs
    /// a command that listens on it.
    pub fn new(
        command: &str,
        url: Option<&str>,
        ready_timeout: Duration,
    ) -> Result<ServerSpec, ServerError> {
        let command = Template::parse("--server-cmd", command, &["port", "conc"])?;
        let url = Template::parse("--url", url.unwrap_or(DEFAULT_URL), &["port"])?;
        if url.uses("port") && !command.uses("port") {
            return Err(ServerError::Template {
                flag: "--server-cmd",
                text: command.text().to_owned(),
                why: format!(
                    "it has no {{port}}, but the point's server is reached at {}; put {{port}} where the server takes its port (e.g. --port {{port}}), or pass --url with the server's fixed address",
                    url.text()
                ),
            });
        }
        Ok(ServerSpec {
            command,
            url,
            ready_timeout,
        })
    }

    /// The command and the URL of the point of concurrency `conc` on `port`.
    pub fn fill(&self, port: u16, conc: u32) -> (String, String) {
        let (port, conc) = (port.to_string(), conc.to_string());
        let v = [("port", port.as_str()), ("conc", conc.as_str())];
        (self.command.fill(&v), self.url.fill(&v))
    }
}

/// A command line with `{name}` placeholders. `{{` and `}}` are literal braces, and a shell
/// expansion `${...}` is kept as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    text: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(&'static str),
}

/// Why a server could not serve its point.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// A template flag's text is not a command this host can fill in.
    #[error("{flag} {text:?}: {why}")]
    Template {
        /// The flag (`--server-cmd`, `--server-health-url`).
        flag: &'static str,
        /// Its text.
        text: String,
        /// What is wrong with it.
        why: String,
    },
    /// No free local port for `{port}`.
    #[error("cannot pick a free local port for the server: {0}")]
    Port(std::io::Error),
    /// The server's log file could not be created.
    #[error("cannot create the server log {}: {source}", path.display())]
    Log {
        /// The log's path.
        path: PathBuf,
        /// Why it could not be created.
        source: std::io::Error,
    },
    /// The shell could not be started.
    #[error("cannot start the server `sh -c {command:?}`: {source}")]
    Spawn {
        /// The command after substitution.
        command: String,
        /// Why it could not be started.
        source: std::io::Error,
    },
    /// The server exited before its health URL answered.
    #[error("the server exited before it was ready ({status}): `{}`; the end of {}:\n{}", at.command, at.log.display(), at.tail)]
    Exited {
        /// Its exit status.
        status: String,
        /// Its command and the end of its log.
        at: Box<StartLog>,
    },
    /// The health URL did not answer 200 within --server-ready-timeout.
    #[error("the server did not answer {url} with 200 within --server-ready-timeout {timeout_s:.0} s (last: {last}): `{}`; raise --server-ready-timeout or look at {}:\n{}", at.command, at.log.display(), at.tail)]
    NotReady {
        /// The health URL.
        url: String,
        /// `--server-ready-timeout` (s).
        timeout_s: f64,
        /// The last answer or error.
        last: String,
        /// Its command and the end of its log.
        at: Box<StartLog>,
    },
    /// An interrupt came while waiting for the server.
    #[error("interrupted while waiting for the server to become ready")]
    Interrupted,
    /// The health check's client could not be built.
    #[error("cannot reach the server: {0}")]
    Client(String),
}

/// The server a failed start is about: its command, and the end of its log.
#[derive(Debug)]
pub struct StartLog {
    /// The command after substitution.
    pub command: String,
    /// The server's log file.
    pub log: PathBuf,
    /// The log's last lines.
    pub tail: String,
}

impl Template {
    /// Reads `text`, the value of `flag`, whose placeholders must be among `allowed`.
    pub fn parse(
        flag: &'static str,
        text: &str,
        allowed: &[&'static str],
    ) -> Result<Template, ServerError> {
        let err = |why: String| ServerError::Template {
            flag,
            text: text.to_owned(),
            why,
        };
        let names = allowed
            .iter()
            .map(|a| format!("{{{a}}}"))
            .collect::<Vec<_>>()
            .join(" and ");
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(c) = rest.chars().next() {
            if rest.starts_with("{{") || rest.starts_with("}}") {
                lit.push(c);
                rest = &rest[2..];
            } else if rest.starts_with("${") {
                // The shell's own expansion, `${VAR}`: kept up to its closing brace.
                let end = rest.find('}').map_or(rest.len(), |i| i + 1);
                lit.push_str(&rest[..end]);
                rest = &rest[end..];
            } else if c == '{' {
                let Some(end) = rest.find('}') else {
                    return Err(err(format!(
                        "an unclosed {{ (placeholders are {names}; write {{{{ for a literal brace)"
                    )));
                };
                let name = &rest[1..end];
                let Some(&known) = allowed.iter().find(|a| **a == name) else {
                    return Err(err(format!(
                        "unknown placeholder {{{name}}}; the placeholders are {names} (write {{{{ and }}}} for literal braces)"
                    )));
                };
                parts.push(Part::Text(std::mem::take(&mut lit)));
                parts.push(Part::Var(known));
                rest = &rest[end + 1..];
            } else if c == '}' {
                return Err(err(
                    "a } that closes no placeholder (write }} for a literal brace)".into(),
                ));
            } else {
                lit.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        parts.push(Part::Text(lit));
        parts.retain(|p| *p != Part::Text(String::new()));
        Ok(Template {
            text: text.to_owned(),
            parts,
        })
    }

    /// Whether the template uses the placeholder `name`.
    pub fn uses(&self, name: &str) -> bool {
        self.parts
            .iter()
            .any(|p| matches!(p, Part::Var(v) if *v == name))
    }

    /// The template as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// The text with every placeholder replaced by its value (`{name}` for a name not given).
    pub fn fill(&self, values: &[(&str, &str)]) -> String {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.clone(),
                Part::Var(v) => values
                    .iter()
                    .find(|(k, _)| k == v)
                    .map_or_else(|| format!("{{{v}}}"), |(_, x)| x.to_string()),
            })
            .collect()
    }
}

/// A free TCP port on 127.0.0.1, as the OS hands one out (free when asked; the server binds it
/// moments later).
pub fn free_port() -> Result<u16, ServerError> {
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(ServerError::Port)?;
    Ok(l.local_addr().map_err(ServerError::Port)?.port())
}

/// A running server and what is known of it.
#[derive(Debug)]
pub struct Server {
    child: Child,
    info: ServerInfo,
    log: PathBuf,
    started: Instant,
    /// [`Server::stop`] ran: the drop has nothing to do.
    stopped: bool,
}

impl Server {
    /// Starts `sh -c command` in a process group of its own, its stdout and stderr appended to
    /// `log` (created; `log_rel` is how the manifest names it).
    pub fn start(
        command: &str,
        port: u16,
        url: &str,
        log: &Path,
        log_rel: &str,
    ) -> Result<Server, ServerError> {
        let log_err = |source| ServerError::Log {
            path: log.to_owned(),
            source,
        };
        let mut note = std::fs::File::create(log).map_err(log_err)?;
        let out = note.try_clone().map_err(log_err)?;
        let err = note.try_clone().map_err(log_err)?;
        let child = Command::new("sh")
            .arg("-c")
            .arg(command)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            // Its own group: a terminal's Ctrl-C reaches agentx, which stops the server itself,
            // and the stop reaches every process the command started.
            .process_group(0)
            .spawn()
            .map_err(|source| ServerError::Spawn {
                command: command.to_owned(),
                source,
            })?;
        tracing::info!(pid = child.id(), port, "server started: {command}");
        // One open file shared with the server: this line lands between its lines, not over them.
        let _ = writeln!(
            note,
            "agentx-host sweep: started `sh -c {command:?}` as pid {} (the leader of its process group) on port {port}",
            child.id()
        );
        Ok(Server {
            info: ServerInfo {
                command: command.to_owned(),
                port,
                pid: child.id(),
                url: url.to_owned(),
                ready_s: None,
                log: log_rel.to_owned(),
                exit: None,
            },
            child,
            log: log.to_owned(),
            started: Instant::now(),
            stopped: false,
        })
    }

    /// What is known of the server so far.
    pub fn info(&self) -> &ServerInfo {
        &self.info
    }

    /// Polls `GET /v1/models` under `ccfg`'s URL (with its API key) until it answers 200, with a
    /// growing pause between tries; fails when the server exits first, the timeout passes or the
    /// sweep is interrupted.
    pub fn wait_ready(
        &mut self,
        ccfg: &ClientConfig,
        timeout: Duration,
        cancel: &Cancel,
    ) -> Result<Duration, ServerError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ServerError::Client(format!("cannot start a runtime: {e}")))?;
        let client = {
            let _g = rt.enter();
            Client::new(ccfg).map_err(|e| ServerError::Client(e.to_string()))?
        };
        let url = format!("{}/v1/models", ccfg.url.trim_end_matches('/'));
        let mut pause = Duration::from_millis(50);
        let mut last = "no answer yet".to_string();
        loop {
            if let Some(status) = self.child.try_wait().ok().flatten() {
                self.info.exit = Some(exit_of(ServerEnd::Exited, status));
                return Err(ServerError::Exited {
                    status: describe(status),
                    at: self.start_log(),
                });
            }
            if cancel.interrupts() > 0 {
                return Err(ServerError::Interrupted);
            }
            let waited = self.started.elapsed();
            if waited >= timeout {
                return Err(ServerError::NotReady {
                    url,
                    timeout_s: timeout.as_secs_f64(),
                    last,
                    at: self.start_log(),
                });
            }
            let left = timeout.checked_sub(waited).unwrap();
            match rt.block_on(client.get("/v1/models", left.min(Duration::from_secs(10)), 1 << 16))
            {
                Ok((s, _, _)) if s == hyper::StatusCode::OK => {
                    let ready = self.started.elapsed();
                    self.info.ready_s = Some(ready.as_secs_f64());
                    tracing::info!(
                        "server ready after {:.1} s on port {}",
                        ready.as_secs_f64(),
                        self.info.port
                    );
                    return Ok(ready);
                }
                Ok((s, _, _)) => last = format!("HTTP {s}"),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(pause.min(timeout.saturating_sub(self.started.elapsed())));
            pause = (pause * 3 / 2).min(Duration::from_secs(2));
        }
    }

    fn start_log(&self) -> Box<StartLog> {
        Box::new(StartLog {
            command: self.info.command.clone(),
            log: self.log.clone(),
            tail: tail(&self.log),
        })
    }

    /// Whether the server's shell has exited on its own (before any stop).
    pub fn exited(&mut self) -> bool {
        if self.info.exit.is_none() {
            if let Some(status) = self.child.try_wait().ok().flatten() {
                self.info.exit = Some(exit_of(ServerEnd::Exited, status));
            }
        }
        self.info.exit.is_some()
    }

    /// Stops the whole process group: SIGTERM, then SIGKILL when any of it is left after `grace`.
    /// Returns what is known of the server, its exit included.
    pub fn stop(mut self, grace: Duration) -> ServerInfo {
        self.stopped = true;
        let own = self.exited().then(|| self.info.exit.clone()).flatten();
        let pgid = Pid::from_raw(self.info.pid as i32);
        let mut how = ServerEnd::Terminated;
        if let Some(pgid) = pgid {
            let _ = kill_process_group(pgid, Signal::TERM);
            let t0 = Instant::now();
            let mut alive = || {
                // The leader is reaped first: a zombie still counts for `kill`.
                let _ = self.child.try_wait();
                group_alive(pgid)
            };
            while alive() && t0.elapsed() < grace {
                std::thread::sleep(Duration::from_millis(50));
            }
            if alive() {
                tracing::warn!(
                    "the server's process group {pgid:?} outlived {:.0} s after SIGTERM; sending SIGKILL",
                    grace.as_secs_f64()
                );
                let _ = kill_process_group(pgid, Signal::KILL);
                how = ServerEnd::Killed;
            }
        }
        let status = self.child.wait();
        self.info.exit = Some(match (own, status) {
            (Some(e), _) => e,
            (None, Ok(s)) => exit_of(how, s),
            (None, Err(_)) => ServerExit {
                how,
                code: None,
                signal: None,
            },
        });
        tracing::info!(
            "server on port {} stopped ({:?})",
            self.info.port,
            self.info.exit
        );
        self.info.clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if !self.stopped {
            if let Some(pgid) = Pid::from_raw(self.info.pid as i32) {
                let _ = kill_process_group(pgid, Signal::KILL);
            }
            let _ = self.child.wait();
        }
    }
}

/// Whether any process of the group `pgid` is still alive; on Linux a group whose members are all
/// zombies (waiting for a parent that does not reap them) counts as ended.
fn group_alive(pgid: Pid) -> bool {
    if test_kill_process_group(pgid).is_err() {
        return false;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return true;
    };
    let want = pgid.as_raw_nonzero().get();
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .any(|stat| {
            // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses.
            let Some((_, after)) = stat.rsplit_once(')') else {
                return false;
            };
            let mut f = after.split_whitespace();
            let state = f.next();
            let pgrp = f.nth(1).and_then(|g| g.parse::<i32>().ok());
            pgrp == Some(want) && state != Some("Z")
        })
}

fn exit_of(how: ServerEnd, status: ExitStatus) -> ServerExit {
    ServerExit {
        how,
        code: status.code(),
        signal: status.signal(),
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit code {c}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        _ => status.to_string(),
    }
}

/// The last lines of the server's log (at most its last 8 KiB).
fn tail(log: &Path) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        let len = f.metadata().map_or(0, |m| m.len());
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(8192)));
        let _ = f.read_to_end(&mut buf);
    }
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    let shown = lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n");
    if shown.trim().is_empty() {
        "(empty)".into()
    } else {
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOTH: &[&str] = &["port", "conc"];

    #[test]
    fn placeholders_are_filled_and_unknown_ones_named() {
        let t = Template::parse(
            "--server-cmd",
            "serve --port {port} -c {conc} ${HOME} {{x}}",
            BOTH,
        )
        .unwrap();
        assert!(t.uses("port") && t.uses("conc"));
        assert_eq!(
            t.fill(&[("port", "8123"), ("conc", "4")]),
            "serve --port 8123 -c 4 ${HOME} {x}"
        );
        let e = Template::parse("--server-cmd", "serve --port {foo}", BOTH)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("--server-cmd \"serve --port {foo}\": unknown placeholder {foo}")
                && e.contains("{port} and {conc}"),
            "{e}"
        );
        let e = Template::parse("--url", "http://h:{conc}", &["port"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("--url") && e.contains("{conc}"), "{e}");
        assert!(Template::parse("--server-cmd", "a {port", BOTH).is_err());
        assert!(Template::parse("--server-cmd", "a }", BOTH).is_err());
        assert!(!Template::parse("--url", "http://h:8000", &["port"])
            .unwrap()
            .uses("port"));
    }

    /// Whether the group of `pid` still has a live member within a second (a signal is not
    /// acted on at once).
    fn group_alive_now(pid: u32) -> bool {
        let pgid = Pid::from_raw(pid as i32).unwrap();
        let t0 = Instant::now();
        while group_alive(pgid) {
            if t0.elapsed() > Duration::from_secs(1) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    #[test]
    fn a_stop_ends_the_whole_group_and_a_drop_kills_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join(LOG_FILE);
        // A shell that starts a child of its own and ignores SIGTERM: both are ended, by SIGKILL.
        // (It says so in words that are not in its command, which the log also holds.)
        let s = Server::start(
            "trap '' TERM; sleep 60 & echo trap-$((1+1)); wait",
            1,
            "http://127.0.0.1:1",
            &log,
            LOG_FILE,
        )
        .unwrap();
        let pid = s.info().pid;
        let t0 = Instant::now();
        while !std::fs::read_to_string(&log).unwrap().contains("trap-2") {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the shell never started"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let info = s.stop(Duration::from_millis(300));
        let exit = info.exit.unwrap();
        assert_eq!(exit.how, ServerEnd::Killed, "{exit:?}");
        assert_eq!(exit.signal, Some(9));
        assert!(!group_alive_now(pid));
        // A server that ends on SIGTERM.
        let s = Server::start("sleep 60", 1, "http://127.0.0.1:1", &log, LOG_FILE).unwrap();
        let info = s.stop(Duration::from_secs(10));
        assert_eq!(info.exit.unwrap().how, ServerEnd::Terminated);
        // Dropped without a stop: the group is killed.
        let s = Server::start("sleep 60 & wait", 1, "http://127.0.0.1:1", &log, LOG_FILE).unwrap();
        let pid = s.info().pid;
        drop(s);
        assert!(!group_alive_now(pid));
    }
}
