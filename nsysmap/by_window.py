"""One process too large for memory whole, attributed one time window at a time.

An export of a single process cannot be split by process (nsysmap.by_process),
but its timeline can be cut where nothing that attribution reads crosses the
cut (nsysmap.window_cuts): no NVTX range of any thread open, no autograd
sequence number on both sides. Each window is then read, nested, attributed
and summarised on its own, like a process read apart::

    process ─┬─ window [.., t1): calls starting there, the GPU work they launched, its ranges
             ├─ window [t1, t2): ...                                 ─> OPS blocks, partial sums
             └─ window [t2, ..): ...                                    by_range per window, merged

Every range instance and its operations lie in one window, so by_range merges
per instance as it does over processes; op_id and range_id count on from one
window to the next. `windows_read_apart` decides (the memory budget, or
NSYSMAP_WINDOWS), `window_profiles` yields the windows' profiles, and
`WindowCheck` watches the attributed rows for what would make them differ from
a whole read: steps or phases from PyTorch's records over the whole process
(nsysmap.attribution.records), work without a launch call, one step in two
windows, a row lost or read twice. The flow then reads the export whole
instead (nsysmap.flow): exact or not split, never different numbers.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl

from nsysmap.by_process import available_bytes, expected_bytes, read_parts
from nsysmap.input_kinds import kind_of
from nsysmap.profile import NestedProfile
from nsysmap.read.nsys_sql import RowWindow
from nsysmap.read.nsys_sqlite import gpu_processes
from nsysmap.stages import Stages
from nsysmap.window_cuts import Segments, segments

# Forces the number of windows (an integer; tests and measurements), whatever
# the memory budget: `NSYSMAP_WINDOWS=4 nsysmap attribute ...`.
WINDOWS_ENV = "NSYSMAP_WINDOWS"
META_KEY = "windows_read_apart"
REFUSED_KEY = "windows_refused"


@dataclass(frozen=True)
class Plan:
    """The windows to read process `pid` in, or why it is read whole (`refused`)."""

    pid: int
    windows: list[RowWindow]
    ops: int  # the process's rows of GPU work: what the windows add up to
    autograd: tuple[int, ...] = ()  # the process's autograd threads
    nodes: bool = False  # some range of the process names an autograd node
    refused: str | None = None


def windows_read_apart(path: Path, memory_gb: float | None) -> Plan | None:
    """The windows to read `path` in, or None to read it whole.

    Only for inputs read by process (nsys SQLite exports) with GPU work on one
    process, expected to need more than `memory_gb` (None: 80 % of the memory
    available) or split by NSYSMAP_WINDOWS: as many windows as the expected
    peak is over the budget, doubled (a window's peak is not its share of
    the rows). A plan with `refused` says why it cannot be cut exactly.
    """
    if not kind_of(path).by_process:
        return None
    count = _forced()
    if count is None:
        budget = memory_gb * 1e9 if memory_gb is not None else available_bytes()
        need = expected_bytes(path)
        if budget is None or need <= budget:
            return None
        count = 2 * math.ceil(need / max(budget, 1.0))
    processes = gpu_processes(path)
    if count < 2 or processes is None or len(processes) != 1:
        return None
    found = segments(str(path), processes[0])
    if isinstance(found, str):
        return Plan(processes[0], [], 0, refused=found)
    windows = _windows(found, count)
    if len(windows) < 2:
        return Plan(processes[0], [], 0, refused="no cut leaves runtime calls on both sides")
    return Plan(processes[0], windows, found.ops, found.autograd, found.nodes)


def _forced() -> int | None:
    value = os.environ.get(WINDOWS_ENV, "").strip()
    return int(value) if value.isdigit() else None


def _windows(found: Segments, count: int) -> list[RowWindow]:
    """`count` windows or fewer, cut at the candidate cuts nearest to equal numbers
    of runtime calls, each window with calls."""
    m = len(found.cuts)
    every = pl.DataFrame({"segment": pl.int_range(0, m + 1, eager=True, dtype=pl.UInt32)})
    stats = every.join(found.calls.cast({"segment": pl.UInt32}), on="segment", how="left")
    stats = stats.with_columns(pl.col("calls").fill_null(0))
    cum = stats["calls"].cum_sum()
    total = int(cum[-1])
    targets = pl.Series([total * j / count for j in range(1, count)])
    at = cum.slice(0, m).search_sorted(targets).clip(0, max(m - 1, 0))
    # A boundary after segment s cuts at cuts[s]; only where it adds calls.
    ends = sorted({int(s) for s in at if 0 < int(cum[int(s)]) < total}) if m else []
    edges = [0, *(s + 1 for s in ends), m + 1]
    windows = []
    for first, after in itertools.pairwise(edges):
        start = (
            found.cuts[first - 1] if first else None,
            found.cuts[after - 1] if after <= m else None,
        )
        windows.append(found.window(stats.slice(first, after - first), start))
    return windows


def window_profiles(path: Path, plan: Plan, *, stages: Stages) -> Iterator[NestedProfile]:
    """Each window of `plan` in turn, read and normalised (a source of nsysmap.flow);
    op_id and range_id count on from one window to the next."""
    n = len(plan.windows)
    reads = (
        (f"reading window {i + 1}/{n}", {"process": plan.pid, "window": w, "require_gpu": False})
        for i, w in enumerate(plan.windows)
    )
    return read_parts(path, reads, stages=stages)


@dataclass
class WindowCheck:
    """Watches the OPS rows of the windows, block by block, for what would differ
    from the export read whole; `refusal` says what (None: exact)."""

    ops: int  # the rows the windows must add up to
    autograd: tuple[int, ...] = ()  # the process's autograd threads (`Plan.autograd`)
    nodes: bool = False  # some range names an autograd node (`Plan.nodes`)
    part: int = -1
    seen: int = 0
    range_steps: bool = False
    step_parts: dict[int, int] = field(default_factory=dict)
    unstepped_parts: set[int] = field(default_factory=set)
    unstepped_phased: bool = False  # a row without a step is backward, or phased by records
    unstepped_unphased: bool = False  # a row without a step has no phase from its ranges
    backward: bool = False  # a row is backward work, or phased by records
    refused: str | None = None

    def next_part(self) -> None:
        self.part += 1

    def block(self, block: pl.DataFrame) -> None:
        """Take in one block of OPS rows of the current window."""
        if self.refused is not None:
            return
        self.seen += block.height
        if (block["step_source"] == "records").any():
            self.refused = "steps from PyTorch's records (counted over the whole process)"
        elif (block["attribution"] == "no_launch").any():
            self.refused = "GPU work without a launch call (placed by its stream's neighbours)"
        self.range_steps |= bool((block["step_source"] == "range").any())
        self.backward |= bool(self._backward(block).any())
        for step in block["step"].drop_nulls().unique():
            if self.step_parts.setdefault(step, self.part) != self.part:
                self.refused = self.refused or f"step {step} in two windows"
        unstepped = block.filter(pl.col("step").is_null())
        if unstepped.height:
            self.unstepped_parts.add(self.part)
            self.unstepped_phased |= bool(self._backward(unstepped).any())
            unphased = unstepped["phase"].is_null() | (unstepped["phase_source"] == "records")
            self.unstepped_unphased |= bool(unphased.any())
        hidden = self.unstepped_unphased and self._may_be_backward()
        if len(self.unstepped_parts) > 1 and (self.unstepped_phased or hidden):
            self.refused = self.refused or "phases of work outside every step, in two windows"

    def _may_be_backward(self) -> bool:
        """Can rows be backward work that their columns do not show (launched inside
        an autograd node's range, or from autograd's thread)?"""
        return self.nodes or bool(self.autograd)

    def _backward(self, block: pl.DataFrame) -> pl.Series:
        """Rows that are backward work (by phase, direction or autograd's thread) or
        phased by records."""
        return block.select(
            (pl.col("phase") == "backward")
            | (pl.col("direction") == "backward")
            | (pl.col("phase_source") == "records")
            | pl.col("tid").is_in(pl.Series(self.autograd, dtype=pl.Int64).implode())
        ).to_series()

    def refusal(self) -> str | None:
        """Why the windows' rows may differ from a whole read (None: they do not)."""
        if self.refused is not None:
            return self.refused
        if self.seen != self.ops:
            return f"{self.seen} rows of GPU work read in windows, {self.ops} in the export"
        if not self.range_steps and (self.backward or self._may_be_backward()):
            return "backward work without step ranges (steps would come from PyTorch's records)"
        return None
