"""The terminal summary's line on where the GPU waits (pure)."""

from __future__ import annotations

import polars as pl

# How the line names the kinds of wait it lists, always (the four causes).
SHOWN = {
    "launch": "launch-bound",
    "sync": "synchronisations",
    "other_stream": "other streams",
    "latency": "GPU latency",
}
# ... and the rest of the idle time, listed when there is any to speak of: with them,
# busy and idle add up to the stream's wall time (docs/waits.md).
SHOWN_IF_ANY = {
    "unknown": "unknown",
    "before_first": "before its first operation",
    "after_last": "after its last",
}
SLIVER = 0.0005  # ... when it holds this share of the wall time (0.1 % once rounded)
# What the shares are of, with steps and without.
WALL = {
    True: "shares of the steps' windows, each from the device's first operation to its last",
    False: "shares of the window from the device's first operation to its last",
}


def waits_line(stream_idle: pl.DataFrame) -> str:
    """One line: each device's busiest stream over the steps (the whole capture without
    steps), its busy share of the wall time and its idle time by kind, every kind with
    time: the shares add up to 100 %. Empty when there are no GPU operations."""
    if stream_idle.is_empty():
        return ""
    stepped = stream_idle.filter(pl.col("step").is_not_null())
    rows = stepped if stepped.height else stream_idle
    where = "in steps" if stepped.height else "whole capture"
    kinds = [f"idle_{k}_ns" for k in (*SHOWN, *SHOWN_IF_ANY)]
    streams = rows.group_by("device_id", "stream_id").agg(
        pl.col("wall_ns", "busy_ns", *kinds).sum()
    )
    busiest = streams.sort(["busy_ns", "stream_id"], descending=[True, False]).unique(
        "device_id", keep="first", maintain_order=True
    )
    parts = []
    for r in busiest.sort("device_id").iter_rows(named=True):
        wall = r["wall_ns"] or 1
        shown = {k: v for k, v in SHOWN_IF_ANY.items() if r[f"idle_{k}_ns"] >= SLIVER * wall}
        named = {**SHOWN, **shown}
        idle = ", ".join(
            f"{name} {100 * r[f'idle_{k}_ns'] / wall:.1f}%" for k, name in named.items()
        )
        parts.append(
            f"device {r['device_id']} stream {r['stream_id']} busy"
            f" {100 * r['busy_ns'] / wall:.1f}% of {r['wall_ns'] / 1e6:,.3f} ms; idle: {idle}"
        )
    base = WALL[bool(stepped.height)]
    return f"Where the GPU waits ({where}, busiest stream; {base}): " + "; ".join(parts) + "."
