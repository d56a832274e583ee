#!/usr/bin/env python3
"""Cache truth against the built-in simulator: the figures of docs/guide/cache.md.

Writes a with-subagents corpus (`dataset synth --subagents`), then for each configuration starts
`agentx-host sim --engines 4` (its cache the model's LRU) and runs agentx against it, and prints
the run's cache truth beside the simulator's own counters:
  session      --router session, --routing-headers dynamo: each tree pinned to one engine
  round-robin  --router round-robin: each request to the next engine
  small-cache  --router session with a cache per engine below the working set
Each run's run_summary.json is kept in bench/out/cache_truth/<name>/; a JSON of the figures is
written to bench/out/cache_truth/cache_truth.json. A benchmark, not a test: it asserts nothing.
"""

import argparse
import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_listening(port: int, within: float = 30.0) -> None:
    deadline = time.time() + within
    while time.time() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.2)
    sys.exit(f"the simulator did not listen on port {port} within {within} s")


def sim_counters(port: int) -> dict:
    """The simulator's own miss and eviction counters, summed over engines."""
    import urllib.request

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {"evicted_blocks": 0, "miss_cold": 0, "miss_capacity": 0, "miss_routing": 0}
    for line in text.splitlines():
        match = re.match(r'agentx_sim:kv_evicted_blocks_total\{[^}]*\} (\S+)', line)
        if match:
            out["evicted_blocks"] += int(float(match.group(1)))
        match = re.match(r'agentx_sim:prompt_miss_tokens_total\{[^}]*cause="(\w+)"[^}]*\} (\S+)', line)
        if match:
            out[f"miss_{match.group(1)}"] += int(float(match.group(2)))
    return out


def run_one(args, name: str, sim_flags: list[str], run_flags: list[str], corpus: Path, out: Path) -> dict:
    port = free_port()
    sim = subprocess.Popen(
        [args.agentx, "sim", "--port", str(port), "--engines", "4", "--eviction", "lru", *sim_flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port)
        run_dir = out / name
        run_dir.mkdir(parents=True, exist_ok=True)
        cmd = [
            args.agentx, "run", "agentx-v1",
            "--url", f"http://127.0.0.1:{port}",
            "--model", "agentx-sim",
            "--input-file", str(corpus),
            "--concurrency", str(args.concurrency),
            "--benchmark-duration", str(args.duration),
            "--benchmark-grace-period", "600",
            "--random-seed", "42",
            "--routing-headers", "dynamo",
            "--output-artifact-dir", str(run_dir), "--overwrite", "--unsafe-override",
            "--stats-interval", "0",
            *run_flags,
        ]
        started = time.time()
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode not in (0, 1):
            sys.exit(f"{name}: agentx exited {done.returncode}:\n{done.stderr[-4000:]}")
        summaries = sorted(run_dir.rglob("run_summary.json"), key=lambda p: p.stat().st_mtime)
        summary = json.loads(summaries[-1].read_text())
        cache = summary["summary"].get("cache")
        counters = sim_counters(port)
        printed = [line for line in done.stdout.splitlines() if line.startswith("cache ")]
        return {
            "name": name,
            "sim_flags": sim_flags,
            "wall_s": round(time.time() - started, 1),
            "requests": summary["summary"]["requests_ok"],
            "cache": cache,
            "sim_counters": counters,
            "printed": printed,
        }
    finally:
        sim.terminate()
        sim.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agentx", default=str(ROOT / "target/release/agentx-host"))
    parser.add_argument("--traces", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--duration", type=float, default=120)
    parser.add_argument("--context", type=int, default=32768, help="dataset synth --context")
    parser.add_argument("--small-cache", type=int, default=65536, help="tokens per engine of small-cache")
    parser.add_argument("--only", nargs="*", help="run only these configurations")
    args = parser.parse_args()
    out = ROOT / "bench/out/cache_truth"
    out.mkdir(parents=True, exist_ok=True)
    corpus = out / f"subagents-{args.traces}.jsonl"
    subprocess.run(
        [args.agentx, "dataset", "synth", "--subagents", "--traces", str(args.traces),
         "--context", str(args.context), "--random-seed", "7", "--output", str(corpus), "-q"],
        check=True,
    )
    configs = [
        ("session", ["--router", "session"], []),
        ("round-robin", ["--router", "round-robin"], []),
        ("small-cache", ["--router", "session", "--cache-tokens", str(args.small_cache)], []),
    ]
    results = []
    for name, sim_flags, run_flags in configs:
        if args.only and name not in args.only:
            continue
        result = run_one(args, name, sim_flags, run_flags, corpus, out)
        results.append(result)
        cache = result["cache"] or {}
        print(f"== {name} ({' '.join(sim_flags)}): {result['requests']} requests in {result['wall_s']} s")
        for line in result["printed"]:
            print("   " + line)
        print(f"   model split {json.dumps(cache.get('miss'))}")
        print(f"   simulator's split {json.dumps(cache.get('server_split'))}, its counters {json.dumps(result['sim_counters'])}")
    (out / "cache_truth.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
