#!/usr/bin/env python3
"""The largest concurrency one agentx process sustains on this machine with the client under one core.

For each replay world (the default scenario's session trees, and agentx-mvp's single streams):
1. A synthetic corpus (`agentx-host dataset synth`, with subagents for trees), large enough that
   every lane of the largest point has a trace of its own.
2. For each concurrency of the ladder, a fresh simulator (H200 timing model, sped up) pinned to CPU 0
   and one `agentx-host run` pinned to CPU 1, at the recorded think times.
3. The send lag of every profiling request (how late it left against when it was due) from
   run_summary.json: p50, p99 and max, with the requests and the client's CPU time.
The answer per world is the largest point whose send-lag p99 stays at or under the bound (10 ms).
The ladder stops at the first point past it (unless --keep-going). Each point also splits the lag
into the start burst (requests due in the first --burst-s seconds of profiling, where every lane's
first request is due at once) and the steady state after it.

Run it under a real-time policy (`chrt -f 20 python3 bench/capacity.py ...`, as root) when other
work shares the machine: the simulator and the client then preempt it at once, and the lag is the
client's own.

A benchmark, not a test: it prints figures and writes OUT/capacity.json; it asserts nothing.
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import time

import shard
from shard import free_port, pinned


def start_sim(agentx, port, log, speed):
    # Enough sequences that the simulator never queues a lane: the bench measures the client.
    return shard.start_sim(agentx, port, log, speed, ["--max-num-seqs", "8192"])


def point(a, env, corpus, world, conc, out):
    log = open(os.path.join(out, "sim.log"), "a")
    port = free_port()
    sim = start_sim(a.agentx, port, log, a.sim_speed)
    d = os.path.join(out, f"{world}-{conc}")
    argv = [a.agentx, "run"] + (["agentx-mvp"] if world == "streams" else []) + [
        "--url", f"http://127.0.0.1:{port}", "--model", "agentx-sim", "--input-file", corpus,
        "--concurrency", str(conc), "--benchmark-duration", str(a.duration),
        "--random-seed", "1", "--unsafe-override", "--stats-interval", "0",
        "--benchmark-grace-period", "30", "--output-artifact-dir", d,
    ]
    if world == "trees":
        argv += ["--warmup-requests-per-lane", "0"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.time()
    with open(os.path.join(out, f"{world}-{conc}.log"), "w") as lf:
        code = subprocess.run(pinned(1, argv), env=env, stdout=lf, stderr=subprocess.STDOUT).returncode
    wall = time.time() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    sim.terminate()
    sim.wait()
    res = {"concurrency": conc, "exit_code": code, "wall_s": wall,
           "client_cpu_s": (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)}
    try:
        s = json.load(open(os.path.join(d, "run_summary.json")))["summary"]
    except (OSError, ValueError, KeyError):
        return res
    lag = s.get("send_lag_ms") or {}
    res.update(lag_split(os.path.join(d, "records.jsonl"), a.burst_s))
    res.update({
        "requests_ok": s.get("requests_ok"),
        "send_lag_p50_ms": lag.get("p50"),
        "send_lag_p99_ms": lag.get("p99"),
        "send_lag_max_ms": lag.get("max"),
        "output_token_throughput": s.get("output_token_throughput"),
    })
    return res


def pct(xs, q):
    if not xs:
        return None
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


def lag_split(path, burst_s):
    """The send lag of the profiling requests due in the first `burst_s` seconds of profiling (the
    start burst, where every lane's first request is due at once) and of those due after (steady)."""
    rows = []
    try:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                if r.get("phase") == "profiling":
                    rows.append((r["intended_ns"], max(0, r["send_ns"] - r["intended_ns"]) / 1e6))
    except (OSError, ValueError, KeyError):
        return {}
    if not rows:
        return {}
    t0 = min(t for t, _ in rows)
    burst = [l for t, l in rows if t - t0 < burst_s * 1e9]
    steady = [l for t, l in rows if t - t0 >= burst_s * 1e9]
    return {"profiling_records": len(rows), "burst_requests": len(burst), "burst_lag_p99_ms": pct(burst, 99),
            "steady_requests": len(steady), "steady_lag_p50_ms": pct(steady, 50),
            "steady_lag_p99_ms": pct(steady, 99), "steady_lag_max_ms": max(steady) if steady else None}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agentx", required=True)
    ap.add_argument("--ladder", default="256,512,1024,2048,4096")
    ap.add_argument("--worlds", default="trees,streams")
    ap.add_argument("--duration", type=float, default=30)
    ap.add_argument("--bound-ms", type=float, default=10.0)
    ap.add_argument("--max-isl", type=int, default=20000)
    ap.add_argument("--sim-speed", type=float, default=5)
    ap.add_argument("--burst-s", type=float, default=1.0,
                    help="requests due this long after profiling's first are the start burst")
    ap.add_argument("--keep-going", action="store_true",
                    help="run every point of the ladder, also past the first over the bound")
    ap.add_argument("--out", default="bench/out/capacity")
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ, AGENTX_HOME=os.path.join(out, "home"))
    ladder = [int(x) for x in a.ladder.split(",") if x.strip()]
    result = {"bound_ms": a.bound_ms, "duration_s": a.duration, "sim_speed": a.sim_speed, "worlds": {}}
    for world in [w.strip() for w in a.worlds.split(",") if w.strip()]:
        corpus = os.path.join(out, f"corpus-{world}.jsonl")
        subprocess.run(
            [a.agentx, "dataset", "synth", "--traces", str(max(ladder)), "--random-seed", "3",
             "--synthesis-max-isl", str(a.max_isl), "-o", corpus] + (["--subagents"] if world == "trees" else []),
            check=True, env=env, stdout=subprocess.DEVNULL,
        )
        points = []
        for conc in ladder:
            r = point(a, env, corpus, world, conc, out)
            points.append(r)
            p99 = r.get("send_lag_p99_ms")
            print(f"{world:8} {conc:>6}: send lag p50 {r.get('send_lag_p50_ms') or 0:8.2f} ms  "
                  f"p99 {p99 or 0:8.2f} ms  max {r.get('send_lag_max_ms') or 0:9.2f} ms  "
                  f"steady p99 {r.get('steady_lag_p99_ms') or 0:8.2f} ms ({r.get('steady_requests')} requests)  "
                  f"requests {r.get('requests_ok')} ok of {r.get('profiling_records')}  client CPU {r['client_cpu_s']:.1f} s of "
                  f"{r['wall_s']:.0f} s  exit {r['exit_code']}", flush=True)
            if (p99 is None or p99 > a.bound_ms) and not a.keep_going:
                break
        ok = [p["concurrency"] for p in points
              if p.get("send_lag_p99_ms") is not None and p["send_lag_p99_ms"] <= a.bound_ms]
        result["worlds"][world] = {"points": points, "largest_sustained": max(ok) if ok else None}
        print(f"{world}: the largest concurrency with send-lag p99 <= {a.bound_ms:g} ms: "
              f"{max(ok) if ok else 'none of the ladder'}", flush=True)
    json.dump(result, open(os.path.join(out, "capacity.json"), "w"), indent=2)
    print(f"written: {out}/capacity.json")


if __name__ == "__main__":
    main()
