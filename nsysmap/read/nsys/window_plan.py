"""The time windows to read one process of an export in: the reader's side of
nsysmap.sources.by_window.

`plan_windows` finds where the process's timeline can be cut
(nsysmap.read.nsys.window_cuts), picks `count` - 1 cuts near equal numbers
of runtime calls, each the one with the fewest ranges open across it, and
gives each window's rows (`RowWindow`: its calls, the GPU work they
launched, its NVTX stretches) with the ranges open across its start, read
by rowid (nsysmap.read.nsys.window_scans.carried_rows). Or, in one line,
why the process cannot be cut exactly.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace

import polars as pl

from nsysmap.read.nsys.nsys_probe import Export
from nsysmap.read.nsys.row_window import RowWindow
from nsysmap.read.nsys.window_cuts import Segments, segments
from nsysmap.read.nsys.window_scans import CutRules, carried_rows

# What the sources of the flow use (nsysmap.sources.by_window).
__all__ = ["CutRules", "RowWindow", "Windows", "plan_windows"]

# A cut with more ranges open across it than this is not used (each is read by rowid).
MAX_CARRIED = 4096


@dataclass(frozen=True)
class Windows:
    """The windows to read a process in, and what their rows must add up to."""

    windows: list[RowWindow]
    ops: int  # the process's rows of GPU work: what the windows add up to
    autograd: tuple[int, ...]  # the process's autograd threads
    nodes: bool  # some range of the process names an autograd node
    carried: tuple[int, ...]  # per window, how many ranges are open across its start


def plan_windows(export: Export, pid: int, count: int, rules: CutRules) -> Windows | str:
    """At most `count` windows of process `pid`, each with calls; or why it cannot be
    cut exactly."""
    found = segments(export, pid, rules)
    if isinstance(found, str):
        return found
    windows, carried = _windows(found, count, export, pid)
    if len(windows) < 2:
        return "no cut outside every autograd link and range left open has calls on both sides"
    return Windows(windows, found.ops, found.autograd, found.nodes, carried)


def _windows(
    found: Segments, count: int, export: Export, pid: int
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
    cuts = [found.cuts[s] for s in ends]
    rows = [[] for _ in ends] if quiet else carried_rows(export, pid, cuts)
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
