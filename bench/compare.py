"""Do two engines attribute the same GPU time to the same ranges?

nsysmap numbers ranges by `range_id` (position among the push/pop and
start/end rows of NVTX_EVENTS, in rowid order); the SQL engine reports NVTX
rowids. Both are turned into totals per range_id: operations and summed
duration, with a null range for operations no range covers.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import polars as pl


def nsysmap_totals(ops_parquet: Path) -> pl.DataFrame:
    """range_id, ops, time_ns from nsysmap's ops.parquet."""
    ops = pl.scan_parquet(ops_parquet)
    totals = ops.group_by("range_id").agg(
        pl.len().cast(pl.Int64).alias("ops"), pl.col("dur_ns").sum()
    )
    return totals.rename({"dur_ns": "time_ns"}).collect().sort("range_id", nulls_last=True)


def sql_totals(sql_parquet: Path, export: Path) -> pl.DataFrame:
    """range_id, ops, time_ns from the SQL engine's totals per NVTX rowid."""
    with sqlite3.connect(f"file:{export}?mode=ro&immutable=1", uri=True) as conn:
        rowids = [
            r[0]
            for r in conn.execute(
                "SELECT rowid FROM NVTX_EVENTS WHERE eventType IN (59, 60) ORDER BY rowid"
            )
        ]
    ranges = pl.Series("rowid", rowids, dtype=pl.Int64)
    totals = pl.read_parquet(sql_parquet)
    index = ranges.search_sorted(totals["range_rowid"].fill_null(0))
    range_id = pl.select(pl.when(totals["range_rowid"].is_not_null()).then(index)).to_series()
    out = totals.select(range_id=range_id.cast(pl.Int64), ops="ops", time_ns="time_ns")
    return out.sort("range_id", nulls_last=True)


def same_totals(a: pl.DataFrame, b: pl.DataFrame) -> bool:
    """Identical totals for every range (and for the time outside any range)."""
    return a.equals(b)
