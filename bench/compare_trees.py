"""Session trees side by side with the reference: agentx's default scenario against agentx-harness.

Run through `bench/compare.sh --trees`, which installs agentx-harness (and, in a venv of its own, aiperf)
and builds agentx first. The machinery is bench/compare.py's (the simulator, the process-tree
accounting, the profiling window, the floors, the dataset-preparation timing) and bench/differential.py's
(the two tools' command lines and environments for a session-tree replay); this script:

1. writes the replay corpus: `agentx-host dataset synth --subagents` (the with-subagents shape), each
   trace cut to its first --max-turns turns, every output capped at --max-output-tokens, and every idle
   stretch of a trace (no request of the trace in flight, root or subagent) longer than --max-gap-s
   shortened to it; the first 393 traces (as many as the public corpus has) that keep enough requests
   late in their span for the harness's warmup (LATE_REQUESTS); split into one weka `.json` per trace;
2. with --prep, times dataset preparation on the full-size corpus (the same generator and seed with
   nothing cut: the public corpus's size and shape): launch to first request, cold and warm, per tool;
3. per concurrency level: agentx (`agentx-host run --scenario agentx`) and the harness (`agentx profile
   --scenario agentx`), the order alternating from level to level, each against a fresh simulator with a
   fixed TTFT and inter-token latency, with the same corpus, seed and flags; then aiperf (its agentic
   replay with the harness's preset as flags) where it is given and runs; then the C floor and the
   tokio+hyper floor.

Figures per tool and level, measured as bench/compare.py measures them:
- CPU seconds per 1,000 streamed tokens and tokens per second over the profiling window (the tool's
  whole process tree from /proc; the simulator's `vllm:generation_tokens_total`);
- peak RSS and PSS of the tool's process tree over the whole run;
- TTFT overhead p50/p99: the tool's own TTFT (profile_export_aiperf.json) less the simulator's fixed
  TTFT; for agentx also the client-added TTFT from the simulator's stamps (bench/ttft_added.py);
- time to first request: from launching the tool to the first request the simulator recorded
  (`--record-requests`);
- warmup: the tool's own figure for its warmup phase (its log's "Phase warmup ... complete ...
  elapsed=" line), and the span from its first warmup request to its first profiling request in its
  profile_export.jsonl.

Nothing here asserts a timing: it prints a table, writes OUT/compare-trees.json and a Markdown table
(OUT/compare-trees.md).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import compare  # noqa: E402
import differential  # noqa: E402
import trees_peers  # noqa: E402

TOOLS = ("agentx", "harness", "aiperf", *trees_peers.PEERS)
PUBLIC_TRACES = 393  # the public with-subagents corpus


# ---------------------------------------------------------------------------------------------------
# corpus


def walk(requests: list[dict]):
    """Every request of a trace, nested subagent requests included."""
    for r in requests:
        if r.get("type") == "subagent":
            yield from walk(r.get("requests") or [])
        else:
            yield r


def compress_gaps(trace: dict, max_gap_s: float) -> float:
    """Shortens every stretch of the trace with nothing in flight (no request between its `t` and
    `t + api_time`, root or subagent) to at most `max_gap_s`, by moving everything after it earlier;
    the requests' own durations and their order are kept. Returns the seconds taken out."""
    spans = sorted((r["t"], r["t"] + max(r.get("api_time") or 0.0, 0.0)) for r in walk(trace["requests"]))
    if not spans:
        return 0.0
    cuts = []  # (idle stretch ends at, seconds removed up to there)
    removed, busy_until = 0.0, spans[0][1]
    for start, end in spans[1:]:
        if start - busy_until > max_gap_s:
            removed += start - busy_until - max_gap_s
            cuts.append((start, removed))
        busy_until = max(busy_until, end)

    def shift(t: float) -> float:
        out = 0.0
        for at, r in cuts:
            if t >= at:
                out = r
            else:
                break
        return t - out

    def fix(requests: list[dict]) -> None:
        for r in requests:
            t0 = r.get("t")
            if r.get("type") == "subagent":
                fix(r.get("requests") or [])
                if isinstance(t0, (int, float)) and isinstance(r.get("duration_ms"), (int, float)):
                    r["duration_ms"] = round((shift(t0 + r["duration_ms"] / 1000) - shift(t0)) * 1000)
            elif isinstance(r.get("think_time"), (int, float)):
                r["think_time"] = min(r["think_time"], max_gap_s)
            if isinstance(t0, (int, float)):
                r["t"] = round(shift(t0), 3)

    fix(trace["requests"])
    return removed


# agentx-harness's cache-pressure warmup stage ends only when every lane has sent its 10 requests, and a
# lane does not start a new tree during warmup: a lane whose tree runs out first holds the warmup until
# its grace period (1800 s under the preset). A replayed trace therefore keeps at least this many
# requests (root and subagents) in the last quarter of its span, where its t* may fall, and in the last
# quarter of its requests.
LATE_REQUESTS = 12
SYNTH_DRAW = 4  # generated traces per kept one, at most


def late_enough(trace: dict) -> bool:
    ts = sorted(r["t"] for r in walk(trace["requests"]))
    if len(ts) < 4 * LATE_REQUESTS:
        return False
    late = ts[0] + 0.75 * (ts[-1] - ts[0])
    return sum(1 for t in ts if t >= late) >= LATE_REQUESTS


def make_corpus(a: argparse.Namespace, dest: pathlib.Path, full: bool) -> dict:
    """The with-subagents synthetic corpus as a directory of weka `.json` traces: full size (dataset
    preparation) or cut for the replay (turns, outputs, idle gaps)."""
    if dest.is_dir() and any(dest.glob("*.json")):
        return {"dir": str(dest), "traces": len(list(dest.glob("*.json"))), "reused": True}
    jsonl = dest.with_suffix(".jsonl")
    # The replay corpus keeps only traces with enough requests late in their span (see `late_enough`),
    # so it draws from more generated traces than it keeps.
    drawn = a.traces if full else a.traces * SYNTH_DRAW
    cmd = [a.agentx, "dataset", "synth", "--subagents", "--traces", str(drawn), "--random-seed", str(a.seed),
           "-o", str(jsonl)]  # fmt: skip
    if not full:
        cmd += ["--max-turns", str(a.max_turns)]
    synth = compare.timed(cmd)
    info: dict = {"dir": str(dest), "synth": synth}
    if not full:
        tmp = jsonl.with_suffix(".cut.jsonl")
        removed, total, kept, seen = 0.0, 0.0, 0, 0
        with open(jsonl, "rb") as src, open(tmp, "w") as dst:
            for line in src:
                if kept == a.traces:
                    break
                seen += 1
                trace = json.loads(line)
                for r in walk(trace["requests"]):
                    r["out"] = min(r["out"], a.max_output_tokens)
                ts = [r["t"] for r in walk(trace["requests"])]
                span = max(ts) - min(ts) if ts else 0.0
                cut = compress_gaps(trace, a.max_gap_s)
                if not late_enough(trace):
                    continue
                total, removed, kept = total + span, removed + cut, kept + 1
                dst.write(json.dumps(trace, separators=(",", ":")) + "\n")
        tmp.replace(jsonl)
        if kept < a.traces:
            raise SystemExit(
                f"only {kept} of {seen} generated traces have {LATE_REQUESTS} requests in the last quarter of "
                f"their span at --max-turns {a.max_turns}; raise --max-turns or lower --traces"
            )  # fmt: skip
        info.update(max_turns=a.max_turns, max_output_tokens=a.max_output_tokens, max_gap_s=a.max_gap_s,
                    generated_traces_read=seen, late_requests_required=LATE_REQUESTS,
                    recorded_span_removed_pct=round(removed / total * 100, 1) if total else None)  # fmt: skip
    info["mib"] = round(jsonl.stat().st_size / 2**20, 1)
    info.update(corpus_stats(jsonl))
    differential.split_corpus(jsonl, dest)
    jsonl.unlink()
    info["traces"] = len(list(dest.glob("*.json")))
    return info


def corpus_stats(jsonl: pathlib.Path) -> dict:
    """Requests, ISL and output percentiles, and each trace's span: how the corpus compares."""
    isl, out, spans, n = [], [], [], 0
    with open(jsonl, "rb") as f:
        for line in f:
            reqs = list(walk(json.loads(line)["requests"]))
            n += len(reqs)
            isl += [r["in"] for r in reqs]
            out += [r["out"] for r in reqs]
            ts = [r["t"] for r in reqs]
            if ts:
                spans.append(max(ts) - min(ts))

    def pct(xs: list, q: float):
        return sorted(xs)[min(int(len(xs) * q), len(xs) - 1)] if xs else None

    return {
        "requests": n,
        "isl_p50_p99_max": [pct(isl, 0.5), pct(isl, 0.99), max(isl, default=None)],
        "output_p50_p99_max": [pct(out, 0.5), pct(out, 0.99), max(out, default=None)],
        "trace_span_s_p50_p90_max": [round(pct(spans, 0.5), 1), round(pct(spans, 0.9), 1), round(max(spans), 1)]
        if spans else None,
    }  # fmt: skip


# ---------------------------------------------------------------------------------------------------
# the tools


def tool_cmd(a: argparse.Namespace, tool: str, corpus: pathlib.Path, url: str, conc: int, out: pathlib.Path) -> list[str]:
    """The same session-tree replay for every tool: bench/differential.py's command line for agentx and
    the harness, the seed and grace period made explicit; aiperf gets the harness's preset as flags."""
    if tool in trees_peers.PEERS:
        return trees_peers.command(a, tool, corpus, url, conc, out)
    extra = ["--random-seed", str(a.seed), "--benchmark-grace-period", str(a.grace)]
    job = {"harness": a.harness, "agentx_extra": []}
    if tool in ("agentx", "harness"):
        return differential.tool_cmd(a, tool, corpus, url, conc, out, job) + extra
    # aiperf 0.13 has no `agentx` scenario: its inferencex-agentx-mvp (agentic replay) with the
    # harness's preset as flags, less the cache-pressure warmup stage, which 0.13 does not have.
    cmd = differential.tool_cmd(a, "harness", corpus, url, conc, out, job)
    cmd[0] = a.aiperf
    cmd[cmd.index("--scenario") + 1] = compare.SCENARIO
    preset = list(differential.PRESET_AS_FLAGS)
    for flag, value in AIPERF_PRESET_CHANGES.items():
        i = preset.index(flag)
        preset[i : i + 2] = [] if value is None else [flag, value(a)]
    return cmd + preset


# The preset's flags for aiperf 0.13: the seed and grace of this run, and no --warmup-requests-per-lane.
AIPERF_PRESET_CHANGES = {
    "--random-seed": lambda a: str(a.seed),
    "--benchmark-grace-period": lambda a: str(a.grace),
    "--warmup-requests-per-lane": None,
}


def tool_env(a: argparse.Namespace, tool: str, cache: pathlib.Path) -> dict[str, str]:
    if tool in trees_peers.PEERS:
        return trees_peers.env(a, tool, cache)
    env = differential.tool_env(a, "harness" if tool == "aiperf" else tool, cache)
    if tool == "aiperf":
        env["AIPERF_DATASET_CONFIGURATION_TIMEOUT"] = "1800"
        env["AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT"] = "1800"
    return env


WARMUP_LINE = re.compile(r"Phase (?:agentic\.)?warmup\b[^\n]*?complete[^\n]*?elapsed=([0-9.]+)s")


def logged_warmup_s(paths: list[pathlib.Path]) -> float | None:
    """The tool's own warmup duration: agentx logs `Phase warmup complete: ... elapsed=9.79s`, the
    harness `Phase warmup (warmup) complete | ... | elapsed=9.76s`, aiperf 0.13 `Phase agentic.warmup
    (warmup) complete | ... | elapsed=13.89s`."""
    for p in paths:
        try:
            m = WARMUP_LINE.search(p.read_text(errors="replace"))
        except OSError:
            continue
        if m:
            return float(m.group(1))
    return None


def export_phases(out: pathlib.Path) -> dict:
    """From profile_export.jsonl: warmup requests, and the span from the first warmup request's start
    to the first profiling request's start."""
    first: dict[str, int] = {}
    count: dict[str, int] = {}
    for m in compare.export_metadata(out):
        phase, start = m.get("benchmark_phase"), m.get("request_start_ns")
        count[phase] = count.get(phase, 0) + 1
        if isinstance(start, int):
            first[phase] = min(first.get(phase, start), start)
    res = {"warmup_requests": count.get("warmup", 0)}
    if "warmup" in first and "profiling" in first:
        res["warmup_span_s"] = round((first["profiling"] - first["warmup"]) / 1e9, 2)
    return res


def first_recorded_ns(record: pathlib.Path) -> int | None:
    """When the simulator logged its first request (unix ns): the earliest of the log's first lines
    (a body over 256 KiB is logged once its parse on a blocking thread ends, so a line can follow
    one that arrived after it; `seq` is the arrival order)."""
    try:
        with open(record, "rb") as f:
            stamps = [int(json.loads(line)["unix_ns"]) for line, _ in zip(f, range(256)) if line.strip()]
        return min(stamps) if stamps else None
    except (OSError, ValueError, KeyError, json.JSONDecodeError):
        return None


def agentx_send_lag_p99(out: pathlib.Path) -> float | None:
    """agentx's send lag p99 (how late a request left against when it was due), from its
    run_summary.json."""
    for path in out.rglob("run_summary.json"):
        try:
            lag = json.loads(path.read_text())["summary"].get("send_lag_ms") or {}
        except (OSError, json.JSONDecodeError, KeyError, AttributeError):
            return None
        return lag.get("p99")
    return None


def replay(a: argparse.Namespace, tool: str, conc: int) -> dict:
    tag = f"{tool}-c{conc}"
    out = a.out / "runs" / tag
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    record = a.out / "logs" / f"requests-{tag}.jsonl"
    record.unlink(missing_ok=True)
    sim = compare.Sim(
        a.agentx, a.ttft_ms, a.itl_ms, a.out / "logs" / f"sim-{tag}.log", a.sim_cpus, extra=["--record-requests", str(record)]
    )  # fmt: skip
    cmd = compare.pinned(a.tool_cpus) + tool_cmd(a, tool, a.replay_corpus, sim.url, conc, out)
    log_path = a.out / "logs" / f"{tag}.log"
    log = open(log_path, "wb")
    print(f"  {tag}: {' '.join(cmd[:4])} ... (log: {log_path})", flush=True)
    launched_ns, started = time.time_ns(), time.monotonic()
    cache = a.out / "cache" / "replay" / tool
    cache_state = "warm" if cache.is_dir() and any(cache.iterdir()) else "cold"
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=tool_env(a, tool, cache), start_new_session=True)
    reaper = compare.Reaper(proc)
    # A peer keeps no profiling phase: its window is its first --duration seconds of streaming.
    streaming_cap_s = a.duration if tool in trees_peers.PEERS else None
    try:
        row = compare.measure(a, tool, conc, tag, cmd, out, sim, proc, reaper, started, streaming_cap_s)
    finally:
        compare.kill_tree(reaper)
        log.close()
        sim.stop()
    if tool in trees_peers.PEERS:
        row.update(trees_peers.figures(tool, out, a.ttft_ms))
    elif tool == "agentx":
        row["send_lag_p99_ms"] = agentx_send_lag_p99(out)
    first = first_recorded_ns(record)
    row["first_request_s"] = round((first - launched_ns) / 1e9, 2) if first else None
    row["dataset_cache"] = cache_state  # the tool's dataset cache, as the previous level left it
    row["warmup_s"] = logged_warmup_s([log_path, *sorted(out.rglob("*.log"))])
    row.update(export_phases(out))
    if not a.keep_request_logs:
        record.unlink(missing_ok=True)
    if row.get("exit_code") not in (0, None) or not row.get("export_found"):
        row["note"] = f"exit {row.get('exit_code')}; see {log_path}"
        if row["peak_rss_mib"] * 2**20 > a.rss_limit:
            row["note"] = f"stopped at {row['peak_rss_mib']:,.0f} MiB RSS (over --rss-limit-gib); see {log_path}"
    print(f"  {tag}: first request after {row['first_request_s']} s, warmup {row['warmup_s']} s "
          f"(export span {row.get('warmup_span_s')} s)", flush=True)  # fmt: skip
    return row


def aiperf_unavailable(a: argparse.Namespace) -> str | None:
    """Why aiperf cannot take part (None: it can): not given, or not 0.13."""
    if not a.aiperf:
        return "not given (--aiperf): bench/compare.sh --trees passes it when aiperf 0.13 is in its own venv"
    v = subprocess.run([a.aiperf, "--version"], capture_output=True, text=True)
    version = ((v.stdout + v.stderr).strip().splitlines() or ["?"])[-1]
    if not version.startswith("0.13"):
        return f"{a.aiperf} is aiperf {version}, not 0.13 (agentx-harness ships a package named aiperf too)"
    return None


# Where each optional tool's `{"ran": ..., "why_not": ...}` is kept in the report.
OPTIONAL_KEY = {"harness": "harness_run", "aiperf": "aiperf", **{peer: peer for peer in trees_peers.PEERS}}


def optional_tools(a: argparse.Namespace, report: dict, version) -> list[str]:
    """agentx, then every optional tool that can take part in this run. Each optional tool gets
    `{"ran": ..., "why_not": ...}` in the report; one that cannot run says why and keeps an empty column."""
    tools = ["agentx"]
    given_why = dict(item.split("=", 1) for item in a.why_not if "=" in item)
    checks = {
        "harness": lambda: None if a.harness else "not given (--harness): bench/compare.sh --trees installs agentx-harness and passes it",
        "aiperf": lambda: aiperf_unavailable(a),
        **{peer: (lambda peer=peer: given_why.get(peer) or trees_peers.why_not(a, peer)) for peer in trees_peers.PEERS},
    }  # fmt: skip
    for tool, check in checks.items():
        why = check()
        status = report[OPTIONAL_KEY[tool]] = {"ran": why is None, "why_not": why}
        if why:
            print(f"{tool}: skipped: {why}", flush=True)
            continue
        tools.append(tool)
        if tool == "aiperf":
            status.update(
                version=version([a.aiperf, "--version"]),
                flags="--scenario inferencex-agentx-mvp and the harness's preset as flags, less "
                "--warmup-requests-per-lane (0.13 has no cache-pressure warmup stage)",
            )  # fmt: skip
        elif tool in trees_peers.PEERS:
            status.update(version=trees_peers.version(a, tool), **trees_peers.workload(a, tool))
    return tools


def replay_levels(a: argparse.Namespace, report: dict, levels: list[int], tools: list[str], json_path: pathlib.Path) -> list[dict]:
    """Every tool at every level, then the floors; the JSON is rewritten after each run. agentx and the
    harness alternate (the order flips at each level); an optional tool whose run gets no window is
    left out of the later levels, with why."""
    rows: list[dict] = []
    print("replay", flush=True)
    for i, c in enumerate(levels):
        pair = [t for t in ("agentx", "harness") if t in tools]
        if i % 2:
            pair.reverse()
        for tool in pair + [t for t in tools if t not in pair and report[OPTIONAL_KEY[t]]["ran"]]:
            run_started = time.monotonic()
            rows.append(replay(a, tool, c))
            rows[-1]["run_wall_s"] = round(time.monotonic() - run_started, 1)
            if tool not in pair and rows[-1].get("tokens_per_s") is None:
                # It did not get through a run of this workload: say why, and go on without it.
                why = f"no window at concurrency {c}: {rows[-1].get('note') or 'see its log'}"
                report[OPTIONAL_KEY[tool]].update(ran=False, why_not=why)
                print(f"{tool}: skipped from here on: {why}", flush=True)
            json_path.write_text(json.dumps({**report, "runs": rows}, indent=2))
        for tool, binary in (("floor", a.floor), ("hyper-floor", a.hyper_floor)):
            if binary:
                rows.append(compare.floor_run(a, c, tool, binary))
        if a.hyper_floor and "agentx" in tools:
            # agentx's own traffic again, without agentx: its requests at their offsets and sizes.
            rows.append(compare.traffic_floor_run(a, c, a.hyper_floor, a.out / "runs" / f"agentx-c{c}"))
    return rows


# ---------------------------------------------------------------------------------------------------
# dataset preparation


def prep(a: argparse.Namespace, tools: list[str]) -> dict:
    """Launch to first request on the full-size corpus, cold (empty dataset cache) and warm."""
    res: dict = {}
    print("dataset preparation (full-size corpus)", flush=True)
    cache = a.out / "prep-cache" / "agentx-import"
    shutil.rmtree(cache, ignore_errors=True)
    imp = [a.agentx, "dataset", "import", str(a.prep_corpus), "--cache-dir", str(cache)]
    res["agentx_import_cold"] = compare.timed(imp)
    res["agentx_import_warm"] = compare.timed(imp)
    print(f"  agentx dataset import: cold {res['agentx_import_cold']}, warm {res['agentx_import_warm']}", flush=True)
    for tool in tools:
        cache = a.out / "cache" / "prep" / tool
        shutil.rmtree(cache, ignore_errors=True)

        def make_cmd(url: str, out: pathlib.Path, tool: str = tool) -> list[str]:
            saved = a.duration
            a.duration = 5
            try:
                return tool_cmd(a, tool, a.prep_corpus, url, 1, out)
            finally:
                a.duration = saved

        def make_env(c: pathlib.Path, tool: str = tool) -> dict:
            return tool_env(a, tool, c)

        cold = res[f"{tool}_first_request_cold"] = compare.launch_to_first_request(a, tool, cache, "cold", make_cmd, make_env)
        if cold["seconds"] is None:
            res[f"{tool}_first_request_warm"] = {"seconds": None, "note": "not run: the cold start did not finish"}
        else:
            res[f"{tool}_first_request_warm"] = compare.launch_to_first_request(a, tool, cache, "warm", make_cmd, make_env)
    return res


# ---------------------------------------------------------------------------------------------------
# report

FIGURES = compare.FIGURES + [
    ("first_request_s", "1st request s", "{:.2f}"),
    ("warmup_s", "warmup s", "{:.2f}"),
]


def client_added(row: dict, q: str) -> float | None:
    return ((row.get("client_ttft_added_ms") or {}).get("whole") or {}).get(f"{q}_ms")


def table(rows: list[dict], levels: list[int], tools: list[str]) -> tuple[str, list[dict]]:
    """The printed table (a figure per line, the tools side by side, harness over agentx) and the
    summary per level for the JSON."""
    by = {(r["tool"], r["concurrency"]): r for r in rows}
    head = f"{'conc':>5} {'figure':<15}" + "".join(f"{t:>12}" for t in tools) + f"{'harness/agentx':>16}"
    lines, summary = [head], []
    for c in levels:
        entry: dict = {"concurrency": c}
        for key, label, f in FIGURES:
            vals = {t: by.get((t, c), {}).get(key) for t in tools}
            r = compare.ratio(vals.get("harness"), vals.get("agentx"))
            entry[key] = {**vals, "harness_over_agentx": r}
            lines.append(f"{c:>5} {label:<15}" + "".join(f"{compare.fmt(vals[t], f):>12}" for t in tools)
                         + f"{compare.fmt(r, '{:.2f}x'):>16}")  # fmt: skip
        lag = by.get(("agentx", c), {}).get("send_lag_p99_ms")
        entry["agentx_send_lag_p99_ms"] = lag
        lines.append(f"{c:>5} {'send lag p99 ms':<15}{compare.fmt(lag, '{:.2f}'):>12}")
        for q in ("p50", "p99"):
            v = client_added(by.get(("agentx", c), {}), q)
            entry[f"agentx_client_added_ttft_{q}_ms"] = v
            lines.append(f"{c:>5} {'cTTFT+ ' + q + ' ms':<15}{compare.fmt(v, '{:.2f}'):>12}")
        for tool in compare.FLOORS:
            fr = by.get((tool, c), {})
            key = tool.replace("-", "_")
            entry[f"{key}_cpu_s_per_1k_tokens"] = fr.get("cpu_s_per_1k_tokens")
            entry[f"{key}_tokens_per_s"] = fr.get("tokens_per_s")
            lines.append(f"{c:>5} {tool + ' CPU-s/1k':<15}{compare.fmt(fr.get('cpu_s_per_1k_tokens'), '{:.4f}'):>12}"
                         f"   ({compare.fmt(fr.get('tokens_per_s'), '{:,.0f}')} tok/s)")  # fmt: skip
        over = compare.ratio(by.get(("agentx", c), {}).get("cpu_s_per_1k_tokens"),
                             by.get(("traffic-floor", c), {}).get("cpu_s_per_1k_tokens"))  # fmt: skip
        entry["agentx_over_traffic_floor"] = over
        lines.append(f"{c:>5} {'agentx/traffic':<15}{compare.fmt(over, '{:.2f}x'):>12}")
        summary.append(entry)
    return "\n".join(lines), summary


FLOOR_NAMES = {
    "floor": "floor: C",
    "hyper-floor": "floor: tokio+hyper",
    "traffic-floor": "floor: agentx's traffic on tokio+hyper",
}
TOOL_NAMES = {"agentx": "agentx", "harness": "agentx-harness 1.0.12", "aiperf": "aiperf 0.13", **trees_peers.NAMES}


def markdown(rows: list[dict], levels: list[int], tools: list[str]) -> str:
    """One row per tool and level, floors included: the README / performance-guide table."""
    by = {(r["tool"], r["concurrency"]): r for r in rows}

    def cell(v, f="{:.2f}"):
        return compare.fmt(v, f)

    out = [
        "| conc | client | tokens/s | CPU-s per 1k tokens | peak RSS (PSS) MiB | TTFT overhead p50 / p99 ms "
        "| client-added TTFT p50 / p99 ms | send lag p99 ms | first request s | warmup s |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in levels:
        for t in [*tools, *compare.FLOORS]:
            r = by.get((t, c))
            if not r:
                continue
            name = TOOL_NAMES.get(t, FLOOR_NAMES.get(t, t))
            rss = f"{cell(r.get('peak_rss_mib'), '{:,.0f}')} ({cell(r.get('peak_pss_mib'), '{:,.0f}')})" if t in tools else "-"
            ttft = f"{cell(r.get('ttft_overhead_p50_ms'))} / {cell(r.get('ttft_overhead_p99_ms'))}" if t in tools else "-"
            added = (f"{cell(client_added(r, 'p50'))} / {cell(client_added(r, 'p99'))}"
                     if r.get("client_ttft_added_ms") else "-")  # fmt: skip
            out.append(
                f"| {c} | {name} | {cell(r.get('tokens_per_s'), '{:,.0f}')} | {cell(r.get('cpu_s_per_1k_tokens'), '{:.4f}')} "
                f"| {rss} | {ttft} | {added} | {cell(r.get('send_lag_p99_ms'))} | {cell(r.get('first_request_s'))} "
                f"| {cell(r.get('warmup_s'))} |"
            )
    return "\n".join(out) + "\n"


def complete(rows: list[dict], levels: list[int], tools: list[str]) -> list[str]:
    """What is missing from the table: (tool, level, figure) triples with no value."""
    by = {(r["tool"], r["concurrency"]): r for r in rows}
    missing = []
    for c in levels:
        for t in tools:
            for key, _, _ in FIGURES:
                if key == "warmup_s" and t in trees_peers.PEERS:
                    continue  # the peers have no warmup phase
                if by.get((t, c), {}).get(key) is None:
                    missing.append(f"{t} c{c} {key}")
        if client_added(by.get(("agentx", c), {}), "p99") is None:
            missing.append(f"agentx c{c} client-added TTFT")
        for t in compare.FLOORS:
            if by.get((t, c), {}).get("cpu_s_per_1k_tokens") is None:
                missing.append(f"{t} c{c} cpu_s_per_1k_tokens")
    return missing


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agentx", required=True, help="the agentx-host binary")
    p.add_argument("--harness", help="agentx-harness's `agentx` executable (its column stays empty without it)")
    p.add_argument("--aiperf", help="aiperf 0.13's `aiperf` executable (in a venv without agentx-harness)")
    p.add_argument("--vllm-bench", help="the vllm-bench binary (bench/peers/build_vllm_bench.sh); optional")
    p.add_argument("--guidellm", help="guidellm 0.8.1's `guidellm` executable (bench/peers/install_guidellm.sh); optional")
    p.add_argument("--why-not", action="append", default=[], metavar="PEER=REASON",
                   help="a peer that could not be built or installed, and why (bench/compare.sh passes it)")  # fmt: skip
    p.add_argument("--floor", help="the bench/floor.c binary")
    p.add_argument("--hyper-floor", help="the bench/hyper_floor.rs binary")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/out-trees"))
    p.add_argument("--levels", default="1,64,256,1024", help="concurrency levels (lanes)")
    p.add_argument("--duration", type=float, default=120, help="benchmark duration per run, s")
    p.add_argument("--grace", type=float, default=30, help="benchmark grace period, s (the preset's)")
    p.add_argument("--startup-timeout", type=float, default=900, help="allowance for start-up and warmup, s")
    p.add_argument("--prep", action="store_true", help="also time dataset preparation on the full-size corpus")
    p.add_argument("--prep-timeout", type=float, default=1800, help="limit on launch-to-first-request, s")
    p.add_argument("--traces", type=int, default=PUBLIC_TRACES, help="synthetic traces (the public corpus has 393)")
    p.add_argument("--seed", type=int, default=42, help="the corpus's and both tools' --random-seed")
    p.add_argument("--max-turns", type=int, default=12, help="turns kept per trace in the replay corpus")
    p.add_argument("--max-output-tokens", type=int, default=1024, help="output cap of every replayed turn")
    p.add_argument("--max-gap-s", type=float, default=10, help="longest idle stretch of a replayed trace, s")
    p.add_argument("--ttft-ms", type=float, default=50, help="the simulator's fixed TTFT")
    p.add_argument("--itl-ms", type=float, default=10, help="the simulator's fixed inter-token latency")
    p.add_argument("--floor-window", type=float, default=20, help="seconds each floor is measured over")
    p.add_argument("--rss-limit-gib", type=float, default=0, help="stop a tool above this RSS (default 80%% of RAM)")
    p.add_argument("--no-pin", action="store_true", help="do not pin the simulator to CPU 0 and the clients to CPU 1")
    p.add_argument("--keep-request-logs", action="store_true", help="keep the simulator's request logs (logs/)")
    p.add_argument("--label", default="", help="a note stored in the JSON (say, a validation run on a shared machine)")
    a = p.parse_args()
    for flag in ("agentx", "harness", "aiperf", "floor", "hyper_floor"):  # the peers' paths: trees_peers.why_not
        path = getattr(a, flag)
        if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
            p.error(f"--{flag.replace('_', '-')} {path}: not an executable file (bench/compare.sh --trees builds and installs them)")
    try:
        levels = [int(x) for x in a.levels.split(",") if x]
    except ValueError:
        p.error(f"--levels {a.levels}: not a comma-separated list of integers")
    if not a.no_pin and (os.cpu_count() or 1) < 2:
        p.error("pinning needs 2 CPUs; pass --no-pin")
    if not a.no_pin and not shutil.which("taskset"):
        p.error("taskset is not installed (util-linux); install it or pass --no-pin")
    a.sim_cpus, a.tool_cpus = (None, None) if a.no_pin else ("0", "1")
    a.out.mkdir(parents=True, exist_ok=True)
    a.out = a.out.resolve()
    (a.out / "logs").mkdir(exist_ok=True)
    a.rss_limit = a.rss_limit_gib * 2**30 if a.rss_limit_gib else compare.machine()["mem_gib"] * 0.8 * 2**30
    a.tokenizer_dir = a.out / "tokenizer"
    a.cache = a.out / "cache"
    if not differential.agentx_knows_scenario(a.agentx, "agentx"):
        raise SystemExit(f"{a.agentx} has no built-in `agentx` scenario (agentx-host scenario inspect agentx): rebuild it")
    a.agentx_scenario = ["--scenario", "agentx"]
    a.prep_corpus = a.out / f"corpus-subagents-{a.traces}-s{a.seed}-full"
    a.replay_corpus = a.out / (
        f"corpus-subagents-{a.traces}-s{a.seed}-turns{a.max_turns}-out{a.max_output_tokens}-gap{a.max_gap_s:g}-late{LATE_REQUESTS}"
    )

    def version(cmd: list[str]) -> str:
        r = subprocess.run(cmd, capture_output=True, text=True)
        return ((r.stdout or r.stderr).strip().splitlines() or ["?"])[-1]

    report: dict = {
        "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "label": a.label or None,
        "machine": compare.machine(),
        "agentx": version([a.agentx, "--version"]),
        "harness": "agentx-harness " + version([str(pathlib.Path(a.harness).parent / "python"), "-c",
                                                "import importlib.metadata as m; print(m.version('agentx-harness'))"])
        if a.harness else None,  # fmt: skip
        "mode": "session trees: agentx `run --scenario agentx` against agentx-harness `profile --scenario agentx` "
        "(same corpus, --random-seed, --concurrency, --benchmark-duration, --benchmark-grace-period, "
        "--unsafe-override; the scenario's preset otherwise), aiperf 0.13 agentic replay with the preset as flags; "
        "vllm-bench and guidellm as bench/trees_peers.py runs them",
        "simulator": {"ttft_ms": a.ttft_ms, "itl_ms": a.itl_ms, "process": "agentx-host sim --record-requests, one per run"},
        "pinned": None if a.no_pin else {"simulator_cpus": a.sim_cpus, "client_cpus": a.tool_cpus},
        "duration_s": a.duration,
        "grace_s": a.grace,
        "seed": a.seed,
        "levels": levels,
    }
    print(f"machine: {report['machine']}\nagentx: {report['agentx']}\nharness: {report['harness']}", flush=True)
    compare.make_tokenizer(a.tokenizer_dir)
    report["replay_corpus"] = make_corpus(a, a.replay_corpus, full=False)
    print(f"replay corpus: {report['replay_corpus']}", flush=True)
    tools = optional_tools(a, report, version)
    report["tools"] = tools
    if a.prep:
        report["prep_corpus"] = make_corpus(a, a.prep_corpus, full=True)
        print(f"dataset-preparation corpus: {report['prep_corpus']}", flush=True)
        report["prep"] = prep(a, [t for t in tools if t not in trees_peers.PEERS])
    json_path = a.out / "compare-trees.json"
    rows = replay_levels(a, report, levels, tools, json_path)
    text, summary = table(rows, levels, tools)
    report["table"] = summary
    report["runs"] = rows
    report["missing"] = complete(rows, levels, [t for t in tools if t == "agentx" or report[OPTIONAL_KEY[t]]["ran"]])
    md = markdown(rows, levels, tools)
    print("\n" + text + "\n\n" + md)
    if report["missing"]:
        print(f"missing figures: {', '.join(report['missing'])}", flush=True)
    json_path.write_text(json.dumps(report, indent=2))
    (a.out / "compare-trees.md").write_text(md)
    print(f"wrote {json_path} and {a.out / 'compare-trees.md'}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
