//! The `agentx-host` binary: parse arguments, run the subcommand, map the outcome to an exit code.

#![deny(unsafe_code)]

use std::process::ExitCode;

/// mimalloc returns freed memory to the system, where glibc's malloc keeps what a dataset import
/// or a burst of large bodies freed: a run's RSS then follows its working set.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    agentx::cli::main()
}
