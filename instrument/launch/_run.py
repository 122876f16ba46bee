"""One instrumented run of training code, and its launch record.

The script the launcher runs as `__main__` (instrument.launch) and each rank
that the script starts with torch.multiprocessing.spawn
(instrument.launch.spawned) go through `instrumented`: the session and its
emitter, the profiling window, compiled-kernel provenance, the model's first
call for the FLOP count, then how the code ended; `launch_record` turns that
into launch.json (instrument/contract.py).
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
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


class Terminated(BaseException):
    """Raised in the script when the launcher receives SIGTERM."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated("SIGTERM")


@contextmanager
def sigterm_raises() -> Iterator[None]:
    """SIGTERM raises Terminated inside (unless the script set its own handler before)."""
    handler = None
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        handler = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        if handler is not None:
            signal.signal(signal.SIGTERM, handler)


@dataclass(frozen=True)
class Ended:
    """How an instrumented run ended and what it left."""

    error: BaseException | None
    steps_seen: int
    window: ProfileWindow
    compiles: int
    compiled: str | None  # compiled.json, when written
    flops_written: bool
    wall_s: float


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


def instrumented(opts: argparse.Namespace, body: Callable[[], object]) -> Ended:
    """Run `body` with the instrumentation installed and steps N .. N+M-1 profiled."""
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
        body()
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
    steps = session.steps_completed
    return Ended(error, steps, window, compiles, compiled, flops_written, wall_s)


def outcome(
    exc: BaseException | None, script: str, show: bool = True
) -> tuple[int, str | None, bool]:
    """(exit_status, exception line, interrupted) for how the script ended; with `show`,
    prints like Python."""
    if exc is None:
        return 0, None, False
    if isinstance(exc, SystemExit):
        code = exc.code
        if code is None or isinstance(code, int):
            status = code or 0
        else:
            if show:
                print(code, file=sys.stderr)
            status = 1
        return status, (f"SystemExit: {code}" if status else None), False
    if show:
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


def launch_record(
    opts: argparse.Namespace,
    argv: list[str],
    ended: Ended,
    ending: tuple[int, str | None, bool],
    **more: Any,
) -> LaunchRecord:
    """launch.json of an instrumented run (`ending`: see `outcome`; `more`: optional fields)."""
    status, line, interrupted = ending
    window = ended.window
    return LaunchRecord(
        backend=opts.backend,
        script=argv[0],
        argv=argv,
        exit_status=status,
        exception=line,
        interrupted=interrupted,
        steps_seen=ended.steps_seen,
        profiled_steps=window.profiled if opts.backend != "off" else None,
        trace=window.trace,
        flops=contract.FLOPS if ended.flops_written else None,
        compile=CompileRecord(
            compilations=ended.compiles,
            profiled_compilations=window.compiles_profiled,
            profiled_compile_s=round(window.compile_ns_profiled / 1e9, 6),
            warmup_waited_steps=window.waited,
            provenance=ended.compiled,
        ),
        torch_version=torch.__version__,
        cuda_device=torch.cuda.get_device_name() if torch.cuda.is_available() else None,
        wall_s=round(ended.wall_s, 6),
        notes=window.notes,
        peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        **more,
    )
