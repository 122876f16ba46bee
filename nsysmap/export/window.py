"""The default window of `nsysmap export`: what a large report's trace holds unless told.

Perfetto's UI loads a JSON trace into the browser's memory; at about 1 KB
per operation, a report of 10^6 operations gives a 1 GB file, about the size
at which it is reported to fail. So a report of more than OPERATION_LIMIT
operations is exported, unless `--all`, `--steps` or `--window` say
otherwise, over the time of its first DEFAULT_STEPS steady steps (steps with
no warm-up operation; every step when none is steady), fewer when those
steps hold more than OPERATION_LIMIT operations (never fewer than one). The
window keeps every operation that overlaps it, of any step or none. A report
without steps gets the time of its first OPERATION_LIMIT operations. The
trace says what it leaves out (nsysmap.export.perfetto).
"""

from __future__ import annotations

import polars as pl

from nsysmap.core.scalars import to_int
from nsysmap.export.perfetto import Selection

DEFAULT_STEPS = 3
OPERATION_LIMIT = 100_000


def default_selection(
    ops: pl.DataFrame,
    steps: int = DEFAULT_STEPS,
    limit: int | None = None,
    *,
    always: bool = False,
) -> Selection:
    """Every operation when there are at most `limit` (OPERATION_LIMIT when None) unless
    `always`, else the time of the first `steps` steady steps (see the module docstring)."""
    limit = OPERATION_LIMIT if limit is None else limit
    if ops.is_empty() or (ops.height <= limit and not always):
        return Selection()
    origin = to_int(ops["start_ns"].min())
    per_step = (
        ops.filter(pl.col("step").is_not_null())
        .group_by("step")
        .agg(
            start=pl.col("start_ns").min(),
            end=pl.col("end_ns").max(),
            n=pl.len(),
            warm=pl.col("warmup").fill_null(False).any(),
        )
        .sort("step")
    )
    if per_step.is_empty():
        starts = ops["start_ns"].sort()
        last = to_int(starts[limit]) if ops.height > limit else to_int(ops["end_ns"].max())
        window = (0.0, (last - origin) / 1e6)
        return Selection(window_ms=window, label=f"the first {min(limit, ops.height):,} operations")
    steady = per_step.filter(~pl.col("warm"))
    first = (steady if not steady.is_empty() else per_step).head(steps)
    kept = first.filter((pl.col("n").cum_sum() <= limit) | (pl.int_range(pl.len()) == 0))
    chosen = kept["step"].to_list()
    start, end = to_int(kept["start"].min()), to_int(kept["end"].max())
    window = ((start - origin) / 1e6, (end - origin) / 1e6)
    which = "steady " if not steady.is_empty() else ""
    label = (
        f"the time of the first {len(chosen)} {which}step{'s' if len(chosen) > 1 else ''}"
        f" of {per_step.height:,} ({', '.join(str(s) for s in chosen)}),"
        " {:.3f}-{:.3f} ms".format(*window)
    )
    return Selection(window_ms=window, label=label)
