"""Output folders compared table by table, whatever the ids (tests of nsysmap.sources.by_window).

A split read numbers operations and ranges part by part, so `op_id` and
`range_id` differ from a whole read's; everything else must not. Each
operation is named by what the export says of it (its kind, process,
correlation id, device, stream and start), each range id by the first
operation (in that order) inside it, and every table is then sorted on all
its columns.
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from nsysmap.read.nsys.nsys_sqlite import open_export
from nsysmap.sources.by_window import Plan, window_plan
from nsysmap.sources.choose import BY_WINDOW, choice

OP_KEY = ["kind", "pid", "correlation_id", "device_id", "stream_id", "start_ns"]
OP_IDS = ("op_id", "next_op_id")
RANGE_IDS = ("range_id", "other_thread_range_id")


def op_names(out_dir: Path) -> pl.DataFrame:
    """op_id -> `op` (its place among the operations sorted by OP_KEY)."""
    ops = pl.read_parquet(out_dir / "ops.parquet", columns=["op_id", *OP_KEY])
    return ops.sort(OP_KEY, nulls_last=True).select("op_id", op=pl.int_range(pl.len()))


def canonical(frame: pl.DataFrame, names: pl.DataFrame) -> pl.DataFrame:
    """`frame` with op ids as `op_names`, range ids as the first op inside, sorted."""
    for column in OP_IDS:
        if column in frame.columns:
            frame = frame.join(
                names.rename({"op_id": column, "op": f"{column}_op"}), on=column, how="left"
            ).drop(column)
    if "op_id_op" in frame.columns:
        frame = frame.sort("op_id_op")
        for column in RANGE_IDS:
            if column in frame.columns:
                first = pl.col("op_id_op").min().over(column)
                frame = frame.with_columns(
                    pl.when(pl.col(column).is_not_null()).then(first).alias(column)
                )
    keys = [c for c, t in frame.schema.items() if t.is_numeric() or t == pl.String]
    return frame.select(sorted(frame.columns)).sort(sorted(keys), nulls_last=True)


def differences(whole: Path, split: Path) -> list[str]:
    """The tables (and report_meta keys) where `split` differs from `whole`."""
    names = [op_names(d) for d in (whole, split)]
    found = sorted(p.name for p in whole.glob("*.parquet"))
    assert found == sorted(p.name for p in split.glob("*.parquet"))
    out = []
    for name in found:
        a, b = (
            canonical(pl.read_parquet(d / name), n)
            for d, n in zip((whole, split), names, strict=True)
        )
        if not a.equals(b):
            out.append(name)
    metas = [json.loads((d / "manifest.json").read_text())["report_meta"] for d in (whole, split)]
    told = {"windows_read_apart", "windows_refused", "processes_read_apart"}
    for key in sorted(set(metas[0]) | set(metas[1])):
        if key not in told and metas[0].get(key) != metas[1].get(key):
            out.append(f"report_meta.{key}")
    return out


def windows_read_apart(path: Path, memory_gb: float | None) -> Plan | None:
    """The windows `nsysmap.sources.choose` would read `path` in within `memory_gb`
    (NSYSMAP_WINDOWS too), or None where it reads it otherwise."""
    found = choice(path, memory_gb)
    if found.how != BY_WINDOW:
        return None
    return window_plan(open_export(path), found.processes[0], found.windows)
