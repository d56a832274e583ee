"""Where agentx's CPU goes on a session-tree replay: CPU per 1k streamed tokens, peak RSS and (with
--perf) a CPU profile, per concurrency level, against the built-in simulator.

The corpus, the command line and the measurement are bench/compare_trees.py's (the with-subagents
synthetic corpus cut to 12 turns, outputs capped at 1,024 tokens, idle gaps at 10 s; `agentx-host run
--scenario agentx`; the client's process tree from /proc over its profiling window, the simulator's
`vllm:generation_tokens_total`), without the harness and the floors, so that a change to the client
can be measured alone, before and after, in a few minutes (with --hyper-floor, bench/hyper_floor.rs
is measured after each level as bench/compare.py measures it):

    python3 bench/profile_trees.py --agentx target/release/agentx-host --levels 64,256

With --perf, `perf record -e cpu-clock --call-graph dwarf` attaches to the client for --perf-seconds
once its profiling phase has run for a few seconds, and `perf report` is written beside the figures
(OUT/perf-cN.txt: self time per symbol; OUT/perf-cN.data for further reports). The simulator runs on
CPU 0 and the client on CPU 1 (taskset). Figures go to OUT/profile-trees.json; nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import subprocess
import sys
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import compare  # noqa: E402
import compare_trees  # noqa: E402


def client_cmd(a: argparse.Namespace, url: str, conc: int, out: pathlib.Path) -> list[str]:
    """bench/differential.py's agentx command line for a session-tree replay, as compare_trees runs it."""
    return [
        a.agentx, "run", "--scenario", "agentx", "--url", url, "--endpoint-type", "chat", "--streaming",
        "--model", compare.MODEL, "--concurrency", str(conc), "--benchmark-duration", str(a.duration),
        "--input-file", str(a.replay_corpus), "--custom-dataset-type", "weka_trace", "--unsafe-override",
        "--output-artifact-dir", str(out), "--stats-interval", "0", "--random-seed", str(a.seed),
        "--benchmark-grace-period", str(a.grace),
    ]  # fmt: skip


def attach_perf(a: argparse.Namespace, pid: int, out: pathlib.Path, tag: str) -> threading.Thread:
    """Starts `perf record` on `pid` once the simulator has streamed for --perf-delay seconds."""

    def run() -> None:
        time.sleep(a.perf_delay)
        data = out / f"perf-{tag}.data"
        subprocess.run(
            ["perf", "record", "-e", "cpu-clock", "-F", str(a.perf_freq), "--call-graph", "dwarf,16384",
             "-p", str(pid), "-o", str(data), "--", "sleep", str(a.perf_seconds)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def run_level(a: argparse.Namespace, conc: int, rep: int) -> dict:
    tag = f"c{conc}-r{rep}"
    out = a.out / f"run-{tag}"
    sim = compare.Sim(a.agentx, a.ttft_ms, a.itl_ms, a.out / "logs" / f"sim-{tag}.log", a.sim_cpus)
    cmd = compare.pinned(a.tool_cpus) + client_cmd(a, sim.url, conc, out)
    env = compare_trees.differential.tool_env(a, "agentx", a.cache)
    log = open(a.out / "logs" / f"{tag}.log", "wb")
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    reaper = compare.Reaper(proc)
    perf = attach_perf(a, proc.pid, a.out, tag) if a.perf else None
    try:
        row = compare.measure(a, "agentx", conc, tag, cmd, out, sim, proc, reaper, started)
    finally:
        compare.kill_tree(reaper)
        log.close()
        sim.stop()
    if perf:
        perf.join()
        report = subprocess.run(
            ["perf", "report", "-i", str(a.out / f"perf-{tag}.data"), "--no-children", "--stdio",
             "--sort", "dso,sym", "--percent-limit", "0.2", "-g", "none"],
            capture_output=True, text=True,
        )  # fmt: skip
        (a.out / f"perf-{tag}.txt").write_text(report.stdout)
    row["rep"] = rep
    print(
        f"  {tag}: {row.get('cpu_s_per_1k_tokens')} CPU-s/1k tok over {row.get('window_s')} s, "
        f"{row.get('tokens_per_s')} tok/s, peak RSS {row.get('peak_rss_mib')} MiB, "
        f"client-added TTFT p99 {((row.get('client_ttft_added_ms') or {}).get('whole') or {}).get('p99_ms')} ms",
        flush=True,
    )
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--agentx", required=True, help="the agentx-host binary")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/out-profile"))
    p.add_argument("--levels", default="64,256", help="concurrency levels (lanes)")
    p.add_argument("--reps", type=int, default=1, help="runs per level")
    p.add_argument("--duration", type=float, default=40, help="benchmark duration per run, s")
    p.add_argument("--grace", type=float, default=5, help="benchmark grace period, s")
    p.add_argument("--startup-timeout", type=float, default=600, help="allowance for start-up and warmup, s")
    p.add_argument("--traces", type=int, default=compare_trees.PUBLIC_TRACES)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--max-turns", type=int, default=12)
    p.add_argument("--max-output-tokens", type=int, default=1024)
    p.add_argument("--max-gap-s", type=float, default=10)
    p.add_argument("--ttft-ms", type=float, default=50)
    p.add_argument("--itl-ms", type=float, default=10)
    p.add_argument("--hyper-floor", help="the bench/hyper_floor.rs binary, measured at every level too, saturated "
                   "and replaying the level's agentx run (compare.traffic_floor_run)")
    p.add_argument("--floor-window", type=float, default=20, help="seconds the floor is measured over")
    p.add_argument("--perf", action="store_true", help="record a CPU profile of each run")
    p.add_argument("--perf-delay", type=float, default=60, help="seconds after launch perf attaches")
    p.add_argument("--perf-seconds", type=float, default=15)
    p.add_argument("--perf-freq", type=int, default=400)
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    a.out = a.out.resolve()
    (a.out / "logs").mkdir(exist_ok=True)
    a.sim_cpus, a.tool_cpus = "0", "1"
    a.rss_limit = compare.machine()["mem_gib"] * 0.8 * 2**30
    a.cache = a.out / "cache"
    a.agentx_scenario = ["--scenario", "agentx"]
    a.replay_corpus = a.out / f"corpus-subagents-{a.traces}-s{a.seed}-turns{a.max_turns}"
    compare_trees.make_corpus(a, a.replay_corpus, full=False)
    rows = []
    for rep in range(a.reps):
        for conc in (int(c) for c in a.levels.split(",")):
            rows.append(run_level(a, conc, rep))
            if a.hyper_floor:
                rows.append(compare.floor_run(a, conc, "hyper-floor", a.hyper_floor) | {"rep": rep})
                agentx_out = a.out / f"run-c{conc}-r{rep}"
                rows.append(compare.traffic_floor_run(a, conc, a.hyper_floor, agentx_out) | {"rep": rep})
    (a.out / "profile-trees.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
