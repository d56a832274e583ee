//! The `agentx-host` binary: parse arguments, run the subcommand, map the outcome to an exit code.

#![deny(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    agentx::cli::main()
}
