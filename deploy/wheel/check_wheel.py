#!/usr/bin/env python3
"""The manylinux check of an agentx wheel: its platform tag, the glibc its binary needs, auditwheel.

A wheel tagged manylinux_2_17 (manylinux2014) promises to run on glibc 2.17 and newer. Running it
on this machine proves nothing (its glibc is newer), so the proof is read from the binary itself:

1. the wheel's tag (file name and the WHEEL file's `Tag:` lines) is manylinux_2_17_<arch>, the
   architecture the caller expects;
2. every ELF file in the wheel needs no `GLIBC_x.y` symbol version newer than --max-glibc (the
   `.gnu.version_r` section as `readelf --version-info` prints it; readelf reads any architecture);
3. `auditwheel show` says the wheel is consistent with manylinux_2_17_<arch>.

One home for the check: tests/py/wheel_test.sh --manylinux (CI, dev profile) and
deploy/wheel/build.sh (the release wheels, x86_64 and aarch64) both run it.

Usage: check_wheel.py WHEEL --arch x86_64|aarch64 [--max-glibc 2.17] [--auditwheel PATH]
Exit status 0 only if every check passed; each failure names the file and what to do.
"""

import argparse
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

GLIBC_NEED = re.compile(r"Name: GLIBC_(\d+(?:\.\d+)+)")


def version_tuple(text):
    return tuple(int(part) for part in text.split("."))


def wheel_tags(wheel, archive):
    """The tags the file name and the WHEEL metadata give (they must agree)."""
    name_tags = set()
    # name-version(-build)?-python-abi-platform.whl; the platform part may hold several, dotted
    parts = wheel.name[: -len(".whl")].split("-")
    if len(parts) < 5:
        raise CheckFailed(f"{wheel}: not a wheel file name (name-version-python-abi-platform.whl)")
    name_tags.update(parts[-1].split("."))
    metadata = [n for n in archive.namelist() if n.endswith(".dist-info/WHEEL")]
    if len(metadata) != 1:
        raise CheckFailed(f"{wheel}: expected one *.dist-info/WHEEL, found {len(metadata)}")
    wheel_file_tags = set()
    for line in archive.read(metadata[0]).decode().splitlines():
        if line.startswith("Tag: "):
            wheel_file_tags.add(line[len("Tag: ") :].strip().split("-")[-1])
    if wheel_file_tags != name_tags:
        raise CheckFailed(
            f"{wheel}: the file name's platform tags {sorted(name_tags)} differ from "
            f"{metadata[0]}'s {sorted(wheel_file_tags)}; rebuild the wheel instead of renaming it"
        )
    return name_tags


def glibc_needs(path):
    """The GLIBC_ symbol versions one ELF file needs, from readelf's version-needs listing."""
    result = subprocess.run(
        ["readelf", "--version-info", "--wide", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise CheckFailed(f"readelf --version-info {path} failed: {result.stderr.strip()}")
    needs_section = result.stdout.split("Version needs section", 1)
    if len(needs_section) < 2:
        return set()
    return {m.group(1) for m in GLIBC_NEED.finditer(needs_section[1])}


def check_binaries(wheel, archive, max_glibc):
    """Every ELF file of the wheel, checked; returns the highest GLIBC_ version any of them needs."""
    highest = None
    found_elf = False
    with tempfile.TemporaryDirectory() as scratch:
        for member in archive.namelist():
            data = archive.read(member)
            if not data.startswith(b"\x7fELF"):
                continue
            found_elf = True
            path = Path(scratch) / Path(member).name
            path.write_bytes(data)
            needs = sorted(glibc_needs(path), key=version_tuple)
            if not needs:
                print(f"check_wheel: {member}: needs no GLIBC_ symbol version")
                continue
            print(f"check_wheel: {member}: needs GLIBC_{', GLIBC_'.join(needs)}")
            newest = needs[-1]
            if version_tuple(newest) > version_tuple(max_glibc):
                raise CheckFailed(
                    f"{wheel}: {member} needs GLIBC_{newest}, newer than {max_glibc}: it was linked "
                    f"against this machine's glibc; build with zig for glibc {max_glibc} "
                    "(maturin build --zig --compatibility manylinux2014, or tests/py/manylinux_env.sh)"
                )
            if highest is None or version_tuple(newest) > version_tuple(highest):
                highest = newest
    if not found_elf:
        raise CheckFailed(f"{wheel}: holds no ELF file; expected the agentx-host binary")
    return highest


def check_auditwheel(wheel, auditwheel, policy):
    result = subprocess.run(
        [auditwheel, "show", str(wheel)], capture_output=True, text=True, check=False
    )
    output = (result.stdout + result.stderr).strip()
    print(f"check_wheel: {auditwheel} show:")
    print("  " + "\n  ".join(output.splitlines()))
    if result.returncode != 0:
        raise CheckFailed(f"{wheel}: auditwheel show failed (exit {result.returncode}); see above")
    if f'platform tag: "{policy}"' not in " ".join(output.split()):
        raise CheckFailed(f"{wheel}: auditwheel show does not find the wheel consistent with {policy}")


class CheckFailed(Exception):
    pass


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    parser.add_argument("--arch", required=True, choices=["x86_64", "aarch64"])
    parser.add_argument("--max-glibc", default="2.17")
    parser.add_argument("--auditwheel", default="auditwheel", help="the auditwheel command")
    args = parser.parse_args()
    policy = f"manylinux_{args.max_glibc.replace('.', '_')}_{args.arch}"
    try:
        with zipfile.ZipFile(args.wheel) as archive:
            tags = wheel_tags(args.wheel, archive)
            if policy not in tags:
                raise CheckFailed(
                    f"{args.wheel}: platform tags {sorted(tags)}, expected {policy}: build with "
                    "--compatibility manylinux2014 (and --target for another architecture)"
                )
            highest = check_binaries(args.wheel, archive, args.max_glibc)
        check_auditwheel(args.wheel, args.auditwheel, policy)
    except (CheckFailed, zipfile.BadZipFile, FileNotFoundError) as error:
        print(f"check_wheel: FAIL: {error}", file=sys.stderr)
        return 1
    print(
        f"check_wheel: PASS: {args.wheel.name}: tag {policy}, highest GLIBC_ needed "
        f"{highest}, at most {args.max_glibc}; auditwheel agrees"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
