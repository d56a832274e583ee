#!/usr/bin/env python3
"""Fails when a crate of the workspace depends on a member its row in docs/architecture.md does not allow.

The table under "## Crates" in docs/architecture.md (columns: crate | holds | may depend on) is the one
statement of the layering. This reads it, reads `cargo metadata --no-deps` (every dependency kind:
normal, dev and build), and prints each edge between workspace members that the table does not list,
and each member the table does not name. It also checks two rules the table's prose states: every
member but the ones allowed `unsafe` (dataset, scenario, the root; the hack crate holds no code) says
`#![forbid(unsafe_code)]` at the top of its lib.rs, and the crates whose tests must build without the
wasm runtime (metrics, dataset, client) have no `wasmtime` anywhere in their dependency tree. Exit
code 1 on any of them.

Usage: python3 .ci/check_crate_deps.py
"""

import json
import os
import re
import subprocess
import sys

DOC = "docs/architecture.md"
# cargo-hakari's feature-unification crate: no code, a dependency of every member.
HACK = "agentx-workspace-hack"
# The crates that may hold `unsafe` (with a local allow and its reason at each use).
MAY_BE_UNSAFE = {"agentx-dataset", "agentx-scenario", "agentx-host", HACK}
# The crates whose own tests link no wasm runtime (`cargo test -p` of them stays fast).
WITHOUT_WASMTIME = ["agentx-metrics", "agentx-dataset", "agentx-client"]


def unsafe_problems(members):
    """Members that may not hold `unsafe` but do not forbid it at the top of their lib.rs."""
    problems = []
    for name, package in sorted(members.items()):
        if name in MAY_BE_UNSAFE:
            continue
        lib = next((t["src_path"] for t in package["targets"] if "lib" in t["kind"]), None)
        head = open(lib, encoding="utf-8").read() if lib else ""
        if "#![forbid(unsafe_code)]" not in head:
            problems.append(f"{name}: {lib} does not say #![forbid(unsafe_code)]; only "
                            f"{', '.join(sorted(MAY_BE_UNSAFE - {HACK}))} may hold unsafe")
    return problems


def wasmtime_problems():
    """The crates of WITHOUT_WASMTIME whose dependency tree (normal, dev, build) holds wasmtime."""
    problems = []
    for name in WITHOUT_WASMTIME:
        tree = subprocess.check_output(
            ["cargo", "tree", "--offline", "-p", name, "-e", "normal,dev,build", "--prefix", "none"],
            text=True)
        if any(line.startswith("wasmtime") for line in tree.splitlines()):
            problems.append(f"{name}: its dependency tree holds wasmtime; its tests must build "
                            f"without the wasm runtime (move what needs it up, or out)")
    return problems


def allowed_table(text):
    """{crate: set of crates it may depend on} from the Crates table."""
    section = text.split("## Crates", 1)[1].split("\n## ", 1)[0]
    table = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not re.fullmatch(r"agentx-[a-z-]+", cells[0]):
            continue
        may = cells[2]
        if may.startswith("every crate above"):
            deps = set(table)
        else:
            deps = set(re.findall(r"agentx-[a-z-]+", may))
        table[cells[0]] = deps
    return table


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    table = allowed_table(open(DOC, encoding="utf-8").read())
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--format-version", "1", "--no-deps", "--offline"]))
    members = {p["name"]: p for p in meta["packages"]}
    problems = []
    for name in sorted(members):
        if name not in table:
            problems.append(f"{name}: a workspace member without a row in {DOC}'s Crates table")
            continue
        for dep in members[name]["dependencies"]:
            target = dep["name"]
            if target in members and target != HACK and target not in table[name]:
                kind = dep["kind"] or "normal"
                problems.append(f"{name} -> {target} ({kind} dependency): not in its row of {DOC}; "
                                f"move what it needs down, or change the table with a reason")
    for name in sorted(set(table) - set(members)):
        problems.append(f"{name}: in {DOC}'s Crates table but not a workspace member")
    problems += unsafe_problems(members)
    problems += wasmtime_problems()
    for p in problems:
        print(p)
    edges = sum(1 for p in members.values() for d in p["dependencies"] if d["name"] in members)
    print(f"{len(members)} crates, {edges} edges between them, {len(problems)} not allowed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
