"""Each operation's launch call by (pid, correlation id) as an array lookup, not a hash join.

CUPTI numbers the calls of a process 1, 2, 3, ...: the (pid, correlation id)
pairs of a profile are a few dense runs of integers. A table with one slot
per process and id holds each call's row, and an operation finds its call by
reading one slot (`call_rows`): no key hashed, no join's matches put back in
order. Where the ids are sparse (a slot table much larger than the calls), a
process or an id is missing, or two calls share a pair, it gives None and the
caller joins instead (nsysmap.attribution.attribute), which keeps a row per match.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from nsysmap.core.scalars import opt_int

# Slots per call at most (ids beyond several per call: sparse, joined instead).
SLOTS_PER_CALL = 4
_MIN_SLOTS = 1 << 16  # a small table is always cheap


def call_rows(calls: pl.DataFrame, ops: pl.DataFrame) -> pl.Series | None:
    """Per row of `ops`, the row of `calls` with its (pid, correlation_id) (UInt32,
    null: none); None where a slot table does not apply (module docstring)."""
    if calls["pid"].null_count() or calls["correlation_id"].null_count():
        return None
    pids = calls["pid"].unique().sort()
    low, high = opt_int(calls["correlation_id"].min()), opt_int(calls["correlation_id"].max())
    if low is None or high is None or low < 0:
        return None
    width = high + 1
    if pids.len() * width > max(SLOTS_PER_CALL * calls.height, _MIN_SLOTS):
        return None
    slot_of_call = _slots(calls, pids, width).to_numpy()
    table = np.full(pids.len() * width, -1, dtype=np.int64)
    table[slot_of_call] = np.arange(calls.height)
    if np.count_nonzero(table >= 0) != calls.height:
        return None  # two calls share a pair: every match must be a row
    slot = _slots(ops, pids, width)
    found = table[slot.fill_null(0).to_numpy()]
    row = pl.Series(found, dtype=pl.Int64)
    hit = slot.is_not_null() & (row >= 0)
    return pl.select(pl.when(hit).then(row)).to_series().cast(pl.UInt32)


def _slots(frame: pl.DataFrame, pids: pl.Series, width: int) -> pl.Series:
    """Each row's slot: its process's index among `pids` times `width`, plus its id
    (null: no such process, no pid or id, or an id beyond the table)."""
    index = pids.search_sorted(frame["pid"].fill_null(0)).cast(pl.Int64)
    known = (
        frame["pid"].is_not_null()
        & (pids.gather(index.clip(0, max(pids.len() - 1, 0))) == frame["pid"]).fill_null(False)
        & frame["correlation_id"].is_between(0, width - 1).fill_null(False)
    )
    slot = index * width + frame["correlation_id"]
    return pl.select(pl.when(known).then(slot)).to_series()
