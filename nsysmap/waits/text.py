"""The terminal summary's line on where the GPU waits (pure)."""

from __future__ import annotations

import polars as pl

from nsysmap.core.wait_schemas import LAUNCH_OVERHEAD_NS
from nsysmap.waits.gaps import windows_overlap
from nsysmap.waits.tables import long_gaps

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


def stream_work(ops: pl.LazyFrame) -> pl.DataFrame:
    """(device_id, stream_id, work_ns): each stream's time of operations other than
    communication (an operation without a category counts), what `busiest` ranks by."""
    comm = (pl.col("category").cast(pl.String) == "communication").fill_null(False)
    per = ops.group_by("device_id", "stream_id").agg(work_ns=pl.col("dur_ns").filter(~comm).sum())
    return per.collect()


def busiest(streams: pl.DataFrame, work: pl.DataFrame | None = None) -> pl.DataFrame:
    """Per device, the stream of `streams` (busiest first) with the most time of work other
    than communication (`work`: `stream_work`; ties, and devices of communication alone,
    as `streams` orders them): the stream the findings call its busiest
    (nsysmap.findings.inputs), not the collectives' own."""
    if work is not None and not work.is_empty() and not streams.is_empty():
        keys = ["device_id", "stream_id"]
        work = work.select(*keys, _work="work_ns").cast({k: streams[k].dtype for k in keys})
        marked = streams.join(work, on=keys, how="left", maintain_order="left")
        marked = marked.with_columns(pl.col("_work").fill_null(0))
        streams = marked.sort("_work", descending=True, maintain_order=True).drop("_work")
    return streams.unique("device_id", keep="first", maintain_order=True).sort("device_id")


def waits_line(
    stream_idle: pl.DataFrame, idle: pl.DataFrame | None = None, work: pl.DataFrame | None = None
) -> str:
    """One line: each device's busiest stream over the steps (the whole capture without
    steps; by its work other than communication, `busiest`), its busy share of the wall
    time and its idle time by kind, every kind with time: the shares add up to 100 %.
    Empty when there are no GPU operations.

    `idle` (the gaps): the launch-bound time in gaps longer than a launch is told
    apart, "launch-bound 90.7% (5,907.269 ms of it in gaps over 0.25 ms: host work)".
    `work`: each stream's time of work other than communication (`stream_work`)."""
    if stream_idle.is_empty():
        return ""
    stepped = stream_idle.filter(pl.col("step").is_not_null())
    rows = stepped if stepped.height else stream_idle
    long = _long_launches(idle, stepped=bool(stepped.height))
    where = "in steps" if stepped.height else "whole capture"
    kinds = [f"idle_{k}_ns" for k in (*SHOWN, *SHOWN_IF_ANY)]
    streams = rows.group_by("device_id", "stream_id").agg(
        pl.col("wall_ns", "busy_ns", *kinds).sum()
    )
    ordered = streams.sort(["busy_ns", "stream_id"], descending=[True, False])
    overlap = dict(windows_overlap(stepped).iter_rows()) if stepped.height else {}
    parts = []
    for r in busiest(ordered, work).iter_rows(named=True):
        wall = r["wall_ns"] or 1
        shown = {k: v for k, v in SHOWN_IF_ANY.items() if r[f"idle_{k}_ns"] >= SLIVER * wall}
        named = {**SHOWN, **shown}
        host = long.get((r["device_id"], r["stream_id"]), 0)
        kinds_text = ", ".join(
            f"{name} {100 * r[f'idle_{k}_ns'] / wall:.1f}%" + (_host(host) if k == "launch" else "")
            for k, name in named.items()
        )
        parts.append(
            f"device {r['device_id']} stream {r['stream_id']} busy"
            f" {100 * r['busy_ns'] / wall:.1f}% of {r['wall_ns'] / 1e6:,.3f} ms; idle: {kinds_text}"
            + overlap_clause(overlap.get(r["device_id"], 0), wall)
        )
    base = WALL[bool(stepped.height)]
    return f"Where the GPU waits ({where}, busiest stream; {base}): " + "; ".join(parts) + "."


# The steps' windows' overlap is said when it holds this share of their summed length.
OVERLAP_SAID = 0.01


def overlap_said(overlap_ns: int, wall_ns: int) -> bool:
    """Whether the steps' windows overlap by OVERLAP_SAID of their summed length or more
    (the terminal line and the report say so then)."""
    return wall_ns > 0 and overlap_ns >= OVERLAP_SAID * wall_ns


def overlap_clause(overlap_ns: int, wall_ns: int) -> str:
    """ "; the steps' windows overlap by 637.012 ms (...)": where steps run in a pipeline,
    their windows' summed length (what the shares are of) counts some time twice;
    empty unless `overlap_said`."""
    if not overlap_said(overlap_ns, wall_ns):
        return ""
    return (
        f"; the steps' windows overlap by {overlap_ns / 1e6:,.3f} ms (a step's work runs on"
        " after the next step's begins), counted in each"
    )


def _long_launches(idle: pl.DataFrame | None, *, stepped: bool) -> dict[tuple[int, int], int]:
    """(device, stream) -> its launch-bound time in gaps over LAUNCH_OVERHEAD_NS, over the
    steps (the whole capture without steps)."""
    if idle is None or idle.is_empty():
        return {}
    gaps = idle.filter(pl.col("step").is_not_null()) if stepped else idle
    rows = long_gaps(gaps, "launch", LAUNCH_OVERHEAD_NS).iter_rows()
    return {(device, stream): ns for device, stream, ns in rows}


def _host(long_ns: int) -> str:
    """ " (5,907.269 ms of it in gaps over 0.25 ms: host work)", or nothing."""
    if not long_ns:
        return ""
    return (
        f" ({long_ns / 1e6:,.3f} ms of it in gaps over {LAUNCH_OVERHEAD_NS / 1e6:g} ms: host work)"
    )
