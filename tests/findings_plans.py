"""Synthetic training runs for the findings tests: steps of kernels planned in milliseconds.

A `Plan` is the operations of one step, in the order one thread launches them
(`K`: name, duration, phase, module, the idle gap before it and why). `export`
repeats it for a number of steps as an nsys export (devtools.synth's builder),
with nsysmap's step, phase and module ranges around the launches, so the
outputs hold exactly what was planned. Times are milliseconds:

    step k:  ... [K1] gap [K2] ...     a gap is the host launching late (`launch`);
                                       with `sync`, the host blocked in
                                       cudaStreamSynchronize meanwhile (`sync`)
    between steps: `between` ms of nothing (the host loading the next batch)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from devtools.synth import SynthExport
from nsysmap.findings import with_findings
from nsysmap.flow.verbs import analyse, load_profile

PID, MAIN = 1, 10
COMPUTE = 7
A100 = ("NVIDIA A100-SXM4-80GB", (8, 0))
V100 = ("Tesla V100-SXM2-32GB", (7, 0))
LAUNCH = 0.002  # a launch call's duration
LEAD = 0.004  # a late launch ends this long before its kernel starts
DTOH, HTOD = 2, 1


@dataclass(frozen=True)
class K:
    """One operation of a step."""

    name: str
    ms: float
    phase: str = "forward"
    module: tuple[str, str] | None = None  # (path, class)
    gap: float = 0.0  # idle time before it on its stream
    sync: bool = False  # the host synchronised during the gap
    stream: int = COMPUTE
    copy: int | None = None  # a memcpy of this copy kind (1: HtoD, 2: DtoH)
    api: str | None = None  # the launch call; default cudaLaunchKernel / cudaMemcpyAsync
    at: float | None = None  # start at this time in the step (another stream), not after the last
    under: str | None = None  # an operator range around the launch (`aten::_local_scalar_dense`)


@dataclass(frozen=True)
class Plan:
    """A step's operations and what surrounds the steps."""

    ops: Sequence[K]
    steps: int = 3
    between: float = 0.5  # idle between two steps
    gpu: tuple[str, tuple[int, int]] | None = A100
    ranged: bool = True  # step and phase ranges around each step (False: none)
    step_ranges: bool = True  # with `ranged`, the step ranges too (False: phase ranges alone)
    # With `ranged` and no step ranges: a range of this name around each step, which no
    # step rule reads (the structure finds the step: it holds a forward and a backward pass).
    around: str | None = None


def export(plan: Plan, path: Path, before: Plan | None = None) -> Path:
    """Write `plan` as an nsys export at `path`, after one step of `before` (its set-up)."""
    b = SynthExport()
    b.thread(PID, MAIN, "python")
    if plan.gpu is not None:
        b.gpu(0, plan.gpu[0], compute=plan.gpu[1])
    t, corr = 1.0, 0
    if before is not None:
        t, corr = _step(b, before, 0, t, corr)
        t += before.between
    for step in range(plan.steps):
        t, corr = _step(b, plan, step, t, corr)
        t += plan.between
    return b.write(path)


def _step(b: SynthExport, plan: Plan, step: int, t: float, corr: int) -> tuple[float, int]:
    """One step from time `t`: its operations, launches and ranges; (its end, last corr).

    Operations placed `at` a time run on their own stream, launched from a second
    thread (as a communication thread would) just before they start."""
    first_launch = t - 0.05
    phases: dict[str, list[float]] = {}
    ends: dict[int, float] = {}
    host = first_launch  # when the main thread is free to launch the next operation
    for k in plan.ops:
        corr += 1
        if k.at is not None:
            start, launch, tid = t + k.at, t + k.at - LEAD - LAUNCH, MAIN + 1
        else:
            start = ends.get(k.stream, t) + k.gap
            launch = start - LEAD - LAUNCH if k.gap else host
            tid = MAIN
        if k.sync:
            sync = (ends.get(k.stream, t) + 0.001, launch - 0.001)
            b.launch(PID, tid, *sync, 100_000 + corr, api="cudaStreamSynchronize_v3020")
        _launch(b, k, tid, launch, start, corr)
        phases.setdefault(k.phase, []).extend([launch - 0.0005, launch + LAUNCH + 0.0005])
        if k.at is None:
            host = launch + LAUNCH + 0.001
        ends[k.stream] = start + k.ms
    if plan.ranged:
        for phase, times in phases.items():
            b.range(PID, MAIN, min(times), max(times), f"nsysmap:phase:{phase}")
        last = max(max(times) for times in phases.values())
        if plan.step_ranges:
            b.range(PID, MAIN, first_launch - 0.001, last + 0.001, f"nsysmap:step:{step}")
        elif plan.around is not None:
            b.range(PID, MAIN, first_launch - 0.001, last + 0.001, plan.around)
    return max(ends.values()), corr


def _launch(b: SynthExport, k: K, tid: int, launch: float, start: float, corr: int) -> None:
    """The launch call of `k`, the operation itself and the ranges around the call."""
    api = k.api or ("cudaMemcpyAsync_v3020" if k.copy else "cudaLaunchKernel_v7000")
    b.launch(PID, tid, launch, launch + LAUNCH, corr, api=api)
    if k.copy:
        b.memcpy(PID, 0, k.stream, start, start + k.ms, corr, copy_kind=k.copy)
    else:
        b.kernel(PID, 0, k.stream, start, start + k.ms, corr, name=k.name)
    if k.module is not None:
        tag = "bwd" if k.phase == "backward" else "fwd"
        name = f"nsysmap:{tag}:{k.module[1]}:{k.module[0]}"
        b.range(PID, tid, launch - 0.0002, launch + LAUNCH + 0.0002, name)
    if k.under is not None:
        b.range(PID, tid, launch - 0.0001, launch + LAUNCH + 0.0001, k.under)


def findings_of(plan: Plan, directory: Path) -> pl.DataFrame:
    """findings.parquet of the planned run (exported into `directory`, analysed in memory)."""
    analysis = with_findings(analyse(load_profile(export(plan, directory / "run.sqlite"))))
    assert analysis.findings is not None
    return analysis.findings
