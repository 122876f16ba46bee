"""The one decision of how a profile file is read: whole, by process, or by time window.

`decide` is the decision itself, pure, on what is known of the file and the
machine (`Facts`): its kind (only an nsys SQLite export can be read in
parts), how many processes ran GPU work, the expected peak memory of a
whole read against the budget (`--memory-gb`, else the default of
nsysmap.core.memory: 6 GB, or 80 % of the memory this process may still use
where that is less), and NSYSMAP_WINDOWS::

    kind read in parts? ──no──> whole
      │ yes
    over the budget, and work on two processes or more? ──yes──> by process,
      │ no                             each in windows where its share of the
      │                                peak is over the budget too (as below)
    windows: NSYSMAP_WINDOWS, else (over the budget) twice the peak over the budget
    two windows or more, and work on one process? ──yes──> by window, else whole

A process's share of the peak is its share of the rows of GPU work (counted
in the scan that finds the processes), so that a process with most of the
work is read in windows and one with little of it whole (`Choice.each`).
A process that cannot be cut exactly is read whole beside the others'
windows; where the windows' rows would differ from a whole read, every
process is read whole, one at a time.

Several reports at once (`ranks`: nsysmap.many) read every process of a
report on its own, whatever its size: one flow per rank.

`choose` gathers the facts (the file checked once and opened once: an nsys
export is probed once, and every read after that is given the probed
export) and builds the flow's `Source`; `rank_sources` the sources of one
report among several. No other module makes this choice (a test checks).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from functools import cache
from itertools import chain
from pathlib import Path
from typing import Any

import polars as pl

from nsysmap.core.memory import split_budget_bytes
from nsysmap.core.profile import NestedProfile
from nsysmap.core.timings import Stages
from nsysmap.read.nsys.nsys_sqlite import Export, expected_bytes, gpu_process_rows
from nsysmap.sources.by_process import merged_profile, process_part, process_profiles
from nsysmap.sources.by_window import (
    META_KEY,
    REFUSED_KEY,
    PartsCheck,
    Plan,
    ProcessChecks,
    WindowCheck,
    window_parts,
    window_plan,
    window_profiles,
)
from nsysmap.sources.input_kinds import InputKind, kind_of
from nsysmap.sources.reading import normalised_parts, whole_profile

WHOLE, BY_PROCESS, BY_WINDOW = "whole", "by process", "by window"
# Forces the number of windows (an integer; tests and measurements), whatever
# the memory budget: `NSYSMAP_WINDOWS=4 nsysmap attribute ...`.
WINDOWS_ENV = "NSYSMAP_WINDOWS"


@dataclass(frozen=True)
class Facts:
    """What the decision reads of a file and of the machine."""

    parts: bool  # its kind can be read in parts (nsysmap.sources.input_kinds)
    need: int  # the expected peak bytes of reading it whole
    budget: float | None  # the bytes it may use (None: unknown, never split for size)
    processes: Callable[[], list[int] | None]  # with GPU work (None: not every row says)
    forced: int | None = None  # NSYSMAP_WINDOWS
    ranks: bool = False  # one report of several: each process its own flow
    # Each process's rows of GPU work, its share of the need (None: not known, even shares).
    rows: Callable[[], dict[int, int] | None] = lambda: None


@dataclass(frozen=True)
class Choice:
    """How a file is read: `how`, the processes to read apart and the windows."""

    how: str
    processes: tuple[int, ...] = ()
    windows: int = 0  # by window: how many; by process: the most of any process
    each: tuple[int, ...] = ()  # by process: each one's windows (0: whole), where any has some


def decide(facts: Facts) -> Choice:
    """Whole, by process or by window (see the module's docstring)."""
    if not facts.parts:
        return Choice(WHOLE)
    if facts.ranks:
        found = facts.processes()
        if found is not None and len(found) > 1:
            return Choice(BY_PROCESS, tuple(found))
    over = facts.budget is not None and facts.need > facts.budget
    if over:
        found = facts.processes()
        if found is not None and len(found) > 1:
            each = tuple(_windows(facts, facts.need * share) for share in _shares(facts, found))
            return Choice(BY_PROCESS, tuple(found), max(each), each if any(each) else ())
    count = _windows(facts, facts.need) if facts.forced is not None or over else 0
    if count < 2:
        return Choice(WHOLE)
    found = facts.processes()
    if found is None or len(found) != 1:
        return Choice(WHOLE)
    return Choice(BY_WINDOW, tuple(found), count)


def _shares(facts: Facts, processes: list[int]) -> list[float]:
    """Each process's share of the need: of the rows of GPU work, where known; else even."""
    rows = facts.rows()
    counts = [rows.get(pid, 0) for pid in processes] if rows else []
    total = sum(counts)
    if not total:
        return [1 / len(processes)] * len(processes)
    return [n / total for n in counts]


def _windows(facts: Facts, need: float) -> int:
    """The windows to read a process expected to need `need` bytes whole in:
    NSYSMAP_WINDOWS, else twice its need over the budget where it is over it;
    0 for fewer than two."""
    count = facts.forced
    if count is None and facts.budget is not None and need > facts.budget:
        count = 2 * math.ceil(need / max(facts.budget, 1.0))
    return count if count is not None and count >= 2 else 0


@dataclass(frozen=True)
class Source:
    """Where the flow's normalised profiles come from, read as they are asked for.

    `apart`: the profiles are parts of one input (its processes or time
    windows), none kept whole once attributed, their meta put together by
    `merged`; else a single profile, the whole input. `check` watches the
    parts' OPS rows (nsysmap.sources.by_window): where it refuses them, the
    flow runs again on `fallback(reason)`.
    """

    profiles: Iterable[NestedProfile]
    apart: bool = False
    merged: Callable[[list[NestedProfile]], NestedProfile] = merged_profile
    check: PartsCheck | None = None
    fallback: Callable[[str], Source] | None = None


def whole(profile: NestedProfile) -> Source:
    """A profile already in memory."""
    return Source((profile,))


def choose(path: Path, kind: InputKind, memory_gb: float | None, stages: Stages) -> Source:
    """The source of file `path` (already checked: `kind` is `kind_of(path)`): read
    whole, by process or by window, within `memory_gb` (None: the default budget
    of nsysmap.core.memory)."""
    opened = kind.open(path) if kind.open is not None else None
    with stages.stage("read", "sizing the input"):
        found = decide(_facts(kind, opened, memory_gb))
    return _source(path, kind, opened, found, stages, memory_gb)


def rank_sources(path: Path, kind: InputKind, stages: Stages) -> Iterator[Source]:
    """The sources of report `path` among several (checked: `kind` is `kind_of(path)`),
    one flow each: every process with GPU work read alone where the report's kind
    can be read in parts and it holds several; else the one source `choose` gives.
    The processes are read in turn, op_id and range_id counting on from one to the
    next, and each is let go before the next is read."""
    opened = kind.open(path) if kind.open is not None else None
    found = decide(_facts(kind, opened, None, ranks=True))
    if found.how != BY_PROCESS or not isinstance(opened, Export):
        yield _source(path, kind, opened, found, stages)
        return
    for profile in process_profiles(opened, list(found.processes), stages=stages):
        yield whole(profile)
        del profile


def _facts(kind: InputKind, opened: Any, memory_gb: float | None, ranks: bool = False) -> Facts:
    """The facts `decide` reads; the processes are counted only when asked for."""
    if not kind.by_process:
        return Facts(False, 0, None, lambda: None)
    budget = split_budget_bytes(memory_gb)
    need = expected_bytes(opened, budget)
    rows = cache(lambda: gpu_process_rows(opened))
    processes = lambda: None if rows() is None else sorted(rows() or {})  # noqa: E731
    return Facts(True, need, budget, processes, forced_windows(), ranks, rows)


def _source(
    path: Path,
    kind: InputKind,
    opened: Any,
    found: Choice,
    stages: Stages,
    memory_gb: float | None = None,
) -> Source:
    if found.how == WHOLE:
        return Source(_whole(path, kind, opened, stages, memory_gb=memory_gb))
    assert isinstance(opened, Export)  # read in parts: an nsys export, opened
    if found.how == BY_PROCESS:
        if found.windows:
            return _processes_in_windows(opened, found, stages)
        return _by_process(opened, found.processes, stages)
    with stages.stage("read", "finding where to cut the timeline"):
        plan = window_plan(opened, found.processes[0], found.windows)
    if plan.refused is not None:
        return Source(_whole(path, kind, opened, stages, plan.refused))
    check = WindowCheck(plan.ops, plan.autograd, plan.nodes)
    return Source(
        window_profiles(opened, plan, stages=stages, check=check),
        apart=True,
        merged=lambda parts: merged_profile(parts, META_KEY),
        check=check,
        fallback=lambda reason: Source(_whole(path, kind, opened, stages, reason)),
    )


def _by_process(
    opened: Export, processes: tuple[int, ...], stages: Stages, refused: str | None = None
) -> Source:
    """Each process read whole, one at a time; `refused`: why not in time windows."""
    profiles = process_profiles(opened, list(processes), stages=stages)
    return Source(profiles if refused is None else _noted(profiles, refused), apart=True)


def _processes_in_windows(opened: Export, found: Choice, stages: Stages) -> Source:
    """The processes one after the other, each in its windows of `found.each`, read one
    window at a time, or whole where it has none or cannot be cut exactly (saying
    why); every process read whole, one at a time, where the windows' rows are
    refused (saying why)."""
    each = found.each or (found.windows,) * len(found.processes)
    plans: list[Plan | None] = []
    with stages.stage("read", "finding where to cut the timeline"):
        for pid, count in zip(found.processes, each, strict=True):
            plans.append(window_plan(opened, pid, count) if count >= 2 else None)
    cut = [p if p is not None and p.refused is None else None for p in plans]
    uncut = [f"process {p.pid}: {p.refused}" for p in plans if p is not None and p.refused]
    refused = "; ".join(uncut) or None
    if not any(cut):
        return _by_process(opened, found.processes, stages, refused)
    checks = [None if p is None else WindowCheck(p.ops, p.autograd, p.nodes) for p in cut]
    parts = chain.from_iterable(
        [process_part(opened, pid)] if p is None else window_parts(opened, p, c, named=True)
        for pid, p, c in zip(found.processes, cut, checks, strict=True)
    )
    profiles = normalised_parts(parts, stages)
    processes = len(plans)
    return Source(
        profiles if refused is None else _noted(profiles, refused),
        apart=True,
        merged=lambda parts: merged_profile(parts, META_KEY, processes=processes),
        check=ProcessChecks(checks, [1 if p is None else len(p.windows) for p in cut]),
        fallback=lambda reason: _by_process(opened, found.processes, stages, reason),
    )


def _whole(
    path: Path,
    kind: InputKind,
    opened: Any,
    stages: Stages,
    refused: str | None = None,
    memory_gb: float | None = None,
) -> Iterator[NestedProfile]:
    """The profile of `path` (read only when the flow asks for it, within `memory_gb`);
    `refused`: why it was not read in time windows (its meta's `windows_refused`)."""
    profile = whole_profile(path, kind, opened, stages, memory_gb)
    yield profile if refused is None else _with_refusal(profile, refused)


def _noted(profiles: Iterator[NestedProfile], refused: str) -> Iterator[NestedProfile]:
    """`profiles`, the first saying why the input was not read in time windows (the
    merged meta keeps the first part's value)."""
    first = next(profiles, None)
    if first is not None:
        yield _with_refusal(first, refused)
    del first
    yield from profiles


def _with_refusal(profile: NestedProfile, refused: str) -> NestedProfile:
    """`profile`, its meta saying why it was not read in time windows (`windows_refused`)."""
    note = pl.DataFrame({"key": [REFUSED_KEY], "value": [refused]}, schema=profile.meta.schema)
    return replace(profile, meta=pl.concat([profile.meta, note]))


def forced_windows() -> int | None:
    """The number of windows NSYSMAP_WINDOWS forces, if any."""
    value = os.environ.get(WINDOWS_ENV, "").strip()
    return int(value) if value.isdigit() else None


def choice(path: Path, memory_gb: float | None = None) -> Choice:
    """How `choose` would read `path` within `memory_gb` (tests, the benchmark)."""
    kind = kind_of(path)
    opened = kind.open(path) if kind.open is not None else None
    return decide(_facts(kind, opened, memory_gb))
