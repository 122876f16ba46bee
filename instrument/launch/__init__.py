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
"""

from __future__ import annotations

import argparse
import os
import runpy
import signal
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

import instrument
from instrument import contract
from instrument.contract import CompileRecord, LaunchRecord
from instrument.launch._root_call import RootCall
from instrument.launch._window import ProfileWindow
from instrument.launch.provenance import Provenance

EMIT = {"nsys": "nvtx", "torch": "torch", "off": "off"}
_FLAGS = {"--no-record-shapes", "--no-flops", "-h", "--help"}


class Terminated(BaseException):
    """Raised in the script when the launcher receives SIGTERM."""


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
    return opts, rest[0], rest[1:]


@contextmanager
def _as_main(script: str, args: list[str]) -> Iterator[None]:
    """sys.argv and sys.path[0] as `python SCRIPT ARGS...` would set them; SIGTERM raises."""
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    handler = None
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        handler = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated("SIGTERM")


def _outcome(exc: BaseException | None, script: str) -> tuple[int, str | None, bool]:
    """(exit_status, exception line, interrupted) for how the script ended; prints like Python."""
    if exc is None:
        return 0, None, False
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None or isinstance(code, int):
            status = code or 0
        else:
            print(code, file=sys.stderr)
            status = 1
        return status, (f"SystemExit: {code}" if status else None), False
    _print_script_traceback(exc, script)
    line = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    line = " ".join(line.split())
    if isinstance(exc, KeyboardInterrupt):
        return 130, line, True
    if isinstance(exc, Terminated):
        return 143, line, True
    return 1, line, False


def _print_script_traceback(exc: BaseException, script: str) -> None:
    """The traceback from the script's own frame down, as `python SCRIPT` prints it."""
    path = os.path.abspath(script)
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != path:
        tb = tb.tb_next
    traceback.print_exception(type(exc), exc, tb if tb is not None else exc.__traceback__)
    sys.stderr.flush()


def _root_call(opts: argparse.Namespace, session: Any) -> RootCall | None:
    """The recorder of the model's first call, unless FLOPs are off; no stale flops.json."""
    (opts.out / contract.FLOPS).unlink(missing_ok=True)
    return None if opts.backend == "off" or opts.no_flops else RootCall(session)


def _provenance(opts: argparse.Namespace, session: Any) -> Provenance | None:
    """The kernel-provenance recorder (not for backend off); no stale compiled.json."""
    (opts.out / contract.COMPILED).unlink(missing_ok=True)
    if opts.backend == "off":
        return None
    provenance = Provenance()
    session.compile_watch.start_listeners.append(provenance.compile_started)
    return provenance


def _write_provenance(provenance: Provenance | None, out: Path, notes: list[str]) -> str | None:
    """Write DIR/compiled.json when the script compiled; its notes join the run's."""
    if provenance is None:
        return None
    try:
        written = provenance.write(out)
    except OSError as exc:
        notes.append(f"compiled.json not written: {exc}")
        return None
    notes.extend(provenance.notes)
    return written


def _count_flops(
    root_call: RootCall | None, out: Path, error: BaseException | None, notes: list[str]
) -> bool:
    """Write DIR/flops.json (not after an interrupt); True when written, else a note."""
    if root_call is None:
        return False
    note = root_call.write(out, interrupted=isinstance(error, (KeyboardInterrupt, Terminated)))
    if note is not None:
        notes.append(note)
    return note is None


def run(opts: argparse.Namespace, script: str, args: list[str]) -> int:
    """Run the script under instrumentation; write launch.json; return the exit status."""
    opts.out.mkdir(parents=True, exist_ok=True)
    window = ProfileWindow(
        opts.backend, opts.out, opts.warmup_steps, opts.steps, not opts.no_record_shapes
    )
    session = instrument.install(emit=EMIT[opts.backend])
    session.add_step_listener(window.step_started, window.step_ended)
    session.compile_watch.listeners.append(window.compiled)
    provenance = _provenance(opts, session)
    root_call = _root_call(opts, session)
    start, error = time.perf_counter(), None
    try:
        with _as_main(script, args):
            runpy.run_path(script, run_name="__main__")
    except BaseException as exc:  # the script's outcome is reported, not re-raised
        error = exc
    wall_s = time.perf_counter() - start
    compiles = session.compile_watch.compiles
    cleanups = [instrument.uninstall, lambda: window.finish(session.steps_completed)]
    if provenance is not None:
        cleanups.append(provenance.uninstall)
    for cleanup in cleanups:
        try:
            cleanup()
        except Exception as exc:  # launch.json must still be written
            window.notes.append(f"cleanup failed: {type(exc).__name__}: {exc}")
    compiled = _write_provenance(provenance, opts.out, window.notes)
    flops_written = _count_flops(root_call, opts.out, error, window.notes)
    status, line, interrupted = _outcome(error, script)
    record = LaunchRecord(
        backend=opts.backend,
        script=script,
        argv=[script, *args],
        exit_status=status,
        exception=line,
        interrupted=interrupted,
        steps_seen=session.steps_completed,
        profiled_steps=window.profiled if opts.backend != "off" else None,
        trace=window.trace,
        flops=contract.FLOPS if flops_written else None,
        compile=CompileRecord(
            compilations=compiles,
            profiled_compilations=window.compiles_profiled,
            profiled_compile_s=round(window.compile_ns_profiled / 1e9, 6),
            warmup_waited_steps=window.waited,
            provenance=compiled,
        ),
        torch_version=torch.__version__,
        cuda_device=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        wall_s=round(wall_s, 6),
        notes=window.notes,
    )
    contract.write_launch_record(opts.out, record)
    for note in window.notes:
        print(f"instrument.launch: {note}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    """Entry point of `python -m instrument.launch`."""
    opts, script, args = parse(sys.argv[1:] if argv is None else argv)
    return run(opts, script, args)
