"""What the client added to the time to first token, from an agentx run's records.jsonl.

The built-in simulator stamps each answer with its own time from the request's last body byte to its
first token (`server_ttft_ns` in the record); the client-added part is the record's TTFT (from when the
request was due) less that. Reported over the profiling records that have the stamp: the whole window,
its steady state (requests due after its first STEADY_S seconds) and the start (each lane's first
request of the window, all due at once).

    python3 bench/ttft_added.py RUN_DIR_OR_RECORDS_JSONL [--steady-after 10] [--json]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys


def percentile(xs: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks (numpy's default), as the exports compute it."""
    if not xs:
        return None
    s = sorted(xs)
    k = (len(s) - 1) * q / 100
    lo = int(k)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (k - lo)


def records_path(p: pathlib.Path) -> pathlib.Path:
    return p / "records.jsonl" if p.is_dir() else p


def summary(path: pathlib.Path, steady_after_s: float = 10.0) -> dict | None:
    """p50/p90/p99/max in ms of the client-added TTFT per group, or None without stamped records."""
    path = records_path(path)
    if not path.exists():
        return None
    rows = []
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # a last line cut by a kill
        if r.get("phase") != "profiling" or r.get("error") or r.get("server_ttft_ns") is None:
            continue
        if r.get("first_token_ns") is None:
            continue
        ttft = r["first_token_ns"] - r["intended_ns"]
        rows.append((r["intended_ns"], r["lane"], max(ttft - r["server_ttft_ns"], 0) / 1e6))
    if not rows:
        return None
    rows.sort()
    t0 = rows[0][0]
    seen: set = set()
    first, later, steady = [], [], []
    for due, lane, ms in rows:
        (later if lane in seen else first).append(ms)
        seen.add(lane)
        if due - t0 >= steady_after_s * 1e9:
            steady.append(ms)

    def stats(xs: list[float]) -> dict:
        out = {"n": len(xs)}
        for q in (50, 90, 99):
            v = percentile(xs, q)
            out[f"p{q}_ms"] = round(v, 3) if v is not None else None
        out["max_ms"] = round(max(xs), 3) if xs else None
        return out

    return {
        "whole": stats([r[2] for r in rows]),
        f"steady_after_{steady_after_s:g}s": stats(steady),
        "lanes_first": stats(first),
        "lanes_later": stats(later),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("run", type=pathlib.Path, help="an artifact directory or its records.jsonl")
    p.add_argument("--steady-after", type=float, default=10.0, help="seconds of the window left out of the steady state")
    p.add_argument("--json", action="store_true")
    a = p.parse_args()
    s = summary(a.run, a.steady_after)
    if s is None:
        print(f"{records_path(a.run)}: no profiling record with the simulator's stamps", file=sys.stderr)
        return 1
    if a.json:
        print(json.dumps(s, indent=2))
        return 0
    print(f"{'client-added TTFT':<22} {'n':>7} {'p50 ms':>8} {'p90 ms':>8} {'p99 ms':>8} {'max ms':>8}")
    for k, v in s.items():
        cells = [f"{v[c]:>8.3f}" if v[c] is not None else f"{'-':>8}" for c in ("p50_ms", "p90_ms", "p99_ms", "max_ms")]
        print(f"{k:<22} {v['n']:>7} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
