#!/usr/bin/env python3
"""Checks that the specs the code cites are in the repository.

Every tracked source file (*.rs, *.py, *.sh, *.wit, *.toml) is read, and a line fails when it
- cites a document that lives outside the repository: `domain.md`, `agentx-v1.md`, `agentx-harness.md`,
  `inferencex-v1.md`, `inferencex-v2.md`, `inferencex-app.md`, `real-server.md`, `guest-toolchain.md`
  (with or without `.md`, when a section sign follows), or anything under `shared/docs/`;
- carries a section sign without a document before it (only `RFC <n> §` is allowed), since a bare
  section number names no document;
- links `docs/<path>.md` that is not a file of the repository, or `docs/<path>.md#<anchor>` whose anchor is
  not a heading of that file (GitHub's heading ids) or an explicit `<a id="...">`. A `docs/` path right
  after the name of another project (`aiperf docs/...`, `InferenceX \`docs/...\``, `owner/repo docs/...`)
  is that project's file and is not checked.

The specs live in docs/specs/ (index: docs/specs/README.md). Exit status 1 with one line per problem,
`file:line: what`, and how to fix it; 0 when every citation resolves. Standard library only.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

SOURCE_SUFFIXES = (".rs", ".py", ".sh", ".wit", ".toml")
OUTSIDE_DOCS = (
    "domain",
    "agentx-v1",
    "agentx-harness",
    "inferencex-v1",
    "inferencex-v2",
    "inferencex-app",
    "real-server",
    "guest-toolchain",
)
SECTION_SIGN = "\u00a7"
OUTSIDE_CITATION = re.compile(
    r"(?<![\w/-])(" + "|".join(re.escape(name) for name in OUTSIDE_DOCS) + r")"
    r"(\.md\b|\s?" + SECTION_SIGN + r")"
)
SHARED_DOCS = re.compile(r"\bshared/docs/")
ALLOWED_BEFORE_SECTION = re.compile(r"RFC ?\d+\s*$")
DOC_LINK = re.compile(r"(?<![\w./-])(docs/[\w./-]+?\.md)(#[\w-]*)?")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
# Another project's name right before a `docs/` path: the path is inside that project.
OTHER_PROJECT_BEFORE = re.compile(
    r"(?:\baiperf|\bInferenceX(?:-app)?|\bagentx-harness|\bkv-cache-tester|\b[\w.-]+/[\w.-]+(?:@\w+)?)"
    r"(?:'s)?\s*[`'\"(]?$"
)
THIS_FILE = ".ci/check_spec_citations.py"


def repo_root() -> pathlib.Path:
    out = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True
    )
    return pathlib.Path(out.stdout.strip())


def tracked_files(root: pathlib.Path) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True
    )
    return [name for name in out.stdout.split("\0") if name]


def github_slug(heading: str) -> str:
    """The id GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors_of(path: pathlib.Path) -> set[str]:
    """Every anchor a Markdown file offers: its headings' ids (repeats numbered) and explicit ids."""
    anchors: set[str] = set()
    seen: dict[str, int] = {}
    in_fence = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        anchors.update(EXPLICIT_ANCHOR.findall(line))
        match = HEADING.match(line)
        if not match:
            continue
        slug = github_slug(match.group(2))
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def check_line(
    root: pathlib.Path, name: str, number: int, line: str, anchor_cache: dict[str, set[str]]
) -> list[str]:
    problems = []
    where = f"{name}:{number}"
    for match in OUTSIDE_CITATION.finditer(line):
        problems.append(
            f"{where}: cites `{match.group(0).strip()}`, a document outside the repository; "
            "cite the section of docs/specs/ that states the rule (docs/specs/README.md lists them), "
            "or drop the citation if the sentence stands on its own"
        )
    if SHARED_DOCS.search(line):
        problems.append(
            f"{where}: cites a file under shared/docs/, which is not in the repository; "
            "cite docs/specs/ or say what the file says"
        )
    for position, char in enumerate(line):
        if char != SECTION_SIGN:
            continue
        before = line[:position]
        if ALLOWED_BEFORE_SECTION.search(before):
            continue
        if OUTSIDE_CITATION.search(line[max(0, position - 24) : position + 1]):
            continue  # already reported as an outside citation
        problems.append(
            f"{where}: a section sign ({SECTION_SIGN}) without a document names nothing; "
            "link the section as docs/specs/<file>.md#<anchor>"
        )
    for match in DOC_LINK.finditer(line):
        doc, anchor = match.group(1), match.group(2)
        if OTHER_PROJECT_BEFORE.search(line[: match.start()]):
            continue
        path = root / doc
        if not path.is_file():
            problems.append(f"{where}: links `{doc}`, which is not a file of the repository")
            continue
        if not anchor:
            continue
        if doc not in anchor_cache:
            anchor_cache[doc] = anchors_of(path)
        if anchor[1:] not in anchor_cache[doc]:
            problems.append(
                f"{where}: links `{doc}{anchor}`, but `{doc}` has no heading with that id; "
                f"its headings give: {', '.join(sorted(anchor_cache[doc])) or 'none'}"
            )
    return problems


def main() -> int:
    root = repo_root()
    anchor_cache: dict[str, set[str]] = {}
    problems: list[str] = []
    checked = 0
    for name in tracked_files(root):
        if not name.endswith(SOURCE_SUFFIXES) or name == THIS_FILE:
            continue
        path = root / name
        if not path.is_file():
            continue  # deleted in the work tree
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        checked += 1
        for number, line in enumerate(text.splitlines(), start=1):
            problems.extend(check_line(root, name, number, line, anchor_cache))
    for problem in problems:
        print(problem)
    if problems:
        print(f"check_spec_citations: {len(problems)} problem(s) in {checked} source files")
        return 1
    print(f"check_spec_citations: {checked} source files, every spec citation resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
