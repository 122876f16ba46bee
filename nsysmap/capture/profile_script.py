"""`nsysmap run`: profile a training script, then attribute what was captured.

    nsysmap run train.py -- --lr 3e-4
     1. backend   nsys when it is found ("auto"), else torch.profiler
     2. child     [nsys profile ...] python -m instrument.launch --backend B
                      --out DIR/capture train.py --lr 3e-4
                  its stdout and stderr are the user's; Ctrl-C is forwarded once
     3. capture   DIR/capture/report.nsys-rep -> nsys export -> report.sqlite,
                  or DIR/capture/trace.json
     4. analyse   the file flow `nsysmap attribute` runs (verbs.attribute_file:
                  streamed when large, one process at a time past --memory-gb),
                  + the model's FLOPs from DIR/capture/flops.json
                  -> DIR/*.parquet, manifest.json
     5. record    DIR/run.json: commands, backend, the script's exit status

A script that fails or is interrupted still has what was captured analysed;
`RunResult.failure()` then gives the error that carries its exit status.
Nothing captured at all is ProfilerFailed, or the script's own status when it failed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from instrument import contract
from instrument.contract import CAPTURE_DIR, LAUNCH_RECORD, REPORT_BASE
from instrument.contract import TRACE as TRACE_FILE
from nsysmap._version import __version__
from nsysmap.attribution.rules import BUILTIN, NameRules
from nsysmap.core import interrupts
from nsysmap.core.errors import (
    ExitCode,
    InputNotFound,
    NoGpuData,
    NsysmapError,
    ProfilerFailed,
    ScriptFailed,
)
from nsysmap.core.timings import Stages
from nsysmap.flops.flops_document import attach_model_flops
from nsysmap.flow.run_stages import Settings
from nsysmap.flow.verbs import Analysis, attribute_file
from nsysmap.output.placement import check_output_dir, remove_outputs, write_failed, write_file
from nsysmap.output.writer import OUTPUT_NAMES
from nsysmap.read.nsys import nsys_tool
from nsysmap.sources.input_kinds import NSYS_REPORT, NSYS_SQLITE

LAUNCHER_MODULE = "instrument.launch"
BACKENDS = ("auto", "nsys", "torch")
BACKEND_NAMES = {"nsys": "Nsight Systems", "torch": "torch.profiler"}
RUN_RECORD = "run.json"
# launch.json fields (instrument/contract.py) that manifest.json's options repeat.
LAUNCH_OPTIONS = ("steps_seen", "profiled_steps", "torch_version", "cuda_device")
Notify = Callable[[str], None]
Job = TypeVar("Job")


@dataclass(frozen=True)
class RunRequest:
    """What the user asked for; None leaves a setting to the launcher's default."""

    script: Path
    script_args: tuple[str, ...] = ()
    out_dir: Path | None = None
    backend: str = "auto"
    warmup_steps: int | None = None
    steps: int | None = None
    record_shapes: bool = True
    rules: NameRules = BUILTIN  # step and phase name rules for the attribution
    memory_gb: float | None = None  # the memory budget, as `nsysmap attribute --memory-gb`
    # Distributed training (nsysmap.capture.distributed; docs/run.md):
    nproc_per_node: int | None = None  # start this many ranks through torchrun's launcher
    one_nsys_report: bool = False  # one nsys report for the whole job, not one per rank
    scheduler: str | None = None  # the Dask scheduler that attributes the ranks (None: local)


@dataclass(frozen=True)
class RunResult:
    """A finished run whose capture was analysed (the script may have failed)."""

    script: Path
    backend: str  # "nsys" or "torch"
    backend_reason: str
    out_dir: Path
    exit_status: int
    interrupted: bool
    profiled_steps: int | None
    analysis: Analysis
    warnings: tuple[str, ...] = ()

    @property
    def summary_text(self) -> str:
        return self.analysis.summary_text

    def done_line(self) -> str:
        """The last line `nsysmap run` prints: the backend, why, and what was written where."""
        tables = len(self.analysis.manifest["tables"])
        return (
            f"Profiled with {BACKEND_NAMES[self.backend]} ({self.backend_reason}); "
            f"wrote {tables} tables, manifest.json and run.json to {self.out_dir}"
        )

    def failure(self) -> ScriptFailed | None:
        """The error to exit with when the script failed, else None."""
        if self.exit_status == 0 and not self.interrupted:
            return None
        how = "was interrupted" if self.interrupted else f"exited with status {self.exit_status}"
        n = self.profiled_steps
        what = "what was captured" if n is None else f"the {n} captured step{'s' * (n != 1)}"
        message = f"{self.script.name} {how}; outputs for {what} are in {self.out_dir}/"
        return ScriptFailed(message, status=self.exit_status or int(ExitCode.INTERRUPTED))


def run(
    request: RunRequest,
    *,
    notify: Notify = lambda _: None,
    launcher: Sequence[str] | None = None,
    spawned: Callable[[dict[str, Any], Path, Path | None], Job] | None = None,
) -> RunResult | Job:
    """Profile `request.script` under the launcher and analyse the capture.

    `notify` receives progress lines meant for the user (stderr in the CLI);
    `launcher` replaces `python -m instrument.launch`; `spawned(record, out_dir, nsys)`
    assembles the job of a script that spawned its ranks (capture/distributed.py).
    """
    script = _existing(request.script)
    backend, reason, nsys = choose_backend(request.backend)
    out_dir = check_output_dir(request.out_dir or default_out_dir(script), OUTPUT_NAMES)
    capture = _fresh_capture_dir(out_dir)
    program = launcher_command(request, backend, capture, launcher)
    cmd = (
        program if nsys is None else nsys_tool.profile_command(nsys, capture / REPORT_BASE, program)
    )
    notify(f"nsysmap: profiling {script.name} with {BACKEND_NAMES[backend]} ({reason})")
    record: dict[str, Any] = {
        "nsysmap_version": __version__,
        "backend": backend,
        "backend_reason": reason,
        "script": str(request.script),
        "script_args": list(request.script_args),
        "command": cmd,
        "nsys_version": None if nsys is None else nsys_tool.nsys_version(nsys),
        **_profile(cmd, capture, notify),
    }
    if spawned is not None and record["launch"].get("spawned"):
        return spawned(record, out_dir, nsys)
    try:
        analysis = _analyse_capture(record, request, capture, nsys, out_dir)
    finally:
        write_file(out_dir / RUN_RECORD, json.dumps(record, indent=2, default=str) + "\n")
    steps = step_count(record["launch"].get("profiled_steps"))
    status, interrupted = record["exit_status"], record["interrupted"]
    return RunResult(script, backend, reason, out_dir, status, interrupted, steps, analysis)


def _profile(cmd: list[str], capture: Path, notify: Notify) -> dict[str, Any]:
    """Run the child; what run.json records about how it ended."""
    started = time.monotonic()
    child_status, interrupted = run_child(cmd, notify)
    launch = read_launch_record(capture)
    return {
        "child_status": child_status,
        "exit_status": script_status(launch, child_status),
        "interrupted": interrupted or bool(launch.get("interrupted")),
        "wall_s": round(time.monotonic() - started, 3),
        "launch": launch,
    }


def _analyse_capture(
    record: dict[str, Any], request: RunRequest, capture: Path, nsys: Path | None, out_dir: Path
) -> Analysis:
    """Find (and for nsys export) the capture, then attribute it into `out_dir`."""
    backend, launch, status = record["backend"], record["launch"], record["exit_status"]
    captured = find_capture(backend, capture, nsys, launch)
    record["capture"] = None if captured is None else str(captured)
    if captured is None:
        raise _nothing_to_analyse(nothing_captured(request.script, record), record)
    quiet = Stages(progress=False)
    settings = Settings(
        request.rules, options=_options(request, record), release=True, stages=quiet
    )
    try:
        # The launcher's FLOP count of the model, when it made one, is written with the outputs.
        return attribute_file(
            captured,
            out_dir,
            settings,
            request.memory_gb,
            before_write=lambda analysis: attach_model_flops(analysis, capture),
        )
    except NoGpuData as exc:
        before = f"{request.script.name} exited with status {status}; " if status else ""
        raise _nothing_to_analyse(f"{before}nothing usable was captured: {exc}", record) from exc


def choose_backend(requested: str) -> tuple[str, str, Path | None]:
    """(backend, why, nsys path): "auto" takes nsys when it can be found."""
    if requested == "torch":
        return "torch", "--backend torch", None
    if requested == "nsys":
        return "nsys", "--backend nsys", nsys_tool.require_nsys()
    if requested != "auto":
        raise NsysmapError(
            f"unknown backend {requested!r}; expected one of {BACKENDS}", exit_code=ExitCode.USAGE
        )
    nsys = nsys_tool.find_nsys()
    if nsys is None:
        return "torch", "nsys not found on PATH", None
    return "nsys", f"found {nsys}", nsys


def default_out_dir(script: Path) -> Path:
    """out/<script stem>, relative to the working directory."""
    return Path("out") / script.stem


def launcher_command(
    request: RunRequest, backend: str, capture: Path, launcher: Sequence[str] | None = None
) -> list[str]:
    """The launcher's argument list; `--`, the script and its own arguments, untouched, last."""
    cmd = [*(launcher or (sys.executable, "-m", LAUNCHER_MODULE))]
    cmd += ["--backend", backend, "--out", str(capture)]
    if request.warmup_steps is not None:
        cmd += ["--warmup-steps", str(request.warmup_steps)]
    if request.steps is not None:
        cmd += ["--steps", str(request.steps)]
    if not request.record_shapes:
        cmd.append("--no-record-shapes")
    return [*cmd, "--", str(request.script), *request.script_args]


def run_child(cmd: list[str], notify: Notify) -> tuple[int, bool]:
    """Run `cmd` with our stdout and stderr; returns (status, interrupted).

    The child gets its own process group, so a Ctrl-C in the terminal reaches
    nsysmap only; nsysmap forwards one SIGINT to the child's group and waits
    for it to save what it captured. A second Ctrl-C kills the group and
    propagates KeyboardInterrupt.
    """
    try:
        proc = subprocess.Popen(cmd, start_new_session=True)
    except OSError as exc:
        raise ProfilerFailed(f"cannot start {cmd[0]}: {exc.strerror or exc}") from exc
    interrupted = False
    while True:
        try:
            # Short waits: a signal taken by another thread (Polars' pool) would
            # not interrupt a blocking wait, and Python only acts on it between calls.
            return proc.wait(timeout=0.2), interrupted
        except subprocess.TimeoutExpired:
            continue
        except KeyboardInterrupt:
            if interrupts.rearm() or interrupted:  # a second Ctrl-C (maybe while taking this one)
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
                raise
            interrupted = True
            notify(
                "nsysmap: interrupting; waiting for the capture to be saved (Ctrl-C again to stop)"
            )
            _signal_group(proc, signal.SIGINT)


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, sig)
        else:  # pragma: no cover - no process groups
            proc.terminate()
    except ProcessLookupError:
        pass


def read_launch_record(capture: Path) -> dict[str, Any]:
    """The launcher's launch.json ({} when it is missing or unreadable)."""
    return contract.read_launch_record(capture)


def script_status(launch: dict[str, Any], child_status: int) -> int:
    """The script's exit status: the launcher's record, else the child's status.

    A child killed by signal N reports 128 + N, as a shell would.
    """
    status = launch.get("exit_status")
    if isinstance(status, int) and not isinstance(status, bool):
        return status
    return 128 - child_status if child_status < 0 else child_status


def find_capture(
    backend: str, capture: Path, nsys: Path | None, launch: dict[str, Any]
) -> Path | None:
    """The file to analyse: trace.json, or the nsys report exported to SQLite."""
    if backend == "torch":
        named = launch.get("trace")  # relative to the capture directory
        trace = capture / (named if isinstance(named, str) and named else TRACE_FILE)
        return trace if trace.is_file() else None
    report = nsys_tool.report_file(capture / REPORT_BASE)
    if report is None or nsys is None:
        return None
    return nsys_tool.export_sqlite(report, capture / f"{REPORT_BASE}.sqlite")


def _nothing_to_analyse(message: str, record: dict[str, Any]) -> ProfilerFailed | ScriptFailed:
    """The error when there is nothing to analyse: the script's own status when it
    failed or was interrupted, else ProfilerFailed."""
    status = record["exit_status"]
    if status or record["interrupted"]:
        return ScriptFailed(message, status=status or int(ExitCode.INTERRUPTED))
    return ProfilerFailed(message)


def nothing_captured(script: Path, record: dict[str, Any]) -> str:
    """One line saying why there is nothing to analyse (`record`: see run.json)."""
    backend, launch, status = record["backend"], record["launch"], record["exit_status"]
    if not launch and record["child_status"] != 0:
        tool = "nsys profile" if backend == "nsys" else "the launcher"
        return f"{tool} exited with status {record['child_status']} and recorded nothing"
    if record["interrupted"]:
        return f"{script.name} was interrupted before anything was captured"
    if status != 0:
        return f"{script.name} exited with status {status} before anything was captured"
    if launch.get("child_processes") and not launch.get("steps_seen"):
        return (
            f"{script.name} ran no step in its own process but in {launch['child_processes']} "
            "child process(es), which are not instrumented: start the ranks with `nsysmap run "
            "--nproc-per-node N`, under torchrun, or with torch.multiprocessing.spawn"
        )
    if backend == "nsys" and not launch.get("cuda_device"):
        return (
            f"nsys captured nothing: no CUDA device was visible to {script.name} "
            "(the capture starts at cudaProfilerStart); try --backend torch"
        )
    return f"{BACKEND_NAMES[backend]} captured nothing from {script.name} (did any step run?)"


def _options(request: RunRequest, record: dict[str, Any]) -> dict[str, Any]:
    """The run's settings and outcome, as recorded in manifest.json."""
    own = ("backend", "backend_reason", "script", "script_args", "exit_status", "interrupted")
    return {
        "command": "run",
        **{key: record[key] for key in own},
        "warmup_steps": request.warmup_steps,
        "steps": request.steps,
        "record_shapes": request.record_shapes,
        **{key: record["launch"].get(key) for key in LAUNCH_OPTIONS},
    }


def _existing(script: Path) -> Path:
    if not script.is_file():
        raise InputNotFound(f"{script}: no such file")
    return script


def _fresh_capture_dir(out_dir: Path) -> Path:
    """DIR/capture, emptied of a previous run's files so none is analysed twice;
    the previous run's outputs in DIR are removed."""
    capture = out_dir / CAPTURE_DIR
    reports = (REPORT_BASE + suffix for suffix in (*NSYS_REPORT.suffixes, *NSYS_SQLITE.suffixes))
    try:
        capture.mkdir(parents=True, exist_ok=True)
        for name in (LAUNCH_RECORD, TRACE_FILE, *reports):
            (capture / name).unlink(missing_ok=True)
        for rank in capture.glob("rank*"):  # a distributed run's ranks
            if rank.is_dir():
                shutil.rmtree(rank)
        # The previous run's outputs describe a capture that is gone: none may look current.
        remove_outputs(out_dir)
        (out_dir / RUN_RECORD).unlink(missing_ok=True)
    except OSError as exc:
        raise write_failed(out_dir, exc) from None
    return capture


def step_count(profiled: Any) -> int | None:
    """How many steps the launcher profiled: it records [first, last], inclusive."""
    return contract.profiled_step_count(profiled)
