#!/usr/bin/env python3
"""One process against two shards of the same run, on this machine, against the built-in simulator.

1. A synthetic corpus (`agentx-host dataset synth`).
2. The simulator (H200 timing model) pinned to CPU 0; every client process pinned to CPU 1.
3. One process at --concurrency N, then (on a fresh simulator) two shards of N/2 lanes each with
   --merge-into: throughput and TTFT p50/p99 side by side, from each directory's
   profile_export_aiperf.json (the merged one for the shards).
4. The shards' warmup and profiling start times (spread), and their rendezvous time.
5. The merge time of a 30-minute run's records: the two shards' records repeated, shifted by the
   run's duration each time, until they span 30 minutes, then `agentx-host merge` timed.

A benchmark, not a test: it prints figures and writes OUT/shard.json; it asserts nothing.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned(cpu, argv):
    return ["taskset", "-c", str(cpu)] + argv if shutil.which("taskset") else argv


def start_sim(agentx, port, log, speed):
    p = subprocess.Popen(
        pinned(0, [agentx, "sim", "--port", str(port), "--preset", "h200", "--speed", str(speed)]),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return p
        except OSError:
            time.sleep(0.1)
    p.kill()
    sys.exit("the simulator did not start")


def run_args(agentx, url, corpus, conc, duration, out):
    return [
        agentx, "run", "--url", url, "--model", "agentx-sim", "--input-file", corpus,
        "--concurrency", str(conc), "--benchmark-duration", str(duration),
        "--random-seed", "1", "--unsafe-override", "--stats-interval", "0",
        "--benchmark-grace-period", "30", "--output-artifact-dir", out,
    ]


def figures(d):
    a = json.load(open(os.path.join(d, "profile_export_aiperf.json")))
    return {
        "requests": a["request_count"]["avg"],
        "total_token_throughput": a["total_token_throughput"]["avg"],
        "output_token_throughput": a["output_token_throughput"]["avg"],
        "ttft_p50_ms": a["time_to_first_token"]["p50"],
        "ttft_p99_ms": a["time_to_first_token"]["p99"],
    }


def read_records(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def stretch(shard_dir, dst, duration_s, target_s):
    """A shard directory whose records repeat until they span `target_s` seconds."""
    os.makedirs(dst, exist_ok=True)
    for f in ("run_manifest.json", "run_summary.json"):
        shutil.copy(os.path.join(shard_dir, f), dst)
    recs = read_records(os.path.join(shard_dir, "records.jsonl"))
    reps = max(1, int(round(target_s / duration_s)))
    step = int(duration_s * 1e9)
    n = 0
    with open(os.path.join(dst, "records.jsonl"), "w") as f:
        for k in range(reps):
            for r in recs:
                r2 = dict(r)
                for key in ("intended_ns", "send_ns", "end_ns"):
                    r2[key] = r[key] + k * step
                for key in ("first_byte_ns", "first_token_ns"):
                    if r.get(key) is not None:
                        r2[key] = r[key] + k * step
                r2["request_id"] = f"{r['request_id']}.{k}"
                f.write(json.dumps(r2, separators=(",", ":")) + "\n")
                n += 1
    m = json.load(open(os.path.join(dst, "run_manifest.json")))
    if m.get("profiling_ns"):
        m["profiling_ns"][1] += (reps - 1) * step
    json.dump(m, open(os.path.join(dst, "run_manifest.json"), "w"))
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agentx", required=True)
    ap.add_argument("--concurrency", type=int, default=256)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--traces", type=int, default=600)
    ap.add_argument("--max-isl", type=int, default=20000)
    ap.add_argument("--sim-speed", type=float, default=5,
                    help="time factor of the simulator's H200 model (5: warmup of 256 lanes in about 30 s)")
    ap.add_argument("--out", default="bench/out/shard")
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ, AGENTX_HOME=os.path.join(out, "home"))
    corpus = os.path.join(out, "corpus.jsonl")
    subprocess.run(
        [a.agentx, "dataset", "synth", "--traces", str(a.traces), "--seed", "3",
         "--max-isl", str(a.max_isl), "-o", corpus],
        check=True, env=env, stdout=subprocess.DEVNULL,
    )
    log = open(os.path.join(out, "sim.log"), "w")
    result = {"concurrency": a.concurrency, "duration_s": a.duration, "traces": a.traces}

    # One process.
    port = free_port()
    sim = start_sim(a.agentx, port, log, a.sim_speed)
    one = os.path.join(out, "one")
    t0 = time.time()
    with open(os.path.join(out, "one.log"), "w") as lf:
        subprocess.run(pinned(1, run_args(a.agentx, f"http://127.0.0.1:{port}", corpus,
                                          a.concurrency, a.duration, one)),
                       env=env, stdout=lf, stderr=subprocess.STDOUT)
    result["one_wall_s"] = time.time() - t0
    sim.terminate()
    sim.wait()
    result["one"] = figures(one)

    # Two shards, N/2 lanes each, on a fresh simulator.
    port = free_port()
    sim = start_sim(a.agentx, port, log, a.sim_speed)
    two = os.path.join(out, "two")
    coord = str(free_port())
    procs = []
    t0 = time.time()
    for i in range(2):
        argv = run_args(a.agentx, f"http://127.0.0.1:{port}", corpus, a.concurrency, a.duration, two)
        argv += ["--shard", f"{i}/2", "--coordinator", "127.0.0.1", "--coordinator-port", coord]
        if i == 0:
            argv += ["--merge-into", os.path.join(two, "merged")]
        lf = open(os.path.join(out, f"shard-{i}.log"), "w")
        procs.append(subprocess.Popen(pinned(1, argv), env=env, stdout=lf, stderr=subprocess.STDOUT))
    codes = [p.wait() for p in procs]
    result["two_wall_s"] = time.time() - t0
    sim.terminate()
    sim.wait()
    result["two_exit_codes"] = codes
    merged = os.path.join(two, "merged")
    result["two"] = figures(merged)
    m = json.load(open(os.path.join(merged, "run_manifest.json")))
    recs = read_records(os.path.join(merged, "records.jsonl"))
    warm_start = {}
    for r in recs:
        if r["phase"] == "warmup":
            s = r["lane"] % 2
            warm_start[s] = min(warm_start.get(s, r["send_ns"]), r["send_ns"])
    prof = [s["profiling_ns"][0] + s["shift_ns"] for s in m["shards"]]
    result["warmup_start_spread_ms"] = (max(warm_start.values()) - min(warm_start.values())) / 1e6
    result["profiling_start_spread_ms"] = (max(prof) - min(prof)) / 1e6
    result["clock_skew_ns"] = m["clock_skew_ns"]
    result["rendezvous_s"] = [
        json.load(open(os.path.join(two, f"shard-{i}", "run_manifest.json")))["shard"]["rendezvous_s"]
        for i in range(2)
    ]

    # The merge of a 30-minute run's records.
    big = os.path.join(out, "big")
    n = sum(
        stretch(os.path.join(two, f"shard-{i}"), os.path.join(big, f"shard-{i}"), a.duration, 1800)
        for i in range(2)
    )
    t0 = time.time()
    subprocess.run([a.agentx, "merge", os.path.join(big, "shard-0"), os.path.join(big, "shard-1"),
                    "-o", os.path.join(big, "merged")], check=True, env=env, stdout=subprocess.DEVNULL)
    result["merge_30min"] = {"records": n, "seconds": time.time() - t0}

    json.dump(result, open(os.path.join(out, "shard.json"), "w"), indent=2)
    o, t = result["one"], result["two"]
    print(f"concurrency {a.concurrency}, {a.duration:.0f} s of profiling, {a.traces} synthetic traces (max ISL {a.max_isl}), "
          f"simulator (H200 model x{a.sim_speed:g}) on CPU 0, clients on CPU 1")
    print(f"{'':28}{'1 process':>14}{'2 shards':>14}")
    for k, label in [("requests", "profiling requests"),
                     ("total_token_throughput", "total tokens/s"),
                     ("output_token_throughput", "output tokens/s"),
                     ("ttft_p50_ms", "TTFT p50 (ms)"),
                     ("ttft_p99_ms", "TTFT p99 (ms)")]:
        print(f"{label:28}{o[k]:>14.1f}{t[k]:>14.1f}")
    print(f"warmup start spread   {result['warmup_start_spread_ms']:.2f} ms")
    print(f"profiling start spread {result['profiling_start_spread_ms']:.2f} ms")
    print(f"clock skew (rendezvous) {result['clock_skew_ns'] / 1e6:.3f} ms")
    print(f"rendezvous             {', '.join(f'{s:.3f} s' for s in result['rendezvous_s'])}")
    print(f"merge of a 30-minute run: {n} records in {result['merge_30min']['seconds']:.2f} s")
    print(f"exit codes of the shards: {codes}; written: {out}/shard.json")


if __name__ == "__main__":
    main()
