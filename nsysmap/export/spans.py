"""Steps, phases and modules projected onto the GPU: spans from first to last operation (pure).

A step's span on a device runs from the start of its first operation to the
end of its last; so does a phase's within a step. A module's spans are its
*runs*: maximal sequences of consecutive operations on the device (in start
order, among operations with a module) that lie in the module or below it,
in one step and phase. So a module called twice gets two spans, and a child's
span lies inside its parent's:

    ops (start order)   c_fc c_fc act c_proj | attn ...
    mlp                 [---------------------]
    mlp.c_fc            [--------]
    mlp.act                       [--]

With several streams an operation may end after the next one starts, so
spans of one track can cross; `nest` clips them (the later sibling starts
where the earlier is cut, a child ends at its parent's end), which is what a
trace viewer needs. Spans are few (modules × calls), so `nest` walks them in
Python; everything per operation is vectorised.
"""

from __future__ import annotations

import polars as pl

SPAN = pl.Schema(
    {
        "device_id": pl.Int64,
        "track": pl.String,  # "steps", "phases" or "modules"
        "name": pl.String,
        "depth": pl.Int64,  # nesting level within the track
        "start_ns": pl.Int64,
        "end_ns": pl.Int64,
        "step": pl.Int64,
        "phase": pl.String,
        "module": pl.String,
        "module_class": pl.String,
        "ops": pl.Int64,
    }
)


def step_spans(ops: pl.DataFrame) -> pl.DataFrame:
    """One span per (device, step) with operations."""
    rows = ops.filter(pl.col("step").is_not_null())
    spans = rows.group_by("device_id", "step").agg(_extent())
    return _spans(spans, "steps", pl.format("step {}", "step"), depth=0)


def phase_spans(ops: pl.DataFrame) -> pl.DataFrame:
    """One span per (device, step, phase) with operations (the step may be unknown)."""
    rows = ops.filter(pl.col("phase").is_not_null())
    spans = rows.group_by("device_id", "step", "phase").agg(_extent())
    return _spans(spans, "phases", pl.col("phase"), depth=0)


def module_spans(ops: pl.DataFrame) -> pl.DataFrame:
    """One span per run of consecutive operations in a module (see the module docstring)."""
    rows = ops.filter(pl.col("module").is_not_null()).sort("device_id", "start_ns", "op_id")
    if rows.is_empty():
        return pl.DataFrame(schema=SPAN)
    has_root = (rows["module"] == "").any()
    parts = pl.col("module").str.split(".")
    prefixes = pl.int_ranges(1, parts.list.len() + 1)
    rows = rows.with_columns(
        position=pl.int_range(pl.len()).over("device_id"),
        depth=pl.when(pl.col("module") == "")
        .then(pl.lit(None, pl.List(pl.Int64)))
        .otherwise(prefixes),
    )
    exploded = (
        rows.explode("depth")
        .filter(pl.col("depth").is_not_null())
        .with_columns(ancestor=parts.list.head(pl.col("depth")).list.join("."))
    )
    if has_root:  # the root module "" holds every module
        roots = rows.with_columns(ancestor=pl.lit(""), depth=pl.lit(0, pl.Int64))
        exploded = pl.concat([roots, exploded], how="diagonal_relaxed")
    keys = ["device_id", "step", "phase", "ancestor"]
    runs = exploded.sort([*keys, "position"], nulls_last=True).with_columns(
        run=(pl.col("position").diff().fill_null(1) != 1).cum_sum().over(keys)
    )
    spans = runs.group_by([*keys, "run"]).agg(*_extent(), pl.col("depth").first())
    classes = (
        ops.filter(pl.col("module").is_not_null())
        .group_by("module")
        .agg(pl.col("module_class").drop_nulls().first())
    )
    spans = spans.rename({"ancestor": "module"}).join(classes, on="module", how="left")
    return _spans(spans, "modules", pl.col("module"), depth=None)


def _extent() -> list[pl.Expr]:
    return [
        pl.col("start_ns").min(),
        pl.col("end_ns").max(),
        pl.len().alias("ops"),
    ]


def _spans(frame: pl.DataFrame, track: str, name: pl.Expr, depth: int | None) -> pl.DataFrame:
    out = frame.with_columns(
        track=pl.lit(track),
        name=name,
        **({"depth": pl.lit(depth, pl.Int64)} if depth is not None else {}),
    )
    for column in ("step", "phase", "module", "module_class"):
        if column not in out.columns:
            out = out.with_columns(pl.lit(None).alias(column))
    ordered = out.sort("device_id", "start_ns", "depth", "name", nulls_last=True)
    return ordered.select(SPAN.names()).cast(SPAN)


def nest(spans: pl.DataFrame) -> pl.DataFrame:
    """Clip spans so that on each (device, track) they nest; see the module docstring."""
    out = []
    for (_, _), group in spans.group_by("device_id", "track", maintain_order=True):
        rows = group.sort("start_ns", "depth", pl.col("end_ns"), descending=[False, False, True])
        stack: list[dict] = []
        for row in rows.iter_rows(named=True):
            while stack and stack[-1]["end_ns"] <= row["start_ns"]:
                stack.pop()
            while stack and stack[-1]["depth"] >= row["depth"]:
                stack.pop()["end_ns"] = row["start_ns"]  # a crossing sibling: cut the earlier
            if stack:
                row["end_ns"] = min(row["end_ns"], stack[-1]["end_ns"])
            stack.append(row)
            out.append(row)
    if not out:
        return pl.DataFrame(schema=SPAN)
    return pl.DataFrame(out, schema=SPAN).sort("device_id", "track", "start_ns", "depth")
