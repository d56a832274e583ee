#!/usr/bin/env python3
"""A seeded Mooncake corpus for the differential (bench/differential.py run --shapes mooncake): one
JSONL file of `mooncake_trace` rows, each session built to exercise one thing agentx's Mooncake
importer and agentx-harness 1.0.12's `mooncake_trace` loader must agree on:

    partial     a growing session whose prompts end inside their last hash block (partial blocks)
    tail        prompts longer than their hash ids reach: synthesized tokens past the last block
    shared-a    two sessions that open on the same hash ids (a prefix shared across sessions: the
    shared-b    ids are global to a Mooncake file)

A block's id names its content: a partial last block that grows next turn gets a new id, as
Mooncake records it (the harness refuses one id at two sizes).
    no-limit    a turn without `output_length` (the harness then sends no token limit)
    single      rows without `session_id`: a single-turn session each
    empty       an `output_length` of 1 (0 the harness refuses: its Turn wants max_tokens >= 1), and
                an empty `hash_ids`

Turns are paced by `delay` (milliseconds), the loader's multi-turn form; no row has a `timestamp`.

With --flat every row is a session of its own (no `session_id`) with a `timestamp`, as the Mooncake
project publishes its traces: prompts that end inside their last block, prompts longer than their hash ids reach, prefixes
shared across rows, rows without `output_length`, rows without hash ids.

    python3 bench/differential_mooncake.py --out FILE [--seed 7] [--block-size 32] [--sessions 8] [--flat]

Standard library only.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random
import sys


class Corpus:
    """Rows of one Mooncake file; hash ids are global to the file."""

    def __init__(self, rng: random.Random, bs: int) -> None:
        self.rng, self.bs = rng, bs
        self.next_id = 1
        self.rows: list[dict] = []

    def fresh(self, n: int) -> list[int]:
        ids = list(range(self.next_id, self.next_id + n))
        self.next_id += n
        return ids

    def row(self, session: str | None, isl: int, hashes: list[int], out: int | None, delay_ms: float | None,
            timestamp_ms: int | None = None) -> None:  # fmt: skip
        row: dict = {} if timestamp_ms is None else {"timestamp": timestamp_ms}
        if session is not None:
            row["session_id"] = session
        if delay_ms is not None:
            row["delay"] = delay_ms
        row["input_length"] = isl
        if out is not None:
            row["output_length"] = out
        row["hash_ids"] = hashes
        self.rows.append(row)

    def session(self, sid: str, turns: int, first_blocks: int, *, partial: bool, tail: int = 0,
                opening: list[int] | None = None, no_limit_at: int | None = None) -> None:  # fmt: skip
        """A session whose context grows by a few blocks a turn: each turn's ids extend the last's, less
        its last id when that block was partial (a block's id names its content, so a block that grew
        is a new block: the harness refuses one id at two sizes)."""
        ids = list(opening or []) + self.fresh(max(first_blocks - len(opening or []), 1))
        cut = 0
        for k in range(turns):
            if k:
                ids = (ids[:-1] if cut else ids) + self.fresh(self.rng.randint(1, 3))
            cut = self.rng.randint(1, self.bs - 1) if partial else 0
            isl = len(ids) * self.bs - cut + tail
            out = None if k == no_limit_at else self.rng.randint(8, 40)
            self.row(sid, isl, list(ids), out, None if k == 0 else round(self.rng.uniform(200, 1500), 1))


def build(seed: int, bs: int, sessions: int) -> list[dict]:
    rng = random.Random(seed)
    c = Corpus(rng, bs)
    shared = c.fresh(3)
    kinds = ["partial", "tail", "shared-a", "shared-b", "no-limit", "single", "empty", "partial"]
    for n in range(sessions):
        kind = kinds[n % len(kinds)]
        sid = f"s{n}-{kind}"
        turns = rng.randint(3, 6)
        if kind == "partial":
            c.session(sid, turns, rng.randint(2, 5), partial=True)
        elif kind == "tail":
            c.session(sid, turns, rng.randint(1, 3), partial=False, tail=rng.randint(1, bs * 2))
        elif kind in ("shared-a", "shared-b"):
            c.session(sid, turns, 5, partial=kind == "shared-b", opening=shared)
        elif kind == "no-limit":
            c.session(sid, turns, 2, partial=True, no_limit_at=1)
        elif kind == "single":
            for _ in range(2):
                ids = c.fresh(rng.randint(1, 4))
                c.row(None, len(ids) * bs - rng.randint(0, bs - 1), ids, 16, None)
        elif kind == "empty":
            c.row(sid, bs + 5, [], 1, None)
            c.row(sid, 3 * bs, c.fresh(3), 12, 400.0)
            c.row(sid, 4 * bs + 1, c.rows[-1]["hash_ids"] + c.fresh(1), 1, 600.0)
    return c.rows


def build_flat(seed: int, bs: int, rows: int) -> list[dict]:
    rng = random.Random(seed)
    c = Corpus(rng, bs)
    shared = [c.fresh(2), c.fresh(4)]
    for n in range(rows):
        opening = shared[n % 2] if n % 3 else []
        ids = list(opening) + c.fresh(rng.randint(1, 4))
        match n % 4:
            case 0:  # the last block partial
                isl = len(ids) * bs - rng.randint(1, bs - 1)
            case 1:  # synthesized tokens past the last block
                isl = len(ids) * bs + rng.randint(1, 2 * bs)
            case 2:  # whole blocks
                isl = len(ids) * bs
            case _:  # no hash ids
                ids, isl = [], rng.randint(1, 4) * bs + rng.randint(0, bs - 1)
        out = None if n % 5 == 4 else rng.randint(4, 40)
        c.row(None, isl, ids, out, None, timestamp_ms=1000 * n + rng.randint(0, 900))
    return c.rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=pathlib.Path, required=True)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--sessions", type=int, default=8)
    p.add_argument("--flat", action="store_true", help="single-row sessions only (--sessions rows)")
    a = p.parse_args()
    rows = build_flat(a.seed, a.block_size, a.sessions) if a.flat else build(a.seed, a.block_size, a.sessions)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sessions = len({r.get("session_id") for r in rows if "session_id" in r}) + sum(1 for r in rows if "session_id" not in r)
    print(f"{a.out}: {len(rows)} rows, {sessions} sessions, block size {a.block_size}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
