#!/usr/bin/env python3
"""Fails when the modules of one crate import each other in a circle.

For every library crate of the workspace (the root's `host/src/lib.rs` and each `crates/*/src/lib.rs`)
it reads the module tree from the `mod` declarations (test modules left out), and draws an edge from a
module to every other module of the crate that one of its paths names (`crate::a::b`, `super::x`,
`self::y`, a child or an imported module by name). A module naming its own descendants is
containment, not an import, and draws no edge. Each strongly connected set of more than one module
is a cycle: printed with the names that tie it, and the exit code is 1.

Usage: python3 .ci/check_module_cycles.py [CRATE_SRC_DIR...]
"""

import glob
import os
import re
import sys

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip_comments_and_strings(src):
    """The source with comments, string and char literals blanked (newlines kept)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append("\n" * src.count("\n", i, j))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:i + 40]) and not re.match(r"\w", src[i - 1] if i else " "):
            hashes = re.match(r'r(#*)"', src[i:]).group(1)
            end = src.find('"' + hashes, i + 2 + len(hashes))
            end = n if end < 0 else end + 1 + len(hashes)
            out.append('""' + "\n" * src.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            out.append('""' + "\n" * src.count("\n", i, j))
            i = j + 1
        elif c == "'":
            m = re.match(r"'(\\.[^']*|[^\\'])'", src[i:i + 12])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def drop_test_modules(code):
    """Removes `#[cfg(test)] mod name { ... }` blocks and `#[cfg(test)] mod name;` lines."""
    pattern = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+" + IDENT + r"\s*([;{])")
    while True:
        m = pattern.search(code)
        if not m:
            return code
        if m.group(1) == ";":
            code = code[:m.start()] + code[m.end():]
            continue
        depth, j = 1, m.end()
        while j < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[j], 0)
            j += 1
        code = code[:m.start()] + "\n" * code.count("\n", m.start(), j) + code[j:]


def expand_use_tree(tree):
    """`a::{b, c::{d, e as f}, self}` -> [("a::b", "b"), ("a::c::d", "d"), ("a::c::e", "f"), ("a", "a")]:
    each path the tree imports, with the name it is imported under."""
    tree = tree.strip()
    brace = tree.find("{")
    if brace < 0:
        path, _, alias = re.sub(r"\s+", " ", tree).partition(" as ")
        path = path.replace(" ", "")
        return [(path, alias.strip() or path.split("::")[-1])]
    prefix, inner = tree[:brace].strip().rstrip(":").replace(" ", ""), tree[brace + 1:tree.rindex("}")]
    parts, level, start = [], 0, 0
    for j, ch in enumerate(inner):
        level += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and level == 0:
            parts.append(inner[start:j])
            start = j + 1
    parts.append(inner[start:])
    imported = []
    for part in filter(str.strip, parts):
        for sub, name in expand_use_tree(part):
            if sub == "self":
                imported.append((prefix, prefix.split("::")[-1] if name == "self" else name))
            else:
                imported.append((prefix + "::" + sub if prefix else sub, name))
    return imported


class Crate:
    def __init__(self, src_dir):
        self.src_dir = src_dir
        self.files = {}  # module path (tuple) -> file
        self.children = {}  # module path -> set of child names
        root = os.path.join(src_dir, "lib.rs")
        self._load((), root, src_dir)

    def _load(self, path, file, child_dir):
        self.files[path] = file
        self.children[path] = set()
        code = drop_test_modules(strip_comments_and_strings(open(file, encoding="utf-8").read()))
        decl = re.compile(r"(#\[path\s*=\s*\"\"\]\s*)?(?:pub(?:\([^)]*\))?\s+)?mod\s+(" + IDENT + r")\s*;")
        raw = open(file, encoding="utf-8").read()
        for m in decl.finditer(code):
            name = m.group(2)
            explicit = re.search(r'#\[path\s*=\s*"([^"]+)"\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+' + name + r"\s*;", raw)
            if explicit:
                target = os.path.join(os.path.dirname(file), explicit.group(1))
            else:
                target = next((p for p in (os.path.join(child_dir, name + ".rs"),
                                           os.path.join(child_dir, name, "mod.rs")) if os.path.exists(p)), None)
            if target is None:
                continue
            self.children[path].add(name)
            base = os.path.basename(target)
            sub_dir = os.path.dirname(target) if base == "mod.rs" else os.path.join(os.path.dirname(target), name)
            self._load(path + (name,), target, sub_dir)

    def deepest(self, start, segments):
        """The module a path from module `start` lands in, following module segments only."""
        here = start
        for seg in segments:
            if seg in self.children.get(here, ()):
                here = here + (seg,)
            else:
                break
        return here

    def resolve(self, module, path, aliases):
        segs = path.split("::")
        if segs[0] == "crate":
            return self.deepest((), segs[1:])
        if segs[0] in ("super", "self"):
            here = module
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    here = here[:-1]
                segs = segs[1:]
            return self.deepest(here, segs)
        if segs[0] in self.children.get(module, ()):
            return self.deepest(module, segs)
        if segs[0] in aliases:
            return self.deepest(aliases[segs[0]], segs[1:])
        return None

    def edges(self, module):
        """Modules `module` names, each with the paths that name it."""
        code = drop_test_modules(strip_comments_and_strings(open(self.files[module], encoding="utf-8").read()))
        found, aliases = {}, {}
        uses = re.findall(r"\buse\s+([^;]+);", code)
        for tree in uses:
            for path, name in expand_use_tree(tree):
                target = self.resolve(module, path, aliases)
                if target is None:
                    continue
                if target and target[-1] == path.split("::")[-1]:
                    aliases[name] = target  # a module imported by name
                found.setdefault(target, set()).add(path)
        for m in re.finditer(r"\b((?:crate|super|self|" + IDENT + r")(?:::" + IDENT + r")+)", code):
            target = self.resolve(module, m.group(1), aliases)
            if target is not None:
                found.setdefault(target, set()).add(m.group(1))
        return {t: p for t, p in found.items() if t != module and t[:len(module)] != module}


def cycles(crate):
    graph = {m: crate.edges(m) for m in crate.files}
    index, low, stack, on, sccs = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(sorted(scc))

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return graph, sccs


def main(argv):
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    dirs = argv or ["host/src"] + sorted(d for d in glob.glob("crates/*/src") if os.path.exists(d + "/lib.rs"))
    bad = 0
    for src_dir in dirs:
        crate = Crate(src_dir)
        graph, sccs = cycles(crate)
        for scc in sccs:
            bad += 1
            name = lambda m: "::".join(m) or "(root)"
            print(f"{src_dir}: module cycle: " + ", ".join(name(m) for m in scc))
            for a in scc:
                for b in scc:
                    if b in graph[a]:
                        print(f"  {crate.files[a]} -> {name(b)}: {', '.join(sorted(graph[a][b])[:4])}")
        print(f"{src_dir}: {len(crate.files)} modules, {sum(len(e) for e in graph.values())} edges, "
              f"{len(sccs)} cycles")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
