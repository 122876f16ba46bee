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
    """One span per run of consecutive operations in a module (see the module docstring).

    One pass over the operations in start order per module depth, on integer
    codes of the few distinct modules and phases: no sort and no string per
    operation.
    """
    rows = ops.filter(pl.col("module").is_not_null()).sort("device_id", "start_ns", "op_id")
    if rows.is_empty():
        return pl.DataFrame(schema=SPAN)
    rows = rows.with_columns(module_code=_code("module"), phase_code=_code("phase"))
    lineage = _lineage(rows.select("module", "module_code").unique())
    keys = ["device_id", "step", "phase_code", "ancestor_code"]
    ordered = rows.select("device_id", "step", "phase_code", "module_code", "start_ns", "end_ns")
    spans = pl.concat(
        _runs(ordered, level.drop("depth"), keys).with_columns(depth=pl.lit(depth, pl.Int64))
        for (depth,), level in lineage.group_by("depth")
    )
    names = lineage.select("ancestor_code", module="ancestor").unique("ancestor_code")
    phases = rows.select("phase_code", "phase").unique("phase_code")
    classes = rows.group_by("module").agg(pl.col("module_class").drop_nulls().first())
    spans = (
        spans.join(names, on="ancestor_code")
        .join(phases, on="phase_code", how="left", nulls_equal=True)
        .join(classes, on="module", how="left")
    )
    return _spans(
        spans.drop("ancestor_code", "phase_code"), "modules", pl.col("module"), depth=None
    )


def _runs(rows: pl.DataFrame, level: pl.DataFrame, keys: list[str]) -> pl.DataFrame:
    """The runs of the modules of one depth: in start order, a run goes on while the
    device, step, phase and module of that depth stay the same (rows outside it end it)."""
    tagged = rows.join(level, on="module_code", how="left", maintain_order="left")
    changed = pl.any_horizontal(pl.col(k).ne_missing(pl.col(k).shift()) for k in keys)
    runs = tagged.with_columns(run=changed.cum_sum()).filter(pl.col("ancestor_code").is_not_null())
    return runs.group_by("run").agg(*(pl.col(k).first() for k in keys), *_extent()).drop("run")


def _code(column: str) -> pl.Expr:
    """An integer code per distinct value of a string column (null stays null)."""
    return pl.col(column).cast(pl.Categorical).to_physical()


def _lineage(modules: pl.DataFrame) -> pl.DataFrame:
    """Each distinct module (`module_code`) with each module it lies in: `ancestor`, its
    `depth` (1 for a top-level module; the root module "", when there is one, is 0 and holds
    every module) and an integer `ancestor_code`."""
    parts = pl.col("module").str.split(".")
    depths = pl.when(pl.col("module") == "").then(pl.lit([], pl.List(pl.Int64)))
    named = modules.with_columns(
        depth=depths.otherwise(pl.int_ranges(1, parts.list.len() + 1, dtype=pl.Int64))
    ).explode("depth")
    named = named.filter(pl.col("depth").is_not_null()).with_columns(
        ancestor=parts.list.head(pl.col("depth")).list.join(".")
    )
    if (modules["module"] == "").any():
        roots = modules.with_columns(ancestor=pl.lit(""), depth=pl.lit(0, pl.Int64))
        named = pl.concat([roots, named.select(roots.columns)])
    codes = named.select("ancestor").unique().with_row_index("ancestor_code")
    return named.join(codes, on="ancestor").select(
        "module_code", "ancestor", "ancestor_code", "depth"
    )


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
    for _, group in spans.group_by("device_id", "track", maintain_order=True):
        rows = group.sort("start_ns", "depth", pl.col("end_ns"), descending=[False, False, True])
        starts, depths = rows["start_ns"].to_list(), rows["depth"].to_list()
        ends = rows["end_ns"].to_list()
        stack: list[int] = []  # indices of the open spans
        for i, (start, depth) in enumerate(zip(starts, depths, strict=True)):
            while stack and ends[stack[-1]] <= start:
                stack.pop()
            while stack and depths[stack[-1]] >= depth:
                ends[stack.pop()] = start  # a crossing sibling: cut the earlier
            if stack:
                ends[i] = min(ends[i], ends[stack[-1]])
            stack.append(i)
        out.append(rows.with_columns(end_ns=pl.Series(ends, dtype=pl.Int64)))
    if not out:
        return pl.DataFrame(schema=SPAN)
    return pl.concat(out).sort("device_id", "track", "start_ns", "depth")
