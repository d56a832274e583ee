#!/usr/bin/env python3
"""Seeded weka corpora for the differential (bench/differential.py run --generated): one corpus per
block size, every trace of it declaring that size, each trace built to exercise one thing the
harness's reconstruction and agentx's must agree on:

    partial     a growing main chain whose prompts end in partial blocks; tool and system tokens
                that are not block multiples; one empty output (`out` 0)
    compact     a compaction: the context falls back to the tools+system prefix and grows again
    recorded    over-recorded hash ids (more than ceil(in / block size)) and under-recorded ones
                (fewer than floor(in / block size), down to the prefix's blocks)
    sa-ends     a subagent spawned by the first root turn and one spawned by the last
    sa-adjacent two subagents spawned together, and another by the next root turn (adjacent turns)
    sa-nested   a subagent whose inner requests fork a worker chain off its own context: a stream
                two deep (`::sa:<id>:fa:..` or `:aux:..`)
    idle        think gaps over the trace idle cap (300 s) and empty outputs
    bare        no tools+system prefix (0/0), an empty first output

Every trace is accepted by agentx-harness 1.0.12 both at its declared block size and laid out in
64-token blocks (its CLI's layout): the first request of every stream records enough hash ids for
its tools+system prefix at either size. Nested request times are absolute (root clock).

    python3 bench/differential_corpus.py --out DIR [--seed 7] [--block-sizes 16,32,64,128,512]
        [--traces 8]

writes DIR/bs<N>.jsonl per block size and prints one line per corpus. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import pathlib
import random
import sys

MAIN = "claude-opus-4-5-20251101"
SIDE = "claude-haiku-4-5-20251001"
HARNESS_CLI_BLOCK_SIZE = 64
SHAPES = ["partial", "compact", "recorded", "sa-ends", "sa-adjacent", "sa-nested", "idle", "bare"]


class Trace:
    """One weka trace in `bs`-token blocks; hash ids are allocated per trace."""

    def __init__(self, rng: random.Random, tid: str, bs: int, tool: int, system: int) -> None:
        self.rng, self.tid, self.bs = rng, tid, bs
        self.tool, self.system = tool, system
        self.next_id = 1
        self.requests: list[dict] = []
        self.models: list[str] = []

    def fresh(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids

    def request(self, t: float, isl: int, hashes: list[int], out: int, *, model: str = MAIN, kind: str = "n",
                api: float = 1.5, think: float = 0.0, first: bool = False) -> dict:
        if model not in self.models:
            self.models.append(model)
        r = {
            "t": round(t, 3), "type": kind, "model": model, "in": isl, "out": out, "hash_ids": hashes,
            "input_types": ["text"] if first else ["tool_result"], "output_types": ["text", "tool_use"],
            "stop": "tool_use" if out else "end_turn", "api_time": api, "think_time": think,
        }  # fmt: skip
        if kind == "s":
            r["ttft"] = 0.2
        return r

    def json(self) -> dict:
        return {
            "id": self.tid, "models": self.models, "block_size": self.bs, "hash_id_scope": "local",
            "tool_tokens": self.tool, "system_tokens": self.system, "requests": self.requests,
        }  # fmt: skip


class Chain:
    """A growing context: its hash ids (ceil(in / bs) when fully recorded) and its length."""

    def __init__(self, tr: Trace, prefix: list[int], isl: int) -> None:
        self.tr, self.isl = tr, isl
        self.ids = prefix + tr.fresh(max(0, math.ceil(isl / tr.bs) - len(prefix)))

    def grow(self, added: int) -> None:
        """The previous prompt, its answer and new input: its full blocks are kept, the partial
        last block changes (a fresh id), new blocks are fresh."""
        bs = self.tr.bs
        keep = self.isl // bs
        self.isl += added
        self.ids = self.ids[:keep] + self.tr.fresh(math.ceil(self.isl / bs) - keep)

    def compact(self, prefix_blocks: int, isl: int) -> None:
        self.isl = isl
        self.ids = self.ids[:prefix_blocks] + self.tr.fresh(max(0, math.ceil(isl / self.tr.bs) - prefix_blocks))


def prefix_tokens(rng: random.Random, bs: int, first_isl: int, bare: bool) -> tuple[int, int]:
    """Tool and system tokens that are not multiples of `bs` (nor of 64), small enough that the
    first request's hash ids hold them at `bs` and at 64."""
    if bare:
        return 0, 0
    budget = min(first_isl // 2, HARNESS_CLI_BLOCK_SIZE * (math.ceil(first_isl / bs) - 1), 3000)
    tool = rng.randint(budget // 4, budget // 2)
    system = rng.randint(budget // 8, budget // 3)
    for m in (bs, HARNESS_CLI_BLOCK_SIZE):
        if (tool + system) % m == 0:
            system += 1
    return tool, system


def subagent(tr: Trace, rng: random.Random, agent: str, t: float, turns: int, *, nested: bool = False) -> dict:
    """A subagent entry of `turns` inner requests from `t` (absolute times), its own tools+system
    prefix; with `nested`, a worker chain forked off its context after its second request."""
    bs = tr.bs
    first_isl = rng.randint(6, 14) * 100 + rng.randint(1, 60)
    tool, system = prefix_tokens(rng, bs, first_isl, False)
    chain = Chain(tr, [], first_isl)
    reqs, clock = [], t
    fork = None
    for k in range(turns):
        out = rng.randint(40, 400)
        reqs.append(tr.request(clock, chain.isl, list(chain.ids), out, model=SIDE, api=0.8, first=k == 0))
        if nested and k == 1:
            fork = Chain(tr, [], 0)
            fork.isl, fork.ids = chain.isl, list(chain.ids)
        chain.grow(out + rng.randint(50, 600))
        clock += rng.uniform(1.5, 3.0)
    if fork is not None:
        wclock = reqs[1]["t"] + 0.7
        for _ in range(3):
            fork.grow(rng.randint(200, 700))
            out = rng.randint(30, 200)
            reqs.append(tr.request(wclock, fork.isl, list(fork.ids), out, model=SIDE, api=0.6))
            wclock += rng.uniform(1.0, 2.0)
        reqs.sort(key=lambda r: r["t"])
    end = max(r["t"] + r["api_time"] for r in reqs)
    return {
        "t": round(t, 3), "type": "subagent", "agent_id": agent, "subagent_type": "Explore",
        "duration_ms": int(round((end - t) * 1000)), "total_tokens": sum(r["in"] + r["out"] for r in reqs),
        "tool_use_count": len(reqs), "status": "completed", "requests": reqs, "models": [SIDE],
        "tool_tokens": tool, "system_tokens": system,
    }  # fmt: skip


def trace(rng: random.Random, bs: int, n: int, shape: str) -> dict:
    first_isl = rng.randint(20, 60) * 100 + rng.randint(1, bs - 1 if bs > 1 else 1)
    tool, system = prefix_tokens(rng, bs, first_isl, shape == "bare")
    tr = Trace(rng, f"bs{bs}-{n:02d}-{shape}", bs, tool, system)
    chain = Chain(tr, [], first_isl)
    prefix_blocks = math.ceil((tool + system) / bs)
    turns = {"compact": 8, "recorded": 7, "idle": 6}.get(shape, 6)
    clock = 0.0
    for k in range(turns):
        out = rng.randint(60, 700)
        if (shape == "partial" and k == 3) or (shape == "idle" and k in (1, 4)) or (shape == "bare" and k == 0):
            out = 0
        hashes = list(chain.ids)
        if shape == "recorded" and k in (2, 5):
            hashes += tr.fresh(2)  # over-recorded
        if shape == "recorded" and k in (3, 6):
            hashes = hashes[: max(prefix_blocks, chain.isl // bs - 2)]  # under-recorded
        think = 0.0
        gap = rng.uniform(2.0, 6.0)
        if shape == "idle" and k == 3:
            gap = think = 400.0 + rng.uniform(0, 50)  # over the 300 s trace idle cap
        kind = "s" if k % 3 == 1 else "n"
        tr.requests.append(tr.request(clock, chain.isl, hashes, out, kind=kind, think=round(think, 3), first=k == 0))
        api = tr.requests[-1]["api_time"]
        spawn = clock + api + 0.3
        if shape == "sa-ends" and k in (0, turns - 1):
            tr.requests.append(subagent(tr, rng, f"agent_{k:03d}", spawn, 3))
            gap = max(gap, 12.0)
        if shape == "sa-adjacent" and k in (1, 2):
            tr.requests.append(subagent(tr, rng, f"agent_{k}a", spawn, 2))
            if k == 1:
                tr.requests.append(subagent(tr, rng, f"agent_{k}b", spawn + 0.2, 3))
            gap = max(gap, 10.0)
        if shape == "sa-nested" and k == 1:
            tr.requests.append(subagent(tr, rng, "agent_nested", spawn, 4, nested=True))
            gap = max(gap, 16.0)
        clock += api + gap
        if shape == "compact" and k == 4:
            chain.compact(prefix_blocks, tool + system + rng.randint(300, 900))
        else:
            chain.grow(out + rng.randint(100, 1500))
    return tr.json()


def check(t: dict) -> None:
    """Each stream's first request holds its tools+system prefix at the declared size and at 64, as
    agentx-harness 1.0.12 requires in either layout."""
    streams = [(t["tool_tokens"] + t["system_tokens"], next(r for r in t["requests"] if r["type"] != "subagent"))]
    for e in t["requests"]:
        if e["type"] == "subagent":
            streams.append((e["tool_tokens"] + e["system_tokens"], e["requests"][0]))
    for prefix, first in streams:
        for bs in (t["block_size"], HARNESS_CLI_BLOCK_SIZE):
            if math.ceil(prefix / bs) > len(first["hash_ids"]):
                raise SystemExit(f"{t['id']}: prefix {prefix} needs more than {len(first['hash_ids'])} blocks of {bs}")


def corpus(seed: int, bs: int, traces: int) -> list[dict]:
    rng = random.Random(f"{seed}:{bs}")
    out = [trace(rng, bs, n, SHAPES[n % len(SHAPES)]) for n in range(traces)]
    for t in out:
        check(t)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=pathlib.Path, required=True)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--block-sizes", default="16,32,64,128,512")
    p.add_argument("--traces", type=int, default=len(SHAPES))
    a = p.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for bs in (int(x) for x in a.block_sizes.split(",")):
        traces = corpus(a.seed, bs, a.traces)
        path = a.out / f"bs{bs}.jsonl"
        path.write_text("".join(json.dumps(t, separators=(",", ":")) + "\n" for t in traces))
        reqs = sum(sum(len(e.get("requests", [])) if e["type"] == "subagent" else 1 for e in t["requests"]) for t in traces)
        print(f"{path}: {len(traces)} traces, {reqs} requests, block size {bs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
