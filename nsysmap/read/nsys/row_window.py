"""`RowWindow`: the rows of one time window of a process, as the reader selects them.

nsysmap.read.nsys.window_cuts plans the windows; nsysmap.read.nsys.nsys_sql reads
each table of a window with the condition its `RowWindow` gives (constants
only; values are parameters).
"""

from __future__ import annotations

from dataclasses import dataclass

from nsysmap.read.nsys.nsys_specs import (
    GRAPH_TRACE,
    KERNEL,
    MEMCPY,
    MEMSET,
    NVTX,
    RUNTIME,
    TableSpec,
)
from nsysmap.read.nsys.rowid_parts import rowid_condition

# Tables of GPU work, read in a time window by their correlation ids (`RowWindow`).
_CORRELATED = frozenset(s.table for s in (KERNEL, MEMCPY, MEMSET, GRAPH_TRACE))
DOMAIN_CREATE = 75  # the NVTX event type of a domain creation (read in every window)


@dataclass(frozen=True)
class RowWindow:
    """The rows of one time window of a process (nsysmap.sources.by_window).

    Runtime calls starting in [start_lo, start_hi) (None: unbounded), NVTX
    ranges starting there and every domain creation, and the GPU work whose
    correlation id is in [corr_lo, corr_hi] (the reader keeps the work of the
    window's own calls). Other tables are read whole.
    """

    start_lo: int | None
    start_hi: int | None
    corr_lo: int
    corr_hi: int
    # (table, low, high): that table's rows of the window have low < rowid <= high
    # (nsysmap.read.nsys.window_cuts found them), so a read scans that stretch alone.
    rows: tuple[tuple[str, int, int], ...] = ()
    # NVTX: the rows of its ranges in (low, high], and the rowids of its domain creations.
    nvtx_rows: tuple[int, int] | None = None
    domains: tuple[int, ...] = ()

    def rows_of(self, table: str) -> tuple[int, int] | None:
        """The rowid bounds (low, high] of `table`'s rows in the window, when known."""
        return next(((lo, hi) for name, lo, hi in self.rows if name == table), None)

    def condition(self, spec: TableSpec) -> tuple[str | None, tuple[int, ...]]:
        """The WHERE condition (constants only) and its parameters for `spec`'s table."""
        if spec.table in _CORRELATED:
            return '"correlationId" BETWEEN ? AND ?', (self.corr_lo, self.corr_hi)
        if spec.table not in (RUNTIME.table, NVTX.table):
            return None, ()
        parts, values = [], []
        for bound, op in ((self.start_lo, ">="), (self.start_hi, "<")):
            if bound is not None:
                parts.append(f'"start" {op} ?')
                values.append(bound)
        timed = " AND ".join(parts) or "1"
        if spec.table == RUNTIME.table:
            return timed, tuple(values)
        if self.nvtx_rows is None:
            return f'("eventType" = {DOMAIN_CREATE} OR ({timed}))', tuple(values)
        marks = ", ".join("?" * len(self.domains))
        rows, bounds = rowid_condition(*self.nvtx_rows)  # the window's stretch of ranges
        inside = f"({rows} AND {timed})"
        return f'("rowid" IN ({marks}) OR {inside})', (*self.domains, *bounds, *values)
