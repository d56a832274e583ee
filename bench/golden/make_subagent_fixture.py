#!/usr/bin/env python3
"""Writes fixtures/traces-subagents-8.jsonl: a small with-subagents corpus in the weka trace format.

Eight root traces, each built to exercise one part of aiperf 0.13's session-tree loader
(docs/specs/session-trees.md, docs/agentx-v1-reference.md):

    sa-01-single   one cross-model subagent spawned by root turn 2, joined by root turn 3
    sa-02-fanout   parallel fan-out: two overlapping subagents spawned by root turn 1; both end
                   before root turn 2, so they share one SPAWN branch and one join
    sa-03-tiered   three subagents from root turn 1: A joins turn 2, B joins turn 3, C
                   (status async_launched, no duration_ms) outlives the root and runs in the
                   background
    sa-04-flat     no subagent entries; a flat worker (::fa:000) forked from a main request and a
                   one-shot cross-model sidecar (::aux:001), both split off by hash-chain detection
    sa-05-wg       three flat workers forked from the same main request and overlapping in time:
                   a worker group (::wg:000_000 .. ::wg:000_002) sharing one flatspawn branch
    sa-06-seam     a compaction on the main chain (spliced back as a seam) and a subagent whose
                   inner requests split into its main chain, an inner sidecar (:aux:000) and an
                   inner forked agent (:fa:001)
    sa-07-edge     a subagent listed before any root request (dropped), a title-generation
                   preamble, an inner request 0.4 us before its marker (clamped), out=0, a
                   negative api_time, a missing api_time, think_time values
    sa-08-spec     the worked example of docs/specs/session-trees.md#worked-example: root ts
                   [0, 10, 50] s, a subagent
                   spawned by turn 0 at 5 s with ts [5, 20, 40] s, joined by root turn 2

Nested (subagent) request timestamps are absolute (root-trace clock), as in current captures;
aiperf's `auto` basis therefore resolves to `absolute`. Hash ids are small per-trace integers
allocated from a per-trace counter (hash_id_scope "local", block size 64); every request's `in` lies
in ((len(hash_ids) - 1) * 64, len(hash_ids) * 64].

Deterministic: a fixed-seed random.Random picks output lengths and partial-block tails; the
structure (timestamps, api times, prefixes) is written out below. Run from the repository root:

    python3 bench/golden/make_subagent_fixture.py            # writes the fixture
    python3 bench/golden/make_subagent_fixture.py --check    # exits 1 if the file differs

Needs only the Python standard library.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

SEED = 20261023
OUT = Path(__file__).resolve().parents[2] / "fixtures" / "traces-subagents-8.jsonl"
BS = 64
OPUS = "claude-opus-4-5-20251101"
SONNET = "claude-sonnet-4-5-20250929"
HAIKU = "claude-haiku-4-5-20251001"


class Trace:
    """Builds one weka trace; hash ids are allocated per trace in first-seen order."""

    def __init__(self, rng: random.Random, tid: str, *, tool: int = 1024, system: int = 256) -> None:
        self.rng = rng
        self.tid = tid
        self.tool = tool
        self.system = system
        self.next_id = 1
        self.requests: list[dict] = []
        self.models: list[str] = []

    def fresh(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids

    def req(self, t: float, hashes: list[int], *, api: float | None, model: str = OPUS, out: int | None = None,
            kind: str = "n", think: float | None = 0.0, input_types: list[str] | None = None,
            stop: str = "tool_use") -> dict:
        if model not in self.models:
            self.models.append(model)
        n = len(hashes)
        isl = (n - 1) * BS + self.rng.randint(1, BS) if n else self.rng.randint(200, 900)
        r: dict = {
            "t": round(t, 7),
            "type": kind,
            "model": model,
            "in": isl,
            "out": self.rng.randint(20, 900) if out is None else out,
            "hash_ids": list(hashes),
            "input_types": input_types if input_types is not None else ["tool_result"],
            "output_types": ["text", "tool_use"] if stop == "tool_use" else ["text"],
            "stop": stop,
            "api_time": api,
            "think_time": think,
        }
        if kind == "s":
            r["ttft"] = round(min(api or 0.5, 0.5) * 0.4, 3)
        return r

    def add(self, r: dict) -> dict:
        self.requests.append(r)
        return r

    def subagent(self, t: float, agent_id: str, sa_type: str, inner: list[dict], *, duration_ms: int | None,
                 tool: int = 512, system: int = 192, status: str = "completed") -> dict:
        models = []
        for r in inner:
            if r["model"] not in models:
                models.append(r["model"])
        entry = {
            "t": round(t, 7),
            "type": "subagent",
            "agent_id": agent_id,
            "subagent_type": sa_type,
            "duration_ms": duration_ms,
            "total_tokens": None if duration_ms is None else sum(r["in"] + r["out"] for r in inner),
            "tool_use_count": None if duration_ms is None else sum(r["stop"] == "tool_use" for r in inner),
            "status": status,
            "requests": inner,
            "models": models,
            "tool_tokens": tool,
            "system_tokens": system,
        }
        self.requests.append(entry)
        return entry

    def doc(self) -> dict:
        parent_in = sum(r["in"] for r in self.requests if r["type"] != "subagent")
        parent_out = sum(r["out"] for r in self.requests if r["type"] != "subagent")
        sub = [ir for r in self.requests if r["type"] == "subagent" for ir in r["requests"]]
        sub_in = sum(r["in"] for r in sub)
        sub_out = sum(r["out"] for r in sub)
        return {
            "id": self.tid,
            "models": self.models,
            "block_size": BS,
            "hash_id_scope": "local",
            "tool_tokens": self.tool,
            "system_tokens": self.system,
            "requests": self.requests,
            "totals": {
                "parent_tokens": {"input": parent_in, "output": parent_out},
                "subagent_tokens": {"input": sub_in, "output": sub_out},
                "combined_tokens": {"input": parent_in + sub_in, "output": parent_out + sub_out},
                "subagent_count": sum(r["type"] == "subagent" for r in self.requests),
            },
        }


def sys_blocks(tool: int, system: int) -> int:
    return -(-(tool + system) // BS)


def main_chain(tr: Trace, times: list[float], grow: list[int], apis: list[float], first: int = 10,
               model: str = OPUS) -> list[dict]:
    """A growing main chain: turn 0 = declared system prefix + `first` blocks, then `grow[k]` new blocks."""
    ctx = tr.fresh(sys_blocks(tr.tool, tr.system) + first)
    out = []
    for k, (t, api) in enumerate(zip(times, apis)):
        if k:
            ctx = ctx + tr.fresh(grow[k - 1])
        out.append(tr.req(t, ctx, api=api, model=model, input_types=["text"] if k == 0 else None,
                          kind="s" if k % 2 else "n"))
    return out


def sa_chain(tr: Trace, times: list[float], apis: list[float], *, model: str, tool: int = 512, system: int = 192,
             prefix: list[int] | None = None, first: int = 6, grow: int = 4) -> list[dict]:
    """A subagent's growing chain; starts with `prefix` (shared with the parent) or its own system blocks."""
    ctx = list(prefix) if prefix is not None else tr.fresh(sys_blocks(tool, system))
    ctx = ctx + tr.fresh(first)
    out = []
    for k, (t, api) in enumerate(zip(times, apis)):
        if k:
            ctx = ctx + tr.fresh(grow)
        out.append(tr.req(t, ctx, api=api, model=model, input_types=["text"] if k == 0 else None))
    return out


def build(rng: random.Random) -> list[dict]:
    traces = []

    # 1. One cross-model subagent: spawned by root turn 2, joined by root turn 3 (30.0 >= 14.5 + 12.0).
    tr = Trace(rng, "sa-01-single")
    m = main_chain(tr, [0.0, 5.0, 12.0, 30.0, 36.0], [6, 5, 7, 4], [1.8, 2.2, 1.5, 2.4, 1.9])
    for r in m[:3]:
        tr.add(r)
    inner = sa_chain(tr, [14.5, 18.0, 22.4], [2.1, 2.6, 3.0], model=HAIKU)
    tr.subagent(14.5, "agent_001", "Explore", inner, duration_ms=12000)
    for r in m[3:]:
        tr.add(r)
    traces.append(tr.doc())

    # 2. Parallel fan-out: two subagents spawned by root turn 1, overlapping, both ending before root
    #    turn 2 (t=26): one shared SPAWN branch "<id>:spawn:agent_a" with two children, one join.
    #    agent_b starts with the parent's declared prefix blocks (same model as the root).
    tr = Trace(rng, "sa-02-fanout")
    m = main_chain(tr, [0.0, 4.0, 26.0, 31.0], [5, 6, 3], [1.2, 2.0, 1.7, 1.1])
    for r in m[:2]:
        tr.add(r)
    a = sa_chain(tr, [9.0, 13.5, 19.0], [2.0, 2.5, 3.0], model=HAIKU)
    b = sa_chain(tr, [9.05, 12.0, 17.2, 21.0], [1.5, 2.5, 1.9, 2.2], model=OPUS,
                 prefix=m[0]["hash_ids"][: sys_blocks(tr.tool, tr.system)], first=4, grow=3)
    tr.subagent(9.0, "agent_a", "Explore", a, duration_ms=14000)
    tr.subagent(9.05, "agent_b", "general-purpose", b, duration_ms=15500, tool=tr.tool, system=tr.system)
    for r in m[2:]:
        tr.add(r)
    traces.append(tr.doc())

    # 3. Tiered joins from root turn 1: A ends 12.0 -> joins turn 2 (t=13); B ends 22.1 -> joins turn 3
    #    (t=25); C is async_launched (no duration_ms: end = max(inner t + api) = 64.0) and outlives the
    #    root's last turn (t=35): a background branch.
    tr = Trace(rng, "sa-03-tiered")
    m = main_chain(tr, [0.0, 3.0, 13.0, 25.0, 35.0], [4, 6, 5, 6], [1.0, 1.5, 2.0, 2.5, 1.2])
    for r in m[:2]:
        tr.add(r)
    sa_a = sa_chain(tr, [7.0, 10.0], [1.5, 1.8], model=HAIKU)
    sa_b = sa_chain(tr, [7.1, 11.0, 16.0, 20.0], [2.0, 2.2, 2.4, 1.9], model=HAIKU)
    sa_c = sa_chain(tr, [7.2, 30.0, 60.0], [3.0, 5.0, 4.0], model=SONNET)
    tr.subagent(7.0, "agent_a", "Explore", sa_a, duration_ms=5000)
    tr.subagent(7.1, "agent_b", "Explore", sa_b, duration_ms=15000)
    tr.subagent(7.2, "agent_c", "general-purpose", sa_c, duration_ms=None, status="async_launched")
    for r in m[2:]:
        tr.add(r)
    traces.append(tr.doc())

    # 4. Flat chains only. Main m0..m4 grows; w0 (t=12.5) shares the first 30 blocks of m2 (40 blocks)
    #    and diverges -> forks a worker (3 requests: ::fa:000); x0 (t=20) is a one-shot on another
    #    model with a fresh 10-block context -> sidecar (::aux:001).
    tr = Trace(rng, "sa-04-flat")
    sysb = sys_blocks(tr.tool, tr.system)
    c0 = tr.fresh(sysb + 8)                   # 28 blocks
    c1 = c0 + tr.fresh(6)                     # 34
    c2 = c1 + tr.fresh(6)                     # 40
    w0 = c2[:30] + tr.fresh(8)                # 38: proper prefix of c2 shared, then its own
    c3 = c2 + tr.fresh(5)                     # 45
    w1 = w0 + tr.fresh(6)
    x0 = tr.fresh(10)
    w2 = w1 + tr.fresh(5)
    c4 = c3 + tr.fresh(7)
    tr.add(tr.req(0.0, c0, api=1.5, input_types=["text"]))
    tr.add(tr.req(5.0, c1, api=2.0))
    tr.add(tr.req(11.0, c2, api=2.0))
    tr.add(tr.req(12.5, w0, api=2.5))
    tr.add(tr.req(15.0, c3, api=1.8, kind="s"))
    tr.add(tr.req(17.0, w1, api=3.0))
    tr.add(tr.req(20.0, x0, api=1.5, model=HAIKU, input_types=["text"], stop="end_turn"))
    tr.add(tr.req(24.0, w2, api=2.0))
    tr.add(tr.req(28.0, c4, api=2.2))
    traces.append(tr.doc())

    # 5. Worker group: three workers fork from m1 (40 blocks) at depth 30, each with 2 requests,
    #    overlapping in [6.5, 14): ::wg:000_000, ::wg:000_001, ::wg:000_002 in one flatspawn branch
    #    spawned by root turn 1 and joined by root turn 3 (t=20).
    tr = Trace(rng, "sa-05-wg")
    sysb = sys_blocks(tr.tool, tr.system)
    c0 = tr.fresh(sysb + 12)                  # 32
    c1 = c0 + tr.fresh(8)                     # 40
    ws = [c1[:30] + tr.fresh(5) for _ in range(3)]
    c2 = c1 + tr.fresh(6)
    ws2 = [w + tr.fresh(4) for w in ws]
    c3 = c2 + tr.fresh(5)
    tr.add(tr.req(0.0, c0, api=1.5, input_types=["text"]))
    tr.add(tr.req(4.0, c1, api=2.0))
    for i, w in enumerate(ws):
        tr.add(tr.req(6.5 + 0.1 * i, w, api=2.0))
    tr.add(tr.req(9.0, c2, api=2.0, kind="s"))
    for i, w in enumerate(ws2):
        tr.add(tr.req(10.0 + 0.5 * i, w, api=3.0))
    tr.add(tr.req(20.0, c3, api=2.0))
    traces.append(tr.doc())

    # 6. A compaction seam on the main chain and a subagent with nested chains.
    #    m2 (t=12) keeps only the first 25 blocks of m1 (45 blocks): phase 1 forks it, phase 2 splices
    #    it back (m1 is never extended later): one main chain, seams_merged = 1.
    #    Subagent agent_n (spawned by root turn 3, joined by turn 4): s0,s1,s2 grow (its main chain);
    #    o0 (t=25, another model, fresh 8 blocks) -> :aux:000; f0 (t=26) shares 20 of s1's blocks and
    #    f1 extends it -> :fa:001.
    tr = Trace(rng, "sa-06-seam")
    sysb = sys_blocks(tr.tool, tr.system)
    c0 = tr.fresh(sysb + 15)                  # 35
    c1 = c0 + tr.fresh(10)                    # 45
    c2 = c1[:25] + tr.fresh(8)                # 33: compaction (shrink)
    c3 = c2 + tr.fresh(6)
    c4 = c3 + tr.fresh(5)
    tr.add(tr.req(0.0, c0, api=2.0, input_types=["text"]))
    tr.add(tr.req(6.0, c1, api=2.5))
    tr.add(tr.req(12.0, c2, api=3.0, input_types=["text"], stop="end_turn"))
    tr.add(tr.req(18.0, c3, api=1.5, kind="s"))
    s_sys = tr.fresh(sys_blocks(512, 192))    # 11
    s0 = s_sys + tr.fresh(6)                  # 17
    s1 = s0 + tr.fresh(8)                     # 25
    o0 = tr.fresh(8)
    f0 = s1[:20] + tr.fresh(7)
    f1 = f0 + tr.fresh(4)
    s2 = s1 + tr.fresh(5)
    inner = [
        tr.req(20.0, s0, api=2.0, model=SONNET, input_types=["text"]),
        tr.req(24.0, s1, api=2.2, model=SONNET),
        tr.req(25.0, o0, api=1.0, model=HAIKU, input_types=["text"], stop="end_turn"),
        tr.req(26.0, f0, api=1.8, model=SONNET),
        tr.req(29.0, f1, api=2.0, model=SONNET),
        tr.req(30.0, s2, api=2.5, model=SONNET),
    ]
    tr.subagent(20.0, "agent_n", "general-purpose", inner, duration_ms=14000)
    tr.add(tr.req(40.0, c4, api=2.0))
    traces.append(tr.doc())

    # 7. Edge cases. The subagent listed first has no preceding root request: dropped (its agent_id
    #    appears once more later, which is legal because the first one is never emitted). p0 is a
    #    title-generation preamble (disjoint hashes, out <= 64). agent_e's first inner request is
    #    0.4 us before its marker (clamped to the marker under the absolute basis). Root turns carry
    #    out=0, api_time < 0 and api_time = null. Declares tool/system tokens 0/0 like the latest
    #    captures: the preamble becomes root turn 0, and a declared prefix longer than its 6 blocks
    #    would make aiperf's turn-0 reconstruction raise.
    tr = Trace(rng, "sa-07-edge", tool=0, system=0)
    sysb = 4
    orphan = sa_chain(tr, [0.5, 2.0], [1.0, 1.0], model=HAIKU)
    tr.subagent(0.5, "agent_e", "Explore", orphan, duration_ms=3000)
    tr.add(tr.req(0.8, tr.fresh(6), api=0.6, model=HAIKU, out=24, input_types=["text"], stop="end_turn"))
    c0 = tr.fresh(sysb + 10)
    c1 = c0 + tr.fresh(5)
    c2 = c1 + tr.fresh(4)
    c3 = c2 + tr.fresh(6)
    c4 = c3 + tr.fresh(3)
    tr.add(tr.req(1.0, c0, api=2.0, input_types=["text"], think=0.0))
    tr.add(tr.req(5.0, c1, api=-0.5, out=0, think=3.5))
    tr.add(tr.req(9.0, c2, api=None, think=4.0))
    inner = sa_chain(tr, [10.0 - 4e-7, 13.0, 15.5], [1.5, 1.2, 1.0], model=HAIKU)
    tr.subagent(10.0, "agent_e", "Explore", inner, duration_ms=7000)
    tr.add(tr.req(18.0, c3, api=1.5, think=2.0, kind="s"))
    tr.add(tr.req(22.0, c4, api=1.0, out=0, think=None, stop="end_turn"))
    traces.append(tr.doc())

    # 8. The worked example of docs/specs/session-trees.md#worked-example: root ts [0, 10, 50] s;
    #    subagent spawned by root turn 0 with its branch starting at 5 s, ts [5, 20, 40] s; ends at
    #    47 s -> joins root turn 2.
    tr = Trace(rng, "sa-08-spec")
    m = main_chain(tr, [0.0, 10.0, 50.0], [5, 5], [1.0, 1.0, 1.0])
    tr.add(m[0])
    inner = sa_chain(tr, [5.0, 20.0, 40.0], [1.0, 1.0, 1.0], model=HAIKU)
    tr.subagent(5.0, "agent_x", "Explore", inner, duration_ms=42000)
    for r in m[1:]:
        tr.add(r)
    traces.append(tr.doc())
    return traces


def render() -> str:
    rng = random.Random(SEED)
    return "".join(json.dumps(t, separators=(",", ":")) + "\n" for t in build(rng))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed fixture differs")
    ap.add_argument("-o", "--out", type=Path, default=OUT)
    a = ap.parse_args()
    text = render()
    if a.check:
        if not a.out.exists() or a.out.read_text(encoding="utf-8") != text:
            sys.exit(f"{a.out} differs from the generator's output; rerun {Path(__file__).name}")
        print(f"{a.out}: up to date")
        return
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(text, encoding="utf-8")
    print(f"wrote {a.out} ({a.out.stat().st_size} bytes, {text.count(chr(10))} traces)")


if __name__ == "__main__":
    main()
