"""The behaviour of the stand-in `nsys` (see tests/fake_nsys/__init__.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

VERSION = "NVIDIA Nsight Systems version 2026.2.1.210-stand-in"
REPORT_HEAD = b"fake nsys report\n"
_ENV_REFERENCE = re.compile(r"%q\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(text: str, env: dict[str, str]) -> str:
    """`%q{NAME}` replaced by NAME's value in `env`, as nsys expands its --output."""
    return _ENV_REFERENCE.sub(lambda m: env.get(m.group(1), ""), text)


_SHORT_WITH_VALUE = {"-o", "-t", "-s", "-c", "-f", "-x", "-w"}


def _record(argv: list[str]) -> None:
    log = os.environ.get("FAKE_NSYS_LOG")
    if log:
        with open(log, "a") as fh:
            fh.write(json.dumps(argv) + "\n")


def _options(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """nsys options (`--name=value`, `-x value`) up to the first other word."""
    opts: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        arg = args[i]
        if arg.startswith("--") and "=" in arg:
            key, value = arg[2:].split("=", 1)
            opts[key] = value
            i += 1
        elif arg in _SHORT_WITH_VALUE:
            opts[arg] = args[i + 1]
            i += 2
        else:
            sys.exit(f"fake nsys: unknown option {arg}")
    return opts, args[i:]


def profile(args: list[str]) -> int:
    opts, program = _options(args)
    if not program:
        sys.exit("fake nsys: no program to profile")
    child = subprocess.Popen(program)
    while True:
        try:
            status = child.wait()
            break
        except KeyboardInterrupt:  # like nsys: keep waiting for the program to end
            continue
    if not os.environ.get("FAKE_NSYS_NO_REPORT"):
        report = Path(_expand(opts["output"], dict(os.environ)) + ".nsys-rep")
        # Like a real report, it keeps the environment it ran the program with (RANK here).
        said = {"RANK": os.environ["RANK"]} if "RANK" in os.environ else {}
        report.write_bytes(REPORT_HEAD + json.dumps(said).encode() + b"\n")
        print(f"Generated:\n    {report}")
    else:
        print("No reports were generated", file=sys.stderr)
    return status


def export(args: list[str]) -> int:
    opts, rest = _options(args)
    if len(rest) != 1 or not Path(rest[0]).is_file():
        print(f"ERROR: report file not found: {rest}", file=sys.stderr)
        return 1
    if os.environ.get("FAKE_NSYS_EXPORT_FAIL"):
        print("Exporting...\nERROR: the report file is corrupt", file=sys.stderr)
        return 1
    if opts.get("type") != "sqlite":
        print(f"ERROR: unsupported type {opts.get('type')}", file=sys.stderr)
        return 1
    lines = Path(rest[0]).read_bytes().splitlines()
    env = json.loads(lines[1]) if len(lines) > 1 else {}
    shutil.copyfile(_expand(os.environ["FAKE_NSYS_EXPORT_FROM"], env), opts["output"])
    return 0


def main(argv: list[str]) -> int:
    _record([globals().get("ARGV0", sys.argv[0]), *argv])  # the path nsysmap ran
    if argv[:1] == ["--version"]:
        print(VERSION)
        return 0
    if argv[:1] == ["profile"]:
        return profile(argv[1:])
    if argv[:1] == ["export"]:
        return export(argv[1:])
    print(f"fake nsys: unsupported command {argv[:1]}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
