"""What agentx sends against what the reference harness sends, request for request.

Run through `bench/differential.sh` (it installs agentx-harness into a venv and builds agentx). Three
commands:

  run        for each corpus shape (the with-subagents fixture and a synthetic corpus), replays it
             through the harness (`agentx profile --scenario agentx ...`) and through agentx with the
             same seed and flags, each against a fresh `agentx-host sim --record-requests`, turns each
             tool's request log into a labelled log (`normalize`), compares them, prints the table,
             and writes bench/out-differential/differential.json; exits 1 on a difference.
  normalize  joins a simulator request log (`--record-requests`) with the tool's own
             `profile_export.jsonl` (by X-Request-ID) and the tool's lane plan: the labelled log.
  compare    compares two labelled logs (reference first), prints the table; with
             --expected-differences FILE exits 0 only if the classes of the differences found
             (`category | tree | field`) are the file's lines, less those this run did not compare
             (tests/differential.rs runs agentx against the committed golden logs so).

What is compared, per tree (a lane's trace; the k-th tree of a trace is `trace#k`):
  - plan     each lane's trace, root next turn, alive and ready stream counts, and t* as a share of
             the trace's span: the harness logs it rounded to a whole percent, so t* matches within
             --tstar-tolerance-pct (default 0.6, the rounding plus the span's estimate here);
  - warmup   each stream's warmup requests in send order, as (turn, prompt tokens, max tokens,
             parent stream), as far as both tools went;
  - profile  each stream's first --first-n profiling requests, the same way;
  - spawn    the parent turn each child followed (its first profiling request came after it); join:
             for each child that finished in the window, the first parent turn sent after its end;
  - shape    what every request carries: token field, include_usage, ignore_eos, routing headers;
  - timing   (not with --no-timing) each primer's send time from the first warmup request, and each
             stream's first profiling send in the lanes' t* trees from the first profiling request, within
             --time-tolerance-s (default 0.5 s: both tools share one two-core machine with the
             simulator, and the harness dispatches through several Python processes).

The warmup quota ends the pressure stage when every lane has it, so which child of a spawn got its
last warmup turn in is a race: a stream whose warmup counts differ between the tools is left out of
the profiling comparison (and listed), and warmup requests per trace are shown, not compared.
A stream only one tool sent counts as a difference when it started in the first half of the
profiling window (later it may simply fall past the other tool's window). The request log's format
is the simulator's (crates/sim/src/record.rs); the labelled log's is documented in
fixtures/differential/README.md.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

MODEL = "bench-model"

# ---------------------------------------------------------------------------------------------------
# labelled logs


def read_jsonl(path: pathlib.Path) -> list[dict]:
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not a JSON line ({e})")
    return out


def find_export(run_dir: pathlib.Path) -> pathlib.Path:
    found = sorted(run_dir.rglob("profile_export.jsonl"))
    if not found:
        raise SystemExit(f"no profile_export.jsonl under {run_dir}: did the run finish? see its log")
    return found[0]


HARNESS_LANE = re.compile(
    r"lane=(\d+)\s+sample_time=\s*(\d+)%\s+root_next=\s*(\d+)/\s*(\d+)\s.*?live=(\d+) ready=(\d+)\s+trace_id=(\S+)"
)


def harness_plan(run_dir: pathlib.Path) -> list[dict]:
    """The lane table the harness logs at start (TrajectorySource, timing/trajectory_source.py:358-420)."""
    lanes: dict[int, dict] = {}
    for log in sorted(run_dir.rglob("*.log")):
        for line in log.read_text(errors="replace").splitlines():
            m = HARNESS_LANE.search(line)
            if m:
                lane = int(m.group(1))
                lanes[lane] = {
                    "lane": lane, "trace": m.group(7), "tstar_pct": int(m.group(2)),
                    "root_next": int(m.group(3)), "live": int(m.group(5)), "ready": int(m.group(6)),
                }  # fmt: skip
    return [lanes[k] for k in sorted(lanes)]


def trace_spans(corpus: pathlib.Path) -> dict[str, tuple[float, float]]:
    """Each trace's (first, last) request time in ms over all its requests, nested ones included (the
    fixture and the synthetic corpora use absolute nested times): the span t* is drawn over."""
    if mooncake_session_names(corpus) or (corpus.suffix == ".jsonl" and not corpus.is_dir() and mooncake_rows(corpus)):
        return mooncake_spans(corpus)
    spans = {}
    files = sorted(corpus.glob("*.json")) if corpus.is_dir() else [corpus]
    for p in files:
        lines = p.read_text().splitlines() if p.suffix == ".jsonl" else [p.read_text()]
        for line in lines:
            if not line.strip():
                continue
            t = json.loads(line)
            ts: list[float] = []

            main_seen = False
            for r in t.get("requests") or []:
                nested = r.get("requests") or []
                if r.get("type") == "subagent":
                    # A subagent listed before any main request is dropped
                    # (docs/specs/session-trees.md#spawn-and-join).
                    if main_seen:
                        ts.extend(float(x["t"]) * 1000 for x in nested if isinstance(x.get("t"), (int, float)))
                    continue
                main_seen = True
                if isinstance(r.get("t"), (int, float)):
                    ts.append(float(r["t"]) * 1000)
            if ts:
                spans[str(t.get("id"))] = (min(ts), max(ts))
    return spans


def agentx_plan(dry_run: dict, spans: dict[str, tuple[float, float]], renamed: dict[str, str] | None = None) -> list[dict]:
    """The lane table of `agentx-host run --dry-run --json` in the harness's terms (`renamed`: agentx's
    names of unnamed Mooncake sessions to the harness's)."""
    renamed = renamed or {}
    lanes = []
    for lane in dry_run.get("lanes") or []:
        own = lane.get("trace_id")
        trace = renamed.get(own, own)
        streams = lane.get("streams") or []
        root = next((s for s in streams if s.get("conversation_id") == own), None)
        pct = None
        t = lane.get("t_star_ms")
        if isinstance(t, (int, float)) and trace in spans:
            lo, hi = spans[trace]
            pct = round((t - lo) / (hi - lo) * 100, 2) if hi > lo else 0.0
        lanes.append({
            "lane": lane.get("lane"), "trace": trace, "tstar_pct": pct,
            "root_next": root.get("next_turn") if root else None,
            "live": len(streams), "ready": sum(1 for s in streams if not s.get("waiting")),
            "primers": [[renamed.get(s["conversation_id"], s["conversation_id"]), s["warm_turn"]] for s in streams if s.get("warm_turn") is not None],
        })  # fmt: skip
    return lanes


def mooncake_rows(corpus: pathlib.Path) -> list[tuple[int, dict]]:
    """(line, row) of a Mooncake JSONL corpus; empty for a weka one."""
    rows = []
    for n, line in enumerate(corpus.read_text().split("\n"), 1):
        if line.strip():
            row = json.loads(line)
            if "requests" in row:
                return []
            rows.append((n, row))
    return rows


def mooncake_spans(corpus: pathlib.Path) -> dict[str, tuple[float, float]]:
    """Each Mooncake session's (first, last) turn time in ms, by the harness's session names: its
    timestamps, else the sum of its delays."""
    names = mooncake_session_names(corpus)
    times: dict[str, list[float]] = collections.defaultdict(list)
    for n, row in mooncake_rows(corpus):
        sid = row.get("session_id") or names[f"line-{n}"]
        ts = times[sid]
        if isinstance(row.get("timestamp"), (int, float)):
            ts.append(float(row["timestamp"]))
        else:
            ts.append((ts[-1] if ts else 0.0) + (float(row.get("delay") or 0) if ts else 0.0))
    return {sid: (min(ts), max(ts)) for sid, ts in times.items()}


def mooncake_session_names(corpus: pathlib.Path | None) -> dict[str, str]:
    """agentx's name of each Mooncake row without `session_id` (`line-N`, N its line) to the
    harness's (`session_000000`, ... in file order: the seeded SessionIDGenerator the loader draws
    from, dataset/loader/mooncake_trace.py:67-74, common/session_id_generator.py); empty for a weka
    corpus."""
    if corpus is None or corpus.is_dir() or corpus.suffix != ".jsonl":
        return {}
    names, k = {}, 0
    for n, row in mooncake_rows(corpus):
        if row.get("session_id") is None:
            names[f"line-{n}"] = f"session_{k:06d}"
            k += 1
    return names


def normalize(sim_log: pathlib.Path, run_dir: pathlib.Path, tool: str, plan: list[dict], corpus: pathlib.Path | None = None) -> dict:
    """The labelled log: each request the simulator saw, with the tool's own labels for it (agentx's
    names of unnamed Mooncake sessions as the harness names them)."""
    renamed = mooncake_session_names(corpus) if tool == "agentx" else {}
    export = {}
    for row in read_jsonl(find_export(run_dir)):
        md = row.get("metadata") or {}
        if md.get("x_request_id"):
            export[md["x_request_id"]] = md
    corr_conv: dict[str, str] = {}
    for md in export.values():
        if md.get("x_correlation_id") and md.get("conversation_id"):
            corr_conv[md["x_correlation_id"]] = md["conversation_id"]
    # In arrival order: a body over 256 KiB is logged when its parse (on a blocking thread) ends.
    received = sorted(read_jsonl(sim_log), key=lambda r: r.get("seq", 0))
    t0 = min((r["unix_ns"] for r in received if "unix_ns" in r), default=0)
    # Trees: the k-th root correlation id of a trace, in order of first appearance.
    tree_of_root: dict[str, str] = {}
    seen_per_trace: collections.Counter = collections.Counter()
    requests = []
    for r in received:
        h = r.get("headers") or {}
        md = export.get(h.get("x-request-id"), {})
        corr = h.get("x-correlation-id")
        stream = md.get("conversation_id") or corr_conv.get(corr)
        stream = renamed.get(stream, stream)
        root_corr = md.get("root_correlation_id") or (corr if stream and "::" not in stream else None)
        tree = None
        if root_corr:
            if root_corr not in tree_of_root:
                trace = (stream or "?").split("::", 1)[0]
                tree_of_root[root_corr] = f"{trace}#{seen_per_trace[trace]}"
                seen_per_trace[trace] += 1
            tree = tree_of_root[root_corr]
        parent = md.get("parent_correlation_id")
        end_ns = md.get("request_end_ns")
        requests.append({
            "seq": r.get("seq"),
            "t_s": round((r.get("unix_ns", t0) - t0) / 1e9, 4),
            "end_s": round((end_ns - t0) / 1e9, 4) if isinstance(end_ns, int) else None,
            "phase": md.get("benchmark_phase"),
            "tree": tree,
            "stream": stream,
            "turn": md.get("turn_index"),
            "parent": corr_conv.get(parent, parent) if parent else None,
            "prompt_tokens": r.get("prompt_tokens"),
            "max_tokens": r.get("max_completion_tokens") if r.get("max_completion_tokens") is not None else r.get("max_tokens"),
            "token_field": "max_completion_tokens" if r.get("max_completion_tokens") is not None else ("max_tokens" if r.get("max_tokens") is not None else None),
            "include_usage": (r.get("stream_options") or {}).get("include_usage"),
            "ignore_eos": r.get("ignore_eos"),
            "stream_flag": r.get("stream"),
            "routing_headers": sorted(k for k in h if k not in ("x-request-id", "x-correlation-id", "user-agent")),
            "messages": r.get("messages"),
            "roles": "".join((role or "?")[0] for role in r.get("roles") or []),
            "message_tokens": r.get("message_tokens"),
            "marker": r.get("marker") is not None,
            "error": md.get("error") is not None if md else None,
        })  # fmt: skip
    return {"tool": tool, "plan": plan, "requests": requests}


# ---------------------------------------------------------------------------------------------------
# comparison


class Table:
    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])  # compared, matched
        self.diffs: list[tuple[str, str, str, str]] = []  # (category, key, expected, got)
        self.info: dict[str, tuple] = {}  # figures shown, not compared: (reference, candidate)
        self.checks: list[tuple] = []  # (category, group, expected, got) of every comparison

    def check(self, category: str, key: str, want, got, group: str | None = None) -> None:
        """One comparison; `group` (default: the key's first word, a tree or a field) is what the
        known-differences list names (see `classes`)."""
        c = self.counts[category]
        c[0] += 1
        self.checks.append((category, group or key.split(" ")[0], want, got))
        if want == got:
            c[1] += 1
        else:
            self.diffs.append((category, key, json.dumps(want), json.dumps(got)))

    def note(self, category: str, key: str, want, got) -> None:
        """A difference with nothing compared (a stream or request only one tool sent)."""
        self.counts[category][0] += 1
        self.checks.append((category, key.split(" ")[0], "present", "absent"))
        self.diffs.append((category, key, json.dumps(want), json.dumps(got)))

    def classes(self) -> tuple[set[str], set[str]]:
        """(differing, checked) classes `category | group | field`: a field is a differing key of two
        compared objects (`value` otherwise). Which of a lane's requests the warmup quota let through is
        a race, so the requests compared vary from run to run; a class (say, the prompt tokens of some
        warmup request of tree t) does not, which makes the classes a stable list of known
        differences."""
        differing, checked = set(), set()
        for category, group, want, got in self.checks:
            if isinstance(want, dict) and isinstance(got, dict):
                fields = sorted(set(want) | set(got))
                bad = [f for f in fields if want.get(f) != got.get(f)]
            else:
                fields, bad = ["value"], ([] if want == got else ["value"])
            if want == "present":
                fields = bad = ["presence"]
            checked.update(f"{category} | {group} | {f}" for f in fields)
            differing.update(f"{category} | {group} | {f}" for f in bad)
        return differing, checked


def by_tree(log: dict) -> dict[str, list[dict]]:
    trees: dict[str, list[dict]] = collections.defaultdict(list)
    for r in log["requests"]:
        if r.get("tree"):
            trees[r["tree"]].append(r)
    return trees


FIELDS = ("turn", "prompt_tokens", "max_tokens", "parent", "roles", "message_tokens")


def first_profiling_trees(log: dict) -> dict[str, str]:
    """Each trace's first tree whose first request is a profiling one (trace -> tree label)."""
    born: dict[str, str] = {}
    for r in sorted(log["requests"], key=lambda r: r["t_s"]):
        if r.get("tree"):
            born.setdefault(r["tree"], r["phase"])
    out: dict[str, str] = {}
    for tree, phase in born.items():
        if phase == "profiling":
            out.setdefault(tree.split("#")[0], tree)
    return out


def compare_plan(t: Table, ref: dict, got: dict, tol_pct: float) -> None:
    gl = {l["lane"]: l for l in got.get("plan") or []}
    for l in ref.get("plan") or []:
        g = gl.get(l["lane"])
        key = f"lane {l['lane']}"
        if g is None:
            t.note("plan", key, l, None)
            continue
        for f in ("trace", "root_next", "live", "ready"):
            t.check("plan", f"{key} {f}", l[f], g.get(f), group=f"lane {l['lane']} {f}")
        w, h = l.get("tstar_pct"), g.get("tstar_pct")
        ok = isinstance(w, (int, float)) and isinstance(h, (int, float)) and abs(w - h) <= tol_pct
        t.check("plan", f"{key} t* % of span (±{tol_pct})", w, w if ok else h, group=f"lane {l['lane']} t*")


def phase_streams(reqs: list[dict], phase: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = collections.defaultdict(list)
    for r in sorted(reqs, key=lambda r: r["t_s"]):
        if r["phase"] == phase and r["stream"]:
            out[r["stream"]].append(r)
    return out


def raced(ref: list[dict], got: list[dict]) -> set[str]:
    """A tree's streams whose warmup request counts differ between the tools. The pressure stage ends
    when every lane has its quota, so which child of a spawn got one more turn in is a race between
    responses; profiling resumes each stream after its last warmup turn, so what such a stream
    sends in profiling is left out (the warmup requests both sent are compared)."""
    a = collections.Counter(r["stream"] for r in ref if r["phase"] == "warmup")
    b = collections.Counter(r["stream"] for r in got if r["phase"] == "warmup")
    out = {s for s in set(a) | set(b) if a[s] != b[s]}
    # A subagent's other chains (`<stream>:fa:..`, `:aux:..`) follow where its raced chain got to.
    streams = {r["stream"] for r in ref + got if r["stream"]}
    return out | {s for s in streams for x in out if s.startswith(x + ":")}


def compare_streams(
    t: Table, phase: str, tree: str, ref: list[dict], got: list[dict], first_n: int | None, half: tuple, skip: set
) -> None:  # fmt: skip
    """Each stream's requests of `phase` in send order, the first `first_n` (all if None), as far as
    both tools went: a stream's next turn is fixed, how far it got in a window is timing."""
    category = "warmup" if phase == "warmup" else "profile"
    rs, gs = phase_streams(ref, phase), phase_streams(got, phase)
    for s in sorted(set(rs) | set(gs)):
        if s in skip:
            continue
        a, b = rs.get(s, [])[:first_n], gs.get(s, [])[:first_n]
        if not a or not b:
            first = (a or b)[0]["t_s"]
            if first <= (half[0] if a else half[1]):
                t.note(category, f"{tree} {s} (sent by one tool only)", [r["turn"] for r in a], [r["turn"] for r in b])
            continue
        for i in range(min(len(a), len(b))):
            w = {k: a[i][k] for k in FIELDS}
            h = {k: b[i][k] for k in FIELDS}
            t.check(category, f"{tree} {s} {phase} request {i}", w, h)


def spawn_join(reqs: list[dict], skip: set, until: float) -> tuple[list, list, int]:
    """(spawns, joins, the parent's last turn) of a tree's profiling, for children whose first request
    came before `until` (the earlier of the two tools' last profiling sends, less a second)."""
    streams = {
        s: v for s, v in phase_streams(reqs, "profiling").items()
        if s not in skip and ("::" not in s or v[0]["t_s"] <= until)
    }  # fmt: skip
    root = next((s for s in streams if "::" not in s), None)
    if root is None:
        return [], [], -1
    parent = streams[root]
    spawns, joins = [], []
    for s, rs in streams.items():
        if s == root:
            continue
        first, last = rs[0], rs[-1]
        before = [p["turn"] for p in parent if p["t_s"] <= first["t_s"]]
        spawns.append((before[-1] if before is not None and before else -1, s))
        if last.get("end_s") is not None:
            after = [p["turn"] for p in parent if p["t_s"] >= last["end_s"]]
            if after:
                joins.append((s, after[0]))
    # Children of one spawn start together: their order among themselves is a race, so a spawn is
    # the parent turn it followed (-1: before the parent's first profiling turn).
    spawns.sort()
    # How far the parent got: its last turn that returned inside the window (a spawn at a later
    # turn's return, or at its issue near the window's end, is timing).
    done = [p["turn"] for p in parent if p.get("end_s") is not None and p["end_s"] <= until]
    return [(s, turn) for turn, s in spawns], sorted(joins), max(done, default=-1)


def compare_spawns(t: Table, tree: str, ref: list[dict], got: list[dict], skip: set, ends: tuple) -> None:
    rsp, rj, rmax = spawn_join(ref, skip, ends[0])
    gsp, gj, gmax = spawn_join(got, skip, ends[1])
    reach = min(rmax, gmax)
    # Only what both windows cover: spawns after parent turns both tools reached, of children both
    # tools sent before their cut-offs. Children of one spawn start at their recorded offsets from
    # it (0.2 s apart, say), so the cut-off can fall between two of them in one tool's window and
    # not in the other's; a child only one tool sent at all is the stream comparison's difference.
    both = {c for c, _ in rsp} & {c for c, _ in gsp}
    rsp = [x for x in rsp if x[1] <= reach and x[0] in both]
    gsp = [x for x in gsp if x[1] <= reach and x[0] in both]
    if rsp or gsp:
        t.check("spawn", f"{tree} order", rsp, gsp)
    rj = [x for x in rj if x[1] <= reach]
    gj = [x for x in gj if x[1] <= reach]
    if rj or gj:
        t.check("join", f"{tree} joins", rj, gj)


def primers(log: dict) -> set | None:
    """(tree, stream, turn) of every primer, from a plan that lists them (agentx's dry run), else None."""
    out = set()
    for lane in log.get("plan") or []:
        if "primers" not in lane:
            return None
        out.update((f"{lane['trace']}#0", s, turn) for s, turn in lane["primers"])
    return out


def compare_timing(t: Table, ref: dict, got: dict, tol: float, skip_trees: set) -> None:
    """Primer send times (the primers of the candidate's plan, which the plan check holds to the
    reference's) from the first warmup request, and each stream's first profiling send from the first
    profiling request in the trees the lanes start at t*, except those the warmup race touched."""
    chosen = primers(got) or primers(ref)
    lane_trees = {f"{lane['trace']}#0" for lane in ref.get("plan") or []}

    def firsts(log, phase):
        reqs = [r for r in log["requests"] if r["phase"] == phase and r["tree"]]
        if not reqs:
            return {}
        t0 = min(r["t_s"] for r in reqs)
        out = {}
        for r in sorted(reqs, key=lambda r: r["t_s"]):
            if phase == "warmup" and chosen is not None and (r["tree"], r["stream"], r["turn"]) not in chosen:
                continue
            out.setdefault((r["tree"], r["stream"]), round(r["t_s"] - t0, 3))
        return out

    for phase, label in (("warmup", "primer send"), ("profiling", "first profiling send")):
        a, b = firsts(ref, phase), firsts(got, phase)
        for k in sorted(set(a) & set(b), key=str):
            # A recycled tree's first send carries the drift of every response before it.
            if phase == "profiling" and (k[0] in skip_trees or k[0] not in lane_trees):
                continue
            ok = abs(a[k] - b[k]) <= tol
            t.check(f"timing {phase}", f"{k[0]} {k[1]} {label} s (±{tol})", a[k], a[k] if ok else b[k])


def compare_requests_shape(t: Table, ref: dict, got: dict) -> None:
    """What every request carries whatever its turn: token field, stream options, ignore_eos, headers."""
    for f in ("token_field", "include_usage", "ignore_eos", "stream_flag", "routing_headers"):
        a = sorted({json.dumps(r[f]) for r in ref["requests"]})
        b = sorted({json.dumps(r[f]) for r in got["requests"]})
        t.check("request shape", f, a, b, group=f)


def half_window(log: dict, phase: str) -> float:
    """The middle of a phase's span of sends: a stream one tool started before it is a difference."""
    ts = [r["t_s"] for r in log["requests"] if r["phase"] == phase]
    return (min(ts) + (max(ts) - min(ts)) / 2) if ts else 0.0


def compare(ref: dict, got: dict, a: argparse.Namespace) -> Table:
    t = Table()
    compare_plan(t, ref, got, a.tstar_tolerance_pct)
    compare_requests_shape(t, ref, got)
    rt, gt = by_tree(ref), by_tree(got)
    halves = {ph: (half_window(ref, ph), half_window(got, ph)) for ph in ("warmup", "profiling")}
    # Each tool's profiling end, one second early, in the other's terms: a child that starts at the
    # edge of one window may fall past the other's.
    last = [max((r["t_s"] for r in log["requests"] if r["phase"] == "profiling"), default=0.0) for log in (ref, got)]
    span = min(last[0] - halves["profiling"][0], last[1] - halves["profiling"][1])
    ends = (halves["profiling"][0] + span - 1.0, halves["profiling"][1] + span - 1.0)
    left_out = []
    trees = sorted(set(rt) | set(gt))
    if a.lane_trees_only:
        # The trees the lanes start at t* (a trace's first tree): how far a recycled tree gets in the
        # window, and which one the warmup quota lets in, is timing.
        lane_trees = {f"{l['trace']}#0" for l in ref.get("plan") or []}
        trees = [x for x in trees if x in lane_trees]
    for tree in trees:
        r, g = rt.get(tree, []), gt.get(tree, [])
        skip = raced(r, g)
        left_out.extend(f"{tree} {s}" for s in sorted(skip))
        compare_streams(t, "warmup", tree, r, g, None, halves["warmup"], set())
        compare_streams(t, "profiling", tree, r, g, a.first_n, halves["profiling"], skip)
        compare_spawns(t, tree, r, g, skip, ends)
    if a.lane_trees_only:
        # And each trace's first tree born in profiling: it starts at turn 0 in both tools, so what its
        # streams send first is fixed, whichever tree number the warmup left it.
        rf, gf = first_profiling_trees(ref), first_profiling_trees(got)
        for trace in sorted(set(rf) & set(gf)):
            r, g = rt[rf[trace]], gt[gf[trace]]
            label = f"{trace} (first tree born in profiling)"
            compare_streams(t, "profiling", label, r, g, a.first_n, halves["profiling"], set())
            compare_spawns(t, label, r, g, set(), ends)
    t.info["profiling left out (warmup race)"] = (len(left_out), ", ".join(left_out) or "-")
    lanes = lambda log: collections.Counter(
        r["tree"].split("#")[0] for r in log["requests"] if r["phase"] == "warmup" and r["tree"]
    )  # fmt: skip
    # Shown, not compared: the quota stops the pressure stage when every lane has it, so which lane
    # drains first, and which recycled tree gets a turn in before the stop, is a race.
    rl, gl = lanes(ref), lanes(got)
    t.info["warmup requests by trace"] = (
        " ".join(f"{k}:{rl[k]}" for k in sorted(rl)),
        " ".join(f"{k}:{gl[k]}" for k in sorted(gl)),
    )
    for phase in ("warmup", "profiling"):
        t.info[f"{phase} requests"] = (
            sum(1 for r in ref["requests"] if r["phase"] == phase),
            sum(1 for r in got["requests"] if r["phase"] == phase),
        )
    if not a.no_timing:
        compare_timing(t, ref, got, a.time_tolerance_s, {x.split(" ", 1)[0] for x in left_out})
    unlabelled = sum(1 for r in got["requests"] if not r["stream"])
    t.check(
        "labelled", "requests without the tool's label (overflows, lost rows)",
        sum(1 for r in ref["requests"] if not r["stream"]), unlabelled, group="unlabelled",
    )  # fmt: skip
    return t


def diff_line(d: tuple) -> str:
    return f"{d[0]} | {d[1]} | expected {d[2]} | got {d[3]}"


def render(t: Table, title: str, limit: int = 40) -> str:
    lines = [title, f"{'category':<26} {'compared':>9} {'matched':>8} {'differ':>7} {'match %':>8}"]
    tc = tm = 0
    for cat in sorted(t.counts):
        c, m = t.counts[cat]
        tc, tm = tc + c, tm + m
        lines.append(f"{cat:<26} {c:>9} {m:>8} {c - m:>7} {100 * m / c if c else 100:>7.1f}%")
    lines.append(f"{'all':<26} {tc:>9} {tm:>8} {tc - tm:>7} {100 * tm / tc if tc else 100:>7.1f}%")
    for k, (r, c) in t.info.items():
        lines.append(f"{k}: {r}, {c}" if "left out" in k else f"{k + ' (not compared)':<26} reference {r}, candidate {c}")
    if t.diffs:
        lines.append(f"differences ({len(t.diffs)}{', first ' + str(limit) if len(t.diffs) > limit else ''}):")
        lines.extend("  " + diff_line(d) for d in t.diffs[:limit])
    return "\n".join(lines)


def summary(t: Table) -> dict:
    tc = sum(c for c, _ in t.counts.values())
    tm = sum(m for _, m in t.counts.values())
    reqs = {k: t.counts[k] for k in t.counts if k in ("warmup", "profile")}
    rc = sum(c for c, _ in reqs.values())
    rm = sum(m for _, m in reqs.values())
    return {
        "compared": tc, "matched": tm, "match_pct": round(100 * tm / tc, 2) if tc else 100.0,
        "requests_compared": rc, "requests_matched": rm,
        "requests_match_pct": round(100 * rm / rc, 2) if rc else 100.0,
        "by_category": {k: {"compared": c, "matched": m} for k, (c, m) in sorted(t.counts.items())},
        "differences": [diff_line(d) for d in t.diffs],
    }  # fmt: skip


def cmd_compare(a: argparse.Namespace) -> int:
    ref, got = json.loads(a.reference.read_text()), json.loads(a.candidate.read_text())
    t = compare(ref, got, a)
    print(render(t, f"{a.candidate} against {a.reference}", limit=a.show))
    if a.json_out:
        a.json_out.write_text(json.dumps(summary(t), indent=2))
    differing, checked = t.classes()
    if a.expected_differences:
        expected = {
            line.strip() for line in a.expected_differences.read_text().splitlines()
            if line.strip() and not line.startswith("#")
        }  # fmt: skip
        # A known difference is fixed when its class was compared and matched everywhere; one whose
        # class was not compared in this run (a stream that did not get as far) is neither.
        fixed = sorted((expected - differing) & checked)
        unreached = len(expected - differing - checked)
        new = sorted(differing - expected)
        for d in fixed:
            print(f"FIXED (remove it from {a.expected_differences}): {d}")
        for d in new:
            print(f"NEW (not in {a.expected_differences}): {d}")
            for diff in t.diffs:
                c, g, f = d.split(" | ")
                if diff[0] == c and diff[1].startswith(g):
                    print(f"    e.g. {diff_line(diff)}")
                    break
        if fixed or new:
            print(f"the differences changed: {len(new)} new, {len(fixed)} gone; if intended, update the list "
                  f"(AGENTX_BLESS=1 cargo test --test tests differential rewrites it)")  # fmt: skip
            return 1
        print(
            f"no new difference and none fixed: {len(expected) - unreached} of the {len(expected)} known ones in "
            f"{a.expected_differences} found again, {unreached} not compared in this run"
        )  # fmt: skip
        return 0
    if a.write_expected:
        header = (
            "# Known differences between agentx and the harness's golden log, as `category | tree, lane or\n"
            "# field | differing field`; bench/differential.py compare prints every instance.\n"
        )
        # A listed class this run did not compare stays: nothing shows it fixed.
        kept = set()
        if a.write_expected.exists():
            kept = {
                line.strip() for line in a.write_expected.read_text().splitlines()
                if line.strip() and not line.startswith("#") and line.strip() not in checked
            }  # fmt: skip
        a.write_expected.write_text(header + "".join(d + "\n" for d in sorted(differing | kept)))
    return 1 if t.diffs else 0


def cmd_normalize(a: argparse.Namespace) -> int:
    if a.harness_log_dir:
        plan = harness_plan(a.harness_log_dir)
    elif a.dry_run:
        plan = agentx_plan(json.loads(a.dry_run.read_text()), trace_spans(a.corpus) if a.corpus else {}, mooncake_session_names(a.corpus))
    else:
        plan = []
    log = normalize(a.sim_log, a.run_dir, a.tool, plan, a.corpus)
    a.out.write_text(dump_log(log))
    print(f"wrote {a.out}: {len(log['requests'])} requests, {len(plan)} lanes")
    return 0


def dump_log(log: dict) -> str:
    """One request per line, so a golden file's diff reads request by request."""
    head = {k: v for k, v in log.items() if k != "requests"}
    body = ",\n".join("  " + json.dumps(r, separators=(",", ":")) for r in log["requests"])
    return json.dumps(head, indent=1)[:-2] + ',\n "requests": [\n' + body + "\n ]\n}\n"


# ---------------------------------------------------------------------------------------------------
# running both tools (the `run` command)


def split_corpus(src: pathlib.Path, dest: pathlib.Path) -> pathlib.Path:
    """A JSONL corpus as one weka-trace `.json` per trace: the directory form both tools read."""
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for n, line in enumerate(l for l in src.read_text().splitlines() if l.strip()):
        trace = json.loads(line)
        (dest / f"{n:05d}_{trace.get('id', n)}.json").write_text(line)
    return dest


def agentx_knows_scenario(agentx: str, name: str) -> bool:
    p = subprocess.run([agentx, "scenario", "inspect", name], capture_output=True, text=True)
    return p.returncode == 0


def tool_cmd(a, tool: str, corpus: pathlib.Path, url: str, conc: int, out: pathlib.Path, job: dict) -> list[str]:
    common = [
        "--url", url, "--endpoint-type", "chat", "--streaming", "--model", MODEL,
        "--concurrency", str(conc), "--benchmark-duration", str(a.duration),
        "--input-file", str(corpus), "--custom-dataset-type", job.get("dataset_type", "weka_trace"),
        "--unsafe-override", "--output-artifact-dir", str(out), *job.get("both_extra", []),
    ]  # fmt: skip
    if tool == "harness":
        tokenizer = job.get("tokenizer", str(a.tokenizer_dir))
        return [job["harness"], "profile", "--scenario", "agentx", *common, "--tokenizer", tokenizer, "--ui-type", "none"]
    return [a.agentx, "run", *a.agentx_scenario, *common, "--stats-interval", "0", *job["agentx_extra"]]


# The harness's `agentx` preset as agentx-v1 flags (docs/specs/harness-preset.md#preset), for an
# agentx without the `agentx` scenario.
PRESET_AS_FLAGS = [
    "--random-seed", "42", "--trajectory-start-min-ratio", "0.25", "--trajectory-start-max-ratio", "0.75",
    "--failed-request-threshold", "0.10", "--warmup-requests-per-lane", "10",
    "--agentic-warmup-grace-period", "1800", "--trace-idle-gap-cap-seconds", "300",
    "--use-server-token-count", "--benchmark-grace-period", "30",
]  # fmt: skip


def tool_env(a, tool: str, cache: pathlib.Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIPERF_", "AGENTX_"))}
    # No HF_HUB_OFFLINE: in offline mode the harness looks a local tokenizer directory up in the hub
    # cache by name (aiperf/common/tokenizer.py:533-540) and fails; a directory loads without network.
    if tool == "agentx":
        env["AGENTX_DATASET_MMAP_CACHE_DIR"] = str(cache)
        env["AGENTX_HOME"] = str(cache / "home")
        if a.agentx_scenario[0] == "agentx-v1":
            # The preset sends no X-Session-Affinity (docs/specs/harness-preset.md#http).
            env["AGENTX_HTTP_X_SESSION_AFFINITY_FROM_CORRELATION_ID"] = "false"
    else:
        env["AIPERF_DATASET_MMAP_CACHE_DIR"] = str(cache)
    return env


def run_one(a, shape: str, tool: str, corpus: pathlib.Path, conc: int, job: dict) -> dict:
    from compare import Reaper, Sim, kill_tree, tree_pss, tree_usage

    base = a.out / shape / tool
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    sim_log = base / "requests.sim.jsonl"
    sim = Sim(a.agentx, a.ttft_ms, a.itl_ms, base / "sim.log", extra=["--record-requests", str(sim_log)],
              max_model_len=job.get("max_model_len", 1 << 22))  # fmt: skip
    run_dir = base / "run"
    cmd = tool_cmd(a, tool, corpus, sim.url, conc, run_dir, job)
    print(f"  {shape}/{tool}: {' '.join(cmd[:4])} ... (log {base / 'tool.log'})", flush=True)
    log = open(base / "tool.log", "wb")
    started = time.monotonic()
    env = tool_env(a, tool, base / "cache")
    if tool == "harness":
        env.update(job.get("harness_env", {}))
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    reaper = Reaper(proc)
    peak_rss = peak_pss = 0
    n = 0
    limit = a.duration + 30 + a.startup_timeout
    try:
        while not reaper.poll():
            _, rss, _ = tree_usage(proc.pid)
            peak_rss = max(peak_rss, rss)
            if n % 4 == 0:
                peak_pss = max(peak_pss, tree_pss(proc.pid))
            n += 1
            if time.monotonic() - started > limit:
                print(f"  {shape}/{tool}: still running after {limit:.0f} s; interrupting", flush=True)
                break
            time.sleep(0.5)
        kill_tree(reaper)
        tokens = sim.tokens()
    finally:
        kill_tree(reaper)
        log.close()
        sim.stop()
    res = {
        "tool": tool, "exit_code": reaper.code, "wall_s": round(time.monotonic() - started, 1),
        "cpu_s": round(reaper.cpu, 2), "streamed_tokens": int(tokens),
        "cpu_ms_per_1k_tokens": round(reaper.cpu / tokens * 1e6, 1) if tokens else None,
        "peak_rss_mib": round(peak_rss / 2**20, 1), "peak_pss_mib": round(peak_pss / 2**20, 1),
        "command": cmd,
    }  # fmt: skip
    if tool == "harness":
        plan = harness_plan(run_dir)
    else:
        dry = subprocess.run(cmd + ["--dry-run", "--json"], capture_output=True, text=True, env=tool_env(a, tool, base / "cache"))
        if dry.returncode != 0:
            raise SystemExit(f"agentx --dry-run --json failed:\n{dry.stderr}")
        (base / "dry-run.json").write_text(dry.stdout)
        plan = agentx_plan(json.loads(dry.stdout), trace_spans(corpus), mooncake_session_names(corpus))
    labelled = normalize(sim_log, run_dir, tool, plan, corpus)
    (base / "labelled.json").write_text(dump_log(labelled))
    res["requests"] = len(labelled["requests"])
    print(f"  {shape}/{tool}: exit {res['exit_code']}, {res['requests']} requests, {res['cpu_s']} CPU-s, "
          f"{res['streamed_tokens']} tokens, peak RSS {res['peak_rss_mib']} MiB", flush=True)  # fmt: skip
    return res


# The two pairings of the generated corpora: agentx as it is against the harness run as its loader
# intends (bench/harness_as_intended.sh), and agentx laid out as the harness CLI lays it out against
# the harness as shipped.
PAIRINGS = {
    "intended": ("the harness as intended (weka_trace default_block_size null)", []),
    "cli": ("the harness CLI as shipped", ["--trace-block-size", "64"]),
}


HUB_TOKENIZER = "bench/wordlevel"
# The simulator's context in the Mooncake shapes: a request without a token limit streams what the
# context leaves (as vLLM does), a few seconds here rather than an hour.
MOONCAKE_MAX_MODEL_LEN = 4096


def hub_tokenizer(tokenizer_dir: pathlib.Path, hub: pathlib.Path) -> pathlib.Path:
    """The word-level tokenizer as a Hugging Face hub cache holding the repo `bench/wordlevel`. The
    harness decodes hash-id prompts (Mooncake) in worker processes that force offline mode
    (dataset/generator/parallel_decode.py:52-63), where a tokenizer is looked up in the hub cache by
    repo id (common/tokenizer.py:641-666) and a directory path is refused; the whole harness then
    runs offline (HF_HUB_OFFLINE=1) with this cache (HF_HUB_CACHE)."""
    repo = hub / ("models--" + HUB_TOKENIZER.replace("/", "--"))
    revision = "0" * 40
    snapshot = repo / "snapshots" / revision
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(revision)
    for f in tokenizer_dir.iterdir():
        shutil.copy(f, snapshot / f.name)
    return hub


def plan_jobs(a: argparse.Namespace) -> dict[str, dict]:
    """Every comparison to run: the fixture and the synthetic corpus against the harness as given
    (--harness), and each generated corpus in each pairing."""
    jobs: dict[str, dict] = {}
    wanted = a.shapes.split(",") if a.shapes else ["fixture", "synth"]
    shipped = {"harness": a.harness, "agentx_extra": [], "label": "the harness"}
    if "fixture" in wanted:
        fixture = pathlib.Path(__file__).resolve().parent.parent / "fixtures/traces-subagents-8.jsonl"
        jobs["fixture"] = {**shipped, "corpus": split_corpus(fixture, a.out / "corpus-fixture"), "concurrency": a.fixture_concurrency}
    if "synth" in wanted:
        synth = a.out / f"corpus-synth-{a.synth_traces}.jsonl"
        subprocess.run([a.agentx, "dataset", "synth", "--traces", str(a.synth_traces), "--seed", "42", "--subagents",
                        "--max-turns", str(a.synth_max_turns), "-o", str(synth)], check=True)  # fmt: skip
        jobs["synth"] = {**shipped, "corpus": split_corpus(synth, a.out / f"corpus-synth-{a.synth_traces}"), "concurrency": a.synth_concurrency}
    for shape in ("mooncake", "mooncake-flat"):
        if shape not in wanted:
            continue
        # A Mooncake corpus (bench/differential_mooncake.py: multi-turn sessions, or single-row
        # sessions with --flat) in --mooncake-block-size blocks, read by the harness's own
        # `mooncake_trace` loader.
        corpus = a.out / f"corpus-{shape}.jsonl"
        flat = ["--flat"] if shape == "mooncake-flat" else []
        n = a.mooncake_rows if flat else a.mooncake_sessions
        subprocess.run([sys.executable, str(pathlib.Path(__file__).resolve().parent / "differential_mooncake.py"), "--out", str(corpus),
                        "--seed", str(a.gen_seed), "--block-size", str(a.mooncake_block_size), "--sessions", str(n), *flat], check=True)  # fmt: skip
        hub = hub_tokenizer(a.tokenizer_dir, a.out / "hub")
        jobs[shape] = {
            **shipped, "tokenizer": HUB_TOKENIZER, "harness_env": {"HF_HUB_CACHE": str(hub), "HF_HUB_OFFLINE": "1"}, "corpus": corpus, "concurrency": a.mooncake_concurrency, "dataset_type": "mooncake_trace",
            "both_extra": ["--isl-block-size", str(a.mooncake_block_size)], "block_size": a.mooncake_block_size,
            # A row without output_length is sent without a limit and streams to the end of the context.
            "max_model_len": MOONCAKE_MAX_MODEL_LEN,
        }  # fmt: skip
    if "generated" in wanted:
        gen = a.out / "generated"
        subprocess.run([sys.executable, str(pathlib.Path(__file__).resolve().parent / "differential_corpus.py"), "--out", str(gen),
                        "--seed", str(a.gen_seed), "--block-sizes", a.gen_block_sizes, "--traces", str(a.gen_traces)], check=True)  # fmt: skip
        for bs in (int(x) for x in a.gen_block_sizes.split(",")):
            corpus = split_corpus(gen / f"bs{bs}.jsonl", gen / f"bs{bs}")
            for pairing in a.pairings.split(","):
                label, extra = PAIRINGS[pairing]
                harness = a.harness_intended if pairing == "intended" else a.harness
                if harness is None:
                    raise SystemExit("--pairings intended needs --harness-intended (bench/harness_as_intended.sh makes it)")
                jobs[f"gen-bs{bs}-{pairing}"] = {
                    "harness": harness, "agentx_extra": extra, "label": label, "corpus": corpus,
                    "concurrency": a.gen_concurrency, "pairing": pairing, "block_size": bs,
                }  # fmt: skip
    return jobs


def cmd_run(a: argparse.Namespace) -> int:
    from compare import make_tokenizer

    a.out = a.out.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    a.tokenizer_dir = a.out / "tokenizer"
    make_tokenizer(a.tokenizer_dir)
    if agentx_knows_scenario(a.agentx, a.scenario):
        a.agentx_scenario = ["--scenario", a.scenario]
        how = f"agentx scenario {a.scenario}"
    else:
        a.agentx_scenario = ["agentx-v1", *PRESET_AS_FLAGS]
        how = f"agentx has no scenario {a.scenario!r}: agentx-v1 with the preset as flags ({' '.join(PRESET_AS_FLAGS)})"
    print(how, flush=True)
    jobs = plan_jobs(a)
    report = {"how": how, "duration_s": a.duration, "first_n": a.first_n, "time_tolerance_s": a.time_tolerance_s,
              "tstar_tolerance_pct": a.tstar_tolerance_pct, "simulator": {"ttft_ms": a.ttft_ms, "itl_ms": a.itl_ms}, "shapes": {}}  # fmt: skip
    failed = False
    for shape, job in jobs.items():
        corpus, conc = job["corpus"], job["concurrency"]
        runs = {tool: run_one(a, shape, tool, corpus, conc, job) for tool in ("harness", "agentx")}
        ref = json.loads((a.out / shape / "harness" / "labelled.json").read_text())
        got = json.loads((a.out / shape / "agentx" / "labelled.json").read_text())
        t = compare(ref, got, a)
        print("\n" + render(t, f"{shape}: agentx against {job['label']} (concurrency {conc})", limit=a.show) + "\n", flush=True)
        report["shapes"][shape] = {
            "concurrency": conc, "corpus": str(corpus), "pairing": job.get("pairing"), "block_size": job.get("block_size"),
            "reference": job["label"], "agentx_flags": job["agentx_extra"], "runs": runs, "comparison": summary(t),
        }  # fmt: skip
        failed |= bool(t.diffs)
        (a.out / "differential.json").write_text(json.dumps(report, indent=2))
    for shape, s in report["shapes"].items():
        h, x = s["runs"]["harness"], s["runs"]["agentx"]
        c = s["comparison"]
        print(f"{shape}: {c['requests_matched']}/{c['requests_compared']} compared requests match "
              f"({c['requests_match_pct']} %), all checks {c['match_pct']} %; CPU ms/1k streamed tokens "
              f"harness {h['cpu_ms_per_1k_tokens']} agentx {x['cpu_ms_per_1k_tokens']}; peak RSS MiB "
              f"harness {h['peak_rss_mib']} agentx {x['peak_rss_mib']}")  # fmt: skip
    print(f"wrote {a.out / 'differential.json'}")
    return 1 if failed else 0


def add_compare_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--first-n", type=int, default=4, help="profiling requests compared per stream")
    p.add_argument("--time-tolerance-s", type=float, default=0.5)
    p.add_argument("--tstar-tolerance-pct", type=float, default=0.6)
    p.add_argument("--no-timing", action="store_true", help="leave send times out (a test on a noisy machine)")
    p.add_argument("--show", type=int, default=60, help="differences printed")
    p.add_argument(
        "--lane-trees-only", action="store_true",
        help="compare only the trees the lanes start at t* (a test: what recycled trees send in a short "
        "window depends on timing)",
    )  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="replay both shapes through both tools and compare")
    r.add_argument("--agentx", required=True)
    r.add_argument("--harness", required=True, help="the harness's `agentx` executable")
    r.add_argument("--scenario", default="agentx", help="agentx's scenario (agentx-v1 plus the preset as flags if unknown)")
    r.add_argument("--out", type=pathlib.Path, default=pathlib.Path("bench/out-differential"))
    r.add_argument("--shapes", help="fixture,synth,generated,mooncake,mooncake-flat (default fixture,synth)")
    r.add_argument("--harness-intended", help="the `agentx` executable of the harness run as intended (bench/harness_as_intended.sh)")
    r.add_argument("--pairings", default="intended,cli", help="of the generated corpora: intended, cli")
    r.add_argument("--gen-block-sizes", default="16,32,64,128,512")
    r.add_argument("--gen-traces", type=int, default=8)
    r.add_argument("--gen-seed", type=int, default=7)
    r.add_argument("--gen-concurrency", type=int, default=8)
    r.add_argument("--mooncake-block-size", type=int, default=32)
    r.add_argument("--mooncake-sessions", type=int, default=8, help="sessions of the `mooncake` shape")
    r.add_argument("--mooncake-rows", type=int, default=24, help="rows of the `mooncake-flat` shape")
    r.add_argument("--mooncake-concurrency", type=int, default=4)
    r.add_argument("--duration", type=float, default=60, help="--benchmark-duration of both tools, s")
    r.add_argument("--startup-timeout", type=float, default=600)
    r.add_argument("--fixture-concurrency", type=int, default=8)
    r.add_argument("--synth-traces", type=int, default=120)
    r.add_argument("--synth-max-turns", type=int, default=12)
    r.add_argument("--synth-concurrency", type=int, default=16)
    r.add_argument("--ttft-ms", type=float, default=20)
    r.add_argument("--itl-ms", type=float, default=1)
    add_compare_flags(r)
    c = sub.add_parser("compare", help="compare two labelled logs (reference first)")
    c.add_argument("reference", type=pathlib.Path)
    c.add_argument("candidate", type=pathlib.Path)
    c.add_argument("--expected-differences", type=pathlib.Path)
    c.add_argument("--write-expected", type=pathlib.Path)
    c.add_argument("--json-out", type=pathlib.Path)
    add_compare_flags(c)
    n = sub.add_parser("normalize", help="a simulator request log plus the tool's export: the labelled log")
    n.add_argument("--sim-log", type=pathlib.Path, required=True)
    n.add_argument("--run-dir", type=pathlib.Path, required=True)
    n.add_argument("--tool", required=True, choices=["harness", "agentx"])
    n.add_argument("--harness-log-dir", type=pathlib.Path, help="the harness's run: its lane table")
    n.add_argument("--dry-run", type=pathlib.Path, help="agentx's `--dry-run --json`: its lane table")
    n.add_argument("--corpus", type=pathlib.Path, help="the corpus (t* as a share of each trace's span)")
    n.add_argument("-o", "--out", type=pathlib.Path, required=True)
    a = p.parse_args()
    return {"run": cmd_run, "compare": cmd_compare, "normalize": cmd_normalize}[a.command](a)


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
