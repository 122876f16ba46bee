"""The profiling window of the launcher: steps N .. N+M-1, by backend.

    steps:     0     1     2     3     4     5
    window:         [start ....... stop]          --warmup-steps 1 --steps 3

The profiler starts in the step-start listener of step N, before that step's
range opens, and stops in the step-end listener of step N+M-1, after the
range closed (M=0: at the end of the script). `finish` stops whatever is
still running when the script ends early.

Compiled models: the warm-up also waits until compilation has settled. The
window starts at the first step k >= N whose previous step compiled nothing
(torch.compile compiles on first calls, and again on recompiles), at most
`SETTLE_LIMIT` steps later than N; then it starts anyway and says so.

    steps:     0          1     2     3     4
    compiles:  fwd+bwd    -
    window:                    [start ......... stop]   (N=1 -> starts at 2)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from instrument import contract

SETTLE_LIMIT = 5  # most steps the window waits beyond N for compilation to settle


class ProfileWindow:
    """Starts and stops the backend's profiler at step boundaries."""

    def __init__(self, backend: str, out: Path, first: int, count: int, shapes: bool) -> None:
        self.backend = backend
        self.out = out
        self.first = first
        self.count = count
        self.record_shapes = shapes
        self._first: int | None = None  # step at which profiling started
        self._last: int | None = None  # last step completed while profiling
        self.trace: str | None = None
        self.notes: list[str] = []
        self.unprofiled: str | None = None  # the note that nothing was profiled, when so
        self._running = False
        self._torch_profiler: Any = None
        self._step = -1  # the step running now (-1 before the first)
        self._compiles: dict[int, int] = {}  # step -> compilations that started in it
        self.compiles_profiled = 0
        self.compile_ns_profiled = 0

    @property
    def start(self) -> int:
        """The step profiling starts (or started) at: N, or later while compiling."""
        return self._first if self._first is not None else self.first

    @property
    def last(self) -> int | None:
        """Index of the last step to profile; None means until the script ends."""
        return self.start + self.count - 1 if self.count > 0 else None

    @property
    def waited(self) -> int:
        """Steps the window waited beyond N for compilation to settle."""
        return self.start - self.first if self._first is not None else 0

    def compiled(self, start_ns: int, end_ns: int) -> None:
        """Compile listener: count a compilation in the step it ran in."""
        self._compiles[self._step] = self._compiles.get(self._step, 0) + 1
        if self._running:
            self.compiles_profiled += 1
            self.compile_ns_profiled += end_ns - start_ns

    @property
    def profiled(self) -> list[int] | None:
        """[first, last] of the steps completed while profiling, None when none was."""
        if self._first is None or self._last is None:
            return None
        return [self._first, self._last]

    def step_started(self, index: int) -> None:
        """Step listener: start profiling at the first step of the window (see above)."""
        self._step = index
        if self._first is not None or index < self.first:
            return
        settled = index == 0 or not self._compiles.get(index - 1)
        if not settled and index < self.first + SETTLE_LIMIT:
            return
        if not settled:
            self.notes.append(
                f"compilation had not settled after {SETTLE_LIMIT} more warm-up steps "
                f"(step {index - 1} still compiled): profiling starts at step {index} anyway"
            )
        self._start()
        self._first = index

    def step_ended(self, index: int) -> None:
        """Step listener: stop profiling after the last step of the window."""
        if not self._running:
            return
        self._last = index
        if index == self.last:
            self._stop()

    def finish(self, steps_seen: int) -> None:
        """At script end: stop a running profiler and note a short window."""
        if self._first is None:
            waiting = " (waiting for compilation to settle)" if self._step >= self.first else ""
            self.unprofiled = (
                f"the script completed {steps_seen} step(s); profiling was to start at step "
                f"{self.first}{waiting}, so nothing was profiled"
            )
            self.notes.append(self.unprofiled)
        elif self.last is not None and steps_seen <= self.last:
            self.notes.append(
                f"the script completed {steps_seen} step(s), fewer than the window "
                f"{self.start}..{self.last}; profiled what there was"
            )
        if self.waited:
            self.notes.append(
                f"compilation settled after step {self.start - 1}: profiling started at step "
                f"{self.start} instead of {self.first}"
            )
        if self.compiles_profiled:
            self.notes.append(
                f"the profiled steps still compiled: {self.compiles_profiled} compilation(s), "
                f"{self.compile_ns_profiled / 1e9:.3f} s (recompiles? see docs/compile.md)"
            )
        if self._running:
            self._stop()

    def _start(self) -> None:
        if self.backend == "torch":
            activities = [torch.profiler.ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._torch_profiler = torch.profiler.profile(
                activities=activities, record_shapes=self.record_shapes
            )
            self._torch_profiler.start()
        elif self.backend == "nsys":
            if torch.cuda.is_available():
                torch.cuda.profiler.start()
            else:
                self.notes.append("CUDA is not available: cudaProfilerStart was not called")
        self._running = True

    def _stop(self) -> None:
        self._running = False
        if self.backend == "torch" and self._torch_profiler is not None:
            profiler, self._torch_profiler = self._torch_profiler, None
            profiler.stop()
            profiler.export_chrome_trace(str(self.out / contract.TRACE))
            self.trace = contract.TRACE
        elif self.backend == "nsys" and torch.cuda.is_available():
            torch.cuda.synchronize()
            torch.cuda.profiler.stop()
