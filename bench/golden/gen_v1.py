#!/usr/bin/env python3
"""Golden vectors for AgentX v1 session-tree replay, computed by aiperf 0.13.0.dev20261023 itself.

Every value comes from importing aiperf's own loader, chain detection, trajectory source, warmup
strategy and cache-bust code and calling it on our fixture corpora; nothing below re-implements a
rule. The files and their schemas are described in fixtures/golden/README.md:

    fixtures/golden/v1_trees_subagents8.json   session trees of fixtures/traces-subagents-8.jsonl
    fixtures/golden/v1_trees_traces24.json     session trees of fixtures/traces-24.jsonl
    fixtures/golden/v1_chains.json             hash-chain detection, per trace and per subagent,
                                               plus small synthetic detection cases
    fixtures/golden/v1_tstar.json              t* samples: the golden vectors and worked example
                                               of docs/specs/session-trees.md#start-point, the
                                               timestamp-less fallback, and lanes for fixed
                                               seeds / concurrencies / ratios on both corpora,
                                               with warmup primers and profiling start delays
    fixtures/golden/v1_markers.json            cache-bust marker text and the per-tree ledger

Run it with bench/golden/gen-v1.sh (which makes the pinned venv). Directly:

    VENV/bin/python bench/golden/gen_v1.py [--out-dir fixtures/golden]

Prompt text is not part of any vector: turn content depends on the tokenizer and corpus, which
these vectors do not pin. The loader runs with an offline word-level tokenizer (built below
from aiperf's own shakespeare corpus, as bench/compare.py does) and the `coding` corpus; the
structural values recorded here (ids, timestamps, delays, joins, stamps, roles) do not depend
on either. Reconstruction runs on aiperf's serial path (AIPERF_DATASET_WEKA_PARALLEL_WORKERS=1),
which aiperf documents as byte-identical to its process-pool path.
"""

from __future__ import annotations

import os

os.environ.setdefault("AIPERF_DATASET_WEKA_PARALLEL_WORKERS", "1")

import argparse  # noqa: E402
import asyncio  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

AIPERF_VERSION = "0.13.0.dev20261023"
NUMPY_VERSION = "2.4.6"
ROOT = Path(__file__).resolve().parents[2]
CORPORA = {
    "subagents8": ROOT / "fixtures" / "traces-subagents-8.jsonl",
    "traces24": ROOT / "fixtures" / "traces-24.jsonl",
}
ZERO_BENCHMARK_ID = "00000000-0000-0000-0000-000000000000"
SEEDS = [0, 42, 1337]
CONCURRENCIES = [1, 3, 8, 13]
RATIOS = [(0.0, 1.0), (0.25, 0.75)]
SYSTEM_IDLE_CAP_S = 10.0

import aiperf  # noqa: E402
import numpy as np  # noqa: E402


def check_versions() -> None:
    if aiperf.__version__ != AIPERF_VERSION:
        sys.exit(f"aiperf {aiperf.__version__} is installed; these vectors are pinned to {AIPERF_VERSION}")
    if np.__version__ != NUMPY_VERSION:
        sys.exit(f"numpy {np.__version__} is installed; these vectors are pinned to numpy {NUMPY_VERSION}")


# --------------------------------------------------------------------------------------------
# helpers

def num(x):
    """JSON-safe number: floats that are integral stay floats (ms values keep their type)."""
    if x is None:
        return None
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    return x


def sha256_file(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def enum_value(x):
    return getattr(x, "value", x)


def make_tokenizer(out: Path) -> Path:
    """Offline word-level Hugging Face tokenizer over aiperf's shakespeare corpus (no network)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    corpus = Path(aiperf.__file__).parent / "dataset/generator/assets/shakespeare.txt"
    vocab = {"[UNK]": 0, "<s>": 1, "</s>": 2}
    for w in sorted(set(corpus.read_text(encoding="utf-8").split())):
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
    return out


class Loaded:
    """One corpus run through aiperf's weka loader (the HF-row path: validate, preflight, convert)."""

    def __init__(self, name: str, path: Path, prompt_generator) -> None:
        from aiperf.dataset.loader.base_loader import _default_test_run
        from aiperf.dataset.loader.weka_trace import WekaTraceLoader
        from aiperf.dataset.loader.weka_trace_models import WekaTrace

        self.name = name
        self.path = path
        raw: dict[str, list] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                tr = WekaTrace.model_validate_json(line)
                if tr.id in raw:
                    raise ValueError(f"duplicate trace id {tr.id}")
                raw[tr.id] = [tr]
        self.raw = raw
        run = _default_test_run()
        # filename=None: the delegation mode SemiAnalysisCCTracesWekaLoader uses for HF rows.
        self.loader = WekaTraceLoader(filename=None, run=run, prompt_generator=prompt_generator)
        self.preflighted, self.resolution = self.loader.preflight_nested_timestamps(
            raw, source_by_trace={tid: f"row {i} of {path.name}" for i, tid in enumerate(raw)}
        )
        self.plans = self.loader._build_reconstruction_plans(self.preflighted)
        self.convs = self.loader.convert_to_conversations(raw)
        # The same corpus with --use-think-time-only (delay = think_time when present).
        loader2 = WekaTraceLoader(filename=None, run=run, prompt_generator=prompt_generator)
        loader2._use_think_time_only = True
        self.convs_think = loader2.convert_to_conversations(raw)
        from aiperf.common.models import DatasetMetadata

        self.metadata = DatasetMetadata(
            conversations=[c.to_metadata() for c in self.convs],
            sampling_strategy=self.loader.get_preferred_sampling_strategy(),
            default_context_mode=self.loader.get_default_context_mode(),
        )
        self.roots = [c.session_id for c in self.convs if c.is_root]


# --------------------------------------------------------------------------------------------
# trees

def trees_doc(ld: Loaded) -> dict:
    from aiperf.dataset.loader.weka_trace import _dropped_subagent_indices

    by_id = {c.session_id: c for c in ld.convs}
    think_by_id = {c.session_id: c for c in ld.convs_think}
    children: dict[str, list[str]] = {}
    for c in ld.convs:
        if not c.is_root:
            children.setdefault(c.parent_conversation_id, []).append(c.session_id)
    plan_by_trace = {p.trace_id: p for p in ld.plans.parent_plans}

    trees = []
    for root_id in ld.roots:
        root = by_id[root_id]
        spawn_of: dict[str, int] = {}
        join_of: dict[str, int] = {}
        for k, t in enumerate(root.turns):
            for b in t.branch_ids:
                spawn_of.setdefault(b, k)
            for p in t.prerequisites:
                if enum_value(p.kind) == "spawn_join" and p.branch_id is not None:
                    join_of.setdefault(p.branch_id, k)
        branches = []
        branch_of_child: dict[str, dict] = {}
        for b in root.branches:
            info = {
                "branch_id": b.branch_id,
                "mode": enum_value(b.mode),
                "children": list(b.child_conversation_ids),
                "spawn_turn": spawn_of.get(b.branch_id),
                "join_turn": join_of.get(b.branch_id),
                "is_background": b.is_background,
                "start_timestamp_ms": num(b.start_timestamp_ms),
            }
            branches.append(info)
            for cid in b.child_conversation_ids:
                branch_of_child[cid] = info

        streams = []
        for cid in [root_id] + children.get(root_id, []):
            c = by_id[cid]
            ct = think_by_id[cid]
            b = branch_of_child.get(cid)
            turns = []
            for k, t in enumerate(c.turns):
                turns.append({
                    "ts_ms": num(t.timestamp),
                    "delay_ms": num(t.delay),
                    "delay_ms_think_time_only": num(ct.turns[k].delay),
                    "api_time_ms": num(t.api_time_ms),
                    "max_tokens": t.max_tokens,
                    "prefix_hit_blocks": t.theoretical_prefix_cache_hit_blocks,
                    "prefix_total_blocks": t.theoretical_prefix_cache_total_blocks,
                    "source_outer_idx": t.source_outer_idx,
                    "source_inner_idx": t.source_inner_idx,
                    "input_kind": enum_value(t.input_kind),
                    "reset_context": t.reset_context,
                    "roles": [m.get("role") for m in (t.raw_messages or [])],
                    "spawns_branches": list(t.branch_ids),
                    "joins_branches": [p.branch_id for p in t.prerequisites],
                    "replay_predecessors": [[r.conversation_id, r.turn_index] for r in (t.replay_predecessors or [])],
                })
            streams.append({
                "conversation_id": cid,
                "is_root": c.is_root,
                "agent_depth": c.agent_depth,
                "parent_conversation_id": c.parent_conversation_id,
                "source_kind": c.turns[0].source_kind if c.turns else None,
                "replay_scope_id": c.replay_scope_id,
                "branch_id": b["branch_id"] if b else None,
                "spawn_turn": b["spawn_turn"] if b else None,
                "join_turn": b["join_turn"] if b else None,
                "is_background": b["is_background"] if b else None,
                "branch_start_ts_ms": b["start_timestamp_ms"] if b else None,
                "turns": turns,
            })
        plan = plan_by_trace[root_id]
        dropped = sorted(_dropped_subagent_indices(plan))
        trees.append({
            "root": root_id,
            "stream_ids": [s["conversation_id"] for s in streams],
            "dropped_subagents": [plan.subagents[i][1].agent_id for i in dropped],
            "branches": branches,
            "streams": streams,
        })
    return {
        "corpus": str(ld.path.relative_to(ROOT)),
        "corpus_sha256": sha256_file(ld.path),
        "timestamp_resolution": ld.resolution.model_dump(mode="json"),
        "split_stats": vars(ld.plans.split_stats),
        "conversation_order": [c.session_id for c in ld.convs],
        "trees": trees,
    }


# The tree shape bench/golden/make_subagent_fixture.py builds each trace for: child stream suffix ->
# (spawning root turn, joining root turn or None for background), and dropped subagent agent_ids.
INTENDED_SUBAGENTS8 = {
    "sa-01-single": ({"::sa:agent_001": (2, 3)}, []),
    "sa-02-fanout": ({"::sa:agent_a": (1, 2), "::sa:agent_b": (1, 2)}, []),
    "sa-03-tiered": ({"::sa:agent_a": (1, 2), "::sa:agent_b": (1, 3), "::sa:agent_c": (1, None)}, []),
    "sa-04-flat": ({"::fa:000": (2, 4), "::aux:001": (3, 4)}, []),
    "sa-05-wg": ({"::wg:000_000": (1, 3), "::wg:000_001": (1, 3), "::wg:000_002": (1, 3)}, []),
    "sa-06-seam": ({"::sa:agent_n": (3, 4), "::sa:agent_n:aux:000": (3, 4), "::sa:agent_n:fa:001": (3, 4)}, []),
    "sa-07-edge": ({"::sa:agent_e": (3, 4)}, ["agent_e"]),
    "sa-08-spec": ({"::sa:agent_x": (0, 2)}, []),
}


def check_intended(doc: dict) -> None:
    """Fail loudly if aiperf no longer reads the subagent fixture as the shape it was built for."""
    got = {}
    for tr in doc["trees"]:
        root = tr["root"]
        kids = {s["conversation_id"][len(root):]: (s["spawn_turn"], s["join_turn"])
                for s in tr["streams"] if not s["is_root"]}
        got[root] = (kids, tr["dropped_subagents"])
    if got != INTENDED_SUBAGENTS8:
        sys.exit(f"aiperf's tree structure for the subagent fixture differs from the intended one:\n"
                 f"  got      {got}\n  intended {INTENDED_SUBAGENTS8}")
    if doc["timestamp_resolution"]["basis"] != "absolute" or doc["timestamp_resolution"]["clamped_request_count"] != 1:
        sys.exit(f"unexpected timestamp resolution {doc['timestamp_resolution']}")


# --------------------------------------------------------------------------------------------
# chain detection

def chain_result_doc(det, key_name: str) -> dict:
    from aiperf.common.environment import Environment
    from aiperf.dataset.loader.weka_agent_chains import worker_group_assignment

    wg = worker_group_assignment(det, group_min=Environment.DATASET.WEKA_WORKER_GROUP_MIN)
    return {
        "main_index": det.main_index,
        "worker_indices": list(det.worker_indices),
        "seams_merged": det.seams_merged,
        "unclassified_empty_hash": det.unclassified_empty_hash,
        "worker_groups": {str(ci): list(gm) for ci, gm in sorted(wg.items())},
        "chains": [
            {
                key_name: [oi for oi, _ in ch.requests],
                "fork": None if ch.fork is None else {
                    "parent_chain": ch.fork.parent_chain,
                    "fork_request_idx": ch.fork.fork_outer_idx,
                    "depth": ch.fork.depth,
                    "fork_time": ch.fork.fork_time,
                },
                "spliced_into": ch.spliced_into,
            }
            for ch in det.chains
        ],
    }


def detect(indexed):
    from aiperf.common.environment import Environment
    from aiperf.dataset.loader.weka_agent_chains import detect_agent_chains

    return detect_agent_chains(
        indexed,
        seam_max_gap_seconds=Environment.DATASET.WEKA_SEAM_MAX_GAP_SECONDS,
        seam_min_overlap_ratio=Environment.DATASET.WEKA_SEAM_MIN_OVERLAP_RATIO,
    )


def chains_for_corpus(ld: Loaded) -> list[dict]:
    from aiperf.dataset.loader.weka_trace import _split_off_preamble
    from aiperf.dataset.loader.weka_trace_models import WekaSubagentEntry

    flat_by_trace: dict[str, list] = {}
    for fp in ld.plans.flat_plans:
        flat_by_trace.setdefault(fp.parent_trace_id, []).append(fp)
    child_by_sa: dict[tuple[str, int], list] = {}
    for cp in ld.plans.child_plans:
        child_by_sa.setdefault((cp.parent_trace_id, cp.subagent_index), []).append(cp)
    plan_by_trace = {p.trace_id: p for p in ld.plans.parent_plans}

    out = []
    for tid, (trace,) in ld.preflighted.items():
        normals = [(i, r) for i, r in enumerate(trace.requests) if not isinstance(r, WekaSubagentEntry)]
        preamble, rest = _split_off_preamble(normals)
        det = detect(rest)
        top = {
            "layer": "top",
            "trace_id": tid,
            "preamble_request_idx": [i for i, _ in preamble],
            "detection": chain_result_doc(det, "request_idx"),
            "main_stream": tid,
            "main_request_idx": [i for i, _ in plan_by_trace[tid].normals],
            "worker_streams": [
                {
                    "conversation_id": fp.session_id,
                    "request_idx": [i for i, _ in fp.requests],
                    "is_aux": fp.is_aux,
                    "init_tool_tokens": fp.init_tool_tokens,
                    "init_system_tokens": fp.init_system_tokens,
                    "fork_parent_chain": fp.fork_parent_chain,
                    "fork_depth": fp.fork_depth,
                    "fork_request_idx": fp.fork_outer_idx,
                    "fork_source": list(fp.fork_source) if fp.fork_source else None,
                }
                for fp in flat_by_trace.get(tid, [])
            ],
        }
        out.append(top)
        sa_index = -1
        for outer, r in enumerate(trace.requests):
            if not isinstance(r, WekaSubagentEntry):
                continue
            sa_index += 1
            inner = list(enumerate(r.requests))
            pre, rest_i = _split_off_preamble(inner)
            det_i = detect(rest_i)
            out.append({
                "layer": "subagent",
                "trace_id": tid,
                "agent_id": r.agent_id,
                "subagent_index": sa_index,
                "marker_request_idx": outer,
                "preamble_inner_idx": [i for i, _ in pre],
                "detection": chain_result_doc(det_i, "inner_idx"),
                "streams": [
                    {
                        "conversation_id": cp.session_id,
                        "chain_index": cp.chain_index,
                        "inner_idx": list(cp.request_inner_indices),
                        "is_aux": cp.is_aux,
                        "init_tool_tokens": cp.init_tool_tokens,
                        "init_system_tokens": cp.init_system_tokens,
                        "fork_inner_idx": cp.fork_inner_idx,
                        "fork_source": list(cp.fork_source) if cp.fork_source else None,
                    }
                    for cp in child_by_sa.get((tid, sa_index), [])
                ],
            })
    return out


def synthetic_chain_cases() -> list[dict]:
    """Small request lists run through aiperf's detect_agent_chains and classifiers."""
    from aiperf.common.environment import Environment
    from aiperf.dataset.loader.weka_agent_chains import is_aux_chain, is_reduction_chain
    from aiperf.dataset.loader.weka_trace_models import WekaNormalRequest

    def R(t, hashes, *, api=1.0, model="m", isl=None, osl=100):
        return WekaNormalRequest.model_validate({
            "t": t, "type": "n", "model": model, "in": isl if isl is not None else len(hashes) * 64,
            "out": osl, "hash_ids": hashes, "api_time": api,
        })

    base = list(range(1, 41))
    cases = {
        "extend_simple": [R(0, base[:20]), R(5, base[:30]), R(10, base)],
        "extend_blocked_tail_still_running": [R(0, base[:20], api=10.0), R(5, base[:30])],
        "extend_at_epsilon": [R(0, base[:20], api=5.0 + 0.5e-6), R(5, base[:30])],
        "cross_model_full_prefix_is_spawn": [R(0, base[:20]), R(5, base[:30], model="other")],
        "fork_then_main_extends": [R(0, base[:30]), R(5, base[:20] + [101, 102]), R(6, base)],
        "seam_compaction_spliced": [R(0, base[:30]), R(5, base[:10] + [101, 102, 103])],
        "seam_blocked_long_gap_low_overlap": [R(0, base[:30]), R(4000, base[:10] + [101, 102])],
        "seam_long_gap_high_overlap_spliced": [R(0, base[:30]), R(4000, base[:20] + [101, 102])],
        "seam_cross_model_not_spliced": [R(0, base[:30]), R(5, base[:10] + [101], model="other")],
        "deeper_sibling_fork_wins_seam": [R(0, base[:30]), R(5, base[:10] + [101]), R(6, base[:20] + [102])],
        "empty_hash_rows_join_main": [R(0, []), R(1, base[:20]), R(2, []), R(3, [201, 202])],
        "disjoint_requests": [R(0, [1, 2]), R(1, [3, 4]), R(2, [5, 6])],
        "max_lcp_tie_prefers_longer_tail": [R(0, base[:20]), R(1, base[:10] + [50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60]),
                                            R(2, base[:10] + [70])],
        "unsorted_input_sorted_by_t_then_idx": [R(5, base[:30]), R(0, base[:20]), R(5, base[:25])],
    }
    out = []
    for name, reqs in cases.items():
        det = detect(list(enumerate(reqs)))
        out.append({
            "name": name,
            "requests": [{"t": r.t, "model": r.model, "api_time": r.api_time, "hash_ids": r.hash_ids}
                         for r in reqs],
            "detection": chain_result_doc(det, "request_idx"),
        })

    cls = []
    D = Environment.DATASET
    for name, reqs, peak, main_model in [
        ("aux_small_fresh", [R(0, [1] * 10, isl=600)], 50000, "m"),
        ("aux_cross_model_large", [R(0, [1] * 400, isl=25600, model="h")], 50000, "m"),
        ("not_aux_two_requests", [R(0, [1], isl=600), R(1, [1, 2], isl=700)], 50000, "m"),
        ("not_aux_at_floor", [R(0, [1] * 256, isl=16384)], 100000, "m"),
        ("aux_ratio_above_floor", [R(0, [1] * 300, isl=19000)], 200000, "m"),
        ("reduction", [R(0, [1] * 500, isl=32000, osl=500)], 50000, "m"),
        ("not_reduction_ratio", [R(0, [1] * 500, isl=32000, osl=1600)], 50000, "m"),
        ("not_reduction_osl_zero", [R(0, [1] * 500, isl=32000, osl=0)], 50000, "m"),
        ("not_reduction_osl_max", [R(0, [1] * 1000, isl=100000, osl=4000)], 50000, "m"),
    ]:
        aux = is_aux_chain(reqs, peak, max_requests=D.WEKA_AUX_MAX_REQUESTS, isl_ratio=D.WEKA_AUX_ISL_RATIO,
                           isl_floor=D.WEKA_AUX_ISL_FLOOR, main_model=main_model, cross_model=D.WEKA_AUX_CROSS_MODEL)
        red = is_reduction_chain(reqs, osl_max=D.WEKA_AUX_REDUCTION_OSL_MAX, ratio=D.WEKA_AUX_REDUCTION_RATIO,
                                 isl_floor=D.WEKA_AUX_ISL_FLOOR)
        cls.append({"name": name, "requests": [{"in": r.input_length, "out": r.output_length, "model": r.model}
                                              for r in reqs],
                    "main_peak_isl": peak, "main_model": main_model, "is_aux_chain": aux,
                    "is_reduction_chain": red,
                    # the loader evaluates the reduction arm only when is_aux_chain is false
                    "loader_class": "aux" if aux else ("aux(reduction)" if red else "agent")})
    return [{"detection_cases": out, "classification_cases": cls}]


# --------------------------------------------------------------------------------------------
# t*: trajectories, warmup primers, profiling start

class _Recorder:
    """Stands in for the credit issuer and scheduler; records what the strategy dispatches."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self.replay_gate = SimpleNamespace(observe_idle_root=lambda *_a, **_k: None,
                                           seed_completed_prefixes=lambda *_a, **_k: None)

    def _rec(self, turn, delay_s, via):
        self.events.append({
            "conversation_id": turn.conversation_id,
            "x_correlation_id": turn.x_correlation_id,
            "root_correlation_id": turn.effective_root_correlation_id,
            "turn_index": turn.turn_index,
            "agent_depth": turn.agent_depth,
            "max_tokens_override": getattr(turn, "max_tokens_override", None),
            "cache_bust_marker": turn.cache_bust_marker,
            "delay_s": delay_s,
            "via": via,
        })

    # credit issuer
    async def issue_credit(self, turn):
        self._rec(turn, 0.0, "issue_credit")
        return True

    async def dispatch_child_turn(self, turn):
        self._rec(turn, 0.0, "dispatch_child_turn")
        return True

    async def acquire_lane_credit(self, root_corr, *, root_pending, session_turns):
        self.events.append({"lane_credit": True, "root_correlation_id": root_corr,
                            "root_pending": root_pending, "session_turns": session_turns})

    def signal_sending_complete(self):
        pass

    # branch orchestrator: the profiling start seeds gated parents' join release delays here
    def seed_snapshot(self, states, *, cache_bust_markers, join_release_delays_ms):
        for corr, delay_ms in join_release_delays_ms.items():
            self.events.append({"join_release": True, "x_correlation_id": corr, "delay_ms": delay_ms})

    def park_child_turn(self, corr):
        pass

    def try_claim_parked_child_turn(self, corr):
        return True

    async def on_child_stopped(self, corr):
        pass

    # scheduler
    def schedule_later(self, delay_s, coro, group_id=None):
        # The coroutine is the deferred issue; record what it would send, then drop it.
        frame_locals = coro.cr_frame.f_locals if coro.cr_frame is not None else {}
        turn = frame_locals.get("turn")
        coro.close()
        if turn is not None:
            self._rec(turn, delay_s, "schedule_later")


def _strategy(source, phase, *, burst: bool, benchmark_id: str):
    from aiperf.common.enums import CacheBustTarget, CreditPhase
    from aiperf.timing.strategies.agentic_replay import AgenticReplayStrategy

    rec = _Recorder()
    cfg = SimpleNamespace(phase=phase, agentic_cache_warmup_duration_sec=None, warmup_requests_per_lane=None)
    st = AgenticReplayStrategy(config=cfg, conversation_source=source, scheduler=rec, stop_checker=None,
                               credit_issuer=rec, branch_orchestrator=rec,
                               lifecycle=SimpleNamespace(is_sending_complete=False,
                                                         mark_sending_complete=lambda: None))
    st._burst_phase_starts = burst
    st._system_idle_gap_cap_seconds = SYSTEM_IDLE_CAP_S
    st._cache_bust_target = CacheBustTarget.FIRST_TURN_PREFIX
    st._benchmark_id = benchmark_id
    assert phase in (CreditPhase.WARMUP, CreditPhase.PROFILING)
    return st, rec


def run_phases(source, *, burst: bool) -> dict:
    """Warmup primers then the profiling start, through AgenticReplayStrategy, with recorded dispatch."""
    from aiperf.common.enums import CreditPhase

    corr_names: dict[str, str] = {}
    for lane, tr in enumerate(source.trajectories):
        if tr.snapshot is None:
            corr_names[tr.x_correlation_id] = f"L{lane}:{tr.conversation_id}"
            continue
        for st in tr.snapshot.states:
            corr_names[st.x_correlation_id] = f"L{lane}:{st.conversation_id}"
        root_corr = next((s.root_correlation_id for s in tr.snapshot.states if s.root_correlation_id), None)
        if root_corr and root_corr not in corr_names:
            corr_names[root_corr] = f"L{lane}:<tree>"

    def clean(events):
        out = []
        for e in events:
            e = dict(e)
            for k in ("x_correlation_id", "root_correlation_id"):
                if k in e:
                    e[k] = corr_names.get(e[k], e[k])
            out.append(e)
        return out

    warm, wrec = _strategy(source, CreditPhase.WARMUP, burst=burst, benchmark_id=ZERO_BENCHMARK_ID)
    asyncio.run(warm._execute_warmup())
    prof, prec = _strategy(source, CreditPhase.PROFILING, burst=burst, benchmark_id=ZERO_BENCHMARK_ID)
    t0 = prof._profiling_phase_t0_offset_ms()
    spread = prof._profiling_spread_seconds()

    async def _prof():
        for lane, tr in enumerate(source.trajectories):
            if tr.snapshot is not None:
                await prof._dispatch_snapshot_for_profiling(tr, lane, t0)

    asyncio.run(_prof())
    return {
        "warmup_events": clean(wrec.events),
        "profiling_t0_offset_ms": t0,
        "profiling_first_request_spread_s": spread,
        "profiling_events": clean(prec.events),
    }


def lane_doc(source, lane: int, tr, seed: int) -> dict:
    from aiperf.timing.trajectory_source import _seed_for_trace_lane

    d = {
        "lane": lane,
        "trace_id": tr.conversation_id,
        "seed_string": f"{seed}:{tr.conversation_id}:{lane}",
        "seed_u64": _seed_for_trace_lane(seed, tr.conversation_id, lane),
        "start_turn_index": tr.start_turn_index,
    }
    if tr.snapshot is None:
        d["snapshot"] = None
        return d
    bounds = source._trace_time_bounds(tr.conversation_id)
    snap = tr.snapshot
    d["span_ms"] = list(bounds)
    d["t_star_ms"] = snap.t_star_ms
    d["states"] = [
        {
            "conversation_id": s.conversation_id,
            "agent_depth": s.agent_depth,
            "is_tree_root": s.parent_correlation_id is None,
            "next_turn": s.next_turn_index,
            "warm_turn": s.warmup_turn_index,
            "offset_ms": s.next_dispatch_offset_ms,
            "waiting_on_children": s.waiting_on_children,
            "join_target_turn": s.join_target_turn_index,
            "branch_id": s.branch_id,
            "branch_mode": enum_value(s.branch_mode),
        }
        for s in snap.states
    ]
    d["replay_resume_boundaries"] = [[b.conversation_id, b.next_turn_index] for b in snap.replay_resume_boundaries]
    return d


def build_source(metadata, roots, *, conc, seed, lo, hi):
    from aiperf.dataset.dataset_samplers import SequentialSampler
    from aiperf.timing.trajectory_source import TrajectorySource

    return TrajectorySource(dataset_metadata=metadata, dataset_sampler=SequentialSampler(roots),
                            concurrency=conc, random_seed=seed, start_min_ratio=lo, start_max_ratio=hi,
                            cache_bust_enabled=True)


def spec_section3() -> dict:
    """docs/specs/session-trees.md#start-point: golden vectors, fallback check, worked example."""
    from aiperf.common.models import ConversationMetadata, DatasetMetadata, TurnMetadata
    from aiperf.timing.trajectory_source import _seed_for_trace_lane

    X = [0, 60000, 120000, 300000, 600000]
    Y = [1000, 2000, 5000, 9000, 11000, 20000]

    def md(spec):
        return DatasetMetadata(
            conversations=[ConversationMetadata(conversation_id=c, turns=[TurnMetadata(timestamp_ms=t) for t in ts])
                           for c, ts in spec],
            sampling_strategy="sequential",
        )

    meta = md([("trace_x", X), ("trace_y", Y)])
    rows = []
    for tid, lane in [("trace_x", 0), ("trace_x", 1), ("trace_x", 2), ("trace_y", 1)]:
        s = _seed_for_trace_lane(42, tid, lane)
        u = int(np.random.default_rng(s).bit_generator.random_raw(1)[0])
        row = {"seed_string": f"42:{tid}:{lane}", "seed_u64": s, "first_u64_hex": f"0x{u:016x}",
               "first_double": (u >> 11) * 2.0 ** -53}
        for lo, hi in RATIOS:
            src = build_source(meta, ["trace_x", "trace_y"], conc=1, seed=42, lo=lo, hi=hi)
            tr = src._build_timestamped_trajectory(tid, lane_index=lane)
            st = tr.snapshot.states[0]
            row[f"ratios_{lo}_{hi}"] = {"t_star_ms": tr.snapshot.t_star_ms, "next_turn": st.next_turn_index,
                                        "offset_ms": st.next_dispatch_offset_ms}
        rows.append(row)

    lanes_by_ratio = {}
    for lo, hi in RATIOS:
        src = build_source(meta, ["trace_x", "trace_y"], conc=4, seed=42, lo=lo, hi=hi)
        lanes_by_ratio[f"{lo}_{hi}"] = [lane_doc(src, i, t, 42) for i, t in enumerate(src.trajectories)]

    meta_nots = md([("trace_x", [None] * 20), ("trace_y", [None] * 7)])
    fallback = {}
    for lo, hi in RATIOS:
        src = build_source(meta_nots, ["trace_x", "trace_y"], conc=4, seed=42, lo=lo, hi=hi)
        fallback[f"{lo}_{hi}"] = [{"lane": i, "trace_id": t.conversation_id, "num_turns": 20 if t.conversation_id == "trace_x" else 7,
                                    "k": t.start_turn_index, "snapshot": t.snapshot} for i, t in enumerate(src.trajectories)]

    # A snapshot with no live stream is not redrawn: the lane falls back to the turn split.
    from aiperf.common.enums import ConversationBranchMode
    from aiperf.common.models import ConversationBranchInfo

    root = ConversationMetadata(conversation_id="r", turns=[TurnMetadata(timestamp_ms=0), TurnMetadata(timestamp_ms=1000, branch_ids=["r:b"]), TurnMetadata(timestamp_ms=1500)],
                                branches=[ConversationBranchInfo(branch_id="r:b", child_conversation_ids=["r::sa:c"], mode=ConversationBranchMode.SPAWN, is_background=True, start_timestamp_ms=1100)])
    child = ConversationMetadata(conversation_id="r::sa:c", is_root=False, turns=[TurnMetadata(timestamp_ms=1100), TurnMetadata(timestamp_ms=1200, branch_ids=["c:b"])],
                                 branches=[ConversationBranchInfo(branch_id="c:b", child_conversation_ids=["r::sa:c::g"], mode=ConversationBranchMode.SPAWN, is_background=True, start_timestamp_ms=1300)])
    grand = ConversationMetadata(conversation_id="r::sa:c::g", is_root=False, turns=[TurnMetadata(timestamp_ms=1300), TurnMetadata(timestamp_ms=100000)])
    meta_dead = DatasetMetadata(conversations=[root, child, grand], sampling_strategy="sequential")
    src = build_source(meta_dead, ["r"], conc=1, seed=42, lo=0.5, hi=0.5)
    dead = {
        "description": "root r ts [0,1000,1500]; child r::sa:c ts [1100,1200] spawned by r turn 1; grandchild "
                       "r::sa:c::g ts [1300,100000] spawned by the child. Span [0,100000]; ratios 0.5/0.5 give "
                       "t*=50000 where nothing the snapshot examines (the root and the root's own branches) is "
                       "alive, so _snapshot_for returns None and the lane takes the timestamp-less turn split "
                       "(k from the same per-lane seed) instead of a redraw.",
        "snapshot_for_t50000_is_none": src._snapshot_for("r", 50000.0) is None,
        "lane": lane_doc(src, 0, src.trajectories[0], 42),
    }
    return {"golden_rows": rows, "lanes_conc4_seed42": lanes_by_ratio, "fallback_conc4_seed42": fallback,
            "unusable_snapshot": dead}


def spec_example(ld: Loaded) -> dict:
    """The worked example of docs/specs/session-trees.md#worked-example on fixture trace sa-08-spec
    (ms on the root clock)."""
    src = build_source(ld.metadata, ld.roots, conc=1, seed=0, lo=0.0, hi=1.0)
    out = []
    for t_star in [2000.0, 30000.0, 45000.0]:
        snap = src._snapshot_for("sa-08-spec", t_star)
        out.append({
            "t_star_ms": t_star,
            "states": [{"conversation_id": s.conversation_id, "next_turn": s.next_turn_index,
                        "warm_turn": s.warmup_turn_index, "offset_ms": s.next_dispatch_offset_ms,
                        "waiting_on_children": s.waiting_on_children, "join_target_turn": s.join_target_turn_index}
                       for s in snap.states],
        })
    return {"trace_id": "sa-08-spec", "snapshots": out}


def tstar_doc(loaded: dict[str, Loaded]) -> dict:
    runs = []
    for name, ld in loaded.items():
        for seed in SEEDS:
            for conc in CONCURRENCIES:
                for lo, hi in RATIOS:
                    src = build_source(ld.metadata, ld.roots, conc=conc, seed=seed, lo=lo, hi=hi)
                    entry = {
                        "corpus": name,
                        "seed": seed,
                        "concurrency": conc,
                        "min_ratio": lo,
                        "max_ratio": hi,
                        "lanes": [lane_doc(src, i, t, seed) for i, t in enumerate(src.trajectories)],
                        "warmup_credit_counts_by_lane": list(src.warmup_credit_counts_by_lane),
                    }
                    if seed == 42:
                        entry["spread"] = run_phases(src, burst=False)
                        entry["burst"] = run_phases(
                            build_source(ld.metadata, ld.roots, conc=conc, seed=seed, lo=lo, hi=hi), burst=True)
                    runs.append(entry)
    return {
        "system_idle_gap_cap_seconds": SYSTEM_IDLE_CAP_S,
        "benchmark_id": ZERO_BENCHMARK_ID,
        "spec_section3": spec_section3(),
        "spec_example": spec_example(loaded["subagents8"]),
        "runs": runs,
    }


# --------------------------------------------------------------------------------------------
# markers

def markers_doc() -> dict:
    from aiperf.common.enums import CacheBustTarget
    from aiperf.timing.strategies.cache_bust import base_trace_id, build_cache_bust_marker, resolve_tree_marker
    from aiperf.timing.trajectory_source import CacheBustLedger

    golden = [
        {"benchmark_id": ZERO_BENCHMARK_ID, "pass": p, "lane": lane, "trace_id": "trace_x",
         "target": "first_turn_prefix",
         "marker": build_cache_bust_marker(ZERO_BENCHMARK_ID, p, lane, "trace_x", target=CacheBustTarget.FIRST_TURN_PREFIX)}
        for p, lane in [(0, 0), (1, 0), (0, 1)]
    ]
    grid = []
    for bid in [ZERO_BENCHMARK_ID, "3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b", "bench"]:
        for tid in ["trace_x", "sa-02-fanout", "сессия-7", "会话🙂", ""]:
            for p in [0, 1, 2]:
                for lane in [0, 1, 7]:
                    grid.append([bid, p, lane, tid,
                                 build_cache_bust_marker(bid, p, lane, tid, target=CacheBustTarget.FIRST_TURN_PREFIX)])
    targets = []
    for t in CacheBustTarget:
        targets.append({"target": t.value,
                        "marker": build_cache_bust_marker(ZERO_BENCHMARK_ID, 0, 0, "trace_x", target=t)})
    bases = {cid: base_trace_id(cid) for cid in [
        "trace_x", "trace_x::sa:agent_001", "trace_x::sa:agent_001:fa:002", "trace_x::fa:000",
        "trace_x::aux:001", "trace_x::wg:000_002", "trace_x:spawn:agent_001", "a::b::c", "::x", "trace_x:s1"]}

    ledger = CacheBustLedger()
    seq = [
        ("tree-A", 0, "trace_x"),
        ("tree-A", 0, "trace_x::sa:agent_001"),
        ("tree-B", 1, "trace_y::fa:000"),
        ("tree-C", 2, "trace_x::sa:agent_002"),
        ("tree-B", 1, "trace_y"),
        ("tree-D", 0, "trace_x"),
        ("tree-A", 0, "trace_x::aux:001"),
    ]
    ledger_steps = []
    for root_corr, lane, cid in seq:
        m = resolve_tree_marker(ledger, root_corr, benchmark_id=ZERO_BENCHMARK_ID, trajectory_index=lane,
                                conversation_id=cid, target=CacheBustTarget.FIRST_TURN_PREFIX)
        ledger_steps.append({"root_correlation_id": root_corr, "lane": lane, "conversation_id": cid, "marker": m,
                             "recycle_pass_after": dict(ledger.recycle_pass)})
    return {
        "rule": "'[rid:' + sha256(f'{benchmark_id}:{pass}:{lane}:{base_trace_id}').hexdigest()[:12] + ']\\n\\n' (prefix targets)",
        "spec_section6_golden": golden,
        "grid_fields": ["benchmark_id", "pass", "lane", "trace_id", "marker_first_turn_prefix"],
        "grid": grid,
        "targets": targets,
        "base_trace_id": bases,
        "ledger_sequence": ledger_steps,
    }


# --------------------------------------------------------------------------------------------

def dumps(x, indent: int = 0, width: int = 150) -> str:
    """JSON with containers kept on one line when they fit in `width` characters, else one item per line."""
    flat = json.dumps(x, ensure_ascii=False, separators=(", ", ": "))
    if not isinstance(x, (dict, list)) or len(flat) + indent <= width or not x:
        return flat
    pad = " " * (indent + 1)
    if isinstance(x, dict):
        items = [f"{pad}{json.dumps(k, ensure_ascii=False)}: {dumps(v, indent + 1, width)}" for k, v in x.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"
    items = [pad + dumps(v, indent + 1, width) for v in x]
    return "[\n" + ",\n".join(items) + "\n" + " " * indent + "]"


def write(path: Path, doc: dict) -> None:
    path.write_text(dumps(doc) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(ROOT)} ({path.stat().st_size} bytes)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", type=Path, default=ROOT / "fixtures" / "golden")
    a = ap.parse_args()
    check_versions()
    logging.disable(logging.WARNING)
    t0 = time.monotonic()

    from aiperf.common import random_generator
    from aiperf.common.tokenizer import Tokenizer
    from aiperf.dataset.generator.corpus import resolve_prompt_generator

    random_generator.init(42)
    with tempfile.TemporaryDirectory(prefix="agentx-golden-tok-") as td:
        tok = Tokenizer.from_pretrained(str(make_tokenizer(Path(td))))
        pg = resolve_prompt_generator(corpus=None, default_corpus="coding", tokenizer=tok)
        loaded = {name: Loaded(name, path, pg) for name, path in CORPORA.items()}

    generator = {
        "command": "bash bench/golden/gen-v1.sh",
        "aiperf": aiperf.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("AIPERF_")},
    }
    a.out_dir.mkdir(parents=True, exist_ok=True)
    trees8 = trees_doc(loaded["subagents8"])
    check_intended(trees8)
    write(a.out_dir / "v1_trees_subagents8.json", {"generator": generator, **trees8})
    write(a.out_dir / "v1_trees_traces24.json", {"generator": generator, **trees_doc(loaded["traces24"])})
    write(a.out_dir / "v1_chains.json", {
        "generator": generator,
        "corpora": {name: chains_for_corpus(ld) for name, ld in loaded.items()},
        "synthetic": synthetic_chain_cases()[0],
    })
    write(a.out_dir / "v1_tstar.json", {"generator": generator, **tstar_doc(loaded)})
    write(a.out_dir / "v1_markers.json", {"generator": generator, **markers_doc()})
    print(f"golden v1 vectors done in {time.monotonic() - t0:.1f}s")


if __name__ == "__main__":
    main()
