#!/usr/bin/env python3
"""Fails when a crate of the workspace depends on a member its row in docs/architecture.md does not allow.

The table under "## Crates" in docs/architecture.md (columns: crate | holds | may depend on) is the one
statement of the layering. This reads it, reads `cargo metadata --no-deps` (every dependency kind:
normal, dev and build), and prints each edge between workspace members that the table does not list,
and each member the table does not name. Exit code 1 on any of them.

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
    for p in problems:
        print(p)
    edges = sum(1 for p in members.values() for d in p["dependencies"] if d["name"] in members)
    print(f"{len(members)} crates, {edges} edges between them, {len(problems)} not allowed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
