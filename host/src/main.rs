//! The `agentx-host` binary: parse arguments, run the subcommand, map the outcome to an exit code.

#![deny(unsafe_code)]

use std::process::ExitCode;

/// mimalloc returns freed memory to the system, where glibc's malloc keeps what a dataset import
/// or a burst of large bodies freed: a run's RSS then follows its working set.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_arena_eager_commit` (the index in its `mimalloc.h` enum, v2 and v3 alike).
#[cfg(target_os = "linux")]
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Commits the allocator's arenas as they are used. By default mimalloc commits a whole arena up
/// front on Linux and its freed pages stay resident: a session-tree replay at 64 lanes held 95-105
/// MiB more at its peak than with commit on demand (58-61), for the same CPU per token. The option
/// is read when the first arena is reserved, so it is set before `main` (an ELF constructor).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)] // an ELF constructor: a plain function pointer, run once by the loader
#[used]
#[link_section = ".init_array"]
static COMMIT_ON_DEMAND: extern "C" fn() = commit_on_demand;

#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
extern "C" fn commit_on_demand() {
    // SAFETY: sets one of the allocator's options; nothing is allocated or read.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0) }
}

fn main() -> ExitCode {
    agentx::cli::main()
}
