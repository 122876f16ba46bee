"""The terminal summary's line on where the GPU waits (pure)."""

from __future__ import annotations

import polars as pl

# How the line names the kinds of wait it lists (the edges are left to the tables).
SHOWN = {
    "launch": "launch-bound",
    "sync": "synchronisations",
    "other_stream": "other streams",
    "latency": "GPU latency",
}


def waits_line(stream_idle: pl.DataFrame) -> str:
    """One line: each device's busiest stream over the steps (the whole capture without
    steps), its busy share of the wall time and its idle time by kind. Empty when
    there are no GPU operations."""
    if stream_idle.is_empty():
        return ""
    stepped = stream_idle.filter(pl.col("step").is_not_null())
    rows = stepped if stepped.height else stream_idle
    where = "in steps" if stepped.height else "whole capture"
    kinds = [f"idle_{k}_ns" for k in SHOWN]
    streams = rows.group_by("device_id", "stream_id").agg(
        pl.col("wall_ns", "busy_ns", *kinds).sum()
    )
    busiest = streams.sort(["busy_ns", "stream_id"], descending=[True, False]).unique(
        "device_id", keep="first", maintain_order=True
    )
    parts = []
    for r in busiest.sort("device_id").iter_rows(named=True):
        wall = r["wall_ns"] or 1
        idle = ", ".join(
            f"{name} {100 * r[f'idle_{k}_ns'] / wall:.1f}%" for k, name in SHOWN.items()
        )
        parts.append(
            f"device {r['device_id']} stream {r['stream_id']} busy"
            f" {100 * r['busy_ns'] / wall:.1f}% of {r['wall_ns'] / 1e6:,.3f} ms; idle: {idle}"
        )
    return f"Where the GPU waits ({where}, busiest stream): " + "; ".join(parts) + "."
