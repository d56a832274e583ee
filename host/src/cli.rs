//! Command-line arguments (syntax only) and dispatch of the subcommands.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Benchmark engine for LLM inference servers under agentic-coding load.
#[derive(Debug, Parser)]
#[command(name = "agentx-host", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Import, inspect, summarize or synthesize weka trace corpora.
    Dataset(crate::dataset::cmd::DatasetArgs),
}

/// Parse the command line, run it, and map the result to the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // Logs go to stderr (data to stdout); RUST_LOG overrides the default level. `try_init` tolerates a
    // subscriber installed elsewhere.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .try_init();
    match cli.command {
        Command::Dataset(args) => report(crate::dataset::cmd::run(args)),
    }
}

/// Prints an error (if any) and maps it to exit code 2.
fn report<E: std::fmt::Display>(r: Result<(), E>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
