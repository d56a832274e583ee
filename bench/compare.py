"""agentx against aiperf, side by side, on one machine: replay cost, timing overhead, dataset preparation.

Run through `bench/compare.sh`, which installs aiperf into a venv and builds agentx first. This script:

1. writes the synthetic corpus (`agentx-host dataset synth`) and splits it into one weka-trace `.json`
   per trace, the directory form both tools read (`--input-file DIR --custom-dataset-type weka_trace`);
2. writes an offline word-level tokenizer for aiperf (one token per word, as the simulator counts);
3. dataset preparation: each tool is launched against a fresh simulator with an empty dataset cache
   (cold) and again with that cache (warm); the figure is the time from launch to the first request the
   simulator sees. agentx's `dataset import` is timed on its own as well;
4. replay: for every concurrency level, agentx and aiperf run one after the other (the order alternates
   from level to level), each against a fresh simulator process with a fixed TTFT and inter-token
   latency, with the same corpus (the first --replay-max-turns turns of each trace, so that aiperf can
   hold it in memory), seed, scenario (inferencex-agentx-mvp) and flags; with --think-time off (the
   default) both get --ignore-trace-delays, so both carry the same back-to-back load.

Measured per run, from outside the tool:
- the CPU time, RSS and PSS of the tool's whole process tree, sampled from /proc every 0.5 s (utime +
  stime of every live process plus the times of the children each has reaped; PSS every 2 s);
- the tokens the simulator streamed (`vllm:generation_tokens_total` on its /metrics);
- the window: the profiling phase, from the first profiling request's start (as the tool's own
  `profile_export.jsonl` gives it) for the benchmark duration, or to the last response's end if that
  comes first (else the span over which the simulator's token count moved); the grace drain after the
  duration runs at a falling concurrency and is left out. CPU seconds per 1,000 tokens and tokens per second are over that window, so start-up, dataset
  loading (measured in step 3) and warmup do not blur the per-token cost;
- TTFT p50/p99 from the tool's own `profile_export_aiperf.json`, minus the simulator's fixed TTFT.

With --floor (compare.sh passes it), every level also runs bench/floor.c against a fresh simulator: a C
client that only does epoll_wait + recv per wake-up and re-posts on `[DONE]`, accounted the same way. Its
CPU per token is the least any client can spend here, so aiperf's cost over the floor's bounds the ratio
that any tool could reach against aiperf at that level. With --hyper-floor, bench/hyper_floor.rs runs the
same way: the same requests through agentx's own HTTP stack (tokio and hyper-util's pooled client) with
nothing parsed, so the table also shows what the stack alone costs and what agentx adds on top.

Nothing here asserts a timing: it prints a table and writes `compare.json`.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import pathlib
import platform
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import ttft_added  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
MODEL = "bench-model"
SCENARIO = "inferencex-agentx-mvp"


# ---------------------------------------------------------------------------------------------------
# process-tree accounting


def _proc_table() -> dict[int, tuple[int, float, int]]:
    """pid -> (ppid, CPU seconds incl. reaped children, RSS bytes) for every process."""
    table = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat", "rb") as f:
                stat = f.read().decode("latin-1")
        except OSError:
            continue
        rest = stat[stat.rindex(")") + 2 :].split()
        # rest[0] is field 3 (state): utime=14, stime=15, cutime=16, cstime=17, rss=24.
        cpu = sum(int(rest[i]) for i in (11, 12, 13, 14)) / CLK_TCK
        table[int(d)] = (int(rest[1]), cpu, int(rest[21]) * PAGE)
    return table


def tree_pids(root: int, table: dict[int, tuple[int, float, int]]) -> list[int]:
    kids: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in table.items():
        kids.setdefault(ppid, []).append(pid)
    out, stack = [], [root]
    while stack:
        pid = stack.pop()
        if pid in table:
            out.append(pid)
            stack.extend(kids.get(pid, ()))
    return out


def tree_usage(root: int) -> tuple[float, int, int]:
    """(CPU seconds, RSS bytes, process count) of `root` and all its descendants."""
    table = _proc_table()
    pids = tree_pids(root, table)
    return sum(table[p][1] for p in pids), sum(table[p][2] for p in pids), len(pids)


def tree_pss(root: int) -> int:
    """Proportional set size of the tree in bytes: shared pages (a corpus in shared memory, mapped by
    several worker processes) count once in total, where the RSS sum counts them in every process."""
    total = 0
    for pid in tree_pids(root, _proc_table()):
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass
    return total


# ---------------------------------------------------------------------------------------------------
# the simulator


def pinned(cpus: str | None) -> list[str]:
    """A `taskset -c CPUS` prefix (children inherit it), or nothing."""
    return ["taskset", "-c", cpus] if cpus else []


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric_sum(text: str, name: str) -> float:
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(None, 1)[-1])
    return total


class Sim:
    """An `agentx-host sim` process on a free port with a fixed TTFT and inter-token latency (and a
    context of `max_model_len` tokens, which a request without a token limit streams to the end of).
    Its answers' headers wait for their first token (`--headers-at-first-token`): the stamp of when
    the first token went out is then when it did, not when it was due, so the simulator's own
    lateness (its timer, its one core) is its own time and not the client-added TTFT's. Every
    client gets the same first-token instants either way."""

    def __init__(
        self, agentx: str, ttft_ms: float, itl_ms: float, log: pathlib.Path, cpus: str | None = None, extra: tuple = (),
        max_model_len: int = 1 << 22,
    ):  # fmt: skip
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = pinned(cpus) + [
            agentx, "sim", "--port", str(self.port), "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms),
            "--served-model-name", MODEL, "--max-model-len", str(max_model_len), "--headers-at-first-token", *extra,
        ]  # fmt: skip
        self.log = open(log, "wb")
        self.proc = subprocess.Popen(self.args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                self.metrics()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the simulator did not start; see {log}")
                time.sleep(0.05)

    def metrics(self) -> str:
        with urllib.request.urlopen(self.url + "/metrics", timeout=5) as r:
            return r.read().decode()

    def tokens(self) -> float:
        return metric_sum(self.metrics(), "vllm:generation_tokens_total")

    def seen_request(self) -> bool:
        m = self.metrics()
        return any(
            metric_sum(m, n) > 0
            for n in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:request_success_total")
        )

    def cpu(self) -> float:
        return tree_usage(self.proc.pid)[0]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


# ---------------------------------------------------------------------------------------------------
# the tools


def tool_cmd(
    tool: str, a: argparse.Namespace, corpus: pathlib.Path, url: str, conc: int, duration: float, out: pathlib.Path
) -> list[str]:
    """The same replay for both tools: InferenceX's flags, the scenario, a short duration under override."""
    common = [
        "--url", url, "--endpoint", "/v1/chat/completions", "--endpoint-type", "chat", "--streaming",
        "--model", MODEL, "--concurrency", str(conc), "--benchmark-duration", str(duration),
        "--benchmark-grace-period", str(a.grace), "--random-seed", str(a.seed),
        "--failed-request-threshold", "0.05", "--use-server-token-count",
        "--input-file", str(corpus), "--custom-dataset-type", "weka_trace",
        "--output-artifact-dir", str(out), "--unsafe-override",
    ]  # fmt: skip
    if a.think_time == "off":
        common.append("--ignore-trace-delays")
    if tool == "agentx":
        return [a.agentx, "run", a.scenario, *common]
    return [
        a.aiperf, "profile", "--scenario", SCENARIO, *common,
        "--tokenizer", str(a.tokenizer_dir), "--ui-type", "none",
    ]  # fmt: skip


def tool_env(tool: str, cache: pathlib.Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("AGENTX_API_KEY", None)
    env["AIPERF_DATASET_WEKA_LIVE_ASSISTANT_RESPONSES"] = "1"
    env["AGENTX_DATASET_WEKA_LIVE_ASSISTANT_RESPONSES"] = "1"
    if tool == "agentx":
        env["AGENTX_DATASET_MMAP_CACHE_DIR"] = str(cache)
    else:
        env["AIPERF_DATASET_MMAP_CACHE_DIR"] = str(cache)
        env["AIPERF_DATASET_CONFIGURATION_TIMEOUT"] = "1800"
        env["AIPERF_SERVICE_PROFILE_CONFIGURE_TIMEOUT"] = "1800"
    return env


def kill_tree(reaper: "Reaper") -> None:
    """SIGINT to the process group (both tools drain on it), then SIGKILL, and reap the root."""
    if reaper.poll():
        return
    try:
        os.killpg(reaper.proc.pid, signal.SIGINT)
    except ProcessLookupError:
        pass
    if not reaper.wait(20):
        try:
            os.killpg(reaper.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        reaper.wait(30)


class Reaper:
    """Reaps one child with wait4, keeping its rusage: the CPU of the whole reaped tree."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.code: int | None = None
        self.cpu = 0.0

    def poll(self) -> bool:
        if self.code is None:
            pid, status, ru = os.wait4(self.proc.pid, os.WNOHANG)
            if pid == self.proc.pid:
                self.code = self.proc.returncode = os.waitstatus_to_exitcode(status)
                self.cpu = ru.ru_utime + ru.ru_stime
        return self.code is not None

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.poll():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True


def export_metadata(out: pathlib.Path):
    """The `metadata` of every request in the first profile_export.jsonl under `out` (unreadable lines
    left out)."""
    for p in out.rglob("profile_export.jsonl"):
        with open(p, "rb") as f:
            for line in f:
                try:
                    yield json.loads(line)["metadata"]
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue
        return


def profiling_span(out: pathlib.Path) -> tuple[int, int] | None:
    """(first start, last end) in wall-clock ns of the profiling requests in profile_export.jsonl."""
    lo = hi = None
    for m in export_metadata(out):
        if m.get("benchmark_phase") != "profiling":
            continue
        start, end = m.get("request_start_ns"), m.get("request_end_ns")
        if isinstance(start, int):
            lo = start if lo is None else min(lo, start)
        if isinstance(end, int):
            hi = end if hi is None else max(hi, end)
    return (lo, hi) if lo is not None and hi is not None else None


def find_export(out: pathlib.Path) -> dict | None:
    for p in sorted(out.rglob("profile_export_aiperf.json")):
        try:
            return json.loads(p.read_text())
        except (OSError, json.JSONDecodeError):
            return None
    return None


def stat(export: dict | None, metric: str, key: str) -> float | None:
    if not export or not isinstance(export.get(metric), dict):
        return None
    v = export[metric].get(key)
    return float(v) if isinstance(v, (int, float)) else None


def replay(a: argparse.Namespace, tool: str, conc: int) -> dict:
    tag = f"{tool}-c{conc}"
    out = a.out / "runs" / tag
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    sim = Sim(a.agentx, a.ttft_ms, a.itl_ms, a.out / "logs" / f"sim-{tag}.log", a.sim_cpus)
    cmd = pinned(a.tool_cpus) + tool_cmd(tool, a, a.replay_corpus, sim.url, conc, a.duration, out)
    log = open(a.out / "logs" / f"{tag}.log", "wb")
    print(f"  {tag}: {' '.join(cmd[:2])} ... (log: {log.name})", flush=True)
    started = time.monotonic()
    proc = subprocess.Popen(
        cmd, stdout=log, stderr=subprocess.STDOUT, env=tool_env(tool, a.cache / "replay" / tool), start_new_session=True
    )
    reaper = Reaper(proc)
    try:
        return measure(a, tool, conc, tag, cmd, out, sim, proc, reaper, started)
    finally:
        kill_tree(reaper)
        log.close()
        sim.stop()


def measure(
    a: argparse.Namespace, tool: str, conc: int, tag: str, cmd: list[str], out: pathlib.Path,
    sim: Sim, proc: subprocess.Popen, reaper: Reaper, started: float, streaming_cap_s: float | None = None,
) -> dict:  # fmt: skip
    """Samples the tool's process tree and the simulator's token count until the tool exits. A tool
    with no profile_export.jsonl is measured over the span the simulator's token count moved, or over
    its first `streaming_cap_s` seconds when that is given."""
    samples = []  # (t, tree cpu, tree rss, tokens, sim cpu, wall-clock ns)
    peak_pss = 0
    limit = a.duration + a.grace + a.startup_timeout
    while True:
        t = time.monotonic() - started
        cpu, rss, _ = tree_usage(proc.pid)
        try:
            tok = sim.tokens()
        except OSError:
            tok = samples[-1][3] if samples else 0.0
        samples.append((t, cpu, rss, tok, sim.cpu(), time.time_ns()))
        if len(samples) % 4 == 1:  # PSS walks every mapping: every 2 s is enough
            peak_pss = max(peak_pss, tree_pss(proc.pid))
        if reaper.poll():
            break
        if t > limit:
            print(f"  {tag}: still running after {limit:.0f} s; interrupting", flush=True)
            break
        if rss > a.rss_limit:
            print(f"  {tag}: RSS {rss / 2**30:.1f} GiB is over --rss-limit-gib; stopping it", flush=True)
            break
        time.sleep(0.5)
    kill_tree(reaper)
    code, total_cpu = reaper.code, reaper.cpu
    wall = time.monotonic() - started

    row: dict = {"tool": tool, "concurrency": conc, "exit_code": code, "wall_s": round(wall, 2)}
    row["command"] = cmd
    row["total_cpu_s"] = round(total_cpu, 3)
    row["peak_rss_mib"] = round(max(s[2] for s in samples) / 2**20, 1)
    row["peak_pss_mib"] = round(peak_pss / 2**20, 1)
    # The window: the profiling phase (first profiling request start to last end, from the tool's own
    # profile_export.jsonl), else the span over which the simulator's token count moved.
    i0 = i1 = None
    span = profiling_span(out)
    if span:
        # The benchmark duration only: the grace drain after it (no new turns, in-flight ones finish)
        # runs at a falling concurrency, and the tools drain differently, so it is left out for both.
        span = (span[0], min(span[1], span[0] + int(a.duration * 1e9)))
        inside = [i for i, smp in enumerate(samples) if span[0] <= smp[5] <= span[1]]
        if len(inside) >= 2:
            i0, i1 = inside[0], inside[-1]
            row["window"] = "profiling"
    if i0 is None:
        moved = [i for i in range(1, len(samples)) if samples[i][3] > samples[i - 1][3]]
        if moved:
            i0, i1 = moved[0] - 1, moved[-1]
            if streaming_cap_s is not None:
                i1 = max(i for i in range(i0, i1 + 1) if samples[i][0] - samples[i0][0] <= streaming_cap_s)
            row["window"] = "streaming"
    if i0 is not None:
        secs = samples[i1][0] - samples[i0][0]
        tokens = samples[i1][3] - samples[i0][3]
        cpu = samples[i1][1] - samples[i0][1]
        row["window_s"] = round(secs, 2)
        row["tokens"] = int(tokens)
        row["tokens_per_s"] = round(tokens / secs, 1) if secs > 0 else None
        row["cpu_s"] = round(cpu, 3)
        row["cpu_s_per_1k_tokens"] = round(cpu / tokens * 1000, 5) if tokens else None
        row["sim_cpu_s"] = round(samples[i1][4] - samples[i0][4], 3)
    export = find_export(out)
    p50, p99 = stat(export, "time_to_first_token", "p50"), stat(export, "time_to_first_token", "p99")
    row["ttft_p50_ms"] = p50
    row["ttft_p99_ms"] = p99
    row["ttft_overhead_p50_ms"] = round(p50 - a.ttft_ms, 3) if p50 is not None else None
    row["ttft_overhead_p99_ms"] = round(p99 - a.ttft_ms, 3) if p99 is not None else None
    # What the client added, exactly, when its records carry the simulator's own time to first token.
    added = ttft_added.summary(out) if tool == "agentx" else None
    if added:
        row["client_ttft_added_ms"] = added
    row["requests"] = stat(export, "request_count", "avg")
    row["errors"] = stat(export, "error_request_count", "avg")
    row["export_found"] = export is not None
    print(
        f"  {tag}: exit {code}, {row.get('tokens_per_s')} tok/s, {row.get('cpu_s_per_1k_tokens')} CPU-s/1k tok, "
        f"peak RSS {row['peak_rss_mib']} MiB, TTFT p50/p99 {p50}/{p99} ms",
        flush=True,
    )
    return row


FLOORS = {
    "floor": "bench/floor.c: epoll_wait + recv per wake-up, nothing parsed",
    "hyper-floor": "bench/hyper_floor.rs: tokio + hyper-util's pooled client, nothing parsed",
    "traffic-floor": "bench/hyper_floor.rs --replay: agentx's run's requests at their offsets and sizes, "
    "on tokio + hyper-util's pooled client, nothing parsed",
}


def floor_run(a: argparse.Namespace, conc: int, tool: str, binary: str) -> dict:
    """A floor client (FLOORS) at `conc` connections: the least CPU per token a client of its kind spends
    on this machine."""
    tag = f"{tool}-c{conc}"
    sim = Sim(a.agentx, a.ttft_ms, a.itl_ms, a.out / "logs" / f"sim-{tag}.log", a.sim_cpus)
    ramp, window = 3.0, a.floor_window
    log = open(a.out / "logs" / f"{tag}.log", "wb")
    proc = subprocess.Popen(
        pinned(a.tool_cpus) + [binary, str(sim.port), str(conc), str(ramp + window + 2)], stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    reaper = Reaper(proc)
    row: dict = {"tool": tool, "concurrency": conc, "client": FLOORS[tool]}
    try:
        time.sleep(ramp)
        t0, (c0, _, _), k0 = time.monotonic(), tree_usage(proc.pid), sim.tokens()
        time.sleep(window)
        t1, (c1, _, _), k1 = time.monotonic(), tree_usage(proc.pid), sim.tokens()
        ok = not reaper.poll()
    finally:
        kill_tree(reaper)
        log.close()
        sim.stop()
    if ok and k1 > k0:
        row.update(
            window_s=round(t1 - t0, 2), tokens=int(k1 - k0), tokens_per_s=round((k1 - k0) / (t1 - t0), 1),
            cpu_s=round(c1 - c0, 3), cpu_s_per_1k_tokens=round((c1 - c0) / (k1 - k0) * 1000, 5),
        )  # fmt: skip
    print(f"  {tag}: {row.get('tokens_per_s')} tok/s, {row.get('cpu_s_per_1k_tokens')} CPU-s/1k tok", flush=True)
    return row


def run_start_wall_ns(out: pathlib.Path) -> int | None:
    """The wall-clock instant of an agentx run's offset 0: a request's `request_start_ns`
    (profile_export.jsonl) less its `send_ns` (records.jsonl)."""
    starts = {m.get("x_request_id"): m.get("request_start_ns") for m in export_metadata(out)}
    for p in out.rglob("records.jsonl"):
        with open(p, "rb") as f:
            for line in f:
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    continue
                start = starts.get(record.get("request_id"))
                if isinstance(start, int) and isinstance(record.get("send_ns"), int):
                    return start - record["send_ns"]
        return None
    return None


def traffic_floor_run(a: argparse.Namespace, conc: int, binary: str, agentx_out: pathlib.Path) -> dict:
    """bench/hyper_floor.rs --replay on the agentx run in `agentx_out`: the same requests at the same
    offsets, measured over the same window of offsets as agentx's profiling window (compare.measure's),
    so the CPU per token of the two differs only by what agentx does beyond moving the bytes."""
    tag = f"traffic-floor-c{conc}"
    row: dict = {"tool": "traffic-floor", "concurrency": conc, "client": FLOORS["traffic-floor"]}
    span, run_t0 = profiling_span(agentx_out), run_start_wall_ns(agentx_out)
    if not span or run_t0 is None:
        row["why_not"] = f"the agentx run in {agentx_out} has no profiling window or no records.jsonl"
        print(f"  {tag}: {row['why_not']}", flush=True)
        return row
    span = (span[0], min(span[1], span[0] + int(a.duration * 1e9)))
    offsets = (span[0] - run_t0, span[1] - run_t0)
    sim = Sim(a.agentx, a.ttft_ms, a.itl_ms, a.out / "logs" / f"sim-{tag}.log", a.sim_cpus)
    log = open(a.out / "logs" / f"{tag}.log", "wb")
    proc = subprocess.Popen(
        pinned(a.tool_cpus) + [binary, str(sim.port), "--replay", str(agentx_out)], stdout=subprocess.PIPE,
        stderr=log, start_new_session=True,
    )  # fmt: skip
    reaper = Reaper(proc)
    samples = []  # (wall ns, tree cpu, tree rss, tokens)
    try:
        first = proc.stdout.readline().decode().split()
        t0 = int(first[1]) if len(first) == 2 and first[0] == "t0_wall_ns" else None
        window = (t0 + offsets[0], t0 + offsets[1]) if t0 is not None else None
        while window and not reaper.poll() and time.time_ns() < window[1] + 1e9:
            cpu, rss, _ = tree_usage(proc.pid)
            samples.append((time.time_ns(), cpu, rss, sim.tokens()))
            time.sleep(0.5)
    finally:
        kill_tree(reaper)
        log.close()
        sim.stop()
    inside = [smp for smp in samples if window and window[0] <= smp[0] <= window[1]]
    if len(inside) >= 2 and inside[-1][3] > inside[0][3]:
        secs, tokens, cpu = (inside[-1][0] - inside[0][0]) / 1e9, inside[-1][3] - inside[0][3], inside[-1][1] - inside[0][1]
        row.update(
            window_s=round(secs, 2), tokens=int(tokens), tokens_per_s=round(tokens / secs, 1), cpu_s=round(cpu, 3),
            cpu_s_per_1k_tokens=round(cpu / tokens * 1000, 5), peak_rss_mib=round(max(s[2] for s in samples) / 2**20, 1),
        )  # fmt: skip
    else:
        row["why_not"] = f"no window: it exited early or streamed nothing; see {a.out / 'logs' / (tag + '.log')}"
    print(f"  {tag}: {row.get('tokens_per_s')} tok/s, {row.get('cpu_s_per_1k_tokens')} CPU-s/1k tok", flush=True)
    return row


def launch_to_first_request(
    a: argparse.Namespace, tool: str, cache: pathlib.Path, label: str, make_cmd=None, make_env=None
) -> dict:
    """Seconds from launching the tool until the simulator sees its first request, then stops the tool.

    `make_cmd(url, out)` and `make_env(cache)` give another bench's command line and environment (the
    session-tree comparison's); by default, this script's replay of the dataset-preparation corpus."""
    out = a.out / "prep" / f"{tool}-{label}"
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    sim = Sim(a.agentx, a.ttft_ms, a.itl_ms, a.out / "logs" / f"sim-prep-{tool}-{label}.log")
    if make_cmd:
        cmd, env = make_cmd(sim.url, out), make_env(cache)
    else:
        cmd, env = tool_cmd(tool, a, a.prep_corpus, sim.url, 1, 5, out), tool_env(tool, cache)
    log = open(a.out / "logs" / f"prep-{tool}-{label}.log", "wb")
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    reaper = Reaper(proc)
    first, peak_rss, peak_pss, cpu, stopped, pss_at = None, 0, 0, 0.0, None, 0.0
    while not reaper.poll() and time.monotonic() - started < a.prep_timeout:
        c, rss, _ = tree_usage(proc.pid)
        cpu, peak_rss = max(cpu, c), max(peak_rss, rss)
        if time.monotonic() - pss_at > 2:  # PSS walks every mapping: every 2 s is enough
            peak_pss, pss_at = max(peak_pss, tree_pss(proc.pid)), time.monotonic()
        if rss > a.rss_limit:
            stopped = f"stopped at RSS {rss / 2**30:.1f} GiB (--rss-limit-gib)"
            break
        try:
            if sim.seen_request():
                first = time.monotonic() - started
                break
        except OSError:
            pass
        time.sleep(0.02)
    kill_tree(reaper)
    log.close()
    sim.stop()
    cache_bytes = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file()) if cache.exists() else 0
    res = {
        "seconds": round(first, 2) if first is not None else None,
        "cpu_s": round(cpu, 2),
        "peak_rss_mib": round(peak_rss / 2**20, 1),
        "peak_pss_mib": round(peak_pss / 2**20, 1),
        "cache_mib": round(cache_bytes / 2**20, 1),
    }
    if first is None:
        why = stopped or f"no request within {a.prep_timeout:.0f} s (exit {proc.returncode})"
        res["note"] = f"{why} after {time.monotonic() - started:.0f} s; see {log.name}"
        progress = last_progress(out)
        if progress:
            res["last_progress"] = progress
    print(f"  {tool} {label}: {res}", flush=True)
    return res


def last_progress(out: pathlib.Path) -> str | None:
    """aiperf's last dataset-build progress line ("parsed"/"reconstructed N/M ...") in its log."""
    last = None
    for log in out.rglob("aiperf.log"):
        for line in log.read_text(errors="replace").splitlines():
            if "WekaTraceLoader:" in line and ("reconstructed" in line or "parsed" in line):
                last = line.split("WekaTraceLoader:", 1)[1].strip()
    return last


def vm_hwm(pid: int) -> int:
    """The process's peak RSS (VmHWM) in bytes; 0 once it is gone. Unlike wait4's ru_maxrss it is not
    inherited across fork+exec from this (large) Python process."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def timed(cmd: list[str], env: dict | None = None) -> dict:
    """Runs `cmd` to completion: wall seconds, CPU seconds (wait4) and peak RSS (VmHWM, polled)."""
    t0 = time.monotonic()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    reaper, hwm = Reaper(p), 0
    while not reaper.poll():
        hwm = max(hwm, vm_hwm(p.pid))
        time.sleep(0.005)
    output = p.stdout.read()
    if reaper.code != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({reaper.code}):\n{output.decode(errors='replace')}")
    return {
        "seconds": round(time.monotonic() - t0, 3),
        "cpu_s": round(reaper.cpu, 3),
        "peak_rss_mib": round(hwm / 2**20, 1),
    }


def prep(a: argparse.Namespace) -> dict:
    res: dict = {}
    print("dataset preparation", flush=True)
    cache = a.out / "prep-cache" / "agentx-import"
    shutil.rmtree(cache, ignore_errors=True)
    imp = [a.agentx, "dataset", "import", str(a.prep_corpus), "--cache-dir", str(cache)]
    res["agentx_import_cold"] = timed(imp)
    res["agentx_import_warm"] = timed(imp)
    print(f"  agentx dataset import: cold {res['agentx_import_cold']}, warm {res['agentx_import_warm']}")
    for tool in a.tools:
        cache = a.cache / "prep" / tool
        shutil.rmtree(cache, ignore_errors=True)
        cold = res[f"{tool}_first_request_cold"] = launch_to_first_request(a, tool, cache, "cold")
        if cold["seconds"] is None:
            res[f"{tool}_first_request_warm"] = {"seconds": None, "note": "not run: the cold start did not finish"}
        else:
            res[f"{tool}_first_request_warm"] = launch_to_first_request(a, tool, cache, "warm")
    return res


# ---------------------------------------------------------------------------------------------------
# corpus, tokenizer, report


def make_corpus(a: argparse.Namespace, dest: pathlib.Path, max_turns: int | None) -> dict:
    """`agentx-host dataset synth`, split into one weka-trace `.json` per trace in `dest`."""
    if dest.is_dir() and any(dest.glob("*.json")):
        return {"dir": str(dest), "traces": len(list(dest.glob("*.json"))), "reused": True}
    jsonl = dest.with_suffix(".jsonl")
    cmd = [a.agentx, "dataset", "synth", "--traces", str(a.traces), "--seed", str(a.seed), "-o", str(jsonl)]
    if max_turns:
        cmd += ["--max-turns", str(max_turns)]
    t = timed(cmd)
    tmp = dest.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    n, size = 0, 0
    cap = a.max_output_tokens if max_turns else None
    with open(jsonl, "rb") as f:
        for line in f:
            trace = json.loads(line)
            if cap:
                # Long outputs at a slow inter-token latency would hold warmup for minutes.
                for r in trace["requests"]:
                    r["out"] = min(r["out"], cap)
                line = json.dumps(trace, separators=(",", ":")).encode() + b"\n"
            (tmp / f"{n:05d}_{trace.get('id', n)}.json").write_bytes(line.rstrip(b"\n"))
            n, size = n + 1, size + len(line)
    jsonl.unlink()
    tmp.rename(dest)
    return {
        "dir": str(dest), "traces": n, "max_turns": max_turns, "max_output_tokens": cap,
        "mib": round(size / 2**20, 1), "synth": t,
    }  # fmt: skip


def make_tokenizer(out: pathlib.Path, words: list[str] | None = None) -> None:
    """An offline Hugging Face tokenizer for aiperf: one token per whitespace-separated word.

    The machines this runs on cannot reach the Hugging Face hub, and aiperf's built-in tiktoken encoding
    downloads its ranks on first use. A WordLevel tokenizer over every word of aiperf's prompt corpus
    counts exactly as agentx's simulator does, so both tools' prompts and the server's usage agree.
    Without aiperf in this Python (a run of the peers alone), the words are 32,768 made-up ones: they
    count the same way. `words`, when given, are the vocabulary instead.
    """
    if (out / "tokenizer.json").exists():
        return
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
    for w in words if words is not None else tokenizer_words():
        vocab.setdefault(w, len(vocab))
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    special = {"unk_token": "[UNK]", "bos_token": "<s>", "eos_token": "</s>"}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 1 << 30, **special}
    (out / "tokenizer_config.json").write_text(json.dumps(config))
    (out / "special_tokens_map.json").write_text(json.dumps(special))


def tokenizer_words() -> list[str]:
    """The words of aiperf's prompt corpus, or made-up ones without aiperf."""
    try:
        import aiperf
    except ImportError:
        return [f"w{n}" for n in range(1 << 15)]
    corpus = pathlib.Path(aiperf.__file__).parent / "dataset/generator/assets/shakespeare.txt"
    return sorted(set(corpus.read_text(encoding="utf-8").split()))


def ratio(x, y):
    return round(x / y, 4) if isinstance(x, (int, float)) and isinstance(y, (int, float)) and y else None


FIGURES = [
    ("tokens_per_s", "tok/s", "{:,.0f}"),
    ("cpu_s_per_1k_tokens", "CPU-s/1k tok", "{:.4f}"),
    ("peak_rss_mib", "peak RSS MiB", "{:,.0f}"),
    ("peak_pss_mib", "peak PSS MiB", "{:,.0f}"),
    ("ttft_overhead_p50_ms", "TTFT+ p50 ms", "{:.2f}"),
    ("ttft_overhead_p99_ms", "TTFT+ p99 ms", "{:.2f}"),
]


def fmt(v, f):
    return f.format(v) if isinstance(v, (int, float)) else "-"


def table(rows: list[dict], levels: list[int]) -> tuple[str, list[dict]]:
    by = {(r["tool"], r["concurrency"]): r for r in rows}
    lines = [f"{'conc':>5} {'figure':<14} {'agentx':>12} {'aiperf':>12} {'agentx/aiperf':>14}"]
    summary = []
    for c in levels:
        ax, ap = by.get(("agentx", c), {}), by.get(("aiperf", c), {})
        entry = {"concurrency": c}
        for key, label, f in FIGURES:
            r = ratio(ax.get(key), ap.get(key))
            entry[key] = {"agentx": ax.get(key), "aiperf": ap.get(key), "ratio": r}
            lines.append(f"{c:>5} {label:<14} {fmt(ax.get(key), f):>12} {fmt(ap.get(key), f):>12} {fmt(r, '{:.3f}'):>14}")
        eff = ratio(ap.get("cpu_s_per_1k_tokens"), ax.get("cpu_s_per_1k_tokens"))
        entry["tokens_per_cpu_s_x_aiperf"] = eff
        lines.append(f"{c:>5} {'tok/CPU-s':<14} {'':>12} {'':>12} {fmt(eff, '{:.1f}x'):>14}")
        for tool in FLOORS:
            fl = by.get((tool, c), {}).get("cpu_s_per_1k_tokens")
            if fl is None:
                continue
            # A floor client's cost: no client of its kind does better, so aiperf/floor bounds the ratio
            # such a client could reach against aiperf.
            key = tool.replace("-", "_")
            entry[f"{key}_cpu_s_per_1k_tokens"] = fl
            entry[f"agentx_x_{key}"] = ratio(ax.get("cpu_s_per_1k_tokens"), fl)
            entry[f"aiperf_x_{key}"] = ratio(ap.get("cpu_s_per_1k_tokens"), fl)
            lines.append(
                f"{c:>5} {tool.split('-')[0] + ' CPU-s/1k':<14} {fmt(fl, '{:.4f}'):>12} {'':>12} "
                f"{fmt(entry[f'aiperf_x_{key}'], 'max {:.1f}x'):>14}"
            )
        # agentx only: its TTFT less the simulator's own (its stamps), over the window and its steady state.
        added = ax.get("client_ttft_added_ms") or {}
        for part, label in (("whole", "cTTFT+ p99 ms"), ("steady_after_10s", "  steady p99")):
            v = (added.get(part) or {}).get("p99_ms")
            if v is not None:
                entry[f"client_ttft_added_{part}_p99_ms"] = v
                lines.append(f"{c:>5} {label:<14} {fmt(v, '{:.2f}'):>12}")
        summary.append(entry)
    return "\n".join(lines), summary


def machine() -> dict:
    cpu = ""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        mem = int(open("/proc/meminfo").readline().split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return {"cpus": os.cpu_count(), "cpu": cpu, "mem_gib": round(mem / 2**30, 1), "os": platform.platform()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--agentx", required=True, help="the agentx-host binary")
    p.add_argument("--aiperf", required=True, help="the aiperf executable")
    p.add_argument("--scenario", required=True, help="the agentx-mvp component")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/out"))
    p.add_argument("--levels", default="1,64,256,1024", help="concurrency levels")
    p.add_argument("--tools", default="agentx,aiperf")
    p.add_argument("--duration", type=float, default=60, help="benchmark duration per run, s")
    p.add_argument("--grace", type=float, default=30, help="benchmark grace period, s")
    p.add_argument("--startup-timeout", type=float, default=900, help="allowance for start-up and warmup, s")
    p.add_argument("--prep-timeout", type=float, default=1800, help="limit on launch-to-first-request, s")
    p.add_argument("--traces", type=int, default=1100, help="synthetic traces (the public corpus has 949)")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument(
        "--replay-max-turns", type=int, default=16,
        help="turns kept per trace in the replay corpus (dataset preparation uses the full corpus)",
    )  # fmt: skip
    p.add_argument("--rss-limit-gib", type=float, default=0, help="stop a tool above this RSS (default 80%% of RAM)")
    p.add_argument("--ttft-ms", type=float, default=50, help="the simulator's fixed TTFT")
    p.add_argument("--itl-ms", type=float, default=10, help="the simulator's fixed inter-token latency")
    p.add_argument(
        "--think-time", choices=["off", "trace"], default="off",
        help="off: --ignore-trace-delays, turns back to back, so both tools carry the same load (the "
        "default); trace: the recorded think times, under each tool's own cap (aiperf 0.13 caps idle gaps "
        "at 10 s, agentx-mvp caps think time at 60 s, so the two loads differ)",
    )  # fmt: skip
    p.add_argument("--skip-prep", action="store_true", help="keep the dataset-preparation figures of --out's last compare.json")
    p.add_argument("--skip-replay", action="store_true")
    p.add_argument("--floor", help="the bench/floor.c binary: a per-token cost floor measured at every level")
    p.add_argument(
        "--hyper-floor",
        help="the bench/hyper_floor.rs binary: the per-token cost of agentx's HTTP stack alone, at every level",
    )  # fmt: skip
    p.add_argument("--floor-window", type=float, default=20, help="seconds each floor is measured over")
    p.add_argument(
        "--max-output-tokens",
        type=int,
        help="cap every turn's recorded output in the replay corpus (a slow --itl-ms otherwise holds warmup "
        "for minutes on the longest outputs)",
    )  # fmt: skip
    p.add_argument(
        "--pin",
        action="store_true",
        help="run the simulator on CPU 0 and the tool on CPU 1 (taskset), so that TTFT overhead is the "
        "client's timing error rather than CPU starvation of a shared pair of cores",
    )  # fmt: skip
    a = p.parse_args()
    a.sim_cpus, a.tool_cpus = ("0", "1") if a.pin else (None, None)
    for flag in ("agentx", "aiperf", "floor", "hyper_floor"):
        path = getattr(a, flag)
        if path and not (os.path.isfile(path) and os.access(path, os.X_OK)):
            p.error(f"--{flag.replace('_', '-')} {path}: not an executable file (bench/compare.sh builds it)")
    a.tools = [t for t in a.tools.split(",") if t]
    levels = [int(x) for x in a.levels.split(",") if x]
    a.out.mkdir(parents=True, exist_ok=True)
    a.out = a.out.resolve()
    (a.out / "logs").mkdir(exist_ok=True)
    a.prep_corpus = a.out / f"corpus-{a.traces}-s{a.seed}-full"
    cap = f"-out{a.max_output_tokens}" if a.max_output_tokens else ""
    a.replay_corpus = a.out / f"corpus-{a.traces}-s{a.seed}-turns{a.replay_max_turns}{cap}"
    a.rss_limit = a.rss_limit_gib * 2**30 if a.rss_limit_gib else machine()["mem_gib"] * 0.8 * 2**30
    a.tokenizer_dir = a.out / "tokenizer"
    a.cache = a.out / "cache"

    version = subprocess.run([a.aiperf, "--version"], capture_output=True, text=True).stdout.strip()
    agentx_version = subprocess.run([a.agentx, "--version"], capture_output=True, text=True).stdout.strip()
    report: dict = {
        "generated": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "agentx": agentx_version,
        "aiperf": version,
        "mode": (
            f"both tools replay the corpus with scenario {SCENARIO} (AGENTIC_REPLAY timing, weka_trace "
            "input directory, live assistant responses, --use-server-token-count, --unsafe-override for the "
            "short duration); aiperf runs its own built-in scenario of that name, agentx the agentx-mvp "
            "component"
            + ("; --ignore-trace-delays: turns go back to back" if a.think_time == "off" else "; recorded think times")
        ),
        "simulator": {"ttft_ms": a.ttft_ms, "itl_ms": a.itl_ms, "process": "agentx-host sim, one per run"},
        "pinned": {"simulator_cpus": a.sim_cpus, "tool_cpus": a.tool_cpus} if a.pin else None,
        "think_time": a.think_time,
        "duration_s": a.duration,
        "levels": levels,
    }
    print(f"machine: {report['machine']}\nagentx: {agentx_version}\naiperf: {version}\nmode: {report['mode']}")
    make_tokenizer(a.tokenizer_dir)
    if not a.skip_prep:
        report["prep_corpus"] = make_corpus(a, a.prep_corpus, None)
        print(f"dataset-preparation corpus: {report['prep_corpus']}", flush=True)
    if not a.skip_replay:
        report["replay_corpus"] = make_corpus(a, a.replay_corpus, a.replay_max_turns)
        print(f"replay corpus: {report['replay_corpus']}", flush=True)
    if not a.skip_prep:
        report["prep"] = prep(a)
    elif (a.out / "compare.json").exists():
        earlier = json.loads((a.out / "compare.json").read_text())
        if "prep" in earlier:
            report["prep"] = earlier["prep"]
            report["prep_corpus"] = earlier.get("prep_corpus")
            report["prep_from"] = earlier.get("prep_from") or earlier.get("generated")
            print(f"dataset preparation: kept from the run of {report['prep_from']}", flush=True)
    rows = []
    if not a.skip_replay:
        print("replay", flush=True)
        for i, c in enumerate(levels):
            order = a.tools if i % 2 == 0 else list(reversed(a.tools))
            for tool in order:
                rows.append(replay(a, tool, c))
                (a.out / "compare.json").write_text(json.dumps({**report, "runs": rows}, indent=2))
            for tool, binary in (("floor", a.floor), ("hyper-floor", a.hyper_floor)):
                if binary:
                    rows.append(floor_run(a, c, tool, binary))
        text, summary = table(rows, levels)
        report["table"] = summary
        print("\n" + text)
    report["runs"] = rows
    (a.out / "compare.json").write_text(json.dumps(report, indent=2))
    print(f"\nwrote {a.out / 'compare.json'}")


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit(130)
