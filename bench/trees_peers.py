"""The optional peers of the session-trees comparison (bench/compare_trees.py): vllm-bench, vLLM's Rust
benchmark client, and guidellm 0.8.1.

This module owns, per peer: why it cannot take part (`why_not`: not given, not runnable, the wrong
version), the workload it runs in place of agentx's session-tree replay and how that differs
(`workload`), its command line and environment, and the figures read from its own result file
(`figures`: TTFT p50/p99, requests, failures; send lag where the peer records when a request was due).
The CPU, RSS, tokens and window are measured from outside, as for every other tool (bench/compare.py).

- **vllm-bench** has no trace replay. It runs its closest workload: `--multi-turn` on its random
  dataset, a fixed number of conversations in flight (`--multi-turn-concurrency`), streamed chat
  completions, each turn's history resent, with the first turn's input, the new input per turn, the
  output per turn, the turns per conversation and the pause between turns set to the replay corpus's
  means over its root requests (`vllm_bench_shape`). It runs a fixed number of conversations, sized to
  last past the benchmark duration, and writes its result only at the end.
- **guidellm 0.8.1** replays the same weka `.json` traces (`--data kind=weka`) with the same lanes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import compare  # noqa: E402

PEERS = ("vllm-bench", "guidellm")
NAMES = {"vllm-bench": "vllm-bench (multi-turn)", "guidellm": "guidellm 0.8.1"}
GUIDELLM_VERSION = "0.8.1"
RESULT = {"vllm-bench": "vllm-bench-result.json", "guidellm": "benchmarks.json"}


# ---------------------------------------------------------------------------------------------------
# whether a peer can run


def why_not(a: argparse.Namespace, peer: str) -> str | None:
    """Why `peer` cannot take part in this run (None: it can)."""
    path = getattr(a, peer.replace("-", "_"))
    flag = f"--{peer}"
    if not path:
        how = {
            "vllm-bench": "bench/peers/build_vllm_bench.sh builds it; bench/compare.sh --trees passes it when that succeeds",
            "guidellm": f"bench/peers/install_guidellm.sh installs guidellm {GUIDELLM_VERSION}; "
            "bench/compare.sh --trees passes it when that succeeds",
        }[peer]
        return f"not given ({flag}): {how}"
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return f"{flag} {path}: not an executable file"
    try:
        probe = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{path} --version failed: {e}"
    said = (probe.stdout + probe.stderr).strip()
    if probe.returncode != 0:
        return f"{path} --version exited {probe.returncode}: {(said.splitlines() or ['no output'])[-1]}"
    if peer == "guidellm" and GUIDELLM_VERSION not in said:
        return f"{path} is not guidellm {GUIDELLM_VERSION} ({said.splitlines()[-1] if said else 'no version'})"
    return None


def version(a: argparse.Namespace, peer: str) -> str:
    path = getattr(a, peer.replace("-", "_"))
    probe = subprocess.run([path, "--version"], capture_output=True, text=True)
    said = probe.stdout.strip().splitlines() or probe.stderr.strip().splitlines() or ["?"]
    commit = pathlib.Path(path + ".commit")
    built_from = f" (built from {commit.read_text().strip()})" if commit.is_file() else ""
    return said[0] + built_from


# ---------------------------------------------------------------------------------------------------
# vllm-bench: the corpus's shape as a multi-turn workload


def root_requests(trace: dict) -> list[dict]:
    """The trace's own turns, in order: its top-level requests, subagents left out."""
    return sorted((r for r in trace["requests"] if r.get("type") != "subagent"), key=lambda r: r["t"])


def vllm_bench_shape(corpus: pathlib.Path, max_gap_s: float) -> dict:
    """The replay corpus's means over its root requests, as vllm-bench's multi-turn flags: the first
    turn's input, the new input per later turn (its input less the previous turn's input and output),
    the output per turn, the turns per trace, and the pause from a turn's end (`t + api_time`) to the
    next turn's start, capped at --max-gap-s. Subagent requests have no counterpart."""
    first_in, new_in, outs, turns, pauses, subagent_requests = [], [], [], [], [], 0
    for path in sorted(corpus.glob("*.json")):
        trace = json.loads(path.read_text())
        roots = root_requests(trace)
        subagent_requests += count_requests(trace["requests"]) - len(roots)
        if not roots:
            continue
        turns.append(len(roots))
        first_in.append(roots[0]["in"])
        outs += [r["out"] for r in roots]
        for before, turn in zip(roots, roots[1:]):
            new_in.append(max(1, turn["in"] - before["in"] - before["out"]))
            ended = before["t"] + max(before.get("api_time") or 0.0, 0.0)
            pauses.append(min(max(turn["t"] - ended, 0.0), max_gap_s))
    if not turns:
        raise SystemExit(f"{corpus}: no traces with requests; vllm-bench's workload cannot be derived from it")

    def mean(xs: list) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    return {
        "random_input_len": max(1, round(mean(first_in))),
        "per_turn_input_len": max(1, round(mean(new_in))),
        "random_output_len": max(1, round(mean(outs))),
        "multi_turn_num_turns": max(1, round(mean(turns))),
        "multi_turn_delay_ms": round(mean(pauses) * 1000),
        "root_requests": sum(turns),
        "subagent_requests_left_out": subagent_requests,
    }


def count_requests(requests: list[dict]) -> int:
    return sum(count_requests(r.get("requests") or []) if r.get("type") == "subagent" else 1 for r in requests)


def vllm_bench_conversations(a: argparse.Namespace, shape: dict, conc: int) -> int:
    """Conversations to run: enough for every lane to stay busy for 1.25x the benchmark duration at the
    simulator's fixed timing (vllm-bench runs a fixed count and writes its result only at the end)."""
    turn_s = (a.ttft_ms + shape["random_output_len"] * a.itl_ms + shape["multi_turn_delay_ms"]) / 1000
    conversation_s = max(turn_s * shape["multi_turn_num_turns"], 0.001)
    return conc * max(1, math.ceil(1.25 * a.duration / conversation_s))


def vllm_bench_cmd(a: argparse.Namespace, url: str, conc: int, out: pathlib.Path) -> list[str]:
    shape = a.vllm_bench_shape
    return [
        a.vllm_bench, "--backend", "openai-chat", "--base-url", url, "--endpoint", "/v1/chat/completions",
        "--model", compare.MODEL, "--tokenizer", str(a.tokenizer_dir), "--dataset-name", "random",
        "--multi-turn", "--multi-turn-num-turns", str(shape["multi_turn_num_turns"]),
        "--multi-turn-delay-ms", str(shape["multi_turn_delay_ms"]),
        "--multi-turn-concurrency", str(conc), "--max-concurrency", str(conc),
        "--num-prompts", str(vllm_bench_conversations(a, shape, conc)),
        "--random-input-len", str(shape["random_input_len"]),
        "--per-turn-input-len", str(shape["per_turn_input_len"]),
        "--random-output-len", str(shape["random_output_len"]),
        "--seed", str(a.seed), "--ready-check-timeout-sec", "0", "--disable-tqdm",
        "--percentile-metrics", "ttft,itl,e2el", "--metric-percentiles", "50,99",
        "--save-result", "--result-dir", str(out), "--result-filename", RESULT["vllm-bench"],
    ]  # fmt: skip


# ---------------------------------------------------------------------------------------------------
# the peers' command lines, environments and figures


def workload(a: argparse.Namespace, peer: str) -> dict:
    """What the peer runs, for the JSON: its flags' source and what differs from agentx's replay. For
    vllm-bench it derives the multi-turn shape from the replay corpus here (a.vllm_bench_shape)."""
    if peer == "vllm-bench":
        a.vllm_bench_shape = vllm_bench_shape(a.replay_corpus, a.max_gap_s)
        return {
            "mode": "--multi-turn on the random dataset, --multi-turn-concurrency = lanes, streamed chat",
            "shape_from_corpus": a.vllm_bench_shape,
            "differs": "no trace replay: every conversation has the corpus's mean shape (fixed lengths, the "
            "mean turns, a fixed pause between turns); no subagents; no warmup or cache-pressure stage; "
            "a fixed number of conversations sized to last 1.25x the duration; the window is the first "
            "--duration seconds of streaming",
        }
    a.guidellm_corpus = guidellm_corpus(a.replay_corpus, a.out / "guidellm-corpus.jsonl")
    a.guidellm_tokenizer = a.out / "tokenizer-guidellm"
    compare.make_tokenizer(a.guidellm_tokenizer, guidellm_words(a.guidellm))
    return {
        "mode": "--profile kind=replay on the same weka traces (--data kind=weka, subagents included), "
        "sessions packed so that as many are in flight as there are lanes (min_concurrent_sessions)",
        "corpus": str(a.guidellm_corpus),
        "differs": "sessions are placed on a timeline: trace k is moved to start after trace k-1 "
        f"(its timestamps plus k x {SESSION_STRIDE_S:.0f} s, then max_session_wait closes the gap), and "
        "min_concurrent_sessions starts a session when the one N before it is due to end by its "
        "recorded timestamps, not when it actually ends; turns keep the recorded idle gap after "
        "each request's recorded api_time (schedule_turn=idle_gap); enough copies of the corpus for "
        "every lane; no warmup or cache-pressure stage; the window is the first --duration seconds "
        "of streaming; synthetic prompts from the hash ids with its own text and tools",
    }


# Trace k's timestamps move by k times this, past any trace's span, so that sessions follow one another
# on guidellm's timeline (each weka trace starts at 0, and sessions that overlap are left in parallel).
SESSION_STRIDE_S = 1e6


def guidellm_corpus(corpus: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """The replay corpus as one weka JSONL for guidellm, trace k moved by k x SESSION_STRIDE_S (every
    `t`, subagents' included); nothing else changes."""

    def shift(requests: list[dict], by: float) -> None:
        for r in requests:
            if isinstance(r.get("t"), (int, float)):
                r["t"] = r["t"] + by
            if r.get("type") == "subagent":
                shift(r.get("requests") or [], by)

    with open(dest, "w") as out:
        for k, path in enumerate(sorted(corpus.glob("*.json"))):
            trace = json.loads(path.read_text())
            shift(trace["requests"], k * SESSION_STRIDE_S)
            out.write(json.dumps(trace, separators=(",", ":")) + "\n")
    return dest


def guidellm_words(guidellm: str) -> list[str]:
    """The words guidellm writes its synthetic prompts with (Faker's English lorem list), as written:
    lower case, capitalised, and each of those with a full stop. guidellm builds each hash id's block
    from Faker text through the tokenizer and needs the blocks to differ, which a vocabulary that maps
    its words to one unknown token defeats; each word still counts as one token, as the simulator
    counts."""
    python = pathlib.Path(guidellm).parent / "python"
    listed = subprocess.run(
        [str(python), "-c", "from faker.providers.lorem.en_US import Provider; print('\\n'.join(Provider.word_list))"],
        capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    return [form for word in listed for base in (word, word.capitalize()) for form in (base, base + ".")]


def guidellm_cmd(a: argparse.Namespace, conc: int, url: str, out: pathlib.Path) -> list[str]:
    traces = sum(1 for _ in open(a.guidellm_corpus))
    data = {
        "kind": "weka", "source": {"kind": "json_file", "path": str(a.guidellm_corpus)},
        "duration_column": "api_time", "max_wait": a.max_gap_s, "max_session_wait": 0.001,
        "min_concurrent_sessions": conc, "copies": max(1, math.ceil(2 * conc / max(traces, 1))),
    }  # fmt: skip
    # A turn the trace ended with tool_use expects a tool call; the simulator streams text, and the
    # trace goes on (as agentx's replay does) instead of being cut there.
    backend = {"kind": "openai_http", "target": url, "model": compare.MODEL, "stream": True,
               "tool_call_missing_behavior": "ignore_continue"}  # fmt: skip
    return [
        a.guidellm, "run", "--backend", json.dumps(backend), "--profile", json.dumps({"kind": "replay"}),
        "--data", json.dumps(data), "--tokenizer", json.dumps({"kind": "huggingface_auto", "model": str(a.guidellm_tokenizer)}),
        "--constraint", json.dumps({"kind": "max_duration", "seconds": a.duration}),
        "--output", json.dumps({"kind": "json", "path": str(out / RESULT["guidellm"])}),
        "--seed", json.dumps({"kind": "static", "value": a.seed}), "--disable-console-interactive",
        # Keep no prompts or outputs in its result (its timings and token counts are always kept).
        "--metrics", json.dumps({"kind": "generative", "sample_size": 0}),
    ]  # fmt: skip


def command(a: argparse.Namespace, peer: str, corpus: pathlib.Path, url: str, conc: int, out: pathlib.Path) -> list[str]:
    if peer == "vllm-bench":
        return vllm_bench_cmd(a, url, conc, out)
    return guidellm_cmd(a, conc, url, out)


def env(a: argparse.Namespace, peer: str, cache: pathlib.Path) -> dict[str, str]:
    """The inherited environment with telemetry off and caches in the run's directory."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("AIPERF_", "AGENTX_", "GUIDELLM_"))}
    environ.update(HF_HUB_DISABLE_TELEMETRY="1", DO_NOT_TRACK="1", HF_HOME=str(cache / "hf"))
    return environ


def figures(peer: str, out: pathlib.Path, ttft_ms: float) -> dict:
    """The peer's own TTFT percentiles (less the simulator's fixed TTFT), requests and failures, from
    its result file; `export_found` False when it wrote none."""
    path = out / RESULT[peer]
    try:
        result = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {"export_found": False}
    row = vllm_bench_figures(result) if peer == "vllm-bench" else guidellm_figures(result)
    for q in ("p50", "p99"):
        v = row.get(f"ttft_{q}_ms")
        row[f"ttft_overhead_{q}_ms"] = round(v - ttft_ms, 3) if isinstance(v, (int, float)) else None
    row["export_found"] = True
    return row


def vllm_bench_figures(result: dict) -> dict:
    return {
        "ttft_p50_ms": result.get("p50_ttft_ms"),
        "ttft_p99_ms": result.get("p99_ttft_ms"),
        "requests": result.get("completed"),
        "errors": result.get("failed"),
        "conversations_completed": result.get("conversations_completed"),
        # Each turn leaves when the previous reply ends plus the fixed pause: there is no due time to
        # measure a lag against.
        "send_lag_note": "not measurable: vllm-bench keeps no due time per request",
    }


def guidellm_figures(result: dict) -> dict:
    """From guidellm's benchmarks.json: its TTFT percentiles over the successful requests, the request
    totals, and its send lag: `request_dispatch_delay`, each request's start less its targeted start
    (seconds, over every request)."""
    benchmark = (result.get("benchmarks") or [{}])[0]
    metrics = benchmark.get("metrics") or {}
    successful = (metrics.get("time_to_first_token_ms") or {}).get("successful") or {}
    ttft = (successful.get("percentiles") or {}) if successful.get("count") else {}
    totals = metrics.get("request_totals") or {}
    dispatch = (metrics.get("request_dispatch_delay") or {}).get("total") or {}
    lag_p99_s = (dispatch.get("percentiles") or {}).get("p99") if dispatch.get("count") else None
    return {
        "ttft_p50_ms": ttft.get("p50"),
        "ttft_p99_ms": ttft.get("p99"),
        "requests": totals.get("successful"),
        "errors": totals.get("errored"),
        "send_lag_p99_ms": round(lag_p99_s * 1000, 3) if isinstance(lag_p99_s, (int, float)) else None,
    }
