"""Run a training script unmodified, instrumented, profiling a window of steps.

    python -m instrument.launch --backend {nsys,torch,off} --out DIR
        [--warmup-steps N] [--steps M] [--no-record-shapes] [--no-flops] SCRIPT [ARGS...]

SCRIPT runs as `__main__` (sys.argv = [SCRIPT, *ARGS], sys.path[0] = its
directory) with the instrumentation installed: emitter "nvtx" for nsys,
"torch" for torch, "off" for off. Steps N .. N+M-1 are profiled (M=0: until
the script ends). DIR/launch.json is always written, also when the script
raises or is interrupted; see docs/instrumentation.md for its fields. Unless
--no-flops (or backend off), the model's first forward call is recorded and
its FLOPs counted on fake tensors after the run, into DIR/flops.json. A
script that compiles (torch.compile) is profiled once compilation has settled,
and which module each compiled kernel came from goes to DIR/compiled.json
(docs/compile.md).

`%q{NAME}` in DIR is the environment variable NAME, as for nsys: `--out
OUT/capture/rank%q{RANK}` gives each rank of a torchrun job its own directory.
Ranks the script starts itself with torch.multiprocessing.spawn are
instrumented too, each into DIR/rank<i>/ (instrument/launch/spawned.py).
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from instrument import contract
from instrument.launch._run import EMIT, instrumented, launch_record, outcome, sigterm_raises
from instrument.launch.spawned import ChildWatch

_FLAGS = {"--no-record-shapes", "--no-flops", "-h", "--help"}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m instrument.launch", description=__doc__)
    parser.add_argument("--backend", choices=sorted(EMIT), required=True)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--warmup-steps", type=int, default=1, metavar="N")
    parser.add_argument("--steps", type=int, default=3, metavar="M")
    parser.add_argument("--no-record-shapes", action="store_true")
    parser.add_argument("--no-flops", action="store_true", help="do not write DIR/flops.json")
    return parser


def parse(argv: list[str]) -> tuple[argparse.Namespace, str, list[str]]:
    """Launcher options, then SCRIPT, then the script's own arguments (left untouched)."""
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":
        i += 1 if argv[i] in _FLAGS or "=" in argv[i] else 2
    parser = _parser()
    opts = parser.parse_args(argv[:i])
    rest = argv[i + 1 :] if i < len(argv) and argv[i] == "--" else argv[i:]
    if not rest:
        parser.error("SCRIPT is required")
    if opts.warmup_steps < 0 or opts.steps < 0:
        parser.error("--warmup-steps and --steps must be >= 0")
    opts.out = Path(contract.expand_env(str(opts.out)))
    return opts, rest[0], rest[1:]


@contextmanager
def _as_main(script: str, args: list[str]) -> Iterator[None]:
    """sys.argv and sys.path[0] as `python SCRIPT ARGS...` would set them; SIGTERM raises."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    try:
        with sigterm_raises():
            yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _rank() -> int | None:
    """This process's rank in a torchrun job ($RANK), if it is one."""
    said = os.environ.get("RANK", "")
    return int(said) if said.isdigit() else None


def run(opts: argparse.Namespace, script: str, args: list[str]) -> int:
    """Run the script under instrumentation; write launch.json; return the exit status."""
    children = ChildWatch(opts, script)

    def body() -> None:
        with _as_main(script, args), children:
            runpy.run_path(script, run_name="__main__")

    ended = instrumented(opts, body)
    notes = ended.window.notes
    children.finish(ended.window, ended.steps_seen)
    ending = outcome(ended.error, script)
    record = launch_record(
        opts,
        [script, *args],
        ended,
        ending,
        rank=_rank(),
        spawned=children.spawned or None,
        child_processes=children.others,
    )
    contract.write_launch_record(opts.out, record)
    for note in notes:
        print(f"instrument.launch: {note}", file=sys.stderr)
    return ending[0]


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m instrument.launch`."""
    opts, script, args = parse(sys.argv[1:] if argv is None else argv)
    return run(opts, script, args)
