"""A CPU profile of agentx (`perf record --call-graph dwarf`, as bench/profile_trees.py --perf takes
it) split into the client's stages.

Each sample goes to one stage: kernel samples by the system call they are in (sending, receiving,
waiting for events and waking from it, futex, file writes, page faults), user samples by the innermost frame of their stack that
names a stage (STAGES, first match from the leaf up). Frames of no stage (the allocator, memcpy,
`core`, `alloc`, `std`, serde) are skipped, so their time goes to the stage that called them: the
copies and allocations of body building count as body building, serde_json's reading of an event as
SSE parsing.

    python3 bench/perf_stages.py OUT/perf-c64-r0.data [--folded OUT/c64.folded]

With --folded, the stacks are also written folded (one `frame;frame;... count` line per stack), the
input of inferno-flamegraph or flamegraph.pl.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess

# (stage, pattern on a user-space frame's symbol), innermost match wins.
STAGES = [
    ("scenario (wasm)", r"wasmtime|cranelift|agentx_scenario"),
    ("SSE parsing", r"agentx_protocol::(sse|exchange|anthropic::on_event|responses::on_event)|StreamState"),
    ("body building and history", r"agentx_protocol::(body|agent_wire|anthropic|responses)|agentx_dataset|JsonBody"),
    ("record writing", r"agentx_record::record|RecordSink|agentx_record::fsio"),
    ("metrics and live counts", r"agentx_metrics|agentx_telemetry|agentx_dashboard"),
    ("scheduling (replay)", r"agentx_replay"),
    ("HTTP (hyper)", r"hyper|h2::|http_body|http::"),
    ("client (pool, headers)", r"agentx_client"),
    ("tokio runtime", r"tokio::|mio::"),
]
# (stage, pattern on the syscall's entry point), for kernel samples; without a syscall (an interrupt
# or softirq over user code) the sample is "other kernel".
KERNEL = [
    ("syscalls: send (writev, sendto)", r"__x64_sys_(writev|sendto|sendmsg)"),
    ("syscalls: receive (recvfrom, read)", r"__x64_sys_(recvfrom|read|readv|recvmsg)$"),
    ("syscalls: epoll_wait (sleep and wake-up)", r"__x64_sys_epoll_wait|__x64_sys_epoll_pwait"),
    ("syscalls: futex (thread wake-ups)", r"__x64_sys_futex"),
    ("syscalls: file writes (records)", r"__x64_sys_(write|pwrite64)$"),
    ("syscalls: memory (faults, mmap)", r"asm_exc_page_fault|__x64_sys_(mmap|munmap|madvise|mprotect)"),
]


def samples(data: str):
    """(comm, [frames leaf first, as (symbol, dso)]) for each sample of `perf script`."""
    out = subprocess.run(
        ["perf", "script", "-i", data, "-F", "comm,ip,sym,dso", "--no-inline"],
        capture_output=True, text=True, errors="replace",
    ).stdout  # fmt: skip
    comm, frames = None, []
    for line in out.splitlines():
        if not line.strip():
            if comm is not None:
                yield comm, frames
            comm, frames = None, []
            continue
        if comm is None and not line.startswith(("\t", " ")):
            comm = line.split()[0]
            continue
        m = re.match(r"\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$", line)
        if m:
            frames.append((m.group(1), m.group(2)))
    if comm is not None:
        yield comm, frames


def stage_of(frames: list[tuple[str, str]]) -> str:
    if frames and "kernel" in frames[0][1]:
        kernel = [sym for sym, dso in frames if "kernel" in dso]
        for sym in reversed(kernel):  # from the syscall's entry inwards
            for name, pat in KERNEL:
                if re.search(pat, sym):
                    return name
        return "kernel: other (interrupts, softirqs)"
    for sym, _ in frames:
        for name, pat in STAGES:
            if re.search(pat, sym):
                return name
    return "other user space (allocator, std)"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data", help="a perf.data file")
    p.add_argument("--folded", help="also write the folded stacks here")
    a = p.parse_args()
    stages: collections.Counter = collections.Counter()
    folded: collections.Counter = collections.Counter()
    threads: collections.Counter = collections.Counter()
    total = 0
    for comm, frames in samples(a.data):
        total += 1
        stages[stage_of(frames)] += 1
        threads[comm] += 1
        if a.folded:
            folded[";".join([comm] + [re.sub(r"[; ]", "_", s) for s, _ in reversed(frames)])] += 1
    print(f"{total} samples")
    print("| stage | share of the client's CPU |\n|---|---:|")
    for name, n in stages.most_common():
        print(f"| {name} | {n / total * 100:.1f} % |")
    print("\nthreads: " + ", ".join(f"{c} {n / total * 100:.1f} %" for c, n in threads.most_common(8)))
    if a.folded:
        with open(a.folded, "w") as f:
            for stack, n in folded.items():
                f.write(f"{stack} {n}\n")


if __name__ == "__main__":
    main()
