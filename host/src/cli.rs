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
    /// Run the built-in simulated OpenAI-compatible inference server (vLLM-like).
    Sim(crate::sim::SimArgs),
}

/// Parse the command line, run it, and map the result to the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Sim(args) => crate::sim::cli_main(args),
    }
}
