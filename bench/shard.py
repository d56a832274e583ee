#!/usr/bin/env python3
"""One process against 2 and 4 shards of the same run, on this machine, against the built-in simulator.

1. A synthetic corpus (`agentx-host dataset synth`; with subagents for the default scenario, which
   replays session trees; flat with --mvp, which replays single streams with agentx-mvp).
2. The simulator (H200 timing model) pinned to CPU 0; every client process pinned to CPU 1.
3. One process at --concurrency N, then (each on a fresh simulator) the same run as 2 and 4 shards
   (--shards) with --merge-into: requests, throughput and TTFT p50/p99 side by side, from each
   directory's profile_export_aiperf.json (the merged one for the shards).
4. The shards' start spread: the first warmup request of each shard, where each shard's primers put
   t* (a primer's intended send less its planned delay, the largest lead minus its own), and
   profiling's start on each (on the merged timeline); and their rendezvous time.
5. The merge time of a 30-minute run's records: the 2 shards' records repeated, shifted by the
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


def start_sim(agentx, port, log, speed, extra=()):
    p = subprocess.Popen(
        pinned(0, [agentx, "sim", "--port", str(port), "--preset", "h200", "--speed", str(speed),
                   *extra]),
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


def run_args(agentx, url, corpus, conc, duration, out, mvp):
    return [agentx, "run"] + (["agentx-mvp"] if mvp else []) + [
        "--url", url, "--model", "agentx-sim", "--input-file", corpus,
        "--concurrency", str(conc), "--benchmark-duration", str(duration),
        "--random-seed", "1", "--unsafe-override", "--stats-interval", "0",
        "--benchmark-grace-period", "30", "--output-artifact-dir", out,
    ]


def tstar_anchors(m, recs, n):
    """Per shard, where its primers put the common t* timeline: each primer's intended send less its
    planned delay (the largest lead minus its own), the median over the shard's primers (ns on the
    merged timeline). Equal anchors: every shard's primers line up with one t*. Empty for a
    single-stream run."""
    leads = {}
    for lane in m["lanes"]:
        for st in lane.get("streams", []):
            if st.get("warm_turn") is not None:
                leads[(lane["lane"], st["conversation_id"])] = st["lead_ms"]
    if not leads:
        return {}
    max_lead = max(leads.values())
    first = {}
    for r in recs:
        k = (r["lane"], r["trace_id"])
        if r["phase"] == "warmup" and k in leads and (k not in first or r["intended_ns"] < first[k]):
            first[k] = r["intended_ns"]
    per = {}
    for k, t in first.items():
        per.setdefault(k[0] % n, []).append(t - (max_lead - leads[k]) * 1e6)
    return {s: sorted(v)[len(v) // 2] for s, v in per.items()}


def run_sharded(a, env, corpus, out, n):
    """The run as `n` processes (one: a plain run) on a fresh simulator; its figures and spreads."""
    log = open(os.path.join(out, "sim.log"), "a")
    port = free_port()
    sim = start_sim(a.agentx, port, log, a.sim_speed)
    d = os.path.join(out, f"shards-{n}")
    coord = str(free_port())
    procs = []
    t0 = time.time()
    for i in range(n):
        argv = run_args(a.agentx, f"http://127.0.0.1:{port}", corpus, a.concurrency, a.duration, d, a.mvp)
        if n > 1:
            argv += ["--shard", f"{i}/{n}", "--coordinator", f"127.0.0.1:{coord}"]
            if i == 0:
                argv += ["--merge-into", os.path.join(d, "merged")]
        lf = open(os.path.join(out, f"shards-{n}-{i}.log"), "w")
        procs.append(subprocess.Popen(pinned(1, argv), env=env, stdout=lf, stderr=subprocess.STDOUT))
    codes = [p.wait() for p in procs]
    res = {"wall_s": time.time() - t0, "exit_codes": codes}
    sim.terminate()
    sim.wait()
    merged = os.path.join(d, "merged") if n > 1 else d
    res.update(figures(merged))
    if n > 1:
        m = json.load(open(os.path.join(merged, "run_manifest.json")))
        recs = read_records(os.path.join(merged, "records.jsonl"))
        warm_start = {}
        for r in recs:
            if r["phase"] == "warmup":
                s = r["lane"] % n
                warm_start[s] = min(warm_start.get(s, r["send_ns"]), r["send_ns"])
        prof = [s["profiling_ns"][0] + s["shift_ns"] for s in m["shards"]]
        tstar = tstar_anchors(m, recs, n)
        if tstar:
            res["tstar_spread_ms"] = (max(tstar.values()) - min(tstar.values())) / 1e6
        res["warmup_start_spread_ms"] = (max(warm_start.values()) - min(warm_start.values())) / 1e6
        res["profiling_start_spread_ms"] = (max(prof) - min(prof)) / 1e6
        res["clock_skew_ns"] = m["clock_skew_ns"]
        res["rendezvous_s"] = [
            json.load(open(os.path.join(d, f"shard-{i}", "run_manifest.json")))["shard"]["rendezvous_s"]
            for i in range(n)
        ]
    return d, res


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
    ap.add_argument("--concurrency", type=int, default=128)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--traces", type=int, default=300)
    ap.add_argument("--max-isl", type=int, default=20000)
    ap.add_argument("--shards", default="2,4", help="shard counts to compare with one process")
    ap.add_argument("--mvp", action="store_true",
                    help="agentx-mvp (single streams) on a flat corpus instead of the default scenario's session trees")
    ap.add_argument("--sim-speed", type=float, default=5,
                    help="time factor of the simulator's H200 model")
    ap.add_argument("--out", default="bench/out/shard")
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    env = dict(os.environ, AGENTX_HOME=os.path.join(out, "home"))
    corpus = os.path.join(out, "corpus.jsonl")
    subprocess.run(
        [a.agentx, "dataset", "synth", "--traces", str(a.traces), "--random-seed", "3",
         "--synthesis-max-isl", str(a.max_isl), "-o", corpus] + ([] if a.mvp else ["--subagents"]),
        check=True, env=env, stdout=subprocess.DEVNULL,
    )
    counts = [1] + [int(x) for x in a.shards.split(",") if x.strip()]
    result = {"concurrency": a.concurrency, "duration_s": a.duration, "traces": a.traces,
              "scenario": "agentx-mvp" if a.mvp else "agentx (default, session trees)", "runs": {}}
    dirs = {}
    for n in counts:
        dirs[n], result["runs"][str(n)] = run_sharded(a, env, corpus, out, n)

    # The merge of a 30-minute run's records (2 shards).
    n = 0
    if 2 in dirs:
        big = os.path.join(out, "big")
        n = sum(
            stretch(os.path.join(dirs[2], f"shard-{i}"), os.path.join(big, f"shard-{i}"), a.duration, 1800)
            for i in range(2)
        )
        t0 = time.time()
        subprocess.run([a.agentx, "merge", os.path.join(big, "shard-0"), os.path.join(big, "shard-1"),
                        "-o", os.path.join(big, "merged")], check=True, env=env, stdout=subprocess.DEVNULL)
        result["merge_30min"] = {"records": n, "seconds": time.time() - t0}

    json.dump(result, open(os.path.join(out, "shard.json"), "w"), indent=2)
    runs = result["runs"]
    print(f"{result['scenario']}: concurrency {a.concurrency}, {a.duration:.0f} s of profiling, "
          f"{a.traces} synthetic traces (max ISL {a.max_isl}), simulator (H200 model x{a.sim_speed:g}) "
          f"on CPU 0, clients on CPU 1")
    head = "".join(f"{('1 process' if k == '1' else k + ' shards'):>14}" for k in runs)
    print(f"{'':28}{head}")
    for k, label in [("requests", "profiling requests"),
                     ("total_token_throughput", "total tokens/s"),
                     ("output_token_throughput", "output tokens/s"),
                     ("ttft_p50_ms", "TTFT p50 (ms)"),
                     ("ttft_p99_ms", "TTFT p99 (ms)"),
                     ("warmup_start_spread_ms", "first request spread (ms)"),
                     ("tstar_spread_ms", "t* timeline spread (ms)"),
                     ("profiling_start_spread_ms", "profiling start spread (ms)")]:
        cells = "".join(f"{r[k]:>14.2f}" if k in r else f"{'-':>14}" for r in runs.values())
        print(f"{label:28}{cells}")
    for k, r in runs.items():
        if "rendezvous_s" in r:
            print(f"{k} shards: rendezvous {', '.join(f'{s:.3f} s' for s in r['rendezvous_s'])}; "
                  f"clock skew {r['clock_skew_ns'] / 1e6:.3f} ms; exit codes {r['exit_codes']}")
    if n:
        print(f"merge of a 30-minute run: {n} records in {result['merge_30min']['seconds']:.2f} s")
    print(f"written: {out}/shard.json")


if __name__ == "__main__":
    main()
