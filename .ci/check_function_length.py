#!/usr/bin/env python3
"""Fail when a Rust function in the repository runs past the length limit.

Scans every tracked `*.rs` file (`git ls-files`), finds each `fn` item (free functions, methods,
nested functions, with any of `pub(...)`, `const`, `async`, `unsafe`, `extern "C"` in front) and
counts its lines from the line of its `fn` keyword to the line of its closing brace. Comments,
string literals (raw ones included) and character literals are blanked out first, so a brace
inside them is not counted. A declaration without a body (a trait method, an extern item) and a
function pointer type (`fn(u32) -> u32`) are not items with a length.

Prints `path:line: fn NAME is N lines (limit 150)` for each function over the limit and exits 1;
when every function is within it, prints one summary line and exits 0.
"""

import re
import subprocess
import sys
from pathlib import Path

LIMIT = 150

FN_ITEM = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")


def is_ident_char(char):
    return char.isalnum() or char == "_"


def blank(text):
    """Spaces for every character except a newline."""
    return "".join("\n" if char == "\n" else " " for char in text)


def raw_string_end(source, start):
    """If a raw string literal (`r"…"`, `r#"…"#`, with a `b`/`c` prefix) begins at `start`, the
    index just past it; otherwise None."""
    index = start
    if source[index] in "bc":
        index += 1
    if index >= len(source) or source[index] != "r":
        return None
    index += 1
    hashes = 0
    while index < len(source) and source[index] == "#":
        hashes += 1
        index += 1
    if index >= len(source) or source[index] != '"':
        return None
    closing = '"' + "#" * hashes
    end = source.find(closing, index + 1)
    if end < 0:
        return len(source)
    return end + len(closing)


def strip_literals(source):
    """The source with comments, string and character literals blanked (newlines kept), so that
    the braces and keywords left are the code's own."""
    out = []
    index = 0
    length = len(source)
    while index < length:
        char = source[index]
        follows_ident = index > 0 and is_ident_char(source[index - 1])
        if char == "/" and source.startswith("//", index):
            end = source.find("\n", index)
            end = length if end < 0 else end
            out.append(blank(source[index:end]))
            index = end
        elif char == "/" and source.startswith("/*", index):
            depth = 0
            end = index
            while end < length:
                if source.startswith("/*", end):
                    depth += 1
                    end += 2
                elif source.startswith("*/", end):
                    depth -= 1
                    end += 2
                    if depth == 0:
                        break
                else:
                    end += 1
            out.append(blank(source[index:end]))
            index = end
        elif char in "bcr" and not follows_ident and raw_string_end(source, index) is not None:
            end = raw_string_end(source, index)
            out.append(blank(source[index:end]))
            index = end
        elif char == '"':
            end = index + 1
            while end < length and source[end] != '"':
                end += 2 if source[end] == "\\" else 1
            end = min(end + 1, length)
            out.append(blank(source[index:end]))
            index = end
        elif char == "'":
            end = char_literal_end(source, index)
            if end is None:  # a lifetime or a loop label
                out.append(char)
                index += 1
            else:
                out.append(blank(source[index:end]))
                index = end
        else:
            out.append(char)
            index += 1
    return "".join(out)


def char_literal_end(source, start):
    """If a character literal begins at `start` (a quote), the index just past it; None for a
    lifetime (`'a`, `'static`) or a label."""
    if start + 1 >= len(source):
        return None
    if source[start + 1] == "\\":
        end = start + 3  # past the escaped character, which may itself be a quote
        while end < len(source) and source[end] != "'":
            end += 1
        return end + 1
    if start + 2 < len(source) and source[start + 2] == "'":
        return start + 3
    return None


def function_spans(code):
    """(name, first line, last line) of every `fn` item with a body in blanked source."""
    line_starts = [0]
    for position, char in enumerate(code):
        if char == "\n":
            line_starts.append(position + 1)

    def line_of(position):
        low, high = 0, len(line_starts) - 1
        while low < high:
            middle = (low + high + 1) // 2
            if line_starts[middle] <= position:
                low = middle
            else:
                high = middle - 1
        return low + 1

    spans = []
    for match in FN_ITEM.finditer(code):
        before = code[match.start() - 1] if match.start() > 0 else " "
        if is_ident_char(before) or before == "$":  # part of a longer name, or a macro's `$fn`
            continue
        body = body_open(code, match.end())
        if body is None:
            continue
        close = matching_brace(code, body)
        spans.append((match.group(1), line_of(match.start()), line_of(close)))
    return spans


def body_open(code, start):
    """The index of the `{` that opens the body of a function whose signature starts at `start`,
    or None when the signature ends with `;` (no body)."""
    depth = 0
    index = start
    while index < len(code):
        char = code[index]
        if char in "([":
            depth += 1
        elif char in ")]":
            depth -= 1
        elif depth == 0 and char == ";":
            return None
        elif depth == 0 and char == "{":
            return index
        index += 1
    return None


def matching_brace(code, open_index):
    depth = 0
    for index in range(open_index, len(code)):
        if code[index] == "{":
            depth += 1
        elif code[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    return len(code) - 1


def tracked_rust_files(root):
    listing = subprocess.run(
        ["git", "ls-files", "-z", "--", "*.rs"],
        cwd=root,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return sorted(path for path in listing.split("\0") if path)


def main():
    root = Path(__file__).resolve().parent.parent
    offenders = []
    functions = 0
    longest = (0, "", "")
    files = tracked_rust_files(root)
    for path in files:
        source = (root / path).read_text(encoding="utf-8")
        for name, first, last in function_spans(strip_literals(source)):
            functions += 1
            lines = last - first + 1
            if lines > longest[0]:
                longest = (lines, f"{path}:{first}", name)
            if lines > LIMIT:
                offenders.append(f"{path}:{first}: fn {name} is {lines} lines (limit {LIMIT})")
    for offender in offenders:
        print(offender)
    if offenders:
        print(f"{len(offenders)} function(s) over {LIMIT} lines; split them into named steps")
        return 1
    print(
        f"function length: {len(files)} files, {functions} functions, "
        f"longest {longest[0]} lines (fn {longest[2]} at {longest[1]}), limit {LIMIT}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
