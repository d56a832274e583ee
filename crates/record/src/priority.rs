//! A thread's own scheduling priority: background threads (the records writer, the simulator's
//! request preparation) run nicer than the runtime that keeps time, so on a shared core a woken
//! runtime thread runs first instead of waiting out another thread's burst.

/// Raises the calling thread's nice value by `by` (at most to 19). Linux keeps one per thread
/// (`setpriority` with `who` 0 is the calling thread, not the process); elsewhere the thread keeps
/// its priority. An error is the kernel's refusal: the thread keeps its priority, slower to yield
/// its core, and nothing else changes.
#[cfg(target_os = "linux")]
pub fn lower_current_thread(by: i32) -> std::io::Result<()> {
    use rustix::process::{getpriority_process, setpriority_process};
    let nice = getpriority_process(None)?;
    Ok(setpriority_process(None, (nice + by).min(19))?)
}

/// Raises the calling thread's nice value by `by`: not on this platform.
#[cfg(not(target_os = "linux"))]
pub fn lower_current_thread(_by: i32) -> std::io::Result<()> {
    Ok(())
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn a_thread_lowers_its_own_priority_only() {
        use rustix::process::getpriority_process;
        let caller = getpriority_process(None).expect("the caller's nice value");
        let lowered = std::thread::spawn(|| {
            super::lower_current_thread(10).expect("a thread may lower its own priority");
            getpriority_process(None).ok()
        })
        .join()
        .expect("the thread ends");
        assert_eq!(lowered, Some((caller + 10).min(19)));
        assert_eq!(getpriority_process(None).ok(), Some(caller));
    }
}
