"""A rowid range split into the parts read at once, each on its own connection.

The whole read (`nsysmap.read.nsys.nsys_sql`) and the planning's scans
(`nsysmap.read.nsys.window_scans`) split a table's rowids the same way; the
scans also begin each part at a multiple of a batch's rows.
"""

from __future__ import annotations

import itertools

# The lowest 64-bit integer: SQLite binds a rowid bound as one, so none may lie below it.
LOWEST_BOUND = -(1 << 63)


def split_rows(low: int, high: int, parts: int, align: int = 1) -> list[tuple[int, int] | None]:
    """(low, high] as at most `parts` rowid ranges (low, high], in rowid order, that hold
    every rowid of it once: the inner bounds split it evenly, each rounded down to a
    multiple of `align`; a bound that falls on another or outside (low, high) is left
    out, so no part is empty. One unbounded part ([None]) when `low` lies below
    LOWEST_BOUND (a table whose rowids reach the lowest integer): such a bound would
    not bind."""
    if low < LOWEST_BOUND:
        return [None]
    inner = {(low + (high - low) * i // parts) // align * align for i in range(1, parts)}
    bounds = [low, *sorted(b for b in inner if low < b < high), high]
    return list(itertools.pairwise(bounds))


def rowid_condition(low: int, high: int) -> tuple[str, tuple[int, ...]]:
    """`low < rowid <= high` as SQL (constants only) and its parameters; no lower
    bound where `low` lies below LOWEST_BOUND, since no rowid does and it would not
    bind (a window whose rows begin at the lowest rowid)."""
    if low < LOWEST_BOUND:
        return '"rowid" <= ?', (high,)
    return '"rowid" > ? AND "rowid" <= ?', (low, high)
