#!/usr/bin/env python3
"""Golden vectors for the start-turn rule, computed with numpy exactly as aiperf computes them.

For each vector: the candidates of a trace with n turns (n <= 1: none; n == 2: [0]; else
range(min(int(lo*n), n-2), min(int(hi*n), n-2) + 1)), keeping k only when k and k+1 are both sendable,
then k = numpy.random.default_rng(int.from_bytes(sha256(f"{seed}:{trace_id}".encode()).digest()[:8],
"big")).choice(candidates), or null when no candidate is left.

Also written, for unit tests of the pieces: SeedSequence pools and generate_state(4, uint64) words,
raw PCG64 outputs, and choice(n) indices for large n (where Lemire's rejection step matters).

Setup and run (from the repository root):
    python3 -m venv guest-scenarios/.venv
    guest-scenarios/.venv/bin/pip install numpy==2.4.6
    guest-scenarios/.venv/bin/python guest-scenarios/golden/gen_start_turn_vectors.py

Output: fixtures/golden/start_turn_vectors.json (deterministic: the inputs come from a fixed-seed
random.Random, the outputs from numpy). The policy crate's tests check every vector.
"""

import hashlib
import json
import platform
import random
import sys
from pathlib import Path

import numpy as np

NUMPY_VERSION = "2.4.6"
OUT = Path(__file__).resolve().parents[2] / "fixtures" / "golden" / "start_turn_vectors.json"
U63 = (1 << 63) - 1
U64 = (1 << 64) - 1


def trace_entropy(seed: int, trace_id: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{seed}:{trace_id}".encode()).digest()[:8], "big")


def start_turn(seed, trace_id, n, lo, hi, unsendable):
    if n <= 1:
        return None
    if n == 2:
        cands = [0]
    else:
        k_min = min(int(lo * n), n - 2)
        k_max = min(int(hi * n), n - 2)
        cands = list(range(k_min, k_max + 1))
    bad = set(unsendable)
    cands = [k for k in cands if k not in bad and (k + 1) not in bad]
    if not cands:
        return None
    rng = np.random.default_rng(trace_entropy(seed, trace_id))
    return int(rng.choice(cands))


def main() -> None:
    if np.__version__ != NUMPY_VERSION:
        sys.exit(f"numpy {np.__version__} is installed; the vectors are pinned to numpy {NUMPY_VERSION}: "
                 f"pip install numpy=={NUMPY_VERSION}")
    r = random.Random(20260517)

    seeds = [0, 1, 2, 7, 42, 1337, 2**31 - 1, 2**32 - 1, 2**32, 2**32 + 1, 2**53 + 1, U63, U63 - 1, U64]
    while len(seeds) < 400:
        kind = r.randrange(3)
        bits = (10, 32, 63)[kind]
        s = r.getrandbits(bits)
        if s not in seeds:
            seeds.append(s)

    trace_ids = ["trace_0003", "trace_0001", "сессия-7", "会话🙂", "", "a:b:c", "trace 0042 ",
                 "ünïcödé-trace", "0", "\u00e9\u0301"]
    trace_ids += [f"trace_{i:04d}" for i in range(40)]
    ratios = [(0.0, 0.7), (0.25, 0.75), (0.0, 1.0), (0.5, 0.5), (0.1, 0.9), (0.33, 0.66), (1.0, 1.0),
              (0.0, 0.0), (0.7, 0.2)]
    fixed_n = [0, 1, 2, 3, 4, 5, 6, 10, 17, 100, 949, 1000, 1999, 2000]

    vectors = []
    for i, seed in enumerate(seeds):
        for j in range(24):
            tid = trace_ids[(i * 7 + j) % len(trace_ids)] if j % 3 else r.choice(trace_ids)
            n = fixed_n[(i + j) % len(fixed_n)] if j < 6 else r.randrange(0, 2001)
            lo, hi = ratios[0] if j == 0 else ratios[1] if j == 1 else r.choice(ratios)
            unsendable = []
            if n > 0 and r.random() < 0.3:
                count = r.choice([1, 2, 3, 5, 12, 40, n if n <= 40 else 1])
                unsendable = sorted(r.sample(range(n), min(count, n)))
            k = start_turn(seed, tid, n, lo, hi, unsendable)
            vectors.append([seed, tid, n, lo, hi, unsendable, k])

    seed_sequence = []
    for e in [0, 1, 42, 2**32 - 1, 2**32, U63, U64, 12345678901234567890]:
        ss = np.random.SeedSequence(e)
        seed_sequence.append({
            "entropy": e,
            "pool": [int(x) for x in ss.pool],
            "state_u64": [int(x) for x in ss.generate_state(4, np.uint64)],
            "state_u32": [int(x) for x in ss.generate_state(8, np.uint32)],
        })

    pcg64_raw = []
    for e in [0, 1, 42, U63, U64, trace_entropy(42, "trace_0003")]:
        bg = np.random.PCG64(e)
        pcg64_raw.append({"entropy": e, "draws": [int(x) for x in bg.random_raw(16)]})

    choices = []
    big_n = [2, 3, 5, 7, 100, 2**16 + 1, 2**31 - 1, 2**31 + 1, 3 * 2**30, 3 * 2**30 + 7, 2**32 - 5, 2**32 - 1]
    for i in range(600):
        e = r.getrandbits(64)
        n = big_n[i % len(big_n)]
        choices.append([e, n, int(np.random.default_rng(e).choice(n))])

    doc = {
        "generator": {
            "command": "guest-scenarios/.venv/bin/python guest-scenarios/golden/gen_start_turn_vectors.py",
            "numpy": np.__version__,
            "python": platform.python_version(),
            "rule": "k = numpy.random.default_rng(int.from_bytes(sha256(f'{seed}:{trace_id}'.encode()).digest()[:8], 'big')).choice(candidates)",
            "start_turn_fields": ["seed", "trace_id", "num_turns", "min_ratio", "max_ratio", "unsendable", "start_turn"],
            "choice_fields": ["entropy", "n", "index"],
        },
        "seed_sequence": seed_sequence,
        "pcg64_raw": pcg64_raw,
        "choice": choices,
        "start_turn": vectors,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(doc, ensure_ascii=False, separators=(",", ":"))
    # one vector per line keeps diffs readable
    text = text.replace("],[", "],\n[")
    OUT.write_text(text + "\n", encoding="utf-8")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(vectors)} start-turn vectors, "
          f"{sum(v[6] is None for v in vectors)} unusable)")


if __name__ == "__main__":
    main()
