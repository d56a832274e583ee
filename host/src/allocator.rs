//! The allocator's options: what `agentx-host` (and the benches that measure its memory) set in
//! mimalloc before `main`, from an ELF constructor of their own (`main.rs`) that calls
//! [`set_options`]: they are read when the first arena is reserved.
//!
//! - Arenas are committed as they are used. By default mimalloc commits a whole arena up front on
//!   Linux and its freed pages stay resident: a session-tree replay at 64 lanes held 95-105 MiB
//!   more at its peak than with commit on demand (58-61), for the same CPU per token.
//! - Freed pages go back to the system after [`PURGE_DELAY_MS`], not after mimalloc v3's default
//!   of a second (ten for a whole arena's): at 1,024 lanes, where bodies of every size come and
//!   go, a session-tree replay held 392-402 MiB at its peak with the default and 364-369 with 0 or
//!   10 ms, in alternating runs.

/// mimalloc's `mi_option_arena_eager_commit` (the index in its `mimalloc.h` enum, v2 and v3 alike).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// mimalloc's `mi_option_purge_delay` (the index in its `mimalloc.h` enum, v2 and v3 alike).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Milliseconds the allocator keeps freed pages committed before it gives them back.
pub const PURGE_DELAY_MS: std::ffi::c_long = 10;

/// Sets the allocator's options; for a binary's ELF constructor, before anything is allocated.
#[allow(unsafe_code)]
pub extern "C" fn set_options() {
    // SAFETY: sets two of the allocator's options; nothing is allocated or read.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0);
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
    }
}
