"""One process too large for memory whole, attributed one time window at a time.

An export of a single process cannot be split by process (nsysmap.sources.by_process),
but its timeline can be cut into windows, each read, nested, attributed and
summarised on its own, like a process read apart::

    process ─┬─ window [.., t1): calls starting there, the GPU work they launched, its ranges
             ├─ window [t1, t2): ... and the ranges open across t1    ─> OPS chunks, partial sums
             └─ window [t2, ..): ... and the ranges open across t2       by_range per window, merged

Where to cut (the reader's: nsysmap.read.nsys.window_plan, given the names no
cut may cross, CUT_RULES): at a range's start near equal numbers of runtime
calls, the one with the fewest ranges open across it, and never
across what cannot be carried: an autograd sequence number on both sides
(the forward operator's range and the backward's are not carried into each
other's window), a range left open (closed at its thread's last event), an
`.item()` range (the waits keep each window's). A range open across a cut
(a profiling range around the run, an epoch, the step the cut falls in) is
read into every window it overlaps, with one range id (nsysmap.sources.window_carry),
so that nesting, labels, steps from step ranges and attribution in each
window are those of a whole read; by_range counts its instance once, with
the span of all its operations (`merge_by_range`). op_id counts on from one
window to the next. Whether to cut, and into how many windows, is decided in
nsysmap.sources.choose (the memory budget, or NSYSMAP_WINDOWS); `window_plan`
asks the reader where, `window_profiles` yields the windows' profiles, and
`WindowCheck` watches them for what would make them differ from a whole
read: the two sides of an edge reading, nesting or clipping a carried range
apart, a carried range nested over MAX_PATH_DEPTH deep, steps or phases
from PyTorch's records over the whole process (nsysmap.attribution.recorded_steps),
work without a launch call, a row lost or read twice. The flow then reads
the export whole instead (nsysmap.flow.run_stages): exact or not split, never
different numbers.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

import polars as pl

from nsysmap.attribution.labels import AUTOGRAD_NODE, FSDP_HOOK, SEQ
from nsysmap.attribution.record_evidence import AUTOGRAD_THREAD
from nsysmap.core.profile import NestedProfile, Profile
from nsysmap.core.timings import Stages
from nsysmap.read.nsys.nsys_sqlite import Export, read_sqlite
from nsysmap.read.nsys.window_plan import CutRules, RowWindow, plan_windows
from nsysmap.sources.reading import Part, normalised_parts
from nsysmap.sources.window_carry import Carry, crossing_ids, inside, path_rows
from nsysmap.waits.sync_rules import SYNC_RANGE, one_pattern

META_KEY = "windows_read_apart"
REFUSED_KEY = "windows_refused"
# The names no cut may cross, as attribution and the waits read them (the reader
# holds none of the name rules).
CUT_RULES = CutRules(
    seq=SEQ,
    fsdp_hook=FSDP_HOOK,
    autograd_node=AUTOGRAD_NODE,
    sync_range=one_pattern(SYNC_RANGE),
    autograd_thread=AUTOGRAD_THREAD,
)


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


def window_plan(export: Export, pid: int, count: int) -> Plan:
    """At most `count` windows to read process `pid` of `export` in (each with calls),
    or why it cannot be cut exactly (nsysmap.sources.choose decides to cut)."""
    found = plan_windows(export, pid, count, CUT_RULES)
    if isinstance(found, str):
        return Plan(pid, [], 0, refused=found)
    return Plan(pid, found.windows, found.ops, found.autograd, found.nodes, carried=found.carried)


def window_profiles(
    export: Export, plan: Plan, *, stages: Stages, check: WindowCheck | None = None
) -> Iterator[NestedProfile]:
    """Each window of `plan` in turn, read and normalised (a source of the flow);
    op_id counts on from one window to the next, a range carried into a window
    keeps the id it had in the window before, others count on. `check` learns
    what each window carries (and refuses windows whose carried ranges differ)."""
    return normalised_parts(window_parts(export, plan, check), stages)


def window_parts(
    export: Export, plan: Plan, check: WindowCheck | None = None, *, named: bool = False
) -> Iterator[Part]:
    """The parts of `window_profiles` (to read in turn with others': several processes
    each in its windows, `ProcessChecks`); `named`: the progress line names the process."""
    carry = Carry()
    where = f"process {plan.pid}, " if named else ""

    def part(i: int, window: RowWindow) -> Part:
        refusals: list[str | None] = []

        def read(first_ids: tuple[int, int]) -> Profile:
            raw = read_sqlite(
                export, first_ids=first_ids, process=plan.pid, window=window, require_gpu=False
            )
            raw, refused = carry.identified(raw, window)
            refusals.append(refused)
            return raw

        def nested(raw: Profile, profile: NestedProfile) -> None:
            refused = refusals[0] or carry.handed_on(raw, profile, window)
            if check is not None:
                check.carry(i, profile, window, refused)

        return Part(f"reading {where}window {i + 1}/{len(plan.windows)}", read, nested)

    return (part(i, w) for i, w in enumerate(plan.windows))


class PartsCheck(Protocol):
    """What the flow asks of a check of parts read in windows (`WindowCheck`, or
    `ProcessChecks` for several processes each in its windows)."""

    @property
    def refused(self) -> str | None: ...

    def next_part(self) -> None: ...

    def chunk(self, chunk: pl.DataFrame) -> None: ...

    def refusal(self) -> str | None: ...

    def carried_instances(self) -> pl.DataFrame | None: ...


@dataclass
class WindowCheck:
    """Watches the windows (what each carries across its edges, from
    `window_profiles`) and their OPS rows, chunk by chunk, for what would differ
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
    # (`window_carry.inside`); their by_range keys; per chunk, their operations' extent.
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

    def chunk(self, chunk: pl.DataFrame) -> None:
        """Take in one chunk of OPS rows of the current window."""
        if self.refused is not None:
            return
        self.seen += chunk.height
        if (chunk["step_source"] == "records").any():
            self.refused = "steps from PyTorch's records (counted over the whole process)"
        elif chunk["attribution"].is_in(["no_launch", "ambiguous_launch"]).any():
            self.refused = "GPU work without a launch call (placed by its stream's neighbours)"
        self.range_steps |= bool((chunk["step_source"] == "range").any())
        self.backward |= bool(self._backward(chunk).any())
        if self.part in self.inside:
            self.extents.append(self._extent(chunk, self.inside[self.part]))
        unstepped = chunk.filter(pl.col("step").is_null())
        if unstepped.height:
            self.unstepped_parts.add(self.part)
            self.unstepped_phased |= bool(self._backward(unstepped).any())
            unphased = unstepped["phase"].is_null() | (unstepped["phase_source"] == "records")
            self.unstepped_unphased |= bool(unphased.any())
        hidden = self.unstepped_unphased and self._may_be_backward()
        if len(self.unstepped_parts) > 1 and (self.unstepped_phased or hidden):
            self.refused = self.refused or "phases of work outside every step, in two windows"

    def _extent(self, chunk: pl.DataFrame, inside: pl.DataFrame) -> pl.DataFrame:
        """Per (device, carried range), the first start and last end of the chunk's
        operations inside it, as by_range's instances count them: by their
        innermost range, or by the range of another thread that took them in."""
        other = pl.col("other_thread_range_id")
        taken = other.is_not_null() & (other != pl.col("range_id")).fill_null(True)
        columns = ("device_id", "start_ns", "end_ns")
        ops = pl.concat(
            [
                chunk.select(*columns, "range_id"),
                chunk.filter(taken).select(*columns, range_id=other),
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

    def _backward(self, chunk: pl.DataFrame) -> pl.Series:
        """Rows that are backward work (by phase, direction or autograd's thread) or
        phased by records."""
        return chunk.select(
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


@dataclass
class ProcessChecks:
    """The `WindowCheck`s of several processes read one after the other, each in its
    own time windows: each window's parts and rows go to its own process's check,
    which watches them as those of a single process (steps, phases outside every
    step and carried ranges never cross processes); the first refusal of any
    refuses them all."""

    checks: list[WindowCheck | None]  # None: a process read whole, one part, unchecked
    windows: list[int]  # per process, in reading order: how many parts it is read in
    part: int = -1

    @property
    def refused(self) -> str | None:
        return next((c.refused for c in self._checks() if c.refused is not None), None)

    def next_part(self) -> None:
        self.part += 1
        current = self._current()
        if current is not None:
            current.next_part()

    def chunk(self, chunk: pl.DataFrame) -> None:
        current = self._current()
        if current is not None:
            current.chunk(chunk)

    def refusal(self) -> str | None:
        return next((r for r in (c.refusal() for c in self._checks()) if r is not None), None)

    def carried_instances(self) -> pl.DataFrame | None:
        """Every process's (range ids count on from one process to the next)."""
        found = [f for f in (c.carried_instances() for c in self._checks()) if f is not None]
        return pl.concat(found) if found else None

    def _checks(self) -> list[WindowCheck]:
        return [c for c in self.checks if c is not None]

    def _current(self) -> WindowCheck | None:
        """The check of the process whose windows the current part is one of."""
        left = self.part
        for check, count in zip(self.checks, self.windows, strict=True):
            if left < count:
                return check
            left -= count
        raise IndexError(f"part {self.part} of {sum(self.windows)}")
