"""The check every run makes before it writes: nothing lost, nothing counted twice.

Per device, the input profile's operations (rows and summed durations) must
equal the OPS rows and every summary table's `ops` and `time_ns` totals.
Sums are taken in 128 bits, so a total that wrapped around in 64 bits shows
as a mismatch. A failure is a TotalsMismatch (exit 11): one line, and no
output is written, never a wrong table.
"""

from __future__ import annotations

import polars as pl

from nsysmap.core.errors import TotalsMismatch
from nsysmap.summaries.summarise import SUMMARY_TABLES, Summaries

_WIDE = pl.Int128


def input_totals(profile_ops: pl.DataFrame) -> pl.DataFrame:
    """Per device, the input's operations and their summed durations (for
    `check_conservation`; those of parts of the input add up, `added_totals`)."""
    return _totals(profile_ops.select("device_id", "dur_ns"), rows=True)


def added_totals(parts: list[pl.DataFrame]) -> pl.DataFrame:
    """The `input_totals` of the union of disjoint parts of the input."""
    stacked = pl.concat(parts)
    summed = stacked.group_by("device_id").agg(pl.col("n", "time").sum())
    return summed.sort("device_id", nulls_last=True)


def check_conservation(
    expected: pl.DataFrame,
    summaries: Summaries,
    ops: pl.DataFrame | pl.LazyFrame,
    n_ops: int,
    source: str | None = None,
) -> None:
    """Raise TotalsMismatch unless every table adds up to the input, per device.

    `expected`: the input's `input_totals`; `ops`: the OPS rows (a lazy
    scan of ops.parquet when they were streamed), `n_ops` their row count.
    """
    where = f"{source}: " if source else ""
    n_input = int(expected["n"].sum())
    if n_ops != n_input:
        raise _mismatch(where, f"{n_ops:,} operation rows for {n_input:,} input rows")
    tables = {"ops": _totals(ops.lazy().select("device_id", "dur_ns"), rows=True)}
    frames = summaries.tables()
    for declared in SUMMARY_TABLES:
        if declared.partition:
            frame = frames[declared.name].select("device_id", "ops", dur_ns="time_ns")
            tables[declared.name] = _totals(frame, rows=False)
    for name, got in tables.items():
        diff = _first_difference(expected, got)
        if diff is not None:
            raise _mismatch(where, f"{name}: {diff}")


def _totals(frame: pl.DataFrame | pl.LazyFrame, *, rows: bool) -> pl.DataFrame:
    """device_id, n (operations), time (summed ns, 128 bits), sorted by device.

    Added up by Polars' streaming engine: a scan of ops.parquet is read a morsel
    at a time, never whole.
    """
    count = pl.len().cast(_WIDE) if rows else pl.col("ops").cast(_WIDE).sum()
    return (
        frame.lazy()
        .group_by("device_id")
        .agg(n=count, time=pl.col("dur_ns").cast(_WIDE).sum())
        .sort("device_id", nulls_last=True)
        .collect(engine="streaming")
    )


def _first_difference(expected: pl.DataFrame, got: pl.DataFrame) -> str | None:
    both = expected.join(got, on="device_id", how="full", nulls_equal=True, coalesce=True)
    both = both.with_columns(pl.col("n", "n_right", "time", "time_right").fill_null(0))
    bad = both.filter((pl.col("n") != pl.col("n_right")) | (pl.col("time") != pl.col("time_right")))
    if bad.is_empty():
        return None
    row = bad.row(0, named=True)
    return (
        f"device {row['device_id']}: {row['n_right']:,} ops and {row['time_right']:,} ns "
        f"where the input has {row['n']:,} ops and {row['time']:,} ns"
    )


def _mismatch(where: str, what: str) -> TotalsMismatch:
    return TotalsMismatch(
        f"{where}totals do not add up ({what}); nothing was written. This is a bug in "
        "nsysmap or an input it misread: please report it with NSYSMAP_DEBUG=1 output"
    )
