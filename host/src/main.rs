//! The `agentx-host` binary: parse arguments, run the subcommand, map the outcome to an exit code.

#![deny(unsafe_code)]

use std::process::ExitCode;

/// mimalloc returns freed memory to the system, where glibc's malloc keeps what a dataset import
/// or a burst of large bodies freed: a run's RSS then follows its working set.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The allocator's options ([`agentx::allocator`]), set before `main`: mimalloc reads them when it
/// reserves its first arena.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // an ELF constructor: a plain function pointer, run once by the loader
#[used]
#[link_section = ".init_array"]
static ALLOCATOR_OPTIONS: extern "C" fn() = agentx::allocator::set_options;

fn main() -> ExitCode {
    agentx::cli::main()
}
