"""One process too large for memory whole, attributed one time window at a time.

An export of a single process cannot be split by process (nsysmap.by_process),
but its timeline can be cut into windows, each read, nested, attributed and
summarised on its own, like a process read apart::

    process ─┬─ window [.., t1): calls starting there, the GPU work they launched, its ranges
             ├─ window [t1, t2): ... and the ranges open across t1    ─> OPS blocks, partial sums
             └─ window [t2, ..): ... and the ranges open across t2       by_range per window, merged

Where to cut (nsysmap.window_cuts): at a range's start near equal numbers
of runtime calls, the one with the fewest ranges open across it, and never
across what cannot be carried: an autograd sequence number on both sides
(the forward operator's range and the backward's are not carried into each
other's window), a range left open (closed at its thread's last event), an
`.item()` range (the waits keep each window's). A range open across a cut
(a profiling range around the run, an epoch, the step the cut falls in) is
read into every window it overlaps, with one range id (nsysmap.window_carry),
so that nesting, labels, steps from step ranges and attribution in each
window are those of a whole read; by_range counts its instance once, with
the span of all its operations (`merge_by_range`). op_id counts on from one
window to the next. `windows_read_apart` decides (the memory budget, or
NSYSMAP_WINDOWS), `window_profiles` yields the windows' profiles, and
`WindowCheck` watches them for what would make them differ from a whole
read: the two sides of an edge reading, nesting or clipping a carried range
apart, a carried range nested over MAX_PATH_DEPTH deep, steps or phases
from PyTorch's records over the whole process (nsysmap.attribution.records),
work without a launch call, a row lost or read twice. The flow then reads
the export whole instead (nsysmap.flow): exact or not split, never
different numbers.
"""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import polars as pl

from nsysmap.attribution.normalise import normalise
from nsysmap.by_process import expected_bytes, next_ids
from nsysmap.input_kinds import kind_of
from nsysmap.memory import budget_bytes
from nsysmap.profile import NestedProfile
from nsysmap.read.nsys_sql import RowWindow
from nsysmap.read.nsys_sqlite import gpu_processes, read_sqlite
from nsysmap.stages import Stages
from nsysmap.window_carry import Carry, carried_rows, crossing_ids, inside, path_rows
from nsysmap.window_cuts import Segments, segments

# Forces the number of windows (an integer; tests and measurements), whatever
# the memory budget: `NSYSMAP_WINDOWS=4 nsysmap attribute ...`.
WINDOWS_ENV = "NSYSMAP_WINDOWS"
META_KEY = "windows_read_apart"
REFUSED_KEY = "windows_refused"
# A cut with more ranges open across it than this is not used (each is read by rowid).
MAX_CARRIED = 4096


@dataclass(frozen=True)
class Plan:
    """The windows to read process `pid` in, or why it is read whole (`refused`)."""

    pid: int
    windows: list[RowWindow]
    ops: int  # the process's rows of GPU work: what the windows add up to
    autograd: tuple[int, ...] = ()  # the process's autograd threads
    nodes: bool = False  # some range of the process names an autograd node
    refused: str | None = None
    carried: tuple[int, ...] = ()  # per window, how many ranges are open across its start


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
        budget = budget_bytes(memory_gb)
        if budget is None or (need := expected_bytes(path, budget)) <= budget:
            return None
        count = 2 * math.ceil(need / max(budget, 1.0))
    processes = gpu_processes(path)
    if count < 2 or processes is None or len(processes) != 1:
        return None
    found = segments(str(path), processes[0])
    if isinstance(found, str):
        return Plan(processes[0], [], 0, refused=found)
    windows, carried = _windows(found, count, str(path), processes[0])
    if len(windows) < 2:
        refused = "no cut outside every autograd link and range left open has calls on both sides"
        return Plan(processes[0], [], 0, refused=refused)
    return Plan(processes[0], windows, found.ops, found.autograd, found.nodes, carried=carried)


def _forced() -> int | None:
    value = os.environ.get(WINDOWS_ENV, "").strip()
    return int(value) if value.isdigit() else None


def _windows(
    found: Segments, count: int, path: str, pid: int
) -> tuple[list[RowWindow], tuple[int, ...]]:
    """`count` windows or fewer, each with calls, and the ranges open across each
    window's start (read into it by rowid): cut at the candidate cuts with the
    fewest ranges open across them near equal numbers of runtime calls."""
    m = len(found.cuts)
    every = pl.DataFrame({"segment": pl.int_range(0, m + 1, eager=True, dtype=pl.UInt32)})
    stats = every.join(found.calls.cast({"segment": pl.UInt32}), on="segment", how="left")
    stats = stats.with_columns(pl.col("calls").fill_null(0))
    cum = stats["calls"].cum_sum()
    # A boundary after segment s cuts at cuts[s].
    ends = _chosen(cum.slice(0, m), int(cum[-1]), found.open_across, count) if m else []
    quiet = found.exact and all(found.open_across[s] == 0 for s in ends)
    rows = [[] for _ in ends] if quiet else carried_rows(path, pid, [found.cuts[s] for s in ends])
    usable = MAX_CARRIED if found.nvtx_rows is not None else 0  # else no rowid is read
    kept = [(s, r) for s, r in zip(ends, rows, strict=True) if len(r) <= usable]
    edges = [0, *(s + 1 for s, _ in kept), m + 1]
    carried: list[list[int]] = [[], *(r for _, r in kept)]
    windows = []
    for (first, after), extra in zip(itertools.pairwise(edges), carried, strict=True):
        start = (
            found.cuts[first - 1] if first else None,
            found.cuts[after - 1] if after <= m else None,
        )
        window = found.window(stats.slice(first, after - first), start)
        # The carried ranges are read by rowid beside the domain creations.
        windows.append(replace(window, domains=tuple(sorted({*window.domains, *extra}))))
    return windows, tuple(len(r) for r in carried)


def _chosen(before: pl.Series, total: int, across: list[int], count: int) -> list[int]:
    """The candidate cuts (by index) to cut at: for each of `count` - 1 targets at
    equal numbers of calls, the one with the fewest ranges open across it
    (`across`) within a quarter window's calls of the target, else the nearest.
    `before`: the calls before each candidate, of `total`."""
    frame = pl.DataFrame({"i": pl.int_range(before.len(), eager=True), "cum": before})
    frame = frame.with_columns(open=pl.Series(across, dtype=pl.Int64))
    frame = frame.filter((pl.col("cum") > 0) & (pl.col("cum") < total))
    distinct = frame.unique("cum", keep="first", maintain_order=True)
    if distinct.height < count:  # as many windows as there are stretches with calls
        return distinct["i"].to_list()
    slack = total / (4 * count)
    picked: set[int] = set()
    for j in range(1, count):
        near = frame.with_columns(d=(pl.col("cum") - total * j / count).abs())
        close = near.filter(pl.col("d") <= slack)
        best = close.sort("open", "d", "i") if close.height else near.sort("d", "i")
        if best.height:
            picked.add(int(best["i"][0]))
    return sorted(picked)


def window_profiles(
    path: Path, plan: Plan, *, stages: Stages, check: WindowCheck | None = None
) -> Iterator[NestedProfile]:
    """Each window of `plan` in turn, read and normalised (a source of nsysmap.flow);
    op_id counts on from one window to the next, a range carried into a window
    keeps the id it had in the window before, others count on. `check` learns
    what each window carries (and refuses windows whose carried ranges differ)."""
    carry, first_ids = Carry(), (0, 0)
    for i, window in enumerate(plan.windows):
        with stages.stage("read", f"reading window {i + 1}/{len(plan.windows)}"):
            raw = read_sqlite(
                path, first_ids=first_ids, process=plan.pid, window=window, require_gpu=False
            )
            raw, refused = carry.identified(raw, window)
        with stages.stage("normalise", "nesting ranges"):
            profile = normalise(raw)
            handed = carry.handed_on(raw, profile, window)
        refused = refused or handed
        del raw
        if check is not None:
            check.carry(i, profile, window, refused)
        first_ids = next_ids(profile, first_ids)
        yield profile
        del profile


@dataclass
class WindowCheck:
    """Watches the windows (what each carries across its edges, from
    `window_profiles`) and their OPS rows, block by block, for what would differ
    from the export read whole; `refusal` says what (None: exact). Also keeps,
    for by_range, where the operations inside each carried range lie
    (`carried_instances`)."""

    ops: int  # the rows the windows must add up to
    autograd: tuple[int, ...] = ()  # the process's autograd threads (`Plan.autograd`)
    nodes: bool = False  # some range names an autograd node (`Plan.nodes`)
    part: int = -1
    seen: int = 0
    range_steps: bool = False
    unstepped_parts: set[int] = field(default_factory=set)
    unstepped_phased: bool = False  # a row without a step is backward, or phased by records
    unstepped_unphased: bool = False  # a row without a step has no phase from its ranges
    backward: bool = False  # a row is backward work, or phased by records
    refused: str | None = None
    # Ranges open across an edge: per window, range_id -> the carried range it is in
    # (`window_carry.inside`); their by_range keys; per block, their operations' extent.
    inside: dict[int, pl.DataFrame] = field(default_factory=dict)
    paths: dict[int, pl.DataFrame] = field(default_factory=dict)
    extents: list[pl.DataFrame] = field(default_factory=list)

    def next_part(self) -> None:
        self.part += 1

    def carry(
        self, part: int, profile: NestedProfile, window: RowWindow, refused: str | None
    ) -> None:
        """Take in what window `part` (`profile`) carries across its edges, or why its
        carried ranges would differ from a whole read's (`refused`)."""
        self.refused = self.refused or refused
        ids = crossing_ids(profile.ranges, window)
        if self.refused is not None or ids.is_empty():
            return
        found = inside(profile.ranges, ids)
        if isinstance(found, str):
            self.refused = found
            return
        self.inside[part] = found
        known = pl.concat(list(self.paths.values()))["carried"] if self.paths else ids.clear()
        new = ids.filter(~ids.is_in(known.implode()))
        if new.len():
            self.paths[part] = path_rows(profile.ranges, new)

    def block(self, block: pl.DataFrame) -> None:
        """Take in one block of OPS rows of the current window."""
        if self.refused is not None:
            return
        self.seen += block.height
        if (block["step_source"] == "records").any():
            self.refused = "steps from PyTorch's records (counted over the whole process)"
        elif block["attribution"].is_in(["no_launch", "ambiguous_launch"]).any():
            self.refused = "GPU work without a launch call (placed by its stream's neighbours)"
        self.range_steps |= bool((block["step_source"] == "range").any())
        self.backward |= bool(self._backward(block).any())
        if self.part in self.inside:
            self.extents.append(self._extent(block, self.inside[self.part]))
        unstepped = block.filter(pl.col("step").is_null())
        if unstepped.height:
            self.unstepped_parts.add(self.part)
            self.unstepped_phased |= bool(self._backward(unstepped).any())
            unphased = unstepped["phase"].is_null() | (unstepped["phase_source"] == "records")
            self.unstepped_unphased |= bool(unphased.any())
        hidden = self.unstepped_unphased and self._may_be_backward()
        if len(self.unstepped_parts) > 1 and (self.unstepped_phased or hidden):
            self.refused = self.refused or "phases of work outside every step, in two windows"

    def _extent(self, block: pl.DataFrame, inside: pl.DataFrame) -> pl.DataFrame:
        """Per (device, carried range), the first start and last end of the block's
        operations inside it, as by_range's instances count them: by their
        innermost range, or by the range of another thread that took them in."""
        other = pl.col("other_thread_range_id")
        taken = other.is_not_null() & (other != pl.col("range_id")).fill_null(True)
        columns = ("device_id", "start_ns", "end_ns")
        ops = pl.concat(
            [
                block.select(*columns, "range_id"),
                block.filter(taken).select(*columns, range_id=other),
            ]
        )
        grouped = ops.join(inside, on="range_id").group_by("device_id", "carried")
        found = grouped.agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        return found.with_columns(part=pl.lit(self.part, pl.Int64))

    def carried_instances(self) -> pl.DataFrame | None:
        """Per window, device and range open across an edge with operations inside:
        its by_range key, range_id, first start and last end (for
        `merge_by_range`); None when no range was carried."""
        if not self.extents:
            return None
        grouped = pl.concat(self.extents).group_by("part", "device_id", "carried")
        per_part = grouped.agg(pl.col("start_ns").min(), pl.col("end_ns").max())
        keyed = per_part.join(pl.concat(list(self.paths.values())), on="carried")
        return keyed.rename({"carried": "range_id"})

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
