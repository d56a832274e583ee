#!/usr/bin/env python3
"""Golden vectors for prompt tiling, computed by agentx-harness 1.0.12's own reconstructor.

Writes

    fixtures/golden/tiling/corpus.jsonl     a seeded corpus of plain weka traces (no subagents)
                                            exercising every tiling shape (see `make_corpus`)
    fixtures/golden/tiling/reference.json   per trace and turn: the roles and token counts of the
                                            messages agentx-harness 1.0.12 sends

The reference's code is run, not re-implemented: `aiperf/dataset/loader/weka_synth_buf.py` of the
harness wheel (and the three files it imports: `weka_prompt_compose.py`, `weka_tool_shape.py`,
`aiperf/common/aiperf_logger.py`) is loaded by file path, with the `aiperf` packages stubbed in
`sys.modules` so that none of aiperf's heavy `__init__` files run. Each trace goes through
`ConversationReconstructor` exactly as the loader's `_reconstruct_serial` (`weka_trace.py`) calls
it: `compute_asst_block_caps` over the trace's requests, `init_turn_0` on turn 0, `advance_turn`
(with `max_asst_blocks=caps[k]`) on turn k, then `turn_delta()`; the prompt of turn k is
`snapshot_messages()` at that point. Token functions are fakes (a block decodes to `block_size`
tokens, a tail to `n` tokens, a token list to that many words): only the counts are recorded.

Standard library only. Usage:

    python3 bench/golden/gen_tiling.py [--harness-src DIR] [--out-dir fixtures/golden/tiling]

`DIR` is the unpacked wheel (the directory holding `aiperf/` and the `.dist-info`); without it the
wheel is fetched with `pip download --no-deps agentx-harness==1.0.12` into a temporary directory
and unpacked there. The output is deterministic: a second run writes the same bytes.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import json
import logging
import math
import platform
import random
import re
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path

HARNESS = "agentx-harness"
HARNESS_VERSION = "1.0.12"
# sha256 of agentx_harness-1.0.12-py3-none-any.whl as PyPI serves it; a download must match.
HARNESS_WHEEL_SHA256 = "3d1f06f941bace12ab26c112bb6b5b1727dc160241c696851604e5269d874835"
CORPUS_SEED = 20261204
MODEL = "claude-opus-4-5-20251101"
ROOT = Path(__file__).resolve().parents[2]
# Loaded in this order; each one's imports are already in sys.modules when it runs.
MODULES = [
    ("aiperf.common.aiperf_logger", "aiperf/common/aiperf_logger.py"),
    ("aiperf.dataset.loader.weka_prompt_compose", "aiperf/dataset/loader/weka_prompt_compose.py"),
    ("aiperf.dataset.loader.weka_tool_shape", "aiperf/dataset/loader/weka_tool_shape.py"),
    ("aiperf.dataset.loader.weka_synth_buf", "aiperf/dataset/loader/weka_synth_buf.py"),
]
STUB_PACKAGES = ["aiperf", "aiperf.common", "aiperf.dataset", "aiperf.dataset.loader"]


# --------------------------------------------------------------------------------------------
# The reference's code


def harness_root(arg: str | None, tmp: Path) -> Path:
    """The unpacked wheel."""
    if arg:
        root = Path(arg).resolve()
        if root.name == "aiperf" and (root / "dataset/loader").is_dir():
            root = root.parent
        return root
    dl = tmp / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
         f"{HARNESS}=={HARNESS_VERSION}", "-d", str(dl)],
        check=True,
    )
    wheels = sorted(dl.glob("*.whl"))
    if len(wheels) != 1:
        sys.exit(f"expected one wheel in {dl}, got {[w.name for w in wheels]}")
    root = tmp / "unpacked"
    with zipfile.ZipFile(wheels[0]) as z:
        z.extractall(root)
    digest = hashlib.sha256(wheels[0].read_bytes()).hexdigest()
    if digest != HARNESS_WHEEL_SHA256:
        sys.exit(f"{wheels[0].name}: sha256 {digest}, expected {HARNESS_WHEEL_SHA256}")
    return root


def check_record(root: Path, sources: dict[str, str]) -> None:
    """The loaded files are the wheel's: their hashes match its RECORD."""
    records = sorted(root.glob("agentx_harness-*.dist-info/RECORD"))
    if not records:
        sys.exit(f"{root}: no agentx_harness .dist-info/RECORD")
    listed = {}
    for line in records[0].read_text(encoding="utf-8").splitlines():
        path, _, rest = line.partition(",")
        digest = rest.partition(",")[0]
        if digest.startswith("sha256="):
            raw = base64.urlsafe_b64decode(digest[7:] + "=" * (-len(digest[7:]) % 4))
            listed[path] = raw.hex()
    for rel, digest in sources.items():
        if listed.get(rel) != digest:
            sys.exit(f"{root / rel} is not the file the wheel's RECORD lists")


def harness_version(root: Path) -> str | None:
    for meta in sorted(root.glob("*.dist-info/METADATA")):
        text = meta.read_text(encoding="utf-8")
        name = re.search(r"^Name: (.+)$", text, re.M)
        version = re.search(r"^Version: (.+)$", text, re.M)
        if name and version and name.group(1).strip().replace("_", "-") == HARNESS:
            return version.group(1).strip()
    return None


def load_reference(root: Path):
    """Loads weka_synth_buf.py and its imports by path; returns the module."""
    for name in STUB_PACKAGES:
        if name in sys.modules:
            sys.exit(f"{name} is already imported; run this script in a clean interpreter")
        pkg = types.ModuleType(name)
        pkg.__path__ = []  # no submodule is found on disk: only the files below are loaded
        sys.modules[name] = pkg
    mod = None
    for name, rel in MODULES:
        spec = importlib.util.spec_from_file_location(name, root / rel)
        if spec is None or spec.loader is None:
            sys.exit(f"cannot load {root / rel}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        parent, _, leaf = name.rpartition(".")
        setattr(sys.modules[parent], leaf, mod)
    loaded = sorted(n for n in sys.modules if n == "aiperf" or n.startswith("aiperf."))
    expected = sorted(STUB_PACKAGES + [n for n, _ in MODULES])
    if loaded != expected:
        sys.exit(f"unexpected aiperf modules were imported: {sorted(set(loaded) - set(expected))}")
    # The reconstructor warns on turns that cannot end with a user message; counted instead.
    logging.getLogger("aiperf.dataset.loader.weka_synth_buf").setLevel(logging.ERROR)
    return mod


def reference_turns(sb, trace: dict) -> tuple[list[dict], dict]:
    """The reference's prompt of every turn of `trace`, as `_reconstruct_serial` builds it."""
    bs = trace["block_size"]
    recon = sb.ConversationReconstructor(
        block_size=bs,
        decode_block_tokens=lambda ids: [7] * (len(ids) * bs),
        sample_partial_tail_tokens=lambda n, seed: [9] * n,
        decode_tokens_to_text=lambda toks: " ".join("w" for _ in toks),
    )
    reqs = trace["requests"]
    caps = sb.compute_asst_block_caps([(r["hash_ids"], r["in"]) for r in reqs], bs)
    turns = []
    counts = {"uncut": 0, "context_loss": 0, "handback": 0, "cap_binding": 0}
    for k, req in enumerate(reqs):
        seed = f"{trace['id']}:turn_{k}:partial_tail"
        if k == 0:
            recon.init_turn_0(
                hash_ids=req["hash_ids"],
                in_tokens=req["in"],
                tool_tokens=trace["tool_tokens"],
                system_tokens=trace["system_tokens"],
                seed=seed,
                is_tool_result=False,
            )
        else:
            prev = reqs[k - 1]
            # Coverage counts only (not vectors): which rules of advance_turn this turn meets.
            geo = sb.compute_turn_block_geometry(prev["hash_ids"], req["hash_ids"], req["in"], bs)
            held = sum(s.block_count for s in recon._segments)
            if geo.lcp > held:
                counts["uncut"] += 1
            user_left = any(s.role == "user" and (geo.lcp > held or s.block_start < geo.lcp)
                            for s in recon._segments)
            if not user_left:
                counts["context_loss"] += 1
            a = math.ceil(prev["out"] / bs) if user_left else 0
            a = min(a, geo.new_blocks_count)
            if caps[k] is not None and caps[k] < a:
                counts["cap_binding"] += 1
                a = caps[k]
            if geo.synth_tail_n == 0 and a == geo.new_blocks_count and a > 0:
                counts["handback"] += 1
            recon.advance_turn(
                prev_hash_ids=prev["hash_ids"],
                prev_in_tokens=prev["in"],
                prev_out_tokens=prev["out"],
                curr_hash_ids=req["hash_ids"],
                curr_in_tokens=req["in"],
                seed=seed,
                is_tool_result=False,
                max_asst_blocks=caps[k],
            )
        recon.turn_delta()
        msgs = recon.snapshot_messages()
        tokens = [len(m["content"].split()) for m in msgs]
        assert tokens == [len(s.tokens) for s in recon._segments]
        turns.append({"roles": "".join(m["role"][0] for m in msgs), "tokens": tokens})
    stats = {
        "capped_turns": sum(c is not None for c in caps),
        "trailing_non_user": len(recon._trailing_non_user_turns),
        "turns_not_in": sum(sum(t["tokens"]) != r["in"] for t, r in zip(turns, reqs)),
        **{f"{k}_turns": v for k, v in counts.items()},
    }
    return turns, stats


# --------------------------------------------------------------------------------------------
# The corpus


class TraceMaker:
    """Builds one trace turn by turn; `ids` are fresh per trace (hash_id_scope "local")."""

    def __init__(self, rng: random.Random, tid: str, bs: int, tool: int, system: int, idmode: str,
                 cap: int, extra: int, keep_partial: float, aligned: float):
        self.rng, self.id, self.bs = rng, tid, bs
        self.tool, self.system = tool, system
        self.prefix_blocks = math.ceil((tool + system) / bs)
        self.idmode, self.cap, self.extra = idmode, cap, extra
        self.keep_partial, self.aligned = keep_partial, aligned
        self.next_id = 1
        self.reqs: list[dict] = []
        self.ops: list[str] = []
        self.t = 0.0

    def fresh(self, n: int) -> list[int]:
        out = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return out

    def n_ids(self, tokens: int) -> int:
        """How many hash ids a request of `tokens` records: ceil(in/bs) as real captures have,
        capped (truncated recordings) or with extra ids (over-recorded)."""
        n = math.ceil(tokens / self.bs)
        if self.idmode == "trunc":
            n = min(n, self.cap)
        elif self.idmode == "over":
            n += self.extra
        return n

    def maybe_align(self, tokens: int) -> int:
        if self.rng.random() < self.aligned:
            return max(self.bs, math.ceil(tokens / self.bs) * self.bs)
        return tokens

    def out_tokens(self) -> int:
        r = self.rng.random()
        if r < 0.15:
            return 0
        if r < 0.25:
            return self.rng.randint(4 * self.bs, 20 * self.bs)
        if r < 0.35:
            return self.bs * self.rng.randint(1, 3)
        return self.rng.randint(1, 4 * self.bs)

    def add(self, op: str, tokens: int, ids: list[int], out: int | None = None) -> None:
        assert tokens >= 1
        k = len(self.reqs)
        api = round(self.rng.uniform(0.4, 3.0), 3)
        think = round(self.rng.choice([0.0, 0.0, self.rng.uniform(0.1, 5.0)]), 3)
        if k:
            self.t = round(self.t + self.reqs[-1]["api_time"] + think + 0.001, 3)
        self.reqs.append({
            "t": self.t,
            "type": "n",
            "model": MODEL,
            "in": tokens,
            "out": self.out_tokens() if out is None else out,
            "hash_ids": ids,
            "input_types": ["text"] if k == 0 else ["tool_result"],
            "output_types": ["text", "tool_use"],
            "stop": "tool_use",
            "api_time": api,
            "think_time": 0.0 if k == 0 else think,
        })
        self.ops.append(op)

    # Turn 0 ----------------------------------------------------------------------------------

    def turn0(self, kind: str = "normal") -> None:
        prefix = self.tool + self.system
        bs = self.bs
        if kind == "system-only":
            # The tool/system prefix is the whole prompt (block-aligned): a system-only turn 0.
            tokens = max(bs, self.prefix_blocks * bs)
        elif kind == "under-prefix":
            # in < tool+system: the reference clamps the system segment to the covered blocks.
            tokens = max(1, prefix - self.rng.randint(1, max(1, prefix - 1)))
        else:
            tokens = self.maybe_align(prefix + self.rng.randint(1, 8 * bs))
        n = max(self.n_ids(tokens), self.prefix_blocks)
        self.add(f"t0-{kind}", tokens, self.fresh(n))

    # Turn k ----------------------------------------------------------------------------------

    def grow(self, fixed: int | None = None, aligned: bool | None = None) -> None:
        prev = self.reqs[-1]
        bs, pids, pin = self.bs, prev["hash_ids"], prev["in"]
        delta = fixed if fixed is not None else self.rng.randint(1, 8 * bs)
        tokens = pin + delta
        if aligned or (aligned is None and self.rng.random() < self.aligned):
            tokens = math.ceil(tokens / bs) * bs
        full = pin // bs
        keep = min(full, len(pids))
        op = "grow"
        if len(pids) > full and self.rng.random() < self.keep_partial:
            # The previous turn's partial (or over-recorded) block keeps its id: the common
            # prefix passes the blocks the previous prompt held whole.
            keep = min(len(pids), full + self.rng.randint(1, max(1, len(pids) - full)))
            op = "grow-keep-partial"
        n = self.n_ids(tokens)
        base = pids[:keep]
        ids = (base + self.fresh(max(0, n - len(base))))[:n]
        if tokens % bs == 0:
            op += "-aligned"
        if len(ids) == len(pids) and ids == pids:
            op += "-no-new-ids"
        self.add(op, tokens, ids)

    def pullback(self, aligned: bool | None = None) -> bool:
        """hash_ids a strict prefix of the previous turn's."""
        prev = self.reqs[-1]
        pids = prev["hash_ids"]
        if len(pids) < 2:
            return False
        bs = self.bs
        p = self.rng.randint(1, len(pids) - 1)
        if aligned or (aligned is None and self.rng.random() < 0.6):
            tokens, op = p * bs, "pullback-aligned"
        else:
            tokens, op = (p - 1) * bs + self.rng.randint(1, bs - 1), "pullback-partial"
        if self.idmode == "trunc" and self.rng.random() < 0.5:
            tokens += self.rng.randint(1, 3) * bs  # more tokens than the (truncated) ids cover
            op += "-truncated"
        self.add(op, tokens, pids[:p])
        return True

    def compaction(self, keep: int | None = None) -> None:
        """hash ids diverging from the previous turn's at `keep` (a context reset)."""
        prev = self.reqs[-1]
        pids = prev["hash_ids"]
        if keep is None:
            r = self.rng.random()
            if r < 0.3:
                keep = 0
            elif r < 0.6:
                keep = min(self.prefix_blocks, len(pids))
            else:
                keep = self.rng.randint(0, max(0, len(pids) // 3))
        keep = min(keep, len(pids) - 1) if pids else 0
        keep = max(keep, 0)
        bs = self.bs
        tokens = self.maybe_align(keep * bs + self.rng.randint(1, 6 * bs))
        n = max(self.n_ids(tokens), keep + 1)
        ids = pids[:keep] + self.fresh(n - keep)
        self.add(f"compaction-lcp{'0' if keep == 0 else '>0'}", tokens, ids)

    def retry(self) -> None:
        prev = self.reqs[-1]
        self.add("retry", prev["in"], list(prev["hash_ids"]))

    def random_turn(self, weights: dict[str, float]) -> None:
        if self.reqs[-1]["in"] > 70 * self.bs:
            weights = dict(weights, grow=weights.get("grow", 0) * 0.1)
        ops = list(weights)
        op = self.rng.choices(ops, [weights[o] for o in ops])[0]
        if op == "pullback" and self.pullback():
            return
        if op == "compaction":
            self.compaction()
        elif op == "retry":
            self.retry()
        else:
            self.grow()

    def trace(self) -> dict:
        return {
            "id": self.id,
            "models": [MODEL],
            "block_size": self.bs,
            "hash_id_scope": "local",
            "tool_tokens": self.tool,
            "system_tokens": self.system,
            "requests": self.reqs,
        }


def make_corpus() -> tuple[list[dict], dict[str, list[str]]]:
    rng = random.Random(CORPUS_SEED)
    traces: list[dict] = []
    ops: dict[str, list[str]] = {}

    def new(name: str, bs: int, tool: int = 0, system: int = 0, idmode: str = "ceil", cap: int = 0,
            extra: int = 0, keep_partial: float = 0.0, aligned: float = 0.2) -> TraceMaker:
        tid = f"tl-{len(traces) + 1:02d}-{name}"
        return TraceMaker(rng, tid, bs, tool, system, idmode, cap, extra, keep_partial, aligned)

    def done(m: TraceMaker) -> None:
        traces.append(m.trace())
        ops[m.id] = m.ops

    # Hand-made shapes -----------------------------------------------------------------------
    for bs in (64, 16):
        m = new(f"growth-partial-bs{bs}", bs, tool=3 * bs + 5, system=bs - 5)
        m.turn0()
        for _ in range(12):
            m.grow(aligned=False)
        done(m)

        m = new(f"growth-aligned-bs{bs}", bs, tool=2 * bs, system=bs)
        m.turn0()
        for _ in range(10):
            m.grow(aligned=True)
        done(m)

        m = new(f"keep-partial-bs{bs}", bs, keep_partial=1.0, aligned=0.0)
        m.turn0()
        for _ in range(8):
            m.grow(aligned=False)
        m.grow(aligned=True)
        m.pullback(aligned=False)
        for _ in range(4):
            m.grow(aligned=False)
        m.compaction(keep=0)
        m.grow(aligned=False)
        done(m)

        m = new(f"truncated-bs{bs}", bs, tool=bs + 3, system=bs, idmode="trunc", cap=9)
        m.turn0()
        for _ in range(10):
            m.grow()
        m.pullback(aligned=True)
        m.grow()
        done(m)

        m = new(f"over-recorded-bs{bs}", bs, tool=bs, system=bs // 2, idmode="over", extra=2,
                keep_partial=0.5)
        m.turn0()
        for _ in range(9):
            m.grow()
        m.retry()
        m.grow()
        done(m)

        # Block-aligned pull-backs onto blocks owned by earlier turns: the caps.
        m = new(f"pullback-caps-bs{bs}", bs, tool=2 * bs, system=10, aligned=0.5)
        m.turn0()
        for _ in range(6):
            m.grow(fixed=6 * bs, aligned=True)
        for _ in range(3):
            m.pullback(aligned=True)
            m.grow(fixed=5 * bs)
        m.pullback(aligned=True)
        m.pullback(aligned=True)
        done(m)

        m = new(f"pullback-partial-bs{bs}", bs, system=bs + 1)
        m.turn0()
        for _ in range(5):
            m.grow()
        m.pullback(aligned=False)
        m.grow()
        m.pullback(aligned=False)
        done(m)

        m = new(f"compaction-bs{bs}", bs, tool=4 * bs, system=bs)
        m.turn0()
        for keep in (0, None, m.prefix_blocks, 1):
            for _ in range(3):
                m.grow()
            m.compaction(keep=keep)
        m.grow()
        done(m)

        m = new(f"retry-bs{bs}", bs, tool=bs + 1, system=0)
        m.turn0()
        m.retry()
        m.grow()
        m.retry()
        m.retry()
        m.grow(aligned=True)
        m.retry()
        m.pullback(aligned=True)
        m.retry()
        done(m)

        m = new(f"out-zero-bs{bs}", bs)
        m.turn0()
        for i in range(8):
            m.grow()
            m.reqs[-2]["out"] = 0 if i % 2 == 0 else m.reqs[-2]["out"]
        m.reqs[-1]["out"] = 0
        done(m)

        m = new(f"system-only-turn0-bs{bs}", bs, tool=3 * bs, system=bs)
        m.turn0("system-only")
        for _ in range(4):
            m.grow()
        m.compaction(keep=m.prefix_blocks)
        m.grow()
        done(m)

        m = new(f"in-under-prefix-bs{bs}", bs, tool=5 * bs + 7, system=bs)
        m.turn0("under-prefix")
        for _ in range(4):
            m.grow()
        done(m)

        m = new(f"single-turn-bs{bs}", bs, tool=bs // 2, system=bs // 4)
        m.turn0()
        done(m)

    # Seeded random mixtures -----------------------------------------------------------------
    turn_counts = [1, 2, 3, 5, 8, 13, 20, 27, 34, 40]
    profiles = [
        ("mixed", {"grow": 6, "pullback": 2, "compaction": 1, "retry": 1}),
        ("growth", {"grow": 10, "retry": 1}),
        ("pullbacks", {"grow": 4, "pullback": 4, "retry": 1}),
        ("resets", {"grow": 4, "compaction": 3, "pullback": 1}),
    ]
    for i in range(34):
        bs = rng.choice([16, 64])
        pname, weights = profiles[i % len(profiles)]
        idmode = rng.choice(["ceil", "ceil", "ceil", "trunc", "over"])
        r = rng.random()
        if r < 0.3:
            tool, system = 0, 0
        elif r < 0.5:
            tool, system = 0, rng.randint(1, 3 * bs)
        else:
            tool, system = rng.randint(1, 6 * bs), rng.randint(0, 3 * bs)
        prefix_blocks = math.ceil((tool + system) / bs)
        m = new(f"{pname}-{idmode}-bs{bs}", bs, tool, system, idmode=idmode,
                cap=prefix_blocks + rng.randint(1, 30), extra=rng.randint(1, 3),
                keep_partial=rng.choice([0.0, 0.3, 1.0]), aligned=rng.choice([0.0, 0.3, 0.7]))
        r = rng.random()
        m.turn0("system-only" if r < 0.06 and prefix_blocks else "normal")
        for _ in range(turn_counts[i % len(turn_counts)] - 1):
            m.random_turn(weights)
        done(m)
    return traces, ops


def validate(trace: dict) -> None:
    """What the reference (turn-0 prefix) and agentx's importer (times) require of a trace."""
    bs = trace["block_size"]
    reqs = trace["requests"]
    need = math.ceil((trace["tool_tokens"] + trace["system_tokens"]) / bs)
    assert len(reqs[0]["hash_ids"]) >= need, trace["id"]
    for a, b in zip(reqs, reqs[1:]):
        assert b["t"] > a["t"], trace["id"]
    for r in reqs:
        assert r["in"] >= 1 and r["out"] >= 0, trace["id"]


# --------------------------------------------------------------------------------------------
# Output


def dumps(x, indent: int = 0, width: int = 120) -> str:
    """JSON with short values on one line (one turn per line)."""
    flat = json.dumps(x, ensure_ascii=False, separators=(", ", ": "))
    if not isinstance(x, (dict, list)) or len(flat) + indent <= width or not x:
        return flat
    pad = " " * (indent + 1)
    if isinstance(x, dict):
        items = [f"{pad}{json.dumps(k)}: {dumps(v, indent + 1, width)}" for k, v in x.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps(v, indent + 1, width) for v in x]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--harness-src", help="unpacked agentx-harness 1.0.12 wheel (default: download)")
    ap.add_argument("--out-dir", default=str(ROOT / "fixtures/golden/tiling"))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="gen-tiling-") as tmp:
        root = harness_root(args.harness_src, Path(tmp))
        version = harness_version(root)
        if version != HARNESS_VERSION:
            sys.exit(f"{root}: {HARNESS} {version} found, {HARNESS_VERSION} required")
        sources = {rel: hashlib.sha256((root / rel).read_bytes()).hexdigest() for _, rel in MODULES}
        check_record(root, sources)
        sb = load_reference(root)

        traces, ops = make_corpus()
        for t in traces:
            validate(t)
        corpus = "".join(json.dumps(t, separators=(",", ":")) + "\n" for t in traces).encode()

        results = {}
        totals = {"traces": len(traces), "turns": 0, "capped_turns": 0, "trailing_non_user": 0,
                  "turns_not_in": 0, "uncut_turns": 0, "context_loss_turns": 0,
                  "handback_turns": 0, "cap_binding_turns": 0}
        for t in traces:
            turns, stats = reference_turns(sb, t)
            results[t["id"]] = turns
            totals["turns"] += len(turns)
            for k, v in stats.items():
                totals[k] += v

    doc = {
        "generator": {
            "command": "python3 bench/golden/gen_tiling.py [--harness-src DIR]",
            HARNESS: HARNESS_VERSION,
            "wheel_sha256": HARNESS_WHEEL_SHA256,
            "reference_sources_sha256": sources,
            "python": platform.python_version(),
            "corpus_seed": CORPUS_SEED,
            "how": "weka_synth_buf.ConversationReconstructor run per trace as weka_trace.py "
                   "_reconstruct_serial does (compute_asst_block_caps, init_turn_0, "
                   "advance_turn(max_asst_blocks=caps[k]), turn_delta); each turn is "
                   "snapshot_messages(): roles (first letters) and token counts per message",
        },
        "corpus": "fixtures/golden/tiling/corpus.jsonl",
        "corpus_sha256": hashlib.sha256(corpus).hexdigest(),
        "totals": totals,
        "ops": {tid: " ".join(o) for tid, o in ops.items()},
        "traces": results,
    }
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "corpus.jsonl").write_bytes(corpus)
    (out / "reference.json").write_text(dumps(doc) + "\n", encoding="utf-8")
    op_counts: dict[str, int] = {}
    for o in ops.values():
        for x in o:
            op_counts[x] = op_counts.get(x, 0) + 1
    print(f"wrote {out}/corpus.jsonl and reference.json: {totals}", file=sys.stderr)
    print("turn shapes: " + ", ".join(f"{k} {v}" for k, v in sorted(op_counts.items())),
          file=sys.stderr)


if __name__ == "__main__":
    main()
