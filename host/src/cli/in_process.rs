//! A command run inside another program (the integration tests): [`run_in_process`] takes what the
//! binary reads from its process (the command line, the working directory, the agentx home and the
//! environment) as arguments, and gives back the exit code and what the command printed.
//!
//! The binary reads process-global state in these places, and an in-process command takes each
//! one from its arguments instead:
//! - the environment: clap's `env = ...` attributes (each given from the map, as the variable
//!   would), and the variables the command line reads (`AGENTX_*`/`AIPERF_*` settings, the API key,
//!   the runner's variables, a scheduler's shard variables) through [`env_var`];
//! - the command line (`std::env::args`), kept in the manifest: the argv given;
//! - the working directory: the default `artifacts/` parent and a relative
//!   `--output-artifact-dir` are under the given directory;
//! - `AGENTX_HOME` and the caches under it (scenario store, compiled components, bundled corpus);
//! - printing: `outln!`/`out!`/`errln!` on this thread go to buffers (`agentx_record::out::capture`);
//! - the tracing subscriber: none is installed (the log lines are not part of the result);
//! - signals: no handler is installed (`RunConfig::signals` off), no progress bar is drawn, and a
//!   terminal is never assumed.
//!
//! What cannot be taken is refused before anything runs, so a test that needs it stays a process:
//! - `sim` (a foreground server until a signal) and `sweep` (it forwards SIGINT/SIGTERM itself);
//! - variables read below the command line, on the run's own threads: TraceLab's join knobs, the
//!   Hugging Face cache, `AGENTX_TEST_PANIC`. Given in the
//!   map, or set in the calling process (where they would leak into the run), they are refused;
//! - a relative path in the argv that names a file under the working directory (the run reads files
//!   against the process's directory): pass it absolute.
//!
//! Open: an in-process demo run (`run` without `--url`) twice ended with another exit code than the
//! binary's, and then passed; its test runs it as a process until that is understood.
//!
//! The dataset cache (`*_DATASET_MMAP_CACHE_DIR`, else `<home>/datasets`) and the `cwd` the
//! manifest records come from the command's own environment and directory. Two in-process commands at once on two threads do not see each other: the
//! environment, the working directory and the captured output are the calling thread's.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::bail;
use clap::{CommandFactory, FromArgMatches};

use super::{Cli, Command};
use crate::run::artifact_dir::{OutputDir, DEFAULT_PARENT};

/// The variables read below the command line (by the dataset, tokens and replay crates, on the
/// run's own threads), which an in-process command cannot take from its map.
pub const UNROUTED_VARIABLES: &[&str] = &[
    "AIPERF_DATASET_TRACELAB_SUBAGENT_JOIN",
    "AIPERF_DATASET_TRACELAB_CODEX_SUBAGENT_JOIN",
    "AIPERF_DATASET_TRACELAB_MIN_SPAWN_MS",
    "HF_HUB_CACHE",
    "HUGGINGFACE_HUB_CACHE",
    "HF_HOME",
    "AGENTX_TEST_PANIC",
];

/// How an in-process command ended: its exit code (the binary's) and what it printed with the
/// printing macros (log lines are not kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The exit code the binary would have ended with.
    pub code: u8,
    /// What the command printed on stdout.
    pub stdout: String,
    /// What it printed on stderr with the printing macros (not the log).
    pub stderr: String,
}

/// What a process would have read from its environment, for the command running on this thread.
struct Ambient {
    env: BTreeMap<String, String>,
    cwd: PathBuf,
}

thread_local! {
    static AMBIENT: RefCell<Option<Ambient>> = const { RefCell::new(None) };
}

/// Clears this thread's [`Ambient`] when the command ends (or panics).
struct AmbientScope;

impl AmbientScope {
    fn enter(ambient: Ambient) -> anyhow::Result<AmbientScope> {
        AMBIENT.with(|slot| {
            let mut slot = slot.borrow_mut();
            if slot.is_some() {
                bail!("an in-process command is already running on this thread");
            }
            *slot = Some(ambient);
            Ok(AmbientScope)
        })
    }
}

impl Drop for AmbientScope {
    fn drop(&mut self) {
        AMBIENT.with(|slot| slot.borrow_mut().take());
    }
}

/// The environment variable `key` as the command sees it: the in-process map of this thread's
/// command, else the process's (a value that is not UTF-8 reads as unset, as `std::env::var`).
pub(crate) fn env_var(key: &str) -> Option<String> {
    AMBIENT
        .with(|slot| {
            slot.borrow()
                .as_ref()
                .map(|ambient| ambient.env.get(key).cloned())
        })
        .unwrap_or_else(|| std::env::var(key).ok())
}

/// Whether this thread runs an in-process command.
pub(crate) fn in_process() -> bool {
    AMBIENT.with(|slot| slot.borrow().is_some())
}

/// Whether stderr is a terminal the command may draw on: never in process.
pub(crate) fn stderr_is_terminal() -> bool {
    !in_process() && std::io::IsTerminal::is_terminal(&std::io::stderr())
}

/// The command's working directory: the in-process one given, else the process's.
pub(crate) fn current_dir() -> Option<PathBuf> {
    AMBIENT
        .with(|slot| slot.borrow().as_ref().map(|ambient| ambient.cwd.clone()))
        .or_else(|| std::env::current_dir().ok())
}

/// The run's artifact directory for `--output-artifact-dir` (`flag`): in process, a relative one
/// (and the default `artifacts/` parent) under the command's working directory.
pub(crate) fn output_dir(flag: Option<PathBuf>) -> OutputDir {
    let cwd = AMBIENT.with(|slot| slot.borrow().as_ref().map(|ambient| ambient.cwd.clone()));
    match (cwd, flag) {
        (None, flag) => OutputDir::from_flag(flag),
        (Some(cwd), Some(dir)) => OutputDir::Given(cwd.join(dir)),
        (Some(cwd), None) => OutputDir::Fresh {
            parent: cwd.join(DEFAULT_PARENT),
        },
    }
}

/// Runs `agentx-host ARGV` (`argv` without the program name) in this process as the binary would
/// in `cwd` with `AGENTX_HOME=home` and the environment `env` (and nothing of this process's), and
/// returns its exit code and what it printed. An error is a refusal (see the module docs): nothing
/// ran, and the command needs a process.
pub fn run_in_process(
    argv: &[String],
    cwd: &Path,
    home: &Path,
    env: &BTreeMap<String, String>,
) -> anyhow::Result<Finished> {
    refuse_unrouted(argv, cwd, env)?;
    let mut env = env.clone();
    env.insert("AGENTX_HOME".into(), home.display().to_string());
    let scope = AmbientScope::enter(Ambient {
        env: env.clone(),
        cwd: cwd.to_owned(),
    })?;
    let (code, stdout, stderr) = agentx_record::out::capture(|| -> anyhow::Result<ExitCode> {
        let cli = match parse(argv, &env) {
            Ok(cli) => cli,
            Err(clap_error) => return Ok(print_clap_error(&clap_error)),
        };
        if let Command::Sim(_) | Command::Sweep(_) = cli.command {
            bail!("`sim` and `sweep` install signal handlers: run them as a process");
        }
        Ok(super::execute(cli, argv.to_vec()))
    });
    drop(scope);
    Ok(Finished {
        code: super::exit_code_number(code?),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    })
}

/// Refuses what an in-process command cannot take from its arguments.
fn refuse_unrouted(
    argv: &[String],
    cwd: &Path,
    env: &BTreeMap<String, String>,
) -> anyhow::Result<()> {
    for key in UNROUTED_VARIABLES {
        if env.contains_key(*key) {
            bail!("{key} is read by the run's own threads from the process environment: run this command as a process");
        }
        if std::env::var_os(key).is_some() {
            bail!("{key} is set in this process and would reach an in-process run: unset it, or run the command as a process");
        }
    }
    for token in argv {
        if token == "--" {
            bail!("`--` in an in-process command line: run it as a process");
        }
        let value = token
            .split_once('=')
            .map_or(token.as_str(), |(_, value)| value);
        let path = Path::new(value);
        if !value.is_empty() && path.is_relative() && cwd.join(path).exists() {
            bail!(
                "{value} is relative to the working directory, which an in-process run does not change: pass {}",
                cwd.join(path).display()
            );
        }
    }
    Ok(())
}

/// The command line parsed with clap's `env = ...` attributes read from `env`: a variable is used
/// when its flag is absent from the command line, as clap does with the process's environment.
fn parse(argv: &[String], env: &BTreeMap<String, String>) -> Result<Cli, clap::Error> {
    let full = |extra: &[String]| -> Vec<OsString> {
        std::iter::once("agentx-host")
            .chain(argv.iter().map(String::as_str))
            .chain(extra.iter().map(String::as_str))
            .map(OsString::from)
            .collect()
    };
    let cleared = without_process_env(Cli::command());
    let matches = cleared.clone().try_get_matches_from(full(&[]))?;
    // The flags of the command given (its own and the global ones) that read a variable.
    let mut named = Cli::command();
    named.build();
    let mut leaf = &named;
    let mut level = &matches;
    while let Some((name, sub)) = level.subcommand() {
        let Some(found) = leaf.find_subcommand(name) else {
            break;
        };
        leaf = found;
        level = sub;
    }
    let mut extra = Vec::new();
    for arg in leaf.get_arguments() {
        let Some(variable) = arg.get_env().and_then(|variable| variable.to_str()) else {
            continue;
        };
        let Some(value) = env.get(variable) else {
            continue;
        };
        let given = level.value_source(arg.get_id().as_str())
            == Some(clap::parser::ValueSource::CommandLine);
        if given {
            continue;
        }
        let (Some(long), true) = (arg.get_long(), arg.get_action().takes_values()) else {
            return Err(clap::Error::raw(
                clap::error::ErrorKind::ArgumentConflict,
                format!("{variable} sets an argument without a value, which an in-process command cannot take from its map: run it as a process\n"),
            ));
        };
        extra.push(format!("--{long}={value}"));
    }
    if extra.is_empty() {
        return Cli::from_arg_matches(&matches);
    }
    Cli::from_arg_matches(&cleared.try_get_matches_from(full(&extra))?)
}

/// `command` without its `env = ...` attributes, whose values clap took from the process's
/// environment when they were built.
fn without_process_env(command: clap::Command) -> clap::Command {
    command
        .mut_args(|arg| {
            if arg.get_env().is_some() {
                arg.env(None)
            } else {
                arg
            }
        })
        .mut_subcommands(without_process_env)
}

/// Prints a command-line error (or `--help`/`--version`) where the binary does, and gives its exit
/// code.
fn print_clap_error(error: &clap::Error) -> ExitCode {
    let text = error.render().to_string();
    if error.use_stderr() {
        agentx_record::out::stderr(format_args!("{text}"), false);
    } else {
        agentx_record::out::stdout(format_args!("{text}"), false);
    }
    ExitCode::from(u8::try_from(error.exit_code()).unwrap_or(2))
}
